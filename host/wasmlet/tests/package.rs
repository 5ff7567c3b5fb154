//! The Debian package (`cargo deb -p wasmlet`), installed into a temporary root with
//! `dpkg -x`: the binary and its `kubelet` link, the kubelet unit and kubeadm's drop-in,
//! the shipped plugins where the binary finds them, and control fields that let it
//! stand in for the kubelet package. `cargo xtask test` builds the package and sets
//! `WASMLET_DEB`; without it (and without `WASMLET_REQUIRE_PACKAGE=1`) this is skipped.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The plugins the agent loads by default, and the HTTP pod source.
const SHIPPED: &[&str] = &[
    "resource_fit",
    "node_affinity",
    "node_ports",
    "taint_toleration",
    "sysctls",
    "probe_exec",
    "probe_grpc",
    "probe_http_get",
    "probe_tcp_socket",
    "source_file",
    "source_http",
];

fn package() -> Option<PathBuf> {
    match std::env::var_os("WASMLET_DEB") {
        Some(p) => Some(PathBuf::from(p)),
        None => {
            assert!(
                std::env::var_os("WASMLET_REQUIRE_PACKAGE").is_none(),
                "WASMLET_REQUIRE_PACKAGE is set but WASMLET_DEB is not"
            );
            eprintln!("skipped: no WASMLET_DEB (cargo xtask test builds the package)");
            None
        }
    }
}

