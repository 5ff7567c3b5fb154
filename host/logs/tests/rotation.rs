//! The container log manager against the simulator: a running container's log is
//! rotated once it reaches the size, the runtime reopens it, older files are
//! compressed and the excess removed, a refused reopen puts the file back, a lost live
//! file is given back, small logs and stopped containers are left alone — and a
//! follower reading the log across rotations sees every line once.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::time::Duration;

use tonic::Code;
use wasmlet_cri::CriRuntime;
use wasmlet_cri::proto::PodSandboxConfig;
use wasmlet_cri_sim::{Simulator, fixtures};
use wasmlet_logs::read::{self, Sink};
use wasmlet_logs::{LogManager, LogOptions, Policy, Rotation};

fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("wasmlet-logs-it-{name}-{}", std::process::id()));
    let _ = fs::remove_dir_all(&d);
    fs::create_dir_all(&d).expect("dir");
    d
}

fn names(d: &Path) -> Vec<String> {
    let mut n: Vec<String> = fs::read_dir(d)
        .expect("list")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    n.sort();
    n
}

/// A sandbox logging under `logs` and a running container in it: (container id, its
/// live log file).
async fn running(sim: &Simulator, logs: &Path, name: &str) -> (String, PathBuf) {
    let config = PodSandboxConfig {
        log_directory: logs.display().to_string(),
        ..fixtures::pod(name)
    };
    let sandbox = sim
        .run_pod_sandbox(config.clone(), "")
        .await
        .expect("sandbox");
    let mut c = fixtures::container("app", &["sleep", "3600"]);
    c.log_path = "app/0.log".into();
    let id = sim
        .create_container(&sandbox, c, config)
        .await
        .expect("create");
    sim.start_container(&id).await.expect("start");
    fs::create_dir_all(logs.join("app")).expect("container log dir");
    (id, logs.join("app/0.log"))
}

fn append(path: &Path, lines: std::ops::Range<usize>) {
    let mut f = OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .expect("open");
    for i in lines {
        writeln!(f, "2024-01-01T00:00:00.000000000Z stdout F line {i:04}").expect("write");
    }
}

/// A manager whose clock moves one second per round.
fn manager(sim: &Arc<Simulator>, policy: Policy) -> LogManager<Simulator> {
    let now = Arc::new(AtomicI64::new(1_704_067_200));
    LogManager::new(
        sim.clone(),
        Rotation {
            policy,
            workers: 2,
            ..Rotation::default()
        },
    )
    .with_clock(move || now.fetch_add(1, Ordering::SeqCst))
}

#[tokio::test]
async fn logs_past_the_size_rotate_and_the_runtime_reopens_them() {
    let d = dir("rotate");
    let sim = Arc::new(Simulator::new());
    let (id, live) = running(&sim, &d.join("pod"), "big").await;
    let (_, small) = running(&sim, &d.join("quiet"), "small").await;
    append(&small, 0..2);
    let m = manager(
        &sim,
        Policy {
            max_bytes: 4096,
            max_files: 3,
        },
    );

    // Below the size: nothing happens.
    append(&live, 0..10);
    let round = m.round().await;
    assert_eq!((round.checked, round.rotated, round.failed), (2, 0, 0));

    for generation in 0..4 {
        append(&live, generation * 100..generation * 100 + 100);
        let round = m.round().await;
        assert_eq!(round.rotated, 1, "generation {generation}: {round:?}");
        assert!(live.exists(), "the runtime reopened the live file");
        assert_eq!(fs::metadata(&live).expect("live").len(), 0);
    }
    let files = names(&d.join("pod/app"));
    assert_eq!(files.len(), 3, "{files:?}");
    assert_eq!(files[0], "0.log");
    assert!(files[1].ends_with(".gz"), "{files:?}");
    assert!(
        !files[2].ends_with(".gz"),
        "the newest stays plain: {files:?}"
    );
    assert_eq!(
        names(&d.join("quiet/app")),
        ["0.log"],
        "a small log is left alone"
    );

    // The runtime refuses to reopen: the file is put back, nothing is lost.
    append(&live, 0..100);
    let before = fs::read(&live).expect("read");
    sim.fail_next("ReopenContainerLog", 1, Code::Unknown, "reopen refused");
    let round = m.round().await;
    assert_eq!((round.rotated, round.failed), (0, 1));
    assert_eq!(fs::read(&live).expect("back"), before);
    assert_eq!(m.round().await.rotated, 1, "the next round rotates it");

    // The live file lost (an agent killed between rename and reopen): given back.
    fs::remove_file(&live).expect("lose it");
    assert!(
        !m.container(&id).await.expect("recover"),
        "empty: not rotated"
    );
    assert!(live.exists());

    // Another agent's containers (a shared runtime) are not looked at.
    let others = manager(
        &sim,
        Policy {
            max_bytes: 1,
            max_files: 2,
        },
    )
    .with_selector([("wasmlet.io/node".to_owned(), "elsewhere".to_owned())].into());
    assert_eq!(others.round().await.checked, 0);

    // A stopped container's log is not the manager's business.
    append(&live, 0..200);
    sim.stop_container(&id, 0).await.expect("stop");
    let round = m.round().await;
    assert_eq!((round.checked, round.rotated), (1, 0));
}

