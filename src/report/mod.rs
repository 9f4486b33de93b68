//! What people read: summary tables for `run`, `show`, `eval`, `runs` and `tasks` (scripts read the
//! JSON the same commands print with `--json`), and one run as a self-contained HTML page (`html`,
//! drawn with `svg`).

pub mod html;
pub mod svg;

use crate::eval::WorkloadResult;
use crate::run_result::RunResult;
use crate::store::{RunRow, RunStatus};
use crate::units::{fmt_params, fmt_time, fmt_x};
use comfy_table::{Cell, Color, Table, presets::UTF8_FULL_CONDENSED};
use serde_json::Value;
use std::sync::atomic::{AtomicBool, Ordering};

/// Whether what people read is coloured (`--color`; see `set_color`).
static COLOR: AtomicBool = AtomicBool::new(false);

/// `--color auto|always|never`. `auto`: colour when stdout is a terminal and `NO_COLOR` is unset or
/// empty (no-color.org); an explicit `always` or `never` wins over `NO_COLOR`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ColorChoice {
    Auto,
    Always,
    Never,
}

pub fn set_color(choice: ColorChoice) {
    use std::io::IsTerminal;
    let on = match choice {
        ColorChoice::Always => true,
        ColorChoice::Never => false,
        ColorChoice::Auto => {
            std::io::stdout().is_terminal()
                && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
        }
    };
    COLOR.store(on, Ordering::Relaxed);
}

fn color_on() -> bool {
    COLOR.load(Ordering::Relaxed)
}

/// How a word reads at a glance: good (passed, completed, ✓), bad (wrong, crash, stopped, ✗) or
/// pending (running, interrupted, within noise).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tone {
    Good,
    Bad,
    Pending,
    Plain,
}

impl Tone {
    /// The tone of a status or verdict word as ksearch prints them.
    pub fn of(word: &str) -> Tone {
        match word {
            "passed" | "completed" | "faster" | "✓" => Tone::Good,
            "wrong" | "crash" | "error" | "compile_error" | "timeout" | "invalid" | "stopped"
            | "failed" | "slower" | "✗" => Tone::Bad,
            "running" | "interrupted" | "within noise" | "unavailable" | "noisy" => Tone::Pending,
            _ => Tone::Plain,
        }
    }

    fn ansi(self) -> Option<(&'static str, Color)> {
        match self {
            Tone::Good => Some(("32", Color::Green)),
            Tone::Bad => Some(("31", Color::Red)),
            Tone::Pending => Some(("33", Color::Yellow)),
            Tone::Plain => None,
        }
    }
}

/// `text` coloured by `tone` when colour is on.
pub fn paint(text: &str, tone: Tone) -> String {
    match tone.ansi() {
        Some((code, _)) if color_on() => format!("\x1b[{code}m{text}\x1b[0m"),
        _ => text.to_string(),
    }
}

/// A table cell holding a status word, coloured by its tone when colour is on.
fn status_cell(word: &str) -> Cell {
    let cell = Cell::new(word);
    match Tone::of(word).ansi() {
        Some((_, c)) if color_on() => cell.fg(c),
        _ => cell,
    }
}

fn table(header: &[&str]) -> Table {
    let mut t = Table::new();
    // On a terminal, columns wrap to its width; piped output is left whole for scripts.
    t.load_preset(UTF8_FULL_CONDENSED)
        .set_content_arrangement(comfy_table::ContentArrangement::Dynamic)
        .set_header(header.to_vec());
    if color_on() {
        // `--color always` colours piped output too.
        t.enforce_styling();
    }
    t
}

