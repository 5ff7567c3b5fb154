//! Node resources: what one usage sample of 110 pods costs, what serving it costs, and
//! one eviction decision.
//!
//! The pods' cgroups are real: as root on a cgroup v1 machine the bench makes 110 pod
//! cgroups with two container cgroups each under `/sys/fs/cgroup/{memory,cpuacct,pids}/
//! wasmlet-bench` (the kernel makes their files; the collector reads them as it reads a
//! node's), each pod with a log directory; elsewhere, the same layout as plain files in
//! a temporary directory (said in the output). The runtime is the in-process simulator
//! (its `ListContainerStats` and `ImageFsInfo`).
//!
//! `cargo bench -p wasmlet-bench --bench stats`

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use wasmlet_bench::{Budget, cpu_time, header, row, time_async};
use wasmlet_cri_sim::Simulator;
use wasmlet_stats::cgroup::{Cgroups, ProcessCgroups};
use wasmlet_stats::node::NodeFiles;
use wasmlet_stats::{
    Collector, CollectorSettings, ContainerRef, PodInfo, PodLister, Sample, SystemContainer,
};

const PODS: usize = 110;

struct Pods(Vec<PodInfo>);

impl PodLister for Pods {
    fn pods(&self) -> Vec<PodInfo> {
        self.0.clone()
    }
}

/// The cgroup tree: real cgroups where possible. Returns the filesystem, whether it
/// is the kernel's, and the directories to remove afterwards (deepest first).
fn cgroups(tmp: &Path) -> (Cgroups, bool, Vec<PathBuf>) {
    let real = Path::new("/sys/fs/cgroup");
    let mut made = Vec::new();
    let try_real = real.join("memory/memory.stat").exists()
        && std::fs::create_dir_all(real.join("memory/wasmlet-bench")).is_ok();
    if try_real {
        for controller in ["memory", "cpuacct", "pids"] {
            for p in 0..PODS {
                let pod = real.join(controller).join(format!("wasmlet-bench/pod{p}"));
                for c in 0..2 {
                    let dir = pod.join(format!("c{p}-{c}"));
                    if std::fs::create_dir_all(&dir).is_ok() {
                        made.push(dir);
                    }
                }
                made.push(pod);
            }
            made.push(real.join(controller).join("wasmlet-bench"));
        }
        return (Cgroups::at(real, false), true, made);
    }
    let stat = "cache 0\nrss 1048576\ninactive_file 0\ntotal_cache 4194304\ntotal_rss 1048576\n\
                total_inactive_file 1048576\ntotal_pgfault 100\ntotal_pgmajfault 0\n";
    for p in 0..PODS {
        let pod = format!("wasmlet-bench/pod{p}");
        let mut dirs = vec![pod.clone()];
        dirs.extend((0..2).map(|c| format!("{pod}/c{p}-{c}")));
        for d in dirs {
            let m = tmp.join("memory").join(&d);
            std::fs::create_dir_all(&m).expect("mkdir");
            std::fs::write(m.join("memory.usage_in_bytes"), "5242880\n").expect("write");
            std::fs::write(m.join("memory.stat"), stat).expect("write");
            std::fs::write(m.join("memory.limit_in_bytes"), "9223372036854771712\n")
                .expect("write");
            std::fs::write(m.join("cgroup.procs"), "").expect("write");
            let c = tmp.join("cpuacct").join(&d);
            std::fs::create_dir_all(&c).expect("mkdir");
            std::fs::write(c.join("cpuacct.usage"), "123456789\n").expect("write");
            let pids = tmp.join("pids").join(&d);
            std::fs::create_dir_all(&pids).expect("mkdir");
            std::fs::write(pids.join("pids.current"), "1\n").expect("write");
        }
    }
    (Cgroups::at(tmp, false), false, made)
}

/// The bench's pods: two containers each, a 4 KiB log per container under `tmp`, the
/// cgroup `/wasmlet-bench/pod<p>`.
fn bench_pods(tmp: &std::path::Path) -> Vec<PodInfo> {
    (0..PODS)
        .map(|p| {
            let log_dir = tmp.join(format!("logs/default_pod{p}_u{p}"));
            for c in 0..2 {
                let dir = log_dir.join(format!("c{c}"));
                std::fs::create_dir_all(&dir).expect("log dir");
                std::fs::write(dir.join("0.log"), vec![b'x'; 4096]).expect("log");
            }
            PodInfo {
                uid: format!("u{p}"),
                name: format!("pod{p}"),
                namespace: "default".into(),
                start_time: 1,
                containers: (0..2)
                    .map(|c| ContainerRef {
                        id: format!("c{p}-{c}"),
                        name: format!("c{c}"),
                        started_at: 1,
                        image: "localhost/busybox:latest".into(),
                    })
                    .collect(),
                log_dir,
                empty_dirs: Vec::new(),
                cgroup: Some(format!("/wasmlet-bench/pod{p}")),
            }
        })
        .collect()
}

