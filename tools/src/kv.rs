//! `tern kv add|put|get|del|ls|watch`: key-value buckets (a bucket is the
//! stream `KV_<bucket>`, kv-objectstore.md §1), with every flag the
//! `nats` CLI gives these commands. `add` sends the stream config nats.go
//! builds for a bucket (so a bucket made by tern is the one the `nats` CLI
//! makes) through the raw API; values go through async-nats's KV API.

use std::time::Duration;

use async_nats::jetstream::{self, kv};
use clap::{Args, Subcommand};
use futures::StreamExt;
use serde_json::{json, Map, Value};

use crate::api::Api;
use crate::consumer::metadata;
use crate::error::CliError;
use crate::output::line;
use crate::stream::{print_columns, require_force, switch, Storage};
use crate::units;

/// Buckets or keys listed at most.
pub const LISTED_MAX: usize = 100_000;
/// Values kept per key at most (the server's limit for KV).
pub const HISTORY_MAX: i64 = 64;
/// nats.go's duplicate window of a bucket (shorter when the TTL is).
const DUPLICATE_WINDOW_MAX: Duration = Duration::from_secs(120);

#[derive(Debug, Subcommand)]
pub enum KvCommand {
    /// Create a bucket
    #[command(alias = "new")]
    Add(Box<AddArgs>),
    /// Put a value into a key (stdin when no value is given)
    Put(PutArgs),
    /// Show a key's value
    Get(KeyArgs),
    /// Delete a key, or with no key the whole bucket (needs --force)
    #[command(visible_alias = "rm")]
    Del(DelArgs),
    /// List buckets, or the keys of one
    #[command(visible_alias = "list")]
    Ls(LsArgs),
    /// Print each key's latest value, then every change (of keys matching a
    /// pattern)
    Watch(WatchArgs),
}

#[derive(Debug, Args)]
pub struct AddArgs {
    /// Bucket name
    pub bucket: String,
    /// A description of the bucket
    #[arg(long)]
    pub description: Option<String>,
    /// Values kept per key (1 to 64)
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(i64).range(1..=HISTORY_MAX))]
    pub history: i64,
    /// Storage backend
    #[arg(long, value_enum)]
    pub storage: Option<Storage>,
    /// How long values live, e.g. 1h (default: forever)
    #[arg(long, value_name = "DURATION")]
    pub ttl: Option<String>,
    /// Per-key TTLs, and markers of keys removed by limits kept this long
    #[arg(long, value_name = "DURATION")]
    pub marker_ttl: Option<String>,
    /// Replicas of the data
    #[arg(long, default_value_t = 1)]
    pub replicas: usize,
    /// Largest value, e.g. 1MB
    #[arg(long, value_name = "BYTES", allow_hyphen_values = true)]
    pub max_value_size: Option<String>,
    /// Bytes the bucket may hold, e.g. 1GB (--max-bytes: tern's older name)
    #[arg(
        long,
        alias = "max-bytes",
        value_name = "BYTES",
        allow_hyphen_values = true
    )]
    pub max_bucket_size: Option<String>,
    /// Place the bucket on servers with this tag (repeatable)
    #[arg(long, alias = "tag", value_name = "TAG")]
    pub tags: Vec<String>,
    /// Place the bucket in this cluster
    #[arg(long, value_name = "CLUSTER")]
    pub cluster: Option<String>,
    /// Compress the bucket's data (s2)
    #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true, default_missing_value = "true", overrides_with = "no_compress")]
    pub compress: Option<bool>,
    #[arg(long, hide = true, overrides_with = "compress")]
    pub no_compress: bool,
    /// Metadata, KEY=VALUE (repeatable)
    #[arg(long, value_name = "META")]
    pub metadata: Vec<String>,
    /// Republish values of these keys' subjects (with
    /// --republish-destination)
    #[arg(long, value_name = "SRC")]
    pub republish_source: Option<String>,
    /// Where to republish
    #[arg(long, value_name = "DEST")]
    pub republish_destination: Option<String>,
    /// Republish only the headers
    #[arg(long)]
    pub republish_headers: bool,
    /// Mirror this bucket
    #[arg(long, value_name = "BUCKET")]
    pub mirror: Option<String>,
    /// The mirrored bucket's JetStream domain
    #[arg(long, value_name = "DOMAIN")]
    pub mirror_domain: Option<String>,
    /// Source values from this bucket (repeatable)
    #[arg(long, value_name = "BUCKET")]
    pub source: Vec<String>,
}

