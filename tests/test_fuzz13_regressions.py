"""Regressions from the thirteenth fuzzing round (geometric ``nn.functional`` ops, indexing
writes and in-place updates through views, ``distributions``; generators in
``tests/fuzz13_cases.py``). Expected values all come from torch."""

from __future__ import annotations

import numpy as np
import pytest

import retrograd as rg
from fuzz12_cases import Trial, check

torch = pytest.importorskip("torch")


# ---- an in-place write that overwrites every element keeps the tensor in the graph -------

OVERWRITES = {
    "setitem_ellipsis": lambda lib, y: y.__setitem__(..., 2.5),
    "fill_": lambda lib, y: y.fill_(2.5),
    "zero_": lambda lib, y: y.zero_(),
    "fill_through_view": lambda lib, y: y.unsqueeze(0).transpose(0, 1).fill_(2.5),
    "fill_through_full_slice": lambda lib, y: y[:].fill_(-1.0),
    "copy_constant": lambda lib, y: y.copy_(lib.ones(2, 3, dtype=lib.float64)),
}


@pytest.mark.parametrize("name", sorted(OVERWRITES))
def test_overwritten_tensor_still_requires_grad_with_zero_gradient(name):
    # it became a constant (requires_grad False): backward through it then raised, where
    # torch sends the old value a zero gradient
    a = np.random.default_rng(0).uniform(-1, 1, (2, 3))

    def fn(lib):
        x = lib.tensor(a, requires_grad=True)
        y = x * 2.0
        OVERWRITES[name](lib, y)
        (g,) = lib.autograd.grad((y * y).sum(), [x])
        return [y, str(y.requires_grad), str(y.is_leaf), g]

    check(Trial(name, fn))


def test_overwrite_then_partial_write_sends_gradient_to_the_written_part_only():
    a = np.random.default_rng(1).uniform(-1, 1, (3, 2))

    def fn(lib):
        x = lib.tensor(a, requires_grad=True)
        v = lib.tensor([0.5, -2.0], dtype=lib.float64, requires_grad=True)
        y = x * 3.0  # (exp would save its output, which torch then refuses to see changed)
        y.zero_()
        y[1] = v * x[0]
        gx, gv = lib.autograd.grad((y * y.sin()).sum(), [x, v])
        return [y, gx, gv]

    check(Trial("zero then write", fn))


# ---- t[0-d int tensor] = value: an integer index -------------------------------------------


@pytest.mark.parametrize("where", ["alone", "with_int", "after_slice"])
@pytest.mark.parametrize("shape", [(), (1,), (2,)])
def test_zero_dim_int_tensor_index_converts_the_value_dtype(where, shape):
    # it was read as an advanced index (index_put_), refusing a float32 value for a float64
    # tensor; torch reads it as the integer (a select, then copy_, which converts)
    a = np.random.default_rng(2).uniform(-1, 1, (3, 2))

    def fn(lib):
        x = lib.tensor(a, requires_grad=True)
        v = lib.full(shape, 1.5, dtype=lib.float32, requires_grad=True)
        y = x * 1.0
        i = lib.tensor(-1)
        index = {"alone": i, "with_int": (i, 0), "after_slice": (slice(None), i)}[where]
        y[index] = v
        gx, gv = lib.autograd.grad((y * y).sum(), [x, v])
        return [y, gx, gv]

    check(Trial(f"y[{where}] = float32 {shape}", fn))


def test_zero_dim_int_tensor_with_an_index_tensor_still_needs_matching_dtypes():
    y = rg.zeros(3, 2, dtype=rg.float64)
    with pytest.raises(rg.errors.DTypeError, match="index_put_"):
        y[rg.tensor(1), rg.tensor([0])] = rg.tensor([1.0], dtype=rg.float32)
    t = torch.zeros(3, 2, dtype=torch.float64)
    with pytest.raises(RuntimeError, match="dtypes match"):
        t[torch.tensor(1), torch.tensor([0])] = torch.tensor([1.0])


