"""Fan-out: many readers fetch the same large entry at once, as a new pod's workers do.

    .venv/bin/python benchmarks/fanout.py                        # 32 readers x 64 MiB
    .venv/bin/python benchmarks/fanout.py --readers 8 --size 16MiB --targets server  # smoke

Targets, each fresh:

- ``server``: `xlacache serve` over a directory on loopback, the entry stored by one Put
  (so in the page cache); readers `GrpcStore.get` it (streamed, verified end to end).
- ``bucket-server``: `xlacache serve --store gs://... --cache-dir DIR` in front of the
  fake-gcs-server emulator, the entry put in the bucket only: the first Get reads it
  through, the others wait for that read (coalesced), then all are served from DIR.
- ``gcs``: readers read the object straight from the emulator (`GCSStore.get`).

Each reader is a process of its own, started and connected before a common go; the
aggregate rate is readers x entry size / (last reader done - go). The server's resident
memory is sampled every 10 ms during the fan-out (its peak, and before), and its CPU
seconds counted: GiB served per server CPU second is what the server can do where the
readers have cores of their own (on a small machine the readers' own work, joining and
hashing 64 MiB each, bounds the aggregate; `--raw` leaves it out). Goal (issue 17):
server >= 1 GiB/s aggregate with RSS < 300 MB. Requests the bucket saw are
counted through a recording proxy (tests/gcsutil.py). Results: a markdown table on
stdout, JSON in bench-results/fanout.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench-results"
sys.path.insert(0, str(ROOT))
READY_SECONDS = 300.0
GIB = 1024**3


def reader_main(args) -> None:
    if args.url.startswith("gs://"):
        from xlacache.stores.gcs import GCSStore

        store = GCSStore(args.url, readonly=True, timeout=60)
    else:
        from xlacache.stores.remote import GrpcStore

        store = GrpcStore(args.url, readonly=True, timeout=60, transfer_timeout=600)
        store.contains(args.key)  # connected before the start
    Path(args.ready).touch()
    deadline = time.monotonic() + READY_SECONDS
    while not Path(args.go).exists():
        if time.monotonic() > deadline:
            raise SystemExit("no start signal")
        time.sleep(0.001)
    start = time.time()
    size = _read_raw(store, args.key) if args.raw else len(store.get(args.key) or b"")
    done = time.time()
    Path(args.result).write_text(json.dumps({"start": start, "done": done, "bytes": size}))


def _read_raw(store, key: str) -> int:
    """The entry's size as a Get streams it, kept nowhere and not verified: what the
    server sends, without the reader's own costs (joining, hashing)."""
    from xlacache._proto.v1 import cache_pb2 as pb
    from xlacache.protocol import wire

    call = store._get_raw(pb.GetRequest(key=key), timeout=600, metadata=store._metadata)
    first = wire.parse(next(call))
    size = len(first.get(wire.GET_DATA, b""))
    for message in call:
        size += len(wire.data_of(message, wire.GET_DATA))
    assert size == wire.number(first, wire.GET_SIZE)
    return size


