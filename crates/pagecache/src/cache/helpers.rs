//! Helper threads for work a future hands off that has no asynchronous
//! form of its own (`sync_async`: the write-back of a file's dirty pages,
//! its length and `fdatasync`): at most [`MAX`] threads per cache, started
//! on demand and reused, each leaving once it has been idle for [`IDLE`].
//! A future that hands a job over returns `Pending` and is woken by the
//! job's completion (a `Handoff`), so no poll waits for it; jobs beyond
//! the threads wait in a queue. Under loom a job runs on its caller.

// Under loom there are no helper threads.
#![cfg_attr(loom, allow(dead_code))]

use crate::sync::unmodelled::{Condvar, Mutex};
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

/// Helper threads per cache.
const MAX: usize = 4;
/// How long a helper stays idle before it leaves.
const IDLE: Duration = Duration::from_secs(2);

/// One job: runs to its end on a helper thread.
pub(crate) type Job = Box<dyn FnOnce() + Send>;

#[derive(Default)]
struct Queue {
    jobs: VecDeque<Job>,
    idle: usize,
    threads: usize,
    stop: bool,
}

#[derive(Default)]
struct Shared {
    q: Mutex<Queue>,
    more: Condvar,
}

/// A cache's helper threads (see the module docs).
#[derive(Default)]
pub(crate) struct Helpers {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Helpers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let q = self.shared.q.lock();
        f.debug_struct("Helpers")
            .field("jobs", &q.jobs.len())
            .field("threads", &q.threads)
            .finish()
    }
}

impl Helpers {
    /// Queues `job` for a helper thread, starting one if none is idle and
    /// fewer than [`MAX`] run. An error if no thread can be had at all
    /// (the job is dropped, not run). Context: no sleep but a leaf mutex
    /// (and a thread spawn).
    pub(crate) fn run(&self, job: Job) -> std::io::Result<()> {
        #[cfg(loom)]
        {
            job();
            Ok(())
        }
        #[cfg(not(loom))]
        {
            let mut q = self.shared.q.lock();
            if q.stop {
                return Err(std::io::Error::other("the cache is shutting down"));
            }
            q.jobs.push_back(job);
            if q.idle > 0 || q.threads >= MAX {
                drop(q);
                self.shared.more.notify_one();
                return Ok(());
            }
            q.threads += 1;
            drop(q);
            let shared = self.shared.clone();
            match std::thread::Builder::new()
                .name("pagecache-help".into())
                .spawn(move || worker(&shared))
            {
                Ok(_) => Ok(()),
                Err(e) => {
                    let mut q = self.shared.q.lock();
                    q.threads -= 1;
                    if q.threads == 0 {
                        // Nobody to run it: ours is the last queued.
                        q.jobs.pop_back();
                        return Err(e);
                    }
                    Ok(())
                }
            }
        }
    }
}

impl Drop for Helpers {
    fn drop(&mut self) {
        // Threads finish the jobs queued (each holds what it works on),
        // then leave.
        self.shared.q.lock().stop = true;
        self.shared.more.notify_all();
    }
}

#[cfg(not(loom))]
fn worker(s: &Shared) {
    let mut q = s.q.lock();
    loop {
        if let Some(job) = q.jobs.pop_front() {
            drop(q);
            job();
            q = s.q.lock();
            continue;
        }
        if q.stop {
            q.threads -= 1;
            return;
        }
        q.idle += 1;
        let timed_out = s.more.wait_for(&mut q, IDLE).timed_out();
        q.idle -= 1;
        if timed_out && q.jobs.is_empty() {
            q.threads -= 1;
            return;
        }
    }
}
