"""More Hugging Face architectures, each for what its family adds to the ops a model runs:
DeBERTa-v2's relative-position gathers, Longformer's sliding chunks (``as_strided``),
Mixtral's expert routing, Swin's shifted windows (``roll``), wav2vec2's convolutional feature
extractor and CTC loss, Whisper's encoder-decoder on audio features.

Each is built from a tiny config (random weights, nothing downloaded, dropout 0), trained with
AdamW on the device and eagerly on CPU: the losses agree, compiling stops after the second step,
and the ops that run on the CPU are exactly the expected ones (data-dependent shapes).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
import transformers as T

import xlacache.lazy as xl
from xlacache.lazy import metrics

pytestmark = pytest.mark.slow
V, SEQ, B, STEPS = 96, 12, 2, 4
SMALL = {
    "vocab_size": V, "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
    "intermediate_size": 64,
}  # fmt: skip
NO_DROPOUT = {"hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0}


def _ids(g: torch.Generator, n: int = SEQ) -> torch.Tensor:
    return torch.randint(3, V, (B, n), generator=g)


def _lm(g: torch.Generator) -> dict:
    x = _ids(g)
    return {"input_ids": x, "labels": x.clone()}


MODELS: dict[str, tuple[Callable[[], Any], Callable[[torch.Generator], dict], set[str]]] = {
    "deberta_v2": (
        lambda: T.DebertaV2ForSequenceClassification(
            T.DebertaV2Config(
                **SMALL,
                **NO_DROPOUT,
                num_labels=3,
                relative_attention=True,
                position_buckets=8,
                pos_att_type=["p2c", "c2p"],
                max_position_embeddings=64,
            )  # fmt: skip
        ),
        lambda g: {"input_ids": _ids(g), "labels": torch.randint(0, 3, (B,), generator=g)},
        {"aten::nonzero"},  # its attention mask's positions: a data-dependent shape
    ),
    "longformer": (
        lambda: T.LongformerForMaskedLM(
            T.LongformerConfig(
                **SMALL, **NO_DROPOUT, attention_window=4, max_position_embeddings=64
            )
        ),
        _lm,
        set(),
    ),
    "mixtral": (
        lambda: T.MixtralForCausalLM(
            T.MixtralConfig(
                **SMALL,
                num_key_value_heads=2,
                max_position_embeddings=64,
                num_local_experts=4,
                num_experts_per_tok=2,
            )  # fmt: skip
        ),
        _lm,
        set(),
    ),
    "swin": (
        lambda: T.SwinForImageClassification(
            T.SwinConfig(
                **NO_DROPOUT,
                image_size=32,
                patch_size=4,
                embed_dim=16,
                depths=[1, 1],
                num_heads=[2, 2],
                window_size=4,
                num_labels=3,
                drop_path_rate=0.0,
            )  # fmt: skip
        ),
        lambda g: {
            "pixel_values": torch.randn(B, 3, 32, 32, generator=g),
            "labels": torch.randint(0, 3, (B,), generator=g),
        },
        set(),
    ),
    "wav2vec2": (
        lambda: T.Wav2Vec2ForCTC(
            T.Wav2Vec2Config(
                vocab_size=V,
                hidden_size=32,
                num_hidden_layers=1,
                num_attention_heads=4,
                intermediate_size=64,
                conv_dim=(16, 16),
                conv_stride=(5, 2),
                conv_kernel=(10, 3),
                num_feat_extract_layers=2,
                hidden_dropout=0.0,
                attention_dropout=0.0,
                activation_dropout=0.0,
                feat_proj_dropout=0.0,
                final_dropout=0.0,
                layerdrop=0.0,
                mask_time_prob=0.0,
                num_conv_pos_embeddings=4,
                num_conv_pos_embedding_groups=2,
            )  # fmt: skip
        ),
        lambda g: {
            "input_values": torch.randn(B, 400, generator=g),
            "labels": torch.randint(1, V, (B, 5), generator=g),
        },
        # the labels' mask selects the targets (a data-dependent shape); CTC has no lowering
        {"aten::masked_select", "aten::_ctc_loss", "aten::_ctc_loss_backward"},
    ),
    "whisper": (
        lambda: T.WhisperForConditionalGeneration(
            T.WhisperConfig(
                vocab_size=V,
                num_mel_bins=8,
                d_model=32,
                encoder_layers=1,
                decoder_layers=1,
                encoder_attention_heads=4,
                decoder_attention_heads=4,
                encoder_ffn_dim=64,
                decoder_ffn_dim=64,
                max_source_positions=16,
                max_target_positions=32,
                dropout=0.0,
                pad_token_id=0,
                decoder_start_token_id=1,
                bos_token_id=1,
                eos_token_id=2,
            )  # fmt: skip
        ),
        lambda g: {"input_features": torch.randn(B, 8, 32, generator=g), "labels": _ids(g, 6)},
        set(),
    ),
}


def _train(name: str, device: torch.device) -> tuple[list[float], list[int]]:
    build, batch, _ = MODELS[name]
    torch.manual_seed(0)
    model = build().train().to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    losses, compiles = [], []
    for step in range(STEPS):
        before = metrics.counter_value("UncachedCompile") or 0
        inputs = {k: v.to(device) for k, v in batch(torch.Generator().manual_seed(step)).items()}
        opt.zero_grad()
        loss = model(**inputs).loss
        loss.backward()
        opt.step()
        if device.type == "xla":
            xl.sync()
        losses.append(loss.item())
        compiles.append((metrics.counter_value("UncachedCompile") or 0) - before)
    return losses, compiles


@pytest.mark.parametrize("name", list(MODELS))
def test_architecture_trains_like_eager(name: str):
    want, _ = _train(name, torch.device("cpu"))
    metrics.clear_counters()
    xl.clear_compiled_cache()
    got, compiles = _train(name, xl.device())
    torch.testing.assert_close(got, want, rtol=1e-4, atol=0)
    assert compiles[2:] == [0] * (STEPS - 2) and compiles[0] > 0, compiles
    assert set(metrics.executed_fallback_ops()) == MODELS[name][2]
