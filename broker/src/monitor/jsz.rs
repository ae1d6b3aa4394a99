//! `/jsz`: nats-server's `JSInfo` (`server/monitor.go`: `HandleJsz`,
//! `Jsz`, `accountDetail`), its options and its field order, rendered
//! from what this node's shards gathered (pure; the HTTP side is
//! `http.rs`). tern has one account, `$G`.
//!
//! As nats-server's, a node lists the streams it holds a replica of (not
//! every stream of the cluster), each with its `cluster` block as this
//! replica sees it, and with `consumers=true` the consumers this replica
//! holds. tern adds, after nats-server's fields: `journal` at the top,
//! and in each stream `shard` (its owner shard), `failure` (why it
//! stopped, or that it is offline) and, replicated, `raft` (its group as
//! this node sees it; `monitor::cluster::stream_raft_json`).
//!
//! The body is written compact in nats-server's field order, then
//! indented as Go's `json.MarshalIndent(v, "", "  ")` writes it
//! ([`indent`]).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::jetstream::api::json;
use crate::jetstream::api::responses::{self, ClusterBlock};
use crate::jetstream::listing::NodeUsage;
use crate::jetstream::replication::{MetaStatus, StreamGroupReport};
use crate::jetstream::stream::config::{StorageType, StreamConfig, API_LEVEL};
use crate::jetstream::{Gathered, OfflineStream, StreamSummary};
use crate::monitor::cluster::{self, parse_go_bool, BadBoolean};

/// tern's one account.
pub const ACCOUNT: &str = "$G";
/// nats-server's page of accounts when `limit` is 0 or absent.
pub const ACCOUNTS_LIMIT_DEFAULT: i64 = 1024;
/// nats-server's answer (400) to `leader-only=true` on a server that does
/// not lead the meta group (or without JetStream).
pub const NOT_LEADER: &str = "filtered response: not leader";
/// An account's reservations without account limits: nats-server's -1 as
/// a uint64.
const RESERVED_UNLIMITED: u64 = u64::MAX;

/// `/jsz`'s query, nats-server's names (`HandleJsz`), with the defaults
/// `Jsz` applies: `consumers` implies `streams`, `streams` without `acc`
/// implies `accounts`, `limit` 0 is 1024 and a negative `offset` 0.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JszOptions {
    /// `acc`: that account's details (whatever `accounts` says).
    pub account: Option<String>,
    /// `accounts`: every account's details (a page of them).
    pub accounts: bool,
    /// `streams`: each account's streams.
    pub streams: bool,
    /// `consumers`: each stream's consumers.
    pub consumers: bool,
    /// `direct-consumers`: read (a bad value is refused); tern has none.
    pub direct_consumers: bool,
    /// `config`: each stream's and consumer's config.
    pub config: bool,
    /// `leader-only`: answer only on the meta leader (else 400).
    pub leader_only: bool,
    /// `offset`, `limit`: the page of accounts (sorted by name); a
    /// negative limit is every account.
    pub offset: i64,
    pub limit: i64,
    /// `raft`: Raft group names, and the counts of what this node leads.
    pub raft: bool,
    /// `stream-leader-only`: only the streams this node leads.
    pub stream_leader_only: bool,
}

impl JszOptions {
    /// From the query's decoded pairs, checked in nats-server's order (the
    /// first bad value is the 400 text).
    pub fn parse(query: &BTreeMap<String, String>) -> Result<JszOptions, JszOptionError> {
        let boolean = |name: &str| parse_go_bool(query, name);
        let accounts = boolean("accounts")?;
        let streams = boolean("streams")?;
        let consumers = boolean("consumers")?;
        let direct_consumers = boolean("direct-consumers")?;
        let config = boolean("config")?;
        let offset = parse_go_int(query, "offset")?;
        let limit = parse_go_int(query, "limit")?;
        let leader_only = boolean("leader-only")?;
        let raft = boolean("raft")?;
        let stream_leader_only = boolean("stream-leader-only")?;
        let account = query.get("acc").filter(|acc| !acc.is_empty()).cloned();
        let streams = streams || consumers;
        Ok(JszOptions {
            accounts: accounts || (streams && account.is_none()),
            account,
            streams,
            consumers,
            direct_consumers,
            config,
            leader_only,
            offset: offset.max(0),
            limit: if limit == 0 {
                ACCOUNTS_LIMIT_DEFAULT
            } else {
                limit
            },
            raft,
            stream_leader_only,
        })
    }

