"""Type stubs for pagecache (the compiled module pagecache._pagecache)."""

from collections.abc import Buffer
from os import PathLike
from types import TracebackType
from typing import Awaitable, Literal

ABI_VERSION: int

class PageCache:
    """A page cache: a memory budget of page frames shared by its files.

    Raises ``OSError`` (errno ``EINVAL``) for a bad configuration and
    ``ValueError`` for an unknown ``io_engine``.
    """

    def __init__(
        self,
        capacity: int = 256 << 20,
        page_size: int = 4096,
        *,
        direct_io: bool = True,
        io_engine: Literal["auto", "uring", "threads"] = "auto",
        readahead_max: int = 2 << 20,
        dirty_background_percent: int = 10,
        dirty_limit_percent: int = 30,
        dirty_expire: float | None = 30.0,
        stable_writes: bool = False,
        populate: bool = False,
        stream_reads: Literal["direct", "buffered", "measure"] = "measure",
        drop_behind_writes: bool = True,
    ) -> None:
        """``dirty_expire``: seconds a page may stay dirty before background
        write-back writes it (``None``: never by age; with frames to spare
        and the dirty count under the limit, age is the only reason it
        writes a page); ``populate``: fault the whole budget in now, so no read or write
        pays for a frame's first touch later; ``stream_reads``: how
        sequential streams are read: direct, through the kernel's cache
        without keeping its copy, or (the default) each device's faster of
        the two, measured (see ``pagecache::StreamReads``);
        ``drop_behind_writes``: a file written in order past an eighth of
        the cache, with the dirty count past the background threshold, is
        written back as it goes and its pages leave the cache once written
        (a log or a bulk load keeps neither the hot pages out nor the
        whole budget; see ``pagecache::Config::drop_behind_writes``)."""
    @staticmethod
    def shared(
        name: str,
        capacity: int = 256 << 20,
        page_size: int = 4096,
        *,
        dir: str | PathLike[str] | None = None,
        group: int | None = None,
        direct_io: bool = True,
        io_engine: Literal["auto", "uring", "threads"] = "auto",
        readahead_max: int = 2 << 20,
        dirty_background_percent: int = 10,
        dirty_limit_percent: int = 30,
        dirty_expire: float | None = 30.0,
        stable_writes: bool = False,
        populate: bool = False,
        stream_reads: Literal["direct", "buffered", "measure"] = "measure",
        drop_behind_writes: bool = True,
    ) -> PageCache:
        """The cache shared by processes under ``name``: created with these
        settings if no process has made it yet, else attached to (its
        capacity and page size must then be its creator's: ``OSError``,
        errno ``EINVAL``, naming both, otherwise). Every process that opens
        the same file through it shares one copy of its pages. The segment
        lives in ``dir`` (default ``/dev/shm``), readable and writable by
        this user only unless ``group`` (a group id) is given. Shared
        caches use the CLOCK policy."""
    @staticmethod
    def remove_shared(name: str, dir: str | PathLike[str] | None = None) -> None:
        """Removes the shared cache ``name`` if no live process is attached
        to it (``OSError`` otherwise)."""
    @property
    def shared_path(self) -> str | None:
        """The segment file of a shared cache; ``None`` for a private one."""
    def open(
        self,
        path: str | PathLike[str],
        mode: Literal["r", "r+", "w", "w+", "x", "x+", "rb", "r+b", "w+b", "x+b"] = "r+",
    ) -> File:
        """Opens ``path`` through the cache (``FileNotFoundError``,
        ``PermissionError``, ``FileExistsError``, ... on failure)."""
    def anon(self, length: int) -> AnonRegion:
        """An anonymous region of ``length`` bytes from the cache's budget:
        pages zero-filled on first touch, written nowhere."""
    def forget(self, path: str | PathLike[str]) -> int:
        """Drops the pages of unopened files at ``path`` kept after a failed
        close, without writing them; returns how many files."""
    def stats(self) -> dict[str, int | str]:
        """A snapshot of the counters: hits, misses, reads, writes,
        writebacks, evictions, dirty_pages, frames, free_frames, ...,
        and io_engine."""
    def stream_choices(self) -> list[dict[str, int | bool | float]]:
        """What ``stream_reads="measure"`` chose so far: per device,
        ``device``, ``buffered``, ``direct_rate`` and ``buffered_rate``
        (bytes per second)."""
    @property
    def page_size(self) -> int: ...
    @property
    def frames(self) -> int: ...
    @property
    def io_engine(self) -> Literal["uring", "threads"]: ...

