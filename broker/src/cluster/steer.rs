//! Steering a route connection to its shard: every node listens on one
//! cluster port with one `SO_REUSEPORT` socket per shard, and a classic BPF
//! program on that group picks the socket by the connection's source port
//! (`port % shards`), as Seastar's port-based load balancing does. The
//! connecting shard *i* binds a source port `≡ i (mod shards)`, so the SYN
//! lands on the peer's shard *i* with no hand-off between threads.
//!
//! The handshake checks the result (the Hello names the sender's shard): a
//! connection that arrives elsewhere (another shard count, IPv6 extension
//! headers) is refused, and the dialer tries again from another port.

use std::net::SocketAddr;
use std::os::fd::AsRawFd;

use socket2::{Domain, Protocol, SockAddr, Socket, Type};

/// Pending connections a cluster listener queues.
const LISTEN_BACKLOG: i32 = 128;
/// Source ports a dial tries before giving up for this attempt.
const SOURCE_PORT_ATTEMPTS: usize = 64;

#[derive(Debug, thiserror::Error)]
pub enum SteerError {
    #[error("cannot listen for routes on {address}: {source}")]
    Listen {
        address: SocketAddr,
        source: std::io::Error,
    },
    #[error("cannot attach the route steering program (SO_ATTACH_REUSEPORT_CBPF): {0}")]
    Attach(std::io::Error),
}

/// Binds and listens on `address` once per shard (socket *i* for shard
/// *i*, in order, so the group's indexes are the shard indexes) and
/// attaches the steering program. With port 0 the first socket picks the
/// port and the others join it.
pub fn listen_group(address: SocketAddr, shards: usize) -> Result<Vec<Socket>, SteerError> {
    assert!(shards >= 1 && shards <= u16::MAX as usize);
    if address.port() != 0 {
        wait_port_released(address);
    }
    let mut sockets: Vec<Socket> = Vec::with_capacity(shards);
    let mut address = address;
    for _ in 0..shards {
        let listen_error = |source| SteerError::Listen { address, source };
        let socket = Socket::new(
            Domain::for_address(address),
            Type::STREAM,
            Some(Protocol::TCP),
        )
        .map_err(listen_error)?;
        socket.set_reuse_address(true).map_err(listen_error)?;
        socket.set_reuse_port(true).map_err(listen_error)?;
        socket.set_nonblocking(true).map_err(listen_error)?;
        socket.bind(&address.into()).map_err(listen_error)?;
        socket.listen(LISTEN_BACKLOG).map_err(listen_error)?;
        if address.port() == 0 {
            let bound = socket
                .local_addr()
                .map_err(listen_error)?
                .as_socket()
                .expect("an inet socket");
            address.set_port(bound.port());
        }
        sockets.push(socket);
    }
    if shards > 1 {
        attach_program(&sockets[0], address.is_ipv6(), shards as u32)?;
    }
    Ok(sockets)
}

/// How long a start waits for a previous process's listeners to close.
const PORT_RELEASE_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// Waits (bounded) until nothing listens on `address`. A process killed
/// with SIGKILL leaves its io_uring's sockets to a kernel worker, so its
/// `SO_REUSEPORT` listeners outlive it by some milliseconds; sockets bound
/// meanwhile join that old group, whose slots then reorder as the old
/// sockets close, and the steering program's indexes no longer name the
/// shards (measured: a restart within 250 ms misrouted most routes). A
/// bind without `SO_REUSEPORT` fails while any listener is left.
fn wait_port_released(address: SocketAddr) {
    let deadline = std::time::Instant::now() + PORT_RELEASE_WAIT;
    let mut logged = false;
    loop {
        let probe = Socket::new(
            Domain::for_address(address),
            Type::STREAM,
            Some(Protocol::TCP),
        )
        .and_then(|socket| {
            socket.set_reuse_address(true)?;
            socket.bind(&address.into())
        });
        match probe {
            Err(error)
                if error.kind() == std::io::ErrorKind::AddrInUse
                    && std::time::Instant::now() < deadline =>
            {
                if !logged {
                    log::info!(target: "tern::cluster", "waiting for the listeners on {address} (a previous process's) to close");
                    logged = true;
                }
                // Bounded poll at start, on the main thread.
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            // Free, or taken by someone else: the group's bind says which.
            _ => return,
        }
    }
}

/// `A = source port of the TCP header; return A % shards`. The skb's data
/// sits past the TCP header when the program runs, so the port is loaded
/// relative to the network header (`SKF_NET_OFF`): after the IPv4 header
/// (its length from the IHL nibble) or the fixed 40-byte IPv6 header.
fn attach_program(socket: &Socket, ipv6: bool, shards: u32) -> Result<(), SteerError> {
    const SKF_NET_OFF: u32 = (-0x100000i32) as u32;
    let instruction = |code: u32, k: u32| libc::sock_filter {
        code: code as u16,
        jt: 0,
        jf: 0,
        k,
    };
    let program: Vec<libc::sock_filter> = if ipv6 {
        vec![
            instruction(libc::BPF_LD | libc::BPF_H | libc::BPF_ABS, SKF_NET_OFF + 40),
            instruction(libc::BPF_ALU | libc::BPF_MOD | libc::BPF_K, shards),
            instruction(libc::BPF_RET | libc::BPF_A, 0),
        ]
    } else {
        vec![
            // X = 4 * (first byte of the IP header & 0xf)
            instruction(libc::BPF_LDX | libc::BPF_B | libc::BPF_MSH, SKF_NET_OFF),
            // A = half word at network header + X
            instruction(libc::BPF_LD | libc::BPF_H | libc::BPF_IND, SKF_NET_OFF),
            instruction(libc::BPF_ALU | libc::BPF_MOD | libc::BPF_K, shards),
            instruction(libc::BPF_RET | libc::BPF_A, 0),
        ]
    };
    let fprog = libc::sock_fprog {
        len: program.len() as u16,
        filter: program.as_ptr().cast_mut(),
    };
    // SAFETY: the socket is open; fprog points at `program`, alive for the
    // call; the kernel copies it.
    let result = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_ATTACH_REUSEPORT_CBPF,
            (&fprog as *const libc::sock_fprog).cast(),
            std::mem::size_of::<libc::sock_fprog>() as libc::socklen_t,
        )
    };
    if result != 0 {
        return Err(SteerError::Attach(std::io::Error::last_os_error()));
    }
    Ok(())
}