    /// Whether `account_details` lists tern's account: asked by name, or
    /// on the page of every account.
    pub fn lists_account(&self) -> bool {
        if self.account.as_deref() == Some(ACCOUNT) {
            return true;
        }
        // A page of the one account: it is there unless the offset
        // passed it (a negative limit takes every account).
        self.accounts && (self.limit < 0 || self.offset == 0)
    }

    /// Whether the account's streams are listed with their consumers.
    pub fn lists_consumers(&self) -> bool {
        self.lists_account() && self.streams && self.consumers
    }
}

/// A `/jsz` option nats-server would refuse, with its 400 text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JszOptionError {
    #[error(transparent)]
    Boolean(#[from] BadBoolean),
    #[error("Error decoding int for '{name}': strconv.Atoi: parsing {}: {}", json::go_quote(text), if *out_of_range { "value out of range" } else { "invalid syntax" })]
    Int {
        name: String,
        text: String,
        out_of_range: bool,
    },
}

/// `strconv.Atoi` as nats-server's `decodeInt` reads a parameter (absent
/// or empty: 0), with its 400 text.
fn parse_go_int(query: &BTreeMap<String, String>, name: &str) -> Result<i64, JszOptionError> {
    let Some(text) = query.get(name).filter(|text| !text.is_empty()) else {
        return Ok(0);
    };
    text.parse::<i64>().map_err(|error| JszOptionError::Int {
        name: name.to_string(),
        text: text.clone(),
        out_of_range: matches!(
            error.kind(),
            std::num::IntErrorKind::PosOverflow | std::num::IntErrorKind::NegOverflow
        ),
    })
}

/// The server's JetStream settings as `/jsz`'s `config` shows them
/// (nats-server's `JetStreamConfig`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerSettings {
    /// -1: no limit (nats-server reports the limit it computed).
    pub max_memory: i64,
    pub max_storage: i64,
    /// `<store_dir>/jetstream`.
    pub store_dir: String,
    /// `--sync always`.
    pub sync_always: bool,
}

/// What this node has, for a JetStream-enabled `/jsz`.
pub struct JetStreamView<'a> {
    /// Every shard's part (with consumers when [`JszOptions::lists_consumers`]).
    pub parts: &'a [Gathered],
    /// In a cluster: the meta group.
    pub meta: Option<&'a MetaStatus>,
    /// In a cluster: its name.
    pub cluster: Option<&'a str>,
    pub settings: ServerSettings,
    /// The account's usage (in a cluster every node's a route reaches),
    /// needed when the account is listed.
    pub account_usage: NodeUsage,
    /// tern's `journal` line.
    pub journal: String,
}

/// Everything `/jsz` is rendered from.
pub struct JszInput<'a> {
    pub server_id: &'a str,
    pub server_name: &'a str,
    pub now_unix_ns: u64,
    /// `None`: JetStream is off.
    pub jetstream: Option<JetStreamView<'a>>,
}

/// `leader-only=true` on a server that does not lead: nats-server answers
/// 400 [`NOT_LEADER`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NotLeader;

/// The `/jsz` body (compact JSON, nats-server's field order).
pub fn render(options: &JszOptions, input: &JszInput) -> Result<String, NotLeader> {
    let Some(jetstream) = &input.jetstream else {
        if options.leader_only {
            return Err(NotLeader);
        }
        return Ok(disabled(input));
    };
    let leads_meta = jetstream
        .meta
        .is_none_or(|meta| meta.view.as_ref().is_some_and(|view| view.is_leader()));
    if options.leader_only && !leads_meta {
        return Err(NotLeader);
    }
    let totals = Totals::of(jetstream);
    let mut out = String::with_capacity(4096);
    let _ = write!(
        out,
        "{{\"memory\":{},\"storage\":{},\"reserved_memory\":0,\"reserved_storage\":0,\"accounts\":1,\"ha_assets\":{},\"api\":{{\"level\":{API_LEVEL},\"total\":{},\"errors\":{}}}",
        totals.memory, totals.storage, totals.ha_assets, totals.api_total, totals.api_errors
    );
    write_server(&mut out, input);
    out.push_str(",\"config\":");
    write_settings(&mut out, &jetstream.settings);
    out.push_str(",\"limits\":{}");
    let _ = write!(out, ",\"streams\":{}", totals.streams);
    if options.raft && totals.streams_leader > 0 {
        let _ = write!(out, ",\"streams_leader\":{}", totals.streams_leader);
    }
    let _ = write!(out, ",\"consumers\":{}", totals.consumers);
    if options.raft && totals.consumers_leader > 0 {
        let _ = write!(out, ",\"consumers_leader\":{}", totals.consumers_leader);
    }
    let _ = write!(
        out,
        ",\"messages\":{},\"bytes\":{}",
        totals.messages, totals.bytes
    );
    if let Some(meta) = jetstream.meta {
        out.push_str(",\"meta_cluster\":");
        cluster::write_meta_cluster(&mut out, meta);
    }
    if options.lists_account() {
        out.push_str(",\"account_details\":[");
        write_account(&mut out, options, input, jetstream);
        out.push(']');
    }
    out.push_str(",\"total\":1,\"journal\":");
    json::write_string(&mut out, &jetstream.journal);
    out.push('}');
    Ok(out)
}