/// Per-workload results of one candidate, with every baseline.
pub fn workloads_table(results: &[WorkloadResult]) -> String {
    let baselines: std::collections::BTreeSet<&String> =
        results.iter().flat_map(|r| r.baselines.keys()).collect();
    let mut header = vec![
        "workload",
        "status",
        "median",
        "± IQR",
        "fastest",
        "max rel err",
        "% roofline",
    ];
    let names: Vec<String> = baselines.iter().map(|b| format!("vs {b}")).collect();
    header.extend(names.iter().map(String::as_str));
    let mut t = table(&header);
    for r in results {
        let mut row = vec![
            r.workload.clone(),
            r.status.name().to_string(),
            fmt_time(r.median_s()),
            format!(
                "{}{}",
                fmt_time(r.timing.as_ref().map(|t| t.iqr_s)),
                if r.timing.as_ref().is_some_and(|t| t.noisy) {
                    " noisy"
                } else {
                    ""
                }
            ),
            fmt_time(r.timing.as_ref().map(|t| t.min_s)),
            r.max_rel
                .map(|e| format!("{e:.1e}"))
                .unwrap_or_else(|| "–".into()),
            r.roofline
                .as_ref()
                .map(|f| {
                    format!(
                        "{:.1}%{}",
                        f.fraction * 100.0,
                        if f.beats_roofline { " (!)" } else { "" }
                    )
                })
                .unwrap_or_else(|| "–".into()),
        ];
        for b in &baselines {
            row.push(fmt_x(
                r.baselines
                    .get(*b)
                    .and_then(|bt| Some(bt.median_s / r.median_s()?)),
            ));
        }
        let mut cells: Vec<Cell> = row.into_iter().map(Cell::new).collect();
        cells[1] = status_cell(r.status.name());
        t.add_row(cells);
    }
    let mut out = t.to_string();
    let compared: Vec<String> = results
        .iter()
        .filter_map(|r| {
            let c = r.comparison.as_ref()?;
            Some(format!(
                "{} {} ({:.3}x, {} rounds)",
                r.workload,
                c.verdict.verdict.name(),
                c.verdict.speedup,
                c.verdict.rounds
            ))
        })
        .collect();
    if let Some(c) = results.iter().find_map(|r| r.comparison.as_ref()) {
        out.push_str(&format!(
            "\ntimed side by side with {}: {}",
            c.incumbent,
            compared.join("; ")
        ));
    }
    // One message once, with every workload it came from (a compile error is the same on each).
    let mut messages: Vec<(Vec<&str>, &str)> = Vec::new();
    for r in results.iter().filter(|r| {
        !r.message.is_empty()
            && (r.status != crate::eval::Status::Passed
                || r.roofline.as_ref().is_some_and(|f| f.beats_roofline))
    }) {
        match messages.iter_mut().find(|(_, m)| *m == r.message) {
            Some((names, _)) => names.push(&r.workload),
            None => messages.push((vec![&r.workload], &r.message)),
        }
    }
    for (names, m) in messages {
        out.push_str(&format!("\n{}: {}", names.join(", "), first_lines(m, 12)));
    }
    // A baseline not timed (its library missing here, or outputs that are not the task's) is said once, with why.
    let unavailable: std::collections::BTreeMap<&String, &String> = results
        .iter()
        .flat_map(|r| r.baselines_unavailable.iter())
        .collect();
    for (name, why) in unavailable {
        out.push_str(&format!(
            "\nbaseline {name} not timed: {}",
            first_lines(why, 2)
        ));
    }
    out
}

fn first_lines(s: &str, n: usize) -> String {
    let lines: Vec<&str> = s.lines().collect();
    if lines.len() <= n {
        s.trim_end().to_string()
    } else {
        format!(
            "{}\n  … ({} more lines)",
            lines[..n].join("\n"),
            lines.len() - n
        )
    }
}

