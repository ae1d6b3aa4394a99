//! Fuzzes opening a stream's block store against the promise it keeps:
//! damage confined to one file never loses, alters or resurrects an
//! acknowledged message silently.
//!
//! The input is `[scenario, file, damage, position_lo, position_hi, mask...]`.
//! The harness writes a valid store (scenario picks how: one message;
//! several segments with deletes; gaps and no deletes; messages spanning
//! blocks and the write buffer; writes after the checkpoint; a compacted
//! segment, a purge and a rewritten deletes log with the retired files
//! still there) and keeps the manifest its last `sync` returned, and what
//! that checkpoint acknowledged: every message appended before it and
//! which of them were deleted or purged. It then damages file
//! `file % files` (sorted by name) once, by `damage % 4`:
//! - 0, 1: XORs `mask` (up to one 4 KiB block: one bit, a zeroed block,
//!   garbage) into block `position % blocks` (XOR gets half the inputs: it
//!   is the damage with the most ways to go wrong);
//! - 2: truncates the file to `position % (bytes + 1)` bytes (every file is
//!   under 64 KiB, so every length is reachable);
//! - 3: removes the file.
//!
//! It reopens with the undamaged manifest. The outcome must be one of:
//! - open reports `Corrupt` (and `verify` agrees), having removed or
//!   changed nothing;
//! - the store opens (and `verify` agrees); every acknowledged live
//!   message reads back identical or as `Corrupt`, never different, never
//!   missing; a deleted, purged or never-acknowledged sequence is never
//!   served; `replay` agrees. It then takes one more message and one more
//!   delete, syncs, and the store reopens from that manifest serving
//!   exactly the new state (damage the open ignored never leaks into the
//!   next checkpoint).
//!
//! A second pass runs `salvage` (what `tern storage repair` stores) over
//! the damaged files: it must lose nothing when the open succeeded, name
//! only the damaged file, and its manifest must open and serve every
//! acknowledged message identical except those it reported lost, and no
//! deleted one unless it reported delete entries lost. Never a panic.
#![no_main]

use std::collections::{BTreeMap, BTreeSet};
use std::ops::RangeInclusive;
use std::sync::OnceLock;

use futures_lite::future::block_on;
use libfuzzer_sys::fuzz_target;
use tern_storage::block_store::{
    salvage, Loss, Manifest, MemoryFiles, NewMessage, StoreError, StoreFile, StoreFiles,
    StoredMessage, StreamConfig, StreamLog,
};
use tern_storage::device::HeapBuffer;
use tern_storage::format::BLOCK_BYTES;

const SCENARIOS: usize = 6;
/// Every file of every image is at most this long, so a 16-bit position
/// reaches every truncation length.
const FILE_BYTES_MAX: usize = u16::MAX as usize;
/// Seeds the payload of the message written after a successful open, so
/// it differs from anything a scenario wrote at that sequence.
const CONTINUATION_SCENARIO: usize = 99;

/// A store's files by name, sorted, with their bytes.
type FilesImage = Vec<(String, Vec<u8>)>;

/// What a checkpoint acknowledged.
#[derive(Debug, Clone)]
struct Model {
    /// Every message appended before the checkpoint.
    messages: BTreeMap<u64, StoredMessage>,
    /// Sequences among them deleted or purged as of the checkpoint.
    deleted: BTreeSet<u64>,
    /// The checkpoint's last sequence.
    last_sequence: u64,
    /// Sequences probed run to here: past anything written at all (writes
    /// after the checkpoint included), which must not be served either.
    probe_sequence_max: u64,
}

impl Model {
    fn live(&self) -> impl Iterator<Item = (&u64, &StoredMessage)> + '_ {
        self.messages
            .iter()
            .filter(|(sequence, _)| !self.deleted.contains(sequence))
    }
}

struct Image {
    config: StreamConfig,
    files: FilesImage,
    manifest: Manifest,
    model: Model,
}