/// nats-server's `/jsz` without JetStream.
fn disabled(input: &JszInput) -> String {
    let mut out = String::with_capacity(512);
    out.push_str(
        "{\"memory\":0,\"storage\":0,\"reserved_memory\":0,\"reserved_storage\":0,\"accounts\":0,\"ha_assets\":0,\"api\":{\"level\":0,\"total\":0,\"errors\":0}",
    );
    write_server(&mut out, input);
    out.push_str(",\"disabled\":true,\"config\":{\"max_memory\":0,\"max_storage\":0},\"streams\":0,\"consumers\":0,\"messages\":0,\"bytes\":0,\"total\":0}");
    out
}

/// `,"server_id":…,"now":…`.
fn write_server(out: &mut String, input: &JszInput) {
    out.push_str(",\"server_id\":");
    json::write_string(out, input.server_id);
    out.push_str(",\"now\":");
    json::write_time(out, input.now_unix_ns);
}

fn write_settings(out: &mut String, settings: &ServerSettings) {
    let _ = write!(
        out,
        "{{\"max_memory\":{},\"max_storage\":{}",
        settings.max_memory, settings.max_storage
    );
    if !settings.store_dir.is_empty() {
        out.push_str(",\"store_dir\":");
        json::write_string(out, &settings.store_dir);
    }
    if settings.sync_always {
        out.push_str(",\"sync_always\":true");
    }
    out.push('}');
}

/// This node's figures over every stream it holds (whatever the options
/// list, as nats-server's).
#[derive(Debug, Default, PartialEq, Eq)]
struct Totals {
    memory: u64,
    storage: u64,
    /// Replicated groups here: the meta group's and the replicated
    /// streams' (nats-server's Raft nodes).
    ha_assets: usize,
    api_total: u64,
    api_errors: u64,
    streams: usize,
    streams_leader: usize,
    consumers: usize,
    consumers_leader: usize,
    messages: u64,
    bytes: u64,
}

impl Totals {
    fn of(jetstream: &JetStreamView) -> Totals {
        let mut totals = Totals {
            ha_assets: usize::from(jetstream.meta.is_some_and(|meta| meta.view.is_some())),
            ..Totals::default()
        };
        for part in jetstream.parts {
            totals.api_total += part.api_total;
            totals.api_errors += part.api_errors;
            totals.ha_assets += part.stream_groups.len();
            totals.streams += part.streams.len() + part.offline.len();
            for stream in &part.streams {
                totals.consumers += stream.consumers;
                totals.messages += stream.state.messages;
                totals.bytes += stream.state.bytes;
                match stream.config.storage {
                    StorageType::Memory => totals.memory += stream.state.bytes,
                    StorageType::File => totals.storage += stream.state.bytes,
                }
                if stream.leading {
                    totals.streams_leader += 1;
                    totals.consumers_leader += stream.consumers;
                }
            }
        }
        totals
    }
}

