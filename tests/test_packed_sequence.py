"""Packed sequences against torch.nn.utils.rnn, and nn.RNN/LSTM/GRU on a packed batch: the
same packed data, batch sizes and indices, the same padded results, and the same outputs,
final states and gradients (parameters, input and initial states) in float64."""

from __future__ import annotations

import numpy as np
import pytest

import retrograd as rg
from retrograd import nn
from retrograd.errors import InvalidArgumentError
from retrograd.nn.utils import rnn as ours_rnn

torch = pytest.importorskip("torch")
theirs_rnn = torch.nn.utils.rnn
TOL = {"rtol": 1e-10, "atol": 1e-12}


def same(ours, theirs) -> None:
    if theirs is None:
        assert ours is None
        return
    np.testing.assert_allclose(np.asarray(ours.numpy()), theirs.detach().numpy(), **TOL)


def same_packed(ours, theirs) -> None:
    same(ours.data, theirs.data)
    assert ours.batch_sizes.tolist() == theirs.batch_sizes.tolist()
    assert ours.batch_sizes.dtype == "int64"
    for field in ("sorted_indices", "unsorted_indices"):
        mine, its = getattr(ours, field), getattr(theirs, field)
        assert (mine is None) == (its is None)
        if its is not None:
            assert mine.tolist() == its.tolist()


CASES = [
    ([5, 3, 3, 1], True),  # sorted, with a tie
    ([2, 5, 3, 5, 1], False),  # unsorted, ties
    ([4], True),
    ([1, 1, 1], False),
]


@pytest.mark.parametrize(("lengths", "sorted_"), CASES)
@pytest.mark.parametrize("batch_first", [False, True])
def test_pack_and_pad_match_torch(lengths, sorted_, batch_first):
    rng = np.random.default_rng(0)
    steps, batch = max(lengths) + 1, len(lengths)
    shape = (batch, steps, 2, 3) if batch_first else (steps, batch, 2, 3)
    x = rng.standard_normal(shape)
    tx = torch.tensor(x, requires_grad=True)
    ox = rg.tensor(x).require_grad()
    theirs = theirs_rnn.pack_padded_sequence(tx, lengths, batch_first, enforce_sorted=sorted_)
    ours = ours_rnn.pack_padded_sequence(ox, lengths, batch_first, enforce_sorted=sorted_)
    same_packed(ours, theirs)
    kwargs = {"batch_first": batch_first, "padding_value": -1.5, "total_length": steps + 2}
    t_padded, t_lengths = theirs_rnn.pad_packed_sequence(theirs, **kwargs)
    o_padded, o_lengths = ours_rnn.pad_packed_sequence(ours, **kwargs)
    same(o_padded, t_padded)
    assert o_lengths.tolist() == t_lengths.tolist() and o_lengths.dtype == "int64"
    seed = rng.standard_normal(tuple(t_padded.shape))
    (t_padded * torch.tensor(seed)).sum().backward()
    grads = (o_padded * rg.tensor(seed)).sum().backward()
    same(ox.grad(grads), tx.grad)  # zero where padded, the seed elsewhere


def test_pack_sequence_unpack_unpad_invert_match_torch():
    rng = np.random.default_rng(1)
    arrays = [rng.standard_normal((n, 2)) for n in (2, 4, 1)]
    theirs = theirs_rnn.pack_sequence([torch.tensor(a) for a in arrays], enforce_sorted=False)
    ours = ours_rnn.pack_sequence([rg.tensor(a) for a in arrays], enforce_sorted=False)
    same_packed(ours, theirs)
    for mine, its in zip(ours_rnn.unpack_sequence(ours), theirs_rnn.unpack_sequence(theirs)):
        same(mine, its)
    padded = rng.standard_normal((4, 3, 2))
    lengths = [4, 2, 3]
    for mine, its in zip(
        ours_rnn.unpad_sequence(rg.tensor(padded), rg.tensor(lengths)),
        theirs_rnn.unpad_sequence(torch.tensor(padded), torch.tensor(lengths)),
    ):
        same(mine, its)
    permutation = [3, 0, 2, 4, 1]
    assert (
        ours_rnn.invert_permutation(rg.tensor(permutation)).tolist()
        == theirs_rnn.invert_permutation(torch.tensor(permutation)).tolist()
    )
    assert ours_rnn.invert_permutation(None) is None
    with pytest.raises(InvalidArgumentError, match="enforce_sorted"):
        ours_rnn.pack_sequence([rg.tensor(a) for a in arrays])


