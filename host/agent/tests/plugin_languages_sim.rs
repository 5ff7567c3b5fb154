//! A probe handler and a pod source written in Python and in TypeScript — the templates
//! — run in the agent on the simulator as a Rust one does: the source's pods start, and
//! the custom probe runs its command in each container and reports readiness by it; a
//! policy's exception is the pod's rejection, in the author's words.

mod support;

use std::sync::Arc;
use std::time::Duration;

use support::*;
use wasmlet_agent::agent::{Agent, AgentOptions};
use wasmlet_cri_sim::Simulator;
use wasmlet_plugin_host::PluginEngine;
use wasmlet_plugin_host::config::PluginsConfig;
use wasmlet_plugin_host::dev::{lang_cache_dir, lang_plugin_named, lang_toolchains};
use wasmlet_plugin_host::kinds::{PodSources, ProbeHandlers};

/// The plugins' configuration: the template's probe handler for `command-output` probes
/// (granted exec) and its pod source making two pods named `web-<i>` whose container
/// writes the probe's answer, then sleeps.
fn plugins(lang: &str) -> PluginsConfig {
    serde_json::from_value(serde_json::json!({
        "probes": [{
            "name": "command-output",
            "file": lang_plugin_named(&format!("{lang}-probe-handler")),
            "kinds": ["command-output"],
            "exec": true,
        }],
        "sources": [{
            "name": "replicas",
            "file": lang_plugin_named(&format!("{lang}-pod-source")),
            "period": "1s",
            "config": {"image": "localhost/busybox:latest", "replicas": "2", "name": "web"},
        }],
    }))
    .expect("plugins config")
}

/// Whether the pod's container `main` is ready.
fn ready(p: &k8s_openapi::api::core::v1::Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.name == "main" && c.ready))
}

async fn run_templates(lang: &str) {
    let engine = PluginEngine::with_cache(&lang_cache_dir()).expect("engine");
    let config = plugins(lang);
    let probes = ProbeHandlers::start(&engine, &config, false)
        .await
        .expect("probe handlers");
    let sources = PodSources::start(&engine, &config, false)
        .await
        .expect("pod sources");
    let sim = Arc::new(Simulator::new());
    let agent = Agent::start(
        sim.clone(),
        AgentOptions {
            sources: vec!["replicas".into()],
            ..options(&format!("langs-{lang}"))
        },
        Arc::new(probes),
        None,
        Some(Arc::new(sources)),
    );
    for name in ["web-0", "web-1"] {
        let p = wait_for(&agent, name, "Running", Duration::from_secs(20), |p| {
            phase(p) == "Running"
        })
        .await;
        let source = p
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get("kubernetes.io/config.source").cloned());
        assert_eq!(source.as_deref(), Some("replicas"), "{lang}: {name}");
    }
    // One sandbox each (the template's container, busybox's shell, exits and restarts).
    assert_eq!(sim.counts().0, 2, "{lang}");

    // A pod whose container answers `ok` once it has written it, and one that never
    // does: the handler runs `cat` in each through the runtime.
    let probed = |name: &str, answer: &str| {
        pod(&format!(
            r#"{{"metadata":{{"name":"{name}","annotations":{{
                "probe.wasmlet.io/main.readinessProbe":"command-output command=cat,/tmp/ready expect=ok"}}}},
              "spec":{{"containers":[{{"name":"main","image":"localhost/busybox:latest",
                "imagePullPolicy":"IfNotPresent",
                "command":["sh","-c","echo {answer} > /tmp/ready; sleep 3600"],
                "readinessProbe":{{"periodSeconds":1}}}}]}}}}"#
        ))
    };
    send(
        &agent,
        vec![probed("answers", "ok"), probed("silent", "no")],
    )
    .await;
    wait_for(&agent, "answers", "ready", Duration::from_secs(20), ready).await;
    let silent = wait_for(&agent, "silent", "Running", Duration::from_secs(20), |p| {
        phase(p) == "Running"
    })
    .await;
    // Several periods later it is still not ready: its answer is not `ok`.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let silent = agent
        .ctx
        .statuses
        .pods()
        .into_iter()
        .find(|p| p.metadata.name.as_deref() == Some("silent"))
        .unwrap_or(silent);
    assert!(!ready(&silent), "{lang}: silent is ready");
    agent.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_and_typescript_probe_handlers_and_pod_sources_run_in_the_agent() {
    if lang_toolchains().is_none() {
        return;
    }
    for lang in ["python", "js"] {
        run_templates(lang).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_python_or_typescript_policys_exception_is_the_rejection_events_message() {
    if lang_toolchains().is_none() {
        return;
    }
    let cases = [
        ("python-raises", "KeyError: 'team' at app.py:8 in team_of"),
        (
            "js-throws",
            "TypeError: can't access property \"owner\", annotations['example.com/meta'] is \
             undefined at app.ts:7 in ownerOf",
        ),
    ];
    for (fixture, said) in cases {
        let engine = PluginEngine::with_cache(&lang_cache_dir()).expect("engine");
        let chain = Arc::new(wasmlet_plugin_host::chain::AdmissionChain::new(engine));
        chain
            .push(
                "buggy",
                &lang_plugin_named(fixture),
                Default::default(),
                Default::default(),
                wasmlet_plugin_host::chain::FailurePolicy::Fail,
            )
            .expect("the policy loads");
        let (sim, agent, events) = start_admitting(fixture, chain);
        send(
            &agent,
            vec![pod(r#"{"metadata":{"name":"web"},"spec":{"containers":[
                    {"name":"c","image":"localhost/busybox:latest","imagePullPolicy":"IfNotPresent",
                     "command":["sleep","3600"]}]}}"#)],
        )
        .await;
        let p = wait_for(&agent, "web", "rejected", Duration::from_secs(20), |p| {
            phase(p) == "Failed"
        })
        .await;
        let expected = format!("plugin buggy: admit failed: {said}");
        let status = p.status.expect("status");
        assert_eq!(status.reason.as_deref(), Some("AdmissionPluginError"));
        assert_eq!(
            status.message,
            Some(format!("Pod was rejected: {expected}"))
        );
        let event = events
            .events()
            .into_iter()
            .find(|e| e.reason == "AdmissionPluginError")
            .expect("a rejection event");
        assert!(event.message.contains(&expected), "{fixture}: {event:?}");
        assert_eq!(sim.counts(), (0, 0), "{fixture}: nothing runs");
        agent.shutdown().await;
    }
}
