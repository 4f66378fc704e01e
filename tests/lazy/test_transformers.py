"""Hugging Face transformers models, tried as a new user would: built from tiny configs in their
default configuration (random weights, nothing downloaded), trained with AdamW on the device,
saved the ways users save them, and loaded warm from the persistent cache by a fresh process.

One test per model does all of it (each self-contained, so test workers can split the models):
device losses match eager CPU to 1e-4, compiling stops after step 2 (the first step creates the
optimizer state; every later step is one cached graph), saving round-trips exactly, and a new
process with the same cache compiles nothing and reproduces every loss (for ``WARM``: a fresh
process is the suite's costliest part, and the other models' graphs are keyed the same way).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import safetensors.torch as st
import torch

import xlacache
import xlacache.lazy as xl
from tests.conftest import run_module_json

from .hf_models import MODELS, STEPS, build, train

pytestmark = pytest.mark.slow
DECODERS_WITH_KV_CACHE = ("gpt2", "llama", "mistral", "t5")
WARM = ("gpt2", "resnet")  # a decoder with its KV cache, a convolutional network


def _save_file_outcome(state: dict[str, torch.Tensor], path: Path) -> str | None:
    try:
        st.save_file(state, str(path))
    except RuntimeError as e:
        return type(e).__name__
    return None


def _check_saving(name: str, model: torch.nn.Module, tmp_path: Path) -> None:
    state = model.state_dict()
    values = {k: v.cpu() for k, v in state.items()}

    model.save_pretrained(tmp_path / "pretrained")
    back = type(model).from_pretrained(tmp_path / "pretrained")
    assert back.state_dict().keys() == values.keys()
    for k, v in back.state_dict().items():
        assert torch.equal(v, values[k]), k

    st.save_model(model, str(tmp_path / "model.safetensors"))
    saved = st.load_file(str(tmp_path / "model.safetensors"))
    assert saved and all(torch.equal(v, values[k]) for k, v in saved.items())
    # save_file refuses tied weights (shared storage) on the device exactly when eager does
    expected = _save_file_outcome(build(name).state_dict(), tmp_path / "eager.safetensors")
    assert _save_file_outcome(state, tmp_path / "dev.safetensors") == expected
    if expected is None:
        saved = st.load_file(str(tmp_path / "dev.safetensors"))
        assert saved.keys() == values.keys()
        assert all(torch.equal(v, values[k]) for k, v in saved.items())

    torch.save(state, tmp_path / "state.pt")
    loaded = torch.load(tmp_path / "state.pt", weights_only=True)
    assert all(v.device.type == "xla" for v in loaded.values())
    assert all(torch.equal(v.cpu(), values[k]) for k, v in loaded.items())
    on_cpu = torch.load(tmp_path / "state.pt", map_location="cpu")
    assert all(v.device.type == "cpu" and torch.equal(v, values[k]) for k, v in on_cpu.items())


def _warm_child(cache: Path, name: str) -> dict:
    return run_module_json("tests.lazy._hf_child", str(cache), name, timeout=600)


@pytest.mark.parametrize("name", list(MODELS))
def test_model_trains_saves_and_loads_warm(name: str, tmp_path: Path):
    eager = train(name, "cpu")
    xlacache.initialize_cache(tmp_path / "cache")
    xl.clear_compiled_cache()  # every graph compiles here, so the store gets all of them
    dev = train(name, xl.device())
    model = dev["model"]
    assert all(p.device.type == "xla" for p in model.parameters())
    if name in DECODERS_WITH_KV_CACHE:
        assert model.config.use_cache  # the default: transformers' KV cache in training
    torch.testing.assert_close(dev["losses"], eager["losses"], rtol=1e-4, atol=0)
    assert dev["compiles"][2:] == [0] * (STEPS - 2), dev["compiles"]

    _check_saving(name, model, tmp_path)
    if name not in WARM:
        return
    warm = _warm_child(tmp_path / "cache", name)
    counters, run = warm["counters"], warm["runs"][name]
    assert counters["UncachedCompile"] == 0 and counters["PersistentCacheMiss"] == 0, counters
    assert counters["PersistentCacheHit"] == sum(dev["compiles"]) >= 2, counters
    assert run["compiles"] == dev["compiles"]  # each graph loaded where it was compiled
    assert run["losses"] == dev["losses"]
    print(
        f"{name}: first two steps {sum(dev['seconds'][:2]):.2f}s cold, "
        f"{sum(run['seconds'][:2]):.2f}s warm"
    )


def test_autocast_bfloat16_trains_like_eager_autocast():
    """``torch.autocast("xla", dtype=torch.bfloat16)``: torch_xla's policy (matmuls in bf16,
    losses and softmax in f32), as close to CPU autocast as bf16 rounding allows."""
    eager = train("llama", "cpu", steps=4, autocast=torch.bfloat16)
    dev = train("llama", xl.device(), steps=4, autocast=torch.bfloat16)
    torch.testing.assert_close(dev["losses"], eager["losses"], rtol=1e-3, atol=0)
    assert dev["compiles"][2:] == [0, 0]
    ids = torch.zeros(1, 4, dtype=torch.int64, device=xl.device())
    with torch.autocast("xla", dtype=torch.bfloat16):
        assert dev["model"](input_ids=ids).logits.dtype == torch.bfloat16


def test_bfloat16_weights_train_and_save(tmp_path: Path):
    """A model in bfloat16 (as TPU users train) trains like eager bf16 and saves in bf16."""
    eager = train("llama", "cpu", steps=4, model=build("llama").to(torch.bfloat16))
    model = build("llama").to(device=xl.device(), dtype=torch.bfloat16)
    dev = train("llama", xl.device(), steps=4, model=model)
    torch.testing.assert_close(dev["losses"], eager["losses"], rtol=2e-2, atol=0)
    assert dev["compiles"][2:] == [0, 0]
    model.save_pretrained(tmp_path)
    back = type(model).from_pretrained(tmp_path, dtype=torch.bfloat16)
    for k, v in back.state_dict().items():
        assert v.dtype == torch.bfloat16 and torch.equal(v, model.state_dict()[k].cpu()), k
