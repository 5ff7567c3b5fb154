//! Compiles `proto/runtime/v1/api.proto` into Rust with protox (no protoc needed)
//! and tonic-prost-build: the client and server stubs (the messages are wasmlet-cri-api's).

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../proto");
    let file = root.join("runtime/v1/api.proto");
    println!("cargo:rerun-if-changed={}", file.display());
    let fds = protox::compile([&file], [&root])?;
    tonic_prost_build::configure()
        // The messages are wasmlet-cri-api's (no transport there): only the services'
        // stubs are generated here, naming them.
        .extern_path(".runtime.v1", "::wasmlet_cri_api::proto")
        .build_client(true)
        .build_server(true)
        .compile_fds(fds)?;
    Ok(())
}
