//! Stream log tests on in-memory files that crash like a disk.

use std::collections::BTreeMap;

use futures_lite::future::block_on;

use super::*;
use crate::block_store::files::MemoryFiles;
use crate::memory::Random;

fn small() -> StreamConfig {
    StreamConfig {
        segment_bytes_max: 16 * 1024,
        write_buffer_bytes: 8 * 1024,
        tail_cache_bytes: 2 * 1024,
        sync: true,
        read_chunk_bytes: 8 * 1024,
        compact_deleted_ratio: 0.5,
        ..StreamConfig::default()
    }
}

fn message(sequence: u64, subject: &str, payload_bytes: usize) -> (Vec<u8>, Vec<u8>, Vec<u8>) {
    let payload: Vec<u8> = (0..payload_bytes)
        .map(|i| (i as u64 * 7 + sequence) as u8)
        .collect();
    let headers = if sequence % 3 == 0 {
        b"NATS/1.0\r\nk: v\r\n\r\n".to_vec()
    } else {
        Vec::new()
    };
    (subject.as_bytes().to_vec(), headers, payload)
}

fn append(
    log: &mut StreamLog<MemoryFiles>,
    sequence: u64,
    subject: &str,
    payload_bytes: usize,
) -> StoredMessage {
    let (subject, headers, payload) = message(sequence, subject, payload_bytes);
    block_on(log.append(NewMessage {
        sequence,
        timestamp_ns: sequence * 1000,
        subject: &subject,
        headers: &headers,
        payload: &payload,
    }))
    .unwrap();
    StoredMessage {
        sequence,
        timestamp_ns: sequence * 1000,
        subject,
        headers,
        payload,
    }
}

fn open(files: MemoryFiles, config: StreamConfig) -> StreamLog<MemoryFiles> {
    block_on(StreamLog::open(files, config)).expect("opens").0
}

#[test]
fn messages_round_trip_across_segments_and_reopen() {
    let files = MemoryFiles::new();
    let mut log = open(files.clone(), small());
    let mut written = BTreeMap::new();
    for sequence in 1..=200 {
        written.insert(
            sequence,
            append(
                &mut log,
                sequence,
                &format!("orders.{}", sequence % 5),
                (sequence as usize * 13) % 400,
            ),
        );
        if sequence % 17 == 0 {
            block_on(log.flush()).unwrap();
        }
    }
    // Readable before and after flushing, from cache, buffer or disk.
    for (&sequence, expected) in &written {
        assert_eq!(
            block_on(log.get(sequence)).unwrap().as_ref(),
            Some(expected),
            "sequence {sequence}"
        );
    }
    block_on(log.flush()).unwrap();
    assert_eq!(log.durable_sequence(), 200);
    assert!(
        files
            .names()
            .iter()
            .filter(|name| name.ends_with(".blk"))
            .count()
            > 3
    );
    let log = open(files.crash(1), small());
    for (&sequence, expected) in &written {
        assert_eq!(
            block_on(log.get(sequence)).unwrap().as_ref(),
            Some(expected),
            "after reopen {sequence}"
        );
    }
    let state = log.state();
    assert_eq!(
        (
            state.messages,
            state.first_sequence,
            state.last_sequence,
            state.subjects,
            state.deleted
        ),
        (200, 1, 200, 5, 0)
    );
    let mut replayed = Vec::new();
    block_on(log.replay(150, |view| replayed.push(view.to_message()))).unwrap();
    assert_eq!(
        replayed,
        written
            .range(150..)
            .map(|(_, m)| m.clone())
            .collect::<Vec<_>>()
    );
}

#[test]
fn replay_covers_the_unflushed_tail() {
    let mut log = open(MemoryFiles::new(), small());
    let mut written = Vec::new();
    for sequence in 1..=60 {
        written.push(append(&mut log, sequence, "t", 300));
        if sequence == 25 {
            block_on(log.flush()).unwrap();
        }
    }
    let mut replayed = Vec::new();
    block_on(log.replay(1, |view| replayed.push(view.to_message()))).unwrap();
    assert_eq!(replayed, written);
}

