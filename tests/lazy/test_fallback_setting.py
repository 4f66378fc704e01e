"""``XLACACHE_LAZY_FALLBACK=0`` (or ``false``, ``off``) makes every CPU run an error naming the
op, data-dependent shapes included, as docs/lazy.md says (issue 27, 5 and 8)."""

from __future__ import annotations

import json

import pytest

from tests.conftest import run_python

_CODE = """
import json, torch, xlacache.lazy as xl
x = torch.tensor([1.0, -2.0, 3.0]).to(xl.device())
cases = {"mask": lambda: x[x > 0], "unique": lambda: torch.unique(x),
         "nonzero": lambda: torch.nonzero(x), "masked_select": lambda: x.masked_select(x > 0)}
out = {}
for name, op in cases.items():
    try:
        out[name] = op().cpu().tolist()
    except NotImplementedError as e:
        out[name] = "error: " + str(e)
out["lowered"] = (x * 2).sum().item()  # ops with a lowering run as ever
print(json.dumps(out))
"""


@pytest.mark.slow
def test_fallback_off_refuses_every_cpu_run():
    # "off" and "false" are the same boolean words as every setting's (test_settings.py)
    proc = run_python(_CODE, env={"XLACACHE_LAZY_FALLBACK": "0"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    for name in ("mask", "unique", "nonzero", "masked_select"):
        assert out[name].startswith("error: xlacache.lazy: aten."), (name, out[name])
        assert "XLACACHE_LAZY_FALLBACK=0" in out[name] and "depends on the data" in out[name]
    assert out["lowered"] == 4.0


@pytest.mark.slow
def test_fallback_on_runs_them_on_the_cpu():
    proc = run_python(_CODE, env={"XLACACHE_LAZY_FALLBACK": "yes"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["mask"] == [1.0, 3.0] and out["unique"] == [-2.0, 1.0, 3.0]
