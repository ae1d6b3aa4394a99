//! The JetStream API errors of the consumer endpoints: one constructor per
//! `server/errors.json` row (nats-server 2.15.1) that CONSUMER.CREATE,
//! INFO, DELETE and the create checks answer with, named for its meaning.
//! They extend [`ApiError`] (defined with the stream rows in `error.rs`).
//!
//! Also here: Go's `time.Duration.String()`, which some texts embed
//! (`consumer inactive threshold exceeds system limit of 10s`).

use super::super::api::error::ApiError;

impl ApiError {
    /// 500 10012 `{text}` (consumer create/update failure, e.g. `ack policy can not be updated`).
    pub fn consumer_create_failed(text: &str) -> ApiError {
        ApiError::new(500, 10012, text)
    }

    /// 400 10013 `consumer name already in use`.
    pub fn consumer_name_in_use() -> ApiError {
        ApiError::new(400, 10013, "consumer name already in use")
    }

    /// 404 10014 `consumer not found`.
    pub fn consumer_not_found() -> ApiError {
        ApiError::new(404, 10014, "consumer not found")
    }

    /// 400 10016 `consumer expected to be durable but no durable name set in subject`.
    pub fn durable_name_not_in_subject() -> ApiError {
        ApiError::new(
            400,
            10016,
            "consumer expected to be durable but no durable name set in subject",
        )
    }

    /// 400 10017 `consumer name in subject does not match durable name in request`.
    pub fn durable_name_mismatch() -> ApiError {
        ApiError::new(
            400,
            10017,
            "consumer name in subject does not match durable name in request",
        )
    }

    /// 400 10018 `consumer expected to be durable but a durable name was not set`.
    pub fn durable_name_not_set() -> ApiError {
        ApiError::new(
            400,
            10018,
            "consumer expected to be durable but a durable name was not set",
        )
    }

    /// 400 10020 `consumer expected to be ephemeral but a durable name was set in request`.
    pub fn ephemeral_with_durable_name() -> ApiError {
        ApiError::new(
            400,
            10020,
            "consumer expected to be ephemeral but a durable name was set in request",
        )
    }

    /// 400 10079 `consumer deliver subject has wildcards`.
    pub fn deliver_subject_has_wildcards() -> ApiError {
        ApiError::new(400, 10079, "consumer deliver subject has wildcards")
    }

    /// 400 10080 `consumer in push mode can not set max waiting`.
    pub fn push_max_waiting() -> ApiError {
        ApiError::new(400, 10080, "consumer in push mode can not set max waiting")
    }

    /// 400 10081 `consumer deliver subject forms a cycle`.
    pub fn deliver_subject_forms_cycle() -> ApiError {
        ApiError::new(400, 10081, "consumer deliver subject forms a cycle")
    }

    /// 400 10082 `consumer requires ack policy for max ack pending`.
    pub fn max_ack_pending_requires_ack_policy() -> ApiError {
        ApiError::new(
            400,
            10082,
            "consumer requires ack policy for max ack pending",
        )
    }

    /// 400 10083 `consumer idle heartbeat needs to be >= 100ms`.
    pub fn heartbeat_too_small() -> ApiError {
        ApiError::new(400, 10083, "consumer idle heartbeat needs to be >= 100ms")
    }

    /// 400 10084 `consumer in pull mode requires explicit ack policy on workqueue stream`.
    pub fn pull_requires_explicit_ack() -> ApiError {
        ApiError::new(
            400,
            10084,
            "consumer in pull mode requires explicit ack policy on workqueue stream",
        )
    }

    /// 400 10086 `consumer in pull mode can not have rate limit set`.
    pub fn pull_with_rate_limit() -> ApiError {
        ApiError::new(
            400,
            10086,
            "consumer in pull mode can not have rate limit set",
        )
    }

    /// 400 10087 `consumer max waiting needs to be positive`.
    pub fn max_waiting_negative() -> ApiError {
        ApiError::new(400, 10087, "consumer max waiting needs to be positive")
    }

    /// 400 10088 `consumer idle heartbeat requires a push based consumer`.
    pub fn heartbeat_requires_push() -> ApiError {
        ApiError::new(
            400,
            10088,
            "consumer idle heartbeat requires a push based consumer",
        )
    }

