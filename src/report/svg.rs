//! Charts and the world-model tree as inline SVG, for the HTML report: drawn here, once, so the page
//! needs no script to show them and prints as it looks. Every text that reaches the SVG is escaped
//! (node titles and candidate names are written by an LLM: an attacker, as far as the page is concerned).

use std::collections::BTreeMap;
use std::fmt::Write;

/// `s` safe inside SVG or HTML text and attribute values.
pub fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// At most `n` characters of `s`, with an ellipsis when cut.
fn cut(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        format!("{}…", s.chars().take(n - 1).collect::<String>())
    }
}

const W: f64 = 720.0;
const H: f64 = 260.0;
const LEFT: f64 = 72.0;
const RIGHT: f64 = 16.0;
const TOP: f64 = 16.0;
const BOTTOM: f64 = 40.0;

/// How a series is drawn.
#[derive(Clone, Copy, PartialEq)]
pub enum Style {
    /// One dot per point.
    Dots,
    /// A line holding each value until the next point (a best-so-far curve).
    Steps,
}

pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
    pub style: Style,
    /// A CSS class (its colour).
    pub class: &'static str,
}

/// A chart of series over a common x axis; y on a log scale when `log_y`.
pub struct Chart {
    pub x_label: String,
    pub y_label: String,
    pub log_y: bool,
    pub x_fmt: fn(f64) -> String,
    pub y_fmt: fn(f64) -> String,
    pub series: Vec<Series>,
    /// Vertical spreads (x, low, high), drawn as whiskers.
    pub whiskers: Vec<(f64, f64, f64)>,
    /// x positions of points that have no y (failed evaluations), marked on the axis.
    pub marks: Vec<f64>,
}

/// A linear or log axis over [lo, hi].
struct Axis {
    lo: f64,
    hi: f64,
    log: bool,
    from: f64,
    to: f64,
}

impl Axis {
    fn new(values: impl Iterator<Item = f64>, log: bool, from: f64, to: f64) -> Axis {
        let mut lo = f64::INFINITY;
        let mut hi = f64::NEG_INFINITY;
        for v in values.filter(|v| v.is_finite() && (!log || *v > 0.0)) {
            lo = lo.min(v);
            hi = hi.max(v);
        }
        if !lo.is_finite() {
            (lo, hi) = (if log { 1.0 } else { 0.0 }, if log { 10.0 } else { 1.0 });
        }
        if log {
            // Whole decades around the data, so ticks land on round values.
            lo = 10f64.powf(lo.log10().floor());
            hi = 10f64.powf(hi.log10().ceil().max(lo.log10() + 1.0));
        } else if (hi - lo).abs() < f64::EPSILON {
            hi = lo + 1.0;
        }
        Axis {
            lo,
            hi,
            log,
            from,
            to,
        }
    }

    fn at(&self, v: f64) -> f64 {
        let t = if self.log {
            (v.max(self.lo).log10() - self.lo.log10()) / (self.hi.log10() - self.lo.log10())
        } else {
            (v - self.lo) / (self.hi - self.lo)
        };
        self.from + t.clamp(0.0, 1.0) * (self.to - self.from)
    }

    fn ticks(&self) -> Vec<f64> {
        if self.log {
            let (a, b) = (
                self.lo.log10().round() as i32,
                self.hi.log10().round() as i32,
            );
            (a..=b).map(|e| 10f64.powi(e)).collect()
        } else {
            (0..=4)
                .map(|i| self.lo + (self.hi - self.lo) * f64::from(i) / 4.0)
                .collect()
        }
    }
}

