//! `tern pub`, `tern sub` and `tern req`: messages as the `nats` CLI sends
//! and shows them, with every flag the `nats` CLI gives these commands.
//! `pub` waits for a PubAck for every message when `--jetstream` is given
//! or a stream captures the subject, keeping at most
//! [`PUBLISH_IN_FLIGHT_MAX`] unanswered at once, each answer checked in
//! order; `--atomic` publishes one atomic batch; `--schedule-*` adds the
//! message schedule headers. `sub` reads core subjects, replays a stream
//! through an ordered consumer, reads a durable consumer, or reads a
//! stream by direct gets, and prints, dumps or counts what it gets. `req`
//! sends requests and prints one reply or several.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::io::{BufRead, Read, Write};
use std::path::PathBuf;
use std::pin::Pin;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use async_nats::jetstream::{self, consumer};
use async_nats::HeaderMap;
use clap::{Args, ValueEnum};
use futures::{Stream, StreamExt};
use serde_json::{json, Value};

use crate::api::Api;
use crate::error::CliError;
use crate::progress;
use crate::stream::switch;
use crate::timestamp::{parse_rfc3339, rfc3339, rfc3339_seconds};
use crate::units;

/// JetStream publishes awaiting their PubAck at most.
pub const PUBLISH_IN_FLIGHT_MAX: usize = 256;
/// The wait for `pub`'s question "does a stream capture this subject?".
pub const STREAM_LOOKUP_TIMEOUT_MAX: Duration = Duration::from_secs(2);
/// A body read from stdin at most.
pub const STDIN_BODY_BYTES_MAX: u64 = 64 << 20;
/// Messages of one `pub --atomic` batch at most (the server's own limit
/// is lower).
pub const ATOMIC_BATCH_MAX: usize = 100_000;
/// Replies `req --replies 0`/`--wait-for-empty` take at most (the nats
/// CLI's MaxInt16).
pub const REPLIES_MAX: u64 = 32_767;
/// Requests `req --count 0` sends at most (the nats CLI's MaxInt16).
pub const REQUESTS_MAX: u64 = 32_767;
/// Subjects `sub --report-subjects` counts at most (the rest are summed
/// as one row).
pub const REPORTED_SUBJECTS_MAX: usize = 100_000;
/// How long `sub --direct` waits before asking again at the stream's end.
pub const DIRECT_GET_IDLE: Duration = Duration::from_millis(250);

/// When stdin is turned into bodies (`--send-on`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SendOn {
    /// All of stdin is one body
    Eof,
    /// Each line of stdin is a body
    Newline,
}

#[derive(Debug, Args)]
pub struct PubArgs {
    /// Subject to publish to
    pub subject: String,
    /// Message body ({{Count}}, {{Cnt}}, {{Unix}}, {{UnixNano}},
    /// {{TimeStamp}}, {{Time}}, {{ID}} are replaced); read from stdin when
    /// not given
    pub body: Option<String>,
    /// Publish this many messages ({{Count}} runs 1..N)
    #[arg(long, default_value_t = 1)]
    pub count: u64,
    /// A header, K:V (repeatable; the value may hold templates)
    #[arg(short = 'H', long = "header", value_name = "K:V")]
    pub headers: Vec<String>,
    /// Publish to JetStream and wait for each PubAck (automatic when a
    /// stream captures the subject)
    #[arg(short = 'J', long)]
    pub jetstream: bool,
    /// Plain publishes even when a stream captures the subject (tern's)
    #[arg(long, conflicts_with = "jetstream")]
    pub no_jetstream: bool,
    /// Reply subject of a plain publish
    #[arg(long, value_name = "SUBJECT")]
    pub reply: Option<String>,
    /// Print nothing on success
    #[arg(short = 'q', long)]
    pub quiet: bool,
    /// One atomic batch of every line of stdin (needs --send-on newline)
    #[arg(long)]
    pub atomic: bool,
    /// Accepted: tern reads stdin whenever no body is given
    #[arg(long)]
    pub force_stdin: bool,
    /// Schedule the message this long from now (a message schedule)
    #[arg(long, value_name = "DURATION")]
    pub schedule_after: Option<String>,
    /// Schedule the message at this RFC 3339 time
    #[arg(long, value_name = "TIME")]
    pub schedule_at: Option<String>,
    /// Schedule the message by this cron expression
    #[arg(long, value_name = "CRON")]
    pub schedule_cron: Option<String>,
    /// Subject the scheduled message is published to when it fires
    #[arg(long, value_name = "SUBJECT")]
    pub schedule_dest: Option<String>,
    /// Schedule the message every interval
    #[arg(long, value_name = "DURATION")]
    pub schedule_every: Option<String>,
    /// Publish the latest message of this subject when the schedule fires
    #[arg(long, value_name = "SUBJECT")]
    pub schedule_source: Option<String>,
    /// How long the messages a schedule publishes live
    #[arg(long, value_name = "DURATION")]
    pub schedule_ttl: Option<String>,
    /// When stdin becomes a body: at its end, or at each line
    #[arg(long, value_enum, default_value = "eof")]
    pub send_on: SendOn,
    /// Wait this long between publishes (then one at a time)
    #[arg(long, value_name = "DURATION")]
    pub sleep: Option<String>,
    /// Replace templates in the body and subject (the default;
    /// --no-templates sends them as typed)
    #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true, default_missing_value = "true", overrides_with = "no_templates")]
    pub templates: Option<bool>,
    #[arg(long, hide = true, overrides_with = "templates")]
    pub no_templates: bool,
}

#[derive(Debug, Args)]
pub struct SubArgs {
    /// Subjects to subscribe to (with a JetStream flag: one, the filter)
    pub subjects: Vec<String>,
    /// Subscribe in this queue group
    #[arg(long, value_name = "GROUP")]
    pub queue: Option<String>,
    /// Read this consumer of --stream (made, ack none, when it does not
    /// exist)
    #[arg(long, value_name = "NAME")]
    pub durable: Option<String>,
    /// Exit after this many messages
    #[arg(long, value_name = "N")]
    pub count: Option<u64>,
    /// Only the bodies, one a line
    #[arg(short = 'r', long)]
    pub raw: bool,
    /// Run each body through this command before printing it
    #[arg(long, value_name = "COMMAND")]
    pub translate: Option<String>,
    /// Acknowledge JetStream messages (those with an ack reply subject)
    #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true, default_missing_value = "true", overrides_with = "no_ack")]
    pub ack: Option<bool>,
    #[arg(long, hide = true, overrides_with = "ack")]
    pub no_ack: bool,
    /// Print each request with its reply (subscribes to _INBOX.> too)
    #[arg(long)]
    pub match_replies: bool,
    /// Subscribe to a new inbox (printed) instead of a subject
    #[arg(short = 'i', long)]
    pub inbox: bool,
    /// Write each message as JSON to DIR/N.json (- : stdout, NUL ended)
    #[arg(long, value_name = "DIRECTORY")]
    pub dump: Option<PathBuf>,
    /// Only the headers, no bodies
    #[arg(long)]
    pub headers_only: bool,
    /// Only the subjects
    #[arg(long)]
    pub subjects_only: bool,
    /// JetStream: from this stream sequence
    #[arg(long, value_name = "SEQUENCE", group = "policy")]
    pub start_sequence: Option<u64>,
    /// JetStream: every message in the stream
    #[arg(long, group = "policy")]
    pub all: bool,
    /// JetStream: only messages published from now
    #[arg(long, group = "policy")]
    pub new: bool,
    /// JetStream: the last message, then new ones
    #[arg(long, group = "policy")]
    pub last: bool,
    /// JetStream: messages received since this long ago, e.g. 1h
    #[arg(long, value_name = "DURATION", group = "policy")]
    pub since: Option<String>,
    /// JetStream: the last message of each subject, then new ones
    #[arg(long, group = "policy")]
    pub last_per_subject: bool,
    /// JetStream: exit once every message has been received
    #[arg(short = 'T', long)]
    pub terminate_at_end: bool,
    /// Replay this stream (JetStream)
    #[arg(long, value_name = "STREAM")]
    pub stream: Option<String>,
    /// Messages on these subjects are not shown (repeatable; wildcards)
    #[arg(short = 'I', long, value_name = "SUBJECT")]
    pub ignore_subject: Vec<String>,
    /// Exit after this long without a message
    #[arg(long, value_name = "DURATION")]
    pub wait: Option<String>,
    /// Count messages and bytes per subject and print the busiest at the
    /// end, instead of the messages
    #[arg(long)]
    pub report_subjects: bool,
    /// As --report-subjects, per subscription (subject pattern)
    #[arg(long)]
    pub report_subscriptions: bool,
    /// Rows of the report
    #[arg(long, value_name = "N", default_value_t = 10)]
    pub report_top: usize,
    /// Each message's time
    #[arg(short = 't', long, conflicts_with = "delta_time")]
    pub timestamp: bool,
    /// Each message's time since the subscription started
    #[arg(short = 'd', long)]
    pub delta_time: bool,
    /// Refused: tern draws no graphs (use --report-subjects)
    #[arg(long)]
    pub graph: bool,
    /// JetStream: read the stream by direct gets instead of a consumer
    #[arg(long)]
    pub direct: bool,
}

