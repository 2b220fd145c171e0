//! The runner: what every scenario shares. It releases threads together,
//! times the wall clock, takes user and system CPU time from `getrusage`,
//! and summarises repeated samples (median, mean, standard deviation).
//! Scenarios only say what one thread does.

use std::io;
use std::sync::Barrier;
use std::time::Instant;

/// Options common to every scenario.
#[derive(Debug, Clone)]
pub struct Opts {
    /// Thread counts to sweep.
    pub threads: Vec<usize>,
    /// Small sizes and few repetitions (the test suite and `--quick`).
    pub quick: bool,
    /// Repetitions per configuration.
    pub runs: usize,
    /// Scale factor for tests: shrinks every size further (1 = normal).
    pub tiny: bool,
    /// vmcache's binary (`--vmcache PATH`): the `btree` scenario runs it
    /// beside our designs.
    pub vmcache: Option<std::path::PathBuf>,
    /// vmcache's B-tree and TPC-C over this library's C ABI
    /// (`--vmcache-pc PATH`, built by `benches/vmcache-pc/build.sh`): the
    /// TPC-C tables run it as a design of their own.
    pub vmcache_pc: Option<std::path::PathBuf>,
    /// Busy processes kept spinning on the CPUs beside the measurements
    /// that say so (`--busy N`: the `async` scenario, each configuration
    /// and its device reference under the same load).
    pub busy: usize,
    /// Cases of the scenarios that have several (`--case in` or `--case
    /// out`: TPC-C in or out of memory; `--case write`: `out-of-memory`'s
    /// sequential writer alone); `None`: all.
    pub case: Option<String>,
}

impl Default for Opts {
    fn default() -> Self {
        Opts {
            threads: vec![1, 2, 8, 32],
            quick: false,
            runs: 5,
            tiny: false,
            vmcache: None,
            vmcache_pc: None,
            busy: 0,
            case: None,
        }
    }
}

/// One measured run.
#[derive(Debug, Clone, Copy, Default)]
pub struct Sample {
    /// Wall-clock seconds.
    pub wall: f64,
    /// User CPU seconds (whole process).
    pub user: f64,
    /// System CPU seconds (whole process).
    pub sys: f64,
    /// Operations done by all threads.
    pub ops: u64,
}

impl Sample {
    /// Operations per wall-clock second.
    pub fn rate(&self) -> f64 {
        self.ops as f64 / self.wall.max(1e-9)
    }
    /// Operations per CPU second (user + system).
    pub fn per_cpu(&self) -> f64 {
        self.ops as f64 / (self.user + self.sys).max(1e-9)
    }
    /// CPU utilisation in percent of one CPU.
    pub fn cpu_pct(&self) -> f64 {
        100.0 * (self.user + self.sys) / self.wall.max(1e-9)
    }
}

fn cpu_times() -> (f64, f64) {
    // SAFETY: getrusage fills the struct we pass; RUSAGE_SELF is valid.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let t = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 * 1e-6;
    (t(ru.ru_utime), t(ru.ru_stime))
}

/// Runs `work(thread_index)` on `threads` threads released together and
/// returns the wall time, the process's CPU time over the run, and the sum
/// of the operation counts the threads return. Errors from any thread are
/// returned (the first one).
pub fn measure<F>(threads: usize, work: F) -> io::Result<Sample>
where
    F: Fn(usize) -> io::Result<u64> + Sync,
{
    assert!(threads > 0);
    let barrier = Barrier::new(threads + 1);
    let mut t0 = Instant::now();
    let mut c0 = (0.0, 0.0);
    let results: Vec<io::Result<u64>> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..threads)
            .map(|t| {
                let (barrier, work) = (&barrier, &work);
                s.spawn(move || {
                    barrier.wait();
                    work(t)
                })
            })
            .collect();
        c0 = cpu_times();
        t0 = Instant::now();
        barrier.wait();
        hs.into_iter()
            .map(|h| h.join().expect("worker thread panicked"))
            .collect()
    });
    let wall = t0.elapsed().as_secs_f64();
    let c1 = cpu_times();
    let mut ops = 0;
    for r in results {
        ops += r?;
    }
    Ok(Sample {
        wall,
        user: c1.0 - c0.0,
        sys: c1.1 - c0.1,
        ops,
    })
}

