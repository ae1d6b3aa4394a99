//! The exact `-ERR` texts nats-server 2.15 sends (clients match on them), and
//! which of them close the connection.

pub const UNKNOWN_PROTOCOL_OPERATION: &str = "Unknown Protocol Operation";
pub const MAXIMUM_CONTROL_LINE_EXCEEDED: &str = "maximum control line exceeded";
pub const MAXIMUM_PAYLOAD_VIOLATION: &str = "Maximum Payload Violation";
pub const AUTHORIZATION_VIOLATION: &str = "Authorization Violation";
pub const AUTHENTICATION_TIMEOUT: &str = "Authentication Timeout";
pub const STALE_CONNECTION: &str = "Stale Connection";
pub const MAXIMUM_CONNECTIONS_EXCEEDED: &str = "maximum connections exceeded";
pub const INVALID_CLIENT_PROTOCOL: &str = "invalid client protocol";
pub const NO_RESPONDERS_REQUIRES_HEADERS: &str = "no responders requires headers support";
pub const INVALID_PUBLISH_SUBJECT: &str = "Invalid Publish Subject";
pub const INVALID_SUBJECT: &str = "Invalid Subject";
pub const MAXIMUM_SUBSCRIPTIONS_EXCEEDED: &str = "maximum subscriptions exceeded";

/// `Permissions Violation for Publish to "<subject>"` (non-fatal).
pub fn publish_violation(subject: &[u8]) -> String {
    format!("Permissions Violation for Publish to {}", go_quote(subject))
}

/// `Permissions Violation for Publish with Reply of "<reply>"` (non-fatal).
pub fn reply_violation(reply: &[u8]) -> String {
    format!(
        "Permissions Violation for Publish with Reply of {}",
        go_quote(reply)
    )
}

/// `Permissions Violation for Subscription to "<subject>"`, with
/// ` using queue "<queue>"` for a queue subscription (non-fatal).
/// nats-server `processSubsOnConfigReload`: a subscription a reload no
/// longer allows was removed (the connection stays).
pub fn subscription_removed(subject: &[u8], queue: Option<&[u8]>, sid: &[u8]) -> String {
    format!(
        "{} (sid {})",
        subscribe_violation(subject, queue),
        go_quote(sid)
    )
}

pub fn subscribe_violation(subject: &[u8], queue: Option<&[u8]>) -> String {
    match queue {
        None => format!(
            "Permissions Violation for Subscription to {}",
            go_quote(subject)
        ),
        Some(queue) => format!(
            "Permissions Violation for Subscription to {} using queue {}",
            go_quote(subject),
            go_quote(queue)
        ),
    }
}

/// Go's `%q` for the byte strings that reach these messages: printable ASCII
/// as is, `"` and `\` escaped, everything else as `\xNN` (valid UTF-8 kept).
pub fn go_quote(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() + 2);
    out.push('"');
    match std::str::from_utf8(bytes) {
        Ok(text) => {
            for character in text.chars() {
                match character {
                    '"' => out.push_str("\\\""),
                    '\\' => out.push_str("\\\\"),
                    '\n' => out.push_str("\\n"),
                    '\r' => out.push_str("\\r"),
                    '\t' => out.push_str("\\t"),
                    c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                        out.push_str(&format!("\\x{:02x}", c as u32));
                    }
                    c => out.push(c),
                }
            }
        }
        Err(_) => {
            for &byte in bytes {
                match byte {
                    b'"' => out.push_str("\\\""),
                    b'\\' => out.push_str("\\\\"),
                    0x20..=0x7e => out.push(byte as char),
                    _ => out.push_str(&format!("\\x{byte:02x}")),
                }
            }
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subscriptions_removed_by_a_reload_name_their_sid() {
        // nats-server `processSubsOnConfigReload`.
        assert_eq!(
            subscription_removed(b"q.2", None, b"3"),
            "Permissions Violation for Subscription to \"q.2\" (sid \"3\")"
        );
        assert_eq!(
            subscription_removed(b"q.1", Some(b"workers"), b"2"),
            "Permissions Violation for Subscription to \"q.1\" using queue \"workers\" (sid \"2\")"
        );
    }

    #[test]
    fn quotes_like_go() {
        assert_eq!(go_quote(b"_GR_.x"), "\"_GR_.x\"");
        assert_eq!(go_quote(b"a\"b"), "\"a\\\"b\"");
        assert_eq!(
            publish_violation(b"$NRG.x"),
            "Permissions Violation for Publish to \"$NRG.x\""
        );
        assert_eq!(
            subscribe_violation(b"secret.>", None),
            "Permissions Violation for Subscription to \"secret.>\""
        );
        assert_eq!(
            subscribe_violation(b"jobs.*", Some(b"workers")),
            "Permissions Violation for Subscription to \"jobs.*\" using queue \"workers\""
        );
        assert_eq!(
            reply_violation(b"_R_.a"),
            "Permissions Violation for Publish with Reply of \"_R_.a\""
        );
    }
}
