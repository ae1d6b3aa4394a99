//! `tern nvme plan|carve [CONTROLLER]`: carve an NVMe drive into a journal
//! namespace and a block-store namespace (tern-tuning's `nvme` planner),
//! through nvme-cli.
//!
//! `plan` reads the controller (`id-ctrl`, `list-ns`, `id-ns` as JSON),
//! finds each namespace's block device through sysfs (by NSID: kernel
//! names shift when namespaces come and go) and what it holds (mounted; a
//! tern journal header; another format's signature; any other data in its
//! first 128 KiB; a detached namespace cannot be read), and prints the
//! plan: the nvme-cli commands that carve it, or "nothing to do".
//! `carve --dry-run` prints the same; `carve --yes` runs them, then waits
//! for both block devices and checks their size and 4096-byte blocks.
//! A carved drive plans nothing, so a second carve changes nothing.
//!
//! The journal namespace is sized for the server: `1 MiB + shards ×
//! journal_segments × journal_segment_size` from `-c CONFIG` and `--cores`
//! (as tern-server reads them), or `--journal-size`.
//!
//! Exit status: 0 done (or nothing to do), 1 refused or failed (nothing
//! more was changed after a failed command), 2 bad usage.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::{Duration, Instant};

use clap::{Args, Subcommand};
use tern_tuning::nvme::{self, Controller, Namespace, NamespaceIdentity, Plan, Role, Step};

#[derive(Debug, Subcommand)]
pub enum NvmeCommand {
    /// Print how the drive would be carved (changes nothing)
    Plan(NvmeArgs),
    /// Carve the drive: --dry-run prints the commands, --yes runs them
    Carve(CarveArgs),
}

#[derive(Debug, Args)]
pub struct NvmeArgs {
    /// The controller's character device
    #[arg(default_value = "/dev/nvme0")]
    controller: PathBuf,
    /// The journal namespace's size (default: what the server's journal
    /// needs, from -c and --cores)
    #[arg(long = "journal-size", value_parser = parse_size)]
    journal_size: Option<u64>,
    /// The server's config file (journal_segments, journal_segment_size)
    #[arg(short = 'c', long = "config")]
    config: Option<PathBuf>,
    /// The server's --cores (one journal region per shard; default: every
    /// online CPU)
    #[arg(long)]
    cores: Option<String>,
    /// Destroy namespaces that hold data (never a mounted one)
    #[arg(long)]
    force: bool,
    /// The nvme-cli program
    #[arg(long = "nvme-cli", default_value = "nvme")]
    nvme_cli: PathBuf,
    /// The tree sysfs and /proc are read under (tests)
    #[arg(long, default_value = "/")]
    root: PathBuf,
}

#[derive(Debug, Args)]
pub struct CarveArgs {
    #[command(flatten)]
    common: NvmeArgs,
    /// Run the plan's commands
    #[arg(long)]
    yes: bool,
    /// Print the plan's commands and change nothing
    #[arg(long = "dry-run")]
    dry_run: bool,
}

fn parse_size(text: &str) -> Result<u64, tern_broker::config::SizeError> {
    tern_broker::config::parse_size(text).map(|bytes| bytes as u64)
}

