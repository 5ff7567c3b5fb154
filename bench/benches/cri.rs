//! CRI client overhead against the simulator.
//!
//! `cargo bench -p wasmlet-bench --bench cri` (or `cargo xtask bench cri`).
//!
//! The simulator is served over gRPC on a unix socket and driven by `CriClient`, as the
//! agent drives containerd; the same calls made in-process (no gRPC) show how much of
//! each call is the wire and the client rather than the runtime.

use std::collections::BTreeMap;
use std::time::Duration;

use wasmlet_bench::{Budget, Samples, header, row, time_async};
use wasmlet_cri::proto::*;
use wasmlet_cri::{ClientOptions, CriClient, CriRuntime};
use wasmlet_cri_sim::{SimServer, Simulator, fixtures};

/// A busybox container named `name` that sleeps until stopped.
fn sleeper(name: &str) -> ContainerConfig {
    fixtures::container(name, &["sleep", "infinity"])
}

/// Creates `pods` sandboxes with one running container each, in-process.
async fn populate(sim: &Simulator, pods: usize) {
    for i in 0..pods {
        let config = PodSandboxConfig {
            labels: BTreeMap::from([("io.kubernetes.pod.uid".to_string(), format!("uid-pod-{i}"))]),
            ..fixtures::pod(&format!("pod-{i}"))
        };
        let sandbox = sim.run_pod_sandbox(config, "").await.expect("sandbox");
        let container = ContainerConfig {
            labels: BTreeMap::from([
                ("io.kubernetes.pod.uid".to_string(), format!("uid-pod-{i}")),
                (
                    "io.kubernetes.container.name".to_string(),
                    "app".to_string(),
                ),
            ]),
            annotations: BTreeMap::from([(
                "io.kubernetes.container.hash".to_string(),
                "1a2b3c4d".to_string(),
            )]),
            ..sleeper("app")
        };
        let id = sim
            .create_container(&sandbox, container, PodSandboxConfig::default())
            .await
            .expect("container");
        sim.start_container(&id).await.expect("start");
    }
}

struct Served {
    sim: Simulator,
    client: CriClient,
    _server: SimServer,
    _dir: Dir,
}

struct Dir(std::path::PathBuf);

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

