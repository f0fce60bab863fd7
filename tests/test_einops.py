"""einops on retrograd tensors (``src/retrograd/einops/``): ``import einops`` and its operations
take retrograd tensors, on either inner backend, with gradients.

Every expectation comes from einops itself running on torch tensors (values, gradients, error
messages) or from central finite differences in float64; the layers are compared with
``einops.layers.torch``'s given the same weights.
"""

from __future__ import annotations

import copy
import importlib.util
import logging
import pickle
import re

import numpy as np
import pytest
import torch

import retrograd as rg
from nn_testing import check_finite_differences, compare_with_torch

einops = pytest.importorskip("einops", minversion="0.8")
from einops import (  # noqa: E402 (after the skip: einops is the dev extra's)
    EinopsError,
    asnumpy,
    einsum,
    pack,
    parse_shape,
    rearrange,
    reduce,
    repeat,
    unpack,
)
from einops.layers import torch as torch_layers  # noqa: E402

RNG = np.random.default_rng(20251205)


def distinct(*shape: int) -> np.ndarray:
    """Values without ties (a max/min has one winner, so its gradient is defined), shuffled."""
    count = int(np.prod(shape))
    return (RNG.permutation(count).reshape(shape) / count - 0.5 + 0.01).astype(np.float64)


def agree(fn, *arrays: np.ndarray, dtype: str = "float32") -> None:
    """``fn`` (one einops call, the same text for both libraries) gives torch's values and
    gradients on retrograd tensors."""
    compare_with_torch(fn, fn, list(arrays), dtype)


REARRANGES = [
    ((2, 3, 4, 5), "b c h w -> b h w c", {}),
    ((2, 3, 4, 5), "b c h w -> b (c h w)", {}),
    ((2, 4, 6, 3), "b (h1 h) (w1 w) c -> (b h1 w1) h w c", {"h1": 2, "w1": 3}),
    ((2, 3, 4, 5), "b c h w -> b (w h) c", {}),
    ((6, 3, 4), "(b1 b2) c d -> b2 (b1 c) d", {"b1": 2}),
    ((2, 3, 4, 5), "... c -> c ...", {}),
    ((2, 3, 4, 5), "b ... -> b (...)", {}),
    ((2, 3, 4, 5), "b ... w -> w ... b", {}),
    ((2, 3, 4), "b c d -> b c 1 d 1", {}),
    ((2, 1, 4), "b 1 d -> d b", {}),
    ((2, 1, 4), "b () d -> b d ()", {}),
    ((2, 12), "b (h d) -> b h d", {"h": 3}),
    ((3, 4), "h w -> h w", {}),
    ((24,), "(a b c) -> c b a", {"a": 2, "b": 3}),
]


@pytest.mark.parametrize(("shape", "pattern", "lengths"), REARRANGES)
def test_rearrange_matches_torch(shape, pattern, lengths):
    agree(lambda x: rearrange(x, pattern, **lengths), RNG.standard_normal(shape))


def test_rearrange_of_a_list_stacks_it():
    agree(
        lambda a, b, c: rearrange([a, b, c], "n b d -> b (n d)"),
        *(RNG.standard_normal((2, 3)) for _ in range(3)),
    )


REDUCES = [
    ((2, 3, 4, 5), "b c h w -> b c", {}),
    ((2, 3, 4, 6), "b c (h h2) (w w2) -> b c h w", {"h2": 2, "w2": 3}),
    ((2, 3, 4, 5), "b c h w -> c", {}),
    ((2, 3, 4, 5), "... c -> c", {}),
    ((2, 3, 4, 5), "b c h w -> b 1 1 c", {}),
    ((2, 3, 4), "b c d -> ", {}),
    ((2, 3, 4), "b c d -> b () d", {}),
    ((2, 6, 4), "b (g c) d -> (b d) g", {"g": 2}),
]


@pytest.mark.parametrize("reduction", ["mean", "max", "min", "sum", "prod"])
@pytest.mark.parametrize(("shape", "pattern", "lengths"), REDUCES)
def test_reduce_matches_torch(shape, pattern, lengths, reduction):
    agree(lambda x: reduce(x, pattern, reduction, **lengths), distinct(*shape))


@pytest.mark.parametrize("reduction", ["any", "all"])
def test_boolean_reductions_match_torch(reduction):
    values = RNG.standard_normal((3, 4, 5)) > 0.5
    expected = reduce(torch.tensor(values), "a b c -> b", reduction).numpy()
    got = reduce(rg.tensor(values), "a b c -> b", reduction)
    assert got.dtype == rg.bool
    np.testing.assert_array_equal(got.numpy(), expected)


