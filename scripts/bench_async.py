"""Random page reads of a file from one asyncio thread, TASKS tasks each
awaiting File.page_async: the Python face of the cache's asynchronous
misses. Prints the rate and the process's CPU time per read;
scripts/bench-async.sh runs it beside the device.

    python bench_async.py FILE CACHE_MIB TASKS SECONDS
"""

import asyncio
import os
import resource
import sys
import time

import pagecache


def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def main():
    path, mib, tasks, secs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
    cache = pagecache.PageCache(capacity=mib << 20, populate=True)
    f = cache.open(path)
    pages = os.path.getsize(path) // 4096
    reads = [0]

    async def task(seed, end):
        x = (seed + 1) * 0x9E3779B97F4A7C15 & (2**64 - 1)
        while time.monotonic() < end:
            x ^= (x << 13) & (2**64 - 1)
            x ^= x >> 7
            x ^= (x << 17) & (2**64 - 1)
            page = await f.page_async(x % pages)
            with page as view:
                view[0]
            reads[0] += 1

    async def run():
        end = time.monotonic() + secs
        await asyncio.gather(*(task(s, end) for s in range(tasks)))

    t0, c0 = time.monotonic(), cpu()
    asyncio.run(run())
    wall, used = time.monotonic() - t0, cpu() - c0
    print(f"{reads[0] / wall:.0f} reads/s {used / reads[0] * 1e6:.2f} us/read")
    f.close()


if __name__ == "__main__":
    main()
