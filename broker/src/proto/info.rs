//! The INFO line: `INFO {json} \r\n` (nats-server puts a space before CRLF).

use serde::Serialize;

/// The nats-server version whose client-visible behaviour tern implements.
/// Clients gate features on it, so it must be a real 2.15.x.
pub const NATS_COMPATIBLE_VERSION: &str = "2.15.1";

/// tern's own version, reported in the extra `tern_version` field.
pub const TERN_VERSION: &str = env!("CARGO_PKG_VERSION");

/// INFO as sent to one client. Field names and omission rules follow nats-server.
#[derive(Debug, Clone, Serialize)]
pub struct ServerInfo {
    pub server_id: String,
    pub server_name: String,
    pub version: &'static str,
    pub proto: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub git_commit: Option<String>,
    pub go: String,
    pub host: String,
    pub port: u16,
    pub headers: bool,
    #[serde(skip_serializing_if = "is_false")]
    pub auth_required: bool,
    #[serde(skip_serializing_if = "is_false")]
    pub tls_required: bool,
    #[serde(skip_serializing_if = "is_false")]
    pub tls_verify: bool,
    pub max_payload: usize,
    #[serde(skip_serializing_if = "is_false")]
    pub jetstream: bool,
    #[serde(skip_serializing_if = "is_zero")]
    pub client_id: u64,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub client_ip: String,
    /// For NKey users to sign (the first INFO only).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub nonce: String,
    /// The cluster's name, when clustered.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cluster: Option<String>,
    /// The other nodes' client addresses (`host:port`), for clients to
    /// fail over to.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub connect_urls: Vec<String>,
    #[serde(skip_serializing_if = "is_false")]
    pub connect_info: bool,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub remote_account: String,
    #[serde(skip_serializing_if = "is_false")]
    pub ldm: bool,
    #[serde(skip_serializing_if = "is_zero_u32")]
    pub api_lvl: u32,
    pub tern_version: &'static str,
    /// The shard serving this connection.
    pub tern_shard: usize,
}

fn is_false(value: &bool) -> bool {
    !*value
}

fn is_zero(value: &u64) -> bool {
    *value == 0
}

fn is_zero_u32(value: &u32) -> bool {
    *value == 0
}

impl ServerInfo {
    /// `INFO {json} \r\n`, ready to send.
    pub fn to_line(&self) -> Vec<u8> {
        let mut line = Vec::with_capacity(512);
        line.extend_from_slice(b"INFO ");
        serde_json::to_writer(&mut line, self).expect("INFO always serialises");
        line.extend_from_slice(b" \r\n");
        line
    }
}

/// A server id in nats-server's form: 56 characters of base32 nkey encoding
/// (prefix byte `N`, 32 random bytes, CRC-16), so tools that decode ids accept it.
pub fn generate_server_id(random: [u8; 32]) -> String {
    const PREFIX_SERVER: u8 = 13 << 3; // nkeys PrefixByteServer: encodes to 'N'
    let mut raw = Vec::with_capacity(35);
    raw.push(PREFIX_SERVER);
    raw.extend_from_slice(&random);
    let checksum = crc16_xmodem(&raw);
    raw.extend_from_slice(&checksum.to_le_bytes());
    base32_encode(&raw)
}

fn crc16_xmodem(bytes: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &byte in bytes {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

fn base32_encode(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 32] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";
    let mut out = String::with_capacity(bytes.len() * 8 / 5 + 1);
    let mut buffer: u32 = 0;
    let mut bits = 0;
    for &byte in bytes {
        buffer = (buffer << 8) | u32::from(byte);
        bits += 8;
        while bits >= 5 {
            bits -= 5;
            out.push(ALPHABET[((buffer >> bits) & 31) as usize] as char);
        }
    }
    if bits > 0 {
        out.push(ALPHABET[((buffer << (5 - bits)) & 31) as usize] as char);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_id_looks_like_nats() {
        let id = generate_server_id([7u8; 32]);
        assert_eq!(id.len(), 56);
        assert!(id.starts_with('N'));
        assert!(id
            .bytes()
            .all(|b| b.is_ascii_uppercase() || (b'2'..=b'7').contains(&b)));
    }

    #[test]
    fn info_line_shape() {
        let info = ServerInfo {
            server_id: "NABC".into(),
            server_name: "n1".into(),
            version: NATS_COMPATIBLE_VERSION,
            proto: 1,
            git_commit: None,
            go: "tern".into(),
            host: "127.0.0.1".into(),
            port: 4222,
            headers: true,
            auth_required: false,
            tls_required: false,
            tls_verify: false,
            max_payload: 1048576,
            jetstream: false,
            client_id: 5,
            client_ip: "127.0.0.1".into(),
            nonce: String::new(),
            cluster: None,
            connect_urls: Vec::new(),
            connect_info: false,
            remote_account: String::new(),
            ldm: false,
            api_lvl: 0,
            tern_version: TERN_VERSION,
            tern_shard: 0,
        };
        let line = String::from_utf8(info.to_line()).unwrap();
        assert!(line.starts_with("INFO {\"server_id\":\"NABC\",\"server_name\":\"n1\",\"version\":\"2.15.1\",\"proto\":1,"));
        assert!(line.ends_with("} \r\n"));
        assert!(!line.contains("jetstream"));
        assert!(!line.contains("connect_info"));
        assert!(!line.contains("auth_required") && !line.contains("nonce"));
    }
}
