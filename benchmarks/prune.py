"""Pruning at scale: stats, prune --dry-run and removal on a cache of 50,000 entries.

    .venv/bin/python benchmarks/prune.py                   # 50,000 entries of ~2 KiB
    .venv/bin/python benchmarks/prune.py --entries 5000    # smoke

Builds a directory cache fast: small but valid entries (incompressible 2 KiB payloads,
created over the last 50,000 s, a fifth of them by an older jaxlib), written straight
into the store's layout, then indexed by opening the store once (its reconcile reads
every header). Then, each as `xlacache` does it (the CLI as a subprocess, import time
included, and the store call alone):

- `stats` (O(1) totals + a GROUP BY by jaxlib);
- `prune --max-size 20MB --dry-run` (one SQL query: a running sum over last_used), and
  the same choice made the pre-issue-18 way (every row into Python, `PrunePolicy.select`);
- `prune --max-size 20MB` (unlinks, then one batched index delete): entries per second;
- `prune --stale --dry-run` and `prune --stale` on a fresh copy;
- the index's hot paths per call (record a stored entry, read a row by key), raw
  sqlite3 as `Index` runs them against sqlite-utils' `Table.upsert` / `Table.get` (why
  the hot paths stay on raw sqlite3), in CPU microseconds.

Goal (issue 18): dry-run < 1 s, removal >= 20,000 entries/s at 50,000 entries.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import resource
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import sqlite_utils

from xlacache import entry
from xlacache.stores.base import EntryInfo, PrunePolicy, current_jaxlib
from xlacache.stores.index_db import Index
from xlacache.stores.local import LocalStore
from xlacache.units import parse_size

XLACACHE = [sys.executable, "-m", "xlacache"]


def build(root: Path, count: int, size: int, stale_share: float, seed: int = 0) -> int:
    """A cache of `count` valid entries; returns its bytes."""
    rng = random.Random(seed)
    LocalStore(root).close()  # the marker and directories
    now = time.time()
    total = 0
    payload = os.urandom(size)
    for n in range(count):
        key = hashlib.sha256(n.to_bytes(8, "big")).hexdigest()  # 256 shards, as real keys
        old = rng.random() < stale_share
        blob = entry.encode(
            key, payload[: size - 8] + n.to_bytes(8, "big"), compile_seconds=0.1,
            label=f"bench_{n % 97}", created=now - rng.uniform(0, 50_000), platform_name="cpu",
            summary={"jaxlib": {"version": "0.6.2" if old else current_jaxlib()}},
        )  # fmt: skip
        shard = root / "entries" / key[:2]
        shard.mkdir(exist_ok=True)
        (shard / f"{key}.xlac").write_bytes(blob)
        total += len(blob)
    with LocalStore(root, fsync=False):  # reconcile indexes every file
        pass
    return total


CPU: dict[str, float] = {}  # CPU seconds of each timed step (this process or the CLI's)


def timed(fn, name: str = ""):
    start, cpu = time.perf_counter(), time.process_time()
    result = fn()
    if name:
        CPU[name] = time.process_time() - cpu
    return result, time.perf_counter() - start


def cli(*args: str, name: str = "") -> tuple[str, float]:
    """Run the CLI; wall seconds, and its CPU seconds in CPU[name] (a loaded machine
    stretches wall time, not CPU time)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run([*XLACACHE, *args], capture_output=True, text=True, check=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if name:
        CPU[name] = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return proc.stdout, wall


def hot_path(rows: int) -> dict:
    """The index's hot paths, per call, in CPU microseconds: recording a stored entry (one
    row in its own transaction) and reading a row by key, as `Index` does them on raw
    sqlite3 and as sqlite-utils' `Table.upsert` / `Table.get` would."""
    out: dict = {"rows": rows}
    infos = [
        EntryInfo(f"{n:064x}", 2000, 2000, 1.0 * n, 1.0 * n, 0, 0.1, "x", 2, "0.10.2", "cpu")
        for n in range(rows)
    ]
    with tempfile.TemporaryDirectory() as tmp:
        ix = Index(Path(tmp) / "raw.sqlite")
        _, cpu = _cpu(lambda: [ix.add(i) for i in infos])
        out["add_raw_us"] = round(cpu / rows * 1e6, 1)
        _, cpu = _cpu(lambda: [ix.get(i.key) for i in infos])
        out["get_raw_us"] = round(cpu / rows * 1e6, 1)
        ix.close()
        Index(Path(tmp) / "su.sqlite").close()  # the same schema, triggers included
        conn = sqlite3.connect(Path(tmp) / "su.sqlite", isolation_level=None)
        table = sqlite_utils.Database(conn)["entries"]
        _, cpu = _cpu(lambda: [table.upsert(i.to_dict(), pk="key") for i in infos])
        out["add_sqlite_utils_us"] = round(cpu / rows * 1e6, 1)
        _, cpu = _cpu(lambda: [table.get(i.key) for i in infos])
        out["get_sqlite_utils_us"] = round(cpu / rows * 1e6, 1)
        conn.close()
    return out


def _cpu(fn):
    start = time.process_time()
    result = fn()
    return result, time.process_time() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=50_000)
    parser.add_argument("--size", type=int, default=2048, help="payload bytes per entry")
    parser.add_argument("--max-size", default="20MB")
    parser.add_argument("--out", default="bench-results/prune.json")
    args = parser.parse_args()
    results: dict = {"entries": args.entries, "load_before": os.getloadavg()}

    def step(name: str, fn):
        result, results[name] = timed(fn, name)
        return result

    def run_cli(name: str, *argv: str) -> str:
        out, results[name] = cli(*argv, name=name)
        return out

    with tempfile.TemporaryDirectory() as tmp:
        base, work = Path(tmp) / "base", Path(tmp) / "work"
        results["bytes"] = step("build_s", lambda: build(base, args.entries, args.size, 0.2))
        shutil.copytree(base, work)
        os.sync()  # the copy on disk: unlinks then wait on nothing of the copy's
        run_cli("stats_cli_s", "stats", str(work), "--json")
        policy = PrunePolicy(max_size=parse_size(args.max_size))
        with LocalStore(work, readonly=True) as store:
            step("stats_store_s", lambda: (store.summary(), store.by_jaxlib()))
            doomed = step("dry_run_store_s", lambda: store.prune(policy, dry_run=True))
            rows = store.index.db.all
            old = step("dry_run_python_select_s", lambda: policy.select(rows(), time.time()))
            assert {i.key for i in old} == {i.key for i in doomed}
        run_cli("dry_run_cli_s", "prune", str(work), "--max-size", args.max_size, "--dry-run")
        run_cli("remove_cli_s", "prune", str(work), "--max-size", args.max_size)
        results["removed"] = len(doomed)
        results["remove_per_s_cli"] = round(len(doomed) / results["remove_cli_s"])
        shutil.rmtree(work)
        shutil.copytree(base, work)
        os.sync()  # the copy on disk: unlinks then wait on nothing of the copy's
        with LocalStore(work, fsync=False) as store:
            removed = step("remove_store_s", lambda: store.prune(policy))
        results["remove_per_s_store"] = round(len(removed) / results["remove_store_s"])
        shutil.rmtree(work)
        shutil.copytree(base, work)
        os.sync()  # the copy on disk: unlinks then wait on nothing of the copy's
        run_cli("stale_dry_run_cli_s", "prune", str(work), "--stale", "--dry-run")
        out = run_cli("stale_remove_cli_s", "prune", str(work), "--stale", "--json")
        results["stale_removed"] = json.loads(out)["count"]
        results["stale_remove_per_s_cli"] = round(
            results["stale_removed"] / results["stale_remove_cli_s"]
        )
        run_cli("cli_startup_s", "--help")
    results["hot_path"] = hot_path(2000)
    results["cpu_s"] = {k: round(v, 3) for k, v in CPU.items()}
    results["remove_per_cpu_s_store"] = round(len(removed) / CPU["remove_store_s"])
    results["load_after"] = os.getloadavg()
    for name, value in results.items():
        print(f"{name:28} {round(value, 3) if isinstance(value, float) else value}")
    Path(args.out).parent.mkdir(exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
