//! Eviction signals and thresholds: the KubeletConfiguration's `evictionHard`,
//! `evictionSoft`, `evictionSoftGracePeriod` and `evictionMinimumReclaim` maps checked
//! as the kubelet checks them, and what a stats sample says about each signal.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use wasmlet_plugin_host::convert::{parse_duration, parse_quantity};

use crate::error::FieldError;
use crate::summary::Summary;

/// What eviction watches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Signal {
    /// `memory.available`: the machine's memory less the node's working set.
    MemoryAvailable,
    /// `nodefs.available`: free bytes on the kubelet's root filesystem.
    NodeFsAvailable,
    /// `nodefs.inodesFree`.
    NodeFsInodesFree,
    /// `imagefs.available`: free bytes where the runtime keeps images.
    ImageFsAvailable,
    /// `imagefs.inodesFree`.
    ImageFsInodesFree,
    /// `pid.available`: `pid_max` less the processes running.
    PidAvailable,
}

/// What a node condition says: which pressure a signal belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Pressure {
    /// MemoryPressure.
    Memory,
    /// DiskPressure.
    Disk,
    /// PIDPressure.
    Pid,
}

impl Signal {
    /// Every signal, in the order the kubelet reclaims them (memory first).
    pub const ALL: [Signal; 6] = [
        Signal::MemoryAvailable,
        Signal::NodeFsAvailable,
        Signal::NodeFsInodesFree,
        Signal::ImageFsAvailable,
        Signal::ImageFsInodesFree,
        Signal::PidAvailable,
    ];

    /// The name configuration uses.
    pub fn name(self) -> &'static str {
        match self {
            Signal::MemoryAvailable => "memory.available",
            Signal::NodeFsAvailable => "nodefs.available",
            Signal::NodeFsInodesFree => "nodefs.inodesFree",
            Signal::ImageFsAvailable => "imagefs.available",
            Signal::ImageFsInodesFree => "imagefs.inodesFree",
            Signal::PidAvailable => "pid.available",
        }
    }

    /// The signal named `name`.
    pub fn parse(name: &str) -> Option<Signal> {
        Signal::ALL.into_iter().find(|s| s.name() == name)
    }

    /// The node condition it raises.
    pub fn pressure(self) -> Pressure {
        match self {
            Signal::MemoryAvailable => Pressure::Memory,
            Signal::PidAvailable => Pressure::Pid,
            _ => Pressure::Disk,
        }
    }

    /// The resource an eviction for it reclaims, as the eviction message names it.
    pub fn resource(self) -> &'static str {
        match self {
            Signal::MemoryAvailable => "memory",
            Signal::NodeFsAvailable | Signal::ImageFsAvailable => "ephemeral-storage",
            Signal::NodeFsInodesFree | Signal::ImageFsInodesFree => "inodes",
            Signal::PidAvailable => "pids",
        }
    }

    /// Whether it counts bytes (its quantities print as `100Mi`), not inodes or pids.
    fn bytes(self) -> bool {
        matches!(
            self,
            Signal::MemoryAvailable | Signal::NodeFsAvailable | Signal::ImageFsAvailable
        )
    }
}

impl fmt::Display for Signal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A threshold's value: an absolute quantity or a share of the capacity.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Value {
    /// Bytes, inodes or pids.
    Quantity(u64),
    /// A fraction of the capacity (0.1 for `10%`).
    Percentage(f64),
}

impl Value {
    /// The value as an amount of a resource with `capacity`.
    pub fn amount(self, capacity: u64) -> u64 {
        match self {
            Value::Quantity(q) => q,
            Value::Percentage(p) => (capacity as f64 * p) as u64,
        }
    }
}

/// One threshold: eviction starts when `signal` falls below `value` (and has stayed
/// below it for `grace`, for a soft one).
#[derive(Debug, Clone, PartialEq)]
pub struct Threshold {
    /// The signal.
    pub signal: Signal,
    /// Below what.
    pub value: Value,
    /// `None` for a hard threshold; a soft one's grace period.
    pub grace: Option<Duration>,
    /// `evictionMinimumReclaim`: how far beyond the threshold to reclaim.
    pub min_reclaim: Option<Value>,
}

