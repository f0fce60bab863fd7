"""Gaps left by earlier rounds, each checked against torch 2.13 (the reference).

- ``nn.FractionalMaxPool2d``/``3d`` and ``F.fractional_max_pool2d``/``3d`` did not exist. Given
  ``_random_samples``, their windows, values and indices are torch's exactly (its
  ``generate_intervals`` sequence, the first maximum in row-major order, the last NaN of a
  window); the gradient goes to each maximum (checked against torch and against finite
  differences in float64).
- A lazy module (``LazyLinear``, ``LazyConv2d``, ``LazyBatchNorm1d``...) printed ``LazyLinear()``
  before its first call, where torch prints ``LazyLinear(in_features=0, out_features=4,
  bias=True)``; its parameters were plain empty ``Parameter``s that counted as 0 elements. They
  are ``nn.parameter.UninitializedParameter`` objects now (the state dict holds them as torch's
  does), ``numel()`` of one raises, and the same object becomes a ``Parameter`` on the first call.
- ``F.unfold`` of an input whose result no machine holds sliced for minutes before failing; it,
  ``fold``, ``repeat`` and ``expand(...).contiguous()`` (which returned a tensor claiming a
  shape of terabytes) raise an ``OutOfMemoryError`` naming the op and the result's shape first.
- Sizes, counts and dims given as 0-d int64 tensors (``rg.linspace(0, 1, steps=rg.tensor(5))``,
  ``t.split(rg.tensor(2))``, ``t.sum(rg.tensor(0))``...) were refused; they are read as torch
  reads them, and a 0-d float tensor is refused with a ``DTypeError`` (a ``TypeError``, as
  torch's).
- Real-port test files (54 to 60) seeded nothing, so their results followed what the xdist
  worker ran before; ``tensor.selection`` imported a private helper of ``tensor.indexing``.
"""

from __future__ import annotations

import ast
import pathlib

import numpy as np
import pytest
import torch
import torch.nn.functional as TF  # noqa: N812

import retrograd as rg
import retrograd.nn.functional as F  # noqa: N812

TESTS = pathlib.Path(__file__).parent


# -- fractional max pooling ------------------------------------------------------------------------
def _input(rng, shape, dtype, ties=False, nans=0):
    x = rng.standard_normal(shape).astype(dtype)
    if ties:
        x = np.round(x)
    if nans:
        x.flat[rng.choice(x.size, nans, replace=False)] = np.nan
    return x


FRACTIONAL_CASES = [
    # (spatial, input shape, kernel, output size, dtype, ties, nans, extra sample rows)
    (2, (2, 3, 9, 7), 2, (4, 3), np.float32, False, 0, 0),
    (2, (2, 3, 9, 7), (3, 2), (5, 6), np.float64, True, 0, 1),
    (2, (3, 8, 8), 3, 4, np.float32, False, 0, 0),  # unbatched
    (2, (1, 2, 6, 6), 2, (3, 3), np.float32, False, 4, 0),  # NaNs: torch keeps the last
    (2, (1, 1, 11, 10), 1, (10, 9), np.float64, False, 0, 0),
    (3, (2, 2, 7, 6, 8), 2, (3, 2, 4), np.float32, False, 0, 0),
    (3, (1, 2, 6, 7, 5), (2, 3, 1), (3, 3, 4), np.float64, True, 0, 2),
    (3, (2, 5, 5, 6), 2, 2, np.float32, False, 0, 0),  # unbatched
]


@pytest.mark.parametrize("case", FRACTIONAL_CASES, ids=lambda c: f"{c[0]}d-{c[1]}-{c[2]}")
def test_fractional_max_pool_with_samples_is_torchs_exactly(case):
    spatial, shape, kernel, out, dtype, ties, nans, extra = case
    rng = np.random.default_rng(sum(shape))
    x = _input(rng, shape, dtype, ties, nans)
    batch = shape[0] if len(shape) == spatial + 2 else 1
    channels = shape[-spatial - 1]
    samples = rng.random((batch + extra, channels, spatial)).astype(dtype)
    name = f"fractional_max_pool{spatial}d"
    expected = getattr(TF, name)(
        torch.tensor(x), kernel, output_size=out, return_indices=True,
        _random_samples=torch.tensor(samples),
    )  # fmt: skip
    got = getattr(F, name)(
        rg.tensor(x), kernel, output_size=out, return_indices=True,
        _random_samples=rg.tensor(samples),
    )  # fmt: skip
    np.testing.assert_array_equal(got[0].numpy(), expected[0].numpy())  # (NaNs in place)
    assert got[1].dtype == rg.int64
    np.testing.assert_array_equal(got[1].numpy(), expected[1].numpy())