# ---- t.data = value on a tensor computed in the graph --------------------------------------


def test_data_assignment_keeps_a_computed_tensor_in_the_graph():
    # assigning .data made the tensor a constant leaf; torch keeps its grad_fn, so later
    # uses send their gradient through it
    a = np.random.default_rng(3).uniform(-1, 1, (2, 3))

    def fn(lib):
        x = lib.tensor(a, requires_grad=True)
        t = x * 2.0
        t.data = lib.tensor(a * 3.0)
        (g,) = lib.autograd.grad((t * t.sin()).sum(), [x])
        return [t, str(t.requires_grad), str(t.is_leaf), g]

    check(Trial("t.data = v", fn))


def test_data_assignment_of_another_shape_keeps_a_grad_fn_whose_backward_fails():
    x = rg.tensor([1.0, 2.0], requires_grad=True)
    t = x * 2.0
    t.data = rg.ones(3)
    assert t.shape == (3,) and t.dtype == rg.float32 and t.tolist() == [1.0, 1.0, 1.0]
    # as torch's (leftovers round 23): still in the graph, its backward refusing the shape
    assert t.requires_grad and t.grad_fn is not None
    with pytest.raises(rg.AutodiffError, match=r"invalid gradient .* got \[3\] but expected"):
        t.sum().backward()


# ---- cat of a 1-d empty tensor that requires grad -------------------------------------------


def test_cat_of_an_empty_1d_tensor_requiring_grad_requires_grad():
    # the legacy skip of a 1-d empty tensor dropped it from the graph among 1-d tensors too
    def fn(lib):
        e = lib.zeros(0, dtype=lib.float64, requires_grad=True)
        x = lib.tensor([1.0, 2.0], dtype=lib.float64, requires_grad=True)
        out = lib.cat([e, lib.ones(2, dtype=lib.float64)])
        ge, gx = lib.autograd.grad((out * x).sum(), [e, x])
        return [out, str(out.requires_grad), ge, gx]

    check(Trial("cat", fn))


@pytest.mark.parametrize("offset", [1, -2])
def test_diag_embed_of_an_empty_vector_requires_grad(offset):
    def fn(lib):
        e = lib.zeros(0, dtype=lib.float64, requires_grad=True)
        out = lib.diag_embed(e, offset, -2, 1)
        (g,) = lib.autograd.grad(out.sum(), [e])
        return [out, str(out.requires_grad), g]

    check(Trial("diag_embed", fn))


# ---- channel_shuffle needs 3 dims at least ---------------------------------------------------


def test_channel_shuffle_refuses_a_2d_input_as_torch():
    with pytest.raises(RuntimeError, match="> 2 dims"):
        torch.nn.functional.channel_shuffle(torch.zeros(2, 4), 2)
    with pytest.raises(rg.errors.ShapeError, match=r"channel_shuffle.*3 dims.*\[2, 4\]"):
        rg.nn.functional.channel_shuffle(rg.zeros(2, 4), 2)
    x = np.arange(12.0).reshape(1, 4, 3)
    want = torch.nn.functional.channel_shuffle(torch.tensor(x), 2).numpy()
    np.testing.assert_array_equal(rg.nn.functional.channel_shuffle(rg.tensor(x), 2).numpy(), want)


# ---- Categorical mean and variance ------------------------------------------------------------


@pytest.mark.parametrize("param", ["probs", "logits"])
def test_categorical_mean_and_variance_have_the_batch_shape(param):
    # they were probs * nan: of shape batch + (K,), and in the graph
    a = np.random.default_rng(4).uniform(0.1, 1.0, (2, 3, 4))

    def fn(lib):
        p = lib.tensor(a, requires_grad=True)
        d = lib.distributions.Categorical(**{param: p})
        big = d.expand((5, 2, 3))
        return [d.mean, d.variance, d.stddev, str(d.mean.requires_grad), big.mean]

    check(Trial("categorical moments", fn))