#[derive(Debug, Args)]
pub struct ReqArgs {
    /// Subject of the request
    pub subject: String,
    /// Request body (templates as `pub`); read from stdin when not given
    pub body: Option<String>,
    /// A header, K:V (repeatable)
    #[arg(short = 'H', long = "header", value_name = "K:V")]
    pub headers: Vec<String>,
    /// Only the reply's body
    #[arg(short = 'r', long)]
    pub raw: bool,
    /// Accepted (hidden in the nats CLI): a request always waits
    #[arg(short = 'w', long, hide = true, value_name = "BOOL", num_args = 0..=1, require_equals = true, default_missing_value = "true", overrides_with = "no_wait")]
    pub wait: Option<bool>,
    #[arg(long, hide = true, overrides_with = "wait")]
    pub no_wait: bool,
    /// Send this many requests (0: until the nats CLI's 32767)
    #[arg(long, default_value_t = 1)]
    pub count: u64,
    /// Replies to wait for per request (0: all that come within --timeout)
    #[arg(long, default_value_t = 1)]
    pub replies: u64,
    /// After the first reply, the most to wait for the next beyond the
    /// average so far
    #[arg(long, value_name = "DURATION", default_value = "300ms")]
    pub reply_timeout: String,
    /// Take replies until an empty one arrives
    #[arg(long)]
    pub wait_for_empty: bool,
    /// Run each reply's body through this command before printing it
    #[arg(long, value_name = "COMMAND")]
    pub translate: Option<String>,
    /// Accepted: tern reads stdin whenever no body is given
    #[arg(long)]
    pub force_stdin: bool,
    /// When stdin becomes a body: at its end, or at each line
    #[arg(long, value_enum, default_value = "eof")]
    pub send_on: SendOn,
    /// Replace templates in the body and subject (the default;
    /// --no-templates sends them as typed)
    #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true, default_missing_value = "true", overrides_with = "no_templates")]
    pub templates: Option<bool>,
    #[arg(long, hide = true, overrides_with = "templates")]
    pub no_templates: bool,
}

fn usage(text: impl Into<String>) -> CliError {
    CliError::Usage(text.into())
}

/// Go's `Duration.String` (`1h0m0s`, `1m30s`, `500ms`), as the schedule
/// headers carry durations.
pub fn go_duration(duration: Duration) -> String {
    let nanos = duration.as_nanos();
    if nanos == 0 {
        return "0s".into();
    }
    if nanos < 1_000_000_000 {
        let (value, unit) = if nanos < 1_000 {
            (nanos as f64, "ns")
        } else if nanos < 1_000_000 {
            (nanos as f64 / 1e3, "µs")
        } else {
            (nanos as f64 / 1e6, "ms")
        };
        return format!("{}{unit}", trim_float(value));
    }
    let seconds = nanos as f64 / 1e9;
    let whole = duration.as_secs();
    let (hours, minutes) = (whole / 3_600, whole % 3_600 / 60);
    let rest = seconds - (hours * 3_600 + minutes * 60) as f64;
    let seconds_text = format!("{}s", trim_float(rest));
    match (hours, minutes) {
        (0, 0) => seconds_text,
        (0, minutes) => format!("{minutes}m{seconds_text}"),
        (hours, minutes) => format!("{hours}h{minutes}m{seconds_text}"),
    }
}

fn trim_float(value: f64) -> String {
    let text = format!("{value:.9}");
    text.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// A NUID-like unique identifier (22 characters), for `{{ID}}` and batch
/// ids.
pub fn unique_id() -> String {
    nuid::next().to_string()
}

/// The body of message `count`: the nats CLI's template fields.
pub fn render(template: &str, count: u64, now: SystemTime) -> String {
    if !template.contains("{{") {
        return template.to_string();
    }
    let since = now.duration_since(UNIX_EPOCH).unwrap_or_default();
    let mut text = template.to_string();
    let clock = {
        let seconds = since.as_secs() % 86_400;
        let (hour, minute) = (seconds / 3_600, seconds % 3_600 / 60);
        let (twelve, half) = match hour {
            0 => (12, "AM"),
            1..=11 => (hour, "AM"),
            12 => (12, "PM"),
            _ => (hour - 12, "PM"),
        };
        format!("{twelve}:{minute:02}{half}")
    };
    for (name, value) in [
        ("Count", count.to_string()),
        ("Cnt", count.to_string()),
        ("UnixNano", since.as_nanos().to_string()),
        ("Unix", since.as_secs().to_string()),
        ("TimeStamp", rfc3339_seconds(now)),
        ("Time", clock),
    ] {
        for form in [format!("{{{{{name}}}}}"), format!("{{{{ {name} }}}}")] {
            text = text.replace(&form, &value);
        }
    }
    for form in ["{{ID}}", "{{ ID }}"] {
        while text.contains(form) {
            text = text.replacen(form, &unique_id(), 1);
        }
    }
    text
}

/// `K:V` flags as headers; a bad one is refused with its text. With
/// `count`, templates in the values are replaced (as the nats CLI does).
pub fn headers_for(
    given: &[String],
    count: Option<u64>,
    now: SystemTime,
) -> Result<Option<HeaderMap>, CliError> {
    if given.is_empty() {
        return Ok(None);
    }
    let mut map = HeaderMap::new();
    for text in given {
        let Some((name, value)) = text.split_once(':') else {
            return Err(usage(format!("--header {text:?}: expected K:V")));
        };
        let name: async_nats::HeaderName = name
            .trim()
            .parse()
            .map_err(|_| usage(format!("--header {text:?}: invalid header name")))?;
        let value = match count {
            Some(count) => render(value.trim(), count, now),
            None => value.trim().to_string(),
        };
        if value.contains(['\r', '\n']) {
            return Err(usage(format!(
                "--header {text:?}: a value cannot hold line breaks"
            )));
        }
        map.append(name, value.as_str());
    }
    Ok(Some(map))
}

/// `K:V` flags as headers, untemplated (checked before connecting).
pub fn headers(given: &[String]) -> Result<Option<HeaderMap>, CliError> {
    headers_for(given, None, SystemTime::now())
}

/// The bodies to send: the one given, else stdin's (all of it, or each
/// line with `--send-on newline`).
fn bodies(body: Option<String>, send_on: SendOn) -> Result<Vec<String>, CliError> {
    if let Some(body) = body {
        return Ok(vec![body]);
    }
    let mut stdin = std::io::stdin().lock().take(STDIN_BODY_BYTES_MAX);
    match send_on {
        SendOn::Eof => {
            let mut text = String::new();
            stdin
                .read_to_string(&mut text)
                .map_err(CliError::io("reading the body from stdin"))?;
            Ok(vec![text])
        }
        SendOn::Newline => std::io::BufReader::new(stdin)
            .lines()
            .collect::<Result<Vec<_>, _>>()
            .map_err(CliError::io("reading the bodies from stdin")),
    }
}

/// The schedule headers `pub --schedule-*` asks for, checked as the nats
/// CLI checks them; `None` when no schedule flag is given.
pub fn schedule_headers(
    args: &PubArgs,
    now: SystemTime,
) -> Result<Option<Vec<(&'static str, String)>>, CliError> {
    let given = args.schedule_after.is_some()
        || args.schedule_at.is_some()
        || args.schedule_cron.is_some()
        || args.schedule_dest.is_some()
        || args.schedule_every.is_some()
        || args.schedule_source.is_some()
        || args.schedule_ttl.is_some();
    if !given {
        return Ok(None);
    }
    let Some(destination) = &args.schedule_dest else {
        return Err(usage("--schedule-dest: required with any schedule flag"));
    };
    let duration = |flag: &'static str, text: &Option<String>| {
        text.as_deref()
            .map(|text| units::parse_duration(text).map_err(CliError::unit(flag)))
            .transpose()
    };
    let after = duration("--schedule-after", &args.schedule_after)?;
    let every = duration("--schedule-every", &args.schedule_every)?;
    let ttl = duration("--schedule-ttl", &args.schedule_ttl)?;
    if after.is_some_and(|after| after.is_zero()) {
        return Err(usage("--schedule-after: more than 0"));
    }
    if every.is_some_and(|every| every.is_zero()) {
        return Err(usage("--schedule-every: more than 0"));
    }
    if args.schedule_at.is_some() && after.is_some() {
        return Err(usage(
            "--schedule-at and --schedule-after: one or the other",
        ));
    }
    if every.is_some() && (args.schedule_at.is_some() || after.is_some()) {
        return Err(usage(
            "--schedule-every: not with --schedule-at or --schedule-after",
        ));
    }
    if args.schedule_cron.is_some()
        && (args.schedule_at.is_some() || after.is_some() || every.is_some())
    {
        return Err(usage(
            "--schedule-cron: not with --schedule-at, --schedule-every or --schedule-after",
        ));
    }
    let mut headers = vec![("Nats-Schedule-Target", destination.clone())];
    let pattern = if let Some(at) = &args.schedule_at {
        let time = parse_rfc3339(at)
            .ok_or_else(|| usage(format!("--schedule-at {at}: not an RFC 3339 time")))?;
        Some(format!("@at {}", rfc3339_seconds(time)))
    } else if let Some(after) = after {
        // An `@at` schedule: the nats CLI sends the bare time, which
        // nats-server refuses as an invalid pattern (10189).
        Some(format!("@at {}", rfc3339_seconds(now + after)))
    } else if let Some(every) = every {
        Some(format!("@every {}", go_duration(every)))
    } else {
        args.schedule_cron.clone()
    };
    if let Some(pattern) = pattern {
        headers.push(("Nats-Schedule", pattern));
    }
    if let Some(ttl) = ttl.filter(|ttl| !ttl.is_zero()) {
        headers.push(("Nats-Schedule-TTL", go_duration(ttl)));
    }
    if let Some(source) = &args.schedule_source {
        headers.push(("Nats-Schedule-Source", source.clone()));
    }
    Ok(Some(headers))
}

