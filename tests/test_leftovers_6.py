"""Leftover defects, each checked against torch 2.13 (the reference).

- ``xlogy``'s gradient in ``y`` at ``x = y = 0`` was 0; torch's is its plain ``grad * x / y``,
  NaN there. Values and both gradients of ``xlogy`` and ``special.xlog1py`` are compared with
  torch's over zeros (both signs), negatives, infinities and NaN.
- A parameter listed twice in one group (``SGD([w, v, w])``) was silently kept once and
  stepped once; torch keeps both places, warns (a ``UserWarning``) and steps the parameter at
  each place with one state (SGD's momentum buffer made afresh at both places in its first
  step), and numbers it by its last place in ``state_dict()``. L-BFGS took only the second
  place's piece of the update.
- ``as_strided`` of a transposed, sliced, narrowed, diagonal or permuted-layout tensor read the
  input's elements in row-major order; torch reads its storage (the base's elements by their
  strides, ``storage_offset`` absolute there and defaulting to the input's own). Values,
  gradients and writes through the view are torch's now; a view reaching storage outside the
  input (an offset before a slice) or an expanded input raises a ``ShapeError`` naming
  ``as_strided`` instead of a silently different result.
- Strides that were row-major where torch's follow the input's layout: ``sign``, ``//``,
  ``nan_to_num``, ``isfinite``, ``erfinv``, ``sinc``, ``hardswish``, ``threshold``,
  ``heaviside``, ``xlogy``, ``logical_and`` of a permuted tensor (compositions of kernels, or
  kernels missing from the one list of layout-keeping kernels, ``_LAYOUT_KERNELS``), and
  ``zeros_like``/``ones_like``/``empty_like``/``full_like``/``rand_like``/``randn_like``/
  ``randint_like`` of one (torch's ``preserve_format``). And the other way round: torch's
  ``masked_fill`` and ``2 ** x`` make row-major results, retrograd's followed the input.
- ``scatter_reduce`` with ``amax``/``amin``/``prod`` (and ``index_reduce``, ``scatter_nd``'s
  ``mul``/``max``/``min``) read the index positions on the host and looped in Python over
  their repeats (one round per repeat); one backend kernel (``select_reduce``: NumPy's
  ``ufunc.at``, torch's ``scatter_reduce``) does it now, with torch's "prod" gradient
  formulas (a lone zero's gradient the product of the others). Checked against torch with
  ties, zeros (one and several at a place), NaN and infinities, ``include_self`` both ways.
- ``embedding_bag`` of a 1-d input with ``offsets`` had no per-bag loop (already vectorized:
  not a defect), but it read the whole input on the host to lay out the bags; only the
  offsets are read now (the bags' lengths make the shape), the entries gathered on the
  device. Checked against torch for every mode, ``per_sample_weights``,
  ``include_last_offset``, empty bags and ``padding_idx``.
- DDP's buffer sync before each forward broadcast the buffers one at a time (a BatchNorm's
  running mean, variance and count: three collectives per layer); it is one broadcast per
  dtype now (the construction's broadcast of parameters and buffers too), run here on thread
  ranks.
"""

from __future__ import annotations

import itertools
import threading
import warnings

import numpy as np
import pytest
import torch

import retrograd as rg
import retrograd.distributed as dist

INF, NAN = float("inf"), float("nan")


def _same(ours: np.ndarray, theirs: np.ndarray, rtol: float = 0.0) -> None:
    """Equal elementwise, NaN where torch's is NaN (and only there)."""
    np.testing.assert_array_equal(np.isnan(ours), np.isnan(theirs))
    np.testing.assert_allclose(ours, theirs, rtol=rtol, atol=0, equal_nan=True)


# -- xlogy / xlog1py across zeros, negatives, infinities and NaN ---------------------------------
@pytest.mark.parametrize("name", ["xlogy", "xlog1py"])
def test_xlogy_and_xlog1py_values_and_gradients_match_torch_at_special_points(name):
    xs = [0.0, -0.0, 1.5, -1.5, INF, -INF, NAN]
    ys = [0.0, -0.0, 1.0, -1.0, 2.0, -2.0, -0.5, -3.0, INF, -INF, NAN]
    pairs = list(itertools.product(xs, ys))
    x_values = np.array([x for x, _ in pairs])
    y_values = np.array([y for _, y in pairs])
    weights = np.linspace(-1.0, 2.0, len(pairs)) + 0.01
    x, y = rg.tensor(x_values).require_grad(), rg.tensor(y_values).require_grad()
    out = getattr(rg.special, name)(x, y)
    grads = (out * rg.tensor(weights)).sum().backward()
    tx = torch.tensor(x_values, requires_grad=True)
    ty = torch.tensor(y_values, requires_grad=True)
    expected = getattr(torch.special, name)(tx, ty)
    (expected * torch.tensor(weights)).sum().backward()
    _same(out.numpy(), expected.detach().numpy(), rtol=1e-15)
    _same(x.grad(grads).numpy(), tx.grad.numpy(), rtol=1e-15)
    _same(y.grad(grads).numpy(), ty.grad.numpy(), rtol=1e-15)


