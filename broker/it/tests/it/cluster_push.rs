//! Push consumers on a three-node cluster, against tern-server and
//! nats-server 2.15.1 alike ([`Cluster::meshed`]): durable push consumers
//! of an R3 file stream, created through a node that does not lead the
//! stream, delivering to subscribers on other nodes while leadership moves.
//!
//! - [`queue_group_through_failover`]: a deliver group with a member on
//!   each of two nodes, flow control and idle heartbeats, publishes
//!   running all along (`Nats-Msg-Id`, retried), the leader SIGKILLed and
//!   restarted, then a stream and a consumer stepdown: every acknowledged
//!   publish is delivered, every flow control request is answered and
//!   delivery goes on past the window (also under the new leader), the ack
//!   floor reaches the last sequence, and idle heartbeats come once the
//!   publishes stop, also from the leader an idle stepdown hands over to.
//!   The client never re-creates the consumer.
//! - [`durable_without_group_survives_stepdowns`]: one subscriber on a
//!   node that does not lead; the consumer's `delivered` and `ack_floor`
//!   are the same after a stream and a consumer stepdown, what was
//!   delivered but not acknowledged comes again, nothing is lost.
//! - [`nats_py_queue_group_through_stepdowns`] runs `tests/py/cluster_push.py`:
//!   nats-py's `js.subscribe` queue push subscription (flow control, idle
//!   heartbeats) with a member on each node that does not lead, across a
//!   stream and a consumer stepdown under publishes.
//!
//! Where the servers are built differently (docs/cluster-jetstream.md §7:
//! nats-server gives a consumer a Raft group of its own, tern runs it on
//! its stream's leader), the consumer's leader is first moved to the
//! stream's on nats-server, so killing the stream's leader kills the
//! consumer's too on both; and both a stream and a consumer stepdown are
//! asked for (the consumer's moves tern's stream again).
//!
//! Every wait is a bounded poll (`CONVERGE_TIMEOUT`, the cluster tests'
//! bound); nothing sleeps to synchronise.

use crate::common;

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::rc::Rc;
use std::time::{Duration, Instant};

use async_nats::jetstream::consumer::{push, AckPolicy};
use common::cluster::Cluster;
use common::{Flavor, Options};
use futures::StreamExt;
use serde_json::{json, Value};

use crate::cluster_jetstream::{
    api_when_ready, hand_over_leadership, publish_through_failover, stream_leader, CONVERGE_TIMEOUT,
};

/// Poll interval of the bounded waits below (not synchronisation).
const POLL: Duration = Duration::from_millis(20);

/// A subscriber's wait for its next message, so it notices when the test
/// is done (a poll interval, not synchronisation).
const RECEIVE_SLICE: Duration = Duration::from_millis(100);

/// The two nodes of three other than `leader`.
fn other_nodes(leader: usize) -> [usize; 2] {
    let others: Vec<usize> = (1..=3).filter(|node| *node != leader).collect();
    [others[0], others[1]]
}

/// The stream sequence and delivery count of a delivery's ack subject
/// (`$JS.ACK.<stream>.<consumer>.<delivered>.<stream seq>.<consumer seq>.<ns>.<pending>`).
fn ack_numbers(reply: &str) -> (u64, u64) {
    let tokens: Vec<&str> = reply.split('.').collect();
    assert_eq!(tokens.len(), 9, "an ack subject: {reply}");
    let number = |index: usize| -> u64 {
        tokens[index]
            .parse()
            .unwrap_or_else(|_| panic!("token {index} of {reply}"))
    };
    (number(5), number(4))
}

/// (delivered consumer/stream, ack floor consumer/stream, ack pending,
/// pending) of a CONSUMER.INFO answer.
fn numbers(info: &Value) -> [u64; 6] {
    let number = |path: &str| {
        info.pointer(path)
            .and_then(Value::as_u64)
            .unwrap_or_else(|| panic!("{path} in {info}"))
    };
    [
        number("/delivered/consumer_seq"),
        number("/delivered/stream_seq"),
        number("/ack_floor/consumer_seq"),
        number("/ack_floor/stream_seq"),
        number("/num_ack_pending"),
        number("/num_pending"),
    ]
}

