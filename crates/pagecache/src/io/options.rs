//! [`OpenOptions`]: how the cache opens a file.

/// How to open a file. Mirrors `std::fs::OpenOptions` (no append: the cache
/// writes at explicit offsets).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpenOptions {
    pub(crate) read: bool,
    pub(crate) write: bool,
    pub(crate) create: bool,
    pub(crate) create_new: bool,
    pub(crate) truncate: bool,
    /// Ask for direct I/O (`O_DIRECT`); set by the cache from
    /// `Config::direct_io`.
    pub(crate) direct: bool,
}

impl Default for OpenOptions {
    fn default() -> Self {
        Self::new()
    }
}

impl OpenOptions {
    /// All options off (like `std::fs::OpenOptions::new`).
    pub fn new() -> Self {
        OpenOptions {
            read: false,
            write: false,
            create: false,
            create_new: false,
            truncate: false,
            direct: false,
        }
    }
    /// Open for reading.
    pub fn read(&mut self, v: bool) -> &mut Self {
        self.read = v;
        self
    }
    /// Open for writing.
    pub fn write(&mut self, v: bool) -> &mut Self {
        self.write = v;
        self
    }
    /// Create the file if missing (needs `write`).
    pub fn create(&mut self, v: bool) -> &mut Self {
        self.create = v;
        self
    }
    /// Create the file, failing if it exists (needs `write`).
    pub fn create_new(&mut self, v: bool) -> &mut Self {
        self.create_new = v;
        self
    }
    /// Truncate to length 0 on open (needs `write`). Done through the cache,
    /// so pages another handle cached are dropped too.
    pub fn truncate(&mut self, v: bool) -> &mut Self {
        self.truncate = v;
        self
    }
    /// Whether writes are allowed.
    pub fn is_write(&self) -> bool {
        self.write
    }
    /// Whether direct I/O (`O_DIRECT`) is asked for: set by the cache from
    /// `Config::direct_io`; a backend that cannot do it ignores it.
    pub fn is_direct(&self) -> bool {
        self.direct
    }
}
