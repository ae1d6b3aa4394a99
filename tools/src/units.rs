//! Sizes, durations and percentages as operators type them, parsed the way
//! the `nats` CLI parses them: sizes are 1024-based (`500GB`, `64KiB`,
//! `1048576`, `-1` for unlimited), durations take Go's units plus days,
//! weeks, months and years (`30d`, `1h30m`, `100ms`, `1y`), percentages end
//! in an optional `%`.

use std::time::Duration;

/// Why an operator's value was refused; the message names what is
/// accepted.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum UnitError {
    #[error("invalid size {0:?}: expected a number, optionally ending in B, K, KB, KiB, M, MB, MiB, G, GB, GiB, T, TB or TiB (1024-based), or -1 for unlimited")]
    Size(String),
    #[error("size {0:?} is too large")]
    SizeRange(String),
    #[error("invalid duration {0:?}: expected a number with a unit (ns, us, ms, s, m, h, d, w, M, y), e.g. 30d, 1h30m or 500ms")]
    Duration(String),
    #[error("duration {0:?} is too long")]
    DurationRange(String),
    #[error("invalid percentage {0:?}: expected a number from 0 to 100, e.g. 80%")]
    Percent(String),
}

/// The value the JetStream API reads as "no limit".
pub const UNLIMITED: i64 = -1;

/// A size in bytes; empty or negative is [`UNLIMITED`].
pub fn parse_size(text: &str) -> Result<i64, UnitError> {
    let trimmed = text.trim();
    if trimmed.is_empty() || trimmed.starts_with('-') {
        return if trimmed.is_empty() || trimmed[1..].chars().all(|c| c.is_ascii_digit()) {
            Ok(UNLIMITED)
        } else {
            Err(UnitError::Size(text.to_string()))
        };
    }
    let digits_end = trimmed
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(trimmed.len());
    if digits_end == 0 {
        return Err(UnitError::Size(text.to_string()));
    }
    let number: i64 = trimmed[..digits_end]
        .parse()
        .map_err(|_| UnitError::SizeRange(text.to_string()))?;
    let shift = match trimmed[digits_end..].trim().to_ascii_uppercase().as_str() {
        "" | "B" => 0,
        "K" | "KB" | "KIB" => 10,
        "M" | "MB" | "MIB" => 20,
        "G" | "GB" | "GIB" => 30,
        "T" | "TB" | "TIB" => 40,
        _ => return Err(UnitError::Size(text.to_string())),
    };
    number
        .checked_mul(1 << shift)
        .ok_or_else(|| UnitError::SizeRange(text.to_string()))
}

/// A duration such as `30d`, `1h30m`, `1.5s`; `0` is zero.
pub fn parse_duration(text: &str) -> Result<Duration, UnitError> {
    let invalid = || UnitError::Duration(text.to_string());
    let trimmed = text.trim();
    if trimmed == "0" {
        return Ok(Duration::ZERO);
    }
    if trimmed.is_empty() {
        return Err(invalid());
    }
    let mut rest = trimmed;
    let mut total_ns: u128 = 0;
    while !rest.is_empty() {
        let number_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(invalid)?;
        if number_end == 0 {
            return Err(invalid());
        }
        let number: f64 = rest[..number_end].parse().map_err(|_| invalid())?;
        rest = &rest[number_end..];
        let unit_end = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let unit_ns: u128 = match &rest[..unit_end] {
            "ns" => 1,
            "us" | "µs" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60 * 1_000_000_000,
            "h" => 3_600 * 1_000_000_000,
            "d" => 86_400 * 1_000_000_000,
            "w" => 7 * 86_400 * 1_000_000_000,
            "M" => 30 * 86_400 * 1_000_000_000,
            "y" => 365 * 86_400 * 1_000_000_000,
            _ => return Err(invalid()),
        };
        rest = &rest[unit_end..];
        total_ns += (number * unit_ns as f64).round() as u128;
    }
    let nanos = u64::try_from(total_ns).map_err(|_| UnitError::DurationRange(text.to_string()))?;
    if nanos > i64::MAX as u64 {
        return Err(UnitError::DurationRange(text.to_string()));
    }
    Ok(Duration::from_nanos(nanos))
}

/// A duration where `-1` (or any negative number) means "unlimited",
/// answered as `0` as the API reads `max_age`.
pub fn parse_duration_or_unlimited(text: &str) -> Result<Duration, UnitError> {
    let trimmed = text.trim();
    if let Some(number) = trimmed.strip_prefix('-') {
        if !number.is_empty() && number.chars().all(|c| c.is_ascii_digit()) {
            return Ok(Duration::ZERO);
        }
    }
    parse_duration(trimmed)
}

/// Nanoseconds as the JetStream API's JSON carries durations.
pub fn nanos(duration: Duration) -> i64 {
    i64::try_from(duration.as_nanos()).expect("parse_duration bounds durations to i64 ns")
}

/// `80%` or `80` as 80.0; 0 to 100.
pub fn parse_percent(text: &str) -> Result<f64, UnitError> {
    let trimmed = text.trim();
    let number = trimmed.strip_suffix('%').unwrap_or(trimmed).trim();
    match number.parse::<f64>() {
        Ok(value) if (0.0..=100.0).contains(&value) => Ok(value),
        _ => Err(UnitError::Percent(text.to_string())),
    }
}