pub fn run_summary(result: &RunResult) -> String {
    let mut out = String::new();
    // LLM strategies spend rounds (tuning apart); `tune` spends evaluations.
    let spent = match result.rounds {
        Some(r) => format!(
            "rounds {r}/{}  evaluations {}{}",
            result.budget,
            result.evaluations,
            result
                .tuning_evaluations
                .map(|t| format!(" ({t} tuning)"))
                .unwrap_or_default()
        ),
        None => format!("evaluations {}/{}", result.evaluations, result.budget),
    };
    let status = result.status.as_str();
    out.push_str(&format!(
        "run {}  task {}  target {}  strategy {}  {spent}  status {}\n",
        result.run_id,
        result.task,
        result.target,
        result.strategy,
        paint(status, Tone::of(status)),
    ));
    if result.status == RunStatus::Stopped {
        // Said first: a best candidate below does not mean the search did its job.
        out.push_str(&format!(
            "{} before its budget: {} (the best below is what the run had by then; `ksearch resume {}` continues it)\n",
            paint("STOPPED", Tone::Bad),
            result.stopped.as_deref().unwrap_or("?"),
            result.run_id
        ));
    } else if let Some(why) = &result.stopped {
        out.push_str(&format!("ended: {why}\n"));
    }
    if result.held_out_checks > 0 {
        out.push_str(&format!(
            "held-out workloads: scored on {} cycle best(s) during the search and shown to the model (a \
             validation set, not unseen shapes; `--held-out-evidence final` keeps them unseen)\n",
            result.held_out_checks
        ));
    }
    let hw = &result.hardware;
    if let Some(name) = &hw.name {
        let cores = hw.cores.map(|c| format!("{c} cores; ")).unwrap_or_default();
        out.push_str(&format!(
            "measured on {name} ({cores}peak {:.1} GB/s, {:.1} GFLOP/s measured)\n",
            hw.peak_bandwidth_gbs.unwrap_or(0.0),
            hw.peak_gflops.unwrap_or(0.0)
        ));
    }
    if !result.devices.is_empty() {
        out.push_str(&format!(
            "evaluated on {} devices at once ({}), one evaluation at a time on each\n",
            result.devices.len(),
            result.devices.join(", ")
        ));
    }
    match &result.best {
        Some(best) => {
            let mut t = table(&[
                "best candidate",
                "params",
                "speedup vs seed",
                "speedup vs baseline",
                "held-out",
            ]);
            t.add_row(vec![
                format!("{} ({})", best.candidate, best.name),
                fmt_params(&best.params),
                fmt_x(best.speedup_vs_seed),
                fmt_x(best.speedup_vs_baseline),
                if best.held_out_passed {
                    "passed".into()
                } else {
                    "FAILED".into()
                },
            ]);
            out.push_str(&t.to_string());
            out.push('\n');
            let mut w = table(&[
                "workload",
                "median",
                "± IQR",
                "% roofline",
                "baselines (median)",
            ]);
            for r in &best.workloads {
                w.add_row(vec![
                    r.workload.clone(),
                    fmt_time(r.median_s),
                    fmt_time(r.iqr_s),
                    r.roofline_fraction
                        .map(|f| format!("{:.1}%", f * 100.0))
                        .unwrap_or_else(|| "–".into()),
                    r.baselines
                        .iter()
                        .map(|(k, v)| format!("{k} {}", fmt_time(Some(*v))))
                        .collect::<Vec<_>>()
                        .join(", "),
                ]);
            }
            out.push_str(&w.to_string());
            out.push('\n');
        }
        None => {
            out.push_str("no candidate passed every feedback workload\n");
            if let Some(f) = result.seed.as_ref().and_then(|s| s.failure.as_deref()) {
                out.push_str(&format!("seed: {f}\n"));
            }
        }
    }
    out
}

/// The runs, one line each; `in_flight` (by run) what a running or interrupted run has in flight, shown in
/// a column of its own when any has something.
pub fn runs_table(
    runs: &[RunRow],
    in_flight: &std::collections::BTreeMap<String, crate::search::InFlight>,
) -> String {
    let mut head = vec![
        "run",
        "task",
        "target",
        "strategy",
        "status",
        "spent/budget",
        "best speedup vs seed",
    ];
    let column = in_flight.values().any(|f| !f.is_empty());
    if column {
        head.push("in flight");
    }
    let mut t = table(&head);
    for r in runs {
        t.add_row(vec![
            Cell::new(&r.run_id),
            Cell::new(&r.task),
            Cell::new(&r.target),
            Cell::new(&r.strategy),
            status_cell(r.status.as_str()),
            Cell::new(match r.result.as_ref().and_then(|x| x.rounds) {
                Some(n) => format!("{n}/{} rounds", r.budget),
                None => format!("{}/{}", r.evaluations, r.budget),
            }),
            Cell::new(fmt_x(
                r.result
                    .as_ref()
                    .and_then(|x| x.best.as_ref())
                    .and_then(|b| b.speedup_vs_seed),
            )),
        ]);
        if column {
            let cells = t.row_count() - 1;
            if let Some(row) = t.row_mut(cells) {
                row.add_cell(Cell::new(
                    in_flight
                        .get(&r.run_id)
                        .map(crate::search::InFlight::describe)
                        .unwrap_or_default(),
                ));
            }
        }
    }
    t.to_string()
}