    /// 400 10089 `consumer flow control requires a push based consumer`.
    pub fn flow_control_requires_push() -> ApiError {
        ApiError::new(
            400,
            10089,
            "consumer flow control requires a push based consumer",
        )
    }

    /// 400 10090 `consumer direct requires a push based consumer`.
    pub fn direct_requires_push() -> ApiError {
        ApiError::new(400, 10090, "consumer direct requires a push based consumer")
    }

    /// 400 10091 `consumer direct requires an ephemeral consumer`.
    pub fn direct_requires_ephemeral() -> ApiError {
        ApiError::new(400, 10091, "consumer direct requires an ephemeral consumer")
    }

    /// 400 10094 `{text}` (deliver policy / start position conflicts).
    pub fn invalid_deliver_policy(text: &str) -> ApiError {
        ApiError::new(400, 10094, text)
    }

    /// 400 10095 `failed to parse consumer sampling configuration: {text}`.
    pub fn invalid_sampling(text: &str) -> ApiError {
        ApiError::new(
            400,
            10095,
            format!("failed to parse consumer sampling configuration: {text}"),
        )
    }

    /// 400 10098 `workqueue stream requires explicit ack`.
    pub fn workqueue_requires_explicit_ack() -> ApiError {
        ApiError::new(400, 10098, "workqueue stream requires explicit ack")
    }

    /// 400 10099 `multiple non-filtered consumers not allowed on workqueue stream`.
    pub fn workqueue_multiple_unfiltered() -> ApiError {
        ApiError::new(
            400,
            10099,
            "multiple non-filtered consumers not allowed on workqueue stream",
        )
    }

    /// 400 10100 `filtered consumer not unique on workqueue stream`.
    pub fn workqueue_filter_not_unique() -> ApiError {
        ApiError::new(
            400,
            10100,
            "filtered consumer not unique on workqueue stream",
        )
    }

    /// 400 10101 `consumer must be deliver all on workqueue stream`.
    pub fn workqueue_requires_deliver_all() -> ApiError {
        ApiError::new(
            400,
            10101,
            "consumer must be deliver all on workqueue stream",
        )
    }

    /// 400 10102 `consumer name is too long, maximum allowed is {maximum}`.
    pub fn consumer_name_too_long(maximum: usize) -> ApiError {
        ApiError::new(
            400,
            10102,
            format!("consumer name is too long, maximum allowed is {maximum}"),
        )
    }

    /// 400 10103 `durable name can not contain '.', '*', '>'`.
    pub fn bad_durable_name() -> ApiError {
        ApiError::new(400, 10103, "durable name can not contain '.', '*', '>'")
    }

    /// 400 10107 `consumer description is too long, maximum allowed is {maximum}`.
    pub fn consumer_description_too_long(maximum: usize) -> ApiError {
        ApiError::new(
            400,
            10107,
            format!("consumer description is too long, maximum allowed is {maximum}"),
        )
    }

    /// 400 10108 `consumer with flow control also needs heartbeats`.
    pub fn flow_control_requires_heartbeat() -> ApiError {
        ApiError::new(
            400,
            10108,
            "consumer with flow control also needs heartbeats",
        )
    }

    /// 400 10112 `invalid push consumer deliver subject`.
    pub fn invalid_deliver_subject() -> ApiError {
        ApiError::new(400, 10112, "invalid push consumer deliver subject")
    }

    /// 400 10114 `consumer max request batch needs to be > 0`.
    pub fn max_request_batch_negative() -> ApiError {
        ApiError::new(400, 10114, "consumer max request batch needs to be > 0")
    }

    /// 400 10115 `consumer max request expires needs to be >= 1ms`.
    pub fn max_request_expires_too_small() -> ApiError {
        ApiError::new(
            400,
            10115,
            "consumer max request expires needs to be >= 1ms",
        )
    }

    /// 400 10116 `max deliver is required to be > length of backoff values`.
    pub fn max_deliver_backoff() -> ApiError {
        ApiError::new(
            400,
            10116,
            "max deliver is required to be > length of backoff values",
        )
    }

    /// 400 10121 `consumer max ack pending exceeds system limit of {limit}`.
    pub fn max_ack_pending_excess(limit: &str) -> ApiError {
        ApiError::new(
            400,
            10121,
            format!("consumer max ack pending exceeds system limit of {limit}"),
        )
    }

