//! The book under `docs/`: built with mdBook, its links checked, and the commands the
//! pages mark for CI run as a reader would type them.
//!
//! A fenced block whose info string is `sh ci` is a command CI can run: `cargo xtask docs
//! --run` (and `cargo xtask test`) runs each such block from the repository's root in a
//! shell of its own (`bash -euo pipefail`), with the workspace's debug binaries first on
//! `PATH` and a home folder of its own (`~` is new each run) — so a page whose commands
//! drift from the code fails the build.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::shell::{Result, repo, run, step};

/// The mdBook the book is built with (installed into the build directory when missing).
const MDBOOK_VERSION: &str = "0.5.4";

/// The Markdown the link check reads besides the book's pages.
const OTHER_PAGES: [&str; 3] = ["README.md", "bench/README.md", "templates/README.md"];

/// `cargo xtask docs [--run]`: the book built, every page's links checked, and with
/// `--run` the pages' CI commands run.
pub fn docs(args: &[String]) -> Result {
    check_links()?;
    build_book()?;
    if args.iter().any(|a| a == "--run") {
        run_commands()?;
    }
    Ok(())
}

/// `mdbook build docs` into `target/book`, with the pinned mdBook.
pub fn build_book() -> Result {
    step("docs: build the book (mdbook build docs → target/book)");
    let mdbook = crate::package::tool("mdbook", MDBOOK_VERSION, &["--no-default-features"])?;
    run(Command::new(mdbook).args(["build", "docs"]))
}

/// Every page of the book, README.md and bench/README.md: relative links lead to files
/// that exist, and an anchor into a Markdown file to one of its headings; every page in
/// `docs/` is in the contents and every entry of the contents exists.
pub fn check_links() -> Result {
    step("docs: check the pages' links and the book's contents");
    let root = repo();
    let mut pages = book_pages(&root)?;
    pages.extend(OTHER_PAGES.iter().map(|p| root.join(p)));
    let mut broken = Vec::new();
    for page in &pages {
        let text = read(page)?;
        for (line, target) in links(&text) {
            if let Err(why) = resolve(page, &target) {
                broken.push(format!("{}:{line}: ({target}) {why}", shown(page)));
            }
        }
    }
    if broken.is_empty() {
        eprintln!("{} pages, every link resolves", pages.len());
        Ok(())
    } else {
        Err(format!("broken links:\n  {}", broken.join("\n  ")))
    }
}

/// The pages `docs/SUMMARY.md` lists; an error names a listed page that is missing or a
/// page of the folder the contents leave out.
fn book_pages(root: &Path) -> Result<Vec<PathBuf>> {
    let docs = root.join("docs");
    let summary = docs.join("SUMMARY.md");
    let listed: Vec<PathBuf> = links(&read(&summary)?)
        .into_iter()
        .map(|(_, target)| docs.join(target))
        .collect();
    let missing: Vec<String> = listed
        .iter()
        .filter(|p| !p.is_file())
        .map(|p| shown(p))
        .collect();
    if !missing.is_empty() {
        return Err(format!(
            "docs/SUMMARY.md lists missing pages: {}",
            missing.join(", ")
        ));
    }
    let listed_set: BTreeSet<&PathBuf> = listed.iter().collect();
    let entries = fs::read_dir(&docs).map_err(|e| format!("{}: {e}", docs.display()))?;
    let left_out: Vec<String> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "md") && *p != summary)
        .filter(|p| !listed_set.contains(p))
        .map(|p| shown(&p))
        .collect();
    if !left_out.is_empty() {
        return Err(format!(
            "pages docs/SUMMARY.md does not list: {}",
            left_out.join(", ")
        ));
    }
    let mut pages = listed;
    pages.push(summary);
    Ok(pages)
}

fn read(path: &Path) -> Result<String> {
    fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))
}

fn shown(path: &Path) -> String {
    path.strip_prefix(repo())
        .unwrap_or(path)
        .display()
        .to_string()
}

/// The `](target)` links of a page outside its code, with their line numbers.
fn links(text: &str) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    for (n, line) in prose_lines(text) {
        let mut rest = line.as_str();
        while let Some(at) = rest.find("](") {
            let after = &rest[at + 2..];
            let Some(end) = after.find(')') else { break };
            found.push((n, after[..end].to_owned()));
            rest = &after[end..];
        }
    }
    found
}

/// A page's lines outside fenced code blocks, numbered from 1, inline code removed.
fn prose_lines(text: &str) -> Vec<(usize, String)> {
    outside_fences(text)
        .into_iter()
        .map(|(n, line)| (n, without_inline_code(line)))
        .collect()
}

/// A page's lines outside fenced code blocks, numbered from 1, as they are.
fn outside_fences(text: &str) -> Vec<(usize, &str)> {
    let mut fenced = false;
    let mut lines = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        } else if !fenced {
            lines.push((i + 1, line));
        }
    }
    lines
}

fn without_inline_code(line: &str) -> String {
    line.split('`').step_by(2).collect::<Vec<_>>().join("")
}

/// Whether a link from `page` leads somewhere: web addresses are taken as they are.
fn resolve(page: &Path, target: &str) -> std::result::Result<(), String> {
    if target.contains("://") || target.starts_with("mailto:") {
        return Ok(());
    }
    let (file, anchor) = match target.split_once('#') {
        Some((file, anchor)) => (file, Some(anchor)),
        None => (target, None),
    };
    let dir = page.parent().unwrap_or(Path::new("."));
    let path = if file.is_empty() {
        page.to_path_buf()
    } else {
        dir.join(file)
    };
    if !path.exists() {
        return Err("no such file".into());
    }
    match anchor {
        Some(anchor) if path.extension().is_some_and(|x| x == "md") => {
            let ids = anchors(&fs::read_to_string(&path).unwrap_or_default());
            if ids.contains(anchor) {
                Ok(())
            } else {
                Err(format!("no heading or id `{anchor}` in {}", shown(&path)))
            }
        }
        _ => Ok(()),
    }
}

