//! ValidatingAdmissionPolicy, as the API server enforces it on creates, updates and
//! deletes (where `object` is null and `oldObject` the object deleted): the policies and
//! bindings stored under `admissionregistration.k8s.io` (`v1`, `v1beta1`) whose binding
//! denies (`validationActions: [Deny]`) and whose `matchConstraints.resourceRules` name
//! the resource (`plural/subresource`), the operation, the group and version; then the
//! `matchConditions` (all true), the `variables` in order (`variables.NAME`), and each
//! `validations` expression, evaluated with CEL over `object`, `oldObject` and `request`
//! (`userInfo.username`, `userInfo.groups`, `operation`, `name`, `namespace`,
//! `subResource`, `resource`). A false validation refuses the write with the API
//! server's words and the code of its `reason` (Forbidden 403, Unauthorized 401,
//! RequestEntityTooLarge 413, Invalid 422 by default); an expression that does not
//! evaluate refuses it under `failurePolicy: Fail` (the default) and is skipped under
//! `Ignore`.
//!
//! The CEL is the `cel` crate's: the standard macros, operators and string functions;
//! not Kubernetes' own libraries (quantity, IP, URL…), nor parameters or namespace
//! selectors.

use std::collections::HashMap;
use std::sync::Arc;

use cel::objects::{Key as CelKey, Map as CelMap};
use cel::{Context, Program, Value as CelValue};
use serde_json::{Value, json};

use crate::store::Key;
use crate::store::{Store, status};
use crate::tls::Identity;

const GROUP_PREFIX: &str = "apis/admissionregistration.k8s.io/";
/// The first prefix after the group's (`/` + 1).
const GROUP_END: &str = "apis/admissionregistration.k8s.io0";

/// What is being written.
pub(crate) struct Request<'a> {
    /// Where: prefix, resource, namespace, name.
    pub(crate) key: &'a Key,
    /// The subresource, if any (`status`).
    pub(crate) sub: Option<&'a str>,
    /// `CREATE`, `UPDATE` or `DELETE`.
    pub(crate) operation: &'a str,
    /// Who asks (nobody: an unauthenticated request).
    pub(crate) who: Option<&'a Identity>,
}

/// Refuses the write of `object` over `old` when a bound policy denies it: the Status
/// to answer.
pub(crate) fn admit(
    store: &Store,
    request: &Request<'_>,
    object: &Value,
    old: Option<&Value>,
) -> Result<(), Value> {
    for (binding, policy) in bound(store) {
        if !matches(&policy["spec"]["matchConstraints"], request) {
            continue;
        }
        let context = Activation::new(request, object, old);
        evaluate(&policy, &binding, &context, request)?;
    }
    Ok(())
}

/// Every (binding, policy) whose binding denies.
fn bound(store: &Store) -> Vec<(Value, Value)> {
    // The group's keys only (every write asks: no walk over every object).
    fn stored<'s>(store: &'s Store, resource: &'static str) -> impl Iterator<Item = &'s Value> {
        let from = (
            GROUP_PREFIX.to_owned(),
            String::new(),
            String::new(),
            String::new(),
        );
        let to = (
            GROUP_END.to_owned(),
            String::new(),
            String::new(),
            String::new(),
        );
        store
            .objects
            .range(from..to)
            .filter(move |((_, r, _, _), _)| r == resource)
            .map(|(_, o)| o)
    }
    let policies: HashMap<&str, &Value> = stored(store, "validatingadmissionpolicies")
        .filter_map(|p| Some((p["metadata"]["name"].as_str()?, p)))
        .collect();
    stored(store, "validatingadmissionpolicybindings")
        .filter(|b| {
            b["spec"]["validationActions"]
                .as_array()
                .is_some_and(|a| a.iter().any(|x| x == "Deny"))
        })
        .filter_map(|b| {
            let policy = policies.get(b["spec"]["policyName"].as_str()?)?;
            Some((b.clone(), (*policy).clone()))
        })
        .collect()
}

