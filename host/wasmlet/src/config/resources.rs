//! Node resources' part of the configuration: eviction (`evictionHard`,
//! `evictionSoft`, `evictionSoftGracePeriod`, `evictionMinimumReclaim`,
//! `evictionPressureTransitionPeriod`, `evictionMaxPodGracePeriod`), image garbage
//! collection (`imageGCHighThresholdPercent`, `imageGCLowThresholdPercent`,
//! `imageMinimumGCAge`), how many images the node status lists (`nodeStatusMaxImages`)
//! and how often usage is sampled (`housekeepingInterval`,
//! wasmlet's field for the kubelet's `--housekeeping-interval`), checked as the kubelet
//! checks them; errors name the field.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Result, bail};
use wasmlet_plugin_host::convert::parse_duration;
use wasmlet_stats::eviction;
use wasmlet_stats::imagegc;

impl Resources {
    /// A development node's (`wasmlet up`): eviction on memory only, no image garbage
    /// collection — as kind configures its nodes. A laptop's or a CI machine's disk is
    /// often fuller than the kubelet's disk thresholds allow (this project's machines'
    /// is 87 % used), and the node's images come from local imports no registry can give
    /// back once collected.
    pub fn development() -> Self {
        let hard =
            std::collections::BTreeMap::from([("memory.available".to_owned(), "100Mi".to_owned())]);
        Resources {
            eviction: eviction::Config {
                thresholds: eviction::thresholds::parse(Some(&hard), None, None, None)
                    .unwrap_or_default(),
                ..eviction::Config::default()
            },
            images: imagegc::Policy {
                high_percent: 100,
                low_percent: 100,
                ..imagegc::Policy::default()
            },
            ..Resources::default()
        }
    }
}

/// The fields as written.
#[derive(Debug, Default)]
pub(super) struct ResourceFields {
    pub eviction_hard: Option<BTreeMap<String, String>>,
    /// `mergeDefaultEvictionSettings`: a given `evictionHard` keeps the defaults it
    /// does not name.
    pub merge_default_eviction_settings: bool,
    pub eviction_soft: Option<BTreeMap<String, String>>,
    pub eviction_soft_grace_period: Option<BTreeMap<String, String>>,
    pub eviction_minimum_reclaim: Option<BTreeMap<String, String>>,
    pub eviction_pressure_transition_period: Option<Duration>,
    pub eviction_max_pod_grace_period: Option<i64>,
    pub image_gc_high_threshold_percent: Option<i64>,
    pub image_gc_low_threshold_percent: Option<i64>,
    pub image_minimum_gc_age: Option<Duration>,
    pub housekeeping_interval: Option<String>,
    pub node_status_max_images: Option<i64>,
}

/// Node resources as configured.
#[derive(Debug, Clone, PartialEq)]
pub struct Resources {
    /// How often usage is sampled and eviction decides (10 s).
    pub period: Duration,
    /// Eviction.
    pub eviction: eviction::Config,
    /// Image garbage collection.
    pub images: imagegc::Policy,
    /// How many images the node status lists (`nodeStatusMaxImages`; `None`: all).
    pub max_images: Option<usize>,
}

impl Default for Resources {
    fn default() -> Self {
        Resources {
            period: wasmlet_stats::DEFAULT_PERIOD,
            eviction: eviction::Config::default(),
            images: imagegc::Policy::default(),
            max_images: Some(wasmlet_stats::images::DEFAULT_MAX_IMAGES),
        }
    }
}

fn percent(field: &str, v: Option<i64>, default: u8) -> Result<u8> {
    match v {
        None => Ok(default),
        Some(n) if (0..=100).contains(&n) => Ok(u8::try_from(n).unwrap_or(100)),
        Some(n) => bail!("{field}: {n} must be between 0 and 100"),
    }
}