@pytest.mark.parametrize("spatial", [2, 3])
def test_fractional_max_pool_gradient_is_torchs(spatial):
    rng = np.random.default_rng(spatial)
    shape = (2, 2, 9, 8) if spatial == 2 else (2, 2, 7, 6, 8)
    out = (4, 4) if spatial == 2 else (3, 3, 4)
    x = _input(rng, shape, np.float32, ties=True)  # ties: the first maximum gets it
    samples = rng.random((2, 2, spatial)).astype(np.float32)
    weights = rng.standard_normal((2, 2, *out)).astype(np.float32)
    name = f"fractional_max_pool{spatial}d"
    xt = torch.tensor(x, requires_grad=True)
    out_t = getattr(TF, name)(xt, 3, output_size=out, _random_samples=torch.tensor(samples))
    (out_t * torch.tensor(weights)).sum().backward()
    xr = rg.tensor(x).require_grad()
    out_r = getattr(F, name)(xr, 3, output_size=out, _random_samples=rg.tensor(samples))
    grads = (out_r * rg.tensor(weights)).sum().backward()
    np.testing.assert_allclose(xr.grad(grads).numpy(), xt.grad.numpy(), rtol=1e-6, atol=1e-6)


def test_fractional_max_pool_gradient_matches_finite_differences_in_float64():
    rng = np.random.default_rng(7)
    x = rng.permutation(2 * 8 * 7).reshape(1, 2, 8, 7) / 10.0  # distinct: a stable argmax
    samples = rg.tensor(rng.random((1, 2, 2)))
    weights = rng.standard_normal((1, 2, 4, 3))

    def loss(values):
        pooled = F.fractional_max_pool2d(
            values, (2, 3), output_size=(4, 3), _random_samples=samples
        )
        return (pooled * rg.tensor(weights)).sum()

    xr = rg.tensor(x).require_grad()
    analytic = xr.grad(loss(xr).backward()).numpy()
    numeric = np.zeros_like(x)
    eps = 1e-6
    for index in np.ndindex(x.shape):
        up, down = x.copy(), x.copy()
        up[index] += eps
        down[index] -= eps
        numeric[index] = (loss(rg.tensor(up)).item() - loss(rg.tensor(down)).item()) / (2 * eps)
    np.testing.assert_allclose(analytic, numeric, atol=1e-6)
    assert np.count_nonzero(analytic) > 0


def test_fractional_max_pool_output_ratio_and_the_modules_are_torchs():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 3, 10, 9)).astype(np.float32)
    samples = rng.random((2, 3, 2)).astype(np.float32)
    torch_pool = torch.nn.FractionalMaxPool2d(
        3, output_ratio=(0.5, 0.6), return_indices=True, _random_samples=torch.tensor(samples)
    )
    pool = rg.nn.FractionalMaxPool2d(
        3, output_ratio=(0.5, 0.6), return_indices=True, _random_samples=rg.tensor(samples)
    )
    expected, got = torch_pool(torch.tensor(x)), pool(rg.tensor(x))
    assert got[0].shape == tuple(expected[0].shape) == (2, 3, 5, 5)
    np.testing.assert_array_equal(got[0].numpy(), expected[0].numpy())
    np.testing.assert_array_equal(got[1].numpy(), expected[1].numpy())
    assert list(pool.state_dict()) == list(torch_pool.state_dict()) == ["_random_samples"]
    assert repr(pool) == repr(torch_pool) == "FractionalMaxPool2d()"
    # the functional form with one ratio for both dimensions
    values = F.fractional_max_pool2d(
        rg.tensor(x), 2, output_ratio=0.5, _random_samples=rg.tensor(samples)
    )
    expected = TF.fractional_max_pool2d(
        torch.tensor(x), 2, output_ratio=(0.5, 0.5), _random_samples=torch.tensor(samples)
    )
    np.testing.assert_array_equal(values.numpy(), expected.numpy())
    # 3-d: a module without samples draws its own; the values are maxima of the input
    x3 = rg.tensor(rng.standard_normal((1, 2, 6, 7, 8)).astype(np.float32))
    rg.manual_seed(0)
    values, indices = rg.nn.FractionalMaxPool3d(2, output_size=(3, 4, 5), return_indices=True)(x3)
    assert values.shape == indices.shape == (1, 2, 3, 4, 5)
    flat = x3.reshape((1, 2, -1)).gather(2, indices.reshape((1, 2, -1)))
    np.testing.assert_array_equal(flat.numpy().ravel(), values.numpy().ravel())


