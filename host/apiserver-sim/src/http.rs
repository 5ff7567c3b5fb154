//! The HTTP side: paths parsed into targets, requests answered from the store,
//! watches streamed, the node proxy and the reviews routed.

use axum::body::Bytes;
use axum::extract::{Request, State};
use axum::http::{Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};

use crate::certificates;
use crate::store::{Event, Store, kind_of, merge, now_rfc3339, selects, status};
use crate::values::percent_decode;
use crate::{ApiServerSim, apply, crd, node_proxy, policy};

/// The parts of a request path.
pub(crate) struct Target {
    pub(crate) prefix: String,
    pub(crate) resource: String,
    pub(crate) ns: String,
    pub(crate) name: Option<String>,
    pub(crate) sub: Option<String>,
}

pub(crate) fn parse(path: &str) -> Option<Target> {
    let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (prefix, rest) = match segs.as_slice() {
        ["api", v, rest @ ..] => (format!("api/{v}"), rest),
        ["apis", g, v, rest @ ..] => (format!("apis/{g}/{v}"), rest),
        _ => return None,
    };
    let (ns, rest) = match rest {
        ["namespaces", ns, rest @ ..] if !rest.is_empty() => ((*ns).to_owned(), rest),
        _ => (String::new(), rest),
    };
    let (resource, name, sub) = match rest {
        [r] => (r, None, None),
        [r, n] => (r, Some(n), None),
        [r, n, s] => (r, Some(n), Some(s)),
        _ => return None,
    };
    Some(Target {
        prefix,
        resource: (*resource).to_owned(),
        ns,
        name: name.map(|n| (*n).to_owned()),
        sub: sub.map(|s| (*s).to_owned()),
    })
}

pub(crate) fn query_param(query: &str, key: &str) -> Option<String> {
    query.split('&').find_map(|kv| {
        let (k, v) = kv.split_once('=')?;
        (k == key).then(|| percent_decode(v))
    })
}