/// The ids a Markdown page offers: its headings as mdBook (and GitHub) make them, and
/// explicit `<a id="…">`s.
fn anchors(text: &str) -> BTreeSet<String> {
    let mut ids = BTreeSet::new();
    // A heading's inline code is part of its id.
    for (_, line) in outside_fences(text) {
        if let Some(heading) = line.strip_prefix('#') {
            ids.insert(slug(heading.trim_start_matches('#').trim()));
        }
        let mut rest = line;
        while let Some(at) = rest.find("id=\"") {
            let after = &rest[at + 4..];
            let Some(end) = after.find('"') else { break };
            ids.insert(after[..end].to_owned());
            rest = &after[end..];
        }
    }
    ids
}

/// A heading's id: lower case, letters, digits, `-` and `_` kept, spaces made `-`, the
/// rest dropped.
fn slug(heading: &str) -> String {
    heading
        .chars()
        .filter_map(|c| {
            if c.is_alphanumeric() || c == '-' || c == '_' {
                Some(c.to_ascii_lowercase())
            } else if c.is_whitespace() {
                Some('-')
            } else {
                None
            }
        })
        .collect()
}

/// A block of commands a page marks for CI (` ```sh ci `).
struct Block {
    page: String,
    line: usize,
    script: String,
}

fn ci_blocks(page: &str, text: &str) -> Vec<Block> {
    let mut blocks = Vec::new();
    let mut open: Option<Block> = None;
    for (i, line) in text.lines().enumerate() {
        let fence = line.trim_start().strip_prefix("```");
        match (fence, open.take()) {
            (Some(_), Some(block)) => blocks.push(block),
            (Some(info), None) => {
                let words: Vec<&str> = info.split_whitespace().collect();
                if words == ["sh", "ci"] {
                    open = Some(Block {
                        page: page.to_owned(),
                        line: i + 1,
                        script: String::new(),
                    });
                }
            }
            (None, Some(mut block)) => {
                block.script.push_str(line);
                block.script.push('\n');
                open = Some(block);
            }
            (None, None) => {}
        }
    }
    blocks
}

/// A home folder of the reader's own, new for each run (`~/team-policy` in a page is
/// made afresh), with the toolchains and download caches of the real one kept.
fn reader_home(root: &Path) -> Result<Vec<(String, String)>> {
    let real = PathBuf::from(std::env::var("HOME").unwrap_or_else(|_| "/root".into()));
    let home = root.join("target/docs-home");
    if home.exists() {
        fs::remove_dir_all(&home).map_err(|e| format!("{}: {e}", home.display()))?;
    }
    fs::create_dir_all(&home).map_err(|e| format!("{}: {e}", home.display()))?;
    let kept = |var: &str, default: PathBuf| {
        let value = std::env::var(var).unwrap_or_else(|_| default.display().to_string());
        (var.to_owned(), value)
    };
    Ok(vec![
        ("HOME".to_owned(), home.display().to_string()),
        kept("CARGO_HOME", real.join(".cargo")),
        kept("RUSTUP_HOME", real.join(".rustup")),
        kept("npm_config_cache", real.join(".npm")),
        kept("PIP_CACHE_DIR", real.join(".cache/pip")),
    ])
}

/// Runs every ` ```sh ci ` block of README.md and the book, in the contents' order.
pub fn run_commands() -> Result {
    let root = repo();
    let mut pages = vec![root.join("README.md")];
    pages.extend(book_pages(&root)?);
    let debug_bin = root.join("target/debug");
    let path = format!(
        "{}:{}",
        debug_bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let home = reader_home(&root)?;
    let mut ran = 0;
    for page in &pages {
        for block in ci_blocks(&shown(page), &read(page)?) {
            step(&format!(
                "docs: the commands of {}:{}",
                block.page, block.line
            ));
            eprint!("{}", block.script);
            run(Command::new("bash")
                .args(["-euo", "pipefail", "-c", &block.script])
                .env("PATH", &path)
                .envs(home.iter().map(|(k, v)| (k.as_str(), v.as_str())))
                .current_dir(&root))
            .map_err(|e| {
                format!(
                    "{}:{}: the page's commands failed: {e}",
                    block.page, block.line
                )
            })?;
            ran += 1;
        }
    }
    eprintln!("the docs' {ran} blocks of commands ran as written");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headings_become_mdbook_ids() {
        assert_eq!(
            slug("Pod cgroups: QoS and node allocatable"),
            "pod-cgroups-qos-and-node-allocatable"
        );
        assert_eq!(
            slug("`wasmlet plugin test`, offline"),
            "wasmlet-plugin-test-offline"
        );
    }

    #[test]
    fn links_in_code_are_not_links() {
        let text = "see [a](a.md) and `[b](b.md)`\n```\n[c](c.md)\n```\n[d](d.md#x)\n";
        let found: Vec<String> = links(text).into_iter().map(|(_, t)| t).collect();
        assert_eq!(found, ["a.md", "d.md#x"]);
    }

    #[test]
    fn only_sh_ci_blocks_are_run() {
        let text = "```sh\nno\n```\n```sh ci\nyes\nand this\n```\n```text\nno\n```\n";
        let blocks = ci_blocks("p.md", text);
        assert_eq!(blocks.len(), 1);
        assert_eq!(
            (blocks[0].line, blocks[0].script.as_str()),
            (4, "yes\nand this\n")
        );
    }
}
