//! `tern object add|put|get|ls|rm`: object store buckets (a bucket is the
//! stream `OBJ_<bucket>`, kv-objectstore.md §2), with every flag the
//! `nats` CLI gives these commands. `add` sends the stream config nats.go
//! builds for a bucket through the raw API; objects go through
//! async-nats's object store API. Files stream through in the client's
//! chunks; nothing holds a whole object in memory.

use std::path::PathBuf;

use async_nats::jetstream::{self, object_store};
use clap::{Args, Subcommand};
use futures::StreamExt;
use indicatif::ProgressBar;
use serde_json::{json, Map, Value};

use crate::api::Api;
use crate::consumer::metadata;
use crate::error::CliError;
use crate::kv::{bucket_names, LISTED_MAX};
use crate::output::line;
use crate::progress;
use crate::stream::{print_columns, require_force, switch, Storage};
use crate::units;

#[derive(Debug, Subcommand)]
pub enum ObjectCommand {
    /// Create a bucket
    #[command(alias = "new")]
    Add(AddArgs),
    /// Store a file as an object
    Put(PutArgs),
    /// Fetch an object into a file (or stdout with --output -)
    Get(GetArgs),
    /// List buckets, or the objects of one
    #[command(visible_alias = "list")]
    Ls(LsArgs),
    /// Delete an object, or with no object the whole bucket (needs --force)
    #[command(visible_alias = "del")]
    Rm(RmArgs),
}

#[derive(Debug, Args)]
pub struct AddArgs {
    /// Bucket name
    pub bucket: String,
    /// How long objects live, e.g. 30d (default: forever)
    #[arg(long, value_name = "DURATION")]
    pub ttl: Option<String>,
    /// Replicas of the data
    #[arg(long, default_value_t = 1)]
    pub replicas: usize,
    /// Bytes the bucket may hold, e.g. 10GB (--max-bytes: tern's older
    /// name)
    #[arg(
        long,
        alias = "max-bytes",
        value_name = "BYTES",
        allow_hyphen_values = true
    )]
    pub max_bucket_size: Option<String>,
    /// A description of the bucket
    #[arg(long)]
    pub description: Option<String>,
    /// Storage backend
    #[arg(long, value_enum)]
    pub storage: Option<Storage>,
    /// Place the bucket on servers with this tag (repeatable)
    #[arg(long, alias = "tag", value_name = "TAG")]
    pub tags: Vec<String>,
    /// Place the bucket in this cluster
    #[arg(long, value_name = "CLUSTER")]
    pub cluster: Option<String>,
    /// Metadata, KEY=VALUE (repeatable)
    #[arg(long, value_name = "META")]
    pub metadata: Vec<String>,
    /// Compress the bucket's data (s2)
    #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true, default_missing_value = "true", overrides_with = "no_compress")]
    pub compress: Option<bool>,
    #[arg(long, hide = true, overrides_with = "compress")]
    pub no_compress: bool,
}

#[derive(Debug, Args)]
pub struct PutArgs {
    /// Bucket name
    pub bucket: String,
    /// The file to store (stdin when not given: then --name is needed)
    pub file: Option<PathBuf>,
    /// Object name [default: the file's name]
    #[arg(long)]
    pub name: Option<String>,
    /// A description of the object
    #[arg(long)]
    pub description: Option<String>,
    /// A header of the object, K:V (repeatable)
    #[arg(short = 'H', long = "header", value_name = "K:V")]
    pub headers: Vec<String>,
    /// Chunk size in bytes [default: 128 KiB]
    #[arg(long, value_name = "BYTES")]
    pub chunk_size: Option<u32>,
    /// Draw a progress bar on a terminal (the default; --no-progress: none)
    #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true, default_missing_value = "true", overrides_with = "no_progress")]
    pub progress: Option<bool>,
    #[arg(long, hide = true, overrides_with = "progress")]
    pub no_progress: bool,
    /// Replace an object of the same name (tern never prompts)
    #[arg(short = 'f', long)]
    pub force: bool,
}

