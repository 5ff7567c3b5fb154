//! Requests on the store's objects: list, get, create, update, merge and apply patches,
//! delete, and the subresources the double serves (TokenRequest, CSR approval), each
//! through the admission policies as the API server admits them.

use std::sync::MutexGuard;

use axum::body::Bytes;
use axum::extract::Request;
use axum::http::{Method, StatusCode, header};
use axum::response::Response;
use serde_json::{Map, Value, json};

use super::{Target, error, parse, query_param, reply};
use crate::sim::ApiServerSim;
use crate::store::Key;
use crate::store::{Store, kind_of, merge, now_rfc3339, selects, status};
use crate::tls::Identity;
use crate::{apply, certificates, crd, policy};

/// A request on the objects, read whole.
pub(super) struct Call {
    method: Method,
    path: String,
    query: String,
    who: Option<Identity>,
    content_type: String,
    body: Bytes,
}

impl Call {
    /// The request's parts and body.
    pub(super) async fn read(
        sim: &ApiServerSim,
        method: Method,
        path: String,
        request: Request,
    ) -> Result<Call, Response> {
        let query = request.uri().query().unwrap_or("").to_owned();
        let who = crate::tls::identity(sim, &request);
        let content_type = request
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned();
        let body = super::body(request).await?;
        Ok(Call {
            method,
            path,
            query,
            who,
            content_type,
            body,
        })
    }

    fn param(&self, key: &str) -> Option<String> {
        query_param(&self.query, key)
    }

    /// The body as JSON (an empty body is an empty object).
    fn json(&self) -> Result<Value, Value> {
        if self.body.is_empty() {
            return Ok(Value::Object(Map::new()));
        }
        serde_json::from_slice(&self.body)
            .map_err(|e| status(400, "BadRequest", format!("the body is not JSON: {e}")))
    }
}

/// A call on a resource the server has, with the store locked.
struct Scope<'a> {
    sim: &'a ApiServerSim,
    store: MutexGuard<'a, Store>,
    call: &'a Call,
    t: Target,
}

impl Scope<'_> {
    fn key(&self, name: &str) -> Key {
        (
            self.t.prefix.clone(),
            self.t.resource.clone(),
            self.t.ns.clone(),
            name.to_owned(),
        )
    }

    fn not_found(&self, name: &str) -> Response {
        error(status(
            404,
            "NotFound",
            format!("{} \"{name}\" not found", self.t.resource),
        ))
    }
}

/// Answers `call` from the store: recorded (with its field manager, which a test of
/// server-side apply counts), then routed by method and whether it names an object.
pub(super) fn serve(sim: &ApiServerSim, call: &Call) -> Response {
    let mut store = sim.lock();
    let recorded = match call.param("fieldManager") {
        Some(m) => format!("{}?fieldManager={m}", call.path),
        None => call.path.clone(),
    };
    store.requests.push((call.method.to_string(), recorded));
    let t = match resource(&store, &call.path) {
        Ok(t) => t,
        Err(e) => return error(e),
    };
    let watching = matches!(call.param("watch").as_deref(), Some("true" | "1"));
    let mut s = Scope {
        sim,
        store,
        call,
        t,
    };
    let name = s.t.name.clone();
    let sub = s.t.sub.clone();
    let (is_csr, apply_patch) = (
        s.t.prefix == certificates::PREFIX && s.t.resource == certificates::RESOURCE,
        call.content_type.starts_with("application/apply-patch"),
    );
    match (&call.method, name.as_deref(), sub.as_deref()) {
        (&Method::GET, None, _) if watching => super::watch(&mut s.store, &s.t, &call.query),
        (&Method::GET, None, _) => list(&s),
        (&Method::POST, Some(name), Some("token")) if s.t.resource == "serviceaccounts" => {
            token_request(&mut s, name)
        }
        (&Method::POST, None, _) if is_csr => create_csr(&mut s),
        (&(Method::PUT | Method::PATCH), Some(name), Some("approval")) if is_csr => {
            csr_approval(&mut s, name)
        }
        (&Method::POST, None, _) => answer(
            StatusCode::CREATED,
            s.call
                .json()
                .and_then(|o| create(&mut s.store, &s.t, o, s.call.who.as_ref())),
        ),
        (&Method::GET, Some(name), _) => match s.store.objects.get(&s.key(name)) {
            Some(o) => reply(StatusCode::OK, o),
            None => s.not_found(name),
        },
        (&Method::PUT, Some(name), _) => {
            let key = s.key(name);
            answer(
                StatusCode::OK,
                s.call
                    .json()
                    .and_then(|o| update(&mut s.store, &key, o, &s.t, s.call.who.as_ref())),
            )
        }
        (&Method::PATCH, Some(name), _) if apply_patch => server_side_apply(&mut s, name),
        (&Method::PATCH, Some(name), _) => merge_patch(&mut s, name),
        (&Method::DELETE, Some(name), _) => {
            let key = s.key(name);
            answer(
                StatusCode::OK,
                s.call
                    .json()
                    .and_then(|options| delete(&mut s.store, &key, &options, s.call.who.as_ref())),
            )
        }
        (m, _, _) => error(status(
            405,
            "MethodNotAllowed",
            format!("{m} is not supported on {}", call.path),
        )),
    }
}

