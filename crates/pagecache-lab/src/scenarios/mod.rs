//! The scenarios, one file each. Each turns a seed (`docs/seeds.md`) into
//! measured tables; the runner (`runner.rs`) owns threads, timing and
//! statistics.

use crate::runner::{Opts, Table};
use std::io;

pub mod anon_fault;
pub mod async_reads;
pub mod btree;
pub mod out_of_memory;
pub mod own_part;
pub mod page_fault1;
pub mod page_lock;
pub mod processes;
pub mod same_file;
pub mod same_page;
mod seq_write;
pub mod tpcc;

/// A scenario: its name on the command line, what it reproduces, and the
/// function that runs it.
#[derive(Debug)]
pub struct Scenario {
    /// Command-line name.
    pub name: &'static str,
    /// One line: which seed, which designs.
    pub about: &'static str,
    /// Runs it.
    pub run: fn(&Opts) -> io::Result<Vec<Table>>,
}

/// Every scenario, in the order `all` runs them.
pub const ALL: &[Scenario] = &[
    Scenario {
        name: "own-part",
        about: "seed 000: tasks read every page of their own part of a cached file; mutex-tree vs rwlock-tree vs lockless, kernel mmap faults and pread beside",
        run: own_part::run,
    },
    Scenario {
        name: "same-file",
        about: "seed 001: clients stream one cached file into a sink; page() per page vs 16-page gang lookups vs 16-page runs (one leaf pin), kernel splice to /dev/null beside",
        run: same_file::run,
    },
    Scenario {
        name: "anon-fault",
        about: "seed 002: anonymous first-touch faults, per-CPU free lists vs one global lock, beside the kernel",
        run: anon_fault::run,
    },
    Scenario {
        name: "page-lock",
        about: "seed 003: CDN-like serving of small cached files; global page mutex vs hashed page locks vs per-page bits; ministat and lock profile",
        run: page_lock::run,
    },
    Scenario {
        name: "page-fault1",
        about: "seed 004: tasks map, touch and free 128 MiB anonymous regions; global LRU lock + global pool vs SMP list vs per-CPU pool vs both, kernel page_fault1 beside",
        run: page_fault1::run,
    },
    Scenario {
        name: "same-page",
        about: "will-it-scale pread2: threads read one page; optimistic vs pinned reads vs the kernel's pread",
        run: same_page::run,
    },
    Scenario {
        name: "processes",
        about: "one cache for many processes: N processes (the --threads counts up to 8) read every page of one file, cold; a cache shared by the processes vs a private cache each vs the kernel's pread and mmap; rate, memory (PSS summed), device reads; and same-page (pread2) and own-part (seed 000) with processes",
        run: processes::run,
    },
    Scenario {
        name: "out-of-memory",
        about: "CIDR 2022 / vmcache: a file 8x the budget, cold, in a memory cgroup; random reads, prefetch, scans, writes: pagecache vs buffered pread, mmap, O_DIRECT (the device)",
        run: out_of_memory::run,
    },
    Scenario {
        name: "async",
        about: "misses that never block a thread: random page reads of a file 8x the budget, cold; page_async on tokio (1 thread, 32/64 tasks; 2 threads) vs the device through io_uring at the same depth, blocking page() at 1 and 32 threads, tokio::fs-style pread, the kernel's pread; CPU per read",
        run: async_reads::run,
    },
    Scenario {
        name: "btree",
        about: "vmcache (SIGMOD 2023): a B+tree on the cache, vmcache's RNDREAD load + lookups, a Zipf update mix and scans, in and out of memory; optimistic vs pin coupling, vmcache itself with --vmcache PATH",
        run: btree::run,
    },
    Scenario {
        name: "tpcc",
        about: "vmcache (SIGMOD 2023): vmcache's TPC-C on the lab's B-tree, in and out of memory, vmcache itself with --vmcache PATH (also part of btree)",
        run: tpcc::run,
    },
];

/// The scenario called `name`.
pub fn find(name: &str) -> Option<&'static Scenario> {
    ALL.iter().find(|s| s.name == name)
}
