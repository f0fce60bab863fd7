"""Regressions for the defects ``test_random_modules_45.py`` found in the ``nn`` layer
constructors (round 45): each case runs in torch and in retrograd and expects the same outcome.

- an argument of the wrong type (a float, a str, None or a bool for a size, a flag that is not
  a bool, a str for a float) raised a ``ValueError`` (``ShapeError``/``InvalidArgumentError``)
  where torch raises a ``TypeError``, or was taken where torch refuses it;
- ``Hardtanh`` with ``max_val <= min_val``, ``smooth_l1_loss`` with a NaN ``beta``,
  ``cosine_similarity`` with a negative or NaN ``eps``, ``Bilinear`` without ``in1_features``,
  an ``RNN`` without inputs, an adaptive max pool's ``output_size`` of the wrong length and a
  reflection or replication pad that leaves every padded dimension empty were taken;
- an ``RNNCell`` without hidden units was refused (torch builds it);
- a NaN or infinite ``PReLU`` weight (or ``ELU``/``CELU`` ``alpha``) made the gradient of the
  positive entries NaN (torch's is 1).
"""

from __future__ import annotations

import numpy as np
import pytest

import retrograd as rg

torch = pytest.importorskip("torch")


def _outcome(build):
    try:
        return build()
    except Exception as error:  # (the caller compares the errors)
        return error


def _refused_alike(build, kind: type[Exception], op: str) -> None:
    """``build(lib)`` raises ``kind`` in torch, and in retrograd an error of its hierarchy that
    is also a ``kind`` and names ``op``."""
    theirs = _outcome(lambda: build(torch))
    assert isinstance(theirs, kind), f"torch: {theirs!r}"
    with pytest.raises(rg.RetrogradError) as caught:
        build(rg)
    assert isinstance(caught.value, kind), repr(caught.value)
    assert op in str(caught.value), str(caught.value)


def _x(lib, *shape):
    return lib.ones(shape, dtype=lib.float64)