/// What `pub` checks before connecting.
pub fn check_publish(args: &PubArgs) -> Result<(), CliError> {
    headers(&args.headers)?;
    let schedules = schedule_headers(args, SystemTime::now())?;
    if let Some(text) = &args.sleep {
        units::parse_duration(text).map_err(CliError::unit("--sleep"))?;
    }
    if args.atomic {
        if schedules.is_some() {
            return Err(usage("--atomic: atomic batches take no schedules"));
        }
        if args.body.is_some() || args.send_on != SendOn::Newline {
            return Err(usage(
                "--atomic: the batch is stdin's lines: give no body, and --send-on newline",
            ));
        }
        if args.no_jetstream {
            return Err(usage("--atomic: atomic batches are JetStream publishes"));
        }
    }
    Ok(())
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

/// One message `pub` sends.
struct Outgoing {
    subject: String,
    body: bytes::Bytes,
    headers: Option<HeaderMap>,
}

/// The messages of one body: `--count` of them, templates replaced.
fn outgoing(
    args: &PubArgs,
    body: &str,
    schedules: &Option<Vec<(&'static str, String)>>,
    now: SystemTime,
) -> Result<Vec<Outgoing>, CliError> {
    let templates = switch(args.templates, args.no_templates).unwrap_or(true);
    (1..=args.count.max(1))
        .map(|count| {
            let render = |text: &str| {
                if templates {
                    render(text, count, now)
                } else {
                    text.to_string()
                }
            };
            let mut headers = headers_for(&args.headers, templates.then_some(count), now)?;
            if let Some(schedules) = schedules {
                let map = headers.get_or_insert_with(HeaderMap::new);
                for (name, value) in schedules {
                    map.insert(*name, value.as_str());
                }
            }
            Ok(Outgoing {
                subject: render(&args.subject),
                body: bytes::Bytes::from(render(body)),
                headers,
            })
        })
        .collect()
}

pub async fn publish(api: &Api, args: PubArgs) -> Result<(), CliError> {
    check_publish(&args)?;
    let now = SystemTime::now();
    let schedules = schedule_headers(&args, now)?;
    let sleep = match &args.sleep {
        Some(text) => Some(units::parse_duration(text).map_err(CliError::unit("--sleep"))?),
        None => None,
    };
    let bodies = bodies(args.body.clone(), args.send_on)?;
    if args.atomic {
        let mut messages = Vec::new();
        for body in bodies.iter().filter(|body| !body.is_empty()) {
            messages.extend(outgoing(&args, body, &None, now)?);
        }
        return publish_atomic(api, &args, messages).await;
    }
    let first_subject = outgoing(&args, "", &None, now)?
        .first()
        .map(|message| message.subject.clone())
        .unwrap_or_default();
    let jetstream = args.jetstream
        || schedules.is_some()
        || (!args.no_jetstream
            && args.reply.is_none()
            && captured_by_stream(api, &first_subject).await);
    for body in &bodies {
        let messages = outgoing(&args, body, &schedules, now)?;
        if jetstream {
            publish_jetstream(api, &args, messages, sleep).await?;
        } else {
            publish_core(api, &args, messages, sleep).await?;
        }
    }
    Ok(())
}

async fn publish_core(
    api: &Api,
    args: &PubArgs,
    messages: Vec<Outgoing>,
    sleep: Option<Duration>,
) -> Result<(), CliError> {
    let action = format!("pub {}", args.subject);
    let total = messages.len();
    let bar = progress::messages(total as u64, "Publishing");
    for (index, message) in messages.into_iter().enumerate() {
        let client = &api.client;
        let sent = match (&args.reply, message.headers) {
            (Some(reply), Some(headers)) => {
                client
                    .publish_with_reply_and_headers(
                        message.subject,
                        reply.clone(),
                        headers,
                        message.body,
                    )
                    .await
            }
            (Some(reply), None) => {
                client
                    .publish_with_reply(message.subject, reply.clone(), message.body)
                    .await
            }
            (None, Some(headers)) => {
                client
                    .publish_with_headers(message.subject, headers, message.body)
                    .await
            }
            (None, None) => client.publish(message.subject, message.body).await,
        };
        sent.map_err(CliError::client(action.clone()))?;
        bar.inc(1);
        if let Some(sleep) = sleep.filter(|_| index + 1 < total) {
            api.client
                .flush()
                .await
                .map_err(CliError::client(action.clone()))?;
            tokio::time::sleep(sleep).await;
        }
    }
    bar.finish_and_clear();
    api.client
        .flush()
        .await
        .map_err(CliError::client(action.clone()))?;
    if !args.quiet {
        eprintln!("Published {total} message(s) to {:?}", args.subject);
    }
    Ok(())
}

async fn publish_jetstream(
    api: &Api,
    args: &PubArgs,
    messages: Vec<Outgoing>,
    sleep: Option<Duration>,
) -> Result<(), CliError> {
    let context = api.jetstream();
    let total = messages.len();
    // With --sleep each publish waits for its PubAck before the next.
    let window = if sleep.is_some() {
        1
    } else {
        PUBLISH_IN_FLIGHT_MAX
    };
    let mut in_flight = VecDeque::with_capacity(window);
    let mut last_ack = None;
    let mut confirm = |count: usize, ack: Result<jetstream::publish::PublishAck, _>| {
        let ack: jetstream::publish::PublishAck = ack.map_err(|error| CliError::Client {
            action: format!("pub {} (message {count})", args.subject),
            source: Box::new(error),
        })?;
        last_ack = Some(ack);
        Ok::<(), CliError>(())
    };
    let bar = progress::messages(total as u64, "Publishing");
    for (index, message) in messages.into_iter().enumerate() {
        let count = index + 1;
        if in_flight.len() == window {
            let (sent, future): (usize, jetstream::context::PublishAckFuture) =
                in_flight.pop_front().expect("a full window");
            confirm(sent, future.await)?;
            bar.inc(1);
            if let Some(sleep) = sleep {
                tokio::time::sleep(sleep).await;
            }
        }
        let future = match message.headers {
            Some(headers) => {
                context
                    .publish_with_headers(message.subject, headers, message.body)
                    .await
            }
            None => context.publish(message.subject, message.body).await,
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
            if total == 1 {
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
                    "Published {total} messages to {:?}, each acknowledged; last stored in Stream: {} Sequence: {}",
                    args.subject, ack.stream, ack.sequence
                );
            }
        }
    }
    Ok(())
}

/// `pub --atomic`: the messages as one atomic batch (ADR-50, as orbit.go's
/// batch publisher sends it): every message carries `Nats-Batch-Id` and
/// `Nats-Batch-Sequence`; the first is a request (the server refuses a
/// batch there, e.g. on a stream without allow_atomic), the last carries
/// `Nats-Batch-Commit: 1` and its answer is the batch's PubAck.
async fn publish_atomic(
    api: &Api,
    args: &PubArgs,
    messages: Vec<Outgoing>,
) -> Result<(), CliError> {
    let action = format!("pub --atomic {}", args.subject);
    if messages.is_empty() {
        return Err(CliError::Failed {
            action,
            reason: "no messages for the batch (stdin had no lines)".into(),
        });
    }
    if messages.len() > ATOMIC_BATCH_MAX {
        return Err(usage(format!(
            "--atomic: at most {ATOMIC_BATCH_MAX} messages in a batch"
        )));
    }
    let batch = unique_id();
    let total = messages.len();
    let refused = |answer: &Value| -> Option<CliError> {
        let error = answer.get("error")?;
        Some(CliError::Api {
            action: action.clone(),
            code: error["code"].as_i64().unwrap_or(0),
            err_code: error["err_code"].as_i64().unwrap_or(0),
            description: error["description"].as_str().unwrap_or("").to_string(),
        })
    };
    let mut commit = None;
    for (index, message) in messages.into_iter().enumerate() {
        let sequence = index + 1;
        let mut headers = message.headers.unwrap_or_default();
        headers.insert("Nats-Batch-Id", batch.as_str());
        headers.insert("Nats-Batch-Sequence", sequence.to_string().as_str());
        let last = sequence == total;
        if last {
            headers.insert("Nats-Batch-Commit", "1");
        }
        if sequence == 1 || last {
            let request = async_nats::Request::new()
                .headers(headers)
                .payload(message.body)
                .timeout(Some(api.timeout));
            let reply = api
                .client
                .send_request(message.subject.clone(), request)
                .await
                .map_err(|error| {
                    crate::api::request_error(&action, &message.subject, api.timeout, error)
                })?;
            let answer: Value = if reply.payload.is_empty() {
                Value::Null
            } else {
                serde_json::from_slice(&reply.payload).map_err(|error| CliError::BadAnswer {
                    action: action.clone(),
                    detail: error.to_string(),
                })?
            };
            if let Some(error) = refused(&answer) {
                return Err(error);
            }
            if last {
                commit = Some(answer);
            }
        } else {
            api.client
                .publish_with_headers(message.subject, headers, message.body)
                .await
                .map_err(CliError::client(action.clone()))?;
        }
    }
    let answer = commit.expect("the last message commits");
    if answer["batch"].as_str() != Some(batch.as_str())
        || answer["count"].as_u64() != Some(total as u64)
    {
        return Err(CliError::BadAnswer {
            action,
            detail: format!("not the batch's PubAck: {answer}"),
        });
    }
    if !args.quiet {
        eprintln!(
            "Wrote batch ID: {batch} Messages: {total} Sequence: {}",
            answer["seq"]
        );
    }
    Ok(())
}

/// A JetStream message's place, from its ack reply subject
/// (`$JS.ACK.<stream>.<consumer>.<delivered>.<stream seq>.<consumer
/// seq>.<time ns>.<pending>`, or the v2 form with a domain and an account
/// hash first).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    pub stream: String,
    pub stream_sequence: u64,
    pub pending: u64,
    pub published_ns: u64,
}

