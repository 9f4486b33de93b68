//! Wall-clock time as the store and the LLM client record it. Kernel timings never come from here: the
//! worker times kernels on the device's own clock.

/// Seconds since the Unix epoch (0 on a clock set before it).
pub fn now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}
