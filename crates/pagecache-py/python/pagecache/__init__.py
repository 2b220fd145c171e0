"""pagecache: a user-space page cache for many-core machines.

Open files through a ``PageCache`` with a memory budget you choose; read,
write, pin and sync their pages. Reads of cached pages cost no system call,
a pinned page is a zero-copy ``memoryview``, write-back errors are reported
(``OSError`` with ``errno``), and the GIL is released around every call that
may block.

>>> import pagecache
>>> cache = pagecache.PageCache(capacity=64 << 20)
>>> with cache.open("data.bin", "w+") as f:        # doctest: +SKIP
...     f.write_at(b"hello", 0)
...     f.sync()
...     with f.page(0) as view:
...         bytes(view[:5])
...     with f.page_mut(0) as view:                 # writable, dirty after
...         view[0] = ord("H")
...     with f.run(0, 16) as pages:                 # up to 16 pages, one pin
...         sum(len(p) for p in pages)

In asyncio code, ``await f.page_async(i)`` (a ``Page`` held already: ``with
page as view:``), ``await f.page_mut_async(i)`` and ``await f.read_at_async(off,
n)`` never block the loop's thread on a miss.
"""

import weakref

from ._pagecache import ABI_VERSION, AnonRegion, File, Page, PageCache, Run, _AsyncQueue

__all__ = ["PageCache", "File", "AnonRegion", "Page", "Run", "ABI_VERSION"]

# One queue of requests per asyncio event loop: its eventfd is watched by
# the loop, whose callback resolves the awaitables of ``File.page_async``,
# ``page_mut_async`` and ``read_at_async`` (the GIL is not held while a
# read is in flight, and no thread waits for one).
_queues: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _queue_for(loop):
    q = _queues.get(loop)
    if q is None:
        q = _AsyncQueue()
        loop.add_reader(q.fd(), q.collect)
        _queues[loop] = q
    return q
