use super::*;

fn entry(name: &str, generation: i64, state: State) -> Entry {
    Entry {
        name: name.into(),
        observed_generation: generation,
        digest: None,
        state,
        message: String::new(),
        last_transition_time: "2026-11-26T10:00:00Z".into(),
        verified: None,
        would_reject: None,
        audit: None,
    }
}

fn list(entries: &[Entry]) -> Entries {
    entries
        .iter()
        .map(|e| (e.name.clone(), e.clone()))
        .collect()
}

#[test]
fn entries_are_read_from_the_object_and_compared_without_their_time() {
    let status = json!({"plugins": [
        {"name": "a", "observedGeneration": 3, "digest": "sha256:ab", "state": "Loaded",
         "lastTransitionTime": "2026-11-24T00:00:00Z"},
        {"name": "b", "state": "Unknown"},
    ]});
    let read = entries(&status);
    assert_eq!(read.len(), 1, "an entry this node cannot read is skipped");
    let mut mine = entry("a", 3, State::Loaded);
    mine.digest = Some("sha256:ab".into());
    assert!(read["a"].same(&mine));
    assert_ne!(read["a"], mine);
    assert!(same_entries(&read, &list(&[mine])));
}

/// An audit of `pods` running pods, `would_reject` of them refused (the first named).
fn audit(pods: u64, would_reject: u64) -> Audit {
    Audit {
        digest: "sha256:ab".into(),
        time: "2026-11-29T10:00:00Z".into(),
        pods,
        would_reject,
        rejected: (0..would_reject.min(1))
            .map(|_| AuditedPod {
                pod: "team/web".into(),
                reason: "NodePorts".into(),
                message: String::new(),
            })
            .collect(),
    }
}

#[test]
fn the_status_counts_its_entries_by_state_and_the_pods_its_audits_would_reject() {
    let mut audited = entry("a", 1, State::Loaded);
    audited.audit = Some(audit(12, 2));
    let mut clean = entry("c", 1, State::Loaded);
    clean.audit = Some(audit(12, 0));
    let status = node_status(&list(&[
        audited.clone(),
        entry("b", 2, State::Failed),
        clean,
        entry("d", 4, State::Pending),
    ]));
    assert_eq!(
        (&status["serving"], &status["failed"], &status["pending"]),
        (&json!(2), &json!(1), &json!(1))
    );
    assert_eq!(status["wouldReject"], 2);
    assert_eq!(
        status["plugins"][0]["audit"]["rejected"][0]["pod"],
        "team/web"
    );
    assert_eq!(status["plugins"][0]["audit"]["wouldReject"], 2);
    assert!(status["plugins"][1].get("audit").is_none());
    assert_eq!(entries(&status)["a"], audited, "read back as written");
    let mut counted = audited.clone();
    counted.would_reject = Some(3);
    assert!(!counted.same(&audited), "a count is a change to write");
    let names: Vec<&str> = status["plugins"]
        .as_array()
        .expect("plugins")
        .iter()
        .map(|e| e["name"].as_str().expect("name"))
        .collect();
    assert_eq!(names, ["a", "b", "c", "d"]);
}

#[tokio::test(start_paused = true)]
async fn a_young_pending_entry_leaves_what_was_written_and_then_comes_of_age() {
    let start = Instant::now();
    let written = list(&[entry("a", 1, State::Loaded)]);
    let wanted = list(&[entry("a", 2, State::Pending), entry("b", 1, State::Pending)]);
    let changed = BTreeMap::from([("a".to_owned(), start), ("b".to_owned(), start)]);

    // Younger than the delay: generation 1 still said for a, nothing for b yet.
    assert!(same_entries(
        &view(&wanted, &changed, &written, start),
        &written
    ));
    assert_eq!(
        coming_of_age(&wanted, &changed, start),
        Some(start + PENDING_DELAY)
    );
    // Of age: both Pending.
    let later = start + PENDING_DELAY;
    assert!(same_entries(
        &view(&wanted, &changed, &written, later),
        &wanted
    ));
    assert_eq!(coming_of_age(&wanted, &changed, later), None);
}

#[test]
fn a_state_that_did_not_change_keeps_its_time_and_a_missing_plugin_goes() {
    let now = Instant::now();
    let written = list(&[
        entry("a", 1, State::Loaded),
        entry("gone", 1, State::Loaded),
    ]);
    let mut next = entry("a", 2, State::Loaded);
    next.last_transition_time = "2026-11-26T11:00:00Z".into();
    let mut failed = entry("b", 1, State::Failed);
    failed.last_transition_time = "2026-11-26T11:00:00Z".into();
    let wanted = list(&[next, failed.clone()]);
    let out = view(&wanted, &BTreeMap::new(), &written, now);
    assert_eq!(out.keys().collect::<Vec<_>>(), ["a", "b"]);
    assert_eq!(out["a"].observed_generation, 2);
    assert_eq!(out["a"].last_transition_time, "2026-11-26T10:00:00Z");
    assert_eq!(out["b"], failed);
}