#[derive(Debug, Args)]
pub struct PutArgs {
    /// Bucket name
    pub bucket: String,
    /// Key
    pub key: String,
    /// Value (stdin when not given)
    pub value: Option<String>,
}

#[derive(Debug, Args)]
pub struct KeyArgs {
    /// Bucket name
    pub bucket: String,
    /// Key
    pub key: String,
    /// This revision of the key instead of the latest
    #[arg(long, value_name = "REVISION")]
    pub revision: Option<u64>,
    /// Only the value
    #[arg(short = 'r', long)]
    pub raw: bool,
}

#[derive(Debug, Args)]
pub struct DelArgs {
    /// Bucket name
    pub bucket: String,
    /// Key (without it the bucket is deleted)
    pub key: Option<String>,
    /// Delete without asking (required for a bucket: tern never prompts)
    #[arg(short = 'f', long)]
    pub force: bool,
}

#[derive(Debug, Args)]
pub struct LsArgs {
    /// Bucket whose keys to list (all buckets when not given)
    pub bucket: Option<String>,
    /// Only keys matching this pattern (wildcards allowed)
    pub key: Option<String>,
    /// Only the names (no "nothing found" line)
    #[arg(short = 'n', long)]
    pub names: bool,
    /// A table of the keys: created, delta, revision
    #[arg(short = 'v', long)]
    pub verbose: bool,
    /// With --verbose: the values too
    #[arg(long)]
    pub display_value: bool,
}

#[derive(Debug, Args)]
pub struct WatchArgs {
    /// Bucket name
    pub bucket: String,
    /// Keys to watch (wildcards allowed)
    #[arg(default_value = ">")]
    pub key: String,
    /// Every stored value, not only the latest of each key
    #[arg(long)]
    pub history: bool,
    /// Show deletes and purges (the default; --no-deletes hides them)
    #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true, default_missing_value = "true", overrides_with = "no_deletes")]
    pub deletes: Option<bool>,
    #[arg(long, hide = true, overrides_with = "deletes")]
    pub no_deletes: bool,
    /// Only values written from now on
    #[arg(long)]
    pub updates: bool,
    /// From this revision on
    #[arg(long, value_name = "REVISION")]
    pub revision: Option<u64>,
    /// Exit after this many updates
    #[arg(long, value_name = "N")]
    pub count: Option<u64>,
}

pub async fn execute(api: &Api, command: KvCommand) -> Result<(), CliError> {
    let context = api.jetstream();
    match command {
        KvCommand::Add(args) => add(api, *args).await,
        KvCommand::Put(args) => {
            let store = open(&context, &args.bucket).await?;
            let value = match args.value {
                Some(value) => value,
                None => {
                    let mut text = String::new();
                    use std::io::Read;
                    std::io::stdin()
                        .take(crate::message::STDIN_BODY_BYTES_MAX)
                        .read_to_string(&mut text)
                        .map_err(CliError::io("reading the value from stdin"))?;
                    text
                }
            };
            store
                .put(&args.key, value.clone().into())
                .await
                .map_err(CliError::client(format!(
                    "kv put {} {}",
                    args.bucket, args.key
                )))?;
            line(value);
            Ok(())
        }
        KvCommand::Get(args) => get(&context, args).await,
        KvCommand::Del(args) => del(&context, args).await,
        KvCommand::Ls(args) => ls(api, &context, args).await,
        KvCommand::Watch(args) => watch(&context, args).await,
    }
}

async fn open(context: &jetstream::Context, bucket: &str) -> Result<kv::Store, CliError> {
    context
        .get_key_value(bucket)
        .await
        .map_err(CliError::client(format!("kv bucket {bucket}")))
}

fn usage(text: impl Into<String>) -> CliError {
    CliError::Usage(text.into())
}

fn valid_bucket(bucket: &str) -> Result<(), CliError> {
    if bucket.is_empty()
        || !bucket
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    {
        return Err(usage(format!(
            "bucket {bucket:?}: letters, digits, _ and - only"
        )));
    }
    Ok(())
}

