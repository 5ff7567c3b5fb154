//! Pod config: the pods each source wants, merged into one desired set, and the changes
//! to it as the operations the syncLoop acts on.
//!
//! Every source reports its whole set each time (the kubelet's SET semantics); the
//! merger keeps each source's last set, diffs the new one against it and turns the
//! difference into [`Op::Add`], [`Op::Update`], [`Op::Reconcile`] and [`Op::Remove`].
//! A pod that fails validation, or whose name another pod already has, is reported as a
//! [`Problem`] naming where it came from and never reaches the loop; the rest of the set
//! goes on. [`PodConfig::all_sources_ready`] is true once every source has reported at
//! least once — housekeeping does not remove anything before that.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use k8s_openapi::api::core::v1 as k8s;

use crate::pod::kubelet::Location;
use crate::pod::{self, PodKey};

/// A pod a source wants: what a pod-source plugin lists, or a manifest read from a file.
#[derive(Debug, Clone, PartialEq)]
pub struct SourcePod {
    /// Where it came from (`web.yaml`, `all.yaml#2`, a URL).
    pub origin: String,
    /// The pod, as the source wrote it (not yet defaulted).
    pub pod: k8s::Pod,
}

/// What changed for a set of pods.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// New pods.
    Add,
    /// Pods whose spec or metadata changed.
    Update,
    /// Pods whose status alone changed.
    Reconcile,
    /// Pods gone from their source: stop them.
    Remove,
    /// Pods deleted gracefully (the API server's deletion timestamp).
    Delete,
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Op::Add => "ADD",
            Op::Update => "UPDATE",
            Op::Reconcile => "RECONCILE",
            Op::Remove => "REMOVE",
            Op::Delete => "DELETE",
        })
    }
}

/// One change, for the syncLoop.
#[derive(Debug, Clone)]
pub struct PodUpdate {
    /// What happened.
    pub op: Op,
    /// The source it happened in.
    pub source: String,
    /// The pods concerned (for removals, as they were last seen).
    pub pods: Vec<Arc<k8s::Pod>>,
}

/// A pod a source offered that the merger refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The source.
    pub source: String,
    /// Where in it (file name, URL, `file#2`).
    pub origin: String,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({}): {}", self.origin, self.source, self.message)
    }
}

/// What the merger holds of one source: whether it has reported yet, and its pods.
#[derive(Debug, Default)]
struct SourceState {
    seen: bool,
    pods: BTreeMap<String, Arc<k8s::Pod>>,
    /// The manifest directory it reads, if any (static pod UIDs hash the full path).
    directory: Option<PathBuf>,
}

/// The merger. One per agent; owned by the config task.
#[derive(Debug)]
pub struct PodConfig {
    node_name: String,
    /// Sources in configured order: an earlier source wins a name both claim.
    sources: Vec<(String, SourceState)>,
}

/// What one report of a source changed.
#[derive(Debug, Default)]
pub struct Merged {
    /// The operations for the syncLoop, removals first.
    pub updates: Vec<PodUpdate>,
    /// Pods refused, by origin.
    pub problems: Vec<Problem>,
}

/// Where a pod from `origin` was read, as the kubelet hashes it: a URL, or the file in
/// the source's `directory` (`path` holds it).
fn location<'a>(
    directory: Option<&Path>,
    origin: &'a str,
    path: &'a mut PathBuf,
) -> Option<Location<'a>> {
    if origin.starts_with("http://") || origin.starts_with("https://") {
        return Some(Location::Url(origin));
    }
    *path = directory?.join(origin.split('#').next().unwrap_or(origin));
    Some(Location::File(path))
}

/// Where in its source a pod came from (its `wasmlet.io/config.origin`, or for API
/// pods `namespace/name`).
fn origin_of(p: &k8s::Pod) -> String {
    p.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(pod::CONFIG_ORIGIN_ANNOTATION).cloned())
        .unwrap_or_else(|| PodKey::of(p).full_name())
}

impl PodConfig {
    /// A merger for `sources`, in their order of precedence.
    pub fn new(node_name: &str, sources: impl IntoIterator<Item = String>) -> Self {
        PodConfig {
            node_name: node_name.to_owned(),
            sources: sources
                .into_iter()
                .map(|s| (s, SourceState::default()))
                .collect(),
        }
    }

    /// Records the manifest directory `source` reads: its pods' UIDs are the kubelet's
    /// for the files there.
    pub fn set_directory(&mut self, source: &str, directory: Option<PathBuf>) {
        if let Some((_, set)) = self.sources.iter_mut().find(|(name, _)| name == source) {
            set.directory = directory;
        }
    }