def test_xlogy_gradient_in_y_is_nan_where_x_and_y_are_zero():
    x, y = rg.tensor([0.0, 0.0, 0.0]).require_grad(), rg.tensor([0.0, 2.0, -1.0]).require_grad()
    grads = rg.xlogy(x, y).sum().backward()
    tx = torch.tensor([0.0, 0.0, 0.0], requires_grad=True)
    ty = torch.tensor([0.0, 2.0, -1.0], requires_grad=True)
    torch.xlogy(tx, ty).sum().backward()
    assert np.isnan(ty.grad[0].item())
    _same(y.grad(grads).numpy(), ty.grad.numpy())
    _same(x.grad(grads).numpy(), tx.grad.numpy())


# -- a parameter listed twice ----------------------------------------------------------------------
def _run_optimizer(lib, name: str, settings: dict, steps: int = 3) -> tuple[list, list]:
    """Three steps of ``name`` over ``[w, v, w]``: the final values and the warnings."""
    if lib is torch:
        w = torch.tensor([1.0, -2.0, 0.5], requires_grad=True)
        v = torch.tensor([0.3], requires_grad=True)
    else:
        w, v = rg.tensor([1.0, -2.0, 0.5]).require_grad(), rg.tensor([0.3]).require_grad()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        optimizer = getattr(lib.optim, name)([w, v, w], **settings)
    assert len(optimizer.param_groups[0]["params"]) == 3
    for _ in range(steps):
        loss = (w * w * lib.tensor([1.0, 2.0, 3.0])).sum() + (v * w).sum()
        if lib is torch:
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        else:
            optimizer.step(loss.backward())
    values = [*w.detach().numpy().tolist(), *v.detach().numpy().tolist()]
    return values, [(type(c.message), str(c.message)) for c in caught]


@pytest.mark.parametrize(
    "name, settings",
    [
        ("SGD", {"lr": 0.1}),
        ("SGD", {"lr": 0.1, "momentum": 0.9}),
        ("SGD", {"lr": 0.1, "momentum": 0.9, "nesterov": True}),
        ("Adam", {"lr": 0.1}),
        ("AdamW", {"lr": 0.1, "amsgrad": True}),
        ("RMSprop", {"lr": 0.01, "momentum": 0.5}),
        ("Adagrad", {"lr": 0.1}),
        ("Rprop", {"lr": 0.1}),
    ],
)
def test_a_parameter_listed_twice_is_stepped_at_each_place_as_torch(name, settings):
    ours, our_warnings = _run_optimizer(rg, name, settings)
    theirs, their_warnings = _run_optimizer(torch, name, settings)
    np.testing.assert_allclose(ours, theirs, rtol=1e-6, atol=1e-7)
    assert our_warnings == their_warnings
    assert their_warnings and their_warnings[0][0] is UserWarning


def test_lbfgs_takes_both_pieces_of_a_parameter_listed_twice():
    def run(lib):
        if lib is torch:
            w = torch.tensor([1.0, -2.0], requires_grad=True)
        else:
            w = rg.tensor([1.0, -2.0]).require_grad()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            optimizer = lib.optim.LBFGS([w, w], lr=0.5, max_iter=3)
        assert len(optimizer.param_groups[0]["params"]) == 2

        def closure():
            loss = (w * w * lib.tensor([1.0, 3.0])).sum()
            if lib is torch:
                optimizer.zero_grad()
                loss.backward()
                return loss
            return loss, loss.backward()

        optimizer.step(closure)
        return w.detach().numpy()

    np.testing.assert_allclose(run(rg), run(torch), rtol=1e-5)


