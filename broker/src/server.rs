//! Starting the node: check the host, reserve the ports, start one shard per
//! configured CPU, and wire each shard's listener, peers and monitor.

use std::net::{SocketAddr, ToSocketAddrs};
use std::rc::Rc;
use std::sync::atomic::AtomicUsize;
use std::sync::Arc;
use std::time::SystemTime;

use glommio::net::TcpListener;
use tern_shard::{run_shards, ShardContext, ShardSpec};

use crate::config::absolute_data_paths;
use crate::config::Config;
use crate::jetstream::identity::NodeIdentity;
use crate::jetstream::journal_location::PreparedDevice;
use crate::jetstream::recovery::RecoveryError;
use crate::jetstream::usage::StorageUsage;
use crate::jetstream::{JetStream, INTEREST_TIMEOUT};
use crate::mesh::outbox::PeerLinks;
use crate::monitor::http::Monitor;
use crate::proto::info::{generate_server_id, NATS_COMPATIBLE_VERSION, TERN_VERSION};
use crate::random::random_u64;
use crate::shard::message::ShardMessage;
use crate::shard::reload;
use crate::shard::{Shard, ShardLinks, ShardPosition, Shared};

#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("{0}")]
    Memlock(#[from] tern_shard::memlock::MemlockError),
    #[error("cannot resolve listen address {address}: {message}")]
    Address { address: String, message: String },
    #[error("cannot listen on {address}: {source}")]
    Listen {
        address: String,
        source: std::io::Error,
    },
    #[error("cannot create the data directory {path}: {source}")]
    StoreDir {
        path: String,
        source: std::io::Error,
    },
    #[error("{0}")]
    Runtime(#[from] tern_shard::RuntimeError),
    #[error("{0}")]
    Tls(#[from] crate::tls::TlsError),
    #[error("shard {shard}: {source}")]
    Shard {
        shard: usize,
        source: Box<ShardError>,
    },
    #[error("{0}")]
    JetStream(String),
    #[error("{0}")]
    Cluster(String),
}

impl ServerError {
    /// Shard `shard` stopped the server.
    fn shard(shard: usize) -> impl FnOnce(ShardError) -> ServerError {
        move |source| ServerError::Shard {
            shard,
            source: Box::new(source),
        }
    }
}

/// Why a shard stopped the server.
#[derive(Debug, thiserror::Error)]
pub enum ShardError {
    #[error("JetStream: {0}")]
    JetStream(#[from] RecoveryError),
    #[error("cannot listen for clients on {address}: {source}")]
    ClientListen {
        address: String,
        source: glommio::GlommioError<()>,
    },
    #[error("cannot listen for monitoring on {host}:{port:?}: {source}")]
    MonitorListen {
        host: String,
        port: Option<u16>,
        source: glommio::GlommioError<()>,
    },
}

fn resolve(host: &str, port: u16) -> Result<SocketAddr, ServerError> {
    (host, port)
        .to_socket_addrs()
        .map_err(|error| ServerError::Address {
            address: format!("{host}:{port}"),
            message: error.to_string(),
        })?
        .next()
        .ok_or_else(|| ServerError::Address {
            address: format!("{host}:{port}"),
            message: "no address".into(),
        })
}

/// Binds (without listening) a port-0 socket with SO_REUSEPORT so every shard
/// can then bind the same, now known, port. Kept open while the server runs.
fn reserve_port(address: SocketAddr) -> Result<(socket2::Socket, u16), ServerError> {
    let listen_error = |source| ServerError::Listen {
        address: address.to_string(),
        source,
    };
    let socket = socket2::Socket::new(
        socket2::Domain::for_address(address),
        socket2::Type::STREAM,
        None,
    )
    .map_err(listen_error)?;
    socket.set_reuse_port(true).map_err(listen_error)?;
    socket.bind(&address.into()).map_err(listen_error)?;
    let port = socket
        .local_addr()
        .map_err(listen_error)?
        .as_socket()
        .map(|bound| bound.port())
        .expect("an inet socket has an inet address");
    Ok((socket, port))
}

/// How long a shard waits for the others to finish starting (recovery).
const STARTUP_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(300);
/// How long shutdown waits for streams to checkpoint.
const SHUTDOWN_CHECKPOINT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// Runs the server until SIGINT/SIGTERM (SIGHUP reloads: `crate::reload`).
/// Rebuilds a damaged or missing `layout` from the journals when they name
/// it unambiguously (logged as a warning naming what was wrong); refuses
/// with `damage` and the reason otherwise.
fn rebuild_layout(
    store_dir: &std::path::Path,
    jetstream: &crate::config::JetStreamConfig,
    damage: &crate::jetstream::layout::LayoutError,
) -> Result<(), ServerError> {
    use crate::jetstream::store_check;
    let options = store_check::CheckOptions {
        store_dir: store_dir.to_path_buf(),
        journal_dir: jetstream.journal_dir.clone(),
        journal_segment_bytes: jetstream.journal_segment_bytes,
        journal_segments: jetstream.journal_segments,
        sync: jetstream.sync,
        journal_device: crate::jetstream::journal_location::is_device(&jetstream.journal_dir),
    };
    let report = store_check::repair(&options, &store_check::RepairTarget::Layout, true)
        .map_err(|error| ServerError::JetStream(format!("{damage}; rebuilding it: {error}")))?;
    if !report.applied {
        return Err(ServerError::JetStream(format!(
            "{damage}; it cannot be rebuilt here: {}",
            report.refused.as_deref().unwrap_or("refused")
        )));
    }
    log::warn!(target: "tern::jetstream", "{damage}; rebuilt from the journals (as `tern storage repair --layout` does; nothing discarded)");
    Ok(())
}

/// The cluster node's Raft identity from its store (see
/// `jetstream::identity`), logged when it is new or was restored.
fn open_node_identity(
    store_dir: &std::path::Path,
    jetstream: &crate::config::JetStreamConfig,
    server_name: &str,
) -> Result<crate::jetstream::identity::NodeIdentity, ServerError> {
    use crate::jetstream::identity::{self, Origin, Store};
    let root = store_dir.join("jetstream");
    let holds_data = root.join("layout").exists()
        || crate::jetstream::layout::data_evidence(
            &root,
            &jetstream.journal_dir,
            jetstream.journal_segments,
        )
        .is_some()
        || root
            .join("meta")
            .join(crate::jetstream::persist::META_STATE_FILE)
            .exists();
    let checkpoint_node = crate::jetstream::cluster::checkpoint_node(&root);
    let store = Store {
        root: &root,
        holds_data,
        checkpoint_node,
    };
    let (identity, origin) = identity::open(&store, server_name, random_u64)
        .map_err(|error| ServerError::JetStream(error.to_string()))?;
    match origin {
        Origin::Read => {}
        Origin::Created => {
            log::info!(target: "tern::jetstream", "new store: this node's Raft identity is {:016x} ({})", identity.id, root.join(identity::FILE).display())
        }
        Origin::Restored => {
            log::warn!(target: "tern::jetstream", "{} was missing: this node's Raft identity {:016x} restored from its meta checkpoint", root.join(identity::FILE).display(), identity.id)
        }
        Origin::Legacy => {
            log::info!(target: "tern::jetstream", "store of an earlier version: this node's Raft identity is its name's hash, {:016x}, now kept in {}", identity.id, root.join(identity::FILE).display())
        }
    }
    Ok(identity)
}

pub fn run(mut config: Config) -> Result<(), ServerError> {
    absolute_data_paths(&mut config);
    // Before any shard allocates: see `tern_shard::heap`.
    let heap = tern_shard::heap::keep_large_buffers_resident();
    if heap != tern_shard::heap::HeapPolicy::Applied {
        log::warn!(target: "tern::server", "heap policy not applied ({heap:?}): large buffers are mapped and unmapped on every use");
    }
    let outcome = tern_shard::memlock::check(config.cores.len(), config.io_memory_bytes as u64)?;
    // Nothing is persisted yet (storage arrives with JetStream), but the data
    // directory is the operator's promise of where it will be: fail now if
    // it cannot exist.
    std::fs::create_dir_all(&config.store_dir).map_err(|source| ServerError::StoreDir {
        path: config.store_dir.display().to_string(),
        source,
    })?;
    log::debug!(target: "tern::server", "memlock: {outcome:?}");
    let (journal_device, node_identity) = prepare_jetstream_store(&mut config)?;
    let mut random = [0u8; 32];
    for chunk in random.chunks_mut(8) {
        chunk.copy_from_slice(&random_u64().to_le_bytes());
    }
    let server_id = generate_server_id(random);
    let server_name = config
        .server_name
        .clone()
        .unwrap_or_else(|| server_id.clone());
    let address = resolve(&config.host, config.port)?;
    // The port is taken now (a port in use fails here, before recovery),
    // but nothing listens on it until the server can serve: a client
    // connecting during start-up is refused, not reset (nats-server).
    let (_reservation, client_port) = reserve_port(address)?;
    // Certificates are read now: a bad file stops the start, named.
    let tls = crate::tls::server(config.tls.as_ref())?;
    let route_tls = match config
        .cluster
        .as_ref()
        .and_then(|cluster| cluster.tls.as_ref())
    {
        None => None,
        Some(tls) => Some(crate::tls::route_tls(tls)?),
    };
    let route_listeners = bind_route_listeners(&config)?;
    log_start(&config, &server_name, &server_id);
    let spec = ShardSpec {
        cpus: config.cores.clone(),
        pinned: !config.unpinned,
        io_memory_bytes: config.io_memory_bytes,
        mesh_ring_capacity: config.mesh_ring_capacity,
        watch_signals: true,
        spin_before_park: Some(config.spin_before_park),
    };
    let storage_usage = Arc::new(StorageUsage::new(config.cores.len()));
    let node_id = node_identity.map_or_else(
        || crate::cluster::node_id(&server_name),
        |identity| identity.id,
    );
    let shared = Arc::new(Shared {
        config,
        server_id,
        node_id,
        server_name,
        started: SystemTime::now(),
        client_port,
        route_tls,
        connections: AtomicUsize::new(0),
        storage_usage,
        tls_at_start: tls,
    });
    let seed = random_u64();
    let route_listeners = Arc::new(route_listeners);
    let results = run_shards::<ShardMessage, _, _, _>(&spec, move |context| {
        let shared = shared.clone();
        let route_listeners = route_listeners.clone();
        async move { shard_main(shared, context, seed, &route_listeners).await }
    })?;
    // Released only now: every shard has closed its journal.
    drop(journal_device);
    for (shard, result) in results.into_iter().enumerate() {
        result.map_err(ServerError::shard(shard))?;
    }
    log::info!(target: "tern::server", "Server Exiting..");
    Ok(())
}

/// JetStream's store before the shards start: in a cluster, the store's
/// Raft identity (read before the layout may be created: a new store gets
/// a new one); the layout, rebuilt in a cluster when its own journals name
/// it unambiguously; a raw journal device, held exclusively until the
/// server stops; and the I/O profile.
fn prepare_jetstream_store(
    config: &mut Config,
) -> Result<(Option<PreparedDevice>, Option<NodeIdentity>), ServerError> {
    let clustered = config.cluster.is_some();
    let Some(jetstream) = config.jetstream.as_mut() else {
        return Ok((None, None));
    };
    let mut journal_device = None;
    let mut node_identity = None;
    if clustered {
        let name = config.server_name.as_deref().ok_or_else(|| {
            ServerError::JetStream("jetstream cluster requires `server_name` to be set".into())
        })?;
        node_identity = Some(open_node_identity(&config.store_dir, jetstream, name)?);
    }
    let open = || {
        crate::jetstream::layout::open(
            &config.store_dir,
            &jetstream.journal_dir,
            jetstream.journal_segments,
            config.cores.len(),
            random_u64,
        )
    };
    let layout = match open() {
        Ok(layout) => layout,
        // A cluster node does not stay down for a damaged layout its
        // own journals name unambiguously (the rebuild `tern storage
        // repair --layout` makes, which discards nothing): the fault
        // harness truncated one. Anything less certain still refuses.
        Err(
            error @ (crate::jetstream::layout::LayoutError::Damaged { .. }
            | crate::jetstream::layout::LayoutError::Missing { .. }),
        ) if clustered => {
            rebuild_layout(&config.store_dir, jetstream, &error)?;
            open().map_err(|error| ServerError::JetStream(error.to_string()))?
        }
        Err(error) => return Err(ServerError::JetStream(error.to_string())),
    };
    if crate::jetstream::journal_location::is_device(&jetstream.journal_dir) {
        let prepared = crate::jetstream::journal_location::prepare_device(
            &config.store_dir,
            jetstream,
            &layout,
            config.server_name.as_deref(),
            random_u64,
        )
        .map_err(|error| ServerError::JetStream(error.to_string()))?;
        jetstream.journal_regions = prepared.region_offsets();
        journal_device = Some(prepared);
    } else if jetstream.journal_dir.starts_with("/dev") {
        return Err(ServerError::JetStream(format!(
            "journal {}: not a block device (a journal directory is never made under /dev)",
            jetstream.journal_dir.display()
        )));
    }
    jetstream.journal_ids = layout.journal_ids;
    read_io_profile(jetstream, &config.store_dir)?;
    Ok((journal_device, node_identity))
}

/// The I/O profile `tern iotune` wrote (`io_profile`, or the default file
/// in the store directory): the journal's batches and the block store's
/// buffers are sized from it.
fn read_io_profile(
    jetstream: &mut crate::config::JetStreamConfig,
    store_dir: &std::path::Path,
) -> Result<(), ServerError> {
    let profile = jetstream
        .io_profile
        .clone()
        .unwrap_or_else(|| store_dir.join(crate::io_profile::FILE_NAME));
    jetstream.io_settings = crate::io_profile::read(&profile)
        .map_err(|error| ServerError::JetStream(error.to_string()))?;
    match (&jetstream.io_settings, &jetstream.io_profile) {
        (Some(settings), _) => {
            log::info!(target: "tern::jetstream", "I/O profile {}: journal batches up to {} bytes, block-store writes of {} bytes, read-ahead {} bytes with {} runs prefetched", profile.display(), settings.journal_batch_bytes_max, settings.store_write_buffer_bytes, settings.store_read_ahead_bytes, settings.store_prefetch_runs);
        }
        (None, Some(_)) => {
            return Err(ServerError::JetStream(format!(
                "I/O profile {}: no such file (io_profile; `tern iotune` writes it)",
                profile.display()
            )))
        }
        (None, None) => {}
    }
    Ok(())
}

/// The cluster port: one listening socket per shard, steered by source
/// port (`cluster::steer`); each shard takes its own.
fn bind_route_listeners(config: &Config) -> Result<Option<RouteListeners>, ServerError> {
    // The cluster port: one listening socket per shard, steered by source
    // port (cluster::steer). Each shard takes its own.
    Ok(match &config.cluster {
        None => None,
        Some(cluster) => {
            let address = resolve(&cluster.listen.host, cluster.listen.port)?;
            let sockets = crate::cluster::steer::listen_group(address, config.cores.len())
                .map_err(|error| ServerError::Cluster(error.to_string()))?;
            let port = sockets[0]
                .local_addr()
                .ok()
                .and_then(|bound| bound.as_socket())
                .map_or(0, |bound| bound.port());
            let fds: Vec<i32> = sockets
                .into_iter()
                .map(std::os::fd::IntoRawFd::into_raw_fd)
                .collect();
            Some(RouteListeners { fds, port })
        }
    })
}

/// The start-up banner: version, name, shards, data, authentication, TLS.
fn log_start(config: &Config, server_name: &str, server_id: &str) {
    log::info!(target: "tern::server", "Starting tern-server");
    log::info!(target: "tern::server", "  Version:  {TERN_VERSION} (NATS protocol compatible with {NATS_COMPATIBLE_VERSION})");
    log::info!(target: "tern::server", "  Name:     {server_name}");
    log::info!(target: "tern::server", "  ID:       {server_id}");
    if config.unpinned {
        log::info!(target: "tern::server", "  Shards:   {} unpinned", config.cores.len());
    } else {
        log::info!(target: "tern::server", "  Shards:   {} on CPUs {}", config.cores.len(), config.cores);
    }
    log::info!(target: "tern::server", "  Data:     {}", config.store_dir.display());
    if config.authorization.required() {
        log::info!(target: "tern::server", "  Auth:     {}", config.authorization.describe());
        if config.authorization.has_plain_passwords() {
            log::warn!(target: "tern::server", "Plaintext passwords detected, use nkeys or bcrypt");
        }
    }
    if let Some(tls) = &config.tls {
        log::info!(target: "tern::server", "  TLS:      {} ({}{})", tls.cert_file.display(),
            if tls.verify { "client certificates verified" } else { "no client certificates" },
            if tls.handshake_first { ", handshake first" } else { "" });
    }
    if let Some(tls) = config
        .cluster
        .as_ref()
        .and_then(|cluster| cluster.tls.as_ref())
    {
        log::info!(target: "tern::server", "  Routes:   mutual TLS, {} signed by {}", tls.cert_file.display(), tls.ca_file.display());
    }
    if let Some(path) = &config.config_file {
        log::info!(target: "tern::server", "Using configuration file: {}", path.display());
    }
}

/// The shard's routes accept on its cluster socket and dial the
/// configured nodes (in a cluster).
fn start_routes(shard: &Rc<Shard>, route_listeners: &Option<RouteListeners>) {
    let config = &shard.shared.config;
    let (Some(listeners), Some(cluster)) = (route_listeners, &config.cluster) else {
        return;
    };
    let index = shard.index;
    // SAFETY: the descriptor is a listening socket made for this shard
    // alone at start-up; ownership passes to the listener here, once.
    let listener =
        unsafe { <TcpListener as std::os::fd::FromRawFd>::from_raw_fd(listeners.fds[index]) };
    crate::cluster::routes::start(shard, listener);
    if index == 0 {
        log::info!(target: "tern::server", "Cluster name is {}", cluster.name);
        if config.jetstream.is_some() {
            log::info!(target: "tern::server", "JetStream clustered: the meta group forms once every configured route is connected (every node lists every node); streams take num_replicas 1, 3 or 5");
        }
        log::info!(target: "tern::server", "Listening for route connections on {}:{}", cluster.listen.host, listeners.port);
    }
}

/// Test hook: with `TERN_TEST_HOLD_STARTUP=<path>`, start-up stops after
/// JetStream recovered, before clients are accepted, until `<path>` exists
/// (the start-up test connects in between). Unset in production: no wait.
async fn hold_startup_for_tests(shutdown: &tern_shard::Shutdown) {
    let Some(path) = std::env::var_os("TERN_TEST_HOLD_STARTUP") else {
        return;
    };
    let path = std::path::PathBuf::from(path);
    log::info!(target: "tern::server", "start-up held until {} exists", path.display());
    while !path.exists() {
        let pause = tern_shard::timer::sleep(std::time::Duration::from_millis(5));
        if futures_lite::future::or(
            async {
                pause.await;
                false
            },
            async {
                shutdown.wait().await;
                true
            },
        )
        .await
        {
            return;
        }
    }
}

/// The cluster port's listening sockets, one per shard (raw descriptors,
/// each taken over by its shard), and the port they listen on.
struct RouteListeners {
    fds: Vec<i32>,
    port: u16,
}

/// A shard's routes, from the cluster config and this node's identity.
fn shard_routes(
    shared: &Shared,
    index: usize,
    shard_count: usize,
    route_port: u16,
    seed: u64,
) -> Option<crate::cluster::routes::Routes> {
    let config = &shared.config;
    let cluster = config.cluster.clone()?;
    let client_url = crate::config::HostPort {
        host: config.host.clone(),
        port: shared.client_port,
    };
    let route_url = crate::config::HostPort {
        host: cluster.listen.host.clone(),
        port: route_port,
    };
    let hello = crate::cluster::frame::Hello {
        cluster: cluster.name.clone(),
        server_id: shared.server_id.clone(),
        server_name: shared.server_name.clone(),
        node_id: shared.node_id,
        shard_count: shard_count as u16,
        shard_index: index as u16,
        client_url: client_url.to_string(),
        route_url: route_url.to_string(),
        known_routes: Vec::new(),
        meta_voters: Vec::new(),
    };
    Some(crate::cluster::routes::Routes::new(
        cluster,
        hello,
        config.limits.max_payload_bytes,
        config.limits.max_pending_bytes,
        seed,
    ))
}

/// JetStream on this shard, when enabled: opened (recovery), then every
/// shard's stream subjects routed and every shard started. `Ok(false)`:
/// the server shut down meanwhile.
async fn start_jetstream(
    shard: &Rc<Shard>,
    shutdown: &tern_shard::Shutdown,
) -> Result<bool, ShardError> {
    let config = &shard.shared.config;
    let index = shard.index;
    let Some(jetstream_config) = config.jetstream.clone() else {
        return Ok(true);
    };
    let opened = futures_lite::future::or(
        async { Some(JetStream::open(shard.jetstream_services(), jetstream_config).await) },
        async {
            shutdown.wait().await;
            None
        },
    )
    .await;
    match opened {
        None => return Ok(false),
        Some(Ok(jetstream)) => {
            let _ = shard.jetstream.set(jetstream);
        }
        Some(Err(error)) => {
            shutdown.trigger();
            return Err(ShardError::JetStream(error));
        }
    }
    // Clients connect once every shard routes every stream's subjects.
    let routing = &shard.routing;
    routing.wait_interest_applied(INTEREST_TIMEOUT).await;
    if index == 0 {
        hold_startup_for_tests(shutdown).await;
    }
    futures_lite::future::or(shard.announce_started(STARTUP_TIMEOUT), shutdown.wait()).await;
    if index == 0 {
        log::info!(target: "tern::server", "JetStream ready: journals in {}", config.jetstream.as_ref().map(|js| js.journal_dir.display().to_string()).unwrap_or_default());
    }
    Ok(true)
}

/// The monitoring HTTP server (shard 0, when `http_port` is set).
fn start_monitor(
    shard: &Rc<Shard>,
    listener: glommio::Result<TcpListener, ()>,
) -> Result<glommio::Task<()>, ShardError> {
    let config = &shard.shared.config;
    match listener {
        Ok(http_listener) => {
            let bound = http_listener
                .local_addr()
                .map(|address| address.port())
                .unwrap_or(0);
            log::info!(target: "tern::server", "Starting http monitor on {}:{bound}", config.http_host);
            let monitor = Monitor::new(shard.clone(), bound);
            Ok(glommio::spawn_local(monitor.accept_loop(http_listener)))
        }
        Err(error) => {
            shard.shutdown.trigger();
            Err(ShardError::MonitorListen {
                host: config.http_host.clone(),
                port: config.http_port,
                source: error,
            })
        }
    }
}

async fn shard_main(
    shared: Arc<Shared>,
    context: ShardContext<ShardMessage>,
    seed: u64,
    route_listeners: &Option<RouteListeners>,
) -> Result<(), ShardError> {
    let config = &shared.config;
    let index = context.index;
    let client_address = format!("{}:{}", config.host, shared.client_port);
    let http_listener = match (index, config.http_port) {
        (0, Some(port)) => Some(TcpListener::bind((config.http_host.as_str(), port))),
        _ => None,
    };
    let mut mesh = context.mesh.connect();
    let shutdown = context.shutdown.clone();
    let ring_progress = mesh.progress();
    let receivers = mesh.take_receivers();
    let links = PeerLinks::new(Rc::new(mesh));
    links.start();
    let routes = shard_routes(
        &shared,
        index,
        context.shard_count,
        route_listeners
            .as_ref()
            .map_or(0, |listeners| listeners.port),
        seed ^ index as u64,
    );
    let shard = Shard::new(
        ShardPosition {
            index,
            shard_count: context.shard_count,
            cpu: context.cpu,
        },
        shared.clone(),
        ShardLinks {
            peers: links,
            ring_progress,
            routes,
        },
        shutdown.clone(),
        seed.wrapping_add(index as u64)
            .wrapping_mul(0x9E37_79B9_7F4A_7C15),
    );
    for (peer, receiver) in receivers {
        glommio::spawn_local(shard.clone().receive_from(peer, receiver)).detach();
    }
    let spinner = glommio::spawn_local(shard.routing.spinner().clone().run());
    if !start_jetstream(&shard, &shutdown).await? {
        return Ok(());
    }
    // Every shard listens once every shard can serve (JetStream recovered,
    // interest applied): until then connections are refused.
    let listener = match TcpListener::bind(client_address.as_str()) {
        Ok(listener) => listener,
        Err(error) => {
            shutdown.trigger();
            return Err(ShardError::ClientListen {
                address: client_address,
                source: error,
            });
        }
    };
    let accept = glommio::spawn_local(shard.clone().accept_loop(listener));
    start_routes(&shard, route_listeners);
    let monitor_task = match http_listener {
        None => None,
        Some(listener) => Some(start_monitor(&shard, listener)?),
    };
    let reload = (index == 0).then(|| glommio::spawn_local(reload::serve(shard.clone())));
    if index == 0 {
        log::info!(target: "tern::server", "Listening for client connections on {client_address}");
        log::info!(target: "tern::server", "Server is ready");
    }
    shutdown.wait().await;
    if index == 0 {
        log::info!(target: "tern::server", "Initiating Shutdown...");
    }
    accept.await;
    if let Some(task) = reload {
        task.await;
    }
    if let Some(task) = monitor_task {
        task.await;
    }
    shard.drain_clients().await;
    if let Some(jetstream) = shard.jetstream.get() {
        jetstream.stop_and_wait(SHUTDOWN_CHECKPOINT_TIMEOUT).await;
    }
    drop(spinner);
    Ok(())
}
