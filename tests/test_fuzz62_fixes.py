"""Round 62's defects in recurrent layers and packed sequences, each against torch.

- an input of another dtype than a recurrent layer's weights (an int input too) raised a
  ``TypeError`` only, where torch raises a ``ValueError``;
- a packed batch given an ``hx`` of another batch size ran on a slice of it;
- ``pad_packed_sequence(..., batch_first=True)`` of a batch packed unsorted was a
  transposed view where torch's is a new contiguous tensor (``view(-1, H)`` of it failed);
- ``PackedSequence(data, batch_sizes, sorted_indices)`` left ``unsorted_indices`` ``None``
  (unpacking kept the sorted order) where torch's inverts ``sorted_indices``, and refused
  torch's ``PackedSequence((data, batch_sizes))``; ``.to()``/``.float()``/... of a batch
  already so returned a new one where torch's returns it;
- ``unpad_sequence`` returned views into the padded batch (a write into one wrote the batch)
  where torch's are copies, and left the batch as it was without ``batch_first`` where torch
  transposes it in place to ``[B, T, *]``.
"""

from __future__ import annotations

import numpy as np
import pytest

import retrograd as rg

torch = pytest.importorskip("torch")


# -- the input's dtype against the weights' -------------------------------------------------
@pytest.mark.parametrize("layer", ["RNN", "LSTM", "GRU"])
@pytest.mark.parametrize(("weights", "given"), [("float32", "float64"), ("float64", "float32"),
                                                ("float32", "int64")])  # fmt: skip
def test_an_input_of_another_dtype_than_the_weights_is_a_value_error(layer, weights, given):
    x = np.ones((3, 2, 4))
    with pytest.raises(ValueError, match="does not match weight dtype"):
        getattr(torch.nn, layer)(4, 5, dtype=getattr(torch, weights))(
            torch.tensor(x, dtype=getattr(torch, given))
        )
    module = getattr(rg.nn, layer)(4, 5, dtype=getattr(rg, weights))
    with pytest.raises(rg.DTypeError, match="does not match weight dtype") as caught:
        module(rg.tensor(x, dtype=getattr(rg, given)))
    assert isinstance(caught.value, ValueError)
    assert layer in str(caught.value) and "[3, 2, 4]" in str(caught.value)


def test_a_packed_batch_of_another_dtype_than_the_weights_is_a_value_error():
    for lib in (torch, rg):
        packed = lib.nn.utils.rnn.pack_sequence([lib.ones(3, 2), lib.ones(1, 2)])
        with pytest.raises(ValueError, match="does not match weight dtype"):
            lib.nn.GRU(2, 3, dtype=lib.float64)(packed)


def test_an_hx_of_another_dtype_is_a_runtime_error():
    """torch's ``RuntimeError`` there; retrograd's ``DTypeError`` that is one too."""
    with pytest.raises(RuntimeError):
        torch.nn.GRU(2, 3)(torch.ones(4, 1, 2), torch.zeros(1, 1, 3, dtype=torch.float64))
    with pytest.raises(rg.DTypeError) as caught:
        rg.nn.GRU(2, 3)(rg.ones(4, 1, 2), rg.zeros(1, 1, 3, dtype=rg.float64))
    assert isinstance(caught.value, RuntimeError)


# -- hx of a packed batch --------------------------------------------------------------------
@pytest.mark.parametrize("batch", [1, 3])
@pytest.mark.parametrize("layer", ["RNN", "GRU"])
def test_a_packed_batch_refuses_an_hx_of_another_batch(layer, batch):
    """Two sequences packed sorted: an ``hx`` of one or three is refused, as torch's
    "Expected hidden size (1, 2, 3)" (with a packed batch of one length group too)."""
    x = (np.arange(10.0).reshape(5, 2, 1) / 10).astype(np.float32)
    for lib, error in ((torch, RuntimeError), (rg, rg.ShapeError)):
        packed = lib.nn.utils.rnn.pack_padded_sequence(lib.tensor(x), [5, 3])
        module = getattr(lib.nn, layer)(1, 3)
        with pytest.raises(error, match=r"size|shape"):
            module(packed, lib.zeros(1, batch, 3))
        same_length = lib.nn.utils.rnn.pack_padded_sequence(lib.tensor(x), [5, 5])
        with pytest.raises(error, match=r"size|shape"):
            module(same_length, lib.zeros(1, batch, 3))
        with pytest.raises(error, match=r"size|shape"):  # an unbatched hx
            module(packed, lib.zeros(1, 3))


def test_a_packed_batch_takes_an_hx_of_its_batch():
    x = (np.arange(10.0).reshape(5, 2, 1) / 10).astype(np.float32)
    h0 = np.array([[[0.1, -0.2, 0.3], [0.0, 0.5, -0.5]]])
    results = []
    for lib in (torch, rg):
        lib.manual_seed(0)
        module = lib.nn.RNN(1, 3)
        with lib.no_grad():
            for p in module.parameters():
                p.copy_(lib.linspace(-0.5, 0.5, p.numel()).reshape(p.shape))
        packed = lib.nn.utils.rnn.pack_padded_sequence(lib.tensor(x), [5, 3])
        _, h_n = module(packed, lib.tensor(h0, dtype=lib.float32))
        results.append(h_n.detach().numpy())
    np.testing.assert_allclose(results[1], results[0], rtol=1e-6, atol=1e-7)