def test_fractional_max_pool_refuses_what_torch_refuses():
    x = rg.ones((1, 2, 7, 7))
    samples = rg.rand(1, 2, 2)
    with pytest.raises(rg.ShapeError, match="fractional_max_pool2d: kernel size 3 too large"):
        F.fractional_max_pool2d(x, 3, output_size=(6, 3), _random_samples=samples)
    with pytest.raises(rg.ShapeError, match="fractional_max_pool3d"):  # torch's strict bound
        F.fractional_max_pool3d(rg.ones((1, 1, 4, 4, 4)), 2, output_size=3)
    with pytest.raises(rg.DTypeError, match="dtype"):
        F.fractional_max_pool2d(x, 2, output_size=3, _random_samples=samples.double())
    with pytest.raises(rg.ShapeError, match=r"_random_samples must be \[N, C, 2\]"):
        F.fractional_max_pool2d(x, 2, output_size=3, _random_samples=rg.rand(1, 3, 2))
    with pytest.raises(ValueError, match="output_size or an output_ratio"):
        F.fractional_max_pool2d(x, 2)
    with pytest.raises(ValueError, match="between 0 and 1"):
        rg.nn.FractionalMaxPool2d(2, output_ratio=1.5)
    with pytest.raises(ValueError, match="only one of output_size and output_ratio"):
        rg.nn.FractionalMaxPool3d(2, output_size=2, output_ratio=0.5)
    with pytest.raises(rg.DTypeError, match="float"):
        F.fractional_max_pool2d(rg.ones((1, 2, 7, 7), dtype=rg.int64), 2, output_size=3)


# -- lazy modules before their first call ----------------------------------------------------------
LAZY_BUILDERS = [
    lambda nn: nn.LazyLinear(4),
    lambda nn: nn.LazyLinear(4, bias=False),
    lambda nn: nn.LazyConv2d(8, 3),
    lambda nn: nn.LazyConv1d(2, 3, stride=2),
    lambda nn: nn.LazyConvTranspose2d(3, 2),
    lambda nn: nn.LazyBatchNorm1d(),
    lambda nn: nn.LazyBatchNorm2d(momentum=0.2),
    lambda nn: nn.LazyInstanceNorm2d(),
    lambda nn: nn.Sequential(nn.LazyLinear(3), nn.ReLU()),
]


@pytest.mark.parametrize("build", LAZY_BUILDERS)
def test_a_lazy_module_prints_and_lists_its_state_as_torchs(build):
    ours, theirs = build(rg.nn), build(torch.nn)
    assert repr(ours) == repr(theirs)

    def kinds(module):
        return [(name, type(p).__name__) for name, p in module.named_parameters()]

    assert kinds(ours) == kinds(theirs)
    # the state's names and kinds (count buffers aside: torch keeps them a Tensor)
    state, expected = ours.state_dict(), theirs.state_dict()
    assert list(state) == list(expected)
    for key, value in expected.items():
        if type(value).__name__.startswith("Uninitialized"):
            assert type(state[key]).__name__ == type(value).__name__


def test_counting_a_lazy_modules_parameters_raises_and_the_first_call_builds_them():
    rg.manual_seed(0)
    layer = rg.nn.LazyLinear(4)
    weight = layer.weight
    assert isinstance(weight, rg.nn.parameter.UninitializedParameter)
    assert isinstance(weight, rg.nn.Parameter) and rg.nn.parameter.is_lazy(weight)
    assert repr(weight) == repr(torch.nn.LazyLinear(4).weight) == "<UninitializedParameter>"
    with pytest.raises(ValueError, match="numel: attempted to use an UninitializedParameter"):
        sum(p.numel() for p in layer.parameters())
    # what code does to skip them, as with torch
    assert sum(p.numel() for p in layer.parameters() if not rg.nn.parameter.is_lazy(p)) == 0
    printed = repr(layer)  # printing draws nothing from the generator
    layer(rg.ones((2, 3)))
    assert layer.weight is weight and type(weight) is rg.nn.Parameter
    assert repr(layer) == "Linear(in_features=3, out_features=4, bias=True)"
    assert sum(p.numel() for p in layer.parameters()) == 16
    # building and printing the lazy layer drew nothing: its weights are the eager layer's
    rg.manual_seed(0)
    np.testing.assert_array_equal(rg.nn.Linear(3, 4).weight.numpy(), weight.numpy())
    assert printed == "LazyLinear(in_features=0, out_features=4, bias=True)"


