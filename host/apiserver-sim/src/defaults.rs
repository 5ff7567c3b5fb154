//! The API server's defaulting of a Pod on create, where the agent reads the result:
//! values the real server fills in that a client left out. A `resourceFieldRef`
//! without a divisor arrives with `divisor: "0"` (the field is a Quantity, not a
//! pointer), and configMap, secret, downwardAPI and projected volumes carry
//! `defaultMode: 420` (0644) — an agent that read the zero literally, or relied on the
//! mode's absence, would pass against a double that sent neither.

use serde_json::{Value, json};

/// Fills in what the API server's Pod defaulting fills in. (Read with `pointer_mut`:
/// indexing a JSON value mutably would add the fields it looks for.)
pub(crate) fn pod(object: &mut Value) {
    for list in ["initContainers", "containers", "ephemeralContainers"] {
        for c in array(object, &format!("/spec/{list}")) {
            for e in array(c, "/env") {
                divisor(e.pointer_mut("/valueFrom/resourceFieldRef"));
            }
        }
    }
    for v in array(object, "/spec/volumes") {
        for kind in ["configMap", "secret", "downwardAPI", "projected"] {
            if let Some(source) = v.get_mut(kind).and_then(Value::as_object_mut) {
                source.entry("defaultMode").or_insert(json!(420));
            }
        }
        for item in array(v, "/downwardAPI/items") {
            divisor(item.pointer_mut("/resourceFieldRef"));
        }
        for s in array(v, "/projected/sources") {
            for item in array(s, "/downwardAPI/items") {
                divisor(item.pointer_mut("/resourceFieldRef"));
            }
        }
    }
}

/// The array at `pointer`, if there is one.
fn array<'a>(value: &'a mut Value, pointer: &str) -> impl Iterator<Item = &'a mut Value> {
    value
        .pointer_mut(pointer)
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
}

fn divisor(field: Option<&mut Value>) {
    if let Some(r) = field.and_then(Value::as_object_mut) {
        r.entry("divisor").or_insert(json!("0"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn divisors_and_volume_modes_are_filled_in_as_the_api_server_does() {
        let mut p = json!({"spec": {
            "containers": [{"name": "c", "env": [
                {"name": "A", "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu"}}},
                {"name": "B", "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu", "divisor": "1m"}}},
                {"name": "C", "value": "x"}]}],
            "volumes": [
                {"name": "d", "downwardAPI": {"items": [{"path": "cpu", "resourceFieldRef": {"resource": "limits.cpu"}}]}},
                {"name": "s", "secret": {"secretName": "s", "defaultMode": 256}},
                {"name": "e", "emptyDir": {}},
                {"name": "p", "projected": {"sources": [{"downwardAPI": {"items": [
                    {"path": "m", "resourceFieldRef": {"resource": "requests.memory"}}]}}]}}]}});
        pod(&mut p);
        let env = &p["spec"]["containers"][0]["env"];
        assert_eq!(env[0]["valueFrom"]["resourceFieldRef"]["divisor"], "0");
        assert_eq!(env[1]["valueFrom"]["resourceFieldRef"]["divisor"], "1m");
        assert_eq!(
            env[2],
            json!({"name": "C", "value": "x"}),
            "nothing added where nothing was"
        );
        let v = &p["spec"]["volumes"];
        assert_eq!(
            v[0]["downwardAPI"]["items"][0]["resourceFieldRef"]["divisor"],
            "0"
        );
        assert_eq!(v[0]["downwardAPI"]["defaultMode"], 420);
        assert_eq!(v[1]["secret"]["defaultMode"], 256, "a mode given stays");
        assert_eq!(v[2], json!({"name": "e", "emptyDir": {}}));
        assert!(p["spec"].get("initContainers").is_none());
        assert_eq!(v[3]["projected"]["defaultMode"], 420);
        let item = &v[3]["projected"]["sources"][0]["downwardAPI"]["items"][0];
        assert_eq!(item["resourceFieldRef"]["divisor"], "0");
    }
}
