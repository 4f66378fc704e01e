"""Packed sequences (``nn.utils.rnn.pack_padded_sequence``) on the device.

A ``PackedSequence`` keeps its ``batch_sizes`` on the CPU (its constructor refuses any other
device), so ``_pack_padded_sequence`` cannot run as a CPU fallback whose outputs all move to
the device. Here its ``batch_sizes`` come from eager's own kernel, given a placeholder of the
input's first two sizes (so its checks and errors are eager's; a length past the input, which
eager reads beyond its end, raises), and its data is one gather of
the device input at the time steps and batch rows they name. The backward scatters the gradient
back the same way. (``_pad_packed_sequence`` is composite: it reads ``batch_sizes`` on the CPU.)
Lengths given on the device (eager CUDA refuses them) are read to the host first.
"""

from __future__ import annotations

from typing import Any

import torch

from .dispatch import dispatch, special

aten = torch.ops.aten


def _positions(batch_sizes: torch.Tensor) -> list[torch.Tensor]:
    """The (time step, batch row) of each packed element, in packed order (CPU)."""
    sizes = batch_sizes.to(torch.int64)
    steps = torch.repeat_interleave(torch.arange(len(sizes)), sizes)
    rows = torch.cat([torch.arange(int(n)) for n in sizes]) if len(sizes) else sizes
    return [steps, rows]


@special(aten._pack_padded_sequence.default)
def _pack_padded_sequence(args: tuple, kwargs: dict) -> tuple[Any, torch.Tensor]:
    x, lengths, batch_first = (*args, *kwargs.values())[:3]
    lengths = lengths.cpu()  # lengths on the device are read to the host (one sync)
    if batch_first:
        x = dispatch(aten.transpose.int, (x, 0, 1), {})
    if len(lengths) and int(lengths.max()) > x.shape[0]:  # eager reads past its input
        raise RuntimeError(
            f"xlacache.lazy: pack_padded_sequence: a length of {int(lengths.max())} in a "
            f"sequence of {x.shape[0]} time steps"
        )
    probe = torch.empty(tuple(x.shape[:2]), dtype=torch.uint8)  # time-major, as x now is
    _, batch_sizes = aten._pack_padded_sequence.default(probe, lengths, False)  # eager checks
    data = dispatch(aten.index.Tensor, (x, _positions(batch_sizes)), {})
    return data, batch_sizes


@special(aten._pack_padded_sequence_backward.default)
def _pack_padded_sequence_backward(args: tuple, kwargs: dict) -> Any:
    grad, input_size, batch_sizes, batch_first = (*args, *kwargs.values())[:4]
    size = list(input_size)
    if batch_first:
        size[0], size[1] = size[1], size[0]
    zeros = dispatch(aten.zeros.default, (size,), {"dtype": grad.dtype, "device": grad.device})
    out = dispatch(aten.index_put.default, (zeros, _positions(batch_sizes), grad), {})
    return dispatch(aten.transpose.int, (out, 0, 1), {}) if batch_first else out