# -- arguments of the wrong type: torch's TypeError --------------------------------------------
WRONG_TYPES = {
    "max_pool2d kernel_size float": (
        lambda lib: lib.nn.MaxPool2d(2.5)(_x(lib, 1, 1, 4, 4)),
        "max_pool2d",
    ),
    "avg_pool1d padding float": (
        lambda lib: lib.nn.AvgPool1d(2, padding=0.5)(_x(lib, 1, 4)),
        "avg_pool1d",
    ),
    "avg_pool2d ceil_mode int": (
        lambda lib: lib.nn.AvgPool2d(2, ceil_mode=1)(_x(lib, 1, 1, 4, 4)),
        "avg_pool2d",
    ),
    "avg_pool2d count_include_pad None": (
        lambda lib: lib.nn.AvgPool2d(2, count_include_pad=None)(_x(lib, 1, 1, 4, 4)),
        "avg_pool2d",
    ),
    "avg_pool2d divisor_override float": (
        lambda lib: lib.nn.AvgPool2d(2, divisor_override=1.5)(_x(lib, 1, 1, 4, 4)),
        "avg_pool2d",
    ),
    "max_pool1d ceil_mode tuple": (
        lambda lib: lib.nn.MaxPool1d(2, ceil_mode=())(_x(lib, 1, 4)),
        "max_pool1d",
    ),
    "lp_pool2d ceil_mode str": (
        lambda lib: lib.nn.LPPool2d(2, 2, ceil_mode="x")(_x(lib, 1, 1, 4, 4)),
        "pool2d",
    ),
    "conv_transpose1d stride bool": (
        lambda lib: lib.nn.ConvTranspose1d(2, 2, 3, stride=True)(_x(lib, 1, 2, 4)),
        "conv_transpose1d",
    ),
    "unfold kernel_size str": (lambda lib: lib.nn.Unfold("ab")(_x(lib, 1, 1, 4, 4)), "unfold"),
    "fold stride float": (lambda lib: lib.nn.Fold((4, 4), 2, stride=2.5)(_x(lib, 1, 4, 4)), "fold"),
    "pad value str": (lambda lib: lib.nn.ConstantPad1d(1, "x")(_x(lib, 1, 3)), "pad"),
    "pad amounts bool": (lambda lib: lib.nn.ReflectionPad2d(True)(_x(lib, 1, 1, 3, 3)), "pad"),
    "channel_shuffle groups float": (
        lambda lib: lib.nn.ChannelShuffle(1.5)(_x(lib, 1, 4, 2, 2)),
        "channel_shuffle",
    ),
    "adaptive_avg_pool2d None": (
        lambda lib: lib.nn.AdaptiveAvgPool2d(None)(_x(lib, 1, 1, 4, 4)),
        "adaptive_avg_pool2d",
    ),
    "adaptive_max_pool1d bool": (
        lambda lib: lib.nn.AdaptiveMaxPool1d(True)(_x(lib, 1, 4)),
        "adaptive_max_pool1d",
    ),
    "kl_div log_target int": (
        lambda lib: lib.nn.KLDivLoss(log_target=1)(_x(lib, 2, 3), _x(lib, 2, 3)),
        "kl_div",
    ),
    "nll_loss ignore_index float": (
        lambda lib: lib.nn.NLLLoss(ignore_index=1.5)(_x(lib, 2, 3), lib.zeros(2, dtype=lib.int64)),
        "nll_loss",
    ),
    "embedding scale_grad_by_freq None": (
        lambda lib: lib.nn.Embedding(4, 2, scale_grad_by_freq=None)(lib.zeros(2, dtype=lib.int64)),
        "embedding",
    ),
    "embedding max_norm str": (
        lambda lib: lib.nn.Embedding(4, 2, max_norm="x")(lib.zeros(2, dtype=lib.int64)),
        "embedding",
    ),
    "embedding_bag sparse tuple": (
        lambda lib: lib.nn.EmbeddingBag(4, 2, sparse=(1,))(lib.zeros((1, 2), dtype=lib.int64)),
        "embedding_bag",
    ),
    "local_response_norm size float": (
        lambda lib: lib.nn.LocalResponseNorm(1.5)(_x(lib, 1, 3, 4)),
        "LocalResponseNorm",
    ),
    "group_norm num_groups bool": (
        lambda lib: lib.nn.GroupNorm(True, 4)(_x(lib, 2, 4, 3)),
        "group_norm",
    ),
    "layer_norm eps str": (lambda lib: lib.nn.LayerNorm(3, eps="x")(_x(lib, 2, 3)), "layer_norm"),
    "rms_norm eps str": (lambda lib: lib.nn.RMSNorm(3, eps="x")(_x(lib, 2, 3)), "rms_norm"),
    "batch_norm momentum tuple": (
        lambda lib: lib.nn.BatchNorm1d(3, momentum=())(_x(lib, 4, 3)),
        "batch_norm",
    ),
    "instance_norm momentum tuple": (
        lambda lib: lib.nn.InstanceNorm1d(3, momentum=())(_x(lib, 2, 3, 4)),
        "instance_norm",
    ),
    "leaky_relu slope str": (lambda lib: lib.nn.LeakyReLU("x")(_x(lib, 2, 3)), "leaky_relu"),
    "pairwise_distance p tuple": (
        lambda lib: lib.nn.PairwiseDistance(p=())(_x(lib, 2, 3), _x(lib, 2, 3)),
        "pairwise_distance",
    ),
    "HuberLoss delta str": (lambda lib: lib.nn.HuberLoss(delta="x"), "HuberLoss"),
    "PReLU init str": (lambda lib: lib.nn.PReLU(init="x"), "PReLU"),
    "PReLU num_parameters bool": (lambda lib: lib.nn.PReLU(True), "PReLU"),
    "Unflatten size str": (lambda lib: lib.nn.Unflatten(1, "ab"), "Unflatten"),
    "zeros bool size": (lambda lib: lib.zeros((True, 3)), "zeros"),
    "RNN input_size str": (lambda lib: lib.nn.RNN("x", 4), "RNN"),
    "GRU hidden_size float": (lambda lib: lib.nn.GRU(3, 2.5), "GRU"),
    "LSTM num_layers None": (lambda lib: lib.nn.LSTM(3, 4, num_layers=None), "LSTM"),
    "LSTM proj_size None": (lambda lib: lib.nn.LSTM(3, 4, proj_size=None), "LSTM"),
    "RNN bias int": (lambda lib: lib.nn.RNN(3, 4, bias=1), "RNN"),
    "GRU batch_first float": (lambda lib: lib.nn.GRU(3, 4, batch_first=0.5), "GRU"),
    "RNN dropout tuple": (lambda lib: lib.nn.RNN(3, 4, dropout=()), "RNN"),
    "RNNCell hidden_size str": (lambda lib: lib.nn.RNNCell(3, "x"), "RNNCell"),
}


