//! The device peaks behind every roofline figure, remembered per device name in the cache folder
//! (`peaks.json`).
//!
//! A measured peak can only come out low (a busy machine, a cold clock), never high, so the best ever
//! measured on a device is kept and used. Measuring costs a worker about a second at every start (on the
//! CPU: a BLAS matmul, an FMA loop built with the kernels' compiler, two bandwidth loops), which a search
//! of many short evaluations pays again and again: once a device has been measured `REMEMBER_AFTER`
//! times, its worker is handed the remembered peaks instead, and measures again only every
//! `MEASURE_EVERY`-th start (so a device that got faster, or whose first measurements were taken under
//! load, is still found out). `ksearch doctor` always measures.

use serde_json::{Value, json};
use std::path::PathBuf;

/// Measurements of a device before its peaks are handed to workers instead of measured.
pub const REMEMBER_AFTER: u64 = 3;
/// Every this many starts of a remembered device, one measures again.
pub const MEASURE_EVERY: u64 = 10;

const KEYS: [&str; 2] = ["peak_bandwidth_gbs", "peak_gflops"];

fn path() -> PathBuf {
    crate::builtin::cache_root().join("peaks.json")
}

fn load() -> serde_json::Map<String, Value> {
    std::fs::read_to_string(path())
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or_default()
}

fn save(all: &serde_json::Map<String, Value>) {
    // Best effort: a read-only cache only means the next worker measures again.
    let path = path();
    let _ = std::fs::create_dir_all(crate::builtin::cache_root());
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    if std::fs::write(&tmp, serde_json::to_string_pretty(all).unwrap_or_default()).is_ok() {
        let _ = std::fs::rename(&tmp, &path);
    }
}

fn count(entry: &Value, key: &str) -> u64 {
    entry[key].as_u64().unwrap_or(0)
}

/// The hello's `remembered` object: the peaks of every device measured often enough and not due for a
/// measurement (the worker takes its own device's entry, if any).
pub fn remembered() -> Value {
    remembered_in(&load())
}

fn remembered_in(all: &serde_json::Map<String, Value>) -> Value {
    let mut out = serde_json::Map::new();
    for (name, entry) in all {
        let due = count(entry, "starts_since_measured") + 1 >= MEASURE_EVERY;
        if count(entry, "measurements") >= REMEMBER_AFTER && !due {
            let peaks: serde_json::Map<String, Value> = KEYS
                .iter()
                .map(|k| (k.to_string(), entry[*k].clone()))
                .collect();
            out.insert(name.clone(), Value::Object(peaks));
        }
    }
    Value::Object(out)
}

/// Records a hello's `hardware`: a measurement raises the remembered best (and `hardware` then carries the
/// best, today's figure beside it as `<key>_measured_now`); a start on remembered peaks is counted towards
/// the next measurement.
pub fn record(hw: &mut Value) {
    let mut all = load();
    if record_in(&mut all, hw) {
        save(&all);
    }
}

fn record_in(all: &mut serde_json::Map<String, Value>, hw: &mut Value) -> bool {
    let Some(name) = hw["name"].as_str().map(str::to_string) else {
        return false;
    };
    let known = all.entry(name).or_insert_with(|| json!({}));
    let measured = KEYS
        .iter()
        .any(|k| hw[*k].as_f64().is_some_and(|v| v > 0.0));
    if hw["peaks"].as_str() == Some("remembered") {
        known["starts_since_measured"] = json!(count(known, "starts_since_measured") + 1);
    } else if hw["peaks"].as_str() == Some("measured") && measured {
        for key in KEYS {
            let now = hw[key].as_f64().unwrap_or(0.0);
            let best = known[key].as_f64().unwrap_or(0.0).max(now);
            if best > 0.0 {
                known[key] = json!(best);
                if best > now {
                    hw[format!("{key}_measured_now")] = json!(now);
                    hw[key] = json!(best);
                }
            }
        }
        known["measurements"] = json!(count(known, "measurements") + 1);
        known["starts_since_measured"] = json!(0);
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn measured(bw: f64, gf: f64) -> Value {
        json!({"name": "cpu A", "peaks": "measured", "peak_bandwidth_gbs": bw, "peak_gflops": gf})
    }

    #[test]
    fn a_device_is_remembered_after_enough_measurements_and_measured_again_in_turn() {
        let mut all = serde_json::Map::new();
        for i in 0..REMEMBER_AFTER {
            assert!(
                remembered_in(&all).get("cpu A").is_none(),
                "remembered after {i} measurements"
            );
            record_in(&mut all, &mut measured(20.0 + i as f64, 100.0));
        }
        let r = remembered_in(&all);
        assert_eq!(r["cpu A"]["peak_bandwidth_gbs"], json!(22.0));
        assert_eq!(r["cpu A"]["peak_gflops"], json!(100.0));
        // Starts on remembered peaks are counted; one in MEASURE_EVERY measures again.
        let mut handed = 0;
        for _ in 0..MEASURE_EVERY {
            if remembered_in(&all).get("cpu A").is_none() {
                break;
            }
            handed += 1;
            let mut hw = json!({"name": "cpu A", "peaks": "remembered"});
            record_in(&mut all, &mut hw);
        }
        assert_eq!(handed, MEASURE_EVERY - 1);
        record_in(&mut all, &mut measured(30.0, 90.0));
        assert_eq!(
            remembered_in(&all)["cpu A"]["peak_bandwidth_gbs"],
            json!(30.0)
        );
    }

    #[test]
    fn a_low_measurement_never_lowers_the_peak_and_says_what_it_measured() {
        let mut all = serde_json::Map::new();
        record_in(&mut all, &mut measured(30.0, 100.0));
        let mut hw = measured(10.0, 120.0);
        record_in(&mut all, &mut hw);
        assert_eq!(hw["peak_bandwidth_gbs"], json!(30.0));
        assert_eq!(hw["peak_bandwidth_gbs_measured_now"], json!(10.0));
        assert_eq!(hw["peak_gflops"], json!(120.0));
        assert!(hw.get("peak_gflops_measured_now").is_none());
        // A hello without a device name is not remembered, nor one that measured nothing.
        assert!(!record_in(&mut all, &mut json!({"peaks": "measured"})));
        record_in(&mut all, &mut json!({"name": "cpu B", "peaks": "measured"}));
        assert_eq!(all["cpu B"].get("measurements"), None);
    }
}
