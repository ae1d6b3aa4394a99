//! `<store_dir>/jetstream/node`: the Raft identity of a cluster node's
//! store. Every Raft group the node belongs to (the meta group, each
//! stream's) knows it by this id, and its votes are recorded under it.
//!
//! The id is drawn at random when a store is new, so a node whose store
//! was wiped (a replaced disk, a new host under the old name) comes back
//! as a new voter that has never voted: the meta leader replaces the old
//! identity with it through membership changes (`jetstream::cluster`).
//! Reusing the old id would let it vote a second time in a term it had
//! voted in before the wipe, and elect two leaders.
//!
//! Text, so an operator can read it, with a checksum, so damage is found:
//!
//! ```text
//! tern-node 1
//! name n1
//! id 8b37b07b558d4c0f
//! checksum 1b2c3d4e
//! ```
//!
//! `checksum` is the CRC-32C (hex) of every byte before that line; `id` is
//! never 0. The file is written once (to a temporary file, synced, renamed,
//! the directory synced) and never changed.
//!
//! A store without the file:
//! - holds no JetStream data: a new store; a new random id is written;
//! - holds data and its meta checkpoint names the node (`"node"`): the
//!   file was lost; it is written again from there;
//! - holds data written before identities existed: the id is the server
//!   name's FNV-1a hash, as those versions used (`crate::cluster::node_id`).
//!
//! A damaged file, or one naming another server, refuses the start.

use std::io::Write;
use std::path::{Path, PathBuf};

use tern_storage::format::checksum;

pub const FILE: &str = "node";
const VERSION: u32 = 1;
/// Larger than any identity file tern writes.
const FILE_BYTES_MAX: u64 = 4096;

/// Who this store is in the cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeIdentity {
    pub name: String,
    pub id: u64,
}

/// How [`open`] came by the identity.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// Read from the file.
    Read,
    /// A new store: drawn at random and written.
    Created,
    /// The file was lost: taken from the meta checkpoint and written again.
    Restored,
    /// A store of a version before identities: the name's hash, written.
    Legacy,
}

#[derive(Debug, thiserror::Error)]
pub enum IdentityError {
    #[error("{path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error(
        "{path} is damaged ({reason}); nothing was changed. It holds this node's Raft identity: \
         restore it from a backup, or remove the store's JetStream data ({root}) so the node \
         joins the cluster as a new one (its replicas are rebuilt from the other nodes)"
    )]
    Damaged {
        path: String,
        root: String,
        reason: IdentityDecodeError,
    },
    #[error(
        "{path} belongs to the server named {found:?}, not {wanted:?}: a store keeps its server's \
         name. Start it with `-n {found}`, or remove the store's JetStream data ({root}) to join \
         the cluster as a new node"
    )]
    OtherServer {
        path: String,
        root: String,
        found: String,
        wanted: String,
    },
}

impl NodeIdentity {
    pub fn encode(&self) -> String {
        assert!(self.id != 0, "a node id is never 0");
        assert!(
            !self.name.is_empty() && !self.name.contains(['\n', '\r']),
            "a server name on one line"
        );
        let mut text = format!(
            "tern-node {VERSION}\nname {}\nid {:016x}\n",
            self.name, self.id
        );
        let sum = checksum(text.as_bytes());
        text.push_str(&format!("checksum {sum:08x}\n"));
        text
    }

    /// Strict: every line in order, nothing else, the checksum right.
    pub fn decode(text: &str) -> Result<NodeIdentity, IdentityDecodeError> {
        let body_end = text
            .rfind("checksum ")
            .ok_or(IdentityDecodeError::NoChecksum)?;
        let (body, last) = text.split_at(body_end);
        let stored = last
            .strip_prefix("checksum ")
            .and_then(|rest| rest.strip_suffix('\n'))
            .filter(|hex| hex.len() == 8)
            .and_then(|hex| u32::from_str_radix(hex, 16).ok())
            .ok_or(IdentityDecodeError::MalformedChecksum)?;
        if stored != checksum(body.as_bytes()) {
            return Err(IdentityDecodeError::ChecksumMismatch);
        }
        let mut lines = body.lines();
        if lines.next() != Some(&format!("tern-node {VERSION}")) {
            return Err(IdentityDecodeError::UnknownVersion);
        }
        let name = lines
            .next()
            .and_then(|line| line.strip_prefix("name "))
            .filter(|name| !name.is_empty())
            .ok_or(IdentityDecodeError::MalformedName)?
            .to_string();
        let id = lines
            .next()
            .and_then(|line| line.strip_prefix("id "))
            .filter(|hex| hex.len() == 16)
            .and_then(|hex| u64::from_str_radix(hex, 16).ok())
            .filter(|&id| id != 0)
            .ok_or(IdentityDecodeError::MalformedId)?;
        if lines.next().is_some() {
            return Err(IdentityDecodeError::UnexpectedLines);
        }
        let identity = NodeIdentity { name, id };
        if identity.encode() != text {
            return Err(IdentityDecodeError::NotCanonical);
        }
        Ok(identity)
    }
}

