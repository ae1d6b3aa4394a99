//! `tern nkey gen user|server`: a new NKey pair in the NATS formats, as
//! `nk -gen <type> -pubout` prints it: the seed (`SU…`, `SN…`) on the first
//! line, the public key (`U…`, `N…`) on the second. The public key goes in
//! the server's `[authorization] users = [ { nkey = "U…" } ]`; the seed
//! stays with the client (nats-py `nkeys_seed`, async-nats `with_nkey`,
//! nats.go `nkeys.FromSeed`). With `--seed_file` the seed is written to a
//! new file readable by its owner only, and only the public key is printed.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Subcommand, ValueEnum};

#[derive(Debug, Subcommand)]
pub enum NkeyCommand {
    /// Generate a new key pair: prints the seed, then the public key.
    Gen(GenArgs),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum KeyKind {
    /// A client's key (`U…`), for `users = [ { nkey = … } ]`.
    User,
    /// A server's key (`N…`).
    Server,
}

#[derive(Debug, Args)]
pub struct GenArgs {
    /// What the key is for
    #[arg(value_enum)]
    kind: KeyKind,
    /// Write the seed to this new file (mode 0600) instead of printing it
    #[arg(long = "seed_file", alias = "seed-file", value_name = "FILE")]
    seed_file: Option<PathBuf>,
}

pub fn execute(command: NkeyCommand) -> ExitCode {
    match command {
        NkeyCommand::Gen(arguments) => generate(&arguments),
    }
}

fn generate(arguments: &GenArgs) -> ExitCode {
    let pair = match arguments.kind {
        KeyKind::User => nkeys::KeyPair::new_user(),
        KeyKind::Server => nkeys::KeyPair::new_server(),
    };
    let seed = pair.seed().expect("a generated key pair has its seed");
    let public = pair.public_key();
    match &arguments.seed_file {
        None => println!("{seed}\n{public}"),
        Some(path) => {
            if let Err(error) = write_seed(path, &seed) {
                eprintln!("tern nkey gen: cannot write {}: {error}", path.display());
                return ExitCode::from(2);
            }
            println!("{public}");
        }
    }
    ExitCode::SUCCESS
}

/// A new file (never an existing one overwritten), owner-only from its
/// creation on.
fn write_seed(path: &std::path::Path, seed: &str) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?;
    writeln!(file, "{seed}")?;
    file.sync_all()
}
