//! `tern pub`, `tern sub` and `tern req`: messages as the `nats` CLI sends
//! and shows them. `pub` waits for a PubAck for every message when
//! `--jetstream` is given or a stream captures the subject, keeping at
//! most [`PUBLISH_IN_FLIGHT_MAX`] unanswered at once, each answer checked
//! in order. `sub` replays a stream through an ordered consumer when a
//! JetStream flag is given.

use std::collections::VecDeque;
use std::io::{Read, Write};
use std::time::{SystemTime, UNIX_EPOCH};

use async_nats::jetstream::{self, consumer};
use async_nats::HeaderMap;
use clap::Args;
use futures::StreamExt;
use serde_json::json;

use crate::api::Api;
use crate::error::CliError;
use crate::progress;
use crate::timestamp::rfc3339;

/// JetStream publishes awaiting their PubAck at most.
pub const PUBLISH_IN_FLIGHT_MAX: usize = 256;
/// The wait for `pub`'s question "does a stream capture this subject?".
pub const STREAM_LOOKUP_TIMEOUT_MAX: std::time::Duration = std::time::Duration::from_secs(2);
/// A body read from stdin at most.
pub const STDIN_BODY_BYTES_MAX: u64 = 64 << 20;

#[derive(Debug, Args)]
pub struct PubArgs {
    /// Subject to publish to
    pub subject: String,
    /// Message body ({{Count}}, {{Unix}}, {{UnixNano}}, {{TimeStamp}} are
    /// replaced); read from stdin when not given
    pub body: Option<String>,
    /// Publish this many messages ({{Count}} runs 1..N)
    #[arg(long, default_value_t = 1)]
    pub count: u64,
    /// A header, K:V (repeatable)
    #[arg(short = 'H', long = "header", value_name = "K:V")]
    pub headers: Vec<String>,
    /// Publish to JetStream and wait for each PubAck (automatic when a
    /// stream captures the subject)
    #[arg(short = 'J', long)]
    pub jetstream: bool,
    /// Plain publishes even when a stream captures the subject
    #[arg(long, conflicts_with = "jetstream")]
    pub no_jetstream: bool,
    /// Reply subject of a plain publish
    #[arg(long, value_name = "SUBJECT")]
    pub reply: Option<String>,
    /// Print nothing on success
    #[arg(short = 'q', long)]
    pub quiet: bool,
}

#[derive(Debug, Args)]
pub struct SubArgs {
    /// Subject to subscribe to (with --stream: a filter, all of it when
    /// not given)
    pub subject: Option<String>,
    /// Subscribe in this queue group
    #[arg(long, value_name = "GROUP")]
    pub queue: Option<String>,
    /// Exit after this many messages
    #[arg(long, value_name = "N")]
    pub count: Option<u64>,
    /// Only the bodies, one a line
    #[arg(short = 'r', long)]
    pub raw: bool,
    /// Replay this stream (JetStream)
    #[arg(long, value_name = "STREAM")]
    pub stream: Option<String>,
    /// JetStream: every message in the stream
    #[arg(long, group = "policy")]
    pub all: bool,
    /// JetStream: only messages published from now
    #[arg(long, group = "policy")]
    pub new: bool,
    /// JetStream: the last message, then new ones
    #[arg(long, group = "policy")]
    pub last: bool,
    /// JetStream: the last message of each subject, then new ones
    #[arg(long, group = "policy")]
    pub last_per_subject: bool,
    /// JetStream: from this stream sequence
    #[arg(long, value_name = "SEQUENCE", group = "policy")]
    pub start_sequence: Option<u64>,
}

#[derive(Debug, Args)]
pub struct ReqArgs {
    /// Subject of the request
    pub subject: String,
    /// Request body; read from stdin when not given
    pub body: Option<String>,
    /// A header, K:V (repeatable)
    #[arg(short = 'H', long = "header", value_name = "K:V")]
    pub headers: Vec<String>,
    /// Only the reply's body
    #[arg(short = 'r', long)]
    pub raw: bool,
}

