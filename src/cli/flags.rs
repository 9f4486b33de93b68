//! Validators of numeric flags: a value no run can honour (negative, zero where one is needed, NaN, infinite,
//! beyond any deadline) is refused with its flag's name, before anything starts (`inf` once reached a
//! `Duration` and panicked).

/// The longest deadline or budget a flag may give: 30 days.
const MAX_SECONDS: f64 = 30.0 * 86_400.0;

pub fn seconds(s: &str) -> Result<f64, String> {
    let v: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("`{s}` is not a number of seconds"))?;
    if !(v.is_finite() && v > 0.0 && v <= MAX_SECONDS) {
        return Err(format!(
            "`{s}`: give a positive number of seconds, at most {MAX_SECONDS} (30 days)"
        ));
    }
    Ok(v)
}

/// Days, 0 or more (0: whatever its age), at most ten years.
pub fn days(s: &str) -> Result<f64, String> {
    let v: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("`{s}` is not a number of days"))?;
    if !(v.is_finite() && (0.0..=3650.0).contains(&v)) {
        return Err(format!("`{s}`: give a number of days, 0 to 3650"));
    }
    Ok(v)
}

pub fn dollars(s: &str) -> Result<f64, String> {
    let v: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("`{s}` is not an amount of US dollars"))?;
    if !(v.is_finite() && v >= 0.0) {
        return Err(format!("`{s}`: give an amount of US dollars, 0 or more"));
    }
    Ok(v)
}

pub fn temperature(s: &str) -> Result<f32, String> {
    let v: f32 = s
        .trim()
        .parse()
        .map_err(|_| format!("`{s}` is not a number"))?;
    if !(v.is_finite() && (0.0..=2.0).contains(&v)) {
        return Err(format!(
            "`{s}`: a sampling temperature lies between 0 and 2"
        ));
    }
    Ok(v)
}

/// A whole number, 1 or more (`usize` for counts, `u32` for the narrower flags).
pub fn at_least_one<T: std::str::FromStr + PartialOrd + From<u8>>(s: &str) -> Result<T, String> {
    match s.trim().parse::<T>() {
        Ok(v) if v >= T::from(1) => Ok(v),
        _ => Err(format!("`{s}`: give a whole number, 1 or more")),
    }
}
