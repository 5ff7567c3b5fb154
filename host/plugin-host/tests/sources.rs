//! The shipped file and HTTP pod sources: a directory of good, bad and hidden manifests,
//! a local HTTP server, and what each is refused without its grant.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use common::plugin;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use wasmlet_plugin_host::source::*;
use wasmlet_plugin_host::*;

fn limits() -> Limits {
    Limits {
        deadline: Duration::from_secs(5),
        ..Limits::default()
    }
}

fn load(
    engine: &PluginEngine,
    name: &str,
    config: &[(&str, &str)],
    grants: SourceGrants,
) -> PodSource {
    let config = config
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    engine
        .load_source(name, &plugin(name), config, limits(), grants)
        .expect("load")
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("wasmlet-sources-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("mkdir");
    dir
}

fn pod(name: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  containers:\n  - name: app\n    image: nginx\n"
    )
}

fn names(snapshot: &Snapshot) -> Vec<(String, String)> {
    snapshot
        .pods
        .iter()
        .map(|p| {
            (
                p.origin.clone(),
                p.pod.metadata.name.clone().unwrap_or_default(),
            )
        })
        .collect()
}

fn write(dir: &Path, name: &str, text: &str) {
    std::fs::write(dir.join(name), text).expect("write");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_file_source_reads_a_directory_and_skips_what_is_broken() {
    let engine = PluginEngine::new().expect("engine");
    let dir = temp_dir("file");
    write(&dir, "web.yaml", &pod("web"));
    write(&dir, "pair.yaml", &format!("{}---\n{}", pod("a"), pod("b")));
    write(
        &dir,
        "list.json",
        r#"{"apiVersion":"v1","kind":"PodList","items":[{"metadata":{"name":"from-list"},"spec":{"containers":[{"name":"c","image":"busybox"}]}}]}"#,
    );
    write(&dir, "broken.yaml", "kind: Pod\nmetadata: [unclosed\n");
    write(
        &dir,
        "deploy.yaml",
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d}\n",
    );
    write(
        &dir,
        "noname.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata: {}\n",
    );
    write(&dir, ".hidden.yaml", &pod("hidden"));
    std::fs::create_dir_all(dir.join("sub")).expect("mkdir");
    write(&dir.join("sub"), "nested.yaml", &pod("nested"));

    let source = load(
        &engine,
        "source-file",
        &[],
        SourceGrants {
            directory: Some(dir.clone()),
            urls: Vec::new(),
        },
    );
    let snapshot = source.poll().await.expect("poll");
    assert_eq!(
        names(&snapshot),
        [
            ("list.json[0]", "from-list"),
            ("pair.yaml#1", "a"),
            ("pair.yaml#2", "b"),
            ("web.yaml", "web"),
        ]
        .map(|(o, n)| (o.to_owned(), n.to_owned()))
    );
    let problems: Vec<_> = snapshot
        .problems
        .iter()
        .map(|p| p.origin.as_str())
        .collect();
    assert_eq!(problems, ["broken.yaml", "deploy.yaml", "noname.yaml"]);
    assert_eq!(
        snapshot.problems[1].message, "a Deployment, not a Pod",
        "{snapshot:?}"
    );
    assert!(
        snapshot.problems[2]
            .message
            .starts_with("metadata.name: Required value")
    );
    assert_eq!(
        snapshot.pods[0].pod.spec.as_ref().expect("spec").containers[0]
            .image
            .as_deref(),
        Some("busybox")
    );

    // A new file shows in the next poll; a removed one is gone from it (SET semantics).
    write(&dir, "zz.yaml", &pod("late"));
    std::fs::remove_file(dir.join("web.yaml")).expect("rm");
    let names_now: Vec<_> = names(&source.poll().await.expect("poll"))
        .into_iter()
        .map(|(_, n)| n)
        .collect();
    assert_eq!(names_now, ["from-list", "a", "b", "late"]);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_file_source_sees_only_its_granted_directory() {
    let engine = PluginEngine::new().expect("engine");
    let ungranted = load(&engine, "source-file", &[], SourceGrants::default());
    let err = ungranted.poll().await.expect_err("no directory granted");
    assert!(
        err.to_string()
            .starts_with("pod source source-file: cannot read the manifest directory /manifests"),
        "{err}"
    );

    let dir = temp_dir("escape");
    let grants = SourceGrants {
        directory: Some(dir.clone()),
        urls: Vec::new(),
    };
    let escaping = load(&engine, "source-file", &[("directory", "/etc")], grants);
    assert!(
        escaping.poll().await.is_err(),
        "a path outside the grant is not readable"
    );

    let gone = load(
        &engine,
        "source-file",
        &[],
        SourceGrants {
            directory: Some(dir.join("missing")),
            urls: Vec::new(),
        },
    );
    let err = gone.poll().await.expect_err("missing directory");
    assert!(err.to_string().contains("missing"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Serves `/pods` (a PodList and a second YAML document), `/empty`, `/down` (500), and
/// echoes the `x-token` header into the pod's name on `/token`.
async fn manifest_server() -> u16 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("listen");
    let port = listener.local_addr().expect("addr").port();
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut buf = [0u8; 1024];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match conn.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                let head = String::from_utf8_lossy(&head).to_ascii_lowercase();
                let path = head.split(' ').nth(1).unwrap_or("/").to_owned();
                let token = head
                    .lines()
                    .find_map(|l| l.strip_prefix("x-token: "))
                    .unwrap_or("none")
                    .trim()
                    .to_owned();
                let (status, body) = match path.as_str() {
                    "/pods" => (
                        "200 OK",
                        format!(
                            "apiVersion: v1\nkind: PodList\nitems:\n- metadata: {{name: one}}\n  spec: {{containers: [{{name: c, image: nginx}}]}}\n---\n{}",
                            pod("two")
                        ),
                    ),
                    "/token" => ("200 OK", pod(&format!("token-{token}"))),
                    "/empty" => ("200 OK", String::new()),
                    _ => ("500 Internal Server Error", "boom".to_owned()),
                };
                let reply = format!(
                    "HTTP/1.1 {status}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = conn.write_all(reply.as_bytes()).await;
            });
        }
    });
    port
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_http_source_fetches_only_granted_urls() {
    let engine = PluginEngine::new().expect("engine");
    let port = manifest_server().await;
    let base = format!("http://127.0.0.1:{port}");
    let granted = || SourceGrants {
        directory: None,
        urls: vec![format!("{base}/")],
    };

    let url = format!("{base}/pods");
    let source = load(&engine, "source-http", &[("url", &url)], granted());
    let snapshot = source.poll().await.expect("poll");
    assert_eq!(
        names(&snapshot),
        vec![
            (format!("{url}#1[0]"), "one".to_owned()),
            (format!("{url}#2"), "two".to_owned())
        ]
    );
    assert!(snapshot.problems.is_empty());

    let url = format!("{base}/token");
    let with_header = load(
        &engine,
        "source-http",
        &[("url", &url), ("header.X-Token", "s3cret")],
        granted(),
    );
    let snapshot = with_header.poll().await.expect("poll");
    assert_eq!(names(&snapshot)[0].1, "token-s3cret");

    let url = format!("{base}/empty");
    let empty = load(&engine, "source-http", &[("url", &url)], granted());
    assert_eq!(empty.poll().await.expect("poll"), Snapshot::default());

    let url = format!("{base}/down");
    let down = load(&engine, "source-http", &[("url", &url)], granted());
    let err = down.poll().await.expect_err("500");
    assert_eq!(
        err.to_string(),
        format!("pod source source-http: {url}: HTTP status 500")
    );

    let url = format!("{base}/pods");
    let other = SourceGrants {
        directory: None,
        urls: vec![format!("{base}/other/")],
    };
    for grants in [other, SourceGrants::default()] {
        let denied = load(&engine, "source-http", &[("url", &url)], grants);
        let err = denied.poll().await.expect_err("not granted");
        assert!(err.to_string().contains("access denied"), "{err}");
    }
}

