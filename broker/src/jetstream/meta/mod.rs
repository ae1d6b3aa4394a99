//! The JetStream catalog: every stream's name and config as the meta
//! shard holds them (the meta group's state, once there is a cluster).
//! Sans-IO: [`Catalog::check`] decides a client's create, update or delete
//! against it with nats-server's checks and errors (a name in use, a
//! stream not found, overlapping subjects, the server's storage
//! reservations) and returns the change; [`Catalog::apply`] records a
//! change, the only way the catalog moves. On one node the meta shard
//! checks and applies at once, then sends the change to the stream's
//! owner; in a cluster the meta group's leader checks and every member
//! applies the committed entry.

use std::collections::BTreeMap;

use super::api::error::ApiError;
use super::stream::config::{self as stream_config, StorageType, StreamConfig};

pub mod cluster;
pub mod membership;
#[cfg(test)]
mod tests;

/// The server's storage limits streams reserve `max_bytes` against
/// (`max_file_store` / `max_memory_store`; negative: none).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoreLimits {
    pub max_file_bytes: i64,
    pub max_memory_bytes: i64,
}

impl StoreLimits {
    fn of(&self, storage: StorageType) -> i64 {
        match storage {
            StorageType::File => self.max_file_bytes,
            StorageType::Memory => self.max_memory_bytes,
        }
    }
}

/// What a client asks of the catalog.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetaOperation {
    Create,
    Update,
    Delete,
}

/// A change the catalog accepted, for the stream's owner to carry out.
#[derive(Debug, Clone, PartialEq)]
pub enum MetaChange {
    /// A new stream in Raft group `group`.
    Create {
        config: StreamConfig,
        group: u64,
    },
    /// A create of an existing stream with the same config: nothing
    /// changes, the owner answers with its info.
    Exists {
        config: StreamConfig,
    },
    /// A new config for an existing stream (already merged and checked).
    Update {
        config: StreamConfig,
    },
    Delete {
        name: String,
    },
}

/// Why the catalog refused a request.
#[derive(Debug, Clone, PartialEq)]
pub enum MetaRefusal {
    /// nats-server's error for it.
    Api(ApiError),
    /// The stream exists but its config is damaged: it is offline (the
    /// host knows why).
    Damaged,
}

impl From<ApiError> for MetaRefusal {
    fn from(error: ApiError) -> MetaRefusal {
        MetaRefusal::Api(error)
    }
}

/// Every stream's config; `None`: the stream exists but its stored
/// config is damaged.
#[derive(Debug)]
pub struct Catalog {
    streams: BTreeMap<String, Option<StreamConfig>>,
    limits: StoreLimits,
    /// In a cluster replicas may be more than one.
    pub clustered: bool,
}

impl Catalog {
    pub fn new(limits: StoreLimits) -> Catalog {
        Catalog {
            streams: BTreeMap::new(),
            limits,
            clustered: false,
        }
    }

    /// A stream found at start (`None`: its config did not read back).
    pub fn load(&mut self, name: String, config: Option<StreamConfig>) {
        self.streams.insert(name, config);
    }

    /// Forgets every stream (a cluster's catalog comes from the meta group).
    pub fn clear(&mut self) {
        self.streams.clear();
    }

    /// A create its owner could not carry out is forgotten.
    pub fn forget(&mut self, name: &str) {
        self.streams.remove(name);
    }

    /// Names of the streams whose subjects overlap `subject` (all without
    /// one), in order.
    pub fn names_matching(&self, subject: Option<&str>) -> Vec<String> {
        self.streams
            .iter()
            .filter(|(_, config)| stream_config::listed_for(subject, config.as_ref()))
            .map(|(name, _)| name.clone())
            .collect()
    }

    pub fn contains(&self, name: &str) -> bool {
        self.streams.contains_key(name)
    }

