//! `tern top`: a live view of a server like `nats top`: totals and rates
//! from `/varz`, JetStream's counts from `/jsz`, and the connections from
//! `/connz` sorted by message rate (messages in and out per second since
//! the previous refresh). Redrawn in place when stdout is a terminal;
//! otherwise successive plain frames separated by a blank line.

use std::collections::HashMap;
use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

use clap::Args;
use serde_json::Value;

use crate::error::CliError;
use crate::monitor;
use crate::output;
use crate::server::MONITOR_DEFAULT;
use crate::units::{self, format_bytes};

/// The most connections read from `/connz` per refresh.
pub const CONNECTIONS_READ_MAX: usize = 1024;

#[derive(Debug, Args)]
pub struct TopArgs {
    /// The server's monitoring URL
    #[arg(long, value_name = "URL", default_value = MONITOR_DEFAULT)]
    pub monitor: String,
    /// Time between refreshes
    #[arg(long, value_name = "DURATION", default_value = "1s")]
    pub interval: String,
    /// Stop after this many refreshes (default: until interrupted)
    #[arg(long, value_name = "N")]
    pub count: Option<u64>,
    /// Connections shown
    #[arg(short = 'n', long, value_name = "N", default_value_t = 10)]
    pub limit: usize,
}

/// What one refresh read, kept for the next one's rates.
struct Sample {
    at: Instant,
    varz: Value,
    /// Messages in + out per connection id.
    messages_by_cid: HashMap<u64, u64>,
}

fn number(value: &Value) -> u64 {
    value.as_u64().unwrap_or(0)
}

fn per_second(now: u64, before: u64, elapsed: Duration) -> f64 {
    if elapsed.is_zero() {
        return 0.0;
    }
    now.saturating_sub(before) as f64 / elapsed.as_secs_f64()
}

fn connection_messages(connection: &Value) -> u64 {
    number(&connection["in_msgs"]) + number(&connection["out_msgs"])
}

/// One frame's text from this refresh's answers and the previous sample.
fn frame(
    varz: &Value,
    jsz: Option<&Value>,
    connz: &Value,
    previous: Option<&Sample>,
    now: Instant,
    limit: usize,
) -> String {
    let elapsed = previous.map_or(Duration::ZERO, |sample| now - sample.at);
    let rate = |key: &str| {
        previous.map_or(0.0, |sample| {
            per_second(number(&varz[key]), number(&sample.varz[key]), elapsed)
        })
    };
    let mut text = format!(
        "Server: {}  version {}  uptime {}\n",
        varz["server_name"].as_str().unwrap_or(""),
        varz["version"].as_str().unwrap_or(""),
        varz["uptime"].as_str().unwrap_or(""),
    );
    text.push_str(&format!(
        "Connections: {}  Subscriptions: {}\n",
        number(&varz["connections"]),
        number(&varz["subscriptions"])
    ));
    text.push_str(&format!(
        "Messages: in {} ({:.1}/s)  out {} ({:.1}/s)\n",
        number(&varz["in_msgs"]),
        rate("in_msgs"),
        number(&varz["out_msgs"]),
        rate("out_msgs"),
    ));
    text.push_str(&format!(
        "Bytes: in {} ({}/s)  out {} ({}/s)\n",
        format_bytes(number(&varz["in_bytes"])),
        format_bytes(rate("in_bytes") as u64),
        format_bytes(number(&varz["out_bytes"])),
        format_bytes(rate("out_bytes") as u64),
    ));
    if let Some(jsz) = jsz.filter(|jsz| jsz["disabled"].as_bool() != Some(true)) {
        text.push_str(&format!(
            "JetStream: streams {}  consumers {}  messages {}  storage {}\n",
            number(&jsz["streams"]),
            number(&jsz["consumers"]),
            number(&jsz["messages"]),
            format_bytes(number(&jsz["storage"])),
        ));
    }
    text.push('\n');
    let mut connections: Vec<(f64, &Value)> = connz["connections"]
        .as_array()
        .map(|connections| {
            connections
                .iter()
                .map(|connection| {
                    let before = previous
                        .and_then(|sample| {
                            sample
                                .messages_by_cid
                                .get(&number(&connection["cid"]))
                                .copied()
                        })
                        .unwrap_or(0);
                    let rate = if previous.is_some() {
                        per_second(connection_messages(connection), before, elapsed)
                    } else {
                        0.0
                    };
                    (rate, connection)
                })
                .collect()
        })
        .unwrap_or_default();
    connections.sort_by(|a, b| {
        b.0.total_cmp(&a.0)
            .then(connection_messages(b.1).cmp(&connection_messages(a.1)))
    });
    let rows: Vec<Vec<String>> = connections
        .iter()
        .take(limit)
        .map(|(rate, connection)| {
            vec![
                number(&connection["cid"]).to_string(),
                match connection["name"].as_str() {
                    Some(name) if !name.is_empty() => name.to_string(),
                    _ => "-".into(),
                },
                format!(
                    "{}:{}",
                    connection["ip"].as_str().unwrap_or(""),
                    number(&connection["port"])
                ),
                number(&connection["subscriptions"]).to_string(),
                number(&connection["in_msgs"]).to_string(),
                number(&connection["out_msgs"]).to_string(),
                format_bytes(number(&connection["in_bytes"])),
                format_bytes(number(&connection["out_bytes"])),
                format!("{rate:.1}"),
                connection["uptime"].as_str().unwrap_or("").to_string(),
            ]
        })
        .collect();
    text.push_str(&output::columns(
        &[
            "CID",
            "Name",
            "Address",
            "Subs",
            "Msgs in",
            "Msgs out",
            "Bytes in",
            "Bytes out",
            "Msgs/s",
            "Uptime",
        ],
        &rows,
    ));
    text
}

