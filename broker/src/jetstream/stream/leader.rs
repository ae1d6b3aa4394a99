//! What only the leader of a stream's group keeps: replies owed to clients
//! until their entries apply, what is proposed and not yet applied (which
//! ingest checks must count), and the duplicate window. None of it is
//! replicated state: a new leader starts these afresh (the dedupe window
//! from the store), and applying entries never depends on them.

use std::collections::VecDeque;

use bytes::Bytes;
use rustc_hash::FxHashMap;

use super::persistence;

/// A reply owed once an entry is applied.
pub(super) enum Owed {
    PubAck {
        reply: Bytes,
    },
    Duplicate {
        reply: Bytes,
        sequence: u64,
    },
    Purge {
        origin: usize,
        reply: Option<Bytes>,
    },
    Delete {
        origin: usize,
        reply: Option<Bytes>,
    },
    Update {
        origin: usize,
        reply: Option<Bytes>,
    },
    /// A durable consumer's create/delete answer or a reply that waited
    /// for its state snapshot.
    Consumer(persistence::ConsumerOwed),
}

/// A reply owed once the entry proposed at `(term, index)` applies. An
/// entry of another term applying at that index means leadership was lost
/// before it committed: the reply fails (nats-server's 10009) instead of
/// being released by an entry it does not belong to.
pub(super) struct OwedReply {
    pub(super) term: u64,
    pub(super) index: u64,
    pub(super) owed: Owed,
}

/// Proposed, not yet applied: what ingest checks must count.
#[derive(Default)]
pub(super) struct InFlight {
    pub(super) messages: u64,
    pub(super) bytes: u64,
    /// Per subject: (messages in flight, last sequence proposed).
    pub(super) subjects: FxHashMap<Bytes, (u64, u64)>,
}

impl InFlight {
    /// A proposed message of `bytes` on `subject` applied.
    pub(super) fn applied(&mut self, subject: &[u8], bytes: u64) {
        self.messages = self.messages.saturating_sub(1);
        self.bytes = self.bytes.saturating_sub(bytes);
        if let Some(slot) = self.subjects.get_mut(subject) {
            slot.0 = slot.0.saturating_sub(1);
            if slot.0 == 0 {
                self.subjects.remove(subject);
            }
        }
    }
}

pub(super) struct Dedupe {
    /// id -> (sequence, time)
    pub(super) ids: FxHashMap<Bytes, (u64, u64)>,
    pub(super) order: VecDeque<(u64, Bytes)>,
}

impl Dedupe {
    pub(super) fn expire(&mut self, now_ns: u64, window_ns: u64) {
        while let Some((time, _)) = self.order.front() {
            if now_ns.saturating_sub(*time) <= window_ns {
                break;
            }
            let (_, id) = self.order.pop_front().expect("front exists");
            self.ids.remove(&id);
        }
    }

    pub(super) fn insert(&mut self, id: Bytes, sequence: u64, time_ns: u64) {
        self.ids.insert(id.clone(), (sequence, time_ns));
        self.order.push_back((time_ns, id));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_duplicate_window_forgets_ids_older_than_it_in_order() {
        let mut dedupe = Dedupe {
            ids: FxHashMap::default(),
            order: VecDeque::new(),
        };
        dedupe.insert(Bytes::from_static(b"a"), 1, 100);
        dedupe.insert(Bytes::from_static(b"b"), 2, 200);
        dedupe.insert(Bytes::from_static(b"c"), 3, 300);
        dedupe.expire(350, 150);
        assert!(!dedupe.ids.contains_key(&b"a"[..]), "older than the window");
        assert_eq!(dedupe.ids.get(&b"b"[..]), Some(&(2, 200)), "at its edge");
        assert_eq!(dedupe.ids.get(&b"c"[..]), Some(&(3, 300)));
        dedupe.expire(u64::MAX, 0);
        assert!(dedupe.ids.is_empty() && dedupe.order.is_empty());
        // A clock behind the newest id keeps everything.
        dedupe.insert(Bytes::from_static(b"d"), 4, 500);
        dedupe.expire(10, 0);
        assert_eq!(dedupe.ids.len(), 1);
    }
}
