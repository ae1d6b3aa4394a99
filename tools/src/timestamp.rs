//! Wall-clock times as the JetStream API and the `nats` CLI write them:
//! RFC 3339 in UTC with nanoseconds (`2026-11-30T09:07:54.907003966Z`,
//! Go's `time.Time` in JSON), read back with any offset, and the `nats`
//! CLI's `2006-01-02 15:04:05` (`--pause`, read as UTC as Go's
//! `time.Parse` does). Civil dates use Howard Hinnant's day algorithms.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// UTC RFC 3339 with nanoseconds, as Go writes `time.Time`.
pub fn rfc3339(time: SystemTime) -> String {
    let since = time.duration_since(UNIX_EPOCH).unwrap_or(Duration::ZERO);
    let seconds = since.as_secs() as i64;
    let (days, rest) = (seconds.div_euclid(86_400), seconds.rem_euclid(86_400));
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:09}Z",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60,
        since.subsec_nanos()
    )
}

/// UTC RFC 3339 in whole seconds (`2026-11-30T09:07:54Z`), as Go's
/// `time.RFC3339` layout writes it.
pub fn rfc3339_seconds(time: SystemTime) -> String {
    let text = rfc3339(time);
    format!("{}Z", &text[..19])
}

fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(month <= 2), month, day)
}

fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let yoe = year.rem_euclid(400);
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Digits at `text[at..at + count]` as a number.
fn digits(text: &str, at: usize, count: usize) -> Option<i64> {
    let part = text.get(at..at + count)?;
    if !part.chars().all(|c| c.is_ascii_digit()) {
        return None;
    }
    part.parse().ok()
}

/// `YYYY-MM-DD?HH:MM:SS` (the separator at 10 is `T` or a space) as
/// seconds since the epoch, read as UTC; the rest of the text after it.
fn date_time_seconds(text: &str) -> Option<(i64, &str)> {
    let year = digits(text, 0, 4)?;
    let month = digits(text, 5, 2)?;
    let day = digits(text, 8, 2)?;
    let hour = digits(text, 11, 2)?;
    let minute = digits(text, 14, 2)?;
    let second = digits(text, 17, 2)?;
    let separators = [(4, '-'), (7, '-'), (13, ':'), (16, ':')];
    let bytes = text.as_bytes();
    if separators
        .iter()
        .any(|&(at, separator)| bytes[at] != separator as u8)
        || !matches!(bytes[10], b'T' | b't' | b' ')
        || !(1..=12).contains(&month)
        || !(1..=31).contains(&day)
        || hour > 23
        || minute > 59
        || second > 60
    {
        return None;
    }
    let days = days_from_civil(year, month, day);
    Some((
        days * 86_400 + hour * 3_600 + minute * 60 + second,
        &text[19..],
    ))
}

fn from_unix(seconds: i64, nanos: u32) -> Option<SystemTime> {
    let seconds = u64::try_from(seconds).ok()?;
    UNIX_EPOCH.checked_add(Duration::new(seconds, nanos))
}

/// An RFC 3339 time (`2026-11-30T09:07:54.9Z`, `…+02:00`); `None` when
/// it is not one (or before 1970).
pub fn parse_rfc3339(text: &str) -> Option<SystemTime> {
    let text = text.trim();
    let (mut seconds, mut rest) = date_time_seconds(text)?;
    let mut nanos: u32 = 0;
    if let Some(fraction) = rest.strip_prefix('.') {
        let end = fraction
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(fraction.len());
        if end == 0 {
            return None;
        }
        let mut padded = fraction[..end.min(9)].to_string();
        while padded.len() < 9 {
            padded.push('0');
        }
        nanos = padded.parse().ok()?;
        rest = &fraction[end..];
    }
    match rest {
        "Z" | "z" => {}
        offset => {
            let sign = match offset.as_bytes().first()? {
                b'+' => 1,
                b'-' => -1,
                _ => return None,
            };
            let hours = digits(offset, 1, 2)?;
            let minutes = digits(offset, 4, 2)?;
            if offset.len() != 6 || offset.as_bytes()[3] != b':' {
                return None;
            }
            seconds -= sign * (hours * 3_600 + minutes * 60);
        }
    }
    from_unix(seconds, nanos)
}

/// The `nats` CLI's `2006-01-02 15:04:05` (Go's `time.DateTime`), read as
/// UTC.
pub fn parse_date_time(text: &str) -> Option<SystemTime> {
    let text = text.trim();
    match date_time_seconds(text)? {
        (seconds, "") if text.as_bytes()[10] == b' ' => from_unix(seconds, 0),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_as_go_writes_it() {
        assert_eq!(rfc3339(UNIX_EPOCH), "1970-01-01T00:00:00.000000000Z");
        let time = UNIX_EPOCH + Duration::new(1_796_029_674, 907_003_966);
        assert_eq!(rfc3339(time), "2026-11-30T09:07:54.907003966Z");
        assert_eq!(rfc3339_seconds(time), "2026-11-30T09:07:54Z");
        let leap = UNIX_EPOCH + Duration::from_secs(951_782_400); // 2000-02-29
        assert_eq!(rfc3339(leap), "2000-02-29T00:00:00.000000000Z");
    }

    #[test]
    fn rfc3339_read_back_with_any_offset() {
        let time = UNIX_EPOCH + Duration::new(1_796_029_674, 907_003_966);
        assert_eq!(parse_rfc3339(&rfc3339(time)), Some(time));
        assert_eq!(
            parse_rfc3339("2026-11-30T11:07:54.907003966+02:00"),
            Some(time)
        );
        assert_eq!(
            parse_rfc3339("2026-11-30T09:07:54.9Z"),
            Some(UNIX_EPOCH + Duration::new(1_796_029_674, 900_000_000))
        );
        for bad in [
            "2026-11-30",
            "2026-13-01T00:00:00Z",
            "2026-11-30T09:07:54",
            "x",
        ] {
            assert_eq!(parse_rfc3339(bad), None, "{bad}");
        }
    }

    #[test]
    fn the_nats_clis_date_time() {
        assert_eq!(
            parse_date_time("2000-02-29 00:00:00"),
            Some(UNIX_EPOCH + Duration::from_secs(951_782_400))
        );
        assert_eq!(parse_date_time("2000-02-29T00:00:00"), None);
        assert_eq!(parse_date_time("1h"), None);
    }
}
