//! `AnonRegion`: anonymous pages of the cache's budget.

use crate::page::{Owner, Page};
use pyo3::prelude::*;
use std::sync::Arc;

/// An anonymous region (see `PageCache.anon`): pages of the cache's budget
/// that belong to no file, zero-filled on first touch.
#[pyclass(module = "pagecache", frozen)]
pub(crate) struct AnonRegion {
    pub(crate) region: Arc<pagecache::AnonRegion>,
}

#[pymethods]
impl AnonRegion {
    /// Page `index` pinned, as a context manager giving a read-only
    /// memoryview (zeros if never written).
    fn page(&self, index: u64) -> Page {
        Page::new(Owner::Anon(self.region.clone()), index, false)
    }

    /// Page `index` latched, as a context manager giving a writable
    /// memoryview.
    fn page_mut(&self, index: u64) -> Page {
        Page::new(Owner::Anon(self.region.clone()), index, true)
    }

    /// Frees pages `start..end` (clamped to the region): their frames go
    /// back to the cache (pinned ones when their pin ends); they read as
    /// zeros when touched again.
    fn free(&self, start: u64, end: u64) {
        self.region.free(start..end);
    }

    /// The region's length in bytes.
    fn __len__(&self) -> usize {
        self.region.len() as usize
    }

    /// Pages in the region.
    #[getter]
    fn pages(&self) -> u64 {
        self.region.pages()
    }

    /// Pages that hold a frame right now.
    #[getter]
    fn resident(&self) -> usize {
        self.region.resident()
    }

    fn __repr__(&self) -> String {
        format!(
            "<pagecache.AnonRegion pages={} resident={}>",
            self.region.pages(),
            self.region.resident()
        )
    }
}
