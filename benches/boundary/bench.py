"""The Python side of the boundary benchmark (scripts/bench-boundary.sh): a
64 B read_at (to bytes) and readinto_at (into a bytearray) of a cached page,
a page pin + release (`with f.page(i)`), next to os.pread of the same bytes,
one thread; and a sequential scan, per page: `with f.page(i)` each, or
`with f.run(i, 16)` per 16 pages. Prints `python <op> <ns per op>` lines,
medians of RUNS runs."""

import os
import statistics
import sys
import time

import pagecache

OPS = 200_000
RUNS = 5


def offsets(pages):
    x, out = 1, []
    for _ in range(OPS):
        x = (x * 6364136223846793005 + 1442695040888963407) & 0xFFFFFFFFFFFFFFFF
        v = x >> 33
        out.append(((v % pages) * 4096 + (v % 4032), v % pages))
    return out


def timed(fn, offs):
    runs = []
    for _ in range(RUNS):
        t = time.perf_counter_ns()
        fn(offs)
        runs.append((time.perf_counter_ns() - t) / len(offs))
    return statistics.median(runs)


def main():
    path = sys.argv[1]
    cache = pagecache.PageCache(capacity=128 << 20)
    f = cache.open(path, "r")
    pages = f.len() // 4096
    for p in range(pages):
        f.read_at(p * 4096, 64)
    offs = offsets(pages)
    hot = offsets(1)  # one page over and over
    fd = os.open(path, os.O_RDONLY)
    buf = bytearray(64)

    def read_at(offs):
        r = f.read_at
        for at, _ in offs:
            r(at, 64)

    def readinto_at(offs):
        r = f.readinto_at
        for at, _ in offs:
            r(buf, at)

    def pin(offs):
        page = f.page
        for _, p in offs:
            with page(p) as v:
                v[7]

    def pread(offs):
        pr = os.pread
        for at, _ in offs:
            pr(fd, 64, at)

    def loop(offs):  # the loop alone, subtracted from nothing: for scale
        for at, _ in offs:
            pass

    for name, fn in [("read_at_64", read_at), ("readinto_at_64", readinto_at),
                     ("pin_release", pin), ("pread_64", pread), ("empty_loop", loop)]:
        print(f"python {name} {timed(fn, offs):.1f}", flush=True)
    for name, fn in [("hot_read_at_64", read_at), ("hot_pin_release", pin),
                     ("hot_pread_64", pread)]:
        print(f"python {name} {timed(fn, hot):.1f}", flush=True)
    groups = list(range(0, pages - pages % 16, 16))

    def scan_pin(groups):
        page = f.page
        for g in groups:
            for i in range(g, g + 16):
                with page(i) as v:
                    v[7]

    def scan_run(groups):
        run = f.run
        for g in groups:
            with run(g, 16) as views:
                for v in views:
                    v[7]

    for name, fn in [("scan_pin_per_page", scan_pin), ("scan_run16_per_page", scan_run)]:
        print(f"python {name} {timed(fn, groups) / 16:.1f}", flush=True)
    os.close(fd)
    f.close()


main()
