//! `wasmlet plugin new --lang rust|python|ts [--world W] DIR`: a plugin project of the
//! author's own, in its own folder, built with the language's own commands from the SDK
//! packages (`cargo xtask sdk` makes them; the Debian package installs them in
//! `/usr/share/wasmlet/sdk`). Nothing in the project points into a checkout of wasmlet.
//!
//! The starting code is the repository's templates (`templates/`), compiled into this
//! binary; the admission policy comes with the templates' cases for `plugin test`.

use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use clap::{Args, ValueEnum};

/// The SDK packages' version: the workspace's, as `cargo xtask sdk` names them.
const SDK_VERSION: &str = env!("CARGO_PKG_VERSION");

/// The cases of the admission template, the same policy in every language.
const CASES: &str = include_str!("../../../../../templates/cases/admission-policy.yaml");

/// Arguments of `wasmlet plugin new`.
#[derive(Debug, Args)]
pub struct NewArgs {
    /// The folder to make (it must not exist, or be empty); its name is the plugin's
    /// (the crate's or package's name, and the component's file name).
    pub dir: PathBuf,
    /// The language of the plugin.
    #[arg(long, value_enum)]
    pub lang: Lang,
    /// What the plugin is.
    #[arg(long, value_enum, default_value = "admission-policy")]
    pub world: World,
    /// Where the SDK packages are: `python/wasmlet_plugin-VERSION-py3-none-any.whl`,
    /// `js/wasmlet-plugin-VERSION.tgz`, `rust/wasmlet-plugin-sdk-VERSION/` (`cargo xtask sdk`
    /// writes them to target/sdk).
    #[arg(
        long,
        env = "WASMLET_SDK_DIR",
        default_value = "/usr/share/wasmlet/sdk"
    )]
    pub sdk: PathBuf,
}

/// A plugin's language.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Lang {
    Rust,
    Python,
    /// TypeScript (JavaScript works too: rename app.ts to app.js).
    Ts,
}

/// The WIT world a plugin implements.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum World {
    AdmissionPolicy,
    ProbeHandler,
    PodSource,
}

impl Lang {
    fn shown(self) -> &'static str {
        match self {
            Lang::Rust => "Rust",
            Lang::Python => "Python",
            Lang::Ts => "TypeScript",
        }
    }
}

impl World {
    fn shown(self) -> &'static str {
        match self {
            World::AdmissionPolicy => "an admission policy",
            World::ProbeHandler => "a probe handler",
            World::PodSource => "a pod source",
        }
    }

    /// The world's name in the WIT.
    fn name(self) -> &'static str {
        match self {
            World::AdmissionPolicy => "admission-policy",
            World::ProbeHandler => "probe-handler",
            World::PodSource => "pod-source",
        }
    }
}

