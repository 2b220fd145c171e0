"""A cache shared by processes: a multiprocessing pool whose workers read
one file through one shared cache (content checked, every page read from
the device once: the workers' reads all hit the pages the parent cached),
pages written in one process read in another before any sync, and the
errors of a mismatched attach and of removing a cache in use."""

import errno
import multiprocessing
import os

import pytest

import pagecache

PS = 4096
PAGES = 64


def page(i):
    return bytes(((i * 7 + b) * 13) & 0xFF for b in range(PS))


def settings(d):
    # No background write-back: the tests decide when pages are written.
    return dict(capacity=128 * PS, dir=str(d), dirty_background_percent=100,
                dirty_limit_percent=100, dirty_expire=None, readahead_max=0)


def worker(args):
    d, path, lo, hi = args
    c = pagecache.PageCache.shared("t", **settings(d))
    with c.open(path, "r") as f:
        for i in range(lo, hi):
            assert f.read_at(i * PS, PS) == page(i), f"page {i}"
    return c.stats()["misses"]


def writer(args):
    d, path = args
    c = pagecache.PageCache.shared("t", **settings(d))
    with c.open(path, "r+") as f:
        assert f.read_at(0, PS) == b"p" * PS, "the parent's unsynced page"
        f.write_at(b"c" * PS, PS)
    return 0


@pytest.fixture
def ctx():
    # Fresh interpreters: no state of this one (threads, the cache) forked.
    return multiprocessing.get_context("spawn")


def test_pool_workers_share_one_copy(tmp_path, ctx):
    path = tmp_path / "data.bin"
    path.write_bytes(b"".join(page(i) for i in range(PAGES)))
    c = pagecache.PageCache.shared("t", **settings(tmp_path))
    assert c.shared_path == str(tmp_path / "pagecache.t")
    with c.open(path, "r") as f:
        for i in range(PAGES):
            assert f.read_at(i * PS, PS) == page(i)
        assert c.stats()["misses"] == PAGES
        with ctx.Pool(4) as pool:
            parts = [(str(tmp_path), str(path), k * 16, k * 16 + 16) for k in range(4)]
            misses = pool.map(worker, parts)
        # Every worker found every page it read in the cache the parent
        # filled: one copy, read from the device once.
        assert misses == [0, 0, 0, 0]


def test_a_write_in_one_process_is_read_in_another_before_sync(tmp_path, ctx):
    path = tmp_path / "f.bin"
    path.write_bytes(b"")
    c = pagecache.PageCache.shared("t", **settings(tmp_path))
    with c.open(path, "r+") as f:
        f.write_at(b"p" * PS, 0)
        assert path.stat().st_size == 0
        with ctx.Pool(1) as pool:
            assert pool.map(writer, [(str(tmp_path), str(path))]) == [0]
        assert f.len() == 2 * PS
        assert f.read_at(PS, PS) == b"c" * PS
        f.sync()
    assert path.read_bytes() == b"p" * PS + b"c" * PS


def test_errors(tmp_path):
    c = pagecache.PageCache.shared("t", **settings(tmp_path))
    with pytest.raises(OSError) as e:
        pagecache.PageCache.shared("t", **dict(settings(tmp_path), capacity=256 * PS))
    assert e.value.errno == errno.EINVAL and "256 frames" in str(e.value)
    with pytest.raises(OSError):
        pagecache.PageCache.remove_shared("t", dir=str(tmp_path))
    assert pagecache.PageCache(capacity=64 * PS).shared_path is None
    del c
    import gc
    gc.collect()
    pagecache.PageCache.remove_shared("t", dir=str(tmp_path))
    assert not os.path.exists(tmp_path / "pagecache.t")
