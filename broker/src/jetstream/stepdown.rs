//! Whom a leader stepdown (`$JS.API.STREAM.LEADER.STEPDOWN.<stream>`,
//! `CONSUMER.LEADER.STEPDOWN.<stream>.<consumer>`, `META.LEADER.STEPDOWN`)
//! hands leadership to: the request's optional `placement` resolved
//! against the group's voters, with nats-server 2.15.1's rules and errors
//! (`getStepDownPreferredPlacement` in `server/jetstream_api.go`).
//!
//! Body (`JSApiLeaderStepdownRequest`), decoded only when it starts with
//! `{` or `[`, strictly (unknown fields are `400/10025`):
//! `{"placement":{"preferred":"n2"}}`, or `{"placement":{"cluster":"c",
//! "tags":["t"]}}` to pick any connected voter matching both.

use super::api::error::ApiError;
use super::api::json::{self, GoSchema};
use super::replication::PeerName;
use super::stream::config::Placement;

/// `$JS.API.…LEADER.STEPDOWN…` options.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Deserialize)]
#[serde(default, rename = "JSApiLeaderStepdownRequest")]
pub struct StepdownRequest {
    /// `None`: hand leadership to a current voter chosen at random.
    /// The stream config's `Placement` (nats-server uses the same type).
    pub placement: Option<Placement>,
}

const STEPDOWN_SCHEMA: GoSchema = GoSchema {
    struct_name: "JSApiLeaderStepdownRequest",
    field_types: &[],
};

impl StepdownRequest {
    /// A body that is not a JSON object or array means "no options"
    /// (nats-server's `isJSONObjectOrArray`).
    pub fn parse(body: &[u8]) -> Result<StepdownRequest, ApiError> {
        if !json::is_object_or_array(body) {
            return Ok(StepdownRequest::default());
        }
        json::decode_strict_with(body, &STEPDOWN_SCHEMA)
    }
}

/// Where a stepdown hands leadership.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StepdownTarget {
    /// A current voter (heard recently, holding every committed entry)
    /// chosen at random; with none, the one heard recently with the most
    /// of the log (`tern_raft::Node::transfer_candidate`).
    Any,
    /// This voter if it is heard recently, else as [`StepdownTarget::Any`]
    /// (nats-server's `StepDown(preferred)` falls back the same way).
    Preferred(u64),
}

/// The group a stepdown hands over, as its leader sees it.
pub struct StepdownGroup<'a> {
    /// This node's Raft id (the leader's).
    pub this_node: u64,
    /// Every voter, this node included.
    pub voters: &'a [u64],
    /// The cluster's name (every voter is in it).
    pub cluster: &'a str,
}