/// The target of `path`, if it names a resource the server has (built in, or a CRD's);
/// else the 404 Status.
fn resource(store: &Store, path: &str) -> Result<Target, Value> {
    let Some(t) = parse(path) else {
        return Err(status(
            404,
            "NotFound",
            format!("the server could not find the requested resource ({path})"),
        ));
    };
    if !crd::built_in(&t.prefix)
        && !store
            .crds
            .contains_key(&(t.prefix.clone(), t.resource.clone()))
    {
        return Err(status(
            404,
            "NotFound",
            "the server could not find the requested resource".into(),
        ));
    }
    Ok(t)
}

/// `code` and the object, or the Status of the error.
fn answer(code: StatusCode, result: Result<Value, Value>) -> Response {
    match result {
        Ok(o) => reply(code, &o),
        Err(e) => error(e),
    }
}

/// The list of a resource, with the field selector applied.
fn list(s: &Scope<'_>) -> Response {
    let t = &s.t;
    let selector = s.call.param("fieldSelector").unwrap_or_default();
    let items: Vec<Value> = s
        .store
        .objects
        .iter()
        .filter(|((p, r, ns, _), _)| {
            *p == t.prefix && *r == t.resource && (t.ns.is_empty() || *ns == t.ns)
        })
        .map(|(_, o)| o)
        .filter(|o| selects(o, &selector))
        .cloned()
        .collect();
    let api_version = t
        .prefix
        .trim_start_matches("api/")
        .trim_start_matches("apis/");
    let kind = s
        .store
        .crds
        .get(&(t.prefix.clone(), t.resource.clone()))
        .map_or_else(|| kind_of(&t.resource), |c| c.kind.clone());
    reply(
        StatusCode::OK,
        &json!({
            "kind": format!("{kind}List"),
            "apiVersion": api_version,
            "metadata": {"resourceVersion": s.store.rv.to_string()},
            "items": items,
        }),
    )
}

/// TokenRequest: a token for an existing service account.
fn token_request(s: &mut Scope<'_>, name: &str) -> Response {
    if !s.store.objects.contains_key(&s.key(name)) {
        return s.not_found(name);
    }
    let request = match s.call.json() {
        Ok(r) => r,
        Err(e) => return error(e),
    };
    let n = s.store.next_rv();
    let ns = &s.t.ns;
    reply(
        StatusCode::CREATED,
        &json!({
            "kind": "TokenRequest",
            "apiVersion": "authentication.k8s.io/v1",
            "metadata": {"name": name, "namespace": ns},
            "spec": request["spec"],
            "status": {"token": format!("sim-token.{ns}.{name}.{n}"), "expirationTimestamp": now_rfc3339()},
        }),
    )
}

