//! Carving an NVMe drive for tern: one namespace for the journal, sized
//! from the server's configuration, and one for the block store with the
//! rest, both in a 4096-byte LBA format without metadata.
//!
//! Pure: [`plan`] takes what nvme-cli reported (`id-ctrl`, `list-ns`,
//! `id-ns` JSON, parsed here) and what the caller found on each namespace
//! (its block device, whether it is mounted or holds data), and returns
//! the steps; [`Step::command`] renders each as the nvme-cli command
//! `tern nvme carve` runs. Namespaces are addressed by NSID on the
//! controller (`-n NSID` on `/dev/nvme0`), never by kernel block-device
//! name: those shift when namespaces are detached and attached.
//!
//! A drive already carved as wanted plans nothing (or only the attaches
//! and rescan a detached namespace needs), so a second carve changes
//! nothing. A plan that deletes or reformats a namespace holding anything
//! (a filesystem, a tern journal, unknown contents) is refused unless
//! forced; a mounted namespace is refused even then.

use serde_json::Value;

/// Bytes the plan's sizes are aligned to.
pub const ALIGN_BYTES: u64 = 1 << 20;
/// The LBA size tern wants: the journal writes 4096-byte blocks.
pub const BLOCK_BYTES: u64 = 4096;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NvmeError {
    #[error("{what}: not the JSON nvme-cli prints ({reason})")]
    Json { what: &'static str, reason: String },
    #[error(
        "the controller reports no total capacity (id-ctrl tnvmcap is 0): namespaces cannot be \
         sized from it"
    )]
    NoCapacity,
    #[error(
        "the controller does not support namespace management (id-ctrl oacs bit 3): carve it with \
         the vendor's tool into a journal namespace of {journal_bytes} bytes and a block-store \
         namespace, both with a 4096-byte LBA format"
    )]
    NoNamespaceManagement { journal_bytes: u64 },
    #[error("the controller supports {0} namespace(s); tern needs 2")]
    TooFewNamespaces(u32),
    #[error("no 4096-byte LBA format without metadata is offered (id-ns lbafs)")]
    NoBlockFormat,
    #[error("the drive holds {total_bytes} bytes: too small for a {journal_bytes}-byte journal and a block store")]
    TooSmall {
        total_bytes: u128,
        journal_bytes: u64,
    },
    #[error(
        "namespace {nsid} ({device}) is mounted at {at}: unmount it first; nothing was changed"
    )]
    Mounted {
        nsid: u32,
        device: String,
        at: String,
    },
    #[error(
        "the plan deletes or reformats namespace {nsid}, which holds {contents}; nothing was \
         changed (--force to destroy it)"
    )]
    HoldsData { nsid: u32, contents: String },
}

/// What `nvme id-ctrl -o json` says that matters here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Controller {
    pub cntlid: u16,
    pub model: String,
    /// `tnvmcap`: total NVM capacity in bytes (0 when not reported).
    pub total_bytes: u128,
    /// `oacs` bit 3.
    pub namespace_management: bool,
    /// `nn`.
    pub namespaces_max: u32,
}

fn json_error(what: &'static str) -> impl Fn(String) -> NvmeError {
    move |reason| NvmeError::Json { what, reason }
}

/// A JSON number, or a decimal string (nvme-cli prints 128-bit fields
/// such as `tnvmcap` as strings).
fn number(value: &Value, field: &str) -> Result<u128, String> {
    match &value[field] {
        Value::Number(number) => number
            .as_u64()
            .map(u128::from)
            .ok_or_else(|| format!("{field} is not an unsigned integer")),
        Value::String(text) => text
            .trim()
            .parse()
            .map_err(|_| format!("{field} is not a decimal number")),
        Value::Null => Err(format!("no {field}")),
        _ => Err(format!("{field} is not a number")),
    }
}

