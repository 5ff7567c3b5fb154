//! Watches: the changes after a resourceVersion, then live ones, as newline-delimited
//! events.

use axum::body::Bytes;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::Value;

use super::{Target, query_param};
use crate::store::{Event, Store, selects, status};

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