#[test]
fn subjects_track_first_last_and_count() {
    let mut log = open(MemoryFiles::new(), small());
    for sequence in 1..=30 {
        append(
            &mut log,
            sequence,
            if sequence % 3 == 0 { "kv.a" } else { "kv.b" },
            10,
        );
    }
    assert_eq!(log.subject_state(b"kv.a"), Some((3, 30, 10)));
    assert_eq!(log.subject_state(b"kv.b"), Some((1, 29, 20)));
    assert!(log.delete(3));
    assert!(log.delete(30));
    assert!(!log.delete(30), "already gone");
    assert_eq!(log.subject_state(b"kv.a"), Some((6, 27, 8)));
    assert_eq!(log.next_matching(1, |subject| subject == b"kv.a"), Some(6));
    assert_eq!(log.next_matching(28, |subject| subject == b"kv.a"), None);
    assert_eq!(log.state().deleted, 2);
    for sequence in (6..=27).step_by(3) {
        log.delete(sequence);
    }
    assert_eq!(log.subject_state(b"kv.a"), None);
    assert_eq!(log.state().subjects, 1);
}

#[test]
fn deletes_and_purges_survive_reopen() {
    let files = MemoryFiles::new();
    let mut log = open(files.clone(), small());
    for sequence in 1..=100 {
        append(&mut log, sequence, "s", 200);
    }
    for sequence in [5, 50, 77] {
        assert!(log.delete(sequence));
    }
    assert_eq!(
        block_on(log.purge_below(20)).unwrap(),
        18,
        "1..=19 minus deleted 5"
    );
    block_on(log.flush()).unwrap();
    let segments_before = files
        .names()
        .iter()
        .filter(|name| name.ends_with(".blk"))
        .count();
    let log = open(files.crash(2), small());
    let state = log.state();
    assert_eq!(
        (state.first_sequence, state.last_sequence, state.messages),
        (20, 100, 79)
    );
    assert_eq!(block_on(log.get(50)).unwrap(), None);
    assert_eq!(block_on(log.get(19)).unwrap(), None);
    assert!(block_on(log.get(20)).unwrap().is_some());
    assert!(segments_before >= 2);
}

#[test]
fn retention_limits_trim_the_head() {
    let mut log = open(MemoryFiles::new(), small());
    for sequence in 1..=50 {
        append(&mut log, sequence, "s", 100);
    }
    let removed = block_on(log.enforce_limits(
        Limits {
            max_messages: Some(30),
            ..Limits::default()
        },
        0,
    ))
    .unwrap();
    assert_eq!(removed, 20);
    assert_eq!(log.state().first_sequence, 21);
    let per_message = log.state().bytes / 30;
    block_on(log.enforce_limits(
        Limits {
            max_bytes: Some(per_message * 10),
            ..Limits::default()
        },
        0,
    ))
    .unwrap();
    assert_eq!(log.state().messages, 10);
    // Timestamps are sequence * 1000 ns: older than 5 µs at t = 50 µs goes.
    block_on(log.enforce_limits(
        Limits {
            max_age_ns: Some(5_000),
            ..Limits::default()
        },
        50_000,
    ))
    .unwrap();
    assert_eq!(log.state().first_sequence, 45);
}

#[test]
fn compaction_rewrites_mostly_deleted_segments() {
    let files = MemoryFiles::new();
    let mut log = open(files.clone(), small());
    let mut written = BTreeMap::new();
    for sequence in 1..=120 {
        written.insert(sequence, append(&mut log, sequence, "c", 300));
    }
    block_on(log.flush()).unwrap();
    for sequence in 1..=120 {
        if sequence % 4 != 0 {
            log.delete(sequence);
            written.remove(&sequence);
        }
    }
    block_on(log.flush()).unwrap();
    let before: usize = files
        .names()
        .iter()
        .filter(|n| n.ends_with(".blk"))
        .map(|n| files.contents(n).len())
        .sum();
    let reclaimed = block_on(log.compact()).unwrap();
    assert!(reclaimed > 0);
    let after: usize = files
        .names()
        .iter()
        .filter(|n| n.ends_with(".blk"))
        .map(|n| files.contents(n).len())
        .sum();
    assert!(after < before, "{after} < {before}");
    for (&sequence, expected) in &written {
        assert_eq!(
            block_on(log.get(sequence)).unwrap().as_ref(),
            Some(expected)
        );
    }
    let log = open(files.crash(3), small());
    for (&sequence, expected) in &written {
        assert_eq!(
            block_on(log.get(sequence)).unwrap().as_ref(),
            Some(expected),
            "after reopen {sequence}"
        );
    }
    assert_eq!(log.state().messages, 30);
}