impl Threshold {
    /// Whether it is hard.
    pub fn hard(&self) -> bool {
        self.grace.is_none()
    }

    /// Whether `observed` meets it (the signal is below the value, plus the minimum
    /// reclaim once pressure is on: `with_reclaim`).
    pub fn met(&self, observed: &Observed, with_reclaim: bool) -> bool {
        let mut below = self.value.amount(observed.capacity);
        if with_reclaim && let Some(r) = self.min_reclaim {
            below = below.saturating_add(r.amount(observed.capacity));
        }
        observed.available < below
    }

    /// The threshold's quantity as the eviction message prints it (`100Mi`).
    pub fn quantity(&self, capacity: u64) -> String {
        format_quantity(self.value.amount(capacity), self.signal.bytes())
    }
}

/// A signal's reading: what is left of what there is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Observed {
    /// What is left.
    pub available: u64,
    /// All there is.
    pub capacity: u64,
}

/// Every signal a sample can say something about.
pub fn observe(summary: &Summary) -> BTreeMap<Signal, Observed> {
    let mut out = BTreeMap::new();
    let node = &summary.node;
    if let Some(m) = &node.memory
        && let (Some(avail), Some(ws)) = (m.available_bytes, m.working_set_bytes)
    {
        out.insert(
            Signal::MemoryAvailable,
            Observed {
                available: avail,
                capacity: avail + ws,
            },
        );
    }
    let mut fs = |bytes: Signal, inodes: Signal, f: Option<&crate::summary::FsStats>| {
        let Some(f) = f else { return };
        if let (Some(a), Some(c)) = (f.available_bytes, f.capacity_bytes) {
            out.insert(
                bytes,
                Observed {
                    available: a,
                    capacity: c,
                },
            );
        }
        if let (Some(a), Some(c)) = (f.inodes_free, f.inodes) {
            out.insert(
                inodes,
                Observed {
                    available: a,
                    capacity: c,
                },
            );
        }
    };
    fs(
        Signal::NodeFsAvailable,
        Signal::NodeFsInodesFree,
        node.fs.as_ref(),
    );
    fs(
        Signal::ImageFsAvailable,
        Signal::ImageFsInodesFree,
        node.runtime.as_ref().and_then(|r| r.image_fs.as_ref()),
    );
    if let Some(r) = &node.rlimit
        && let (Some(max), Some(cur)) = (r.maxpid, r.curproc)
    {
        let max = u64::try_from(max).unwrap_or(0);
        out.insert(
            Signal::PidAvailable,
            Observed {
                available: max.saturating_sub(u64::try_from(cur).unwrap_or(0)),
                capacity: max,
            },
        );
    }
    out
}

/// The kubelet 1.33's hard thresholds when `evictionHard` is not given, as written
/// (upstream's `DefaultEvictionHard` on Linux).
pub const DEFAULT_HARD: [(&str, &str); 5] = [
    ("memory.available", "100Mi"),
    ("nodefs.available", "10%"),
    ("nodefs.inodesFree", "5%"),
    ("imagefs.available", "15%"),
    ("imagefs.inodesFree", "5%"),
];

/// The kubelet's hard thresholds when `evictionHard` is not given ([`DEFAULT_HARD`]).
pub fn default_hard() -> Vec<Threshold> {
    let t = |signal, value| Threshold {
        signal,
        value,
        grace: None,
        min_reclaim: None,
    };
    vec![
        t(Signal::MemoryAvailable, Value::Quantity(100 << 20)),
        t(Signal::NodeFsAvailable, Value::Percentage(0.10)),
        t(Signal::NodeFsInodesFree, Value::Percentage(0.05)),
        t(Signal::ImageFsAvailable, Value::Percentage(0.15)),
        t(Signal::ImageFsInodesFree, Value::Percentage(0.05)),
    ]
}

