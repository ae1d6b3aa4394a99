//! `journal-writer`: appends to a journal and prints each durable ack, for the
//! crash test that SIGKILLs it at random moments (`tests/crash.rs`).
//!
//! ```text
//! journal-writer (--dir DIR | --block-device PATH) --segment-bytes B [--segments N]
//!                [--writers W] [--verify]
//! ```
//!
//! Output lines (stdout, flushed per line):
//! - `recovered <records> <first> <last>` after recovery;
//! - `ack <sequence> <group> <index> <body-checksum>` once a record is durable;
//! - `checkpoint <group> <index>` before the writer checkpoints a group;
//! - `record <sequence> <group> <index> <body-checksum>` for every record
//!   replayed (with `--verify`, which then exits).
//!
//! Exits 2 if recovery fails (corruption is never papered over).

use std::cell::{Cell, RefCell};
use std::io::Write;
use std::path::PathBuf;
use std::rc::Rc;

use tern_storage::dma::{DmaDevice, SyncMethod};
use tern_storage::format::checksum;
use tern_storage::journal_device::{Contents, DeviceHeader, JournalDevice};
use tern_storage::{Journal, JournalConfig, NewRecord, SyncPolicy};

const GROUPS: u64 = 4;
const JOURNAL_ID: u64 = 0x7e57;
/// Records a group keeps un-checkpointed (so segments get recycled).
const CHECKPOINT_LAG: u64 = 300;

struct Options {
    directory: Option<PathBuf>,
    block_device: Option<PathBuf>,
    segments: u32,
    segment_bytes: u64,
    writers: u64,
    verify: bool,
}

fn options() -> Options {
    let mut options = Options {
        directory: None,
        block_device: None,
        segments: 6,
        segment_bytes: 1 << 20,
        writers: 8,
        verify: false,
    };
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut index = 0;
    while index < args.len() {
        let value = || args.get(index + 1).cloned().unwrap_or_default();
        match args[index].as_str() {
            "--dir" => options.directory = Some(value().into()),
            "--block-device" => options.block_device = Some(value().into()),
            "--segments" => options.segments = value().parse().expect("--segments N"),
            "--segment-bytes" => {
                options.segment_bytes = value().parse().expect("--segment-bytes B")
            }
            "--writers" => options.writers = value().parse().expect("--writers W"),
            "--verify" => {
                options.verify = true;
                index += 1;
                continue;
            }
            other => panic!("unknown argument {other}"),
        }
        index += 2;
    }
    options
}

fn say(line: String) {
    let mut stdout = std::io::stdout().lock();
    let _ = stdout.write_all(line.as_bytes());
    let _ = stdout.write_all(b"\n");
    let _ = stdout.flush();
}

fn body(sequence_hint: u64, group: u64, index: u64, nonce: u64) -> Vec<u8> {
    let length = ((index * 7919 + group * 104_729 + nonce) % 1500) as usize + 1;
    let mut state = sequence_hint ^ (group << 48) ^ (index << 8) ^ nonce;
    (0..length)
        .map(|_| {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (state >> 56) as u8
        })
        .collect()
}

/// Formats an empty device for one shard (the server's way, see
/// `tern_storage::journal_device`) or checks the header it has; returns
/// the open device and where shard 0's region starts.
fn prepare_device(
    path: &std::path::Path,
    options: &Options,
) -> Result<(JournalDevice, u64), String> {
    let device = JournalDevice::open(path).map_err(|error| error.to_string())?;
    let wanted = DeviceHeader {
        device_bytes: device.facts().bytes,
        device_id: 0x7e57_d00d,
        segments: options.segments,
        segment_bytes: options.segment_bytes,
        server_name: "journal-writer".into(),
        journal_ids: vec![JOURNAL_ID],
    };
    match device.contents().map_err(|error| error.to_string())? {
        Contents::Empty => device.format(&wanted).map_err(|error| error.to_string())?,
        Contents::Tern { header, .. } => {
            if header.journal_ids != wanted.journal_ids
                || header.segments != wanted.segments
                || header.segment_bytes != wanted.segment_bytes
            {
                return Err(format!(
                    "{}: another journal's header: {header:?}",
                    path.display()
                ));
            }
        }
    }
    let base = wanted.region_offset(0);
    Ok((device, base))
}

