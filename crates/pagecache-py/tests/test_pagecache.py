"""The Python package: API, errors with errno, pins released on exit and
after exceptions, many threads with content checks, views outliving their
block."""

import errno
import gc
import os
import threading

import pytest

import pagecache

PS = 4096


def pattern(start, n):
    return bytes((i * 31 + 7) & 0xFF for i in range(start, start + n))


@pytest.fixture
def cache():
    return pagecache.PageCache(capacity=64 * PS)


def test_write_read_sync_reaches_the_disk(cache, tmp_path):
    p = tmp_path / "f.bin"
    data = pattern(0, 10 * PS + 123)
    with cache.open(p, "w+") as f:
        assert f.write_at(data, 0) == len(data)
        assert f.len() == len(data)
        assert f.read_at(0, len(data)) == data
        assert f.read_at(len(data) - 5, 100) == data[-5:]  # short only at EOF
        assert f.read_at(len(data) + 10, 5) == b""
        f.sync()
        assert p.read_bytes() == data
        st = cache.stats()
        assert st["dirty_pages"] == 0 and st["writebacks"] >= 11
        assert st["io_engine"] in ("uring", "threads")
        assert f.path == str(p) and not f.closed
    assert f.closed


def test_readinto_at_fills_the_callers_buffer(cache, tmp_path):
    p = tmp_path / "f.bin"
    p.write_bytes(pattern(0, 3 * PS))
    f = cache.open(p, "r")
    buf = bytearray(PS + 10)
    assert f.readinto_at(buf, 100) == PS + 10
    assert bytes(buf) == pattern(100, PS + 10)
    mv = memoryview(buf)[5:15]
    assert f.readinto_at(mv, 0) == 10
    assert bytes(buf[5:15]) == pattern(0, 10)
    with pytest.raises(BufferError):
        f.readinto_at(b"read-only bytes", 0)
    # writes take any bytes-like object
    f.close()
    g = cache.open(p, "r+")
    assert g.write_at(bytearray(b"xyz"), 1) == 3
    assert g.write_at(memoryview(b"abcdef")[2:4], 10) == 2
    assert g.read_at(0, 12)[1:4] == b"xyz" and g.read_at(10, 2) == b"cd"
    g.close()


def test_set_len_prefetch_and_stats(cache, tmp_path):
    p = tmp_path / "f.bin"
    with cache.open(p, "w+") as f:
        f.write_at(pattern(0, 8 * PS), 0)
        f.set_len(100)
        f.set_len(2 * PS)
        got = f.read_at(0, 2 * PS)
        assert got[:100] == pattern(0, 100) and got[100:] == bytes(2 * PS - 100)
        f.prefetch(0, 1 << 20)  # past EOF: ignored
        f.prefetch(1 << 40, 10)
    s = cache.stats()
    for k in ("hits", "misses", "reads", "writes", "evictions", "frames", "free_frames"):
        assert isinstance(s[k], int)
    assert s["frames"] == 64 and cache.frames == 64 and cache.page_size == PS


def test_errors_are_oserror_subclasses_with_errno(cache, tmp_path):
    with pytest.raises(FileNotFoundError) as e:
        cache.open(tmp_path / "missing", "r")
    assert e.value.errno == errno.ENOENT and "missing" in str(e.value)
    p = tmp_path / "f.bin"
    p.write_bytes(b"abc")
    with pytest.raises(FileExistsError) as e:
        cache.open(p, "x+")
    assert e.value.errno == errno.EEXIST
    f = cache.open(p, "r")
    with pytest.raises(PermissionError) as e:
        f.write_at(b"x", 0)
    assert e.value.errno == errno.EACCES and "read-only" in str(e.value)
    with pytest.raises(OSError) as e:
        with f.page(5):
            pass
    assert e.value.errno == errno.ENXIO and "page 5" in str(e.value)
    with pytest.raises(OSError) as e:
        pagecache.PageCache(capacity=PS)  # fewer than four frames
    assert e.value.errno == errno.EINVAL
    with pytest.raises(ValueError):
        pagecache.PageCache(io_engine="fast")
    with pytest.raises(ValueError):
        cache.open(p, "a")
    f.close()
    with pytest.raises(ValueError, match="closed file"):
        f.read_at(0, 1)
    f.close()  # twice: nothing


