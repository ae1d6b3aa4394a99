//! The meta group's state, sans-IO: the entries its log holds (what the
//! leader's [`super::Catalog::check`] accepted, with the placement it
//! chose), the checkpoint every member keeps on disk (and sends as the
//! group's snapshot), and placement.
//!
//! Both are JSON (they are rare and small, and an operator can read them):
//!
//! ```text
//! entry:      {"op":"create","stream":STORED,"peers":[id,...],"created":ns,"reply":"subject"}
//!             {"op":"update","stream":STORED,"create":bool,"reply":"subject"}
//!             (create: a create of an existing stream with its config,
//!             answered with the stream's info)
//!             {"op":"delete","name":"NAME","reply":"subject"}
//!             {"op":"name","node":id,"name":"n4"}  (a node's server name,
//!             recorded before it joins: `membership`)
//!             STORED = {"group":u64,"config":{...stream config...}}; "reply" may be absent
//! checkpoint: {"applied_index":u64,"applied_term":u64,"term":u64,"vote":u64,
//!              "voters":[id,...],"streams":[{"stream":STORED,"peers":[...],"created":ns},...],
//!              "names":[{"id":u64,"name":"n1"},...],"removed":[id,...],"node":u64}
//!             ("names": the server name of each node the group knew, so a
//!             node that is down is still named; "removed": the ids removed
//!             from the group for good, never taken back; "node": this member's own
//!             id, the second copy of `jetstream/node`, never sent: both
//!             may be absent in a checkpoint of an earlier version)
//! ```
//!
//! The checkpoint is written in a `config`-format file (checksummed,
//! replaced atomically: `persist`), `jetstream/meta/state` on shard 0.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{json, Value};
use tern_raft::NodeId;

use super::super::stream::config::StreamConfig;

/// The meta group's Raft group id (streams' groups are odd).
pub const META_GROUP: u64 = 0;

/// Where a stream lives: its Raft group and the nodes holding it.
#[derive(Debug, Clone, PartialEq)]
pub struct Placement {
    pub group: u64,
    pub peers: Vec<NodeId>,
    pub created_unix_ns: u64,
}

