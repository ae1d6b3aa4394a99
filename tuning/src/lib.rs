//! tern-tuning: host checks and tuning.
//!
//! Built: `tune` (the registry of tuners behind `tern tune check|apply`,
//! each a checker and an action over sysfs and procfs files, IRQ affinity
//! included), `facts` (the host facts `tern check` reports), on `host`
//! (those files under an injectable root, so every tuner and fact is
//! tested on a fake tree), and `nvme` (the namespace planner behind `tern
//! nvme plan|carve`, pure over nvme-cli's JSON).
//!
//! `tern iotune`, the disk probe, lives in the CLI; its profile format in
//! tern-broker, whose server reads it.

pub mod facts;
pub mod host;
pub mod nvme;
pub mod tune;
