//! tern-cli's integration tests: one binary, one module per area.
//! Run one module with `cargo test -p tern-cli --test it <module>::`.

mod bench_cli;
mod cli;
mod iotune;
mod nkey;
mod storage;
mod tune;