impl Controller {
    pub fn from_id_ctrl(text: &str) -> Result<Controller, NvmeError> {
        let error = json_error("id-ctrl");
        let value: Value = serde_json::from_str(text).map_err(|e| error(e.to_string()))?;
        let oacs = number(&value, "oacs").map_err(&error)?;
        Ok(Controller {
            cntlid: u16::try_from(number(&value, "cntlid").map_err(&error)?)
                .map_err(|_| error("cntlid out of range".into()))?,
            model: value["mn"].as_str().unwrap_or_default().trim().to_string(),
            total_bytes: number(&value, "tnvmcap").map_err(&error)?,
            namespace_management: oacs & (1 << 3) != 0,
            namespaces_max: u32::try_from(number(&value, "nn").map_err(&error)?)
                .map_err(|_| error("nn out of range".into()))?,
        })
    }
}

/// The NSIDs of `nvme list-ns -o json` (with `--all`: every allocated one).
pub fn namespace_ids(text: &str) -> Result<Vec<u32>, NvmeError> {
    let error = json_error("list-ns");
    let value: Value = serde_json::from_str(text).map_err(|e| error(e.to_string()))?;
    let list = value["nsid_list"]
        .as_array()
        .ok_or_else(|| error("no nsid_list".into()))?;
    list.iter()
        .map(|entry| {
            number(entry, "nsid")
                .map_err(&error)
                .and_then(|nsid| u32::try_from(nsid).map_err(|_| error("nsid out of range".into())))
        })
        .collect()
}

/// One LBA format a namespace offers (`lbafs[i]` of `id-ns`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LbaFormat {
    pub index: u8,
    pub data_bytes: u64,
    pub metadata_bytes: u16,
    /// `rp`: 0 best .. 3 degraded.
    pub relative_performance: u8,
}

/// What `nvme id-ns -o json` says about a namespace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamespaceIdentity {
    /// `nsze`, in blocks of the current format.
    pub size_blocks: u64,
    pub formats: Vec<LbaFormat>,
    /// The current format (`flbas` bits 0-3, with bits 5-6 above 16).
    pub format_index: u8,
}

impl NamespaceIdentity {
    pub fn from_id_ns(text: &str) -> Result<NamespaceIdentity, NvmeError> {
        let error = json_error("id-ns");
        let value: Value = serde_json::from_str(text).map_err(|e| error(e.to_string()))?;
        let size_blocks = u64::try_from(number(&value, "nsze").map_err(&error)?)
            .map_err(|_| error("nsze out of range".into()))?;
        let flbas = number(&value, "flbas").map_err(&error)?;
        let format_index = ((flbas & 0xf) | ((flbas >> 5) & 0x3) << 4) as u8;
        let formats = value["lbafs"]
            .as_array()
            .ok_or_else(|| error("no lbafs".into()))?
            .iter()
            .enumerate()
            .map(|(index, format)| {
                let ds = number(format, "ds").map_err(&error)?;
                if !(9..=16).contains(&ds) {
                    return Err(error(format!("lbafs[{index}].ds {ds} out of range")));
                }
                Ok(LbaFormat {
                    index: index as u8,
                    data_bytes: 1 << ds,
                    metadata_bytes: u16::try_from(number(format, "ms").map_err(&error)?)
                        .map_err(|_| error("ms out of range".into()))?,
                    relative_performance: (number(format, "rp").map_err(&error)? & 0x3) as u8,
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        if formats.len() > 64 || usize::from(format_index) >= formats.len() {
            return Err(error(format!("flbas {flbas} names no listed format")));
        }
        Ok(NamespaceIdentity {
            size_blocks,
            formats,
            format_index,
        })
    }

    pub fn block_bytes(&self) -> u64 {
        self.formats[usize::from(self.format_index)].data_bytes
    }

    pub fn metadata_bytes(&self) -> u16 {
        self.formats[usize::from(self.format_index)].metadata_bytes
    }

    pub fn bytes(&self) -> u64 {
        self.size_blocks.saturating_mul(self.block_bytes())
    }

    /// The best 4096-byte format without metadata (lowest `rp`, then
    /// lowest index).
    pub fn block_format(&self) -> Option<LbaFormat> {
        self.formats
            .iter()
            .filter(|format| format.data_bytes == BLOCK_BYTES && format.metadata_bytes == 0)
            .min_by_key(|format| (format.relative_performance, format.index))
            .copied()
    }

    /// Whether it is in the format tern wants.
    pub fn is_block_formatted(&self) -> bool {
        self.block_bytes() == BLOCK_BYTES && self.metadata_bytes() == 0
    }
}

/// A namespace as found on the drive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Namespace {
    pub nsid: u32,
    pub identity: NamespaceIdentity,
    pub attached: bool,
    /// Its block device, when attached and visible (`/dev/nvme0n1`).
    pub device: Option<String>,
    /// Where it (or a partition of it) is mounted.
    pub mounted: Option<String>,
    /// What it holds, when anything ("a tern journal", "an ext2/3/4
    /// filesystem", "unknown contents (detached)"); `None`: nothing found.
    pub contents: Option<String>,
}

/// Which namespace a step makes or addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Journal,
    Store,
}

impl Role {
    pub fn name(self) -> &'static str {
        match self {
            Role::Journal => "journal",
            Role::Store => "block store",
        }
    }
}

/// A namespace a step addresses: one that exists, or the one an earlier
/// `Create` made (its NSID known only once that command ran).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    Nsid(u32),
    Created(Role),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    Detach(u32),
    Delete(u32),
    Create { role: Role, blocks: u64, format: u8 },
    Attach(Target),
    Format { nsid: u32, format: u8 },
    Rescan,
}