/// The stream config of a bucket, as nats.go's `CreateKeyValue` builds it
/// (what the `nats` CLI's `kv add` sends).
pub fn bucket_config(args: &AddArgs) -> Result<Map<String, Value>, CliError> {
    valid_bucket(&args.bucket)?;
    let ttl = match &args.ttl {
        Some(text) => units::parse_duration(text).map_err(CliError::unit("--ttl"))?,
        None => Duration::ZERO,
    };
    let size = |flag: &'static str, text: &Option<String>| match text {
        Some(text) => units::parse_size(text).map_err(CliError::unit(flag)),
        None => Ok(units::UNLIMITED),
    };
    let max_bytes = size("--max-bucket-size", &args.max_bucket_size)?;
    let max_value_size = size("--max-value-size", &args.max_value_size)?;
    if max_value_size > i64::from(i32::MAX) {
        return Err(usage(format!(
            "--max-value-size: at most {} bytes",
            i32::MAX
        )));
    }
    let duplicate_window = if !ttl.is_zero() && ttl < DUPLICATE_WINDOW_MAX {
        ttl
    } else {
        DUPLICATE_WINDOW_MAX
    };
    let mut config = Map::new();
    let mut set = |key: &str, value: Value| {
        config.insert(key.into(), value);
    };
    set("name", json!(format!("KV_{}", args.bucket)));
    if let Some(description) = &args.description {
        set("description", json!(description));
    }
    set("max_msgs_per_subject", json!(args.history));
    set("max_bytes", json!(max_bytes));
    set("max_age", json!(units::nanos(ttl)));
    set("max_msg_size", json!(max_value_size));
    set(
        "storage",
        json!(args.storage.unwrap_or(Storage::File).name()),
    );
    set("num_replicas", json!(args.replicas.max(1)));
    set("allow_rollup_hdrs", json!(true));
    set("deny_delete", json!(true));
    set("duplicate_window", json!(units::nanos(duplicate_window)));
    set("max_msgs", json!(-1));
    set("max_consumers", json!(-1));
    set("allow_direct", json!(true));
    set("discard", json!("new"));
    if switch(args.compress, args.no_compress) == Some(true) {
        set("compression", json!("s2"));
    }
    if let Some(text) = &args.marker_ttl {
        let marker = units::parse_duration(text).map_err(CliError::unit("--marker-ttl"))?;
        set("allow_msg_ttl", json!(true));
        set("subject_delete_marker_ttl", json!(units::nanos(marker)));
    }
    if let Some(metadata) = metadata(&args.metadata)? {
        set("metadata", Value::Object(metadata));
    }
    let tags: Vec<&String> = args.tags.iter().filter(|tag| !tag.is_empty()).collect();
    if args.cluster.is_some() || !tags.is_empty() {
        let mut placement = Map::new();
        if let Some(cluster) = &args.cluster {
            placement.insert("cluster".into(), json!(cluster));
        }
        if !tags.is_empty() {
            placement.insert("tags".into(), json!(tags));
        }
        set("placement", Value::Object(placement));
    }
    match (&args.republish_source, &args.republish_destination) {
        (source, Some(destination)) => {
            let mut republish = json!({ "dest": destination });
            if let Some(source) = source {
                republish["src"] = json!(source);
            }
            if args.republish_headers {
                republish["headers_only"] = json!(true);
            }
            set("republish", republish);
        }
        (None, None) if !args.republish_headers => {}
        _ => {
            return Err(usage(
                "--republish-source and --republish-headers need --republish-destination",
            ))
        }
    }
    let stream_of = |bucket: &str| match bucket.strip_prefix("KV_") {
        Some(_) => bucket.to_string(),
        None => format!("KV_{bucket}"),
    };
    if let Some(mirror) = &args.mirror {
        let mut source = json!({ "name": stream_of(mirror) });
        if let Some(domain) = &args.mirror_domain {
            source["external"] = json!({ "api": format!("$JS.{domain}.API") });
        }
        set("mirror", source);
        set("mirror_direct", json!(true));
    } else {
        if args.mirror_domain.is_some() {
            return Err(usage("--mirror-domain: give --mirror too"));
        }
        set("subjects", json!([format!("$KV.{}.>", args.bucket)]));
        if !args.source.is_empty() {
            let sources: Vec<Value> = args
                .source
                .iter()
                .map(|source| {
                    let bucket = source.strip_prefix("KV_").unwrap_or(source);
                    let mut value = json!({ "name": stream_of(source) });
                    // A source's keys land in this bucket's subjects.
                    if bucket != args.bucket {
                        value["subject_transforms"] = json!([{
                            "src": format!("$KV.{bucket}.>"),
                            "dest": format!("$KV.{}.>", args.bucket),
                        }]);
                    }
                    value
                })
                .collect();
            set("sources", Value::Array(sources));
        }
    }
    Ok(config)
}