def test_reduce_with_a_callable():
    agree(lambda x: reduce(x, "b c d -> b d", lambda t, axes: t.logsumexp(axes)), distinct(2, 3, 4))


REPEATS = [
    ((3, 4), "h w -> h w c", {"c": 3}),
    ((3, 4), "h w -> (r h) w", {"r": 2}),
    ((3, 4), "h w -> h (w r)", {"r": 3}),
    ((2, 5), "b c -> b n c", {"n": 4}),
    ((3, 4), "h w -> (h 2) w", {}),
    ((2, 3), "... -> b ...", {"b": 2}),
    ((2, 3), "b c -> (b n) (c m) k", {"n": 2, "m": 2, "k": 2}),
    ((2, 3), "b c -> c b", {}),
]


@pytest.mark.parametrize(("shape", "pattern", "lengths"), REPEATS)
def test_repeat_matches_torch(shape, pattern, lengths):
    agree(lambda x: repeat(x, pattern, **lengths), RNG.standard_normal(shape))


EINSUMS = [
    ([(2, 3, 4), (2, 5, 4)], "b i d, b j d -> b i j"),
    ([(3, 4), (4, 5)], "i j, j k -> i k"),
    ([(2, 2, 3, 4), (2, 2, 5, 4)], "batch head i d, batch head j d -> batch head i j"),
    ([(2, 3, 4), (4, 5)], "... d, d e -> ... e"),
    ([(2, 3, 4)], "b i j -> b"),
    ([(3, 4), (4, 5), (5, 2)], "i j, j k, k l -> i l"),
    ([(3,), (4,)], "i, j -> i j"),
]


@pytest.mark.parametrize(("shapes", "pattern"), EINSUMS)
def test_einsum_matches_torch(shapes, pattern):
    agree(lambda *xs: einsum(*xs, pattern), *(RNG.standard_normal(s) for s in shapes))


def test_pack_matches_torch():
    arrays = (
        RNG.standard_normal((2, 3, 4)),
        RNG.standard_normal((2, 4)),
        RNG.standard_normal((2, 5, 3, 4)),
    )
    agree(lambda a, b, c: pack([a, b, c], "b * d")[0], *arrays)


def test_unpack_of_pack_gives_each_piece_back():
    def round_trip(a, b):
        packed, shapes = pack([a, b], "i j *")
        first, second = unpack(packed * 2, shapes, "i j *")
        return rearrange(first, "i j k l -> i j (k l)") + second

    agree(round_trip, RNG.standard_normal((2, 3, 2, 2)), RNG.standard_normal((2, 3, 4)))


def test_unpack_gives_torchs_shapes():
    packed_torch, ps = pack([torch.zeros(2, 3), torch.zeros(2), torch.zeros(2, 4, 5)], "b *")
    packed_ours, ours_ps = pack([rg.zeros(2, 3), rg.zeros(2), rg.zeros(2, 4, 5)], "b *")
    assert tuple(packed_ours.shape) == tuple(packed_torch.shape) == (2, 24)
    assert ours_ps == ps
    assert [tuple(t.shape) for t in unpack(packed_ours, ours_ps, "b *")] == [
        tuple(t.shape) for t in unpack(packed_torch, ps, "b *")
    ]


@pytest.mark.parametrize(
    "fn",
    [
        lambda x: rearrange(x, "b (h w) c -> (b c) w h", h=2),
        lambda x: reduce(x, "b (h h2) c -> b h", "max", h2=2),
        lambda x: reduce(x, "b n c -> c b", "prod"),
        lambda x: reduce(x, "b n c -> n", "mean"),
        lambda x: repeat(x, "b n c -> b n r c", r=2),
        lambda x: einsum(x, x, "b n c, b m c -> n m"),
        lambda x: pack([x, x[:, :1]], "b * c")[0],
    ],
    ids=["rearrange", "max-pool", "prod", "mean", "repeat", "einsum", "pack"],
)
def test_gradients_match_finite_differences(fn):
    check_finite_differences(fn, [distinct(2, 4, 3)])


