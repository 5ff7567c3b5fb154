//! The shipped admission plugins against a table of pods and nodes, written as the
//! Kubernetes YAML an operator would write. The expected reasons and messages are the
//! kubelet's (pkg/kubelet/lifecycle/predicate.go and the scheduler filters it calls).

mod common;

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1 as k8s;
use wasmlet_plugin_host::*;

/// One row: a plugin, the node, pods already on it, the pod, the expected verdict.
struct Case {
    what: &'static str,
    plugin: &'static str,
    node: &'static str,
    active: &'static [&'static str],
    pod: &'static str,
    source: &'static str,
    want: Option<(&'static str, &'static str)>,
}

const NODE: &str = "
metadata: {name: node-1, labels: {zone: a, disk: ssd, gen: '5'}}
status:
  allocatable: {cpu: '2', memory: 4Gi, ephemeral-storage: 10Gi, pods: '3', example.com/fpga: '1'}
";

const TAINTED: &str = "
metadata: {name: node-1}
spec:
  taints:
  - {key: dedicated, value: db, effect: NoExecute}
  - {key: gpu, effect: NoSchedule}
status: {allocatable: {cpu: '2', pods: '10'}}
";

const RESOURCE_FIT: &str = "resource-fit";
const NODE_AFFINITY: &str = "node-affinity";
const TAINTS: &str = "taint-toleration";

