//! `tern object add|put|get|ls|rm`: object store buckets through
//! async-nats's object store API (a bucket is the stream `OBJ_<bucket>`,
//! kv-objectstore.md §2). Files stream through in the client's chunks;
//! nothing holds a whole object in memory.

use std::path::PathBuf;

use async_nats::jetstream::{self, object_store};
use clap::{Args, Subcommand};
use futures::StreamExt;

use crate::api::Api;
use crate::error::CliError;
use crate::kv::{bucket_names, LISTED_MAX};
use crate::output::line;
use crate::progress;
use crate::stream::{print_columns, require_force, Storage};
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
    /// Bytes the bucket may hold, e.g. 10GB
    #[arg(long, value_name = "BYTES", allow_hyphen_values = true)]
    pub max_bytes: Option<String>,
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
    /// The file to store
    pub file: PathBuf,
    /// Object name [default: the file's name]
    #[arg(long)]
    pub name: Option<String>,
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
}

#[derive(Debug, Args)]
pub struct LsArgs {
    /// Bucket whose objects to list (all buckets when not given)
    pub bucket: Option<String>,
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
        ObjectCommand::Add(args) => add(&context, args).await,
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

/// The bucket config `object add` asks for (checked before connecting).
pub fn bucket_config(args: &AddArgs) -> Result<object_store::Config, CliError> {
    let mut config = object_store::Config {
        bucket: args.bucket.clone(),
        description: args.description.clone(),
        num_replicas: args.replicas,
        ..Default::default()
    };
    if let Some(text) = &args.ttl {
        config.max_age = units::parse_duration(text).map_err(CliError::unit("--ttl"))?;
    }
    if let Some(text) = &args.max_bytes {
        config.max_bytes = units::parse_size(text).map_err(CliError::unit("--max-bytes"))?;
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
    context
        .create_object_store(bucket_config(&args)?)
        .await
        .map_err(CliError::client(format!("object add {}", args.bucket)))?;
    line(format_args!("Bucket {} created", args.bucket));
    Ok(())
}

async fn put(context: &jetstream::Context, args: PutArgs) -> Result<(), CliError> {
    let name = match &args.name {
        Some(name) => name.clone(),
        None => args
            .file
            .file_name()
            .map(|name| name.to_string_lossy().into_owned())
            .ok_or_else(|| {
                CliError::Usage(format!(
                    "object put: {} has no file name",
                    args.file.display()
                ))
            })?,
    };
    let action = format!("object put {} {name}", args.bucket);
    let file = tokio::fs::File::open(&args.file)
        .await
        .map_err(|source| CliError::ReadFile {
            what: "the object's file",
            path: args.file.display().to_string(),
            source,
        })?;
    let size_bytes = file.metadata().await.map(|meta| meta.len()).unwrap_or(0);
    let store = open(context, &args.bucket).await?;
    let bar = progress::bytes(size_bytes, "Uploading");
    let mut file = bar.wrap_async_read(file);
    let info = store
        .put(name.as_str(), &mut file)
        .await
        .map_err(CliError::client(action))?;
    bar.finish_and_clear();
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
    let bar = progress::bytes(object.info.size as u64, "Downloading");
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
        if buckets.is_empty() {
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
        rows.push([
            info.name.clone(),
            units::format_bytes(info.size as u64),
            info.modified
                .map(|time| time.to_string())
                .unwrap_or_default(),
        ]);
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
