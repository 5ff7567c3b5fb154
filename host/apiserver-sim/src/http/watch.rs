//! Watches: the changes after a resourceVersion, then live ones, as newline-delimited
//! events.

use axum::body::Bytes;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::Value;

use super::{Target, query_param};
use crate::store::{Store, selects, status};

/// A watch: newline-delimited `{"type": ..., "object": ...}` events, from the changes
/// after `resourceVersion` (or, without one, every current object as ADDED), then live
/// ones, until `timeoutSeconds` or [`ApiServerSim::end_watches`]. A resourceVersion older
/// than the change log gets one ERROR event with a 410 `Expired` Status, as the API
/// server answers.
pub(crate) fn watch(store: &mut Store, t: &Target, query: &str) -> Response {
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
    let filter = Filter {
        prefix: t.prefix.clone(),
        resource: t.resource.clone(),
        ns: t.ns.clone(),
        selector: query_param(query, "fieldSelector").unwrap_or_default(),
    };
    let from = query_param(query, "resourceVersion").unwrap_or_default();
    let timeout = query_param(query, "timeoutSeconds")
        .and_then(|s| s.parse::<u64>().ok())
        .unwrap_or(1800);
    let first = match first_events(store, &filter, &from) {
        Ok(first) => first,
        Err(gone) => return json_response(axum::body::Body::from(gone)),
    };
    let after = store.rv;
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
                    Ok(e) if e.rv > after && filter.matches(&e.key, &e.object) => {
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
    json_response(axum::body::Body::from_stream(
        tokio_stream::wrappers::ReceiverStream::new(rx),
    ))
}

/// The objects a watch is about: a resource, in a namespace (or all), selected by
/// fields.
struct Filter {
    prefix: String,
    resource: String,
    ns: String,
    selector: String,
}

impl Filter {
    fn matches(&self, key: &crate::store::Key, object: &Value) -> bool {
        key.0 == self.prefix
            && key.1 == self.resource
            && (self.ns.is_empty() || key.2 == self.ns)
            && selects(object, &self.selector)
    }
}

/// What a watch sends first: the changes after resourceVersion `from`, or without one
/// every current object as ADDED; a resourceVersion older than the change log is the
/// ERROR line of a 410 `Expired` Status.
fn first_events(store: &Store, filter: &Filter, from: &str) -> Result<Vec<Bytes>, Bytes> {
    let line = crate::store::watch_line;
    match from.parse::<u64>() {
        Ok(rv) if rv > 0 => {
            if rv < store.oldest {
                let gone = status(
                    410,
                    "Expired",
                    format!("too old resource version: {rv} ({})", store.oldest),
                );
                return Err(line("ERROR", &gone));
            }
            Ok(store
                .events
                .iter()
                .filter(|e| e.rv > rv && filter.matches(&e.key, &e.object))
                .map(|e| e.line())
                .collect())
        }
        _ => Ok(store
            .objects
            .iter()
            .filter(|(key, object)| filter.matches(key, object))
            .map(|(_, object)| line("ADDED", object))
            .collect()),
    }
}

fn json_response(body: axum::body::Body) -> Response {
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        body,
    )
        .into_response()
}