    /// Adds `source` after the others (the lowest precedence), unless it is one already.
    /// Pods from a source the cluster adds: it has not reported until its first set.
    pub fn add_source(&mut self, source: &str) {
        if !self.sources.iter().any(|(name, _)| name == source) {
            self.sources
                .push((source.to_owned(), SourceState::default()));
        }
    }

    /// Removes `source` and its pods (as though it had reported none).
    pub fn remove_source(&mut self, source: &str) -> Merged {
        if !self.sources.iter().any(|(name, _)| name == source) {
            return Merged::default();
        }
        let merged = self.set(source, Vec::new(), &[]);
        self.sources.retain(|(name, _)| name != source);
        merged
    }

    /// Whether every source has reported at least once.
    pub fn all_sources_ready(&self) -> bool {
        self.sources.iter().all(|(_, s)| s.seen)
    }

    /// Every desired pod, in source order.
    pub fn pods(&self) -> Vec<Arc<k8s::Pod>> {
        self.sources
            .iter()
            .flat_map(|(_, s)| s.pods.values().cloned())
            .collect()
    }

    /// Whether `uid` is desired by some source.
    pub fn contains(&self, uid: &str) -> bool {
        self.sources.iter().any(|(_, s)| s.pods.contains_key(uid))
    }

    /// Takes `source`'s whole new set. Pods the source had from an origin in `broken`
    /// (a manifest that could not be read this time) are kept rather than removed. A
    /// source that is not configured is reported as a problem and changes nothing.
    /// New pods get no `kubernetes.io/config.seen` (see [`PodConfig::set_with`]).
    pub fn set(&mut self, source: &str, offered: Vec<SourcePod>, broken: &[String]) -> Merged {
        self.set_with(source, offered, &[], broken, "")
    }

    /// [`PodConfig::set`] where the pods with a UID in `unchanged` are part of the new
    /// set as they were in the last one (not repeated), and `seen` — the time the set
    /// arrived, RFC 3339 — is each new pod's `kubernetes.io/config.seen` (none if
    /// empty). A UID the source did not have is ignored.
    pub fn set_with(
        &mut self,
        source: &str,
        offered: Vec<SourcePod>,
        unchanged: &[String],
        broken: &[String],
        seen: &str,
    ) -> Merged {
        let mut merged = Merged::default();
        let Some(index) = self.sources.iter().position(|(name, _)| name == source) else {
            merged.problems.push(Problem {
                source: source.to_owned(),
                origin: String::new(),
                message: "not a configured source".into(),
            });
            return merged;
        };
        let taken = self.taken_elsewhere(index);
        let previous = std::mem::take(&mut self.sources[index].1.pods);
        let directory = self.sources[index].1.directory.clone();
        let mut next: BTreeMap<String, Arc<k8s::Pod>> = BTreeMap::new();
        let mut origins: BTreeMap<String, String> = BTreeMap::new();
        for uid in unchanged {
            if let Some(old) = previous.get(uid) {
                origins.insert(PodKey::of(old).full_name(), origin_of(old));
                next.insert(uid.clone(), old.clone());
            }
        }
        let mut changes = Changes {
            seen: seen.to_owned(),
            ..Changes::default()
        };
        let api = source == pod::API_SOURCE;
        for SourcePod { origin, pod } in offered {
            let problem = |message: String| Problem {
                source: source.to_owned(),
                origin: origin.clone(),
                message,
            };
            let pod = match self.prepare(source, &origin, pod, directory.as_deref()) {
                Ok(p) => p,
                Err(message) => {
                    merged.problems.push(problem(message));
                    continue;
                }
            };
            let key = PodKey::of(&pod);
            let full = key.full_name();
            let other = (origins.get(&full).cloned())
                .or_else(|| taken.get(&full).map(|s| format!("source {s}")));
            if let Some(other) = other {
                merged.problems.push(problem(format!(
                    "duplicate pod {full}: already defined by {other}"
                )));
                continue;
            }
            origins.insert(full, origin.clone());
            let pod = changes.take(previous.get(&key.uid), pod, api);
            next.insert(key.uid, pod);
        }
        let mut removed = Vec::new();
        for (uid, p) in &previous {
            if next.contains_key(uid) {
                continue;
            }
            if broken.contains(&origin_of(p)) {
                next.insert(uid.clone(), p.clone());
            } else {
                removed.push(p.clone());
            }
        }
        let set = &mut self.sources[index].1;
        set.pods = next;
        set.seen = true;
        merged.updates = changes.updates(source, removed);
        merged
    }

