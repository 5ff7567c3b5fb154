//! The shipped tcpSocket and exec probe handlers against real local listeners and a
//! scripted exec, with and without their grants; components of the wrong world refused.

mod common;

use std::collections::BTreeMap;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use common::{load_probe as load, network, plugin, probe_target as target};
use wasmlet_plugin_host::probe::*;
use wasmlet_plugin_host::*;

fn tcp(port: u16) -> Action {
    Action::TcpSocket(TcpSocketAction {
        host: String::new(),
        port,
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_socket_connects_only_where_granted() {
    let engine = PluginEngine::new().expect("engine");
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("listen");
    let open = listener.local_addr().expect("addr").port();
    // Below the ephemeral range: a port freed there could be picked as the probe's own
    // local port and connect to itself.
    let closed = 1;

    let granted = load(&engine, "probe-tcp-socket", network(&["pod"]));
    let ok = granted
        .check(&target(tcp(open), 1000), None)
        .await
        .expect("check");
    assert!(matches!(ok, Outcome::Success(_)), "{ok:?}");
    let refused = granted
        .check(&target(tcp(closed), 1000), None)
        .await
        .expect("check");
    let Outcome::Failure(why) = refused else {
        panic!("a closed port fails the probe: {refused:?}")
    };
    assert_eq!(
        why,
        format!("dial tcp 127.0.0.1:{closed}: connect: connection refused")
    );

    // Granted another range only, or nothing: the connection is refused by the host.
    for grants in [network(&["10.0.0.0/8"]), Grants::default()] {
        let denied = load(&engine, "probe-tcp-socket", grants);
        let out = denied
            .check(&target(tcp(open), 1000), None)
            .await
            .expect("check");
        let Outcome::Failure(why) = out else {
            panic!("an address not granted fails: {out:?}")
        };
        assert!(why.contains("not permitted for this plugin"), "{why}");
    }
    drop(listener);
}

/// A container whose commands answer from a table: exit code and output by argv[0].
struct Scripted;

impl ContainerExec for Scripted {
    fn exec_sync(
        &self,
        command: Vec<String>,
        timeout: Duration,
    ) -> Pin<Box<dyn Future<Output = Result<ExecOutput, String>> + Send + '_>> {
        Box::pin(async move {
            let out = |code, text: &str| ExecOutput {
                exit_code: code,
                stdout: text.as_bytes().to_vec(),
                stderr: Vec::new(),
            };
            match command[0].as_str() {
                "true" => Ok(out(0, "")),
                "cat" => Ok(out(
                    1,
                    "cat: can't open '/tmp/healthy': No such file or directory\n",
                )),
                "sleep" => {
                    tokio::time::sleep(timeout).await;
                    Err("command timed out".into())
                }
                _ => Err("container is in CONTAINER_EXITED state".into()),
            }
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_runs_through_the_host_only_when_granted() {
    let engine = PluginEngine::new().expect("engine");
    let exec: Arc<dyn ContainerExec> = Arc::new(Scripted);
    let argv = |a: &[&str]| Action::Exec(a.iter().map(|s| (*s).to_owned()).collect());
    let granted = load(
        &engine,
        "probe-exec",
        Grants {
            exec: true,
            network: Vec::new(),
        },
    );
    let check = |action| {
        let (granted, exec) = (&granted, exec.clone());
        async move {
            granted
                .check(&target(action, 300), Some(exec))
                .await
                .expect("check")
        }
    };
    assert!(matches!(check(argv(&["true"])).await, Outcome::Success(_)));
    assert_eq!(
        check(argv(&["cat", "/tmp/healthy"])).await,
        Outcome::Failure("cat: can't open '/tmp/healthy': No such file or directory\n".into())
    );
    assert_eq!(
        check(argv(&["sleep", "5"])).await,
        Outcome::Failure("command [\"sleep\", \"5\"] timed out".into())
    );
    assert_eq!(
        check(argv(&["gone"])).await,
        Outcome::Error("container is in CONTAINER_EXITED state".into())
    );

    let ungranted = load(&engine, "probe-exec", Grants::default());
    let out = ungranted
        .check(&target(argv(&["true"]), 300), Some(exec.clone()))
        .await
        .expect("check");
    let Outcome::Error(why) = out else {
        panic!("exec without the grant is an error: {out:?}")
    };
    assert!(
        why.contains("exec is not granted to plugin probe-exec"),
        "{why}"
    );
}

#[tokio::test]
async fn a_component_of_another_world_is_refused_by_name() {
    let engine = PluginEngine::new().expect("engine");
    let err = engine
        .load_probe(
            "ports",
            &plugin("node-ports"),
            BTreeMap::new(),
            Limits::default(),
            Grants::default(),
        )
        .expect_err("an admission policy is not a probe handler");
    assert!(
        err.to_string()
            .starts_with("plugin ports: does not implement world probe-handler"),
        "{err}"
    );
    let err = engine
        .load_admission(
            "exec",
            &plugin("probe-exec"),
            BTreeMap::new(),
            Limits::default(),
        )
        .expect_err("a probe handler is not an admission policy");
    assert!(
        err.to_string()
            .starts_with("plugin exec: does not implement world admission-policy"),
        "{err}"
    );
}

/// A one-connection server that answers the first line it reads with `reply`.
fn answer_once(reply: &'static [u8]) -> u16 {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("listen");
    let port = listener.local_addr().expect("addr").port();
    std::thread::spawn(move || {
        if let Ok((mut conn, _)) = listener.accept() {
            let mut buf = [0u8; 64];
            let _ = conn.read(&mut buf);
            let _ = conn.write_all(reply);
        }
    });
    port
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_custom_probe_template_pings_redis() {
    let engine = PluginEngine::new().expect("engine");
    let path = wasmlet_plugin_host::dev::template("probe-handler", "redis-ping-probe");
    let handler = engine
        .load_probe(
            "redis",
            &path,
            BTreeMap::new(),
            Limits::default(),
            network(&["pod"]),
        )
        .expect("load");
    let custom = |port: u16| Action::Custom(vec![("port".into(), port.to_string())]);
    let out = handler
        .check(&target(custom(answer_once(b"+PONG\r\n")), 1000), None)
        .await
        .expect("check");
    assert_eq!(out, Outcome::Success("+PONG".into()));
    let out = handler
        .check(&target(custom(answer_once(b"-LOADING\r\n")), 1000), None)
        .await
        .expect("check");
    assert_eq!(
        out,
        Outcome::Failure("redis answered \"-LOADING\" to PING".into())
    );
}
