"""Gaps left by earlier rounds, each checked against torch 2.13 (the reference).

- ``gather``/``scatter``/``scatter_add``/``scatter_reduce`` with an index of no entries but
  another shape than the input's (``rg.zeros(3, 2).gather(1, rg.zeros(4, 0, dtype=rg.int64))``)
  raised a ``ShapeError``; torch checks neither the shape nor the dtype of an empty index:
  gather returns an empty tensor of the index's shape, scatter a copy of the input.
- ``rg.linalg.cond`` of empty matrices raised an index error; torch returns 0 for each (untracked,
  of the batch shape), after its check of the order (and of squareness for "fro"/"nuc").
- ``batch_norm``/``layer_norm``/``group_norm``/``instance_norm`` (and their modules) cast
  parameters of another dtype (a float32 ``InstanceNorm1d`` on a float64 input); torch refuses
  such mixes on its CPU ("mixed dtype"): a ``DTypeError`` naming the op and both dtypes now.
  torch's exceptions are kept: float32 parameters for a half input, instance_norm's running
  statistics, an empty batch for batch/instance norm, and rms_norm.
- ``x.bernoulli(0.3)`` (a number) of a tensor that requires grad was untracked; torch records
  it on ``x`` and its backward raises: ours is tracked and its backward raises an
  ``AutodiffError`` naming bernoulli.
- ``rg.save(obj, path)`` where ``path`` is a link of a loop of symbolic links replaced the link
  with a file; torch's save fails: an ``OSError`` (``ELOOP``) now, the links left alone.
- ``rg.load(f, map_location="meta")`` (or ``"mps"``, ``"xpu"``) returned tensors labelled
  ``meta:0`` holding data; a device no backend here computes on is refused now (torch raises
  for mps/xpu on a CPU machine; its meta tensors hold no data, which nothing here models).
- ``rg.load(f, map_location=lambda storage, loc: storage)`` was refused; a function is called
  as torch calls it, ``(storage, "cpu")``, with each tensor, and may return it moved or
  ``None``; its own errors reach the caller as raised (not as a "damaged file").
- ``DistributedDataParallel(cpu_module, device_ids=[rank])`` was accepted; torch refuses
  ``device_ids``/``output_device`` for a module not on one GPU, and more than one device id.
- ``torch.histogram`` (bins as a count or a tensor of edges, ``range``, ``weight``,
  ``density``; ``(hist, bin_edges)``) did not exist; ``rg.histogram``/``x.histogram`` give
  torch's values to the bit (edges from torch's linspace, the last bin closed).
- ``torch.geqrf``, ``torch.orgqr`` and ``torch.ormqr`` (and their Tensor methods) did not
  exist: geqrf is LAPACK's (recorded, its backward refuses, as torch's), orgqr is
  ``linalg.householder_product``, ormqr multiplies by the full ``Q`` (values and gradients
  checked against torch).
- A lazy module's ``UninitializedParameter`` answered ``.shape`` with ``(0,)``; torch raises
  (``size()`` still answers ``[0]``), so ours raises an ``UninitializedError``; ``assign`` and
  ``load_state_dict`` read the placeholder's ``size()``, so ``.to()`` and loading an unbuilt
  state keep working.
"""

from __future__ import annotations

import errno
import os

import numpy as np
import pytest
import torch

import retrograd as rg
from retrograd.errors import UninitializedError

# -- gather/scatter with an empty index ------------------------------------------------------------
EMPTY_INDEX_SHAPES = [(4, 0), (0, 5), (0,), (0, 2, 3)]


@pytest.mark.parametrize("shape", EMPTY_INDEX_SHAPES)
def test_gather_with_an_empty_index_of_any_shape(shape):
    weights = np.arange(6.0).reshape(3, 2)
    xt = torch.tensor(weights, requires_grad=True)
    out_t = xt.gather(1, torch.zeros(shape, dtype=torch.int64))
    out_t.sum().backward()
    xr = rg.tensor(weights, requires_grad=True)
    out_r = xr.gather(1, rg.zeros(*shape, dtype=rg.int64))
    assert out_r.shape == tuple(out_t.shape)
    assert out_r.dtype == rg.float64
    np.testing.assert_array_equal(xr.grad(out_r.sum().backward()).numpy(), xt.grad.numpy())