def test_a_lazy_module_has_torchs_attributes_before_its_first_call():
    for build in (lambda nn: nn.LazyLinear(4), lambda nn: nn.LazyConv2d(8, 3, padding=1)):
        ours, theirs = build(rg.nn), build(torch.nn)
        for name in ("in_features", "out_features", "in_channels", "kernel_size", "padding"):
            assert getattr(ours, name, None) == getattr(theirs, name, None), name
    norm = rg.nn.LazyBatchNorm2d(eps=1e-3)
    assert (norm.num_features, norm.eps) == (0, 1e-3)


def test_an_unbuilt_lazy_state_loads_into_an_unbuilt_lazy_module():
    state = rg.nn.LazyLinear(4).state_dict()
    target = rg.nn.LazyLinear(4)
    target.load_state_dict(state)
    assert rg.nn.parameter.is_lazy(target.weight)
    target(rg.ones((1, 5)))
    assert target.weight.shape == (4, 5)


# -- results no machine holds ----------------------------------------------------------------------
def _refused(op, call, result_shape):
    with pytest.raises(rg.OutOfMemoryError) as info:
        call()
    assert isinstance(info.value, MemoryError)
    message = str(info.value)
    assert op in message and result_shape in message, message


def test_unfold_of_an_enormous_result_fails_first():
    # an input of 16 MB expanded to a batch of 1000: the result would be 3.65 PB
    x = rg.zeros((1, 1, 2000, 2000)).expand((1000, 1, 2000, 2000))
    _refused("unfold", lambda: F.unfold(x, kernel_size=1000), "[1000, 1000000, 1002001]")
    _refused("unfold", lambda: rg.nn.Unfold(1000)(x), "[1000, 1000000, 1002001]")
    # torch's fold of one block into a canvas of 10**17 cells
    _refused(
        "fold",
        lambda: F.fold(rg.ones((1, 1, 1)), (10**9, 10**8), 1, stride=(10**9, 10**8)),
        "[1, 1, 1000000000, 100000000]",
    )


def test_repeat_and_a_contiguous_expand_of_an_enormous_result_fail_first():
    _refused("repeat", lambda: rg.ones(3).repeat(10**9, 10**8), "[1000000000, 300000000]")
    huge = rg.ones((1, 1)).expand((10**9, 10**8))  # (a view: nothing allocated yet)
    _refused("contiguous", huge.contiguous, "[1000000000, 100000000]")
    assert rg.ones((1, 2)).expand((3, 2)).contiguous().tolist() == [[1.0, 1.0]] * 3


# -- sizes given as 0-d int tensors ----------------------------------------------------------------
def _cases(lib, functional):
    def k(n):
        return lib.tensor(n)

    t = lib.arange(12.0).reshape(3, 4)
    v = lib.arange(6.0)
    labels = lib.tensor([0, 2, 1])
    return {
        "linspace": lambda: lib.linspace(0, 1, steps=k(5)),
        "logspace": lambda: lib.logspace(0, 1, steps=k(4)),
        "split": lambda: v.split(k(2)),
        "chunk": lambda: v.chunk(k(2)),
        "view": lambda: t.view(k(2), -1),
        "arange": lambda: lib.arange(k(5)),
        "narrow": lambda: t.narrow(k(0), k(1), k(2)),
        "repeat": lambda: v.repeat(k(2)),
        "one_hot": lambda: functional.one_hot(labels, num_classes=k(3)),
        "topk": lambda: v.topk(k=k(2)),
        "sum": lambda: t.sum(k(0)),
        "std": lambda: t.std(k(1)),
        "roll": lambda: v.roll(k(2)),
        "tril": lambda: t.tril(k(1)),
        "movedim": lambda: t.movedim(k(0), k(1)),
        "flip": lambda: t.flip(k(0)),
        "squeeze": lambda: v[None].squeeze(k(0)),
        "repeat_interleave": lambda: v.repeat_interleave(k(2)),
        "tensor_split": lambda: v.tensor_split(k(4)),
        "pad": lambda: functional.pad(t, (k(1), k(2))),
        "vander": lambda: lib.vander(v, N=k(3)),
        "diag_embed": lambda: lib.diag_embed(v, k(1)),
        "randperm": lambda: lib.randperm(k(4)).shape,
        "randint": lambda: lib.randint(k(5), (k(2),)).shape,
        "multinomial": lambda: lib.multinomial(lib.ones(4), k(2)).shape,
        "adaptive_avg_pool1d": lambda: functional.adaptive_avg_pool1d(t[None], k(2)),
        "zeros": lambda: lib.zeros(k(2), k(3)),
        "eye": lambda: lib.eye(k(3)),
        "unfold": lambda: v.unfold(0, k(2), k(1)),
    }