#[test]
fn a_flipped_bit_is_never_returned_as_data() {
    let files = MemoryFiles::new();
    let mut log = open(
        files.clone(),
        StreamConfig {
            tail_cache_bytes: 0,
            ..small()
        },
    );
    for sequence in 1..=40 {
        append(&mut log, sequence, "b", 300);
    }
    block_on(log.flush()).unwrap();
    let name = files
        .names()
        .into_iter()
        .find(|name| name.ends_with(".blk"))
        .unwrap();
    files.flip_bit(&name, 400, 4000, 9);
    let mut errors = 0;
    for sequence in 1..=40 {
        match block_on(log.get(sequence)) {
            Ok(Some(message)) => assert_eq!(message, message_for(sequence)),
            Ok(None) => panic!("sequence {sequence} vanished"),
            Err(StoreError::Corrupt { .. }) => errors += 1,
            Err(other) => panic!("{other}"),
        }
    }
    assert_eq!(errors, 1, "exactly the damaged record is refused");
    // Opening finds the damage before the tail and refuses.
    assert!(matches!(
        block_on(StreamLog::open(files.crash(4), small())),
        Err(StoreError::Corrupt { .. })
    ));
}

fn message_for(sequence: u64) -> StoredMessage {
    let (subject, headers, payload) = message(sequence, "b", 300);
    StoredMessage {
        sequence,
        timestamp_ns: sequence * 1000,
        subject,
        headers,
        payload,
    }
}

#[test]
fn a_misdirected_record_is_caught_by_the_index() {
    let files = MemoryFiles::new();
    let mut log = open(
        files.clone(),
        StreamConfig {
            tail_cache_bytes: 0,
            ..small()
        },
    );
    for sequence in 1..=10 {
        append(&mut log, sequence, "m", 1000);
    }
    block_on(log.flush()).unwrap();
    let name = files
        .names()
        .into_iter()
        .find(|name| name.ends_with(".blk"))
        .unwrap();
    let contents = files.contents(&name);
    // Equal-size records: copy record 2 over record 5 (a write that landed
    // in the wrong place). Each checks out alone; the index must object.
    // (Record 5 lies in a block that left the write buffer: read from disk.)
    let size = record::stored_bytes(1, 0, 1000);
    let (two, five) = (size, 4 * size);
    let record_two = contents[two..two + size].to_vec();
    files.overwrite(&name, five as u64, &record_two);
    assert!(matches!(
        block_on(log.get(5)),
        Err(StoreError::Corrupt { .. })
    ));
    assert!(block_on(log.get(2)).unwrap().is_some());
}