/// tern's account: nats-server's `AccountDetail` (the account's usage,
/// its reservations unlimited) and, with `streams`, its streams here.
fn write_account(
    out: &mut String,
    options: &JszOptions,
    input: &JszInput,
    jetstream: &JetStreamView,
) {
    let usage = &jetstream.account_usage;
    out.push_str("{\"name\":");
    json::write_string(out, ACCOUNT);
    out.push_str(",\"id\":");
    json::write_string(out, ACCOUNT);
    let _ = write!(
        out,
        ",\"memory\":{},\"storage\":{},\"reserved_memory\":{RESERVED_UNLIMITED},\"reserved_storage\":{RESERVED_UNLIMITED},\"accounts\":0,\"ha_assets\":0,\"api\":{{\"level\":0,\"total\":{},\"errors\":{}}}",
        usage.memory, usage.storage, usage.api_total, usage.api_errors
    );
    if options.streams {
        let mut details = Vec::new();
        for part in jetstream.parts {
            for stream in &part.streams {
                let view = StreamView::of(stream, part, input.server_name, jetstream.cluster);
                if options.stream_leader_only && !view.led_here(input.server_name) {
                    continue;
                }
                let mut detail = String::with_capacity(1024);
                write_stream(&mut detail, options, &view);
                details.push((stream.name.as_str(), detail));
            }
            // Streams whose files could not be opened (tern: nats-server
            // does not list them); no leader, so never led here.
            if !options.stream_leader_only {
                for stream in &part.offline {
                    let mut detail = String::with_capacity(256);
                    write_offline_stream(&mut detail, options, stream);
                    details.push((stream.name.as_str(), detail));
                }
            }
        }
        if !details.is_empty() {
            details.sort_by(|a, b| a.0.cmp(b.0));
            out.push_str(",\"stream_detail\":[");
            for (index, (_, detail)) in details.iter().enumerate() {
                if index > 0 {
                    out.push(',');
                }
                out.push_str(detail);
            }
            out.push(']');
        }
    }
    out.push('}');
}

/// One running stream and what this node knows of it.
struct StreamView<'a> {
    stream: &'a StreamSummary,
    cluster: ClusterBlock,
    /// Replicated and its group runs here.
    group: Option<&'a StreamGroupReport>,
    /// In a cluster (Raft group names are written).
    clustered: bool,
    consumers: Option<&'a Vec<crate::jetstream::stream::ConsumerDetail>>,
}

impl<'a> StreamView<'a> {
    fn of(
        stream: &'a StreamSummary,
        part: &'a Gathered,
        server_name: &str,
        cluster: Option<&str>,
    ) -> StreamView<'a> {
        let group = part
            .stream_groups
            .iter()
            .find(|report| report.name == stream.name);
        // nats-server's `clusterInfo`: a stream without a Raft node is led
        // by this server; on one server the block has no cluster name.
        let block = match (group, stream.replicated) {
            (Some(report), _) => report.cluster.clone(),
            // Replicated, its group not running here.
            (None, true) => ClusterBlock {
                name: cluster.map(str::to_string),
                ..ClusterBlock::default()
            },
            (None, false) => ClusterBlock {
                name: cluster.map(str::to_string),
                leader: Some(server_name.to_string()),
                replicas: Vec::new(),
            },
        };
        StreamView {
            stream,
            cluster: block,
            group,
            clustered: cluster.is_some(),
            consumers: part.consumer_details.get(&stream.name),
        }
    }

    fn led_here(&self, server_name: &str) -> bool {
        self.cluster.leader.as_deref() == Some(server_name)
    }
}

/// nats-server's `StreamDetail`, then tern's `shard`, `failure`, `raft`.
fn write_stream(out: &mut String, options: &JszOptions, view: &StreamView) {
    let stream = view.stream;
    out.push_str("{\"name\":");
    json::write_string(out, &stream.name);
    out.push_str(",\"created\":");
    json::write_time(out, stream.created_unix_ns);
    out.push_str(",\"cluster\":");
    view.cluster.write_json(out);
    if options.config {
        write_config(out, &stream.config);
    }
    out.push_str(",\"state\":");
    let state = crate::jetstream::stream::info_state(
        &stream.state,
        stream.last_unix_ns,
        &stream.config,
        stream.consumers,
    );
    responses::write_state(out, &state);
    let consumers = view
        .consumers
        .filter(|_| options.consumers)
        .map_or(&[][..], Vec::as_slice);
    if !consumers.is_empty() {
        out.push_str(",\"consumer_detail\":[");
        for (index, consumer) in consumers.iter().enumerate() {
            if index > 0 {
                out.push(',');
            }
            out.push_str(&consumer.json);
        }
        out.push(']');
    }
    if options.raft && view.clustered {
        let group = raft_group_name(stream.group);
        out.push_str(",\"stream_raft_group\":");
        json::write_string(out, &group);
        // A durable rides in the stream's log: its group is the stream's.
        // An ephemeral is in no log, so in no group.
        let logged: Vec<&str> = consumers
            .iter()
            .filter(|consumer| consumer.logged)
            .map(|consumer| consumer.name.as_str())
            .collect();
        if !logged.is_empty() {
            out.push_str(",\"consumer_raft_groups\":[");
            for (index, name) in logged.iter().enumerate() {
                if index > 0 {
                    out.push(',');
                }
                out.push_str("{\"name\":");
                json::write_string(out, name);
                out.push_str(",\"raft_group\":");
                json::write_string(out, &group);
                out.push('}');
            }
            out.push(']');
        }
    }
    let _ = write!(out, ",\"shard\":{}", stream.shard);
    if let Some(failure) = &stream.failure {
        out.push_str(",\"failure\":");
        json::write_string(out, failure);
    }
    if let Some(report) = view.group {
        out.push_str(",\"raft\":");
        out.push_str(&cluster::stream_raft_json(report).to_string());
    }
    out.push('}');
}

