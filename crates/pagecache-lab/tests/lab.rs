//! The lab's scenarios in tiny configurations, and its command line.
use pagecache_lab::runner::{Opts, Table};
use pagecache_lab::scenarios;
use std::process::Command;

/// The number a cell starts with (`"12.5 MB/s"`: 12.5).
fn number(t: &Table, r: usize, col: &str) -> f64 {
    let cell = t.cell(r, col).unwrap();
    cell.split(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap_or_else(|e| panic!("row {r}, {col}: {cell:?}: {e}"))
}

fn tiny() -> Opts {
    Opts {
        threads: vec![1, 2],
        quick: true,
        runs: 1,
        tiny: true,
        vmcache: None,
        vmcache_pc: None,
        busy: 0,
        case: None,
    }
}

#[test]
fn anon_fault_tables_have_the_seed_columns_and_consistent_counts() {
    let tables = (scenarios::find("anon-fault").unwrap().run)(&tiny()).unwrap();
    assert_eq!(tables.len(), 3, "after, before, kernel");
    for t in &tables {
        assert_eq!(
            t.columns,
            [
                "Gb",
                "Rep",
                "Threads",
                "User",
                "System",
                "Wall",
                "flt/cpu/s",
                "fault/wsec"
            ]
        );
        assert_eq!(t.rows.len(), 2);
        for (r, threads) in [(0, "1"), (1, "2")] {
            assert_eq!(t.cell(r, "Threads"), Some(threads));
            assert_eq!(t.cell(r, "Rep"), Some("2"));
            assert_eq!(t.cell(r, "Gb"), Some("0.004"));
        }
    }
}

#[test]
fn anon_fault_counts_one_fault_per_page_touched() {
    use pagecache::PoolKind;
    use pagecache_lab::scenarios::anon_fault;
    // 4 MiB over 2 threads, 3 repetitions: 1024 pages x 3 faults.
    for s in [
        anon_fault::ours(PoolKind::PerCpu, 4 << 20, 3, 2).unwrap(),
        anon_fault::ours(PoolKind::Global, 4 << 20, 3, 2).unwrap(),
        anon_fault::kernel(4 << 20, 3, 2).unwrap(),
    ] {
        assert_eq!(s.ops, 3 * 1024);
        assert!(s.wall > 0.0);
    }
}

#[test]
fn same_page_table_covers_every_design_and_thread_count() {
    let tables = (scenarios::find("same-page").unwrap().run)(&tiny()).unwrap();
    let t = &tables[0];
    assert_eq!(
        t.columns,
        [
            "design",
            "threads",
            "Mops/s",
            "stdev",
            "per thread",
            "vs 1 thread"
        ]
    );
    assert_eq!(t.rows.len(), 6, "3 designs x 2 thread counts");
    for r in [0, 2, 4] {
        assert_eq!(t.cell(r, "vs 1 thread"), Some("1.00x"));
    }
    let designs: Vec<&str> = (0..6).map(|r| t.cell(r, "design").unwrap()).collect();
    assert!(designs.contains(&"optimistic read_at"));
    assert!(designs.contains(&"kernel pread"));
}

fn lab(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_pagecache"))
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn list_names_every_scenario() {
    let o = lab(&["list"]);
    assert!(o.status.success());
    let s = String::from_utf8(o.stdout).unwrap();
    for sc in scenarios::ALL {
        assert!(s.contains(sc.name));
    }
}

#[test]
fn bad_arguments_give_a_clear_message_and_a_nonzero_exit() {
    for (args, msg) in [
        (&["bench", "no-such"][..], "unknown scenario 'no-such'"),
        (
            &["bench", "same-page", "--threads", "0"][..],
            "thread count 0",
        ),
        (
            &["bench", "same-page", "--threads", "x"][..],
            "bad thread count",
        ),
        (
            &["bench", "same-page", "--runs", "0"][..],
            "--runs needs a positive number",
        ),
        (&["bench"][..], "no scenario given"),
        (&["frobnicate"][..], "unknown command"),
        (
            &[
                "bench",
                "same-page",
                "--out",
                "/proc/pagecache-cannot-write",
            ][..],
            "cannot write to --out",
        ),
    ] {
        let o = lab(args);
        assert!(!o.status.success(), "{args:?} should fail");
        let err = String::from_utf8(o.stderr).unwrap();
        assert!(err.contains(msg), "{args:?}: {err}");
    }
}

#[test]
fn out_dir_gets_a_report_and_results() {
    let dir = std::env::temp_dir().join(format!("pagecache-lab-out-{}", std::process::id()));
    let d = dir.to_str().unwrap();
    // A real but tiny run through the binary: one thread count, one run.
    let o = lab(&[
        "bench",
        "same-page",
        "--quick",
        "--threads",
        "1",
        "--runs",
        "1",
        "--out",
        d,
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let md = std::fs::read_to_string(dir.join("report.md")).unwrap();
    assert!(md.contains("same-page") && md.contains("Command: `pagecache bench same-page"));
    let js = std::fs::read_to_string(dir.join("results.json")).unwrap();
    assert!(js.contains("\"same-page\"") && js.contains("\"columns\""));
    assert!(js.contains("\"samples\""), "raw samples kept for compare");
    let svg = std::fs::read_to_string(dir.join("same-page.svg")).unwrap();
    assert_eq!(svg.matches("<polyline").count(), 3, "one line per design");
    assert!(md.contains("![same-page](same-page.svg)"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn compare_two_result_files_through_the_binary() {
    let base = std::env::temp_dir().join(format!("pagecache-lab-cmp-{}", std::process::id()));
    let (a, b) = (base.join("a"), base.join("b"));
    for d in [&a, &b] {
        let o = lab(&[
            "bench",
            "same-page",
            "--quick",
            "--threads",
            "1",
            "--runs",
            "2",
            "--out",
            d.to_str().unwrap(),
        ]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
    let (ja, jb) = (a.join("results.json"), b.join("results.json"));
    let o = lab(&["compare", ja.to_str().unwrap(), jb.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out = String::from_utf8(o.stdout).unwrap();
    // One block per design at one thread count, each with a verdict.
    assert_eq!(out.matches("## same-page:").count(), 3, "{out}");
    assert_eq!(
        out.matches("Difference at 95.0% confidence").count()
            + out.matches("No difference proven").count(),
        3,
        "{out}"
    );
    // Bad inputs: a missing file and a non-JSON file, named in the message.
    let o = lab(&["compare", ja.to_str().unwrap(), "/nonexistent.json"]);
    assert!(!o.status.success());
    assert!(String::from_utf8(o.stderr)
        .unwrap()
        .contains("/nonexistent.json"));
    let bad = base.join("bad.json");
    std::fs::write(&bad, "not json").unwrap();
    let o = lab(&["compare", ja.to_str().unwrap(), bad.to_str().unwrap()]);
    assert!(!o.status.success());
    assert!(String::from_utf8(o.stderr).unwrap().contains("not JSON"));
    let o = lab(&["compare", ja.to_str().unwrap()]);
    assert!(!o.status.success(), "one file is not enough");
    let _ = std::fs::remove_dir_all(&base);
}

#[test]
fn same_file_streams_every_page_under_each_design() {
    use pagecache_lab::scenarios::same_file;
    let tables = (scenarios::find("same-file").unwrap().run)(&tiny()).unwrap();
    let t = &tables[0];
    assert_eq!(t.columns, ["design", "clients", "GiB/s", "runs min..max"]);
    assert_eq!(t.rows.len(), 8, "4 designs x 2 client counts");
    assert_eq!(t.series.len(), 8);
    // Byte counts: every client streams the whole file every pass.
    let dir = pagecache_lab::TempDir::new("same-file-test").unwrap();
    let p = dir.path().join("f");
    pagecache_lab::write_pattern_file(&p, 1 << 20).unwrap();
    let c = pagecache::PageCache::new(pagecache::Config {
        capacity: 4 << 20,
        ..Default::default()
    })
    .unwrap();
    let f = c.open(&p).unwrap();
    for how in [
        same_file::Lookup::Page,
        same_file::Lookup::Gang(16),
        same_file::Lookup::Run(16),
        same_file::Lookup::Run(5), // runs that straddle 16-page and leaf boundaries
    ] {
        let s = same_file::ours(&f, 256, 3, how, 2).unwrap();
        assert_eq!(s.ops, 2 * 3 * (1 << 20), "{how:?}");
    }
    let s = same_file::kernel(&p, 1 << 20, 3, 2).unwrap();
    assert_eq!(s.ops, 2 * 3 * (1 << 20), "splice moved every byte");
}

#[test]
fn page_fault1_has_the_seed_designs_and_counts_every_fault() {
    use pagecache::{PolicyKind, PoolKind};
    use pagecache_lab::scenarios::page_fault1;
    let tables = (scenarios::find("page-fault1").unwrap().run)(&tiny()).unwrap();
    let t = &tables[0];
    assert_eq!(t.columns, ["design", "ntask", "speedup", "pgf/s", "stdev"]);
    assert_eq!(t.rows.len(), 2 * page_fault1::DESIGNS.len());
    assert_eq!(t.cell(0, "design"), Some("baseline"));
    assert_eq!(
        t.cell(0, "speedup"),
        Some(""),
        "speedups are against the baseline"
    );
    assert!(t.cell(1, "speedup").unwrap().ends_with('%'));
    for (policy, pool) in [
        (PolicyKind::StrictLru, PoolKind::Global),
        (PolicyKind::SmpLru, PoolKind::PerCpu),
    ] {
        let c = page_fault1::cache(policy, pool, 1 << 20, 2).unwrap();
        let s = pagecache_lab::scenarios::anon_fault::touch(&c, 1 << 20, 3, 2).unwrap();
        assert_eq!(
            s.ops,
            2 * 3 * 256,
            "{policy:?}: one fault per page per loop"
        );
        c.validate(); // every frame back, the LRU list empty
    }
}

#[test]
fn own_part_table_has_the_seed_columns_and_every_design() {
    let tables = (scenarios::find("own-part").unwrap().run)(&tiny()).unwrap();
    let t = &tables[0];
    assert_eq!(
        t.columns,
        [
            "design",
            "tasks",
            "user s",
            "sys s",
            "elapsed s",
            "%CPU",
            "pages/s"
        ]
    );
    assert_eq!(t.rows.len(), 5 * 2, "5 designs x 2 task counts");
    let designs: Vec<&str> = (0..t.rows.len())
        .map(|r| t.cell(r, "design").unwrap())
        .collect();
    for d in [
        "mutex-tree",
        "rwlock-tree",
        "lockless",
        "kernel mmap faults",
        "kernel pread",
    ] {
        assert_eq!(designs.iter().filter(|&&x| x == d).count(), 2, "{d}");
    }
    // The slowest design's lock profile, in seed 003's columns.
    let lp = &tables[1];
    assert!(
        lp.title.contains("lock profile of the slowest design"),
        "{}",
        lp.title
    );
    assert!(lp.rows[0][0].contains("wait_total") || lp.rows[0][0].starts_with("no lock"));
}

#[test]
fn own_part_touches_every_page_of_every_part() {
    use pagecache::{Config, PageCache};
    use pagecache_lab::scenarios::own_part::{run_one, Design};
    let dir = pagecache_lab::TempDir::new("own-part-test").unwrap();
    let path = dir.0.join("f");
    let mut data = vec![0u8; 64 * 4096];
    for p in 0..64 {
        data[p * 4096] = 1;
    }
    std::fs::write(&path, data).unwrap();
    let cache = PageCache::new(Config {
        capacity: 1 << 20,
        ..Config::default()
    })
    .unwrap();
    let file = cache.open(&path).unwrap();
    let std_file = std::fs::File::open(&path).unwrap();
    for d in [
        Design::MutexTree,
        Design::RwlockTree,
        Design::Lockless,
        Design::KernelMmap,
        Design::KernelPread,
    ] {
        // 64 pages over 4 tasks, 3 rounds: each task checks it read 1 from
        // each of its 16 pages every round.
        let s = run_one(&file, &std_file, d, 64, 3, 4, None).unwrap();
        assert_eq!(s.ops, 3 * 64, "{d:?}");
    }
    // Profiled: one acquisition of the tree lock per page touched.
    for d in [Design::MutexTree, Design::RwlockTree] {
        let c = pagecache::lockstat::LockCounters::new();
        run_one(&file, &std_file, d, 64, 3, 4, Some(&c)).unwrap();
        let p = c.profile("tree");
        assert_eq!(p.count, 3 * 64, "{d:?}");
        assert!(p.contended <= p.count);
        assert!(p.hold_total > 0 && p.hold_max <= p.hold_total);
    }
}

#[test]
fn page_lock_gives_samples_ministat_and_a_lock_profile() {
    let tables = (scenarios::find("page-lock").unwrap().run)(&tiny()).unwrap();
    let s = &tables[0];
    assert_eq!(
        s.columns,
        ["design", "N", "min", "max", "median", "avg", "stddev"]
    );
    assert_eq!(s.rows.len(), 3);
    for r in 0..3 {
        assert_eq!(
            s.cell(r, "N"),
            Some("2"),
            "at least two samples for a t-test"
        );
    }
    // three ministat comparisons, each with a verdict
    for t in &tables[1..4] {
        let text = t.render();
        assert!(text.contains(
            "    N           Min           Max        Median           Avg        Stddev"
        ));
        assert!(
            text.contains("Difference at 95.0% confidence")
                || text.contains("No difference proven at 95.0% confidence"),
            "{text}"
        );
    }
    let prof = tables[4].render();
    assert!(
        prof.contains("wait_total")
            && prof.contains("global page mutex")
            && prof.contains("hashed page lock")
    );
}

#[test]
fn page_lock_serves_every_request_under_each_design() {
    use pagecache::{Config, PageCache};
    use pagecache_lab::scenarios::page_lock::{sample, Design, Locks};
    let dir = pagecache_lab::TempDir::new("page-lock-test").unwrap();
    let cache = PageCache::new(Config {
        capacity: 1 << 20,
        ..Config::default()
    })
    .unwrap();
    let files: Vec<_> = (0..4)
        .map(|i| {
            let p = dir.0.join(format!("o{i}"));
            std::fs::write(&p, vec![(i % 251) as u8; 2 * 4096]).unwrap();
            cache.open(&p).unwrap()
        })
        .collect();
    for d in [Design::GlobalMutex, Design::Hashed(8), Design::PageBits] {
        // each page's first byte is checked against its file inside sample()
        let (_, served) = sample(&files, 2, &Locks::new(d, true), 3, 50).unwrap();
        assert_eq!(served, 3 * 50, "{d:?}");
    }
}

#[test]
fn out_of_memory_write_case_runs_the_writers_in_turn_beside_the_device_and_the_kernel() {
    let o = Opts {
        case: Some("write".into()),
        ..tiny()
    };
    let tables = (scenarios::find("out-of-memory").unwrap().run)(&o).unwrap();
    assert_eq!(tables.len(), 1);
    let t = &tables[0];
    assert!(
        t.title.starts_with("sequential write of a new"),
        "{}",
        t.title
    );
    let designs: Vec<&str> = (0..t.rows.len())
        .map(|r| t.cell(r, "design").unwrap())
        .collect();
    assert_eq!(
        designs,
        [
            "kernel O_DIRECT write + fdatasync (device)",
            "pagecache",
            "pagecache, arena populated at creation (untimed)",
            "kernel write() + fdatasync"
        ]
    );
    for (r, design) in designs.iter().enumerate() {
        let rate = number(t, r, "rate");
        assert!(rate > 0.0, "row {r}: {:?}", t.rows[r]);
        // Only the caches say how long their creation took.
        assert_eq!(
            t.cell(r, "cache created in") == Some("-"),
            !design.starts_with("pagecache"),
            "row {r}: {:?}",
            t.rows[r]
        );
    }
    assert_eq!(t.cell(0, "vs device"), Some("1.00x"));
    assert_eq!(t.cell(3, "vs kernel"), Some("1.00x"));
    assert_eq!(t.series.len(), 4);
}

#[test]
fn out_of_memory_has_every_workload_and_design_and_fio_columns() {
    let o = tiny();
    let tables = (scenarios::find("out-of-memory").unwrap().run)(&o).unwrap();
    let t = &tables[0];
    assert_eq!(
        t.columns,
        [
            "workload",
            "design",
            "threads",
            "rate",
            "p50",
            "p99",
            "kernel cache",
            "vs device"
        ]
    );
    // Random reads: 4 designs per thread count; prefetch; 6 scans (3 of
    // them pagecache: streams direct, buffered, measured); 2 writes; 2
    // mixes.
    assert_eq!(t.rows.len(), 4 * o.threads.len() + 1 + 6 + 2 + 2);
    assert!(t.title.contains("8 x the budget"), "{}", t.title);
    for r in 0..t.rows.len() {
        let design = t.cell(r, "design").unwrap();
        let rate = number(t, r, "rate");
        assert!(rate > 0.0, "row {r}: {:?}", t.rows[r]);
        if design.contains("O_DIRECT") {
            assert_eq!(t.cell(r, "vs device"), Some("1.00x"));
        }
        // Direct I/O: pagecache leaves (next to) nothing in the kernel's
        // cache; the written file's last partial block aside.
        if design.starts_with("pagecache") {
            let mib = number(t, r, "kernel cache");
            assert!(mib < 1.0, "row {r}: {:?}", t.rows[r]);
        }
    }
    let workloads: Vec<&str> = (0..t.rows.len())
        .map(|r| t.cell(r, "workload").unwrap())
        .collect();
    for w in [
        "random 4 KiB reads",
        "sequential scan, 1 MiB reads",
        "sequential write, 1 MiB writes, + sync",
        "random 4 KiB 70% reads / 30% writes",
        "random 4 KiB reads, prefetched in batches of 32",
    ] {
        assert!(workloads.contains(&w), "{w}");
    }
    assert_eq!(t.series.len(), 4 * o.threads.len(), "random reads plotted");
}

/// `--busy N`: the spinners run beside the measurements (the title says
/// so) and are gone afterwards.
#[test]
fn async_under_load_says_so_and_leaves_no_spinner() {
    let o = Opts { busy: 2, ..tiny() };
    let children = || {
        std::fs::read_to_string(format!(
            "/proc/{}/task/{}/children",
            std::process::id(),
            std::process::id()
        ))
        .unwrap_or_default()
    };
    let tables = (scenarios::find("async").unwrap().run)(&o).unwrap();
    assert!(
        tables[0].title.contains("2 busy processes"),
        "{}",
        tables[0].title
    );
    assert!(tables[0].rows.len() >= 10);
    assert!(
        children().trim().is_empty(),
        "spinners left: {}",
        children()
    );
}

#[test]
fn async_has_every_design_the_device_beside_and_cpu_per_read() {
    let tables = (scenarios::find("async").unwrap().run)(&tiny()).unwrap();
    let t = &tables[0];
    assert_eq!(
        t.columns,
        [
            "design",
            "in flight",
            "rate",
            "p50",
            "p99",
            "CPU per read",
            "vs device (same depth, right after)"
        ]
    );
    // The device at depths 1, 8 and 16 (tiny sizes), then seven designs.
    assert_eq!(t.rows.len(), 10);
    assert!(t.title.contains("8 x the budget"), "{}", t.title);
    let designs: Vec<&str> = (0..t.rows.len())
        .map(|r| t.cell(r, "design").unwrap())
        .collect();
    for d in [
        "device: O_DIRECT, io_uring, 1 thread",
        "pagecache page_async, tokio 1 thread",
        "pagecache page_async, tokio 2 threads",
        "pagecache page(), blocking threads",
        "buffered pread on tokio's blocking pool (tokio::fs)",
        "kernel buffered pread, threads",
    ] {
        assert!(designs.contains(&d), "{d}");
    }
    for r in 0..t.rows.len() {
        let num = |col: &str| -> f64 {
            t.cell(r, col)
                .unwrap()
                .split(' ')
                .next()
                .unwrap()
                .parse()
                .unwrap()
        };
        // The rate from the row's series, not its cell: a tiny run's 50 ms
        // window on a loaded machine may read a handful of pages, which the
        // cell rounds to "0.0 k reads/s".
        let design = t.cell(r, "design").unwrap();
        let depth: usize = t.cell(r, "in flight").unwrap().parse().unwrap();
        let s = t
            .series
            .iter()
            .find(|s| s.design == design && s.threads == depth)
            .unwrap_or_else(|| panic!("row {r}: no series"));
        assert!(
            !s.samples.is_empty() && s.samples.iter().all(|&x| x > 0.0),
            "row {r}: {:?}: {:?}",
            t.rows[r],
            s.samples
        );
        assert!(num("CPU per read") > 0.0, "row {r}: {:?}", t.rows[r]);
        let vs = t.cell(r, "vs device (same depth, right after)").unwrap();
        if t.cell(r, "design").unwrap().starts_with("device") {
            assert_eq!(vs, "1.00x");
        } else {
            // A ratio of two positive rates (the series above and the
            // device's), printed to two decimals: well formed.
            let x: f64 = vs.trim_end_matches('x').parse().unwrap();
            assert!(x.is_finite() && x >= 0.0, "row {r}: {:?}", t.rows[r]);
        }
    }
    assert_eq!(t.series.len(), 10);
    let b = &tables[1];
    assert_eq!(b.rows.len(), 4);
    for r in 0..b.rows.len() {
        let rate = number(b, r, "lookups/s");
        assert!(rate > 0.0, "row {r}: {:?}", b.rows[r]);
    }
    assert_eq!(b.cell(0, "vs blocking, 1 thread"), Some("1.00x"));
    assert_eq!(b.cell(1, "vs blocking, 32 threads"), Some("1.00x"));
}

#[test]
fn btree_tables_cover_both_designs_sizes_and_thread_counts() {
    let tables = (scenarios::find("btree").unwrap().run)(&tiny()).unwrap();
    assert_eq!(
        tables.len(),
        6,
        "lookups and mix, in and out of memory, and TPC-C in and out of memory"
    );
    for (k, t) in tables.iter().take(4).enumerate() {
        assert_eq!(
            t.rows.len(),
            4,
            "{}: two designs x two thread counts",
            t.title
        );
        for r in 0..4 {
            let design = t.cell(r, "Design").unwrap();
            assert!(design.starts_with("optimistic") || design.starts_with("pin"));
            if k % 2 == 0 {
                assert_ne!(t.cell(r, "Lookups/s"), Some("-"));
                assert_ne!(t.cell(r, "Load/s"), Some("-"));
            } else {
                assert_ne!(t.cell(r, "Mix ops/s"), Some("-"));
                assert_ne!(t.cell(r, "Scanned entries/s"), Some("-"));
            }
        }
    }
    // Out of memory (4x the pool), the update mix evicts and writes back.
    let oom_mix = &tables[3];
    assert!(oom_mix.title.contains("out of memory"));
    for r in 0..4 {
        let w = oom_mix.cell(r, "Written per evicted").unwrap();
        assert!(w.parse::<f64>().is_ok(), "no evictions out of memory: {w}");
    }
    tpcc_tables_are_filled(&tables[4..]);
}

/// TPC-C's tables: one row per thread count, transactions counted (each
/// run checked every district's orders), and out of memory pages evicted
/// and written.
fn tpcc_tables_are_filled(t: &[pagecache_lab::runner::Table]) {
    assert_eq!(t.len(), 2);
    assert!(t[0].title.contains("TPC-C") && t[0].title.contains("in memory"));
    assert!(t[1].title.contains("out of memory"));
    for table in t {
        assert_eq!(
            table.rows.len(),
            2,
            "{}: one design x two thread counts",
            table.title
        );
        for r in 0..2 {
            assert_eq!(table.cell(r, "Design"), Some("pagecache-btree"));
            assert_ne!(table.cell(r, "tx/s"), Some("-"));
            assert!(table.cell(r, "Write-back CPU").unwrap().ends_with('%'));
            let restarts = table.cell(r, "Restarts per tx").unwrap();
            assert!(
                restarts.parse::<f64>().is_ok_and(|x| x >= 0.0),
                "{}: restarts per tx {restarts}",
                table.title
            );
        }
    }
    for r in 0..2 {
        let w = t[1].cell(r, "Written per evicted").unwrap();
        assert!(
            w.parse::<f64>().is_ok(),
            "TPC-C out of memory evicted nothing: {w}"
        );
    }
}

#[test]
fn tpcc_alone_runs_as_its_own_scenario() {
    let tables = (scenarios::find("tpcc").unwrap().run)(&tiny()).unwrap();
    tpcc_tables_are_filled(&tables);
}

#[test]
fn tpcc_case_in_runs_the_in_memory_table_alone() {
    let o = Opts {
        case: Some("in".into()),
        threads: vec![1],
        ..tiny()
    };
    let tables = (scenarios::find("tpcc").unwrap().run)(&o).unwrap();
    assert_eq!(tables.len(), 1);
    assert!(tables[0].title.contains("in memory"), "{}", tables[0].title);
    assert_eq!(tables[0].rows.len(), 1);
    assert_ne!(tables[0].cell(0, "tx/s"), Some("-"));
}

#[test]
fn shared_lists_shows_and_removes_caches_shared_by_processes() {
    use pagecache::internals::segment::{Geometry, Segment};
    let d = std::env::temp_dir().join(format!("pagecache-lab-shared-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    let ds = d.to_str().unwrap();
    let out = |o: std::process::Output| {
        (
            o.status.code(),
            String::from_utf8(o.stdout).unwrap(),
            String::from_utf8(o.stderr).unwrap(),
        )
    };
    let (code, s, _) = out(lab(&["shared", "--dir", ds]));
    assert_eq!(code, Some(0));
    assert!(s.contains("no shared caches"), "{s}");
    let g = Geometry {
        page_size: 4096,
        frames: 32,
        policy: 0,
    };
    let seg = Segment::open(&d, "one", g, None).unwrap();
    std::fs::write(d.join("pagecache.junk"), b"not a cache").unwrap();
    let me = std::process::id().to_string();
    let (code, s, _) = out(lab(&["shared", "--dir", ds]));
    assert_eq!(code, Some(0));
    assert!(
        s.contains("one: 32 frames of 4096 bytes") && s.contains("0 in use, 0 dirty"),
        "{s}"
    );
    assert!(
        s.contains(&format!("1 live process(es) attached: {me}")),
        "{s}"
    );
    assert!(
        s.contains("junk: unusable:") && s.contains("shorter than a header"),
        "{s}"
    );
    let (id, _) = seg.open_file((8, 100), 12288, 1 << 40).unwrap();
    let (code, s, _) = out(lab(&["shared", "one", "--dir", ds]));
    assert_eq!(code, Some(0));
    assert!(
        s.contains("pagecache.one") && s.contains("created by"),
        "{s}"
    );
    assert!(s.contains("age flusher: none yet"), "{s}");
    // The files open in it.
    assert!(
        s.contains(&format!(
            "file 8:100 (id {id}): 12288 byte(s), open in 1 process(es)"
        )),
        "{s}"
    );
    assert!(seg.close_file(id).unwrap());
    // A cache using it: its frames in use and dirty.
    {
        let c = pagecache::PageCache::shared_with(
            "two",
            pagecache::Config {
                capacity: 64 * 4096,
                policy: pagecache::PolicyKind::Clock,
                dirty_background_percent: 100,
                dirty_limit_percent: 100,
                dirty_expire: std::time::Duration::MAX,
                ..pagecache::Config::default()
            },
            &pagecache::SharedOptions {
                dir: Some(d.clone()),
                group: None,
            },
        )
        .unwrap();
        let f = c
            .open_with(
                d.join("data"),
                pagecache::OpenOptions::new()
                    .read(true)
                    .write(true)
                    .create(true),
            )
            .unwrap();
        f.write_at(&[7u8; 3 * 4096], 0).unwrap();
        let mut b = [0u8; 4096];
        for _ in 0..5 {
            f.read_at(&mut b, 0).unwrap();
        }
        let (code, s, _) = out(lab(&["shared", "two", "--dir", ds]));
        assert_eq!(code, Some(0));
        assert!(s.contains("3 in use, 3 dirty"), "{s}");
        // The cache's statistics: this process's five hits, once its
        // watcher has published them (every 250 ms).
        let hits = |s: &str| -> u64 {
            s.split("statistics")
                .nth(1)
                .and_then(|t| t.split(" hits ").nth(1))
                .and_then(|t| t.split(' ').next())
                .and_then(|n| n.parse().ok())
                .unwrap_or(0)
        };
        let t0 = std::time::Instant::now();
        while hits(&out(lab(&["shared", "two", "--dir", ds])).1) < 5 {
            assert!(t0.elapsed().as_secs() < 20, "the hits never showed");
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        assert!(s.contains("12288 byte(s), open in 1 process(es)"), "{s}");
        drop(f);
        drop(c);
        pagecache::PageCache::remove_shared("two", Some(&d)).unwrap();
    }
    // In use: refused, naming this process.
    let (code, _, e) = out(lab(&["shared", "one", "--remove", "--dir", ds]));
    assert_eq!(code, Some(1));
    assert!(e.contains("in use by processes") && e.contains(&me), "{e}");
    drop(seg);
    let (code, s, _) = out(lab(&["shared", "one", "--remove", "--dir", ds]));
    assert_eq!(code, Some(0), "{s}");
    assert!(!d.join("pagecache.one").exists());
    for (args, msg, c) in [
        (&["shared", "gone", "--dir", ds][..], "No such file", 1),
        (&["shared", "a/b", "--dir", ds][..], "shared cache name", 2),
        (
            &["shared", "a/b", "--remove", "--dir", ds][..],
            "shared cache name",
            2,
        ),
        (
            &["shared", "--remove", "--dir", ds][..],
            "needs the cache's NAME",
            2,
        ),
        (&["shared", "x", "y"][..], "one NAME only", 2),
    ] {
        let (code, _, e) = out(lab(args));
        assert_eq!(code, Some(c), "{args:?}: {e}");
        assert!(e.contains(msg), "{args:?}: {e}");
    }
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn processes_share_one_copy_through_a_shared_cache() {
    // The scenario spawns the lab's binary; this test binary finds it
    // beside its own directory (`target/*/pagecache`).
    let tables = (scenarios::find("processes").unwrap().run)(&tiny()).unwrap();
    let t = &tables[0];
    assert_eq!(
        t.columns,
        [
            "design",
            "processes",
            "GiB/s cold",
            "GiB/s warm",
            "memory MiB",
            "PSS MiB",
            "device MiB read",
            "vs 1 process"
        ]
    );
    assert_eq!(t.rows.len(), 8, "4 designs x 2 process counts");
    // The processes' own memory (PSS: nothing of other tests' files in the
    // kernel's cache, which the memory column adds).
    let mem = |r: usize| -> f64 { t.cell(r, "PSS MiB").unwrap().parse().unwrap() };
    // Two readers of the 8 MiB file: one copy in a shared cache (its
    // memory as one reader's, give or take the second process's own
    // few MiB), two in private caches.
    assert_eq!(
        t.cell(1, "design"),
        Some("pagecache shared by the processes")
    );
    assert_eq!(t.cell(1, "processes"), Some("2"));
    assert_eq!(t.cell(3, "design"), Some("pagecache, one per process"));
    assert!(
        mem(3) - mem(2) > 6.0,
        "a second private cache holds a second copy: {t:?}"
    );
    assert!(
        mem(1) - mem(0) < mem(3) - mem(2),
        "a second process on the shared cache adds less than a copy: {t:?}"
    );
    for r in 0..8 {
        let cold: f64 = t.cell(r, "GiB/s cold").unwrap().parse().unwrap();
        assert!(cold > 0.0, "{t:?}");
    }
    // pread2's shape with processes: every design, every count, reads done.
    let sp = &tables[1];
    assert_eq!(
        sp.columns,
        ["design", "processes", "M reads/s", "vs 1 process"]
    );
    assert_eq!(sp.rows.len(), 8);
    for r in 0..8 {
        let rate = number(sp, r, "M reads/s");
        assert!(rate > 0.0, "{sp:?}");
    }
    // page_fault1's shape with processes: the cache's anonymous regions
    // (shared by the processes, or one cache each) and the kernel's.
    assert_eq!(tables.len(), 4);
    let pf = &tables[3];
    assert_eq!(
        pf.columns,
        ["design", "processes", "M faults/s", "vs 1 process"]
    );
    let designs: Vec<&str> = (0..pf.rows.len())
        .map(|r| pf.cell(r, "design").unwrap())
        .collect();
    assert_eq!(
        designs,
        [
            "pagecache shared by the processes",
            "pagecache shared by the processes",
            "pagecache, one per process",
            "pagecache, one per process",
            "kernel anonymous mmap",
            "kernel anonymous mmap"
        ]
    );
    for r in 0..pf.rows.len() {
        let rate = number(pf, r, "M faults/s");
        assert!(rate > 0.0, "{pf:?}");
    }
}
