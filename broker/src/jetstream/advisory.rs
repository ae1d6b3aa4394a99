//! Consumer advisories as nats-server publishes them
//! (`jetstream_events.go`): the subject and the JSON body of a message that
//! reached max_deliver, was NAKed, or was terminated. Field order is the Go
//! structs' (`type`, `id`, `timestamp`, then the event's own fields);
//! `domain` is omitted (no JetStream domain here).

use std::fmt::Write as _;

use super::api::json;
use super::consumer::config::EPHEMERAL_NAME_ALPHABET;
use super::consumer::delivery::Event;

/// Characters in an advisory id (a NUID's length).
pub const ID_CHARACTERS: usize = 22;

/// The subject and JSON body of `event` for `consumer` of `stream` at
/// `unix_ns`; `reason` is a `+TERM`'s reason. `random` feeds the id.
pub fn consumer_event(
    stream: &str,
    consumer: &str,
    event: &Event,
    reason: Option<&str>,
    unix_ns: u64,
    random: &mut impl FnMut() -> u64,
) -> (String, String) {
    let (kind, schema) = match event {
        Event::MaxDeliveries { .. } => ("MAX_DELIVERIES", "max_deliver"),
        Event::Naked { .. } => ("MSG_NAKED", "nak"),
        Event::Terminated { .. } => ("MSG_TERMINATED", "terminated"),
    };
    let subject = format!("$JS.EVENT.ADVISORY.CONSUMER.{kind}.{stream}.{consumer}");
    let mut body = String::with_capacity(256);
    let _ = write!(
        body,
        "{{\"type\":\"io.nats.jetstream.advisory.v1.{schema}\",\"id\":\"{}\",\"timestamp\":",
        advisory_id(random)
    );
    json::write_time(&mut body, unix_ns);
    body.push_str(",\"stream\":");
    json::write_string(&mut body, stream);
    body.push_str(",\"consumer\":");
    json::write_string(&mut body, consumer);
    match event {
        Event::MaxDeliveries {
            stream_sequence,
            deliveries,
        } => {
            let _ = write!(
                body,
                ",\"stream_seq\":{stream_sequence},\"deliveries\":{deliveries}"
            );
        }
        Event::Naked {
            stream_sequence,
            consumer_sequence,
            deliveries,
        }
        | Event::Terminated {
            stream_sequence,
            consumer_sequence,
            deliveries,
        } => {
            let _ = write!(
                body,
                ",\"consumer_seq\":{consumer_sequence},\"stream_seq\":{stream_sequence},\"deliveries\":{deliveries}"
            );
            if let (Event::Terminated { .. }, Some(reason)) = (event, reason) {
                body.push_str(",\"reason\":");
                json::write_string(&mut body, reason);
            }
        }
    }
    body.push('}');
    (subject, body)
}

/// A NUID-shaped id: [`ID_CHARACTERS`] characters of `[0-9A-Za-z]`.
fn advisory_id(random: &mut impl FnMut() -> u64) -> String {
    let mut id = String::with_capacity(ID_CHARACTERS);
    let mut bits = 0u64;
    for index in 0..ID_CHARACTERS {
        if index % 8 == 0 {
            bits = random();
        }
        id.push(char::from(EPHEMERAL_NAME_ALPHABET[(bits % 62) as usize]));
        bits >>= 8;
    }
    id
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counter() -> impl FnMut() -> u64 {
        let mut state = 0u64;
        move || {
            state += 0x0101_0101_0101_0101;
            state
        }
    }

    #[test]
    fn advisories_have_nats_server_shapes() {
        let at = 1_796_029_674_907_003_966;
        let (subject, body) = consumer_event(
            "ORDERS",
            "C",
            &Event::MaxDeliveries {
                stream_sequence: 7,
                deliveries: 3,
            },
            None,
            at,
            &mut counter(),
        );
        assert_eq!(
            subject,
            "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.ORDERS.C"
        );
        let value: serde_json::Value = serde_json::from_str(&body).expect("JSON");
        let keys: Vec<&str> = body
            .split('"')
            .skip(1)
            .step_by(2)
            .filter(|key| value.get(*key).is_some())
            .collect();
        assert_eq!(
            keys[..7],
            [
                "type",
                "id",
                "timestamp",
                "stream",
                "consumer",
                "stream_seq",
                "deliveries"
            ]
        );
        assert_eq!(value["type"], "io.nats.jetstream.advisory.v1.max_deliver");
        assert_eq!(value["id"].as_str().unwrap().len(), ID_CHARACTERS);
        assert_eq!(value["timestamp"], "2026-11-30T09:07:54.907003966Z");
        assert_eq!(
            (value["stream_seq"].as_u64(), value["deliveries"].as_u64()),
            (Some(7), Some(3))
        );

        let (subject, body) = consumer_event(
            "ORDERS",
            "C",
            &Event::Terminated {
                stream_sequence: 9,
                consumer_sequence: 4,
                deliveries: 1,
            },
            Some("bad \"input\""),
            at,
            &mut counter(),
        );
        assert_eq!(
            subject,
            "$JS.EVENT.ADVISORY.CONSUMER.MSG_TERMINATED.ORDERS.C"
        );
        let value: serde_json::Value = serde_json::from_str(&body).expect("JSON");
        assert_eq!(value["type"], "io.nats.jetstream.advisory.v1.terminated");
        assert_eq!(value["consumer_seq"], 4);
        assert_eq!(value["reason"], "bad \"input\"");

        let (subject, body) = consumer_event(
            "ORDERS",
            "C",
            &Event::Naked {
                stream_sequence: 9,
                consumer_sequence: 4,
                deliveries: 2,
            },
            Some("ignored"),
            at,
            &mut counter(),
        );
        assert_eq!(subject, "$JS.EVENT.ADVISORY.CONSUMER.MSG_NAKED.ORDERS.C");
        let value: serde_json::Value = serde_json::from_str(&body).expect("JSON");
        assert_eq!(value["type"], "io.nats.jetstream.advisory.v1.nak");
        assert!(value.get("reason").is_none());
    }
}
