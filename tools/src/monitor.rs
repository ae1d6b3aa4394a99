//! Reading a server's monitoring endpoints (`/varz`, `/jsz`): one HTTP/1.0
//! GET over a plain TCP connection, the answer bounded by
//! [`MONITOR_ANSWER_BYTES_MAX`] and read until the server closes it.
//! (HTTP/1.0 means no chunked encoding and no keep-alive to handle.)

use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::error::CliError;

/// The largest monitoring answer read.
pub const MONITOR_ANSWER_BYTES_MAX: u64 = 64 << 20;

/// `http://host:port[/prefix]` as host:port and the path prefix.
pub fn split_url(url: &str) -> Result<(String, String), CliError> {
    let rest = url.strip_prefix("http://").ok_or_else(|| {
        CliError::Usage(format!(
            "--monitor {url}: expected http://HOST:PORT (https is not supported)"
        ))
    })?;
    let (address, prefix) = match rest.find('/') {
        Some(at) => (&rest[..at], rest[at..].trim_end_matches('/')),
        None => (rest, ""),
    };
    if address.is_empty() {
        return Err(CliError::Usage(format!("--monitor {url}: no host")));
    }
    let address = if address.contains(':') {
        address.to_string()
    } else {
        format!("{address}:80")
    };
    Ok((address, prefix.to_string()))
}

/// GETs `path` (e.g. `/jsz?streams=true`) from the monitoring URL and
/// parses the JSON body.
pub async fn get_json(url: &str, path: &str, timeout: Duration) -> Result<Value, CliError> {
    let action = format!("GET {}{path}", url.trim_end_matches('/'));
    let (address, prefix) = split_url(url)?;
    let exchange = async {
        let mut stream = tokio::net::TcpStream::connect(&address).await?;
        let request = format!(
            "GET {prefix}{path} HTTP/1.0\r\nHost: {address}\r\nAccept: application/json\r\n\r\n"
        );
        stream.write_all(request.as_bytes()).await?;
        let mut answer = Vec::new();
        (&mut stream)
            .take(MONITOR_ANSWER_BYTES_MAX)
            .read_to_end(&mut answer)
            .await?;
        Ok::<Vec<u8>, std::io::Error>(answer)
    };
    let answer = match tokio::time::timeout(timeout, exchange).await {
        Ok(Ok(answer)) => answer,
        Ok(Err(source)) => return Err(CliError::Io { action, source }),
        Err(_) => return Err(CliError::Timeout { action, timeout }),
    };
    parse_answer(&action, &answer)
}

/// The JSON body of an HTTP answer whose status is 200.
pub fn parse_answer(action: &str, answer: &[u8]) -> Result<Value, CliError> {
    let bad = |detail: String| CliError::BadAnswer {
        action: action.to_string(),
        detail,
    };
    let split = answer
        .windows(4)
        .position(|window| window == b"\r\n\r\n")
        .ok_or_else(|| bad("no HTTP header".into()))?;
    let head = String::from_utf8_lossy(&answer[..split]);
    let status_line = head.lines().next().unwrap_or("");
    let status = status_line.split_whitespace().nth(1).unwrap_or("");
    if status != "200" {
        return Err(CliError::Failed {
            action: action.to_string(),
            reason: format!("HTTP status {}", status_line.trim()),
        });
    }
    serde_json::from_slice(&answer[split + 4..]).map_err(|error| bad(error.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        assert_eq!(
            split_url("http://127.0.0.1:8222").unwrap(),
            ("127.0.0.1:8222".into(), "".into())
        );
        assert_eq!(
            split_url("http://host/nats/").unwrap(),
            ("host:80".into(), "/nats".into())
        );
        assert!(split_url("https://host:8222").is_err());
        assert!(split_url("host:8222").is_err());
    }

    #[test]
    fn answers() {
        let ok = b"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n{\"a\":1}";
        assert_eq!(parse_answer("GET /varz", ok).unwrap()["a"], 1);
        let missing = b"HTTP/1.0 404 Not Found\r\n\r\nnope";
        let error = parse_answer("GET /x", missing).unwrap_err();
        assert!(error.to_string().contains("404"), "{error}");
        assert!(parse_answer("GET /x", b"garbage").is_err());
    }
}
