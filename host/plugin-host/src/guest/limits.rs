//! The limits a plugin's store runs under, remembering the growth it refused: a guest
//! whose allocator finds no memory traps with `unreachable` (Rust, CPython and
//! StarlingMonkey all abort), and only this record can say that the memory limit was
//! the cause.

use wasmtime::ResourceLimiter;

/// A store's memory and instance limits.
pub struct Limiter {
    memory_bytes: usize,
    instances: usize,
    refused: Option<Refused>,
}

/// A memory growth the limit refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refused {
    /// The memory's size when it asked, in bytes.
    pub current: usize,
    /// The size it asked to grow to, in bytes.
    pub desired: usize,
    /// The limit, in bytes.
    pub limit: usize,
}

impl Limiter {
    /// Linear memories of at most `memory_bytes` each, at most `instances` core instances.
    pub fn new(memory_bytes: usize, instances: usize) -> Self {
        Self {
            memory_bytes,
            instances,
            refused: None,
        }
    }

    /// The last growth refused since the last take.
    pub fn take_refused(&mut self) -> Option<Refused> {
        self.refused.take()
    }
}

impl ResourceLimiter for Limiter {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let limit = maximum.map_or(self.memory_bytes, |m| m.min(self.memory_bytes));
        let allow = desired <= limit;
        if !allow {
            self.refused = Some(Refused {
                current,
                desired,
                limit,
            });
        }
        Ok(allow)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(maximum.is_none_or(|m| desired <= m))
    }

    fn instances(&self) -> usize {
        self.instances
    }
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "memory limit of {} reached: the guest, at {}, asked for {}",
            mib(self.limit),
            mib(self.current),
            mib(self.desired)
        )
    }
}

/// Bytes as MiB, one decimal when not whole.
fn mib(bytes: usize) -> String {
    let m = bytes as f64 / f64::from(1u32 << 20);
    if m.fract() == 0.0 {
        format!("{m:.0} MiB")
    } else {
        format!("{m:.1} MiB")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_growth_is_kept_and_said_in_mib() {
        let mut l = Limiter::new(64 << 20, 32);
        assert!(l.memory_growing(1 << 20, 32 << 20, None).expect("growing"));
        assert_eq!(l.take_refused(), None);
        assert!(
            !l.memory_growing(48 << 20, (1 << 30) + (1 << 19), None)
                .expect("growing")
        );
        let refused = l.take_refused().expect("a refusal");
        assert_eq!(
            refused.to_string(),
            "memory limit of 64 MiB reached: the guest, at 48 MiB, asked for 1024.5 MiB"
        );
        assert_eq!(l.take_refused(), None);
    }

    #[test]
    fn the_memorys_own_maximum_counts_when_lower() {
        let mut l = Limiter::new(64 << 20, 32);
        assert!(
            !l.memory_growing(0, 20 << 20, Some(16 << 20))
                .expect("growing")
        );
        assert_eq!(l.take_refused().expect("a refusal").limit, 16 << 20);
    }
}