def test_gather_with_an_empty_index_keeps_the_dim_check():
    with pytest.raises(rg.ShapeError, match="gather: dimension 5"):
        rg.zeros(3, 2).gather(5, rg.zeros(4, 0, dtype=rg.int64))


@pytest.mark.parametrize("shape", EMPTY_INDEX_SHAPES)
@pytest.mark.parametrize("op", ["scatter", "scatter_add"])
def test_scatter_with_an_empty_index_is_a_copy(op, shape):
    weights = np.arange(6.0).reshape(3, 2)
    scale = np.linspace(1.0, 2.0, 6).reshape(3, 2)
    xt = torch.tensor(weights, requires_grad=True)
    src_t = torch.ones(shape, dtype=torch.float64, requires_grad=True)
    out_t = getattr(xt, op)(1, torch.zeros(shape, dtype=torch.int64), src_t)
    (out_t * torch.tensor(scale)).sum().backward()
    xr = rg.tensor(weights, requires_grad=True)
    src_r = rg.ones(*shape, dtype=rg.float64, requires_grad=True)
    out_r = getattr(xr, op)(1, rg.zeros(*shape, dtype=rg.int64), src_r)
    np.testing.assert_array_equal(out_r.numpy(), out_t.detach().numpy())
    grads = (out_r * rg.tensor(scale)).sum().backward()
    np.testing.assert_array_equal(xr.grad(grads).numpy(), xt.grad.numpy())
    np.testing.assert_array_equal(src_r.grad(grads).numpy(), src_t.grad.numpy())


@pytest.mark.parametrize("reduce", ["sum", "prod", "mean", "amax", "amin"])
def test_scatter_reduce_with_an_empty_index(reduce):
    weights = np.arange(6.0).reshape(3, 2)
    expected = torch.tensor(weights).scatter_reduce(
        1, torch.zeros(4, 0, dtype=torch.int64), torch.ones(5, 5, 5, dtype=torch.float64), reduce
    )
    out = rg.tensor(weights).scatter_reduce(
        1, rg.zeros(4, 0, dtype=rg.int64), rg.ones(5, 5, 5, dtype=rg.float64), reduce
    )
    np.testing.assert_array_equal(out.numpy(), expected.numpy())


def test_scatter_of_a_value_with_an_empty_index():
    expected = torch.arange(6.0).reshape(3, 2).scatter(1, torch.zeros(0, 3, dtype=torch.int64), 7.0)
    out = rg.arange(6.0).reshape(3, 2).scatter(1, rg.zeros(0, 3, dtype=rg.int64), 7.0)
    np.testing.assert_array_equal(out.numpy(), expected.numpy())


# -- linalg.cond of empty matrices -----------------------------------------------------------------
COND_ORDERS = [None, 2, -2, "fro", "nuc", 1, -1, float("inf"), float("-inf")]


@pytest.mark.parametrize("shape", [(0, 0), (2, 0, 0), (0, 3, 3), (0, 3)])
@pytest.mark.parametrize("p", COND_ORDERS)
def test_cond_of_empty_matrices(shape, p):
    try:
        expected = torch.linalg.cond(torch.zeros(shape, dtype=torch.float64), p)
    except RuntimeError:  # torch checks squareness first for the string orders
        with pytest.raises(rg.ShapeError, match=r"linalg\.cond: A must be batches of square"):
            rg.linalg.cond(rg.zeros(*shape, dtype=rg.float64), p)
        return
    out = rg.linalg.cond(rg.zeros(*shape, dtype=rg.float64, requires_grad=True), p)
    assert out.shape == tuple(expected.shape)
    assert out.dtype == rg.float64
    assert out.requires_grad == expected.requires_grad
    np.testing.assert_array_equal(out.numpy(), expected.numpy())


def test_cond_of_an_empty_matrix_still_checks_the_order():
    with pytest.raises(rg.InvalidArgumentError, match=r"linalg\.cond: order 3 is not supported"):
        rg.linalg.cond(rg.zeros(0, 0), 3)


# -- normalizations refuse parameters of another dtype ---------------------------------------------
def _norm_calls(module, weight, bias, running_mean, running_var):
    return {
        "batch_norm": lambda x: module.batch_norm(
            x, running_mean, running_var, weight, bias, training=True
        ),
        "batch_norm (eval)": lambda x: module.batch_norm(x, running_mean, running_var, weight),
        "layer_norm": lambda x: module.layer_norm(x, (4,), None, bias[:1].expand(4)),
        "group_norm": lambda x: module.group_norm(x, 3, weight, bias),
        "instance_norm": lambda x: module.instance_norm(x, weight=weight),
    }