/// The body of message `count`: the nats CLI's template fields that need
/// no randomness.
pub fn render(template: &str, count: u64, now: SystemTime) -> String {
    if !template.contains("{{") {
        return template.to_string();
    }
    let since = now.duration_since(UNIX_EPOCH).unwrap_or_default();
    let mut text = template.to_string();
    for (name, value) in [
        ("Count", count.to_string()),
        ("UnixNano", since.as_nanos().to_string()),
        ("Unix", since.as_secs().to_string()),
        ("TimeStamp", rfc3339(now)),
    ] {
        for form in [format!("{{{{{name}}}}}"), format!("{{{{ {name} }}}}")] {
            text = text.replace(&form, &value);
        }
    }
    text
}

/// `K:V` flags as headers; a bad one is refused with its text.
pub fn headers(given: &[String]) -> Result<Option<HeaderMap>, CliError> {
    if given.is_empty() {
        return Ok(None);
    }
    let mut map = HeaderMap::new();
    for text in given {
        let Some((name, value)) = text.split_once(':') else {
            return Err(CliError::Usage(format!("--header {text:?}: expected K:V")));
        };
        let name: async_nats::HeaderName = name
            .trim()
            .parse()
            .map_err(|_| CliError::Usage(format!("--header {text:?}: invalid header name")))?;
        let value = value.trim();
        if value.contains(['\r', '\n']) {
            return Err(CliError::Usage(format!(
                "--header {text:?}: a value cannot hold line breaks"
            )));
        }
        map.append(name, value);
    }
    Ok(Some(map))
}

fn body_or_stdin(body: Option<String>) -> Result<String, CliError> {
    match body {
        Some(body) => Ok(body),
        None => {
            let mut text = String::new();
            std::io::stdin()
                .take(STDIN_BODY_BYTES_MAX)
                .read_to_string(&mut text)
                .map_err(CliError::io("reading the body from stdin"))?;
            Ok(text)
        }
    }
}

/// True when a stream captures `subject`. Anything but a clear answer
/// (JetStream off, the API not permitted to this user, no answer within
/// [`STREAM_LOOKUP_TIMEOUT_MAX`]) means plain publishes.
async fn captured_by_stream(api: &Api, subject: &str) -> bool {
    let lookup = Api::new(
        api.client.clone(),
        api.timeout.min(STREAM_LOOKUP_TIMEOUT_MAX),
    )
    .with_prefix(api.prefix.clone())
    .with_trace(api.trace);
    match lookup
        .request(
            &format!("pub {subject}: looking for a stream"),
            "STREAM.NAMES",
            &json!({ "subject": subject }),
        )
        .await
    {
        Ok(answer) => answer["streams"]
            .as_array()
            .is_some_and(|streams| !streams.is_empty()),
        Err(_) => false,
    }
}

pub async fn publish(api: &Api, args: PubArgs) -> Result<(), CliError> {
    let headers = headers(&args.headers)?;
    let template = body_or_stdin(args.body.clone())?;
    let now = SystemTime::now();
    let subject_of = |count: u64| render(&args.subject, count, now);
    let jetstream = args.jetstream
        || (!args.no_jetstream
            && args.reply.is_none()
            && captured_by_stream(api, &subject_of(1)).await);
    if jetstream {
        publish_jetstream(api, &args, &template, headers, now).await
    } else {
        let action = format!("pub {}", args.subject);
        let bar = progress::messages(args.count, "Publishing");
        for count in 1..=args.count {
            let subject = subject_of(count);
            let body = bytes::Bytes::from(render(&template, count, now));
            let client = &api.client;
            let sent = match (&args.reply, &headers) {
                (Some(reply), Some(headers)) => {
                    client
                        .publish_with_reply_and_headers(
                            subject,
                            reply.clone(),
                            headers.clone(),
                            body,
                        )
                        .await
                }
                (Some(reply), None) => {
                    client
                        .publish_with_reply(subject, reply.clone(), body)
                        .await
                }
                (None, Some(headers)) => {
                    client
                        .publish_with_headers(subject, headers.clone(), body)
                        .await
                }
                (None, None) => client.publish(subject, body).await,
            };
            sent.map_err(CliError::client(action.clone()))?;
            bar.inc(1);
        }
        bar.finish_and_clear();
        api.client
            .flush()
            .await
            .map_err(CliError::client(action.clone()))?;
        if !args.quiet {
            eprintln!("Published {} message(s) to {:?}", args.count, args.subject);
        }
        Ok(())
    }
}