/// A CSR created: admitted, then approved and signed as the controller manager would.
fn create_csr(s: &mut Scope<'_>) -> Response {
    let object = match s
        .call
        .json()
        .and_then(|o| certificates::admit(s.call.who.as_ref(), o))
    {
        Ok(o) => o,
        Err(e) => return error(e),
    };
    match s.store.create(&s.t.prefix, &s.t.resource, "", object) {
        Ok(created) => {
            let name = created["metadata"]["name"].as_str().unwrap_or_default();
            certificates::approve(&mut s.store, name);
            if let Ok(ca) = s.sim.cluster_ca() {
                certificates::sign(&mut s.store, ca, s.sim.signing(), name);
            }
            reply(StatusCode::CREATED, &created)
        }
        Err(e) => error(e),
    }
}

/// A CSR's approval set (a patch — kube's `patch_approval` — applies to the CSR as it
/// is), then signed.
fn csr_approval(s: &mut Scope<'_>, name: &str) -> Response {
    let key = s.key(name);
    let body = s
        .call
        .json()
        .map(|b| match (&s.call.method, s.store.objects.get(&key)) {
            (&Method::PATCH, Some(current)) => {
                let mut merged = current.clone();
                merge(&mut merged, &b);
                merged
            }
            _ => b,
        });
    match body.and_then(|b| certificates::set_approval(&mut s.store, name, &b)) {
        Ok(o) => {
            if let Ok(ca) = s.sim.cluster_ca() {
                certificates::sign(&mut s.store, ca, s.sim.signing(), name);
            }
            reply(StatusCode::OK, &o)
        }
        Err(e) => error(e),
    }
}

/// Server-side apply: the applied configuration merged under its field manager (or
/// the object created, when it is not there and no subresource is named).
fn server_side_apply(s: &mut Scope<'_>, name: &str) -> Response {
    let applied: Value = match serde_yaml_ng::from_slice(&s.call.body) {
        Ok(v) => v,
        Err(e) => {
            return error(status(
                400,
                "BadRequest",
                format!("the apply body is neither JSON nor YAML: {e}"),
            ));
        }
    };
    let manager = s.call.param("fieldManager").unwrap_or_default();
    let force = s.call.param("force").as_deref() == Some("true");
    let maps = s
        .store
        .crds
        .get(&(s.t.prefix.clone(), s.t.resource.clone()))
        .map(|c| c.list_maps.clone())
        .unwrap_or_default();
    let key = s.key(name);
    let sub = s.t.sub.as_deref();
    let Some(current) = s.store.objects.get(&key).cloned() else {
        if sub.is_some() {
            return s.not_found(name);
        }
        // Apply creates what is not there.
        let empty = json!({"metadata": {}});
        let mut object = match apply::apply(&empty, &applied, &manager, force, None, &maps) {
            Ok(o) => o,
            Err(e) => return error(e),
        };
        object["apiVersion"] = applied["apiVersion"].clone();
        object["kind"] = applied["kind"].clone();
        object["metadata"]["name"] = json!(name);
        return answer(
            StatusCode::CREATED,
            create(&mut s.store, &s.t, object, s.call.who.as_ref()),
        );
    };
    let request = policy::Request {
        key: &key,
        sub,
        operation: "UPDATE",
        who: s.call.who.as_ref(),
    };
    let applied = apply::apply(&current, &applied, &manager, force, sub, &maps)
        .and_then(|o| policy::admit(&s.store, &request, &o, Some(&current)).map(|()| o));
    answer(
        StatusCode::OK,
        applied.and_then(|o| s.store.put(&key, &current, o)),
    )
}