# -- unpad_sequence ------------------------------------------------------------------------
def test_unpad_sequence_returns_copies():
    for lib in (torch, rg):
        padded = lib.arange(6.0).reshape(2, 3)
        pieces = lib.nn.utils.rnn.unpad_sequence(padded, lib.tensor([3, 1]), batch_first=True)
        pieces[0].zero_()
        pieces[1].fill_(-1.0)
        assert padded.tolist() == [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]], lib.__name__
        assert [p.is_contiguous() for p in pieces] == [True, True]


def test_unpad_sequence_transposes_a_time_major_batch_in_place():
    shapes, pieces = [], []
    for lib in (torch, rg):
        padded = lib.arange(12.0).reshape(3, 2, 2)  # [T=3, B=2, 2]
        out = lib.nn.utils.rnn.unpad_sequence(padded, lib.tensor([3, 2]))
        shapes.append((tuple(padded.shape), padded.stride()))
        pieces.append([(p.tolist(), p.stride()) for p in out])
    assert shapes[1] == shapes[0] == ((2, 3, 2), (2, 4, 1))
    assert pieces[1] == pieces[0]


def test_unpad_sequence_of_a_computed_batch_passes_gradients():
    grads = []
    for lib in (torch, rg):
        x = lib.tensor(np.arange(6.0).reshape(3, 2) / 4, requires_grad=True)
        padded = (x * 2).unsqueeze(-1)  # [T=3, B=2, 1]
        a, b = lib.nn.utils.rnn.unpad_sequence(padded, lib.tensor([3, 2]))
        (g,) = lib.autograd.grad((a * 3).sum() + (b**2).sum(), [x])
        grads.append(g.numpy())
    np.testing.assert_array_equal(grads[1], grads[0])


def test_unpad_sequence_refuses_a_leaf_that_requires_grad_time_major():
    """torch's in-place transpose refuses such a leaf; batch first, nothing moves."""
    for lib in (torch, rg):
        leaf = lib.ones(3, 2, 1, requires_grad=True)
        with pytest.raises(RuntimeError, match="leaf"):
            lib.nn.utils.rnn.unpad_sequence(leaf, lib.tensor([3, 2]))
        assert tuple(leaf.shape) == (3, 2, 1)
        pieces = lib.nn.utils.rnn.unpad_sequence(leaf, lib.tensor([1, 2, 1]), batch_first=True)
        assert [tuple(p.shape) for p in pieces] == [(1, 1), (2, 1), (1, 1)]


# -- pad_packed_sequence of a batch packed unsorted ------------------------------------------
@pytest.mark.parametrize("batch_first", [True, False])
@pytest.mark.parametrize("enforce_sorted", [True, False])
def test_pad_packed_sequence_lays_out_its_result_as_torch(batch_first, enforce_sorted):
    lengths = [3, 2] if enforce_sorted else [2, 3]
    layouts = []
    for lib in (torch, rg):
        padded = lib.arange(12.0).reshape(3, 2, 2)
        packed = lib.nn.utils.rnn.pack_padded_sequence(
            padded, lengths, enforce_sorted=enforce_sorted
        )
        out, _ = lib.nn.utils.rnn.pad_packed_sequence(packed, batch_first=batch_first)
        layouts.append((tuple(out.shape), out.stride(), out.is_contiguous(), out.tolist()))
    assert layouts[1] == layouts[0]


def test_view_of_an_unsorted_batch_unpacked_batch_first():
    """The seq2seq encoder's ``output.view(-1, H)`` after unpacking batch first."""
    for lib in (torch, rg):
        packed = lib.nn.utils.rnn.pack_sequence([lib.ones(2, 3), lib.ones(4, 3)], False)
        out, _ = lib.nn.LSTM(3, 5, batch_first=True)(packed)
        padded, _ = lib.nn.utils.rnn.pad_packed_sequence(out, batch_first=True)
        assert tuple(padded.view(-1, 5).shape) == (8, 5)


# -- PackedSequence made by hand ----------------------------------------------------------
def test_packed_sequence_made_with_sorted_indices_only_inverts_them():
    results = []
    for lib in (torch, rg):
        packed = lib.nn.utils.rnn.pack_sequence([lib.ones(1, 2), lib.full((3, 2), 2.0)], False)
        made = lib.nn.utils.rnn.PackedSequence(
            packed.data * 1, packed.batch_sizes, packed.sorted_indices
        )
        assert made.unsorted_indices.tolist() == packed.unsorted_indices.tolist() == [1, 0]
        padded, lengths = lib.nn.utils.rnn.pad_packed_sequence(made, batch_first=True)
        results.append((padded.tolist(), lengths.tolist()))
    assert results[1] == results[0]
    assert results[0][1] == [1, 3]


def test_packed_sequence_made_of_a_pair():
    for lib in (torch, rg):
        packed = lib.nn.utils.rnn.pack_sequence([lib.ones(3, 2), lib.ones(1, 2)])
        made = lib.nn.utils.rnn.PackedSequence((packed.data, packed.batch_sizes))
        assert made.batch_sizes.tolist() == [2, 1, 1]
        assert made.sorted_indices is None and made.unsorted_indices is None


@pytest.mark.parametrize("how", ["to", "float", "cpu", "double"])
def test_a_packed_conversion_that_changes_nothing_returns_the_batch(how):
    for lib in (torch, rg):
        packed = lib.nn.utils.rnn.pack_sequence([lib.ones(3, 2), lib.ones(1, 2)], False)
        converted = packed.to(lib.float32) if how == "to" else getattr(packed, how)()
        assert (converted is packed) == (how != "double"), lib.__name__
        assert converted.unsorted_indices.tolist() == [0, 1]
