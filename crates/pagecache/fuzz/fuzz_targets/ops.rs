//! The model check's operation stream (`tests/model/harness.rs`), with
//! every choice taken from the fuzzer's input instead of a seeded
//! generator: read_at, write_at, set_len, sync, page, page_mut, pages,
//! close and reopen, dropping the cache, and injected faults, against an
//! in-memory model; the file on disk is compared with the model after every
//! sync and close. Run (nightly, `cargo install cargo-fuzz`):
//!
//! ```sh
//! cd crates/pagecache && cargo +nightly fuzz run ops -- -max_total_time=60
//! ```
#![no_main]

/// What the harness takes from the tests' helpers (`tests/common`, which
/// needs the tests' dependencies).
mod common {
    /// A waker that does nothing.
    pub fn noop_waker() -> std::task::Waker {
        struct Noop;
        impl std::task::Wake for Noop {
            fn wake(self: std::sync::Arc<Self>) {}
        }
        std::sync::Arc::new(Noop).into()
    }
}
#[path = "../../tests/model/harness.rs"]
mod harness;

use harness::{Choose, Harness};
use libfuzzer_sys::fuzz_target;

/// Choices read from the input, eight bytes at a time; zeros once it runs
/// out (the driver stops then).
struct Bytes<'a> {
    data: &'a [u8],
}

impl Choose for Bytes<'_> {
    fn next(&mut self) -> u64 {
        let n = self.data.len().min(8);
        let mut b = [0u8; 8];
        b[..n].copy_from_slice(&self.data[..n]);
        self.data = &self.data[n..];
        u64::from_le_bytes(b)
    }
}

fuzz_target!(|data: &[u8]| {
    let dir = std::env::temp_dir().join(format!("pagecache-fuzz-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut src = Bytes { data };
    let frames = 4 + src.below(12) as usize;
    let handles = 1 + src.below(2) as usize;
    let mut h = Harness::new(&dir, "fuzz", 0, frames, handles);
    while !src.data.is_empty() {
        h.step(&mut src);
    }
    h.finish();
});