/// A merge patch (or a strategic one, whose pod container lists merge by name); a
/// resourceVersion in the patch is a precondition.
fn merge_patch(s: &mut Scope<'_>, name: &str) -> Response {
    let content_type = &s.call.content_type;
    if content_type.starts_with("application/json-patch") {
        return error(status(
            415,
            "UnsupportedMediaType",
            format!("the double applies merge patches only, not {content_type}"),
        ));
    }
    let patch = match s.call.json() {
        Ok(p) => p,
        Err(e) => return error(e),
    };
    let key = s.key(name);
    let Some(mut object) = s.store.objects.get(&key).cloned() else {
        return s.not_found(name);
    };
    let asked = patch["metadata"]["resourceVersion"].clone();
    let patch = if content_type.starts_with("application/strategic-merge-patch") {
        strategic_lists(&object, patch)
    } else {
        patch
    };
    merge(&mut object, &patch);
    object["metadata"]["resourceVersion"] = if asked.is_string() {
        asked
    } else {
        Value::Null
    };
    answer(
        StatusCode::OK,
        update(&mut s.store, &key, object, &s.t, s.call.who.as_ref()),
    )
}

/// Creates `object` under `t`, as `who`, once the admission policies admit it.
fn create(
    store: &mut Store,
    t: &Target,
    object: Value,
    who: Option<&Identity>,
) -> Result<Value, Value> {
    let name = object["metadata"]["name"].as_str().unwrap_or_default();
    let key = (
        t.prefix.clone(),
        t.resource.clone(),
        t.ns.clone(),
        name.to_owned(),
    );
    let request = policy::Request {
        key: &key,
        sub: None,
        operation: "CREATE",
        who,
    };
    policy::admit(store, &request, &object, None)?;
    store.create(&t.prefix, &t.resource, &t.ns, object)
}

/// Deletes the object at `key`, as `who`, once the admission policies admit it (they
/// see it as `oldObject`, and `object` null).
fn delete(
    store: &mut Store,
    key: &Key,
    options: &Value,
    who: Option<&Identity>,
) -> Result<Value, Value> {
    if let Some(old) = store.objects.get(key).cloned() {
        let request = policy::Request {
            key,
            sub: None,
            operation: "DELETE",
            who,
        };
        policy::admit(store, &request, &Value::Null, Some(&old))?;
    }
    store.delete(key, options)
}

/// Replaces the object at `key` with `object` (through `t`'s subresource), as `who`,
/// once the admission policies admit it.
fn update(
    store: &mut Store,
    key: &Key,
    object: Value,
    t: &Target,
    who: Option<&Identity>,
) -> Result<Value, Value> {
    let (old, stored) = store.updated(key, object, t.sub.as_deref())?;
    let request = policy::Request {
        key,
        sub: t.sub.as_deref(),
        operation: "UPDATE",
        who,
    };
    policy::admit(store, &request, &stored, Some(&old))?;
    store.put(key, &old, stored)
}

/// A strategic merge patch's pod container lists merged by name into the object's (the
/// patch strategy of `containers`, `initContainers` and `ephemeralContainers`), its
/// `$setElementOrder` directives dropped; the rest is applied as a merge patch.
fn strategic_lists(object: &Value, mut patch: Value) -> Value {
    let Some(spec) = patch.get_mut("spec").and_then(Value::as_object_mut) else {
        return patch;
    };
    spec.retain(|k, _| !k.starts_with("$setElementOrder/"));
    for list in ["containers", "initContainers", "ephemeralContainers"] {
        let Some(items) = spec.get(list).and_then(Value::as_array).cloned() else {
            continue;
        };
        let mut merged = object["spec"][list].as_array().cloned().unwrap_or_default();
        for item in items {
            match merged.iter_mut().find(|m| m["name"] == item["name"]) {
                Some(m) => merge(m, &item),
                None => merged.push(item),
            }
        }
        spec.insert(list.into(), Value::Array(merged));
    }
    patch
}
