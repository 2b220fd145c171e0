//! The pagecache lab: each seed experiment as a scenario that prints its
//! table in the seed's shape, with the "before" and "after" designs run by
//! `pagecache` side by side and the kernel's page cache measured in the same
//! run. `main.rs` is only the command line.
//!
//! Scenarios so far: `own-part` (seed 000), `anon-fault` (seed 002),
//! `page-lock` (seed 003) and `same-page` (pread2). Still to come (issue 4):
//! `same-file` (seed 001), `page-fault1` (seed 004), `compare`, SVG plots,
//! a progress bar.

pub mod ministat;
pub mod runner;
pub mod scenarios;

use std::io;
use std::path::PathBuf;

/// A temporary directory removed when dropped (scenario data).
#[derive(Debug)]
pub struct TempDir(pub PathBuf);

impl TempDir {
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
