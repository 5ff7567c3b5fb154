//! A pod's `resize` subresource (in-place resize, Kubernetes 1.33): only the containers'
//! `resources` and `resizePolicy` are taken from the request — the rest stays as stored
//! — and the API server's checks apply: the containers are the same ones, only CPU and
//! memory change, the pod's QoS class stays, a static (mirror) pod is not resized, and
//! the node must report its running containers' `resources` (one whose kubelet cannot
//! resize does not). A resize that changes the spec counts the pod's `generation` up.

use serde_json::{Value, json};

use crate::values::status;

/// The pod stored after `new` was sent to `old`'s resize subresource, or the API
/// server's 422.
pub(crate) fn resized(old: &Value, new: &Value, name: &str) -> Result<Value, Value> {
    let invalid = |message: String| {
        status(
            422,
            "Invalid",
            format!("Pod \"{name}\" is invalid: {message}"),
        )
    };
    if old["metadata"]["annotations"]["kubernetes.io/config.mirror"].is_string() {
        return Err(invalid(": Forbidden: static pods cannot be resized".into()));
    }
    let mut stored = old.clone();
    for list in ["containers", "initContainers"] {
        let (before, after) = (&old["spec"][list], &new["spec"][list]);
        let names = |v: &Value| -> Vec<String> {
            v.as_array()
                .into_iter()
                .flatten()
                .map(|c| c["name"].as_str().unwrap_or_default().to_owned())
                .collect()
        };
        if names(before) != names(after) {
            return Err(invalid(format!(
                "spec.{list}: Forbidden: containers may not be added, removed or renamed by a resize"
            )));
        }
        for (i, c) in after.as_array().into_iter().flatten().enumerate() {
            if let Some(field) = other_resource_changed(&before[i]["resources"], &c["resources"]) {
                return Err(invalid(format!(
                    "spec.{list}[{i}].resources.{field}: Forbidden: only cpu and memory resources are mutable"
                )));
            }
            stored["spec"][list][i]["resources"] = c["resources"].clone();
            if !c["resizePolicy"].is_null() {
                stored["spec"][list][i]["resizePolicy"] = c["resizePolicy"].clone();
            }
        }
    }
    let was = qos(old);
    if was != qos(&stored) {
        // The value named is the class in the pod's status, as the API server says it.
        let shown = old["status"]["qosClass"].as_str().unwrap_or(was);
        return Err(invalid(format!(
            "spec: Invalid value: \"{shown}\": Pod QOS Class may not change as a result of resizing"
        )));
    }
    if !node_supports_resize(old) {
        return Err(invalid(
            "spec: Forbidden: Pod running on node without support for resize".into(),
        ));
    }
    if stored["spec"] != old["spec"] {
        let generation = old["metadata"]["generation"].as_i64().unwrap_or(1);
        stored["metadata"]["generation"] = json!(generation + 1);
    }
    Ok(stored)
}

/// Whether the pod's node reports container resources (a kubelet with in-place resize
/// does): the API server's own test, on the first running container's status; a pod
/// with none running is taken to be on such a node.
fn node_supports_resize(pod: &Value) -> bool {
    pod["status"]["containerStatuses"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|s| !s["state"]["running"].is_null())
        .is_none_or(|s| !s["resources"].is_null())
}

/// The first resource other than CPU and memory whose amount differs (`requests.x`).
fn other_resource_changed(before: &Value, after: &Value) -> Option<String> {
    for part in ["requests", "limits"] {
        let keys = |v: &Value| -> Vec<String> {
            v[part]
                .as_object()
                .into_iter()
                .flatten()
                .map(|(k, _)| k.clone())
                .collect()
        };
        let mut all = keys(before);
        all.extend(keys(after));
        for k in all {
            if k != "cpu" && k != "memory" && before[part][&k] != after[part][&k] {
                return Some(format!("{part}.{k}"));
            }
        }
    }
    None
}

/// The pod's QoS class from its containers' CPU and memory requests and limits.
fn qos(pod: &Value) -> &'static str {
    let containers = ["containers", "initContainers"]
        .into_iter()
        .flat_map(|l| pod["spec"][l].as_array().cloned().unwrap_or_default());
    let (mut any, mut guaranteed) = (false, true);
    for c in containers {
        for r in ["cpu", "memory"] {
            let (request, limit) = (&c["resources"]["requests"][r], &c["resources"]["limits"][r]);
            any |= !request.is_null() || !limit.is_null();
            guaranteed &= !limit.is_null() && (request.is_null() || request == limit);
        }
    }
    match (any, guaranteed) {
        (false, _) => "BestEffort",
        (true, true) => "Guaranteed",
        (true, false) => "Burstable",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(cpu_request: &str, cpu_limit: &str) -> Value {
        json!({"metadata": {"name": "p", "generation": 1}, "spec": {"containers": [
            {"name": "c", "image": "i", "resources": {
                "requests": {"cpu": cpu_request, "memory": "64Mi"},
                "limits": {"cpu": cpu_limit, "memory": "64Mi"}}}]}})
    }

    #[test]
    fn resources_change_the_rest_stays_and_the_generation_counts_up() {
        let mut asked = pod("200m", "400m");
        asked["spec"]["containers"][0]["image"] = json!("other");
        let stored = resized(&pod("100m", "400m"), &asked, "p").expect("resized");
        assert_eq!(
            stored["spec"]["containers"][0]["image"], "i",
            "only resources"
        );
        assert_eq!(
            stored["spec"]["containers"][0]["resources"]["requests"]["cpu"],
            "200m"
        );
        assert_eq!(stored["metadata"]["generation"], 2);
    }

    #[test]
    fn the_qos_class_and_other_resources_may_not_change() {
        let mut guaranteed = pod("400m", "400m");
        guaranteed["status"]["qosClass"] = json!("Guaranteed");
        let e = resized(&guaranteed, &pod("200m", "400m"), "p").expect_err("qos");
        assert_eq!(e["code"], 422);
        assert!(
            e["message"]
                .as_str()
                .is_some_and(|m| m.contains("Pod QOS Class may not change as a result of resizing")),
            "{e}"
        );
        let mut asked = pod("100m", "400m");
        asked["spec"]["containers"][0]["resources"]["limits"]["ephemeral-storage"] = json!("1Gi");
        let e = resized(&pod("100m", "400m"), &asked, "p").expect_err("storage");
        assert!(
            e["message"]
                .as_str()
                .is_some_and(|m| m.contains("only cpu and memory")),
            "{e}"
        );
    }

    /// As the real API server answered on the testbed (v1.33.3) for a pod on a node that
    /// did not report its containers' resources.
    #[test]
    fn a_node_that_does_not_report_resources_cannot_resize() {
        let mut old = pod("100m", "400m");
        old["status"]["containerStatuses"] = json!([{"name": "c", "state": {"running": {}}}]);
        let e = resized(&old, &pod("200m", "400m"), "rzcheck").expect_err("no support");
        assert_eq!(
            e["message"],
            "Pod \"rzcheck\" is invalid: spec: Forbidden: Pod running on node without support for resize"
        );
        old["status"]["containerStatuses"][0]["resources"] = json!({});
        resized(&old, &pod("200m", "400m"), "rzcheck").expect("a node that reports them");
    }
}