    /// Decides `operation` on stream `name` with the request body
    /// `payload` (a config for create and update, empty for delete).
    /// `new_group` names the Raft group of a stream created.
    pub fn check(
        &self,
        operation: MetaOperation,
        name: &str,
        payload: &[u8],
        new_group: impl FnOnce() -> u64,
    ) -> Result<MetaChange, MetaRefusal> {
        if operation == MetaOperation::Delete {
            if !super::api::json::is_empty_request(payload) {
                return Err(ApiError::empty_request_expected().into());
            }
            if !self.streams.contains_key(name) {
                return Err(ApiError::stream_not_found().into());
            }
            return Ok(MetaChange::Delete {
                name: name.to_string(),
            });
        }
        let create = operation == MetaOperation::Create;
        let config = stream_config::parse_for(name, payload, create, self.clustered)?;
        match (create, self.streams.get(name)) {
            (_, Some(None)) => Err(MetaRefusal::Damaged),
            (true, Some(Some(current))) => {
                if !current.same_as(&config) {
                    return Err(ApiError::stream_name_in_use().into());
                }
                Ok(MetaChange::Exists {
                    config: current.clone(),
                })
            }
            (false, None) => Err(ApiError::stream_not_found().into()),
            (true, None) => {
                self.check_reservation(&config, None)?;
                self.check_overlap(name, &config)?;
                Ok(MetaChange::Create {
                    config,
                    group: new_group(),
                })
            }
            (false, Some(Some(current))) => {
                let config = stream_config::apply_update(current, &config, self.clustered)?;
                self.check_reservation(&config, Some(current))?;
                self.check_overlap(name, &config)?;
                Ok(MetaChange::Update { config })
            }
        }
    }

    /// Records an accepted change.
    pub fn apply(&mut self, change: &MetaChange) {
        match change {
            MetaChange::Create { config, .. } | MetaChange::Update { config } => {
                self.streams
                    .insert(config.name.clone(), Some(config.clone()));
            }
            MetaChange::Exists { .. } => {}
            MetaChange::Delete { name } => {
                self.streams.remove(name);
            }
        }
    }

    /// nats-server's server limit check on create and update: the streams'
    /// `max_bytes` reservations of one storage type (this stream's current
    /// one included) plus what the request adds may not exceed
    /// `max_file_store` / `max_memory_store`. A created stream without
    /// `max_bytes` adds 1 byte (none fits once reservations fill the limit);
    /// an update adds only the raise of its `max_bytes`.
    fn check_reservation(
        &self,
        config: &StreamConfig,
        current: Option<&StreamConfig>,
    ) -> Result<(), ApiError> {
        let limit_bytes = self.limits.of(config.storage);
        if limit_bytes < 0 {
            return Ok(());
        }
        let reserved_bytes = self
            .streams
            .values()
            .flatten()
            .filter(|other| other.storage == config.storage)
            .map(|other| other.max_bytes.max(0))
            .fold(0i64, i64::saturating_add);
        let added_bytes = match current {
            None if config.max_bytes < 0 => 1,
            None => config.max_bytes,
            Some(current) => (config.max_bytes.max(0) - current.max_bytes.max(0)).max(0),
        };
        let over = reserved_bytes > limit_bytes || added_bytes > limit_bytes - reserved_bytes;
        if !over {
            return Ok(());
        }
        Err(match config.storage {
            StorageType::File => ApiError::insufficient_storage(),
            StorageType::Memory => ApiError::insufficient_memory(),
        })
    }

    /// Another stream's subjects may not overlap this one's.
    fn check_overlap(&self, name: &str, config: &StreamConfig) -> Result<(), ApiError> {
        let overlaps = self.streams.iter().any(|(other, entry)| {
            other != name
                && entry.as_ref().is_some_and(|other| {
                    stream_config::any_subjects_overlap(&other.subjects, &config.subjects)
                })
        });
        if overlaps {
            return Err(ApiError::subjects_overlap());
        }
        Ok(())
    }
}
