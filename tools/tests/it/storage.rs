//! `tern storage check` and `tern storage repair` through the real `tern`
//! binary, on stores the real `tern-server` wrote: for each kind of damage
//! the check exits 1 naming the file and what the repair discards; the
//! repair without `--yes` changes nothing; with it the server starts, the
//! stream is online, every acknowledged message the report did not list
//! is served identical and the listed ones are gone. A healthy store
//! checks with exit 0.
//!
//! Nothing sleeps to synchronise: waits are bounded polls.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime};

use async_nats::jetstream::{self, consumer::pull, stream::RawMessageErrorKind};
use serde_json::Value;
use tern_storage::format::{checksum, BatchHeader, RecordHeader, SegmentHeader, BLOCK_BYTES};

/// Bound on the server's start and on any wait for a condition.
const TIMEOUT: Duration = Duration::from_secs(20);
const STREAM: &str = "ORDERS";
const MESSAGES: u64 = 30;
/// Shards of the test servers (`--cores 0-1`).
const SHARDS: usize = 2;
/// A small journal: every test server formats its own, zero-filled.
const CONFIG: &str = "[jetstream]\njournal_segment_size = 4194304\njournal_segments = 2\n";

// ----- the server --------------------------------------------------------------

struct Server {
    child: Child,
    port: u16,
    /// stderr lines, for failure messages.
    log: mpsc::Receiver<String>,
}

/// A store directory with the server's config beside it.
struct Store {
    dir: tempfile::TempDir,
}

impl Store {
    fn new() -> Store {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::write(dir.path().join("tern.toml"), CONFIG).expect("write tern.toml");
        Store { dir }
    }

    /// A store whose journals are on the raw device `device`.
    fn on_device(device: &Path) -> Store {
        let dir = tempfile::tempdir().expect("temp dir");
        let config = format!("{CONFIG}journal_device = \"{}\"\n", device.display());
        std::fs::write(dir.path().join("tern.toml"), config).expect("write tern.toml");
        Store { dir }
    }

    fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    fn config(&self) -> PathBuf {
        self.dir.path().join("tern.toml")
    }

    fn stream_dir(&self) -> PathBuf {
        self.data().join("jetstream/streams").join(STREAM)
    }

    fn start(&self) -> Server {
        let program = tern_bench::server::tern_server_path().unwrap_or_else(|error| {
            panic!("{error} (run `cargo build -p tern-broker` or `cargo test --workspace`)")
        });
        let mut child = Command::new(program)
            .args([
                "-a",
                "127.0.0.1",
                "-p",
                "-1",
                "-m",
                "0",
                "--cores",
                "0-1",
                "--unpinned",
                "-c",
            ])
            .arg(self.config())
            .arg("--store_dir")
            .arg(self.data())
            .arg("--jetstream")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start tern-server");
        let stderr = child.stderr.take().expect("piped stderr");
        let (lines, log) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                if lines.send(line).is_err() {
                    break;
                }
            }
        });
        let deadline = Instant::now() + TIMEOUT;
        let mut seen = Vec::new();
        loop {
            let remaining = deadline.saturating_duration_since(Instant::now());
            match log.recv_timeout(remaining) {
                Ok(line) => {
                    let marker = "Listening for client connections on ";
                    if let Some(at) = line.find(marker) {
                        let port = line[at + marker.len()..]
                            .rsplit(':')
                            .next()
                            .and_then(|port| port.trim().parse().ok())
                            .expect("a port");
                        return Server { child, port, log };
                    }
                    seen.push(line);
                }
                Err(_) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    panic!("tern-server did not start; stderr:\n{}", seen.join("\n"));
                }
            }
        }
    }
}

