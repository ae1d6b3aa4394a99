//! What `check` and `repair` tell the operator: findings (one line each in
//! the CLI, the same as JSON), what a repair discards, and a repair's plan.

use std::fmt;

use serde::Serialize;

/// How bad a finding is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    /// Checked and intact.
    Ok,
    /// Keeps streams offline until an operator repairs it.
    Damage,
    /// Something the server repairs by itself at its next start (a block
    /// rebuilt from parity, a torn tail cut, a leftover removed).
    SelfHealing,
    /// Worth knowing, changes nothing.
    Note,
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Severity::Ok => "ok",
            Severity::Damage => "damage",
            Severity::SelfHealing => "self-healing",
            Severity::Note => "note",
        })
    }
}

/// Something a repair gives up.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Discard {
    /// `messages` messages of `stream` in `first_sequence..=last_sequence`
    /// (fewer than the range when some were deleted).
    Messages {
        stream: String,
        first_sequence: u64,
        last_sequence: u64,
        messages: u64,
        /// Where they were, when that matters (the damaged batch itself).
        #[serde(skip_serializing_if = "Option::is_none")]
        note: Option<String>,
    },
    /// Raft entries of `stream` (messages and every other operation:
    /// deletes, purges, consumer changes).
    Entries {
        stream: String,
        first_index: u64,
        last_index: u64,
        entries: u64,
    },
    /// Delete entries of `stream`'s deletes log that cannot be read: the
    /// messages they deleted are served again.
    Deletes {
        stream: String,
        file: String,
        entries: u64,
    },
    /// Durable consumers of `stream` (their names when the file was readable).
    Consumers {
        stream: String,
        names: Option<Vec<String>>,
    },
    /// Journal records of groups no stream has (deleted streams).
    OrphanRecords { records: u64 },
    /// Anything else, in words.
    Other { text: String },
}

impl fmt::Display for Discard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Discard::Messages {
                stream,
                first_sequence,
                last_sequence,
                messages,
                note,
            } => {
                let noun = if *messages == 1 { "message" } else { "messages" };
                write!(
                    f,
                    "sequences {first_sequence}..={last_sequence} ({messages} {noun}) of stream {stream}"
                )?;
                if let Some(note) = note {
                    write!(f, " ({note})")?;
                }
                Ok(())
            }
            Discard::Entries {
                stream,
                first_index,
                last_index,
                entries,
            } => write!(
                f,
                "Raft entries {first_index}..={last_index} ({entries} entries) of stream {stream}"
            ),
            Discard::Deletes {
                stream,
                file,
                entries,
            } => write!(
                f,
                "{entries} delete entries of stream {stream} in {file} (the messages they deleted are served again)"
            ),
            Discard::Consumers {
                stream,
                names: Some(names),
            } if !names.is_empty() => write!(
                f,
                "every durable consumer of stream {stream} ({})",
                names.join(", ")
            ),
            Discard::Consumers { stream, names } => write!(
                f,
                "every durable consumer of stream {stream}{}",
                if names.is_none() {
                    " (their names are unknown)"
                } else {
                    ""
                }
            ),
            Discard::OrphanRecords { records } => write!(
                f,
                "{records} records of deleted streams (nothing a stream needs)"
            ),
            Discard::Other { text } => f.write_str(text),
        }
    }
}

/// One thing `check` found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Finding {
    pub severity: Severity,
    /// The file (or directory), relative to the store directory when it is
    /// inside it.
    pub file: String,
    /// Byte offset in `file`, where one applies.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub offset: Option<u64>,
    pub reason: String,
    /// What the repair gives up (damage only).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub discards: Vec<Discard>,
    /// The command that repairs it, if one does.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub repair: Option<String>,
}

impl Finding {
    pub(super) fn new(
        severity: Severity,
        file: impl Into<String>,
        reason: impl Into<String>,
    ) -> Finding {
        Finding {
            severity,
            file: file.into(),
            offset: None,
            reason: reason.into(),
            discards: Vec::new(),
            repair: None,
        }
    }