impl Chart {
    pub fn svg(&self) -> String {
        let xs = self
            .series
            .iter()
            .flat_map(|s| s.points.iter().map(|p| p.0))
            .chain(self.marks.iter().copied());
        let x = Axis::new(xs, false, LEFT, W - RIGHT);
        let ys = self
            .series
            .iter()
            .flat_map(|s| s.points.iter().map(|p| p.1))
            .chain(self.whiskers.iter().flat_map(|w| [w.1, w.2]));
        let y = Axis::new(ys, self.log_y, H - BOTTOM, TOP);
        let mut s = format!(
            r#"<svg class="chart" viewBox="0 0 {W} {H}" role="img" xmlns="http://www.w3.org/2000/svg">"#
        );
        y_grid(&mut s, &y, self.y_fmt);
        // A short axis (three evaluations: ticks at 0, 0.75, 1.5, ...) prints rounded labels ("1" for 0.75):
        // each label is drawn where its value lies, once.
        let mut drawn = Vec::new();
        for t in x.ticks() {
            let label = (self.x_fmt)(t);
            let at = match label.parse::<f64>() {
                Ok(v)
                    if v >= x.lo - 1e-9 * x.hi.abs().max(1.0)
                        && v <= x.hi * (1.0 + 1e-9) + 1e-12 =>
                {
                    v
                }
                Ok(_) => continue,
                Err(_) => t,
            };
            if drawn.contains(&label) {
                continue;
            }
            let _ = write!(
                s,
                r#"<text class="tick" x="{:.1}" y="{}" text-anchor="middle">{}</text>"#,
                x.at(at),
                H - BOTTOM + 16.0,
                esc(&label)
            );
            drawn.push(label);
        }
        let _ = write!(
            s,
            r#"<line class="axis" x1="{LEFT}" x2="{}" y1="{b}" y2="{b}"/><line class="axis" x1="{LEFT}" x2="{LEFT}" y1="{TOP}" y2="{b}"/>"#,
            W - RIGHT,
            b = H - BOTTOM
        );
        let _ = write!(
            s,
            r#"<text class="label" x="{}" y="{}" text-anchor="middle">{}</text><text class="label" x="14" y="{}" transform="rotate(-90 14 {})" text-anchor="middle">{}</text>"#,
            (LEFT + W - RIGHT) / 2.0,
            H - 6.0,
            esc(&self.x_label),
            (TOP + H - BOTTOM) / 2.0,
            (TOP + H - BOTTOM) / 2.0,
            esc(&self.y_label)
        );
        for &(wx, lo, hi) in &self.whiskers {
            let px = x.at(wx);
            let _ = write!(
                s,
                r#"<line class="whisker" x1="{px:.1}" x2="{px:.1}" y1="{:.1}" y2="{:.1}"/>"#,
                y.at(lo),
                y.at(hi)
            );
        }
        for &m in &self.marks {
            let (px, py) = (x.at(m), H - BOTTOM - 4.0);
            let _ = write!(
                s,
                r#"<text class="fail" x="{px:.1}" y="{py:.1}" text-anchor="middle">×</text>"#
            );
        }
        for se in &self.series {
            match se.style {
                Style::Dots => {
                    for &(px, py) in &se.points {
                        let _ = write!(
                            s,
                            r#"<circle class="{}" cx="{:.1}" cy="{:.1}" r="3.5"><title>{}</title></circle>"#,
                            se.class,
                            x.at(px),
                            y.at(py),
                            esc(&format!("{}: {}", se.name, (self.y_fmt)(py)))
                        );
                    }
                }
                Style::Steps => {
                    let mut d = String::new();
                    for (i, &(px, py)) in se.points.iter().enumerate() {
                        let (cx, cy) = (x.at(px), y.at(py));
                        if i == 0 {
                            let _ = write!(d, "M{cx:.1},{cy:.1}");
                        } else {
                            let _ = write!(d, " H{cx:.1} V{cy:.1}");
                        }
                    }
                    if let Some(&(_, py)) = se.points.last() {
                        let _ = write!(d, " H{:.1} V{:.1}", W - RIGHT, y.at(py));
                    }
                    let _ = write!(
                        s,
                        r#"<path class="{} steps" fill="none" d="{d}"><title>{}</title></path>"#,
                        se.class,
                        esc(&se.name)
                    );
                }
            }
        }
        s.push_str(&legend(
            &self
                .series
                .iter()
                .map(|se| (se.name.as_str(), se.class))
                .collect::<Vec<_>>(),
        ));
        s.push_str("</svg>");
        s
    }
}