/// One committed change of the catalog. `reply` is the client's inbox:
/// the node that carries the change out answers there.
#[derive(Debug, Clone, PartialEq)]
pub enum MetaEntry {
    Create {
        config: StreamConfig,
        placement: Placement,
        reply: Option<String>,
    },
    Update {
        config: StreamConfig,
        group: u64,
        create: bool,
        reply: Option<String>,
    },
    Delete {
        name: String,
        reply: Option<String>,
    },
    /// A replicated stream's voters change (a peer removed and replaced,
    /// or `num_replicas` changed with `config`).
    Remap {
        name: String,
        group: u64,
        peers: Vec<NodeId>,
        config: Option<StreamConfig>,
        reply: Option<String>,
    },
    /// A node's server name, recorded before it joins the group.
    Name {
        node: NodeId,
        name: String,
    },
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MetaDecodeError {
    #[error("not JSON: {0}")]
    Json(String),
    #[error("field {0:?} is missing or has the wrong type")]
    Field(&'static str),
    #[error("unknown operation {0:?}")]
    Operation(String),
    #[error("stream config: {0}")]
    Config(String),
}

fn stored(group: u64, config: &StreamConfig) -> Value {
    let config: Value =
        serde_json::from_str(&config.to_stored_json()).expect("a stored config is JSON");
    json!({ "group": group, "config": config })
}

fn parse_stored(value: &Value) -> Result<(u64, StreamConfig), MetaDecodeError> {
    let group = value
        .get("group")
        .and_then(Value::as_u64)
        .ok_or(MetaDecodeError::Field("group"))?;
    let config = value
        .get("config")
        .ok_or(MetaDecodeError::Field("config"))?;
    let config = StreamConfig::from_stored_json(config.to_string().as_bytes())
        .map_err(|error| MetaDecodeError::Config(format!("{error:?}")))?;
    Ok((group, config))
}

fn peers_of(value: &Value) -> Result<Vec<NodeId>, MetaDecodeError> {
    value
        .get("peers")
        .and_then(Value::as_array)
        .ok_or(MetaDecodeError::Field("peers"))?
        .iter()
        .map(|peer| peer.as_u64().ok_or(MetaDecodeError::Field("peers")))
        .collect()
}

fn u64_of(value: &Value, field: &'static str) -> Result<u64, MetaDecodeError> {
    value
        .get(field)
        .and_then(Value::as_u64)
        .ok_or(MetaDecodeError::Field(field))
}

fn reply_of(value: &Value) -> Option<String> {
    value
        .get("reply")
        .and_then(Value::as_str)
        .map(str::to_string)
}

impl MetaEntry {
    pub fn encode(&self) -> Vec<u8> {
        let mut value = match self {
            MetaEntry::Create {
                config, placement, ..
            } => json!({
                "op": "create",
                "stream": stored(placement.group, config),
                "peers": placement.peers,
                "created": placement.created_unix_ns,
            }),
            MetaEntry::Update {
                config,
                group,
                create,
                ..
            } => json!({
                "op": "update",
                "stream": stored(*group, config),
                "create": create,
            }),
            MetaEntry::Delete { name, .. } => json!({ "op": "delete", "name": name }),
            MetaEntry::Remap {
                name,
                group,
                peers,
                config,
                ..
            } => {
                let mut value =
                    json!({ "op": "remap", "name": name, "group": group, "peers": peers });
                if let Some(config) = config {
                    value["stream"] = stored(*group, config);
                }
                value
            }
            MetaEntry::Name { node, name } => json!({ "op": "name", "node": node, "name": name }),
        };
        let reply = match self {
            MetaEntry::Create { reply, .. }
            | MetaEntry::Update { reply, .. }
            | MetaEntry::Delete { reply, .. }
            | MetaEntry::Remap { reply, .. } => reply.as_ref(),
            MetaEntry::Name { .. } => None,
        };
        if let Some(reply) = reply {
            value["reply"] = Value::String(reply.clone());
        }
        serde_json::to_vec(&value).expect("JSON encodes")
    }

    pub fn decode(bytes: &[u8]) -> Result<MetaEntry, MetaDecodeError> {
        let value: Value = serde_json::from_slice(bytes)
            .map_err(|error| MetaDecodeError::Json(error.to_string()))?;
        let operation = value
            .get("op")
            .and_then(Value::as_str)
            .ok_or(MetaDecodeError::Field("op"))?;
        let reply = reply_of(&value);
        match operation {
            "create" => {
                let (group, config) = parse_stored(
                    value
                        .get("stream")
                        .ok_or(MetaDecodeError::Field("stream"))?,
                )?;
                Ok(MetaEntry::Create {
                    config,
                    placement: Placement {
                        group,
                        peers: peers_of(&value)?,
                        created_unix_ns: u64_of(&value, "created")?,
                    },
                    reply,
                })
            }
            "update" => {
                let (group, config) = parse_stored(
                    value
                        .get("stream")
                        .ok_or(MetaDecodeError::Field("stream"))?,
                )?;
                Ok(MetaEntry::Update {
                    config,
                    group,
                    create: value
                        .get("create")
                        .and_then(Value::as_bool)
                        .ok_or(MetaDecodeError::Field("create"))?,
                    reply,
                })
            }
            "delete" => Ok(MetaEntry::Delete {
                name: value
                    .get("name")
                    .and_then(Value::as_str)
                    .ok_or(MetaDecodeError::Field("name"))?
                    .to_string(),
                reply,
            }),
            "remap" => Ok(MetaEntry::Remap {
                name: value
                    .get("name")
                    .and_then(Value::as_str)
                    .ok_or(MetaDecodeError::Field("name"))?
                    .to_string(),
                group: u64_of(&value, "group")?,
                peers: peers_of(&value)?,
                config: value
                    .get("stream")
                    .map(|stream| parse_stored(stream).map(|(_, config)| config))
                    .transpose()?,
                reply,
            }),
            "name" => Ok(MetaEntry::Name {
                node: u64_of(&value, "node")?,
                name: value
                    .get("name")
                    .and_then(Value::as_str)
                    .filter(|name| !name.is_empty())
                    .ok_or(MetaDecodeError::Field("name"))?
                    .to_string(),
            }),
            other => Err(MetaDecodeError::Operation(other.to_string())),
        }
    }
}

/// What a member keeps of the meta group: its state as of
/// `applied_index`, and the Raft state the journal no longer holds once
/// it recycles.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct MetaCheckpoint {
    pub applied_index: u64,
    pub applied_term: u64,
    pub term: u64,
    pub vote: u64,
    pub voters: Vec<NodeId>,
    pub streams: BTreeMap<String, (StreamConfig, Placement)>,
    /// The server name of every node the group has known (voters, and
    /// nodes removed since, until they are forgotten).
    pub names: BTreeMap<NodeId, String>,
    /// Ids removed from the group for good (never taken back).
    pub removed: BTreeSet<NodeId>,
    /// This member's own id (0: not recorded). Local: a snapshot received
    /// from the leader keeps the receiver's.
    pub node: NodeId,
}

impl MetaCheckpoint {
    pub fn encode(&self) -> Vec<u8> {
        let streams: Vec<Value> = self
            .streams
            .values()
            .map(|(config, placement)| {
                json!({
                    "stream": stored(placement.group, config),
                    "peers": placement.peers,
                    "created": placement.created_unix_ns,
                })
            })
            .collect();
        let names: Vec<Value> = self
            .names
            .iter()
            .map(|(id, name)| json!({ "id": id, "name": name }))
            .collect();
        let mut value = json!({
            "applied_index": self.applied_index,
            "applied_term": self.applied_term,
            "term": self.term,
            "vote": self.vote,
            "voters": self.voters,
            "streams": streams,
            "names": names,
            "removed": self.removed,
        });
        if self.node != 0 {
            value["node"] = json!(self.node);
        }
        serde_json::to_vec(&value).expect("JSON encodes")
    }