/// Crash property: random appends, deletes, flushes, purges; the process dies
/// at a random write; after reopening, every message that was flushed (and
/// not deleted by a flushed delete or purge) is there, identical.
fn crash_property(seed: u64) -> u64 {
    let mut verified = 0;
    let mut random = Random::new(seed);
    let config = StreamConfig {
        segment_bytes_max: (8 + random.below(24)) * 1024,
        write_buffer_bytes: 8 * 1024,
        tail_cache_bytes: random.below(4096) as usize,
        read_ahead_bytes: random.below(4) as usize * BLOCK_BYTES * 2,
        sync: true,
        read_chunk_bytes: 8 * 1024,
        compact_deleted_ratio: 0.5,
        // Small: the crash property also covers the deletes-log rewrite.
        deletes_log_bytes_max: 4096,
        ..StreamConfig::default()
    };
    let mut files = MemoryFiles::new();
    // Latest content appended under each sequence (lost appends get reused).
    let mut appended: BTreeMap<u64, StoredMessage> = BTreeMap::new();
    let mut model: BTreeMap<u64, StoredMessage>;
    let mut durable_model: BTreeMap<u64, StoredMessage> = BTreeMap::new();
    // Deleted since the last successful flush: an interrupted flush may or
    // may not have persisted these deletes.
    let mut maybe_deleted: std::collections::BTreeSet<u64> = std::collections::BTreeSet::new();
    let mut next_sequence;
    for cycle in 0..3 {
        let (mut log, _) = block_on(StreamLog::open(files.clone(), config.clone()))
            .unwrap_or_else(|error| panic!("seed {seed} cycle {cycle}: {error}"));
        for (sequence, expected) in &durable_model {
            let found =
                block_on(log.get(*sequence)).unwrap_or_else(|error| panic!("seed {seed}: {error}"));
            if found.is_none() && maybe_deleted.contains(sequence) {
                continue;
            }
            assert_eq!(
                found.as_ref(),
                Some(expected),
                "seed {seed} cycle {cycle}: sequence {sequence}"
            );
            verified += 1;
        }
        maybe_deleted.clear();
        // Anything present is exactly something that was appended (a delete
        // that was not flushed may be undone; nothing is ever invented).
        let mut present = BTreeMap::new();
        block_on(log.replay(1, |view| {
            let message = &view.to_message();
            assert_eq!(
                appended.get(&message.sequence),
                Some(message),
                "seed {seed}: replay returned an unknown message"
            );
            present.insert(message.sequence, message.clone());
        }))
        .unwrap();
        appended.retain(|sequence, _| *sequence <= log.last_sequence());
        model = present;
        durable_model = model.clone();
        next_sequence = log.last_sequence() + 1;
        files.die_after_writes(1 + random.below(15));
        loop {
            let outcome: Result<(), StoreError> = match random.below(10) {
                0..=5 => {
                    let subject = format!("s.{}", random.below(4));
                    let payload_bytes = random.below(1500) as usize;
                    let (subject, headers, payload) =
                        message(next_sequence, &subject, payload_bytes);
                    let result = block_on(log.append(NewMessage {
                        sequence: next_sequence,
                        timestamp_ns: next_sequence,
                        subject: &subject,
                        headers: &headers,
                        payload: &payload,
                    }));
                    if result.is_ok() {
                        let stored = StoredMessage {
                            sequence: next_sequence,
                            timestamp_ns: next_sequence,
                            subject,
                            headers,
                            payload,
                        };
                        appended.insert(next_sequence, stored.clone());
                        model.insert(next_sequence, stored);
                        next_sequence += 1;
                    }
                    result
                }
                6 => {
                    if let Some(&sequence) = model
                        .keys()
                        .nth(random.below(model.len().max(1) as u64) as usize)
                    {
                        log.delete(sequence);
                        model.remove(&sequence);
                        maybe_deleted.insert(sequence);
                    }
                    Ok(())
                }
                7 => {
                    let below = model.keys().next().copied().unwrap_or(1) + random.below(3);
                    let result = block_on(log.purge_below(below));
                    if result.is_ok() {
                        model.retain(|sequence, _| *sequence >= below);
                        durable_model.retain(|sequence, _| *sequence >= below);
                    }
                    result.map(|_| ())
                }
                _ => {
                    let result = block_on(log.flush());
                    if result.is_ok() {
                        durable_model = model.clone();
                        maybe_deleted.clear();
                    }
                    result
                }
            };
            if outcome.is_err() {
                assert!(files.is_dead(), "seed {seed}: unexpected error {outcome:?}");
                break;
            }
        }
        files = files.crash(random.next_u64());
    }
    verified
}

