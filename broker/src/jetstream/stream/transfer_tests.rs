//! Transfers against the convergence argument: a leader replica goes on
//! applying a random log (messages, rollups, deletes, expiries, purges,
//! limit changes, consumers) while a follower reads its snapshot in small
//! chunks; the follower installs it, applies the entries after the
//! snapshot's index, and must then hold exactly what the leader holds.

use bytes::Bytes;
use futures_lite::future::block_on;
use tern_raft::{Entry, EntryKind, SnapshotRead};

use super::super::state::tests::{config, random_log};
use super::*;
use crate::jetstream::entry::Operation;

fn entry(index: u64, operation: &Operation) -> Entry {
    Entry {
        term: 1,
        index,
        kind: EntryKind::Normal(operation.encode()),
    }
}

fn apply(replica: &mut Replica, index: u64, operation: &Operation) {
    let mut answers = Vec::new();
    block_on(replica.apply(entry(index, operation), 0, &mut answers)).expect("applies");
}

/// A stored message: sequence, time, subject, payload.
type Held = (u64, u64, Bytes, Vec<u8>);

/// What a replica holds, payloads included, and its durable consumers.
fn held(replica: &Replica) -> (Vec<Held>, Vec<(String, Bytes)>) {
    let messages = replica
        .contents()
        .into_iter()
        .map(|stored| {
            let payload = block_on(replica.payload(stored.sequence))
                .expect("reads")
                .expect("listed");
            (
                stored.sequence,
                stored.timestamp_ns,
                stored.subject,
                payload,
            )
        })
        .collect();
    let consumers = replica
        .logged_consumers()
        .iter()
        .map(|(name, logged)| (name.clone(), logged.delivery_state.clone()))
        .collect();
    (messages, consumers)
}

struct Run {
    /// Entries applied while the transfer was read.
    applied_during: usize,
    converged: bool,
}

/// After the snapshot: appends (a count limit removes the oldest, often
/// already read) mixed with deletes of messages the snapshot holds (often
/// not read yet): the interleaving the end record's list is for.
fn overlapping_log(seed: u64, mut last: u64, snapshot_last: u64, length: usize) -> Vec<Operation> {
    let mut state = seed | 1;
    let mut below = |bound: u64| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state % bound.max(1)
    };
    (0..length)
        .map(|_| {
            if below(5) < 3 {
                last += 1;
                Operation::Message {
                    sequence: last,
                    timestamp_ns: 1_000 * last,
                    subject: Bytes::from_static(b"s.a"),
                    headers: Bytes::new(),
                    payload: Bytes::from(format!("late {last}")),
                    retained: true,
                }
            } else {
                Operation::Delete {
                    sequence: snapshot_last.saturating_sub(below(12)).max(1),
                    erase: false,
                }
            }
        })
        .collect()
}