impl Server {
    fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// SIGTERM (a clean stop, which checkpoints) and a bounded wait.
    fn stop(mut self) {
        // SAFETY: kill(2) on the pid of a child this test owns.
        unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM) };
        let deadline = Instant::now() + TIMEOUT;
        while !matches!(self.child.try_wait(), Ok(Some(_))) {
            assert!(Instant::now() < deadline, "tern-server ignored SIGTERM");
            // Poll interval of a bounded wait for the process to exit.
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    fn log_tail(&self) -> String {
        self.log.try_iter().collect::<Vec<_>>().join("\n")
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

// ----- the workload --------------------------------------------------------------

/// Message `index`: `bytes` long, different for every index.
fn payload(index: u64, bytes: usize) -> Vec<u8> {
    let mut out = format!("{STREAM}/{index}|").into_bytes();
    let mut state = index.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    while out.len() < bytes {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        out.push(b'a' + (state >> 59) as u8 % 26);
    }
    out
}

/// Acked messages: sequence -> (subject, payload).
type Acked = BTreeMap<u64, (String, Vec<u8>)>;

/// Creates the stream, publishes `MESSAGES` acked messages of
/// `payload_bytes`, and a durable pull consumer if `durable`.
async fn workload(server: &Server, payload_bytes: usize, durable: bool) -> Acked {
    let client = async_nats::connect(server.url()).await.expect("connect");
    let js = jetstream::new(client.clone());
    let stream = js
        .create_stream(jetstream::stream::Config {
            name: STREAM.to_string(),
            subjects: vec!["orders.>".to_string()],
            storage: jetstream::stream::StorageType::File,
            ..Default::default()
        })
        .await
        .expect("create stream");
    let mut acked = Acked::new();
    for index in 1..=MESSAGES {
        let subject = format!("orders.{}", index % 3);
        let body = payload(index, payload_bytes);
        let ack = js
            .publish(subject.clone(), body.clone().into())
            .await
            .expect("publish")
            .await
            .expect("PubAck");
        acked.insert(ack.sequence, (subject, body));
    }
    if durable {
        stream
            .create_consumer(pull::Config {
                durable_name: Some("D".to_string()),
                ..Default::default()
            })
            .await
            .expect("create durable");
    }
    client.flush().await.expect("flush");
    acked
}

/// The stream's `raft` file, if it decodes.
fn raft(store: &Store) -> Option<tern_broker::jetstream::persist::RaftState> {
    let bytes = std::fs::read(store.stream_dir().join("raft")).ok()?;
    tern_broker::jetstream::persist::decode_raft(&bytes).ok()
}

/// Waits (bounded) until a checkpoint covers every acked message.
async fn wait_checkpoint(store: &Store, last: u64) {
    let deadline = Instant::now() + TIMEOUT;
    while raft(store).is_none_or(|raft| raft.manifest.last_sequence < last) {
        assert!(Instant::now() < deadline, "no checkpoint covered {last}");
        // Poll interval of a bounded wait for the periodic checkpoint.
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

// ----- the CLI ----------------------------------------------------------------

fn tern(store: &Store, args: &[&str]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_tern"));
    command.arg("storage").arg(args[0]).arg(store.data());
    command.arg("-c").arg(store.config()).args(&args[1..]);
    command.output().expect("run tern")
}

fn text(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// Every file and directory under `root` with its size, mtime and checksum.
fn snapshot(root: &Path) -> BTreeMap<PathBuf, (u64, SystemTime, u32)> {
    let mut entries = BTreeMap::new();
    let mut pending = vec![root.to_path_buf()];
    while let Some(directory) = pending.pop() {
        let meta = std::fs::metadata(&directory).expect("stat");
        entries.insert(directory.clone(), (0, meta.modified().expect("mtime"), 0));
        for entry in std::fs::read_dir(&directory).expect("read dir") {
            let path = entry.expect("entry").path();
            let meta = std::fs::symlink_metadata(&path).expect("stat");
            if meta.is_dir() {
                pending.push(path);
            } else {
                let bytes = std::fs::read(&path).expect("read");
                let modified = meta.modified().expect("mtime");
                entries.insert(path, (meta.len(), modified, checksum(&bytes)));
            }
        }
    }
    entries
}

/// The message sequences of `STREAM` the check's JSON report lists as
/// discarded, and every finding's file.
fn listed(report: &Value) -> (BTreeSet<u64>, Vec<String>) {
    let mut sequences = BTreeSet::new();
    let mut files = Vec::new();
    for finding in report["findings"].as_array().expect("findings") {
        if finding["severity"] != "damage" {
            continue;
        }
        files.push(finding["file"].as_str().expect("file").to_string());
        for discard in finding["discards"].as_array().into_iter().flatten() {
            if discard["kind"] == "messages" && discard["stream"] == STREAM {
                let first = discard["first_sequence"].as_u64().expect("first");
                let last = discard["last_sequence"].as_u64().expect("last");
                sequences.extend(first..=last);
            }
        }
    }
    (sequences, files)
}

/// The whole contract for one damaged store: check names `file` and exits
/// 1; the repair plans without changing anything, then repairs; the
/// server serves every acked message not listed, identical, and none of
/// the listed ones. Returns the listed sequences and the report.
async fn check_repair_serve(
    store: &Store,
    acked: &Acked,
    file: &str,
    target: &[&str],
) -> (BTreeSet<u64>, Value) {
    check_repair_serve_on(store, None, acked, file, target).await
}

/// [`check_repair_serve`] with the journal on `device` (which the plan
/// must not change either).
async fn check_repair_serve_on(
    store: &Store,
    device: Option<&Path>,
    acked: &Acked,
    file: &str,
    target: &[&str],
) -> (BTreeSet<u64>, Value) {
    let device_sum =
        || device.map(|device| checksum(&std::fs::read(device).expect("read the device")));
    let (report, sequences) = tokio::task::block_in_place(|| {
        let human = tern(store, &["check"]);
        assert_eq!(human.status.code(), Some(1), "check: {}", text(&human));
        let line = String::from_utf8_lossy(&human.stdout)
            .lines()
            .find(|line| line.starts_with("damage: ") && line.contains(file))
            .map(str::to_string)
            .unwrap_or_else(|| panic!("no damage line names {file}: {}", text(&human)));
        assert!(line.contains("repair discards"), "{line}");
        let json = tern(store, &["check", "--json"]);
        assert_eq!(json.status.code(), Some(1), "{}", text(&json));
        let report: Value = serde_json::from_slice(&json.stdout).expect("JSON report");
        let (sequences, files) = listed(&report);
        assert!(files.iter().any(|found| found.contains(file)), "{files:?}");

        let before = (snapshot(&store.data()), device_sum());
        let mut plan_args = vec!["repair"];
        plan_args.extend_from_slice(target);
        let plan = tern(store, &plan_args);
        assert_eq!(plan.status.code(), Some(1), "plan: {}", text(&plan));
        assert!(
            text(&plan).contains("nothing changed; rerun with --yes to apply"),
            "{}",
            text(&plan)
        );
        assert_eq!(
            (snapshot(&store.data()), device_sum()),
            before,
            "the plan changed files"
        );
        plan_args.push("--yes");
        let applied = tern(store, &plan_args);
        assert_eq!(applied.status.code(), Some(0), "repair: {}", text(&applied));
        let again = tern(store, &["check"]);
        assert_eq!(
            again.status.code(),
            Some(0),
            "after repair: {}",
            text(&again)
        );
        (report, sequences)
    });
    let server = tokio::task::block_in_place(|| store.start());
    let client = async_nats::connect(server.url()).await.expect("connect");
    let js = jetstream::new(client);
    let stream = js
        .get_stream(STREAM)
        .await
        .unwrap_or_else(|error| panic!("{STREAM} is not online: {error}; {}", server.log_tail()));
    for (&sequence, (subject, body)) in acked {
        let served = stream.get_raw_message(sequence).await;
        if sequences.contains(&sequence) {
            match served {
                Err(error) if error.kind() == RawMessageErrorKind::NoMessageFound => {}
                other => panic!(
                    "listed sequence {sequence} is still served: {:?}",
                    other.map(|m| m.sequence)
                ),
            }
        } else {
            let message = served.unwrap_or_else(|error| {
                panic!("sequence {sequence} was not listed but is not served: {error}")
            });
            assert_eq!(message.subject.as_str(), subject, "sequence {sequence}");
            assert_eq!(&message.payload[..], &body[..], "sequence {sequence}");
        }
    }
    tokio::task::block_in_place(|| server.stop());
    (sequences, report)
}

// ----- the cases ---------------------------------------------------------------

/// The stream's only block store segment.
fn block_segment(store: &Store) -> PathBuf {
    store
        .stream_dir()
        .join("messages")
        .join("00000000000000000001.blk")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flipped_bit_in_a_block_store_record() {
    let store = Store::new();
    let server = tokio::task::block_in_place(|| store.start());
    let acked = workload(&server, 1500, false).await;
    wait_checkpoint(&store, MESSAGES).await;
    tokio::task::block_in_place(|| server.kill());
    // A bit in the payload of the record in the middle of the segment.
    let path = block_segment(&store);
    let mut bytes = std::fs::read(&path).expect("read segment");
    let mut offsets = Vec::new();
    let mut at = 0;
    while at + 40 <= bytes.len() {
        let size = u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
        if size < 40 {
            break;
        }
        offsets.push(at);
        at += size;
    }
    let middle = offsets[offsets.len() / 2];
    bytes[middle + 500] ^= 0x10;
    std::fs::write(&path, &bytes).expect("write segment");
    let (lost, _) = check_repair_serve(
        &store,
        &acked,
        "jetstream/streams/ORDERS/messages/00000000000000000001.blk",
        &["--stream", STREAM],
    )
    .await;
    // The damaged record and the rest of its segment.
    let first = offsets.len() as u64 / 2 + 1;
    assert_eq!(lost, (first..=MESSAGES).collect(), "listed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_block_store_segment() {
    let store = Store::new();
    let server = tokio::task::block_in_place(|| store.start());
    let acked = workload(&server, 1500, false).await;
    tokio::task::block_in_place(|| server.stop());
    std::fs::remove_file(block_segment(&store)).expect("delete segment");
    let (lost, _) = check_repair_serve(
        &store,
        &acked,
        "jetstream/streams/ORDERS/messages/00000000000000000001.blk",
        &["--stream", STREAM],
    )
    .await;
    assert_eq!(lost, (1..=MESSAGES).collect(), "everything it held");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_consumers_file() {
    let store = Store::new();
    let server = tokio::task::block_in_place(|| store.start());
    let acked = workload(&server, 1500, true).await;
    tokio::task::block_in_place(|| server.stop());
    let consumers = store.stream_dir().join("consumers");
    std::fs::remove_file(&consumers).expect("the clean stop wrote a consumers file");
    let (lost, report) = check_repair_serve(
        &store,
        &acked,
        "jetstream/streams/ORDERS/consumers",
        &["--stream", STREAM],
    )
    .await;
    assert!(lost.is_empty(), "no message is lost: {lost:?}");
    let consumers_lost = report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|finding| finding["discards"].as_array().into_iter().flatten())
        .any(|discard| discard["kind"] == "consumers" && discard["stream"] == STREAM);
    assert!(consumers_lost, "{report:#}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_raft_file() {
    let store = Store::new();
    let server = tokio::task::block_in_place(|| store.start());
    let acked = workload(&server, 1500, false).await;
    tokio::task::block_in_place(|| server.stop());
    std::fs::remove_file(store.stream_dir().join("raft")).expect("delete raft");
    let (lost, _) = check_repair_serve(
        &store,
        &acked,
        "jetstream/streams/ORDERS/raft",
        &["--stream", STREAM],
    )
    .await;
    assert!(lost.is_empty(), "rebuilt from the block store: {lost:?}");
}

/// The stream's Raft group, from its stored `config` (a 32-byte header
/// whose bytes 12..16 are the JSON's length, then the JSON).
fn stream_group(store: &Store) -> u64 {
    let config = std::fs::read(store.stream_dir().join("config")).expect("config");
    let json_bytes = u32::from_le_bytes(config[12..16].try_into().unwrap()) as usize;
    let stored: Value = serde_json::from_slice(&config[32..32 + json_bytes]).expect("config JSON");
    stored["group"].as_u64().expect("group")
}

/// The batches of one segment image (of `generation`) holding message
/// records of `group`: (offset, batch bytes).
fn group_batches(bytes: &[u8], generation: u64, group: u64) -> Vec<(usize, usize)> {
    let mut batches = Vec::new();
    let mut offset = BLOCK_BYTES;
    while let Some(batch) = BatchHeader::decode(&bytes[offset..])
        .filter(|batch| batch.generation == generation && batch.offset == offset as u64)
    {
        let end = offset + 64 + batch.records_bytes as usize;
        let mut at = offset + 64;
        let mut ours = false;
        while at < end {
            let Some((view, used)) = RecordHeader::decode(&bytes[at..end]) else {
                break;
            };
            ours |= view.header.group == group && view.header.kind == 1;
            at += used;
        }
        if ours {
            batches.push((offset, batch.batch_bytes as usize));
        }
        offset += batch.batch_bytes as usize;
    }
    batches
}

/// The batches of the stream's journal that hold its message records:
/// (segment file, batch offset, batch bytes), in log order.
fn message_batches(store: &Store, group: u64) -> Vec<(PathBuf, usize, usize)> {
    let shard = tern_broker::jetstream::owner_of(STREAM, SHARDS);
    let directory = store
        .data()
        .join("jetstream/journal")
        .join(format!("shard-{shard}"));
    let mut segments = Vec::new();
    for entry in std::fs::read_dir(&directory).expect("journal directory") {
        let path = entry.expect("entry").path();
        let bytes = std::fs::read(&path).expect("segment");
        if let Some(header) = SegmentHeader::decode(&bytes[..BLOCK_BYTES]) {
            segments.push((header.generation, path, bytes));
        }
    }
    segments.sort_by_key(|(generation, _, _)| *generation);
    let mut batches = Vec::new();
    for (generation, path, bytes) in segments {
        for (offset, batch_bytes) in group_batches(&bytes, generation, group) {
            batches.push((path.clone(), offset, batch_bytes));
        }
    }
    batches
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_zeroed_blocks_in_a_middle_journal_batch() {
    let store = Store::new();
    let server = tokio::task::block_in_place(|| store.start());
    // Records of ~5 KB: each batch is two data blocks and a parity block.
    let acked = workload(&server, 5000, false).await;
    tokio::task::block_in_place(|| server.kill());
    let group = stream_group(&store);
    let batches = message_batches(&store, group);
    assert!(batches.len() >= 10, "{} batches", batches.len());
    let (path, offset, batch_bytes) = batches[batches.len() / 2].clone();
    assert!(batch_bytes >= 3 * BLOCK_BYTES, "two data blocks and parity");
    let mut bytes = std::fs::read(&path).expect("segment");
    bytes[offset..offset + 2 * BLOCK_BYTES].fill(0);
    std::fs::write(&path, &bytes).expect("write segment");
    let shard = tern_broker::jetstream::owner_of(STREAM, SHARDS).to_string();
    let file = format!(
        "jetstream/journal/shard-{shard}/{}",
        path.file_name().unwrap().to_string_lossy()
    );
    let (lost, _) = check_repair_serve(&store, &acked, &file, &["--journal", &shard]).await;
    // The damaged batch's message and every later one (nothing was
    // checkpointed past it, or the report would not list them).
    let last = *lost.iter().next_back().expect("messages are listed");
    assert_eq!(last, MESSAGES, "{lost:?}");
    let first = *lost.iter().next().unwrap();
    assert_eq!(
        lost,
        (first..=MESSAGES).collect(),
        "one run from the damage on"
    );
    assert!(first > 1, "messages before the damage are kept: {lost:?}");
}

/// The same damage with the journal on a raw device (a loop device): the
/// check reads the device's header and the shard's region without writing
/// (the plan changes no byte of it), names the segment of the region, and
/// the repair cuts there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_zeroed_blocks_in_a_raw_journal_batch() {
    const HEADER_AREA_BYTES: u64 = 1 << 20;
    const SEGMENT_BYTES: u64 = 4 << 20;
    const SEGMENTS: u64 = 2;
    let backing = tempfile::tempdir().expect("temp dir");
    let device = tern_it::loop_device::LoopDevice::attach(
        &backing.path().join("journal.img"),
        HEADER_AREA_BYTES + SHARDS as u64 * SEGMENTS * SEGMENT_BYTES,
        true,
    );
    let store = Store::on_device(&device.path);
    let server = tokio::task::block_in_place(|| store.start());
    let acked = workload(&server, 5000, false).await;
    tokio::task::block_in_place(|| server.kill());
    let group = stream_group(&store);
    let shard = tern_broker::jetstream::owner_of(STREAM, SHARDS);
    let region = HEADER_AREA_BYTES + shard as u64 * SEGMENTS * SEGMENT_BYTES;
    let mut segments = Vec::new();
    for segment in 0..SEGMENTS {
        let start = region + segment * SEGMENT_BYTES;
        let bytes = device.read(start, SEGMENT_BYTES as usize);
        if let Some(header) = SegmentHeader::decode(&bytes[..BLOCK_BYTES]) {
            segments.push((header.generation, segment, start, bytes));
        }
    }
    segments.sort_by_key(|(generation, ..)| *generation);
    let batches: Vec<(u64, u64, usize)> = segments
        .iter()
        .flat_map(|(generation, segment, start, bytes)| {
            group_batches(bytes, *generation, group)
                .into_iter()
                .map(move |(offset, batch_bytes)| (*segment, start + offset as u64, batch_bytes))
        })
        .collect();
    assert!(batches.len() >= 10, "{} batches", batches.len());
    let (segment, at, batch_bytes) = batches[batches.len() / 2];
    assert!(batch_bytes >= 3 * BLOCK_BYTES, "two data blocks and parity");
    device.write(at, &vec![0u8; 2 * BLOCK_BYTES]);
    let file = format!("segment {segment} of {}", device.path.display());
    let (lost, _) = check_repair_serve_on(
        &store,
        Some(&device.path),
        &acked,
        &file,
        &["--journal", &shard.to_string()],
    )
    .await;
    let first = *lost.iter().next().expect("messages are listed");
    assert_eq!(
        lost,
        (first..=MESSAGES).collect(),
        "one run from the damage on"
    );
    assert!(first > 1, "messages before the damage are kept: {lost:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_healthy_store_checks_clean_and_usage_errors_exit_2() {
    let store = Store::new();
    let server = tokio::task::block_in_place(|| store.start());
    workload(&server, 100, true).await;
    tokio::task::block_in_place(|| {
        server.stop();
        let before = snapshot(&store.data());
        let output = tern(&store, &["check"]);
        assert_eq!(output.status.code(), Some(0), "{}", text(&output));
        assert!(text(&output).contains("no damage"), "{}", text(&output));
        assert_eq!(snapshot(&store.data()), before, "check changed files");
        let nothing = tern(&store, &["repair", "--stream", STREAM]);
        assert_eq!(nothing.status.code(), Some(0), "{}", text(&nothing));
        assert!(
            text(&nothing).contains("nothing to repair"),
            "{}",
            text(&nothing)
        );
        let no_target = tern(&store, &["repair"]);
        assert_eq!(no_target.status.code(), Some(2), "{}", text(&no_target));
        let unknown = tern(&store, &["repair", "--stream", "NOPE"]);
        assert_eq!(unknown.status.code(), Some(2), "{}", text(&unknown));
        let bad_config = Command::new(env!("CARGO_BIN_EXE_tern"))
            .args(["storage", "check"])
            .arg(store.data())
            .args(["-c", "/nonexistent/tern.toml"])
            .output()
            .expect("run tern");
        assert_eq!(bad_config.status.code(), Some(2), "{}", text(&bad_config));
    });
}
