//! The shutdown manager against a stand-in for systemd-logind (and the one call it makes
//! to systemd) on a peer-to-peer D-Bus connection: the delay raised through logind's
//! drop-in, the lock taken, the pods stopped by priority when a shutdown is announced,
//! the lock released then, and taken again when the shutdown is called off.

// zbus generates the stand-in's signal method without documentation.
#![allow(missing_docs)]

use std::io::Read;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use wasmlet_shutdown::plan::{self, PodInfo, SYSTEM_CRITICAL_PRIORITY};
use wasmlet_shutdown::{Manager, Pods, ShutdownState};
use zbus::object_server::SignalEmitter;

/// What the stand-in saw and holds.
#[derive(Default)]
struct Seen {
    /// `InhibitDelayMaxUSec`.
    delay_usec: u64,
    /// Each lock asked for (what, who, why, mode), and the stand-in's end of its descriptor.
    locks: Vec<((String, String, String, String), UnixStream)>,
    /// KillUnit calls.
    kills: Vec<(String, String, i32)>,
}

struct Login(Arc<Mutex<Seen>>);

#[zbus::interface(name = "org.freedesktop.login1.Manager")]
impl Login {
    fn inhibit(
        &self,
        what: String,
        who: String,
        why: String,
        mode: String,
    ) -> zbus::zvariant::OwnedFd {
        let (ours, theirs) = UnixStream::pair().expect("pair");
        ours.set_nonblocking(true).expect("nonblocking");
        self.0
            .lock()
            .expect("seen")
            .locks
            .push(((what, who, why, mode), ours));
        zbus::zvariant::OwnedFd::from(std::os::fd::OwnedFd::from(theirs))
    }

    #[zbus(property, name = "InhibitDelayMaxUSec")]
    fn inhibit_delay_max_usec(&self) -> u64 {
        self.0.lock().expect("seen").delay_usec
    }

    #[zbus(signal)]
    async fn prepare_for_shutdown(emitter: &SignalEmitter<'_>, start: bool) -> zbus::Result<()>;
}

/// systemd's manager: SIGHUP to systemd-logind.service makes the stand-in read the drop-in.
struct Systemd(Arc<Mutex<Seen>>, PathBuf);

#[zbus::interface(name = "org.freedesktop.systemd1.Manager")]
impl Systemd {
    fn kill_unit(&self, unit: String, who: String, signal: i32) {
        let mut seen = self.0.lock().expect("seen");
        if unit == "systemd-logind.service" && signal == 1 {
            let text = std::fs::read_to_string(&self.1).unwrap_or_default();
            if let Some(secs) = text
                .lines()
                .find_map(|l| l.strip_prefix("InhibitDelayMaxSec="))
                .and_then(|s| s.parse::<u64>().ok())
            {
                seen.delay_usec = secs * 1_000_000;
            }
        }
        seen.kills.push((unit, who, signal));
    }
}

/// Pods that stop as soon as they are told to; the order they were told in.
#[derive(Default)]
struct FakePods {
    pods: Vec<PodInfo>,
    killed: Mutex<Vec<(String, Duration)>>,
}

impl Pods for FakePods {
    fn active(&self) -> Vec<PodInfo> {
        self.pods.clone()
    }

    fn kill(&self, uid: &str, grace: Duration) {
        self.killed
            .lock()
            .expect("killed")
            .push((uid.to_owned(), grace));
    }