async fn add(api: &Api, args: AddArgs) -> Result<(), CliError> {
    let config = bucket_config(&args)?;
    let action = format!("kv add {}", args.bucket);
    // The create's answer is the bucket's stream info: no second request
    // (which a just-created replicated stream may answer with 503 until
    // its group has a leader).
    let answer = api
        .request(
            &action,
            &format!("STREAM.CREATE.KV_{}", args.bucket),
            &Value::Object(config),
        )
        .await?;
    line(format_args!(
        "Bucket {} created: history {}, ttl {}, values {}",
        args.bucket,
        answer["config"]["max_msgs_per_subject"]
            .as_i64()
            .unwrap_or(1),
        match answer["config"]["max_age"].as_u64().unwrap_or(0) {
            0 => "forever".to_string(),
            nanos => units::format_duration(Duration::from_nanos(nanos)),
        },
        answer["state"]["messages"].as_u64().unwrap_or(0)
    ));
    Ok(())
}

async fn get(context: &jetstream::Context, args: KeyArgs) -> Result<(), CliError> {
    let action = format!("kv get {} {}", args.bucket, args.key);
    let store = open(context, &args.bucket).await?;
    let entry = match args.revision {
        Some(revision) => store.entry_for_revision(&args.key, revision).await,
        None => store.entry(&args.key).await,
    }
    .map_err(CliError::client(action.clone()))?;
    let Some(entry) = entry.filter(|entry| entry.operation == kv::Operation::Put) else {
        return Err(CliError::Failed {
            action,
            reason: "key not found".into(),
        });
    };
    if !args.raw {
        line(format_args!(
            "{} > {} revision: {} created @ {}",
            args.bucket, args.key, entry.revision, entry.created
        ));
        line("");
    }
    line(String::from_utf8_lossy(&entry.value));
    Ok(())
}

async fn del(context: &jetstream::Context, args: DelArgs) -> Result<(), CliError> {
    match &args.key {
        Some(key) => {
            let action = format!("kv del {} {key}", args.bucket);
            let store = open(context, &args.bucket).await?;
            store.delete(key).await.map_err(CliError::client(action))
        }
        None => {
            let action = format!("kv del {}", args.bucket);
            require_force(args.force, &action)?;
            context
                .delete_key_value(&args.bucket)
                .await
                .map(|_| ())
                .map_err(CliError::client(action))
        }
    }
}

/// Bucket names behind streams whose subjects match `pattern`, their
/// `prefix` stripped (`KV_`, `OBJ_`).
pub async fn bucket_names(
    api: &Api,
    action: &str,
    pattern: &str,
    prefix: &str,
) -> Result<Vec<String>, CliError> {
    let mut filter = Map::new();
    filter.insert("subject".into(), json!(pattern));
    let names = api
        .paged(action, "STREAM.NAMES", filter, "streams", LISTED_MAX)
        .await?;
    Ok(names
        .iter()
        .filter_map(|name| name.as_str()?.strip_prefix(prefix).map(String::from))
        .collect())
}

