//! Compiles `proto/deviceplugin/v1beta1/api.proto` with protox (no protoc needed) and
//! tonic-prost-build: the messages, and both services' clients and servers (the agent
//! serves Registration and calls DevicePlugin; a plugin, the tests' included, the other
//! way round).

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../proto");
    let file = root.join("deviceplugin/v1beta1/api.proto");
    println!("cargo:rerun-if-changed={}", file.display());
    let fds = protox::compile([&file], [&root])?;
    tonic_prost_build::configure()
        .btree_map(".")
        .build_client(true)
        .build_server(true)
        .compile_fds(fds)?;
    Ok(())
}