def test_a_parameter_listed_twice_is_numbered_by_its_last_place_in_state_dict():
    def run(lib):
        tensors = [lib.tensor([value], requires_grad=True) for value in (1.0, 2.0, 3.0)]
        if lib is rg:
            tensors = [rg.tensor([value]).require_grad() for value in (1.0, 2.0, 3.0)]
        w, v, u = tensors
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            optimizer = lib.optim.Adam([{"params": [w, v, w]}, {"params": [u]}], lr=0.1)
        loss = (w * 2 + v * 3 + u).sum()
        if lib is torch:
            loss.backward()
            optimizer.step()
        else:
            optimizer.step(loss.backward())
        saved = optimizer.state_dict()
        steps = {k: float(np.asarray(s["step"])) for k, s in saved["state"].items()}
        return [g["params"] for g in saved["param_groups"]], steps

    assert run(rg) == run(torch)


def test_a_parameter_in_two_groups_is_refused_as_torch_refuses_it():
    w = rg.tensor([1.0]).require_grad()
    with pytest.raises(ValueError, match="more than one group"):
        rg.optim.SGD([{"params": [w]}, {"params": [w]}], lr=0.1)
    optimizer = rg.optim.SGD([w], lr=0.1)
    with pytest.raises(ValueError, match="more than one group"):
        optimizer.add_param_group({"params": [w]})
    assert len(optimizer.param_groups) == 1
    tw = torch.tensor([1.0], requires_grad=True)
    with pytest.raises(ValueError, match="more than one parameter group"):
        torch.optim.SGD([{"params": [tw]}, {"params": [tw]}], lr=0.1)


# -- as_strided reads the input's storage ----------------------------------------------------------
BASE = np.arange(24, dtype=np.float64).reshape(4, 6) + 1.0
STORAGE_CASES = [
    ("transposed", lambda b: b.t(), (3, 2), (1, 3), None),
    ("transposed with an offset", lambda b: b.t(), (2, 2), (1, 6), 1),
    ("slice", lambda b: b[1:, 2:], (2, 2), (6, 1), None),
    ("slice with an absolute offset", lambda b: b[1:, 2:], (2, 2), (6, 1), 9),
    ("strided slice", lambda b: b[:, ::2], (2, 3), (6, 2), None),
    ("permuted layout", lambda b: b.t() * 2.0, (3, 4), (1, 6), 0),
    ("narrow", lambda b: b.narrow(1, 1, 3), (2, 3), (6, 1), 7),
    ("diagonal", lambda b: b.diagonal(1), (2,), (7,), None),
    ("reshaped transpose", lambda b: b.t().reshape(2, 3, 4), (4,), (6,), 0),
]


@pytest.mark.parametrize("view, size, stride, offset", [c[1:] for c in STORAGE_CASES],
                         ids=[c[0] for c in STORAGE_CASES])  # fmt: skip
def test_as_strided_of_a_non_contiguous_tensor_reads_its_storage_as_torch(
    view, size, stride, offset
):
    x, tx = rg.tensor(BASE).require_grad(), torch.tensor(BASE, requires_grad=True)
    extra = () if offset is None else (offset,)
    out = view(x).as_strided(size, stride, *extra)
    expected = view(tx).as_strided(size, stride, *extra)
    weights = np.arange(1.0, np.prod(size) + 1.0).reshape(size)
    grads = (out * rg.tensor(weights)).sum().backward()
    (expected * torch.tensor(weights)).sum().backward()
    np.testing.assert_array_equal(out.numpy(), expected.detach().numpy())
    np.testing.assert_array_equal(x.grad(grads).numpy(), tx.grad.numpy())
    assert out.stride() == expected.stride()


def test_a_write_through_as_strided_of_a_transpose_reaches_torch_s_elements():
    x, tx = rg.tensor(BASE[:2, :3]), torch.tensor(BASE[:2, :3])
    view, expected = x.t().as_strided((2,), (2,), 1), tx.t().as_strided((2,), (2,), 1)
    view.add_(10.0)
    expected.add_(10.0)
    np.testing.assert_array_equal(x.numpy(), tx.numpy())
    np.testing.assert_array_equal(view.numpy(), expected.numpy())


def test_as_strided_outside_the_input_or_of_an_expanded_input_is_refused():
    x = rg.tensor(BASE)
    # torch reads base[0, :2] here, elements that are not the slice's
    with pytest.raises(rg.ShapeError, match=r"as_strided: .* not the input's"):
        x[1:].as_strided((2,), (1,), 0)
    with pytest.raises(rg.ShapeError, match=r"as_strided: .*expanded"):
        rg.tensor([1.0, 2.0]).expand(3, 2).as_strided((2,), (1,), 0)
    with pytest.raises(rg.ShapeError, match=r"as_strided: .*out of bounds"):
        x[1:].as_strided((5,), (6,), 0)
    assert x[1:].as_strided((2,), (1,), 6).tolist() == [7.0, 8.0]