#[derive(Debug, Args)]
pub struct GetArgs {
    /// Bucket name
    pub bucket: String,
    /// Object name
    pub name: String,
    /// Where to write it (- for stdout) [default: the object's name, in
    /// the current directory]
    #[arg(short = 'O', long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Draw a progress bar on a terminal (the default; --no-progress: none)
    #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true, default_missing_value = "true", overrides_with = "no_progress")]
    pub progress: Option<bool>,
    #[arg(long, hide = true, overrides_with = "progress")]
    pub no_progress: bool,
    /// Replace a file of the same name (tern never prompts)
    #[arg(short = 'f', long)]
    pub force: bool,
}

#[derive(Debug, Args)]
pub struct LsArgs {
    /// Bucket whose objects to list (all buckets when not given)
    pub bucket: Option<String>,
    /// Only the names (no "nothing found" line)
    #[arg(short = 'n', long)]
    pub names: bool,
}

#[derive(Debug, Args)]
pub struct RmArgs {
    /// Bucket name
    pub bucket: String,
    /// Object name (without it the bucket is deleted)
    pub name: Option<String>,
    /// Delete without asking (required: tern never prompts)
    #[arg(short = 'f', long)]
    pub force: bool,
}

pub async fn execute(api: &Api, command: ObjectCommand) -> Result<(), CliError> {
    let context = api.jetstream();
    match command {
        ObjectCommand::Add(args) => add(api, args).await,
        ObjectCommand::Put(args) => put(&context, args).await,
        ObjectCommand::Get(args) => get(&context, args).await,
        ObjectCommand::Ls(args) => ls(api, &context, args).await,
        ObjectCommand::Rm(args) => rm(&context, args).await,
    }
}

async fn open(
    context: &jetstream::Context,
    bucket: &str,
) -> Result<object_store::ObjectStore, CliError> {
    context
        .get_object_store(bucket)
        .await
        .map_err(CliError::client(format!("object bucket {bucket}")))
}