pub fn parse_ack_subject(reply: &str) -> Option<Placement> {
    let tokens: Vec<&str> = reply.split('.').collect();
    if tokens.len() < 9 || tokens[0] != "$JS" || tokens[1] != "ACK" {
        return None;
    }
    let rest = if tokens.len() == 9 {
        &tokens[2..]
    } else {
        &tokens[4..]
    };
    if rest.len() < 7 {
        return None;
    }
    Some(Placement {
        stream: rest[0].to_string(),
        stream_sequence: rest[3].parse().ok()?,
        published_ns: rest[5].parse().ok()?,
        pending: rest[6].parse().ok()?,
    })
}

/// One message `sub` got, whatever brought it.
#[derive(Debug, Clone)]
pub struct Received {
    pub subject: String,
    pub reply: Option<String>,
    pub headers: Option<HeaderMap>,
    pub payload: bytes::Bytes,
    /// The subscription's subject (pattern) it came through.
    pub subscription: String,
    /// Its stream place, when it came from a stream.
    pub placement: Option<Placement>,
}

impl Received {
    fn of(message: async_nats::Message, subscription: &str) -> Received {
        let placement = message.reply.as_deref().and_then(parse_ack_subject);
        Received {
            subject: message.subject.to_string(),
            reply: message.reply.map(|reply| reply.to_string()),
            headers: message.headers,
            payload: message.payload,
            subscription: subscription.to_string(),
            placement,
        }
    }
}

type Source = Pin<Box<dyn Stream<Item = Result<Received, CliError>> + Send>>;

/// What `sub` checks before connecting.
pub fn check_subscribe(args: &SubArgs) -> Result<(), CliError> {
    if args.graph {
        return Err(usage(
            "sub --graph: tern draws no graphs; --report-subjects counts messages per subject",
        ));
    }
    if let Some(text) = &args.wait {
        units::parse_duration(text).map_err(CliError::unit("--wait"))?;
    }
    if let Some(text) = &args.since {
        units::parse_duration(text).map_err(CliError::unit("--since"))?;
    }
    let jetstream = jetstream_wanted(args);
    if args.durable.is_some() && !args.subjects.is_empty() {
        return Err(usage(
            "sub --durable: the consumer's filter is the subject; give none",
        ));
    }
    if args.durable.is_some() && args.stream.is_none() {
        return Err(usage("sub --durable: give --stream too"));
    }
    if args.subjects.is_empty() && args.stream.is_none() && !args.inbox {
        return Err(usage("sub: give a subject (or --stream, or --inbox)"));
    }
    if args.subjects.len() > 1 && jetstream {
        return Err(usage("sub: a stream is read through one subject at most"));
    }
    if args.terminate_at_end && !jetstream {
        return Err(usage("sub -T: only for JetStream (--stream and the like)"));
    }
    if args.inbox && jetstream {
        return Err(usage("sub --inbox: not with JetStream"));
    }
    if args.queue.is_some() && jetstream {
        return Err(usage("sub --queue: not with JetStream"));
    }
    if args.match_replies && jetstream {
        return Err(usage("sub --match-replies: not with JetStream"));
    }
    if args.direct && args.durable.is_some() {
        return Err(usage("sub --direct: not with --durable"));
    }
    if args.report_top == 0 && (args.report_subjects || args.report_subscriptions) {
        return Err(usage("--report-top: at least 1"));
    }
    Ok(())
}

fn jetstream_wanted(args: &SubArgs) -> bool {
    args.start_sequence.is_some()
        || args.durable.is_some()
        || args.all
        || args.new
        || args.last
        || args.since.is_some()
        || args.last_per_subject
        || args.stream.is_some()
        || args.direct
}

pub async fn subscribe(api: &Api, mut args: SubArgs) -> Result<(), CliError> {
    check_subscribe(&args)?;
    if args.inbox && args.subjects.is_empty() {
        args.subjects.push(api.client.new_inbox());
    }
    let (source, described) = if jetstream_wanted(&args) {
        stream_source(api, &args).await?
    } else {
        core_source(api, &args).await?
    };
    let replies = if args.match_replies {
        let pattern = "_INBOX.>".to_string();
        let subscriber = api
            .client
            .subscribe(pattern.clone())
            .await
            .map_err(CliError::client("sub --match-replies"))?;
        Some(subscriber)
    } else {
        None
    };
    api.client.flush().await.map_err(CliError::client("sub"))?;
    if (!args.raw && args.dump.is_none()) || args.inbox {
        eprintln!("{described}");
    }
    consume(api, &args, source, replies).await
}