/// A stream whose files could not be opened: its name, Go's zero time,
/// an empty state, its config when asked and readable, and tern's
/// `shard` and `failure`.
fn write_offline_stream(out: &mut String, options: &JszOptions, stream: &OfflineStream) {
    out.push_str("{\"name\":");
    json::write_string(out, &stream.name);
    out.push_str(",\"created\":");
    json::write_time(out, 0);
    if let Some(config) = stream.config.as_deref().filter(|_| options.config) {
        write_config(out, config);
    }
    out.push_str(",\"state\":");
    responses::write_state(out, &responses::StreamState::default());
    let _ = write!(out, ",\"shard\":{},\"failure\":", stream.shard);
    json::write_string(out, &format!("offline: {}", stream.reason));
    out.push('}');
}

/// `,"config":…`: the config as stored (nats-server's
/// `targetStreamConfig`: no `_nats.*` metadata of the answering server).
fn write_config(out: &mut String, config: &StreamConfig) {
    out.push_str(",\"config\":");
    config.write_json(out, false);
}

/// A stream's Raft group as `stream_raft_group` names it: tern's group id
/// (`raft.group`), in decimal.
pub fn raft_group_name(group: u64) -> String {
    group.to_string()
}

/// `compact` JSON indented as Go's `json.MarshalIndent(v, "", "  ")`
/// writes it: members one a line, `": "` after keys, `{}` and `[]` when
/// empty, keys in the order written.
pub fn indent(compact: &str) -> String {
    let mut out = String::with_capacity(compact.len() * 2);
    let mut depth = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    let mut chars = compact.chars().peekable();
    let newline = |out: &mut String, depth: usize| {
        out.push('\n');
        for _ in 0..depth {
            out.push_str("  ");
        }
    };
    while let Some(character) = chars.next() {
        if in_string {
            out.push(character);
            match (escaped, character) {
                (true, _) => escaped = false,
                (false, '\\') => escaped = true,
                (false, '"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match character {
            '"' => {
                in_string = true;
                out.push(character);
            }
            '{' | '[' => {
                out.push(character);
                let close = if character == '{' { '}' } else { ']' };
                if chars.peek() == Some(&close) {
                    out.push(close);
                    chars.next();
                } else {
                    depth += 1;
                    newline(&mut out, depth);
                }
            }
            '}' | ']' => {
                depth = depth.saturating_sub(1);
                newline(&mut out, depth);
                out.push(character);
            }
            ',' => {
                out.push(',');
                newline(&mut out, depth);
            }
            ':' => out.push_str(": "),
            _ => out.push(character),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jetstream::api::responses::ReplicaBlock;
    use crate::jetstream::replication::{GroupView, NotCurrent};
    use crate::jetstream::stream::ConsumerDetail;
    use serde_json::Value;
    use tern_raft::Role;

    fn query(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(key, value)| (key.to_string(), value.to_string()))
            .collect()
    }

    fn options(pairs: &[(&str, &str)]) -> JszOptions {
        JszOptions::parse(&query(pairs)).expect("valid options")
    }

    #[test]
    fn options_take_nats_servers_defaults() {
        let plain = options(&[]);
        assert!(!plain.accounts && !plain.streams && !plain.lists_account());
        assert_eq!((plain.offset, plain.limit), (0, ACCOUNTS_LIMIT_DEFAULT));
        // consumers → streams → accounts (without `acc`).
        let consumers = options(&[("consumers", "true")]);
        assert!(consumers.streams && consumers.accounts && consumers.lists_consumers());
        let named = options(&[("acc", "$G"), ("streams", "1")]);
        assert!(!named.accounts && named.lists_account());
        let other = options(&[("acc", "OTHER"), ("streams", "1")]);
        assert!(!other.lists_account(), "an unknown account lists nothing");
        let other_and_all = options(&[("acc", "OTHER"), ("accounts", "t")]);
        assert!(
            other_and_all.lists_account(),
            "accounts=true lists every one"
        );
        let past = options(&[("accounts", "true"), ("offset", "1")]);
        assert!(!past.lists_account(), "the page starts after $G");
        let every = options(&[("accounts", "true"), ("offset", "1"), ("limit", "-1")]);
        assert!(every.lists_account(), "a negative limit takes them all");
        assert_eq!(options(&[("offset", "-4")]).offset, 0);
    }

    #[test]
    fn bad_options_have_nats_servers_texts() {
        let error = JszOptions::parse(&query(&[("leader-only", "maybe")]))
            .unwrap_err()
            .to_string();
        assert_eq!(
            error,
            "Error decoding boolean for 'leader-only': strconv.ParseBool: parsing \"maybe\": invalid syntax"
        );
        let error = JszOptions::parse(&query(&[("limit", "x")]))
            .unwrap_err()
            .to_string();
        assert_eq!(
            error,
            "Error decoding int for 'limit': strconv.Atoi: parsing \"x\": invalid syntax"
        );
        let error = JszOptions::parse(&query(&[("offset", "99999999999999999999")]))
            .unwrap_err()
            .to_string();
        assert!(error.ends_with(": value out of range"), "{error}");
        // nats-server reads `accounts` before `limit`.
        let error = JszOptions::parse(&query(&[("accounts", "2"), ("limit", "x")]))
            .unwrap_err()
            .to_string();
        assert!(error.contains("'accounts'"), "{error}");
    }

    #[test]
    fn indents_as_go_marshal_indent() {
        let compact = r#"{"a":1,"b":{},"c":[],"d":[{"e":"x,y: {\"z\"}"},2],"f":{"g":null}}"#;
        let expected = "{\n  \"a\": 1,\n  \"b\": {},\n  \"c\": [],\n  \"d\": [\n    {\n      \"e\": \"x,y: {\\\"z\\\"}\"\n    },\n    2\n  ],\n  \"f\": {\n    \"g\": null\n  }\n}";
        assert_eq!(indent(compact), expected);
        let reparsed: Value = serde_json::from_str(&indent(compact)).unwrap();
        assert_eq!(reparsed, serde_json::from_str::<Value>(compact).unwrap());
    }

    fn summary(name: &str, leading: bool, replicated: bool) -> StreamSummary {
        StreamSummary {
            name: name.into(),
            config: Box::new(StreamConfig {
                name: name.into(),
                ..StreamConfig::default()
            }),
            created_unix_ns: 1_000,
            state: tern_storage::block_store::StreamState {
                messages: 3,
                bytes: 90,
                first_sequence: 1,
                last_sequence: 3,
                ..Default::default()
            },
            last_unix_ns: 0,
            shard: 1,
            failure: None,
            consumers: 1,
            leading,
            group: 7,
            replicated,
        }
    }

    fn consumer(name: &str, logged: bool) -> ConsumerDetail {
        ConsumerDetail {
            name: name.into(),
            json: format!("{{\"stream_name\":\"S\",\"name\":\"{name}\"}}"),
            logged,
        }
    }

    fn settings() -> ServerSettings {
        ServerSettings {
            max_memory: -1,
            max_storage: 1 << 30,
            store_dir: "/data/jetstream".into(),
            sync_always: true,
        }
    }

    fn render_json(options: &JszOptions, view: Option<JetStreamView>) -> (String, Value) {
        let input = JszInput {
            server_id: "NID",
            server_name: "n1",
            now_unix_ns: 5,
            jetstream: view,
        };
        let compact = render(options, &input).expect("rendered");
        let value = serde_json::from_str(&compact).expect("JSON");
        (compact, value)
    }

    /// `keys` come in this order in `text` (each found after the one
    /// before it).
    fn in_order(text: &str, keys: &[&str]) {
        let mut from = 0;
        for key in keys {
            let found = text[from..]
                .find(&format!("\"{key}\":"))
                .unwrap_or_else(|| panic!("{key} after {from} in {keys:?}: {text}"));
            from += found + 1;
        }
    }

    #[test]
    fn one_server_lists_its_streams_and_consumers_as_nats_server() {
        let mut part = Gathered {
            shard: 1,
            streams: vec![summary("B", true, false), summary("A", true, false)],
            api_total: 4,
            api_errors: 1,
            ..Gathered::default()
        };
        part.consumer_details
            .insert("A".into(), vec![consumer("C1", true), consumer("E", false)]);
        let parts = [part];
        let view = || JetStreamView {
            parts: &parts,
            meta: None,
            cluster: None,
            settings: settings(),
            account_usage: NodeUsage {
                storage: 180,
                api_total: 4,
                api_errors: 1,
                ..NodeUsage::default()
            },
            journal: "ok".into(),
        };
        let everything = options(&[("consumers", "true"), ("config", "true"), ("raft", "true")]);
        let (text, jsz) = render_json(&everything, Some(view()));
        in_order(
            &text,
            &[
                "memory",
                "storage",
                "reserved_memory",
                "reserved_storage",
                "accounts",
                "ha_assets",
                "api",
                "server_id",
                "now",
                "config",
                "limits",
                "streams",
                "streams_leader",
                "consumers",
                "consumers_leader",
                "messages",
                "bytes",
                "account_details",
                "total",
                "journal",
            ],
        );
        assert_eq!(jsz["storage"], 180);
        assert_eq!(jsz["streams"], 2);
        assert_eq!(jsz["streams_leader"], 2);
        assert_eq!(jsz["consumers"], 2);
        assert_eq!(jsz["ha_assets"], 0);
        assert_eq!(jsz["api"]["level"], API_LEVEL);
        assert_eq!(jsz["api"]["errors"], 1);
        assert_eq!(jsz["now"], "1970-01-01T00:00:00.000000005Z");
        assert_eq!(jsz["config"]["sync_always"], true);
        assert!(jsz.get("meta_cluster").is_none());
        let account = &jsz["account_details"][0];
        assert_eq!(
            (&account["name"], &account["id"]),
            (&"$G".into(), &"$G".into())
        );
        assert_eq!(account["reserved_storage"], u64::MAX);
        assert_eq!(account["api"]["level"], 0);
        let streams = account["stream_detail"].as_array().expect("streams");
        let names: Vec<&str> = streams.iter().filter_map(|s| s["name"].as_str()).collect();
        assert_eq!(names, ["A", "B"], "by name");
        let a = &streams[0];
        assert_eq!(a["cluster"], serde_json::json!({"leader": "n1"}));
        assert_eq!(a["config"]["name"], "A");
        assert_eq!(a["state"]["messages"], 3);
        assert_eq!(a["state"]["consumer_count"], 1);
        assert_eq!(a["consumer_detail"][1]["name"], "E");
        assert_eq!(a["shard"], 1);
        assert!(a.get("stream_raft_group").is_none(), "no Raft group alone");
        assert!(
            streams[1].get("consumer_detail").is_none(),
            "omitted when none"
        );
        let a_text = &text[text.find("{\"name\":\"A\"").unwrap()..];
        in_order(
            a_text,
            &[
                "name",
                "created",
                "cluster",
                "config",
                "state",
                "consumer_detail",
                "shard",
            ],
        );

        // Without config, consumers or accounts.
        let (_, jsz) = render_json(&options(&[("streams", "true")]), Some(view()));
        let a = &jsz["account_details"][0]["stream_detail"][0];
        assert!(a.get("config").is_none() && a.get("consumer_detail").is_none());
        let (_, jsz) = render_json(&options(&[]), Some(view()));
        assert!(jsz.get("account_details").is_none());
        assert!(jsz.get("streams_leader").is_none(), "only with raft=true");
        let (_, jsz) = render_json(&options(&[("accounts", "true")]), Some(view()));
        assert!(jsz["account_details"][0].get("stream_detail").is_none());
    }

    fn leader_view() -> GroupView {
        GroupView {
            this_node: 0xa,
            role: Role::Leader,
            term: 2,
            leader: Some(0xa),
            commit_index: 5,
            applied_index: 5,
            last_index: 5,
            voters: vec![0xa, 0xb, 0xc],
            peers: Vec::new(),
            leader_silent_ticks: None,
        }
    }

    fn meta_status(view: GroupView) -> MetaStatus {
        MetaStatus {
            cluster: "east".into(),
            voters: vec![0xa, 0xb, 0xc],
            view: Some(view),
            failure: None,
            applied_index: 5,
            caught_up: true,
            leader_name: Some("n1".into()),
            replicas: vec![ReplicaBlock {
                name: "n2".into(),
                current: true,
                active_ns: 1,
                lag: 0,
                offline: false,
                peer: "b".into(),
            }],
            pending_entries: 1,
            pending_bytes: 2,
        }
    }

    #[test]
    fn a_cluster_node_lists_its_replicas_with_their_groups() {
        let follower = GroupView {
            role: Role::Follower,
            leader: Some(0xb),
            ..leader_view()
        };
        let block = ClusterBlock {
            name: Some("east".into()),
            leader: Some("n2".into()),
            replicas: Vec::new(),
        };
        let mut part = Gathered {
            streams: vec![summary("R3", false, true), summary("R1", true, false)],
            stream_groups: vec![StreamGroupReport {
                name: "R3".into(),
                group: 7,
                view: follower.clone(),
                cluster: block.clone(),
                current: Ok::<(), NotCurrent>(()),
                replica_lag: Vec::new(),
            }],
            ..Gathered::default()
        };
        part.consumer_details
            .insert("R3".into(), vec![consumer("D", true), consumer("E", false)]);
        let parts = [part];
        let meta = meta_status(follower);
        let view = || JetStreamView {
            parts: &parts,
            meta: Some(&meta),
            cluster: Some("east"),
            settings: settings(),
            account_usage: NodeUsage::default(),
            journal: "ok".into(),
        };
        let raft = options(&[("consumers", "1"), ("raft", "1")]);
        let (text, jsz) = render_json(&raft, Some(view()));
        assert_eq!(jsz["ha_assets"], 2, "the meta group and R3's");
        assert_eq!(jsz["streams_leader"], 1, "R1");
        assert_eq!(jsz["meta_cluster"]["cluster_size"], 3);
        let meta_text = &text[text.find("\"meta_cluster\"").unwrap()..];
        in_order(
            meta_text,
            &[
                "name",
                "leader",
                "peer",
                "replicas",
                "cluster_size",
                "quorum_needed",
                "pending",
                "snapshot",
                "raft",
            ],
        );
        let streams = &jsz["account_details"][0]["stream_detail"];
        assert_eq!(streams[0]["name"], "R1");
        assert_eq!(
            streams[0]["cluster"],
            serde_json::json!({"name": "east", "leader": "n1"})
        );
        assert_eq!(streams[0]["stream_raft_group"], "7");
        let r3 = &streams[1];
        assert_eq!(r3["cluster"]["leader"], "n2");
        assert_eq!(r3["raft"]["role"], "follower");
        assert_eq!(
            r3["consumer_raft_groups"],
            serde_json::json!([{"name": "D", "raft_group": "7"}]),
            "a durable is in the stream's group, an ephemeral in none"
        );

        let (_, jsz) = render_json(
            &options(&[("streams", "1"), ("stream-leader-only", "1")]),
            Some(view()),
        );
        let names: Vec<&str> = jsz["account_details"][0]["stream_detail"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|stream| stream["name"].as_str())
            .collect();
        assert_eq!(names, ["R1"], "R3 is led elsewhere");

        let input = JszInput {
            server_id: "NID",
            server_name: "n1",
            now_unix_ns: 5,
            jetstream: Some(view()),
        };
        assert_eq!(
            render(&options(&[("leader-only", "true")]), &input),
            Err(NotLeader)
        );
    }

    #[test]
    fn without_jetstream_the_answer_says_disabled() {
        let (_, jsz) = render_json(&options(&[("accounts", "true")]), None);
        assert_eq!(jsz["disabled"], true);
        assert_eq!(
            jsz["config"],
            serde_json::json!({"max_memory": 0, "max_storage": 0})
        );
        assert_eq!(jsz["total"], 0);
        assert!(jsz.get("account_details").is_none());
        let input = JszInput {
            server_id: "NID",
            server_name: "n1",
            now_unix_ns: 5,
            jetstream: None,
        };
        assert_eq!(
            render(&options(&[("leader-only", "true")]), &input),
            Err(NotLeader)
        );
    }
}