fn config(segment_bytes_max: u64, deletes_log_bytes_max: u64) -> StreamConfig {
    StreamConfig {
        segment_bytes_max,
        write_buffer_bytes: 2 * BLOCK_BYTES,
        // Reads come from the files, not from memory.
        tail_cache_bytes: 0,
        sync: true,
        read_chunk_bytes: 2 * BLOCK_BYTES,
        read_ahead_bytes: 2 * BLOCK_BYTES,
        prefetch_runs: 1,
        compact_deleted_ratio: 0.5,
        deletes_log_bytes_max,
        ..StreamConfig::default()
    }
}

/// The message the harness writes at `sequence`, `payload_bytes` long.
fn message(scenario: usize, sequence: u64, payload_bytes: usize) -> StoredMessage {
    StoredMessage {
        sequence,
        timestamp_ns: 1_000 * sequence,
        subject: format!("orders.{}", sequence % 3).into_bytes(),
        headers: if sequence % 4 == 0 {
            b"NATS/1.0\r\nkind: fuzz\r\n\r\n".to_vec()
        } else {
            Vec::new()
        },
        payload: (0..payload_bytes)
            .map(|byte| (byte as u64 ^ sequence ^ scenario as u64 * 31) as u8)
            .collect(),
    }
}

/// A log being written, and the model of what it holds.
struct Writer {
    scenario: usize,
    log: StreamLog<MemoryFiles>,
    files: MemoryFiles,
    messages: BTreeMap<u64, StoredMessage>,
    deleted: BTreeSet<u64>,
}

impl Writer {
    fn new(scenario: usize, config: &StreamConfig) -> Writer {
        let files = MemoryFiles::new();
        let (log, _) = block_on(StreamLog::open(
            files.clone(),
            config.clone(),
            &Manifest::new(1),
        ))
        .expect("a new log opens");
        Writer {
            scenario,
            log,
            files,
            messages: BTreeMap::new(),
            deleted: BTreeSet::new(),
        }
    }

    fn append(&mut self, sequence: u64, payload_bytes: usize) {
        let message = message(self.scenario, sequence, payload_bytes);
        block_on(append(&mut self.log, &message)).expect("memory append");
        self.messages.insert(sequence, message);
    }

    fn delete(&mut self, sequence: u64) {
        assert!(self.log.delete(sequence), "{sequence} was live");
        self.deleted.insert(sequence);
    }

    fn purge_below(&mut self, sequence: u64) {
        block_on(self.log.purge_below(sequence)).expect("memory purge");
        self.deleted
            .extend(self.messages.keys().filter(|&&stored| stored < sequence));
    }

    /// Syncs: the returned manifest and model are what the checkpoint
    /// acknowledged (later writes change neither).
    fn checkpoint(&mut self) -> (Manifest, Model) {
        let manifest = block_on(self.log.sync()).expect("memory sync");
        let model = Model {
            messages: self.messages.clone(),
            deleted: self.deleted.clone(),
            last_sequence: manifest.last_sequence,
            probe_sequence_max: 0,
        };
        (manifest, model)
    }
}

async fn append(
    log: &mut StreamLog<MemoryFiles>,
    message: &StoredMessage,
) -> Result<(), StoreError> {
    log.append(NewMessage {
        sequence: message.sequence,
        timestamp_ns: message.timestamp_ns,
        subject: &message.subject,
        headers: &message.headers,
        payload: &message.payload,
    })
    .await
}