/// The y axis's grid lines and their labels.
fn y_grid(s: &mut String, y: &Axis, fmt: impl Fn(f64) -> String) {
    for t in y.ticks() {
        let py = y.at(t);
        let _ = write!(
            s,
            r#"<line class="grid" x1="{LEFT}" x2="{}" y1="{py:.1}" y2="{py:.1}"/><text class="tick" x="{}" y="{:.1}" text-anchor="end">{}</text>"#,
            W - RIGHT,
            LEFT - 6.0,
            py + 4.0,
            esc(&fmt(t))
        );
    }
}

/// A legend in the chart's top right corner.
fn legend(items: &[(&str, &str)]) -> String {
    let mut s = String::new();
    for (i, (name, class)) in items.iter().enumerate() {
        let y = TOP + 4.0 + 16.0 * i as f64;
        let _ = write!(
            s,
            r#"<rect class="{class}" x="{}" y="{y:.1}" width="10" height="10"/><text class="tick" x="{}" y="{:.1}">{}</text>"#,
            W - RIGHT - 200.0,
            W - RIGHT - 184.0,
            y + 9.0,
            esc(name)
        );
    }
    s
}

/// Grouped horizontal bars: one group per row label, one bar per member (same members in every group),
/// on a log scale when `log`; `reference` draws a vertical line at that value (the roofline's 1.0).
pub struct Bars {
    pub groups: Vec<(String, Vec<(String, f64)>)>,
    pub log: bool,
    pub fmt: fn(f64) -> String,
    pub x_label: String,
    pub reference: Option<f64>,
}

const BAR: f64 = 12.0;

impl Bars {
    pub fn svg(&self) -> String {
        let members: Vec<String> = {
            let mut m: Vec<String> = Vec::new();
            for (_, bars) in &self.groups {
                for (n, _) in bars {
                    if !m.contains(n) {
                        m.push(n.clone());
                    }
                }
            }
            m
        };
        let classes: BTreeMap<&str, String> = members
            .iter()
            .enumerate()
            .map(|(i, m)| (m.as_str(), format!("c{}", i % 6)))
            .collect();
        let left = 160.0;
        let group_h = BAR * members.len().max(1) as f64 + 10.0;
        let height =
            TOP + group_h * self.groups.len() as f64 + BOTTOM + 16.0 * members.len() as f64;
        let values = self
            .groups
            .iter()
            .flat_map(|g| g.1.iter().map(|b| b.1))
            .chain(self.reference);
        let mut x = Axis::new(values, self.log, left, W - RIGHT);
        if !self.log {
            x.lo = x.lo.min(0.0);
        }
        let mut s = format!(
            r#"<svg class="chart" viewBox="0 0 {W} {height:.0}" role="img" xmlns="http://www.w3.org/2000/svg">"#
        );
        let base = TOP + group_h * self.groups.len() as f64;
        for t in x.ticks() {
            let px = x.at(t);
            let _ = write!(
                s,
                r#"<line class="grid" x1="{px:.1}" x2="{px:.1}" y1="{TOP}" y2="{base:.1}"/><text class="tick" x="{px:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
                base + 14.0,
                esc(&(self.fmt)(t))
            );
        }
        for (g, (label, bars)) in self.groups.iter().enumerate() {
            let gy = TOP + group_h * g as f64;
            let _ = write!(
                s,
                r#"<text class="tick" x="{}" y="{:.1}" text-anchor="end">{}</text>"#,
                left - 6.0,
                gy + group_h / 2.0,
                esc(&cut(label, 26))
            );
            for (name, v) in bars {
                let i = members.iter().position(|m| m == name).unwrap_or(0);
                let by = gy + BAR * i as f64;
                let x0 = x.at(if self.log { x.lo } else { 0.0 });
                let _ = write!(
                    s,
                    r#"<rect class="{}" x="{x0:.1}" y="{by:.1}" width="{:.1}" height="{:.1}"><title>{}</title></rect>"#,
                    classes[name.as_str()],
                    (x.at(*v) - x0).max(1.0),
                    BAR - 2.0,
                    esc(&format!("{label} · {name}: {}", (self.fmt)(*v)))
                );
            }
        }
        if let Some(r) = self.reference {
            let px = x.at(r);
            let _ = write!(
                s,
                r#"<line class="reference" x1="{px:.1}" x2="{px:.1}" y1="{TOP}" y2="{base:.1}"/>"#
            );
        }
        let _ = write!(
            s,
            r#"<text class="label" x="{}" y="{:.1}" text-anchor="middle">{}</text>"#,
            (left + W - RIGHT) / 2.0,
            base + 30.0,
            esc(&self.x_label)
        );
        for (i, m) in members.iter().enumerate() {
            let y = base + 40.0 + 16.0 * i as f64;
            let _ = write!(
                s,
                r#"<rect class="{}" x="{left}" y="{y:.1}" width="10" height="10"/><text class="tick" x="{}" y="{:.1}">{}</text>"#,
                classes[m.as_str()],
                left + 16.0,
                y + 9.0,
                esc(m)
            );
        }
        s.push_str("</svg>");
        s
    }
}

