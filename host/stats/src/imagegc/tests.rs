//! Image garbage collection against the simulator's images.

use std::time::Duration;

use tokio::time::Instant;
use wasmlet_cri::CriRuntime;
use wasmlet_cri::proto::ImageSpec;
use wasmlet_cri_sim::Simulator;

use super::*;

async fn tags(sim: &Simulator) -> Vec<String> {
    let mut t: Vec<String> = sim
        .list_images(None)
        .await
        .expect("images")
        .into_iter()
        .flat_map(|i| i.repo_tags)
        .collect();
    t.sort();
    t
}

#[tokio::test(start_paused = true)]
async fn unused_images_go_least_recently_used_first_never_in_use_or_sandbox() {
    let sim = Simulator::new();
    for r in ["docker.io/library/old:1", "docker.io/library/newer:1"] {
        sim.pull_image(
            ImageSpec {
                image: r.into(),
                ..Default::default()
            },
            None,
            None,
        )
        .await
        .expect("pull");
    }
    let mut gc = ImageGc::new(Policy::default());
    assert_eq!(
        gc.protect_sandbox_image(&sim).await.as_deref(),
        Some("localhost/pause:3.9")
    );
    // busybox is in use by a container (running or not, it counts).
    let sandbox = sim
        .run_pod_sandbox(
            wasmlet_cri::proto::PodSandboxConfig {
                metadata: Some(wasmlet_cri::proto::PodSandboxMetadata {
                    name: "p".into(),
                    uid: "u".into(),
                    namespace: "default".into(),
                    attempt: 0,
                }),
                ..Default::default()
            },
            "",
        )
        .await
        .expect("sandbox");
    let config = wasmlet_cri::proto::ContainerConfig {
        metadata: Some(wasmlet_cri::proto::ContainerMetadata {
            name: "c".into(),
            attempt: 0,
        }),
        image: Some(ImageSpec {
            image: "localhost/busybox:latest".into(),
            ..Default::default()
        }),
        ..Default::default()
    };
    sim.create_container(&sandbox, config, Default::default())
        .await
        .expect("container");
    let t0 = Instant::now();
    gc.detect(&sim, t0).await.expect("detect");
    // Too young: nothing goes.
    let freed = gc.free(&sim, u64::MAX, t0).await.expect("free");
    assert_eq!(freed, Freed::default());
    // "newer" is used later than "old".
    tokio::time::advance(Duration::from_secs(200)).await;
    let freed = gc.free(&sim, 1, Instant::now()).await.expect("free");
    assert_eq!(freed.removed, 1, "one image is enough for one byte");
    let left = tags(&sim).await;
    assert_eq!(left.len(), 3, "{left:?}");
    assert!(left.iter().any(|t| t.contains("busybox")));
    assert!(left.iter().any(|t| t.contains("pause")));
    let freed = gc.delete_unused(&sim).await.expect("reclaim");
    assert_eq!(freed.removed, 1);
    let left = tags(&sim).await;
    assert_eq!(
        left,
        ["localhost/busybox:latest", "localhost/pause:3.9"],
        "in use and the sandbox image stay"
    );
}

#[test]
fn collection_starts_at_the_high_mark_and_frees_to_the_low_mark() {
    let gc = ImageGc::new(Policy::default());
    assert_eq!(gc.to_free(100, 20), 0, "80% used: under the high mark");
    assert_eq!(gc.to_free(100, 10), 10, "90% used: back to 80%");
    assert_eq!(gc.to_free(1000, 150), 50, "85% exactly starts it");
    let off = ImageGc::new(Policy {
        high_percent: 100,
        ..Policy::default()
    });
    assert_eq!(off.to_free(100, 0), 0);
    assert!(
        Policy {
            high_percent: 70,
            low_percent: 80,
            min_age: Duration::ZERO
        }
        .check()
        .expect_err("low above high")
        .field
            == "imageGCLowThresholdPercent"
    );
}