@pytest.mark.parametrize(
    "name", ["batch_norm", "batch_norm (eval)", "layer_norm", "group_norm", "instance_norm"]
)
def test_normalization_refuses_parameters_of_another_dtype(name):
    rng = np.random.default_rng(3)
    values = rng.standard_normal((2, 3, 4))
    torch_call = _norm_calls(
        torch.nn.functional, torch.ones(3), torch.zeros(3), torch.zeros(3), torch.ones(3)
    )[name]
    with pytest.raises(RuntimeError, match="mixed dtype"):
        torch_call(torch.tensor(values))
    rg_call = _norm_calls(rg.nn.functional, rg.ones(3), rg.zeros(3), rg.zeros(3), rg.ones(3))[name]
    op = name.split()[0]
    with pytest.raises(
        rg.DTypeError, match=rf"{op}: mixed dtypes: the input is float64 but \w+ is float32"
    ):
        rg_call(rg.tensor(values))


def test_instance_norm_module_refuses_a_float64_input_with_float32_weights():
    values = np.random.default_rng(4).standard_normal((2, 3, 5))
    with pytest.raises(RuntimeError, match="mixed dtype"):
        torch.nn.InstanceNorm1d(3, affine=True)(torch.tensor(values))
    with pytest.raises(rg.DTypeError, match="instance_norm: mixed dtypes"):
        rg.nn.InstanceNorm1d(3, affine=True)(rg.tensor(values))


def test_normalization_mixes_torch_accepts():
    """torch casts instance_norm's running statistics, returns an empty batch before its check,
    and rms_norm takes a weight of any float dtype."""
    values = np.random.default_rng(5).standard_normal((2, 3, 4))
    F = rg.nn.functional  # noqa: N806
    TF = torch.nn.functional  # noqa: N806
    for use_input_stats in (True, False):
        expected = TF.instance_norm(
            torch.tensor(values), torch.zeros(3), torch.ones(3), use_input_stats=use_input_stats
        )
        out = F.instance_norm(
            rg.tensor(values), rg.zeros(3), rg.ones(3), use_input_stats=use_input_stats
        )
        np.testing.assert_allclose(out.numpy(), expected.numpy(), rtol=1e-6, atol=1e-6)
    empty = F.batch_norm(rg.zeros(0, 3, 4, dtype=rg.float64), None, None, rg.ones(3), training=True)
    assert empty.shape == (0, 3, 4)
    expected = TF.rms_norm(torch.tensor(values), (4,), torch.full((4,), 2.0))
    out = F.rms_norm(rg.tensor(values), (4,), rg.full((4,), 2.0))
    np.testing.assert_allclose(out.numpy(), expected.numpy(), rtol=1e-6)


# -- bernoulli(p) of a tensor that requires grad --------------------------------------------------
@pytest.mark.parametrize("call", ["method", "function", "keyword"])
def test_bernoulli_of_a_number_is_tracked_and_its_backward_refuses(call):
    forms = {
        "method": lambda module, x: x.bernoulli(0.3),
        "function": lambda module, x: module.bernoulli(x, 0.3),
        "keyword": lambda module, x: module.bernoulli(x, p=0.3),
    }
    xt = torch.full((3,), 0.5, requires_grad=True)
    out_t = forms[call](torch, xt)
    with pytest.raises(RuntimeError, match="derivative for aten::bernoulli is not implemented"):
        out_t.sum().backward()
    rg.manual_seed(0)
    xr = rg.full((3,), 0.5, requires_grad=True)
    out_r = forms[call](rg, xr)
    assert out_r.requires_grad == out_t.requires_grad
    assert set(out_r.tolist()) <= {0.0, 1.0}
    with pytest.raises(rg.AutodiffError, match=r"bernoulli: the derivative .* is not implemented"):
        (out_r * 2.0).sum().backward()
    assert xr.bernoulli().requires_grad  # (a draw of the tensor's own probabilities: zero grad)
    with rg.no_grad():
        assert not xr.bernoulli(0.3).requires_grad
    assert not rg.full((3,), 0.5).bernoulli(0.3).requires_grad