pub(crate) fn reply(code: StatusCode, body: &Value) -> Response {
    (
        code,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

pub(crate) fn error(body: Value) -> Response {
    let code = body["code"]
        .as_u64()
        .and_then(|c| u16::try_from(c).ok())
        .and_then(|c| StatusCode::from_u16(c).ok())
        .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    reply(code, &body)
}

pub(crate) async fn handle(State(sim): State<ApiServerSim>, request: Request) -> Response {
    let method = request.method().clone();
    if method != Method::GET {
        let latency = *sim.latency.lock().unwrap_or_else(|p| p.into_inner());
        if !latency.is_zero() {
            tokio::time::sleep(latency).await;
        }
    }
    let path = request.uri().path().to_owned();
    if crate::tls::expired(&request) {
        sim.lock()
            .failures
            .push((method.to_string(), path.clone(), 401));
        return error(status(
            401,
            "Unauthorized",
            "Unauthorized: x509: certificate has expired or is not yet valid".into(),
        ));
    }
    if let Some(rest) = path.strip_prefix("/api/v1/nodes/")
        && let Some((node, rest)) = rest.split_once("/proxy")
        && !node.contains('/')
    {
        sim.lock().requests.push((method.to_string(), path.clone()));
        let rest = rest.trim_start_matches('/').to_owned();
        return node_proxy::handle_node(sim, node.to_owned(), rest, request).await;
    }
    if let Some(Target {
        prefix,
        resource,
        ns,
        name: Some(name),
        sub: Some(sub),
    }) = parse(&path)
        && prefix == "api/v1"
        && resource == "pods"
        && matches!(sub.as_str(), "log" | "exec" | "attach" | "portforward")
    {
        sim.lock().requests.push((method.to_string(), path.clone()));
        return node_proxy::handle(sim, ns, name, sub, request).await;
    }
    let query = request.uri().query().unwrap_or("").to_owned();
    let who = crate::tls::identity(&sim, &request);
    let content_type = request
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    let body: Bytes = match axum::body::to_bytes(request.into_body(), 16 << 20).await {
        Ok(b) => b,
        Err(e) => return error(status(400, "BadRequest", format!("reading the body: {e}"))),
    };
    if method == Method::POST
        && matches!(
            path.as_str(),
            "/apis/authentication.k8s.io/v1/tokenreviews"
                | "/apis/authorization.k8s.io/v1/subjectaccessreviews"
        )
    {
        sim.lock().requests.push((method.to_string(), path.clone()));
        let Ok(review) = serde_json::from_slice::<Value>(&body) else {
            return error(status(400, "BadRequest", "the body is not JSON".into()));
        };
        let resource = path.rsplit('/').next().unwrap_or_default();
        return reply(
            StatusCode::CREATED,
            &node_proxy::review(&sim, resource, &review),
        );
    }
    let mut store = sim.lock();
    // Writes that name a field manager are recorded with it (who wrote is what a test
    // of server-side apply counts).
    let recorded = match query_param(&query, "fieldManager") {
        Some(m) => format!("{path}?fieldManager={m}"),
        None => path.clone(),
    };
    store.requests.push((method.to_string(), recorded));
    let Some(t) = parse(&path) else {
        return error(status(
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
        return error(status(
            404,
            "NotFound",
            "the server could not find the requested resource".into(),
        ));
    }
    let json_body = || -> Result<Value, Value> {
        if body.is_empty() {
            return Ok(Value::Object(Map::new()));
        }
        serde_json::from_slice(&body)
            .map_err(|e| status(400, "BadRequest", format!("the body is not JSON: {e}")))
    };
    let key = |name: &str| {
        (
            t.prefix.clone(),
            t.resource.clone(),
            t.ns.clone(),
            name.to_owned(),
        )
    };
    let watching = matches!(query_param(&query, "watch").as_deref(), Some("true" | "1"));
    match (method, t.name.as_deref()) {
        (Method::GET, None) if watching => watch(&mut store, &t, &query),
        (Method::GET, None) => {
            let selector = query_param(&query, "fieldSelector").unwrap_or_default();
            let items: Vec<Value> = store
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
            reply(
                StatusCode::OK,
                &json!({
                    "kind": format!("{}List", store.crds.get(&(t.prefix.clone(), t.resource.clone()))
                        .map_or_else(|| kind_of(&t.resource), |c| c.kind.clone())),
                    "apiVersion": api_version,
                    "metadata": {"resourceVersion": store.rv.to_string()},
                    "items": items,
                }),
            )
        }
        // TokenRequest: a token for an existing service account.
        (Method::POST, Some(name))
            if t.resource == "serviceaccounts" && t.sub.as_deref() == Some("token") =>
        {
            if !store.objects.contains_key(&key(name)) {
                return error(status(
                    404,
                    "NotFound",
                    format!("serviceaccounts \"{name}\" not found"),
                ));
            }
            let request = match json_body() {
                Ok(r) => r,
                Err(e) => return error(e),
            };
            let n = store.next_rv();
            reply(
                StatusCode::CREATED,
                &json!({
                    "kind": "TokenRequest",
                    "apiVersion": "authentication.k8s.io/v1",
                    "metadata": {"name": name, "namespace": t.ns},
                    "spec": request["spec"],
                    "status": {"token": format!("sim-token.{}.{name}.{n}", t.ns), "expirationTimestamp": now_rfc3339()},
                }),
            )
        }
        (Method::POST, None)
            if t.prefix == certificates::PREFIX && t.resource == certificates::RESOURCE =>
        {
            match json_body().and_then(|o| certificates::admit(who.as_ref(), o)) {
                Ok(object) => match store.create(&t.prefix, &t.resource, "", object) {
                    Ok(created) => {
                        let name = created["metadata"]["name"].as_str().unwrap_or_default();
                        certificates::approve(&mut store, name);
                        if let Ok(ca) = sim.cluster_ca() {
                            certificates::sign(&mut store, ca, sim.signing(), name);
                        }
                        reply(StatusCode::CREATED, &created)
                    }
                    Err(e) => error(e),
                },
                Err(e) => error(e),
            }
        }
        (m @ (Method::PUT | Method::PATCH), Some(name))
            if t.prefix == certificates::PREFIX
                && t.resource == certificates::RESOURCE
                && t.sub.as_deref() == Some("approval") =>
        {
            // A patch (kube's `patch_approval`) applies to the CSR as it is.
            let body = json_body().map(|b| match (m, store.objects.get(&key(name))) {
                (Method::PATCH, Some(current)) => {
                    let mut merged = current.clone();
                    merge(&mut merged, &b);
                    merged
                }
                _ => b,
            });
            let approved = body.and_then(|b| certificates::set_approval(&mut store, name, &b));
            match approved {
                Ok(o) => {
                    if let Ok(ca) = sim.cluster_ca() {
                        certificates::sign(&mut store, ca, sim.signing(), name);
                    }
                    reply(StatusCode::OK, &o)
                }
                Err(e) => error(e),
            }
        }
        (Method::POST, None) => match json_body() {
            Ok(object) => match create(&mut store, &t, object, who.as_ref()) {
                Ok(o) => reply(StatusCode::CREATED, &o),
                Err(e) => error(e),
            },
            Err(e) => error(e),
        },
        (Method::GET, Some(name)) => match store.objects.get(&key(name)) {
            Some(o) => reply(StatusCode::OK, o),
            None => error(status(
                404,
                "NotFound",
                format!("{} \"{name}\" not found", t.resource),
            )),
        },
        (Method::PUT, Some(name)) => match json_body() {
            Ok(object) => match update(&mut store, &key(name), object, &t, who.as_ref()) {
                Ok(o) => reply(StatusCode::OK, &o),
                Err(e) => error(e),
            },
            Err(e) => error(e),
        },
        (Method::PATCH, Some(name)) if content_type.starts_with("application/apply-patch") => {
            let applied: Value = match serde_yaml_ng::from_slice(&body) {
                Ok(v) => v,
                Err(e) => {
                    return error(status(
                        400,
                        "BadRequest",
                        format!("the apply body is neither JSON nor YAML: {e}"),
                    ));
                }
            };
            let manager = query_param(&query, "fieldManager").unwrap_or_default();
            let force = query_param(&query, "force").as_deref() == Some("true");
            let maps = store
                .crds
                .get(&(t.prefix.clone(), t.resource.clone()))
                .map(|c| c.list_maps.clone())
                .unwrap_or_default();
            let Some(current) = store.objects.get(&key(name)).cloned() else {
                if t.sub.is_some() {
                    return error(status(
                        404,
                        "NotFound",
                        format!("{} \"{name}\" not found", t.resource),
                    ));
                }
                // Apply creates what is not there.
                let mut object = match apply::apply(
                    &json!({"metadata": {}}),
                    &applied,
                    &manager,
                    force,
                    None,
                    &maps,
                ) {
                    Ok(o) => o,
                    Err(e) => return error(e),
                };
                object["apiVersion"] = applied["apiVersion"].clone();
                object["kind"] = applied["kind"].clone();
                object["metadata"]["name"] = json!(name);
                return match create(&mut store, &t, object, who.as_ref()) {
                    Ok(o) => reply(StatusCode::CREATED, &o),
                    Err(e) => error(e),
                };
            };
            let request = policy::Request {
                key: &key(name),
                sub: t.sub.as_deref(),
                operation: "UPDATE",
                who: who.as_ref(),
            };
            match apply::apply(&current, &applied, &manager, force, t.sub.as_deref(), &maps)
                .and_then(|object| {
                    policy::admit(&store, &request, &object, Some(&current)).map(|()| object)
                }) {
                Ok(object) => match store.put(&key(name), &current, object) {
                    Ok(o) => reply(StatusCode::OK, &o),
                    Err(e) => error(e),
                },
                Err(e) => error(e),
            }
        }
        (Method::PATCH, Some(name)) => {
            if content_type.starts_with("application/json-patch") {
                return error(status(
                    415,
                    "UnsupportedMediaType",
                    format!("the double applies merge patches only, not {content_type}"),
                ));
            }
            let patch = match json_body() {
                Ok(p) => p,
                Err(e) => return error(e),
            };
            let Some(mut object) = store.objects.get(&key(name)).cloned() else {
                return error(status(
                    404,
                    "NotFound",
                    format!("{} \"{name}\" not found", t.resource),
                ));
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
            match update(&mut store, &key(name), object, &t, who.as_ref()) {
                Ok(o) => reply(StatusCode::OK, &o),
                Err(e) => error(e),
            }
        }
        (Method::DELETE, Some(name)) => match json_body() {
            Ok(options) => match delete(&mut store, &key(name), &options, who.as_ref()) {
                Ok(o) => reply(StatusCode::OK, &o),
                Err(e) => error(e),
            },
            Err(e) => error(e),
        },
        (m, _) => error(status(
            405,
            "MethodNotAllowed",
            format!("{m} is not supported on {path}"),
        )),
    }
}

/// Creates `object` under `t`, as `who`, once the admission policies admit it.
fn create(
    store: &mut Store,
    t: &Target,
    object: Value,
    who: Option<&crate::tls::Identity>,
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
    key: &crate::Key,
    options: &Value,
    who: Option<&crate::tls::Identity>,
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
    key: &crate::Key,
    object: Value,
    t: &Target,
    who: Option<&crate::tls::Identity>,
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

/// A watch: newline-delimited `{"type": ..., "object": ...}` events, from the changes
/// after `resourceVersion` (or, without one, every current object as ADDED), then live
/// ones, until `timeoutSeconds` or [`ApiServerSim::end_watches`]. A resourceVersion older
/// than the change log gets one ERROR event with a 410 `Expired` Status, as the API
/// server answers.
pub(crate) fn watch(store: &mut Store, t: &Target, query: &str) -> Response {
    let selector = query_param(query, "fieldSelector").unwrap_or_default();
    store.watches.push(format!(
        "/{}/{}{}",
        t.prefix,
        if t.ns.is_empty() {
            String::new()
        } else {
            format!("namespaces/{}/", t.ns)
        },
        t.resource
    ));
    let from = query_param(query, "resourceVersion").unwrap_or_default();
    let timeout = query_param(query, "timeoutSeconds")
        .and_then(|s| s.parse::<u64>().ok())
        .unwrap_or(1800);
    let ours_object = {
        let (prefix, resource, ns) = (t.prefix.clone(), t.resource.clone(), t.ns.clone());
        let selector = selector.clone();
        move |key: &crate::Key, object: &Value| {
            key.0 == prefix
                && key.1 == resource
                && (ns.is_empty() || key.2 == ns)
                && selects(object, &selector)
        }
    };
    let ours = {
        let ours_object = ours_object.clone();
        move |e: &Event| ours_object(&e.key, &e.object)
    };
    let line = crate::store::watch_line;
    let mut first: Vec<Bytes> = Vec::new();
    let after = store.rv;
    match from.parse::<u64>() {
        Ok(rv) if rv > 0 => {
            if rv < store.oldest {
                let gone = status(
                    410,
                    "Expired",
                    format!("too old resource version: {rv} ({})", store.oldest),
                );
                let body = line("ERROR", &gone);
                return (
                    StatusCode::OK,
                    [(header::CONTENT_TYPE, "application/json")],
                    body,
                )
                    .into_response();
            }
            for e in store.events.iter().filter(|e| e.rv > rv && ours(e)) {
                first.push(e.line());
            }
        }
        _ => {
            for (key, object) in &store.objects {
                if ours_object(key, object) {
                    first.push(line("ADDED", object));
                }
            }
        }
    }
    let mut live = store.changes.subscribe();
    let mut epoch = store.epoch.subscribe();
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(256);
    tokio::spawn(async move {
        for b in first {
            if tx.send(Ok(b)).await.is_err() {
                return;
            }
        }
        let deadline = tokio::time::sleep(std::time::Duration::from_secs(timeout));
        tokio::pin!(deadline);
        loop {
            tokio::select! {
                () = &mut deadline => return,
                _ = epoch.changed() => return,
                got = live.recv() => match got {
                    Ok(e) if e.rv > after && ours(&e) => {
                        if tx.send(Ok(e.line())).await.is_err() {
                            return;
                        }
                    }
                    Ok(_) => {}
                    // Fell behind: end the watch; the client resumes or relists.
                    Err(_) => return,
                },
            }
        }
    });
    let body = axum::body::Body::from_stream(tokio_stream::wrappers::ReceiverStream::new(rx));
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        body,
    )
        .into_response()
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
