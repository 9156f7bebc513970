//! [`Window`]: the fixed, UTC-aligned periods a spend limit counts in,
//! and the civil dates that name them (no date crate: two conversions
//! between days and dates, Howard Hinnant's).

use std::fmt;

/// A fixed period of UTC time that a spend limit counts in: what was spent
/// in the current hour, day or month. Windows are aligned to UTC (a day
/// starts at 00:00 UTC, a month on its 1st), so every process counting in
/// the same window agrees on where it starts and ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Window {
    /// From the top of one UTC hour to the next.
    Hour,
    /// From 00:00 UTC to the next.
    Day,
    /// From the 1st of a month, 00:00 UTC, to the next 1st.
    Month,
}

/// One window of time: where it starts and ends, in seconds since the
/// Unix epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) struct Period {
    pub(super) window: Window,
    pub(super) start: u64,
    pub(super) end: u64,
}

const HOUR: u64 = 3_600;
const DAY: u64 = 86_400;

impl Window {
    /// The window of this kind that holds `now` (seconds since the epoch).
    pub(super) fn period(self, now: u64) -> Period {
        let (start, end) = match self {
            Window::Hour => {
                let start = now - now % HOUR;
                (start, start + HOUR)
            }
            Window::Day => {
                let start = now - now % DAY;
                (start, start + DAY)
            }
            Window::Month => {
                let (year, month, _) = civil_from_days(now / DAY);
                let next = if month == 12 {
                    (year + 1, 1)
                } else {
                    (year, month + 1)
                };
                (
                    days_from_civil(year, month, 1) * DAY,
                    days_from_civil(next.0, next.1, 1) * DAY,
                )
            }
        };
        Period {
            window: self,
            start,
            end,
        }
    }

    /// `hour`, `day` or `month`.
    pub fn as_str(self) -> &'static str {
        match self {
            Window::Hour => "hour",
            Window::Day => "day",
            Window::Month => "month",
        }
    }
}

impl fmt::Display for Window {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Period {
    // Read by a shared store's keys.
    #[cfg_attr(not(feature = "redis"), allow(dead_code))]
    /// The window's start as a key names it: `hour:2026-12-01T13`,
    /// `day:2026-12-01`, `month:2026-12`.
    pub(super) fn label(&self) -> String {
        let (year, month, day) = civil_from_days(self.start / DAY);
        match self.window {
            Window::Hour => format!(
                "hour:{year:04}-{month:02}-{day:02}T{:02}",
                self.start % DAY / HOUR
            ),
            Window::Day => format!("day:{year:04}-{month:02}-{day:02}"),
            Window::Month => format!("month:{year:04}-{month:02}"),
        }
    }

    /// When the window ends, as a message says it: `2026-12-01 14:00 UTC`.
    pub(super) fn end_text(&self) -> String {
        let (year, month, day) = civil_from_days(self.end / DAY);
        format!(
            "{year:04}-{month:02}-{day:02} {:02}:00 UTC",
            self.end % DAY / HOUR
        )
    }
}

/// The date (year, month 1–12, day 1–31) `days` after 1970-01-01.
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    // Hinnant's `civil_from_days`, for days on or after the epoch: eras of
    // 400 years from 0000-03-01.
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    (year, month, day)
}

/// The days from 1970-01-01 to the date (a year from 1970).
fn days_from_civil(year: u64, month: u64, day: u64) -> u64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year / 400;
    let yoe = year - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    // 2026-12-01T13:45:10Z
    const NOW: u64 = 1_796_132_710;

    #[test]
    fn windows_are_aligned_to_utc_and_named_by_their_start() {
        let hour = Window::Hour.period(NOW);
        assert_eq!(hour.label(), "hour:2026-12-01T13");
        assert_eq!(
            (hour.start, hour.end),
            (NOW - 45 * 60 - 10, NOW - 45 * 60 - 10 + HOUR)
        );
        assert_eq!(hour.end_text(), "2026-12-01 14:00 UTC");
        let day = Window::Day.period(NOW);
        assert_eq!(day.label(), "day:2026-12-01");
        assert_eq!(day.end_text(), "2026-12-02 00:00 UTC");
        let month = Window::Month.period(NOW);
        assert_eq!(month.label(), "month:2026-12");
        assert_eq!(month.end_text(), "2027-01-01 00:00 UTC");
        assert_eq!(month.end - month.start, 31 * DAY);
    }

    #[test]
    fn months_have_their_lengths_and_leap_years_their_february() {
        for (year, month, days) in [
            (2028, 2, 29),
            (2026, 2, 28),
            (2100, 2, 28),
            (2000, 2, 29),
            (2026, 4, 30),
        ] {
            let start = days_from_civil(year, month, 1) * DAY;
            let period = Window::Month.period(start + 5);
            assert_eq!(period.start, start);
            assert_eq!(period.end - period.start, days * DAY, "{year}-{month}");
            assert_eq!(civil_from_days(period.end / DAY - 1), (year, month, days));
        }
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        for days in (0..200_000).step_by(37) {
            let (y, m, d) = civil_from_days(days);
            assert_eq!(days_from_civil(y, m, d), days);
        }
    }
}
