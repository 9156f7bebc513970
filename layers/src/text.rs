//! Small rules about text that several layers follow, each in one place.
//! (Text is cut at a character boundary by `str::floor_char_boundary` and
//! `ceil_char_boundary`, std's, everywhere.)

use std::time::Duration;

/// `2811` as `2,811` (as the spend limit's messages write counts too).
pub(crate) fn thousands(n: usize) -> String {
    toolstack::model::thousands(u64::try_from(n).unwrap_or(u64::MAX))
}

/// A time to live in words: `1h`, `1h 30m`, `10m`, `45s`.
pub(crate) fn duration_words(d: Duration) -> String {
    let secs = d.as_secs();
    let (h, m, s) = (secs / 3600, secs / 60 % 60, secs % 60);
    let parts: Vec<String> = [(h, "h"), (m, "m"), (s, "s")]
        .into_iter()
        .filter(|(n, _)| *n > 0)
        .map(|(n, unit)| format!("{n}{unit}"))
        .collect();
    if parts.is_empty() {
        format!("{}ms", d.as_millis())
    } else {
        parts.join(" ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_durations_read_as_words() {
        assert_eq!(thousands(2811), "2,811");
        assert_eq!(thousands(999), "999");
        assert_eq!(duration_words(Duration::from_secs(3600)), "1h");
        assert_eq!(duration_words(Duration::from_secs(5400)), "1h 30m");
        assert_eq!(duration_words(Duration::from_secs(45)), "45s");
        assert_eq!(duration_words(Duration::from_millis(20)), "20ms");
    }
}