/// Bytes for a reader: `1.5 MiB`, `512 B`.
pub fn format_bytes(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["KiB", "MiB", "GiB", "TiB", "PiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut value = bytes as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

/// A duration for a reader: `30d`, `2m`, `1h30m`, `250ms`.
pub fn format_duration(duration: Duration) -> String {
    if duration.is_zero() {
        return "0s".into();
    }
    let total_ns = duration.as_nanos();
    if total_ns < 1_000_000_000 {
        return if total_ns % 1_000_000 == 0 {
            format!("{}ms", total_ns / 1_000_000)
        } else {
            format!("{:?}", duration)
        };
    }
    let mut seconds = duration.as_secs();
    let mut text = String::new();
    for (unit, size) in [("d", 86_400), ("h", 3_600), ("m", 60), ("s", 1)] {
        if seconds >= size {
            text.push_str(&format!("{}{unit}", seconds / size));
            seconds %= size;
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_as_the_nats_cli_reads_them() {
        assert_eq!(parse_size("500GB"), Ok(500 << 30));
        assert_eq!(parse_size("500gb"), Ok(500 << 30));
        assert_eq!(parse_size("1K"), Ok(1024));
        assert_eq!(parse_size("64KiB"), Ok(64 << 10));
        assert_eq!(parse_size("3MB"), Ok(3 << 20));
        assert_eq!(parse_size("2T"), Ok(2 << 40));
        assert_eq!(parse_size("10B"), Ok(10));
        assert_eq!(parse_size("1048576"), Ok(1 << 20));
        assert_eq!(parse_size("0"), Ok(0));
        assert_eq!(parse_size("-1"), Ok(UNLIMITED));
        assert_eq!(parse_size(""), Ok(UNLIMITED));
    }

    #[test]
    fn bad_sizes_are_refused_with_what_is_accepted() {
        for bad in ["5XB", "GB", "1.5GB", "-1GB", "ten", "5 G B"] {
            let error = parse_size(bad).unwrap_err();
            assert_eq!(error, UnitError::Size(bad.into()), "{bad}");
            assert!(error.to_string().contains("KB"), "{error}");
        }
        assert_eq!(
            parse_size("9999999999999TB"),
            Err(UnitError::SizeRange("9999999999999TB".into()))
        );
        assert!(matches!(
            parse_size("99999999999999999999"),
            Err(UnitError::SizeRange(_))
        ));
    }

    #[test]
    fn durations_with_days_weeks_months_years() {
        let day = 86_400;
        assert_eq!(parse_duration("30d"), Ok(Duration::from_secs(30 * day)));
        assert_eq!(parse_duration("1w"), Ok(Duration::from_secs(7 * day)));
        assert_eq!(parse_duration("1M"), Ok(Duration::from_secs(30 * day)));
        assert_eq!(parse_duration("1y"), Ok(Duration::from_secs(365 * day)));
        assert_eq!(parse_duration("1h30m"), Ok(Duration::from_secs(5_400)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(
            parse_duration("1d3h5m2s"),
            Ok(Duration::from_secs(day + 3 * 3600 + 302))
        );
        assert_eq!(parse_duration("100ms"), Ok(Duration::from_millis(100)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1_500)));
        assert_eq!(parse_duration("10us"), Ok(Duration::from_micros(10)));
        assert_eq!(parse_duration("7ns"), Ok(Duration::from_nanos(7)));
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
        assert_eq!(parse_duration_or_unlimited("-1"), Ok(Duration::ZERO));
        assert_eq!(
            parse_duration_or_unlimited("30d"),
            Ok(Duration::from_secs(30 * day))
        );
        assert_eq!(nanos(Duration::from_secs(30 * day)), 2_592_000_000_000_000);
    }

    #[test]
    fn bad_durations_are_refused() {
        for bad in ["30", "30x", "d", "", "1h-", "-5m", "1..5s", "thirty days"] {
            assert_eq!(
                parse_duration(bad),
                Err(UnitError::Duration(bad.into())),
                "{bad}"
            );
        }
        assert_eq!(
            parse_duration("999999y"),
            Err(UnitError::DurationRange("999999y".into()))
        );
    }

    #[test]
    fn percentages() {
        assert_eq!(parse_percent("80%"), Ok(80.0));
        assert_eq!(parse_percent("95"), Ok(95.0));
        assert_eq!(parse_percent("12.5%"), Ok(12.5));
        assert!(parse_percent("120%").is_err());
        assert!(parse_percent("-1").is_err());
        assert!(parse_percent("lots").is_err());
    }

    #[test]
    fn readable_output() {
        assert_eq!(format_bytes(512), "512 B");
        assert_eq!(format_bytes(1536), "1.5 KiB");
        assert_eq!(format_bytes(500 << 30), "500.0 GiB");
        assert_eq!(format_duration(Duration::from_secs(30 * 86_400)), "30d");
        assert_eq!(format_duration(Duration::from_secs(5_400)), "1h30m");
        assert_eq!(format_duration(Duration::from_millis(250)), "250ms");
        assert_eq!(format_duration(Duration::ZERO), "0s");
    }
}