    pub fn decode(bytes: &[u8]) -> Result<MetaCheckpoint, MetaDecodeError> {
        let value: Value = serde_json::from_slice(bytes)
            .map_err(|error| MetaDecodeError::Json(error.to_string()))?;
        let voters = value
            .get("voters")
            .and_then(Value::as_array)
            .ok_or(MetaDecodeError::Field("voters"))?
            .iter()
            .map(|voter| voter.as_u64().ok_or(MetaDecodeError::Field("voters")))
            .collect::<Result<Vec<_>, _>>()?;
        let mut streams = BTreeMap::new();
        for entry in value
            .get("streams")
            .and_then(Value::as_array)
            .ok_or(MetaDecodeError::Field("streams"))?
        {
            let (group, config) = parse_stored(
                entry
                    .get("stream")
                    .ok_or(MetaDecodeError::Field("stream"))?,
            )?;
            let placement = Placement {
                group,
                peers: peers_of(entry)?,
                created_unix_ns: u64_of(entry, "created")?,
            };
            streams.insert(config.name.clone(), (config, placement));
        }
        let mut names = BTreeMap::new();
        if let Some(listed) = value.get("names") {
            for entry in listed.as_array().ok_or(MetaDecodeError::Field("names"))? {
                let name = entry
                    .get("name")
                    .and_then(Value::as_str)
                    .ok_or(MetaDecodeError::Field("names"))?;
                names.insert(u64_of(entry, "id")?, name.to_string());
            }
        }
        let mut removed = BTreeSet::new();
        if let Some(listed) = value.get("removed") {
            for id in listed.as_array().ok_or(MetaDecodeError::Field("removed"))? {
                removed.insert(id.as_u64().ok_or(MetaDecodeError::Field("removed"))?);
            }
        }
        let node = match value.get("node") {
            Some(node) => node.as_u64().ok_or(MetaDecodeError::Field("node"))?,
            None => 0,
        };
        Ok(MetaCheckpoint {
            applied_index: u64_of(&value, "applied_index")?,
            applied_term: u64_of(&value, "applied_term")?,
            term: u64_of(&value, "term")?,
            vote: u64_of(&value, "vote")?,
            voters,
            streams,
            names,
            removed,
            node,
        })
    }

    /// Records a committed entry (the stream's host carries it out).
    pub fn apply(&mut self, entry: &MetaEntry) {
        match entry {
            MetaEntry::Create {
                config, placement, ..
            } => {
                self.streams
                    .entry(config.name.clone())
                    .or_insert_with(|| (config.clone(), placement.clone()));
            }
            MetaEntry::Update { config, create, .. } => {
                if *create {
                    return;
                }
                if let Some((current, _)) = self.streams.get_mut(&config.name) {
                    *current = config.clone();
                }
            }
            MetaEntry::Delete { name, .. } => {
                self.streams.remove(name);
            }
            MetaEntry::Remap {
                name,
                peers,
                config,
                ..
            } => {
                if let Some((current, placement)) = self.streams.get_mut(name) {
                    placement.peers = peers.clone();
                    if let Some(config) = config {
                        *current = config.clone();
                    }
                }
            }
            MetaEntry::Name { node, name } => {
                self.names.insert(*node, name.clone());
            }
        }
    }

    /// A committed membership change of the group itself: `node` becomes
    /// a voter (`added`) or leaves for good.
    pub fn apply_membership(&mut self, node: NodeId, added: bool) {
        assert!(node != 0, "a node id is never 0");
        if added {
            assert!(
                !self.removed.contains(&node),
                "a removed id never comes back"
            );
            if !self.voters.contains(&node) {
                self.voters.push(node);
                self.voters.sort_unstable();
            }
        } else {
            self.voters.retain(|voter| *voter != node);
            self.removed.insert(node);
        }
    }

