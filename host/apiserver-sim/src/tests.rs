use crate::http::parse;
use serde_json::{Value, json};

use crate::sim::ApiServerSim;
use crate::store::Key;
use crate::store::Store;
use crate::store::{merge, now_rfc3339, selects};
use crate::values::percent_decode;

#[test]
fn paths_name_resource_namespace_and_subresource() {
    let t = parse("/api/v1/nodes/n1/status").expect("path");
    assert_eq!(
        (t.prefix.as_str(), t.resource.as_str(), t.ns.as_str()),
        ("api/v1", "nodes", "")
    );
    assert_eq!(
        (t.name.as_deref(), t.sub.as_deref()),
        (Some("n1"), Some("status"))
    );
    let t =
        parse("/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/n1").expect("path");
    assert_eq!(t.prefix, "apis/coordination.k8s.io/v1");
    assert_eq!(
        (t.resource.as_str(), t.ns.as_str(), t.name.as_deref()),
        ("leases", "kube-node-lease", Some("n1"))
    );
    assert!(parse("/healthz").is_none());
}

#[test]
fn field_selectors_and_merge_patches() {
    let pod = json!({"spec": {"nodeName": "a"}, "status": {"phase": "Running"}});
    assert!(selects(&pod, "spec.nodeName=a"));
    assert!(selects(&pod, "spec.nodeName==a,status.phase!=Failed"));
    assert!(!selects(&pod, "spec.nodeName=b"));
    assert!(selects(&pod, ""));
    assert_eq!(percent_decode("spec.nodeName%3Da"), "spec.nodeName=a");
    let mut o = json!({"a": {"b": 1, "c": 2}});
    merge(&mut o, &json!({"a": {"b": null, "d": 3}}));
    assert_eq!(o, json!({"a": {"c": 2, "d": 3}}));
}

#[test]
fn stale_writes_conflict_and_status_is_its_own() {
    let mut s = Store::default();
    let node = s
        .create(
            "api/v1",
            "nodes",
            "",
            json!({"metadata": {"name": "n"}, "spec": {}, "status": {"phase": "x"}}),
        )
        .expect("create");
    assert_eq!(node["metadata"]["resourceVersion"], "1");
    let again = s.create("api/v1", "nodes", "", json!({"metadata": {"name": "n"}}));
    assert_eq!(again.expect_err("taken")["reason"], "AlreadyExists");
    let key: Key = ("api/v1".into(), "nodes".into(), "".into(), "n".into());
    // The main resource does not change status; the status subresource only does.
    let mut changed = node.clone();
    changed["spec"]["unschedulable"] = json!(true);
    changed["status"]["phase"] = json!("y");
    let stored = s.write(&key, changed.clone(), None).expect("write");
    assert_eq!(stored["status"]["phase"], "x");
    assert_eq!(stored["spec"]["unschedulable"], true);
    // The same (now stale) resourceVersion again: conflict.
    let err = s.write(&key, changed, Some("status")).expect_err("stale");
    assert_eq!(
        (err["code"].as_i64(), err["reason"].as_str()),
        (Some(409), Some("Conflict"))
    );
    let stored = s
        .write(
            &key,
            json!({"metadata": {}, "status": {"phase": "y"}}),
            Some("status"),
        )
        .expect("status");
    assert_eq!(
        (
            stored["status"]["phase"].as_str(),
            stored["spec"]["unschedulable"].as_bool()
        ),
        (Some("y"), Some(true))
    );
}

#[test]
fn bound_pods_are_deleted_gracefully_and_finally_with_a_uid_precondition() {
    let mut s = Store::default();
    let pod = s
        .create("api/v1", "pods", "default", json!({"metadata": {"name": "p"}, "spec": {"nodeName": "n", "terminationGracePeriodSeconds": 30}}))
        .expect("create");
    let key: Key = ("api/v1".into(), "pods".into(), "default".into(), "p".into());
    let marked = s.delete(&key, &json!({})).expect("graceful");
    assert!(marked["metadata"]["deletionTimestamp"].is_string());
    assert_eq!(marked["metadata"]["deletionGracePeriodSeconds"], 30);
    let wrong = s.delete(
        &key,
        &json!({"gracePeriodSeconds": 0, "preconditions": {"uid": "other"}}),
    );
    assert_eq!(wrong.expect_err("precondition")["code"], 409);
    s.delete(
        &key,
        &json!({"gracePeriodSeconds": 0, "preconditions": {"uid": pod["metadata"]["uid"]}}),
    )
    .expect("final delete");
    assert!(!s.objects.contains_key(&key));
}

