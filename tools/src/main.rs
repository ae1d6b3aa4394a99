//! `tern`: the operator CLI. `tern bench …` (the latency harness, crate
//! tern-bench), `tern storage check|repair` (damaged storage,
//! `storage.rs`), `tern nkey gen` (NKey pairs, `nkey.rs`), `tern tune`
//! (host settings, `tune.rs`) and `tern check` (host facts,
//! `host_check.rs`) work on files and processes; the rest talk to any NATS
//! server (tern or nats-server) through the client protocol, with the
//! `nats` CLI's command names and flags: `stream`, `consumer`, `pub`,
//! `sub`, `req`, `kv`, `object`, `server check` and `server cluster`
//! (the meta group: `meta.rs`); `server info|ls|report` and `top` read
//! the monitoring endpoints instead (`server.rs`, `top.rs`); `completions` prints a shell's completion
//! script. docs/cli.md lists them and what differs from the `nats` CLI.
//!
//! Every networked command prints a failure as one line on stderr
//! (`tern: <what failed>: <why>`) and exits 1; bad usage exits 2 (clap);
//! `server check` exits with its Nagios status (0 to 3).

mod api;
mod check;
mod connection;
mod consumer;
mod error;
mod export;
mod host_check;
mod iotune;
mod kv;
mod message;
mod meta;
mod monitor;
#[cfg(test)]
mod natscli;
mod nkey;
mod nvme;
mod object;
mod output;
mod progress;
mod server;
mod storage;
mod stream;
mod subject;
mod timestamp;
mod top;
mod translate;
mod tune;
mod units;

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use tern_bench::command::{self, BenchCommand};

use crate::connection::ConnectionArgs;
use crate::error::CliError;

#[derive(Debug, Parser)]
#[command(name = "tern", version, about = "tern: the operator CLI")]
struct Cli {
    #[command(subcommand)]
    command: Command,
    #[command(flatten)]
    connection: ConnectionArgs,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// JetStream streams: add, info, ls, edit, rm, purge, get, rmm
    #[command(visible_alias = "str", alias = "st", alias = "ms", alias = "s")]
    Stream(stream::StreamArgs),
    /// JetStream consumers: add, info, ls, next, rm
    #[command(visible_alias = "con", alias = "obs", alias = "c")]
    Consumer(consumer::ConsumerArgs),
    /// Publish messages (waiting for PubAcks on stream subjects)
    #[command(name = "pub", visible_alias = "publish")]
    Pub(message::PubArgs),
    /// Subscribe to a subject, or replay a stream
    #[command(name = "sub", visible_alias = "subscribe")]
    Sub(message::SubArgs),
    /// Send a request and print the reply
    #[command(name = "req", visible_alias = "request")]
    Req(message::ReqArgs),
    /// Key-value buckets: add, put, get, del, ls, watch
    #[command(subcommand)]
    Kv(kv::KvCommand),
    /// Object store buckets: add, put, get, ls, rm
    #[command(subcommand, visible_alias = "obj")]
    Object(object::ObjectCommand),
    /// Server health checks (Nagios exit codes), info, ls, report, cluster
    #[command(subcommand)]
    Server(ServerCommand),
    /// A live view of a server: totals, rates, connections by message rate
    Top(top::TopArgs),
    /// Shell completions: `tern completions bash|zsh|fish >FILE`
    Completions(CompletionsArgs),
    /// The open-loop latency harness: run workloads against NATS servers.
    #[command(subcommand)]
    Bench(BenchCommand),
    /// Check a stopped server's store for damage, and repair it.
    #[command(subcommand)]
    Storage(storage::StorageCommand),
    /// NKeys for authentication: `tern nkey gen user|server`.
    #[command(subcommand)]
    Nkey(nkey::NkeyCommand),
    /// Host settings for a tern node: `tern tune [check|apply]`.
    Tune(tune::TuneArgs),
    /// Host facts that explain a slow run (steal, idle states, IRQs, memlock, devices)
    Check(host_check::HostCheckArgs),
    /// Carve an NVMe drive into journal and block-store namespaces: plan, carve
    #[command(subcommand)]
    Nvme(nvme::NvmeCommand),
    /// Measure the journal's and block store's devices into the server's I/O profile
    Iotune(iotune::IotuneArgs),
}

