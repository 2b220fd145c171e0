//! `pagecache`: the lab's command line. Everything else lives in the library
//! (`runner`, `scenarios`).

use pagecache_lab::runner::{Opts, Table};
use pagecache_lab::scenarios;
use std::path::PathBuf;
use std::process::ExitCode;

const USAGE: &str = "usage:
  pagecache list
  pagecache bench <scenario>... | all [--threads 1,2,8,32] [--quick] [--runs N] [--out DIR] [--vmcache PATH] [--vmcache-pc PATH] [--busy N] [--case in|out|write]
  pagecache compare A.json B.json
  pagecache device FILE DEPTH SECONDS   (the device's random 4 KiB O_DIRECT read rate through io_uring)
  pagecache shared [NAME] [--remove] [--dir DIR]   (caches shared by processes: list them, show one, remove one nobody uses)";

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
        Some("compare") => compare(&args[1..]),
        Some("device") => device(&args[1..]),
        Some("shared") => shared(&args[1..]),
        // A reader of the `processes` scenario (not for users).
        Some("__reader") => match scenarios::processes::reader(&args[1..]) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => fail(format!("reader: {e}"), 1),
        },
        Some("-h" | "--help" | "help") => {
            println!("{USAGE}");
            ExitCode::SUCCESS
        }
        Some(other) => fail(format!("unknown command '{other}'\n{USAGE}"), 2),
        None => fail(USAGE, 2),
    }
}

/// `pagecache device FILE DEPTH SECONDS`: the reference of the C and
/// Python asynchronous benchmarks, one line: reads per second and CPU
/// microseconds per read.
fn device(args: &[String]) -> ExitCode {
    let [file, depth, secs] = args else {
        return fail(format!("device needs FILE DEPTH SECONDS\n{USAGE}"), 2);
    };
    let (Ok(depth), Ok(secs)) = (depth.parse::<usize>(), secs.parse::<f64>()) else {
        return fail("device: DEPTH is a count, SECONDS a number", 2);
    };
    if depth == 0 || secs <= 0.0 {
        return fail("device: DEPTH and SECONDS must be positive", 2);
    }
    match scenarios::async_reads::device_rate(std::path::Path::new(file), depth, secs) {
        Ok((rate, cpu)) => {
            println!("{rate:.0} reads/s {:.2} us/read", cpu * 1e6);
            ExitCode::SUCCESS
        }
        Err(e) => fail(format!("{file}: {e}"), 1),
    }
}

/// `pagecache shared [NAME] [--remove] [--dir DIR]`: the shared caches
/// of a directory (`/dev/shm` by default), one of them in detail, or its
/// removal (refused while a live process is attached).
fn shared(args: &[String]) -> ExitCode {
    use pagecache::internals::segment::{self, Segment};
    let mut dir = PathBuf::from(segment::DEFAULT_DIR);
    let (mut name, mut remove) = (None, false);
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--remove" => remove = true,
            "--dir" => match it.next() {
                Some(d) => dir = PathBuf::from(d),
                None => return fail("--dir needs a directory", 2),
            },
            flag if flag.starts_with('-') => return fail(format!("unknown option '{flag}'"), 2),
            n if name.is_none() => name = Some(n.to_string()),
            extra => return fail(format!("shared: one NAME only ('{extra}' too)"), 2),
        }
    }
    let describe = |path: &std::path::Path| -> Result<String, String> {
        let seg = Segment::inspect(path, None).map_err(|e| e.to_string())?;
        let g = seg.geometry();
        let procs = seg.processes();
        let live = procs.iter().filter(|p| p.1).count();
        let list: Vec<String> = procs
            .iter()
            .map(|&(pid, up)| format!("{pid}{}", if up { "" } else { " (dead)" }))
            .collect();
        let files = match seg.files() {
            Ok(f) => f
                .iter()
                .map(|f| {
                    format!(
                        "\n  file {}:{} (id {}): {} byte(s), open in {} process(es)",
                        f.device, f.inode, f.id, f.len, f.opens
                    )
                })
                .collect::<String>(),
            Err(e) => format!("\n  files: {e}"),
        };
        let (used, dirty) = seg.frames_in_use();
        let files = match seg.age_flusher() {
            Some(pid) => format!("{files}\n  age flusher: process {pid}"),
            None => format!("{files}\n  age flusher: none yet"),
        };
        let st = seg.stats();
        let files = format!(
            "{files}\n  statistics (every process, attached or gone, as of its last 250 ms): hits {} misses {} reads {} writes {} writebacks {} evictions {}",
            st.hits, st.misses, st.reads, st.writes, st.writebacks, st.evictions
        );
        Ok(format!(
            "{} frames of {} bytes ({:.1} MiB mapped; {used} in use, {dirty} dirty), created by {}, {live} live process(es) attached{}{files}",
            g.frames,
            g.page_size,
            seg.mapped_bytes() as f64 / (1 << 20) as f64,
            seg.creator(),
            if list.is_empty() {
                String::new()
            } else {
                format!(": {}", list.join(", "))
            }
        ))
    };
    match (name, remove) {
        (None, true) => fail("shared --remove needs the cache's NAME", 2),
        (Some(n), true) => {
            // A name that cannot be a cache's is a usage error (2), as for
            // showing one; a cache that cannot be removed is 1.
            if let Err(e) = segment::path_of(&dir, &n) {
                return fail(e, 2);
            }
            match Segment::remove(&dir, &n) {
                Ok(()) => {
                    println!("removed shared cache {n} from {}", dir.display());
                    ExitCode::SUCCESS
                }
                Err(e) => fail(e, 1),
            }
        }
        (Some(n), false) => {
            let path = match segment::path_of(&dir, &n) {
                Ok(p) => p,
                Err(e) => return fail(e, 2),
            };
            match describe(&path) {
                Ok(d) => {
                    println!("{n} ({}): {d}", path.display());
                    ExitCode::SUCCESS
                }
                Err(e) => fail(e, 1),
            }
        }
        (None, false) => {
            let entries = match std::fs::read_dir(&dir) {
                Ok(e) => e,
                Err(e) => return fail(format!("{}: {e}", dir.display()), 1),
            };
            let mut names: Vec<String> = entries
                .filter_map(|e| e.ok())
                .filter_map(|e| {
                    e.file_name()
                        .to_str()
                        .and_then(|f| f.strip_prefix(segment::PREFIX))
                        .map(str::to_string)
                })
                .collect();
            names.sort();
            if names.is_empty() {
                println!("no shared caches in {}", dir.display());
            }
            for n in names {
                let path = dir.join(format!("{}{n}", segment::PREFIX));
                match describe(&path) {
                    Ok(d) => println!("{n}: {d}"),
                    Err(e) => println!("{n}: unusable: {e}"),
                }
            }
            ExitCode::SUCCESS
        }
    }
}