/// A threshold value as written: `100Mi`, `1Gi`, `500000`, `10%`. `field` names the
/// map entry in errors (`evictionHard.memory.available`).
pub fn parse_value(field: &str, text: &str) -> Result<Value, FieldError> {
    let text = text.trim();
    if let Some(p) = text.strip_suffix('%') {
        let v: f64 = p
            .trim()
            .parse()
            .map_err(|_| FieldError::new(field, format!("{text:?} is not a percentage")))?;
        if !(0.0..=100.0).contains(&v) {
            return Err(FieldError::new(
                field,
                format!("eviction percentage threshold {text} must be between 0% and 100%"),
            ));
        }
        return Ok(Value::Percentage(v / 100.0));
    }
    if text.starts_with('-') {
        return Err(FieldError::new(
            field,
            format!("eviction threshold {text} must be positive"),
        ));
    }
    parse_quantity(text, 0)
        .map(Value::Quantity)
        .map_err(|e| FieldError::new(field, e.to_string()))
}

/// The thresholds a configuration names: `hard` (`None`: the kubelet's defaults; a
/// map given replaces all of them, as upstream), `soft` with `grace` for each soft
/// signal, `min_reclaim` for any. Errors name the field and entry.
pub fn parse(
    hard: Option<&BTreeMap<String, String>>,
    soft: Option<&BTreeMap<String, String>>,
    grace: Option<&BTreeMap<String, String>>,
    min_reclaim: Option<&BTreeMap<String, String>>,
) -> Result<Vec<Threshold>, FieldError> {
    let signal = |field: &str, name: &str| {
        Signal::parse(name).ok_or_else(|| {
            FieldError::new(
                field,
                format!(
                    "unsupported eviction signal {name:?} (one of {})",
                    Signal::ALL.map(Signal::name).join(", ")
                ),
            )
        })
    };
    let mut reclaim = BTreeMap::new();
    for (name, text) in min_reclaim.into_iter().flatten() {
        let s = signal("evictionMinimumReclaim", name)?;
        reclaim.insert(
            s,
            parse_value(&format!("evictionMinimumReclaim.{name}"), text)?,
        );
    }
    let mut graces = BTreeMap::new();
    for (name, text) in grace.into_iter().flatten() {
        let s = signal("evictionSoftGracePeriod", name)?;
        let d = parse_duration(text).map_err(|e| {
            FieldError::new(format!("evictionSoftGracePeriod.{name}"), e.to_string())
        })?;
        graces.insert(s, d);
    }
    let mut out = Vec::new();
    match hard {
        None => out.extend(default_hard()),
        Some(map) => {
            for (name, text) in map {
                let s = signal("evictionHard", name)?;
                out.push(Threshold {
                    signal: s,
                    value: parse_value(&format!("evictionHard.{name}"), text)?,
                    grace: None,
                    min_reclaim: None,
                });
            }
        }
    }
    for (name, text) in soft.into_iter().flatten() {
        let s = signal("evictionSoft", name)?;
        let value = parse_value(&format!("evictionSoft.{name}"), text)?;
        let Some(g) = graces.get(&s) else {
            return Err(FieldError::new(
                "evictionSoftGracePeriod",
                format!("grace period must be specified for the soft eviction threshold {name}"),
            ));
        };
        out.push(Threshold {
            signal: s,
            value,
            grace: Some(*g),
            min_reclaim: None,
        });
    }
    for s in graces.keys() {
        if !out.iter().any(|t| t.signal == *s && !t.hard()) {
            return Err(FieldError::new(
                format!("evictionSoftGracePeriod.{s}"),
                format!("no soft eviction threshold for {s}"),
            ));
        }
    }
    for t in &mut out {
        t.min_reclaim = reclaim.get(&t.signal).copied();
    }
    // A zero threshold never fires: left out, as upstream does.
    out.retain(|t| t.value != Value::Quantity(0) && t.value != Value::Percentage(0.0));
    Ok(out)
}