# -- strides follow the input's layout -------------------------------------------------------------
LAYOUT_OPS = {
    "sign": lambda x, lib: x.sign(),
    "floor_divide_scalar": lambda x, lib: x // 2,
    "floor_divide_tensor": lambda x, lib: x // (x * 0 + 3),
    "nan_to_num": lambda x, lib: x.nan_to_num(),
    "isfinite": lambda x, lib: x.isfinite(),
    "erfinv": lambda x, lib: (x / 100).erfinv(),
    "sinc": lambda x, lib: x.sinc(),
    "hardswish": lambda x, lib: lib.nn.functional.hardswish(x),
    "threshold": lambda x, lib: lib.nn.functional.threshold(x, 0.5, 2.0),
    "heaviside": lambda x, lib: x.heaviside(x * 0 + 0.5),
    "xlogy": lambda x, lib: lib.xlogy(x, x.abs() + 1),
    "logical_and": lambda x, lib: lib.logical_and(x, x),
    "masked_fill": lambda x, lib: x.masked_fill(x > 0, 1.0),
    "rpow": lambda x, lib: 2**x,
    "zeros_like": lambda x, lib: lib.zeros_like(x),
    "ones_like": lambda x, lib: lib.ones_like(x),
    "empty_like": lambda x, lib: lib.empty_like(x),
    "full_like": lambda x, lib: lib.full_like(x, 2.0),
    "rand_like": lambda x, lib: lib.rand_like(x),
    "randn_like": lambda x, lib: lib.randn_like(x),
    "randint_like": lambda x, lib: lib.randint_like(x, 5),
    "zeros_like_contiguous": lambda x, lib: lib.zeros_like(x, memory_format=lib.contiguous_format),
    "zeros_like_expanded": lambda x, lib: lib.zeros_like(x.expand(2, *x.shape)),
    "clone_expanded": lambda x, lib: x.expand(2, *x.shape).clone(),
}
LAYOUT_VIEWS = {
    "permuted": lambda x: x.permute(2, 0, 1),
    "transposed": lambda x: x.transpose(0, 2),
    "channels_last_like": lambda x: x.reshape(1, 2, 3, 4).permute(0, 2, 3, 1),
}


@pytest.mark.parametrize("view", sorted(LAYOUT_VIEWS))
@pytest.mark.parametrize("op", sorted(LAYOUT_OPS))
def test_strides_follow_the_input_s_layout_as_torch_s(op, view):
    values = np.arange(1.0, 25.0).reshape(2, 3, 4) - 7.5
    x, tx = LAYOUT_VIEWS[view](rg.tensor(values)), LAYOUT_VIEWS[view](torch.tensor(values))
    out, expected = LAYOUT_OPS[op](x, rg), LAYOUT_OPS[op](tx, torch)
    assert out.stride() == expected.stride()
    assert out.is_contiguous() == expected.is_contiguous()
    if not op.endswith("_like") and "rand" not in op:
        np.testing.assert_allclose(out.numpy(), expected.numpy(), rtol=1e-12)


# -- DDP's buffer sync: one broadcast per dtype ----------------------------------------------------
def _run_thread_ranks(n: int, script) -> list:
    """``script(rank)`` on ``n`` thread ranks of one local context (as
    test_distributed_breadth_1's ``run_ranks``), results in rank order."""
    devices = [rg.Device("cpu", i) for i in range(n)]
    config = dist.DistributedConfig(all_reduce_op=dist.ReduceOperation.MEAN, timeout=5.0)
    results: list = [None] * n
    with dist.DistributedContext(devices, config) as ctx:

        def run(rank: int) -> None:
            try:
                dist.init_process_group("gloo", rank=rank, world_size=n, store=ctx)
                try:
                    results[rank] = script(rank)
                finally:
                    dist.destroy_process_group()
            except BaseException as error:  # handed back to the test
                results[rank] = error

        threads = [threading.Thread(target=run, args=(r,), daemon=True) for r in range(n)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30.0)
            assert not thread.is_alive(), "a rank thread hung"
    for result in results:
        if isinstance(result, BaseException):
            raise result
    return results


