//! How quantities are written for people, the same in tables, progress lines and prompts: times, sizes,
//! speedups, tunable values, and a message's first line.

/// A time in seconds in the unit that reads best (µs, ms, s); `–` for none.
pub fn fmt_time(s: Option<f64>) -> String {
    match s {
        None => "–".into(),
        Some(s) if s < 1e-3 => format!("{:.1} µs", s * 1e6),
        Some(s) if s < 1.0 => format!("{:.3} ms", s * 1e3),
        Some(s) => format!("{s:.3} s"),
    }
}

/// A size in bytes, binary units.
pub fn fmt_bytes(b: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if b < 1024 {
        return format!("{b} B");
    }
    let mut v = b as f64 / 1024.0;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    format!("{v:.1} {}", UNITS[unit])
}

/// Tunable values as `NAME=VALUE` words, as tables and prompts show them.
pub fn fmt_params(p: &crate::candidate::Params) -> String {
    p.iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(" ")
}

pub fn fmt_x(x: Option<f64>) -> String {
    x.map(|x| format!("{x:.2}x")).unwrap_or_else(|| "–".into())
}

/// The first line of a message, cut to `n` characters (for table cells and progress bars).
pub fn head_line(s: &str, n: usize) -> String {
    s.lines().next().unwrap_or("").chars().take(n).collect()
}