#[test]
fn services_get_cluster_ips_and_the_kubernetes_service_is_there() {
    let sim = ApiServerSim::new();
    let k = sim
        .get("api/v1", "services", "default", "kubernetes")
        .expect("kubernetes");
    assert_eq!(k["spec"]["clusterIP"], "10.96.0.1");
    let a = sim
        .create(
            "api/v1",
            "services",
            json!({"metadata": {"name": "a", "namespace": "x"}, "spec": {"ports": [{"port": 80}]}}),
        )
        .expect("a");
    let b = sim
        .create(
            "api/v1",
            "services",
            json!({"metadata": {"name": "b", "namespace": "x"}, "spec": {}}),
        )
        .expect("b");
    assert_eq!(a["spec"]["clusterIP"], "10.96.0.2");
    assert_eq!(b["spec"]["clusterIPs"], json!(["10.96.0.3"]));
    let headless = sim
        .create(
            "api/v1",
            "services",
            json!({"metadata": {"name": "h", "namespace": "x"}, "spec": {"clusterIP": "None"}}),
        )
        .expect("headless");
    assert_eq!(headless["spec"]["clusterIP"], "None");
}

#[test]
fn ephemeral_containers_change_only_through_their_subresource_and_only_grow() {
    let mut s = Store::default();
    let pod = s
        .create(
            "api/v1",
            "pods",
            "ns",
            json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "app"}]}}),
        )
        .expect("create");
    let key: Key = ("api/v1".into(), "pods".into(), "ns".into(), "p".into());
    let mut with = pod.clone();
    with["metadata"]["resourceVersion"] = Value::Null;
    with["spec"]["ephemeralContainers"] = json!([{"name": "debugger", "image": "busybox"}]);
    let stored = s.write(&key, with.clone(), None).expect("update");
    assert!(
        stored["spec"]["ephemeralContainers"].is_null(),
        "ignored on the pod itself"
    );
    let stored = s
        .write(&key, with.clone(), Some("ephemeralcontainers"))
        .expect("subresource");
    assert_eq!(stored["spec"]["ephemeralContainers"][0]["name"], "debugger");
    // A name already taken.
    let mut dup = with.clone();
    dup["spec"]["ephemeralContainers"] =
        json!([{"name": "debugger", "image": "busybox"}, {"name": "app"}]);
    let err = s
        .write(&key, dup, Some("ephemeralcontainers"))
        .expect_err("dup");
    assert_eq!(err["code"], 422);
    assert_eq!(
        err["message"],
        "Pod \"p\" is invalid: spec.ephemeralContainers[1].name: Duplicate value: \"app\""
    );
    // Removing one.
    let mut gone = with;
    gone["spec"]["ephemeralContainers"] = json!([]);
    let err = s
        .write(&key, gone, Some("ephemeralcontainers"))
        .expect_err("removed");
    assert_eq!(err["code"], 422);
    assert_eq!(
        err["message"],
        "Pod \"p\" is invalid: spec.ephemeralContainers: Forbidden: existing ephemeral containers \"debugger\" may not be removed"
    );
    // Changing one.
    let mut changed = stored;
    changed["metadata"]["resourceVersion"] = Value::Null;
    changed["spec"]["ephemeralContainers"][0]["image"] = json!("other");
    let err = s
        .write(&key, changed, Some("ephemeralcontainers"))
        .expect_err("changed");
    assert_eq!(
        err["message"],
        "Pod \"p\" is invalid: spec.ephemeralContainers[0]: Forbidden: existing ephemeral containers \"debugger\" may not be changed"
    );
}

#[test]
fn dates_are_rfc3339() {
    let now = now_rfc3339();
    assert_eq!(now.len(), 20, "{now}");
    assert!(now.starts_with("20") && now.ends_with('Z'), "{now}");
}
