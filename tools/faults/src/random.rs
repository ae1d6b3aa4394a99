//! The harness's one source of randomness: SplitMix64, seeded from the
//! run's seed, so a schedule and every choice made from it (which node,
//! which file, which bit) repeat exactly from the seed printed in the
//! report. Not `rand`: its generators' streams may change between
//! versions, and a seed must reproduce a failure for as long as the
//! harness exists.

#[derive(Debug, Clone)]
pub struct Random {
    state: u64,
}

impl Random {
    pub fn new(seed: u64) -> Random {
        Random { state: seed }
    }

    /// A generator of its own for one purpose (`stream` names it), so that
    /// adding a draw in one place does not shift every other choice.
    pub fn fork(&self, stream: u64) -> Random {
        let mut forked = Random::new(self.state ^ stream.wrapping_mul(0xA076_1D64_78BD_642F));
        forked.next_u64();
        forked
    }

    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..bound` (`bound` > 0).
    pub fn below(&mut self, bound: u64) -> u64 {
        assert!(bound > 0, "an empty range");
        // Multiply-shift: bias below 2^-64 * bound, irrelevant here.
        ((u128::from(self.next_u64()) * u128::from(bound)) >> 64) as u64
    }

    /// Uniform in `low..=high`.
    pub fn between(&mut self, low: u64, high: u64) -> u64 {
        assert!(low <= high, "{low} > {high}");
        low + self.below(high - low + 1)
    }

    pub fn index(&mut self, length: usize) -> usize {
        self.below(length as u64) as usize
    }

    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.index(items.len())]
    }

    /// `count` distinct indices of `0..length`, in increasing order.
    pub fn subset(&mut self, length: usize, count: usize) -> Vec<usize> {
        assert!(count <= length, "{count} of {length}");
        let mut all: Vec<usize> = (0..length).collect();
        for index in 0..count {
            let other = index + self.index(length - index);
            all.swap(index, other);
        }
        let mut chosen = all[..count].to_vec();
        chosen.sort_unstable();
        chosen
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_repeats_its_stream_and_forks_differ() {
        let mut first = Random::new(42);
        let mut second = Random::new(42);
        let drawn: Vec<u64> = (0..8).map(|_| first.next_u64()).collect();
        assert_eq!(drawn, (0..8).map(|_| second.next_u64()).collect::<Vec<_>>());
        let mut forked = Random::new(42).fork(1);
        let mut other = Random::new(42).fork(2);
        assert_ne!(forked.next_u64(), other.next_u64());
    }

    #[test]
    fn draws_stay_in_range_and_subsets_are_distinct() {
        let mut random = Random::new(7);
        for _ in 0..10_000 {
            assert!(random.below(3) < 3);
            let value = random.between(5, 9);
            assert!((5..=9).contains(&value));
        }
        for _ in 0..1000 {
            let chosen = random.subset(5, 2);
            assert_eq!(chosen.len(), 2);
            assert!(chosen[0] < chosen[1] && chosen[1] < 5);
        }
    }
}
