//! A push consumer's `rate_limit_bps`, as nats-server paces it: a token
//! bucket of `rate_limit_bps / 8` bytes per second holding at most `burst`
//! bytes (the stream's `max_msg_size`, else the server's `max_payload`),
//! full at the start. A delivery of `size` bytes (subject, ack subject,
//! headers and payload) waits until the bucket holds `size`, then takes it:
//! the schedule of Go's `rate.Limiter.ReserveN` followed by a wait. Unlike
//! nats-server, a delivery larger than the bucket waits for a full bucket
//! instead of never going out. Sans-IO: the caller passes the clock.

/// Tokens are counted in byte-nanoseconds-per-second units (bytes × 10⁹), so
/// refilling by `bytes_per_second × elapsed_ns` is exact integer arithmetic.
const SCALE: u128 = 1_000_000_000;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RateLimit {
    rate_limit_bps: u64,
    bytes_per_second: u64,
    burst_bytes: u64,
    /// Bytes available × [`SCALE`].
    tokens: u128,
    updated_ns: u64,
}

impl RateLimit {
    /// A full bucket for `rate_limit_bps` bits per second.
    pub fn new(rate_limit_bps: u64, burst_bytes: u64, now_ns: u64) -> RateLimit {
        assert!(rate_limit_bps > 0, "no rate limit means no bucket");
        let burst_bytes = burst_bytes.max(1);
        RateLimit {
            rate_limit_bps,
            bytes_per_second: (rate_limit_bps / 8).max(1),
            burst_bytes,
            tokens: u128::from(burst_bytes) * SCALE,
            updated_ns: now_ns,
        }
    }

    /// The configured rate this bucket was made for.
    pub fn rate_limit_bps(&self) -> u64 {
        self.rate_limit_bps
    }

    /// Takes `size_bytes` if the bucket holds them by `now_ns`; otherwise
    /// takes nothing and returns when it will (Unix ns).
    pub fn take(&mut self, size_bytes: u64, now_ns: u64) -> Result<(), u64> {
        let capacity = u128::from(self.burst_bytes) * SCALE;
        if now_ns > self.updated_ns {
            let elapsed_ns = u128::from(now_ns - self.updated_ns);
            self.tokens =
                capacity.min(self.tokens + elapsed_ns * u128::from(self.bytes_per_second));
            self.updated_ns = now_ns;
        }
        let needed = u128::from(size_bytes.min(self.burst_bytes)) * SCALE;
        if self.tokens >= needed {
            self.tokens -= needed;
            assert!(self.tokens <= capacity);
            return Ok(());
        }
        let missing = needed - self.tokens;
        let wait_ns = missing.div_ceil(u128::from(self.bytes_per_second));
        Err(self
            .updated_ns
            .saturating_add(u64::try_from(wait_ns).unwrap_or(u64::MAX)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND_NS: u64 = 1_000_000_000;

    #[test]
    fn a_full_bucket_then_the_rate() {
        // 8 000 bps = 1 000 bytes per second, 500-byte bucket.
        let mut limit = RateLimit::new(8_000, 500, 0);
        assert_eq!(limit.take(300, 0), Ok(()));
        assert_eq!(limit.take(200, 0), Ok(()));
        // Empty: 100 bytes take 100 ms.
        assert_eq!(limit.take(100, 0), Err(SECOND_NS / 10));
        assert_eq!(limit.take(100, SECOND_NS / 20), Err(SECOND_NS / 10));
        assert_eq!(limit.take(100, SECOND_NS / 10), Ok(()));
    }

    #[test]
    fn the_bucket_never_holds_more_than_its_burst() {
        let mut limit = RateLimit::new(8_000, 500, 0);
        assert_eq!(limit.take(500, 0), Ok(()));
        // An hour idle refills 500 bytes, not 3.6 MB.
        let hour_ns = 3_600 * SECOND_NS;
        assert_eq!(limit.take(500, hour_ns), Ok(()));
        assert_eq!(limit.take(1, hour_ns), Err(hour_ns + SECOND_NS / 1_000));
    }

    #[test]
    fn a_delivery_larger_than_the_bucket_waits_for_a_full_one() {
        let mut limit = RateLimit::new(8_000, 500, 0);
        assert_eq!(limit.take(10, 0), Ok(()));
        assert_eq!(limit.take(5_000, 0), Err(SECOND_NS / 100));
        assert_eq!(limit.take(5_000, SECOND_NS / 100), Ok(()));
    }

    #[test]
    fn a_sustained_stream_goes_at_the_rate() {
        // 80 000 bps = 10 000 bytes per second; 1 000-byte deliveries.
        let mut limit = RateLimit::new(80_000, 1_000, 0);
        let mut now_ns = 0;
        let mut delivered = 0u64;
        while delivered < 100 {
            match limit.take(1_000, now_ns) {
                Ok(()) => delivered += 1,
                Err(due_ns) => {
                    assert!(due_ns > now_ns);
                    now_ns = due_ns;
                }
            }
        }
        // The first from the full bucket, then 99 at 100 ms each.
        assert_eq!(now_ns, 99 * SECOND_NS / 10);
    }
}