impl Step {
    /// The nvme-cli arguments (after the program name) for this step on
    /// `controller_device` (`/dev/nvme0`), with the NSID of a namespace
    /// created earlier given by `created`.
    pub fn command(
        &self,
        controller_device: &str,
        cntlid: u16,
        created: impl Fn(Role) -> Option<u32>,
    ) -> Vec<String> {
        let nsid = |target: Target| match target {
            Target::Nsid(nsid) => nsid.to_string(),
            Target::Created(role) => created(role)
                .map(|nsid| nsid.to_string())
                .unwrap_or_else(|| format!("<nsid of the new {} namespace>", role.name())),
        };
        let device = controller_device.to_string();
        let words: Vec<String> = match *self {
            Step::Detach(namespace) => vec![
                "detach-ns".into(),
                device,
                format!("--namespace-id={namespace}"),
                format!("--controllers={cntlid}"),
            ],
            Step::Delete(namespace) => vec![
                "delete-ns".into(),
                device,
                format!("--namespace-id={namespace}"),
            ],
            Step::Create { blocks, format, .. } => vec![
                "create-ns".into(),
                device,
                format!("--nsze={blocks}"),
                format!("--ncap={blocks}"),
                format!("--flbas={format}"),
            ],
            Step::Attach(target) => vec![
                "attach-ns".into(),
                device,
                format!("--namespace-id={}", nsid(target)),
                format!("--controllers={cntlid}"),
            ],
            Step::Format { nsid, format } => vec![
                "format".into(),
                device,
                format!("--namespace-id={nsid}"),
                format!("--lbaf={format}"),
                "--force".into(),
            ],
            Step::Rescan => vec!["ns-rescan".into(), device],
        };
        words
    }
}

/// What the drive should look like, and how to get there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    pub journal_bytes: u64,
    pub store_bytes: u64,
    /// The existing namespace already in each role (`None`: created).
    pub journal_nsid: Option<u32>,
    pub store_nsid: Option<u32>,
    pub steps: Vec<Step>,
}