@pytest.mark.parametrize("case", sorted(WRONG_TYPES))
def test_an_argument_of_the_wrong_type_is_a_type_error(case):
    build, op = WRONG_TYPES[case]
    _refused_alike(build, TypeError, op)


def test_rnn_bidirectional_of_another_type_is_refused():
    theirs = torch.nn.GRU(3, 4, bidirectional=-1)  # torch refuses it when called
    with pytest.raises(TypeError):
        theirs(torch.ones(2, 1, 3))
    with pytest.raises(rg.DTypeError, match="bidirectional"):
        rg.nn.GRU(3, 4, bidirectional=-1)


def test_a_tuple_of_ints_of_the_wrong_length_stays_a_shape_error():
    # torch: RuntimeError ("expected ... kernel_size"), not a TypeError
    with pytest.raises(rg.ShapeError) as caught:
        rg.nn.MaxPool2d((2, 2, 2))(rg.ones((1, 1, 4, 4)))
    assert not isinstance(caught.value, TypeError)


def test_a_later_bool_size_is_the_int_it_is_as_in_torch():
    # torch's parser reads the type of a size list's first entry only
    assert tuple(rg.zeros((3, True)).shape) == tuple(torch.zeros((3, True)).shape) == (3, 1)
    assert tuple(rg.nn.Linear(True, 3).weight.shape) == (3, 1)
    assert tuple(torch.nn.Linear(True, 3).weight.shape) == (3, 1)


# -- values out of range: refused as torch refuses them -------------------------------------------
OUT_OF_RANGE = {
    "hardtanh max below min": (lambda lib: lib.nn.Hardtanh(0.5, -0.5), "Hardtanh"),
    "hardtanh max equal min": (lambda lib: lib.nn.Hardtanh(0.5, 0.5), "Hardtanh"),
    "smooth_l1 NaN beta": (
        lambda lib: lib.nn.SmoothL1Loss(beta=float("nan"))(_x(lib, 2), _x(lib, 2)),
        "smooth_l1_loss",
    ),
    "cosine_similarity negative eps": (
        lambda lib: lib.nn.CosineSimilarity(eps=-1.0)(_x(lib, 2, 3), _x(lib, 2, 3)),
        "cosine_similarity",
    ),
    "cosine_similarity NaN eps": (
        lambda lib: lib.nn.CosineSimilarity(eps=float("nan"))(_x(lib, 2, 3), _x(lib, 2, 3)),
        "cosine_similarity",
    ),
    "bilinear no in1_features": (lambda lib: lib.nn.Bilinear(0, 2, 3), "Bilinear"),
    "rnn no inputs": (lambda lib: lib.nn.RNN(0, 4), "RNN"),
    "lstm no inputs": (lambda lib: lib.nn.LSTM(0, 4), "LSTM"),
    "rnn dropout True": (lambda lib: lib.nn.RNN(3, 4, dropout=True), "RNN"),
    "reflection pad 2d empty everywhere": (
        lambda lib: lib.nn.ReflectionPad2d(-1)(_x(lib, 1, 1, 2, 2)),
        "pad",
    ),
    "replication pad 1d empty": (lambda lib: lib.nn.ReplicationPad1d(-1)(_x(lib, 1, 1, 2)), "pad"),
}


@pytest.mark.parametrize("case", sorted(OUT_OF_RANGE))
def test_a_value_torch_refuses_is_refused(case):
    build, op = OUT_OF_RANGE[case]
    theirs = _outcome(lambda: build(torch))
    assert isinstance(theirs, Exception), f"torch took it: {theirs!r}"
    with pytest.raises(rg.RetrogradError, match=op):
        build(rg)


def test_adaptive_max_pool_output_size_of_the_wrong_length_is_refused():
    with pytest.raises(RuntimeError):
        torch.nn.AdaptiveMaxPool1d((1, 2))(torch.ones(1, 4))
    with pytest.raises(rg.ShapeError, match="adaptive_max_pool1d"):
        rg.nn.AdaptiveMaxPool1d((1, 2))(rg.ones((1, 4)))