async fn core_source(api: &Api, args: &SubArgs) -> Result<(Source, String), CliError> {
    let mut streams: Vec<Source> = Vec::new();
    for subject in &args.subjects {
        let action = format!("sub {subject}");
        let subscriber = match &args.queue {
            Some(queue) => {
                api.client
                    .queue_subscribe(subject.clone(), queue.clone())
                    .await
            }
            None => api.client.subscribe(subject.clone()).await,
        }
        .map_err(CliError::client(action))?;
        let pattern = subject.clone();
        streams.push(Box::pin(
            subscriber.map(move |message| Ok(Received::of(message, &pattern))),
        ));
    }
    let ignored = if args.ignore_subject.is_empty() {
        String::new()
    } else {
        format!(" (ignoring {})", args.ignore_subject.join(", "))
    };
    Ok((
        Box::pin(futures::stream::select_all(streams)),
        format!("Subscribing on {}{ignored}", args.subjects.join(", ")),
    ))
}

/// The deliver policy of the JetStream flags.
fn deliver_policy(args: &SubArgs, now: SystemTime) -> Result<consumer::DeliverPolicy, CliError> {
    Ok(if args.new {
        consumer::DeliverPolicy::New
    } else if args.last {
        consumer::DeliverPolicy::Last
    } else if args.last_per_subject {
        consumer::DeliverPolicy::LastPerSubject
    } else if let Some(start_sequence) = args.start_sequence {
        consumer::DeliverPolicy::ByStartSequence { start_sequence }
    } else if let Some(text) = &args.since {
        let back = units::parse_duration(text).map_err(CliError::unit("--since"))?;
        let start = now.checked_sub(back).unwrap_or(UNIX_EPOCH);
        let nanos = start
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos();
        let start_time = time::OffsetDateTime::from_unix_timestamp_nanos(nanos as i128)
            .map_err(|error| usage(format!("--since {text}: {error}")))?;
        consumer::DeliverPolicy::ByStartTime { start_time }
    } else {
        consumer::DeliverPolicy::All
    })
}

/// The stream `sub` reads: `--stream`, else the one capturing the subject.
async fn stream_name(api: &Api, args: &SubArgs) -> Result<String, CliError> {
    if let Some(stream) = &args.stream {
        return Ok(stream.clone());
    }
    let subject = args.subjects.first().expect("checked: a subject");
    let answer = api
        .request(
            &format!("sub {subject}: looking for its stream"),
            "STREAM.NAMES",
            &json!({ "subject": subject }),
        )
        .await?;
    match answer["streams"].as_array().and_then(|names| names.first()) {
        Some(name) => Ok(name.as_str().unwrap_or_default().to_string()),
        None => Err(CliError::Failed {
            action: format!("sub {subject}"),
            reason: "no stream captures this subject".into(),
        }),
    }
}

async fn stream_source(api: &Api, args: &SubArgs) -> Result<(Source, String), CliError> {
    let stream = stream_name(api, args).await?;
    let action = format!("sub --stream {stream}");
    let info = crate::stream::info(api, &stream).await?;
    let filter = args.subjects.first().cloned().unwrap_or_default();
    let retention = info["config"]["retention"].as_str().unwrap_or("limits");
    // As the nats CLI: a work queue or interest stream is read by direct
    // gets, so reading it takes nothing away from its consumers.
    let direct =
        args.durable.is_none() && (args.direct || matches!(retention, "workqueue" | "interest"));
    if direct {
        if info["config"]["allow_direct"] != true {
            return Err(CliError::Failed {
                action,
                reason: "direct gets need allow_direct on the stream".into(),
            });
        }
        let start = match args.start_sequence {
            Some(sequence) => sequence,
            None if args.new || args.last => {
                info["state"]["last_seq"].as_u64().unwrap_or(0) + u64::from(args.new)
            }
            None => 1,
        };
        return Ok((
            direct_source(api, stream.clone(), filter, start.max(1)),
            format!("Subscribing to stream {stream} (direct gets)"),
        ));
    }
    let context = api.jetstream();
    let handle = context
        .get_stream(&stream)
        .await
        .map_err(CliError::client(action.clone()))?;
    if let Some(durable) = &args.durable {
        return durable_source(api, &handle, &stream, durable, args).await;
    }
    let ordered = handle
        .create_consumer(consumer::pull::OrderedConfig {
            filter_subject: filter.clone(),
            deliver_policy: deliver_policy(args, SystemTime::now())?,
            headers_only: args.headers_only || args.subjects_only,
            ..Default::default()
        })
        .await
        .map_err(CliError::client(action.clone()))?;
    let messages = ordered
        .messages()
        .await
        .map_err(CliError::client(action.clone()))?;
    Ok((
        Box::pin(messages.map(move |message| match message {
            Ok(message) => Ok(Received::of(message.message, &filter)),
            Err(error) => Err(CliError::client(action.clone())(error)),
        })),
        format!("Subscribing to stream {stream}"),
    ))
}

async fn durable_source(
    api: &Api,
    handle: &jetstream::stream::Stream,
    stream: &str,
    durable: &str,
    args: &SubArgs,
) -> Result<(Source, String), CliError> {
    let action = format!("sub --stream {stream} --durable {durable}");
    let existing = crate::consumer::info(api, stream, durable).await;
    let config = match existing {
        Ok(info) => info["config"].clone(),
        Err(CliError::Api { code: 404, .. }) => {
            // As the nats CLI: a consumer of that name, acks none.
            handle
                .create_consumer(consumer::pull::Config {
                    name: Some(durable.to_string()),
                    deliver_policy: deliver_policy(args, SystemTime::now())?,
                    ack_policy: consumer::AckPolicy::None,
                    headers_only: args.headers_only || args.subjects_only,
                    ..Default::default()
                })
                .await
                .map_err(CliError::client(action.clone()))?;
            json!({"ack_policy": "none"})
        }
        Err(error) => return Err(error),
    };
    let filter = config["filter_subject"].as_str().unwrap_or(">").to_string();
    if let Some(deliver) = config["deliver_subject"].as_str() {
        let subscriber = match config["deliver_group"].as_str() {
            Some(group) => {
                api.client
                    .queue_subscribe(deliver.to_string(), group.to_string())
                    .await
            }
            None => api.client.subscribe(deliver.to_string()).await,
        }
        .map_err(CliError::client(action.clone()))?;
        return Ok((
            Box::pin(subscriber.map(move |message| Ok(Received::of(message, &filter)))),
            format!("Subscribing to JetStream Stream {stream:?} using existing push consumer {durable:?}"),
        ));
    }
    let pull: consumer::PullConsumer =
        handle
            .get_consumer(durable)
            .await
            .map_err(|error| CliError::Failed {
                action: action.clone(),
                reason: error.to_string(),
            })?;
    let messages = pull
        .messages()
        .await
        .map_err(CliError::client(action.clone()))?;
    Ok((
        Box::pin(messages.map(move |message| match message {
            Ok(message) => Ok(Received::of(message.message, &filter)),
            Err(error) => Err(CliError::client(action.clone())(error)),
        })),
        format!("Subscribing to JetStream Stream {stream:?} using pull consumer {durable:?}"),
    ))
}