def test_ddp_syncs_its_buffers_in_one_broadcast_per_dtype(monkeypatch):
    calls: list = []
    lock = threading.Lock()
    broadcast = dist.broadcast

    def counted(tensor, *args, **kwargs):
        with lock:
            calls.append((threading.get_ident(), str(tensor.dtype), tensor.shape))
        return broadcast(tensor, *args, **kwargs)

    monkeypatch.setattr(dist, "broadcast", counted)
    values = np.random.default_rng(0).standard_normal((4, 3, 2))

    def script(rank):
        nn_model = rg.nn.Sequential(
            rg.nn.Conv1d(3, 3, 1), rg.nn.BatchNorm1d(3), rg.nn.BatchNorm1d(3)
        ).double()
        model = rg.nn.parallel.DistributedDataParallel(nn_model)
        batch = rg.tensor(values[2 * rank : 2 * rank + 2])
        model(batch).sum().backward()  # the first forward: the construction's values
        model(batch).sum().backward()  # rank 0's running statistics broadcast first
        model.eval()
        model(batch)  # broadcast again, and left as they came: every rank holds rank 0's
        return {k: v.numpy().copy() for k, v in nn_model.state_dict().items()}

    state0, state1 = _run_thread_ranks(2, script)
    for key in state0:
        np.testing.assert_array_equal(state0[key], state1[key])
    per_rank: dict = {}
    for ident, dtype, shape in calls:
        per_rank.setdefault(ident, []).append((dtype, shape))
    for made in per_rank.values():
        # at construction (torch's _sync_module_states, since round 80): the 24 parameters and
        # the 12 statistics joined, the two counts; then per forward (three): the float64
        # statistics of both layers joined (4 x 3), the two counts
        forwards = [("float64", (12,)), ("int64", (2,))] * 3
        assert sorted(made) == sorted([("float64", (36,)), ("int64", (2,)), *forwards])
    assert state0["1.num_batches_tracked"] == 2


# -- scatter_reduce amax/amin/prod: one kernel, torch's values and gradients -----------------------
SCATTER_SELF = np.array([[1.0, 2.0, 0.0, 3.0], [2.0, -1.0, 5.0, 0.5], [0.0, 0.0, 1.5, 2.0]])
SCATTER_SRC = np.array([[2.0, 2.0, 0.0, 1.0, 3.0], [0.0, 0.0, 5.0, 2.0, -1.0], [4, 2, 2, 0, 3.0]])
SCATTER_INDEX = np.array([[0, 0, 1, 3, 3], [2, 2, 2, 1, 0], [1, 1, 1, 1, 3]])


@pytest.mark.parametrize("dim", [0, 1])
@pytest.mark.parametrize("include_self", [True, False])
@pytest.mark.parametrize("reduce", ["amax", "amin", "prod"])
def test_scatter_reduce_extremes_and_product_match_torch(reduce, include_self, dim):
    own, source, index = SCATTER_SELF, SCATTER_SRC, SCATTER_INDEX
    if dim == 0:
        own, source, index = own.T.copy(), source.T.copy(), index.T.copy() % 3
    x, y = rg.tensor(own).require_grad(), rg.tensor(source).require_grad()
    out = x.scatter_reduce(dim, rg.tensor(index), y, reduce, include_self=include_self)
    weights = np.arange(1.0, out.numel() + 1.0).reshape(out.shape)
    grads = (out * rg.tensor(weights)).sum().backward()
    tx, ty = torch.tensor(own, requires_grad=True), torch.tensor(source, requires_grad=True)
    expected = tx.scatter_reduce(dim, torch.tensor(index), ty, reduce, include_self=include_self)
    (expected * torch.tensor(weights)).sum().backward()
    np.testing.assert_allclose(out.numpy(), expected.detach().numpy(), rtol=1e-15)
    np.testing.assert_allclose(x.grad(grads).numpy(), tx.grad.numpy(), rtol=1e-14)
    np.testing.assert_allclose(y.grad(grads).numpy(), ty.grad.numpy(), rtol=1e-14)


