//! The queue workload: publishers that each write their own unique values
//! with acknowledgements, one at a time, and consumers that fetch from one
//! shared durable pull consumer and acknowledge. Each client binds to one
//! node (clients of a killed node wait for it, as Jepsen's do) and keeps
//! its own record, returned when it stops; nothing is shared between
//! clients but the stop flag.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;

use crate::checker::{value, Attempt, Delivery, Outcome};

pub const STREAM: &str = "jepsen";
pub const CONSUMER: &str = "queue";
pub const SUBJECT_PREFIX: &str = "jepsen";

/// How long a publish waits for its acknowledgement. A publish in flight
/// to a leader that dies is never answered, so this bounds how fast a
/// client sees a failover: one second, far above an ack's p99 in any
/// healthy state, keeps the measure about the servers.
pub const PUBLISH_TIMEOUT: Duration = Duration::from_secs(1);
/// How long a request (fetch, info) waits.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(2);
/// Unacknowledged deliveries come back after this (redelivery).
pub const ACK_WAIT: Duration = Duration::from_secs(3);

/// A client's connection to one node: reconnects every 100 ms while the
/// node is away, forever, and only to that node. A client takes the other
/// nodes a server advertises (INFO `connect_urls`) into its pool and
/// reconnects to any of them; after a few kills every client would sit on
/// the same node, and pausing that one node would stall them all, which
/// measures where the clients drifted to, not the servers.
pub async fn connect(url: &str) -> Result<async_nats::Client, async_nats::ConnectError> {
    async_nats::ConnectOptions::new()
        .ignore_discovered_servers()
        .retry_on_initial_connect()
        .connection_timeout(Duration::from_secs(1))
        .request_timeout(Some(REQUEST_TIMEOUT))
        .reconnect_delay_callback(|_| Duration::from_millis(100))
        .max_reconnects(None)
        .connect(url)
        .await
}

pub fn jetstream(client: async_nats::Client) -> async_nats::jetstream::Context {
    async_nats::jetstream::context::ContextBuilder::new()
        .timeout(PUBLISH_TIMEOUT)
        .build(client)
}

/// Publishes `publisher`'s values `0, 1, …` until `stop`, waiting `pause`
/// after each; every attempt recorded with its outcome.
pub async fn publish(
    publisher: u64,
    url: String,
    started: Instant,
    pause: Duration,
    stop: Arc<AtomicBool>,
) -> Vec<Attempt> {
    let mut attempts = Vec::new();
    let client = match connect(&url).await {
        Ok(client) => client,
        Err(error) => panic!("publisher {publisher}: connect {url}: {error}"),
    };
    let js = jetstream(client.clone());
    let subject = format!("{SUBJECT_PREFIX}.p{publisher}");
    let mut index = 0;
    while !stop.load(Ordering::Relaxed) {
        let value = value(publisher, index);
        index += 1;
        let acked = async {
            js.publish(subject.clone(), value.to_string().into())
                .await?
                .await
        };
        let outcome =
            match tokio::time::timeout(PUBLISH_TIMEOUT + Duration::from_millis(200), acked).await {
                Ok(Ok(ack)) => Outcome::Acked {
                    sequence: ack.sequence,
                },
                Ok(Err(_)) | Err(_) => Outcome::Failed,
            };
        let failed = outcome == Outcome::Failed;
        attempts.push(Attempt {
            value,
            end: started.elapsed(),
            outcome,
        });
        if failed {
            // Do not spin on a node that is down.
            tokio::time::sleep(Duration::from_millis(50)).await;
        } else if !pause.is_zero() {
            tokio::time::sleep(pause).await;
        }
    }
    let host = client.server_info().host;
    assert!(
        url.contains(&format!("//{host}:")),
        "publisher {publisher}: bound to {url}, ended on {host}"
    );
    attempts
}

/// Fetches and acknowledges from the durable consumer until `stop`.
pub async fn consume(consumer: usize, url: String, stop: Arc<AtomicBool>) -> Vec<Delivery> {
    let mut deliveries = Vec::new();
    let client = match connect(&url).await {
        Ok(client) => client,
        Err(error) => panic!("consumer {consumer}: connect {url}: {error}"),
    };
    let js = jetstream(client);
    while !stop.load(Ordering::Relaxed) {
        let pull: async_nats::jetstream::consumer::PullConsumer =
            match js.get_consumer_from_stream(CONSUMER, STREAM).await {
                Ok(pull) => pull,
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
        while !stop.load(Ordering::Relaxed) {
            let batch = pull
                .fetch()
                .max_messages(100)
                .expires(Duration::from_millis(500))
                .messages()
                .await;
            let Ok(mut batch) = batch else {
                break;
            };
            let mut failed = false;
            while let Some(message) = batch.next().await {
                let Ok(message) = message else {
                    failed = true;
                    break;
                };
                let Ok(info) = message.info() else {
                    continue;
                };
                deliveries.push(Delivery {
                    body: String::from_utf8_lossy(&message.payload).into_owned(),
                    stream_sequence: info.stream_sequence,
                    redelivered: info.delivered > 1,
                });
                // A lost ack only means a redelivery.
                let _ = message.ack().await;
            }
            if failed {
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    deliveries
}
