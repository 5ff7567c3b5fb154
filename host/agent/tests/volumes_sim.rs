//! Volumes on the simulator: projected service account tokens written again at 80 % of
//! their life, and a volume that cannot be set up for a moment tried again soon — 0.5 s,
//! then 1 s, doubling as the kubelet's volume operations — not after the 10 s of a
//! runtime error.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use support::*;
use wasmlet_agent::agent::{Agent, AgentOptions};
use wasmlet_agent::lookup::LookupError;
use wasmlet_cri_sim::Simulator;

const READER: &str = r#"{"metadata":{"name":"reader","uid":"tok-1"},"spec":{
    "volumes":[{"name":"access","projected":{"sources":[
      {"serviceAccountToken":{"expirationSeconds":600,"path":"token"}}]}}],
    "containers":[{"name":"c","image":"localhost/busybox:latest","imagePullPolicy":"IfNotPresent",
      "command":["sleep","3600"],
      "volumeMounts":[{"name":"access","mountPath":"/var/run/secrets/kubernetes.io/serviceaccount"}]}]}}"#;

/// Tokens from a counter: the n-th request gets `token-n`; the first `refuse` requests
/// are refused (as the API server's node authorizer refuses a pod it does not know yet).
#[derive(Debug, Default)]
struct CountingTokens(AtomicU32, u32);

impl wasmlet_agent::volumes::VolumeSource for CountingTokens {
    fn config_map<'a>(
        &'a self,
        _: &'a str,
        _: &'a str,
    ) -> wasmlet_agent::volumes::BoxFuture<'a, Result<wasmlet_agent::volumes::Data, LookupError>>
    {
        Box::pin(async { Ok(None) })
    }
    fn secret<'a>(
        &'a self,
        _: &'a str,
        _: &'a str,
    ) -> wasmlet_agent::volumes::BoxFuture<'a, Result<wasmlet_agent::volumes::Data, LookupError>>
    {
        Box::pin(async { Ok(None) })
    }
    fn token<'a>(
        &'a self,
        _: &'a wasmlet_agent::volumes::TokenRequest,
    ) -> wasmlet_agent::volumes::BoxFuture<'a, Result<String, LookupError>> {
        let n = self.0.fetch_add(1, Ordering::Relaxed) + 1;
        let refused = n <= self.1;
        Box::pin(async move {
            if refused {
                return Err(LookupError::Unavailable(
                    "serviceaccounts \"default\" is forbidden".into(),
                ));
            }
            Ok(format!("token-{n}"))
        })
    }
}

#[tokio::test(start_paused = true)]
async fn projected_tokens_are_written_again_at_80_percent_of_their_life() {
    let sim = Arc::new(Simulator::new());
    let tokens = Arc::new(CountingTokens::default());
    let opts = AgentOptions {
        volumes: Some(tokens.clone()),
        ..options("tokens")
    };
    let root = opts.root_dir.clone();
    let agent = Agent::start(sim, opts, Arc::new(ExecChecker), None, None);
    send(&agent, vec![pod(READER)]).await;
    wait_for(&agent, "reader", "Running", Duration::from_secs(5), |p| {
        phase(p) == "Running"
    })
    .await;
    let file = root.join("pods/tok-1/volumes/kubernetes.io~projected/access/token");
    assert_eq!(std::fs::read_to_string(&file).expect("token"), "token-1");
    // 80 % of 600 s is 480 s; the periodic sync (every 60 s) writes it again by 540 s.
    tokio::time::sleep(Duration::from_secs(400)).await;
    assert_eq!(std::fs::read_to_string(&file).expect("token"), "token-1");
    tokio::time::sleep(Duration::from_secs(160)).await;
    assert_eq!(std::fs::read_to_string(&file).expect("token"), "token-2");
    agent.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_token_refused_for_a_moment_is_asked_for_again_within_a_second_or_two() {
    let sim = Arc::new(Simulator::new());
    let tokens = Arc::new(CountingTokens(AtomicU32::new(0), 2));
    let opts = AgentOptions {
        volumes: Some(tokens.clone()),
        ..options("token-retry")
    };
    let agent = Agent::start(sim, opts, Arc::new(ExecChecker), None, None);
    let sent = tokio::time::Instant::now();
    send(&agent, vec![pod(READER)]).await;
    wait_for(&agent, "reader", "Running", Duration::from_secs(5), |p| {
        phase(p) == "Running"
    })
    .await;
    let took = sent.elapsed();
    assert_eq!(
        tokens.0.load(Ordering::Relaxed),
        3,
        "refused twice, then given"
    );
    assert!(
        took >= Duration::from_millis(1500) && took < Duration::from_secs(3),
        "0.5 s and 1 s between the tries: {took:?}"
    );
    agent.shutdown().await;
}