    /// Streams placed on each of `candidates`.
    pub fn load(&self, node: NodeId) -> usize {
        self.streams
            .values()
            .filter(|(_, placement)| placement.peers.contains(&node))
            .count()
    }
}

/// Picks `replicas` distinct nodes among `candidates` (the nodes up),
/// those holding the fewest streams first, ties broken by `tie_break`
/// (a random number per candidate) so streams spread. `None`: too few.
pub fn place(
    replicas: usize,
    candidates: &[(NodeId, usize)],
    tie_break: impl Fn(NodeId) -> u64,
) -> Option<Vec<NodeId>> {
    assert!(replicas > 0);
    if candidates.len() < replicas {
        return None;
    }
    let mut ranked: Vec<(usize, u64, NodeId)> = candidates
        .iter()
        .map(|&(node, load)| (load, tie_break(node), node))
        .collect();
    ranked.sort_unstable();
    ranked.dedup_by_key(|(_, _, node)| *node);
    if ranked.len() < replicas {
        return None;
    }
    Some(
        ranked[..replicas]
            .iter()
            .map(|&(_, _, node)| node)
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(name: &str) -> StreamConfig {
        crate::jetstream::stream::config::parse(
            name,
            format!(r#"{{"name":"{name}","subjects":["{name}.>"]}}"#).as_bytes(),
            true,
        )
        .expect("a valid config")
    }

    #[test]
    fn entries_round_trip() {
        let entries = [
            MetaEntry::Create {
                config: config("ORDERS"),
                placement: Placement {
                    group: 7,
                    peers: vec![3, 1],
                    created_unix_ns: 42,
                },
                reply: Some("_INBOX.x".into()),
            },
            MetaEntry::Update {
                config: config("ORDERS"),
                group: 7,
                create: true,
                reply: None,
            },
            MetaEntry::Delete {
                name: "ORDERS".into(),
                reply: Some("r".into()),
            },
            MetaEntry::Remap {
                name: "ORDERS".into(),
                group: 7,
                peers: vec![3, 9, 1],
                config: None,
                reply: Some("r".into()),
            },
            MetaEntry::Remap {
                name: "ORDERS".into(),
                group: 7,
                peers: vec![3, 9, 1, 4, 5],
                config: Some(config("ORDERS")),
                reply: None,
            },
        ];
        for entry in entries {
            assert_eq!(MetaEntry::decode(&entry.encode()).unwrap(), entry);
        }
        assert!(matches!(
            MetaEntry::decode(br#"{"op":"rename"}"#),
            Err(MetaDecodeError::Operation(_))
        ));
        assert!(MetaEntry::decode(b"\xff").is_err());
    }

    #[test]
    fn checkpoint_round_trips_and_applies() {
        let mut checkpoint = MetaCheckpoint {
            applied_index: 9,
            applied_term: 2,
            term: 3,
            vote: 5,
            voters: vec![1, 3, 5],
            ..MetaCheckpoint::default()
        };
        checkpoint.apply(&MetaEntry::Create {
            config: config("A"),
            placement: Placement {
                group: 11,
                peers: vec![5],
                created_unix_ns: 1,
            },
            reply: None,
        });
        assert_eq!(checkpoint.load(5), 1);
        assert_eq!(checkpoint.load(1), 0);
        let decoded = MetaCheckpoint::decode(&checkpoint.encode()).unwrap();
        assert_eq!(decoded, checkpoint);
        checkpoint.apply(&MetaEntry::Remap {
            name: "A".into(),
            group: 11,
            peers: vec![1],
            config: None,
            reply: None,
        });
        assert_eq!((checkpoint.load(5), checkpoint.load(1)), (0, 1));
        checkpoint.apply(&MetaEntry::Delete {
            name: "A".into(),
            reply: None,
        });
        assert!(checkpoint.streams.is_empty());
    }

    #[test]
    fn placement_prefers_the_least_loaded_and_never_repeats_a_node() {
        let candidates = [(1, 4), (2, 0), (3, 1), (2, 0)];
        assert_eq!(place(2, &candidates, |_| 0), Some(vec![2, 3]));
        assert_eq!(place(3, &candidates, |_| 0), Some(vec![2, 3, 1]));
        assert_eq!(place(4, &candidates, |_| 0), None);
        // Ties go by the tie break.
        let tied = [(1, 0), (2, 0)];
        assert_eq!(place(1, &tied, |node| 10 - node), Some(vec![2]));
    }
}
