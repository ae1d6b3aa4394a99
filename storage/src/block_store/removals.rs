//! Removal watches: a reader that walks a stream's live messages while
//! they are being removed (a snapshot transfer reading the leader's store
//! chunk by chunk while entries apply) learns which of the messages it
//! already passed went afterwards. Each watch has a bound that the reader
//! moves forward as it reads; every removal of a sequence below the bound
//! is recorded, as increasing runs merged into ranges, up to
//! [`REMOVED_RANGES_MAX`] ranges (past that the watch is overflowed and the
//! reader starts over). With no watch a removal costs one empty-vector
//! check.

/// Ranges one watch records at most.
pub const REMOVED_RANGES_MAX: usize = 65_536;

/// One watch's identity, from [`RemovalWatches::watch`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct WatchId(u64);

/// What a watch recorded: sorted, disjoint, inclusive ranges.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Removed {
    pub ranges: Vec<(u64, u64)>,
    /// More than [`REMOVED_RANGES_MAX`] ranges were needed: `ranges` is
    /// incomplete.
    pub overflowed: bool,
}

#[derive(Debug)]
struct Watch {
    id: WatchId,
    /// Removals of sequences below this are recorded.
    below: u64,
    /// In the order seen; a run of consecutive removals extends the last.
    ranges: Vec<(u64, u64)>,
    overflowed: bool,
}

#[derive(Debug, Default)]
pub struct RemovalWatches {
    watches: Vec<Watch>,
    next_id: u64,
}

impl RemovalWatches {
    /// A new watch recording nothing until its bound moves.
    pub fn watch(&mut self) -> WatchId {
        self.next_id += 1;
        let id = WatchId(self.next_id);
        self.watches.push(Watch {
            id,
            below: 0,
            ranges: Vec::new(),
            overflowed: false,
        });
        id
    }

    /// Records removals below `below` from now on (a bound never goes back).
    pub fn advance(&mut self, id: WatchId, below: u64) {
        if let Some(watch) = self.watches.iter_mut().find(|watch| watch.id == id) {
            watch.below = watch.below.max(below);
        }
    }

    /// Ends the watch and returns what it recorded (`None`: no such watch).
    pub fn finish(&mut self, id: WatchId) -> Option<Removed> {
        let position = self.watches.iter().position(|watch| watch.id == id)?;
        let watch = self.watches.swap_remove(position);
        let mut ranges = watch.ranges;
        ranges.sort_unstable();
        let mut merged: Vec<(u64, u64)> = Vec::with_capacity(ranges.len());
        for (first, last) in ranges {
            match merged.last_mut() {
                Some(previous) if first <= previous.1.saturating_add(1) => {
                    previous.1 = previous.1.max(last);
                }
                _ => merged.push((first, last)),
            }
        }
        Some(Removed {
            ranges: merged,
            overflowed: watch.overflowed,
        })
    }

    /// Whether `id` is still recording without overflow.
    pub fn is_healthy(&self, id: WatchId) -> bool {
        self.watches
            .iter()
            .any(|watch| watch.id == id && !watch.overflowed)
    }

    pub fn is_empty(&self) -> bool {
        self.watches.is_empty()
    }

    /// `sequence` was live and is removed.
    pub fn removed(&mut self, sequence: u64) {
        for watch in &mut self.watches {
            if sequence >= watch.below || watch.overflowed {
                continue;
            }
            if let Some(last) = watch.ranges.last_mut() {
                if last.1.checked_add(1) == Some(sequence) {
                    last.1 = sequence;
                    continue;
                }
            }
            if watch.ranges.len() == REMOVED_RANGES_MAX {
                watch.overflowed = true;
                watch.ranges = Vec::new();
            } else {
                watch.ranges.push((sequence, sequence));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_removals_below_the_bound_are_recorded_and_runs_merge() {
        let mut watches = RemovalWatches::default();
        let id = watches.watch();
        watches.removed(1);
        watches.advance(id, 10);
        for sequence in [3, 4, 5, 9, 12, 2, 7] {
            watches.removed(sequence);
        }
        watches.advance(id, 5);
        watches.removed(8);
        let removed = watches.finish(id).expect("watching");
        assert_eq!(removed.ranges, vec![(2, 5), (7, 9)]);
        assert!(!removed.overflowed);
        assert!(watches.is_empty());
        assert_eq!(watches.finish(id), None);
    }

    #[test]
    fn a_watch_overflows_past_its_range_limit_and_others_go_on() {
        let mut watches = RemovalWatches::default();
        let small = watches.watch();
        watches.advance(small, u64::MAX);
        for sequence in 0..=REMOVED_RANGES_MAX as u64 {
            watches.removed(sequence * 2);
        }
        assert!(!watches.is_healthy(small));
        let other = watches.watch();
        watches.advance(other, u64::MAX);
        watches.removed(1);
        assert!(watches.finish(small).expect("watching").overflowed);
        assert_eq!(
            watches.finish(other).expect("watching").ranges,
            vec![(1, 1)]
        );
    }
}