impl Command {
    /// True for the commands that connect through the client protocol
    /// (and so read a nats CLI context).
    fn uses_connection(&self) -> bool {
        match self {
            Command::Server(ServerCommand::Check(_) | ServerCommand::Cluster(_)) => true,
            Command::Server(_)
            | Command::Top(_)
            | Command::Completions(_)
            | Command::Bench(_)
            | Command::Storage(_)
            | Command::Nkey(_)
            | Command::Tune(_)
            | Command::Check(_)
            | Command::Nvme(_)
            | Command::Iotune(_) => false,
            Command::Stream(_)
            | Command::Consumer(_)
            | Command::Pub(_)
            | Command::Sub(_)
            | Command::Req(_)
            | Command::Kv(_)
            | Command::Object(_) => true,
        }
    }
}

#[derive(Debug, clap::Args)]
struct CompletionsArgs {
    /// The shell
    shell: clap_complete::Shell,
}

#[derive(Debug, Subcommand)]
enum ServerCommand {
    /// One health check: one status line, exit 0 OK, 1 warning, 2
    /// critical, 3 unknown
    Check(check::CheckArgs),
    /// One node's summary from its monitoring endpoints
    #[command(alias = "i")]
    Info(server::InfoArgs),
    /// A table of nodes, one row each
    #[command(visible_alias = "list")]
    Ls(server::LsArgs),
    /// Reports from the monitoring endpoints: `jetstream`
    #[command(alias = "rep")]
    Report(server::ReportArgs),
    /// The JetStream meta group: peer-remove, step-down
    #[command(subcommand, visible_alias = "raft", alias = "r")]
    Cluster(meta::ClusterCommand),
}

fn main() -> ExitCode {
    let mut cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(error) => return usage_error(error),
    };
    if cli.command.uses_connection() {
        if let Err(error) = cli.connection.apply_context() {
            return finish(Err(error));
        }
    }
    match cli.command {
        Command::Storage(storage) => storage::execute(storage),
        Command::Nkey(nkey) => nkey::execute(nkey),
        Command::Tune(arguments) => tune::execute(&arguments),
        Command::Check(arguments) => host_check::execute(&arguments),
        Command::Nvme(command) => nvme::execute(command),
        Command::Iotune(arguments) => iotune::execute(&arguments),
        Command::Bench(mut bench) => match cli.connection.bench_credentials() {
            Ok(credentials) => {
                bench.set_credentials(credentials);
                execute_bench(bench)
            }
            Err(error) => {
                eprintln!("tern bench: {error}");
                ExitCode::from(2)
            }
        },
        Command::Stream(stream::StreamArgs {
            command: stream::StreamCommand::Verify(args),
            ..
        }) => finish(runtime().block_on(export::verify(&cli.connection, args))),
        Command::Server(ServerCommand::Check(args)) => {
            runtime().block_on(check::execute(&cli.connection, args))
        }
        Command::Server(ServerCommand::Cluster(command)) => {
            finish(runtime().block_on(meta::execute(&cli.connection, command)))
        }
        Command::Top(args) => finish(
            cli.connection
                .timeout()
                .and_then(|timeout| runtime().block_on(top::execute(args, timeout))),
        ),
        Command::Completions(args) => {
            use clap::CommandFactory;
            clap_complete::generate(
                args.shell,
                &mut Cli::command(),
                "tern",
                &mut std::io::stdout(),
            );
            ExitCode::SUCCESS
        }
        Command::Server(command) => {
            finish(runtime().block_on(monitoring(&cli.connection, command)))
        }
        Command::Consumer(consumer::ConsumerArgs {
            command: consumer::ConsumerCommand::Add(args),
            ..
        }) if args.validate || args.output.is_some() => {
            finish(consumer::offline(&args, std::time::SystemTime::now()).map(drop))
        }
        Command::Stream(stream::StreamArgs {
            command: stream::StreamCommand::Add(args),
            ..
        }) if args.validate || args.output.is_some() => finish(stream::offline(&args)),
        networked => finish(runtime().block_on(execute(&cli.connection, networked))),
    }
}

