#!/usr/bin/env python3
"""Where the CPU goes per transaction in vmcache's TPC-C in memory, vmcache
itself or its B-tree over the C ABI (benches/vmcache-pc): `perf record` of
the run's seconds only (started DELAY seconds after the binary, after its
load), its samples by function in four groups, over the transactions the
binary printed for those seconds. At 999 Hz one sample is about 1 ms of a
CPU, so samples per thousand transactions read as microseconds per
transaction.

Usage: profile_tx.py BINARY BLOCK_FILE [THREADS [DELAY [VAR=VALUE ...]]]
(2 warehouses, PHYSGB=4, VIRTGB=10, RUNFOR=8; THREADS 2, DELAY 4 s by
default; VAR=VALUE pairs go to the binary's environment, e.g. PC_SHADOW=1).
Needs `perf`; BLOCK_FILE is created at 10 GiB and removed.
"""
import os
import re
import subprocess
import sys
import tempfile
import time

binary, block = sys.argv[1], sys.argv[2]
threads = sys.argv[3] if len(sys.argv) > 3 else "2"
delay = float(sys.argv[4]) if len(sys.argv) > 4 else 4.0
extra = dict(a.split("=", 1) for a in sys.argv[5:])

GROUPS = {
    "the B-tree's compares": [r"memcmp", r"lowerBound"],
    "node visits": [r"findLeafO", r"GuardO<", r"pc_page_optimistic_fast"],
    "zeroing new memory": [r"clear_page"],
    "latches, pins, new pages": [r"pagecache::", r"GuardX", r"GuardS", r"unlockX",
                                 r"allocPage", r"fixS", r"pc_pin", r"pc_page_"],
}

with open(block, "wb"):
    pass
os.truncate(block, 10 << 30)
fd, data = tempfile.mkstemp(suffix=".perf")
os.close(fd)
env = dict(os.environ, BLOCK=block, PHYSGB="4", VIRTGB="10", THREADS=threads,
           DATASIZE="2", RUNFOR="8", **extra)
t0 = time.monotonic()
p = subprocess.Popen(["perf", "record", "-q", "-D", str(int(delay * 1000)), "-F", "999",
                      "-o", data, binary], env=env, stdout=subprocess.PIPE,
                     stderr=subprocess.DEVNULL, text=True)
tx = 0.0
rate = []
for line in p.stdout:
    f = line.split(",")
    if len(f) >= 4 and f[1].isdigit():
        # The second that ended now: the part of it after the delay.
        t = time.monotonic() - t0
        tx += int(f[1]) * min(1.0, max(0.0, t - delay))
        rate.append(int(f[1]))
p.wait()
os.remove(block)
rep = subprocess.run(["perf", "report", "-i", data, "--stdio", "--no-children", "-n",
                      "--sort", "sym"], capture_output=True, text=True).stdout
os.remove(data)
total = 0
sums = dict.fromkeys(GROUPS, 0)
for line in rep.splitlines():
    m = re.match(r"\s+[\d.]+%\s+(\d+)\s+\[.\]\s+(.*)", line)
    if not m:
        continue
    n, sym = int(m.group(1)), m.group(2)
    total += n
    for g, pats in GROUPS.items():
        if any(re.search(pat, sym) for pat in pats):
            sums[g] += n
            break
if tx == 0:
    sys.exit(f"{binary}: no transactions after {delay} s")
k = tx / 1000
rate.sort()
print(f"{os.path.basename(binary)} {' '.join(sys.argv[5:])}: {rate[len(rate) // 2]} tx/s (median second);"
      f" us per transaction: all {total / k:.2f}; "
      + "; ".join(f"{g} {v / k:.2f}" for g, v in sums.items()))