fn cases() -> Vec<Case> {
    let base = |what, plugin, pod, want| Case {
        what,
        plugin,
        node: NODE,
        active: &[],
        pod,
        source: "api",
        want,
    };
    vec![
        base(
            "fits",
            RESOURCE_FIT,
            "spec: {containers: [{name: a, resources: {requests: {cpu: 500m, memory: 1Gi}}}]}",
            None,
        ),
        Case {
            active: &["spec: {containers: [{name: a, resources: {requests: {cpu: 500m}}}]}"],
            ..base(
                "cpu short beside an active pod",
                RESOURCE_FIT,
                "spec: {containers: [{name: a, resources: {requests: {cpu: '2'}}}]}",
                Some((
                    "OutOfcpu",
                    "Node didn't have enough resource: cpu, requested: 2000, used: 500, capacity: 2000",
                )),
            )
        },
        base(
            "a limit without a request requests the limit",
            RESOURCE_FIT,
            "spec: {containers: [{name: a, resources: {limits: {memory: 5Gi}}}]}",
            Some((
                "OutOfmemory",
                "Node didn't have enough resource: memory, requested: 5368709120, used: 0, capacity: 4294967296",
            )),
        ),
        base(
            "ephemeral storage",
            RESOURCE_FIT,
            "spec: {containers: [{name: a, resources: {requests: {ephemeral-storage: 11Gi}}}]}",
            Some((
                "OutOfephemeral-storage",
                "Node didn't have enough resource: ephemeral-storage, requested: 11811160064, used: 0, capacity: 10737418240",
            )),
        ),
        Case {
            active: &[
                "spec: {containers: [{name: a}]}",
                "spec: {containers: [{name: a}]}",
                "spec: {containers: [{name: a}]}",
            ],
            ..base(
                "pods count before anything else",
                RESOURCE_FIT,
                "spec: {containers: [{name: a, resources: {requests: {cpu: '9'}}}]}",
                Some((
                    "OutOfpods",
                    "Node didn't have enough resource: pods, requested: 1, used: 3, capacity: 3",
                )),
            )
        },
        base(
            "an init container runs alone: the largest one counts, not the sum",
            RESOURCE_FIT,
            "spec:
               initContainers:
               - {name: i1, resources: {requests: {cpu: 1500m}}}
               - {name: i2, resources: {requests: {cpu: 1500m}}}
               containers: [{name: a, resources: {requests: {cpu: 100m}}}]",
            None,
        ),
        base(
            "a sidecar adds to the app containers and to later init containers",
            RESOURCE_FIT,
            "spec:
               initContainers:
               - {name: side, restartPolicy: Always, resources: {requests: {cpu: 600m}}}
               - {name: init, resources: {requests: {cpu: 1500m}}}
               containers: [{name: a, resources: {requests: {cpu: 100m}}}]",
            Some((
                "OutOfcpu",
                "Node didn't have enough resource: cpu, requested: 2100, used: 0, capacity: 2000",
            )),
        ),
        base(
            "overhead is added",
            RESOURCE_FIT,
            "spec:
               overhead: {cpu: 250m}
               containers: [{name: a, resources: {requests: {cpu: 1800m}}}]",
            Some((
                "OutOfcpu",
                "Node didn't have enough resource: cpu, requested: 2050, used: 0, capacity: 2000",
            )),
        ),
        base(
            "an extended resource the node advertises is checked",
            RESOURCE_FIT,
            "spec: {containers: [{name: a, resources: {requests: {example.com/fpga: '2'}, limits: {example.com/fpga: '2'}}}]}",
            Some((
                "OutOfexample.com/fpga",
                "Node didn't have enough resource: example.com/fpga, requested: 2, used: 0, capacity: 1",
            )),
        ),
        base(
            "an extended resource the node does not advertise is left to its device plugin",
            RESOURCE_FIT,
            "spec: {containers: [{name: a, resources: {limits: {vendor.io/widget: '4'}}}]}",
            None,
        ),
        base(
            "hugepages are native: missing means none",
            RESOURCE_FIT,
            "spec: {containers: [{name: a, resources: {limits: {hugepages-2Mi: 4Mi, memory: 1Mi}}}]}",
            Some((
                "OutOfhugepages-2Mi",
                "Node didn't have enough resource: hugepages-2Mi, requested: 4194304, used: 0, capacity: 0",
            )),
        ),
        base(
            "node selector matches",
            NODE_AFFINITY,
            "spec: {nodeSelector: {zone: a}, containers: [{name: a}]}",
            None,
        ),
        base(
            "node selector does not match",
            NODE_AFFINITY,
            "spec: {nodeSelector: {zone: b}, containers: [{name: a}]}",
            Some((
                "NodeAffinity",
                "Predicate NodeAffinity failed: node(s) didn't match Pod's node affinity/selector",
            )),
        ),
        base(
            "affinity terms are ORed, requirements ANDed",
            NODE_AFFINITY,
            "spec:
               containers: [{name: a}]
               affinity:
                 nodeAffinity:
                   requiredDuringSchedulingIgnoredDuringExecution:
                     nodeSelectorTerms:
                     - matchExpressions: [{key: zone, operator: In, values: [b]}]
                     - matchExpressions:
                       - {key: disk, operator: Exists}
                       - {key: gen, operator: Gt, values: ['4']}
                       - {key: gpu, operator: DoesNotExist}",
            None,
        ),
        base(
            "no term matches",
            NODE_AFFINITY,
            "spec:
               containers: [{name: a}]
               affinity:
                 nodeAffinity:
                   requiredDuringSchedulingIgnoredDuringExecution:
                     nodeSelectorTerms:
                     - matchExpressions: [{key: zone, operator: NotIn, values: [a]}]
                     - matchExpressions: [{key: gen, operator: Lt, values: ['5']}]",
            Some((
                "NodeAffinity",
                "Predicate NodeAffinity failed: node(s) didn't match Pod's node affinity/selector",
            )),
        ),
        base(
            "match fields name the node",
            NODE_AFFINITY,
            "spec:
               containers: [{name: a}]
               affinity:
                 nodeAffinity:
                   requiredDuringSchedulingIgnoredDuringExecution:
                     nodeSelectorTerms:
                     - matchFields: [{key: metadata.name, operator: In, values: [node-1]}]",
            None,
        ),
        base(
            "selector and affinity must both hold",
            NODE_AFFINITY,
            "spec:
               nodeSelector: {zone: a}
               containers: [{name: a}]
               affinity:
                 nodeAffinity:
                   requiredDuringSchedulingIgnoredDuringExecution:
                     nodeSelectorTerms:
                     - matchExpressions: [{key: disk, operator: In, values: [hdd]}]",
            Some((
                "NodeAffinity",
                "Predicate NodeAffinity failed: node(s) didn't match Pod's node affinity/selector",
            )),
        ),
        Case {
            node: TAINTED,
            ..base(
                "an untolerated NoExecute taint refuses",
                TAINTS,
                "spec: {containers: [{name: a}]}",
                Some((
                    "TaintToleration",
                    "Predicate TaintToleration failed: node(s) had taints that the pod didn't tolerate",
                )),
            )
        },
        Case {
            node: TAINTED,
            ..base(
                "NoSchedule taints are not the kubelet's business",
                TAINTS,
                "spec:
                   containers: [{name: a}]
                   tolerations: [{key: dedicated, operator: Equal, value: db, effect: NoExecute}]",
                None,
            )
        },
        Case {
            node: TAINTED,
            ..base(
                "a wrong value does not tolerate",
                TAINTS,
                "spec:
                   containers: [{name: a}]
                   tolerations: [{key: dedicated, value: web}]",
                Some((
                    "TaintToleration",
                    "Predicate TaintToleration failed: node(s) had taints that the pod didn't tolerate",
                )),
            )
        },
        Case {
            node: TAINTED,
            ..base(
                "an empty key with Exists tolerates everything",
                TAINTS,
                "spec: {containers: [{name: a}], tolerations: [{operator: Exists}]}",
                None,
            )
        },
        Case {
            node: TAINTED,
            ..base(
                "a toleration for another effect does not count",
                TAINTS,
                "spec:
                   containers: [{name: a}]
                   tolerations: [{key: dedicated, operator: Exists, effect: NoSchedule}]",
                Some((
                    "TaintToleration",
                    "Predicate TaintToleration failed: node(s) had taints that the pod didn't tolerate",
                )),
            )
        },
        Case {
            node: TAINTED,
            source: "file",
            ..base(
                "static pods are exempt",
                TAINTS,
                "spec: {containers: [{name: a}]}",
                None,
            )
        },
    ]
}