#[test]
fn flushed_messages_survive_crashes() {
    let seeds: u64 = std::env::var("TERN_STORE_SEEDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200);
    let verified: u64 = (0..seeds).map(crash_property).sum();
    // Exercised, not vacuous: many durable messages checked after crashes.
    assert!(
        verified > seeds * 10,
        "only {verified} durable messages verified over {seeds} seeds"
    );
}

fn append_simple(log: &mut StreamLog<MemoryFiles>, sequence: u64, subject: &str, time: u64) {
    block_on(log.append(NewMessage {
        sequence,
        timestamp_ns: time,
        subject: subject.as_bytes(),
        headers: b"",
        payload: b"payload",
    }))
    .unwrap();
}

#[test]
fn lookups_by_subject_time_and_gaps() {
    let files = MemoryFiles::new();
    let (mut log, _) = block_on(StreamLog::open(files, small())).unwrap();
    for sequence in 1..=6 {
        let subject = if sequence % 2 == 0 { "a.even" } else { "b.odd" };
        append_simple(&mut log, sequence, subject, sequence * 100);
    }
    assert!(log.delete(3));
    assert_eq!(log.deleted_sequences(10), vec![3]);
    assert_eq!(log.deleted_sequences(0), Vec::<u64>::new());
    let mut subjects: Vec<(Vec<u8>, u64, u64, u64)> = log
        .subjects()
        .map(|(name, first, last, count)| (name.to_vec(), first, last, count))
        .collect();
    subjects.sort();
    assert_eq!(
        subjects,
        vec![(b"a.even".to_vec(), 2, 6, 3), (b"b.odd".to_vec(), 1, 5, 2)]
    );
    assert_eq!(
        log.last_matching(|subject| subject.starts_with(b"b.")),
        Some(5)
    );
    assert_eq!(log.first_at_or_after(250), Some(4), "3 is deleted");
    assert_eq!(log.first_at_or_after(601), None);
    assert_eq!(log.timestamp_of(4), Some(400));
    assert_eq!(log.timestamp_of(3), None);
    assert_eq!(log.subject_of(5), Some(&b"b.odd"[..]));
}

#[test]
fn message_bytes_follow_the_configured_accounting() {
    fn nats_file(subject: usize, headers: usize, payload: usize) -> u64 {
        (if headers > 0 { 34 } else { 30 } + subject + headers + payload) as u64
    }
    let config = StreamConfig {
        message_bytes: nats_file,
        ..small()
    };
    let (mut log, _) = block_on(StreamLog::open(MemoryFiles::new(), config)).unwrap();
    append_simple(&mut log, 1, "t1.c", 1);
    assert_eq!(log.state().bytes, 30 + 4 + 7);
    assert!(log.delete(1));
    assert_eq!(log.state().bytes, 0);
}

#[test]
fn the_deletes_log_is_rewritten_when_it_grows_and_survives_reopening() {
    let config = StreamConfig {
        deletes_log_bytes_max: 4096,
        ..small()
    };
    let files = MemoryFiles::new();
    let (mut log, _) = block_on(StreamLog::open(files.clone(), config.clone())).unwrap();
    // 600 messages, delete all but every 50th: > 4096 bytes of delete entries.
    for sequence in 1..=600 {
        append_simple(&mut log, sequence, "s", sequence);
    }
    for sequence in 1..=600 {
        if sequence % 50 != 0 {
            assert!(log.delete(sequence));
        }
        if sequence % 100 == 0 {
            block_on(log.flush()).unwrap();
        }
    }
    block_on(log.flush()).unwrap();
    let before = log.state();
    assert_eq!(before.messages, 12);
    assert_eq!(before.first_sequence, 50);
    // Rewritten: only the deletes between the first live message and the
    // last sequence are left (those below 50 went with the floor).
    let interior = 600 - 50 + 1 - 12;
    assert_eq!(
        files.contents("deletes.log").len(),
        (interior * 16usize).div_ceil(4096) * 4096
    );
    drop(log);
    let (reopened, _) = block_on(StreamLog::open(files, config)).unwrap();
    assert_eq!(reopened.state(), before);
    assert_eq!(
        reopened.deleted_sequences(usize::MAX).len() as u64,
        before.deleted
    );
}

fn read_ahead_config(read_ahead_bytes: usize) -> StreamConfig {
    StreamConfig {
        segment_bytes_max: 1 << 20,
        tail_cache_bytes: 0,
        read_ahead_bytes,
        ..small()
    }
}

/// 200 messages of about 150 bytes, flushed every 10: about 30 KiB on disk.
fn appended_for_read_ahead(log: &mut StreamLog<MemoryFiles>) -> BTreeMap<u64, StoredMessage> {
    let mut written = BTreeMap::new();
    for sequence in 1..=200 {
        written.insert(sequence, append(log, sequence, "orders.new", 100));
        if sequence % 10 == 0 {
            block_on(log.flush()).unwrap();
        }
    }
    written
}

#[test]
fn sequential_gets_are_served_from_the_read_ahead() {
    let mut disk_reads = Vec::new();
    for read_ahead_bytes in [0, 16 * 1024] {
        let files = MemoryFiles::new();
        let mut log = open(files.clone(), read_ahead_config(read_ahead_bytes));
        let written = appended_for_read_ahead(&mut log);
        let before = files.reads();
        for (&sequence, expected) in &written {
            assert_eq!(
                block_on(log.get(sequence)).unwrap().as_ref(),
                Some(expected),
                "{sequence}"
            );
        }
        disk_reads.push(files.reads() - before);
    }
    // Without read-ahead: one read per message on disk (all but the few
    // in the write buffer). With 16 KiB runs over ~30 KiB: one per run
    // (the second prefetched), plus one per record straddling a run's end.
    assert!(disk_reads[0] > 150, "{disk_reads:?}");
    assert!(disk_reads[1] <= 4, "{disk_reads:?}");
}

/// 16 KiB runs over one segment that holds everything appended.
fn one_segment_of_runs(prefetch_runs: usize) -> StreamConfig {
    StreamConfig {
        segment_bytes_max: 64 << 20,
        prefetch_runs,
        ..read_ahead_config(16 * 1024)
    }
}

/// 600 messages of about 1.1 KiB in one segment (about 40 runs of 16 KiB),
/// flushed every 10: record boundaries fall anywhere in a run.
fn appended_across_runs(log: &mut StreamLog<MemoryFiles>) -> BTreeMap<u64, StoredMessage> {
    let mut written = BTreeMap::new();
    for sequence in 1..=600 {
        written.insert(sequence, append(log, sequence, "orders.new", 1100));
        if sequence % 10 == 0 {
            block_on(log.flush()).unwrap();
        }
    }
    block_on(log.flush()).unwrap();
    written
}

#[test]
fn a_reader_in_order_reads_every_run_once_and_ahead_of_itself() {
    for prefetch_runs in [1, 2, 4] {
        let files = MemoryFiles::new();
        let config = one_segment_of_runs(prefetch_runs);
        let mut log = open(files.clone(), config);
        let written = appended_across_runs(&mut log);
        let before = files.read_log().len();
        let mut ahead_max = 0;
        for (&sequence, expected) in &written {
            assert_eq!(
                block_on(log.get(sequence)).unwrap().as_ref(),
                Some(expected),
                "{sequence}"
            );
            ahead_max = ahead_max.max(log.prefetch.borrow().len());
        }
        let reads = files.read_log()[before..].to_vec();
        // Each run starts where the one before it ended: no record (not
        // even one straddling two runs) made the log read its bytes again,
        // and no prefetched run was thrown away. The last read is the
        // exception: the final partial block is still the write buffer's,
        // so a record reaching into it is read on its own.
        let (last, runs) = reads.split_last().expect("reads");
        for pair in runs.windows(2) {
            assert_eq!(
                pair[1].0,
                pair[0].0 + pair[0].1 as u64,
                "prefetch_runs {prefetch_runs}: {reads:?}"
            );
        }
        let (end, _) = runs
            .last()
            .map(|&(start, bytes)| (start + bytes as u64, ()))
            .expect("runs");
        assert!(last.0 < end && last.0 + last.1 as u64 > end, "{reads:?}");
        assert_eq!(runs[0].0, 0);
        assert!(end > 600 * 1100, "{reads:?}");
        assert_eq!(ahead_max, prefetch_runs);
    }
}

#[test]
fn a_reader_that_skips_ahead_or_goes_back_gets_every_message() {
    let files = MemoryFiles::new();
    let config = one_segment_of_runs(3);
    let mut log = open(files.clone(), config);
    let written = appended_across_runs(&mut log);
    // In order for a while (runs in flight), then past the first prefetched
    // run into the second, then far ahead, then back to the start.
    let order = (1..=40)
        .chain(60..=80)
        .chain(300..=330)
        .chain(2..=20)
        .chain(590..=600);
    for sequence in order {
        assert_eq!(
            block_on(log.get(sequence)).unwrap().as_ref(),
            written.get(&sequence),
            "{sequence}"
        );
    }
}

#[test]
fn readers_in_order_at_different_places_keep_their_own_runs() {
    // Up to four readers interleaved message by message (consumers at
    // different places in one stream): each reads its runs once, as alone.
    // Five: still every message right, the runs just are not kept.
    for readers in [2u64, 4, 5] {
        let files = MemoryFiles::new();
        let config = one_segment_of_runs(StreamConfig::default().prefetch_runs);
        let mut log = open(files.clone(), config);
        let written = appended_across_runs(&mut log);
        let before = files.reads();
        let steps = 100;
        for step in 0..steps {
            for reader in 0..readers {
                let sequence = 1 + reader * 120 + step;
                assert_eq!(
                    block_on(log.get(sequence)).unwrap().as_ref(),
                    written.get(&sequence),
                    "{readers} readers: {sequence}"
                );
            }
        }
        let reads = files.reads() - before;
        // Each reader covers 100 messages of ~1.1 KiB: about 7 runs of
        // 16 KiB, plus the prefetched ones past its end.
        if readers <= 4 {
            assert!(reads <= readers * 10, "{readers} readers: {reads} reads");
        } else {
            assert!(
                reads > readers * steps / 2,
                "{readers} readers: {reads} reads"
            );
        }
        assert!(log.parked_readers.borrow().len() <= PARKED_READERS_MAX);
    }
}

#[test]
fn a_deleted_or_purged_message_is_never_served_from_the_read_ahead() {
    let files = MemoryFiles::new();
    let mut log = open(files.clone(), read_ahead_config(64 * 1024));
    let written = appended_for_read_ahead(&mut log);
    // Fills the read-ahead with the run holding 1..
    assert_eq!(block_on(log.get(1)).unwrap().as_ref(), written.get(&1));
    assert!(log.delete(5));
    assert_eq!(block_on(log.get(5)).unwrap(), None);
    assert_eq!(block_on(log.get(6)).unwrap().as_ref(), written.get(&6));
    block_on(log.flush()).unwrap();
    assert_eq!(block_on(log.get(5)).unwrap(), None);
    block_on(log.purge_below(50)).unwrap();
    for sequence in 1..50 {
        assert_eq!(block_on(log.get(sequence)).unwrap(), None, "{sequence}");
    }
    for sequence in 50..=200 {
        assert_eq!(
            block_on(log.get(sequence)).unwrap().as_ref(),
            written.get(&sequence),
            "{sequence}"
        );
    }
}

#[test]
fn the_read_ahead_never_serves_a_compacted_segment_s_old_bytes() {
    let files = MemoryFiles::new();
    let config = StreamConfig {
        tail_cache_bytes: 0,
        read_ahead_bytes: 64 * 1024,
        ..small()
    };
    let mut log = open(files.clone(), config.clone());
    let mut written = BTreeMap::new();
    for sequence in 1..=120 {
        written.insert(sequence, append(&mut log, sequence, "c", 300));
    }
    block_on(log.flush()).unwrap();
    // The first segment's bytes are now held in the read-ahead.
    assert_eq!(block_on(log.get(2)).unwrap().as_ref(), written.get(&2));
    for sequence in 1..=120 {
        if sequence % 4 != 0 {
            assert!(log.delete(sequence));
            written.remove(&sequence);
        }
    }
    block_on(log.flush()).unwrap();
    assert!(block_on(log.compact()).unwrap() > 0);
    // Offsets moved: bytes from before compaction would fail the index check.
    for sequence in 1..=120 {
        assert_eq!(
            block_on(log.get(sequence)).unwrap().as_ref(),
            written.get(&sequence),
            "{sequence}"
        );
    }
}

#[test]
fn the_read_ahead_keeps_only_bytes_that_can_no_longer_change() {
    let files = MemoryFiles::new();
    let mut log = open(files.clone(), read_ahead_config(64 * 1024));
    let mut written = BTreeMap::new();
    // Interleave appends, partial-block flushes and reads: a run read while
    // a block was still being filled must not serve that block later.
    for sequence in 1..=300 {
        written.insert(sequence, append(&mut log, sequence, "orders.new", 37));
        if sequence % 7 == 0 {
            block_on(log.flush()).unwrap();
        }
        if sequence % 5 == 0 {
            for earlier in [1, sequence / 2, sequence.saturating_sub(3).max(1)] {
                assert_eq!(
                    block_on(log.get(earlier)).unwrap().as_ref(),
                    written.get(&earlier),
                    "{earlier} after {sequence}"
                );
            }
        }
    }
    for (&sequence, expected) in &written {
        assert_eq!(
            block_on(log.get(sequence)).unwrap().as_ref(),
            Some(expected)
        );
    }
}

#[test]
fn next_matching_skips_subjects_that_do_not_match() {
    let files = MemoryFiles::new();
    let mut log = open(files, read_ahead_config(0));
    // More subjects than the verdict table has slots, so slots are reused.
    for sequence in 1..=100 {
        append(&mut log, sequence, &format!("s.{}", sequence % 37), 8);
    }
    log.delete(74);
    let wanted = |subject: &[u8]| subject == b"s.0" || subject == b"s.1";
    let mut found = Vec::new();
    let mut from = 1;
    while let Some(sequence) = log.next_matching(from, wanted) {
        found.push(sequence);
        from = sequence + 1;
    }
    assert_eq!(found, [1, 37, 38, 75]);
}

#[test]
fn without_sync_flushes_write_behind_and_sync_makes_them_durable() {
    // Write-behind spawns the write: this needs a glommio executor.
    let executor = glommio::LocalExecutorBuilder::default()
        .io_memory(1 << 20)
        .make()
        .unwrap();
    executor.run(async {
        let config = StreamConfig {
            sync: false,
            ..small()
        };
        let files = MemoryFiles::new();
        let (mut log, _) = StreamLog::open(files.clone(), config.clone())
            .await
            .unwrap();
        for sequence in 1..=40u64 {
            log.append(NewMessage {
                sequence,
                timestamp_ns: sequence,
                subject: b"s",
                headers: b"",
                payload: &sequence.to_le_bytes(),
            })
            .await
            .unwrap();
            // Reads see every message while its buffer is being written.
            for earlier in [1, sequence / 2 + 1, sequence] {
                let message = log.get(earlier).await.unwrap().expect("present");
                assert_eq!(message.payload, earlier.to_le_bytes());
            }
        }
        log.flush().await.unwrap();
        for sequence in 1..=40u64 {
            let message = log.get(sequence).await.unwrap().expect("present");
            assert_eq!(message.payload, sequence.to_le_bytes());
        }
        assert!(log.delete(5));
        log.sync().await.unwrap();
        for sequence in 41..=60u64 {
            log.append(NewMessage {
                sequence,
                timestamp_ns: sequence,
                subject: b"s",
                headers: b"",
                payload: &sequence.to_le_bytes(),
            })
            .await
            .unwrap();
        }
        log.flush().await.unwrap();
        let mut replayed = 0;
        log.replay(1, |_| replayed += 1).await.unwrap();
        assert_eq!(replayed, 59);
        // A crash loses what was written but not synced, never what was synced.
        let (reopened, _) = StreamLog::open(files.crash(7), config).await.unwrap();
        let state = reopened.state();
        assert!(state.last_sequence >= 40, "{state:?}");
        assert_eq!(reopened.get(5).await.unwrap(), None, "the synced delete");
        for sequence in (1..=40).filter(|&sequence| sequence != 5) {
            assert!(
                reopened.get(sequence).await.unwrap().is_some(),
                "{sequence}"
            );
        }
    });
}

#[test]
fn a_sequence_gap_starts_a_segment_instead_of_a_huge_index() {
    let files = MemoryFiles::new();
    let mut log = open(files.clone(), small());
    let first = append(&mut log, 1, "gap.a", 10);
    let far = 1 << 40;
    let last = append(&mut log, far, "gap.b", 10);
    block_on(log.flush()).unwrap();
    assert_eq!(log.segments.len(), 2, "the far sequence opened a segment");
    assert!(log
        .segments
        .iter()
        .all(|segment| segment.entries.len() <= 2));
    let log = open(files.crash(1), small());
    assert_eq!(block_on(log.get(1)).unwrap(), Some(first));
    assert_eq!(block_on(log.get(far)).unwrap(), Some(last));
    assert_eq!(block_on(log.get(far - 1)).unwrap(), None);
    let state = log.state();
    assert_eq!(
        (state.messages, state.first_sequence, state.last_sequence),
        (2, 1, far)
    );
}

#[test]
fn a_record_beyond_its_segment_span_is_corruption_not_an_allocation() {
    let files = MemoryFiles::new();
    let file = block_on(files.create("00000000000000000001.blk")).unwrap();
    let mut image = vec![0u8; crate::format::BLOCK_BYTES];
    let (subject, headers, payload) = message(1, "span", 8);
    let size = record::stored_bytes(subject.len(), headers.len(), payload.len());
    record::encode(
        &NewMessage {
            sequence: 1 + SEGMENT_SEQUENCES_MAX,
            timestamp_ns: 1,
            subject: &subject,
            headers: &headers,
            payload: &payload,
        },
        &mut image[..size],
    );
    block_on(file.write(0, crate::device::HeapBuffer(image))).unwrap();
    block_on(file.sync()).unwrap();
    match block_on(StreamLog::open(files, small())) {
        Err(StoreError::Corrupt { reason, .. }) => {
            assert!(reason.contains("beyond the segment"), "{reason}")
        }
        Err(other) => panic!("expected corruption, got {other:?}"),
        Ok(_) => panic!("expected corruption, the log opened"),
    }
}