/// `sub --direct`: the stream's messages by direct gets, one after the
/// other from `start`; at the end of the stream it asks again every
/// [`DIRECT_GET_IDLE`] for what comes next.
fn direct_source(api: &Api, stream: String, filter: String, start: u64) -> Source {
    let client = api.client.clone();
    let subject = api.subject(&format!("DIRECT.GET.{stream}"));
    let timeout = api.timeout;
    Box::pin(futures::stream::unfold(
        (client, start),
        move |(client, next)| {
            let (subject, filter, stream) = (subject.clone(), filter.clone(), stream.clone());
            async move {
                loop {
                    let mut request = json!({ "seq": next });
                    if !filter.is_empty() {
                        request["next_by_subj"] = json!(filter);
                    }
                    let request = async_nats::Request::new()
                        .payload(request.to_string().into())
                        .timeout(Some(timeout));
                    let reply = match client.send_request(subject.clone(), request).await {
                        Ok(reply) => reply,
                        Err(error) => {
                            let error =
                                crate::api::request_error("sub --direct", &subject, timeout, error);
                            return Some((Err(error), (client, next)));
                        }
                    };
                    if reply.status.is_some_and(|status| status.as_u16() == 404) {
                        tokio::time::sleep(DIRECT_GET_IDLE).await;
                        continue;
                    }
                    let header = |name: &str| {
                        reply
                            .headers
                            .as_ref()
                            .and_then(|headers| headers.get(name))
                            .map(|value| value.as_str().to_string())
                    };
                    let Some(sequence) = header("Nats-Sequence").and_then(|text| text.parse().ok())
                    else {
                        let error = CliError::BadAnswer {
                            action: "sub --direct".into(),
                            detail: format!(
                                "a direct get answer without Nats-Sequence ({:?})",
                                reply.status
                            ),
                        };
                        return Some((Err(error), (client, next)));
                    };
                    let published_ns = header("Nats-Time-Stamp")
                        .and_then(|text| parse_rfc3339(&text))
                        .and_then(|time| time.duration_since(UNIX_EPOCH).ok())
                        .map_or(0, |since| since.as_nanos() as u64);
                    let last =
                        header("Nats-Last-Sequence").and_then(|text| text.parse::<u64>().ok());
                    let received = Received {
                        subject: header("Nats-Subject").unwrap_or_default(),
                        reply: None,
                        headers: reply.headers.clone(),
                        payload: reply.payload.clone(),
                        subscription: filter.clone(),
                        placement: Some(Placement {
                            stream: stream.clone(),
                            stream_sequence: sequence,
                            pending: last.map_or(0, |last| last.saturating_sub(sequence)),
                            published_ns,
                        }),
                    };
                    return Some((Ok(received), (client, sequence + 1)));
                }
            }
        },
    ))
}

/// Counts per subject (or subscription) of `--report-subjects`.
#[derive(Debug, Default)]
pub struct Report {
    rows: HashMap<String, (u64, u64)>,
    other: (u64, u64),
}

impl Report {
    pub fn add(&mut self, key: &str, bytes: usize) {
        if let Some(row) = self.rows.get_mut(key) {
            row.0 += 1;
            row.1 += bytes as u64;
        } else if self.rows.len() < REPORTED_SUBJECTS_MAX {
            self.rows.insert(key.to_string(), (1, bytes as u64));
        } else {
            self.other.0 += 1;
            self.other.1 += bytes as u64;
        }
    }

    /// The table: the `top` busiest (most messages, then by name), and
    /// the totals.
    pub fn table(&self, top: usize) -> String {
        let mut rows: Vec<(&String, &(u64, u64))> = self.rows.iter().collect();
        rows.sort_by(|a, b| b.1 .0.cmp(&a.1 .0).then(a.0.cmp(b.0)));
        let (count, bytes) = self
            .rows
            .values()
            .fold(self.other, |total, row| (total.0 + row.0, total.1 + row.1));
        let mut lines: Vec<Vec<String>> = rows
            .into_iter()
            .take(top)
            .map(|(subject, (count, bytes))| {
                vec![
                    subject.clone(),
                    count.to_string(),
                    units::format_bytes(*bytes),
                ]
            })
            .collect();
        lines.push(vec![
            "Totals".into(),
            count.to_string(),
            units::format_bytes(bytes),
        ]);
        let title = if top == 1 {
            "Top Subject Report".to_string()
        } else {
            format!("Top {top} Active Subjects Report")
        };
        format!(
            "{title}\n\n{}",
            crate::output::columns(&["Subject", "Message Count", "Bytes"], &lines)
        )
    }
}

/// How `sub` shows each message.
struct Printer {
    started: Instant,
}

impl Printer {
    fn show(
        &self,
        out: &mut impl Write,
        args: &SubArgs,
        number: u64,
        message: &Received,
        reply: Option<&Received>,
    ) -> Result<(), CliError> {
        if let Some(directory) = &args.dump {
            return dump(out, directory, number, message, reply, args);
        }
        let body = |message: &Received| -> Result<Vec<u8>, CliError> {
            match &args.translate {
                Some(command) => {
                    crate::translate::translate(command, &message.payload, &message.subject, "")
                }
                None => Ok(message.payload.to_vec()),
            }
        };
        if args.raw {
            write_body(out, &body(message)?);
            if let Some(reply) = reply {
                write_body(out, &reply.payload);
            }
            return Ok(());
        }
        let stamp = if args.timestamp {
            format!(" @ {}", rfc3339(SystemTime::now()))
        } else if args.delta_time {
            format!(" @ {}", go_duration(self.started.elapsed()))
        } else {
            String::new()
        };
        match &message.placement {
            Some(placement) if message.reply.is_none() => {
                let _ = writeln!(
                    out,
                    "[#{number}]{stamp} Received JetStream message (direct): stream: {} seq {} / subject: {}",
                    placement.stream, placement.stream_sequence, message.subject
                );
            }
            _ => match &message.reply {
                Some(reply) if message.placement.is_none() => {
                    let _ = writeln!(
                        out,
                        "[#{number}]{stamp} Received on {:?} with reply {reply:?}",
                        message.subject
                    );
                }
                _ => {
                    let _ = writeln!(out, "[#{number}]{stamp} Received on {:?}", message.subject);
                }
            },
        }
        if !args.subjects_only {
            write_headers_and_body(out, message, &body(message)?, args.headers_only);
        }
        if let Some(reply) = reply {
            let _ = writeln!(
                out,
                "[#{number}]{stamp} Matched reply on {:?}",
                reply.subject
            );
            write_headers_and_body(out, reply, &reply.payload, args.headers_only);
        }
        let _ = out.flush();
        Ok(())
    }
}

fn write_body(out: &mut impl Write, body: &[u8]) {
    let _ = out.write_all(body);
    if !body.ends_with(b"\n") {
        let _ = out.write_all(b"\n");
    }
    let _ = out.flush();
}

fn write_headers_and_body(
    out: &mut impl Write,
    message: &Received,
    body: &[u8],
    headers_only: bool,
) {
    if let Some(headers) = &message.headers {
        for (name, values) in headers.iter() {
            for value in values {
                let _ = writeln!(out, "{name}: {value}");
            }
        }
        let _ = writeln!(out);
    }
    if !headers_only {
        write_body(out, body);
        let _ = writeln!(out);
    }
}

/// A message as the nats CLI dumps it: Go's `nats.Msg` in JSON (the body
/// base64).
pub fn dump_json(message: &Received, translated: Option<&[u8]>) -> Value {
    use base64::Engine;
    let headers: BTreeMap<String, Vec<String>> = message
        .headers
        .iter()
        .flat_map(|headers| headers.iter())
        .map(|(name, values)| {
            (
                name.to_string(),
                values.iter().map(|value| value.to_string()).collect(),
            )
        })
        .collect();
    let data = translated.unwrap_or(&message.payload);
    json!({
        "Subject": message.subject,
        "Reply": message.reply.clone().unwrap_or_default(),
        "Header": if headers.is_empty() { Value::Null } else { json!(headers) },
        "Data": base64::engine::general_purpose::STANDARD.encode(data),
        "Sub": Value::Null,
    })
}

fn dump(
    out: &mut impl Write,
    directory: &std::path::Path,
    number: u64,
    message: &Received,
    reply: Option<&Received>,
    args: &SubArgs,
) -> Result<(), CliError> {
    let translated = match &args.translate {
        Some(command) => Some(crate::translate::translate(
            command,
            &message.payload,
            &message.subject,
            "",
        )?),
        None => None,
    };
    let sequence = message
        .placement
        .as_ref()
        .map_or(number, |placement| placement.stream_sequence);
    let mut documents = vec![(
        format!("{sequence}.json"),
        dump_json(message, translated.as_deref()),
    )];
    if let Some(reply) = reply {
        documents.push((format!("{sequence}_reply.json"), dump_json(reply, None)));
    }
    for (name, document) in documents {
        if directory.as_os_str() == "-" {
            let _ = write!(out, "{document}\0");
            let _ = out.flush();
        } else {
            crate::stream::write_private(&directory.join(name), &document.to_string())?;
        }
    }
    Ok(())
}