/// One node of a tree to draw.
pub struct TreeNode {
    pub id: String,
    pub parent: Option<String>,
    /// Shown in the box.
    pub label: String,
    /// Shown on hover.
    pub title: String,
    /// A CSS class (its colour).
    pub class: String,
}

const NODE_W: f64 = 120.0;
const NODE_H: f64 = 34.0;
const GAP_X: f64 = 12.0;
const GAP_Y: f64 = 36.0;

/// The tree top-down: leaves side by side in depth-first order, each parent centred over its children;
/// a node whose parent is not among `nodes` hangs under a root drawn for it.
pub fn tree(nodes: &[TreeNode], root_label: &str) -> String {
    let ids: Vec<&str> = nodes.iter().map(|n| n.id.as_str()).collect();
    let mut children: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (i, n) in nodes.iter().enumerate() {
        let p = n
            .parent
            .as_deref()
            .filter(|p| ids.contains(p) && *p != n.id)
            .unwrap_or("");
        children.entry(p).or_default().push(i);
    }
    // (x slot, depth) of each node; the drawn root is slot `root_x`, depth 0.
    let mut at: BTreeMap<usize, (f64, usize)> = BTreeMap::new();
    let mut next = 0.0;
    fn place(
        i: usize,
        depth: usize,
        nodes: &[TreeNode],
        children: &BTreeMap<&str, Vec<usize>>,
        at: &mut BTreeMap<usize, (f64, usize)>,
        next: &mut f64,
    ) -> f64 {
        let kids = children
            .get(nodes[i].id.as_str())
            .cloned()
            .unwrap_or_default();
        // A cycle in the parents (a malformed tree) is drawn once, not followed for ever.
        let kids: Vec<usize> = kids.into_iter().filter(|k| !at.contains_key(k)).collect();
        at.insert(i, (0.0, depth));
        let x = if kids.is_empty() {
            *next += 1.0;
            *next - 1.0
        } else {
            let xs: Vec<f64> = kids
                .iter()
                .map(|&k| place(k, depth + 1, nodes, children, at, next))
                .collect();
            (xs[0] + xs[xs.len() - 1]) / 2.0
        };
        at.insert(i, (x, depth));
        x
    }
    let tops = children.get("").cloned().unwrap_or_default();
    let xs: Vec<f64> = tops
        .iter()
        .map(|&t| place(t, 1, nodes, &children, &mut at, &mut next))
        .collect();
    let root_x = match xs.as_slice() {
        [] => 0.0,
        [a, .., b] => (a + b) / 2.0,
        [a] => *a,
    };
    let slots = next.max(1.0);
    let depth = at.values().map(|a| a.1).max().unwrap_or(0) + 1;
    let width = slots * (NODE_W + GAP_X) + GAP_X;
    let height = depth as f64 * (NODE_H + GAP_Y) + GAP_Y;
    let pos = |x: f64, d: usize| {
        (
            GAP_X + x * (NODE_W + GAP_X),
            GAP_Y / 2.0 + d as f64 * (NODE_H + GAP_Y),
        )
    };
    let mut s = format!(
        r#"<svg class="tree" viewBox="0 0 {width:.0} {height:.0}" width="{width:.0}" role="img" xmlns="http://www.w3.org/2000/svg">"#
    );
    let (rx, ry) = pos(root_x, 0);
    for (&i, &(x, d)) in &at {
        let (px, py) = pos(x, d);
        let (qx, qy) = match nodes[i]
            .parent
            .as_deref()
            .and_then(|p| ids.iter().position(|q| *q == p))
        {
            Some(p) if at.contains_key(&p) && p != i => pos(at[&p].0, at[&p].1),
            _ => (rx, ry),
        };
        let _ = write!(
            s,
            r#"<path class="edge" fill="none" d="M{:.1},{:.1} V{:.1} H{:.1} V{:.1}"/>"#,
            qx + NODE_W / 2.0,
            qy + NODE_H,
            py - GAP_Y / 2.0,
            px + NODE_W / 2.0,
            py
        );
    }
    let mut node = |x: f64, y: f64, label: &str, title: &str, class: &str| {
        let _ = write!(
            s,
            r#"<g class="node {}"><title>{}</title><rect x="{x:.1}" y="{y:.1}" width="{NODE_W}" height="{NODE_H}" rx="5"/><text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text></g>"#,
            esc(class),
            esc(title),
            x + NODE_W / 2.0,
            y + NODE_H / 2.0 + 4.0,
            esc(&cut(label, 18))
        );
    };
    node(rx, ry, root_label, root_label, "node-root");
    for (&i, &(x, d)) in &at {
        let (px, py) = pos(x, d);
        let n = &nodes[i];
        node(px, py, &n.label, &n.title, &n.class);
    }
    s.push_str("</svg>");
    s
}