def test_packing_errors():
    x = rg.zeros((3, 2, 1))
    with pytest.raises(InvalidArgumentError, match="greater than 0"):
        ours_rnn.pack_padded_sequence(x, [3, 0])
    with pytest.raises(InvalidArgumentError, match="sorted in decreasing order"):
        ours_rnn.pack_padded_sequence(x, [2, 3])
    with pytest.raises(rg.ShapeError, match="one per length"):
        ours_rnn.pack_padded_sequence(x, [3, 2, 1])
    with pytest.raises(InvalidArgumentError, match="total_length"):
        ours_rnn.pad_packed_sequence(ours_rnn.pack_padded_sequence(x, [3, 2]), total_length=2)


MODULES = {
    "rnn-tanh": lambda m: m.RNN(3, 4, num_layers=2),
    "rnn-relu-bidirectional": lambda m: m.RNN(3, 4, nonlinearity="relu", bidirectional=True),
    "lstm": lambda m: m.LSTM(3, 4),
    "lstm-2-layer-bidirectional": lambda m: m.LSTM(3, 4, num_layers=2, bidirectional=True),
    "gru-bidirectional-batch-first": lambda m: m.GRU(3, 4, bidirectional=True, batch_first=True),
    "gru-2-layer-no-bias": lambda m: m.GRU(3, 4, num_layers=2, bias=False),
}


@pytest.mark.parametrize("name", sorted(MODULES))
@pytest.mark.parametrize("sorted_", [True, False])
@pytest.mark.parametrize("with_hx", [False, True])
def test_recurrent_modules_on_packed_input_match_torch(name, sorted_, with_hx):
    torch.manual_seed(0)
    theirs = MODULES[name](torch.nn).double()
    ours = MODULES[name](nn).double()
    ours.load_state_dict({k: v.detach().numpy() for k, v in theirs.state_dict().items()})
    lstm = isinstance(theirs, torch.nn.LSTM)
    lengths = [6, 4, 4, 1] if sorted_ else [3, 6, 1, 4, 6]
    batch, steps = len(lengths), max(lengths)
    rng = np.random.default_rng(2)
    batch_first = theirs.batch_first
    x = rng.standard_normal((batch, steps, 3) if batch_first else (steps, batch, 3))
    tx, ox = torch.tensor(x, requires_grad=True), rg.tensor(x).require_grad()
    t_hx = o_hx = None
    if with_hx:
        layers = theirs.num_layers * (2 if theirs.bidirectional else 1)
        arrays = [rng.standard_normal((layers, batch, 4)) for _ in range(2 if lstm else 1)]
        t_states = [torch.tensor(a, requires_grad=True) for a in arrays]
        o_states = [rg.tensor(a).require_grad() for a in arrays]
        t_hx = tuple(t_states) if lstm else t_states[0]
        o_hx = tuple(o_states) if lstm else o_states[0]
    t_packed = theirs_rnn.pack_padded_sequence(tx, lengths, batch_first, enforce_sorted=sorted_)
    o_packed = ours_rnn.pack_padded_sequence(ox, lengths, batch_first, enforce_sorted=sorted_)
    t_out, t_final = theirs(t_packed, t_hx)
    o_out, o_final = ours(o_packed, o_hx)
    assert isinstance(o_out, ours_rnn.PackedSequence)
    same_packed(o_out, t_out)
    t_finals = t_final if lstm else (t_final,)
    o_finals = o_final if lstm else (o_final,)
    for mine, its in zip(o_finals, t_finals):
        same(mine, its)
    seeds = [rng.standard_normal(tuple(t.shape)) for t in (t_out.data, *t_finals)]
    t_loss = sum((t * torch.tensor(s)).sum() for t, s in zip((t_out.data, *t_finals), seeds))
    t_loss.backward()
    o_loss = sum((t * rg.tensor(s)).sum() for t, s in zip((o_out.data, *o_finals), seeds))
    grads = o_loss.backward()
    own = dict(ours.named_parameters())
    for key, p in theirs.named_parameters():
        same(own[key].grad(grads), p.grad)
    same(ox.grad(grads), tx.grad)
    if with_hx:
        for mine, its in zip(o_states, t_states):
            same(mine.grad(grads), its.grad)
