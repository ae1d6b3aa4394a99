//! NATS subject patterns on the client side: `*` matches one token, `>`
//! the rest (one token or more). Used where the `nats` CLI filters what
//! it prints (`kv ls BUCKET KEYS`, `sub --ignore-subject`).

/// True when `subject` (no wildcards) matches `pattern`.
pub fn matches(pattern: &str, subject: &str) -> bool {
    let mut tokens = subject.split('.');
    for wanted in pattern.split('.') {
        match (wanted, tokens.next()) {
            (">", Some(_)) => return true,
            ("*", Some(_)) => {}
            (wanted, Some(token)) if wanted == token => {}
            _ => return false,
        }
    }
    tokens.next().is_none()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wildcards() {
        assert!(matches("orders.>", "orders.new"));
        assert!(matches("orders.>", "orders.new.eu"));
        assert!(!matches("orders.>", "orders"));
        assert!(matches("orders.*", "orders.new"));
        assert!(!matches("orders.*", "orders.new.eu"));
        assert!(matches("db.url", "db.url"));
        assert!(!matches("db", "db.url"));
        assert!(matches(">", "a"));
    }
}
