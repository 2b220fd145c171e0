//! What `--out DIR` writes and what `compare` reads: `report.md` (every
//! table, the machine, the exact command), `results.json` (tables and every
//! raw sample) and one SVG plot per scenario (median throughput against
//! threads, one line per design, the kernel's among them).

use crate::ministat;
use crate::runner::{median, Series, Table};
use serde_json::{json, Value};
use std::fmt::Write as _;
use std::io;
use std::path::Path;

/// The machine, as one line.
pub fn machine() -> String {
    let cpus = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string())
        })
        .unwrap_or_default();
    format!("{cpus} CPUs ({model})")
}

/// `results.json`'s content.
pub fn results_json(command: &str, all: &[(String, Vec<Table>)]) -> Value {
    let mut scen = serde_json::Map::new();
    for (name, tables) in all {
        let ts: Vec<Value> = tables
            .iter()
            .map(|t| {
                json!({
                    "title": t.title,
                    "columns": t.columns,
                    "rows": t.rows,
                    "series": t.series.iter().map(|s| json!({
                        "design": s.design,
                        "threads": s.threads,
                        "unit": s.unit,
                        "samples": s.samples,
                    })).collect::<Vec<_>>(),
                })
            })
            .collect();
        scen.insert(name.clone(), Value::Array(ts));
    }
    json!({ "machine": machine(), "command": command, "scenarios": scen })
}

