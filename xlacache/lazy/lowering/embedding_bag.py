"""``nn.EmbeddingBag`` / ``F.embedding_bag``: ``_embedding_bag`` (and its forward-only twin),
its backward ops, as segment reductions.

Bag ``b`` holds the indices from ``offsets[b]`` to the next offset (the last bag to the end of
the input, or to the last offset with ``include_last_offset``); ``padding_idx`` entries count
in no bag. An empty bag is zero in every mode. ``max`` keeps eager's order: the first entry
of a bag starts its maximum and a later entry replaces it only where it is greater (a NaN
later in the bag is passed over, a NaN first stays). ``scale_grad_by_freq`` divides each
entry's gradient by its index's count in the input, as CUDA's kernel and ``F.embedding`` do
(eager CPU's kernel for bags looks the count up at another entry's position). Eager's errors
on values are device checks:
an index out of range (``INDEX``), offsets that do not start at 0, decrease, or pass the
input's end, or with ``include_last_offset`` stop before it (``BAG_OFFSETS``).

The auxiliary outputs have the shapes of torch's meta kernel for a device (CUDA's layout) and
what this module's backward ops read: ``offset2bag`` (each entry's bag; the number of bags for
an entry past the last bag), ``bag_size`` (entries counted per bag), ``max_indices`` (``max``:
the row each maximum came from; the number of weights for an empty bag).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import torch

from .checks import BAG_OFFSETS, check, checked, in_range
from .registry import argument_check, reg, upcast

aten = torch.ops.aten
SUM, MEAN, MAX = 0, 1, 2


def _bags(indices: Any, offsets: Any, include_last_offset: bool, padding_idx: int) -> tuple:
    """(number of bags, each entry's bag, which entries count)."""
    n = indices.shape[0]
    offsets = offsets.astype(jnp.int64)
    bags = offsets.shape[0] - 1 if include_last_offset else offsets.shape[0]
    check(BAG_OFFSETS, offsets[:1] != 0)
    check(BAG_OFFSETS, offsets[1:] < offsets[:-1])
    check(BAG_OFFSETS, offsets > n)
    if include_last_offset:  # eager's sum stops at the last offset, its mean and max do not
        check(BAG_OFFSETS, offsets[-1:] != n)
    pos = jnp.arange(n, dtype=jnp.int64)
    bag = jnp.searchsorted(offsets[:bags], pos, side="right") - 1  # the last of equal starts
    end = offsets[bags] if include_last_offset else n  # where the last bag ends
    counts = (pos < end) & (bag >= 0)
    bag = jnp.where(counts, bag, bags)
    if padding_idx >= 0:
        counts = counts & (indices != padding_idx)
    return bags, bag, counts


@reg(aten._embedding_bag.default, aten._embedding_bag_forward_only.default)
def _embedding_bag(
    weight: Any,
    indices: Any,
    offsets: Any,
    scale_grad_by_freq: bool = False,
    mode: int = SUM,
    sparse: bool = False,
    per_sample_weights: Any = None,
    include_last_offset: bool = False,
    padding_idx: int = -1,
) -> tuple[Any, Any, Any, Any]:
    in_range(indices, weight.shape[0])
    bags, bag, counts = _bags(indices, offsets, include_last_offset, padding_idx)
    rows = upcast(jnp.take(weight, indices, axis=0, mode="clip"))  # bfloat16 sums in float32
    math = rows.dtype
    if per_sample_weights is not None:
        rows = rows * per_sample_weights.astype(math)[:, None]
    size = jax.ops.segment_sum(counts.astype(jnp.int64), bag, bags + 1)[:bags]
    idx_dtype = indices.dtype
    bag_size = jnp.zeros(offsets.shape[0], idx_dtype).at[:bags].set(size.astype(idx_dtype))
    no_max = jnp.zeros((0,), idx_dtype)
    if mode == MAX:
        out, max_indices = _bag_max(rows, indices, bag, counts, bags, weight.shape[0])
        return out.astype(weight.dtype), bag.astype(idx_dtype), bag_size, max_indices
    total = jax.ops.segment_sum(jnp.where(counts[:, None], rows, 0), bag, bags + 1)[:bags]
    if mode == MEAN:
        total = total / jnp.maximum(size, 1).astype(math)[:, None]
    return total.astype(weight.dtype), bag.astype(idx_dtype), bag_size, no_max


def _bag_max(rows: Any, indices: Any, bag: Any, counts: Any, bags: int, num_weights: int):
    """Each bag's maximum per column in eager's order, and the row each came from."""
    n, d = rows.shape
    pos = jnp.arange(n)
    first = jax.ops.segment_min(jnp.where(counts, pos, n), bag, bags + 1)[:bags]
    empty = (first >= n)[:, None]
    start = jnp.take(rows, first, axis=0, mode="fill", fill_value=0)
    numbers = jnp.where(counts[:, None] & ~jnp.isnan(rows), rows, -jnp.inf)
    best = jax.ops.segment_max(numbers, bag, bags + 1)[:bags]
    out = jnp.where(empty, 0, jnp.maximum(start, best))  # a NaN start stays
    # the first entry with the maximum (eager replaces only where strictly greater)
    mine = jnp.concatenate([out, jnp.zeros((1, d), out.dtype)])[bag]
    is_first = pos == jnp.concatenate([first, jnp.full((1,), n, first.dtype)])[bag]
    hit = counts[:, None] & ((rows == mine) | (is_first[:, None] & jnp.isnan(rows)))
    which = jax.ops.segment_min(jnp.where(hit, pos[:, None], n), bag, bags + 1)[:bags]
    source = jnp.take(indices.astype(jnp.int64), which, mode="fill", fill_value=num_weights)
    return out, jnp.where(empty, num_weights, source).astype(indices.dtype)


@reg(aten._embedding_bag_dense_backward.default)
def _embedding_bag_dense_backward(
    grad: Any,
    indices: Any,
    offset2bag: Any,
    bag_size: Any,
    maximum_indices: Any,
    num_weights: int,
    scale_grad_by_freq: bool,
    mode: int,
    per_sample_weights: Any = None,
    padding_idx: int = -1,
) -> Any:
    """The weight's gradient from the forward's auxiliary outputs."""
    d = grad.shape[1]
    g = upcast(grad)
    math = g.dtype
    bags = g.shape[0]
    if mode == MAX:
        cols = jnp.broadcast_to(jnp.arange(d), maximum_indices.shape)
        out = jnp.zeros((num_weights, d), math).at[maximum_indices, cols].add(g, mode="drop")
        return out.astype(grad.dtype)
    counts = offset2bag < bags
    if padding_idx >= 0:
        counts = counts & (indices != padding_idx)
    rows = jnp.take(g, offset2bag, axis=0, mode="fill", fill_value=0)
    if mode == MEAN:
        size = jnp.take(bag_size, offset2bag, mode="fill", fill_value=1)
        rows = rows / jnp.maximum(size, 1).astype(math)[:, None]
    if per_sample_weights is not None:
        rows = rows * per_sample_weights.astype(math)[:, None]
    if scale_grad_by_freq:
        freq = jnp.zeros((num_weights,), math).at[indices].add(1)
        rows = rows / freq[indices][:, None]
    rows = jnp.where(counts[:, None], rows, 0)
    return jnp.zeros((num_weights, d), math).at[indices].add(rows).astype(grad.dtype)


@argument_check(aten._embedding_bag_backward.default)
def _dense_only(*args: Any, **kwargs: Any) -> None:
    sparse = kwargs["sparse"] if "sparse" in kwargs else args[9]
    if sparse:  # eager's gradient is a sparse tensor, which XLA cannot hold
        raise RuntimeError(
            "xlacache.lazy: nn.EmbeddingBag(sparse=True) makes a sparse gradient, which the "
            "xla device cannot hold (XLA arrays are dense, as in torch_xla); use sparse=False"
        )


@reg(aten._embedding_bag_backward.default)
def _embedding_bag_backward(
    grad: Any,
    indices: Any,
    offsets: Any,
    offset2bag: Any,
    bag_size: Any,
    maximum_indices: Any,
    num_weights: int,
    scale_grad_by_freq: bool,
    mode: int,
    sparse: bool,
    per_sample_weights: Any = None,
    padding_idx: int = -1,
) -> Any:
    """Dense only (``_dense_only``): the dense backward."""
    return _embedding_bag_dense_backward(
        grad, indices, offset2bag, bag_size, maximum_indices, num_weights,
        scale_grad_by_freq, mode, per_sample_weights, padding_idx,
    )  # fmt: skip


@reg(aten._embedding_bag_per_sample_weights_backward.default)
def _per_sample_weights_backward(
    grad: Any,
    weight: Any,
    indices: Any,
    offsets: Any,
    offset2bag: Any,
    mode: int,
    padding_idx: int = -1,
) -> Any:
    """Each entry's weight's gradient: its row against its bag's gradient (zero for an entry
    in no bag or at ``padding_idx``)."""
    g = jnp.take(upcast(grad), offset2bag, axis=0, mode="fill", fill_value=0)
    rows = jnp.take(weight, indices, axis=0, mode="clip").astype(g.dtype)
    out = (rows * g).sum(-1)
    if padding_idx >= 0:
        out = jnp.where(indices == padding_idx, 0, out)
    return out.astype(grad.dtype)


checked(aten._embedding_bag.default, aten._embedding_bag_forward_only.default)