/// By owner: containers without the owner label (the kubelet's, adopted) are an agent's
/// too; another node's are not.
#[tokio::test]
async fn containers_without_an_owner_label_are_the_agents_too() {
    let d = dir("owner");
    let sim = Arc::new(Simulator::new());
    running(&sim, &d.join("unlabelled"), "unlabelled").await;
    let config = fixtures::pod("node-b");
    let sandbox = sim
        .run_pod_sandbox(config.clone(), "")
        .await
        .expect("sandbox");
    let mut c = fixtures::container("app", &["sleep", "3600"]);
    c.labels.insert("wasmlet.io/node".into(), "node-b".into());
    let other = sim
        .create_container(&sandbox, c, config)
        .await
        .expect("create");
    sim.start_container(&other).await.expect("start");
    let policy = || Policy {
        max_bytes: 1,
        max_files: 2,
    };
    let node_a = manager(&sim, policy()).with_owner("wasmlet.io/node", "node-a");
    assert_eq!(node_a.round().await.checked, 1, "the one without the label");
    let node_b = manager(&sim, policy()).with_owner("wasmlet.io/node", "node-b");
    assert_eq!(node_b.round().await.checked, 2);
}

struct Collect {
    out: Vec<u8>,
    running: Arc<AtomicBool>,
}

impl Sink for Collect {
    fn write(&mut self, chunk: Vec<u8>) -> bool {
        self.out.extend_from_slice(&chunk);
        true
    }
    fn closed(&self) -> bool {
        false
    }
    fn running(&self) -> bool {
        self.running.load(Ordering::SeqCst)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_reads_every_line_once_across_rotations() {
    let d = dir("follow");
    let sim = Arc::new(Simulator::new());
    let (_, live) = running(&sim, &d.join("pod"), "writer").await;
    append(&live, 0..1);
    let running_flag = Arc::new(AtomicBool::new(true));
    let follower = {
        let live = live.clone();
        let running = running_flag.clone();
        std::thread::spawn(move || {
            let mut sink = Collect {
                out: Vec::new(),
                running,
            };
            let opts = LogOptions {
                follow: true,
                ..LogOptions::default()
            };
            read::read(&live, File::open(&live).expect("open"), &opts, &mut sink).expect("read");
            sink.out
        })
    };
    let m = manager(
        &sim,
        Policy {
            max_bytes: 2048,
            max_files: 2,
        },
    );
    let mut next = 1;
    for _ in 0..6 {
        append(&live, next..next + 50);
        next += 50;
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(m.round().await.rotated, 1);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    append(&live, next..next + 1);
    next += 1;
    tokio::time::sleep(Duration::from_millis(200)).await;
    running_flag.store(false, Ordering::SeqCst);
    let out = tokio::task::spawn_blocking(move || follower.join().expect("follower"))
        .await
        .expect("join");
    let expected: String = (0..next).map(|i| format!("line {i:04}\n")).collect();
    assert_eq!(String::from_utf8_lossy(&out), expected);
}
