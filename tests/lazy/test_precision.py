"""float32 as PyTorch defines it: lowered dots and convolutions carry the precision of
PyTorch's settings, on the lazy path and the Dynamo path, and graph keys differ by it.

XLA:CPU computes float32 fully whatever the precision, so these tests read the lowered
module (what XLA:GPU would get) rather than numbers.
"""

import re

import pytest
import torch

import xlacache.lazy as xl
from xlacache.lazy.dynamo import xlacache_backend
from xlacache.lazy.lowering import precision
from xlacache.lazy.record import value

FLAGS = [
    (b, o)
    for b in ("generic", "cuda", "mkldnn")
    for o in ("all", "matmul", "conv", "rnn")
    if not (b == "generic" and o != "all")
]


@pytest.fixture(autouse=True)
def settings_restored():
    get, put = torch._C._get_fp32_precision_getter, torch._C._set_fp32_precision_setter
    saved = {f: get(*f) for f in FLAGS}
    yield
    for f, v in saved.items():
        put(*f, v)


def _precisions(text: str, op: str) -> list[str]:
    """The precision config of each ``op`` (dot_general, convolution) in a module."""
    found = []
    for line in text.splitlines():
        if f"stablehlo.{op}" in line:
            m = re.search(r"precision = \[(\w+), \w+\]", line) or re.search(
                r"precision_config = \[#stablehlo<precision (\w+)>", line
            )
            algo = "bf16" if "lhs_precision_type = bf16" in line else ""
            found.append((m.group(1) if m else "none") + (f"+{algo}" if algo else ""))
    return found


MATMUL_SETTINGS = [("highest", "HIGHEST"), ("high", "HIGH"), ("medium", "DEFAULT+bf16")]


@pytest.mark.parametrize(("setting", "expected"), MATMUL_SETTINGS)
def test_a_float32_matmul_lowers_with_the_setting(lowered, setting, expected):
    dev = xl.device()
    torch.set_float32_matmul_precision(setting)
    a = torch.randn(8, 8)
    out = (a.to(dev) @ a.to(dev).t()).cpu()
    assert torch.allclose(out, a @ a.t(), atol=1e-4)
    assert set(_precisions(lowered[-1], "dot_general")) == {expected}


def test_the_new_api_is_honoured_and_a_linear_layer_and_its_gradient_follow_it(lowered):
    dev = xl.device()
    torch.backends.cuda.matmul.fp32_precision = "tf32"
    assert precision.setting(precision.MATMUL) == "high"
    layer = torch.nn.Linear(8, 4).to(dev)
    layer(torch.randn(3, 8, device=dev)).sum().backward()
    xl.sync()
    dots = [p for t in lowered for p in _precisions(t, "dot_general")]
    assert dots and set(dots) == {"HIGH"}
    torch.backends.cuda.matmul.fp32_precision = "ieee"
    assert precision.setting(precision.MATMUL) == "highest"


def test_bfloat16_and_float64_products_keep_their_lowering(lowered):
    dev = xl.device()
    torch.set_float32_matmul_precision("high")
    for dtype in (torch.bfloat16, torch.float64):
        a = torch.randn(4, 4, device=dev, dtype=dtype)
        xl.sync()
        (a @ a).cpu()
        assert set(_precisions(lowered[-1], "dot_general")) == {"DEFAULT"}, dtype
        node = value(a @ a)[0]
        assert "fp32_precision" not in str(node.attrs)


@pytest.mark.parametrize(
    ("flag", "expected"), [(True, "HIGH"), (False, "HIGHEST")], ids=["tf32", "ieee"]
)
def test_a_convolution_follows_cudnn_allow_tf32(lowered, flag, expected):
    dev = xl.device()
    conv = torch.nn.Conv2d(2, 3, 3).to(dev)
    x = torch.randn(1, 2, 6, 6, device=dev, requires_grad=True)
    with torch.backends.cudnn.flags(allow_tf32=flag):  # PyTorch's default: True (TF32)
        conv(x).sum().backward()
        xl.sync()
    convs = [p for t in lowered for p in _precisions(t, "convolution")]
    assert convs and set(convs) == {expected}


def test_graph_keys_differ_by_precision():
    dev = xl.device()
    a = torch.randn(4, 4, device=dev)
    digests = {}
    for setting in ("highest", "high", "medium"):
        torch.set_float32_matmul_precision(setting)
        digests[setting] = value(a @ a)[0].digest
    assert len(set(digests.values())) == 3
    torch.set_float32_matmul_precision("highest")
    assert value(a @ a)[0].digest == digests["highest"]  # and equal when the setting is
    xl.sync()


@pytest.mark.slow
def test_the_dynamo_path_follows_the_setting_and_never_reuses_across_it(lowered):
    dev = xl.device()
    torch._dynamo.reset()
    fn = torch.compile(lambda a, b: torch.relu(a @ b), backend=xlacache_backend)
    a, b = torch.randn(8, 8, device=dev), torch.randn(8, 8, device=dev)
    xl.sync()
    seen = {}
    expected = dict(MATMUL_SETTINGS)
    # Dynamo itself recompiles between "highest" and "high" (its guard on TF32), not between
    # "high" and "medium": the executables must tell them apart
    for setting in ("highest", "high", "medium", "high", "highest"):
        torch.set_float32_matmul_precision(setting)
        before = len(lowered)
        out = fn(a, b).cpu()
        assert torch.allclose(out, torch.relu(a.cpu() @ b.cpu()), atol=1e-4)
        compiled = lowered[before:]
        if setting in seen:
            assert not compiled, "a graph compiled under another setting was lowered again"
        else:
            assert [set(_precisions(t, "dot_general")) for t in compiled] == [{expected[setting]}]
            seen[setting] = True
    torch._dynamo.reset()
