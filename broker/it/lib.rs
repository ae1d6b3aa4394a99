//! tern-server's integration tests live in `tests/it/` (`cargo build -p
//! tern-broker && cargo test -p tern-it`, or everything with `cargo test
//! --workspace`). The library holds only what other crates' tests share
//! with them: [`loop_device`] (the raw block devices of the raw-journal,
//! journal crash and `tern iotune` tests).

pub mod loop_device;