def test_parse_shape_and_asnumpy():
    x = rg.tensor(RNG.standard_normal((2, 3, 4)), dtype=rg.float32).requires_grad_()
    assert parse_shape(x, "b _ d") == parse_shape(torch.zeros(2, 3, 4), "b _ d") == {"b": 2, "d": 4}
    assert parse_shape(x, "b ...") == {"b": 2}
    array = asnumpy(x * 2)
    assert isinstance(array, np.ndarray) and array.dtype == np.float32
    np.testing.assert_array_equal(array, x.detach().numpy() * 2)


def test_integer_tensors_keep_their_dtype():
    values = RNG.integers(0, 10, (2, 3, 4))
    for fn in (
        lambda x: rearrange(x, "a b c -> c (a b)"),
        lambda x: reduce(x, "a b c -> a", "sum"),
        lambda x: reduce(x, "a b c -> a", "max"),
        lambda x: repeat(x, "a b c -> a b c 2"),
    ):
        expected = fn(torch.tensor(values))
        got = fn(rg.tensor(values))
        assert str(got.dtype) == str(expected.dtype).removeprefix("torch.")
        np.testing.assert_array_equal(got.numpy(), expected.numpy())


def einops_failure(fn, x_torch, x_ours):
    """The error einops raises on torch's tensor and on ours: the same class and text (where
    einops prints the input's shape, torch's ``torch.Size([2, 3, 4])`` read as ``(2, 3, 4)``)."""
    with pytest.raises(Exception) as theirs:
        fn(x_torch)
    with pytest.raises(Exception) as ours:
        fn(x_ours)
    assert type(ours.value) is type(theirs.value)
    assert str(ours.value) == re.sub(r"torch\.Size\(\[(.*?)\]\)", r"(\1)", str(theirs.value))
    return ours.value


BAD_CALLS = [
    lambda x: rearrange(x, "b c -> b c d"),
    lambda x: rearrange(x, "b c -> c b"),
    lambda x: rearrange(x, "b (c d) e -> b c d e", d=2),
    lambda x: rearrange(x, "b c d -> b c", c=3),
    lambda x: rearrange(x, "(b ...) -> b"),
    lambda x: rearrange(x, "b c d -> b c d ..."),
    lambda x: rearrange(x, "b c d -> b c (d 2)"),
    lambda x: rearrange(x, "b c d -> b c d", c=4),
    lambda x: reduce(x, "b c d -> b", "median"),
    lambda x: reduce(x, "b c d -> b e", "sum"),
    lambda x: repeat(x, "b c d -> b c d e"),
    lambda x: repeat(x, "b c d e -> b c d"),
    lambda x: einsum(x, x, "a b c, a b c -> d"),
    lambda x: einsum(x, "a b c"),
    lambda x: parse_shape(x, "a b"),
    lambda x: pack([x, x[0]], "a b c *"),
]


@pytest.mark.parametrize("call", BAD_CALLS, ids=range(len(BAD_CALLS)))
def test_bad_patterns_raise_einops_own_errors(call):
    values = RNG.standard_normal((2, 3, 4)).astype(np.float32)
    x = rg.tensor(values).requires_grad_()
    einops_failure(call, torch.tensor(values), x)
    # the tensor and its graph stay usable
    grads = rearrange(x * 3, "b c d -> d c b").sum().backward()
    np.testing.assert_array_equal(x.grad(grads).numpy(), np.full((2, 3, 4), 3.0))


def test_mean_of_an_integer_tensor_is_refused_as_for_torch():
    values = np.arange(24).reshape(2, 3, 4)
    error = einops_failure(
        lambda x: reduce(x, "a b c -> a", "mean"), torch.tensor(values), rg.tensor(values)
    )
    assert isinstance(error, NotImplementedError)


def test_pieces_that_do_not_pack_raise_retrograds_shape_error():
    with pytest.raises(rg.ShapeError, match="cat"):
        pack([rg.zeros(2, 3, 4), rg.zeros(3, 4)], "a *")


def test_shape_errors_are_einops_errors():
    with pytest.raises(EinopsError, match="can't divide axis of length 3"):
        rearrange(rg.zeros(2, 3), "b (c d) -> b c d", d=2)


def test_an_empty_list_is_refused_as_for_torch():
    with pytest.raises(TypeError, match="empty list"):
        rearrange([], "b c -> c b")


# -- the layers ----------------------------------------------------------------------------------

from einops.layers.retrograd import EinMix, Rearrange, Reduce  # noqa: E402


def test_the_layers_are_one_module_under_two_names():
    import retrograd.einops.layers as ours

    assert Rearrange is ours.Rearrange and Reduce is ours.Reduce and EinMix is ours.EinMix
    assert issubclass(Rearrange, rg.nn.Module)


