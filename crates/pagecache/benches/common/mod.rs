//! What the benchmarks share: the options every one of them takes and a
//! fast random number generator.

use std::time::Duration;

/// The file size, runs and time per variant (`--quick`, `--runs N`,
/// `--file-mib N`, `--ms N`).
pub struct Base {
    pub file_bytes: u64,
    pub runs: usize,
    pub dur: Duration,
}

impl Default for Base {
    fn default() -> Self {
        Base {
            file_bytes: 1 << 30,
            runs: 5,
            dur: Duration::from_millis(400),
        }
    }
}

impl Base {
    /// Takes `args[*i]` (and its value, moving `*i` past it) if it is one
    /// of the common options; whether it was. `quick_ms`: `--quick`'s time
    /// per variant.
    pub fn take(&mut self, args: &[String], i: &mut usize, quick_ms: u64) -> bool {
        match args[*i].as_str() {
            "--quick" => {
                self.file_bytes = 64 << 20;
                self.runs = 3;
                self.dur = Duration::from_millis(quick_ms);
            }
            "--runs" => {
                *i += 1;
                self.runs = args[*i].parse().expect("--runs N");
            }
            "--file-mib" => {
                *i += 1;
                self.file_bytes = args[*i].parse::<u64>().expect("--file-mib N") << 20;
            }
            "--ms" => {
                *i += 1;
                self.dur = Duration::from_millis(args[*i].parse().expect("--ms N"));
            }
            "--bench" => {}
            _ => return false,
        }
        true
    }
}

/// xorshift64.
pub struct Rng(pub u64);
impl Rng {
    #[inline]
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}