/// The stream config of a bucket, as nats.go's `CreateObjectStore` builds
/// it (what the `nats` CLI's `object add` sends); checked before
/// connecting.
pub fn bucket_config(args: &AddArgs) -> Result<Map<String, Value>, CliError> {
    if args.bucket.is_empty()
        || !args
            .bucket
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    {
        return Err(CliError::Usage(format!(
            "bucket {:?}: letters, digits, _ and - only",
            args.bucket
        )));
    }
    let ttl = match &args.ttl {
        Some(text) => units::parse_duration(text).map_err(CliError::unit("--ttl"))?,
        None => std::time::Duration::ZERO,
    };
    let max_bytes = match &args.max_bucket_size {
        Some(text) => units::parse_size(text).map_err(CliError::unit("--max-bucket-size"))?,
        None => units::UNLIMITED,
    };
    let bucket = &args.bucket;
    let mut config = Map::new();
    let mut set = |key: &str, value: Value| {
        config.insert(key.into(), value);
    };
    set("name", json!(format!("OBJ_{bucket}")));
    if let Some(description) = &args.description {
        set("description", json!(description));
    }
    set(
        "subjects",
        json!([format!("$O.{bucket}.C.>"), format!("$O.{bucket}.M.>")]),
    );
    set("max_age", json!(units::nanos(ttl)));
    set("max_bytes", json!(max_bytes));
    set(
        "storage",
        json!(args.storage.unwrap_or(Storage::File).name()),
    );
    set("num_replicas", json!(args.replicas.max(1)));
    set("discard", json!("new"));
    set("allow_rollup_hdrs", json!(true));
    set("allow_direct", json!(true));
    if switch(args.compress, args.no_compress) == Some(true) {
        set("compression", json!("s2"));
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
    Ok(config)
}

async fn add(api: &Api, args: AddArgs) -> Result<(), CliError> {
    let config = bucket_config(&args)?;
    api.request(
        &format!("object add {}", args.bucket),
        &format!("STREAM.CREATE.OBJ_{}", args.bucket),
        &Value::Object(config),
    )
    .await?;
    line(format_args!("Bucket {} created", args.bucket));
    Ok(())
}

/// The object's name: `--name`, else the file's name.
fn object_name(args: &PutArgs) -> Result<String, CliError> {
    if let Some(name) = &args.name {
        return Ok(name.clone());
    }
    let Some(file) = &args.file else {
        return Err(CliError::Usage(
            "object put: --name is required when reading from stdin".into(),
        ));
    };
    file.file_name()
        .map(|name| name.to_string_lossy().into_owned())
        .ok_or_else(|| CliError::Usage(format!("object put: {} has no file name", file.display())))
}

/// A bar over `size_bytes` unless `--no-progress`.
fn bar(progress: Option<bool>, no_progress: bool, size_bytes: u64, what: &str) -> ProgressBar {
    if switch(progress, no_progress) == Some(false) {
        ProgressBar::hidden()
    } else {
        progress::bytes(size_bytes, what)
    }
}

async fn put(context: &jetstream::Context, args: PutArgs) -> Result<(), CliError> {
    let name = object_name(&args)?;
    let action = format!("object put {} {name}", args.bucket);
    let headers = crate::message::headers(&args.headers)?;
    let store = open(context, &args.bucket).await?;
    if !args.force {
        if let Ok(existing) = store.info(&name).await {
            if !existing.deleted {
                return Err(CliError::Failed {
                    action,
                    reason: "an object of this name exists: replacing it needs --force (-f): tern never prompts".into(),
                });
            }
        }
    }
    let meta = object_store::ObjectMetadata {
        name: name.clone(),
        description: args.description.clone(),
        chunk_size: args.chunk_size.map(|size| size as usize),
        headers,
        ..Default::default()
    };
    let info = match &args.file {
        Some(path) => {
            let file = tokio::fs::File::open(path)
                .await
                .map_err(|source| CliError::ReadFile {
                    what: "the object's file",
                    path: path.display().to_string(),
                    source,
                })?;
            let size_bytes = file.metadata().await.map(|meta| meta.len()).unwrap_or(0);
            let bar = bar(args.progress, args.no_progress, size_bytes, "Uploading");
            let mut file = bar.wrap_async_read(file);
            let info = store.put(meta, &mut file).await;
            bar.finish_and_clear();
            info
        }
        None => store.put(meta, &mut tokio::io::stdin()).await,
    }
    .map_err(CliError::client(action))?;
    line(format_args!(
        "Stored {} in {}: {} in {} chunks, {}",
        info.name,
        args.bucket,
        units::format_bytes(info.size as u64),
        info.chunks,
        info.digest.unwrap_or_default()
    ));
    Ok(())
}

async fn get(context: &jetstream::Context, args: GetArgs) -> Result<(), CliError> {
    let action = format!("object get {} {}", args.bucket, args.name);
    let store = open(context, &args.bucket).await?;
    let object = store
        .get(&args.name)
        .await
        .map_err(CliError::client(action.clone()))?;
    let bar = bar(
        args.progress,
        args.no_progress,
        object.info.size as u64,
        "Downloading",
    );
    let mut object = bar.wrap_async_read(object);
    let output = args.output.clone().unwrap_or_else(|| {
        PathBuf::from(
            std::path::Path::new(&args.name)
                .file_name()
                .map(|name| name.to_string_lossy().into_owned())
                .unwrap_or_else(|| args.name.clone()),
        )
    });
    if output.as_os_str() == "-" {
        let mut stdout = tokio::io::stdout();
        tokio::io::copy(&mut object, &mut stdout)
            .await
            .map_err(CliError::io(action))?;
        return Ok(());
    }
    if !args.force && output.exists() {
        return Err(CliError::Failed {
            action,
            reason: format!(
                "{} exists: replacing it needs --force (-f): tern never prompts",
                output.display()
            ),
        });
    }
    let mut file = tokio::fs::File::create(&output)
        .await
        .map_err(CliError::io(format!(
            "{action}: creating {}",
            output.display()
        )))?;
    let bytes = tokio::io::copy(&mut object, &mut file)
        .await
        .map_err(CliError::io(action.clone()))?;
    bar.finish_and_clear();
    tokio::io::AsyncWriteExt::flush(&mut file)
        .await
        .map_err(CliError::io(action))?;
    eprintln!(
        "Wrote {} to {}",
        units::format_bytes(bytes),
        output.display()
    );
    Ok(())
}

async fn ls(api: &Api, context: &jetstream::Context, args: LsArgs) -> Result<(), CliError> {
    let Some(bucket) = args.bucket else {
        let buckets = bucket_names(api, "object ls", "$O.*.C.>", "OBJ_").await?;
        if buckets.is_empty() && !args.names {
            line("No Object Store buckets found");
        }
        for bucket in buckets {
            line(bucket);
        }
        return Ok(());
    };
    let action = format!("object ls {bucket}");
    let store = open(context, &bucket).await?;
    let mut list = store
        .list()
        .await
        .map_err(CliError::client(action.clone()))?
        .take(LISTED_MAX);
    let mut rows = Vec::new();
    while let Some(info) = list.next().await {
        let info = info.map_err(CliError::client(action.clone()))?;
        if args.names {
            line(&info.name);
            continue;
        }
        rows.push([
            info.name.clone(),
            units::format_bytes(info.size as u64),
            info.modified
                .map(|time| time.to_string())
                .unwrap_or_default(),
        ]);
    }
    if args.names {
        return Ok(());
    }
    if rows.is_empty() {
        line(format_args!("No objects in {bucket}"));
        return Ok(());
    }
    print_columns(&["Name", "Size", "Time"], &rows);
    Ok(())
}

async fn rm(context: &jetstream::Context, args: RmArgs) -> Result<(), CliError> {
    match &args.name {
        Some(name) => {
            let action = format!("object rm {} {name}", args.bucket);
            require_force(args.force, &action)?;
            let store = open(context, &args.bucket).await?;
            store.delete(name).await.map_err(CliError::client(action))
        }
        None => {
            let action = format!("object rm {}", args.bucket);
            require_force(args.force, &action)?;
            context
                .delete_object_store(&args.bucket)
                .await
                .map_err(CliError::client(action))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Harness {
        #[command(subcommand)]
        command: ObjectCommand,
    }

    fn parse(arguments: &[&str]) -> ObjectCommand {
        Harness::try_parse_from(std::iter::once("object").chain(arguments.iter().copied()))
            .unwrap_or_else(|error| panic!("{arguments:?}: {error}"))
            .command
    }

    #[test]
    fn a_bucket_as_nats_go_makes_it() {
        let ObjectCommand::Add(args) = parse(&[
            "add",
            "files",
            "--ttl",
            "30d",
            "--replicas",
            "3",
            "--max-bucket-size",
            "10GB",
            "--description",
            "d",
            "--storage",
            "memory",
            "--tags",
            "ssd",
            "--cluster",
            "c1",
            "--metadata",
            "team=a",
            "--compress",
        ]) else {
            panic!("not add")
        };
        assert_eq!(
            Value::Object(bucket_config(&args).unwrap()),
            json!({
                "name": "OBJ_files",
                "description": "d",
                "subjects": ["$O.files.C.>", "$O.files.M.>"],
                "max_age": 30u64 * 86_400 * 1_000_000_000,
                "max_bytes": 10i64 << 30,
                "storage": "memory",
                "num_replicas": 3,
                "discard": "new",
                "allow_rollup_hdrs": true,
                "allow_direct": true,
                "compression": "s2",
                "metadata": {"team": "a"},
                "placement": {"cluster": "c1", "tags": ["ssd"]},
            })
        );
    }

    #[test]
    fn put_names_the_object() {
        let ObjectCommand::Put(args) = parse(&["put", "files", "/tmp/a/report.bin"]) else {
            panic!("not put")
        };
        assert_eq!(object_name(&args).unwrap(), "report.bin");
        let ObjectCommand::Put(args) = parse(&[
            "put",
            "files",
            "--name",
            "x",
            "--description",
            "d",
            "-H",
            "K:V",
            "--chunk-size",
            "1024",
            "--no-progress",
            "-f",
        ]) else {
            panic!("not put")
        };
        assert_eq!(object_name(&args).unwrap(), "x");
        let ObjectCommand::Put(args) = parse(&["put", "files"]) else {
            panic!("not put")
        };
        assert!(object_name(&args).is_err(), "stdin needs --name");
    }
}