async fn ls(api: &Api, context: &jetstream::Context, args: LsArgs) -> Result<(), CliError> {
    let Some(bucket) = args.bucket else {
        let buckets = bucket_names(api, "kv ls", "$KV.*.>", "KV_").await?;
        if buckets.is_empty() && !args.names {
            line("No Key-Value buckets found");
        }
        for bucket in buckets {
            line(bucket);
        }
        return Ok(());
    };
    let action = format!("kv ls {bucket}");
    let store = open(context, &bucket).await?;
    let mut keys = store
        .keys()
        .await
        .map_err(CliError::client(action.clone()))?
        .take(LISTED_MAX);
    let mut listed = Vec::new();
    while let Some(key) = keys.next().await {
        let key = key.map_err(CliError::client(action.clone()))?;
        if args
            .key
            .as_deref()
            .is_none_or(|pattern| crate::subject::matches(pattern, &key))
        {
            listed.push(key);
        }
    }
    if listed.is_empty() {
        if !args.names {
            line("No keys found in bucket");
        }
        return Ok(());
    }
    if !args.verbose {
        for key in listed {
            line(key);
        }
        return Ok(());
    }
    let mut rows = Vec::new();
    for key in listed {
        let entry = store
            .entry(&key)
            .await
            .map_err(CliError::client(action.clone()))?;
        let Some(entry) = entry else { continue };
        rows.push([
            entry.key.clone(),
            entry.created.to_string(),
            entry.delta.to_string(),
            entry.revision.to_string(),
            String::from_utf8_lossy(&entry.value).into_owned(),
        ]);
    }
    if args.display_value {
        print_columns(&["Key", "Created", "Delta", "Revision", "Value"], &rows);
    } else {
        let rows: Vec<[String; 4]> = rows
            .into_iter()
            .map(|[key, created, delta, revision, _]| [key, created, delta, revision])
            .collect();
        print_columns(&["Key", "Created", "Delta", "Revision"], &rows);
    }
    Ok(())
}

/// Which of a bucket's entries a watch starts from (the nats CLI's flags).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WatchStart {
    /// Each key's latest value, then changes (the default).
    Latest,
    /// Every stored value (`--history`).
    History,
    /// Only what is written from now (`--updates`).
    Updates,
    /// From a revision (`--revision N`).
    Revision(u64),
}

impl WatchStart {
    pub fn of(args: &WatchArgs) -> Result<WatchStart, CliError> {
        match (args.history, args.updates, args.revision) {
            (false, false, None) => Ok(WatchStart::Latest),
            (true, false, None) => Ok(WatchStart::History),
            (false, true, None) => Ok(WatchStart::Updates),
            (false, false, Some(revision)) => Ok(WatchStart::Revision(revision.max(1))),
            _ => Err(usage(
                "kv watch: one of --history, --updates and --revision",
            )),
        }
    }
}

