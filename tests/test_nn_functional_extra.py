"""torch's ``nn.functional`` beyond the everyday set: distances, margin, ranking and
likelihood losses, shrinkage and randomized activations, local response normalization,
power-average pooling, max unpooling, adaptive max pooling's indices, alpha dropout, channel
shuffle, the deprecated ``upsample*`` forms and the in-place activations. Each is compared with
PyTorch in float64 (values and gradients, several argument combinations and reductions, batch
1 included), checked against finite differences, and fed bad input."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

import retrograd as rg
import retrograd.nn.functional as F  # noqa: N812
from nn_testing import check_finite_differences, compare_with_torch

torch = pytest.importorskip("torch")
TF = torch.nn.functional

rng = np.random.default_rng(2026)
REDUCTIONS = ["mean", "sum", "none"]


def both(name, *args, **kwargs):
    """A pair of callables ``(ours, torch's)`` applying ``F.name`` to the arrays given and
    then ``args``/``kwargs`` (tensors in kwargs as arrays, turned into each side's tensors)."""

    def make(module, as_tensor):
        def call(*arrays):
            options = {
                k: as_tensor(v) if isinstance(v, np.ndarray) else v for k, v in kwargs.items()
            }
            return getattr(module, name)(*arrays, *args, **options)

        return call

    return make(F, rg.tensor), make(TF, torch.tensor)


def compare(name, arrays, *args, dtype="float64", **kwargs):
    ours, theirs = both(name, *args, **kwargs)
    compare_with_torch(ours, theirs, arrays, dtype)


# -- distances ---------------------------------------------------------------------------------
@pytest.mark.parametrize("batch", [1, 5])
@pytest.mark.parametrize("kwargs", [{}, {"dim": 0}, {"dim": -1, "eps": 0.5}])
def test_cosine_similarity(batch, kwargs):
    x1, x2 = rng.standard_normal((batch, 4, 3)), rng.standard_normal((batch, 4, 3))
    x2[0, :, 0] = 0.0  # a zero vector: the eps clamp without a clamp in the gradient
    compare("cosine_similarity", [x1, x2], **kwargs)


def test_cosine_similarity_broadcasts():
    compare("cosine_similarity", [rng.standard_normal((3, 4)), rng.standard_normal((1, 4))])
    compare("cosine_similarity", [rng.standard_normal((6,)), rng.standard_normal((6,))], dim=0)


@pytest.mark.parametrize("p", [1.0, 2.0, 3.0, 0.5, math.inf])
@pytest.mark.parametrize("keepdim", [False, True])
def test_pairwise_distance(p, keepdim):
    for shape in [(1, 4), (6, 4), (4,)]:
        arrays = [rng.standard_normal(shape), rng.standard_normal(shape)]
        compare("pairwise_distance", arrays, p, 1e-3, keepdim)
    compare("pairwise_distance", [rng.standard_normal((3, 4)), rng.standard_normal((4,))], p)


@pytest.mark.parametrize("p", [1.0, 2.0, 2.5, math.inf])
def test_pdist(p):
    for rows in (1, 2, 6):
        compare("pdist", [rng.standard_normal((rows, 3))], p)
    x = rng.standard_normal((4, 3))
    x[2] = x[1]  # a zero distance: gradient zero there, as torch's
    compare("pdist", [x], p)


def test_distances_finite_differences():
    x1, x2 = rng.standard_normal((3, 4)), rng.standard_normal((3, 4))
    check_finite_differences(F.cosine_similarity, [x1, x2])
    check_finite_differences(lambda a, b: F.pairwise_distance(a, b, 3.0), [x1, x2])
    check_finite_differences(F.pdist, [x1])


# -- triplet and cosine-embedding losses ---------------------------------------------------------
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize(
    "kwargs", [{}, {"swap": True}, {"margin": 2.5, "p": 1.0, "eps": 1e-3}, {"p": 3, "swap": True}]
)
def test_triplet_margin_loss(reduction, kwargs):
    for shape in [(1, 5), (7, 5), (5,)]:
        arrays = [rng.standard_normal(shape) for _ in range(3)]
        compare("triplet_margin_loss", arrays, reduction=reduction, **kwargs)


@pytest.mark.parametrize("size_average, reduce", [(False, None), (None, False), (True, True)])
def test_triplet_margin_loss_legacy_reduction_arguments(size_average, reduce):
    arrays = [rng.standard_normal((4, 3)) for _ in range(3)]
    compare("triplet_margin_loss", arrays, size_average=size_average, reduce=reduce)


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("swap", [False, True])
def test_triplet_margin_with_distance_loss(reduction, swap):
    arrays = [rng.standard_normal((6, 4)) for _ in range(3)]
    compare("triplet_margin_with_distance_loss", arrays, swap=swap, reduction=reduction)

    def ours(a, p, n):
        distance = lambda x, y: 1.0 - F.cosine_similarity(x, y)  # noqa: E731
        return F.triplet_margin_with_distance_loss(
            a, p, n, distance_function=distance, margin=0.5, swap=swap, reduction=reduction
        )

    def theirs(a, p, n):
        distance = lambda x, y: 1.0 - TF.cosine_similarity(x, y)  # noqa: E731
        return TF.triplet_margin_with_distance_loss(
            a, p, n, distance_function=distance, margin=0.5, swap=swap, reduction=reduction
        )

    compare_with_torch(ours, theirs, arrays, "float64")


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("margin", [0.0, 0.3, -0.2])
def test_cosine_embedding_loss(reduction, margin):
    for batch in (1, 6):
        x1, x2 = rng.standard_normal((batch, 4)), rng.standard_normal((batch, 4))
        target = np.where(rng.random(batch) < 0.5, 1.0, -1.0)  # a constant, as in torch
        compare("cosine_embedding_loss", [x1, x2], target=target, margin=margin,
                reduction=reduction)  # fmt: skip
    target = np.array(-1.0)
    compare("cosine_embedding_loss", [x1[0], x2[0]], target=target, margin=margin,
            reduction=reduction)  # fmt: skip


# -- margin and ranking losses ---------------------------------------------------------------------
def _signs(shape):
    return np.where(rng.random(shape) < 0.5, 1.0, -1.0)


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("margin", [0.0, 0.7])
def test_margin_ranking_loss(reduction, margin):
    for shape in [(1,), (8,), (3, 4)]:
        arrays = [rng.standard_normal(shape), rng.standard_normal(shape), _signs(shape)]
        compare("margin_ranking_loss", arrays, margin, reduction=reduction)


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("margin", [1.0, 0.4])
def test_hinge_embedding_loss(reduction, margin):
    x = rng.standard_normal((5, 3))
    target = _signs((5, 3))
    compare("hinge_embedding_loss", [x], target=target, margin=margin, reduction=reduction)
    target[0, 0] = 0.0  # neither 1 nor -1: both of torch's terms apply
    compare("hinge_embedding_loss", [x], target=target, margin=margin, reduction=reduction)


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_soft_margin_loss(reduction):
    for shape in [(1, 3), (6, 2), (4,)]:
        target = _signs(shape)
        compare(
            "soft_margin_loss", [rng.standard_normal(shape)], target=target, reduction=reduction
        )


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("weighted", [False, True])
def test_multilabel_soft_margin_loss(reduction, weighted):
    kwargs = {"weight": rng.random(5) + 0.5} if weighted else {}
    for shape in [(1, 5), (4, 5), (5,)]:
        x, target = rng.standard_normal(shape), (rng.random(shape) < 0.5).astype(float)
        compare("multilabel_soft_margin_loss", [x, target], reduction=reduction, **kwargs)


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_multilabel_margin_loss(reduction):
    x = rng.standard_normal((4, 5))
    target = np.array([[3, 0, -1, 1, 2], [1, 2, 3, 4, 0], [-1, 0, 0, 0, 0], [4, 4, -1, 0, 0]])
    compare("multilabel_margin_loss", [x, target], reduction=reduction)
    compare("multilabel_margin_loss", [x[:1], target[:1]], reduction=reduction)
    compare("multilabel_margin_loss", [x[0], target[0]], reduction=reduction)


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("p, margin", [(1, 1.0), (2, 1.0), (1, 0.3), (2, 2.0)])
@pytest.mark.parametrize("weighted", [False, True])
def test_multi_margin_loss(reduction, p, margin, weighted):
    kwargs = {"weight": rng.random(6) + 0.5} if weighted else {}
    for batch in (1, 7):
        x, target = rng.standard_normal((batch, 6)), rng.integers(0, 6, batch)
        compare("multi_margin_loss", [x, target], p, margin, reduction=reduction, **kwargs)
    x, target = rng.standard_normal(6), np.array(2)
    compare("multi_margin_loss", [x, target], p, margin, reduction=reduction, **kwargs)


def test_margin_losses_finite_differences():
    x, y = rng.standard_normal((4, 5)), _signs((4, 5))
    check_finite_differences(lambda a: F.soft_margin_loss(a, rg.tensor(y)), [x])
    target = np.array([[3, 0, -1, 1, 2], [1, 2, 3, 4, 0], [-1, 0, 0, 0, 0], [4, 4, -1, 0, 0]])
    check_finite_differences(F.multilabel_margin_loss, [x, target])
    check_finite_differences(lambda a, t: F.multi_margin_loss(a, t, 2), [x, target[:, 1]])


# -- likelihood losses -----------------------------------------------------------------------------
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("log_input", [True, False])
@pytest.mark.parametrize("full", [False, True])
def test_poisson_nll_loss(reduction, log_input, full):
    for shape in [(1, 3), (5, 4)]:
        x = rng.standard_normal(shape)
        x = x if log_input else np.abs(x) + 0.1
        target = rng.random(shape) * 4.0 + 0.05  # some at or below 1, where Stirling is off
        compare("poisson_nll_loss", [x, target], log_input, full, reduction=reduction)


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("full", [False, True])
def test_gaussian_nll_loss(reduction, full):
    x, target = rng.standard_normal((4, 3)), rng.standard_normal((4, 3))
    var = rng.random((4, 3)) + 0.1
    var[0, 0] = 1e-9  # clamped to eps, the gradient flowing as if it were not
    for v in (var, var[:, :1], var[:, 0]):
        compare("gaussian_nll_loss", [x, target, v], full=full, reduction=reduction)
    ours, theirs = both("gaussian_nll_loss", 0.7, full=full, reduction=reduction)
    compare_with_torch(ours, theirs, [x, target], "float64")


def test_gaussian_nll_loss_image_variance():
    x, target = rng.standard_normal((2, 3, 4, 4)), rng.standard_normal((2, 3, 4, 4))
    compare("gaussian_nll_loss", [x, target, rng.random((2, 1, 4, 4)) + 0.1])


# -- activations -----------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["hardshrink", "softshrink"])
@pytest.mark.parametrize("lambd", [0.5, 0.2, 0.0])
def test_shrink(name, lambd):
    x = rng.standard_normal((3, 5))
    x[0, :3] = [lambd, -lambd, 0.0]  # the edges: torch's gradient is 0 there
    compare(name, [x], lambd)


def test_rrelu_evaluation_is_leaky_relu_of_the_mean_slope():
    x = rng.standard_normal((4, 6))
    compare("rrelu", [x])
    compare("rrelu", [x], 0.1, 0.5)


def test_rrelu_training_draws_one_slope_per_negative_element():
    x = rng.standard_normal((50, 40))
    t = rg.tensor(x).require_grad()
    rg.seed(3)
    out = F.rrelu(t, 0.2, 0.4, training=True)
    grad = t.grad(out.sum().backward()).numpy()
    slopes = out.numpy()[x < 0] / x[x < 0]
    assert slopes.min() >= 0.2 and slopes.max() <= 0.4 and len(np.unique(slopes)) > 100
    np.testing.assert_array_equal(out.numpy()[x > 0], x[x > 0])
    np.testing.assert_allclose(grad[x < 0], slopes, rtol=1e-12)  # the gradient is the slope
    np.testing.assert_array_equal(grad[x > 0], 1.0)


@pytest.mark.parametrize("hard", [False, True])
@pytest.mark.parametrize("dim", [-1, 0])
def test_gumbel_softmax_against_torch_for_given_noise(hard, dim):
    from retrograd.nn.functional.activation import _gumbel_softmax

    logits, noise = rng.standard_normal((4, 5)), -np.log(rng.exponential(size=(4, 5)))

    def theirs(x, g):
        soft = ((x + g) / 0.7).softmax(dim)
        if not hard:
            return soft
        index = soft.max(dim, keepdim=True)[1]
        return torch.zeros_like(soft).scatter_(dim, index, 1.0) - soft.detach() + soft

    compare_with_torch(
        lambda x, g: _gumbel_softmax(x, g, 0.7, hard, dim), theirs, [logits, noise], "float64"
    )


def test_gumbel_softmax_samples():
    rg.seed(0)
    logits = rg.tensor(np.log([[0.7, 0.2, 0.1]] * 4000))
    hard = F.gumbel_softmax(logits, hard=True).numpy()
    assert set(np.unique(hard)) == {0.0, 1.0} and np.all(hard.sum(-1) == 1.0)
    np.testing.assert_allclose(hard.mean(0), [0.7, 0.2, 0.1], atol=0.03)
    soft = F.gumbel_softmax(logits, tau=0.5).numpy()
    np.testing.assert_allclose(soft.sum(-1), 1.0, rtol=1e-12)


@pytest.mark.parametrize(
    "name, args",
    [
        ("relu_", ()),
        ("elu_", (0.7,)),
        ("selu_", ()),
        ("celu_", (2.0,)),  # torch's celu backward rounds 1/alpha to float32: 1/2 is exact
        ("leaky_relu_", (0.2,)),
        ("hardtanh_", (-0.5, 0.8)),
        ("threshold_", (0.1, -2.0)),
    ],
)
def test_in_place_activations(name, args):
    """Values as torch's in-place form, gradients as its out-of-place form (torch's ``celu_``
    backward differs from ``celu``'s)."""
    x = rng.standard_normal((3, 4))
    expected = getattr(TF, name)(torch.tensor(x), *args).numpy()
    t = rg.tensor(x)
    assert getattr(F, name)(t, *args) is t
    np.testing.assert_allclose(t.numpy(), expected, rtol=1e-15)

    def ours(a):  # on a non-leaf, in place, the gradient as out of place
        b = a * 1.0
        getattr(F, name)(b, *args)
        return b

    out_of_place = getattr(TF, name[:-1])
    compare_with_torch(ours, lambda a: out_of_place(a, *args), [x], "float64")
    leaf = rg.tensor(x).require_grad()
    with pytest.raises(rg.AutodiffError, match=name):
        getattr(F, name)(leaf, *args)


# -- normalization, dropout ------------------------------------------------------------------------
@pytest.mark.parametrize("shape", [(1, 6, 5), (2, 7, 3, 4), (1, 5, 2, 2, 3)])
@pytest.mark.parametrize("size", [1, 2, 3, 5, 9])
def test_local_response_norm(shape, size):
    x = rng.standard_normal(shape)
    compare("local_response_norm", [x], size)
    compare("local_response_norm", [x], size, 0.3, 0.6, 1.5)


@pytest.mark.parametrize("name", ["alpha_dropout", "feature_alpha_dropout"])
def test_alpha_dropout_keeps_mean_and_variance(name):
    x = rg.tensor(rng.standard_normal((4000, 50, 2)))
    assert getattr(F, name)(x, 0.3) is x  # training=False by default, as torch's
    rg.seed(1)
    out = getattr(F, name)(x, 0.3, training=True).numpy()
    assert abs(out.mean()) < 0.02 and abs(out.std() - 1.0) < 0.02
    alpha = 1.7580993408473766
    a = 1.0 / math.sqrt((alpha**2 * 0.3 + 1.0) * 0.7)
    kept = np.isclose(out, a * x.numpy() + alpha * a * 0.3, rtol=0, atol=1e-12)
    dropped = np.isclose(out, alpha * a * (0.3 - 1.0), rtol=0, atol=1e-12)
    assert np.all(kept | dropped) and abs(dropped.mean() - 0.3) < 0.01
    if name == "feature_alpha_dropout":  # whole channels: both positions of one go together
        np.testing.assert_array_equal(kept[..., 0], kept[..., 1])
    assert np.all(getattr(F, name)(x, 1.0, training=True).numpy() == 0.0)


# -- pooling ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("norm_type", [1.0, 2.0, 3.5])
@pytest.mark.parametrize("ceil_mode", [False, True])
def test_lp_pool(norm_type, ceil_mode):
    x = np.abs(rng.standard_normal((2, 3, 7, 8))) + 0.1
    compare("lp_pool2d", [x], norm_type, (2, 3), 2, ceil_mode)
    compare("lp_pool2d", [x[:1]], norm_type, 3, ceil_mode=ceil_mode)
    compare("lp_pool1d", [x[0]], norm_type, 3, 2, ceil_mode)
    compare("lp_pool3d", [x[:, :, :4, :4].reshape(2, 3, 2, 4, 2)], norm_type, 2)
    compare("lp_pool2d", [rng.standard_normal((1, 2, 4, 4))], 2.0, 2)  # signed input, p = 2


@pytest.mark.parametrize("batched", [True, False])
def test_max_unpool(batched):
    x = rng.standard_normal((2, 3, 8, 10))
    values, indices = TF.max_pool2d(torch.tensor(x), 2, return_indices=True)
    cases = [((2,), {}), ((2,), {"output_size": (9, 11)}), ((2, 2, 0), {"output_size": x.shape})]
    for args, kwargs in cases:
        v, i = (values, indices) if batched else (values[0], indices[0])
        compare("max_unpool2d", [v.numpy(), i.numpy()], *args, **kwargs)
    values, indices = TF.max_pool1d(torch.tensor(x[0, :, :, :9]), 3, 2, 1, return_indices=True)
    v, i = (values, indices) if batched else (values[0], indices[0])
    compare("max_unpool1d", [v.numpy(), i.numpy()], 3, 2, 1)
    values, indices = TF.max_pool3d(torch.tensor(x[:, :, :4]), 2, return_indices=True)
    compare("max_unpool3d", [values.numpy(), indices.numpy()], 2)


@pytest.mark.parametrize("output_size", [(3, 4), (1, 1), (7, None), 2])
def test_adaptive_max_pool_with_indices(output_size):
    x = rng.standard_normal((2, 3, 7, 9))
    for args in ((x,), (x[0],)):
        got = F.adaptive_max_pool2d_with_indices(rg.tensor(args[0]), output_size)
        want = TF.adaptive_max_pool2d_with_indices(torch.tensor(args[0]), output_size)
        np.testing.assert_array_equal(got[1].numpy(), want[1].numpy())
        assert got[1].dtype == "int64"
    compare("adaptive_max_pool2d", [x], output_size)
    ours = lambda a: F.adaptive_max_pool2d(a, output_size, return_indices=True)[0]  # noqa: E731
    theirs = lambda a: TF.adaptive_max_pool2d(a, output_size, return_indices=True)[0]  # noqa: E731
    compare_with_torch(ours, theirs, [x], "float64")
    for size in (4, 1, 9):
        got = F.adaptive_max_pool1d_with_indices(rg.tensor(x[0]), size)
        want = TF.adaptive_max_pool1d_with_indices(torch.tensor(x[0]), size)
        np.testing.assert_array_equal(got[1].numpy(), want[1].numpy())
        np.testing.assert_array_equal(got[0].numpy(), want[0].numpy())


# -- layers, resampling ----------------------------------------------------------------------------
def test_bilinear():
    w, b = rng.standard_normal((6, 4, 5)), rng.standard_normal(6)
    for lead in [(1,), (3,), (2, 3), ()]:
        x1, x2 = rng.standard_normal((*lead, 4)), rng.standard_normal((*lead, 5))
        compare("bilinear", [x1, x2, w, b])
        compare("bilinear", [x1, x2, w])


@pytest.mark.parametrize("groups", [1, 2, 3, 6])
def test_channel_shuffle(groups):
    x = rng.standard_normal((2, 6, 3, 2))
    expected = TF.channel_shuffle(torch.tensor(x), groups).numpy()  # torch: no derivative
    np.testing.assert_array_equal(F.channel_shuffle(rg.tensor(x), groups).numpy(), expected)

    def theirs(a):  # ShuffleNet's definition, which torch's values match
        return a.reshape(2, groups, 6 // groups, 3, 2).transpose(1, 2).reshape(2, 6, 3, 2)

    compare_with_torch(lambda a: F.channel_shuffle(a, groups), theirs, [x], "float64")
    x = rng.standard_normal((1, 6, 4))  # torch's native form has no derivative: values only
    expected = TF.native_channel_shuffle(torch.tensor(x), groups).numpy()
    np.testing.assert_array_equal(F.native_channel_shuffle(rg.tensor(x), groups).numpy(), expected)


@pytest.mark.filterwarnings("ignore::UserWarning")  # torch deprecates upsample*
def test_upsample_forms():
    x = rng.standard_normal((2, 3, 4, 5))
    compare("upsample_bilinear", [x], scale_factor=2)
    compare("upsample_bilinear", [x], (7, 3))
    compare("upsample_nearest", [x], (7, 9))
    compare("upsample_nearest", [x], scale_factor=3)
    compare("upsample", [x], (6, 7), None, "bicubic", True)
    compare("upsample", [x], scale_factor=2)


# -- float32 ---------------------------------------------------------------------------------------
def test_float32_results_stay_float32():
    x1, x2, x3 = (rng.standard_normal((4, 3)) for _ in range(3))
    compare("cosine_similarity", [x1, x2], dtype="float32")
    compare("triplet_margin_loss", [x1, x2, x3], dtype="float32")
    compare("local_response_norm", [x1.reshape(1, 4, 3)], 3, dtype="float32")
    target = _signs((4, 3)).astype("float32")
    compare("soft_margin_loss", [x1], target=target, dtype="float32")


# -- errors ----------------------------------------------------------------------------------------
def _raises(error, match, fn, *args, **kwargs):
    with pytest.raises(error, match=match):
        fn(*args, **kwargs)


def test_bad_input_errors_name_the_op_and_shapes():
    a = rg.tensor(rng.standard_normal((3, 4)))
    _raises(rg.ShapeError, r"cosine_similarity.*\[3, 4\].*\[2, 4\]", F.cosine_similarity, a,
            rg.ones((2, 4)))  # fmt: skip
    _raises(rg.ShapeError, "cosine_similarity: dimension 2", F.cosine_similarity, a, a, 2)
    _raises(rg.ShapeError, r"pdist.*\[3, 4, 1\]", F.pdist, a.reshape((3, 4, 1)))
    _raises(rg.ShapeError, r"pairwise_distance.*\[3, 4\].*\[5\]", F.pairwise_distance, a,
            rg.ones((5,)))  # fmt: skip
    _raises(rg.ShapeError, "triplet_margin_loss.*same number of dimensions", F.triplet_margin_loss,
            a, a, rg.ones((4,)))  # fmt: skip
    _raises(rg.InvalidArgumentError, "triplet_margin_loss.*margin", F.triplet_margin_loss, a, a,
            a, margin=0.0)  # fmt: skip
    _raises(rg.InvalidArgumentError, "reduction", F.triplet_margin_loss, a, a, a, reduction="avg")
    _raises(rg.ShapeError, "margin_ranking_loss.*same number", F.margin_ranking_loss, a, a,
            rg.ones((4,)))  # fmt: skip
    _raises(rg.ShapeError, r"cosine_embedding_loss.*1-d target expects 2-d",
            F.cosine_embedding_loss, a.reshape((12,)), a.reshape((12,)), rg.ones((3,)))  # fmt: skip
    _raises(rg.ShapeError, r"soft_margin_loss.*\[5\].*\[3, 4\]", F.soft_margin_loss, a,
            rg.ones((5,)))  # fmt: skip
    _raises(rg.InvalidArgumentError, "multi_margin_loss.*p == 1", F.multi_margin_loss, a,
            rg.tensor([0, 1, 2]), p=3)  # fmt: skip
    _raises(rg.DTypeError, "multi_margin_loss.*int64", F.multi_margin_loss, a, rg.ones((3,)))
    _raises(rg.IndexOutOfRangeError, "multi_margin_loss.*4 classes", F.multi_margin_loss, a,
            rg.tensor([0, 4, 1]))  # fmt: skip
    _raises(rg.IndexOutOfRangeError, "multilabel_margin_loss", F.multilabel_margin_loss, a,
            rg.tensor([[0, 7, -1, 0]] * 3))  # fmt: skip
    _raises(rg.ShapeError, r"multilabel_margin_loss.*\[3, 4\]", F.multilabel_margin_loss, a,
            rg.tensor([0, 1, 2]))  # fmt: skip
    _raises(rg.InvalidArgumentError, "gaussian_nll_loss.*negative", F.gaussian_nll_loss, a, a,
            rg.full((3, 4), -1.0))  # fmt: skip
    _raises(rg.ShapeError, r"gaussian_nll_loss.*\[2, 4\]", F.gaussian_nll_loss, a, a,
            rg.ones((2, 4)))  # fmt: skip
    _raises(rg.ShapeError, r"local_response_norm.*\[3, 4\]", F.local_response_norm, a, 2)
    _raises(rg.InvalidArgumentError, "softshrink.*non-negative", F.softshrink, a, -0.1)
    _raises(rg.ShapeError, r"bilinear.*\[3, 4\].*\[2, 5\]", F.bilinear, a,
            rg.ones((2, 5), dtype=a.dtype), rg.ones((6, 4, 5), dtype=a.dtype))  # fmt: skip
    _raises(rg.ShapeError, r"channel_shuffle.*groups=3.*\[3, 4\]", F.channel_shuffle, a, 3)
    values = rg.ones((1, 1, 2, 2))
    _raises(rg.ShapeError, "max_unpool2d: indices", F.max_unpool2d, values,
            rg.tensor([[[0, 1]]]), 2)  # fmt: skip
    _raises(rg.IndexOutOfRangeError, "max_unpool2d.*out of range", F.max_unpool2d, values,
            rg.tensor([[[[0, 1], [2, 16]]]]), 2)  # fmt: skip
    _raises(rg.ShapeError, "max_unpool2d: output_size", F.max_unpool2d, values,
            rg.tensor([[[[0, 1], [2, 3]]]]), 2, output_size=(9, 9))  # fmt: skip
    _raises(rg.InvalidArgumentError, "alpha_dropout.*between 0 and 1", F.alpha_dropout, a, 1.5,
            True)  # fmt: skip
    _raises(rg.ShapeError, "feature_alpha_dropout.*2 dimensions", F.feature_alpha_dropout,
            rg.ones((3,)), 0.5, True)  # fmt: skip
    # a failed call leaves its inputs usable
    assert F.cosine_similarity(a, a).shape == (3,)


# -- CTC -------------------------------------------------------------------------------------------
def _ctc_case():
    steps, batch, classes = 12, 3, 5
    logits = rng.standard_normal((steps, batch, classes))
    targets = rng.integers(1, classes, (batch, 4))
    targets[1, 1] = targets[1, 0]  # a repeated label: the alignment needs a blank between
    return logits, targets, np.array([12, 10, 7]), np.array([4, 2, 3])


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("concatenated", [False, True])
def test_ctc_loss_through_log_softmax(reduction, concatenated):
    """Values and gradients in the logits (through ``log_softmax``, the contract of torch's
    kernel, whose own gradient in ``log_probs`` is a shortcut valid only there)."""
    logits, targets, input_lengths, target_lengths = _ctc_case()
    if concatenated:
        targets = np.concatenate([row[:n] for row, n in zip(targets, target_lengths)])

    def call(module, x):
        lengths = (input_lengths, target_lengths)
        as_tensor = rg.tensor if module is F else torch.tensor
        return module.ctc_loss(x.log_softmax(2), as_tensor(targets), *map(as_tensor, lengths),
                               reduction=reduction)  # fmt: skip

    compare_with_torch(lambda x: call(F, x), lambda x: call(TF, x), [logits], "float64")


@pytest.mark.parametrize("zero_infinity", [False, True])
def test_ctc_loss_impossible_and_empty(zero_infinity):
    logits, targets, _, _ = _ctc_case()
    input_lengths, target_lengths = np.array([12, 3, 7]), np.array([4, 3, 0])  # 3 steps: no
    log_probs = torch.tensor(logits).log_softmax(2)
    expected = TF.ctc_loss(log_probs, torch.tensor(targets), torch.tensor(input_lengths),
                           torch.tensor(target_lengths), reduction="none",
                           zero_infinity=zero_infinity).numpy()  # fmt: skip
    options = {"reduction": "none", "zero_infinity": zero_infinity}
    got = F.ctc_loss(rg.tensor(log_probs.numpy()), rg.tensor(targets), input_lengths,
                     target_lengths, **options).numpy()  # fmt: skip
    np.testing.assert_allclose(got, expected, rtol=1e-12)
    assert np.isinf(got[1]) != zero_infinity


def test_ctc_loss_unbatched_and_module():
    logits, targets, input_lengths, target_lengths = _ctc_case()
    log_probs = torch.tensor(logits[:, 0]).log_softmax(1)
    expected = TF.ctc_loss(log_probs, torch.tensor(targets[0]), torch.tensor(12),
                           torch.tensor(4)).item()  # fmt: skip
    got = F.ctc_loss(rg.tensor(log_probs.numpy()), rg.tensor(targets[0]), 12, 4).item()
    assert abs(got - expected) < 1e-12
    loss = rg.nn.CTCLoss(blank=0)(rg.tensor(logits).log_softmax(2), rg.tensor(targets),
                                   input_lengths, target_lengths)  # fmt: skip
    lengths = torch.tensor(input_lengths), torch.tensor(target_lengths)
    log_probs = torch.tensor(logits).log_softmax(2)
    expected = torch.nn.CTCLoss()(log_probs, torch.tensor(targets), *lengths)
    assert abs(loss.item() - expected.item()) < 1e-12
    with pytest.raises(rg.ShapeError, match=r"ctc_loss: input_lengths"):
        F.ctc_loss(rg.tensor(logits), rg.tensor(targets), [13, 1, 1], target_lengths)


# -- feature dropout at every rank (found porting mnist_rnn/main.py) -------------------------------
FEATURE_DROPOUT_RANKS = [
    ("dropout1d", (3, 40)), ("dropout1d", (2, 30, 5)),
    ("dropout2d", (40, 30)), ("dropout2d", (3, 40, 5)), ("dropout2d", (2, 30, 3, 3)),
    ("dropout2d", (2, 20, 2, 2, 2)),
    ("dropout3d", (40,)), ("dropout3d", (30, 4)), ("dropout3d", (20, 3, 2, 2)),
    ("dropout3d", (2, 20, 2, 2, 2)), ("dropout3d", (20, 2, 2, 2, 2, 2)),
]  # fmt: skip


def _constant_axes(values: np.ndarray) -> tuple[int, ...]:
    """The axes along which ``values`` never changes: the axes a dropout mask is broadcast on."""
    return tuple(
        axis
        for axis in range(values.ndim)
        if values.shape[axis] > 1 and np.all(values == np.take(values, [0], axis=axis))
    )


@pytest.mark.parametrize("name, shape", FEATURE_DROPOUT_RANKS)
def test_feature_dropout_zeroes_the_slices_torch_zeroes_at_every_rank(name, shape):
    """torch's ``dropout2d`` reads dimension 1 as the channels at every rank (a 2-d input is
    element-wise dropout, a 3-d one ``[N, C, L]``) and ``dropout3d`` reads any rank but 5 as
    unbatched; both warn off their documented ranks. Which axes the mask is broadcast on, the
    scale, the gradient (the mask itself) and the warning must match torch's."""
    p = 0.4
    x = rng.uniform(0.5, 1.5, shape)
    torch.manual_seed(3)
    with warnings.catch_warnings(record=True) as theirs_warned:
        warnings.simplefilter("always")
        theirs = getattr(TF, name)(torch.tensor(x), p).numpy() / x
    rg.manual_seed(3)
    x_ours = rg.tensor(x, requires_grad=True)
    with warnings.catch_warnings(record=True) as ours_warned:
        warnings.simplefilter("always")
        out = getattr(F, name)(x_ours, p)
    ratio = out.numpy() / x
    assert bool(ours_warned) == bool(theirs_warned)
    assert set(np.unique(np.round(ratio, 12))) == {0.0, round(1 / (1 - p), 12)}
    assert _constant_axes(ratio) == _constant_axes(theirs)
    weights = rng.standard_normal(shape)
    grads = (out * rg.tensor(weights)).sum().backward()
    np.testing.assert_allclose(x_ours.grad(grads).numpy(), ratio * weights, rtol=1e-12)


@pytest.mark.parametrize(
    "name, shape",
    [("dropout1d", (5,)), ("dropout1d", (2, 2, 2, 2)), ("dropout2d", (5,)),
     ("dropout2d", ()), ("dropout3d", ())],
)  # fmt: skip
def test_feature_dropout_rejects_the_ranks_torch_rejects(name, shape):
    with pytest.raises(RuntimeError), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        getattr(TF, name)(torch.ones(shape, dtype=torch.float64), 0.5)
    with pytest.raises(rg.ShapeError, match=name):
        getattr(F, name)(rg.ones(shape), 0.5)
