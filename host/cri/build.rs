//! Compiles `proto/runtime/v1/api.proto` into Rust with protox (no protoc needed)
//! and tonic-prost-build (client and server stubs).

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../proto");
    let file = root.join("runtime/v1/api.proto");
    println!("cargo:rerun-if-changed={}", file.display());
    let fds = protox::compile([&file], [&root])?;
    tonic_prost_build::configure()
        // Label and annotation maps are small: BTreeMap decodes and clones faster than
        // HashMap (no hashing) and keeps them ordered in logs and output.
        .btree_map(".")
        .build_client(true)
        .build_server(true)
        .compile_fds(fds)?;
    Ok(())
}
