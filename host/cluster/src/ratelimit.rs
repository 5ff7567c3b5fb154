//! A token bucket: `qps` requests a second on average, `burst` at once (the kubelet's
//! kubeAPIQPS / kubeAPIBurst and eventRecordQPS / eventBurst).

use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

/// The bucket.
#[derive(Debug)]
pub struct RateLimiter {
    qps: f64,
    burst: f64,
    /// Tokens left, and when they were counted.
    state: Mutex<(f64, Instant)>,
}

impl RateLimiter {
    /// A full bucket of `burst` tokens refilled at `qps` a second. A `qps` of 0 or less
    /// means no limit.
    pub fn new(qps: f64, burst: u32) -> Self {
        let burst = f64::from(burst.max(1));
        RateLimiter {
            qps,
            burst,
            state: Mutex::new((burst, Instant::now())),
        }
    }

    /// Takes a token if one is there now; otherwise says how long until one is.
    pub fn try_acquire(&self) -> Result<(), Duration> {
        if self.qps <= 0.0 {
            return Ok(());
        }
        let mut guard = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let (tokens, at) = &mut *guard;
        let now = Instant::now();
        *tokens = (*tokens + now.duration_since(*at).as_secs_f64() * self.qps).min(self.burst);
        *at = now;
        if *tokens >= 1.0 {
            *tokens -= 1.0;
            Ok(())
        } else {
            Err(Duration::from_secs_f64((1.0 - *tokens) / self.qps))
        }
    }

    /// Waits for a token and takes it.
    pub async fn acquire(&self) {
        while let Err(wait) = self.try_acquire() {
            tokio::time::sleep(wait).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_burst_then_qps() {
        let limiter = RateLimiter::new(10.0, 3);
        for _ in 0..3 {
            assert!(limiter.try_acquire().is_ok());
        }
        let wait = limiter.try_acquire().expect_err("empty");
        assert!(wait <= Duration::from_millis(100), "{wait:?}");
        let started = Instant::now();
        limiter.acquire().await;
        limiter.acquire().await;
        let took = started.elapsed();
        assert!(
            took >= Duration::from_millis(190) && took <= Duration::from_millis(210),
            "two tokens at 10 a second: {took:?}"
        );
        assert!(RateLimiter::new(0.0, 1).try_acquire().is_ok());
    }
}
