#!/usr/bin/env python3
"""CPU time per transaction of vmcache or of vmcache's B-tree over the C
ABI (benches/vmcache-pc), per thread name, over the run's seconds only
(after the load): each thread's user + system time from
/proc/PID/task/*/stat when the binary prints its header line and again
before its last line, over the transactions it printed meanwhile.

Usage: cpu_per_tx.py BINARY THREADS SECONDS BLOCK_FILE
(in memory: PHYSGB=4, VIRTGB=16, DATASIZE=2, as the lab's TPC-C; vmcache
needs BLOCK_FILE to exist at its virtual size: it is created if missing).
"""
import os
import subprocess
import sys
import time

binary, threads, secs, block = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
if not os.path.exists(block):
    with open(block, "wb"):
        pass
    os.truncate(block, 16 << 30)
env = dict(os.environ, BLOCK=block, PHYSGB="4", VIRTGB="16", THREADS=threads,
           DATASIZE="2", RUNFOR=str(secs))
p = subprocess.Popen([binary], env=env, stdout=subprocess.PIPE,
                     stderr=subprocess.DEVNULL, text=True)
tick = os.sysconf("SC_CLK_TCK")


def cpu_by_thread():
    d = {}
    for t in os.listdir(f"/proc/{p.pid}/task"):
        try:
            s = open(f"/proc/{p.pid}/task/{t}/stat").read()
        except OSError:
            continue
        name = s[s.index("(") + 1:s.rindex(")")]
        f = s[s.rindex(")") + 2:].split()
        d[t] = (name, (int(f[11]) + int(f[12])) / tick)
    return d


a = b = None
ta = tb = 0.0
txs = []
for line in p.stdout:
    if line.startswith("ts,"):
        a, ta = cpu_by_thread(), time.time()
        continue
    if a is not None:
        txs.append(int(line.split(",")[1]))
        if len(txs) == secs - 1:
            b, tb = cpu_by_thread(), time.time()
p.wait()
if a is None or b is None:
    sys.exit(f"{binary}: no run seen (exit status {p.returncode})")
tx = sum(txs[:-1])
per = {}
for t, (name, c) in b.items():
    per[name] = per.get(name, 0.0) + c - a.get(t, (name, 0.0))[1]
total = sum(per.values())
print(f"{os.path.basename(binary)} {threads} threads: {tx / (tb - ta):.0f} tx/s, "
      f"CPU per tx {total / tx * 1e6:.1f} us; by thread: "
      + ", ".join(f"{k} {v / tx * 1e6:.2f} us" for k, v in sorted(per.items())))