async fn watch(context: &jetstream::Context, args: WatchArgs) -> Result<(), CliError> {
    let action = format!("kv watch {} {}", args.bucket, args.key);
    let start = WatchStart::of(&args)?;
    let deletes = switch(args.deletes, args.no_deletes).unwrap_or(true);
    let store = open(context, &args.bucket).await?;
    let updates = match start {
        WatchStart::Latest => store.watch_with_history(&args.key).await,
        WatchStart::History => store.watch_from_revision(&args.key, 1).await,
        WatchStart::Updates => store.watch(&args.key).await,
        WatchStart::Revision(revision) => store.watch_from_revision(&args.key, revision).await,
    };
    let mut updates = updates.map_err(CliError::client(action.clone()))?;
    let mut seen = 0;
    while args.count.is_none_or(|count| seen < count) {
        let entry = match updates.next().await {
            Some(entry) => entry.map_err(CliError::client(action.clone()))?,
            None => {
                return Err(CliError::Failed {
                    action,
                    reason: "the watch ended".into(),
                })
            }
        };
        let operation = match entry.operation {
            kv::Operation::Put => "PUT",
            kv::Operation::Delete => "DEL",
            kv::Operation::Purge => "PURGE",
        };
        if entry.operation != kv::Operation::Put {
            if !deletes {
                continue;
            }
            seen += 1;
            line(format_args!(
                "[{}] {operation} {} > {}",
                entry.created, entry.bucket, entry.key
            ));
            continue;
        }
        seen += 1;
        line(format_args!(
            "[{}] {operation} {} > {}: {}",
            entry.created,
            entry.bucket,
            entry.key,
            String::from_utf8_lossy(&entry.value)
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Harness {
        #[command(subcommand)]
        command: KvCommand,
    }

    fn parse(arguments: &[&str]) -> Result<KvCommand, CliError> {
        Harness::try_parse_from(std::iter::once("kv").chain(arguments.iter().copied()))
            .map(|harness| harness.command)
            .map_err(|error| CliError::Usage(error.to_string()))
    }

    fn config_of(arguments: &[&str]) -> Result<Value, CliError> {
        match parse(arguments)? {
            KvCommand::Add(args) => bucket_config(&args).map(Value::Object),
            other => panic!("not add: {other:?}"),
        }
    }

    #[test]
    fn a_bucket_as_nats_go_makes_it() {
        let config = config_of(&["add", "cfg", "--history", "5", "--ttl", "1m"]).unwrap();
        assert_eq!(
            config,
            json!({
                "name": "KV_cfg",
                "subjects": ["$KV.cfg.>"],
                "max_msgs_per_subject": 5,
                "max_bytes": -1,
                "max_age": 60_000_000_000u64,
                "max_msg_size": -1,
                "storage": "file",
                "num_replicas": 1,
                "allow_rollup_hdrs": true,
                "deny_delete": true,
                "duplicate_window": 60_000_000_000u64,
                "max_msgs": -1,
                "max_consumers": -1,
                "allow_direct": true,
                "discard": "new",
            })
        );
    }

    #[test]
    fn every_bucket_flag_has_its_field() {
        let config = config_of(&[
            "add",
            "cfg",
            "--description",
            "d",
            "--storage",
            "memory",
            "--marker-ttl",
            "5m",
            "--replicas",
            "3",
            "--max-value-size",
            "64KB",
            "--max-bucket-size",
            "1GB",
            "--tags",
            "ssd",
            "--cluster",
            "c1",
            "--compress",
            "--metadata",
            "team=a",
            "--republish-source",
            "$KV.cfg.>",
            "--republish-destination",
            "re.>",
            "--republish-headers",
            "--source",
            "other",
        ])
        .unwrap();
        assert_eq!(config["description"], "d");
        assert_eq!(config["storage"], "memory");
        assert_eq!(config["allow_msg_ttl"], true);
        assert_eq!(config["subject_delete_marker_ttl"], 300_000_000_000u64);
        assert_eq!(config["num_replicas"], 3);
        assert_eq!(config["max_msg_size"], 64 << 10);
        assert_eq!(config["max_bytes"], 1 << 30);
        assert_eq!(
            config["placement"],
            json!({"cluster": "c1", "tags": ["ssd"]})
        );
        assert_eq!(config["compression"], "s2");
        assert_eq!(config["metadata"], json!({"team": "a"}));
        assert_eq!(
            config["republish"],
            json!({"src": "$KV.cfg.>", "dest": "re.>", "headers_only": true})
        );
        assert_eq!(
            config["sources"],
            json!([{"name": "KV_other", "subject_transforms": [{"src": "$KV.other.>", "dest": "$KV.cfg.>"}]}])
        );
        let mirror =
            config_of(&["add", "copy", "--mirror", "cfg", "--mirror-domain", "hub"]).unwrap();
        assert_eq!(
            mirror["mirror"],
            json!({"name": "KV_cfg", "external": {"api": "$JS.hub.API"}})
        );
        assert_eq!(mirror["mirror_direct"], true);
        assert_eq!(mirror.get("subjects"), None);
        let older = config_of(&["add", "cfg", "--max-bytes", "1MB", "--no-compress"]).unwrap();
        assert_eq!(older["max_bytes"], 1 << 20);
        assert_eq!(older.get("compression"), None);
    }

    #[test]
    fn bad_bucket_flags_are_refused() {
        for line in [
            &["add", "cfg", "--history", "65"][..],
            &["add", "cfg", "--history", "0"],
            &["add", "cfg", "--max-value-size", "4GB"],
            &["add", "cfg", "--republish-source", "a"],
            &["add", "cfg", "--mirror-domain", "hub"],
            &["add", "c.fg"],
        ] {
            assert!(config_of(line).is_err(), "{line:?}");
        }
    }

    #[test]
    fn watch_starts() {
        let start = |line: &[&str]| match parse(line).unwrap() {
            KvCommand::Watch(args) => WatchStart::of(&args),
            other => panic!("not watch: {other:?}"),
        };
        assert_eq!(start(&["watch", "cfg"]).unwrap(), WatchStart::Latest);
        assert_eq!(
            start(&["watch", "cfg", "--history"]).unwrap(),
            WatchStart::History
        );
        assert_eq!(
            start(&["watch", "cfg", "--updates"]).unwrap(),
            WatchStart::Updates
        );
        assert_eq!(
            start(&["watch", "cfg", "--revision", "7"]).unwrap(),
            WatchStart::Revision(7)
        );
        assert!(start(&["watch", "cfg", "--history", "--updates"]).is_err());
    }
}