/// Waits (bounded) until `done` holds; panics naming `what`, with every
/// node's log.
async fn wait_until(cluster: &Cluster, what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + CONVERGE_TIMEOUT;
    while !done() {
        if Instant::now() >= deadline {
            panic!(
                "{}: {what}: not within {CONVERGE_TIMEOUT:?}\n{}",
                cluster.flavor.name(),
                cluster.logs()
            );
        }
        tokio::time::sleep(POLL).await;
    }
}

/// The leader `info_subject` (STREAM.INFO or CONSUMER.INFO) names, once it
/// names one.
async fn leader_of(client: &async_nats::Client, info_subject: &str) -> String {
    let deadline = Instant::now() + CONVERGE_TIMEOUT;
    loop {
        let info = api_when_ready(client, info_subject, Value::Null).await;
        if let Some(leader) = info["cluster"]["leader"].as_str() {
            return leader.to_string();
        }
        assert!(Instant::now() < deadline, "no leader: {info}");
        tokio::time::sleep(POLL).await;
    }
}

/// Waits until both followers `info_subject` (STREAM.INFO or
/// CONSUMER.INFO) lists are current; panics with every node's log.
async fn wait_current(cluster: &Cluster, client: &async_nats::Client, info_subject: &str) {
    let deadline = Instant::now() + CONVERGE_TIMEOUT;
    loop {
        let info = api_when_ready(client, info_subject, Value::Null).await;
        let replicas = info["cluster"]["replicas"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        if replicas.len() == 2 && replicas.iter().all(|replica| replica["current"] == true) {
            return;
        }
        if Instant::now() >= deadline {
            panic!(
                "{}: replicas never current: {info}\n{}",
                cluster.flavor.name(),
                cluster.logs()
            );
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Asks `stepdown_subject` (answer type `kind`) once the group's replicas
/// are current, and waits until `info_subject` names another leader;
/// returns it.
async fn step_down(
    cluster: &Cluster,
    client: &async_nats::Client,
    stepdown_subject: &str,
    info_subject: &str,
    kind: &str,
) -> String {
    wait_current(cluster, client, info_subject).await;
    let before = leader_of(client, info_subject).await;
    let answer = api_when_ready(client, stepdown_subject, Value::Null).await;
    assert_eq!(
        answer,
        json!({"type": format!("io.nats.jetstream.api.v1.{kind}"), "success": true})
    );
    let deadline = Instant::now() + CONVERGE_TIMEOUT;
    loop {
        let leader = leader_of(client, info_subject).await;
        if leader != before {
            return leader;
        }
        assert!(
            Instant::now() < deadline,
            "{info_subject}: {before} still leads after the stepdown"
        );
        tokio::time::sleep(POLL).await;
    }
}

/// A stream stepdown, then a consumer stepdown of `durable` (tern: the
/// stream's leader moves again; nats-server: the consumer's own group).
async fn step_down_stream_and_consumer(
    cluster: &Cluster,
    client: &async_nats::Client,
    stream: &str,
    durable: &str,
) {
    step_down(
        cluster,
        client,
        &format!("$JS.API.STREAM.LEADER.STEPDOWN.{stream}"),
        &format!("$JS.API.STREAM.INFO.{stream}"),
        "stream_leader_stepdown_response",
    )
    .await;
    step_down(
        cluster,
        client,
        &format!("$JS.API.CONSUMER.LEADER.STEPDOWN.{stream}.{durable}"),
        &format!("$JS.API.CONSUMER.INFO.{stream}.{durable}"),
        "consumer_leader_stepdown_response",
    )
    .await;
}

/// An R3 file stream `name` on `subjects`, created through `client`.
async fn create_r3_stream(client: &async_nats::Client, name: &str, subject: &str) {
    let created = api_when_ready(
        client,
        &format!("$JS.API.STREAM.CREATE.{name}"),
        json!({"name": name, "subjects": [subject], "storage": "file", "num_replicas": 3}),
    )
    .await;
    assert!(created.get("error").is_none(), "{created}");
}

/// Makes the consumer's leader the stream's: tern runs a consumer on its
/// stream's leader already (docs/cluster-jetstream.md §7); nats-server's
/// consumer has a group of its own, whose leadership is handed over.
async fn lead_consumer_with_stream(
    client: &async_nats::Client,
    flavor: Flavor,
    stream: &str,
    durable: &str,
    stream_leader: usize,
) {
    let info_subject = format!("$JS.API.CONSUMER.INFO.{stream}.{durable}");
    let target = format!("n{stream_leader}");
    if leader_of(client, &info_subject).await == target {
        return;
    }
    assert_eq!(
        flavor,
        Flavor::Nats,
        "tern leads a consumer with its stream's leader"
    );
    hand_over_leadership(
        client,
        flavor,
        &format!("$JS.API.CONSUMER.LEADER.STEPDOWN.{stream}.{durable}"),
        &info_subject,
        "consumer_leader_stepdown_response",
        &target,
    )
    .await;
}

// ---- a deliver group through a failover ------------------------------------------

const QUEUE_STREAM: &str = "PUSHQ";
const QUEUE_DURABLE: &str = "WORKERS";
const QUEUE_DELIVER: &str = "deliver.pushq";
const QUEUE_GROUP: &str = "workers";
/// 16 KiB: the first flow control window (2 MiB) is about 128 deliveries,
/// its request due after about 64.
const PAYLOAD_BYTES: usize = 16 << 10;
/// At most 100 publishes (1.6 MB) a second: a flow control request every
/// second or so.
const PUBLISH_INTERVAL: Duration = Duration::from_millis(10);
/// A push consumer's first flow control window (nats-server's and tern's).
const FIRST_WINDOW_BYTES: u64 = 2 << 20;
const IDLE_HEARTBEAT: Duration = Duration::from_secs(1);
/// What a lost ack costs: a redelivery this much later.
const ACK_WAIT: Duration = Duration::from_secs(3);

/// An idle heartbeat as a member saw it.
struct Heartbeat {
    at: Instant,
    last_consumer: u64,
    last_stream: u64,
}

/// What the deliver group's members saw.
#[derive(Default)]
struct Tally {
    /// Stream sequence → deliveries of it.
    deliveries: BTreeMap<u64, u64>,
    /// Data messages per member.
    per_member: [usize; 2],
    data_bytes: u64,
    last_data_at: Option<Instant>,
    /// Flow control requests answered.
    flow_control_answered: usize,
    heartbeats: Vec<Heartbeat>,
    /// Heartbeats that said the consumer was stalled on flow control.
    stalled_heartbeats: usize,
}

impl Tally {
    fn data(&self) -> usize {
        self.per_member.iter().sum()
    }

    fn max_sequence(&self) -> u64 {
        self.deliveries.keys().next_back().copied().unwrap_or(0)
    }

    fn heartbeats_after(&self, at: Instant) -> impl Iterator<Item = &Heartbeat> {
        self.heartbeats.iter().filter(move |beat| beat.at > at)
    }
}

/// One member of the deliver group, on its own node: acks every delivery
/// (`+ACK`), answers flow control requests (and a stalled heartbeat's
/// `Nats-Consumer-Stalled`, as clients do), records everything in
/// `tally`, until `done`.
async fn serve_member(
    member: usize,
    client: async_nats::Client,
    mut subscriber: async_nats::Subscriber,
    tally: Rc<RefCell<Tally>>,
    done: Rc<Cell<bool>>,
) {
    let flow_control_prefix = format!("$JS.FC.{QUEUE_STREAM}.{QUEUE_DURABLE}.");
    while !done.get() {
        let message = match tokio::time::timeout(RECEIVE_SLICE, subscriber.next()).await {
            Ok(Some(message)) => message,
            Ok(None) => panic!("member {member}'s subscription ended"),
            Err(_) => continue,
        };
        match (message.status.map(u16::from), message.reply.clone()) {
            (None, Some(reply)) => {
                let (sequence, _) = ack_numbers(reply.as_str());
                {
                    let mut tally = tally.borrow_mut();
                    *tally.deliveries.entry(sequence).or_default() += 1;
                    tally.per_member[member] += 1;
                    tally.data_bytes += message.payload.len() as u64;
                    tally.last_data_at = Some(Instant::now());
                }
                client.publish(reply, "+ACK".into()).await.expect("an ack");
            }
            (Some(100), Some(reply)) => {
                assert_eq!(
                    message.description.as_deref(),
                    Some("FlowControl Request"),
                    "member {member}: {message:?}"
                );
                assert!(
                    reply.as_str().starts_with(&flow_control_prefix),
                    "member {member}: a flow control reply {reply}"
                );
                client
                    .publish(reply, bytes::Bytes::new())
                    .await
                    .expect("a flow control reply");
                tally.borrow_mut().flow_control_answered += 1;
            }
            (Some(100), None) => {
                assert_eq!(
                    message.description.as_deref(),
                    Some("Idle Heartbeat"),
                    "member {member}: {message:?}"
                );
                let headers = message.headers.as_ref().expect("a heartbeat has headers");
                let header = |name: &str| -> u64 {
                    headers
                        .get(name)
                        .unwrap_or_else(|| panic!("{name} in a heartbeat: {headers:?}"))
                        .as_str()
                        .parse()
                        .unwrap_or_else(|_| panic!("{name} of a heartbeat: {headers:?}"))
                };
                let beat = Heartbeat {
                    at: Instant::now(),
                    last_consumer: header("Nats-Last-Consumer"),
                    last_stream: header("Nats-Last-Stream"),
                };
                let stalled = headers
                    .get("Nats-Consumer-Stalled")
                    .map(|reply| reply.as_str().to_string());
                {
                    let mut tally = tally.borrow_mut();
                    tally.heartbeats.push(beat);
                    tally.stalled_heartbeats += usize::from(stalled.is_some());
                }
                if let Some(reply) = stalled {
                    client
                        .publish(reply, bytes::Bytes::new())
                        .await
                        .expect("a stalled consumer's flow control reply");
                }
            }
            other => panic!("member {member}: unexpected {other:?}: {message:?}"),
        }
    }
}

/// The payload of publish `index`: its number, padded to [`PAYLOAD_BYTES`].
fn payload(index: usize) -> String {
    let mut payload = format!("{index:08}:");
    payload.extend(std::iter::repeat_n('p', PAYLOAD_BYTES - payload.len()));
    payload
}

/// The scenario of the module doc's first point. Nodes: `leader` leads the
/// stream (and the consumer) first; the deliver group has a member on
/// each other node; the consumer is created, and the API asked, through
/// the first of them; the publisher is on the second.
async fn queue_group_through_failover(flavor: Flavor) {
    let started = Instant::now();
    let cluster = Cluster::meshed(flavor, 3, Options::jetstream()).await;
    let bootstrap = cluster.connect(1).await;
    create_r3_stream(&bootstrap, QUEUE_STREAM, "pushq.>").await;
    let leader = stream_leader(&bootstrap, QUEUE_STREAM).await;
    let members = other_nodes(leader);
    let admin = cluster.connect(members[0]).await;
    let publisher = cluster.connect(members[1]).await;

    let mut member_clients = Vec::new();
    let mut subscribers = Vec::new();
    for node in members {
        let client = cluster.connect(node).await;
        subscribers.push(
            client
                .queue_subscribe(QUEUE_DELIVER, QUEUE_GROUP.to_string())
                .await
                .expect("a queue subscription"),
        );
        member_clients.push(client);
    }

    // Created through the jetstream API, on a node that does not lead.
    let context = async_nats::jetstream::new(admin.clone());
    let config = push::Config {
        durable_name: Some(QUEUE_DURABLE.to_string()),
        deliver_subject: QUEUE_DELIVER.to_string(),
        deliver_group: Some(QUEUE_GROUP.to_string()),
        ack_policy: AckPolicy::Explicit,
        ack_wait: ACK_WAIT,
        flow_control: true,
        idle_heartbeat: IDLE_HEARTBEAT,
        ..Default::default()
    };
    let deadline = Instant::now() + CONVERGE_TIMEOUT;
    let consumer = loop {
        let created = async {
            let stream = context.get_stream(QUEUE_STREAM).await.ok()?;
            stream.create_consumer(config.clone()).await.ok()
        };
        if let Some(consumer) = created.await {
            break consumer;
        }
        assert!(
            Instant::now() < deadline,
            "{}: the consumer was never created\n{}",
            flavor.name(),
            cluster.logs()
        );
        tokio::time::sleep(POLL).await;
    };
    let created = consumer.cached_info();
    assert_eq!(created.config.deliver_group.as_deref(), Some(QUEUE_GROUP));
    assert!(created.config.flow_control);
    assert_eq!(created.config.idle_heartbeat, IDLE_HEARTBEAT);
    lead_consumer_with_stream(&admin, flavor, QUEUE_STREAM, QUEUE_DURABLE, leader).await;

    let tally = Rc::new(RefCell::new(Tally::default()));
    let done = Rc::new(Cell::new(false));
    let stop_publishing = Rc::new(Cell::new(false));
    let publisher_done = Rc::new(Cell::new(false));
    let acked: Rc<RefCell<Vec<u64>>> = Rc::default();

    let serving =
        futures::future::join_all(member_clients.into_iter().zip(subscribers).enumerate().map(
            |(member, (client, subscriber))| {
                serve_member(member, client, subscriber, tally.clone(), done.clone())
            },
        ));
    let publishing = {
        let stop = stop_publishing.clone();
        let finished = publisher_done.clone();
        let acked = acked.clone();
        async move {
            // Paced (a workload, not synchronisation): unpaced, tern takes
            // hundreds of 16 KiB publishes a second, gigabytes over a run
            // on a shared 2-core machine.
            let mut pace = tokio::time::interval(PUBLISH_INTERVAL);
            pace.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut index = 0;
            while !stop.get() {
                pace.tick().await;
                let sequence =
                    publish_through_failover(&publisher, "pushq.work", &payload(index)).await;
                acked.borrow_mut().push(sequence);
                index += 1;
            }
            finished.set(true);
        }
    };
    let orchestrating = async {
        let mut cluster = cluster;
        let last_acked = || acked.borrow().iter().copied().max().unwrap_or(0);

        // Delivery past the first flow control window (2 MiB: the leader
        // stalls there unless a request was answered), to both members
        // (the leader's node has none, so it picks among the others).
        wait_until(
            &cluster,
            "deliveries past the first flow control window, to both members",
            || {
                let tally = tally.borrow();
                tally.flow_control_answered >= 1
                    && tally.data_bytes > FIRST_WINDOW_BYTES + FIRST_WINDOW_BYTES / 4
                    && tally.per_member.iter().all(|count| *count > 0)
            },
        )
        .await;

        // Failover: the leader (the stream's and the consumer's) is
        // SIGKILLed under publishes; a new one delivers what comes next
        // without the client re-creating anything, its flow control
        // requests answered too.
        let killed_at = last_acked();
        let answered_before_kill = tally.borrow().flow_control_answered;
        cluster.kill(leader);
        wait_until(
            &cluster,
            "deliveries and flow control after the leader was killed",
            || {
                let tally = tally.borrow();
                tally.max_sequence() > killed_at + 20
                    && tally.flow_control_answered > answered_before_kill
            },
        )
        .await;
        let new_leader = stream_leader(&admin, QUEUE_STREAM).await;
        assert_ne!(new_leader, leader, "{}", flavor.name());
        cluster.restart(leader);
        cluster.wait_formed().await;
        wait_current(
            &cluster,
            &admin,
            &format!("$JS.API.STREAM.INFO.{QUEUE_STREAM}"),
        )
        .await;

        // Stepdowns of the stream and the consumer, publishes going on.
        let stepped_at = last_acked();
        step_down_stream_and_consumer(&cluster, &admin, QUEUE_STREAM, QUEUE_DURABLE).await;
        wait_until(&cluster, "deliveries after the stepdowns", || {
            tally.borrow().max_sequence() > stepped_at + 20
        })
        .await;

        // Publishes stop: every acknowledged one is delivered, and the
        // consumer's ack floor reaches the stream's last sequence.
        stop_publishing.set(true);
        wait_until(&cluster, "the publisher's last publish", || {
            publisher_done.get()
        })
        .await;
        let acked: std::collections::BTreeSet<u64> = acked.borrow().iter().copied().collect();
        let last = *acked.last().expect("publishes were acknowledged");
        wait_until(&cluster, "every acknowledged publish delivered", || {
            let tally = tally.borrow();
            acked
                .iter()
                .all(|sequence| tally.deliveries.contains_key(sequence))
        })
        .await;
        let info_subject = format!("$JS.API.CONSUMER.INFO.{QUEUE_STREAM}.{QUEUE_DURABLE}");
        let deadline = Instant::now() + CONVERGE_TIMEOUT;
        let info = loop {
            let info = api_when_ready(&admin, &info_subject, Value::Null).await;
            let [delivered, delivered_stream, floor, floor_stream, ack_pending, pending] =
                numbers(&info);
            if delivered_stream == last && floor_stream == last && ack_pending == 0 && pending == 0
            {
                assert_eq!(floor, delivered, "{}: {info}", flavor.name());
                break info;
            }
            assert!(
                Instant::now() < deadline,
                "{}: the ack floor never reached {last}: {info}\n{}",
                flavor.name(),
                cluster.logs()
            );
            tokio::time::sleep(POLL).await;
        };
        // Every stored message is an acknowledged publish: retries of a
        // publish whose PubAck was lost were de-duplicated.
        let stream_info = api_when_ready(
            &admin,
            &format!("$JS.API.STREAM.INFO.{QUEUE_STREAM}"),
            Value::Null,
        )
        .await;
        assert_eq!(stream_info["state"]["last_seq"], last, "{stream_info}");
        assert_eq!(
            stream_info["state"]["messages"],
            acked.len(),
            "{stream_info}"
        );
        {
            let tally = tally.borrow();
            assert!(tally.flow_control_answered >= 2, "{}", flavor.name());
            assert!(numbers(&info)[0] >= last, "{}: {info}", flavor.name());
        }

        // Idle: heartbeats come, naming the last delivery (one sent
        // before a redelivery to the other member may arrive after it:
        // nothing orders two members' connections).
        let idle_since = tally.borrow().last_data_at.expect("deliveries");
        wait_until(
            &cluster,
            "an idle heartbeat naming the last delivery",
            || {
                tally
                    .borrow()
                    .heartbeats_after(idle_since)
                    .any(|beat| beat.last_stream == last && beat.last_consumer >= last)
            },
        )
        .await;

        // An idle stepdown: the consumer's new leader sends heartbeats too
        // (two after it took office: one may have been on its way from the
        // old leader).
        step_down(
            &cluster,
            &admin,
            &format!("$JS.API.CONSUMER.LEADER.STEPDOWN.{QUEUE_STREAM}.{QUEUE_DURABLE}"),
            &info_subject,
            "consumer_leader_stepdown_response",
        )
        .await;
        let moved_at = Instant::now();
        wait_until(&cluster, "idle heartbeats from the new leader", || {
            tally.borrow().heartbeats_after(moved_at).count() >= 2
        })
        .await;
        for beat in tally.borrow().heartbeats_after(moved_at) {
            assert_eq!(beat.last_stream, last, "{}", flavor.name());
        }
        let tally = tally.borrow();
        eprintln!(
            "{}: {} publishes, {} deliveries ({:?} per member, {} bytes), {} flow control \
             requests answered, {} stalled heartbeats, {} heartbeats, in {:?}",
            flavor.name(),
            acked.len(),
            tally.data(),
            tally.per_member,
            tally.data_bytes,
            tally.flow_control_answered,
            tally.stalled_heartbeats,
            tally.heartbeats.len(),
            started.elapsed()
        );
        done.set(true);
        cluster
    };
    let (_, (), cluster) = futures::future::join3(serving, publishing, orchestrating).await;
    drop(cluster);
}
differential!(queue_group_through_failover);

// ---- one subscriber through stepdowns ---------------------------------------------

const SOLO_STREAM: &str = "PUSHSOLO";
const SOLO_DURABLE: &str = "SOLO";
const SOLO_DELIVER: &str = "deliver.pushsolo";
/// The redelivery of what was delivered but not acknowledged before the
/// stepdowns comes this long after it was delivered.
const SOLO_ACK_WAIT: Duration = Duration::from_secs(3);

/// The next delivery on `subscriber` (statuses skipped): its stream
/// sequence, delivery count and ack subject.
async fn next_delivery(
    cluster: &Cluster,
    subscriber: &mut async_nats::Subscriber,
) -> (u64, u64, async_nats::Subject) {
    let deadline = Instant::now() + CONVERGE_TIMEOUT;
    loop {
        let remaining = deadline.saturating_duration_since(Instant::now());
        let message = match tokio::time::timeout(remaining, subscriber.next()).await {
            Ok(Some(message)) => message,
            Ok(None) => panic!("the subscription ended"),
            Err(_) => panic!(
                "{}: no delivery within {CONVERGE_TIMEOUT:?}\n{}",
                cluster.flavor.name(),
                cluster.logs()
            ),
        };
        if message.status.is_some() {
            continue;
        }
        let reply = message.reply.expect("a delivery has an ack subject");
        let (sequence, count) = ack_numbers(reply.as_str());
        return (sequence, count, reply);
    }
}

/// Publishes `count` messages, each acknowledged.
async fn publish_solo(client: &async_nats::Client, count: usize) {
    for index in 0..count {
        publish_through_failover(client, "pushsolo.x", &format!("m{index}")).await;
    }
}

/// Waits until CONSUMER.INFO's [`numbers`] are what `wanted` (named in a
/// failure) accepts; returns the info.
async fn wait_consumer_numbers(
    cluster: &Cluster,
    client: &async_nats::Client,
    wanted: &str,
    accept: impl Fn([u64; 6]) -> bool,
) -> Value {
    let subject = format!("$JS.API.CONSUMER.INFO.{SOLO_STREAM}.{SOLO_DURABLE}");
    let deadline = Instant::now() + CONVERGE_TIMEOUT;
    loop {
        let info = api_when_ready(client, &subject, Value::Null).await;
        if accept(numbers(&info)) {
            return info;
        }
        assert!(
            Instant::now() < deadline,
            "{}: consumer info never showed {wanted}: {info}\n{}",
            cluster.flavor.name(),
            cluster.logs()
        );
        tokio::time::sleep(POLL).await;
    }
}

/// Receives until every sequence of `expected` came (in any order, the
/// ones of `redelivered` delivered before), acking everything; a
/// redelivery of an earlier sequence (its ack overtaken by its ack wait)
/// is acked again and skipped.
async fn receive_and_ack(
    cluster: &Cluster,
    client: &async_nats::Client,
    subscriber: &mut async_nats::Subscriber,
    expected: std::ops::RangeInclusive<u64>,
    redelivered: bool,
) {
    let mut missing: std::collections::BTreeSet<u64> = expected.clone().collect();
    while !missing.is_empty() {
        let (sequence, count, reply) = next_delivery(cluster, subscriber).await;
        client.publish(reply, "+ACK".into()).await.expect("an ack");
        if sequence < *expected.start() {
            continue;
        }
        assert!(
            sequence <= *expected.end(),
            "{}: {sequence} delivered, expecting {expected:?}",
            cluster.flavor.name()
        );
        if redelivered {
            assert!(
                count >= 2,
                "{}: {sequence} delivered {count} times",
                cluster.flavor.name()
            );
        } else if missing.contains(&sequence) {
            // A first delivery comes in order, once.
            assert_eq!(
                (sequence, count),
                (*missing.first().expect("missing"), 1),
                "{}",
                cluster.flavor.name()
            );
        }
        missing.remove(&sequence);
    }
}

/// The scenario of the module doc's second point.
async fn durable_without_group_survives_stepdowns(flavor: Flavor) {
    let started = Instant::now();
    let cluster = Cluster::meshed(flavor, 3, Options::jetstream()).await;
    let publisher = cluster.connect(1).await;
    create_r3_stream(&publisher, SOLO_STREAM, "pushsolo.>").await;
    let leader = stream_leader(&publisher, SOLO_STREAM).await;
    let node = other_nodes(leader)[0];
    let client = cluster.connect(node).await;
    let mut subscriber = client
        .subscribe(SOLO_DELIVER)
        .await
        .expect("a subscription");
    let created = api_when_ready(
        &client,
        &format!("$JS.API.CONSUMER.CREATE.{SOLO_STREAM}.{SOLO_DURABLE}"),
        json!({"stream_name": SOLO_STREAM, "config": {
            "durable_name": SOLO_DURABLE,
            "deliver_subject": SOLO_DELIVER,
            "ack_policy": "explicit",
            "ack_wait": SOLO_ACK_WAIT.as_nanos() as u64,
        }}),
    )
    .await;
    assert!(created.get("error").is_none(), "{created}");

    // 20 delivered in order and acknowledged.
    publish_solo(&publisher, 20).await;
    receive_and_ack(&cluster, &client, &mut subscriber, 1..=20, false).await;
    wait_consumer_numbers(&cluster, &client, "20 delivered and acked", |found| {
        found == [20, 20, 20, 20, 0, 0]
    })
    .await;

    // 10 more delivered, 5 of them acknowledged.
    publish_solo(&publisher, 10).await;
    for expected in 21..=30 {
        let (sequence, count, reply) = next_delivery(&cluster, &mut subscriber).await;
        assert_eq!((sequence, count), (expected, 1), "{}", flavor.name());
        if sequence <= 25 {
            client.publish(reply, "+ACK".into()).await.expect("an ack");
        }
    }
    // Delivered to 30, acknowledged to 25; a redelivery of 26..=30 (after
    // the ack wait) may have moved the consumer sequence, not the rest.
    let five_pending = |[delivered, stream, floor, floor_stream, ack_pending, pending]: [u64;
                            6]| {
        delivered >= 30 && [stream, floor, floor_stream, ack_pending, pending] == [30, 25, 25, 5, 0]
    };
    wait_consumer_numbers(&cluster, &client, "30 delivered, 25 acked", five_pending).await;

    // The new leaders report the same (each stepdown waited for another
    // leader; two may bring it back to where it started).
    step_down_stream_and_consumer(&cluster, &client, SOLO_STREAM, SOLO_DURABLE).await;
    wait_consumer_numbers(&cluster, &client, "30 delivered, 25 acked", five_pending).await;

    // What was not acknowledged comes again, to the same subscriber, and
    // new messages follow; everything ends acknowledged.
    receive_and_ack(&cluster, &client, &mut subscriber, 26..=30, true).await;
    publish_solo(&publisher, 10).await;
    receive_and_ack(&cluster, &client, &mut subscriber, 31..=40, false).await;
    let info = wait_consumer_numbers(
        &cluster,
        &client,
        "40 delivered and acked",
        |[delivered, stream, floor, floor_stream, ack_pending, pending]| {
            delivered >= 45
                && floor == delivered
                && [stream, floor_stream, ack_pending, pending] == [40, 40, 0, 0]
        },
    )
    .await;
    eprintln!("{}: {info} in {:?}", flavor.name(), started.elapsed());
}
differential!(durable_without_group_survives_stepdowns);

// ---- nats-py ------------------------------------------------------------------------

/// `tests/py/cluster_push.py`: nats-py's `js.subscribe(queue=, flow_control=,
/// idle_heartbeat=)` push subscription, a member on each node that does not
/// lead the stream, across a stream and a consumer stepdown under
/// publishes: every acknowledged publish received and acked.
async fn nats_py_queue_group_through_stepdowns(flavor: Flavor) {
    let cluster = Cluster::meshed(flavor, 3, Options::jetstream()).await;
    let script = format!("{}/tests/py/cluster_push.py", env!("CARGO_MANIFEST_DIR"));
    // The script bounds itself (80 s); this only catches a hung interpreter.
    let output = tokio::time::timeout(
        Duration::from_secs(100),
        tokio::process::Command::new("python3")
            .arg(&script)
            .args(cluster.urls())
            .kill_on_drop(true)
            .output(),
    )
    .await
    .unwrap_or_else(|_| panic!("cluster_push.py did not finish within 100 s"))
    .expect("python3 runs (nats-py: pip install nats-py)");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success() && stdout.contains("nats-py cluster_push: ok"),
        "nats-py cluster_push failed against {} ({}):\nstdout:\n{stdout}\nstderr:\n{stderr}\n{}",
        flavor.name(),
        output.status,
        cluster.logs()
    );
    eprint!("{}: {stdout}", flavor.name());
}
differential!(nats_py_queue_group_through_stepdowns);
