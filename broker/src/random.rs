//! A small seeded generator for choices that need to be uniform, not
//! secret (queue members, jitter, source ports): xorshift64, one per owner,
//! deterministic per seed so tests and the simulator can replay it.

use std::cell::Cell;

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