/// A networked command's exit: its failure as one line on stderr.
fn finish(result: Result<(), CliError>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("tern: {}", error.to_string().replace('\n', " "));
            ExitCode::FAILURE
        }
    }
}

/// The commands that read monitoring endpoints (no client connection).
async fn monitoring(connection: &ConnectionArgs, command: ServerCommand) -> Result<(), CliError> {
    let timeout = connection.timeout()?;
    match command {
        ServerCommand::Info(args) => server::info(args, timeout).await,
        ServerCommand::Ls(args) => server::ls(args, timeout).await,
        ServerCommand::Report(args) => server::report_jetstream(args, timeout).await,
        ServerCommand::Check(_) | ServerCommand::Cluster(_) => {
            unreachable!("dispatched in main")
        }
    }
}

/// Help and version print as clap renders them; a usage error prints as
/// one line (clap's first) and exits 2.
fn usage_error(error: clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    if matches!(
        error.kind(),
        ErrorKind::DisplayHelp
            | ErrorKind::DisplayVersion
            | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
    ) {
        let _ = error.print();
        return ExitCode::from(if error.use_stderr() { 2 } else { 0 });
    }
    let rendered = error.render().to_string();
    let first_block: Vec<&str> = rendered
        .lines()
        .take_while(|line| !line.trim().is_empty())
        .map(str::trim)
        .collect();
    let text = first_block.join(" ");
    let text = text.strip_prefix("error: ").unwrap_or(&text);
    eprintln!("tern: {text} (see --help)");
    ExitCode::from(2)
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime on the main thread")
}

/// Checks what can be checked without a server (sizes, durations,
/// headers), so bad input is named before any connection is tried.
fn validate(command: &Command) -> Result<(), CliError> {
    match command {
        Command::Stream(stream::StreamArgs { command, .. }) => match command {
            stream::StreamCommand::Add(args) => stream::add_config(args).map(drop),
            stream::StreamCommand::Edit(args) => args.config.apply(&mut serde_json::Map::new()),
            stream::StreamCommand::Purge(args) => stream::purge_request(args).map(drop),
            _ => Ok(()),
        },
        Command::Consumer(consumer::ConsumerArgs {
            command: consumer::ConsumerCommand::Add(args),
            ..
        }) => consumer::create_request(args, std::time::SystemTime::now()).map(drop),
        Command::Pub(args) => message::check_publish(args),
        Command::Sub(args) => message::check_subscribe(args),
        Command::Req(args) => message::headers(&args.headers).map(drop),
        Command::Kv(kv::KvCommand::Add(args)) => kv::bucket_config(args).map(drop),
        Command::Object(object::ObjectCommand::Add(args)) => object::bucket_config(args).map(drop),
        _ => Ok(()),
    }
}

async fn execute(connection: &ConnectionArgs, command: Command) -> Result<(), CliError> {
    connection.timeout()?;
    validate(&command)?;
    let api = connection.api().await?;
    match command {
        Command::Stream(command) => stream::execute(&api, command).await,
        Command::Consumer(command) => consumer::execute(&api, command.command).await,
        Command::Pub(args) => message::publish(&api, args).await,
        Command::Sub(args) => message::subscribe(&api, args).await,
        Command::Req(args) => message::request(&api, args).await,
        Command::Kv(command) => kv::execute(&api, command).await,
        Command::Object(command) => object::execute(&api, command).await,
        Command::Server(_)
        | Command::Top(_)
        | Command::Completions(_)
        | Command::Bench(_)
        | Command::Storage(_)
        | Command::Nkey(_)
        | Command::Tune(_)
        | Command::Check(_)
        | Command::Nvme(_)
        | Command::Iotune(_) => {
            unreachable!("dispatched in main")
        }
    }
}

fn execute_bench(bench: BenchCommand) -> ExitCode {
    match command::execute(bench) {
        Ok(outcome) => {
            println!("{}", outcome.report.markdown());
            for file in &outcome.files {
                eprintln!("wrote {}", file.display());
            }
            if outcome.all_ok {
                ExitCode::SUCCESS
            } else {
                eprintln!("tern bench: at least one run failed (see the report)");
                ExitCode::FAILURE
            }
        }
        Err(error) => {
            eprintln!("tern bench: {error}");
            ExitCode::from(2)
        }
    }
}