async fn consume(
    api: &Api,
    args: &SubArgs,
    mut source: Source,
    mut replies: Option<async_nats::Subscriber>,
) -> Result<(), CliError> {
    let wait = match &args.wait {
        Some(text) => Some(units::parse_duration(text).map_err(CliError::unit("--wait"))?),
        None => None,
    };
    let acks = switch(args.ack, args.no_ack).unwrap_or(false);
    if let Some(directory) = args.dump.as_ref().filter(|path| path.as_os_str() != "-") {
        std::fs::create_dir_all(directory)
            .map_err(CliError::io(format!("creating {}", directory.display())))?;
    }
    let reporting = args.report_subjects || args.report_subscriptions;
    let mut report = Report::default();
    let printer = Printer {
        started: Instant::now(),
    };
    let mut stdout = std::io::stdout().lock();
    let mut received: u64 = 0;
    let mut waiting_for_replies: HashMap<String, Received> = HashMap::new();
    let ended = loop {
        if args.count.is_some_and(|count| received >= count) && waiting_for_replies.is_empty() {
            break None;
        }
        let next = tokio::select! {
            message = source.next() => Some(message),
            reply = async {
                match replies.as_mut() {
                    Some(replies) => replies.next().await,
                    None => std::future::pending().await,
                }
            } => {
                if let Some(reply) = reply {
                    let reply = Received::of(reply, "_INBOX.>");
                    if let Some(request) = waiting_for_replies.remove(&reply.subject) {
                        printer.show(&mut stdout, args, received, &request, Some(&reply))?;
                    }
                }
                continue;
            }
            () = idle(wait) => None,
            _ = tokio::signal::ctrl_c() => break Some("interrupted"),
        };
        let Some(next) = next else {
            break None;
        };
        let message = match next {
            Some(Ok(message)) => message,
            Some(Err(error)) => return Err(error),
            None => {
                return Err(CliError::Failed {
                    action: "sub".into(),
                    reason: "the subscription ended".into(),
                })
            }
        };
        if args
            .ignore_subject
            .iter()
            .any(|pattern| crate::subject::matches(pattern, &message.subject))
        {
            continue;
        }
        // A push consumer's flow control and idle heartbeats.
        if message.payload.is_empty()
            && message
                .headers
                .as_ref()
                .and_then(|headers| headers.get("Status"))
                .is_some()
        {
            if let Some(reply) = &message.reply {
                api.client
                    .publish(reply.clone(), bytes::Bytes::new())
                    .await
                    .map_err(CliError::client("sub: answering flow control"))?;
            }
            continue;
        }
        received += 1;
        if acks && message.placement.is_some() {
            if let Some(reply) = &message.reply {
                api.client
                    .publish(reply.clone(), bytes::Bytes::new())
                    .await
                    .map_err(CliError::client("sub: acknowledging"))?;
            }
        }
        if reporting {
            let key = if args.report_subscriptions {
                &message.subscription
            } else {
                &message.subject
            };
            report.add(key, message.payload.len());
        } else if args.match_replies && message.reply.is_some() && message.placement.is_none() {
            waiting_for_replies.insert(message.reply.clone().unwrap_or_default(), message.clone());
        } else {
            printer.show(&mut stdout, args, received, &message, None)?;
        }
        let at_end = message
            .placement
            .as_ref()
            .is_some_and(|placement| placement.pending == 0);
        if args.terminate_at_end && at_end {
            break None;
        }
    };
    if reporting {
        let _ = writeln!(stdout, "{}", report.table(args.report_top));
    }
    let _ = stdout.flush();
    if let Some(reason) = ended {
        eprintln!("sub: {reason} after {received} messages");
    }
    Ok(())
}

/// Resolves after `wait` (never when there is none): `sub --wait`'s
/// idle bound, restarted by each message.
async fn idle(wait: Option<Duration>) {
    match wait {
        Some(wait) => tokio::time::sleep(wait).await,
        None => std::future::pending().await,
    }
}