    /// 400 10126 `consumer config replica count exceeds parent stream`.
    pub fn consumer_replicas_exceed_stream() -> ApiError {
        ApiError::new(
            400,
            10126,
            "consumer config replica count exceeds parent stream",
        )
    }

    /// 400 10127 `Consumer name can not contain path separators`.
    pub fn consumer_name_has_path_separators() -> ApiError {
        ApiError::new(400, 10127, "Consumer name can not contain path separators")
    }

    /// 400 10131 `Consumer create request did not match filtered subject from create subject`.
    pub fn filter_subject_mismatch() -> ApiError {
        ApiError::new(
            400,
            10131,
            "Consumer create request did not match filtered subject from create subject",
        )
    }

    /// 400 10132 `Consumer Durable and Name have to be equal if both are provided`.
    pub fn durable_and_name_mismatch() -> ApiError {
        ApiError::new(
            400,
            10132,
            "Consumer Durable and Name have to be equal if both are provided",
        )
    }

    /// 400 10134 `consumer config replicas must match interest retention stream's replicas`.
    pub fn consumer_replicas_must_match_stream() -> ApiError {
        ApiError::new(
            400,
            10134,
            "consumer config replicas must match interest retention stream's replicas",
        )
    }

    /// 400 10135 `consumer metadata exceeds maximum size of {limit}`.
    pub fn consumer_metadata_too_long(limit: &str) -> ApiError {
        ApiError::new(
            400,
            10135,
            format!("consumer metadata exceeds maximum size of {limit}"),
        )
    }

    /// 400 10136 `consumer cannot have both FilterSubject and FilterSubjects specified`.
    pub fn filter_subject_and_filter_subjects() -> ApiError {
        ApiError::new(
            400,
            10136,
            "consumer cannot have both FilterSubject and FilterSubjects specified",
        )
    }

    /// 400 10137 `consumer with multiple subject filters cannot use subject based API`.
    pub fn multiple_filters_in_subject_api() -> ApiError {
        ApiError::new(
            400,
            10137,
            "consumer with multiple subject filters cannot use subject based API",
        )
    }

    /// 400 10138 `consumer subject filters cannot overlap`.
    pub fn overlapping_filter_subjects() -> ApiError {
        ApiError::new(400, 10138, "consumer subject filters cannot overlap")
    }

    /// 400 10139 `consumer filter in FilterSubjects cannot be empty`.
    pub fn empty_filter_subject() -> ApiError {
        ApiError::new(
            400,
            10139,
            "consumer filter in FilterSubjects cannot be empty",
        )
    }

    /// 400 10148 `consumer already exists`.
    pub fn consumer_already_exists() -> ApiError {
        ApiError::new(400, 10148, "consumer already exists")
    }

    /// 400 10149 `consumer does not exist`.
    pub fn consumer_does_not_exist() -> ApiError {
        ApiError::new(400, 10149, "consumer does not exist")
    }

    /// 400 10153 `consumer inactive threshold exceeds system limit of {limit}`.
    pub fn inactive_threshold_excess(limit: &str) -> ApiError {
        ApiError::new(
            400,
            10153,
            format!("consumer inactive threshold exceeds system limit of {limit}"),
        )
    }

    /// 400 10159 `Setting PriorityPolicy requires at least one PriorityGroup to be set`.
    pub fn priority_policy_without_group() -> ApiError {
        ApiError::new(
            400,
            10159,
            "Setting PriorityPolicy requires at least one PriorityGroup to be set",
        )
    }

    /// 400 10161 `Group name cannot be an empty string`.
    pub fn empty_priority_group() -> ApiError {
        ApiError::new(400, 10161, "Group name cannot be an empty string")
    }

    /// 400 10162 `Valid priority group name must match A-Z, a-z, 0-9, -_/=)+ and may not exceed 16 characters`.
    pub fn invalid_priority_group() -> ApiError {
        ApiError::new(400, 10162, "Valid priority group name must match A-Z, a-z, 0-9, -_/=)+ and may not exceed 16 characters")
    }