fn parse_pod(text: &str, source: &str, n: usize) -> Pod {
    let mut value: serde_json::Value = serde_yaml_ng::from_str(text).expect("pod yaml");
    value["metadata"]["name"] = format!("pod-{n}").into();
    let p: k8s::Pod = serde_json::from_value(value).expect("a v1 Pod");
    convert::pod(&p, source).expect("convertible pod")
}

fn parse_node(text: &str) -> Node {
    let n: k8s::Node = serde_yaml_ng::from_str(text).expect("node yaml");
    convert::node(&n).expect("convertible node")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shipped_policies_give_the_kubelets_verdicts() {
    let engine = PluginEngine::new().expect("engine");
    let mut plugins = BTreeMap::new();
    for name in [RESOURCE_FIT, NODE_AFFINITY, TAINTS] {
        let p = engine
            .load_admission(
                name,
                &common::plugin(name),
                BTreeMap::new(),
                Limits::default(),
            )
            .expect("load");
        plugins.insert(name, p);
    }
    let mut failures = Vec::new();
    for case in cases() {
        let active: Vec<Pod> = case
            .active
            .iter()
            .enumerate()
            .map(|(i, t)| parse_pod(t, "api", i))
            .collect();
        let pod = parse_pod(case.pod, case.source, 99);
        let got = plugins[case.plugin]
            .admit(&Admission::new(
                pod,
                parse_node(case.node),
                convert::load(&active),
                String::new,
            ))
            .await
            .expect("a verdict");
        let got = match got {
            Verdict::Admit => None,
            Verdict::Reject(r) => Some((r.reason, r.message)),
        };
        let want = case.want.map(|(r, m)| (r.to_owned(), m.to_owned()));
        if got != want {
            failures.push(format!(
                "{} ({}): got {got:?}, want {want:?}",
                case.what, case.plugin
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_example_policy_reads_config_and_the_pod_json() {
    let engine = PluginEngine::new().expect("engine");
    let config = BTreeMap::from([(
        "allowed-namespaces".to_owned(),
        "ops, kube-system".to_owned(),
    )]);
    let policy = engine
        .load_admission(
            "restricted-pods",
            &common::plugin("restricted-pods"),
            config,
            Limits::default(),
        )
        .expect("load");
    let node = parse_node(NODE);
    let usage = convert::load([]);
    let decide = |yaml: &'static str| {
        let policy = &policy;
        let node = &node;
        let usage = &usage;
        async move {
            let value: serde_json::Value = serde_yaml_ng::from_str(yaml).expect("yaml");
            let full = value.to_string();
            let p: k8s::Pod = serde_json::from_value(value).expect("pod");
            let pod = convert::pod(&p, "api").expect("pod");
            match policy
                .admit(&Admission::new(
                    pod,
                    node.clone(),
                    usage.clone(),
                    move || full.clone(),
                ))
                .await
                .expect("verdict")
            {
                Verdict::Admit => "admit".to_owned(),
                Verdict::Reject(r) => format!("{}: {}", r.reason, r.message),
            }
        }
    };
    assert_eq!(
        decide("metadata: {name: a, namespace: web}\nspec: {containers: [{name: c, securityContext: {privileged: true}}]}").await,
        "RestrictedPod: container c is privileged, which namespace web does not allow"
    );
    assert_eq!(
        decide(
            "metadata: {name: a, namespace: web}\nspec: {hostPID: true, containers: [{name: c}]}"
        )
        .await,
        "RestrictedPod: spec.hostPID is set, which namespace web does not allow"
    );
    assert_eq!(
        decide("metadata: {name: a, namespace: ops}\nspec: {hostPID: true, containers: [{name: c, securityContext: {privileged: true}}]}").await,
        "admit"
    );
    assert_eq!(
        decide("metadata: {name: a, namespace: web}\nspec: {containers: [{name: c}]}").await,
        "admit"
    );
}
