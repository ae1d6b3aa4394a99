//! tern-raft's integration tests: one binary, one module per area.
//! Run one module with `cargo test -p tern-raft --test it <module>::`.

mod simulation;
mod smoke;