/// A quantity as Kubernetes prints it canonically: bytes with the largest binary
/// suffix that divides them (`100Mi`), else the plain number.
pub fn format_quantity(v: u64, binary: bool) -> String {
    if binary && v > 0 {
        for (shift, suffix) in [(50, "Pi"), (40, "Ti"), (30, "Gi"), (20, "Mi"), (10, "Ki")] {
            if v.is_multiple_of(1u64 << shift) {
                return format!("{}{suffix}", v >> shift);
            }
        }
    }
    v.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn defaults_and_a_given_map_replacing_them() {
        let d = parse(None, None, None, None).expect("defaults");
        assert_eq!(d, default_hard());
        let t = parse(Some(&map(&[("memory.available", "1Gi")])), None, None, None).expect("hard");
        assert_eq!(t.len(), 1, "the other defaults are not inherited");
        assert_eq!(t[0].value, Value::Quantity(1 << 30));
        assert!(t[0].hard());
    }

    #[test]
    fn bad_thresholds_name_the_field() {
        let e =
            parse(Some(&map(&[("memory.available", "abc")])), None, None, None).expect_err("abc");
        assert_eq!(e.field, "evictionHard.memory.available", "{e}");
        let e = parse(
            Some(&map(&[("nodefs.available", "120%")])),
            None,
            None,
            None,
        )
        .expect_err("120%");
        assert!(e.message.contains("must be between 0% and 100%"), "{e}");
        let e = parse(Some(&map(&[("cpu.available", "1")])), None, None, None).expect_err("signal");
        assert!(
            e.message
                .contains("unsupported eviction signal \"cpu.available\""),
            "{e}"
        );
        let e = parse(None, Some(&map(&[("memory.available", "1Gi")])), None, None)
            .expect_err("no grace");
        assert!(e.message.contains("grace period must be specified"), "{e}");
        let e = parse(None, None, Some(&map(&[("memory.available", "30s")])), None)
            .expect_err("grace without soft");
        assert_eq!(e.field, "evictionSoftGracePeriod.memory.available", "{e}");
        let e = parse(
            Some(&map(&[("memory.available", "-1Mi")])),
            None,
            None,
            None,
        )
        .expect_err("negative");
        assert!(e.message.contains("must be positive"), "{e}");
    }

    #[test]
    fn soft_thresholds_carry_their_grace_and_reclaim() {
        let t = parse(
            Some(&map(&[("memory.available", "100Mi")])),
            Some(&map(&[("memory.available", "500Mi")])),
            Some(&map(&[("memory.available", "1m30s")])),
            Some(&map(&[("memory.available", "50Mi")])),
        )
        .expect("soft");
        let soft = t.iter().find(|t| !t.hard()).expect("soft one");
        assert_eq!(soft.grace, Some(Duration::from_secs(90)));
        assert_eq!(soft.min_reclaim, Some(Value::Quantity(50 << 20)));
        let o = Observed {
            available: 520 << 20,
            capacity: 4 << 30,
        };
        assert!(!soft.met(&o, false));
        assert!(soft.met(&o, true), "550Mi with the minimum reclaim");
    }

    #[test]
    fn percentages_are_of_the_capacity_and_quantities_print_canonically() {
        let t = &default_hard()[1];
        let o = Observed {
            available: 9,
            capacity: 100,
        };
        assert!(t.met(&o, false));
        assert_eq!(format_quantity(100 << 20, true), "100Mi");
        assert_eq!(format_quantity(1536 << 10, true), "1536Ki");
        assert_eq!(format_quantity(1000, true), "1000");
        assert_eq!(format_quantity(2048, false), "2048");
        assert_eq!(Signal::parse("pid.available"), Some(Signal::PidAvailable));
        assert_eq!(Signal::NodeFsInodesFree.pressure(), Pressure::Disk);
    }
}