fn compare(args: &[String]) -> ExitCode {
    let [a, b] = args else {
        return fail(format!("compare needs two result files\n{USAGE}"), 2);
    };
    use pagecache_lab::report;
    let (va, vb) = match (
        report::load(std::path::Path::new(a)),
        report::load(std::path::Path::new(b)),
    ) {
        (Ok(x), Ok(y)) => (x, y),
        (Err(e), _) | (_, Err(e)) => return fail(e, 1),
    };
    match report::compare(&va, a, &vb, b) {
        Ok(text) => {
            print!("{text}");
            ExitCode::SUCCESS
        }
        Err(e) => fail(e, 1),
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
            "--vmcache" => match value() {
                Some(p) => match scenarios::btree::check_vmcache(std::path::Path::new(&p)) {
                    Ok(p) => o.vmcache = Some(p),
                    Err(e) => return fail(e, 2),
                },
                None => return fail("--vmcache needs the path of vmcache's binary", 2),
            },
            "--vmcache-pc" => match value() {
                Some(p) => match scenarios::btree::check_vmcache(std::path::Path::new(&p)) {
                    Ok(p) => o.vmcache_pc = Some(p),
                    Err(e) => return fail(e, 2),
                },
                None => {
                    return fail(
                        "--vmcache-pc needs the path of vmcache's B-tree built over the C ABI (benches/vmcache-pc/build.sh)",
                        2,
                    )
                }
            },
            "--busy" => match value().and_then(|v| v.parse::<usize>().ok()) {
                Some(n) if n <= 256 => o.busy = n,
                _ => return fail("--busy needs a number of processes (0 to 256)", 2),
            },
            "--case" => match value() {
                Some(c) if c == "in" || c == "out" || c == "write" => o.case = Some(c),
                _ => {
                    return fail(
                        "--case needs `in` or `out` (TPC-C in or out of memory) or `write` (out-of-memory's sequential writer alone)",
                        2,
                    )
                }
            },
            "--out" => match value() {
                Some(d) => out = Some(PathBuf::from(d)),
                None => return fail("--out needs a directory", 2),
            },
            // `btree` runs TPC-C too: `tpcc` alone is not run again.
            "all" => names.extend(
                scenarios::ALL
                    .iter()
                    .filter(|s| s.name != "tpcc")
                    .map(|s| s.name.to_string()),
            ),
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
    // As the user typed it, but vmcache's binary by its name only (where it
    // lies on this machine says nothing to a reader of the report).
    let shown: Vec<String> = args
        .iter()
        .enumerate()
        .map(|(i, a)| match i.checked_sub(1).map(|p| args[p].as_str()) {
            Some("--vmcache" | "--vmcache-pc") => std::path::Path::new(a)
                .file_name()
                .map_or_else(|| a.clone(), |n| n.to_string_lossy().into_owned()),
            _ => a.clone(),
        })
        .collect();
    let command = format!("pagecache bench {}", shown.join(" "));
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
        if let Err(e) = pagecache_lab::report::write(&d, &command, &all) {
            return fail(format!("writing the report to {}: {e}", d.display()), 1);
        }
        eprintln!("report written to {}", d.display());
    }
    ExitCode::SUCCESS
}
