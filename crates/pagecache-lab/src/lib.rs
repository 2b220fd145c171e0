//! The pagecache lab: each seed experiment as a scenario that prints its
//! table in the seed's shape, with the "before" and "after" designs run by
//! `pagecache` side by side and the kernel's page cache measured in the same
//! run. `main.rs` is only the command line.
//!
//! Scenarios: `own-part` (seed 000), `same-file` (seed 001), `anon-fault`
//! (seed 002), `page-lock` (seed 003), `page-fault1` (seed 004),
//! `same-page` (will-it-scale pread2), `out-of-memory` (data larger than
//! memory, beside the kernel) and `btree` (a B+tree on the cache against
//! vmcache). `report` writes `report.md`,
//! `results.json` (with every raw sample) and one SVG plot per scenario;
//! `compare` runs ministat over two result files.

pub mod ministat;
pub mod report;
pub mod runner;
pub mod scenarios;

/// Writes a file of `len` bytes of a fixed pattern (scenario data).
pub fn write_pattern_file(path: &std::path::Path, len: u64) -> io::Result<()> {
    use std::io::Write;
    let mut w = io::BufWriter::new(std::fs::File::create(path)?);
    let mut chunk = vec![0u8; 1 << 20];
    let mut pos = 0u64;
    while pos < len {
        let n = chunk.len().min((len - pos) as usize);
        for (k, b) in chunk[..n].iter_mut().enumerate() {
            *b = ((pos + k as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 56) as u8;
        }
        w.write_all(&chunk[..n])?;
        pos += n as u64;
    }
    w.flush()
}

use std::io;
use std::path::PathBuf;

/// A temporary directory removed when dropped (scenario data).
#[derive(Debug)]
pub struct TempDir(pub PathBuf);

impl TempDir {
    /// The directory.
    pub fn path(&self) -> &std::path::Path {
        &self.0
    }

    /// Creates a fresh directory under the system's temp dir.
    pub fn new(tag: &str) -> io::Result<TempDir> {
        use std::sync::atomic::{AtomicU64, Ordering};
        static N: AtomicU64 = AtomicU64::new(0);
        let p = std::env::temp_dir().join(format!(
            "pagecache-lab-{}-{tag}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&p)?;
        Ok(TempDir(p))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
