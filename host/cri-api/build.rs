//! Compiles `proto/runtime/v1/api.proto`'s messages into Rust with protox (no protoc
//! needed) and prost-build; the services' stubs are `wasmlet-cri`'s.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../proto");
    let file = root.join("runtime/v1/api.proto");
    println!("cargo:rerun-if-changed={}", file.display());
    let fds = protox::compile([&file], [&root])?;
    prost_build::Config::new()
        // Label and annotation maps are small: BTreeMap decodes and clones faster than
        // HashMap (no hashing) and keeps them ordered in logs and output.
        .btree_map(["."])
        .compile_fds(fds)?;
    Ok(())
}
