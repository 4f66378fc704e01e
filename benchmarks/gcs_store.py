"""PUT and GET latency of GCSStore through gcsfs against fake-gcs-server on loopback.

    python benchmarks/gcs_store.py [--sizes 4,64] [--reps 5] [--out bench-results/gcs_store.json]

Starts the emulator (in memory) itself. For each entry size: `--reps` PUTs of fresh
keys (one create-once multipart request each) and GETs of them (download + full
verification), timed one at a time in this process; and, as the floor, gcsfs's own
`pipe_file` / `cat_file` of the same bytes. Prints median and minimum seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.gcsutil import Emulator  # noqa: E402
from xlacache import entry  # noqa: E402
from xlacache.stores.gcs import GCSStore  # noqa: E402

MiB = 1024 * 1024


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def measure(store: GCSStore, size_mib: int, reps: int) -> dict:
    blobs = {}
    for _ in range(reps):
        key = os.urandom(32).hex()
        blobs[key] = entry.encode(key, os.urandom(size_mib * MiB), compile_seconds=1.0)
    puts = [timed(lambda k=k, b=b: store.put(k, b)) for k, b in blobs.items()]
    gets = []
    for key, blob in blobs.items():
        start = time.perf_counter()
        got = store.get(key)
        gets.append(time.perf_counter() - start)
        assert got == blob
    fs = store.objects._fs()
    base = f"{store.objects.bucket}/raw-{size_mib}"
    raw_puts = [
        timed(lambda i=i, b=b: fs.pipe_file(f"{base}/{i}", b)) for i, b in enumerate(blobs.values())
    ]
    raw_gets = [timed(lambda i=i: fs.cat_file(f"{base}/{i}")) for i in range(len(blobs))]
    return {
        "size_mib": size_mib,
        "entry_bytes": len(next(iter(blobs.values()))),
        "put": puts,
        "get": gets,
        "gcsfs_pipe_file": raw_puts,
        "gcsfs_cat_file": raw_gets,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="4,64", help="entry sizes in MiB")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--out", default=str(ROOT / "bench-results" / "gcs_store.json"))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as logs:
        emulator = Emulator.start(Path(logs))
        try:
            os.environ["STORAGE_EMULATOR_HOST"] = emulator.url
            store = GCSStore(f"gs://{emulator.create_bucket()}/bench")
            results = [measure(store, int(s), args.reps) for s in args.sizes.split(",")]
        finally:
            emulator.stop()
    print("| entry | op | median s | min s |")
    print("|---|---|---|---|")
    for r in results:
        for op in ("put", "get", "gcsfs_pipe_file", "gcsfs_cat_file"):
            times = r[op]
            print(
                f"| {r['size_mib']} MiB | {op} | {statistics.median(times):.3f} "
                f"| {min(times):.3f} |"
            )
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