/// Writes `report.md`, `results.json` and `<scenario>.svg` for every
/// scenario with series into `dir`.
pub fn write(dir: &Path, command: &str, all: &[(String, Vec<Table>)]) -> io::Result<()> {
    let mut md = format!(
        "# pagecache lab report\n\nMachine: {}\n\nCommand: `{command}`\n\n",
        machine()
    );
    for (name, tables) in all {
        let _ = writeln!(md, "## {name}\n");
        for t in tables {
            let _ = writeln!(md, "```text\n{}```\n", t.render());
        }
        let series: Vec<Series> = tables.iter().flat_map(|t| t.series.clone()).collect();
        if !series.is_empty() {
            let file = format!("{name}.svg");
            std::fs::write(dir.join(&file), svg(name, &series))?;
            let _ = writeln!(md, "![{name}]({file})\n");
        }
    }
    std::fs::write(dir.join("report.md"), md)?;
    let js = serde_json::to_string_pretty(&results_json(command, all)).map_err(io::Error::other)?;
    std::fs::write(dir.join("results.json"), js + "\n")
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// A line plot: x = thread counts (evenly spaced, in order), y = median of
/// each series' samples from 0 to the largest; one coloured line and
/// legend entry per design. Plain SVG (no fonts or scripts needed).
pub fn svg(title: &str, series: &[Series]) -> String {
    const W: f64 = 720.0;
    const H: f64 = 420.0;
    const L: f64 = 80.0; // left margin
    const R: f64 = 230.0; // right margin (legend)
    const T: f64 = 40.0;
    const B: f64 = 50.0;
    const COLORS: [&str; 8] = [
        "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf",
    ];
    let mut threads: Vec<usize> = series.iter().map(|s| s.threads).collect();
    threads.sort_unstable();
    threads.dedup();
    let mut designs: Vec<&str> = Vec::new();
    for s in series {
        if !designs.contains(&s.design.as_str()) {
            designs.push(&s.design);
        }
    }
    let med = |s: &Series| median(&mut s.samples.clone());
    let ymax = series.iter().map(med).fold(0.0f64, f64::max).max(1e-12);
    let x = |t: usize| {
        let k = threads.iter().position(|&v| v == t).unwrap_or(0) as f64;
        let n = (threads.len().max(2) - 1) as f64;
        L + k * (W - L - R) / n
    };
    let y = |v: f64| H - B - v / ymax * (H - T - B);
    let unit = series.first().map(|s| s.unit.as_str()).unwrap_or("");
    let mut o = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{W}\" height=\"{H}\" viewBox=\"0 0 {W} {H}\" font-family=\"sans-serif\" font-size=\"12\">\n\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n\
         <text x=\"{}\" y=\"22\" text-anchor=\"middle\" font-size=\"15\">{}</text>\n",
        (W - R + L) / 2.0,
        esc(title)
    );
    // Axes, ticks and grid.
    let _ = writeln!(
        o,
        "<line x1=\"{L}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"black\"/>\n<line x1=\"{L}\" y1=\"{T}\" x2=\"{L}\" y2=\"{}\" stroke=\"black\"/>",
        H - B,
        W - R,
        H - B,
        H - B
    );
    for k in 0..=4 {
        let v = ymax * k as f64 / 4.0;
        let _ = writeln!(
            o,
            "<line x1=\"{L}\" y1=\"{0:.1}\" x2=\"{1}\" y2=\"{0:.1}\" stroke=\"#ddd\"/><text x=\"{2}\" y=\"{3:.1}\" text-anchor=\"end\">{4}</text>",
            y(v),
            W - R,
            L - 6.0,
            y(v) + 4.0,
            short(v)
        );
    }
    for &t in &threads {
        let _ = writeln!(
            o,
            "<text x=\"{:.1}\" y=\"{}\" text-anchor=\"middle\">{t}</text>",
            x(t),
            H - B + 18.0
        );
    }
    let _ = writeln!(
        o,
        "<text x=\"{:.1}\" y=\"{}\" text-anchor=\"middle\">threads</text>\n<text x=\"16\" y=\"{:.1}\" transform=\"rotate(-90 16 {:.1})\" text-anchor=\"middle\">{} (median)</text>",
        (L + W - R) / 2.0,
        H - 12.0,
        (T + H - B) / 2.0,
        (T + H - B) / 2.0,
        esc(unit)
    );
    for (k, d) in designs.iter().enumerate() {
        let c = COLORS[k % COLORS.len()];
        let mut pts: Vec<(usize, f64)> = series
            .iter()
            .filter(|s| s.design == *d)
            .map(|s| (s.threads, med(s)))
            .collect();
        pts.sort_by_key(|p| p.0);
        let path: Vec<String> = pts
            .iter()
            .map(|&(t, v)| format!("{:.1},{:.1}", x(t), y(v)))
            .collect();
        let dash = if d.contains("kernel") {
            " stroke-dasharray=\"6 4\""
        } else {
            ""
        };
        let _ = writeln!(
            o,
            "<polyline fill=\"none\" stroke=\"{c}\" stroke-width=\"2\"{dash} points=\"{}\"/>",
            path.join(" ")
        );
        for &(t, v) in &pts {
            let _ = writeln!(
                o,
                "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"3\" fill=\"{c}\"/>",
                x(t),
                y(v)
            );
        }
        let ly = T + 10.0 + 20.0 * k as f64;
        let _ = writeln!(
            o,
            "<line x1=\"{0}\" y1=\"{ly}\" x2=\"{1}\" y2=\"{ly}\" stroke=\"{c}\" stroke-width=\"2\"{dash}/><text x=\"{2}\" y=\"{3}\">{4}</text>",
            W - R + 15.0,
            W - R + 40.0,
            W - R + 46.0,
            ly + 4.0,
            esc(d)
        );
    }
    o.push_str("</svg>\n");
    o
}

/// 1234567 -> "1.23M".
fn short(v: f64) -> String {
    if v >= 1e9 {
        format!("{:.2}G", v / 1e9)
    } else if v >= 1e6 {
        format!("{:.2}M", v / 1e6)
    } else if v >= 1e3 {
        format!("{:.2}k", v / 1e3)
    } else {
        format!("{v:.2}")
    }
}

/// Series of a results file, keyed by (scenario, design, threads).
fn series_of(v: &Value) -> Result<Vec<(String, Series)>, String> {
    let scen = v
        .get("scenarios")
        .and_then(Value::as_object)
        .ok_or("no \"scenarios\" object (not a pagecache results.json?)")?;
    let mut out = Vec::new();
    for (name, tables) in scen {
        for t in tables
            .as_array()
            .ok_or(format!("scenario {name}: not a list"))?
        {
            for s in t
                .get("series")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                let design = s.get("design").and_then(Value::as_str);
                let threads = s.get("threads").and_then(Value::as_u64);
                let unit = s.get("unit").and_then(Value::as_str).unwrap_or("");
                let samples: Option<Vec<f64>> = s
                    .get("samples")
                    .and_then(Value::as_array)
                    .map(|a| a.iter().filter_map(Value::as_f64).collect());
                match (design, threads, samples) {
                    (Some(d), Some(t), Some(v)) => {
                        out.push((name.clone(), Series::new(d, t as usize, v, unit)))
                    }
                    _ => {
                        return Err(format!(
                            "scenario {name}: a series lacks design, threads or samples"
                        ))
                    }
                }
            }
        }
    }
    Ok(out)
}