@pytest.mark.parametrize(
    ("module", "shape"),
    [("ReflectionPad2d", (1, 1, 2, 5)), ("ReplicationPad3d", (1, 1, 2, 4, 4))],
)
def test_a_pad_that_leaves_one_dimension_empty_is_taken(module, shape):
    # torch's 2-d and 3-d kernels refuse only a result empty in every padded dimension
    theirs = getattr(torch.nn, module)(-1)(torch.ones(shape))
    ours = getattr(rg.nn, module)(-1)(rg.ones(shape))
    assert tuple(ours.shape) == tuple(theirs.shape)
    assert 0 in tuple(ours.shape)


def test_hardtanh_takes_a_nan_bound_as_torch_does():
    assert (
        rg.nn.Hardtanh(-1.0, float("nan")).min_val == torch.nn.Hardtanh(-1.0, float("nan")).min_val
    )


@pytest.mark.parametrize("cell", ["RNNCell", "GRUCell", "LSTMCell"])
def test_a_cell_without_hidden_units_is_built_as_torch_builds_it(cell):
    theirs = getattr(torch.nn, cell)(3, 0)(torch.ones(2, 3))
    ours = getattr(rg.nn, cell)(3, 0)(rg.ones((2, 3)))
    theirs = theirs if isinstance(theirs, tuple) else (theirs,)
    ours = ours if isinstance(ours, tuple) else (ours,)
    assert [tuple(t.shape) for t in ours] == [tuple(t.shape) for t in theirs] != []
    assert {k: tuple(v.shape) for k, v in getattr(rg.nn, cell)(3, 0).state_dict().items()} == {
        k: tuple(v.shape) for k, v in getattr(torch.nn, cell)(3, 0).state_dict().items()
    }


# -- non-finite slopes: the gradient of the positive entries stays 1 -------------------------------
@pytest.mark.parametrize(
    ("module", "kwargs"),
    [
        ("PReLU", {"init": float("nan")}),
        ("PReLU", {"init": float("inf")}),
        ("PReLU", {"num_parameters": 2, "init": float("nan")}),
        ("ELU", {"alpha": float("nan")}),
        ("CELU", {"alpha": float("nan")}),
        ("ELU", {"alpha": 0.7}),
        ("PReLU", {"init": 0.3}),
    ],
)
def test_non_finite_slopes_leave_the_positive_gradient_to_torch(module, kwargs):
    x = np.array([[-1.5, 0.5], [2.0, -0.25], [0.0, 3.0]])
    theirs_x = torch.tensor(x, requires_grad=True)
    theirs = getattr(torch.nn, module)(**kwargs).double()
    theirs(theirs_x).sum().backward()
    ours_x = rg.tensor(x).require_grad()
    ours = getattr(rg.nn, module)(**kwargs).double()
    grads = ours(ours_x).sum().backward()
    np.testing.assert_allclose(ours_x.grad(grads).numpy(), theirs_x.grad.numpy(), equal_nan=True)
    if module == "PReLU":
        np.testing.assert_allclose(
            ours.weight.grad(grads).numpy(), theirs.weight.grad.numpy(), equal_nan=True
        )


def test_a_zero_dim_tensor_is_still_taken_for_a_number():
    # torch's parser reads a 0-d tensor as the number it holds: the new type checks keep that
    padded = rg.nn.functional.pad(rg.ones((1, 2)), (1, 1), value=rg.tensor(2.0))
    assert (
        padded.tolist()
        == torch.nn.functional.pad(torch.ones(1, 2), (1, 1), value=torch.tensor(2.0)).tolist()
    )
    theirs = torch.nn.functional.leaky_relu(torch.tensor([-1.0]), torch.tensor(0.5))
    assert (
        rg.nn.functional.leaky_relu(rg.tensor([-1.0]), rg.tensor(0.5)).tolist() == theirs.tolist()
    )
    ours = rg.nn.functional.layer_norm(rg.tensor([[1.0, 3.0]]), (2,), eps=rg.tensor(0.0))
    theirs = torch.nn.functional.layer_norm(torch.tensor([[1.0, 3.0]]), (2,), eps=torch.tensor(0.0))
    assert ours.tolist() == theirs.tolist()
    assert rg.nn.PReLU(init=rg.tensor(0.5)).weight.tolist() == [0.5]
