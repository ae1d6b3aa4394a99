//! What crosses the loopback interface, as a wire tap sees it: an
//! `AF_PACKET` socket on `lo` (root only) collecting the TCP payload of
//! every IPv4 segment to or from the given ports, so a test can check what
//! an eavesdropper on the network would read (`it::cluster_tls`).
//!
//! The socket is bound before [`LoopbackCapture::start`] returns: every
//! segment sent after it is seen (unless the kernel drops it for a full
//! receive buffer, which [`LoopbackCapture::finish`] reports).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

/// Most payload bytes kept (the rest is counted, not stored).
const KEPT_BYTES_MAX: usize = 64 << 20;
/// The loopback MTU is 64 KiB; the headers come on top.
const FRAME_BYTES_MAX: usize = 70_000;
const ETHERNET_HEADER_BYTES: usize = 14;
const ETHERTYPE_IPV4: u16 = 0x0800;
const PROTOCOL_TCP: u8 = 6;
/// How long `finish` reads what the socket still holds.
const DRAIN_TIME_MAX: std::time::Duration = std::time::Duration::from_secs(2);

/// A running capture; [`LoopbackCapture::finish`] stops it.
pub struct LoopbackCapture {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<Captured>>,
}

/// What a capture saw.
#[derive(Debug, Default)]
pub struct Captured {
    /// The TCP payloads to or from the ports, in arrival order.
    pub payload: Vec<u8>,
    /// Segments with a payload to or from the ports.
    pub segments: u64,
    /// Frames the kernel dropped (receive buffer full).
    pub dropped: u64,
}

impl Captured {
    /// Whether `needle` occurs anywhere in the payloads (a needle split
    /// across two segments is found too: payloads are concatenated).
    pub fn contains(&self, needle: &[u8]) -> bool {
        !needle.is_empty()
            && self
                .payload
                .windows(needle.len())
                .any(|window| window == needle)
    }
}

impl LoopbackCapture {
    /// Starts capturing TCP segments whose source or destination port is
    /// one of `ports`. Panics if the socket cannot be opened (not root).
    pub fn start(ports: &[u16]) -> LoopbackCapture {
        let protocol = (libc::ETH_P_ALL as u16).to_be() as i32;
        // SAFETY: plain socket(2); the descriptor is owned below.
        let fd = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW, protocol) };
        assert!(
            fd >= 0,
            "AF_PACKET socket (the capture needs root): {}",
            std::io::Error::last_os_error()
        );
        // SAFETY: fd is a fresh socket; OwnedFd closes it.
        let socket = unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) };
        // SAFETY: a NUL-terminated name.
        let index = unsafe { libc::if_nametoindex(c"lo".as_ptr()) };
        assert!(index > 0, "no loopback interface");
        // SAFETY: sockaddr_ll is plain data.
        let mut address: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        address.sll_family = libc::AF_PACKET as u16;
        address.sll_protocol = protocol as u16;
        address.sll_ifindex = index as i32;
        // SAFETY: a valid sockaddr_ll of the size given.
        let bound = unsafe {
            libc::bind(
                fd,
                std::ptr::addr_of!(address).cast(),
                std::mem::size_of::<libc::sockaddr_ll>() as u32,
            )
        };
        assert_eq!(bound, 0, "bind to lo: {}", std::io::Error::last_os_error());
        set_option(fd, libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, &(32i32 << 20));
        let timeout = libc::timeval {
            tv_sec: 0,
            tv_usec: 20_000,
        };
        set_option(fd, libc::SOL_SOCKET, libc::SO_RCVTIMEO, &timeout);
        let stop = Arc::new(AtomicBool::new(false));
        let ports = ports.to_vec();
        let thread = {
            let stop = stop.clone();
            std::thread::spawn(move || collect(socket, &ports, &stop))
        };
        LoopbackCapture {
            stop,
            thread: Some(thread),
        }
    }

    /// Stops and returns what was seen.
    pub fn finish(mut self) -> Captured {
        self.stop.store(true, Ordering::Relaxed);
        self.thread
            .take()
            .expect("finished once")
            .join()
            .expect("the capture thread")
    }
}

