//! Which failures are worth another request, and how long to wait before it.

use super::LlmError;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Longest wait we accept: a server asking for more is announcing a quota, not a hiccup.
pub(crate) const MAX_WAIT: Duration = Duration::from_secs(600);
const MAX_BACKOFF_S: f64 = 60.0;

/// Timeouts, connection trouble, 408, 429 and 5xx are transient. A bad body is retried once: a cut
/// connection is worth a second try, but a model that keeps answering without text is not worth
/// paying for again and again.
pub(crate) fn retryable(e: &LlmError, bad_bodies_before: u32) -> bool {
    match e {
        LlmError::Timeout { .. } | LlmError::RateLimited { .. } | LlmError::Transport(_) => true,
        LlmError::Http { status, .. } => *status == 408 || *status == 429 || *status >= 500,
        LlmError::BadBody(_) => bad_bodies_before == 0,
        _ => false,
    }
}

/// `base * 2^(attempt-1)` seconds, capped, times a random factor in [0.5, 1) so that clients that
/// failed together do not retry together.
pub(crate) fn backoff(base_s: f64, attempt: u32) -> Duration {
    let exp = base_s.max(0.0) * 2f64.powi(attempt.saturating_sub(1).min(30) as i32);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    let r = crate::rng::splitmix(nanos ^ u64::from(attempt)) >> 11;
    let jitter = 0.5 + 0.5 * (r as f64 / (1u64 << 53) as f64);
    Duration::from_secs_f64(exp.min(MAX_BACKOFF_S) * jitter)
}

/// A Retry-After value: delta-seconds or an HTTP-date (IMF-fixdate), relative to `now_unix`.
pub(crate) fn parse_retry_after(v: &str, now_unix: f64) -> Option<Duration> {
    let v = v.trim();
    if let Ok(s) = v.parse::<f64>() {
        return (s.is_finite() && s >= 0.0).then(|| Duration::from_secs_f64(s));
    }
    let at = parse_http_date(v)?;
    Some(Duration::from_secs_f64((at - now_unix).max(0.0)))
}

/// `Sun, 06 Nov 1994 08:49:37 GMT` to Unix seconds.
fn parse_http_date(v: &str) -> Option<f64> {
    let parts: Vec<&str> = v.split_whitespace().collect();
    let [_, day, mon, year, time, "GMT"] = parts.as_slice() else {
        return None;
    };
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let m = MONTHS.iter().position(|x| x == mon)? as i64 + 1;
    let d: i64 = day.parse().ok()?;
    let y: i64 = year.parse().ok()?;
    let hms: Vec<i64> = time
        .split(':')
        .map(|x| x.parse().ok())
        .collect::<Option<_>>()?;
    let [h, mi, s] = hms.as_slice() else {
        return None;
    };
    // Days from the civil date (Howard Hinnant's algorithm).
    let (y, m) = if m <= 2 { (y - 1, m + 9) } else { (y, m - 3) };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * m + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some((days * 86_400 + h * 3600 + mi * 60 + s) as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_forms() {
        assert_eq!(parse_retry_after("1", 0.0), Some(Duration::from_secs(1)));
        assert_eq!(
            parse_retry_after(" 2.5 ", 0.0),
            Some(Duration::from_millis(2500))
        );
        assert_eq!(parse_retry_after("-1", 0.0), None);
        assert_eq!(
            parse_http_date("Sun, 06 Nov 1994 08:49:37 GMT"),
            Some(784111777.0)
        );
        assert_eq!(
            parse_retry_after("Sun, 06 Nov 1994 08:49:37 GMT", 784111770.0),
            Some(Duration::from_secs(7))
        );
        // A date in the past means now.
        assert_eq!(
            parse_retry_after("Sun, 06 Nov 1994 08:49:37 GMT", 784111800.0),
            Some(Duration::ZERO)
        );
        assert_eq!(parse_retry_after("soon", 0.0), None);
    }

    #[test]
    fn backoff_grows_and_is_capped() {
        for attempt in 1..40 {
            let d = backoff(1.0, attempt).as_secs_f64();
            let full = 2f64.powi(attempt as i32 - 1).min(60.0);
            assert!(d >= full * 0.5 && d < full, "attempt {attempt}: {d}");
        }
    }

    #[test]
    fn what_is_retried() {
        let http = |status| LlmError::Http {
            status,
            body_excerpt: String::new(),
        };
        assert!(retryable(&http(500), 0));
        assert!(retryable(&http(503), 0));
        assert!(retryable(&http(408), 0));
        assert!(!retryable(&http(400), 0));
        assert!(!retryable(&http(401), 0));
        assert!(retryable(&LlmError::BadBody(String::new()), 0));
        assert!(!retryable(&LlmError::BadBody(String::new()), 1));
        assert!(!retryable(&LlmError::Command(String::new()), 0));
    }
}