pub async fn request(api: &Api, args: ReqArgs) -> Result<(), CliError> {
    let reply_timeout =
        units::parse_duration(&args.reply_timeout).map_err(CliError::unit("--reply-timeout"))?;
    let templates = switch(args.templates, args.no_templates).unwrap_or(true);
    let replies_wanted = if args.wait_for_empty {
        REPLIES_MAX
    } else {
        args.replies
    };
    let requests = if args.count == 0 {
        REQUESTS_MAX
    } else {
        args.count
    };
    let now = SystemTime::now();
    let mut stdout = std::io::stdout().lock();
    let mut shown: u64 = 0;
    for body in bodies(args.body.clone(), args.send_on)? {
        for count in 1..=requests {
            let render = |text: &str| {
                if templates {
                    render(text, count, now)
                } else {
                    text.to_string()
                }
            };
            let subject = render(&args.subject);
            let headers = headers_for(&args.headers, templates.then_some(count), now)?;
            let action = format!("req {subject}");
            let inbox = api.client.new_inbox();
            let mut replies = api
                .client
                .subscribe(inbox.clone())
                .await
                .map_err(CliError::client(action.clone()))?;
            let payload = bytes::Bytes::from(render(&body));
            match headers {
                Some(headers) => {
                    api.client
                        .publish_with_reply_and_headers(subject.clone(), inbox, headers, payload)
                        .await
                }
                None => {
                    api.client
                        .publish_with_reply(subject.clone(), inbox, payload)
                        .await
                }
            }
            .map_err(CliError::client(action.clone()))?;
            let started = Instant::now();
            let mut got: u64 = 0;
            let mut wait = api.timeout;
            loop {
                let reply = match tokio::time::timeout(wait, replies.next()).await {
                    Ok(Some(reply)) => reply,
                    Ok(None) | Err(_) if got > 0 => break,
                    Ok(None) | Err(_) => {
                        return Err(CliError::Timeout {
                            action,
                            timeout: api.timeout,
                        })
                    }
                };
                if reply.status.is_some_and(|status| status.as_u16() == 503) {
                    return Err(CliError::NoResponders {
                        action,
                        subject: subject.clone(),
                        hint: "",
                    });
                }
                got += 1;
                shown += 1;
                let reply = Received::of(reply, &subject);
                let body = match &args.translate {
                    Some(command) => {
                        crate::translate::translate(command, &reply.payload, &reply.subject, "")?
                    }
                    None => reply.payload.to_vec(),
                };
                if args.raw {
                    write_body(&mut stdout, &body);
                } else {
                    let _ = writeln!(stdout, "[#{shown}] Received on {:?}", reply.subject);
                    write_headers_and_body(&mut stdout, &reply, &body, false);
                }
                let empty = reply.payload.is_empty();
                if replies_wanted > 0 && (got >= replies_wanted || empty) {
                    break;
                }
                let elapsed = started.elapsed();
                wait = if replies_wanted == 0 {
                    match api.timeout.checked_sub(elapsed) {
                        Some(left) if !left.is_zero() => left,
                        _ => break,
                    }
                } else {
                    elapsed / got as u32 + reply_timeout
                };
            }
        }
    }
    let _ = stdout.flush();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Harness {
        #[command(subcommand)]
        command: Command,
    }

    #[derive(Debug, clap::Subcommand)]
    enum Command {
        Pub(PubArgs),
        Sub(SubArgs),
        Req(ReqArgs),
    }

    fn parse(arguments: &[&str]) -> Command {
        Harness::try_parse_from(std::iter::once("tern").chain(arguments.iter().copied()))
            .unwrap_or_else(|error| panic!("{arguments:?}: {error}"))
            .command
    }

    fn pub_args(arguments: &[&str]) -> PubArgs {
        match parse(arguments) {
            Command::Pub(args) => args,
            other => panic!("not pub: {other:?}"),
        }
    }

    #[test]
    fn templates() {
        let now = UNIX_EPOCH + Duration::new(5, 7);
        assert_eq!(render("order {{Count}}", 17, now), "order 17");
        assert_eq!(render("{{ Count }}/{{Cnt}}", 2, now), "2/2");
        assert_eq!(render("{{Unix}} {{UnixNano}}", 1, now), "5 5000000007");
        assert_eq!(
            render("at {{TimeStamp}}", 1, now),
            "at 1970-01-01T00:00:05Z"
        );
        assert_eq!(render("{{Time}}", 1, now), "12:00AM");
        assert_eq!(render("plain", 3, now), "plain");
        assert_eq!(render("{{Unknown}}", 3, now), "{{Unknown}}");
        let ids = render("{{ID}} {{ID}}", 1, now);
        let (first, second) = ids.split_once(' ').unwrap();
        assert_eq!(first.len(), 22);
        assert_ne!(first, second);
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
        let map = headers_for(&["Nats-Msg-Id:order-{{Count}}".into()], Some(7), UNIX_EPOCH)
            .unwrap()
            .unwrap();
        assert_eq!(map.get("Nats-Msg-Id").map(|v| v.as_str()), Some("order-7"));
    }

    #[test]
    fn go_durations() {
        assert_eq!(go_duration(Duration::from_secs(3_600)), "1h0m0s");
        assert_eq!(go_duration(Duration::from_secs(90)), "1m30s");
        assert_eq!(go_duration(Duration::from_secs(30)), "30s");
        assert_eq!(go_duration(Duration::from_millis(1_500)), "1.5s");
        assert_eq!(go_duration(Duration::from_millis(500)), "500ms");
        assert_eq!(go_duration(Duration::ZERO), "0s");
    }

    #[test]
    fn schedule_headers_as_the_nats_cli_sets_them() {
        let now = UNIX_EPOCH + Duration::from_secs(1_796_029_674);
        let headers = |line: &[&str]| schedule_headers(&pub_args(line), now);
        assert_eq!(headers(&["pub", "s", "x"]).unwrap(), None);
        assert_eq!(
            headers(&[
                "pub",
                "s",
                "x",
                "--schedule-dest",
                "out",
                "--schedule-every",
                "1h",
                "--schedule-ttl",
                "90s"
            ])
            .unwrap()
            .unwrap(),
            [
                ("Nats-Schedule-Target", "out".to_string()),
                ("Nats-Schedule", "@every 1h0m0s".to_string()),
                ("Nats-Schedule-TTL", "1m30s".to_string()),
            ]
        );
        assert_eq!(
            headers(&[
                "pub",
                "s",
                "x",
                "--schedule-dest",
                "out",
                "--schedule-after",
                "1m"
            ])
            .unwrap()
            .unwrap()[1],
            ("Nats-Schedule", "@at 2026-11-30T09:08:54Z".to_string())
        );
        assert_eq!(
            headers(&[
                "pub",
                "s",
                "x",
                "--schedule-dest",
                "out",
                "--schedule-at",
                "2026-12-01T10:00:00+01:00",
                "--schedule-source",
                "src"
            ])
            .unwrap()
            .unwrap(),
            [
                ("Nats-Schedule-Target", "out".to_string()),
                ("Nats-Schedule", "@at 2026-12-01T09:00:00Z".to_string()),
                ("Nats-Schedule-Source", "src".to_string()),
            ]
        );
        for line in [
            &["pub", "s", "x", "--schedule-every", "1h"][..],
            &[
                "pub",
                "s",
                "x",
                "--schedule-dest",
                "o",
                "--schedule-at",
                "2026-12-01T10:00:00Z",
                "--schedule-after",
                "1m",
            ],
            &[
                "pub",
                "s",
                "x",
                "--schedule-dest",
                "o",
                "--schedule-cron",
                "* * * * * *",
                "--schedule-every",
                "1m",
            ],
            &[
                "pub",
                "s",
                "x",
                "--schedule-dest",
                "o",
                "--schedule-at",
                "tomorrow",
            ],
        ] {
            assert!(headers(line).is_err(), "{line:?}");
        }
    }

    #[test]
    fn publish_checks() {
        assert!(
            check_publish(&pub_args(&["pub", "s", "--atomic", "--send-on", "newline"])).is_ok()
        );
        assert!(check_publish(&pub_args(&["pub", "s", "x", "--atomic"])).is_err());
        assert!(check_publish(&pub_args(&["pub", "s", "--atomic"])).is_err());
        assert!(check_publish(&pub_args(&["pub", "s", "x", "--sleep", "soon"])).is_err());
        let args = pub_args(&[
            "pub",
            "a.{{Count}}",
            "b {{Count}}",
            "--count",
            "2",
            "--no-templates",
        ]);
        let messages = outgoing(&args, args.body.as_deref().unwrap(), &None, UNIX_EPOCH).unwrap();
        assert_eq!(messages.len(), 2);
        assert_eq!(messages[1].subject, "a.{{Count}}");
        assert_eq!(messages[1].body, "b {{Count}}");
    }

    #[test]
    fn ack_subjects() {
        assert_eq!(
            parse_ack_subject("$JS.ACK.ORDERS.C.1.42.7.1700000000000000000.58"),
            Some(Placement {
                stream: "ORDERS".into(),
                stream_sequence: 42,
                pending: 58,
                published_ns: 1_700_000_000_000_000_000,
            })
        );
        assert_eq!(
            parse_ack_subject("$JS.ACK.hub.ACC.ORDERS.C.1.42.7.1700000000000000000.0.tok")
                .map(|placement| (placement.stream, placement.pending)),
            Some(("ORDERS".into(), 0))
        );
        assert_eq!(parse_ack_subject("_INBOX.abc"), None);
    }

    #[test]
    fn subscribe_checks() {
        let check = |line: &[&str]| match parse(line) {
            Command::Sub(args) => check_subscribe(&args),
            other => panic!("not sub: {other:?}"),
        };
        assert!(check(&["sub", "a", "b"]).is_ok());
        assert!(check(&["sub", "--inbox"]).is_ok());
        assert!(check(&["sub", "--stream", "S", "--durable", "D", "-T"]).is_ok());
        for line in [
            &["sub"][..],
            &["sub", "a", "--graph"],
            &["sub", "a", "b", "--all"],
            &["sub", "a", "-T"],
            &["sub", "a", "--durable", "D", "--stream", "S"],
            &["sub", "--durable", "D"],
            &["sub", "a", "--all", "--queue", "q"],
            &["sub", "a", "-t", "-d"],
            &["sub", "a", "--report-subjects", "--report-top", "0"],
        ] {
            assert!(
                Harness::try_parse_from(std::iter::once("tern").chain(line.iter().copied()))
                    .map_err(|_| ())
                    .and_then(|harness| match harness.command {
                        Command::Sub(args) => check_subscribe(&args).map_err(|_| ()),
                        _ => Ok(()),
                    })
                    .is_err(),
                "{line:?}"
            );
        }
    }

    #[test]
    fn the_subject_report() {
        let mut report = Report::default();
        for (subject, bytes) in [("a", 10), ("b", 5), ("a", 10), ("c", 1)] {
            report.add(subject, bytes);
        }
        let table = report.table(2);
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines[0], "Top 2 Active Subjects Report");
        assert!(lines[3].starts_with("a "), "{table}");
        assert!(
            lines[4].starts_with("b ") || lines[4].starts_with("c "),
            "{table}"
        );
        assert!(lines[5].starts_with("Totals"), "{table}");
        assert!(lines[5].contains(" 4 "), "{table}");
    }

    #[test]
    fn dumped_as_go_marshals_a_message() {
        let mut headers = HeaderMap::new();
        headers.insert("K", "V");
        let message = Received {
            subject: "a".into(),
            reply: None,
            headers: Some(headers),
            payload: bytes::Bytes::from_static(b"hi"),
            subscription: "a".into(),
            placement: None,
        };
        assert_eq!(
            dump_json(&message, None),
            json!({"Subject": "a", "Reply": "", "Header": {"K": ["V"]}, "Data": "aGk=", "Sub": null})
        );
    }

    #[test]
    fn request_flags_parse() {
        let Command::Req(args) = parse(&[
            "req",
            "svc",
            "x",
            "--count",
            "3",
            "--replies",
            "0",
            "--reply-timeout",
            "1s",
            "--wait-for-empty",
            "--translate",
            "cat",
            "--force-stdin",
            "--send-on",
            "newline",
            "--no-templates",
            "-w",
            "-r",
            "-H",
            "K:V",
        ]) else {
            panic!("not req")
        };
        assert_eq!((args.count, args.replies), (3, 0));
        assert!(args.wait_for_empty && args.raw && args.no_templates);
    }
}