/// The steps that carve the drive into a journal namespace of
/// `journal_bytes` (rounded up to 1 MiB) and a block-store namespace with
/// the rest (rounded down to 1 MiB).
pub fn plan(
    controller: &Controller,
    namespaces: &[Namespace],
    journal_bytes: u64,
    force: bool,
) -> Result<Plan, NvmeError> {
    let journal_bytes = journal_bytes.max(1).next_multiple_of(ALIGN_BYTES);
    if controller.total_bytes == 0 {
        return Err(NvmeError::NoCapacity);
    }
    let total = controller.total_bytes.min(u128::from(u64::MAX)) as u64;
    let store_bytes = total.saturating_sub(journal_bytes) / ALIGN_BYTES * ALIGN_BYTES;
    if store_bytes == 0 {
        return Err(NvmeError::TooSmall {
            total_bytes: controller.total_bytes,
            journal_bytes,
        });
    }
    // Namespaces already of the two sizes (in bytes, whatever their format).
    let sized = |bytes: u64, other: Option<u32>| {
        namespaces
            .iter()
            .find(|namespace| namespace.identity.bytes() == bytes && Some(namespace.nsid) != other)
            .map(|namespace| namespace.nsid)
    };
    let journal_nsid = sized(journal_bytes, None);
    let store_nsid = sized(store_bytes, journal_nsid);
    let format = namespaces
        .iter()
        .find_map(|namespace| namespace.identity.block_format());
    // Already carved: exactly those two; attach what is not attached and
    // reformat what is not in the 4 KiB format.
    if let (Some(journal), Some(store), 2) = (journal_nsid, store_nsid, namespaces.len()) {
        let mut steps: Vec<Step> = namespaces
            .iter()
            .filter(|namespace| !namespace.attached)
            .map(|namespace| Step::Attach(Target::Nsid(namespace.nsid)))
            .collect();
        for namespace in namespaces {
            if namespace.identity.is_block_formatted() {
                continue;
            }
            check_destroyable(namespace, force)?;
            let format = format.ok_or(NvmeError::NoBlockFormat)?;
            steps.push(Step::Format {
                nsid: namespace.nsid,
                format: format.index,
            });
        }
        if !steps.is_empty() {
            steps.push(Step::Rescan);
        }
        return Ok(Plan {
            journal_bytes,
            store_bytes,
            journal_nsid: Some(journal),
            store_nsid: Some(store),
            steps,
        });
    }
    if !controller.namespace_management {
        return Err(NvmeError::NoNamespaceManagement { journal_bytes });
    }
    if controller.namespaces_max < 2 {
        return Err(NvmeError::TooFewNamespaces(controller.namespaces_max));
    }
    let format = format.ok_or(NvmeError::NoBlockFormat)?;
    for namespace in namespaces {
        check_destroyable(namespace, force)?;
    }
    let mut steps = Vec::new();
    for namespace in namespaces {
        if namespace.attached {
            steps.push(Step::Detach(namespace.nsid));
        }
        steps.push(Step::Delete(namespace.nsid));
    }
    for (role, bytes) in [(Role::Journal, journal_bytes), (Role::Store, store_bytes)] {
        steps.push(Step::Create {
            role,
            blocks: bytes / BLOCK_BYTES,
            format: format.index,
        });
    }
    steps.push(Step::Attach(Target::Created(Role::Journal)));
    steps.push(Step::Attach(Target::Created(Role::Store)));
    steps.push(Step::Rescan);
    Ok(Plan {
        journal_bytes,
        store_bytes,
        journal_nsid: None,
        store_nsid: None,
        steps,
    })
}

/// Refuses to delete or reformat a mounted namespace, or (unless forced)
/// one that holds anything.
fn check_destroyable(namespace: &Namespace, force: bool) -> Result<(), NvmeError> {
    if let Some(at) = &namespace.mounted {
        return Err(NvmeError::Mounted {
            nsid: namespace.nsid,
            device: namespace.device.clone().unwrap_or_default(),
            at: at.clone(),
        });
    }
    match (&namespace.contents, force) {
        (Some(contents), false) => Err(NvmeError::HoldsData {
            nsid: namespace.nsid,
            contents: contents.clone(),
        }),
        _ => Ok(()),
    }
}

/// The NSID in nvme-cli's `create-ns: Success, created nsid:N`.
pub fn created_nsid(output: &str) -> Option<u32> {
    let (_, rest) = output.split_once("created nsid:")?;
    let digits: String = rest
        .trim_start()
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().ok()
}

#[cfg(test)]
#[path = "nvme_tests.rs"]
mod tests;
