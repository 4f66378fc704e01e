"""A screenshot of the server's status page after a minute of simulated pod traffic.

    python docs/status_page_screenshot.py [OUT.png] [--seconds 20] [--keep]

Starts `xlacache serve` on loopback (tokens for a trainer and two worker pools, a
64 MB cap, a sample every 0.25 s), plays traffic through the real client
(`GrpcStore`): a trainer uploads programs, workers load them (a cold start, then
mostly hits), and workers report the misses they explained; then headless Chromium
(Debian's `chromium`) renders http://127.0.0.1:PORT/ to OUT.png (default
docs/status-page.png). --keep leaves the server running and prints its URL.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from xlacache import entry  # noqa: E402
from xlacache.stores.remote import GrpcStore  # noqa: E402

TOKENS = {
    "trainer": "write-token-trainer-0123456789",
    "workers-a": "read-token-pool-a-0123456789",
    "workers-b": "read-token-pool-b-0123456789",
    "ops": "admin-token-ops-0123456789",
}
PROGRAMS = {  # label: (compile seconds, payload KiB)
    "jit_train_step": (41.0, 900),
    "jit_eval_step": (17.5, 500),
    "jit_optimizer_update": (9.2, 300),
    "jit_attention_fwd": (6.4, 260),
    "jit_embed_lookup": (2.1, 120),
    "jit_loss_and_grad": (23.0, 700),
    "jit_generate_token": (12.8, 420),
    "jit_rope_cache": (0.9, 60),
}
LHS = "xla_gpu_enable_latency_hiding_scheduler"
MISSES = [  # (reason, label, [(component, details)])
    ("flags", "jit_train_step", [
        ("xla_flags", [f"`--{LHS}=true` added"]),
        ("compile_options", [f"debug.{LHS} False -> True"]),
    ]),
    ("devices", "jit_eval_step", [
        ("devices", ["device count 8 -> 4", "devices in the job 32 -> 16"]),
    ]),
    ("versions", "jit_loss_and_grad", [("jaxlib", ["jaxlib 0.10.1 -> 0.10.2"])]),
    ("new_program", "jit_generate_token", [
        ("hlo", ["HLO differs: 3 lines changed, first at line 2",
                 "- %arg1: tensor<8x1024xbf16>", "+ %arg1: tensor<16x1024xbf16>"]),
    ]),
    ("options", "jit_attention_fwd", [("compile_options", ["num_partitions 1 -> 8"])]),
]  # fmt: skip


def start_server(work: Path) -> tuple[subprocess.Popen, int, int]:
    tokens = work / "tokens"
    roles = {"trainer": "write", "workers-a": "read", "workers-b": "read", "ops": "admin"}
    tokens.write_text("".join(f"{roles[n]} {t} {n}\n" for n, t in TOKENS.items()))
    log = work / "server.log"
    args = [sys.executable, "-m", "xlacache", "serve", "--store", str(work / "store"),
            "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0", "--tokens", str(tokens),
            "--max-size", "24MB", "--sample-interval", "0.25s"]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(args, stdout=log.open("wb"), stderr=subprocess.STDOUT, env=env)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        text = log.read_text(errors="replace")
        grpc_port = re.search(r"listening on \S+:(\d+)", text)
        http_port = re.search(r"metrics on http://\S+:(\d+)/", text)
        if grpc_port and http_port:
            return proc, int(grpc_port.group(1)), int(http_port.group(1))
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    proc.kill()
    raise SystemExit(f"the server did not start:\n{log.read_text(errors='replace')}")


def key_of(label: str, variant: int) -> str:
    return hashlib.sha256(f"{label}/{variant}".encode()).hexdigest()


def play_traffic(url: str, seconds: float) -> None:
    rng = random.Random(7)
    trainer = GrpcStore(url, token=TOKENS["trainer"], timeout=10)
    workers = [GrpcStore(url, token=TOKENS[n], readonly=True, timeout=10)
               for n in ("workers-a", "workers-b")]  # fmt: skip
    stored: list[str] = []
    start = time.monotonic()
    while (elapsed := time.monotonic() - start) < seconds:
        warm = elapsed / seconds  # the pod warms up: fewer new programs as time goes on
        label = rng.choice(list(PROGRAMS))
        compile_seconds, kb = PROGRAMS[label]
        if rng.random() < 0.5 * (1 - warm) + 0.04 or not stored:
            key = key_of(label, rng.randrange(6))
            payload = os.urandom(kb * 1024)
            took = compile_seconds * rng.uniform(0.8, 1.2)
            blob = entry.encode(key, payload, compile_seconds=took, label=label)
            workers[0].get(key)  # a worker missed it first
            trainer.put(key, blob)
            if stored and rng.random() < 0.6:
                reason, missed, diffs = rng.choice(MISSES)
                rng.choice(workers).report_miss({
                    "time": time.time(), "key": key, "label": missed, "reason": reason,
                    "differences": [{"component": c, "details": d} for c, d in diffs],
                    "nearest": stored[-1], "nearest_label": missed, "compared": rng.randrange(1, 9),
                    "host": f"pod-{rng.randrange(64):02d}", "pid": rng.randrange(100, 9999),
                })  # fmt: skip
            stored.append(key)
        for _ in range(rng.randrange(2, 6)):
            rng.choice(workers).get(rng.choice(stored))
        time.sleep(0.03)


def find_chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if path := shutil.which(name):
            return path
    raise SystemExit("no chromium: apt-get install -y chromium")


def screenshot(page: str, out: Path, width: int = 1200, height: int = 1320) -> None:
    with tempfile.TemporaryDirectory() as profile:
        subprocess.run(
            [find_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
             f"--user-data-dir={profile}", f"--window-size={width},{height}",
             f"--screenshot={out}", page],
            check=True, capture_output=True, timeout=120,
        )  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out", nargs="?", default=str(ROOT / "docs" / "status-page.png"))
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--keep", action="store_true")
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        proc, grpc_port, http_port = start_server(Path(tmp))
        try:
            play_traffic(f"grpc://127.0.0.1:{grpc_port}", options.seconds)
            time.sleep(1.5)  # buffered hits reach the index; a last sample is taken
            page = f"http://ops:{TOKENS['ops']}@127.0.0.1:{http_port}/"  # basic auth: a token
            screenshot(page, Path(options.out))
            print(f"wrote {options.out} ({Path(options.out).stat().st_size // 1024} KiB)")
            if options.keep:
                print(f"serving {page} until Ctrl-C")
                proc.wait()
        finally:
            proc.terminate()
            proc.wait(30)


if __name__ == "__main__":
    main()