def test_enospc_on_a_full_filesystem_is_reported_with_errno(tmp_path):
    # /dev/shm is tmpfs; a file larger than the space left fails with
    # ENOSPC only where it is small, so use a tmpfs we mount when root.
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    mnt = tmp_path / "tiny"
    mnt.mkdir()
    if os.system(f"mount -t tmpfs -o size=64k tmpfs {mnt} 2>/dev/null") != 0:
        pytest.skip("cannot mount tmpfs here")
    try:
        c = pagecache.PageCache(capacity=64 * PS)
        f = c.open(mnt / "big", "w+")
        with pytest.raises(OSError) as e:
            f.write_at(b"z" * (256 * 1024), 0)
            f.sync()
        assert e.value.errno == errno.ENOSPC
        # nothing was lost: the pages are still dirty, and close says so
        assert c.stats()["dirty_pages"] > 0
        with pytest.raises(OSError) as e:
            f.close()
        assert e.value.errno == errno.ENOSPC
        # the cache keeps the unwritten file; forget drops it (and closes
        # its descriptors, so the filesystem can be unmounted)
        assert c.forget(mnt / "big") == 1
        assert c.stats()["dirty_pages"] == 0
        g = c.open(mnt / "small", "w+")
        g.write_at(b"temporary", 0)
        assert g.discard() is True and g.closed
        assert g.discard() is False
        del c, f, g
        gc.collect()
    finally:
        assert os.system(f"umount {mnt}") == 0, "tmpfs still busy: a descriptor leaked"


def test_page_is_a_zero_copy_read_only_view_released_on_exit(cache, tmp_path):
    p = tmp_path / "f.bin"
    p.write_bytes(pattern(0, 2 * PS))
    f = cache.open(p)
    page = f.page(1)
    with page as view:
        assert page.pinned
        assert isinstance(view, memoryview) and view.readonly and len(view) == PS
        assert bytes(view[:8]) == pattern(PS, 8)
        with pytest.raises(TypeError):
            view[0] = 1
        with f.page(1) as again:  # two pins of one page: same bytes
            assert bytes(again) == bytes(view)
    assert not page.pinned
    with pytest.raises(ValueError):
        view[0]  # released memoryview: an error, not a crash
    with pytest.raises(ValueError):
        with page:  # a Page is entered once
            pass
    f.close()


def test_run_gives_views_of_consecutive_pages_under_one_pin(cache, tmp_path):
    p = tmp_path / "f.bin"
    p.write_bytes(pattern(0, 40 * PS))
    f = cache.open(p, "r+")
    for start in (0, 16):
        with f.run(start, 16) as cold:  # read in: a pin per page
            assert len(cold) == 16
    run = f.run(2, 16)
    with run as pages:
        assert run.held and run.one_pin and run.start == 2
        assert len(pages) == 16
        for k, v in enumerate(pages):
            assert isinstance(v, memoryview) and v.readonly and len(v) == PS
            assert bytes(v) == pattern((2 + k) * PS, PS)
        with pytest.raises(TypeError):
            pages[0][0] = 1
        # a writer of one of its pages waits for the run
        done = threading.Event()
        w = threading.Thread(target=lambda: (f.write_at(b"W", 3 * PS), done.set()))
        w.start()
        assert not done.wait(0.2)
        assert bytes(pages[1][:1]) == pattern(3 * PS, 1)
    assert not run.held
    w.join()
    assert done.is_set() and f.read_at(3 * PS, 1) == b"W"
    with pytest.raises(ValueError):
        pages[0][0]  # released: an error, not a crash
    with pytest.raises(ValueError):
        with run:  # a Run is entered once
            pass
    with f.run(40) as past_end:
        assert past_end == ()
    with f.run(60, 16) as tail:  # 40 pages: nothing from 40 on
        assert tail == ()
    with f.run(36, 16) as last:
        assert len(last) == 4
    f.close()