/// One measured point of a roofline chart: a kernel on a workload.
pub struct RooflinePoint {
    /// The series it belongs to (the best candidate, a baseline): its legend entry and colour.
    pub series: String,
    pub class: &'static str,
    pub workload: String,
    /// Useful flops per byte moved (the task's roofline formulas).
    pub intensity: f64,
    /// Useful flops per second achieved (flops / median time).
    pub flops_per_s: f64,
}

/// The classic roofline on log-log axes: the measured peaks' ceiling (bandwidth x intensity, capped by
/// compute) and each kernel's achieved rate on each workload, at its arithmetic intensity.
pub struct Roofline {
    /// Measured peaks, bytes/s and flop/s.
    pub bandwidth: f64,
    pub compute: f64,
    pub points: Vec<RooflinePoint>,
}

impl Roofline {
    /// The ceiling's rate at intensity `ai`.
    fn ceiling(&self, ai: f64) -> f64 {
        (self.bandwidth * ai).min(self.compute)
    }

    pub fn svg(&self) -> String {
        let ridge = self.compute / self.bandwidth;
        let xs = self.points.iter().map(|p| p.intensity);
        let x = Axis::new(xs.chain([ridge / 4.0, ridge * 4.0]), true, LEFT, W - RIGHT);
        let ys = self.points.iter().map(|p| p.flops_per_s);
        let y = Axis::new(
            ys.chain([self.compute, self.ceiling(x.lo)]),
            true,
            H - BOTTOM,
            TOP,
        );
        let rate = |v: f64| {
            if v >= 1e12 {
                format!("{:.0} TFLOP/s", v / 1e12)
            } else {
                format!("{:.0} GFLOP/s", v / 1e9)
            }
        };
        let mut s = format!(
            r#"<svg class="chart roofline" viewBox="0 0 {W} {H}" role="img" xmlns="http://www.w3.org/2000/svg">"#
        );
        y_grid(&mut s, &y, rate);
        for t in x.ticks() {
            let _ = write!(
                s,
                r#"<text class="tick" x="{:.1}" y="{}" text-anchor="middle">{}</text>"#,
                x.at(t),
                H - BOTTOM + 16.0,
                esc(&format!("{t}"))
            );
        }
        let b = H - BOTTOM;
        let _ = write!(
            s,
            r#"<line class="axis" x1="{LEFT}" x2="{}" y1="{b}" y2="{b}"/><line class="axis" x1="{LEFT}" x2="{LEFT}" y1="{TOP}" y2="{b}"/><text class="label" x="{}" y="{}" text-anchor="middle">arithmetic intensity (flop/byte, log)</text><text class="label" x="14" y="{m}" transform="rotate(-90 14 {m})" text-anchor="middle">achieved (log)</text>"#,
            W - RIGHT,
            (LEFT + W - RIGHT) / 2.0,
            H - 6.0,
            m = (TOP + b) / 2.0
        );
        // Straight on log-log axes on each side of the ridge: three points draw it.
        let corners: Vec<f64> = [x.lo, ridge.clamp(x.lo, x.hi), x.hi].into();
        let d: Vec<String> = corners
            .iter()
            .map(|&ai| format!("{:.1},{:.1}", x.at(ai), y.at(self.ceiling(ai))))
            .collect();
        let _ = write!(
            s,
            r#"<polyline class="reference ceiling" fill="none" points="{}"><title>{}</title></polyline>"#,
            d.join(" "),
            esc(&format!(
                "measured peaks: {:.1} GB/s, {}",
                self.bandwidth / 1e9,
                rate(self.compute)
            ))
        );
        let mut series: Vec<(&str, &str)> = Vec::new();
        for p in &self.points {
            if !series.iter().any(|(n, _)| *n == p.series) {
                series.push((&p.series, p.class));
            }
            let _ = write!(
                s,
                r#"<circle class="{}" cx="{:.1}" cy="{:.1}" r="3.5"><title>{}</title></circle>"#,
                p.class,
                x.at(p.intensity),
                y.at(p.flops_per_s),
                esc(&format!(
                    "{} on {}: {} at {:.2} flop/byte ({:.0}% of the ceiling there)",
                    p.series,
                    p.workload,
                    rate(p.flops_per_s),
                    p.intensity,
                    100.0 * p.flops_per_s / self.ceiling(p.intensity)
                ))
            );
        }
        s.push_str(&legend(&series));
        s.push_str("</svg>");
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_node_is_drawn_once_under_its_parent_and_text_is_escaped() {
        let n = |id: &str, parent: Option<&str>, label: &str| TreeNode {
            id: id.into(),
            parent: parent.map(str::to_string),
            label: label.into(),
            title: format!("{label} (title)"),
            class: "node-open".into(),
        };
        let nodes = vec![
            n("a", Some("root"), "first"),
            n("b", Some("a"), "<script>alert(1)</script>"),
            n("c", Some("a"), "third"),
            // Nodes no path from the root reaches (a cycle of parents) are left out, not followed.
            n("d", Some("e"), "d"),
            n("e", Some("d"), "e"),
        ];
        let svg = tree(&nodes, "root");
        assert_eq!(
            svg.matches("<g class=\"node ").count(),
            1 + nodes.len() - 2,
            "{svg}"
        );
        assert!(!svg.contains("<script>"), "{svg}");
        assert!(svg.contains("&lt;script&gt;"));
    }

    #[test]
    fn the_roofline_ceiling_bends_at_the_ridge_and_every_point_is_drawn() {
        let p = |series: &str, class, workload: &str, intensity, flops_per_s| RooflinePoint {
            series: series.into(),
            class,
            workload: workload.into(),
            intensity,
            flops_per_s,
        };
        let r = Roofline {
            bandwidth: 100e9,
            compute: 1e12,
            points: vec![
                p("best", "c0", "<w1>", 0.5, 40e9),
                p("best", "c0", "w2", 64.0, 600e9),
                p("numpy", "c1", "w2", 64.0, 300e9),
            ],
        };
        assert_eq!(r.ceiling(1.0), 100e9);
        assert_eq!(r.ceiling(100.0), 1e12);
        let svg = r.svg();
        assert_eq!(svg.matches("<circle ").count(), 3);
        // One legend entry per series, the ceiling as three corners (below the ridge, at it, above it).
        assert_eq!(svg.matches("<rect ").count(), 2);
        let corners = svg
            .split("points=\"")
            .nth(1)
            .unwrap()
            .split('"')
            .next()
            .unwrap();
        assert_eq!(corners.split(' ').count(), 3);
        assert!(svg.contains("&lt;w1&gt;") && !svg.contains("<w1>"));
        assert!(svg.contains("(80% of the ceiling there)"), "{svg}");
    }

    #[test]
    fn axis_labels_are_drawn_where_their_values_lie() {
        let chart = Chart {
            x_label: "evaluation".into(),
            y_label: "time".into(),
            log_y: true,
            x_fmt: |x| format!("{x:.0}"),
            y_fmt: |y| format!("{y}"),
            series: vec![Series {
                name: "s".into(),
                points: vec![(0.0, 1e-3), (2.0, 5e-4), (3.0, 2e-4)],
                style: Style::Dots,
                class: "c0",
            }],
            whiskers: Vec::new(),
            marks: Vec::new(),
        };
        let svg = chart.svg();
        let x_axis = Axis::new([0.0, 3.0].into_iter(), false, LEFT, W - RIGHT);
        let labels: Vec<(String, String)> = svg
            .split(r#"<text class="tick" x=""#)
            .skip(1)
            .filter(|t| t.contains(&format!(r#"y="{}""#, H - BOTTOM + 16.0)))
            .map(|t| {
                let x = t.split('"').next().unwrap().to_string();
                let label = t
                    .split('>')
                    .nth(1)
                    .unwrap()
                    .split('<')
                    .next()
                    .unwrap()
                    .to_string();
                (label, x)
            })
            .collect();
        let want: Vec<(String, String)> = (0..=3)
            .map(|i| (i.to_string(), format!("{:.1}", x_axis.at(f64::from(i)))))
            .collect();
        assert_eq!(labels, want, "{svg}");
    }

    #[test]
    fn a_log_axis_spans_whole_decades_and_places_values_between_them() {
        let a = Axis::new([2e-6, 3e-4].into_iter(), true, 0.0, 100.0);
        assert_eq!((a.lo, a.hi), (1e-6, 1e-3));
        assert_eq!(a.ticks().len(), 4);
        assert!((a.at(1e-5) - 100.0 / 3.0).abs() < 1e-9);
        let chart = Chart {
            x_label: "evaluation".into(),
            y_label: "time".into(),
            log_y: true,
            x_fmt: |x| format!("{x:.0}"),
            y_fmt: |y| crate::units::fmt_time(Some(y)),
            series: vec![Series {
                name: "best \"so far\"".into(),
                points: vec![(0.0, 1e-3), (1.0, 5e-4)],
                style: Style::Steps,
                class: "best",
            }],
            whiskers: vec![(1.0, 4e-4, 6e-4)],
            marks: vec![2.0],
        };
        let svg = chart.svg();
        assert!(svg.contains("best &quot;so far&quot;"), "{svg}");
        assert_eq!(svg.matches("<path").count(), 1);
    }
}