#[derive(Debug, thiserror::Error)]
enum NvmeCliError {
    #[error("{0}")]
    Plan(#[from] nvme::NvmeError),
    #[error("{command}: {reason}")]
    Command { command: String, reason: String },
    #[error("{0}")]
    Config(#[from] tern_broker::config::ConfigError),
    #[error("{0}")]
    Device(String),
}

pub fn execute(command: NvmeCommand) -> ExitCode {
    let outcome = match command {
        NvmeCommand::Plan(arguments) => run(&arguments, Mode::Plan),
        NvmeCommand::Carve(arguments) => {
            let mode = match (arguments.yes, arguments.dry_run) {
                (_, true) => Mode::Plan,
                (true, false) => Mode::Carve,
                (false, false) => {
                    eprintln!("tern nvme carve: give --yes to carve the drive, or --dry-run to print the commands");
                    return ExitCode::from(2);
                }
            };
            run(&arguments.common, mode)
        }
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("tern nvme: {error}");
            ExitCode::FAILURE
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Plan,
    Carve,
}

/// The journal namespace's size for the server's configuration.
fn journal_bytes(arguments: &NvmeArgs) -> Result<u64, NvmeCliError> {
    if let Some(bytes) = arguments.journal_size {
        return Ok(bytes);
    }
    let config = tern_broker::config::Config::resolve(tern_broker::config::Flags {
        config: arguments.config.clone(),
        cores: arguments.cores.clone(),
        jetstream: true,
        ..Default::default()
    })?;
    let jetstream = config.jetstream.expect("JetStream is enabled by the flags");
    Ok(tern_storage::journal_device::bytes_needed(
        config.cores.len(),
        jetstream.journal_segments,
        jetstream.journal_segment_bytes,
    ))
}

fn run(arguments: &NvmeArgs, mode: Mode) -> Result<(), NvmeCliError> {
    let journal_bytes = journal_bytes(arguments)?;
    let drive = Drive::read(arguments)?;
    println!(
        "controller {} ({}), cntlid {}, {} bytes, namespace management: {}",
        arguments.controller.display(),
        drive.controller.model,
        drive.controller.cntlid,
        drive.controller.total_bytes,
        if drive.controller.namespace_management {
            "yes"
        } else {
            "no"
        }
    );
    for namespace in &drive.namespaces {
        println!(
            "  nsid {:<4} {:<14} {:>16} bytes  {}-byte blocks  {}  {}",
            namespace.nsid,
            namespace.device.as_deref().unwrap_or("-"),
            namespace.identity.bytes(),
            namespace.identity.block_bytes(),
            if namespace.attached {
                "attached"
            } else {
                "detached"
            },
            describe(namespace)
        );
    }
    let plan = nvme::plan(
        &drive.controller,
        &drive.namespaces,
        journal_bytes,
        arguments.force,
    )?;
    let role = |nsid: Option<u32>| nsid.map_or("new".to_string(), |nsid| format!("nsid {nsid}"));
    println!(
        "plan: journal {} bytes ({}), block store {} bytes ({}), 4096-byte blocks",
        plan.journal_bytes,
        role(plan.journal_nsid),
        plan.store_bytes,
        role(plan.store_nsid)
    );
    let program = arguments.nvme_cli.display().to_string();
    let device = arguments.controller.display().to_string();
    if plan.steps.is_empty() {
        println!("nothing to do");
    }
    if mode == Mode::Plan {
        for step in &plan.steps {
            let words = step.command(&device, drive.controller.cntlid, |_| None);
            println!("  {program} {}", words.join(" "));
        }
        return Ok(());
    }
    let (journal, store) = carve(arguments, &drive, &plan)?;
    for (role, nsid, bytes) in [
        (Role::Journal, journal, plan.journal_bytes),
        (Role::Store, store, plan.store_bytes),
    ] {
        let found = wait_for_device(arguments, nsid, bytes)?;
        println!(
            "{}: {found} nsid={nsid} block_bytes=4096 bytes={bytes}",
            role.name()
        );
    }
    Ok(())
}

fn describe(namespace: &Namespace) -> String {
    match (&namespace.mounted, &namespace.contents) {
        (Some(at), _) => format!("mounted at {at}"),
        (None, Some(contents)) => format!("holds {contents}"),
        (None, None) => "empty".into(),
    }
}

/// Runs the plan's steps; returns the journal's and the store's NSIDs.
fn carve(arguments: &NvmeArgs, drive: &Drive, plan: &Plan) -> Result<(u32, u32), NvmeCliError> {
    let device = arguments.controller.display().to_string();
    let mut journal = plan.journal_nsid;
    let mut store = plan.store_nsid;
    for step in &plan.steps {
        let created = |role| match role {
            Role::Journal => journal,
            Role::Store => store,
        };
        let words = step.command(&device, drive.controller.cntlid, created);
        println!("$ {} {}", arguments.nvme_cli.display(), words.join(" "));
        let output = nvme_cli(arguments, &words)?;
        if let Step::Create { role, .. } = step {
            let nsid = nvme::created_nsid(&output).ok_or_else(|| NvmeCliError::Command {
                command: words.join(" "),
                reason: format!("no \"created nsid:N\" in its output: {output}"),
            })?;
            match role {
                Role::Journal => journal = Some(nsid),
                Role::Store => store = Some(nsid),
            }
        }
    }
    Ok((
        journal.expect("the plan names or creates the journal"),
        store.expect("the plan names or creates the store"),
    ))
}

/// Runs nvme-cli with `words`; its stdout, or why it failed.
fn nvme_cli(arguments: &NvmeArgs, words: &[String]) -> Result<String, NvmeCliError> {
    let output = Command::new(&arguments.nvme_cli)
        .args(words)
        .output()
        .map_err(|error| NvmeCliError::Command {
            command: format!("{} {}", arguments.nvme_cli.display(), words.join(" ")),
            reason: error.to_string(),
        })?;
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    if !output.status.success() {
        return Err(NvmeCliError::Command {
            command: format!("{} {}", arguments.nvme_cli.display(), words.join(" ")),
            reason: format!(
                "{} ({}){}",
                String::from_utf8_lossy(&output.stderr).trim(),
                output.status,
                stdout
                    .trim()
                    .is_empty()
                    .then(String::new)
                    .unwrap_or_else(|| format!("; stdout: {}", stdout.trim()))
            ),
        });
    }
    Ok(stdout)
}

/// What the drive holds now.
struct Drive {
    controller: Controller,
    namespaces: Vec<Namespace>,
}

impl Drive {
    fn read(arguments: &NvmeArgs) -> Result<Drive, NvmeCliError> {
        let device = arguments.controller.display().to_string();
        let json = |words: &[&str]| {
            let mut all: Vec<String> = words.iter().map(|word| word.to_string()).collect();
            all.push("--output-format=json".into());
            nvme_cli(arguments, &all)
        };
        let controller = Controller::from_id_ctrl(&json(&["id-ctrl", &device])?)?;
        let allocated = nvme::namespace_ids(&json(&["list-ns", &device, "--all"])?)?;
        let attached = nvme::namespace_ids(&json(&["list-ns", &device])?)?;
        let devices = block_devices(&arguments.root, &arguments.controller);
        let mut namespaces = Vec::new();
        for nsid in allocated {
            let identity = NamespaceIdentity::from_id_ns(&json(&[
                "id-ns",
                &device,
                &format!("--namespace-id={nsid}"),
                "--force",
            ])?)?;
            let is_attached = attached.contains(&nsid);
            let block = devices
                .iter()
                .find(|(found, _)| *found == nsid)
                .map(|(_, name)| name.clone());
            let (mounted, contents) = match (&block, is_attached) {
                (Some(name), true) => inspect(&arguments.root, name)?,
                _ => (
                    None,
                    Some("unknown contents (not attached here: it cannot be read)".to_string()),
                ),
            };
            namespaces.push(Namespace {
                nsid,
                identity,
                attached: is_attached,
                device: block.map(|name| format!("/dev/{name}")),
                mounted,
                contents,
            });
        }
        Ok(Drive {
            controller,
            namespaces,
        })
    }
}

/// (NSID, block device name) of the controller's namespaces: the entries
/// `<controller>n<k>` of `/sys/block` (not the hidden per-path
/// `<controller>c<i>n<k>` ones), each with its `nsid` file.
fn block_devices(root: &Path, controller: &Path) -> Vec<(u32, String)> {
    let Some(name) = controller.file_name().and_then(|name| name.to_str()) else {
        return Vec::new();
    };
    let prefix = format!("{name}n");
    let Ok(entries) = std::fs::read_dir(root.join("sys/block")) else {
        return Vec::new();
    };
    let mut found: Vec<(u32, String)> = entries
        .filter_map(|entry| entry.ok())
        .filter_map(|entry| entry.file_name().into_string().ok())
        .filter(|block| {
            block.strip_prefix(&prefix).is_some_and(|rest| {
                !rest.is_empty() && rest.bytes().all(|byte| byte.is_ascii_digit())
            })
        })
        .filter_map(|block| {
            let nsid = std::fs::read_to_string(root.join("sys/block").join(&block).join("nsid"))
                .ok()?
                .trim()
                .parse()
                .ok()?;
            Some((nsid, block))
        })
        .collect();
    found.sort();
    found
}

/// Where block device `name` (or a partition of it) is mounted, and what
/// its first 128 KiB hold.
fn inspect(root: &Path, name: &str) -> Result<(Option<String>, Option<String>), NvmeCliError> {
    let sys = root.join("sys/block").join(name);
    let mut numbers = vec![std::fs::read_to_string(sys.join("dev")).unwrap_or_default()];
    if let Ok(entries) = std::fs::read_dir(&sys) {
        for entry in entries.filter_map(|entry| entry.ok()) {
            if entry.path().join("partition").exists() {
                numbers.push(std::fs::read_to_string(entry.path().join("dev")).unwrap_or_default());
            }
        }
    }
    let numbers: Vec<String> = numbers
        .iter()
        .map(|number| number.trim().to_string())
        .filter(|number| !number.is_empty())
        .collect();
    let mountinfo = std::fs::read_to_string(root.join("proc/self/mountinfo")).unwrap_or_default();
    // Fields: id parent major:minor root mount-point ...
    let mounted = mountinfo.lines().find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        (fields.len() > 4 && numbers.iter().any(|number| number == fields[2]))
            .then(|| fields[4].to_string())
    });
    let path = root.join("dev").join(name);
    let start = read_start(&path)
        .map_err(|error| NvmeCliError::Device(format!("reading {}: {error}", path.display())))?;
    let contents = if start.starts_with(tern_storage::journal_device::MAGIC) {
        Some("a tern journal (device header)".to_string())
    } else if let Some(signature) = tern_storage::journal_device::signature(&start) {
        Some(signature.to_string())
    } else if start.iter().any(|&byte| byte != 0) {
        Some("unrecognised data in its first 128 KiB".to_string())
    } else {
        None
    };
    Ok((mounted, contents))
}

fn read_start(path: &Path) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let mut start = Vec::with_capacity(128 << 10);
    std::fs::File::open(path)?
        .take(128 << 10)
        .read_to_end(&mut start)?;
    Ok(start)
}