/// Why an identity file's text does not decode (the reason in
/// [`IdentityError::Damaged`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdentityDecodeError {
    #[error("no checksum line")]
    NoChecksum,
    #[error("malformed checksum line")]
    MalformedChecksum,
    #[error("checksum mismatch")]
    ChecksumMismatch,
    #[error("unknown version line")]
    UnknownVersion,
    #[error("malformed name line")]
    MalformedName,
    #[error("malformed id line")]
    MalformedId,
    #[error("unexpected lines")]
    UnexpectedLines,
    #[error("not in canonical form")]
    NotCanonical,
}

/// What [`open`] needs to know of the store besides the file.
pub struct Store<'a> {
    /// `<store_dir>/jetstream`.
    pub root: &'a Path,
    /// The store holds JetStream data (a layout, streams, journals).
    pub holds_data: bool,
    /// The node id the meta checkpoint records, if it records one.
    pub checkpoint_node: Option<u64>,
}

/// This store's identity for `server_name`, created as the module doc
/// says when the file is missing.
pub fn open(
    store: &Store<'_>,
    server_name: &str,
    mut random: impl FnMut() -> u64,
) -> Result<(NodeIdentity, Origin), IdentityError> {
    let path = store.root.join(FILE);
    let shown = path.display().to_string();
    let root = store.root.display().to_string();
    if let Some(text) = read(&path)? {
        let identity = NodeIdentity::decode(&text).map_err(|reason| IdentityError::Damaged {
            path: shown.clone(),
            root: root.clone(),
            reason,
        })?;
        if identity.name != server_name {
            return Err(IdentityError::OtherServer {
                path: shown,
                root,
                found: identity.name,
                wanted: server_name.to_string(),
            });
        }
        return Ok((identity, Origin::Read));
    }
    let (id, origin) = match (store.holds_data, store.checkpoint_node) {
        (false, _) => (new_id(&mut random), Origin::Created),
        (true, Some(id)) if id != 0 => (id, Origin::Restored),
        (true, _) => (crate::cluster::node_id(server_name), Origin::Legacy),
    };
    let identity = NodeIdentity {
        name: server_name.to_string(),
        id,
    };
    write(store.root, &identity)?;
    Ok((identity, origin))
}

/// The identity file of the store under `root` as it is, read only:
/// `Ok(None)` when there is none (a single server's store, or one a
/// cluster node will write at its next start); `Err` with the reason when
/// it is damaged (what refuses the server's start).
pub fn examine(root: &Path) -> Result<Option<NodeIdentity>, ExamineError> {
    let path = root.join(FILE);
    match read(&path)? {
        None => Ok(None),
        Some(text) => Ok(Some(NodeIdentity::decode(&text)?)),
    }
}