/// One transfer: the leader applies a random log's first `split` entries
/// and marks its snapshot, then `overlapping_log`; each chunk read of
/// `chunk_bytes` is followed by a few entries; the follower installs what
/// it read and applies everything after the snapshot's index.
fn transfer(seed: u64, canary: Option<StreamCanary>) -> Run {
    let log: Vec<Operation> = random_log(0x7a5f_0000 + seed, 140)
        .into_iter()
        .map(|operation| match operation {
            // A logged create starts at a sequence (apply alone takes 0).
            Operation::ConsumerCreate {
                name,
                created_unix_ns,
                start_sequence,
                json,
            } => Operation::ConsumerCreate {
                name,
                created_unix_ns,
                start_sequence: start_sequence.max(1),
                json,
            },
            other => other,
        })
        .collect();
    let split = 60 + (seed as usize * 7) % 80;
    // The overlap runs under a count limit whatever the random log set.
    let mut log = log;
    log.insert(
        split - 1,
        Operation::Config {
            json: Bytes::from(config(r#","max_msgs":12"#).to_stored_json().into_bytes()),
        },
    );
    let chunk_bytes = [7, 16, 64, 300][seed as usize % 4];
    let stream_config = config(r#","max_msgs":12"#);
    let mut leader = block_on(Replica::in_memory(stream_config, canary)).expect("opens");
    for (position, operation) in log[..split].iter().enumerate() {
        apply(&mut leader, position as u64 + 1, operation);
    }
    let (index, _term) = leader.mark_snapshot();
    // Entries apply while messages are read (the header goes first).
    let header_bytes = leader.snapshot_header().encode().len() as u64;
    let mut log = log[..split].to_vec();
    let last = log
        .iter()
        .filter_map(|operation| match operation {
            Operation::Message { sequence, .. } => Some(*sequence),
            _ => None,
        })
        .max()
        .unwrap_or(0);
    // Short overlaps too: a limit that goes on removing the oldest would
    // hide a follower's extra messages again.
    let overlap = [6, 12, 40, 120][(seed / 4) as usize % 4];
    log.extend(overlapping_log(seed, last, leader.last_sequence(), overlap));
    let mut install = SnapshotInstall::new(canary);
    let mut offset = 0u64;
    let mut next = split;
    // What the leader held after each index it applied past the snapshot.
    let mut leader_at = std::collections::BTreeMap::new();
    loop {
        let read = SnapshotRead {
            peer: 2,
            index,
            session: 1,
            offset,
            max_bytes: chunk_bytes,
        };
        let (chunk, last) = block_on(leader.read_snapshot(&read))
            .expect("reads")
            .expect("the marked snapshot");
        assert!(chunk.len() <= chunk_bytes);
        offset += chunk.len() as u64;
        block_on(install.push(&chunk)).expect("decodes");
        if last {
            break;
        }
        for _ in 0..1 + seed % 2 {
            if next < log.len() && offset >= header_bytes {
                next += 1;
                apply(&mut leader, next as u64, &log[next - 1]);
                leader_at.insert(next as u64, held(&leader));
            }
        }
    }
    let applied_during = next - split;
    let mut follower = install.finish().expect("installs");
    assert_eq!(follower.applied_index(), index);
    let mut converged = true;
    for (position, operation) in log.iter().enumerate().skip(split) {
        let index = position as u64 + 1;
        if position >= next {
            apply(&mut leader, index, operation);
            leader_at.insert(index, held(&leader));
        }
        apply(&mut follower, index, operation);
        // From the index it converges at on, at every index.
        if follower.is_converged() {
            converged &= held(&follower) == leader_at[&index];
        }
    }
    assert!(follower.is_converged());
    assert_eq!(
        leader.transfers_open(),
        1,
        "the ended source waits for retain"
    );
    Run {
        applied_during,
        converged,
    }
}

#[test]
fn a_snapshot_read_while_entries_apply_converges() {
    let mut overlapped = 0;
    for seed in 0..400 {
        let run = transfer(seed, None);
        assert!(run.converged, "seed {seed}: the follower diverged");
        overlapped += usize::from(run.applied_during > 0);
    }
    assert!(
        overlapped > 300,
        "most transfers overlap applies: {overlapped}"
    );
}

/// Asserts `canary` makes some of 400 transfers diverge.
fn assert_canary_diverges(canary: StreamCanary) {
    let diverged = (0..400)
        .filter(|seed| !transfer(*seed, Some(canary)).converged)
        .count();
    assert!(diverged > 0, "the canary {canary:?} went unnoticed");
    eprintln!("the canary {canary:?} diverged in {diverged} of 400 transfers");
}

/// The removal list is what makes it converge: without it (the canary)
/// some interleavings leave the follower holding what a limit removed
/// (docs/stream-snapshots.md's counterexample).
#[test]
fn canary_snapshot_without_removals_diverges() {
    assert_canary_diverges(StreamCanary::SnapshotWithoutRemovals);
}

/// A count limit that evicts the newest is deterministic too, but a
/// follower that lacks a message deleted behind the reader then keeps one
/// the leader evicted: convergence needs limits that remove the oldest.
#[test]
fn canary_limit_evicts_newest_diverges() {
    assert_canary_diverges(StreamCanary::LimitEvictsNewest);
}

/// The counterexample of docs/stream-snapshots.md, step by step.
#[test]
fn a_limit_removal_behind_the_reader_is_carried_by_the_end_record() {
    let message = |sequence: u64| Operation::Message {
        sequence,
        timestamp_ns: sequence * 1_000,
        subject: Bytes::from_static(b"s.a"),
        headers: Bytes::new(),
        payload: Bytes::from(format!("m{sequence}")),
        retained: true,
    };
    for canary in [None, Some(StreamCanary::SnapshotWithoutRemovals)] {
        let mut leader =
            block_on(Replica::in_memory(config(r#","max_msgs":3"#), canary)).expect("opens");
        for sequence in 1..=3 {
            apply(&mut leader, sequence, &message(sequence));
        }
        let (index, _) = leader.mark_snapshot();
        let read = |offset, max_bytes| SnapshotRead {
            peer: 2,
            index,
            session: 1,
            offset,
            max_bytes,
        };
        // The header and message 1 (a record of 27 bytes, "s.a", "m1").
        let header_and_first = leader.snapshot_header().encode().len() + 27 + 3 + 2;
        let (first, last) = block_on(leader.read_snapshot(&read(0, header_and_first)))
            .expect("reads")
            .expect("marked");
        assert!(!last);
        // Entry 4 appends message 4 (the limit removes 1, already read);
        // entry 5 deletes 3 (not read yet).
        apply(&mut leader, 4, &message(4));
        apply(
            &mut leader,
            5,
            &Operation::Delete {
                sequence: 3,
                erase: false,
            },
        );
        let (rest, last) = block_on(leader.read_snapshot(&read(first.len() as u64, 1 << 20)))
            .expect("reads")
            .expect("marked");
        assert!(last);
        let mut install = SnapshotInstall::new(canary);
        block_on(install.push(&first)).unwrap();
        block_on(install.push(&rest)).unwrap();
        let mut follower = install.finish().unwrap();
        apply(&mut follower, 4, &message(4));
        apply(
            &mut follower,
            5,
            &Operation::Delete {
                sequence: 3,
                erase: false,
            },
        );
        let sequences = |replica: &Replica| -> Vec<u64> {
            replica
                .contents()
                .iter()
                .map(|stored| stored.sequence)
                .collect()
        };
        assert_eq!(sequences(&leader), vec![2, 4]);
        match canary {
            None => assert_eq!(sequences(&follower), vec![2, 4]),
            Some(_) => assert_eq!(sequences(&follower), vec![1, 2, 4], "the canary keeps 1"),
        }
    }
}