/// Whether one of the resource rules names the request.
fn matches(constraints: &Value, request: &Request<'_>) -> bool {
    let (group, version) = group_version(&request.key.0);
    let has = |list: &Value, want: &str| {
        list.as_array()
            .is_some_and(|l| l.iter().any(|x| x == "*" || x == want))
    };
    let names = |list: &Value| {
        list.as_array().is_some_and(|l| {
            l.iter()
                .filter_map(Value::as_str)
                .any(|r| names_resource(r, &request.key.1, request.sub))
        })
    };
    constraints["resourceRules"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|rule| {
            has(&rule["apiGroups"], group)
                && has(&rule["apiVersions"], version)
                && has(&rule["operations"], request.operation)
                && names(&rule["resources"])
        })
}

/// Whether a rule's resource entry names `resource` (through subresource `sub`), as the
/// API server reads it: `pods`, `pods/status`, `*` (every resource, no subresource),
/// `*/*` (every resource and subresource), `pods/*` (the subresources of pods),
/// `*/status`.
fn names_resource(entry: &str, resource: &str, sub: Option<&str>) -> bool {
    if entry == "*/*" {
        return true;
    }
    let (r, s) = entry.split_once('/').unwrap_or((entry, ""));
    let resource_ok = r == "*" || r == resource;
    match sub {
        None => resource_ok && s.is_empty(),
        Some(sub) => resource_ok && (s == "*" || s == sub),
    }
}

/// `(group, version)` of an API prefix (`apis/G/V`, `api/v1`).
fn group_version(prefix: &str) -> (&str, &str) {
    match prefix.strip_prefix("apis/") {
        Some(gv) => gv.split_once('/').unwrap_or((gv, "")),
        None => ("", prefix.trim_start_matches("api/")),
    }
}

/// The values expressions see.
struct Activation {
    object: CelValue,
    old_object: CelValue,
    request: CelValue,
}

fn cel(value: &Value) -> CelValue {
    cel::to_value(value).unwrap_or(CelValue::Null)
}

impl Activation {
    fn new(request: &Request<'_>, object: &Value, old: Option<&Value>) -> Self {
        let (group, version) = group_version(&request.key.0);
        let (username, groups) = request
            .who
            .map(|w| (w.user.clone(), w.groups.clone()))
            .unwrap_or_default();
        let request_value = json!({
            "operation": request.operation,
            "name": request.key.3,
            "namespace": request.key.2,
            "subResource": request.sub.unwrap_or(""),
            "resource": {"group": group, "version": version, "resource": request.key.1},
            "userInfo": {"username": username, "groups": groups},
        });
        Self {
            object: cel(object),
            old_object: old.map_or(CelValue::Null, cel),
            request: cel(&request_value),
        }
    }

    /// A context with the variables computed so far.
    fn context(&self, variables: &HashMap<CelKey, CelValue>) -> Context<'_, '_> {
        let mut c = Context::default();
        c.add_variable_from_value("object", self.object.clone());
        c.add_variable_from_value("oldObject", self.old_object.clone());
        c.add_variable_from_value("request", self.request.clone());
        c.add_variable_from_value(
            "variables",
            CelValue::Map(CelMap {
                map: Arc::new(variables.clone()),
            }),
        );
        c
    }
}

/// Evaluates `expression`; the error names it.
fn run(expression: &str, context: &Context<'_, '_>) -> Result<CelValue, String> {
    let program = Program::compile(expression).map_err(|e| format!("compilation failed: {e}"))?;
    program
        .execute(context)
        .map_err(|e| format!("expression '{expression}' resulted in error: {e}"))
}