# -- save through a loop of symbolic links ---------------------------------------------------------
def test_save_through_a_loop_of_links_raises_and_leaves_the_links(tmp_path):
    first, second = tmp_path / "a.pt", tmp_path / "b.pt"
    first.symlink_to(second.name)
    second.symlink_to(first.name)
    with pytest.raises(RuntimeError, match="Too many levels of symbolic links"):
        torch.save({"x": torch.ones(2)}, first)
    with pytest.raises(OSError, match="Too many levels of symbolic links") as caught:
        rg.save({"x": rg.ones(2)}, first)
    assert caught.value.errno == errno.ELOOP
    assert first.is_symlink() and second.is_symlink()
    assert os.readlink(first) == second.name
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.pt", "b.pt"]


def test_save_through_a_dangling_link_writes_its_target(tmp_path):
    link = tmp_path / "latest.pt"
    link.symlink_to("run.pt")
    rg.save({"x": rg.ones(2)}, link)
    assert link.is_symlink()
    assert rg.load(tmp_path / "run.pt")["x"].tolist() == [1.0, 1.0]


# -- load's map_location: devices no backend computes on, and functions ----------------------------
def _saved(tmp_path):
    weights = rg.tensor([1.0, 2.0])
    weights.require_grad()
    path = tmp_path / "state.pt"
    rg.save({"w": weights, "steps": rg.arange(3), "n": 3}, path)
    return path


@pytest.mark.parametrize("location", ["meta", "mps", "xpu"])
def test_load_refuses_a_device_no_backend_computes_on(tmp_path, location):
    # torch on a CPU-only machine: "mps" and "xpu" raise; "meta" gives data-less tensors,
    # which nothing here has: refused rather than labelled meta while holding data
    torch.save({"w": torch.ones(2)}, tmp_path / "torch.pt")
    if location != "meta":
        with pytest.raises(RuntimeError):
            torch.load(tmp_path / "torch.pt", map_location=location)
    path = _saved(tmp_path)
    with pytest.raises(rg.InvalidArgumentError, match=rf"load: map_location=.*{location}"):
        rg.load(path, map_location=location)
    with pytest.raises(rg.InvalidArgumentError, match=rf"load: map_location=.*{location}"):
        rg.load(path, map_location={"cpu": location})
    assert rg.load(path, map_location="cpu")["w"].tolist() == [1.0, 2.0]


def test_load_with_a_map_location_function(tmp_path):
    torch.save({"w": torch.tensor([1.0, 2.0]), "n": 3}, tmp_path / "torch.pt")
    seen = []

    def record(storage, location):
        seen.append(location)
        return storage

    expected = torch.load(tmp_path / "torch.pt", map_location=record)
    assert seen == ["cpu"]
    assert expected["w"].tolist() == [1.0, 2.0]
    path = _saved(tmp_path)
    seen.clear()
    for function in (record, lambda storage, location: None, lambda s, loc: s.cpu()):
        loaded = rg.load(path, map_location=function)
        assert loaded["w"].tolist() == [1.0, 2.0] and loaded["w"].requires_grad
        assert loaded["steps"].tolist() == [0, 1, 2] and loaded["n"] == 3
    assert seen == ["cpu", "cpu"]


def test_load_with_a_map_location_function_that_fails(tmp_path):
    path = _saved(tmp_path)
    if rg.ones(1).device.type != "cuda":  # the CPU backends: a clear error, not "damaged"
        with pytest.raises(rg.DTypeError, match="cuda"):
            rg.load(path, map_location=lambda storage, location: storage.cuda(0))
    with pytest.raises(ZeroDivisionError):  # the function's own error, as it raised it
        rg.load(path, map_location=lambda storage, location: 1 / 0)
    with pytest.raises(rg.DTypeError, match=r"load: .*map_location returned int"):
        rg.load(path, map_location=lambda storage, location: 3)


# -- DistributedDataParallel's device_ids with a CPU module ----------------------------------------
@pytest.fixture(scope="module")
def torch_process_group():
    import torch.distributed as torch_dist

    if torch_dist.is_initialized():  # (another test's group: DDP's checks need any one)
        yield
        return
    torch_dist.init_process_group("gloo", store=torch_dist.HashStore(), rank=0, world_size=1)
    yield
    torch_dist.destroy_process_group()