#[tokio::test]
async fn a_component_of_another_world_is_not_a_source() {
    let engine = PluginEngine::new().expect("engine");
    let err = engine
        .load_source(
            "tcp",
            &plugin("probe-tcp-socket"),
            BTreeMap::new(),
            limits(),
            SourceGrants::default(),
        )
        .expect_err("a probe handler is not a pod source");
    assert!(
        err.to_string()
            .starts_with("plugin tcp: does not implement world pod-source"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_source_template_makes_pods_from_its_configuration() {
    let engine = PluginEngine::new().expect("engine");
    let path = wasmlet_plugin_host::dev::template("pod-source", "replicas-source");
    let load = |config: &[(&str, &str)]| {
        let config = config
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        engine
            .load_source("replicas", &path, config, limits(), SourceGrants::default())
            .expect("load")
    };
    let source = load(&[("image", "nginx:1.27"), ("replicas", "3"), ("name", "web")]);
    let snapshot = source.poll().await.expect("poll");
    let pods: Vec<_> = names(&snapshot).into_iter().map(|(_, n)| n).collect();
    assert_eq!(pods, ["web-0", "web-1", "web-2"]);
    let spec = snapshot.pods[2].pod.spec.as_ref().expect("spec");
    assert_eq!(spec.containers[0].image.as_deref(), Some("nginx:1.27"));

    let err = load(&[]).poll().await.expect_err("no image");
    assert_eq!(
        err.to_string(),
        "pod source replicas: no `image` in the source's configuration"
    );
}
