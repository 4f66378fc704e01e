"""Tiny Hugging Face transformers models (random weights, nothing downloaded) and a training
loop that runs them eagerly on CPU or on the lazy device, shared by test_transformers and its
fresh-process child (_hf_child).

Every model keeps its default configuration (KV cache on where that is the default, default
attention implementation, activations, norms) except for its sizes (Mistral's sliding window is
shorter than the sequence, so that it differs from Llama) and dropout, which is 0 so that device
and CPU runs draw no random numbers and can be compared.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch
import transformers as T

import xlacache.lazy as xl

VOCAB = 96
SEQ = 12
BATCH = 2
IMAGE = 16
LABELS = 5
STEPS = 6


def _gpt2() -> Any:
    cfg = T.GPT2Config(
        vocab_size=VOCAB, n_positions=32, n_embd=32, n_layer=2, n_head=4,
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
    )  # fmt: skip
    return T.GPT2LMHeadModel(cfg)


def _llama() -> Any:
    cfg = T.LlamaConfig(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
    )  # fmt: skip
    return T.LlamaForCausalLM(cfg)


def _mistral() -> Any:
    cfg = T.MistralConfig(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
        sliding_window=SEQ - 4,  # shorter than the sequence: the sliding-window mask matters
    )  # fmt: skip
    return T.MistralForCausalLM(cfg)


def _t5() -> Any:
    cfg = T.T5Config(
        vocab_size=VOCAB, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4,
        decoder_start_token_id=0, dropout_rate=0.0,
    )  # fmt: skip
    return T.T5ForConditionalGeneration(cfg)


def _bert() -> Any:
    cfg = T.BertConfig(
        vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=64, max_position_embeddings=64,
        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
    )  # fmt: skip
    return T.BertForMaskedLM(cfg)


def _vit() -> Any:
    cfg = T.ViTConfig(
        image_size=IMAGE, patch_size=4, num_channels=3, hidden_size=32, num_hidden_layers=2,
        num_attention_heads=4, intermediate_size=64, num_labels=LABELS,
    )  # fmt: skip
    return T.ViTForImageClassification(cfg)


def _resnet() -> Any:
    cfg = T.ResNetConfig(
        num_channels=3, embedding_size=16, hidden_sizes=[16, 32], depths=[1, 1],
        layer_type="basic", num_labels=LABELS,
    )  # fmt: skip
    return T.ResNetForImageClassification(cfg)


MODELS: dict[str, Callable[[], Any]] = {
    "gpt2": _gpt2,
    "llama": _llama,
    "mistral": _mistral,
    "t5": _t5,
    "bert": _bert,
    "vit": _vit,
    "resnet": _resnet,
}


def build(name: str, seed: int = 0) -> Any:
    """The model ``name`` with the same random weights every time (for one ``seed``)."""
    torch.manual_seed(seed)
    return MODELS[name]().train()


def batch(name: str, step: int) -> dict[str, torch.Tensor]:
    """Step ``step``'s inputs and labels for ``name`` (CPU tensors, the same every run)."""
    g = torch.Generator().manual_seed(1000 + step)
    if name in ("vit", "resnet"):
        return {
            "pixel_values": torch.randn(BATCH, 3, IMAGE, IMAGE, generator=g),
            "labels": torch.randint(0, LABELS, (BATCH,), generator=g),
        }
    ids = torch.randint(0, VOCAB, (BATCH, SEQ), generator=g)
    if name == "t5":
        return {"input_ids": ids, "labels": torch.randint(0, VOCAB, (BATCH, 8), generator=g)}
    return {"input_ids": ids, "labels": ids.clone()}


def _compiles() -> int:
    return (xl.metrics.counter_value("UncachedCompile") or 0) + (
        xl.metrics.counter_value("PersistentCacheHit") or 0
    )


def train(
    name: str,
    device: str | torch.device,
    steps: int = STEPS,
    model: Any = None,
    autocast: torch.dtype | None = None,
) -> dict[str, Any]:
    """AdamW training of ``name`` on ``device`` (forward under ``torch.autocast(device.type,
    autocast)`` if given): losses, graphs compiled (or loaded) per step, seconds per step
    (wall, each step ending with its barrier on the device) and the model."""
    device = torch.device(device)
    lazy = device.type == "xla"
    model = (model if model is not None else build(name)).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    losses, compiles, seconds = [], [], []
    for step in range(steps):
        t0, c0 = time.perf_counter(), _compiles()
        inputs = {k: v.to(device) for k, v in batch(name, step).items()}
        opt.zero_grad()
        with torch.autocast(device.type, dtype=autocast, enabled=autocast is not None):
            loss = model(**inputs).loss
        loss.backward()
        opt.step()
        if lazy:
            xl.sync()
        losses.append(loss.item())
        seconds.append(time.perf_counter() - t0)
        compiles.append(_compiles() - c0)
    return {"losses": losses, "compiles": compiles, "seconds": seconds, "model": model}