/// One file of a project: its path in the folder and its text.
type File = (&'static str, String);

/// Writes the project; prints what to run next.
pub fn run(args: NewArgs) -> Result<ExitCode> {
    let name = plugin_name(&args.dir)?;
    let sdk = fs::canonicalize(&args.sdk).with_context(|| {
        format!(
            "--sdk {}: the SDK packages (cargo xtask sdk)",
            args.sdk.display()
        )
    })?;
    let files = match args.lang {
        Lang::Rust => rust(&name, args.world, &sdk)?,
        Lang::Python => python(&name, args.world, &sdk)?,
        Lang::Ts => typescript(&name, args.world, &sdk)?,
    };
    write_project(&args.dir, &files)?;
    print!("{}", next_steps(&args.dir, args.lang, args.world, &name));
    Ok(ExitCode::SUCCESS)
}

/// The folder's name, checked as a crate and package name.
fn plugin_name(dir: &Path) -> Result<String> {
    let name = dir
        .file_name()
        .and_then(|n| n.to_str())
        .with_context(|| format!("{}: names no folder", dir.display()))?;
    let valid = name.chars().next().is_some_and(|c| c.is_ascii_lowercase())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_');
    if !valid {
        bail!(
            "{}: a plugin's name starts with a lower-case letter and holds only a-z, 0-9, - and _ \
             (it names the crate or package and the component)",
            dir.display()
        );
    }
    Ok(name.to_owned())
}

/// The component's file name for a plugin name (cargo's rule: `-` becomes `_`).
fn component(name: &str) -> String {
    format!("{}.wasm", name.replace('-', "_"))
}

/// A file the SDK folder must hold; the error says how to make it.
fn sdk_file(sdk: &Path, relative: &str) -> Result<PathBuf> {
    let path = sdk.join(relative);
    if !path.exists() {
        bail!(
            "--sdk {}: no {relative} (cargo xtask sdk makes the SDK packages of this version, \
             {SDK_VERSION}, in target/sdk)",
            sdk.display()
        );
    }
    Ok(path)
}

fn rust(name: &str, world: World, sdk: &Path) -> Result<Vec<File>> {
    let crate_dir = sdk_file(sdk, &format!("rust/wasmlet-plugin-sdk-{SDK_VERSION}"))?;
    let (manifest, lock, lib) = match world {
        World::AdmissionPolicy => (
            include_str!("../../../../../templates/admission-policy/Cargo.toml"),
            include_str!("../../../../../templates/admission-policy/Cargo.lock"),
            include_str!("../../../../../templates/admission-policy/src/lib.rs"),
        ),
        World::ProbeHandler => (
            include_str!("../../../../../templates/probe-handler/Cargo.toml"),
            include_str!("../../../../../templates/probe-handler/Cargo.lock"),
            include_str!("../../../../../templates/probe-handler/src/lib.rs"),
        ),
        World::PodSource => (
            include_str!("../../../../../templates/pod-source/Cargo.toml"),
            include_str!("../../../../../templates/pod-source/Cargo.lock"),
            include_str!("../../../../../templates/pod-source/src/lib.rs"),
        ),
    };
    let template_name = package_name(manifest)?;
    let dependency = format!(
        "wasmlet-plugin-sdk = {{ version = \"{SDK_VERSION}\", path = {:?} }}",
        crate_dir.display().to_string()
    );
    let manifest = rust_manifest(manifest, &template_name, name, &dependency)?;
    let lock = lock.replace(
        &format!("name = \"{template_name}\""),
        &format!("name = \"{name}\""),
    );
    let mut files = vec![
        ("Cargo.toml", manifest),
        ("Cargo.lock", lock),
        (
            ".cargo/config.toml",
            include_str!("../../../../../templates/admission-policy/.cargo/config.toml").to_owned(),
        ),
        ("src/lib.rs", lib.to_owned()),
        (".gitignore", "/target\n".to_owned()),
    ];
    add_cases(&mut files, world);
    Ok(files)
}

/// The template's `[package] name`.
fn package_name(manifest: &str) -> Result<String> {
    manifest
        .lines()
        .find_map(|l| l.strip_prefix("name = \""))
        .and_then(|rest| rest.strip_suffix('"'))
        .map(str::to_owned)
        .context("a template's Cargo.toml has no package name")
}

/// The template's manifest with the plugin's name and the SDK by version.
fn rust_manifest(template: &str, from: &str, to: &str, dependency: &str) -> Result<String> {
    let mut out = String::new();
    let mut replaced = false;
    for line in template.lines() {
        if line.starts_with("# This repository's SDK") || line.starts_with("# the SDK package by") {
            continue;
        }
        if line.starts_with("wasmlet-plugin-sdk = ") {
            writeln!(
                out,
                "# The SDK of wasmlet {SDK_VERSION}, by version (from the SDK folder)."
            )?;
            writeln!(out, "{dependency}")?;
            replaced = true;
            continue;
        }
        let line = line.replace(&component(from), &component(to));
        match line.strip_prefix("name = ") {
            Some(_) => writeln!(out, "name = \"{to}\"")?,
            None => writeln!(out, "{line}")?,
        }
    }
    if !replaced {
        bail!("a template's Cargo.toml does not depend on wasmlet-plugin-sdk");
    }
    Ok(out)
}

fn python(name: &str, world: World, sdk: &Path) -> Result<Vec<File>> {
    let wheel = sdk_file(
        sdk,
        &format!("python/wasmlet_plugin-{SDK_VERSION}-py3-none-any.whl"),
    )?;
    let app = match world {
        World::AdmissionPolicy => {
            include_str!("../../../../../templates/python/admission-policy/app.py")
        }
        World::ProbeHandler => include_str!("../../../../../templates/python/probe-handler/app.py"),
        World::PodSource => include_str!("../../../../../templates/python/pod-source/app.py"),
    };
    let requirements = format!(
        "# The wasmlet plugin SDK {SDK_VERSION} (and componentize-py, pinned by it).\n\
         wasmlet-plugin @ file://{}\n",
        wheel.display()
    );
    let mut files = vec![
        ("app.py", app.to_owned()),
        ("requirements.txt", requirements),
        (
            ".gitignore",
            format!("/.venv/\n__pycache__/\n/{}\n", component(name)),
        ),
    ];
    add_cases(&mut files, world);
    Ok(files)
}

fn typescript(name: &str, world: World, sdk: &Path) -> Result<Vec<File>> {
    let package = sdk_file(sdk, &format!("js/wasmlet-plugin-{SDK_VERSION}.tgz"))?;
    let app = match world {
        World::AdmissionPolicy => {
            include_str!("../../../../../templates/js/admission-policy/app.ts")
        }
        World::ProbeHandler => include_str!("../../../../../templates/js/probe-handler/app.ts"),
        World::PodSource => include_str!("../../../../../templates/js/pod-source/app.ts"),
    };
    let package_json = format!(
        r#"{{
  "name": "{name}",
  "version": "0.1.0",
  "private": true,
  "type": "module",
  "scripts": {{
    "build": "wasmlet-plugin-build {world} app.ts {component}"
  }},
  "dependencies": {{
    "wasmlet-plugin": "file:{package}"
  }}
}}
"#,
        world = world.name(),
        component = component(name),
        package = package.display(),
    );
    let mut files = vec![
        ("app.ts", app.to_owned()),
        ("package.json", package_json),
        (
            ".gitignore",
            format!("/node_modules/\n/{}\n", component(name)),
        ),
    ];
    add_cases(&mut files, world);
    Ok(files)
}