    /// 400 10178 `priority groups can not be used with push consumers`.
    pub fn push_with_priority_groups() -> ApiError {
        ApiError::new(
            400,
            10178,
            "priority groups can not be used with push consumers",
        )
    }

    /// 400 10181 `consumer ack policy invalid`.
    pub fn ack_policy_invalid() -> ApiError {
        ApiError::new(400, 10181, "consumer ack policy invalid")
    }

    /// 400 10182 `consumer replay policy invalid`.
    pub fn replay_policy_invalid() -> ApiError {
        ApiError::new(400, 10182, "consumer replay policy invalid")
    }

    /// 400 10183 `consumer ack wait needs to be positive`.
    pub fn ack_wait_negative() -> ApiError {
        ApiError::new(400, 10183, "consumer ack wait needs to be positive")
    }

    /// 400 10184 `consumer backoff needs to be positive`.
    pub fn backoff_negative() -> ApiError {
        ApiError::new(400, 10184, "consumer backoff needs to be positive")
    }

    /// 400 10196 `consumer can not have priority groups when policy is none`.
    pub fn priority_groups_without_policy() -> ApiError {
        ApiError::new(
            400,
            10196,
            "consumer can not have priority groups when policy is none",
        )
    }

    /// 400 10197 `PinnedTTL cannot be set when PriorityPolicy is none`.
    pub fn priority_timeout_without_policy() -> ApiError {
        ApiError::new(
            400,
            10197,
            "PinnedTTL cannot be set when PriorityPolicy is none",
        )
    }

    /// 400 10218 `flow control ack policy requires a push based consumer`.
    pub fn flow_control_ack_requires_push() -> ApiError {
        ApiError::new(
            400,
            10218,
            "flow control ack policy requires a push based consumer",
        )
    }

    /// 400 10219 `flow control ack policy requires flow control`.
    pub fn flow_control_ack_requires_flow_control() -> ApiError {
        ApiError::new(400, 10219, "flow control ack policy requires flow control")
    }

    /// 400 10220 `flow control ack policy requires max ack pending`.
    pub fn flow_control_ack_requires_max_ack_pending() -> ApiError {
        ApiError::new(
            400,
            10220,
            "flow control ack policy requires max ack pending",
        )
    }

    /// 400 10221 `flow control ack policy requires unset ack wait`.
    pub fn flow_control_ack_requires_no_ack_wait() -> ApiError {
        ApiError::new(
            400,
            10221,
            "flow control ack policy requires unset ack wait",
        )
    }

    /// 400 10222 `flow control ack policy requires unset max deliver`.
    pub fn flow_control_ack_requires_no_max_deliver() -> ApiError {
        ApiError::new(
            400,
            10222,
            "flow control ack policy requires unset max deliver",
        )
    }
}

/// Go's `time.Duration.String()`: `0s`, `1ns`, `1.5µs`, `100ms`, `2s`,
/// `1m30s`, `2h0m0.5s`, `-3s`.
pub fn go_duration_text(duration_ns: i64) -> String {
    if duration_ns == 0 {
        return "0s".to_string();
    }
    let negative = duration_ns < 0;
    let magnitude = duration_ns.unsigned_abs();
    let mut text = String::new();
    if negative {
        text.push('-');
    }
    if magnitude < 1_000_000_000 {
        // Below one second: a single unit with a fraction.
        let (unit, scale) = if magnitude < 1_000 {
            ("ns", 1)
        } else if magnitude < 1_000_000 {
            ("µs", 1_000)
        } else {
            ("ms", 1_000_000)
        };
        text.push_str(&fraction_text(magnitude, scale));
        text.push_str(unit);
        return text;
    }
    let hours = magnitude / 3_600_000_000_000;
    let minutes = magnitude / 60_000_000_000 % 60;
    let seconds_ns = magnitude % 60_000_000_000;
    if hours > 0 {
        text.push_str(&format!("{hours}h{minutes}m"));
    } else if minutes > 0 {
        text.push_str(&format!("{minutes}m"));
    }
    text.push_str(&fraction_text(seconds_ns, 1_000_000_000));
    text.push('s');
    text
}

