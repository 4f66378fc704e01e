"""GET and PUT throughput of `xlacache serve` against Redis on the same machine and harness.

    python benchmarks/remote_vs_redis.py [--sizes 4,64] [--clients 1,8,32] [--json out.json]

Both servers run in their own processes on 127.0.0.1 (Debian's `redis-server`, driven
by redis-py as PyTorch Inductor's remote cache does; the xlacache daemon driven by
GrpcStore, which verifies every entry it reads). Each client is a thread with its own
connection. A PUT writes a distinct key; a GET reads one of the stored keys. Prints
throughput (GiB/s of entry bytes), p50 and p99 latency per operation, and writes JSON.

The two do not promise the same thing. xlacache runs with its default settings: every
PUT is verified (SHA-256 of the body against the declared digest, header checks),
written to a temp file, renamed into place and indexed before it is acknowledged; with
the default `--fsync off` the kernel writes it to disk within ~30 s (pass
`--server-arg=--fsync=always` to fsync every PUT first). Every GET is verified by the
client. Redis runs in memory with no persistence at all (`--save "" --appendonly no`)
unless --redis-aof asks for an append-only file fsynced on every write
(`--appendonly yes --appendfsync always`).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shlex
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from xlacache import entry  # noqa: E402
from xlacache.stores.remote import GrpcStore  # noqa: E402

MiB = 1024 * 1024
# Seconds a client waits to connect and for a first reply (GrpcStore's default is 5 s:
# on a shared, overloaded machine 32 fresh connections may take longer; Redis's clients
# get socket_timeout=600).
CONNECT_TIMEOUT = 60.0


@dataclass
class Result:
    backend: str
    op: str
    size_mib: int
    clients: int
    ops: int
    seconds: float
    gib_per_s: float
    p50_ms: float
    p99_ms: float
    errors: int


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def redis_persistence(aof: bool) -> list[str]:
    if aof:
        return ["--save", "", "--appendonly", "yes", "--appendfsync", "always"]
    return ["--save", "", "--appendonly", "no"]


def start_redis(workdir: Path, aof: bool = False) -> tuple[subprocess.Popen, int] | None:
    exe = shutil.which("redis-server")
    if exe is None:
        return None
    port = free_port()
    proc = subprocess.Popen(
        [exe, "--bind", "127.0.0.1", "--port", str(port), *redis_persistence(aof),
         "--dir", str(workdir), "--protected-mode", "yes", "--loglevel", "warning"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    import redis

    client = redis.Redis(host="127.0.0.1", port=port)
    for _ in range(200):
        try:
            client.ping()
            return proc, port
        except redis.ConnectionError:
            time.sleep(0.05)
    proc.kill()
    raise RuntimeError("redis-server did not start")


def start_xlacache(workdir: Path, extra: list[str]) -> tuple[subprocess.Popen, int]:
    log = workdir / "server.log"
    args = [sys.executable, "-m", "xlacache", "serve", "--store", str(workdir / "store"),
            "--listen", "127.0.0.1:0", *extra]  # fmt: skip
    with open(log, "wb") as out:
        proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT)
    args_info = re.compile(r"listening on \S+:(\d+)")
    for _ in range(600):
        match = args_info.search(log.read_text())
        if match:
            return proc, int(match.group(1))
        if proc.poll() is not None:
            raise RuntimeError(log.read_text())
        time.sleep(0.05)
    proc.kill()
    raise RuntimeError("xlacache server did not start")


def make_entries(size: int, count: int, tag: str) -> list[tuple[str, bytes]]:
    """`count` distinct valid entries of `size` payload bytes sharing one random body."""
    payload = os.urandom(size)
    out = []
    for i in range(count):
        key = hashlib.sha256(f"{tag}-{size}-{i}".encode()).hexdigest()
        out.append((key, entry.encode(key, payload, compile_seconds=1.0)))
    return out


def run_clients(clients: int, ops: int, make_op: Callable[[int], Callable[[int], int]]) -> tuple:
    """Run `ops` operations spread over `clients` threads; returns (seconds, latencies, errors)."""
    latencies: list[float] = []
    errors = [0]
    lock = threading.Lock()
    counter = iter(range(ops))
    barrier = threading.Barrier(clients + 1)

    def worker(index: int) -> None:
        op = make_op(index)
        barrier.wait()
        while True:
            with lock:
                i = next(counter, None)
            if i is None:
                return
            t0 = time.perf_counter()
            try:
                op(i)
            except Exception as exc:  # noqa: BLE001 - counted and shown
                with lock:
                    errors[0] += 1
                    if errors[0] <= 3:
                        print(f"  error: {type(exc).__name__}: {exc}", file=sys.stderr)
                continue
            with lock:
                latencies.append(time.perf_counter() - t0)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    barrier.wait()
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    return time.perf_counter() - t0, latencies, errors[0]


def summarize(backend, op, size, clients, seconds, latencies, errors) -> Result:
    lat = sorted(latencies) or [float("nan")]
    p99 = lat[min(len(lat) - 1, int(round(0.99 * (len(lat) - 1))))]
    return Result(
        backend=backend, op=op, size_mib=size // MiB, clients=clients, ops=len(latencies),
        seconds=round(seconds, 3),
        gib_per_s=round(len(latencies) * size / seconds / 1024**3, 3),
        p50_ms=round(statistics.median(lat) * 1000, 1), p99_ms=round(p99 * 1000, 1),
        errors=errors,
    )  # fmt: skip


def ops_for(size: int, clients: int, budget_mib: int) -> int:
    return max(clients, budget_mib * MiB // size)


def bench_xlacache(port, size, clients, budget_mib, results) -> None:
    ops = ops_for(size, clients, budget_mib)
    url = f"grpc://127.0.0.1:{port}"
    admin = GrpcStore(url, timeout=CONNECT_TIMEOUT)
    pool = make_entries(size, ops, f"x{clients}")
    for key, _ in pool:
        admin.delete(key)

    def put_op(index):
        store = GrpcStore(url, timeout=CONNECT_TIMEOUT, transfer_timeout=600, min_rate=MiB)
        return lambda i: store.put(*pool[i])

    seconds, lat, errors = run_clients(clients, ops, put_op)
    results.append(summarize("xlacache", "PUT", size, clients, seconds, lat, errors))
    print_row(results[-1])

    def get_op(index):
        store = GrpcStore(url, timeout=CONNECT_TIMEOUT, transfer_timeout=600, min_rate=MiB)

        def op(i):
            if store.get(pool[i % len(pool)][0]) is None:
                raise RuntimeError("miss")

        return op

    seconds, lat, errors = run_clients(clients, ops, get_op)
    results.append(summarize("xlacache", "GET", size, clients, seconds, lat, errors))
    print_row(results[-1])
    for key, _ in pool:
        admin.delete(key)
    admin.close()


def bench_redis(port, size, clients, budget_mib, results) -> None:
    import redis

    ops = ops_for(size, clients, budget_mib)
    pool = make_entries(size, ops, f"r{clients}")

    def client():
        return redis.Redis(host="127.0.0.1", port=port, socket_timeout=600)

    def put_op(index):
        r = client()
        return lambda i: r.set(pool[i][0], pool[i][1])

    seconds, lat, errors = run_clients(clients, ops, put_op)
    results.append(summarize("redis", "PUT", size, clients, seconds, lat, errors))
    print_row(results[-1])

    def get_op(index):
        r = client()

        def op(i):
            if r.get(pool[i % len(pool)][0]) is None:
                raise RuntimeError("miss")

        return op

    seconds, lat, errors = run_clients(clients, ops, get_op)
    results.append(summarize("redis", "GET", size, clients, seconds, lat, errors))
    print_row(results[-1])
    client().flushall()


HEADER = f"{'backend':9} {'op':4} {'size':>6} {'clients':>7} {'ops':>5} {'GiB/s':>7} " \
         f"{'p50 ms':>8} {'p99 ms':>8} {'errors':>6}"  # fmt: skip


def print_row(r: Result) -> None:
    print(
        f"{r.backend:9} {r.op:4} {r.size_mib:>4}Mi {r.clients:>7} {r.ops:>5} {r.gib_per_s:>7.3f} "
        f"{r.p50_ms:>8.1f} {r.p99_ms:>8.1f} {r.errors:>6}",
        flush=True,
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="4,64", help="entry sizes in MiB")
    parser.add_argument("--clients", default="1,8,32")
    parser.add_argument("--budget-mib", type=int, default=512, help="MiB moved per measurement")
    parser.add_argument("--backends", default="xlacache,redis")
    parser.add_argument("--server-arg", action="append", default=[], help="extra serve flag")
    parser.add_argument(
        "--redis-aof", action="store_true", help="Redis with an AOF fsynced on every write"
    )
    parser.add_argument("--json", default=str(ROOT / "bench-results" / "remote_vs_redis.json"))
    args = parser.parse_args()
    sizes = [int(s) * MiB for s in args.sizes.split(",")]
    clients = [int(c) for c in args.clients.split(",")]
    backends = args.backends.split(",")
    results: list[Result] = []
    with tempfile.TemporaryDirectory(prefix="xlacache-bench-") as tmp:
        tmp = Path(tmp)
        procs = []
        try:
            redis_port = None
            if "redis" in backends:
                started = start_redis(tmp, args.redis_aof)
                if started is None:
                    print("redis-server not installed (apt-get install redis-server): skipped")
                else:
                    procs.append(started[0])
                    redis_port = started[1]
            xla_port = None
            if "xlacache" in backends:
                proc, xla_port = start_xlacache(tmp, args.server_arg)
                procs.append(proc)
            load_before = os.getloadavg()
            print(f"load average (1/5/15 min) at start: {load_before} on {os.cpu_count()} CPUs")
            print(f"xlacache serve flags: {' '.join(args.server_arg) or '(defaults)'}")
            print(f"redis-server persistence: {shlex.join(redis_persistence(args.redis_aof))}")
            print(HEADER)
            for size in sizes:
                for n in clients:
                    if xla_port:
                        bench_xlacache(xla_port, size, n, args.budget_mib, results)
                    if redis_port:
                        bench_redis(redis_port, size, n, args.budget_mib, results)
        finally:
            for proc in procs:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(60)
                except subprocess.TimeoutExpired:
                    proc.kill()
    load_after = os.getloadavg()
    print(f"load average (1/5/15 min) at end: {load_after}")
    meta = {
        "load_before": load_before,
        "load_after": load_after,
        "cpus": os.cpu_count(),
        "python": sys.version.split()[0],
        "time": time.time(),
        "xlacache_flags": args.server_arg,
        "redis_persistence": redis_persistence(args.redis_aof),
    }
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(
        json.dumps({"meta": meta, "results": [asdict(r) for r in results]}, indent=2) + "\n"
    )
    print(f"wrote {args.json}")
    return 0 if all(r.errors == 0 for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
