//! `tern server cluster` (`raft`, `r`): the JetStream meta group, as the
//! nats CLI's `nats server cluster` names it: `peer-remove` (`rm`, `pr`)
//! removes a server from the group for good (`$JS.API.SERVER.REMOVE`),
//! `step-down` (`stepdown`, `sd`, `elect`, `down`, `d`) asks the meta
//! leader to hand leadership over (`$JS.API.META.LEADER.STEPDOWN`).
//!
//! The nats CLI finds the meta leader through the system account
//! (`$SYS.REQ.SERVER.PING.JSZ`), which tern-server does not have: tern
//! asks the server to resolve the name (`{"peer": NAME}`, then
//! `{"peer_id": NAME}`), and `step-down` names the leader before and after
//! from the nodes' monitoring ports when `--monitor` is given (as `server
//! info|ls|report` read them). nats-server takes both requests from its
//! system account only and ignores them from any other: the silence is
//! reported with the nats CLI's words.

use std::time::{Duration, Instant};

use clap::{Args, Subcommand};
use serde_json::{json, Map, Value};

use crate::api::{self, Api};
use crate::connection::ConnectionArgs;
use crate::error::CliError;
use crate::monitor;
use crate::output::line;

/// nats-server's `err_code` for a server that is not in the meta group.
pub const SERVER_NOT_MEMBER: i64 = 10044;
/// How long `step-down --monitor` waits for a new leader to show.
pub const NEW_LEADER_WAIT: Duration = Duration::from_secs(5);
/// How often it looks.
const NEW_LEADER_POLL: Duration = Duration::from_millis(250);
/// The nats CLI's words when the meta leader does not answer.
const NO_META_LEADER: &str = "did not receive a response from the meta leader, ensure the account used has system privileges and appropriate permissions";

#[derive(Debug, Subcommand)]
pub enum ClusterCommand {
    /// Removes a server from the JetStream cluster for good (needs --force)
    #[command(name = "peer-remove", alias = "rm", alias = "pr")]
    PeerRemove(PeerRemoveArgs),
    /// Asks the meta leader to stand down (a new leader is elected)
    #[command(
        name = "step-down",
        alias = "stepdown",
        alias = "sd",
        alias = "elect",
        alias = "down",
        alias = "d"
    )]
    StepDown(StepDownArgs),
}

#[derive(Debug, Args)]
pub struct PeerRemoveArgs {
    /// The server name or ID (the hex peer id `/jsz` shows) to remove
    #[arg(value_name = "NAME")]
    pub name: String,
    /// Remove it (tern never prompts: without it the command refuses)
    #[arg(short = 'f', long)]
    pub force: bool,
    /// Print the server's answer as JSON
    #[arg(short = 'j', long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct StepDownArgs {
    /// Request placement of the leader in a specific cluster
    #[arg(long, value_name = "CLUSTER")]
    pub cluster: Option<String>,
    /// Request placement of the leader on nodes with specific tag(s)
    /// (repeatable)
    #[arg(long = "tags", value_name = "TAG")]
    pub tags: Vec<String>,
    /// Request placement of the leader on a specific node
    #[arg(long, value_name = "SERVER")]
    pub host: Option<String>,
    /// Print the server's answer as JSON
    #[arg(short = 'j', long)]
    pub json: bool,
    /// Step down even when the monitors show no leader
    #[arg(short = 'f', long)]
    pub force: bool,
    /// tern's: the nodes' monitoring URLs, to name the leader before and
    /// the one elected after (the nats CLI asks the system account)
    #[arg(long, value_name = "URL[,URL…]")]
    pub monitor: Option<String>,
}

pub async fn execute(connection: &ConnectionArgs, command: ClusterCommand) -> Result<(), CliError> {
    match command {
        ClusterCommand::PeerRemove(args) => peer_remove(connection, args).await,
        ClusterCommand::StepDown(args) => step_down(connection, args).await,
    }
}

/// A JetStream domain would send the request where the system account
/// does not listen (the nats CLI's check and text).
fn refuse_domain(connection: &ConnectionArgs, command: &str) -> Result<(), CliError> {
    match connection.js_domain.as_deref().filter(|domain| !domain.is_empty()) {
        None => Ok(()),
        Some(_) => Err(CliError::Usage(format!(
            "the --js-domain option cannot be used with {command}: JetStream domains do not apply to the system account, connect without a domain configured"
        ))),
    }
}

/// No answer (nats-server ignores the request from an account other
/// than its system account): the nats CLI's explanation.
fn unanswered(error: CliError) -> CliError {
    match error {
        CliError::Timeout { action, timeout } => CliError::Failed {
            action,
            reason: format!(
                "no answer within {}: {NO_META_LEADER}",
                crate::units::format_duration(timeout)
            ),
        },
        CliError::NoResponders { action, .. } => CliError::Failed {
            action,
            reason: format!("no responders: {NO_META_LEADER}"),
        },
        other => other,
    }
}

async fn peer_remove(connection: &ConnectionArgs, args: PeerRemoveArgs) -> Result<(), CliError> {
    let action = format!("server cluster peer-remove {}", args.name);
    crate::stream::require_force(args.force, &action)?;
    refuse_domain(connection, "peer-remove")?;
    let api = connection.api().await?;
    let answer = remove(&api, &action, &args.name)
        .await
        .map_err(unanswered)?;
    if args.json {
        api::print_json(&api::without_type(answer));
    }
    Ok(())
}

