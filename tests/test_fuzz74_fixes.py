"""Round 74's defects in the normalization and embedding layers, each against torch: the
refusals raised another exception class than torch's.

- ``F.one_hot`` of a class value out of range (negative, or not below ``num_classes``) raised
  an ``IndexOutOfRangeError`` alone, of an empty tensor with ``num_classes=-1`` an
  ``InvalidArgumentError`` (a ``ValueError``), of int32 indices a ``DTypeError`` (a
  ``TypeError``): torch raises ``RuntimeError`` for each;
- ``batch_norm``'s (and the modules') per-channel tensors of the wrong size, and
  ``layer_norm``/``rms_norm``'s ``normalized_shape`` that is not the input's trailing shape,
  raised a ``ShapeError`` alone (torch's ``RuntimeError``);
- ``F.group_norm`` of groups that do not divide the channels: an ``InvalidArgumentError``
  alone (torch's ``RuntimeError``);
- ``embedding_bag``: offsets that do not start at 0 (``InvalidArgumentError`` alone) and
  indices out of range (``IndexOutOfRangeError`` alone) where torch raises ``RuntimeError``;
  ``per_sample_weights`` with mode mean or max, an ``InvalidArgumentError`` where torch
  raises ``NotImplementedError`` (but where ``max_norm`` reads an index out of range first);
- ``nn.Embedding``/``F.embedding``'s ``padding_idx`` outside the table: an
  ``IndexOutOfRangeError`` alone where torch asserts (``AssertionError``), and
  ``F.embedding`` checked it after the indices (their dtype, their range) where torch checks
  it first; float indices: a ``DTypeError`` alone (torch's ``RuntimeError``);
- found by probes of options the random programs do not draw: ``F.embedding_bag`` took a
  ``padding_idx`` outside the table (torch: ``RuntimeError``); ``batch_norm`` in eval mode
  without running statistics, ``local_response_norm`` of size 0, ``layer_norm`` of an empty
  ``normalized_shape``, an int input of ``normalize`` (every function of a float input),
  ``embedding``'s 1-d weight, ``embedding_bag``'s int16 indices, no offsets with
  ``include_last_offset``, a 2-d input of empty bags and ``per_sample_weights`` of another
  dtype than the weight raised classes other than torch's
  ``RuntimeError``; ``num_groups=0`` not torch's ``ZeroDivisionError``; a second derivative
  through ``embedding_bag`` (and any derivative torch does not implement) an
  ``AutodiffError`` where torch raises ``NotImplementedError``.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import retrograd as rg

torch = pytest.importorskip("torch")


def _raised(lib, make):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            make(lib, lib.nn.functional)
        except Exception as error:  # (the class is what is compared)
            return error
    return None


def _same_refusal(make, ours, match):
    """torch raises; retrograd raises ``ours`` (a RetrogradError), an instance of torch's
    class, its message matching ``match``."""
    expected = _raised(torch, make)
    assert expected is not None
    error = _raised(rg, make)
    assert isinstance(error, ours), repr(error)
    assert isinstance(error, type(expected)), f"{error!r} vs torch's {expected!r}"
    assert isinstance(error, rg.RetrogradError)
    assert match in str(error)


W = np.arange(12.0).reshape(4, 3)


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda lib, f: f.one_hot(lib.tensor([0, 3]), 3), "smaller than num_classes=3, got 3"),
        (lambda lib, f: f.one_hot(lib.tensor([-1, 1]), 3), "non-negative, got -1"),
    ],
)
def test_one_hot_classes_out_of_range_raise_torchs_runtime_error(make, match):
    _same_refusal(make, rg.IndexOutOfRangeError, match)


def test_one_hot_of_an_empty_tensor_without_num_classes_raises_torchs_runtime_error():
    make = lambda lib, f: f.one_hot(lib.zeros((0, 2), dtype=lib.int64), -1)  # noqa: E731
    _same_refusal(make, rg.InvalidArgumentError, "cannot infer num_classes")


def test_one_hot_of_int32_indices_raises_torchs_runtime_error():
    make = lambda lib, f: f.one_hot(lib.tensor([0, 1]).to(lib.int32), 3)  # noqa: E731
    _same_refusal(make, rg.DTypeError, "one_hot: expected an int64 tensor")


@pytest.mark.parametrize("name", ["running_mean", "weight"])
def test_batch_norm_per_channel_tensors_of_the_wrong_size_raise_torchs_runtime_error(name):
    def make(lib, f):
        x = lib.tensor(np.linspace(-1.0, 1.0, 12, dtype=np.float32).reshape(2, 3, 2))
        kwargs = {"running_mean": lib.zeros(3), "running_var": lib.ones(3)}
        kwargs[name] = lib.ones(2) if name == "weight" else lib.zeros(2)
        return f.batch_norm(x, training=True, **kwargs)

    _same_refusal(make, rg.ShapeError, f"{name} must have shape [3]")


def test_batch_norm_module_of_other_channels_raises_torchs_runtime_error():
    def make(lib, f):
        m = lib.nn.BatchNorm2d(3).eval()
        return m(lib.ones((2, 4, 1, 2)))

    _same_refusal(make, rg.ShapeError, "running_mean must have shape [4]")


@pytest.mark.parametrize("name", ["layer_norm", "rms_norm"])
def test_a_normalized_shape_other_than_the_trailing_one_raises_torchs_runtime_error(name):
    make = lambda lib, f: getattr(f, name)(lib.ones((2, 3)), (4,))  # noqa: E731
    _same_refusal(make, rg.ShapeError, "normalized_shape [4] must match")


def test_layer_norm_module_of_another_trailing_shape_raises_torchs_runtime_error():
    make = lambda lib, f: lib.nn.LayerNorm([2])(lib.ones((4, 2, 1)))  # noqa: E731
    _same_refusal(make, rg.ShapeError, "normalized_shape [2] must match")


def test_group_norm_of_groups_that_do_not_divide_the_channels_raises_torchs_runtime_error():
    make = lambda lib, f: f.group_norm(lib.ones((2, 5, 3)), 2)  # noqa: E731
    _same_refusal(make, rg.InvalidArgumentError, "5 channels cannot be split")


def test_embedding_bag_offsets_not_starting_at_0_raise_torchs_runtime_error():
    def make(lib, f):
        return f.embedding_bag(lib.tensor([0, 1, 2]), lib.tensor(W), lib.tensor([1, 2]))

    _same_refusal(make, rg.InvalidArgumentError, "offsets must start at 0")


@pytest.mark.parametrize("bad", [4, -1])
@pytest.mark.parametrize("max_norm", [None, 1.0])
def test_embedding_bag_indices_out_of_range_raise_torchs_runtime_error(bad, max_norm):
    def make(lib, f):
        return f.embedding_bag(lib.tensor([[0, bad]]), lib.tensor(W), max_norm=max_norm)

    _same_refusal(make, rg.IndexOutOfRangeError, f"index {bad} is out of range for 4")


@pytest.mark.parametrize("mode", ["mean", "max"])
def test_embedding_bag_per_sample_weights_of_mode_mean_or_max_raise_not_implemented(mode):
    def make(lib, f):
        w, idx = lib.tensor(W), lib.tensor([[0, 1]])
        return f.embedding_bag(idx, w, mode=mode, per_sample_weights=lib.ones((1, 2)).double())

    _same_refusal(make, rg.InvalidArgumentError, "only supported for mode='sum'")


@pytest.mark.parametrize("padding_idx", [4, -5])
def test_embedding_padding_idx_outside_the_table_raises_torchs_assertion_error(padding_idx):
    def module(lib, f):
        return lib.nn.Embedding(4, 3, padding_idx=padding_idx)

    def functional(lib, f):
        # float indices too: torch asserts on padding_idx before it reads them
        return f.embedding(lib.tensor([0.0, 1.0]), lib.tensor(W), padding_idx=padding_idx)

    _same_refusal(module, rg.IndexOutOfRangeError, "padding_idx must be within")
    _same_refusal(functional, rg.IndexOutOfRangeError, f"padding_idx {padding_idx} is out")


def test_embedding_of_float_indices_raises_torchs_runtime_error():
    make = lambda lib, f: f.embedding(lib.tensor([0.0, 1.0]), lib.tensor(W))  # noqa: E731
    _same_refusal(make, rg.DTypeError, "indices must be int64 or int32")


def test_embedding_bag_renormalizes_before_it_checks_the_mode_of_per_sample_weights():
    # torch's max_norm reads the rows looked up (an index out of range: IndexError) before
    # it refuses per_sample_weights in mode max
    def make(lib, f):
        w, idx = lib.tensor(W), lib.tensor([[0, 8]])
        psw = lib.ones((1, 2)).double()
        return f.embedding_bag(idx, w, mode="max", max_norm=1.0, per_sample_weights=psw)

    _same_refusal(make, rg.IndexOutOfRangeError, "index 8 is out of range for 4")


# -- the second sweep's: probes of the options the random programs do not draw ------------------
X = np.linspace(-2.0, 2.0, 60).reshape(3, 4, 5)


@pytest.mark.parametrize(
    ("make", "ours", "match"),
    [
        # RuntimeError in torch
        (
            lambda lib, f: f.batch_norm(lib.tensor(X), None, None, training=False),
            rg.InvalidArgumentError,
            "needed when not training",
        ),
        (
            lambda lib, f: f.local_response_norm(lib.tensor(X), 0),
            rg.InvalidArgumentError,
            "size must be a positive int",
        ),
        (
            lambda lib, f: f.layer_norm(lib.tensor(X), ()),
            rg.ShapeError,
            "normalized_shape must have at least one dimension",
        ),
        (
            lambda lib, f: f.normalize(lib.tensor([[1, 2]]), dim=1),
            rg.DTypeError,
            "normalize: expected a float input",
        ),
        (
            lambda lib, f: f.embedding(lib.tensor([0, 1]), lib.tensor(W[0])),
            rg.ShapeError,
            "weight must be 2-d",
        ),
        (
            lambda lib, f: f.embedding_bag(lib.tensor([[0, 1]]).to(lib.int16), lib.tensor(W)),
            rg.DTypeError,
            "must be an int64 or int32 tensor",
        ),
        (
            lambda lib, f: f.embedding_bag(
                lib.tensor([0, 1]),
                lib.tensor(W),
                lib.tensor([], dtype=lib.int64),
                include_last_offset=True,
            ),
            rg.InvalidArgumentError,
            "number of offsets should be at least 1",
        ),
        (
            lambda lib, f: f.embedding_bag(lib.zeros((2, 0), dtype=lib.int64), lib.tensor(W)),
            rg.InvalidArgumentError,
            "a 2-d input of empty bags",
        ),
        # ZeroDivisionError in torch
        (lambda lib, f: f.group_norm(lib.tensor(X), 0), rg.InvalidArgumentError, "not be 0"),
        (lambda lib, f: lib.nn.GroupNorm(0, 4), rg.InvalidArgumentError, "not be 0"),
    ],
)
def test_refusals_of_options_the_random_programs_do_not_draw(make, ours, match):
    _same_refusal(make, ours, match)


@pytest.mark.parametrize("padding_idx", [4, -5])
def test_functional_embedding_bag_refuses_a_padding_idx_outside_the_table(padding_idx):
    # it was taken (5 % 4: another row than any given); torch refuses it (RuntimeError)
    def make(lib, f):
        return f.embedding_bag(lib.tensor([[0, 1]]), lib.tensor(W), padding_idx=padding_idx)

    _same_refusal(make, rg.IndexOutOfRangeError, "padding_idx must be within the number")


def test_a_second_derivative_through_embedding_bag_raises_torchs_not_implemented_error():
    def make(lib, f):
        w = lib.tensor(W, requires_grad=True)
        out = f.embedding_bag(lib.tensor([[0, 1], [1, 2]]), w, mode="mean")
        (g,) = lib.autograd.grad((out * out).sum(), w, create_graph=True)
        return lib.autograd.grad(g.sum(), w)

    _same_refusal(make, rg.AutodiffError, "the derivative of its backward is not implemented")


def test_embedding_bag_per_sample_weights_of_another_dtype_raise_torchs_runtime_error():
    def make(lib, f):
        w, idx = lib.tensor(W.astype(np.float32)), lib.tensor([[0, 1]])
        return f.embedding_bag(idx, w, mode="sum", per_sample_weights=lib.ones((1, 2)).double())

    _same_refusal(make, rg.DTypeError, "per_sample_weights (float64) must have weight's dtype")
