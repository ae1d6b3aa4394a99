//! Fuzzes CONNECT option parsing and validation: never panic on any JSON.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tern_broker::nats::proto::connect::ConnectOptions;

fuzz_target!(|data: &[u8]| {
    if let Ok(options) = ConnectOptions::parse(data) {
        let _ = options.validate();
    }
});
