//! tern-tuning: host checks and tuning.
//!
//! Built: `tune` (the registry of tuners behind `tern tune check|apply`,
//! each a checker and an action over sysfs and procfs files) and `facts`
//! (the host facts `tern check` reports), on `host` (those files under an
//! injectable root, so every tuner and fact is tested on a fake tree).
//!
//! Still to come (issue: bare-metal NVMe): IRQ affinity of NVMe and NIC
//! queues, cpuidle and halt-polling settings, the disk probe (`tern
//! iotune`), and NVMe namespace planning and carving through nvme-cli
//! (`tern nvme`).

pub mod facts;
pub mod host;
pub mod tune;
