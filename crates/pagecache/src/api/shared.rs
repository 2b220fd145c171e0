//! The cache shared by processes: its constructors, its segment's file,
//! its removal (`docs/design.md`, "A cache shared by processes").

use super::{Config, Handle, Inner, IoEngine, PageCache, SharedOptions};
use crate::io::engine::Engine;
use crate::io::PosixBackend;
use std::io;
use std::path::Path;
use std::sync::Arc;

impl PageCache {
    /// The cache shared by processes under `name` (in `/dev/shm`, readable
    /// and writable by this user only): created as `config` says if no
    /// process has made it yet, else attached to, in which case `config`'s
    /// page size, capacity and policy must be its creator's (a mismatch is
    /// an error naming both). Every process that opens the same file (same
    /// device and inode, by any path) through it shares one copy of the
    /// file's pages, one budget and one replacement order; each reads and
    /// writes through the descriptors it opened itself. See
    /// [`PageCache::shared_with`] for the directory and a group, and
    /// `docs/design.md`, "A cache shared by processes", for what is shared
    /// and what is not yet (only
    /// [`PolicyKind::Clock`](super::PolicyKind::Clock) is shared so far).
    /// Its reads and writes go through the thread pool, never io_uring
    /// (`IoEngine::Uring` is an error): what a process that dies had in
    /// flight must end with its threads.
    pub fn shared(name: &str, config: Config) -> io::Result<PageCache> {
        Self::shared_with(name, config, &SharedOptions::default())
    }

    /// [`PageCache::shared`] in `opts.dir`, shared with `opts.group`.
    pub fn shared_with(name: &str, config: Config, opts: &SharedOptions) -> io::Result<PageCache> {
        config.frames()?;
        // Every read or write in flight is a thread's system call here
        // (protocol 5.14 D2): a process killed with io_uring requests in
        // flight may still move bytes into or out of a frame after all
        // its threads ended, and recovery would have given the frame to
        // another page by then.
        let asked = match config.io_engine {
            IoEngine::Auto | IoEngine::Threads => IoEngine::Threads,
            IoEngine::Uring => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!(
                        "shared cache {name:?}: io_engine Uring: a cache shared by processes \
                         reads and writes through its thread pool (the requests of a process \
                         that dies must end with its threads); use Auto or Threads"
                    ),
                ))
            }
        };
        let engine = Engine::new(asked, config.io_threads)?;
        let dir = opts
            .dir
            .clone()
            .unwrap_or_else(|| std::path::PathBuf::from(crate::segment::DEFAULT_DIR));
        let inner = Inner::shared(
            &config,
            Arc::new(PosixBackend),
            engine,
            &dir,
            name,
            opts.group,
        )?;
        Ok(PageCache {
            inner: Handle::new(inner),
            direct_io: config.direct_io,
        })
    }

    /// The file of a shared cache's segment (`None` for a private cache).
    pub fn shared_path(&self) -> Option<&Path> {
        self.inner.shared_path()
    }

    /// Removes the shared cache `name` from `dir` (`None`: `/dev/shm`) if
    /// no live process is attached to it; an error naming the processes
    /// otherwise.
    pub fn remove_shared(name: &str, dir: Option<&Path>) -> io::Result<()> {
        crate::segment::Segment::remove(dir.unwrap_or(Path::new(crate::segment::DEFAULT_DIR)), name)
    }
}
