//! `tern`: the operator CLI. It will carry `tern stream …`, `tern consumer …`,
//! `tern pub/sub`, `tern bench`, `tern tune`, `tern nvme` and `tern check` as
//! their issues land; today it only reports what exists.

fn main() {
    let command = std::env::args().nth(1);
    match command.as_deref() {
        Some("--version") | Some("-V") => println!("tern {}", env!("CARGO_PKG_VERSION")),
        _ => {
            eprintln!(
                "tern {}: no subcommands yet (bench, tune, nvme, stream, consumer arrive with their issues).\n\
                 Run the broker with `tern-server` (cargo run --release -p tern-broker).",
                env!("CARGO_PKG_VERSION")
            );
            std::process::exit(2);
        }
    }
}
