//! tern-bench's integration tests: one binary, one module per area.
//! Run one module with `cargo test -p tern-bench --test it <module>::`.

mod common;

mod coordinated_omission;
mod rate_accuracy;
mod smoke;