async fn publish_jetstream(
    api: &Api,
    args: &PubArgs,
    template: &str,
    headers: Option<HeaderMap>,
    now: SystemTime,
) -> Result<(), CliError> {
    let context = api.jetstream();
    let mut in_flight = VecDeque::with_capacity(PUBLISH_IN_FLIGHT_MAX);
    let mut last_ack = None;
    let mut confirm = |count: u64, ack: Result<jetstream::publish::PublishAck, _>| {
        let ack: jetstream::publish::PublishAck = ack.map_err(|error| CliError::Client {
            action: format!("pub {} (message {count})", args.subject),
            source: Box::new(error),
        })?;
        last_ack = Some(ack);
        Ok::<(), CliError>(())
    };
    let bar = progress::messages(args.count, "Publishing");
    for count in 1..=args.count {
        if in_flight.len() == PUBLISH_IN_FLIGHT_MAX {
            let (sent, future): (u64, jetstream::context::PublishAckFuture) =
                in_flight.pop_front().expect("a full window");
            confirm(sent, future.await)?;
            bar.inc(1);
        }
        let subject = render(&args.subject, count, now);
        let body = bytes::Bytes::from(render(template, count, now));
        let future = match &headers {
            Some(headers) => {
                context
                    .publish_with_headers(subject, headers.clone(), body)
                    .await
            }
            None => context.publish(subject, body).await,
        };
        let future = future.map_err(|error| CliError::Client {
            action: format!("pub {} (message {count})", args.subject),
            source: Box::new(error),
        })?;
        in_flight.push_back((count, future));
    }
    while let Some((sent, future)) = in_flight.pop_front() {
        confirm(sent, future.await)?;
        bar.inc(1);
    }
    bar.finish_and_clear();
    if !args.quiet {
        if let Some(ack) = last_ack {
            if args.count == 1 {
                eprintln!(
                    "Stored in Stream: {} Sequence: {}{}",
                    ack.stream,
                    ack.sequence,
                    if ack.duplicate {
                        " Duplicate: true"
                    } else {
                        ""
                    }
                );
            } else {
                eprintln!(
                    "Published {} messages to {:?}, each acknowledged; last stored in Stream: {} Sequence: {}",
                    args.count, args.subject, ack.stream, ack.sequence
                );
            }
        }
    }
    Ok(())
}

fn print_message(
    out: &mut impl Write,
    number: u64,
    subject: &str,
    headers: Option<&HeaderMap>,
    payload: &[u8],
    raw: bool,
) {
    if !raw {
        let _ = writeln!(out, "[#{number}] Received on {subject:?}");
        if let Some(headers) = headers {
            for (name, values) in headers.iter() {
                for value in values {
                    let _ = writeln!(out, "{name}: {value}");
                }
            }
            let _ = writeln!(out);
        }
    }
    let _ = out.write_all(payload);
    let _ = writeln!(out);
    if !raw {
        let _ = writeln!(out);
    }
    let _ = out.flush();
}

pub async fn subscribe(api: &Api, args: SubArgs) -> Result<(), CliError> {
    let replay = args.stream.is_some()
        || args.all
        || args.new
        || args.last
        || args.last_per_subject
        || args.start_sequence.is_some();
    if replay {
        return replay_stream(api, args).await;
    }
    let Some(subject) = args.subject.clone() else {
        return Err(CliError::Usage(
            "sub: give a subject (or --stream to replay a stream)".into(),
        ));
    };
    let action = format!("sub {subject}");
    let mut subscription = match &args.queue {
        Some(queue) => {
            api.client
                .queue_subscribe(subject.clone(), queue.clone())
                .await
        }
        None => api.client.subscribe(subject.clone()).await,
    }
    .map_err(CliError::client(action.clone()))?;
    api.client
        .flush()
        .await
        .map_err(CliError::client(action.clone()))?;
    eprintln!("Subscribing on {subject}");
    let mut stdout = std::io::stdout().lock();
    let mut received = 0;
    while args.count.is_none_or(|count| received < count) {
        let Some(message) = subscription.next().await else {
            return Err(CliError::Failed {
                action,
                reason: "the connection closed".into(),
            });
        };
        received += 1;
        print_message(
            &mut stdout,
            received,
            &message.subject,
            message.headers.as_ref(),
            &message.payload,
            args.raw,
        );
    }
    Ok(())
}