/// Runs `f` once to warm up (discarded; skipped in tiny test runs), then
/// `o.runs` times, returning the measured results. `label` names the
/// configuration in the progress line.
pub fn repeat<T>(
    o: &Opts,
    label: &str,
    mut f: impl FnMut() -> io::Result<T>,
) -> io::Result<Vec<T>> {
    if !o.tiny {
        progress(label, 0, o.runs);
        f()?;
    }
    let mut v = Vec::with_capacity(o.runs);
    for k in 0..o.runs {
        progress(label, k + 1, o.runs);
        v.push(f()?);
    }
    Ok(v)
}

/// A one-line progress indicator on standard error, redrawn in place when
/// it is a terminal (nothing otherwise, so logs stay clean).
pub fn progress(label: &str, done: usize, total: usize) {
    use std::io::IsTerminal;
    let err = std::io::stderr();
    if !err.is_terminal() {
        return;
    }
    let width = 20;
    let filled = (done * width).checked_div(total).unwrap_or(width);
    let what = if done == 0 {
        "warm-up".to_string()
    } else {
        format!("run {done}/{total}")
    };
    eprint!(
        "\r[{}{}] {label}: {what}\x1b[K",
        "#".repeat(filled),
        ".".repeat(width - filled)
    );
    if done == total {
        eprint!("\r\x1b[K");
    }
}

/// Median of `v` (which it sorts).
pub fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n == 0 {
        return f64::NAN;
    }
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// The median of `f` over `runs`, runs where it is NaN (not measured)
/// left out; NaN if none is left.
pub fn median_of<T>(runs: &[T], f: impl Fn(&T) -> f64) -> f64 {
    let mut v: Vec<f64> = runs.iter().map(f).filter(|x| !x.is_nan()).collect();
    median(&mut v)
}

/// The sample whose wall time is the median of the set: the run that stands
/// for a configuration in tables with per-run columns (user, system, wall).
pub fn median_run(samples: &[Sample]) -> Sample {
    let mut walls: Vec<f64> = samples.iter().map(|s| s.wall).collect();
    let m = median(&mut walls);
    samples
        .iter()
        .min_by(|a, b| (a.wall - m).abs().total_cmp(&(b.wall - m).abs()))
        .copied()
        .unwrap_or_default()
}

/// Mean of `v`.
pub fn mean(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len() as f64
}

/// Sample standard deviation of `v` (n - 1).
pub fn stddev(v: &[f64]) -> f64 {
    if v.len() < 2 {
        return 0.0;
    }
    let m = mean(v);
    (v.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / (v.len() - 1) as f64).sqrt()
}

/// The raw samples of one design at one thread count: what `results.json`
/// keeps for `compare`, and what the plots draw (median against threads).
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    /// Design (one line per design in the plot).
    pub design: String,
    /// Threads (tasks, clients).
    pub threads: usize,
    /// One throughput per run.
    pub samples: Vec<f64>,
    /// Unit of the samples ("faults/s", "GiB/s", ...).
    pub unit: String,
}

impl Series {
    /// A series of `samples` in `unit`.
    pub fn new(design: &str, threads: usize, samples: Vec<f64>, unit: &str) -> Series {
        Series {
            design: design.to_string(),
            threads,
            samples,
            unit: unit.to_string(),
        }
    }
}

