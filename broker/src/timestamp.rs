//! Wall-clock formatting without a time-zone database: UTC, for logs
//! (`2026/11/30 10:46:14.357406`) and monitoring JSON (RFC 3339).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Calendar fields of a UTC instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Civil {
    pub year: i64,
    pub month: u32,
    pub day: u32,
    pub hour: u32,
    pub minute: u32,
    pub second: u32,
    pub nanosecond: u32,
}

impl Civil {
    pub fn from_system_time(time: SystemTime) -> Civil {
        let since_epoch = time.duration_since(UNIX_EPOCH).unwrap_or(Duration::ZERO);
        let seconds = since_epoch.as_secs() as i64;
        let days = seconds.div_euclid(86_400);
        let second_of_day = seconds.rem_euclid(86_400) as u32;
        let (year, month, day) = civil_from_days(days);
        Civil {
            year,
            month,
            day,
            hour: second_of_day / 3600,
            minute: second_of_day / 60 % 60,
            second: second_of_day % 60,
            nanosecond: since_epoch.subsec_nanos(),
        }
    }

    /// `2026/11/30 10:46:14.357406`, as nats-server's log lines.
    pub fn log_format(&self) -> String {
        format!(
            "{:04}/{:02}/{:02} {:02}:{:02}:{:02}.{:06}",
            self.year,
            self.month,
            self.day,
            self.hour,
            self.minute,
            self.second,
            self.nanosecond / 1000
        )
    }

    /// `2026-11-30T10:46:14.357406123Z`
    pub fn rfc3339(&self) -> String {
        format!(
            "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:09}Z",
            self.year, self.month, self.day, self.hour, self.minute, self.second, self.nanosecond
        )
    }
}

/// Howard Hinnant's `civil_from_days`: days since 1970-01-01 to (y, m, d).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z.rem_euclid(146_097);
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_index = (5 * day_of_year + 2) / 153;
    let day = (day_of_year - (153 * month_index + 2) / 5 + 1) as u32;
    let month = if month_index < 10 {
        month_index + 3
    } else {
        month_index - 9
    } as u32;
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// Go's `time.Duration.String()` for monitoring fields such as `uptime`: `1h2m3s`.
pub fn go_duration(duration: Duration) -> String {
    let total = duration.as_secs();
    let (days, hours, minutes, seconds) = (
        total / 86_400,
        total / 3600 % 24,
        total / 60 % 60,
        total % 60,
    );
    let mut text = String::new();
    if days > 0 {
        text.push_str(&format!("{days}d"));
    }
    if days > 0 || hours > 0 {
        text.push_str(&format!("{hours}h"));
    }
    if days > 0 || hours > 0 || minutes > 0 {
        text.push_str(&format!("{minutes}m"));
    }
    text.push_str(&format!("{seconds}s"));
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_known_instants() {
        let epoch = Civil::from_system_time(UNIX_EPOCH);
        assert_eq!(epoch.rfc3339(), "1970-01-01T00:00:00.000000000Z");
        // 2026-11-30T10:46:14.357406Z
        let time = UNIX_EPOCH + Duration::new(1_796_035_574, 357_406_000);
        let civil = Civil::from_system_time(time);
        assert_eq!(civil.log_format(), "2026/11/30 10:46:14.357406");
        // Leap day.
        let leap = Civil::from_system_time(UNIX_EPOCH + Duration::from_secs(951_782_400));
        assert_eq!((leap.year, leap.month, leap.day), (2000, 2, 29));
    }

    #[test]
    fn go_durations() {
        assert_eq!(go_duration(Duration::from_secs(5)), "5s");
        assert_eq!(go_duration(Duration::from_secs(3723)), "1h2m3s");
        assert_eq!(go_duration(Duration::from_secs(90_061)), "1d1h1m1s");
    }
}