/// The resources the fields ask for.
pub(super) fn resources(mut f: ResourceFields) -> Result<Resources> {
    let d = Resources::default();
    if f.merge_default_eviction_settings
        && let Some(hard) = f.eviction_hard.as_mut()
    {
        for (signal, value) in eviction::thresholds::DEFAULT_HARD {
            hard.entry(signal.to_owned())
                .or_insert_with(|| value.to_owned());
        }
    }
    let thresholds = eviction::thresholds::parse(
        f.eviction_hard.as_ref(),
        f.eviction_soft.as_ref(),
        f.eviction_soft_grace_period.as_ref(),
        f.eviction_minimum_reclaim.as_ref(),
    )
    .map_err(|e| anyhow::anyhow!(e))?;
    let transition = f
        .eviction_pressure_transition_period
        .unwrap_or(d.eviction.transition);
    let max_pod_grace = match f.eviction_max_pod_grace_period {
        None => Duration::ZERO,
        Some(n) if n >= 0 => Duration::from_secs(n.unsigned_abs()),
        Some(n) => bail!("evictionMaxPodGracePeriod: {n} must be 0 or more"),
    };
    let images = imagegc::Policy {
        high_percent: percent(
            "imageGCHighThresholdPercent",
            f.image_gc_high_threshold_percent,
            d.images.high_percent,
        )?,
        low_percent: percent(
            "imageGCLowThresholdPercent",
            f.image_gc_low_threshold_percent,
            d.images.low_percent,
        )?,
        min_age: f.image_minimum_gc_age.unwrap_or(d.images.min_age),
    };
    images.check().map_err(|e| anyhow::anyhow!(e))?;
    let period = match f.housekeeping_interval.as_deref() {
        None => d.period,
        Some(t) => match parse_duration(t) {
            Ok(p) if !p.is_zero() => p,
            Ok(_) => bail!("housekeepingInterval: must be more than 0"),
            Err(e) => bail!("housekeepingInterval: {e}"),
        },
    };
    let max_images = match f.node_status_max_images {
        None => d.max_images,
        Some(-1) => None,
        Some(n) if n >= 0 => Some(usize::try_from(n).unwrap_or(usize::MAX)),
        Some(n) => bail!("nodeStatusMaxImages: {n} must be -1 (no limit) or more"),
    };
    Ok(Resources {
        period,
        max_images,
        eviction: eviction::Config {
            thresholds,
            transition,
            max_pod_grace,
        },
        images,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> Option<BTreeMap<String, String>> {
        Some(
            pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        )
    }

    #[test]
    fn defaults_are_the_kubelets() {
        let r = resources(ResourceFields::default()).expect("defaults");
        assert_eq!(r, Resources::default());
        assert_eq!(r.eviction.thresholds.len(), 5, "the kubelet 1.33's five");
        let dev = Resources::development();
        assert_eq!(dev.eviction.thresholds.len(), 1, "memory only");
        assert_eq!(dev.images.high_percent, 100, "no image GC");
        assert!(dev.images.check().is_ok());
    }

    #[test]
    fn the_node_status_lists_fifty_images_unless_told() {
        let d = resources(ResourceFields::default()).expect("defaults");
        assert_eq!(d.max_images, Some(50));
        let all = ResourceFields {
            node_status_max_images: Some(-1),
            ..Default::default()
        };
        assert_eq!(resources(all).expect("-1").max_images, None, "-1: no limit");
        let bad = ResourceFields {
            node_status_max_images: Some(-2),
            ..Default::default()
        };
        let e = resources(bad).expect_err("-2");
        assert!(e.to_string().starts_with("nodeStatusMaxImages: "), "{e}");
    }

    #[test]
    fn bad_values_name_the_field() {
        let e = resources(ResourceFields {
            eviction_hard: map(&[("memory.available", "abc")]),
            ..Default::default()
        })
        .expect_err("abc");
        assert!(
            e.to_string().starts_with("evictionHard.memory.available:"),
            "{e}"
        );
        let e = resources(ResourceFields {
            image_gc_high_threshold_percent: Some(120),
            ..Default::default()
        })
        .expect_err("120");
        assert!(
            e.to_string().starts_with("imageGCHighThresholdPercent"),
            "{e}"
        );
        let e = resources(ResourceFields {
            image_gc_low_threshold_percent: Some(90),
            ..Default::default()
        })
        .expect_err("low above high");
        assert!(
            e.to_string().starts_with("imageGCLowThresholdPercent"),
            "{e}"
        );
        let e = resources(ResourceFields {
            housekeeping_interval: Some("0s".into()),
            ..Default::default()
        })
        .expect_err("zero");
        assert!(e.to_string().starts_with("housekeepingInterval"), "{e}");
        let r = resources(ResourceFields {
            eviction_soft: map(&[("memory.available", "1Gi")]),
            eviction_soft_grace_period: map(&[("memory.available", "1m")]),
            eviction_pressure_transition_period: Some(Duration::from_secs(30)),
            eviction_max_pod_grace_period: Some(20),
            ..Default::default()
        })
        .expect("soft");
        assert_eq!(r.eviction.transition, Duration::from_secs(30));
        assert_eq!(r.eviction.max_pod_grace, Duration::from_secs(20));
        assert_eq!(r.eviction.thresholds.len(), 6, "defaults plus the soft one");
    }
}
