//! Empty: this package holds tern-server's integration tests
//! (`tests/it/`: `cargo build -p tern-broker && cargo test -p tern-it`, or
//! everything with `cargo test --workspace`).
