//! `wasmlet plugin new`: a project of the author's own that names the SDK packages by
//! version and nothing of this checkout. (That each project builds and its cases pass is
//! run by CI from docs/plugins.md's commands: `cargo xtask docs --run`.)

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_wasmlet");
const VERSION: &str = env!("CARGO_PKG_VERSION");

/// A folder of its own under the build directory, empty.
fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("plugin-new-{name}"));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).expect("scratch dir");
    dir
}

/// An SDK folder laid out as `cargo xtask sdk` lays it out (the packages' contents do not
/// matter to `new`, which only names them).
fn sdk(root: &Path) -> PathBuf {
    let sdk = root.join("sdk");
    fs::create_dir_all(sdk.join(format!("rust/wasmlet-plugin-sdk-{VERSION}"))).expect("rust");
    fs::create_dir_all(sdk.join("python")).expect("python");
    fs::create_dir_all(sdk.join("js")).expect("js");
    fs::write(
        sdk.join(format!("python/wasmlet_plugin-{VERSION}-py3-none-any.whl")),
        b"",
    )
    .expect("whl");
    fs::write(sdk.join(format!("js/wasmlet-plugin-{VERSION}.tgz")), b"").expect("tgz");
    sdk
}

fn new(args: &[&str]) -> Output {
    Command::new(BIN)
        .args(["plugin", "new"])
        .args(args)
        .output()
        .expect("run wasmlet")
}

fn read(path: &Path) -> String {
    fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Every file of a project, as (path under it, text).
fn files(dir: &Path) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in fs::read_dir(&d).expect("read project") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                stack.push(path);
            } else {
                let name = path.strip_prefix(dir).expect("under").display().to_string();
                out.push((name, read(&path)));
            }
        }
    }
    out.sort();
    out
}

fn run_ok(args: &[&str]) -> String {
    let out = new(args);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "wasmlet plugin new {args:?}: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// No file of a project points into this checkout: only the SDK folder is named.
fn assert_self_contained(project: &Path) {
    let checkout = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let checkout = fs::canonicalize(checkout).expect("checkout");
    for (name, text) in files(project) {
        assert!(
            !text.contains("plugins/sdk"),
            "{name} names the checkout's SDK:\n{text}"
        );
        assert!(
            !text.contains("../../"),
            "{name} points out of its folder:\n{text}"
        );
        let sdk_free = text.replace(&format!("{}/target", checkout.display()), "");
        assert!(
            !sdk_free.contains(&checkout.display().to_string()),
            "{name} names the checkout:\n{text}"
        );
    }
}

#[test]
fn a_rust_policy_depends_on_the_sdk_by_version_and_carries_its_cases() {
    let root = scratch("rust");
    let sdk = sdk(&root);
    let project = root.join("team-policy");
    let said = run_ok(&[
        "--lang",
        "rust",
        "--sdk",
        sdk.to_str().expect("utf-8"),
        project.to_str().expect("utf-8"),
    ]);
    assert!(said.contains("cargo build --release"), "{said}");
    assert!(
        said.contains(
            "wasmlet plugin test target/wasm32-wasip2/release/team_policy.wasm cases.yaml"
        ),
        "{said}"
    );

    let manifest = read(&project.join("Cargo.toml"));
    let sdk_dir = fs::canonicalize(&sdk)
        .expect("sdk")
        .join(format!("rust/wasmlet-plugin-sdk-{VERSION}"));
    let dependency = format!(
        "wasmlet-plugin-sdk = {{ version = \"{VERSION}\", path = \"{}\" }}",
        sdk_dir.display()
    );
    assert!(manifest.contains(&dependency), "{manifest}");
    assert!(manifest.contains("name = \"team-policy\""), "{manifest}");
    assert!(
        manifest.contains("[workspace]"),
        "its own workspace:\n{manifest}"
    );
    assert!(read(&project.join("Cargo.lock")).contains("name = \"team-policy\""));
    assert!(read(&project.join(".cargo/config.toml")).contains("wasm32-wasip2"));
    assert!(read(&project.join("src/lib.rs")).contains("export_admission_policy!"));
    assert!(read(&project.join("cases.yaml")).contains("MissingMemoryLimit"));
    assert_self_contained(&project);
}

#[test]
fn python_and_typescript_projects_install_the_sdk_packages() {
    let root = scratch("langs");
    let sdk = sdk(&root);
    let sdk_arg = sdk.to_str().expect("utf-8");
    let sdk = fs::canonicalize(&sdk).expect("sdk");

    let py = root.join("py-probe");
    run_ok(&[
        "--lang",
        "python",
        "--world",
        "probe-handler",
        "--sdk",
        sdk_arg,
        py.to_str().expect("utf-8"),
    ]);
    let wheel = sdk.join(format!("python/wasmlet_plugin-{VERSION}-py3-none-any.whl"));
    assert!(
        read(&py.join("requirements.txt"))
            .contains(&format!("wasmlet-plugin @ file://{}", wheel.display()))
    );
    assert!(read(&py.join("app.py")).contains("class Probe"));
    assert!(
        !py.join("cases.yaml").exists(),
        "cases are an admission policy's"
    );
    assert_self_contained(&py);

    let ts = root.join("ts-policy");
    let said = run_ok(&[
        "--lang",
        "ts",
        "--sdk",
        sdk_arg,
        ts.to_str().expect("utf-8"),
    ]);
    assert!(said.contains("npm install && npm run build"), "{said}");
    let package = read(&ts.join("package.json"));
    let tgz = sdk.join(format!("js/wasmlet-plugin-{VERSION}.tgz"));
    assert!(
        package.contains(&format!("\"wasmlet-plugin\": \"file:{}\"", tgz.display())),
        "{package}"
    );
    assert!(
        package
            .contains("\"build\": \"wasmlet-plugin-build admission-policy app.ts ts_policy.wasm\""),
        "{package}"
    );
    assert!(read(&ts.join("app.ts")).contains("wasmlet-plugin/admission"));
    assert!(ts.join("cases.yaml").exists());
    assert_self_contained(&ts);
}

#[test]
fn new_names_what_it_cannot_do() {
    let root = scratch("refusals");
    let empty = root.join("empty-sdk");
    fs::create_dir_all(&empty).expect("empty sdk");
    let out = new(&[
        "--lang",
        "python",
        "--sdk",
        empty.to_str().expect("utf-8"),
        root.join("p").to_str().expect("utf-8"),
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains(&format!(
            "no python/wasmlet_plugin-{VERSION}-py3-none-any.whl"
        )),
        "{err}"
    );
    assert!(err.contains("cargo xtask sdk"), "{err}");
    assert!(
        !root.join("p").exists(),
        "nothing written when the SDK is missing"
    );

    let sdk = sdk(&root);
    let taken = root.join("taken");
    fs::create_dir_all(&taken).expect("taken");
    fs::write(taken.join("app.py"), "mine").expect("write");
    let out = new(&[
        "--lang",
        "python",
        "--sdk",
        sdk.to_str().expect("utf-8"),
        taken.to_str().expect("utf-8"),
    ]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("already exists and is not empty"));
    assert_eq!(
        read(&taken.join("app.py")),
        "mine",
        "an author's file is never overwritten"
    );

    let out = new(&[
        "--lang",
        "rust",
        "--sdk",
        sdk.to_str().expect("utf-8"),
        root.join("My Policy").to_str().expect("utf-8"),
    ]);
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("a plugin's name starts with a lower-case letter")
    );
}
