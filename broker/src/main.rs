//! `tern-server`: see `tern-server --help`.

use tern_broker::{config::Config, logger, server};

fn main() {
    let config = match Config::from_args(std::env::args()) {
        Ok(config) => config,
        Err(error) => error.exit(),
    };
    logger::init(if config.debug {
        log::LevelFilter::Debug
    } else {
        log::LevelFilter::Info
    });
    // Fail-stop: a panic on any shard takes the whole process down rather
    // than leaving a node that accepts connections it can no longer serve.
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        default_hook(info);
        std::process::abort();
    }));
    if let Err(error) = server::run(config) {
        log::error!(target: "tern::server", "{error}");
        eprintln!("tern-server: {error}");
        std::process::exit(1);
    }
}
