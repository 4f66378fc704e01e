"""PyTorch's operator database on the lazy device, as a table.

Runs every OpInfo of ``op_db`` in each mode (float32 forward, float32 backward, bfloat16, int64,
bool) through the conformance harness (``tests/lazy/opinfo.py``: samples on CPU, moved to the
device, compared with eager) and counts per mode:

  native    all samples match and no op ran on the CPU fallback
  fallback  all samples match, some op ran on the CPU fallback
  wrong     a sample differs from eager (the goal is none)
  error     the device raised where eager did not
  skip      nothing to compare (no sample eager can run; random or uninitialized output)

``native %`` and ``with fallback %`` are over the ops compared (all but skips). Writes
``bench-results/opinfo_conformance.json`` (every op's outcome) and ``.md`` (the tables, the
fallback ops by aten op, the errors).

    .venv/bin/python benchmarks/opinfo_conformance.py                 # all modes, 2 workers
    .venv/bin/python benchmarks/opinfo_conformance.py --modes float32 --samples 3 -j 1
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import sys
import time
from collections import Counter, defaultdict
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
STATUSES = ("native", "fallback", "wrong", "error", "skip")


def _work(job: tuple[list[str], list[str], int | None]) -> dict[str, dict[str, list]]:
    """Run ``ops`` in ``modes`` in this worker process: {mode: {op: [status, detail, s]}}."""
    ops, modes, samples = job
    from tests.lazy import opinfo

    if samples:
        for m, (dtype, backward, _) in list(opinfo.MODES.items()):
            opinfo.MODES[m] = (dtype, backward, samples)
    by_id = opinfo.ops_by_id()
    out: dict[str, dict[str, list]] = defaultdict(dict)
    for mode in modes:
        for oid in ops:
            op = by_id[oid]
            if not opinfo.supports(op, mode):
                continue
            t0 = time.perf_counter()
            o = opinfo.check_op(op, mode)
            seconds = round(time.perf_counter() - t0, 2)
            out[mode][oid] = [o.status, o.detail[:500], seconds, o.first, round(o.first_s, 2)]
    return dict(out)


def _table(results: dict[str, dict[str, list]]) -> str:
    rows = [
        "| mode | ops | native | fallback | wrong | error | skip | native % | with fallback % |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for mode, ops in results.items():
        c = Counter(v[0] for v in ops.values())
        compared = sum(c[s] for s in STATUSES if s != "skip")
        native, passing = (
            f"{100 * n / max(compared, 1):.1f}" for n in (c["native"], c["native"] + c["fallback"])
        )
        rows.append(
            f"| {mode} | {len(ops)} | {c['native']} | {c['fallback']} | {c['wrong']} | "
            f"{c['error']} | {c['skip']} | {native} | {passing} |"
        )
    return "\n".join(rows)


def _details(results: dict[str, dict[str, list]]) -> str:
    lines = []
    for mode, ops in results.items():
        by_aten: dict[str, list[str]] = defaultdict(list)
        for oid, (status, detail, *_) in sorted(ops.items()):
            if status == "fallback":
                for aten in detail.split():
                    by_aten[aten].append(oid)
        if by_aten:
            lines.append(f"\n### {mode}: ops that ran on the CPU fallback\n")
            for aten, oids in sorted(by_aten.items(), key=lambda kv: (-len(kv[1]), kv[0])):
                lines.append(f"- `{aten}`: {', '.join(oids)}")
        bad = [(o, v) for o, v in sorted(ops.items()) if v[0] in ("wrong", "error")]
        if bad:
            lines.append(f"\n### {mode}: wrong or raising\n")
            lines += [f"- {v[0]} `{o}`: {v[1].splitlines()[0][:200]}" for o, v in bad]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--modes", nargs="+", default=["float32", "float32-grad", "bfloat16", "int64", "bool"]
    )
    parser.add_argument(
        "--samples", type=int, default=None, help="samples per op (default: the test's)"
    )
    parser.add_argument("--ops", nargs="*", default=None, help="op ids (default: all)")
    parser.add_argument("-j", "--jobs", type=int, default=2)
    parser.add_argument("--out", default=str(REPO / "bench-results" / "opinfo_conformance"))
    args = parser.parse_args()

    os.environ.setdefault("PYTHONPATH", str(REPO))
    from tests.lazy import opinfo

    ids = args.ops or sorted(opinfo.ops_by_id())
    chunks = [ids[i :: args.jobs * 4] for i in range(args.jobs * 4)]
    t0 = time.perf_counter()
    results: dict[str, dict[str, list]] = {m: {} for m in args.modes}
    jobs = [(c, args.modes, args.samples) for c in chunks]
    if args.jobs > 1:
        spawn = multiprocessing.get_context("spawn")  # fresh processes: no JAX state forked
        with ProcessPoolExecutor(args.jobs, mp_context=spawn) as pool:
            parts = list(pool.map(_work, jobs))
    else:  # one worker: this process
        parts = [_work(job) for job in jobs]
    for part in parts:
        for mode, ops in part.items():
            results[mode].update(ops)
    results = {m: dict(sorted(ops.items())) for m, ops in results.items()}
    wall = time.perf_counter() - t0

    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    table = _table(results)
    out.with_suffix(".json").write_text(json.dumps({"wall_s": wall, "results": results}, indent=1))
    out.with_suffix(".md").write_text(f"{table}\n{_details(results)}\n")
    print(table)
    print(f"\n{wall:.0f} s with {args.jobs} workers; details in {out.with_suffix('.md')}")


if __name__ == "__main__":
    main()