    /// The pods the sources other than `index` hold, by full name: an earlier source
    /// wins, a later one loses its claim.
    fn taken_elsewhere(&self, index: usize) -> BTreeMap<String, String> {
        let mut taken = BTreeMap::new();
        for (i, (name, set)) in self.sources.iter().enumerate() {
            if i == index {
                continue;
            }
            for p in set.pods.values() {
                taken.insert(PodKey::of(p).full_name(), name.clone());
            }
        }
        taken
    }

    /// A pod `source` offers, made the node's (the API server's: as it named, defaulted
    /// and validated it; a file's or URL's: a static pod, validated here).
    fn prepare(
        &self,
        source: &str,
        origin: &str,
        mut pod: k8s::Pod,
        directory: Option<&Path>,
    ) -> Result<k8s::Pod, String> {
        if source == pod::API_SOURCE {
            pod::make_api(&mut pod);
            return Ok(pod);
        }
        let mut path = PathBuf::new();
        let location = location(directory, origin, &mut path);
        pod::make_static(&mut pod, (source, origin), &self.node_name, location);
        pod::validate(&pod).map_err(|e| format!("invalid pod: {e}"))?;
        Ok(pod)
    }
}

/// What one source's new set changes, by operation.
#[derive(Default)]
struct Changes {
    /// When the set arrived (RFC 3339), for new pods' `config.seen`.
    seen: String,
    added: Vec<Arc<k8s::Pod>>,
    updated: Vec<Arc<k8s::Pod>>,
    reconciled: Vec<Arc<k8s::Pod>>,
    deleted: Vec<Arc<k8s::Pod>>,
}

