//! tern-tuning: host checks and tuning.
//!
//! This crate will own: CPU governor and isolation checks, IRQ affinity,
//! NVMe queue settings, sysctls, the disk probe (fdatasync latency, O_DIRECT
//! throughput), and NVMe namespace planning and carving through nvme-cli.
//! `tern tune`, `tern nvme` and `tern check` in `tern-cli` call into it.
//!
//! Nothing is implemented yet.