# ---- index_put_(accumulate=True) with values wider than the indexing result ----------------

INDEX_PUTS = [
    ("one_index_two_values", ([1],), [1.0, 2.0]),
    ("two_indices_three_values", ([-2, 1], [0]), [1.0, 2.0, 3.0]),
    ("rows_wrong_width", ([1],), [1.0, 2.0]),
    ("rows_too_many", ([1],), [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]),
    ("rows_duplicates_broadcast", ([1, 1],), [[1.0, 2.0, 3.0]]),
    ("points_duplicates_scalar", ([1, 1], [0, 0]), 1.5),
]


@pytest.mark.parametrize(
    "indices, values", [c[1:] for c in INDEX_PUTS], ids=[c[0] for c in INDEX_PUTS]
)
def test_index_put_accumulate_refuses_values_that_do_not_fit(indices, values):
    # accumulate broadcast the indices to the values (adding one value several times, or
    # writing a wider row); torch requires the values to broadcast to the indexing result
    def fn(lib):
        x = lib.zeros(3, 3, dtype=lib.float64, requires_grad=True)
        v = lib.tensor(values, dtype=lib.float64, requires_grad=True)
        y = x * 1.0
        y.index_put_(tuple(lib.tensor(i) for i in indices), v, accumulate=True)
        return [y, *lib.autograd.grad((y * y.exp()).sum(), [x, v])]

    check(Trial("index_put", fn))


# ---- kl_divergence between families torch pairs ---------------------------------------------

KL_CROSS = {
    "laplace_normal": (lambda d, a, b: d.Laplace(a, b), lambda d, a, b: d.Normal(a, b)),
    "normal_laplace": (lambda d, a, b: d.Normal(a, b), lambda d, a, b: d.Laplace(a, b)),
    "exponential_normal": (lambda d, a, b: d.Exponential(b), lambda d, a, b: d.Normal(a, b)),
    "gamma_normal": (lambda d, a, b: d.Gamma(b, a.exp()), lambda d, a, b: d.Normal(a, b)),
    "gamma_exponential": (lambda d, a, b: d.Gamma(b, a.exp()), lambda d, a, b: d.Exponential(b)),
    "normal_gamma": (lambda d, a, b: d.Normal(a, b), lambda d, a, b: d.Gamma(b, b)),
    "laplace_uniform": (lambda d, a, b: d.Laplace(a, b), lambda d, a, b: d.Uniform(a, a + b)),
    "exponential_beta": (lambda d, a, b: d.Exponential(b), lambda d, a, b: d.Beta(b, b)),
    "gamma_uniform": (lambda d, a, b: d.Gamma(b, b), lambda d, a, b: d.Uniform(a, a + b)),
}


@pytest.mark.parametrize("name", sorted(KL_CROSS))
def test_cross_family_kl_divergence_matches_torch(name):
    # these pairs raised NotImplementedError; torch has closed forms (or infinity, where p's
    # support reaches outside q's)
    rng = np.random.default_rng(5)
    a1, b1, a2, b2 = (
        rng.normal(size=(2, 3)),
        rng.uniform(0.5, 2, (2, 3)),
        *rng.uniform(0.5, 2, (2, 2, 3)),
    )
    make_p, make_q = KL_CROSS[name]

    def fn(lib):
        leaves = [lib.tensor(v, requires_grad=True) for v in (a1, b1, a2, b2)]
        d = lib.distributions
        kl = d.kl_divergence(make_p(d, *leaves[:2]), make_q(d, *leaves[2:]))
        if not kl.requires_grad:  # (infinity throughout: a constant, as torch's)
            return [kl, "constant"]
        return [kl, *lib.autograd.grad(kl.sum(), leaves, allow_unused=True)]

    check(Trial(name, fn, rtol=1e-7))
