//! `tern kv add|put|get|del|ls|watch`: key-value buckets through
//! async-nats's KV API (a bucket is the stream `KV_<bucket>`,
//! kv-objectstore.md §1); bucket lists through the raw API.

use std::time::Duration;

use async_nats::jetstream::{self, kv};
use clap::{Args, Subcommand};
use futures::StreamExt;
use serde_json::{json, Map};

use crate::api::Api;
use crate::error::CliError;
use crate::output::line;
use crate::stream::{require_force, Storage};
use crate::units;

/// Buckets or keys listed at most.
pub const LISTED_MAX: usize = 100_000;

#[derive(Debug, Subcommand)]
pub enum KvCommand {
    /// Create a bucket
    #[command(alias = "new")]
    Add(AddArgs),
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
    /// Values kept per key
    #[arg(long, default_value_t = 1)]
    pub history: i64,
    /// How long values live, e.g. 1h (default: forever)
    #[arg(long, value_name = "DURATION")]
    pub ttl: Option<String>,
    /// Bytes the bucket may hold, e.g. 1GB
    #[arg(long, value_name = "BYTES", allow_hyphen_values = true)]
    pub max_bytes: Option<String>,
    /// Largest value, e.g. 1MB
    #[arg(long, value_name = "BYTES", allow_hyphen_values = true)]
    pub max_value_size: Option<String>,
    /// Storage backend
    #[arg(long, value_enum)]
    pub storage: Option<Storage>,
    /// Replicas of the data
    #[arg(long, default_value_t = 1)]
    pub replicas: usize,
    /// A description of the bucket
    #[arg(long)]
    pub description: Option<String>,
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
    /// Delete without asking (required: tern never prompts)
    #[arg(short = 'f', long)]
    pub force: bool,
}

#[derive(Debug, Args)]
pub struct LsArgs {
    /// Bucket whose keys to list (all buckets when not given)
    pub bucket: Option<String>,
}

#[derive(Debug, Args)]
pub struct WatchArgs {
    /// Bucket name
    pub bucket: String,
    /// Keys to watch (wildcards allowed)
    #[arg(default_value = ">")]
    pub key: String,
    /// Exit after this many updates
    #[arg(long, value_name = "N")]
    pub count: Option<u64>,
}

pub async fn execute(api: &Api, command: KvCommand) -> Result<(), CliError> {
    let context = api.jetstream();
    match command {
        KvCommand::Add(args) => add(&context, args).await,
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

/// The bucket config `kv add` asks for.
pub fn bucket_config(args: &AddArgs) -> Result<kv::Config, CliError> {
    let mut config = kv::Config {
        bucket: args.bucket.clone(),
        history: args.history,
        num_replicas: args.replicas,
        description: args.description.clone().unwrap_or_default(),
        ..Default::default()
    };
    if let Some(text) = &args.ttl {
        config.max_age = units::parse_duration(text).map_err(CliError::unit("--ttl"))?;
    }
    if let Some(text) = &args.max_bytes {
        config.max_bytes = units::parse_size(text).map_err(CliError::unit("--max-bytes"))?;
    }
    if let Some(text) = &args.max_value_size {
        let bytes = units::parse_size(text).map_err(CliError::unit("--max-value-size"))?;
        config.max_value_size = i32::try_from(bytes).map_err(|_| {
            CliError::Usage(format!(
                "--max-value-size {text}: at most {} bytes",
                i32::MAX
            ))
        })?;
    }
    if let Some(storage) = args.storage {
        config.storage = match storage {
            Storage::File => jetstream::stream::StorageType::File,
            Storage::Memory => jetstream::stream::StorageType::Memory,
        };
    }
    Ok(config)
}

async fn add(context: &jetstream::Context, args: AddArgs) -> Result<(), CliError> {
    let config = bucket_config(&args)?;
    let store = context
        .create_key_value(config)
        .await
        .map_err(CliError::client(format!("kv add {}", args.bucket)))?;
    let status = store
        .status()
        .await
        .map_err(CliError::client(format!("kv add {}", args.bucket)))?;
    line(format_args!(
        "Bucket {} created: history {}, ttl {}, values {}",
        args.bucket,
        status.history(),
        match status.max_age() {
            Duration::ZERO => "forever".to_string(),
            age => units::format_duration(age),
        },
        status.values()
    ));
    Ok(())
}

async fn get(context: &jetstream::Context, args: KeyArgs) -> Result<(), CliError> {
    let action = format!("kv get {} {}", args.bucket, args.key);
    let store = open(context, &args.bucket).await?;
    let entry = store
        .entry(&args.key)
        .await
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
        if buckets.is_empty() {
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
    while let Some(key) = keys.next().await {
        line(key.map_err(CliError::client(action.clone()))?);
    }
    Ok(())
}

async fn watch(context: &jetstream::Context, args: WatchArgs) -> Result<(), CliError> {
    let action = format!("kv watch {} {}", args.bucket, args.key);
    let store = open(context, &args.bucket).await?;
    let mut updates = store
        .watch_with_history(&args.key)
        .await
        .map_err(CliError::client(action.clone()))?;
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
        seen += 1;
        let operation = match entry.operation {
            kv::Operation::Put => "PUT",
            kv::Operation::Delete => "DEL",
            kv::Operation::Purge => "PURGE",
        };
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

    #[test]
    fn bucket_flags_map_to_the_config() {
        let args = AddArgs {
            bucket: "cfg".into(),
            history: 5,
            ttl: Some("1h".into()),
            max_bytes: Some("1GB".into()),
            max_value_size: Some("64KB".into()),
            storage: Some(Storage::Memory),
            replicas: 1,
            description: None,
        };
        let config = bucket_config(&args).unwrap();
        assert_eq!(config.bucket, "cfg");
        assert_eq!(config.history, 5);
        assert_eq!(config.max_age, Duration::from_secs(3_600));
        assert_eq!(config.max_bytes, 1 << 30);
        assert_eq!(config.max_value_size, 64 << 10);
        assert_eq!(config.storage, jetstream::stream::StorageType::Memory);
        let bad = AddArgs {
            max_value_size: Some("4GB".into()),
            ..args
        };
        assert!(bucket_config(&bad).is_err());
    }
}
