"""Packed sequences on the device: ``pack_padded_sequence`` / ``pad_packed_sequence`` around an
RNN, trained, equal to eager (outputs, final states, gradients), and eager's errors."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence, pad_sequence

import xlacache.lazy as xl

dev = xl.device()
LENGTHS = [4, 2, 5, 1]


def _run(d, rnn_type, batch_first, enforce_sorted, steps=2, lengths_on=None):
    torch.manual_seed(0)
    rnn = rnn_type(3, 5, num_layers=2, batch_first=batch_first).to(d)
    opt = torch.optim.SGD(rnn.parameters(), lr=0.1)
    lengths = sorted(LENGTHS, reverse=True) if enforce_sorted else LENGTHS
    seqs = [torch.randn(n, 3) for n in lengths]
    x = pad_sequence(seqs, batch_first=batch_first).to(d)
    out = []
    for _ in range(steps):
        lens_in = torch.tensor(lengths, device=lengths_on)
        packed = pack_padded_sequence(x, lens_in, batch_first, enforce_sorted)
        assert packed.batch_sizes.device.type == "cpu"
        y, state = rnn(packed)
        padded, lens = pad_packed_sequence(y, batch_first=batch_first, padding_value=-1.0)
        loss = padded.square().sum() + (state[0] if rnn_type is nn.LSTM else state).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
        out += [padded.detach().cpu(), lens, rnn.weight_ih_l0.grad.cpu(), loss.detach().cpu()]
    return out


@pytest.mark.parametrize(
    "rnn_type, batch_first, enforce_sorted",
    [(nn.LSTM, True, False), (nn.GRU, False, True), (nn.LSTM, False, True)],
)
def test_an_rnn_over_packed_sequences_trains_as_in_eager(rnn_type, batch_first, enforce_sorted):
    eager = _run("cpu", rnn_type, batch_first, enforce_sorted)
    got = _run(dev, rnn_type, batch_first, enforce_sorted)
    for g, e in zip(got, eager, strict=True):
        if e.is_floating_point():
            torch.testing.assert_close(g, e, rtol=1e-5, atol=1e-6)
        else:
            assert torch.equal(g, e)


def test_lengths_on_the_device_are_read_to_the_host():
    eager = _run("cpu", nn.LSTM, True, False, steps=1)
    got = _run(dev, nn.LSTM, True, False, steps=1, lengths_on=dev)
    for g, e in zip(got, eager, strict=True):
        torch.testing.assert_close(g, e, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("lengths, enforce_sorted", [([2, 3], True), ([2, 0], False)])
def test_bad_lengths_raise_eagers_error(lengths, enforce_sorted):
    x = torch.randn(5, 2, 3)
    with pytest.raises(RuntimeError) as eager:
        pack_padded_sequence(x, torch.tensor(lengths), enforce_sorted=enforce_sorted)
    with pytest.raises(RuntimeError) as got:
        pack_padded_sequence(x.to(dev), torch.tensor(lengths), enforce_sorted=enforce_sorted)
    assert str(got.value) == str(eager.value)


def test_a_length_past_the_input_raises_where_eager_reads_beyond_it():
    with pytest.raises(RuntimeError, match="a length of 6 in a sequence of 5 time steps"):
        pack_padded_sequence(torch.randn(5, 2, 3).to(dev), torch.tensor([6, 1]))