impl Drop for LoopbackCapture {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

fn set_option<T>(fd: i32, level: i32, name: i32, value: &T) {
    // SAFETY: value points at a live T of the size given.
    let result = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            std::ptr::from_ref(value).cast(),
            std::mem::size_of::<T>() as u32,
        )
    };
    assert_eq!(
        result,
        0,
        "setsockopt {name}: {}",
        std::io::Error::last_os_error()
    );
}

fn collect(socket: std::os::fd::OwnedFd, ports: &[u16], stop: &AtomicBool) -> Captured {
    let fd = std::os::fd::AsRawFd::as_raw_fd(&socket);
    let mut captured = Captured::default();
    let mut frame = vec![0u8; FRAME_BYTES_MAX];
    let mut drain_until: Option<std::time::Instant> = None;
    loop {
        // Once stopped, what the socket still holds is read without
        // waiting (those segments were sent before `finish`), then done;
        // bounded, as other tests' loopback traffic keeps coming.
        let stopping = stop.load(Ordering::Relaxed);
        if stopping {
            let until =
                *drain_until.get_or_insert_with(|| std::time::Instant::now() + DRAIN_TIME_MAX);
            if std::time::Instant::now() >= until {
                break;
            }
        }
        let flags = if stopping { libc::MSG_DONTWAIT } else { 0 };
        // SAFETY: sockaddr_ll is plain data; recvfrom fills at most its size.
        let mut from: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        let mut from_bytes = std::mem::size_of::<libc::sockaddr_ll>() as u32;
        // SAFETY: the buffer and address are valid for the sizes given.
        let read = unsafe {
            libc::recvfrom(
                fd,
                frame.as_mut_ptr().cast(),
                frame.len(),
                flags,
                std::ptr::addr_of_mut!(from).cast(),
                &mut from_bytes,
            )
        };
        if read <= 0 {
            if stopping {
                break; // drained
            }
            continue; // the receive timeout: check `stop`
        }
        // Loopback shows every frame twice (sent and received): keep one.
        if from.sll_pkttype == libc::PACKET_OUTGOING {
            continue;
        }
        if let Some(payload) = tcp_payload(&frame[..read as usize], ports) {
            captured.segments += 1;
            let room = KEPT_BYTES_MAX.saturating_sub(captured.payload.len());
            captured
                .payload
                .extend_from_slice(&payload[..payload.len().min(room)]);
        }
    }
    // SAFETY: tpacket_stats is plain data; getsockopt fills it.
    let mut stats: libc::tpacket_stats = unsafe { std::mem::zeroed() };
    let mut stats_bytes = std::mem::size_of::<libc::tpacket_stats>() as u32;
    // SAFETY: valid pointers and size.
    let result = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_PACKET,
            libc::PACKET_STATISTICS,
            std::ptr::addr_of_mut!(stats).cast(),
            &mut stats_bytes,
        )
    };
    if result == 0 {
        captured.dropped = u64::from(stats.tp_drops);
    }
    captured
}

/// The TCP payload of an Ethernet/IPv4 frame to or from one of `ports`.
fn tcp_payload<'a>(frame: &'a [u8], ports: &[u16]) -> Option<&'a [u8]> {
    let ethertype = u16::from_be_bytes(frame.get(12..14)?.try_into().ok()?);
    if ethertype != ETHERTYPE_IPV4 {
        return None;
    }
    let ip = frame.get(ETHERNET_HEADER_BYTES..)?;
    let header_bytes = usize::from(ip.first()? & 0x0f) * 4;
    if *ip.get(9)? != PROTOCOL_TCP || header_bytes < 20 {
        return None;
    }
    let total_bytes = usize::from(u16::from_be_bytes(ip.get(2..4)?.try_into().ok()?));
    let ip = ip.get(..total_bytes.min(ip.len()))?;
    let tcp = ip.get(header_bytes..)?;
    let source = u16::from_be_bytes(tcp.get(0..2)?.try_into().ok()?);
    let destination = u16::from_be_bytes(tcp.get(2..4)?.try_into().ok()?);
    if !ports.contains(&source) && !ports.contains(&destination) {
        return None;
    }
    let tcp_header_bytes = usize::from(tcp.get(12)? >> 4) * 4;
    let payload = tcp.get(tcp_header_bytes..)?;
    (!payload.is_empty()).then_some(payload)
}