def ported(torch_model: torch.nn.Module, model: rg.nn.Module) -> rg.nn.Module:
    """``model`` with ``torch_model``'s weights (state-dict keys must agree)."""
    state = torch_model.state_dict()
    assert list(model.state_dict()) == list(state)
    model.load_state_dict({k: rg.tensor(v.detach().numpy()) for k, v in state.items()})
    return model


def build(lib, layers):
    """A patch-embedding vision block as vit-pytorch writes it, in ``lib``'s modules."""
    nn = lib.nn
    return nn.Sequential(
        layers.Rearrange("b c (h p1) (w p2) -> b (h w) (p1 p2 c)", p1=2, p2=2),
        nn.LayerNorm(12),
        nn.Linear(12, 8),
        layers.EinMix(
            "b n (g d) -> b n g e", weight_shape="g d e", bias_shape="g e", g=2, d=4, e=3
        ),
        layers.Rearrange("b n g e -> b (g e) n"),
        layers.Reduce("b c (n n2) -> b c n", "max", n2=2),
        layers.Reduce("b c n -> b c", "mean"),
    )


def test_layers_in_a_sequential_train_as_torch():
    import retrograd.einops.layers as rg_layers

    torch.manual_seed(0)
    theirs = build(torch, torch_layers)
    ours = ported(theirs, build(rg, rg_layers))
    assert repr(ours) == repr(theirs)
    images = RNG.standard_normal((3, 3, 4, 8)).astype(np.float32)
    targets = RNG.standard_normal((3, 6)).astype(np.float32)
    t_opt = torch.optim.SGD(theirs.parameters(), lr=0.1)
    r_opt = rg.optim.SGD(ours.parameters(), lr=0.1)
    for _ in range(3):
        t_loss = ((theirs(torch.tensor(images)) - torch.tensor(targets)) ** 2).mean()
        t_opt.zero_grad()
        t_loss.backward()
        t_opt.step()
        r_loss = ((ours(rg.tensor(images)) - rg.tensor(targets)) ** 2).mean()
        r_opt.step(r_loss.backward())
        np.testing.assert_allclose(r_loss.item(), t_loss.item(), rtol=1e-5)
    for (name, p), (t_name, t_p) in zip(ours.named_parameters(), theirs.named_parameters()):
        assert name == t_name
        np.testing.assert_allclose(p.detach().numpy(), t_p.detach().numpy(), rtol=1e-4, atol=1e-6)


def test_einmix_draws_its_weights_in_torchs_bounds():
    rg.seed(0)
    mix = EinMix("b c -> b d", weight_shape="c d", bias_shape="d", c=100, d=50)
    theirs = torch_layers.EinMix("b c -> b d", weight_shape="c d", bias_shape="d", c=100, d=50)
    assert [(n, tuple(p.shape)) for n, p in mix.named_parameters()] == [
        (n, tuple(p.shape)) for n, p in theirs.named_parameters()
    ]
    for ours, reference in zip(mix.parameters(), theirs.parameters()):
        bound = float(reference.detach().abs().max())
        assert 0.9 * bound < float(ours.detach().abs().max()) <= bound * 1.1


def test_layers_copy_and_pickle():
    model = rg.nn.Sequential(Rearrange("b (h d) -> b h d", h=2), Reduce("b h d -> b d", "sum"))
    x = rg.tensor(RNG.standard_normal((2, 6)), dtype=rg.float32)
    for clone in (copy.deepcopy(model), pickle.loads(pickle.dumps(model))):
        assert repr(clone) == repr(model)
        np.testing.assert_array_equal(clone(x).numpy(), model(x).numpy())


def test_layer_errors_are_einops_own():
    with pytest.raises(EinopsError) as ours:
        Rearrange("b c -> b c d")
    with pytest.raises(EinopsError) as theirs:
        torch_layers.Rearrange("b c -> b c d")
    assert str(ours.value) == str(theirs.value)
    with pytest.raises(EinopsError):
        Reduce("b c -> b", "median")


