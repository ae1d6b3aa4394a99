//! A small seeded generator for choices that need to be uniform, not
//! secret (queue members, jitter, source ports): xorshift64, one per owner,
//! deterministic per seed so tests and the simulator can replay it.

use std::cell::Cell;
use std::hash::{BuildHasher, Hasher};

/// A random u64 from the standard library's per-process hasher keys and
/// the clock: for seeds and identities, not secrets.
pub fn random_u64() -> u64 {
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::SystemTime::UNIX_EPOCH)
            .map_or(0, |since| since.as_nanos()),
    );
    hasher.finish()
}

#[derive(Debug)]
pub struct Xorshift {
    state: Cell<u64>,
}

impl Xorshift {
    pub fn new(seed: u64) -> Xorshift {
        Xorshift {
            state: Cell::new(seed | 1),
        }
    }

    /// Uniform (up to the modulo bias, negligible for small bounds) below `bound`.
    pub fn below(&self, bound: u64) -> u64 {
        assert!(bound > 0);
        let mut state = self.state.get();
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        self.state.set(state);
        state % bound
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stays_below_the_bound_and_replays_per_seed() {
        let (a, b) = (Xorshift::new(7), Xorshift::new(7));
        for bound in 1..200 {
            let value = a.below(bound);
            assert!(value < bound);
            assert_eq!(value, b.below(bound));
        }
    }
}
