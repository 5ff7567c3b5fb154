use super::*;

const GPU: &str = "example.com/gpu";

fn running(state: &mut State, generation: u64) {
    state.connected(
        GPU,
        Endpoint {
            generation,
            ..Endpoint::default()
        },
    );
}

fn counts(c: &Capacity) -> (Option<u64>, Option<u64>) {
    (
        c.allocatable.get(GPU).copied(),
        c.capacity.get(GPU).copied(),
    )
}

fn key(container: &str) -> ContainerKey {
    ("pod-1".into(), container.into())
}

fn grant(ids: &[&str]) -> Grant {
    Grant {
        ids: ids.iter().map(|s| (*s).to_owned()).collect(),
        options: ContainerOptions::default(),
    }
}

#[test]
fn allocatable_counts_the_healthy_devices_and_capacity_all_of_them() {
    let mut state = State::default();
    let now = Instant::now();
    running(&mut state, 1);
    state.listed(GPU, [("0", true), ("1", true), ("2", true), ("3", false)]);
    assert_eq!(counts(&state.capacity(now)), (Some(3), Some(4)));
    state.listed(GPU, [("0", true), ("1", false), ("2", true), ("3", false)]);
    assert_eq!(counts(&state.capacity(now)), (Some(2), Some(4)));
    state.listed(GPU, [("0", true), ("1", true), ("2", true), ("3", true)]);
    assert_eq!(counts(&state.capacity(now)), (Some(4), Some(4)));
}

#[test]
fn a_plugin_that_goes_leaves_its_devices_unhealthy_until_the_grace_period_ends() {
    let mut state = State::default();
    let start = Instant::now();
    running(&mut state, 1);
    state.listed(GPU, [("0", true), ("1", true)]);
    state.disconnected(GPU, 1, start);
    assert_eq!(counts(&state.capacity(start)), (Some(0), Some(2)));
    let within = state.capacity(start + STOP_GRACE);
    assert_eq!(counts(&within), (Some(0), Some(2)));
    assert!(within.removed.is_empty());
    let after = state.capacity(start + STOP_GRACE + Duration::from_secs(1));
    assert_eq!(after.removed, [GPU.to_string()], "reported removed once");
    assert_eq!(counts(&after), (None, None));
    assert!(state.capacity(start + STOP_GRACE * 2).removed.is_empty());
    assert!(!state.is_device_resource(GPU));
}

#[test]
fn a_plugin_whose_list_fails_at_once_has_a_resource_of_nothing() {
    let mut state = State::default();
    let now = Instant::now();
    running(&mut state, 1);
    state.disconnected(GPU, 1, now);
    let c = state.capacity(now);
    assert_eq!(
        counts(&c),
        (None, Some(0)),
        "capacity 0; allocatable follows capacity in the node status"
    );
}

#[test]
fn an_old_registration_ending_leaves_the_new_one_alone() {
    let mut state = State::default();
    let now = Instant::now();
    running(&mut state, 1);
    running(&mut state, 2);
    state.listed(GPU, [("0", true)]);
    state.disconnected(GPU, 1, now);
    assert_eq!(counts(&state.capacity(now)), (Some(1), Some(1)));
}

#[test]
fn devices_are_given_once_and_kept_by_their_container() {
    let mut state = State::default();
    running(&mut state, 1);
    state.listed(GPU, [("0", true), ("1", true), ("2", true)]);
    let none = Ids::new();
    let first = state
        .choose(&key("a"), GPU, 2, &none, &[])
        .expect("free")
        .expect("some");
    assert_eq!(first.len(), 2);
    state.grant(
        key("a"),
        GPU,
        Grant {
            ids: first.clone(),
            options: ContainerOptions::default(),
        },
    );
    assert_eq!(
        state.choose(&key("a"), GPU, 2, &none, &[]),
        Ok(None),
        "already held"
    );
    let err = state
        .choose(&key("b"), GPU, 2, &none, &[])
        .expect_err("one left");
    assert_eq!(
        err.to_string(),
        "requested number of devices unavailable for example.com/gpu. Requested: 2, Available: 1"
    );
    let err = state
        .choose(&key("a"), GPU, 1, &none, &[])
        .expect_err("changed");
    assert!(err.to_string().contains("changed request"), "{err}");
}

