"""benchmarks/gpu.py end to end in its quick mode on this CPU (docs/gpu.md): every part runs
and its figures are sane; the GPU figures themselves come from a GPU machine."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_gpu_benchmark_quick_mode_runs_every_part(tmp_path):
    out = tmp_path / "gpu.json"
    cmd = [sys.executable, str(ROOT / "benchmarks" / "gpu.py"), "--device", "cpu", "--quick"]
    cmd += ["--torch-modes", "eager", "xlacache", "--jax-modes", "xlacache"]
    cmd += ["--steps", "3", "-j", "1", "--out", str(out)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=1200, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "| OpInfo float32, 1 sample |" in done.stdout  # the one table
    parts = json.loads(out.read_text())["parts"]
    jax = parts["jax"]
    assert set(jax) == {"xlacache"}  # JAX's own cache left out here, as asked
    assert all(r["warm_loss_equal"] for r in jax.values())
    assert jax["xlacache"]["cold_misses"] > 0 and jax["xlacache"]["warm_misses"] == 0
    torch_ = parts["torch"]
    assert set(torch_) == {"eager", "xlacache"}
    assert torch_["xlacache"]["warm_losses_equal"] and "warm_losses_equal" not in torch_["eager"]
    assert torch_["xlacache"]["last_loss"] == pytest.approx(torch_["eager"]["last_loss"], 1e-4)
    precision = parts["precision"]
    assert precision["platform"] == "cpu"
    assert precision["lazy_highest"] < 1e-5 and precision["eager_cpu"] < 1e-5
    moves = parts["moves"]
    assert moves["swap=False, graph freed"] == "ok" and moves["swap=True, graph freed"] == "ok"
    opinfo = parts["opinfo"]
    assert opinfo["ops"] == 3 and opinfo["wrong"] == 0 and opinfo["error"] == 0


def test_a_failed_mode_keeps_the_other_figures_and_fails_the_run(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    import gpu

    torch_part = {
        "eager": {"steady_step_s": 0.0165},
        "xlacache": {"error": "RuntimeError: child failed: Traceback ...\nInvalidBackend: 'x'"},
        "error": ["xlacache: RuntimeError: ..."],
    }
    opinfo = {"ops": 3, "native": 2, "fallback": 0, "wrong": 0, "error": 1, "skip": 0}
    opinfo["wrong_or_error"] = {"chalf": "TypeError: complex32"}
    results = {"parts": {"torch": torch_part, "opinfo": opinfo, "jax": {"error": "boom"}}}
    rows = gpu.table(results).splitlines()
    assert "| torch GPT | eager | steady_step 16.5 ms |" in rows
    assert "| torch GPT | xlacache | failed: InvalidBackend: 'x' |" in rows  # its own line
    assert "| jax | failed | boom |" in rows
    assert gpu._failed(torch_part) and gpu._failed({"error": "boom"})
    assert not gpu._failed(opinfo)  # an op's error is a figure, not a failed part