/// The kernel's ephemeral port range.
fn ephemeral_ports() -> (u16, u16) {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|text| {
            let mut parts = text.split_whitespace().map(|part| part.parse::<u16>().ok());
            Some((parts.next()??, parts.next()??))
        })
        .filter(|(low, high)| low < high)
        .unwrap_or((32768, 60999))
}

/// A non-blocking socket bound to a source port `≡ shard (mod shards)`,
/// with its connect to `peer` started (the first write completes it).
/// `random` picks among the candidate ports.
pub fn start_connect(
    peer: SocketAddr,
    shard: usize,
    shards: usize,
    mut random: impl FnMut(u64) -> u64,
) -> std::io::Result<Socket> {
    assert!(shard < shards);
    let (low, high) = ephemeral_ports();
    let mut last_error = None;
    for _ in 0..SOURCE_PORT_ATTEMPTS {
        let socket = Socket::new(Domain::for_address(peer), Type::STREAM, Some(Protocol::TCP))?;
        socket.set_nonblocking(true)?;
        socket.set_nodelay(true)?;
        let candidates = u64::from(high - low) / shards as u64;
        let base = u64::from(low).div_ceil(shards as u64) * shards as u64;
        let port = base + random(candidates.max(1)) * shards as u64 + shard as u64;
        let Ok(port) = u16::try_from(port) else {
            continue;
        };
        let local: SocketAddr = if peer.is_ipv6() {
            (std::net::Ipv6Addr::UNSPECIFIED, port).into()
        } else {
            (std::net::Ipv4Addr::UNSPECIFIED, port).into()
        };
        if let Err(error) = socket.bind(&SockAddr::from(local)) {
            last_error = Some(error);
            continue;
        }
        match socket.connect(&peer.into()) {
            Ok(()) => return Ok(socket),
            Err(error) if error.raw_os_error() == Some(libc::EINPROGRESS) => return Ok(socket),
            Err(error) if error.raw_os_error() == Some(libc::EADDRNOTAVAIL) => {
                last_error = Some(error);
            }
            Err(error) => return Err(error),
        }
    }
    Err(last_error.unwrap_or_else(|| std::io::Error::other("no free source port")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    /// Which listener of the group accepts a connection from each shard's
    /// source ports: always the same-index one.
    #[test]
    fn connections_land_on_the_shard_their_source_port_names() {
        for shards in [2usize, 3] {
            let listeners = listen_group("127.0.0.1:0".parse().unwrap(), shards).unwrap();
            let address = listeners[0].local_addr().unwrap().as_socket().unwrap();
            let mut state = 12345u64;
            for round in 0..4 * shards {
                let shard = round % shards;
                let connecting = start_connect(address, shard, shards, |bound| {
                    state = state.wrapping_mul(6364136223846793005).wrapping_add(1);
                    (state >> 33) % bound
                })
                .unwrap();
                let source = connecting.local_addr().unwrap().as_socket().unwrap();
                assert_eq!(source.port() as usize % shards, shard);
                let deadline = Instant::now() + Duration::from_secs(5);
                let accepted_on = loop {
                    let accepted = listeners
                        .iter()
                        .position(|listener| listener.accept().is_ok());
                    if let Some(index) = accepted {
                        break index;
                    }
                    assert!(Instant::now() < deadline, "no listener accepted");
                    std::thread::yield_now();
                };
                assert_eq!(
                    accepted_on,
                    shard,
                    "{shards} shards, port {}",
                    source.port()
                );
            }
        }
    }
}