/// A result table: a title, column names and rows of cells.
#[derive(Debug, Clone, Default)]
pub struct Table {
    /// Caption.
    pub title: String,
    /// Column names.
    pub columns: Vec<String>,
    /// Rows, each as many cells as columns.
    pub rows: Vec<Vec<String>>,
    /// Raw samples behind the rows (empty for tables that have none, such
    /// as lock profiles).
    pub series: Vec<Series>,
}

impl Table {
    /// A table with these columns.
    pub fn new(title: impl Into<String>, columns: &[&str]) -> Table {
        Table {
            title: title.into(),
            columns: columns.iter().map(|c| c.to_string()).collect(),
            rows: Vec::new(),
            series: Vec::new(),
        }
    }

    /// Appends a row (panics if the width is wrong: a scenario bug).
    pub fn row(&mut self, cells: Vec<String>) {
        assert_eq!(
            cells.len(),
            self.columns.len(),
            "row width in {}",
            self.title
        );
        self.rows.push(cells);
    }

    /// The cell of `column` in row `r`.
    pub fn cell(&self, r: usize, column: &str) -> Option<&str> {
        let c = self.columns.iter().position(|x| x == column)?;
        self.rows.get(r).map(|row| row[c].as_str())
    }

    /// Plain-text rendering with right-aligned columns (seed style); a
    /// one-column table (preformatted text) is printed as it is.
    pub fn render(&self) -> String {
        if self.columns.len() == 1 {
            let mut s = format!("{}\n", self.title);
            for r in &self.rows {
                s.push_str(&r[0]);
                s.push('\n');
            }
            return s;
        }
        let mut w: Vec<usize> = self.columns.iter().map(|c| c.len()).collect();
        for r in &self.rows {
            for (i, c) in r.iter().enumerate() {
                w[i] = w[i].max(c.len());
            }
        }
        let line = |cells: &[String]| {
            cells
                .iter()
                .enumerate()
                .map(|(i, c)| format!("{:>1$}", c, w[i]))
                .collect::<Vec<_>>()
                .join("  ")
        };
        let mut s = format!("{}\n{}\n", self.title, line(&self.columns));
        for r in &self.rows {
            s.push_str(&line(r));
            s.push('\n');
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statistics_match_textbook_values() {
        let mut v = vec![2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0];
        assert_eq!(mean(&v), 5.0);
        // sample standard deviation of this set: sqrt(32/7)
        assert!((stddev(&v) - (32.0f64 / 7.0).sqrt()).abs() < 1e-12);
        assert_eq!(median(&mut v), 4.5);
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), 2.0);
    }

    #[test]
    fn measure_counts_every_thread_and_cpu_time() {
        let s = measure(3, |t| {
            let mut x = 0u64;
            for i in 0..200_000u64 {
                x = x.wrapping_add(i ^ t as u64);
            }
            std::hint::black_box(x);
            Ok(10)
        })
        .unwrap();
        assert_eq!(s.ops, 30);
        assert!(s.wall > 0.0 && s.user + s.sys > 0.0);
    }

    #[test]
    fn a_thread_error_is_returned() {
        let e = measure(2, |t| {
            if t == 1 {
                Err(io::Error::other("boom"))
            } else {
                Ok(1)
            }
        })
        .unwrap_err();
        assert_eq!(e.to_string(), "boom");
    }
}

/// `n` processes spinning on the CPUs (a shell's empty loop each, nice 0,
/// in this process's session and so its scheduling group) until dropped:
/// the "busy machine" of the measurements under load.
#[derive(Debug)]
pub struct Busy(Vec<std::process::Child>);

impl Busy {
    /// Starts `n` spinners (none for 0).
    pub fn start(n: usize) -> std::io::Result<Busy> {
        let mut v = Vec::with_capacity(n);
        for _ in 0..n {
            v.push(
                std::process::Command::new("/bin/sh")
                    .args(["-c", "while :; do :; done"])
                    .stdin(std::process::Stdio::null())
                    .spawn()?,
            );
        }
        Ok(Busy(v))
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}