    fn stopped(&self, uid: &str) -> bool {
        self.killed
            .lock()
            .expect("killed")
            .iter()
            .any(|(u, _)| u == uid)
    }
}

fn pod(uid: &str, priority: i32, grace: Option<i64>) -> PodInfo {
    PodInfo {
        uid: uid.into(),
        priority,
        grace_seconds: grace,
    }
}

/// Whether the lock behind `end` is still held (its other end open).
fn held(end: &mut UnixStream) -> bool {
    let mut byte = [0u8; 1];
    match end.read(&mut byte) {
        Ok(0) => false,
        Ok(_) => true,
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => true,
        Err(e) => panic!("{e}"),
    }
}

async fn until(what: &str, mut check: impl FnMut() -> bool) {
    let started = tokio::time::Instant::now();
    while !check() {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{what}: not within 10 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shutdown_waits_for_the_pods_lowest_priority_first() {
    let dir = std::env::temp_dir().join(format!("wasmlet-shutdown-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let drop_in = dir.join("logind.conf.d/99-kubelet.conf");
    let seen = Arc::new(Mutex::new(Seen {
        delay_usec: 5_000_000,
        ..Seen::default()
    }));
    let (a, b) = tokio::net::UnixStream::pair().expect("pair");
    let server = zbus::connection::Builder::unix_stream(a)
        .server(zbus::Guid::generate())
        .expect("server")
        .p2p()
        .serve_at("/org/freedesktop/login1", Login(seen.clone()))
        .expect("login1")
        .serve_at(
            "/org/freedesktop/systemd1",
            Systemd(seen.clone(), drop_in.clone()),
        )
        .expect("systemd1")
        .build();
    let client = zbus::connection::Builder::unix_stream(b).p2p().build();
    let (server, client) = tokio::join!(server, client);
    let (server, client) = (server.expect("server"), client.expect("client"));

    let pods = Arc::new(FakePods {
        pods: vec![
            pod("critical", SYSTEM_CRITICAL_PRIORITY, Some(30)),
            pod("web", 0, None),
            pod("quick", 0, Some(2)),
        ],
        ..FakePods::default()
    });
    let state = ShutdownState::default();
    let manager = Manager::new(
        plan::migrate(Duration::from_secs(30), Duration::from_secs(10)),
        pods.clone(),
        state.clone(),
    )
    .drop_in_at(drop_in.clone());
    let running = tokio::spawn(async move { manager.run_on(&client).await });

    // logind allows 5 s: the 30 s asked for are written and logind told to read them.
    until("a lock", || !seen.lock().expect("seen").locks.is_empty()).await;
    assert_eq!(
        std::fs::read_to_string(&drop_in).expect("drop-in"),
        "# Kubelet logind override\n[Login]\nInhibitDelayMaxSec=30\n"
    );
    {
        let seen = seen.lock().expect("seen");
        assert_eq!(
            seen.kills,
            [("systemd-logind.service".to_owned(), "all".to_owned(), 1)]
        );
        assert_eq!(seen.delay_usec, 30_000_000);
        let (what, _) = &seen.locks[0];
        assert_eq!(
            (
                what.0.as_str(),
                what.1.as_str(),
                what.2.as_str(),
                what.3.as_str()
            ),
            (
                "shutdown",
                "kubelet",
                "Kubelet needs time to handle node shutdown",
                "delay"
            )
        );
    }
    assert!(held(&mut seen.lock().expect("seen").locks[0].1));
    assert!(state.admit().is_none() && state.not_ready().is_none());

    // logind announces a shutdown: the regular pods first, then the critical one; the
    // lock goes once they are stopped.
    let emitter = SignalEmitter::new(&server, "/org/freedesktop/login1").expect("emitter");
    Login::prepare_for_shutdown(&emitter, true)
        .await
        .expect("signal");
    until("the lock released", || {
        !held(&mut seen.lock().expect("seen").locks[0].1)
    })
    .await;
    assert_eq!(
        *pods.killed.lock().expect("killed"),
        [
            ("web".to_owned(), Duration::from_secs(20)),
            ("quick".to_owned(), Duration::from_secs(2)),
            ("critical".to_owned(), Duration::from_secs(10)),
        ]
    );
    assert!(state.shutting_down());
    assert_eq!(
        state.admit(),
        Some((
            "NodeShutdown".to_owned(),
            "Pod was rejected as the node is shutting down.".to_owned()
        ))
    );
    assert_eq!(state.not_ready().as_deref(), Some("node is shutting down"));

    // Called off: pods are admitted again and a new lock is held.
    Login::prepare_for_shutdown(&emitter, false)
        .await
        .expect("signal");
    until("a second lock", || {
        seen.lock().expect("seen").locks.len() == 2
    })
    .await;
    assert!(held(&mut seen.lock().expect("seen").locks[1].1));
    until("admitting again", || !state.shutting_down()).await;
    assert!(!running.is_finished());
    running.abort();
    let _ = std::fs::remove_dir_all(&dir);
}
