//! Durations as the kubelet's configuration writes them (Go's `1m30s`), shared by the
//! file's sections.

use std::time::Duration;

use serde::{Deserialize, Deserializer};
use wasmlet_plugin_host::convert::parse_duration;

/// A Go duration (`1m30s`); `0s`, `0`, `""` and `null` are its zero value.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Dur(pub Duration);

impl Dur {
    /// Zero: the kubelet's "not set".
    pub fn is_zero(self) -> bool {
        self.0.is_zero()
    }
}

struct DurVisitor;

impl serde::de::Visitor<'_> for DurVisitor {
    type Value = Dur;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a duration (e.g. 500ms, 1s, 1m30s)")
    }

    fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<Dur, E> {
        if s.is_empty() {
            return Ok(Dur::default());
        }
        parse_duration(s).map(Dur).map_err(E::custom)
    }

    fn visit_u64<E: serde::de::Error>(self, n: u64) -> Result<Dur, E> {
        match n {
            0 => Ok(Dur::default()),
            n => Err(E::custom(format!(
                "{n} is not a duration (write e.g. {n}s)"
            ))),
        }
    }

    fn visit_i64<E: serde::de::Error>(self, n: i64) -> Result<Dur, E> {
        Err(E::custom(format!("{n} is not a duration")))
    }

    fn visit_unit<E: serde::de::Error>(self) -> Result<Dur, E> {
        Ok(Dur::default())
    }
}

impl<'de> Deserialize<'de> for Dur {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(DurVisitor)
    }
}
