//! `pagecache`: the lab's command line. Everything else lives in the library
//! (`runner`, `scenarios`).

use pagecache_lab::runner::{Opts, Table};
use pagecache_lab::scenarios;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

const USAGE: &str = "usage:
  pagecache list
  pagecache bench <scenario>... | all [--threads 1,2,8,32] [--quick] [--runs N] [--out DIR]";

fn fail(msg: impl std::fmt::Display, code: u8) -> ExitCode {
    eprintln!("pagecache: {msg}");
    ExitCode::from(code)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("list") => {
            for s in scenarios::ALL {
                println!("{:<12} {}", s.name, s.about);
            }
            ExitCode::SUCCESS
        }
        Some("bench") => bench(&args[1..]),
        Some("-h" | "--help" | "help") => {
            println!("{USAGE}");
            ExitCode::SUCCESS
        }
        Some(other) => fail(format!("unknown command '{other}'\n{USAGE}"), 2),
        None => fail(USAGE, 2),
    }
}

fn bench(args: &[String]) -> ExitCode {
    let mut o = Opts::default();
    let mut names = Vec::new();
    let mut out: Option<PathBuf> = None;
    let mut runs_given = false;
    let mut i = 0;
    while i < args.len() {
        let a = args[i].as_str();
        let mut value = || {
            i += 1;
            args.get(i).cloned()
        };
        match a {
            "--quick" => o.quick = true,
            "--threads" => {
                let Some(v) = value() else {
                    return fail("--threads needs a list, e.g. 1,2,8", 2);
                };
                let mut t = Vec::new();
                for x in v.split(',') {
                    match x.trim().parse::<usize>() {
                        Ok(0) => return fail("thread count 0 is not allowed", 2),
                        Ok(n) if n > 4096 => {
                            return fail(format!("thread count {n} is too large"), 2)
                        }
                        Ok(n) => t.push(n),
                        Err(_) => return fail(format!("bad thread count '{x}'"), 2),
                    }
                }
                o.threads = t;
            }
            "--runs" => match value().and_then(|v| v.parse::<usize>().ok()) {
                Some(n) if n > 0 => {
                    o.runs = n;
                    runs_given = true;
                }
                _ => return fail("--runs needs a positive number", 2),
            },
            "--out" => match value() {
                Some(d) => out = Some(PathBuf::from(d)),
                None => return fail("--out needs a directory", 2),
            },
            "all" => names.extend(scenarios::ALL.iter().map(|s| s.name.to_string())),
            flag if flag.starts_with('-') => return fail(format!("unknown option '{flag}'"), 2),
            name => {
                if scenarios::find(name).is_none() {
                    return fail(
                        format!("unknown scenario '{name}' (see `pagecache list`)"),
                        2,
                    );
                }
                names.push(name.to_string());
            }
        }
        i += 1;
    }
    if names.is_empty() {
        return fail(format!("no scenario given\n{USAGE}"), 2);
    }
    if o.quick && !runs_given {
        o.runs = 3;
    }
    // Check --out before spending minutes measuring.
    if let Some(d) = &out {
        if let Err(e) = std::fs::create_dir_all(d).and_then(|_| {
            let probe = d.join(".pagecache-probe");
            std::fs::write(&probe, b"")?;
            std::fs::remove_file(probe)
        }) {
            return fail(format!("cannot write to --out {}: {e}", d.display()), 1);
        }
    }
    let command = format!("pagecache bench {}", args.join(" "));
    let mut all: Vec<(String, Vec<Table>)> = Vec::new();
    for name in &names {
        let s = scenarios::find(name).expect("checked above");
        eprintln!("running {} ...", s.name);
        let t0 = std::time::Instant::now();
        match (s.run)(&o) {
            Ok(tables) => {
                for t in &tables {
                    println!("{}", t.render());
                }
                eprintln!("{} done in {:.1} s", s.name, t0.elapsed().as_secs_f64());
                all.push((s.name.to_string(), tables));
            }
            Err(e) => return fail(format!("scenario {} failed: {e}", s.name), 1),
        }
    }
    if let Some(d) = out {
        if let Err(e) = write_report(&d, &command, &all) {
            return fail(format!("writing the report to {}: {e}", d.display()), 1);
        }
        eprintln!("report written to {}", d.display());
    }
    ExitCode::SUCCESS
}

fn machine() -> String {
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

fn json_str(s: &str) -> String {
    let mut o = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            '\n' => o.push_str("\\n"),
            c if (c as u32) < 0x20 => o.push_str(&format!("\\u{:04x}", c as u32)),
            c => o.push(c),
        }
    }
    o.push('"');
    o
}

fn write_report(
    dir: &std::path::Path,
    command: &str,
    all: &[(String, Vec<Table>)],
) -> std::io::Result<()> {
    let mut md = std::fs::File::create(dir.join("report.md"))?;
    writeln!(
        md,
        "# pagecache lab report\n\nMachine: {}\n\nCommand: `{command}`\n",
        machine()
    )?;
    for (name, tables) in all {
        writeln!(md, "## {name}\n")?;
        for t in tables {
            writeln!(md, "```text\n{}```\n", t.render())?;
        }
    }
    let mut js = String::from("{\n");
    js.push_str(&format!(
        "  \"machine\": {},\n  \"command\": {},\n  \"scenarios\": {{\n",
        json_str(&machine()),
        json_str(command)
    ));
    for (k, (name, tables)) in all.iter().enumerate() {
        js.push_str(&format!("    {}: [\n", json_str(name)));
        for (j, t) in tables.iter().enumerate() {
            let cols: Vec<String> = t.columns.iter().map(|c| json_str(c)).collect();
            let rows: Vec<String> = t
                .rows
                .iter()
                .map(|r| {
                    format!(
                        "[{}]",
                        r.iter().map(|c| json_str(c)).collect::<Vec<_>>().join(", ")
                    )
                })
                .collect();
            js.push_str(&format!(
                "      {{\"title\": {}, \"columns\": [{}], \"rows\": [{}]}}{}\n",
                json_str(&t.title),
                cols.join(", "),
                rows.join(", "),
                if j + 1 < tables.len() { "," } else { "" }
            ));
        }
        js.push_str(&format!(
            "    ]{}\n",
            if k + 1 < all.len() { "," } else { "" }
        ));
    }
    js.push_str("  }\n}\n");
    std::fs::write(dir.join("results.json"), js)
}