DEVICE_ARGUMENTS = [
    ({"device_ids": [0]}, "device_ids and output_device"),
    ({"output_device": 1}, "device_ids and output_device"),
    ({"device_ids": [0, 1]}, "device_ids can only be None or contain a single element"),
    ({"output_device": 0}, None),  # (torch tests output_device's truth)
    ({"device_ids": []}, None),
    ({"device_ids": None}, None),
]


@pytest.mark.parametrize(("arguments", "message"), DEVICE_ARGUMENTS)
def test_ddp_device_ids_with_a_cpu_module(torch_process_group, arguments, message):
    torch_ddp = torch.nn.parallel.DistributedDataParallel
    rg_ddp = rg.nn.parallel.DistributedDataParallel
    if message is None:
        torch_ddp(torch.nn.Linear(2, 2), **arguments)
        rg_ddp(rg.nn.Linear(2, 2), **arguments)
        return
    with pytest.raises(ValueError, match=message):
        torch_ddp(torch.nn.Linear(2, 2), **arguments)
    with pytest.raises(rg.InvalidArgumentError, match=f"DistributedDataParallel: {message}"):
        rg_ddp(rg.nn.Linear(2, 2), **arguments)


# -- torch.histogram -------------------------------------------------------------------------------
def _pair(value, module):
    return module.tensor(value) if isinstance(value, np.ndarray) else value


HISTOGRAM_CASES = [
    # (input, bins, keywords)
    ("normal32", 7, {}),
    ("normal64", 7, {}),
    ("normal32", 5, {"range": (-1.0, 1.0)}),
    ("normal64", 4, {"weight": "weights", "density": True}),
    ("normal64", 6, {"density": True}),
    ("normal32", np.array([-2.0, -0.5, 0.0, 1.0, 3.0], np.float32), {}),
    ("halves", 8, {}),  # values on the edges
    ("ones", 4, {}),  # one value: the range widened by 1/2
    ("empty", 2, {}),
]


@pytest.mark.parametrize(("data", "bins", "keywords"), HISTOGRAM_CASES)
def test_histogram_matches_torch(data, bins, keywords):
    rng = np.random.default_rng(6)
    arrays = {
        "normal32": rng.standard_normal((4, 5)).astype(np.float32),
        "normal64": rng.standard_normal(30),
        "halves": np.round(rng.standard_normal(30) * 2) / 2,
        "ones": np.ones(3, np.float32),
        "empty": np.zeros(0, np.float32),
    }
    values = arrays[data]
    keywords = {k: (rng.random(values.shape) if v == "weights" else v) for k, v in keywords.items()}
    expected = torch.histogram(
        torch.tensor(values),
        _pair(bins, torch),
        **{k: _pair(v, torch) for k, v in keywords.items()},
    )
    out = rg.histogram(
        rg.tensor(values), _pair(bins, rg), **{k: _pair(v, rg) for k, v in keywords.items()}
    )
    assert out.hist.dtype == str(expected.hist.dtype).removeprefix("torch.")
    np.testing.assert_array_equal(out.hist.numpy(), expected.hist.numpy())
    np.testing.assert_array_equal(out.bin_edges.numpy(), expected.bin_edges.numpy())
    method = rg.tensor(values).histogram(
        _pair(bins, rg), **{k: _pair(v, rg) for k, v in keywords.items()}
    )
    np.testing.assert_array_equal(method.hist.numpy(), expected.hist.numpy())


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (lambda m: m.histogram(m.tensor([1, 2]), 2), rg.DTypeError, "histogram: expected a float"),
        (
            lambda m: m.histogram(m.tensor([1.0, 2.0]), 0),
            rg.InvalidArgumentError,
            "bins must be > 0",
        ),
        (
            lambda m: m.histogram(m.tensor([1.0, 2.0]), 2, range=(3.0, 1.0)),
            rg.InvalidArgumentError,
            "min",
        ),
        (
            lambda m: m.histogram(m.tensor([1.0, float("nan")]), 2),
            rg.InvalidArgumentError,
            "not finite",
        ),
        (lambda m: m.histogram(m.tensor([1.0, 2.0]), 2, weight=m.ones(3)), rg.ShapeError, "weight"),
        (lambda m: m.histogram(m.tensor([1.0, 2.0]), m.tensor([[1.0, 2.0]])), rg.ShapeError, "1-d"),
    ],
)
def test_histogram_refuses_what_torch_refuses(call, error, message):
    with pytest.raises((RuntimeError, NotImplementedError)):
        call(torch)
    with pytest.raises(error, match=message):
        call(rg)


