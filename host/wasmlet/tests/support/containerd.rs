//! The real containerd the end-to-end tests run against.

/// containerd's CRI endpoint from `WASMLET_CRI_ENDPOINT` (`cargo xtask test` starts it);
/// `None` skips the test, unless `WASMLET_REQUIRE_CONTAINERD=1`.
pub fn endpoint() -> Option<String> {
    match std::env::var("WASMLET_CRI_ENDPOINT") {
        Ok(e) => Some(e),
        Err(_) if std::env::var("WASMLET_REQUIRE_CONTAINERD").as_deref() == Ok("1") => {
            panic!("WASMLET_REQUIRE_CONTAINERD=1 but WASMLET_CRI_ENDPOINT is not set")
        }
        Err(_) => {
            eprintln!("skipped: WASMLET_CRI_ENDPOINT is not set (scripts/containerd.sh up)");
            None
        }
    }
}