/// `value / scale` with the remainder as a decimal fraction, trailing zeros
/// trimmed (Go's `fmtFrac` + `fmtInt`).
fn fraction_text(value: u64, scale: u64) -> String {
    let whole = value / scale;
    let remainder = value % scale;
    if remainder == 0 {
        return whole.to_string();
    }
    let digits = scale.ilog10();
    let fraction = format!("{remainder:0width$}", width = digits as usize);
    format!("{whole}.{}", fraction.trim_end_matches('0'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_constructor_has_its_table_row() {
        let rows: &[(ApiError, u16, u32, &str)] = &[
        (ApiError::consumer_create_failed("x"), 500, 10012, "x"),
        (ApiError::consumer_name_in_use(), 400, 10013, "consumer name already in use"),
        (ApiError::consumer_not_found(), 404, 10014, "consumer not found"),
        (ApiError::durable_name_not_in_subject(), 400, 10016, "consumer expected to be durable but no durable name set in subject"),
        (ApiError::durable_name_mismatch(), 400, 10017, "consumer name in subject does not match durable name in request"),
        (ApiError::durable_name_not_set(), 400, 10018, "consumer expected to be durable but a durable name was not set"),
        (ApiError::ephemeral_with_durable_name(), 400, 10020, "consumer expected to be ephemeral but a durable name was set in request"),
        (ApiError::deliver_subject_has_wildcards(), 400, 10079, "consumer deliver subject has wildcards"),
        (ApiError::push_max_waiting(), 400, 10080, "consumer in push mode can not set max waiting"),
        (ApiError::deliver_subject_forms_cycle(), 400, 10081, "consumer deliver subject forms a cycle"),
        (ApiError::max_ack_pending_requires_ack_policy(), 400, 10082, "consumer requires ack policy for max ack pending"),
        (ApiError::heartbeat_too_small(), 400, 10083, "consumer idle heartbeat needs to be >= 100ms"),
        (ApiError::pull_requires_explicit_ack(), 400, 10084, "consumer in pull mode requires explicit ack policy on workqueue stream"),
        (ApiError::pull_with_rate_limit(), 400, 10086, "consumer in pull mode can not have rate limit set"),
        (ApiError::max_waiting_negative(), 400, 10087, "consumer max waiting needs to be positive"),
        (ApiError::heartbeat_requires_push(), 400, 10088, "consumer idle heartbeat requires a push based consumer"),
        (ApiError::flow_control_requires_push(), 400, 10089, "consumer flow control requires a push based consumer"),
        (ApiError::direct_requires_push(), 400, 10090, "consumer direct requires a push based consumer"),
        (ApiError::direct_requires_ephemeral(), 400, 10091, "consumer direct requires an ephemeral consumer"),
        (ApiError::invalid_deliver_policy("x"), 400, 10094, "x"),
        (ApiError::invalid_sampling("x"), 400, 10095, "failed to parse consumer sampling configuration: x"),
        (ApiError::workqueue_requires_explicit_ack(), 400, 10098, "workqueue stream requires explicit ack"),
        (ApiError::workqueue_multiple_unfiltered(), 400, 10099, "multiple non-filtered consumers not allowed on workqueue stream"),
        (ApiError::workqueue_filter_not_unique(), 400, 10100, "filtered consumer not unique on workqueue stream"),
        (ApiError::workqueue_requires_deliver_all(), 400, 10101, "consumer must be deliver all on workqueue stream"),
        (ApiError::consumer_name_too_long(7), 400, 10102, "consumer name is too long, maximum allowed is 7"),
        (ApiError::bad_durable_name(), 400, 10103, "durable name can not contain '.', '*', '>'"),
        (ApiError::consumer_description_too_long(7), 400, 10107, "consumer description is too long, maximum allowed is 7"),
        (ApiError::flow_control_requires_heartbeat(), 400, 10108, "consumer with flow control also needs heartbeats"),
        (ApiError::invalid_deliver_subject(), 400, 10112, "invalid push consumer deliver subject"),
        (ApiError::max_request_batch_negative(), 400, 10114, "consumer max request batch needs to be > 0"),
        (ApiError::max_request_expires_too_small(), 400, 10115, "consumer max request expires needs to be >= 1ms"),
        (ApiError::max_deliver_backoff(), 400, 10116, "max deliver is required to be > length of backoff values"),
        (ApiError::max_ack_pending_excess("x"), 400, 10121, "consumer max ack pending exceeds system limit of x"),
        (ApiError::consumer_replicas_exceed_stream(), 400, 10126, "consumer config replica count exceeds parent stream"),
        (ApiError::consumer_name_has_path_separators(), 400, 10127, "Consumer name can not contain path separators"),
        (ApiError::filter_subject_mismatch(), 400, 10131, "Consumer create request did not match filtered subject from create subject"),
        (ApiError::durable_and_name_mismatch(), 400, 10132, "Consumer Durable and Name have to be equal if both are provided"),
        (ApiError::consumer_replicas_must_match_stream(), 400, 10134, "consumer config replicas must match interest retention stream's replicas"),
        (ApiError::consumer_metadata_too_long("x"), 400, 10135, "consumer metadata exceeds maximum size of x"),
        (ApiError::filter_subject_and_filter_subjects(), 400, 10136, "consumer cannot have both FilterSubject and FilterSubjects specified"),
        (ApiError::multiple_filters_in_subject_api(), 400, 10137, "consumer with multiple subject filters cannot use subject based API"),
        (ApiError::overlapping_filter_subjects(), 400, 10138, "consumer subject filters cannot overlap"),
        (ApiError::empty_filter_subject(), 400, 10139, "consumer filter in FilterSubjects cannot be empty"),
        (ApiError::consumer_already_exists(), 400, 10148, "consumer already exists"),
        (ApiError::consumer_does_not_exist(), 400, 10149, "consumer does not exist"),
        (ApiError::inactive_threshold_excess("x"), 400, 10153, "consumer inactive threshold exceeds system limit of x"),
        (ApiError::priority_policy_without_group(), 400, 10159, "Setting PriorityPolicy requires at least one PriorityGroup to be set"),
        (ApiError::empty_priority_group(), 400, 10161, "Group name cannot be an empty string"),
        (ApiError::invalid_priority_group(), 400, 10162, "Valid priority group name must match A-Z, a-z, 0-9, -_/=)+ and may not exceed 16 characters"),
        (ApiError::push_with_priority_groups(), 400, 10178, "priority groups can not be used with push consumers"),
        (ApiError::ack_policy_invalid(), 400, 10181, "consumer ack policy invalid"),
        (ApiError::replay_policy_invalid(), 400, 10182, "consumer replay policy invalid"),
        (ApiError::ack_wait_negative(), 400, 10183, "consumer ack wait needs to be positive"),
        (ApiError::backoff_negative(), 400, 10184, "consumer backoff needs to be positive"),
        (ApiError::priority_groups_without_policy(), 400, 10196, "consumer can not have priority groups when policy is none"),
        (ApiError::priority_timeout_without_policy(), 400, 10197, "PinnedTTL cannot be set when PriorityPolicy is none"),
        (ApiError::flow_control_ack_requires_push(), 400, 10218, "flow control ack policy requires a push based consumer"),
        (ApiError::flow_control_ack_requires_flow_control(), 400, 10219, "flow control ack policy requires flow control"),
        (ApiError::flow_control_ack_requires_max_ack_pending(), 400, 10220, "flow control ack policy requires max ack pending"),
        (ApiError::flow_control_ack_requires_no_ack_wait(), 400, 10221, "flow control ack policy requires unset ack wait"),
        (ApiError::flow_control_ack_requires_no_max_deliver(), 400, 10222, "flow control ack policy requires unset max deliver"),        ];
        for (error, status, code, description) in rows {
            assert_eq!(
                (error.status, error.code, error.description.as_str()),
                (*status, *code, *description)
            );
        }
    }

    #[test]
    fn durations_print_like_go() {
        for (duration_ns, expected) in [
            (0, "0s"),
            (1, "1ns"),
            (1_500, "1.5µs"),
            (100_000_000, "100ms"),
            (1_500_000_000, "1.5s"),
            (2_000_000_000, "2s"),
            (10_000_000_000, "10s"),
            (90_000_000_000, "1m30s"),
            (3_600_000_000_000, "1h0m0s"),
            (7_200_500_000_000, "2h0m0.5s"),
            (-3_000_000_000, "-3s"),
            (1_000_000_001, "1.000000001s"),
        ] {
            assert_eq!(go_duration_text(duration_ns), expected, "{duration_ns}");
        }
    }
}