/// Waits (bounded) for namespace `nsid`'s block device after a rescan and
/// checks its size and block size.
fn wait_for_device(arguments: &NvmeArgs, nsid: u32, bytes: u64) -> Result<String, NvmeCliError> {
    const WAIT: Duration = Duration::from_secs(20);
    let deadline = Instant::now() + WAIT;
    loop {
        let found = block_devices(&arguments.root, &arguments.controller)
            .into_iter()
            .find(|(found, _)| *found == nsid);
        if let Some((_, name)) = found {
            let queue = arguments.root.join("sys/block").join(&name);
            let read = |file: &str| {
                std::fs::read_to_string(queue.join(file))
                    .ok()
                    .and_then(|text| text.trim().parse::<u64>().ok())
            };
            let block = read("queue/logical_block_size");
            let size = read("size").map(|sectors| sectors * 512);
            if block == Some(4096) && size == Some(bytes) {
                return Ok(format!("/dev/{name}"));
            }
            if Instant::now() >= deadline {
                return Err(NvmeCliError::Device(format!(
                    "/dev/{name} (nsid {nsid}) has {block:?}-byte blocks and {size:?} bytes; expected 4096 and {bytes}"
                )));
            }
        } else if Instant::now() >= deadline {
            return Err(NvmeCliError::Device(format!(
                "no block device for nsid {nsid} within {WAIT:?} of the rescan"
            )));
        }
        // A bounded poll of sysfs while the kernel rescans.
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fake `/` with the sysfs and /dev entries of a controller's namespaces.
    fn fake_root(blocks: &[(&str, u32, &[u8])]) -> tempfile::TempDir {
        let root = tempfile::tempdir().unwrap();
        for (name, nsid, start) in blocks {
            let sys = root.path().join("sys/block").join(name);
            std::fs::create_dir_all(&sys).unwrap();
            std::fs::write(sys.join("nsid"), format!("{nsid}\n")).unwrap();
            std::fs::write(sys.join("dev"), format!("259:{nsid}\n")).unwrap();
            std::fs::create_dir_all(root.path().join("dev")).unwrap();
            std::fs::write(root.path().join("dev").join(name), start).unwrap();
        }
        std::fs::create_dir_all(root.path().join("proc/self")).unwrap();
        std::fs::write(
            root.path().join("proc/self/mountinfo"),
            "22 1 259:3 / /var/lib/tern rw - ext4 /dev/nvme0n3 rw\n",
        )
        .unwrap();
        root
    }

    #[test]
    fn namespaces_are_found_by_nsid_not_by_name() {
        let root = fake_root(&[
            ("nvme0n1", 2, b""),
            ("nvme0n2", 3, b""),
            ("nvme0c0n1", 2, b""),
            ("nvme1n1", 1, b""),
        ]);
        assert_eq!(
            block_devices(root.path(), Path::new("/dev/nvme0")),
            vec![(2, "nvme0n1".to_string()), (3, "nvme0n2".to_string())]
        );
    }

    #[test]
    fn contents_and_mounts_are_seen() {
        let mut ext4 = vec![0u8; 2048];
        ext4[1080] = 0x53;
        ext4[1081] = 0xef;
        let root = fake_root(&[
            ("nvme0n1", 1, b"TERNJDEV\x01\x00"),
            ("nvme0n2", 2, &ext4),
            ("nvme0n3", 3, &[0u8; 4096]),
            ("nvme0n4", 4, b"\x00\x00garbage"),
            ("nvme0n5", 5, &[0u8; 4096]),
        ]);
        let seen = |name| inspect(root.path(), name).unwrap();
        assert_eq!(
            seen("nvme0n1").1.as_deref(),
            Some("a tern journal (device header)")
        );
        assert_eq!(seen("nvme0n2").1.as_deref(), Some("an ext2/3/4 filesystem"));
        assert_eq!(seen("nvme0n3").0.as_deref(), Some("/var/lib/tern"));
        assert_eq!(
            seen("nvme0n4").1.as_deref(),
            Some("unrecognised data in its first 128 KiB")
        );
        assert_eq!(seen("nvme0n5"), (None, None));
    }
}