#[test]
fn a_preference_is_followed_among_free_devices() {
    let mut state = State::default();
    running(&mut state, 1);
    state.listed(GPU, [("0", true), ("1", true), ("2", true), ("3", false)]);
    state.grant(key("a"), GPU, grant(&["0"]));
    let preferred = ["3".to_string(), "0".to_string(), "2".to_string()];
    let chosen = state
        .choose(&key("b"), GPU, 2, &Ids::new(), &preferred)
        .expect("ok")
        .expect("some");
    assert_eq!(
        chosen,
        grant(&["1", "2"]).ids,
        "2 preferred (3 unhealthy, 0 taken), then 1"
    );
}

#[test]
fn reusable_devices_come_first() {
    let mut state = State::default();
    running(&mut state, 1);
    state.listed(GPU, [("0", true), ("1", true)]);
    state.grant(key("init"), GPU, grant(&["1"]));
    let reusable = grant(&["1"]).ids;
    let chosen = state
        .choose(&key("app"), GPU, 1, &reusable, &[])
        .expect("ok")
        .expect("some");
    assert_eq!(chosen, reusable);
}

#[test]
fn unregistered_or_unhealthy_resources_are_refused_with_the_kubelets_words() {
    let mut state = State::default();
    let none = Ids::new();
    let err = state
        .choose(&key("a"), GPU, 1, &none, &[])
        .expect_err("unknown");
    assert_eq!(
        err.to_string(),
        "cannot allocate unregistered device example.com/gpu"
    );
    running(&mut state, 1);
    state.listed(GPU, [("0", false)]);
    let err = state
        .choose(&key("a"), GPU, 1, &none, &[])
        .expect_err("unhealthy");
    assert_eq!(
        err.to_string(),
        "no healthy devices present; cannot allocate unhealthy devices example.com/gpu"
    );
    state.listed(GPU, [("0", true), ("1", false)]);
    state.grant(key("a"), GPU, grant(&["1"]));
    let err = state
        .choose(&key("a"), GPU, 1, &none, &[])
        .expect_err("held one is unhealthy");
    assert!(
        err.to_string()
            .starts_with("previously allocated devices are no longer healthy")
    );
}

#[test]
fn grants_of_gone_pods_are_forgotten_and_their_devices_free() {
    let mut state = State::default();
    running(&mut state, 1);
    state.listed(GPU, [("0", true)]);
    state.grant(key("a"), GPU, grant(&["0"]));
    assert_eq!(state.free(GPU).len(), 0);
    assert!(!state.retain_pods(|p| p == "pod-1"));
    assert!(state.retain_pods(|_| false));
    assert_eq!(state.free(GPU).len(), 1);
}

#[test]
fn a_resource_of_the_checkpoint_counts_nothing_until_its_plugin_is_back() {
    let mut state = State::default();
    let start = Instant::now();
    state.restored(GPU, start);
    assert!(state.is_device_resource(GPU));
    assert_eq!(counts(&state.capacity(start)), (Some(0), Some(0)));
    let err = state
        .choose(&key("a"), GPU, 1, &Ids::new(), &[])
        .expect_err("none yet");
    assert!(matches!(err, AllocateError::NoneHealthy(_)), "{err}");
    running(&mut state, 1);
    state.listed(GPU, [("0", true)]);
    assert_eq!(counts(&state.capacity(start)), (Some(1), Some(1)));
    let mut gone = State::default();
    gone.restored(GPU, start);
    let later = gone.capacity(start + STOP_GRACE + Duration::from_secs(1));
    assert_eq!(later.removed, [GPU.to_string()], "never came back: removed");
}