async fn replay_stream(api: &Api, args: SubArgs) -> Result<(), CliError> {
    let stream = match &args.stream {
        Some(stream) => stream.clone(),
        None => {
            let subject = args
                .subject
                .as_deref()
                .ok_or_else(|| CliError::Usage("sub: give a subject or --stream".into()))?;
            let answer = api
                .request(
                    &format!("sub {subject}: looking for its stream"),
                    "STREAM.NAMES",
                    &json!({ "subject": subject }),
                )
                .await?;
            match answer["streams"].as_array().and_then(|names| names.first()) {
                Some(name) => name.as_str().unwrap_or_default().to_string(),
                None => {
                    return Err(CliError::Failed {
                        action: format!("sub {subject}"),
                        reason: "no stream captures this subject".into(),
                    })
                }
            }
        }
    };
    let action = format!("sub --stream {stream}");
    let deliver_policy = if args.new {
        consumer::DeliverPolicy::New
    } else if args.last {
        consumer::DeliverPolicy::Last
    } else if args.last_per_subject {
        consumer::DeliverPolicy::LastPerSubject
    } else if let Some(start_sequence) = args.start_sequence {
        consumer::DeliverPolicy::ByStartSequence { start_sequence }
    } else {
        consumer::DeliverPolicy::All
    };
    let context = api.jetstream();
    let handle = context
        .get_stream(&stream)
        .await
        .map_err(CliError::client(action.clone()))?;
    let ordered = handle
        .create_consumer(consumer::pull::OrderedConfig {
            filter_subject: args.subject.clone().unwrap_or_default(),
            deliver_policy,
            ..Default::default()
        })
        .await
        .map_err(CliError::client(action.clone()))?;
    let mut messages = ordered
        .messages()
        .await
        .map_err(CliError::client(action.clone()))?;
    eprintln!("Subscribing to stream {stream}");
    let mut stdout = std::io::stdout().lock();
    let mut received = 0;
    while args.count.is_none_or(|count| received < count) {
        let message = match messages.next().await {
            Some(Ok(message)) => message,
            Some(Err(error)) => return Err(CliError::client(action)(error)),
            None => {
                return Err(CliError::Failed {
                    action,
                    reason: "the consumer ended".into(),
                })
            }
        };
        received += 1;
        print_message(
            &mut stdout,
            received,
            &message.subject,
            message.headers.as_ref(),
            &message.payload,
            args.raw,
        );
    }
    Ok(())
}

pub async fn request(api: &Api, args: ReqArgs) -> Result<(), CliError> {
    let headers = headers(&args.headers)?;
    let body = bytes::Bytes::from(body_or_stdin(args.body)?);
    let action = format!("req {}", args.subject);
    let mut request = async_nats::Request::new()
        .payload(body)
        .timeout(Some(api.timeout));
    if let Some(headers) = headers {
        request = request.headers(headers);
    }
    let reply = api
        .client
        .send_request(args.subject.clone(), request)
        .await
        .map_err(|error| crate::api::request_error(&action, &args.subject, api.timeout, error))?;
    let mut stdout = std::io::stdout().lock();
    print_message(
        &mut stdout,
        1,
        &reply.subject,
        reply.headers.as_ref(),
        &reply.payload,
        args.raw,
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn templates() {
        let now = UNIX_EPOCH + Duration::new(5, 7);
        assert_eq!(render("order {{Count}}", 17, now), "order 17");
        assert_eq!(render("{{ Count }}/{{Count}}", 2, now), "2/2");
        assert_eq!(render("{{Unix}} {{UnixNano}}", 1, now), "5 5000000007");
        assert_eq!(
            render("at {{TimeStamp}}", 1, now),
            "at 1970-01-01T00:00:05.000000007Z"
        );
        assert_eq!(render("plain", 3, now), "plain");
        assert_eq!(render("{{Unknown}}", 3, now), "{{Unknown}}");
    }

    #[test]
    fn header_flags() {
        let map = headers(&["Nats-Msg-Id: abc".into(), "X:1:2".into()])
            .unwrap()
            .unwrap();
        assert_eq!(map.get("Nats-Msg-Id").map(|v| v.as_str()), Some("abc"));
        assert_eq!(map.get("X").map(|v| v.as_str()), Some("1:2"));
        assert!(headers(&[]).unwrap().is_none());
        assert!(headers(&["novalue".into()]).is_err());
        assert!(headers(&["bad name:1".into()]).is_err());
    }
}