/// Resolves `placement` against `group`; `name_of` gives a voter's server
/// name and whether this node reaches it (`None`: never heard of).
///
/// - `preferred`: the voter of that name; it being this node is
///   `400/10005 preferred server "X" is already leader`, no voter of that
///   name `400/10005 preferred server "X" not known`.
/// - otherwise the reachable voters but this node, kept when the
///   cluster's name is `cluster` (if given) and the voter has every tag
///   (tern's servers have none); none left is
///   `400/10005 no replacement peer connected`.
pub fn choose_target(
    placement: Option<&Placement>,
    group: &StepdownGroup<'_>,
    name_of: impl Fn(u64) -> Option<PeerName>,
) -> Result<StepdownTarget, ApiError> {
    assert!(
        group.voters.contains(&group.this_node),
        "the leader is a voter of its group"
    );
    let Some(placement) = placement else {
        return Ok(StepdownTarget::Any);
    };
    if !placement.preferred.is_empty() {
        let preferred =
            group.voters.iter().copied().find(|&voter| {
                name_of(voter).is_some_and(|known| known.name == placement.preferred)
            });
        return match preferred {
            Some(voter) if voter == group.this_node => Err(ApiError::cluster_no_peers(format!(
                "preferred server {} is already leader",
                json::go_quote(&placement.preferred)
            ))),
            Some(voter) => Ok(StepdownTarget::Preferred(voter)),
            None => Err(ApiError::cluster_no_peers(format!(
                "preferred server {} not known",
                json::go_quote(&placement.preferred)
            ))),
        };
    }
    let cluster_matches = placement.cluster.is_empty() || placement.cluster == group.cluster;
    // No tern server carries tags: any tag asked for matches none.
    let tags_match = placement.tags.as_ref().is_none_or(Vec::is_empty);
    let connected = group.voters.iter().any(|&voter| {
        voter != group.this_node && name_of(voter).is_some_and(|known| known.reachable)
    });
    if cluster_matches && tags_match && connected {
        Ok(StepdownTarget::Any)
    } else {
        Err(ApiError::cluster_no_peers("no replacement peer connected"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const VOTERS: [u64; 3] = [11, 22, 33];

    fn group() -> StepdownGroup<'static> {
        StepdownGroup {
            this_node: 11,
            voters: &VOTERS,
            cluster: "c",
        }
    }

    /// n1 (this node), n2 reachable, n3 known but not reachable.
    fn name_of(node: u64) -> Option<PeerName> {
        let (name, reachable) = match node {
            11 => ("n1", true),
            22 => ("n2", true),
            33 => ("n3", false),
            _ => return None,
        };
        Some(PeerName {
            name: name.to_string(),
            reachable,
        })
    }

    fn choose(body: &str) -> Result<StepdownTarget, (u16, u32, String)> {
        let request = StepdownRequest::parse(body.as_bytes()).map_err(triple)?;
        choose_target(request.placement.as_ref(), &group(), name_of).map_err(triple)
    }

    fn triple(error: ApiError) -> (u16, u32, String) {
        (error.status, error.code, error.description)
    }

    #[test]
    fn bodies_without_placement_change_nothing() {
        for body in ["", "  ", "garbage", "5", "{}", r#"{"placement":null}"#] {
            assert_eq!(choose(body), Ok(StepdownTarget::Any), "{body:?}");
        }
    }

    #[test]
    fn preferred_names_a_voter() {
        assert_eq!(
            choose(r#"{"placement":{"preferred":"n2"}}"#),
            Ok(StepdownTarget::Preferred(22))
        );
        // Known but not reachable: still the preferred voter; the Raft node
        // falls back to another when it has not heard from it.
        assert_eq!(
            choose(r#"{"placement":{"preferred":"n3","cluster":"other"}}"#),
            Ok(StepdownTarget::Preferred(33))
        );
    }

    #[test]
    fn preferred_errors_are_nats_servers() {
        assert_eq!(
            choose(r#"{"placement":{"preferred":"n1"}}"#),
            Err((
                400,
                10005,
                r#"preferred server "n1" is already leader"#.to_string()
            ))
        );
        assert_eq!(
            choose(r#"{"placement":{"preferred":"n\"9"}}"#),
            Err((
                400,
                10005,
                r#"preferred server "n\"9" not known"#.to_string()
            ))
        );
    }

    #[test]
    fn placement_without_preferred_filters_connected_voters() {
        assert_eq!(choose(r#"{"placement":{}}"#), Ok(StepdownTarget::Any));
        assert_eq!(
            choose(r#"{"placement":{"cluster":"c"}}"#),
            Ok(StepdownTarget::Any)
        );
        let none = Err((400, 10005, "no replacement peer connected".to_string()));
        assert_eq!(choose(r#"{"placement":{"cluster":"d"}}"#), none);
        assert_eq!(choose(r#"{"placement":{"tags":["t"]}}"#), none);
        // Only n3 besides this node, and it is not reachable.
        let unreachable = |node| {
            name_of(node).map(|known| PeerName {
                reachable: node == 11,
                ..known
            })
        };
        let placement = Placement::default();
        assert_eq!(
            choose_target(Some(&placement), &group(), unreachable).map_err(triple),
            none
        );
    }

    #[test]
    fn invalid_bodies_are_invalid_json() {
        let (status, code, description) =
            choose(r#"{"placement":{"preferred":"n2"},"x":1}"#).expect_err("unknown field");
        assert_eq!((status, code), (400, 10025));
        assert_eq!(description, r#"invalid JSON: json: unknown field "x""#);
        let (_, code, _) = choose("{").expect_err("truncated");
        assert_eq!(code, 10025);
        let (_, code, description) =
            choose(r#"{"placement":{"preferred":5}}"#).expect_err("a number");
        assert_eq!(code, 10025, "{description}");
    }
}