/// Scenario `n`'s store; see the module documentation.
fn write_image(scenario: usize) -> Image {
    let config = match scenario {
        5 => config(8 * 1024, 256),
        _ => config(12 * 1024, 1 << 20),
    };
    let mut writer = Writer::new(scenario, &config);
    let (manifest, model) = match scenario {
        // One message, no deletes.
        0 => {
            writer.append(1, 100);
            writer.checkpoint()
        }
        // Several segments, deletes at the head, inside and at the end,
        // over two checkpoints.
        1 => {
            for sequence in 1..=25 {
                writer.append(sequence, 200 + (sequence as usize * 137) % 500);
            }
            writer.delete(3);
            writer.checkpoint();
            block_on(writer.log.checkpointed()).expect("memory checkpointed");
            for sequence in 26..=40 {
                writer.append(sequence, 200 + (sequence as usize * 137) % 500);
            }
            writer.delete(17);
            writer.delete(40);
            writer.checkpoint()
        }
        // Gaps in the sequences, several segments, no deletes.
        2 => {
            for sequence in (1..=10).chain(15..=30).chain([34]) {
                writer.append(sequence, 300 + (sequence as usize * 61) % 400);
            }
            writer.checkpoint()
        }
        // Messages spanning blocks, some larger than the write buffer.
        3 => {
            for sequence in 1..=8 {
                writer.append(sequence, 2_500 + (sequence as usize * 1_931) % 7_000);
            }
            writer.delete(4);
            writer.checkpoint()
        }
        // Writes after the checkpoint: more messages (a new segment) and
        // deletes of acknowledged messages, flushed but in no manifest.
        4 => {
            for sequence in 1..=20 {
                writer.append(sequence, 400 + (sequence as usize * 89) % 300);
            }
            writer.delete(5);
            let checkpoint = writer.checkpoint();
            for sequence in 21..=35 {
                writer.append(sequence, 600);
            }
            writer.delete(7);
            writer.delete(12);
            block_on(writer.log.flush()).expect("memory flush");
            checkpoint
        }
        // A compacted segment, a purge, a rewritten deletes log, and the
        // files they replaced still there (no `checkpointed`).
        5 => {
            for sequence in 1..=60 {
                writer.append(sequence, 250 + (sequence as usize * 53) % 150);
            }
            for sequence in 2..=20 {
                writer.delete(sequence);
            }
            block_on(writer.log.compact()).expect("memory compact");
            writer.purge_below(2);
            writer.delete(40);
            writer.delete(41);
            writer.checkpoint()
        }
        _ => unreachable!("{SCENARIOS} scenarios"),
    };
    let files = snapshot(&writer.files);
    for (name, bytes) in &files {
        assert!(
            bytes.len() <= FILE_BYTES_MAX,
            "{name}: {} bytes",
            bytes.len()
        );
    }
    let model = Model {
        probe_sequence_max: writer.log.last_sequence() + 2,
        ..model
    };
    let image = Image {
        config,
        files,
        manifest,
        model,
    };
    // The harness's own check: the undamaged store serves the model.
    let (log, _) = block_on(StreamLog::open(
        load(&image.files),
        image.config.clone(),
        &image.manifest,
    ))
    .expect("the undamaged store opens");
    check_served(&log, &image.model, &Allowed::nothing());
    image
}

fn images() -> &'static [Image] {
    static IMAGES: OnceLock<Vec<Image>> = OnceLock::new();
    IMAGES.get_or_init(|| (0..SCENARIOS).map(write_image).collect())
}

fn snapshot(files: &MemoryFiles) -> FilesImage {
    files
        .names()
        .into_iter()
        .map(|name| {
            let bytes = files.contents(&name);
            (name, bytes)
        })
        .collect()
}

/// Fresh files holding `image` (sizes kept exact, durable).
fn load(image: &FilesImage) -> MemoryFiles {
    let files = MemoryFiles::new();
    for (name, bytes) in image {
        let file = block_on(files.create(name)).expect("memory create");
        if bytes.is_empty() {
            continue;
        }
        let mut padded = bytes.clone();
        padded.resize(bytes.len().div_ceil(BLOCK_BYTES) * BLOCK_BYTES, 0);
        block_on(file.write(0, HeapBuffer(padded))).expect("memory write");
        block_on(file.sync()).expect("memory sync");
        files.truncate(name, bytes.len() as u64);
    }
    files
}

