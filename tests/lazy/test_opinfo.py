"""PyTorch's own operator tests as the lazy device's conformance suite.

Every OpInfo of ``torch.testing._internal.common_methods_invocations.op_db`` runs in each mode
it supports (float32 forward, float32 backward, bfloat16, int64, bool: the dtypes torch_xla
tests, plus bfloat16 which TPU users train in) through ``opinfo.check_op``: its first sample
input on CPU, moved to the device, compared with eager. One test per (mode, op), so ``-n 2``
splits them. The suite takes one sample per op to stay within the suite's time; the table
(``benchmarks/opinfo_conformance.py``) runs more samples per op.

An op must never give a wrong result. It must be lowered natively (no CPU fallback) unless
``EXPECTED`` lists it, with the reason; an op that does better than its entry fails the test
too, so the list only shrinks: take the op off the list (or lower its entry to "fallback").
A skip (nothing eager can compare) is listed too, and counts against both goals: what was
not compared neither runs natively nor passes.
"""

from __future__ import annotations

import pytest

from . import opinfo
from ._opinfo_expected import EXPECTED

pytestmark = pytest.mark.slow

SAMPLES = 1  # per op and mode in the suite
MODES = tuple(opinfo.MODES)
OPS = opinfo.ops_by_id()

CASES = [
    (mode, oid) for oid, op in sorted(OPS.items()) for mode in MODES if opinfo.supports(op, mode)
]


@pytest.mark.parametrize(("mode", "op_id"), CASES, ids=[f"{m}:{o}" for m, o in CASES])
def test_op_matches_eager(mode: str, op_id: str) -> None:
    outcome = opinfo.check_op(OPS[op_id], mode, samples=SAMPLES)
    assert outcome.status != "wrong", f"{mode} {op_id} gives a WRONG result: {outcome.detail}"
    want, reason = EXPECTED.get((mode, op_id), ("native", ""))
    if outcome.status == want == "skip":
        pytest.skip(f"{outcome.detail} (listed: {reason})")
    if outcome.status == want:
        return
    better = ["skip", "error", "fallback", "native"]
    if want in better and better.index(outcome.status) > better.index(want):
        pytest.fail(
            f"{mode} {op_id} is now {outcome.status} (listed as {want}: {reason}): update "
            "EXPECTED in tests/lazy/_opinfo_expected.py"
        )
    pytest.fail(f"{mode} {op_id}: {outcome.status} ({outcome.detail}), expected {want}")


def test_expected_failures_meet_the_goals() -> None:
    """The list cannot grow past the goals, in every mode: >= 85% of the ops lowered natively,
    >= 98% passing with the CPU fallback (a skip is neither); no wrong result is ever listed."""
    assert goal_misses(EXPECTED) == []
    assert all(s in ("fallback", "error", "skip") for s, _ in EXPECTED.values())
    assert all(reason for _, reason in EXPECTED.values())
    assert set(EXPECTED) <= set(CASES), set(EXPECTED) - set(CASES)


def goal_misses(expected: dict) -> list[tuple[str, str]]:
    """(mode, goal) for each goal the `expected` table misses."""
    misses = []
    for mode in MODES:
        ids = [oid for m, oid in CASES if m == mode]
        listed = [expected[(mode, oid)][0] for oid in ids if (mode, oid) in expected]
        failing = [s for s in listed if s in ("error", "skip")]
        if len(listed) > 0.15 * len(ids):
            misses.append((mode, "85% native"))
        if len(failing) > 0.02 * len(ids):
            misses.append((mode, "98% passing"))
    return misses


def test_skips_count_against_both_goals() -> None:
    """A skipped case neither runs natively nor passes: as many skips as the goals allow
    errors (or fallbacks) miss them."""
    ids = [oid for m, oid in CASES if m == "bool"]
    skipped = {
        ("bool", o): ("skip", "eager runs no sample") for o in ids if ("bool", o) not in EXPECTED
    }
    few = dict(list(skipped.items())[: len(ids) // 50 + 1])  # more than 2% of bool's cases
    assert goal_misses({**EXPECTED, **few}) == [("bool", "98% passing")]
    assert goal_misses({**EXPECTED, **skipped}) == [("bool", "85% native"), ("bool", "98% passing")]
