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
//!             STORED = {"group":u64,"config":{...stream config...}}; "reply" may be absent
//! checkpoint: {"applied_index":u64,"applied_term":u64,"term":u64,"vote":u64,
//!              "voters":[id,...],"streams":[{"stream":STORED,"peers":[...],"created":ns},...]}
//! ```
//!
//! The checkpoint is written in a `config`-format file (checksummed,
//! replaced atomically: `persist`), `jetstream/meta/state` on shard 0.

use std::collections::BTreeMap;

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
        };
        let (MetaEntry::Create { reply, .. }
        | MetaEntry::Update { reply, .. }
        | MetaEntry::Delete { reply, .. }
        | MetaEntry::Remap { reply, .. }) = self;
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
        serde_json::to_vec(&json!({
            "applied_index": self.applied_index,
            "applied_term": self.applied_term,
            "term": self.term,
            "vote": self.vote,
            "voters": self.voters,
            "streams": streams,
        }))
        .expect("JSON encodes")
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
        Ok(MetaCheckpoint {
            applied_index: u64_of(&value, "applied_index")?,
            applied_term: u64_of(&value, "applied_term")?,
            term: u64_of(&value, "term")?,
            vote: u64_of(&value, "vote")?,
            voters,
            streams,
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