# -- geqrf, orgqr, ormqr ---------------------------------------------------------------------------
@pytest.mark.parametrize("shape", [(2, 4, 3), (3, 5), (3, 3)])
def test_geqrf_and_orgqr_match_torch(shape):
    values = np.random.default_rng(7).standard_normal(shape)
    a_t, tau_t = torch.geqrf(torch.tensor(values))
    xr = rg.tensor(values, requires_grad=True)
    a_r, tau_r = rg.geqrf(xr)
    np.testing.assert_allclose(a_r.numpy(), a_t.numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(tau_r.numpy(), tau_t.numpy(), rtol=1e-10, atol=1e-12)
    assert a_r.requires_grad and tau_r.requires_grad  # torch records it; its backward refuses
    with pytest.raises(rg.AutodiffError, match="geqrf: the derivative"):
        a_r.sum().backward()
    if shape[-2] >= shape[-1]:
        expected = torch.orgqr(a_t, tau_t)
        out = rg.tensor(a_t.numpy()).orgqr(rg.tensor(tau_t.numpy()))
        np.testing.assert_allclose(out.numpy(), expected.numpy(), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("left", [True, False])
@pytest.mark.parametrize("transpose", [True, False])
@pytest.mark.parametrize("shape", [(2, 4, 3), (3, 5)])
def test_ormqr_values_and_gradients_match_torch(left, transpose, shape):
    rng = np.random.default_rng(8)
    a_t, tau_t = torch.geqrf(torch.tensor(rng.standard_normal(shape)))
    side = shape[-2]
    other = rng.standard_normal(shape[:-2] + ((side, 2) if left else (2, side)))
    at, taut, ct = (t.detach().clone().requires_grad_() for t in (a_t, tau_t, torch.tensor(other)))
    expected = torch.ormqr(at, taut, ct, left, transpose)
    weights = rng.standard_normal(tuple(expected.shape))
    (expected * torch.tensor(weights)).sum().backward()
    ar, taur, cr = (rg.tensor(v, requires_grad=True) for v in (a_t.numpy(), tau_t.numpy(), other))
    out = rg.ormqr(ar, taur, cr, left, transpose)
    np.testing.assert_allclose(out.numpy(), expected.detach().numpy(), rtol=1e-10, atol=1e-12)
    grads = (out * rg.tensor(weights)).sum().backward()
    for mine, theirs in ((ar, at), (taur, taut), (cr, ct)):
        np.testing.assert_allclose(
            mine.grad(grads).numpy(), theirs.grad.numpy(), rtol=1e-9, atol=1e-11
        )


def test_ormqr_refuses_shapes_that_do_not_fit():
    a, tau = rg.geqrf(rg.ones(4, 3, dtype=rg.float64))
    with pytest.raises(RuntimeError):
        torch.ormqr(torch.ones(4, 3), torch.ones(3), torch.ones(5, 2))
    with pytest.raises(rg.ShapeError, match="ormqr: A of shape"):
        rg.ormqr(a, tau, rg.ones(5, 2, dtype=rg.float64))


# -- a lazy module's placeholder has no shape ------------------------------------------------------
def test_an_uninitialized_parameter_refuses_its_shape_as_torch():
    with pytest.raises(RuntimeError, match="Can't access the shape of an uninitialized"):
        _ = torch.nn.LazyLinear(4).weight.shape
    assert torch.nn.LazyLinear(4).weight.size() == (0,)
    layer = rg.nn.LazyLinear(4)
    with pytest.raises(UninitializedError, match="shape: can't access the shape"):
        _ = layer.weight.shape
    with pytest.raises(UninitializedError, match="len"):
        len(layer.weight)
    assert layer.weight.size() == (0,)  # (torch's size() answers the placeholder's)
    # what the library does with a lazy module still works: repr, counting, state, dtype moves
    assert repr(layer) == "LazyLinear(in_features=0, out_features=4, bias=True)"
    assert len(list(layer.parameters())) == 2
    layer.load_state_dict(rg.nn.LazyLinear(4).state_dict())
    layer.to(rg.float64)
    assert layer(rg.ones(2, 3, dtype=rg.float64)).shape == (2, 4)
    assert layer.weight.shape == (4, 3)
