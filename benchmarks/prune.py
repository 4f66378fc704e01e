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
- the index's hot-path write, raw sqlite3 `executemany` against sqlite-utils'
  `upsert_all`, for the same rows (why the hot paths stay on raw sqlite3).

Goal (issue 18): dry-run < 1 s, removal >= 20,000 entries/s at 50,000 entries.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import sqlite_utils

from xlacache import entry
from xlacache.stores.base import PrunePolicy, current_jaxlib
from xlacache.stores.index_db import Index
from xlacache.stores.local import LocalStore

XLACACHE = [sys.executable, "-m", "xlacache"]


def build(root: Path, count: int, size: int, stale_share: float, seed: int = 0) -> int:
    """A cache of `count` valid entries; returns its bytes."""
    rng = random.Random(seed)
    LocalStore(root).close()  # the marker and directories
    now = time.time()
    total = 0
    payload = os.urandom(size)
    for n in range(count):
        key = f"{n:064x}"
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


def timed(fn):
    start = time.perf_counter()
    result = fn()
    return result, time.perf_counter() - start


def cli(*args: str) -> tuple[str, float]:
    start = time.perf_counter()
    proc = subprocess.run([*XLACACHE, *args], capture_output=True, text=True, check=True)
    return proc.stdout, time.perf_counter() - start


def hot_path(rows: int) -> dict:
    """Upserting `rows` index rows: raw sqlite3 (what Index.upsert runs) vs sqlite-utils."""
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        infos = [
            (f"{n:064x}", 2000, 2000, 1.0 * n, 1.0 * n, 0, 0.1, "x", 2, "0.10.2", "cpu")
            for n in range(rows)
        ]
        ix = Index(Path(tmp) / "raw.sqlite")
        from xlacache.stores.base import EntryInfo

        entries = [EntryInfo(*row) for row in infos]
        _, out["raw_sqlite3_s"] = timed(lambda: ix.upsert(entries))
        ix.close()
        ix = Index(Path(tmp) / "su.sqlite")
        ix.close()
        db = sqlite_utils.Database(sqlite3.connect(Path(tmp) / "su.sqlite"))
        columns = [f.name for f in EntryInfo.__dataclass_fields__.values()]
        dicts = [dict(zip(columns, row, strict=True)) for row in infos]
        _, out["sqlite_utils_s"] = timed(lambda: db["entries"].upsert_all(dicts, pk="key"))
        db.close()
    out["rows"] = rows
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=50_000)
    parser.add_argument("--size", type=int, default=2048, help="payload bytes per entry")
    parser.add_argument("--max-size", default="20MB")
    parser.add_argument("--out", default="bench-results/prune.json")
    args = parser.parse_args()
    results: dict = {"entries": args.entries, "load": os.getloadavg()}
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp) / "base"
        results["bytes"], results["build_s"] = timed(
            lambda: build(base, args.entries, args.size, stale_share=0.2)
        )
        work = Path(tmp) / "work"
        shutil.copytree(base, work)
        _, results["stats_cli_s"] = cli("stats", str(work), "--json")
        with LocalStore(work, readonly=True) as store:
            _, results["stats_store_s"] = timed(lambda: (store.summary(), store.by_jaxlib()))
            policy = PrunePolicy(max_size=20 * 1000**2)
            doomed, results["dry_run_store_s"] = timed(lambda: store.prune(policy, dry_run=True))
            old, results["dry_run_python_select_s"] = timed(
                lambda: policy.select(store.index.db.all(), time.time())
            )
            assert {i.key for i in old} == {i.key for i in doomed}
        _, results["dry_run_cli_s"] = cli("prune", str(work), "--max-size", args.max_size,
                                          "--dry-run")  # fmt: skip
        out, results["remove_cli_s"] = cli("prune", str(work), "--max-size", args.max_size)
        results["removed"] = len(doomed)
        results["remove_per_s_cli"] = round(len(doomed) / results["remove_cli_s"])
        shutil.rmtree(work)
        shutil.copytree(base, work)
        with LocalStore(work, fsync=False) as store:
            removed, seconds = timed(lambda: store.prune(policy))
        results["remove_store_s"] = seconds
        results["remove_per_s_store"] = round(len(removed) / seconds)
        shutil.rmtree(work)
        shutil.copytree(base, work)
        out, results["stale_dry_run_cli_s"] = cli("prune", str(work), "--stale", "--dry-run")
        out, results["stale_remove_cli_s"] = cli("prune", str(work), "--stale", "--json")
        results["stale_removed"] = json.loads(out)["count"]
        results["stale_remove_per_s_cli"] = round(
            results["stale_removed"] / results["stale_remove_cli_s"]
        )
        _, results["cli_startup_s"] = cli("--help")
    results["hot_path_upsert"] = hot_path(min(args.entries, 50_000))
    for name, value in results.items():
        print(f"{name:28} {value if not isinstance(value, float) else round(value, 3)}")
    Path(args.out).parent.mkdir(exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
