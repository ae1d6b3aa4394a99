//! Subjects: validation and wildcard matching, as nats-server's `sublist.go`.
//!
//! A subject is tokens separated by `.`; every token is non-empty. In a
//! subscription, `*` (a whole token) matches exactly one token and `>` (a whole
//! token, last) matches one or more. `foo*` or `a>` are literal tokens.

pub const SEPARATOR: u8 = b'.';

/// The subscription subject is not valid (`-ERR 'Invalid Subject'`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("invalid subject")]
pub struct InvalidSubject;

/// Tokens of `subject` (empty tokens included, so callers can reject them).
#[inline]
pub fn tokens(subject: &[u8]) -> impl Iterator<Item = &[u8]> {
    subject.split(|&byte| byte == SEPARATOR)
}

#[inline]
pub fn is_single_wildcard(token: &[u8]) -> bool {
    token == b"*"
}

#[inline]
pub fn is_full_wildcard(token: &[u8]) -> bool {
    token == b">"
}

/// Valid for SUB: non-empty tokens, `>` only last, no whitespace.
pub fn is_valid_subject(subject: &[u8]) -> bool {
    if subject.is_empty() {
        return false;
    }
    let mut after_full_wildcard = false;
    for token in tokens(subject) {
        if token.is_empty() || after_full_wildcard {
            return false;
        }
        if token
            .iter()
            .any(|&byte| matches!(byte, b' ' | b'\t' | b'\n' | b'\r' | 0x0c))
        {
            return false;
        }
        if is_full_wildcard(token) {
            after_full_wildcard = true;
        }
    }
    true
}

/// Valid and without wildcard tokens: what `pedantic` requires of PUB.
pub fn is_valid_literal_subject(subject: &[u8]) -> bool {
    tokens(subject)
        .all(|token| !token.is_empty() && !is_single_wildcard(token) && !is_full_wildcard(token))
}

/// Whether `subject` has a wildcard token.
pub fn has_wildcard(subject: &[u8]) -> bool {
    tokens(subject).any(|token| is_single_wildcard(token) || is_full_wildcard(token))
}

/// Whether the subscription `pattern` matches the published `subject`
/// (whose tokens are all taken literally).
pub fn matches(pattern: &[u8], subject: &[u8]) -> bool {
    let mut subject_tokens = tokens(subject);
    for pattern_token in tokens(pattern) {
        let Some(subject_token) = subject_tokens.next() else {
            return false;
        };
        if subject_token.is_empty() {
            return false;
        }
        if is_full_wildcard(pattern_token) {
            return subject_tokens.all(|token| !token.is_empty());
        }
        if !is_single_wildcard(pattern_token) && pattern_token != subject_token {
            return false;
        }
    }
    subject_tokens.next().is_none()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validates_subscription_subjects() {
        for good in [
            &b"foo"[..],
            b"foo.bar",
            b"*",
            b">",
            b"foo.*.bar",
            b"foo.>",
            b"foo*.bar",
            b"a>.b",
            b"_INBOX.x.*",
        ] {
            assert!(is_valid_subject(good), "{good:?}");
        }
        for bad in [
            &b""[..],
            b".",
            b"foo.",
            b".foo",
            b"foo..bar",
            b"foo.>.bar",
            b">.a",
            b"a b",
        ] {
            assert!(!is_valid_subject(bad), "{bad:?}");
        }
    }

    #[test]
    fn validates_literal_subjects() {
        assert!(is_valid_literal_subject(b"foo.bar"));
        assert!(is_valid_literal_subject(b"foo*.bar>"));
        assert!(!is_valid_literal_subject(b"foo.*"));
        assert!(!is_valid_literal_subject(b"foo.>"));
        assert!(!is_valid_literal_subject(b"foo..bar"));
        assert!(!is_valid_literal_subject(b""));
    }

    #[test]
    fn matches_like_nats() {
        assert!(matches(b"a.*", b"a.b"));
        assert!(!matches(b"a.*", b"a"));
        assert!(!matches(b"a.*", b"a.b.c"));
        assert!(matches(b"a.>", b"a.b"));
        assert!(matches(b"a.>", b"a.b.c"));
        assert!(!matches(b"a.>", b"a"));
        assert!(matches(b">", b"a"));
        assert!(matches(b">", b"a.b.c"));
        assert!(matches(b"*.b", b"a.b"));
        assert!(matches(b"a.b", b"a.b"));
        assert!(!matches(b"a.b", b"a.c"));
        assert!(!matches(b"a.*", b"a."));
        assert!(!matches(b"a.>", b"a.b..c"));
        // A published wildcard token is literal: it matches only wildcard patterns.
        assert!(matches(b"a.*", b"a.*"));
        assert!(!matches(b"a.b", b"a.*"));
    }
}