def test_a_view_exported_from_a_run_keeps_it_held(cache, tmp_path):
    p = tmp_path / "f.bin"
    p.write_bytes(pattern(0, 4 * PS))
    f = cache.open(p, "r+")
    run = f.run(0, 4)
    with run as pages:
        kept = memoryview(pages[2])  # a second export of page 2
    assert run.held, "an export still holds the run"
    assert bytes(kept[:8]) == pattern(2 * PS, 8)
    kept.release()
    assert not run.held
    f.write_at(b"ok", 0)  # no writer waits for a leaked run
    f.close()


def test_pins_are_released_after_an_exception(cache, tmp_path):
    p = tmp_path / "f.bin"
    p.write_bytes(pattern(0, PS))
    f = cache.open(p)
    page = f.page(0)
    with pytest.raises(RuntimeError):
        with page as view:
            assert view[0] == pattern(0, 1)[0]
            raise RuntimeError("boom")
    assert not page.pinned
    # a writer would wait for a leaked pin forever: it does not
    f.write_at(b"Q", 0)
    assert f.read_at(0, 1) == b"Q"
    f.close()


def test_numpy_frombuffer_over_a_page(cache, tmp_path):
    np = pytest.importorskip("numpy")
    p = tmp_path / "f.bin"
    p.write_bytes(pattern(0, PS))
    f = cache.open(p)
    page = f.page(0)
    with page as view:
        arr = np.frombuffer(view, dtype=np.uint8)
        assert arr.shape == (PS,) and bytes(arr[:16]) == pattern(0, 16)
        words = np.frombuffer(view, dtype=np.uint32)
        assert words.shape == (PS // 4,)
        # no copy: a second pin of the page exposes the same address (the
        # frame in the cache), not a copy of its bytes
        with f.page(0) as again:
            other = np.frombuffer(again, dtype=np.uint8)
            assert other.ctypes.data == arr.ctypes.data
            del other
    # the array still exports the page's buffer: the page stays pinned (the
    # array's bytes stay valid) until the array goes
    assert page.pinned
    assert bytes(arr[:16]) == pattern(0, 16)
    del arr, words
    gc.collect()
    assert not page.pinned
    f.close()


def test_many_threads_read_and_write_with_content_checks(tmp_path):
    # 32 frames for 96 pages and 16 threads on 2 cores: evictions,
    # write-back and waiting on each other's latches, GIL released.
    cache = pagecache.PageCache(capacity=32 * PS)
    p = tmp_path / "f.bin"
    pages, nthreads, rounds = 96, 16, 5
    f = cache.open(p, "w+")
    f.set_len(pages * PS)
    errors = []

    def work(t):
        try:
            x = t * 7919 + 1
            for r in range(1, rounds + 1):
                for pg in range(t, pages, nthreads):
                    f.write_at(bytes([(t * 16 + r) & 0xFF]) * PS, pg * PS)
                for k in range(24):
                    x = (x * 1103515245 + 12345) & 0xFFFFFFFF
                    pg = (x >> 8) % pages
                    if k % 3 == 0:
                        with f.page(pg) as v:
                            b = bytes(v)
                    elif k % 3 == 1:
                        b = f.read_at(pg * PS, PS)
                    else:
                        buf = bytearray(PS)
                        assert f.readinto_at(buf, pg * PS) == PS
                        b = bytes(buf)
                    assert b == bytes([b[0]]) * PS, f"page {pg} torn"
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(nthreads)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, errors
    f.sync()
    disk = p.read_bytes()
    for pg in range(pages):
        want = bytes([((pg % nthreads) * 16 + rounds) & 0xFF]) * PS
        assert disk[pg * PS:(pg + 1) * PS] == want, f"page {pg}"
    f.close()


def test_close_with_a_page_still_exported_syncs_and_keeps_it_valid(cache, tmp_path):
    np = pytest.importorskip("numpy")
    p = tmp_path / "f.bin"
    f = cache.open(p, "w+")
    f.write_at(pattern(0, PS), 0)
    with f.page(0) as view:
        arr = np.frombuffer(view, dtype=np.uint8)
    f.close()  # the array's pin keeps the file; its data is synced
    assert p.read_bytes() == pattern(0, PS)
    assert bytes(arr[:4]) == pattern(0, 4)
    del arr
    gc.collect()


def test_engines_and_buffered_io(tmp_path):
    for engine in ("threads", "uring"):
        try:
            # Stable pages with one engine: writers wait for write-back.
            c = pagecache.PageCache(
                capacity=16 * PS,
                io_engine=engine,
                direct_io=False,
                stable_writes=engine == "uring",
            )
        except OSError:
            assert engine == "uring"  # refused by this kernel: fine
            continue
        assert c.io_engine == engine
        p = tmp_path / f"{engine}.bin"
        with c.open(p, "w+") as f:
            f.write_at(pattern(0, 40 * PS), 0)
            assert not f.direct_io
            assert f.read_at(0, 40 * PS) == pattern(0, 40 * PS)
        assert p.read_bytes() == pattern(0, 40 * PS)


def test_a_call_waiting_in_the_cache_releases_the_gil(tmp_path):
    # A writer of a pinned page waits for the pin. Were the GIL held while
    # it waits, the pinning thread could never run again to leave its
    # `with` block: a deadlock. Run in a child so a hang fails, not hangs.
    import subprocess
    import sys

    code = f"""
import threading, time, pagecache
c = pagecache.PageCache(capacity=64 * 4096)
f = c.open({str(tmp_path / 'g.bin')!r}, "w+")
f.write_at(b"a" * 4096, 0)
done = []
with f.page(0) as v:
    t = threading.Thread(target=lambda: (f.write_at(b"b", 0), done.append(1)))
    t.start()
    time.sleep(0.2)             # the writer is waiting for our pin by now
    assert not done and v[0] == ord("a")
    x = sum(range(100000))      # needs the GIL, which the waiter must not hold
t.join()
assert done and f.read_at(0, 1) == b"b"
print("ok")
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr


@pytest.mark.parametrize("holder", ["file", "page", "run"])
def test_dropping_the_last_handle_writes_back_without_the_gil(tmp_path, holder):
    # The last handle of a file dropped without close() (the File itself,
    # or a Page or Run made from it, which keeps the file open)
    # writes its dirty pages back during the object's deallocation. A
    # spinning thread records when it runs; with the GIL released during
    # the write-back, it keeps running through the middle of the drop.
    # Holding the GIL, it could not run there at all (it gets the GIL only
    # before the drop starts, for at most the switch interval, or after).
    import sys
    import time

    mib = 1 << 20
    size = 256 * mib
    c = pagecache.PageCache(
        capacity=size + 16 * mib,
        dirty_background_percent=100,
        dirty_limit_percent=100,
    )
    p = tmp_path / "big.bin"
    f = c.open(p, "w+")
    chunk = bytes(range(256)) * (mib // 256)
    for i in range(size // mib):
        f.write_at(chunk, i * mib)
    assert c.stats()["dirty_pages"] * PS == size
    if holder != "file":
        last = f.page(0) if holder == "page" else f.run(0)
        del f  # the Page or Run still holds the file: no write-back yet
        assert c.stats()["dirty_pages"] * PS == size
        f = last
        del last
    ticks = []
    stop = threading.Event()

    def spin():
        while not stop.is_set():
            ticks.append(time.monotonic())

    t = threading.Thread(target=spin)
    t.start()
    time.sleep(0.02)
    t0 = time.monotonic()
    del f  # the file's last handle: writes 256 MiB back
    t1 = time.monotonic()
    stop.set()
    t.join()
    gc.collect()
    drop = t1 - t0
    assert drop > 0.03, f"the write-back took {drop * 1e3:.1f} ms: too fast to tell"
    eps = sys.getswitchinterval() + 0.001
    inside = [x for x in ticks if t0 + eps < x < t1 - eps]
    assert len(inside) > 100, (
        f"the spinning thread ran {len(inside)} times in the middle of a "
        f"{drop * 1e3:.0f} ms drop: the GIL was held"
    )
    assert p.stat().st_size == size
    with open(p, "rb") as g:
        for i in range(size // mib):
            assert g.read(mib) == chunk, f"MiB {i}"


def test_a_populated_cache_works_as_any_other(tmp_path):
    c = pagecache.PageCache(capacity=8 << 20, populate=True)
    with c.open(tmp_path / "p.bin", "w+") as f:
        f.write_at(pattern(0, 5 * PS), 0)
        assert f.read_at(0, 5 * PS) == pattern(0, 5 * PS)
    assert (tmp_path / "p.bin").read_bytes() == pattern(0, 5 * PS)


def test_stream_reads_buffered_and_measured_read_right(tmp_path):
    data = pattern(0, 16 << 20)
    (tmp_path / "s.bin").write_bytes(data)
    for mode in ("buffered", "measure"):
        c = pagecache.PageCache(capacity=4 << 20, stream_reads=mode)
        with c.open(tmp_path / "s.bin", "r") as f:
            for off in range(0, len(data), 1 << 20):
                assert f.read_at(off, 1 << 20) == data[off : off + (1 << 20)], off
        if mode == "buffered":
            # Four times the cache: the stream bypasses the frames.
            assert c.stats()["streamed_pages"] >= (len(data) >> 12) - 256
        choices = c.stream_choices()
        assert len(choices) <= (1 if mode == "measure" else 0)
        for ch in choices:
            assert ch["device"] == os.stat(tmp_path / "s.bin").st_dev
            assert ch["direct_rate"] > 0 and ch["buffered_rate"] > 0
    with pytest.raises(ValueError, match="stream_reads"):
        pagecache.PageCache(stream_reads="sideways")


def test_a_page_dirty_past_dirty_expire_is_written_back_without_a_sync(tmp_path):
    import time

    c = pagecache.PageCache(capacity=64 * PS, dirty_expire=0.05)
    with c.open(tmp_path / "e.bin", "w+") as f:
        f.write_at(b"aged", 0)
        deadline = time.monotonic() + 20
        while c.stats()["writebacks"] == 0 or c.stats()["dirty_pages"] != 0:
            assert time.monotonic() < deadline, c.stats()
            time.sleep(0.01)
        assert (tmp_path / "e.bin").read_bytes() == b"aged"
    # None: never by age (frames to spare, under the limit: nothing else
    # writes it).
    c = pagecache.PageCache(capacity=64 * PS, dirty_expire=None)
    with c.open(tmp_path / "n.bin", "w+") as f:
        f.write_at(b"young", 0)
        time.sleep(0.2)
        assert c.stats()["writebacks"] == 0 and c.stats()["dirty_pages"] == 1
        f.sync()
        assert c.stats()["writebacks"] == 1
    for bad in (-1.0, float("nan")):
        with pytest.raises(ValueError, match="dirty_expire"):
            pagecache.PageCache(dirty_expire=bad)


def test_page_mut_is_a_writable_view_and_the_page_is_dirty_after(tmp_path):
    cache = pagecache.PageCache(
        capacity=64 * PS, dirty_background_percent=100, dirty_limit_percent=100
    )
    p = tmp_path / "f.bin"
    p.write_bytes(pattern(0, 4 * PS))
    f = cache.open(p, "r+")
    page = f.page_mut(2)
    assert page.writable
    with page as view:
        assert not view.readonly and len(view) == PS
        assert bytes(view[:8]) == pattern(2 * PS, 8)
        view[:5] = b"hello"
        # others wait for the latch: a reader on another thread
        got = []
        r = threading.Thread(target=lambda: got.append(f.read_at(2 * PS, 5)))
        r.start()
        r.join(0.2)
        assert r.is_alive() and not got
    r.join()
    assert got == [b"hello"] and not page.pinned
    assert cache.stats()["dirty_pages"] == 1
    assert p.read_bytes()[2 * PS : 2 * PS + 5] == pattern(2 * PS, 5)  # not yet
    f.sync()
    assert p.read_bytes()[2 * PS : 2 * PS + 5] == b"hello"
    with pytest.raises(ValueError):
        view[0] = 1  # released
    with f.page(2) as ro:  # a pinned page stays read-only
        with pytest.raises(TypeError):
            ro[0] = 1
    f.close()
    with cache.open(p, "r") as r:
        with pytest.raises(PermissionError):
            with r.page_mut(0):
                pass


def test_numpy_writes_through_a_latched_page(tmp_path):
    np = pytest.importorskip("numpy")
    cache = pagecache.PageCache(capacity=64 * PS)
    p = tmp_path / "f.bin"
    with cache.open(p, "w+") as f:
        f.set_len(2 * PS)
        with f.page_mut(1) as view:
            words = np.frombuffer(view, dtype=np.uint32)
            assert words.flags.writeable
            words[:] = np.arange(PS // 4, dtype=np.uint32)
            del words
        f.sync()
    disk = np.frombuffer(p.read_bytes()[PS:], dtype=np.uint32)
    assert (disk == np.arange(PS // 4, dtype=np.uint32)).all()


def test_pages_pins_each_page_and_reads_misses(cache, tmp_path):
    p = tmp_path / "f.bin"
    p.write_bytes(pattern(0, 20 * PS + 100))
    f = cache.open(p, "r+")
    gang = f.pages(3, 8)
    with gang as pages:
        assert gang.held and not gang.one_pin
        assert len(pages) == 8
        for k, v in enumerate(pages):
            assert v.readonly and bytes(v) == pattern((3 + k) * PS, PS)
    assert not gang.held
    with f.pages(18) as tail:  # 21 pages: 18, 19, 20 (the last partial)
        assert len(tail) == 3
        assert bytes(tail[2][:100]) == pattern(20 * PS, 100)
        assert bytes(tail[2][100:]) == bytes(PS - 100)
    with f.pages(21) as none:
        assert none == ()
    f.close()


def test_anonymous_regions_are_zero_filled_writable_and_freed(cache):
    np = pytest.importorskip("numpy")
    region = cache.anon(8 * PS)
    assert len(region) == 8 * PS and region.pages == 8 and region.resident == 0
    with region.page(3) as view:
        assert view.readonly and bytes(view) == bytes(PS)
    with region.page_mut(5) as view:
        arr = np.frombuffer(view, dtype=np.uint8)
        arr[:] = 7
        del arr
    assert region.resident >= 1
    with region.page(5) as view:
        assert bytes(view) == bytes([7]) * PS
    region.free(0, 8)
    with region.page(5) as view:
        assert bytes(view) == bytes(PS), "freed pages read zeros again"
    with pytest.raises(OSError):
        with region.page(8):  # past the end
            pass
    del region
    gc.collect()


@pytest.mark.parametrize("drop_behind", [True, False])
def test_a_long_write_stream_is_dropped_behind_unless_asked_not_to(tmp_path, drop_behind):
    # 16 MiB written in order into a 32 MiB cache: past 4 MiB (the
    # smallest stream) and the background threshold (3.2 MiB dirty), the
    # stream's pages are written back as it goes and leave the cache
    # (evictions); with drop_behind_writes=False they all stay cached.
    mib = 1 << 20
    c = pagecache.PageCache(
        capacity=32 * mib,
        dirty_limit_percent=100,
        dirty_expire=None,
        drop_behind_writes=drop_behind,
    )
    p = tmp_path / "stream.bin"
    chunk = bytes(range(256)) * (mib // 256)
    with c.open(p, "w+") as f:
        for i in range(16):
            f.write_at(chunk, i * mib)
        f.sync()
        assert (c.stats()["evictions"] > 0) == drop_behind
        assert f.read_at(15 * mib, mib) == chunk
    assert p.read_bytes() == chunk * 16