/// `SERVER.REMOVE` of `name` as a server name, then as a peer id (the
/// nats CLI takes either; the server tells which it is).
async fn remove(api: &Api, action: &str, name: &str) -> Result<Value, CliError> {
    let by_name = api
        .request(action, "SERVER.REMOVE", &json!({ "peer": name }))
        .await;
    match by_name {
        Err(CliError::Api { err_code, .. }) if err_code == SERVER_NOT_MEMBER => {
            api.request(action, "SERVER.REMOVE", &json!({ "peer_id": name }))
                .await
        }
        other => other,
    }
}

/// `META.LEADER.STEPDOWN`'s body: the placement asked for, if any.
pub fn step_down_request(args: &StepDownArgs) -> Value {
    let mut placement = Map::new();
    if let Some(cluster) = &args.cluster {
        placement.insert("cluster".into(), json!(cluster));
    }
    if !args.tags.is_empty() {
        placement.insert("tags".into(), json!(args.tags));
    }
    if let Some(host) = &args.host {
        placement.insert("preferred".into(), json!(host));
    }
    if placement.is_empty() {
        json!({})
    } else {
        json!({ "placement": placement })
    }
}

/// The meta group as one node's `/jsz` shows it: its leader (if any)
/// and its size.
pub fn meta_view(jsz: &Value) -> (Option<String>, u64) {
    let meta = &jsz["meta_cluster"];
    let leader = meta["leader"]
        .as_str()
        .filter(|leader| !leader.is_empty())
        .map(str::to_string);
    (leader, meta["cluster_size"].as_u64().unwrap_or(0))
}

/// The leader (and group size) the first monitor that names one shows.
async fn meta_leader(
    monitors: &[String],
    timeout: Duration,
) -> Result<(Option<String>, u64), CliError> {
    let mut last_error = None;
    let mut size = 0;
    for url in monitors {
        match monitor::get_json(url, "/jsz", timeout).await {
            Ok(jsz) => match meta_view(&jsz) {
                (Some(leader), size) => return Ok((Some(leader), size)),
                (None, seen) => size = size.max(seen),
            },
            Err(error) => last_error = Some(error),
        }
    }
    match (size, last_error) {
        (0, Some(error)) => Err(error),
        _ => Ok((None, size)),
    }
}

async fn step_down(connection: &ConnectionArgs, args: StepDownArgs) -> Result<(), CliError> {
    let action = "server cluster step-down".to_string();
    refuse_domain(connection, "step-down")?;
    let timeout = connection.timeout()?;
    let monitors: Vec<String> = args
        .monitor
        .as_deref()
        .map(crate::server::monitors)
        .unwrap_or_default();
    let mut before = None;
    if !monitors.is_empty() {
        let (leader, size) = meta_leader(&monitors, timeout).await?;
        if leader.is_none() && !args.force {
            return Err(CliError::Failed {
                action,
                reason: "cluster has no current leader".into(),
            });
        }
        let named = leader.clone().unwrap_or_else(|| "<unknown>".into());
        if !args.json {
            line(format!(
                "Requesting leader step down of {named:?} in a {size} peer RAFT group"
            ));
        }
        before = Some(leader);
    } else if !args.json {
        line("Requesting leader step down");
    }
    let api = connection.api().await?;
    let answer = api
        .request(&action, "META.LEADER.STEPDOWN", &step_down_request(&args))
        .await
        .map_err(unanswered)?;
    if args.json {
        api::print_json(&api::without_type(answer));
    }
    let Some(before) = before else {
        return Ok(());
    };
    let deadline = Instant::now() + NEW_LEADER_WAIT;
    loop {
        if let Ok((Some(leader), _)) = meta_leader(&monitors, timeout).await {
            if Some(&leader) != before.as_ref() {
                if !args.json {
                    line(format!("New leader elected {leader:?}"));
                }
                return Ok(());
            }
        }
        if Instant::now() >= deadline {
            return Err(CliError::Failed {
                action,
                reason: format!(
                    "no new leader within {}",
                    crate::units::format_duration(NEW_LEADER_WAIT)
                ),
            });
        }
        tokio::time::sleep(NEW_LEADER_POLL).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn step_down_bodies() {
        use clap::Parser;
        #[derive(Debug, Parser)]
        struct Harness {
            #[command(flatten)]
            args: StepDownArgs,
        }
        let body = |line: &[&str]| {
            let harness =
                Harness::try_parse_from(std::iter::once("step-down").chain(line.iter().copied()))
                    .unwrap_or_else(|error| panic!("{line:?}: {error}"));
            step_down_request(&harness.args)
        };
        assert_eq!(body(&[]), json!({}));
        assert_eq!(
            body(&["--host", "n2"]),
            json!({"placement": {"preferred": "n2"}})
        );
        assert_eq!(
            body(&["--cluster", "east", "--tags", "a", "--tags", "b"]),
            json!({"placement": {"cluster": "east", "tags": ["a", "b"]}})
        );
    }

    #[test]
    fn the_meta_group_from_jsz() {
        let jsz = json!({"meta_cluster": {"leader": "n2", "cluster_size": 3}});
        assert_eq!(meta_view(&jsz), (Some("n2".into()), 3));
        let forming = json!({"meta_cluster": {"cluster_size": 3}});
        assert_eq!(meta_view(&forming), (None, 3));
        assert_eq!(meta_view(&json!({})), (None, 0));
    }

    #[test]
    fn silence_is_explained() {
        let error = unanswered(CliError::Timeout {
            action: "server cluster peer-remove n3".into(),
            timeout: Duration::from_secs(5),
        });
        assert_eq!(
            error.to_string(),
            format!("server cluster peer-remove n3: no answer within 5s: {NO_META_LEADER}")
        );
    }
}
