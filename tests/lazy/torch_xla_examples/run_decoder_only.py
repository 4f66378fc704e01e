"""Runs torch_xla's ``train_decoder_only_base.py`` (imports changed only) at test size.

Written for xlacache. As torch_xla's own variants of that example do, it scales the run down
from the outside: a small ``DecoderOnlyConfig``, a short sequence and ``num_steps`` steps. It
prints the example's own output, then one JSON line with the counters the test checks.
"""

from __future__ import annotations

import dataclasses
import json
import sys

import decoder_only_model
import torch
import train_decoder_only_base as example

import xlacache.lazy.compat.debug.metrics as met
import xlacache.lazy.compat.distributed.parallel_loader as pl
import xlacache.lazy.compat.utils.utils as xu


@dataclasses.dataclass
class TinyConfig(decoder_only_model.DecoderOnlyConfig):
    hidden_size: int = 64
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    intermediate_size = 128
    vocab_size = 256


class TinyRun(example.TrainDecoderOnlyBase):
    def __init__(self, num_steps: int) -> None:
        super().__init__()
        self.num_steps = num_steps
        self.seq_len = 32
        data = torch.zeros(self.batch_size, self.seq_len, dtype=torch.int64)
        loader = xu.SampleGenerator(data=(data, data), sample_count=num_steps)
        self.train_device_loader = pl.MpDeviceLoader(loader, self.device)


if __name__ == "__main__":
    example.DecoderOnlyConfig = TinyConfig
    run = TinyRun(int(sys.argv[1]) if len(sys.argv) > 1 else 12)
    run.start_training()
    names = ("UncachedCompile", "CachedCompile", "ExecuteComputation", "MarkStep")
    counters = {n: met.counter_value(n) or 0 for n in names}
    print(json.dumps({"counters": counters, "fallbacks": met.executed_fallback_ops()}))