pub fn tasks_table(rows: &[Value]) -> String {
    let mut t = table(&[
        "task",
        "targets",
        "workloads (held out)",
        "baselines",
        "description",
    ]);
    for r in rows {
        let list = |k: &str| {
            r[k].as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|v| v.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                })
                .unwrap_or_default()
        };
        t.add_row(vec![
            r["name"].as_str().unwrap_or("").to_string(),
            list("targets"),
            format!("{} ({})", r["workloads"], r["held_out"]),
            list("baselines"),
            r["description"].as_str().unwrap_or("").to_string(),
        ]);
    }
    t.to_string()
}

/// The world model as an indented tree: status, action, measured time, rating.
pub fn tree_text(tree: &Value) -> String {
    let nodes = tree["nodes"].as_array().cloned().unwrap_or_default();
    let mut out = format!("{}\n", tree["kernel_summary"].as_str().unwrap_or(""));
    fn walk(nodes: &[Value], id: &str, depth: usize, out: &mut String) {
        for n in nodes.iter().filter(|n| n["parent_id"].as_str() == Some(id)) {
            let title = n["action"]["title"]
                .as_str()
                .unwrap_or(n["choice"].as_str().unwrap_or(""));
            let sol = n["solution"]["cost_s"]
                .as_f64()
                .map(|c| format!(" [{}]", fmt_time(Some(c))))
                .unwrap_or_default();
            let mark = match n["status"].as_str() {
                Some("solved") => "✓",
                Some("too_hard") => "✗",
                _ if n["frontier"] == true => "→",
                _ => "·",
            };
            let mark = paint(mark, Tone::of(mark));
            let busy = if n["in_flight"] == true {
                " — its cycle is in flight"
            } else {
                ""
            };
            out.push_str(&format!(
                "{}{mark} {} {title}{sol} (rating {:.0}, priority {}){busy}\n",
                "  ".repeat(depth),
                n["node_id"].as_str().unwrap_or("?"),
                n["overall_rating_0_to_10"].as_f64().unwrap_or(0.0),
                n["action"]["score_0_to_1"]
                    .as_f64()
                    .map(|p| format!("{p:.2}"))
                    .unwrap_or_else(|| "–".into()),
            ));
            walk(nodes, n["node_id"].as_str().unwrap_or(""), depth + 1, out);
        }
    }
    let root = nodes
        .iter()
        .find(|n| n["node_id"] == "root")
        .and_then(|n| n["choice"].as_str())
        .filter(|c| *c != "seed")
        .unwrap_or("the seed");
    out.push_str(&format!("root ({root})\n"));
    walk(&nodes, "root", 1, &mut out);
    out
}

/// `ksearch compare`: the two runs, then per workload each best's time and B's speedup over A.
pub fn compare_table(v: &Value) -> String {
    let mut out = String::new();
    for k in ["a", "b"] {
        let r = &v[k];
        out.push_str(&format!(
            "{}: {}  {} / {} / {}  {}  best {}  {} vs its seed\n",
            k.to_uppercase(),
            r["run_id"].as_str().unwrap_or("?"),
            r["task"].as_str().unwrap_or("?"),
            r["target"].as_str().unwrap_or("?"),
            r["strategy"].as_str().unwrap_or("?"),
            r["status"].as_str().unwrap_or("?"),
            r["best"].as_str().unwrap_or("–"),
            fmt_x(r["speedup_vs_seed"].as_f64()),
        ));
    }
    let mut t = table(&["workload", "A", "B", "B over A"]);
    for w in v["workloads"].as_array().into_iter().flatten() {
        t.add_row(vec![
            w["workload"].as_str().unwrap_or("?").to_string(),
            fmt_time(w["a_s"].as_f64()),
            fmt_time(w["b_s"].as_f64()),
            fmt_x(w["b_speedup_over_a"].as_f64()),
        ]);
    }
    out.push_str(&t.to_string());
    out
}