class File:
    """A file opened through a PageCache; safe to share between threads.
    Operations on a closed file raise ``ValueError``. A file collected
    without ``close`` writes its dirty pages back (if it was the last
    handle) with the GIL released, and reports no error: use ``close``."""

    def read_at(self, offset: int, n: int) -> bytes:
        """Up to ``n`` bytes at ``offset`` (fewer only at end of file)."""
    def readinto_at(self, buffer: Buffer, offset: int) -> int:
        """Reads into a writable contiguous buffer; returns bytes read."""
    def write_at(self, data: Buffer, offset: int) -> int:
        """Writes all of ``data`` at ``offset``; returns ``len(data)``."""
    def len(self) -> int:
        """The file's length in bytes."""
    def set_len(self, length: int) -> None: ...
    def sync(self) -> None:
        """Writes dirty pages back, persists the length, fdatasync. Returns
        exactly when every page dirty at the call is on disk, else raises
        the error of its own writes; an earlier failure whose pages it
        wrote is not raised again."""
    def prefetch(self, offset: int, length: int) -> None:
        """Starts reading a range into the cache without waiting."""
    def page(self, index: int) -> Page:
        """Page ``index`` as a context manager yielding a read-only
        memoryview of the cached bytes (no copy)."""
    def page_mut(self, index: int) -> Page:
        """Page ``index`` latched, as a context manager yielding a writable
        memoryview of the cached bytes (no copy; numpy can write through
        it). The page is dirty when the block ends; others' reads and
        writes of it wait for the block. ``PermissionError`` through a
        read-only file."""
    def page_async(self, index: int) -> Awaitable[Page]:
        """``await f.page_async(i)``: page ``i`` pinned without blocking the
        running asyncio loop's thread (a miss is read while other tasks
        run; no thread waits for it); the ``Page`` is held already: ``with
        page as view:`` gives its bytes. A resolved page stays pinned until
        its block ends: keep more frames than tasks holding pages."""
    def page_mut_async(self, index: int) -> Awaitable[Page]:
        """``await f.page_mut_async(i)``: page ``i`` latched for writing
        without blocking the loop's thread; dirty when its block ends."""
    def read_at_async(self, offset: int, n: int) -> Awaitable[bytes]:
        """``await f.read_at_async(offset, n)``: up to ``n`` bytes at
        ``offset``, missing pages read without blocking the loop."""
    def pages(self, start: int, max: int = 16) -> Run:
        """A gang lookup: up to ``max`` (at most 16) consecutive pages from
        ``start``, each pinned on its own, as a context manager yielding a
        tuple of read-only memoryviews; missing pages are read in one
        batch. Shorter only at end of file (empty past it)."""
    def run(self, start: int, max: int = 16) -> Run:
        """Up to ``max`` (at most 16) consecutive pages from ``start`` as a
        context manager yielding a tuple of read-only memoryviews, one per
        page, held by one pin of their index leaf when cached. Shorter at
        end of file (empty past it), at a multiple of 64 pages, and at the
        first page not cached and idle."""
    def close(self) -> None:
        """Writes back and closes; reports a write-back error. Idempotent."""
    def discard(self) -> bool:
        """Closes without writing back; drops the file's pages if this was
        its last handle (returns whether it did), once no write-back of
        them is in flight."""
    @property
    def direct_io(self) -> bool: ...
    @property
    def path(self) -> str: ...
    @property
    def closed(self) -> bool: ...
    def __enter__(self) -> File: ...
    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool: ...

class AnonRegion:
    """Anonymous pages from a cache's budget (see ``PageCache.anon``)."""

    def page(self, index: int) -> Page:
        """Page ``index`` pinned: a read-only memoryview (zeros if never
        written)."""
    def page_mut(self, index: int) -> Page:
        """Page ``index`` latched: a writable memoryview."""
    def free(self, start: int, end: int) -> None:
        """Frees pages ``start..end``: they read as zeros when touched
        again."""
    def __len__(self) -> int: ...
    @property
    def pages(self) -> int: ...
    @property
    def resident(self) -> int: ...

class Page:
    """A page pinned (``page``) or latched (``page_mut``) for a ``with``
    block. Its memoryview is released when the block ends; a buffer still
    exported from it (a numpy array over the view) keeps the page held
    until that buffer goes."""

    def __enter__(self) -> memoryview: ...
    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool: ...
    @property
    def index(self) -> int: ...
    @property
    def pinned(self) -> bool: ...
    @property
    def writable(self) -> bool: ...

class Run:
    """Consecutive pages held for a ``with`` block (see ``File.run`` and
    ``File.pages``). Its
    memoryviews are released when the block ends; a buffer still exported
    from one keeps the whole run held until it goes."""

    def __enter__(self) -> tuple[memoryview, ...]: ...
    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool: ...
    @property
    def start(self) -> int: ...
    @property
    def held(self) -> bool: ...
    @property
    def one_pin(self) -> bool: ...