/// Runs one policy's conditions, variables and validations.
fn evaluate(
    policy: &Value,
    binding: &Value,
    activation: &Activation,
    request: &Request<'_>,
) -> Result<(), Value> {
    let spec = &policy["spec"];
    let names = (
        policy["metadata"]["name"].as_str().unwrap_or_default(),
        binding["metadata"]["name"].as_str().unwrap_or_default(),
    );
    let refuse = |code: u16, reason: &str, message: String| {
        refusal(request, names, (code, reason), &message)
    };
    let failed = |message: String| {
        if spec["failurePolicy"] == "Ignore" {
            Ok(())
        } else {
            Err(refuse(403, "Forbidden", message))
        }
    };
    let mut variables: HashMap<CelKey, CelValue> = HashMap::new();
    let list = |field: &str| spec[field].as_array().cloned().unwrap_or_default();
    for condition in list("matchConditions") {
        let expression = condition["expression"].as_str().unwrap_or_default();
        match run(expression, &activation.context(&variables)) {
            Ok(CelValue::Bool(true)) => {}
            Ok(_) => return Ok(()),
            Err(e) => return failed(e),
        }
    }
    for variable in list("variables") {
        let name = variable["name"].as_str().unwrap_or_default().to_owned();
        let expression = variable["expression"].as_str().unwrap_or_default();
        match run(expression, &activation.context(&variables)) {
            Ok(v) => {
                variables.insert(CelKey::String(Arc::new(name)), v);
            }
            Err(e) => return failed(e),
        }
    }
    for validation in list("validations") {
        let context = activation.context(&variables);
        match validate(&validation, &context) {
            Ok(None) => {}
            Ok(Some((code, reason, message))) => return Err(refuse(code, reason, message)),
            Err(e) => return failed(e),
        }
    }
    Ok(())
}

/// One validation: `None` when its expression holds, else the code, reason and
/// message it refuses with; an expression that fails or is not a bool is an error.
fn validate(
    validation: &Value,
    context: &Context,
) -> Result<Option<(u16, &'static str, String)>, String> {
    let expression = validation["expression"].as_str().unwrap_or_default();
    match run(expression, context)? {
        CelValue::Bool(true) => return Ok(None),
        CelValue::Bool(false) => {}
        other => {
            return Err(format!(
                "expression '{expression}' gave {other:?}, not a bool"
            ));
        }
    }
    let message = validation["messageExpression"]
        .as_str()
        .and_then(|m| match run(m, context) {
            Ok(CelValue::String(s)) => Some(s.to_string()),
            _ => None,
        })
        .or_else(|| validation["message"].as_str().map(str::to_owned))
        .unwrap_or_else(|| format!("failed expression: {expression}"));
    let (code, reason) = match validation["reason"].as_str().unwrap_or("Invalid") {
        "Forbidden" => (403, "Forbidden"),
        "Unauthorized" => (401, "Unauthorized"),
        "RequestEntityTooLarge" => (413, "RequestEntityTooLarge"),
        _ => (422, "Invalid"),
    };
    Ok(Some((code, reason, message)))
}

/// The API server's Status refusing `request` for policy and binding `names`.
fn refusal(
    request: &Request<'_>,
    (policy, binding): (&str, &str),
    (code, reason): (u16, &str),
    message: &str,
) -> Value {
    let (group, _) = group_version(&request.key.0);
    let resource = if group.is_empty() {
        request.key.1.clone()
    } else {
        format!("{}.{group}", request.key.1)
    };
    let verb = if code == 422 {
        "is invalid"
    } else {
        "is forbidden"
    };
    status(
        code,
        reason,
        format!(
            "{resource} \"{}\" {verb}: ValidatingAdmissionPolicy '{policy}' with binding '{binding}' denied request: {message}",
            request.key.3,
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::names_resource;

    #[test]
    fn resource_entries_name_subresources_only_when_they_say_so() {
        let table = [
            ("wasmletplugins", "wasmletplugins", None, true),
            ("wasmletplugins", "wasmletplugins", Some("status"), false),
            (
                "wasmletplugins/status",
                "wasmletplugins",
                Some("status"),
                true,
            ),
            ("wasmletplugins/status", "wasmletplugins", None, false),
            ("*", "pods", None, true),
            ("*", "pods", Some("status"), false),
            ("*/*", "pods", Some("status"), true),
            ("*/*", "pods", None, true),
            ("pods/*", "pods", None, false),
            ("pods/*", "pods", Some("log"), true),
            ("*/status", "nodes", Some("status"), true),
            ("*/status", "nodes", Some("proxy"), false),
            ("pods", "nodes", None, false),
        ];
        for (entry, resource, sub, want) in table {
            assert_eq!(
                names_resource(entry, resource, sub),
                want,
                "{entry} {resource} {sub:?}"
            );
        }
    }
}
