"""asyncio: many concurrent tasks awaiting pages of a file larger than the
cache, with content checks; writes through page_mut_async; read_at_async;
cancellation; errors; and the loop's thread never blocked on a miss."""

import asyncio
import os
import random
import time

import pytest

import pagecache

PS = 4096


def make_file(path, pages):
    # Page i holds its number in its first 8 bytes, then a pattern.
    with open(path, "wb") as f:
        for i in range(pages):
            head = i.to_bytes(8, "little")
            f.write(head + bytes((i * 7 + k) % 251 for k in range(PS - 8)))
        f.flush()
        os.fsync(f.fileno())


def check(view, i):
    assert int.from_bytes(bytes(view[:8]), "little") == i, f"page {i}"
    assert view[100] == (i * 7 + 92) % 251


def test_many_tasks_await_pages_of_a_file_larger_than_the_cache(tmp_path):
    # A resolved page stays pinned until its task runs its `with` block:
    # 64 tasks may hold 64 frames at once, so the cache has more than that
    # (fewer would rightly be OutOfMemory, as for 64 threads holding pins).
    p = tmp_path / "f.bin"
    make_file(p, 1024)
    cache = pagecache.PageCache(capacity=128 * PS)
    f = cache.open(str(p))

    async def reader(seed):
        rng = random.Random(seed)
        for _ in range(60):
            i = rng.randrange(1024)
            page = await f.page_async(i)
            with page as view:
                check(view, i)

    async def main():
        await asyncio.gather(*(reader(s) for s in range(64)))

    asyncio.run(main())
    st = cache.stats()
    assert st["misses"] >= 100, st
    f.close()


def test_read_at_async_and_page_mut_async_round_trip(tmp_path):
    p = tmp_path / "f.bin"
    make_file(p, 40)
    cache = pagecache.PageCache(capacity=8 * PS)
    f = cache.open(str(p), "r+")
    want = bytearray(p.read_bytes())

    async def main():
        got = await f.read_at_async(PS - 10, 3 * PS)
        assert got == bytes(want[PS - 10 : 4 * PS - 10])
        assert await f.read_at_async(40 * PS - 5, 100) == bytes(want[-5:])
        assert await f.read_at_async(40 * PS, 10) == b""
        for i in (3, 30, 3):
            page = await f.page_mut_async(i)
            with page as view:
                view[200] = 0xAB
            want[i * PS + 200] = 0xAB
        # Writers and readers of one page at once: whole pages only.
        async def bump():
            for _ in range(20):
                page = await f.page_mut_async(5)
                with page as view:
                    c = int.from_bytes(bytes(view[8:16]), "little") + 1
                    view[8:16] = c.to_bytes(8, "little")
                await asyncio.sleep(0)

        async def look():
            for _ in range(40):
                page = await f.page_async(5)
                with page as view:
                    assert int.from_bytes(bytes(view[:8]), "little") == 5

        await asyncio.gather(bump(), bump(), look(), look())

    asyncio.run(main())
    f.sync()
    disk = p.read_bytes()
    assert disk[3 * PS + 200] == 0xAB and disk[30 * PS + 200] == 0xAB
    assert int.from_bytes(disk[5 * PS + 8 : 5 * PS + 16], "little") == int.from_bytes(
        bytes(want[5 * PS + 8 : 5 * PS + 16]), "little"
    ) + 40
    f.close()


def test_cancelled_awaits_leave_nothing_pinned(tmp_path):
    p = tmp_path / "f.bin"
    make_file(p, 512)
    cache = pagecache.PageCache(capacity=64 * PS)
    f = cache.open(str(p), "r+")

    async def one(rng):
        i = rng.randrange(512)
        try:
            if rng.random() < 0.5:
                page = await asyncio.wait_for(f.page_async(i), timeout=rng.random() / 5000)
                with page as view:
                    check(view, i)
            else:
                page = await asyncio.wait_for(f.page_mut_async(i), timeout=rng.random() / 5000)
                with page as view:
                    check(view, i)
        except asyncio.TimeoutError:
            return 1
        return 0

    async def main():
        rng = random.Random(7)
        n = 0
        for _ in range(20):
            n += sum(await asyncio.gather(*(one(rng) for _ in range(40))))
        return n

    cancelled = asyncio.run(main())
    assert cancelled > 0, "no await was cancelled"
    # Every page can be latched now: nothing is left pinned or latched.
    async def latch_all():
        for i in range(512):
            page = await f.page_mut_async(i)
            with page as view:
                check(view, i)

    asyncio.run(latch_all())
    f.close()


def test_errors_reach_the_awaiting_task(tmp_path):
    p = tmp_path / "f.bin"
    make_file(p, 4)
    cache = pagecache.PageCache(capacity=8 * PS)
    f = cache.open(str(p))

    async def main():
        with pytest.raises(OSError) as e:
            await f.page_async(4)
        return e.value

    err = asyncio.run(main())
    try:
        f.page(4).__enter__()
    except OSError as blocking:
        assert err.errno == blocking.errno
        assert str(err) == str(blocking)
    f.close()


def test_the_loop_keeps_running_while_reads_are_in_flight(tmp_path):
    # A ticker task is always ready: while a read is in flight the loop
    # runs it, so every await that had to wait for a read (a miss, or a
    # page another task is reading) sees the ticker move. A call that
    # blocked the loop's thread would see none.
    p = tmp_path / "f.bin"
    make_file(p, 512)
    cache = pagecache.PageCache(capacity=32 * PS)
    f = cache.open(str(p))
    ticks = [0]
    waited = [0]

    async def ticker(stop):
        while not stop.is_set():
            ticks[0] += 1
            await asyncio.sleep(0)

    async def main():
        stop = asyncio.Event()
        t = asyncio.create_task(ticker(stop))
        rng = random.Random(3)

        async def reader():
            for _ in range(30):
                i = rng.randrange(512)
                before = ticks[0]
                page = await f.page_async(i)
                if ticks[0] > before:
                    waited[0] += 1
                with page as view:
                    check(view, i)

        await asyncio.gather(*(reader() for _ in range(16)))
        stop.set()
        await t

    misses = cache.stats()["misses"]
    asyncio.run(main())
    misses = cache.stats()["misses"] - misses
    assert misses > 0
    assert waited[0] >= misses, (waited[0], misses)
    f.close()