/// A collector of `pods` reading cgroups `cg`, with `/wasmlet-bench` as the pods' parent.
fn collector(tmp: &std::path::Path, cg: Cgroups, pods: Vec<PodInfo>) -> Collector<Simulator> {
    Collector::new(
        Arc::new(Simulator::new()),
        Arc::new(Pods(pods)),
        CollectorSettings {
            node_name: "bench".into(),
            root_dir: tmp.to_path_buf(),
            files: NodeFiles {
                cgroups: Some(cg),
                ..NodeFiles::default()
            },
            // The parent of the pod cgroups, as the agent reports it.
            system_containers: vec![SystemContainer {
                name: "pods".into(),
                cgroups: ProcessCgroups {
                    cpu: Some("/wasmlet-bench".into()),
                    memory: Some("/wasmlet-bench".into()),
                },
            }],
        },
    )
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let tmp = std::env::temp_dir().join(format!("wasmlet-bench-stats-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(&tmp).expect("tmp");
    let (cg, real, made) = cgroups(&tmp.join("cgroup"));
    let collector = collector(&tmp, cg, bench_pods(&tmp));
    let budget = Budget::from_args(200);
    println!(
        "{PODS} pods × 2 containers, cgroups: {}",
        if real {
            "the kernel's (cgroup v1)"
        } else {
            "plain files in a temporary directory"
        }
    );
    header("stats");
    let cpu0 = cpu_time();
    let wall0 = Instant::now();
    let collector = Arc::new(tokio::sync::Mutex::new(collector));
    let n = (budget.warmup + budget.iterations) as u32;
    let samples = time_async(budget, || {
        let c = collector.clone();
        async move {
            std::hint::black_box(c.lock().await.collect().await);
        }
    })
    .await;
    let cpu = cpu_time().saturating_sub(cpu0);
    let wall = wall0.elapsed();
    row("one sample, 110 pods", &samples);
    let sample = collector.lock().await.collect().await;
    bodies_and_eviction(budget, &sample).await;
    println!();
    println!(
        "CPU per sample: {:.2} ms ({} samples, {:.2} ms wall each)",
        cpu.as_secs_f64() * 1e3 / f64::from(n.max(1)),
        n,
        wall.as_secs_f64() * 1e3 / f64::from(n.max(1))
    );
    for dir in made {
        let _ = std::fs::remove_dir(&dir);
    }
    let _ = std::fs::remove_dir_all(&tmp);
}

/// What is made of one sample: the three endpoints' bodies and an eviction decision.
async fn bodies_and_eviction(budget: Budget, s: &Sample) {
    let serve = time_async(budget, || async move {
        std::hint::black_box(serde_json::to_vec(&s.summary).expect("json"));
    })
    .await;
    row("/stats/summary body, 110 pods", &serve);
    let resource = time_async(budget, || async move {
        std::hint::black_box(wasmlet_stats::metrics::resource(Some(s)));
    })
    .await;
    row("/metrics/resource body, 110 pods", &resource);
    let cadvisor = time_async(budget, || async move {
        std::hint::black_box(wasmlet_stats::metrics::cadvisor(Some(s)));
    })
    .await;
    row("/metrics/cadvisor body, 110 pods", &cadvisor);
    let facts: Vec<wasmlet_stats::eviction::PodFacts> = (0..PODS)
        .map(|p| wasmlet_stats::eviction::PodFacts {
            uid: format!("u{p}"),
            name: format!("pod{p}"),
            namespace: "default".into(),
            ..Default::default()
        })
        .collect();
    let mut manager = wasmlet_stats::eviction::Manager::new(Default::default());
    let decide = time_async(budget, || {
        std::hint::black_box(manager.synchronize(tokio::time::Instant::now(), &s.summary, &facts));
        async {}
    })
    .await;
    row("eviction decision, 110 pods", &decide);
}
