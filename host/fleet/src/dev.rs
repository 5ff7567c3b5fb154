//! For tests: the registry the cluster-plugin tests push to.

/// The test registry as (address, user, password): `WASMLET_TEST_REGISTRY`
/// (`ADDR USER PASSWORD`, as `cargo xtask test` sets it), else the one
/// `scripts/registry.sh up` starts (as root, installing Debian's `docker-registry`). `None`
/// when there is none — a panic instead when `WASMLET_REQUIRE_REGISTRY=1` (CI).
pub fn registry() -> Option<(String, String, String)> {
    let parse = |text: &str| {
        let mut words = text.split_whitespace().map(str::to_owned);
        Some((words.next()?, words.next()?, words.next()?))
    };
    if let Ok(text) = std::env::var("WASMLET_TEST_REGISTRY") {
        return parse(&text);
    }
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/registry.sh");
    let found = std::process::Command::new(&script)
        .arg("up")
        .output()
        .ok()
        .filter(|o| o.status.success())
        .and_then(|o| parse(&String::from_utf8_lossy(&o.stdout)));
    if found.is_none() {
        assert!(
            std::env::var("WASMLET_REQUIRE_REGISTRY").as_deref() != Ok("1"),
            "WASMLET_REQUIRE_REGISTRY=1 but no registry: set WASMLET_TEST_REGISTRY or let {} up start one (as root)",
            script.display()
        );
        eprintln!(
            "no test registry (scripts/registry.sh up needs root and docker-registry): skipped"
        );
    }
    found
}