fn output(cmd: &mut Command) -> String {
    let out = cmd.output().expect("run");
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn read(root: &Path, path: &str) -> String {
    std::fs::read_to_string(root.join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

#[test]
fn the_package_installs_wasmlet_in_the_kubelets_place() {
    let Some(deb) = package() else { return };
    let root = std::env::temp_dir().join(format!("wasmlet-deb-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(&root).expect("root");
    output(Command::new("dpkg").arg("-x").arg(&deb).arg(&root));
    // The control fields: it is the kubelet, as far as kubeadm's package is concerned.
    let field = |f: &str| output(Command::new("dpkg-deb").args(["-f"]).arg(&deb).arg(f));
    assert_eq!(field("Package").trim(), "wasmlet");
    assert_eq!(field("Provides").trim(), "kubelet (= 1.33.3)");
    assert_eq!(field("Conflicts").trim(), "kubelet");
    assert_eq!(field("Replaces").trim(), "kubelet");
    // The binary, and `kubelet` pointing at it: kubeadm's preflight reads its version.
    let link = std::fs::read_link(root.join("usr/bin/kubelet")).expect("kubelet link");
    assert_eq!(link, Path::new("wasmlet"));
    let version = output(Command::new(root.join("usr/bin/kubelet")).arg("--version"));
    assert!(
        version.starts_with("Kubernetes v1.33.3+wasmlet."),
        "{version}"
    );
    // The unit kubeadm restarts, and kubeadm's drop-in as wasmlet takes it.
    let unit = read(&root, "usr/lib/systemd/system/kubelet.service");
    assert!(unit.contains("ExecStart=/usr/bin/kubelet\n"), "{unit}");
    let dropin = read(&root, "usr/share/wasmlet/kubeadm/10-kubeadm.conf");
    assert!(
        dropin.contains(
            "ExecStart=/usr/bin/kubelet $KUBELET_KUBECONFIG_ARGS $KUBELET_CONFIG_ARGS $KUBELET_KUBEADM_ARGS $KUBELET_EXTRA_ARGS"
        ),
        "{dropin}"
    );
    // The shipped plugins, each a component the binary loads.
    for name in SHIPPED {
        let file = root.join(format!("usr/lib/wasmlet/plugins/{name}.wasm"));
        assert!(file.is_file(), "{}", file.display());
    }
    let describe = output(
        Command::new(root.join("usr/bin/wasmlet"))
            .args(["plugin", "inspect"])
            .arg(root.join("usr/lib/wasmlet/plugins/resource_fit.wasm")),
    );
    assert!(describe.contains("admission"), "{describe}");
    the_plugins_come_precompiled_for_the_packaged_binary(&root);
    the_sdk_packages_come_for_plugin_new(&root);
    let _ = std::fs::remove_dir_all(&root);
}

/// `/usr/share/wasmlet/sdk`: the wheel, the npm package and the Rust crate (its WIT
/// inside), which `wasmlet plugin new` names by default.
fn the_sdk_packages_come_for_plugin_new(root: &Path) {
    let version = env!("CARGO_PKG_VERSION");
    let sdk = root.join("usr/share/wasmlet/sdk");
    for file in [
        format!("python/wasmlet_plugin-{version}-py3-none-any.whl"),
        format!("js/wasmlet-plugin-{version}.tgz"),
        format!("rust/wasmlet-plugin-sdk-{version}/Cargo.toml"),
        format!("rust/wasmlet-plugin-sdk-{version}/wit/plugin.wit"),
    ] {
        assert!(sdk.join(&file).is_file(), "the package has no sdk/{file}");
    }
    let project = root.join("team-policy");
    output(
        Command::new(root.join("usr/bin/wasmlet"))
            .args(["plugin", "new", "--lang", "rust", "--sdk"])
            .arg(&sdk)
            .arg(&project),
    );
    let manifest = read(&project, "Cargo.toml");
    assert!(
        manifest.contains(&format!(
            "usr/share/wasmlet/sdk/rust/wasmlet-plugin-sdk-{version}\""
        )),
        "{manifest}"
    );
}

/// The names of the compiled-component entries in `dir`.
fn entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".cwasm"))
        .collect();
    names.sort();
    names
}

/// Each shipped plugin has an entry under `plugins/compiled/` named as the packaged
/// binary's own engine names it (component, engine settings, artifact), and an agent
/// started from the package loads every plugin from there: its own cache stays empty.
fn the_plugins_come_precompiled_for_the_packaged_binary(root: &Path) {
    let plugins = root.join("usr/lib/wasmlet/plugins");
    let shipped = entries(&plugins.join("compiled"));
    assert_eq!(shipped.len(), SHIPPED.len(), "{shipped:?}");
    let again = root.join("compiled-here");
    let mut precompile = Command::new(root.join("usr/bin/wasmlet"));
    precompile
        .args(["plugin", "--cache-dir"])
        .arg(&again)
        .arg("precompile");
    for name in SHIPPED {
        precompile.arg(plugins.join(format!("{name}.wasm")));
    }
    output(&mut precompile);
    assert_eq!(entries(&again), shipped);

    let state = root.join("node");
    let config = root.join("config.yaml");
    std::fs::create_dir_all(state.join("manifests")).expect("manifests");
    std::fs::write(
        &config,
        format!(
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
             containerRuntimeEndpoint: unix://{}\nstaticPodPath: {}\nrootDir: {}\n\
             healthzPort: 0\nreadOnlyPort: 0\nport: 0\ncgroupsPerQOS: false\n\
             devicePluginDir: {}/device-plugins\n",
            state.join("no-runtime.sock").display(),
            state.join("manifests").display(),
            state.display(),
            state.display(),
        ),
    )
    .expect("config");
    let log = root.join("agent.log");
    let mut agent = Command::new(root.join("usr/bin/wasmlet"))
        .args(["run", "--config"])
        .arg(&config)
        .env("WASMLET_PLUGIN_DIR", &plugins)
        .env("NO_COLOR", "1")
        .stderr(std::fs::File::create(&log).expect("log"))
        .spawn()
        .expect("start the packaged agent");
    // With its plugins loaded the agent goes on to the runtime, which is not there.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let text = loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if text.contains("not reachable yet") || std::time::Instant::now() > deadline {
            break text;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    let _ = agent.kill();
    let _ = agent.wait();
    assert!(text.contains("not reachable yet"), "{text}");
    let compiled = entries(&state.join("plugin-cache"));
    assert!(
        compiled.is_empty(),
        "compiled on the node: {compiled:?}\n{text}"
    );
}