def test_einops_torch_layers_given_to_modules_become_retrograds():
    """A port keeping ``from einops.layers.torch import ...``: a Module given one of those
    torch modules (attribute, container item, add_module) owns retrograd's layer instead."""
    torch.manual_seed(1)
    mix = torch_layers.EinMix("b n d -> b n e", weight_shape="d e", bias_shape="e", d=3, e=4)
    mix.eval()
    theirs = torch.nn.Sequential(
        torch_layers.Rearrange("b (n d) -> b n d", d=3),
        mix,
        torch_layers.Reduce("b n e -> b e", "max"),
    )

    class Holder(rg.nn.Module):
        def __init__(self):
            super().__init__()
            self.split = torch_layers.Rearrange("b (n d) -> b n d", d=3)
            self.layers = rg.nn.ModuleList([mix])
            self.add_module("pool", torch_layers.Reduce("b n e -> b e", "max"))

        def forward(self, x):
            return self.pool(self.layers[0](self.split(x)))

    values = RNG.standard_normal((2, 6)).astype(np.float32)
    expected = theirs(torch.tensor(values)).detach().numpy()
    for ours in (rg.nn.Sequential(*theirs), Holder()):
        assert all(isinstance(m, rg.nn.Module) for m in ours.children())
        assert [p.shape for p in ours.parameters()] == [p.shape for p in mix.parameters()]
        for (name, p), t in zip(ours.named_parameters(), mix.parameters()):
            np.testing.assert_array_equal(p.detach().numpy(), t.detach().numpy(), err_msg=name)
        np.testing.assert_allclose(ours(rg.tensor(values)).numpy(), expected, rtol=1e-6)
    # each keeps its training mode (mix was put in eval mode)
    assert [m.training for m in rg.nn.Sequential(*theirs).children()] == [True, False, True]
    assert not Holder().layers[0].training


def test_a_subclass_of_an_einops_torch_layer_is_not_converted():
    class Mine(torch_layers.Rearrange):
        pass

    with pytest.raises(rg.DTypeError, match="is not a Module: Mine"):
        rg.nn.Sequential(Mine("b c -> c b"))


def test_the_backend_reports_itself():
    backend = einops._backends.get_backend(rg.zeros(2))
    assert backend.framework_name == "retrograd"
    assert backend.layers().Rearrange is Rearrange
    assert einops._backends.get_backend(torch.zeros(2)).framework_name == "torch"
    assert backend.is_float_type(rg.zeros(2, dtype=rg.float64))
    assert not backend.is_float_type(rg.zeros(2, dtype=rg.int32))


# -- einops' own tests -----------------------------------------------------------------------------

#: einops' tests of imperative backends (shipped in its wheel, ``einops/tests``) that compare a
#: backend with NumPy; left out: those reading ``tensor.grad`` after ``backward()`` (torch's
#: form: retrograd's ``backward()`` returns the gradients, compared with torch's above) and
#: those naming the frameworks they run on.
EINOPS_OWN_TESTS = [
    ("test_ops", "test_ellipsis_ops_imperative"),
    ("test_ops", "test_reduction_imperatives"),
    ("test_ops", "test_reduction_stress_imperatives"),
    ("test_ops", "test_enumerating_directions"),
    ("test_ops", "test_concatenations_and_stacking"),
    ("test_ops", "test_tiling_imperatives"),
    ("test_ops", "test_repeat_imperatives"),
    ("test_ops", "test_reduction_imperatives_booleans"),
    ("test_packing", "test_pack_unpack_against_numpy"),
    ("test_einsum", "test_functional"),
]


@pytest.mark.parametrize(("module", "name"), EINOPS_OWN_TESTS)
def test_einops_own_tests_pass_on_retrograd(monkeypatch, module, name):
    """Each runs on retrograd's backend alone: einops' test helpers are patched to return it,
    and the test module is loaded privately (not into ``sys.modules``) under that patch."""
    from retrograd.einops.backend import RetrogradBackend

    # einops.tests silences two loggers of the process as it is imported: not for the others
    loggers = {log: logging.getLogger(log).disabled for log in ("tensorflow", "matplotlib")}
    import einops.tests as suite

    for logger, disabled in loggers.items():
        logging.getLogger(logger).disabled = disabled

    handed_out = []

    def retrograd_only(symbolic: bool = False, layers: bool = False) -> list:
        backends = [] if symbolic else [RetrogradBackend()]
        handed_out.extend(backends)
        return backends

    monkeypatch.setattr(suite, "collect_test_backends", retrograd_only)
    spec = importlib.util.find_spec(f"einops.tests.{module}")
    tests = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tests)
    if hasattr(tests, "valid_backends_functional"):  # einsum's tests name the frameworks
        tests.valid_backends_functional.append("retrograd")
    getattr(tests, name)()
    # the backends a test loops over: asked for at its call or, by test_ops, at its import
    assert handed_out, f"einops' {name} did not ask for a backend"
