//! What the node says: its entry of each object's status, the summaries it writes, and
//! the list of what it serves, kept for a start without the API server.

use tracing::warn;

use super::{Controller, Desired, now_rfc3339};
use crate::status::{self, Entry, State, Write};

impl Controller {
    /// Asks for the node's entry of `name` to be `want` (generation, serving digest,
    /// state, message), unless it already says that.
    pub(super) fn report(
        &mut self,
        name: &str,
        want: Option<(i64, Option<String>, State, String)>,
    ) {
        let previous = self.reported.get(name).cloned().flatten();
        let entry = want.map(|(generation, digest, state, message)| Entry {
            node_name: self.node.clone(),
            observed_generation: generation,
            digest,
            state,
            message,
            last_transition_time: match &previous {
                Some(p) if p.state == state => p.last_transition_time.clone(),
                _ => now_rfc3339(),
            },
            verified: self.signers.get(name).cloned(),
        });
        let same = match (&previous, &entry) {
            (None, None) => true,
            (Some(a), Some(b)) => a.same(b),
            _ => false,
        };
        if same {
            return;
        }
        if let Some(e) = &entry
            && e.state == State::Failed
            && previous
                .as_ref()
                .is_none_or(|p| p.state != State::Failed || p.message != e.message)
        {
            let generation = e.observed_generation;
            let uid = self.uid(name);
            let serving = e.digest.as_deref();
            self.targets
                .events
                .refused(name, &uid, generation, &e.message, serving);
        }
        if let Some(w) = &self.writer {
            w.send(Write::Entry(name.to_owned(), entry.clone()));
        }
        self.reported.insert(name.to_owned(), entry);
    }

    /// Writes the summaries this node is the writer of.
    pub(super) fn summarize(&mut self) {
        let names: Vec<String> = self.objects.keys().cloned().collect();
        for name in names {
            self.summarize_one(&name);
        }
    }

    /// Writes the summary of `name` if this node is its writer.
    pub(super) fn summarize_one(&mut self, name: &str) {
        let Some(obj) = self.objects.get(name) else {
            return;
        };
        if obj.summary_writer().as_deref() != Some(self.node.as_str()) {
            return;
        }
        let status = obj.status();
        let entries = status::entries(&status);
        let generation = obj.object["metadata"]["generation"].as_i64().unwrap_or(0);
        let summary = status::summary(generation, &entries);
        if status["summary"] == summary {
            // Written (by this node or another): a later different one is an overwrite.
            if let Some(sent) = self.summaries.get_mut(name) {
                sent.1 = sent.0 == summary;
            }
            return;
        }
        // Asked for and not yet seen written: it is on its way. Seen written, yet
        // different now: another node's older summary landed after it — write it again.
        if self
            .summaries
            .get(name)
            .is_some_and(|(sent, landed)| *sent == summary && !landed)
        {
            return;
        }
        if let Some(w) = &self.writer {
            w.send(Write::Summary(name.to_owned(), summary.clone()));
        }
        self.summaries.insert(name.to_owned(), (summary, false));
    }

    /// Records what the node serves, for a start without the API server.
    pub(super) fn persist(&self) {
        let serving: Vec<&Desired> = self.serving.values().collect();
        let write = serde_json::to_vec_pretty(&serving)
            .map_err(std::io::Error::other)
            .and_then(|bytes| {
                let partial = self.store.with_extension("partial");
                std::fs::write(&partial, bytes)?;
                std::fs::rename(&partial, &self.store)
            });
        if let Err(e) = write {
            warn!(file = %self.store.display(), error = %e, "recording the node's cluster plugins failed; a restart without the API server would not serve them");
        }
    }
}