impl Changes {
    /// Takes `pod`, offered where `old` was: the pod the set keeps, recorded as added,
    /// updated, reconciled (its status only) or deleted (by the API server now: stopped
    /// with its grace period, kept until the API server lets it go), or nothing.
    fn take(&mut self, old: Option<&Arc<k8s::Pod>>, mut pod: k8s::Pod, api: bool) -> Arc<k8s::Pod> {
        let newly_deleted = pod::is_deleted(&pod) && !old.is_some_and(|o| pod::is_deleted(o));
        let Some(old) = old else {
            if !self.seen.is_empty() {
                pod.metadata
                    .annotations
                    .get_or_insert_with(BTreeMap::new)
                    .insert(pod::CONFIG_SEEN_ANNOTATION.into(), self.seen.clone());
            }
            let pod = Arc::new(pod);
            let list = if newly_deleted {
                &mut self.deleted
            } else {
                &mut self.added
            };
            list.push(pod.clone());
            return pod;
        };
        // The same resourceVersion is the same object.
        if api
            && pod.metadata.resource_version.is_some()
            && old.metadata.resource_version == pod.metadata.resource_version
        {
            return old.clone();
        }
        // Keep when it was first seen.
        if let Some(seen) = old
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(pod::CONFIG_SEEN_ANNOTATION))
        {
            pod.metadata
                .annotations
                .get_or_insert_with(BTreeMap::new)
                .insert(pod::CONFIG_SEEN_ANNOTATION.into(), seen.clone());
        }
        let list = if newly_deleted {
            &mut self.deleted
        } else if pod::differ_semantically(old, &pod) {
            &mut self.updated
        } else if old.status != pod.status {
            &mut self.reconciled
        } else {
            return old.clone();
        };
        let pod = Arc::new(pod);
        list.push(pod.clone());
        pod
    }

    /// The updates to send, `removed` first, an empty operation left out.
    fn updates(self, source: &str, removed: Vec<Arc<k8s::Pod>>) -> Vec<PodUpdate> {
        [
            (Op::Remove, removed),
            (Op::Add, self.added),
            (Op::Update, self.updated),
            (Op::Reconcile, self.reconciled),
            (Op::Delete, self.deleted),
        ]
        .into_iter()
        .filter(|(_, pods)| !pods.is_empty())
        .map(|(op, pods)| PodUpdate {
            op,
            source: source.to_owned(),
            pods,
        })
        .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn offered(origin: &str, json: &str) -> SourcePod {
        SourcePod {
            origin: origin.into(),
            pod: serde_json::from_str(json).expect("pod"),
        }
    }

    fn web(name: &str, image: &str) -> String {
        format!(
            r#"{{"metadata":{{"name":"{name}"}},"spec":{{"containers":[{{"name":"c","image":"{image}"}}]}}}}"#
        )
    }

    fn ops(m: &Merged) -> Vec<(Op, Vec<String>)> {
        m.updates
            .iter()
            .map(|u| {
                (
                    u.op,
                    u.pods
                        .iter()
                        .map(|p| p.metadata.name.clone().unwrap_or_default())
                        .collect(),
                )
            })
            .collect()
    }

    #[test]
    fn a_source_added_later_comes_last_and_takes_its_pods_when_removed() {
        let mut c = PodConfig::new("n", ["file".to_string()]);
        c.set("file", vec![offered("a.yaml", &web("a", "i:1"))], &[]);
        c.add_source("cluster-src");
        c.add_source("cluster-src");
        let m = c.set(
            "cluster-src",
            vec![
                offered("x", &web("a", "i:2")),
                offered("y", &web("b", "i:1")),
            ],
            &[],
        );
        // The configured source keeps the name both claim.
        assert_eq!(ops(&m), [(Op::Add, vec!["b-n".into()])]);
        assert_eq!(m.problems.len(), 1, "{:?}", m.problems);
        assert!(c.all_sources_ready());
        let removed = c.remove_source("cluster-src");
        assert_eq!(ops(&removed), [(Op::Remove, vec!["b-n".into()])]);
        assert_eq!(c.pods().len(), 1);
        // Gone: a second removal changes nothing, and it may come back.
        assert!(c.remove_source("cluster-src").updates.is_empty());
        c.add_source("cluster-src");
        assert!(!c.all_sources_ready(), "back, but it has not reported yet");
    }

    #[test]
    fn sets_become_add_remove_and_nothing_when_unchanged() {
        let mut c = PodConfig::new("n", ["file".to_string()]);
        assert!(!c.all_sources_ready());
        let m = c.set(
            "file",
            vec![
                offered("a.yaml", &web("a", "i:1")),
                offered("b.yaml", &web("b", "i:1")),
            ],
            &[],
        );
        assert_eq!(ops(&m), [(Op::Add, vec!["a-n".into(), "b-n".into()])]);
        assert!(c.all_sources_ready());
        let again = c.set(
            "file",
            vec![
                offered("a.yaml", &web("a", "i:1")),
                offered("b.yaml", &web("b", "i:1")),
            ],
            &[],
        );
        assert!(again.updates.is_empty(), "{:?}", ops(&again));
        // b's image changes: a new UID, so the old pod goes and a new one comes.
        let m = c.set(
            "file",
            vec![
                offered("a.yaml", &web("a", "i:1")),
                offered("b.yaml", &web("b", "i:2")),
            ],
            &[],
        );
        assert_eq!(
            ops(&m),
            [
                (Op::Remove, vec!["b-n".into()]),
                (Op::Add, vec!["b-n".into()])
            ]
        );
        let m = c.set("file", vec![offered("b.yaml", &web("b", "i:2"))], &[]);
        assert_eq!(ops(&m), [(Op::Remove, vec!["a-n".into()])]);
        assert_eq!(c.pods().len(), 1);
    }

    #[test]
    fn a_pod_whose_manifest_broke_is_kept() {
        let mut c = PodConfig::new("n", ["file".to_string()]);
        c.set("file", vec![offered("a.yaml", &web("a", "i"))], &[]);
        let m = c.set("file", vec![], &["a.yaml".to_string()]);
        assert!(m.updates.is_empty(), "kept while a.yaml cannot be read");
        assert_eq!(c.pods().len(), 1);
        let m = c.set("file", vec![], &[]);
        assert_eq!(ops(&m), [(Op::Remove, vec!["a-n".into()])]);
    }

    #[test]
    fn pods_with_their_own_uid_update_in_place() {
        let mut c = PodConfig::new("n", ["http".to_string()]);
        let with_uid = |image: &str, phase: Option<&str>| {
            let status = phase
                .map(|p| format!(r#","status":{{"phase":"{p}"}}"#))
                .unwrap_or_default();
            offered(
                "http://x/p",
                &format!(
                    r#"{{"metadata":{{"name":"p","uid":"u1"}},"spec":{{"containers":[{{"name":"c","image":"{image}"}}]}}{status}}}"#
                ),
            )
        };
        c.set("http", vec![with_uid("i:1", None)], &[]);
        let m = c.set("http", vec![with_uid("i:2", None)], &[]);
        assert_eq!(ops(&m), [(Op::Update, vec!["p-n".into()])]);
        let m = c.set("http", vec![with_uid("i:2", Some("Running"))], &[]);
        assert_eq!(ops(&m), [(Op::Reconcile, vec!["p-n".into()])]);
    }

    fn api_pod(rv: &str, phase: &str, deleted: bool) -> SourcePod {
        let deletion = if deleted {
            r#","deletionTimestamp":"2026-11-22T10:00:00Z","deletionGracePeriodSeconds":5"#
        } else {
            ""
        };
        offered(
            "default/web",
            &format!(
                r#"{{"metadata":{{"name":"web","namespace":"default","uid":"u-web","resourceVersion":"{rv}"{deletion}}},
                "spec":{{"nodeName":"n","containers":[{{"name":"c","image":"i:1"}}]}},"status":{{"phase":"{phase}"}}}}"#
            ),
        )
    }

    #[test]
    fn api_pods_keep_their_identity_and_deletion_is_its_own_op() {
        let mut c = PodConfig::new("n", [pod::API_SOURCE.to_string()]);
        let m = c.set("api", vec![api_pod("1", "Pending", false)], &[]);
        assert_eq!(ops(&m), [(Op::Add, vec!["web".into()])], "not renamed");
        let p = &c.pods()[0];
        assert_eq!(pod::uid(p), "u-web", "the API server's UID");
        assert_eq!(pod::source(p), "api");
        assert!(!pod::is_static(p));
        // The same resourceVersion again: nothing to do.
        assert!(
            c.set("api", vec![api_pod("1", "Pending", false)], &[])
                .updates
                .is_empty()
        );
        // Our own status patch comes back with a new resourceVersion: status alone.
        let m = c.set("api", vec![api_pod("2", "Running", false)], &[]);
        assert_eq!(ops(&m), [(Op::Reconcile, vec!["web".into()])]);
        // kubectl delete: DELETE once, with the deletion grace period.
        let m = c.set("api", vec![api_pod("3", "Running", true)], &[]);
        assert_eq!(ops(&m), [(Op::Delete, vec!["web".into()])]);
        assert_eq!(pod::grace_seconds(&m.updates[0].pods[0]), 5);
        let m = c.set("api", vec![api_pod("4", "Succeeded", true)], &[]);
        assert_eq!(ops(&m), [(Op::Reconcile, vec!["web".into()])]);
        // A set naming web as unchanged keeps it, whatever came with it.
        let m = c.set_with("api", vec![], &["u-web".into(), "u-other".into()], &[], "");
        assert!(m.updates.is_empty(), "{:?}", ops(&m));
        assert_eq!(c.pods().len(), 1);
        // The final delete: gone from the watch.
        let m = c.set("api", vec![], &[]);
        assert_eq!(ops(&m), [(Op::Remove, vec!["web".into()])]);
        // A pod first seen already deleted (the agent restarted meanwhile).
        let mut fresh = PodConfig::new("n", [pod::API_SOURCE.to_string()]);
        let m = fresh.set("api", vec![api_pod("9", "Running", true)], &[]);
        assert_eq!(ops(&m), [(Op::Delete, vec!["web".into()])]);
    }

    #[test]
    fn bad_and_duplicate_pods_are_problems_and_the_rest_goes_on() {
        let mut c = PodConfig::new("n", ["file".to_string(), "http".to_string()]);
        let m = c.set(
            "file",
            vec![
                offered("bad.yaml", &web("Bad", "i")),
                offered("a.yaml", &web("a", "i")),
                offered("a-again.yaml", &web("a", "j")),
            ],
            &[],
        );
        assert_eq!(ops(&m), [(Op::Add, vec!["a-n".into()])]);
        assert_eq!(m.problems.len(), 2);
        assert_eq!(m.problems[0].origin, "bad.yaml");
        assert!(m.problems[0].message.contains("metadata.name"));
        assert!(
            m.problems[1]
                .message
                .contains("duplicate pod default/a-n: already defined by a.yaml"),
            "{}",
            m.problems[1]
        );
        assert!(!c.all_sources_ready(), "http has not reported yet");
        let m = c.set("http", vec![offered("http://x", &web("a", "k"))], &[]);
        assert!(m.updates.is_empty());
        assert!(m.problems[0].message.contains("source file"));
        assert!(c.all_sources_ready());
        assert!(
            c.set("nope", vec![], &[]).problems[0]
                .message
                .contains("not a configured")
        );
    }
}