async fn served(pods: usize) -> Served {
    let dir = std::env::temp_dir().join(format!("wasmlet-bench-{}-{pods}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let sim = Simulator::new();
    populate(&sim, pods).await;
    let server = SimServer::serve(sim.clone(), &dir.join("cri.sock"))
        .await
        .expect("serve");
    let client = CriClient::connect_with(&server.endpoint(), ClientOptions::default())
        .await
        .expect("connect");
    Served {
        sim,
        client,
        _server: server,
        _dir: Dir(dir),
    }
}

struct ListCases {
    grpc: Samples,
    sandboxes: Samples,
    inproc: Samples,
    relist: Samples,
    server_side: Samples,
}

async fn list_cases(pods: usize, budget: Budget) -> ListCases {
    let s = served(pods).await;
    let grpc = time_async(budget, || async {
        let cs = s.client.list_containers(None).await.expect("list");
        assert_eq!(cs.len(), pods);
    })
    .await;
    let sandboxes = time_async(budget, || async {
        let ps = s.client.list_pod_sandbox(None).await.expect("list pods");
        assert_eq!(ps.len(), pods);
    })
    .await;
    let inproc = time_async(budget, || async {
        let cs = CriRuntime::list_containers(&s.sim, None)
            .await
            .expect("list");
        assert_eq!(cs.len(), pods);
    })
    .await;
    // The relist a PLEG does: both lists, back to back.
    let relist = time_async(budget, || async {
        let (ps, cs) = tokio::join!(
            s.client.list_pod_sandbox(None),
            s.client.list_containers(None)
        );
        assert_eq!(
            (ps.expect("pods").len(), cs.expect("containers").len()),
            (pods, pods)
        );
    })
    .await;
    // The simulator's own share of a gRPC ListContainers: filter and splice the cached
    // encodings (what the server does before the bytes hit the socket).
    let server_side = time_async(budget, || async {
        let list = s.sim.list_containers_encoded(None).await.expect("list");
        assert_eq!(list.parts.len(), pods);
    })
    .await;
    ListCases {
        grpc,
        sandboxes,
        inproc,
        relist,
        server_side,
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let budget = Budget::from_args(2000);
    sequential_calls(budget).await;
    listings(budget).await;
    concurrent_lists().await;
}

/// One call at a time against a simulator holding 1,000 containers.
async fn sequential_calls(budget: Budget) {
    header("CRI client → wasmlet-cri-sim over a unix socket (sequential calls)");
    let s = served(1000).await;
    let id = s.client.list_containers(None).await.expect("list")[0]
        .id
        .clone();
    row(
        "Version",
        &time_async(budget, || async {
            s.client.version().await.map(drop).expect("version")
        })
        .await,
    );
    row(
        "ContainerStatus",
        &time_async(budget, || async {
            s.client
                .container_status(&id, false)
                .await
                .map(drop)
                .expect("status")
        })
        .await,
    );
    let filter = ContainerFilter {
        id: id.clone(),
        ..Default::default()
    };
    row(
        "ListContainers, id filter (1,000 held)",
        &time_async(budget, || async {
            let cs = s
                .client
                .list_containers(Some(filter.clone()))
                .await
                .expect("list");
            assert_eq!(cs.len(), 1);
        })
        .await,
    );
    row(
        "pod lifecycle: Run+Create+Start+Stop+Remove",
        &time_async(Budget::from_args(500), || async {
            let sandbox_config = fixtures::pod("cycle");
            let pod = s
                .client
                .run_pod_sandbox(sandbox_config.clone(), "")
                .await
                .expect("run");
            let c = s
                .client
                .create_container(&pod, sleeper("c"), sandbox_config)
                .await
                .expect("create");
            s.client.start_container(&c).await.expect("start");
            s.client.stop_pod_sandbox(&pod).await.expect("stop");
            s.client.remove_pod_sandbox(&pod).await.expect("remove");
        })
        .await,
    );
}

/// ListContainers, ListPodSandbox and a relist over 110, 1,000 and 10,000 pods.
async fn listings(budget: Budget) {
    let big = Budget::from_args(200);
    for pods in [110, 1000, 10_000] {
        let b = if pods >= 10_000 { big } else { budget };
        let c = list_cases(pods, b).await;
        header(&format!("Listing {pods} containers in {pods} sandboxes"));
        row(&format!("ListContainers over gRPC ({pods})"), &c.grpc);
        row(&format!("ListPodSandbox over gRPC ({pods})"), &c.sandboxes);
        row(
            &format!("relist: both lists concurrently ({pods})"),
            &c.relist,
        );
        row(
            &format!("simulator's own work per ListContainers ({pods})"),
            &c.server_side,
        );
        row(
            &format!("ListContainers in-process as CriRuntime, no gRPC ({pods})"),
            &c.inproc,
        );
    }
}

/// Throughput with calls in flight at once, as several pod workers make them.
async fn concurrent_lists() {
    let s = served(1000).await;
    let concurrency = 8;
    let rounds = if std::env::args().any(|a| a == "--smoke") {
        2
    } else {
        100
    };
    let started = std::time::Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..concurrency {
        let client = s.client.clone();
        tasks.push(tokio::spawn(async move {
            for _ in 0..rounds {
                client.list_containers(None).await.expect("list");
            }
        }));
    }
    for t in tasks {
        t.await.expect("task");
    }
    let took = started.elapsed().max(Duration::from_nanos(1));
    println!(
        "\nListContainers (1,000) with {concurrency} callers at once: {:.0} calls/s",
        (concurrency * rounds) as f64 / took.as_secs_f64()
    );
}