/// An admission policy's project holds the templates' cases.
fn add_cases(files: &mut Vec<File>, world: World) {
    if world == World::AdmissionPolicy {
        files.push(("cases.yaml", CASES.to_owned()));
    }
}

/// Makes `dir` (refusing one that holds anything) and writes the files into it.
fn write_project(dir: &Path, files: &[File]) -> Result<()> {
    if dir.exists()
        && fs::read_dir(dir)
            .map(|mut d| d.next().is_some())
            .unwrap_or(true)
    {
        bail!("{}: already exists and is not empty", dir.display());
    }
    for (path, text) in files {
        let path = dir.join(path);
        if let Some(parent) = path.parent() {
            fs::create_dir_all(parent).with_context(|| parent.display().to_string())?;
        }
        fs::write(&path, text).with_context(|| path.display().to_string())?;
    }
    Ok(())
}

/// What to run next, in the project's folder.
fn next_steps(dir: &Path, lang: Lang, world: World, name: &str) -> String {
    let wasm = component(name);
    let build = match lang {
        Lang::Rust => format!("cargo build --release      # target/wasm32-wasip2/release/{wasm}"),
        Lang::Python => format!(
            "python3 -m venv .venv && .venv/bin/pip install -r requirements.txt\n  \
             .venv/bin/wasmlet-plugin-build {} . {wasm}",
            world.name()
        ),
        Lang::Ts => "npm install && npm run build".to_owned(),
    };
    let built = match lang {
        Lang::Rust => format!("target/wasm32-wasip2/release/{wasm}"),
        Lang::Python | Lang::Ts => wasm.clone(),
    };
    let try_it = match world {
        World::AdmissionPolicy => format!("wasmlet plugin test {built} cases.yaml"),
        World::ProbeHandler => format!("wasmlet plugin probe {built} --help"),
        World::PodSource => format!("wasmlet plugin source {built} --config image=busybox"),
    };
    format!(
        "made {dir}: {world} in {lang}\n  cd {dir}\n  {build}\n  {try_it}\n",
        dir = dir.display(),
        world = world.shown(),
        lang = lang.shown(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_manifest_names_the_plugin_and_the_sdk_by_version() -> Result<()> {
        let template = include_str!("../../../../../templates/pod-source/Cargo.toml");
        let from = package_name(template)?;
        let out = rust_manifest(
            template,
            &from,
            "team-source",
            "wasmlet-plugin-sdk = { version = \"0.1.0\", path = \"/sdk\" }",
        )?;
        assert!(out.contains("name = \"team-source\""), "{out}");
        assert!(out.contains("team_source.wasm"), "{out}");
        assert!(!out.contains("../../plugins/sdk"), "{out}");
        assert!(
            out.contains("wasmlet-plugin-sdk = { version = \"0.1.0\", path = \"/sdk\""),
            "{out}"
        );
        Ok(())
    }

    #[test]
    fn a_name_must_be_a_package_name() {
        assert!(plugin_name(Path::new("/tmp/team-policy")).is_ok());
        assert!(plugin_name(Path::new("/tmp/Team Policy")).is_err());
        assert!(plugin_name(Path::new("/tmp/9lives")).is_err());
    }
}