fn main() {
    let options = options();
    let executor = glommio::LocalExecutorBuilder::default()
        .io_memory(4 << 20)
        .make()
        .expect("executor");
    let code = executor.run(async move {
        let method = SyncMethod::for_policy(SyncPolicy::Always);
        let device = match (&options.directory, &options.block_device) {
            (Some(directory), None) => {
                DmaDevice::open_directory(
                    directory,
                    options.segments,
                    options.segment_bytes,
                    method,
                )
                .await
            }
            (None, Some(path)) => match prepare_device(path, &options) {
                Ok((guard, base)) => {
                    let opened = DmaDevice::open_region(
                        path,
                        base,
                        options.segments,
                        options.segment_bytes,
                        method,
                        format!("{} (shard 0)", path.display()),
                    )
                    .await;
                    // Held (O_EXCL) while the writer runs.
                    std::mem::forget(guard);
                    opened
                }
                Err(error) => {
                    say(format!("error {error}"));
                    return 2;
                }
            },
            _ => panic!("give exactly one of --dir and --block-device"),
        };
        let device = match device {
            Ok(device) => device,
            Err(error) => {
                say(format!("error {error}"));
                return 2;
            }
        };
        let config = JournalConfig {
            shard: 0,
            batch_bytes_max: 256 * 1024,
            sync: SyncPolicy::Always,
            journal_id: JOURNAL_ID,
            formatted_before: false,
        };
        let verify = options.verify;
        let highest: Rc<RefCell<[u64; GROUPS as usize]>> =
            Rc::new(RefCell::new([0; GROUPS as usize]));
        let opened = {
            let highest = highest.clone();
            Journal::open(device, config, move |view| {
                let group = view.header.group as usize;
                let mut highest = highest.borrow_mut();
                highest[group] = highest[group].max(view.header.index);
                if verify {
                    say(format!(
                        "record {} {} {} {:08x}",
                        view.header.sequence,
                        view.header.group,
                        view.header.index,
                        checksum(view.body)
                    ));
                }
            })
            .await
        };
        let (journal, report) = match opened {
            Ok(opened) => opened,
            Err(error) => {
                say(format!("error {error}"));
                return 2;
            }
        };
        say(format!(
            "recovered {} {} {}",
            report.records, report.first_sequence, report.last_sequence
        ));
        if verify {
            return 0;
        }
        let journal = Rc::new(journal);
        // Everything replayed is already durable; a new run continues each group.
        let next_index: Rc<[Cell<u64>; GROUPS as usize]> = Rc::new(std::array::from_fn(|group| {
            Cell::new(highest.borrow()[group])
        }));
        // What a block store would report after a restart: everything up to
        // some way behind the recovered head is stored elsewhere.
        let checkpointed: Rc<[Cell<u64>; GROUPS as usize]> =
            Rc::new(std::array::from_fn(|_| Cell::new(0)));
        for group in 0..GROUPS {
            let upto = highest.borrow()[group as usize].saturating_sub(CHECKPOINT_LAG);
            if upto > 0 {
                say(format!("checkpoint {group} {upto}"));
                checkpointed[group as usize].set(upto);
                journal.checkpoint(group, upto);
            }
        }
        let nonce = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64;
        glommio::spawn_local({
            let journal = journal.clone();
            async move { journal.run().await }
        })
        .detach();
        let mut writers = Vec::new();
        for writer in 0..options.writers {
            let (journal, next_index, checkpointed) =
                (journal.clone(), next_index.clone(), checkpointed.clone());
            writers.push(glommio::spawn_local(async move {
                let group = writer % GROUPS;
                loop {
                    let cell = &next_index[group as usize];
                    let index = cell.get() + 1;
                    cell.set(index);
                    let body = body(writer, group, index, nonce);
                    let sequence = match journal
                        .append(NewRecord {
                            kind: 1,
                            group,
                            term: 1,
                            index,
                            body: &body,
                        })
                        .await
                    {
                        Ok(sequence) => sequence,
                        Err(_) => return,
                    };
                    if journal.wait_durable(sequence).await.is_err() {
                        return;
                    }
                    say(format!(
                        "ack {sequence} {group} {index} {:08x}",
                        checksum(&body)
                    ));
                    let done = &checkpointed[group as usize];
                    if index > done.get() + 2 * CHECKPOINT_LAG {
                        let upto = index - CHECKPOINT_LAG;
                        say(format!("checkpoint {group} {upto}"));
                        done.set(upto);
                        journal.checkpoint(group, upto);
                    }
                }
            }));
        }
        for writer in writers {
            writer.await;
        }
        1
    });
    std::process::exit(code);
}