@pytest.mark.parametrize("reduce", ["amax", "amin", "prod"])
def test_scatter_reduce_with_nan_infinities_and_ints_matches_torch(reduce):
    own = np.array([1.0, INF, -2.0, NAN])
    source = np.array([NAN, 3.0, INF, -INF, 0.0, 2.0])
    index = np.array([0, 0, 1, 2, 3, 1])
    for include_self in (True, False):
        ours = rg.tensor(own).scatter_reduce(
            0, rg.tensor(index), rg.tensor(source), reduce, include_self=include_self
        )
        theirs = torch.tensor(own).scatter_reduce(
            0, torch.tensor(index), torch.tensor(source), reduce, include_self=include_self
        )
        _same(ours.numpy(), theirs.numpy())
    ints = ([2, 3], [0, 0, 1, 1], [4, 5, 6, 7])
    ours = rg.tensor(ints[0]).scatter_reduce(0, rg.tensor(ints[1]), rg.tensor(ints[2]), reduce)
    theirs = torch.tensor(ints[0]).scatter_reduce(
        0, torch.tensor(ints[1]), torch.tensor(ints[2]), reduce
    )
    assert ours.tolist() == theirs.tolist() and ours.dtype == "int64"


def test_scatter_reduce_reads_no_index_on_the_host(monkeypatch):
    """The positions stay on the device: no ``numpy()`` of them (each one a stall on an
    accelerator), forward or backward, however often an index repeats."""
    x = rg.tensor([[1.0, 2.0, 0.0]]).require_grad()
    y = rg.tensor([[2.0, 0.0, 2.0, 3.0, 5.0]]).require_grad()
    index = rg.tensor([[0, 0, 2, 0, 0]])

    def refuse(self, *args, **kwargs):
        raise AssertionError("a host read in scatter_reduce")

    monkeypatch.setattr(rg.Tensor, "numpy", refuse)
    for reduce in ("amax", "amin", "prod"):
        out = x.scatter_reduce(1, index, y, reduce, include_self=False)
        grads = out.sum().backward()
        assert x.grad(grads) is not None and y.grad(grads) is not None


# -- embedding_bag of a 1-d input with offsets --------------------------------------------------
BAG_WEIGHT = np.random.default_rng(0).standard_normal((6, 3))
BAG_INPUT = np.array([1, 2, 2, 5, 0, 3, 2, 4, 1])


@pytest.mark.parametrize("padding_idx", [None, 2])
@pytest.mark.parametrize("include_last_offset", [False, True])
@pytest.mark.parametrize("mode", ["sum", "mean", "max", "weighted sum"])
def test_embedding_bag_with_offsets_matches_torch(mode, include_last_offset, padding_idx):
    offsets = [0, 2, 2, 5, 9] if include_last_offset else [0, 0, 4, 4]  # empty bags in both
    weighted = mode == "weighted sum"
    mode = "sum" if weighted else mode
    sample = np.linspace(0.5, 2.0, len(BAG_INPUT))
    w, tw = rg.tensor(BAG_WEIGHT).require_grad(), torch.tensor(BAG_WEIGHT, requires_grad=True)
    p = rg.tensor(sample).require_grad() if weighted else None
    tp = torch.tensor(sample, requires_grad=True) if weighted else None
    settings = {"mode": mode, "include_last_offset": include_last_offset}
    settings["padding_idx"] = padding_idx
    out = rg.nn.functional.embedding_bag(
        rg.tensor(BAG_INPUT), w, rg.tensor(offsets), per_sample_weights=p, **settings
    )
    expected = torch.nn.functional.embedding_bag(
        torch.tensor(BAG_INPUT), tw, torch.tensor(offsets), per_sample_weights=tp, **settings
    )
    weights = np.arange(1.0, out.numel() + 1.0).reshape(out.shape)
    grads = (out * rg.tensor(weights)).sum().backward()
    (expected * torch.tensor(weights)).sum().backward()
    np.testing.assert_allclose(out.numpy(), expected.detach().numpy(), rtol=1e-13)
    np.testing.assert_allclose(w.grad(grads).numpy(), tw.grad.numpy(), rtol=1e-13)
    if weighted:
        np.testing.assert_allclose(p.grad(grads).numpy(), tp.grad.numpy(), rtol=1e-13)


def test_embedding_bag_reads_only_the_offsets_on_the_host(monkeypatch):
    read: list = []
    host = rg.Tensor.numpy

    def recorded(self, *args, **kwargs):
        read.append(self)
        return host(self, *args, **kwargs)

    indices, offsets = rg.tensor(BAG_INPUT), rg.tensor([0, 3, 3])
    monkeypatch.setattr(rg.Tensor, "numpy", recorded)
    out = rg.nn.EmbeddingBag(6, 3, mode="sum")(indices, offsets)
    assert out.shape == (3, 3)
    assert not any(t is indices for t in read)