/// Reads a results file, with the path in every error.
pub fn load(path: &Path) -> io::Result<Value> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
    serde_json::from_str(&text).map_err(|e| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{}: not JSON: {e}", path.display()),
        )
    })
}

/// ministat comparisons of every (scenario, design, threads) present in
/// both result files: `a` is "x", `b` is "+".
pub fn compare(a: &Value, a_name: &str, b: &Value, b_name: &str) -> Result<String, String> {
    let sa = series_of(a).map_err(|e| format!("{a_name}: {e}"))?;
    let sb = series_of(b).map_err(|e| format!("{b_name}: {e}"))?;
    let mut out = String::new();
    let mut matched = 0;
    for (scen, x) in &sa {
        let Some((_, y)) = sb
            .iter()
            .find(|(s, y)| s == scen && y.design == x.design && y.threads == x.threads)
        else {
            continue;
        };
        matched += 1;
        let _ = writeln!(
            out,
            "## {scen}: {}, {} threads ({})",
            x.design, x.threads, x.unit
        );
        if x.samples.len() < 2 || y.samples.len() < 2 {
            let _ = writeln!(
                out,
                "too few samples to compare (need 2 each; run with --runs 2 or more)\n"
            );
            continue;
        }
        out.push_str(&ministat::compare(a_name, &x.samples, b_name, &y.samples));
        out.push('\n');
    }
    if matched == 0 {
        return Err(format!(
            "{a_name} and {b_name} have no scenario/design/thread count in common"
        ));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Vec<(String, Vec<Table>)> {
        let mut t = Table::new("t", &["design", "threads"]);
        t.row(vec!["a".into(), "1".into()]);
        t.series
            .push(Series::new("a", 1, vec![10.0, 11.0, 12.0], "ops/s"));
        t.series
            .push(Series::new("a", 2, vec![20.0, 21.0, 22.0], "ops/s"));
        t.series
            .push(Series::new("kernel <x>", 1, vec![5.0, 5.0, 6.0], "ops/s"));
        vec![("demo".to_string(), vec![t])]
    }

    #[test]
    fn svg_has_one_line_per_design_and_escapes_names() {
        let s = sample();
        let svg = svg("demo", &s[0].1[0].series);
        assert!(svg.starts_with("<svg"));
        assert_eq!(svg.matches("<polyline").count(), 2);
        assert!(svg.contains("kernel &lt;x&gt;"));
        assert!(
            svg.contains("stroke-dasharray"),
            "the kernel's line is dashed"
        );
    }

    #[test]
    fn results_round_trip_and_compare_finds_the_difference() {
        let a = results_json("cmd", &sample());
        let mut b_tables = sample();
        b_tables[0].1[0].series[0].samples = vec![20.0, 21.0, 22.0];
        let b = results_json("cmd", &b_tables);
        let text = serde_json::to_string(&a).unwrap();
        let a2: Value = serde_json::from_str(&text).unwrap();
        let out = compare(&a2, "A", &b, "B").unwrap();
        // demo/a/1: 11 vs 21 -> a difference; demo/a/2 identical -> none.
        assert!(out.contains("Difference at 95.0% confidence"), "{out}");
        assert!(out.contains("No difference proven"), "{out}");
        assert_eq!(out.matches("## demo").count(), 3);
    }

    #[test]
    fn compare_rejects_unrelated_files() {
        let a = results_json("cmd", &sample());
        let e = compare(&a, "A", &json!({"x": 1}), "B").unwrap_err();
        assert!(e.contains("B:"), "{e}");
        let empty = results_json("cmd", &[]);
        assert!(compare(&a, "A", &empty, "B")
            .unwrap_err()
            .contains("in common"));
    }
}