def cpu_seconds(pid: int | None) -> float:
    """User + system CPU seconds a process has used (0 for none)."""
    if pid is None:
        return 0.0
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss(pid: int) -> int:
    """Resident bytes of a process (VmRSS), 0 once it is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


class Sampler:
    """The peak RSS of a process, sampled on a thread."""

    def __init__(self, pid: int | None) -> None:
        self.pid = pid
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.01):
            self.peak = max(self.peak, rss(self.pid))

    def __enter__(self):
        if self.pid is not None:
            self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        if self.pid is not None:
            self._thread.join()


def make_entry(size: int) -> tuple[str, bytes]:
    """A valid entry of about `size` incompressible payload bytes."""
    import hashlib

    from xlacache import entry

    key = hashlib.sha256(f"fanout-{size}".encode()).hexdigest()
    return key, entry.encode(key, os.urandom(size), compile_seconds=60.0, label="fanout")


def fan_out(args, target: str, work: Path, emulator, key: str, blob: bytes) -> dict:
    from tests.gcsutil import FaultProxy
    from tests.server.srvutil import start_bucket_server, start_server

    server = proxy = None
    env = dict(os.environ)
    try:
        if target == "server":
            server = start_server(work)
            url = server.url
            from xlacache.stores.remote import GrpcStore

            with GrpcStore(url, timeout=60, transfer_timeout=600) as client:
                client.put(key, blob)
        else:
            from xlacache.stores.gcs import GCSStore

            proxy = FaultProxy(emulator.url)
            env["STORAGE_EMULATOR_HOST"] = proxy.url
            bucket = f"gs://{emulator.create_bucket()}/cache"
            os.environ["STORAGE_EMULATOR_HOST"] = proxy.url
            GCSStore(bucket).put(key, blob)
            url = bucket
            if target == "bucket-server":
                server = start_bucket_server(work, bucket, {"STORAGE_EMULATOR_HOST": proxy.url})
                url = server.url
            proxy.reset_log()
        go = work / f"go-{target}"
        readers = []
        for i in range(args.readers):
            paths = {n: work / f"{n}-{target}-{i}" for n in ("ready", "result")}
            cmd = [sys.executable, __file__, "--reader", "--url", url, "--key", key,
                   "--ready", str(paths["ready"]), "--go", str(go),
                   "--result", str(paths["result"])]  # fmt: skip
            if args.raw and target != "gcs":
                cmd.append("--raw")
            readers.append((subprocess.Popen(cmd, env=env, stderr=subprocess.PIPE), paths))
        deadline = time.monotonic() + READY_SECONDS
        while not all(p["ready"].exists() for _, p in readers):
            for proc, _ in readers:
                if proc.poll() is not None:
                    raise SystemExit(f"reader failed: {proc.stderr.read().decode()[-3000:]}")
            if time.monotonic() > deadline:
                raise SystemExit("readers did not get ready")
            time.sleep(0.01)
        pid = server.proc.pid if server is not None else None
        before = rss(pid) if pid else 0
        cpu_before = cpu_seconds(pid)
        load_before = _load()
        with Sampler(pid) as sampler:
            go.touch()
            started = time.time()
            results = []
            for proc, paths in readers:
                proc.wait(READY_SECONDS)
                if proc.returncode != 0:
                    raise SystemExit(f"reader failed: {proc.stderr.read().decode()[-3000:]}")
                results.append(json.loads(paths["result"].read_text()))
        wall = max(r["done"] for r in results) - started
        total = sum(r["bytes"] for r in results)
        server_cpu = cpu_seconds(pid) - cpu_before
        assert all(r["bytes"] == len(blob) for r in results), "a reader got a wrong entry"
        bucket_reads = [  # object downloads (not metadata)
            r for r in (proxy.requests if proxy else [])
            if r[0] == "GET" and key in r[1] and "alt=media" in r[1]
        ]  # fmt: skip
        figures = {}
        if server is not None:
            from xlacache.stores.remote import GrpcStore

            with GrpcStore(server.url, timeout=30) as client:
                figures = dict(client.server_stats().counters)
        return {
            "target": target,
            "readers": args.readers,
            "entry_bytes": len(blob),
            "wall_s": wall,
            "aggregate_gib_s": total / wall / GIB,
            "slowest_reader_s": max(r["done"] - r["start"] for r in results),
            "server_cpu_s": server_cpu,
            "server_gib_per_cpu_s": total / GIB / server_cpu if server_cpu else 0.0,
            "server_rss_before_mb": before / 1e6,
            "server_rss_peak_mb": sampler.peak / 1e6,
            "bucket_reads": len(bucket_reads),
            "coalesced_reads": figures.get("coalesced_reads", 0),
            "load_before": load_before,
            "load_after": _load(),
        }
    finally:
        if server is not None:
            server.stop(signal.SIGTERM)
        if proxy is not None:
            proxy.close()


def _load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def main(argv=None) -> None:
    from xlacache.units import parse_size

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--readers", type=int, default=32)
    p.add_argument("--size", default="64MiB", help="payload size of the entry")
    p.add_argument("--targets", nargs="+", default=["server", "bucket-server", "gcs"],
                   choices=["server", "bucket-server", "gcs"])  # fmt: skip
    p.add_argument("--raw", action="store_true",
                   help="server readers stream the bytes only (no join, no verify)")  # fmt: skip
    p.add_argument("--out", default=str(RESULTS / "fanout.json"))
    p.add_argument("--reader", action="store_true", help=argparse.SUPPRESS)
    for hidden in ("--url", "--key", "--ready", "--go", "--result"):
        p.add_argument(hidden, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.reader:
        reader_main(args)
        return
    key, blob = make_entry(parse_size(args.size))
    work = Path(tempfile.mkdtemp(prefix="fanout_"))
    emulator = None
    runs = []
    try:
        if any(t != "server" for t in args.targets):
            from tests.gcsutil import Emulator

            emulator = Emulator.start(work)
        for target in args.targets:
            path = work / target
            path.mkdir()
            run = fan_out(args, target, path, emulator, key, blob)
            runs.append(run)
            print(f"{target}: {json.dumps(run)}", file=sys.stderr)
    finally:
        if emulator is not None:
            emulator.stop()
        shutil.rmtree(work, ignore_errors=True)
    lines = [
        f"{args.readers} readers fetch one {len(blob) / 2**20:.0f} MiB entry at once (each a "
        f"process; {'raw streams from servers' if args.raw else 'verified reads'}).",
        "",
        "| target | aggregate GiB/s | wall s | server GiB per CPU s | server RSS before / peak "
        "MB | bucket reads | coalesced | load |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in runs:
        rss_text = (f"{r['server_rss_before_mb']:.0f} / {r['server_rss_peak_mb']:.0f}"
                    if r["server_rss_peak_mb"] else "n/a")  # fmt: skip
        per_cpu = f"{r['server_gib_per_cpu_s']:.2f}" if r["server_cpu_s"] else "n/a"
        lines.append(
            f"| {r['target']} | {r['aggregate_gib_s']:.2f} | {r['wall_s']:.2f} | "
            f"{per_cpu} | {rss_text} | {r['bucket_reads']} | "
            f"{r['coalesced_reads']:.0f} | {r['load_before']} -> {r['load_after']} |"
        )
    print("\n".join(lines))
    out = Path(args.out)
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps({"runs": runs, "table": lines}, indent=1))


if __name__ == "__main__":
    main()