def _plain(value):
    if isinstance(value, tuple | list) and not isinstance(value, torch.Size):
        return [_plain(v) for v in value]
    if hasattr(value, "numpy"):
        return np.asarray(value.numpy()).tolist()
    return list(value) if isinstance(value, tuple | torch.Size) else value


@pytest.mark.parametrize("name", sorted(_cases(torch, TF)))
def test_a_0d_int_tensor_is_taken_for_a_size_as_torch_takes_it(name):
    expected = _plain(_cases(torch, TF)[name]())
    got = _plain(_cases(rg, F)[name]())
    if name == "topk":
        expected, got = expected[0], got[0]
    assert got == expected


@pytest.mark.parametrize(
    "call",
    [
        lambda lib: lib.zeros(lib.tensor(2.0)),
        lambda lib: lib.arange(12.0).view(lib.tensor(2.0), -1),
        lambda lib: lib.linspace(0, 1, steps=lib.tensor(5.0)),
        lambda lib: lib.arange(6.0).topk(k=lib.tensor(2.0)),
        lambda lib: lib.arange(6.0).chunk(lib.tensor(2.0)),
        lambda lib: lib.arange(6.0).sum(lib.tensor(0.0)),
        lambda lib: lib.eye(lib.tensor(3.0)),
    ],
)
def test_a_0d_float_tensor_is_refused_for_a_size_as_torch_refuses_it(call):
    with pytest.raises(TypeError):
        call(torch)
    with pytest.raises(rg.DTypeError, match="must be an int"):
        call(rg)


# -- test hygiene and layout -----------------------------------------------------------------------
@pytest.mark.parametrize(
    "name",
    [
        "test_real_ports_54.py",
        "test_real_ports_55.py",
        "test_real_ports_56.py",
        "test_real_ports_57.py",
        "test_real_ports_58.py",
        "test_real_ports_59.py",
        "test_real_ports_60.py",
        "test_burn_tensor_ports_10.py",
    ],
)
def test_real_port_files_seed_every_test(name):
    """Their draws (torch's initial weights, the programs' data) come from fixed seeds, so the
    results do not depend on what the xdist worker ran before: an autouse fixture seeds, of
    their own or the port harness's ``seeded_draws`` imported (autouse where it is imported)."""
    tree = ast.parse((TESTS / name).read_text(encoding="utf-8"))
    seeding = [
        alias.name
        for node in tree.body
        if isinstance(node, ast.ImportFrom) and node.module == "real_ports"
        for alias in node.names
        if alias.name == "seeded_draws"
    ]
    for node in tree.body:
        if not isinstance(node, ast.FunctionDef):
            continue
        autouse = any(
            isinstance(d, ast.Call) and any(kw.arg == "autouse" for kw in d.keywords)
            for d in node.decorator_list
        )
        calls = {ast.unparse(c.func) for c in ast.walk(node) if isinstance(c, ast.Call)}
        if autouse and "rg.seed" in calls:
            seeding.append(node.name)
    assert seeding, f"{name} has no autouse fixture seeding the generators"


def test_the_same_dtype_check_has_one_shared_home():
    from retrograd.tensor import _dispatch, indexing, selection

    assert not hasattr(indexing, "_same_dtype")
    assert selection.check_same_dtype is _dispatch.check_same_dtype
    assert indexing.check_same_dtype is _dispatch.check_same_dtype
    x = rg.zeros(3)
    with pytest.raises(rg.DTypeError, match=r"scatter_reduce: self .float32. and source .float64"):
        x.scatter_reduce(0, rg.tensor([0, 1]), rg.ones(2, dtype=rg.float64), "sum")
    assert x.tolist() == [0.0, 0.0, 0.0]