/// `image` with one file damaged as `data` says (see the module documentation).
fn damage(image: &FilesImage, data: &[u8]) -> (FilesImage, String) {
    let mut damaged = image.clone();
    let file = data[1] as usize % damaged.len();
    let name = damaged[file].0.clone();
    let position = u16::from_le_bytes([data[3], data[4]]) as usize;
    let bytes = &mut damaged[file].1;
    match data[2] % 4 {
        0 | 1 => {
            let blocks = bytes.len().div_ceil(BLOCK_BYTES).max(1);
            let start = (position % blocks * BLOCK_BYTES).min(bytes.len());
            let mask = &data[5..data.len().min(5 + BLOCK_BYTES)];
            for (byte, flip) in bytes[start..].iter_mut().zip(mask) {
                *byte ^= flip;
            }
        }
        2 => bytes.truncate(position % (bytes.len() + 1)),
        _ => {
            damaged.remove(file);
        }
    }
    (damaged, name)
}

/// What a pass tolerates beyond serving exactly the model.
struct Allowed {
    /// Reads may report `Corrupt`.
    corrupt_reads: bool,
    /// Sequences a salvage reported lost: they may be missing.
    lost: Vec<RangeInclusive<u64>>,
    /// A salvage reported delete entries lost: deleted messages may be
    /// served again (identical).
    deletes_lost: bool,
}

impl Allowed {
    fn nothing() -> Allowed {
        Allowed {
            corrupt_reads: false,
            lost: Vec::new(),
            deletes_lost: false,
        }
    }
}

/// Whether serving `sequence` is required, and whether its message (if
/// any is known) may be served.
fn expectation<'a>(
    model: &'a Model,
    allowed: &Allowed,
    sequence: u64,
) -> (bool, Option<&'a StoredMessage>) {
    let Some(message) = model.messages.get(&sequence) else {
        return (false, None);
    };
    if model.deleted.contains(&sequence) {
        return (false, allowed.deletes_lost.then_some(message));
    }
    let lost = allowed.lost.iter().any(|range| range.contains(&sequence));
    (!lost, Some(message))
}

fn corrupt_allowed(allowed: &Allowed, error: StoreError, what: &str) {
    match error {
        StoreError::Corrupt { .. } if allowed.corrupt_reads => {}
        other => panic!("{what}: {other}"),
    }
}

/// Reads every sequence `model` knows of (and a few past them) and replays
/// the log: only what `model` and `allowed` permit is served. Returns
/// whether every read succeeded.
fn check_served(log: &StreamLog<MemoryFiles>, model: &Model, allowed: &Allowed) -> bool {
    let mut served = 0;
    let mut clean = true;
    for sequence in 1..=model.probe_sequence_max {
        let (required, permitted) = expectation(model, allowed, sequence);
        match block_on(log.get(sequence)) {
            Ok(Some(message)) => {
                assert_eq!(
                    Some(&message),
                    permitted,
                    "sequence {sequence} served, but not as acknowledged"
                );
                served += 1;
            }
            Ok(None) => assert!(!required, "acknowledged sequence {sequence} is missing"),
            Err(error) => {
                corrupt_allowed(allowed, error, &format!("reading sequence {sequence}"));
                clean = false;
            }
        }
    }
    let mut replayed = Vec::new();
    match block_on(log.replay(0, |view| replayed.push(view.to_message()))) {
        Ok(_) => {
            let mut previous = 0;
            for message in &replayed {
                assert!(message.sequence > previous, "replay in order, each once");
                previous = message.sequence;
                let (_, permitted) = expectation(model, allowed, message.sequence);
                assert_eq!(Some(message), permitted, "replayed as acknowledged");
            }
            let replayed: BTreeSet<u64> = replayed.iter().map(|message| message.sequence).collect();
            for sequence in 1..=model.probe_sequence_max {
                if expectation(model, allowed, sequence).0 {
                    assert!(replayed.contains(&sequence), "replay skipped {sequence}");
                }
            }
        }
        Err(error) => {
            corrupt_allowed(allowed, error, "replaying");
            clean = false;
        }
    }
    if clean {
        assert_eq!(log.state().messages, served, "state counts what is served");
    }
    assert_eq!(log.state().last_sequence, model.last_sequence);
    clean
}

