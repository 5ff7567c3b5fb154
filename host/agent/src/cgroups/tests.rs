use std::path::Path;
use std::sync::Arc;

use super::*;

fn tempdir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("wasmlet-cgroups-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("mkdir");
    dir
}

fn v1_root(name: &str) -> PathBuf {
    let root = tempdir(name);
    for c in ["cpu", "memory", "pids", "cpuset"] {
        std::fs::create_dir_all(root.join(c)).expect("mkdir");
    }
    root
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn pod(uid: &str, resources: &str) -> k8s::Pod {
    serde_yaml_ng::from_str(&format!(
        "metadata: {{uid: {uid}, name: {uid}, namespace: default}}\n\
         spec:\n  containers:\n  - name: a\n    resources: {resources}\n"
    ))
    .expect("pod")
}

fn setup(driver: Driver) -> Setup {
    Setup {
        driver,
        cgroup_root: "/".into(),
        pids_limit: Some(1024),
        capacity: (2000, 4 << 30),
        reserved: (500, 1 << 30),
        enforce_pods: true,
        reserved_cgroups: Vec::new(),
        kubepods_pids: Some(30_000),
        hugepages: vec![hugetlb::PageSize::from_sysfs("hugepages-2048kB").expect("size")],
        cpus: Some("0-1".into()),
    }
}

/// The tree of [`setup`] with the cgroupfs driver on `root`, laid out as v1 or v2.
async fn tree(root: &Path, v2: bool) -> PodCgroups {
    PodCgroups::with(CgroupFs::at(root, v2), setup(Driver::Cgroupfs), None)
        .await
        .expect("tree")
}

#[tokio::test]
async fn the_tree_carries_allocatable_and_each_class_goes_to_its_tier() {
    let root = v1_root("tree");
    let cg = tree(&root, false).await;
    assert_eq!(read(&root.join("cpu/kubepods/cpu.shares")), "1536");
    assert_eq!(
        read(&root.join("memory/kubepods/memory.limit_in_bytes")),
        (3u64 << 30).to_string()
    );
    assert_eq!(read(&root.join("cpu/kubepods/besteffort/cpu.shares")), "2");
    assert_eq!(read(&root.join("cpu/kubepods/burstable/cpu.shares")), "2");
    // The node's pid capacity less the pid reservation, as the kubelet limits kubepods.
    assert_eq!(read(&root.join("pids/kubepods/pids.max")), "30000");

    let g = pod("g", "{limits: {cpu: '1', memory: 128Mi}}");
    let b = pod("b", "{requests: {cpu: 500m}}");
    let e = pod("e", "{}");
    for p in [&g, &b, &e] {
        cg.ensure(p).await.expect("ensure");
    }
    assert_eq!(cg.cgroup_parent(&g), "/kubepods/podg");
    assert_eq!(cg.cgroup_parent(&b), "/kubepods/burstable/podb");
    assert_eq!(cg.cgroup_parent(&e), "/kubepods/besteffort/pode");
    let cpu = |p: &str, f: &str| read(&root.join("cpu").join(p).join(f));
    assert_eq!(cpu("kubepods/podg", "cpu.shares"), "1024");
    assert_eq!(cpu("kubepods/podg", "cpu.cfs_quota_us"), "100000");
    assert_eq!(
        read(&root.join("memory/kubepods/podg/memory.limit_in_bytes")),
        (128u64 << 20).to_string()
    );
    assert_eq!(read(&root.join("pids/kubepods/podg/pids.max")), "1024");
    assert_eq!(cpu("kubepods/burstable/podb", "cpu.shares"), "512");
    assert_eq!(cpu("kubepods/burstable/podb", "cpu.cfs_quota_us"), "-1");
    assert_eq!(
        read(&root.join("memory/kubepods/burstable/podb/memory.limit_in_bytes")),
        "-1"
    );
    assert_eq!(cpu("kubepods/besteffort/pode", "cpu.shares"), "2");
    // The burstable tier weighs what its pods requested.
    assert_eq!(cpu("kubepods/burstable", "cpu.shares"), "512");
    let b2 = pod("b2", "{requests: {cpu: 250m, memory: 1Mi}}");
    cg.ensure(&b2).await.expect("ensure");
    assert_eq!(cpu("kubepods/burstable", "cpu.shares"), "768");
    assert_eq!(cg.pods(), ["b", "b2", "e", "g"]);
    assert_eq!(
        cg.pod_cgroup("b").as_deref(),
        Some("/kubepods/burstable/podb")
    );
    assert_eq!(cg.root_cgroup(), "/kubepods");

    assert!(cg.remove("b").await.is_empty());
    assert!(!root.join("cpu/kubepods/burstable/podb").exists());
    assert_eq!(cpu("kubepods/burstable", "cpu.shares"), "256");
    // The periodic update: only the active pods count.
    cg.reconcile(&[Arc::new(g.clone())])
        .await
        .expect("reconcile");
    assert_eq!(cpu("kubepods/burstable", "cpu.shares"), "2");
    let _ = std::fs::remove_dir_all(&root);
}

#[tokio::test]
async fn a_refused_allocatable_limit_is_said_and_the_tree_is_still_made() {
    let root = v1_root("refused");
    // The kernel refuses a limit below the pods' usage; here the file cannot be written.
    std::fs::create_dir_all(root.join("memory/kubepods/memory.limit_in_bytes")).expect("mkdir");
    // Made without the limit.
    let cg = tree(&root, false).await;
    assert_eq!(read(&root.join("cpu/kubepods/cpu.shares")), "1536");
    cg.ensure(&pod("e", "{}")).await.expect("pods still go in");
    let _ = std::fs::remove_dir_all(&root);
}

#[tokio::test]
async fn pods_of_an_earlier_wasmlet_are_found_and_removed_where_they_run() {
    let root = v1_root("legacy");
    // What the pod-level cgroups of an earlier version left: /wasmlet/pod<uid> (the
    // runtime made the container cgroups below it in every hierarchy).
    for c in ["cpu", "memory", "pids", "cpuset"] {
        std::fs::create_dir_all(root.join(c).join("wasmlet/podold/c1")).expect("mkdir");
    }
    let cg = tree(&root, false).await;
    cg.ensure(&pod("new", "{}")).await.expect("ensure");
    assert_eq!(cg.pods(), ["new", "old"]);
    assert_eq!(cg.pod_cgroup("old").as_deref(), Some("/wasmlet/podold"));
    assert!(cg.remove("old").await.is_empty());
    for c in ["cpu", "memory", "pids", "cpuset"] {
        assert!(!root.join(c).join("wasmlet/podold").exists(), "{c}");
    }
    assert_eq!(cg.pods(), ["new"]);
    let _ = std::fs::remove_dir_all(&root);
}

#[tokio::test]
async fn a_reservation_is_enforced_on_its_cgroup_which_must_exist() {
    let root = v1_root("reserved");
    let mut s = setup(Driver::Cgroupfs);
    s.reserved_cgroups = vec![ReservedCgroup {
        field: "systemReservedCgroup",
        cgroup: "/system.slice".into(),
        cpu_milli: 500,
        memory: 1 << 30,
    }];
    let err = PodCgroups::with(CgroupFs::at(&root, false), s.clone(), None)
        .await
        .expect_err("no such cgroup");
    let StartError::Refused(err) = err else {
        panic!("refused, not {err:?}")
    };
    assert!(
        err.starts_with("systemReservedCgroup: \"/system.slice\": the cgroup does not exist"),
        "{err}"
    );
    for c in ["cpu", "memory"] {
        std::fs::create_dir_all(root.join(c).join("system.slice")).expect("mkdir");
    }
    PodCgroups::with(CgroupFs::at(&root, false), s, None)
        .await
        .expect("tree");
    assert_eq!(read(&root.join("cpu/system.slice/cpu.shares")), "512");
    assert_eq!(
        read(&root.join("memory/system.slice/memory.limit_in_bytes")),
        (1u64 << 30).to_string()
    );
    let _ = std::fs::remove_dir_all(&root);
}

#[tokio::test]
async fn cgroup_v2_gets_weights_and_the_unified_limits() {
    let root = tempdir("v2");
    // The root's controllers as a Debian 12 VM's kernel lists them (hugetlb among them).
    std::fs::write(
        root.join("cgroup.controllers"),
        "cpuset cpu io memory hugetlb pids rdma misc\n",
    )
    .expect("write");
    let cg = tree(&root, true).await;
    // All the node's CPUs (the `none` CPU manager policy), as the kubelet writes them.
    assert_eq!(read(&root.join("kubepods/cpuset.cpus")), "0-1");
    // Huge pages: unbounded in kubepods (also the Guaranteed tier) and the tiers, as the
    // kubelet's QoS update leaves them.
    for dir in ["kubepods", "kubepods/burstable", "kubepods/besteffort"] {
        assert_eq!(
            read(&root.join(dir).join("hugetlb.2MB.max")),
            "4611686018427387904",
            "{dir}"
        );
    }
    assert_eq!(read(&root.join("kubepods/cpu.weight")), "59");
    assert_eq!(
        read(&root.join("kubepods/memory.max")),
        (3u64 << 30).to_string()
    );
    assert_eq!(read(&root.join("kubepods/besteffort/cpu.weight")), "1");
    cg.ensure(&pod("g", "{limits: {cpu: 250m, memory: 64Mi}}"))
        .await
        .expect("ensure");
    let pod_dir = root.join("kubepods/podg");
    assert_eq!(read(&pod_dir.join("cpu.weight")), "10");
    assert_eq!(read(&pod_dir.join("cpu.max")), "25000 100000");
    assert_eq!(read(&pod_dir.join("memory.max")), (64u64 << 20).to_string());
    assert_eq!(read(&pod_dir.join("pids.max")), "1024");
    assert_eq!(
        read(&pod_dir.join("hugetlb.2MB.max")),
        "0",
        "none asked for"
    );
    let _ = std::fs::remove_dir_all(&root);
}

mod hierarchies;

mod systemd_bus {
    //! The systemd driver's calls, on a D-Bus connection to a stand-in for systemd's
    //! manager that records them and makes the slice's directory as systemd would.

    use std::sync::Mutex as StdMutex;

    use zbus::zvariant::{OwnedObjectPath, OwnedValue};

    use super::*;

    /// One call: the method, its unit and mode, the properties (name, value as text).
    type Call = (String, String, Vec<(String, String)>);

    #[derive(Default)]
    pub(super) struct Calls(Vec<Call>);

    struct Manager {
        root: PathBuf,
        calls: Arc<StdMutex<Calls>>,
    }

    fn record(props: &[(String, OwnedValue)]) -> Vec<(String, String)> {
        props
            .iter()
            .map(|(k, v)| (k.clone(), format!("{:?}", **v)))
            .collect()
    }

    /// The slice path systemd makes for unit `kubepods-burstable-pod….slice`.
    fn expand(unit: &str) -> String {
        let stem = unit.trim_end_matches(".slice");
        let parts: Vec<&str> = stem.split('-').collect();
        (1..=parts.len())
            .map(|i| format!("/{}.slice", parts[..i].join("-")))
            .collect()
    }

    #[zbus::interface(name = "org.freedesktop.systemd1.Manager")]
    impl Manager {
        fn start_transient_unit(
            &self,
            name: String,
            mode: String,
            properties: Vec<(String, OwnedValue)>,
            _aux: Vec<(String, Vec<(String, OwnedValue)>)>,
        ) -> OwnedObjectPath {
            for c in ["cpu", "memory", "pids"] {
                let dir = self
                    .root
                    .join(c)
                    .join(expand(&name).trim_start_matches('/'));
                std::fs::create_dir_all(dir).expect("mkdir");
            }
            let mut calls = self.calls.lock().expect("calls");
            calls.0.push((
                "start".into(),
                format!("{name} {mode}"),
                record(&properties),
            ));
            OwnedObjectPath::try_from("/org/freedesktop/systemd1/job/1").expect("path")
        }

        fn set_unit_properties(
            &self,
            name: String,
            runtime: bool,
            properties: Vec<(String, OwnedValue)>,
        ) {
            let mut calls = self.calls.lock().expect("calls");
            calls.0.push((
                "set".into(),
                format!("{name} {runtime}"),
                record(&properties),
            ));
        }

        fn stop_unit(&self, name: String, mode: String) -> OwnedObjectPath {
            for c in ["cpu", "memory", "pids"] {
                let dir = self
                    .root
                    .join(c)
                    .join(expand(&name).trim_start_matches('/'));
                let _ = std::fs::remove_dir(dir);
            }
            let mut calls = self.calls.lock().expect("calls");
            calls
                .0
                .push(("stop".into(), format!("{name} {mode}"), Vec::new()));
            OwnedObjectPath::try_from("/org/freedesktop/systemd1/job/2").expect("path")
        }

        fn reset_failed_unit(&self, _name: String) {}

        #[zbus(property)]
        fn version(&self) -> String {
            "252".into()
        }
    }

    /// The stand-in's write half: every message it sends carries systemd's name as its
    /// sender, as systemd's own messages on its private socket do.
    #[derive(Debug)]
    struct AsSystemdSends(tokio::net::unix::OwnedWriteHalf);

    #[async_trait::async_trait]
    impl zbus::connection::socket::WriteHalf for AsSystemdSends {
        async fn sendmsg(
            &mut self,
            buffer: &[u8],
            fds: &[std::os::fd::BorrowedFd<'_>],
        ) -> std::io::Result<usize> {
            self.0.sendmsg(buffer, fds).await
        }

        async fn close(&mut self) -> std::io::Result<()> {
            self.0.close().await
        }

        async fn send_message(&mut self, msg: &zbus::Message) -> zbus::Result<()> {
            let bytes =
                super::super::private_bus::with_sender(msg.data(), "org.freedesktop.systemd1");
            let mut sent = 0;
            while sent < bytes.len() {
                sent += self.0.sendmsg(&bytes[sent..], &[]).await?;
            }
            Ok(())
        }
    }

    /// systemd's private socket: a peer-to-peer connection whose every message names
    /// `org.freedesktop.systemd1` as its sender (what zbus alone cannot read). The
    /// driver's calls go through and their answers come back.
    #[tokio::test]
    async fn systemds_private_socket_is_talked_to_as_systemd_answers_there() {
        let root = v1_root("systemd-private");
        let calls = Arc::new(StdMutex::new(Calls::default()));
        let (a, b) = tokio::net::UnixStream::pair().expect("pair");
        let (read, write) = a.into_split();
        let split = zbus::connection::socket::Split::<
            Box<dyn zbus::connection::socket::ReadHalf>,
            Box<dyn zbus::connection::socket::WriteHalf>,
        >::new(Box::new(read), Box::new(AsSystemdSends(write)));
        let manager = Manager {
            root: root.clone(),
            calls: calls.clone(),
        };
        let server = zbus::connection::Builder::socket(split)
            .server(zbus::Guid::generate())
            .expect("server")
            .p2p()
            .serve_at("/org/freedesktop/systemd1", manager)
            .expect("serve")
            .build();
        let client = tokio::time::timeout(
            std::time::Duration::from_secs(10),
            Systemd::private_stream(b),
        );
        let (server, client) = tokio::join!(server, client);
        let _server = server.expect("server");
        let systemd = client
            .expect("answered in time")
            .expect("systemd answers on its private socket");
        let name = CgroupName::parse(Driver::Cgroupfs, "/kubepods/burstable");
        systemd
            .ensure(&name, &Settings::default(), false)
            .await
            .expect("started");
        systemd.stop(&name).await.expect("stopped");
        let seen: Vec<String> = calls
            .lock()
            .expect("calls")
            .0
            .iter()
            .map(|c| format!("{} {}", c.0, c.1))
            .collect();
        assert_eq!(
            seen,
            [
                "start kubepods-burstable.slice replace",
                "stop kubepods-burstable.slice replace"
            ]
        );
        let _ = std::fs::remove_dir_all(&root);
    }

    /// The systemd driver on a D-Bus connection to a [`Manager`] stand-in on `root`
    /// recording into `calls`, and the stand-in's end (it answers while it is kept).
    pub(super) async fn connected(
        root: &Path,
        calls: &Arc<StdMutex<Calls>>,
    ) -> (Systemd, zbus::Connection) {
        let (a, b) = tokio::net::UnixStream::pair().expect("pair");
        let manager = Manager {
            root: root.to_path_buf(),
            calls: calls.clone(),
        };
        let server = zbus::connection::Builder::unix_stream(a)
            .server(zbus::Guid::generate())
            .expect("server")
            .p2p()
            .serve_at("/org/freedesktop/systemd1", manager)
            .expect("serve")
            .build();
        let client = zbus::connection::Builder::unix_stream(b).p2p().build();
        let (server, client) = tokio::join!(server, client);
        let systemd = Systemd::over(client.expect("client"))
            .await
            .expect("systemd answers");
        (systemd, server.expect("server"))
    }

    /// The tree of [`setup`] under the systemd driver on a v1 layout at a temporary
    /// `name`, made through the stand-in: its root, the calls it records, the tree, and
    /// the stand-in's end of the connection.
    async fn systemd_tree(
        name: &str,
    ) -> (PathBuf, Arc<StdMutex<Calls>>, PodCgroups, zbus::Connection) {
        let root = v1_root(name);
        let calls = Arc::new(StdMutex::new(Calls::default()));
        let (systemd, server) = connected(&root, &calls).await;
        let cg = PodCgroups::with(
            CgroupFs::at(&root, false),
            setup(Driver::Systemd),
            Some(systemd),
        )
        .await
        .expect("tree");
        (root, calls, cg, server)
    }

    #[tokio::test]
    async fn pods_starting_together_leave_the_burstable_tier_their_whole_sum() {
        let (root, calls, cg, _server) = systemd_tree("systemd-race").await;
        let (a, b, c) = (
            pod(
                "aaaaaaaa-0000-0000-0000-000000000001",
                "{requests: {cpu: 100m}}",
            ),
            pod(
                "aaaaaaaa-0000-0000-0000-000000000002",
                "{requests: {cpu: 50m}}",
            ),
            pod(
                "aaaaaaaa-0000-0000-0000-000000000003",
                "{requests: {cpu: 100m}}",
            ),
        );
        // Each start awaits systemd between its sum and its write: without the tier's
        // lock an earlier, smaller sum could be written last.
        let (ra, rb, rc) = tokio::join!(cg.ensure(&a), cg.ensure(&b), cg.ensure(&c));
        (ra.and(rb).and(rc)).expect("ensure");
        let seen = calls.lock().expect("calls").0.clone();
        let (_, _, last) = seen
            .iter()
            .rfind(|call| call.0 == "set" && call.1.starts_with("kubepods-burstable.slice"))
            .expect("the tier set");
        let shares = &last
            .iter()
            .find(|(k, _)| k == "CPUShares")
            .expect("shares")
            .1;
        // 250m: 256 shares.
        assert!(shares.contains("256"), "{shares}");
        let _ = std::fs::remove_dir_all(&root);
    }

    #[tokio::test]
    async fn slices_are_started_and_set_through_systemds_manager() {
        let (root, calls, cg, _server) = systemd_tree("systemd").await;
        let uid = "4b1e0c9a-6f2d-4c1b-9a3e-0f5d2c7b8e11";
        let b = pod(uid, "{requests: {cpu: 500m}, limits: {memory: 64Mi}}");
        cg.ensure(&b).await.expect("ensure");
        let unit = "kubepods-burstable-pod4b1e0c9a_6f2d_4c1b_9a3e_0f5d2c7b8e11.slice";
        assert_eq!(
            cg.cgroup_parent(&b),
            format!("/kubepods.slice/kubepods-burstable.slice/{unit}")
        );
        assert_eq!(cg.pods(), [uid]);
        let seen = calls.lock().expect("calls").0.clone();
        let starts: Vec<&str> = seen
            .iter()
            .filter(|c| c.0 == "start")
            .map(|c| c.1.as_str())
            .collect();
        assert_eq!(
            starts,
            [
                // Its shares, then its memory limit (which may be refused alone).
                "kubepods.slice replace",
                "kubepods.slice replace",
                "kubepods-burstable.slice replace",
                "kubepods-besteffort.slice replace",
                "kubepods-burstable.slice replace",
                &format!("{unit} replace"),
            ]
        );
        let (_, _, set) = seen
            .iter()
            .rfind(|c| c.0 == "set")
            .expect("the pod's resources set");
        let names: Vec<&str> = set.iter().map(|(k, _)| k.as_str()).collect();
        // No CPU limit: no quota and no period, as the kubelet gives systemd.
        assert_eq!(names, ["MemoryLimit", "CPUShares", "TasksMax"]);
        assert!(set[0].1.contains(&(64u64 << 20).to_string()), "{set:?}");
        assert!(set[1].1.contains("512"), "{set:?}");
        let (_, _, started) = seen
            .iter()
            .find(|c| c.0 == "start" && c.1.starts_with(unit))
            .expect("the pod's slice started");
        let wants = &started.iter().find(|(k, _)| k == "Wants").expect("Wants").1;
        assert!(wants.contains("kubepods-burstable.slice"), "{wants}");

        assert!(cg.remove(uid).await.is_empty());
        let stopped = calls
            .lock()
            .expect("calls")
            .0
            .iter()
            .any(|c| c.0 == "stop" && c.1 == format!("{unit} replace"));
        assert!(stopped);
        assert!(cg.pods().is_empty());
        let _ = std::fs::remove_dir_all(&root);
    }
}

/// Housekeeping judges cgroups against a snapshot of the pods, then removes them on a
/// task of its own: a pod that starts in between with an orphan's UID (a static pod
/// written again: its UID is its manifest's) keeps the cgroup it has just made.
#[tokio::test]
async fn an_orphan_claimed_by_a_pod_starting_is_not_removed() {
    let root = v1_root("claimed");
    let cg = tree(&root, false).await;
    // What an earlier run left: the pods' cgroups, and a container's below one.
    cg.ensure(&pod("again", "{}")).await.expect("ensure");
    cg.ensure(&pod("gone", "{}")).await.expect("ensure");
    let (again, gone) = (
        root.join("cpu/kubepods/besteffort/podagain"),
        root.join("cpu/kubepods/besteffort/podgone"),
    );
    std::fs::create_dir_all(again.join("c1")).expect("mkdir");
    let restarted = tree(&root, false).await;
    // Judged orphans while no pod is known, then "again" starts before the removal.
    assert_eq!(restarted.pods(), ["again", "gone"]);
    restarted.ensure(&pod("again", "{}")).await.expect("ensure");
    assert_eq!(restarted.remove_orphan("again").await, None);
    assert_eq!(restarted.remove_orphan("gone").await, Some(Vec::new()));
    assert!(
        again.join("c1").exists(),
        "the starting pod's cgroup was removed"
    );
    assert!(!gone.exists(), "the orphan's cgroup is still there");
    // Once the pod itself goes, its cgroup goes with it and is no one's claim.
    std::fs::remove_dir(again.join("c1")).expect("rmdir");
    assert!(restarted.remove("again").await.is_empty());
    assert!(!again.exists());
    let _ = std::fs::remove_dir_all(&root);
}

/// The tree the upstream kubelet made in a real cgroup v2 VM for the pods of
/// `bench/cgroupv2/pods` (`testdata/kubelet-v2-tree.tsv`), made again here on a
/// temporary tree with the same node and configuration: every file the kubelet wrote
/// holds the same value (a file the agent leaves at the kernel's default, where the
/// kubelet's value is that default, counts as the same).
#[tokio::test]
async fn the_v2_tree_is_the_kubelets_from_a_real_vm() {
    let root = tempdir("v2-vm");
    std::fs::write(
        root.join("cgroup.controllers"),
        "cpuset cpu io memory hugetlb pids rdma misc\n",
    )
    .expect("write");
    let setup = Setup {
        capacity: (2000, 4_105_359_360),
        reserved: (100, 256 << 20),
        kubepods_pids: Some(31_205),
        hugepages: hugetlb::page_sizes(["hugepages-2048kB", "hugepages-1048576kB"]),
        ..setup(Driver::Cgroupfs)
    };
    let cg = PodCgroups::with(CgroupFs::at(&root, true), setup, None)
        .await
        .expect("tree");
    let manifests = [
        (
            "guaranteed",
            include_str!("../../../../bench/cgroupv2/pods/guaranteed.yaml"),
        ),
        (
            "burstable",
            include_str!("../../../../bench/cgroupv2/pods/burstable.yaml"),
        ),
        (
            "besteffort",
            include_str!("../../../../bench/cgroupv2/pods/besteffort.yaml"),
        ),
        (
            "memhog",
            include_str!("../../../../bench/cgroupv2/pods/memhog.yaml"),
        ),
        (
            "oom",
            include_str!("../../../../bench/cgroupv2/pods/oom.yaml"),
        ),
    ];
    for (name, yaml) in manifests {
        let mut p: k8s::Pod = serde_yaml_ng::from_str(yaml).expect("manifest");
        p.metadata.uid = Some(name.to_owned());
        cg.ensure(&p).await.expect("ensure");
    }
    let default = |file: &str| match file {
        "cpu.max" => "max 100000",
        "memory.max" | "pids.max" => "max",
        _ => "",
    };
    let (mut differ, mut checked) = (Vec::new(), 0);
    for line in include_str!("testdata/kubelet-v2-tree.tsv").lines() {
        let parts: Vec<&str> = line.split('\t').collect();
        let [path, file, want] = parts[..] else {
            continue;
        };
        let dir = root.join(path.trim_start_matches('/').replace(['{', '}'], ""));
        let got = std::fs::read_to_string(dir.join(file))
            .map(|v| v.trim().to_owned())
            .unwrap_or_else(|_| default(file).to_owned());
        checked += 1;
        if got != want {
            differ.push(format!("{path} {file}: kubelet {want}, wasmlet {got}"));
        }
    }
    assert_eq!(checked, 49, "the fixture's rows");
    assert!(differ.is_empty(), "{differ:#?}");
    let _ = std::fs::remove_dir_all(&root);
}
