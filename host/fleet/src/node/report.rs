//! What the node says: its entry for each object (in its WasmletNode), and the list of
//! what it serves, kept for a start without the API server.

use tracing::warn;

use super::{Controller, Desired, now_rfc3339};
use crate::status::{Entry, State, Write};

impl Controller {
    /// Asks for the node's entry of `name` to be `want` (generation, serving digest,
    /// state, message), unless it already says that.
    pub(super) fn report(
        &mut self,
        name: &str,
        want: Option<(i64, Option<String>, State, String)>,
    ) {
        let previous = self.reported.get(name).cloned();
        let entry = want.map(|(generation, digest, state, message)| {
            let (would_reject, audit) = self.extras(name, digest.as_deref());
            Entry {
                name: name.to_owned(),
                observed_generation: generation,
                digest,
                state,
                message,
                last_transition_time: match &previous {
                    Some(p) if p.state == state => p.last_transition_time.clone(),
                    _ => now_rfc3339(),
                },
                verified: self.signers.get(name).cloned(),
                would_reject,
                audit,
            }
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
        match entry {
            Some(e) => self.reported.insert(name.to_owned(), e),
            None => self.reported.remove(name),
        };
        self.unsent = true;
    }

    /// Sends the node's entries to its status task, when they changed.
    pub(super) fn send_entries(&mut self) {
        if !self.unsent {
            return;
        }
        self.unsent = false;
        if let Some(w) = &self.writer {
            w.send(Write::Entries(self.reported.clone()));
        }
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
