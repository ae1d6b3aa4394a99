//! tern-storage's integration tests: one binary, one module per area.
//! Run one module with `cargo test -p tern-storage --test it <module>::`.

mod crash;
mod dma_block_store;
mod dma_journal;
mod pipeline;