/// After a successful open: one more message and one more delete (its
/// partial blocks are rewritten over whatever damage lay past the
/// checkpoint's extent), a sync, and a reopen from that manifest that must
/// serve exactly the new state.
fn continue_writing(
    mut log: StreamLog<MemoryFiles>,
    files: &MemoryFiles,
    config: &StreamConfig,
    model: &Model,
) {
    let mut next = model.clone();
    let sequence = model.last_sequence + 1;
    let message = message(CONTINUATION_SCENARIO, sequence, 700);
    block_on(append(&mut log, &message)).expect("append after open");
    next.messages.insert(sequence, message);
    next.probe_sequence_max = next.probe_sequence_max.max(sequence + 1);
    next.last_sequence = sequence;
    if let Some(&first) = model.live().next().map(|(sequence, _)| sequence) {
        assert!(log.delete(first), "{first} is live");
        next.deleted.insert(first);
    }
    let manifest = block_on(log.sync()).expect("sync after open");
    drop(log);
    let (reopened, _) = block_on(StreamLog::open(files.clone(), config.clone(), &manifest))
        .unwrap_or_else(|error| panic!("the store's own checkpoint does not reopen: {error}"));
    check_served(&reopened, &next, &Allowed::nothing());
}

/// The repair path over the damaged files; `opened` is whether the plain
/// open succeeded.
fn check_salvage(image: &Image, damaged: &FilesImage, damaged_file: &str, opened: bool) {
    let files = load(damaged);
    let salvaged = block_on(salvage(&files, &image.config, &image.manifest))
        .unwrap_or_else(|error| panic!("damage to one file is salvageable, got: {error}"));
    assert_eq!(
        salvaged.losses.is_empty(),
        opened,
        "salvage loses something exactly when open refuses: {:?}",
        salvaged.losses
    );
    let mut allowed = Allowed::nothing();
    for loss in &salvaged.losses {
        match loss {
            Loss::Messages {
                file,
                first_sequence,
                last_sequence,
                ..
            } => {
                assert_eq!(file, damaged_file, "salvage gives up only the damaged file");
                allowed.lost.push(*first_sequence..=*last_sequence);
            }
            Loss::Deletes { file, .. } => {
                assert_eq!(file, damaged_file, "salvage gives up only the damaged file");
                allowed.deletes_lost = true;
            }
        }
    }
    let (log, _) = block_on(StreamLog::open(
        files,
        image.config.clone(),
        &salvaged.manifest,
    ))
    .unwrap_or_else(|error| panic!("the salvaged manifest does not open: {error}"));
    check_served(&log, &image.model, &allowed);
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 5 {
        return;
    }
    let image = &images()[data[0] as usize % SCENARIOS];
    let (damaged, damaged_file) = damage(&image.files, data);
    let files = load(&damaged);
    let verified = block_on(StreamLog::verify(
        files.clone(),
        image.config.clone(),
        &image.manifest,
    ));
    assert_eq!(snapshot(&files), damaged, "verify changes nothing");
    let opened = match block_on(StreamLog::open(
        files.clone(),
        image.config.clone(),
        &image.manifest,
    )) {
        Ok((log, _)) => {
            assert!(
                verified.is_ok(),
                "verify refused what open accepts: {verified:?}"
            );
            let allowed = Allowed {
                corrupt_reads: true,
                ..Allowed::nothing()
            };
            if check_served(&log, &image.model, &allowed) {
                continue_writing(log, &files, &image.config, &image.model);
            }
            true
        }
        Err(error @ StoreError::Corrupt { .. }) => {
            assert_eq!(verified.err(), Some(error), "verify and open agree");
            assert_eq!(snapshot(&files), damaged, "a refused open changed nothing");
            false
        }
        Err(other) => panic!("damage to one file must be reported as Corrupt, got: {other}"),
    };
    check_salvage(image, &damaged, &damaged_file, opened);
});