/// Why [`examine`] finds the identity file unusable.
#[derive(Debug, thiserror::Error)]
pub enum ExamineError {
    /// It cannot be read ([`IdentityError::Io`]).
    #[error(transparent)]
    Read(#[from] IdentityError),
    #[error(transparent)]
    Damaged(#[from] IdentityDecodeError),
}

/// A random id, never 0.
fn new_id(mut random: impl FnMut() -> u64) -> u64 {
    loop {
        let id = random();
        if id != 0 {
            return id;
        }
    }
}

fn read(path: &Path) -> Result<Option<String>, IdentityError> {
    let io = |source| IdentityError::Io {
        path: path.display().to_string(),
        source,
    };
    match std::fs::metadata(path) {
        Ok(meta) if meta.len() > FILE_BYTES_MAX => Ok(Some(String::new())),
        Ok(_) => {
            let bytes = std::fs::read(path).map_err(io)?;
            Ok(Some(String::from_utf8_lossy(&bytes).into_owned()))
        }
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(error) => Err(io(error)),
    }
}

/// Writes the file atomically and durably.
fn write(root: &Path, identity: &NodeIdentity) -> Result<(), IdentityError> {
    let path: PathBuf = root.join(FILE);
    let temporary = root.join(format!("{FILE}.new"));
    let io = |path: &Path| {
        let path = path.display().to_string();
        move |source| IdentityError::Io { path, source }
    };
    std::fs::create_dir_all(root).map_err(io(root))?;
    let mut file = std::fs::File::create(&temporary).map_err(io(&temporary))?;
    file.write_all(identity.encode().as_bytes())
        .and_then(|()| file.sync_all())
        .map_err(io(&temporary))?;
    std::fs::rename(&temporary, &path).map_err(io(&path))?;
    std::fs::File::open(root)
        .and_then(|directory| directory.sync_all())
        .map_err(io(root))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store(root: &Path, holds_data: bool, checkpoint_node: Option<u64>) -> Store<'_> {
        Store {
            root,
            holds_data,
            checkpoint_node,
        }
    }

    #[test]
    fn a_new_store_draws_an_id_and_keeps_it() {
        let directory = tempfile::tempdir().unwrap();
        let root = directory.path().join("jetstream");
        let mut draws = [0, 0x42].into_iter();
        let (identity, origin) =
            open(&store(&root, false, None), "n1", || draws.next().unwrap()).unwrap();
        assert_eq!(
            (identity.id, origin),
            (0x42, Origin::Created),
            "0 is never drawn"
        );
        // Read back, whatever the store holds now and the generator says.
        let (again, origin) = open(&store(&root, true, Some(7)), "n1", || 9).unwrap();
        assert_eq!((again, origin), (identity, Origin::Read));
        let text = std::fs::read_to_string(root.join(FILE)).unwrap();
        assert!(text.starts_with("tern-node 1\nname n1\nid 0000000000000042\nchecksum "));
    }

    #[test]
    fn a_lost_file_comes_back_from_the_checkpoint_or_the_legacy_hash() {
        let directory = tempfile::tempdir().unwrap();
        let root = directory.path().join("jetstream");
        let (identity, origin) = open(&store(&root, true, Some(0x77)), "n1", || 1).unwrap();
        assert_eq!((identity.id, origin), (0x77, Origin::Restored));
        std::fs::remove_file(root.join(FILE)).unwrap();
        let (identity, origin) = open(&store(&root, true, None), "n1", || 1).unwrap();
        assert_eq!(
            (identity.id, origin),
            (crate::cluster::node_id("n1"), Origin::Legacy)
        );
    }

    #[test]
    fn damage_and_another_name_refuse() {
        let directory = tempfile::tempdir().unwrap();
        let root = directory.path().join("jetstream");
        open(&store(&root, false, None), "n1", || 5).unwrap();
        let error = open(&store(&root, true, None), "n2", || 5).unwrap_err();
        assert!(
            matches!(&error, IdentityError::OtherServer { found, wanted, .. } if found == "n1" && wanted == "n2"),
            "{error}"
        );
        let path = root.join(FILE);
        let text = std::fs::read_to_string(&path).unwrap();
        for damaged in [
            text.replace("id 0000000000000005", "id 0000000000000006"),
            text[..text.len() - 3].to_string(),
            String::new(),
            text.replace("tern-node 1", "tern-node 2"),
            "x".repeat(FILE_BYTES_MAX as usize + 1),
        ] {
            std::fs::write(&path, &damaged).unwrap();
            let error = open(&store(&root, true, Some(5)), "n1", || 5).unwrap_err();
            assert!(
                matches!(error, IdentityError::Damaged { .. }),
                "{damaged:?}: {error}"
            );
            assert_eq!(
                std::fs::read_to_string(&path).unwrap(),
                damaged,
                "unchanged"
            );
        }
    }

    #[test]
    fn examining_reads_without_creating() {
        let directory = tempfile::tempdir().unwrap();
        let root = directory.path().join("jetstream");
        assert_eq!(examine(&root).unwrap(), None);
        assert!(!root.join(FILE).exists(), "nothing created");
        let (identity, _) = open(&store(&root, false, None), "n1", || 3).unwrap();
        assert_eq!(examine(&root).unwrap(), Some(identity));
        std::fs::write(root.join(FILE), "tern-node 1\n").unwrap();
        assert!(examine(&root).is_err());
    }

    #[test]
    fn decoding_is_strict() {
        let identity = NodeIdentity {
            name: "node-a".into(),
            id: u64::MAX,
        };
        let text = identity.encode();
        assert_eq!(NodeIdentity::decode(&text), Ok(identity));
        assert!(NodeIdentity::decode(&text.replace("ffff", "FFFF")).is_err());
        assert!(NodeIdentity::decode(&format!("{text}\n")).is_err());
        let zero = NodeIdentity {
            name: "z".into(),
            id: 1,
        }
        .encode()
        .replace("id 0000000000000001", "id 0000000000000000");
        assert!(NodeIdentity::decode(&zero).is_err(), "id 0 never decodes");
    }
}
