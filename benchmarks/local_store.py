"""Local store latency: hits (get) with 1 and N processes on one directory, and puts at the cap.

    .venv/bin/python benchmarks/local_store.py                  # defaults below, ~1 min
    .venv/bin/python benchmarks/local_store.py --procs 1 2 8 --gets 2000 --fill 10000 --puts 300

Hits: a directory of `--entries` entries of `--entry-kib` KiB; each of N processes
(started together, fresh interpreters) gets random keys `--gets` times and records
each get's latency; p50/p99 over all processes, and gets per second in all (total gets
over the slowest process's time). With more processes than cores the p99 is mostly the
scheduler's time slice. Puts: a directory filled with
`--fill` small entries and capped at exactly its size (every put must evict), then
`--puts` puts of new entries, one process; puts per second and p50/p99 latency, with
fsync on (the default) and off.

Uses only the public LocalStore API, so the same script measures any version of the
package (PYTHONPATH picks it). Results go to bench-results/local_store.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HIT_WORKER = """
import json, random, sys, time
from xlacache.stores.local import LocalStore
root, n, gets, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
keys = [f"{i:064x}" for i in range(n)]
rng = random.Random(seed)
store = LocalStore(root)
store.get(keys[0])  # first touch: connections, imports
sys.stdout.write("ready\\n"); sys.stdout.flush()
sys.stdin.readline()  # start together
lat = []
start = time.perf_counter()
for _ in range(gets):
    key = rng.choice(keys)
    t = time.perf_counter()
    blob = store.get(key)
    lat.append(time.perf_counter() - t)
    assert blob is not None
wall = time.perf_counter() - start
store.close()
print(json.dumps({"lat": lat, "wall": wall}))
"""


def _pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def _fill(root: Path, count: int, payload_bytes: int, start: int = 0) -> int:
    from xlacache import entry
    from xlacache.stores.local import LocalStore

    total = 0
    with LocalStore(root, fsync=False) as store:
        for i in range(start, start + count):
            key = f"{i:064x}"
            blob = entry.encode(key, os.urandom(payload_bytes), compile_seconds=1.0)
            store.put(key, blob)
            total += len(blob)
    return total


def bench_hits(workdir: Path, entries: int, entry_kib: int, procs: int, gets: int) -> dict:
    root = workdir / f"hits-{procs}"
    _fill(root, entries, entry_kib * 1024)
    children = [
        subprocess.Popen(
            [sys.executable, "-c", HIT_WORKER, str(root), str(entries), str(gets), str(i)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        for i in range(procs)
    ]
    for child in children:
        assert child.stdout.readline().strip() == "ready"
    for child in children:
        child.stdin.write("go\n")
        child.stdin.flush()
    lat: list[float] = []
    walls: list[float] = []
    for child in children:
        out, _ = child.communicate(timeout=600)
        assert child.returncode == 0
        result = json.loads(out.strip().splitlines()[-1])
        lat += result["lat"]
        walls.append(result["wall"])
    return {
        "procs": procs,
        "gets": len(lat),
        "gets_per_s": len(lat) / max(walls),
        "p50_us": _pct(lat, 0.50) * 1e6,
        "p99_us": _pct(lat, 0.99) * 1e6,
        "mean_us": statistics.fmean(lat) * 1e6,
    }


def bench_puts(workdir: Path, fill: int, puts: int, fsync: bool) -> dict:
    from xlacache import entry
    from xlacache.stores.local import LocalStore

    root = workdir / f"puts-{fsync}"
    cap = _fill(root, fill, 2048)
    blobs = []
    for i in range(fill, fill + puts):
        key = f"{i:064x}"
        blobs.append((key, entry.encode(key, os.urandom(2048), compile_seconds=1.0)))
    lat = []
    with LocalStore(root, max_size=cap, fsync=fsync) as store:
        start = time.perf_counter()
        for key, blob in blobs:
            t = time.perf_counter()
            store.put(key, blob)
            lat.append(time.perf_counter() - t)
        seconds = time.perf_counter() - start
        summary = store.summary()
    return {
        "fill": fill,
        "puts": puts,
        "fsync": fsync,
        "puts_per_s": puts / seconds,
        "p50_ms": _pct(lat, 0.50) * 1e3,
        "p99_ms": _pct(lat, 0.99) * 1e3,
        "entries_after": summary.entries,
        "bytes_after_vs_cap": summary.bytes / cap,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--procs", type=int, nargs="+", default=[1, 2, 8])
    parser.add_argument("--entries", type=int, default=200)
    parser.add_argument("--entry-kib", type=int, default=64)
    parser.add_argument("--gets", type=int, default=2000)
    parser.add_argument("--fill", type=int, default=10_000)
    parser.add_argument("--puts", type=int, default=300)
    parser.add_argument("--label", default="")
    parser.add_argument("--out", default="bench-results/local_store.json")
    args = parser.parse_args()
    results: dict = {"label": args.label, "hits": [], "puts": []}
    with tempfile.TemporaryDirectory(prefix="xlacache-bench-") as tmp:
        workdir = Path(tmp)
        for procs in args.procs:
            row = bench_hits(workdir, args.entries, args.entry_kib, procs, args.gets)
            results["hits"].append(row)
            print(
                f"hit  procs={procs}: p50 {row['p50_us']:.0f} us, p99 {row['p99_us']:.0f} us, "
                f"{row['gets_per_s']:.0f} gets/s in all"
            )
        for fsync in (True, False):
            row = bench_puts(workdir, args.fill, args.puts, fsync)
            results["puts"].append(row)
            print(
                f"put  at cap, {args.fill} entries, fsync={fsync}: {row['puts_per_s']:.0f}/s, "
                f"p50 {row['p50_ms']:.2f} ms, p99 {row['p99_ms']:.2f} ms "
                f"({row['entries_after']} entries after)"
            )
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