pub async fn execute(args: TopArgs, timeout: Duration) -> Result<(), CliError> {
    let interval = units::parse_duration(&args.interval).map_err(CliError::unit("--interval"))?;
    if interval.is_zero() {
        return Err(CliError::Usage("--interval: must be more than 0".into()));
    }
    let terminal = std::io::stdout().is_terminal();
    let connz_path = format!("/connz?sort=msgs_to&limit={CONNECTIONS_READ_MAX}");
    let mut previous: Option<Sample> = None;
    let mut refreshes = 0u64;
    loop {
        let varz = monitor::get_json(&args.monitor, "/varz", timeout).await?;
        let jsz = monitor::get_json(&args.monitor, "/jsz", timeout).await.ok();
        let connz = monitor::get_json(&args.monitor, &connz_path, timeout).await?;
        let now = Instant::now();
        let text = frame(
            &varz,
            jsz.as_ref(),
            &connz,
            previous.as_ref(),
            now,
            args.limit,
        );
        let mut stdout = std::io::stdout().lock();
        let written = if terminal {
            // Home the cursor and clear the screen: the frame redrawn in place.
            write!(stdout, "\x1b[H\x1b[2J{text}")
        } else {
            if refreshes > 0 {
                let _ = writeln!(stdout);
            }
            write!(stdout, "{text}")
        };
        if written.and_then(|()| stdout.flush()).is_err() {
            return Ok(()); // stdout closed (`| head`)
        }
        drop(stdout);
        refreshes += 1;
        if args.count.is_some_and(|count| refreshes >= count) {
            return Ok(());
        }
        let messages_by_cid = connz["connections"]
            .as_array()
            .map(|connections| {
                connections
                    .iter()
                    .map(|connection| (number(&connection["cid"]), connection_messages(connection)))
                    .collect()
            })
            .unwrap_or_default();
        previous = Some(Sample {
            at: now,
            varz,
            messages_by_cid,
        });
        tokio::time::sleep(interval).await;
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn connections_sorted_by_rate() {
        let varz = json!({"server_name": "n1", "in_msgs": 100, "out_msgs": 0});
        let connz = json!({"connections": [
            {"cid": 1, "name": "quiet", "in_msgs": 50, "out_msgs": 0},
            {"cid": 2, "name": "busy", "in_msgs": 40, "out_msgs": 0}]});
        let start = Instant::now();
        let previous = Sample {
            at: start,
            varz: json!({"in_msgs": 0, "out_msgs": 0}),
            messages_by_cid: HashMap::from([(1, 50), (2, 0)]),
        };
        let text = frame(
            &varz,
            None,
            &connz,
            Some(&previous),
            start + Duration::from_secs(2),
            10,
        );
        assert!(text.contains("in 100 (50.0/s)"), "{text}");
        let busy = text.find("busy").unwrap();
        let quiet = text.find("quiet").unwrap();
        assert!(busy < quiet, "{text}");
        assert!(text.contains("20.0"), "{text}");
    }
}
