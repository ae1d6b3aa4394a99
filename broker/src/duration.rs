//! Durations as operators write them in config files and flags: `30`
//! (seconds), `500ms`, `2m`, `1h`, `1m30s`, `1.5s` (nats-server's units
//! `ns`, `us`/`µs`, `ms`, `s`, `m`, `h`). A leaf: config, auth and TLS
//! setup all read durations through it.

use std::time::Duration;

/// Why a text is not a duration.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    #[error("empty duration")]
    Empty,
    #[error("{text:?} is not a duration")]
    NotANumber { text: String },
    #[error("{text:?}: unknown duration unit {unit:?}")]
    UnknownUnit { text: String, unit: String },
    #[error("{text:?} is too large")]
    TooLarge { text: String },
}

/// Parses `text` (surrounding blanks ignored).
pub fn parse_duration(text: &str) -> Result<Duration, DurationError> {
    let text = text.trim();
    if text.is_empty() {
        return Err(DurationError::Empty);
    }
    if text.bytes().all(|b| b.is_ascii_digit()) {
        return text
            .parse::<u64>()
            .map(Duration::from_secs)
            .map_err(|_| DurationError::TooLarge { text: text.into() });
    }
    let mut total = Duration::ZERO;
    let mut rest = text;
    while !rest.is_empty() {
        let number_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let (number, after) = rest.split_at(number_end);
        let unit_end = after
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(after.len());
        let (unit, next) = after.split_at(unit_end);
        let value: f64 = number
            .parse()
            .map_err(|_| DurationError::NotANumber { text: text.into() })?;
        let seconds = match unit {
            "ns" => value / 1e9,
            "us" | "µs" => value / 1e6,
            "ms" => value / 1e3,
            "s" => value,
            "m" => value * 60.0,
            "h" => value * 3600.0,
            _ => {
                return Err(DurationError::UnknownUnit {
                    text: text.into(),
                    unit: unit.into(),
                })
            }
        };
        let part = Duration::try_from_secs_f64(seconds)
            .map_err(|_| DurationError::TooLarge { text: text.into() })?;
        total = total
            .checked_add(part)
            .ok_or_else(|| DurationError::TooLarge { text: text.into() })?;
        rest = next;
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("30"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("100ms"), Ok(Duration::from_millis(100)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert!(parse_duration("5y").is_err());
    }

    #[test]
    fn bad_durations_say_why() {
        assert_eq!(parse_duration(" "), Err(DurationError::Empty));
        assert_eq!(
            parse_duration("5y").unwrap_err().to_string(),
            "\"5y\": unknown duration unit \"y\""
        );
        assert_eq!(
            parse_duration("x1s").unwrap_err().to_string(),
            "\"x1s\" is not a duration"
        );
        assert!(matches!(
            parse_duration("99999999999999999999"),
            Err(DurationError::TooLarge { .. })
        ));
        assert!(matches!(
            parse_duration("99999999999999999999999h"),
            Err(DurationError::TooLarge { .. })
        ));
        assert!(matches!(
            parse_duration("1e3h"),
            Err(DurationError::UnknownUnit { .. })
        ));
    }
}