    pub(super) fn at(mut self, offset: u64) -> Finding {
        self.offset = Some(offset);
        self
    }

    pub(super) fn discarding(mut self, discards: Vec<Discard>) -> Finding {
        self.discards = discards;
        self
    }

    pub(super) fn repaired_by(mut self, command: impl Into<String>) -> Finding {
        self.repair = Some(command.into());
        self
    }
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.severity, self.file)?;
        if let Some(offset) = self.offset {
            write!(f, " at offset {offset}")?;
        }
        write!(f, ": {}", self.reason)?;
        if !self.discards.is_empty() {
            let discards: Vec<String> = self.discards.iter().map(Discard::to_string).collect();
            write!(f, "; repair discards {}", discards.join("; "))?;
        }
        if let Some(command) = &self.repair {
            write!(f, " [{command}]")?;
        }
        Ok(())
    }
}

/// The layout as found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LayoutStatus {
    Ok,
    /// No layout and no JetStream data: the server creates one.
    Absent,
    /// No layout beside stream directories or journal segments.
    MissingBesideData,
    Damaged,
    /// Written by tern's store format 1.
    OldFormat,
}

impl fmt::Display for LayoutStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LayoutStatus::Ok => "valid",
            LayoutStatus::Absent => "absent",
            LayoutStatus::MissingBesideData => "missing beside data",
            LayoutStatus::Damaged => "damaged",
            LayoutStatus::OldFormat => "of store format 1",
        })
    }
}

/// One part of the store as a whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Health {
    Ok,
    Damaged,
    /// Not checked (what it depends on is damaged).
    Unknown,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct JournalSummary {
    pub shard: usize,
    pub directory: String,
    pub health: Health,
    /// Records it holds (up to the damage, if any).
    pub records: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StreamSummary {
    pub name: String,
    /// Its owner, when the shard count is known.
    pub shard: Option<usize>,
    pub health: Health,
}

/// What `check` found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StoreReport {
    pub store_dir: String,
    pub journal_dir: String,
    pub layout: LayoutStatus,
    /// From the layout, or from the journals when the layout is damaged
    /// and they say it unambiguously.
    pub shard_count: Option<usize>,
    pub journals: Vec<JournalSummary>,
    pub streams: Vec<StreamSummary>,
    /// Everything, in order: layout, streams, journals.
    pub findings: Vec<Finding>,
}

impl StoreReport {
    /// Whether anything keeps streams offline.
    pub fn damaged(&self) -> bool {
        self.findings
            .iter()
            .any(|finding| finding.severity == Severity::Damage)
    }
}

/// One change a repair makes (or would make).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Action {
    /// Relative to the store directory when inside it.
    pub file: String,
    pub change: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub discards: Vec<Discard>,
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.file, self.change)?;
        if !self.discards.is_empty() {
            let discards: Vec<String> = self.discards.iter().map(Discard::to_string).collect();
            write!(f, "; discards {}", discards.join("; "))?;
        }
        Ok(())
    }
}

/// What `repair` did, or would do.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RepairReport {
    /// `stream ORDERS`, `journal of shard 1`, `layout`.
    pub target: String,
    pub actions: Vec<Action>,
    /// Why the repair cannot be made (then `actions` is empty).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refused: Option<String>,
    /// The actions were carried out (`confirm`).
    pub applied: bool,
    /// What is left to know afterwards (another repair to run, what the
    /// next start does).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

impl RepairReport {
    pub(super) fn refused(target: String, reason: impl Into<String>) -> RepairReport {
        RepairReport {
            target,
            actions: Vec::new(),
            refused: Some(reason.into()),
            applied: false,
            notes: Vec::new(),
        }
    }

    pub(super) fn plan(target: String, actions: Vec<Action>, notes: Vec<String>) -> RepairReport {
        RepairReport {
            target,
            actions,
            refused: None,
            applied: false,
            notes,
        }
    }

    /// Nothing needs repairing.
    pub fn nothing_to_do(&self) -> bool {
        self.refused.is_none() && self.actions.is_empty()
    }
}
