"""Burn's unit tests that sit beside its code rather than in ``burn-backend-tests`` (tracel-ai/burn
at 2c06be351006851d42fdb6df16b976f4a82d9747): burn-tensor's ``src/tensor/api/check.rs`` (argument
checks) and ``src/tensor/api/base.rs`` (slice ranges, scalar reads); burn-std's
``src/tensor/slice.rs`` and ``src/tensor/shape.rs`` (slice output sizes, negative steps),
``src/tensor/mod.rs`` (reshapes of broadcast, permuted and pitched views), ``src/ops.rs`` (the
convolution and unfold option checks), ``src/tensor/dtype.rs`` (finfo), ``src/element/cast.rs``
and ``src/data/tensor/base.rs`` (dtype conversions) and ``src/data/compare.rs`` (approximate
comparison); burn-backend's ``src/backend/ops/modules/{conv,unfold}.rs`` (output sizes). None
was ported before (the earlier batches took ``burn-backend-tests`` and the nn/optim crates).
They test Rust helpers, so each is ported as the public behaviour the helper fixes, under every
checkpointing strategy on the chosen inner backend, with the gradient checked against torch
where the op is differentiable.

Burn's forms map to ours: a ``Slice { start, end, step }`` (``s![..]``) is an entry of
``t.slice([...])``, where, as in Burn, a negative step walks the range backwards and an end past
the size is an error; Python indexing ``t[...]`` is torch's (positive steps, ends clamped, an int
drops its dimension), which is what ``Shape::into_slices``' clamping ``to_range`` gives; a
``#[should_panic]`` check is API.md section 7's error naming the op; ``FloatDType::finfo`` is
``rg.finfo`` (``epsilon``/``min_positive`` are ``eps``/``tiny``); ``TensorData::convert_dtype``
is ``.bool()``/``.int()``/``.float()``; ``assert_approx_eq`` with ``Tolerance::absolute(a)`` is
``rg.testing.assert_close(atol=a, rtol=0)``.

Deliberate differences (torch's semantics, which API.md follows): Burn's
``calculate_unfold_windows`` counts 0 windows when the window is longer than the dimension, where
``unfold`` raises (as torch's does); ``padding="same"`` needs stride 1 (torch), so Burn's
``calculate_conv_padding`` for stride 2 is passed as the explicit padding it computes; Burn's
``DType::finfo`` of an int dtype is ``None``, ``rg.finfo`` raises a DTypeError (torch's TypeError).
Backend-internal tests (the matmul batch-folding policy, storage views, bridge and dispatch
round trips, ``Slice``'s Display/FromStr, ``is_dense``'s stride arithmetic itself) have no public
counterpart; ``tensor/mod.rs``'s layouts are ported as the views that have them.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import retrograd as rg
import retrograd.nn.functional as F  # noqa: N812
from retrograd.testing import assert_close
from test_burn_ports import backend  # noqa: F401 (the autouse fixture: every strategy)
from test_burn_tensor_ports import eq


def close(actual, expected, tol=1e-5):
    assert actual is not None, "expected a gradient, got None"
    np.testing.assert_allclose(np.asarray(actual), np.asarray(expected), rtol=tol, atol=tol)


def weights_like(shape):
    """Distinct weights for ``(out * w).sum()``, so a gradient shows where each value went."""
    return np.arange(1, int(np.prod(shape)) + 1, dtype=np.float32).reshape(shape) / 7.0


def rg_grad(build, base):
    """``build`` of ``x`` = ``base`` (a float32 array) and the gradient of
    ``(build(x) * w).sum()`` with respect to ``x``."""
    x = rg.tensor(base).require_grad()
    out = build(x)
    grads = (out * rg.tensor(weights_like(out.shape))).sum().backward()
    return out, x.grad(grads)


def torch_grad(build, base):
    """The same by torch: the reference."""
    x = torch.tensor(base, requires_grad=True)
    out = build(x)
    (out * torch.tensor(weights_like(tuple(out.shape)))).sum().backward()
    return out.detach().numpy(), x.grad.numpy()


def grad_through(build, base, torch_build=None):
    """``rg_grad`` and ``torch_grad`` together (``torch_build`` where torch spells it apart)."""
    return (*rg_grad(build, base), *torch_grad(torch_build or build, base))


# ---- burn-tensor src/tensor/api/check.rs ---------------------------------------------------------


def test_slice_range_past_the_dimension_is_an_error():
    # index_range_exceed_dimension: 1..8 on a dimension of 7
    x = rg.ones((3, 5, 7)).require_grad()
    with pytest.raises(rg.IndexOutOfRangeError, match=r"slice: .*1\.\.8.* size 7"):
        x.slice([(0, 2), (0, 4), (1, 8)])
    inside = x.slice([(0, 2), (0, 4), (1, 7)])  # the failed call left x usable
    expected = np.zeros((3, 5, 7), dtype=np.float32)
    expected[0:2, 0:4, 1:7] = 1.0
    close(x.grad(inside.sum().backward()), expected)


def test_more_ranges_than_dimensions_is_an_error():
    # index_range_exceed_number_of_dimensions, and into_slices_should_match_shape_rank
    x = rg.ones((3, 5))
    with pytest.raises(rg.ShapeError, match=r"slice: 3 ranges .*\[3, 5\]"):
        x.slice([(0, 1), (0, 1), (0, 1)])
    with pytest.raises(IndexError, match="too many indices"):
        x[0:1, 0:1, 0:1]
    with pytest.raises(rg.ShapeError, match="slice"):
        x.slice([slice(None), (1, 2), slice(None)])


@pytest.mark.parametrize("op", ["add", "sub", "mul", "div"])
def test_binary_op_shapes_must_broadcast(op):
    # binary_ops_shapes_no_broadcast / binary_ops_shapes_with_broadcast
    with pytest.raises(rg.ShapeError, match=rf"^{op}: .*\[3, 5\] float32, \[3, 6\] float32"):
        getattr(rg.ones((3, 5)), op)(rg.ones((3, 6)))
    base = np.arange(1, 16, dtype=np.float32).reshape(3, 5)
    row = np.arange(2, 7, dtype=np.float32).reshape(1, 5)
    a, b = rg.tensor(base).require_grad(), rg.tensor(row).require_grad()
    out = getattr(a, op)(b)
    grads = (out * rg.tensor(weights_like((3, 5)))).sum().backward()
    ta, tb = torch.tensor(base, requires_grad=True), torch.tensor(row, requires_grad=True)
    expected = getattr(ta, op)(tb)
    (expected * torch.tensor(weights_like((3, 5)))).sum().backward()
    close(out, expected.detach().numpy())
    close(a.grad(grads), ta.grad.numpy())
    close(b.grad(grads), tb.grad.numpy(), 1e-4)  # summed over the broadcast rows


def test_binary_op_devices_must_match():
    # binary_ops_devices: Burn compares any two devices; here two logical cpu devices
    a = rg.ones((2,), device=rg.Device("cpu", 0)).require_grad()
    b = rg.ones((2,), device=rg.Device("cpu", 1))
    with pytest.raises(rg.RetrogradError, match=r"mul: .*\(cpu and cpu:1\)"):
        a * b
    close(a.grad((a * 3.0).sum().backward()), [3.0, 3.0])


@pytest.mark.parametrize(
    "source, destination, message",
    [
        ([0, 1, 3], [0, 1, 2], "dimension 3 is out of range"),  # movedim_args_vec_out_of_bounds
        ([0, 1, 1], [0, 1, 2], r"\[0, 1, 1\]"),  # movedim_args_vec_duplicates
        ([0, 1], [0, 1, 2], "differ in length"),  # movedim_args_length
    ],
)
def test_movedim_argument_checks(source, destination, message):
    x = rg.arange(0, 24).float().reshape(2, 3, 4).require_grad()
    with pytest.raises(rg.ShapeError, match=rf"movedim: .*{message}"):
        x.movedim(source, destination)
    moved = x.movedim([0, 1, 2], [2, 0, 1])
    assert moved.shape == (3, 4, 2)
    g = x.grad((moved * rg.tensor(weights_like((3, 4, 2)))).sum().backward())
    close(g, np.moveaxis(weights_like((3, 4, 2)), [2, 0, 1], [0, 1, 2]))


def test_unsqueeze_dim_out_of_range():
    # unsqueeze_dim_same_rank is Rust's rank check at the type level; at run time, a dimension
    # past the output's rank is the error (torch's range: -ndim-1 .. ndim)
    x = rg.ones((2, 3, 4))
    assert x.unsqueeze_dim(3).shape == (2, 3, 4, 1)
    assert x.unsqueeze_dim(-4).shape == (1, 2, 3, 4)
    for dim in (4, -5):
        with pytest.raises(rg.ShapeError, match="unsqueeze_dim: dimension"):
            x.unsqueeze_dim(dim)


def test_select_errors_name_select():
    # unwrap_dim_index_uses_operation_origin: the error names the op that was called ("Select"),
    # not the one it runs on (retrograd's select named index_select)
    x = rg.tensor([[1.0, 2.0], [3.0, 4.0]]).require_grad()
    with pytest.raises(rg.ShapeError, match=r"^select: dimension -3 is out of range"):
        x.select(-3, rg.tensor([0, 1]))
    with pytest.raises(rg.IndexOutOfRangeError, match=r"^select: index 2 is out of range"):
        x.select(0, rg.tensor([2]))
    with pytest.raises(rg.DTypeError, match=r"^select: indices must be int64"):
        x.select(0, rg.tensor([0.0]))
    with pytest.raises(rg.ShapeError, match=r"^select: an index into a 0-d tensor"):
        rg.tensor(1.0).select(0, rg.tensor([0, 0]))
    with pytest.raises(rg.ShapeError, match=r"^index_select: dimension -3"):
        x.index_select(-3, rg.tensor([0, 1]))
    picked = x.select(-1, rg.tensor([1, 1, 0]))
    eq(picked, [[2.0, 2.0, 1.0], [4.0, 4.0, 3.0]])
    close(x.grad(picked.sum().backward()), [[1.0, 2.0], [1.0, 2.0]])


# ---- burn-tensor src/tensor/api/base.rs ----------------------------------------------------------


def test_scalar_reads():
    # scalar_read_returns_shape_error / scalar_read_converts_to_requested_element
    with pytest.raises(rg.ShapeError, match=r"item: .*\[2\]"):
        rg.tensor([1.0, 2.0]).item()
    value = rg.tensor([3]).item()
    assert value == 3 and isinstance(value, int)
    assert float(rg.tensor([3])) == 3.0


EIGHT_BY_FOUR = np.arange(32, dtype=np.float32).reshape(8, 4)


@pytest.mark.parametrize(
    "burn, python, ranges, rows",
    [
        # slice_range_single_dim_leading and test_negative_slice_indices: Burn's range, the
        # Python slice, the (start, end) pair for ``slice``, and the rows Burn's to_range gives
        ("0..5", slice(0, 5), (0, 5), (0, 5)),
        ("-3..-1", slice(-3, -1), (-3, -1), (5, 7)),
        ("0..=4", slice(0, 5), (0, 5), (0, 5)),
        ("-2..=-1", slice(-2, None), (-2, None), (6, 8)),
        ("..3", slice(None, 3), (0, 3), (0, 3)),
        ("..-5", slice(None, -5), (0, -5), (0, 3)),
        ("5..", slice(5, None), (5, None), (5, 8)),
        ("-3..", slice(-3, None), (-3, None), (5, 8)),
        ("..", slice(None), (0, None), (0, 8)),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_slice_ranges_single_dim_leading(burn, python, ranges, rows):
    start, end = rows
    expected = EIGHT_BY_FOUR[start:end]
    out, grad = rg_grad(lambda t: t.slice([ranges]), EIGHT_BY_FOUR)
    eq(out, expected)
    reference = np.zeros((8, 4), dtype=np.float32)
    reference[start:end] = weights_like(expected.shape)
    close(grad, reference)
    out, grad, torch_out, torch_g = grad_through(lambda t: t[python], EIGHT_BY_FOUR)
    eq(out, expected)
    eq(torch_out, expected)
    close(grad, torch_g)


def test_slice_ranges_multi_dim():
    # slice_range_multi_dim: 0..5/0..4, 0../0.., 0..=7/0..=3, 0..5/0..3
    t = rg.tensor(EIGHT_BY_FOUR)
    eq(t.slice([(0, 5), (0, 4)]), EIGHT_BY_FOUR[0:5, 0:4])
    eq(t.slice([(0, None), (0, None)]), EIGHT_BY_FOUR)
    eq(t.slice([(0, 8), (0, 4)]), EIGHT_BY_FOUR)
    eq(t.slice([(0, 5), (0, 3)]), EIGHT_BY_FOUR[0:5, 0:3])
    eq(t[0:5, 0:3], EIGHT_BY_FOUR[0:5, 0:3])


def test_slice_range_multi_dim_index():
    # slice_range_multi_dim_index: Burn's single index is a range of one (the dimension kept);
    # Python's int index drops the dimension, as torch's does
    x = rg.tensor(EIGHT_BY_FOUR).require_grad()
    kept = x.slice([(0, 1), (2, 3)])
    eq(kept, [[2.0]])
    eq(x.slice([(-1, None), (-1, None)]), [[31.0]])
    eq(x[0, 2], 2.0)
    eq(x[-1, -1], 31.0)
    grads = (kept.sum() * 2.0 + x[-1, -1] * 3.0).backward()
    expected = np.zeros((8, 4), dtype=np.float32)
    expected[0, 2], expected[7, 3] = 2.0, 3.0
    close(x.grad(grads), expected)


def test_slice_range_multi_dim_heterogeneous():
    # slice_range_multi_dim_heterogeneous: s![0..5, .., -1], s![..=4, 0..=3, .., -2..],
    # s![1..-1, ..]
    a = np.arange(64, dtype=np.float32).reshape(8, 4, 2)
    out = rg.tensor(a).slice([(0, 5), slice(None), (-1, None)])
    eq(out, a[0:5, :, 1:2])
    b = np.arange(192, dtype=np.float32).reshape(8, 4, 2, 3)
    out, grad, _, torch_g = grad_through(
        lambda t: t.slice([(0, 5), (0, 4), slice(None), (-2, None)]),
        b,
        lambda t: t[0:5, 0:4, :, 1:3],
    )
    eq(out, b[0:5, 0:4, 0:2, 1:3])
    close(grad, torch_g)
    c = np.arange(12, dtype=np.float32).reshape(3, 4)
    eq(rg.tensor(c).slice([(1, -1), slice(None)]), c[1:2, 0:4])
    eq(rg.tensor(c)[1:-1, :], c[1:2, 0:4])


# ---- burn-std src/tensor/shape.rs and src/tensor/slice.rs ----------------------------------------


def test_into_slices_clamps_where_python_indexing_does():
    # shape.rs test_into_slices: Shape::into_slices clamps the end to the size (1..4 of 3 is
    # 1..3, s![..20, 2] of [2, 3, 4] is 0..2, 2..3), as Python indexing does; ``slice`` checks
    # it (check.rs)
    v = rg.tensor([0.0, 1.0, 2.0])
    eq(v[1:4], [1.0, 2.0])
    eq(v[:-2], [0.0])
    with pytest.raises(rg.IndexOutOfRangeError, match="slice"):
        v.slice([(1, 4)])
    cube = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    t = rg.tensor(cube)
    eq(t[:20, 2], cube[0:2, 2])
    assert t[:20, 2:3].shape == (2, 1, 4)
    eq(t[:, 1:-1], cube[:, 1:2])
    eq(rg.tensor(np.arange(12, dtype=np.float32).reshape(3, 4))[1:4, 0:2], [[4, 5], [8, 9]])


def test_into_slices_fill_the_remaining_dimensions():
    # slice.rs into_slices_should_return_for_all_shape_dims / into_slices_all_dimensions:
    # s![1] of [2, 3, 1] is [1..2, 0..3, 0..1]; s![1, 0..2] is [1..2, 0..2, 0..1]
    cube = np.arange(6, dtype=np.float32).reshape(2, 3, 1)
    t = rg.tensor(cube)
    eq(t.slice([(1, 2)]), cube[1:2])
    eq(t.slice([(1, 2), (0, 2)]), cube[1:2, 0:2])
    eq(t.slice([(1, 2), (0, 2), slice(None)]), cube[1:2, 0:2])
    eq(t.slice([slice(None)]), cube)


def test_into_slices_of_an_empty_dimension():
    # into_slices_supports_empty_dimensions: s![.., 1, ..] of [0, 3, 1]
    t = rg.ones((0, 3, 1))
    assert t.slice([slice(None), (1, 2), slice(None)]).shape == (0, 1, 1)
    assert t[:, 1, :].shape == (0, 1)
    assert t[:, 1:2].sum().item() == 0.0


def burn_indices(start, end, step):
    """The indices Burn's ``Slice { start, end, step }`` picks: the range ``start..end``,
    walked backwards for a negative step, every ``|step|``-th element."""
    picked = np.arange(start, end)
    return picked[:: -abs(step)] if step < 0 else picked[::step]


STEPPED = [
    # (start, end, step, indices) as Burn's comments list them, from test_slice_output_size and
    # shape.rs' test_shape_slice_output_shape_*
    (0, 10, 1, list(range(10))),
    (0, 10, 2, [0, 2, 4, 6, 8]),
    (0, 10, 3, [0, 3, 6, 9]),  # ceil(10/3)
    (0, 10, -1, list(range(9, -1, -1))),
    (0, 10, -2, [9, 7, 5, 3, 1]),
    (2, 8, -3, [7, 4]),  # ceil(6/3)
    (5, 5, 1, []),  # empty range
    (1, 9, 3, [1, 4, 7]),
    (0, 7, 4, [0, 4]),
    (2, 8, -2, [7, 5, 3]),
    (0, 10, -3, [9, 6, 3, 0]),
    (2, 14, 4, [2, 6, 10]),
    (2, 7, 2, [2, 4, 6]),
    (0, 10, 100, [0]),  # step larger than the range
    (0, 7, 3, [0, 3, 6]),  # uneven divisions
    (0, 11, 4, [0, 4, 8]),
    (1, 10, 5, [1, 6]),
]


@pytest.mark.parametrize("start, end, step, indices", STEPPED, ids=str)
def test_stepped_slice_picks_burns_indices(start, end, step, indices):
    assert burn_indices(start, end, step).tolist() == indices  # Burn's comment, restated
    base = np.arange(20, dtype=np.float32) * 1.5
    x = rg.tensor(base).require_grad()
    out = x.slice([slice(start, end, step)])
    eq(out, base[indices])
    if indices:
        w = weights_like(out.shape)
        expected = np.zeros(20, dtype=np.float32)
        expected[indices] = w
        close(x.grad((out * rg.tensor(w)).sum().backward()), expected)


def test_stepped_slices_of_many_dimensions():
    # shape.rs: basic [10, 10, 10] -> [5, 6, 10]; positive steps [20, 20, 20, 30] ->
    # [5, 3, 2, 30]; negative [20, 20, 20] -> [10, 3, 20]; mixed -> [5, 4, 3]; partial
    # [10, 20, 30, 40] -> [3, 20, 30, 40]; edge cases [10, 20, 30] -> [1, 1, 0]; no slices keep
    # the shape; uneven [20, 20, 20] -> [3, 3, 2]
    cases = [
        ((10, 10, 10), [(0, 5, 1), (2, 8, 1)], (5, 6, 10)),
        ((20, 20, 20, 30), [(0, 10, 2), (1, 9, 3), (0, 7, 4)], (5, 3, 2, 30)),
        ((20, 20, 20), [(0, 10, -1), (2, 8, -2)], (10, 3, 20)),
        ((20, 20, 20), [(1, 6, 1), (0, 10, -3), (2, 14, 4)], (5, 4, 3)),
        ((10, 20, 30, 40), [(2, 7, 2)], (3, 20, 30, 40)),
        ((10, 20, 30), [(0, 1, 1), (0, 10, 100), (5, 5, 1)], (1, 1, 0)),
        ((10, 20, 30), [], (10, 20, 30)),
        ((20, 20, 20), [(0, 7, 3), (0, 11, 4), (1, 10, 5)], (3, 3, 2)),
    ]
    for shape, slices, expected in cases:
        out = rg.zeros(shape).slice([slice(*s) for s in slices])
        assert out.shape == expected, (shape, slices, out.shape)
    cube = np.arange(8000, dtype=np.float32).reshape(20, 20, 20)
    picks = [burn_indices(*s) for s in [(1, 6, 1), (0, 10, -3), (2, 14, 4)]]
    eq(
        rg.tensor(cube).slice([slice(1, 6, 1), slice(0, 10, -3), slice(2, 14, 4)]),
        cube[np.ix_(*picks)],
    )


def test_zero_step_is_an_error():
    # slice.rs test_slice_from_str: "Step cannot be zero"
    x = rg.arange(0, 10).float()
    with pytest.raises(rg.ShapeError, match="slice: step"):
        x.slice([slice(0, 3, 0)])
    with pytest.raises(IndexError, match="step cannot be zero"):
        x[::0]


# ---- burn-std src/tensor/mod.rs: reshapes of views with unusual layouts --------------------------


def unsqueezed_column(t):
    # a [32] vector as [32, 1, 1, 1] through a [1, 32, 1, 1] view: strides [1, 32, 32, 32]
    return t.reshape(1, 32, 1, 1).permute(1, 0, 2, 3)


LAYOUTS = {
    # reshape_analysis_is_contiguous: [32, 1, 1, 1] -> [1, 1, 32, 1, 1, 1]
    "is_contiguous": (32, lambda t: t.reshape(32, 1, 1, 1).reshape(1, 1, 32, 1, 1, 1)),
    # is_contiguous_2: [32, 1, 1, 8] (strides [8, 8, 8, 1]) -> [1, 1, 32, 1, 1, 8]
    "is_contiguous_2": (256, lambda t: t.reshape(32, 1, 1, 8).reshape(1, 1, 32, 1, 1, 8)),
    # broadcasted_batch: [32, 1, 1, 1] with strides [1, 32, 32, 32] -> [1, 1, 32, 1, 1, 1]
    "broadcasted_batch": (32, lambda t: unsqueezed_column(t).reshape(1, 1, 32, 1, 1, 1)),
    # unsqueeze_split and split_strides_trailing_unit_dims_arbitrary_strides: -> [32, 1, 1, 1, 1]
    "unsqueeze_split": (32, lambda t: unsqueezed_column(t).reshape(32, 1, 1, 1, 1)),
    # split: -> [4, 8, 1, 1, 1]
    "split": (32, lambda t: unsqueezed_column(t).reshape(4, 8, 1, 1, 1)),
    # split_strides_trailing_unit_dim_broadcast_view: a repeat of a unit dim ([26, 1], strides
    # [1, 0]) unsqueezed to [26, 1, 1]
    "repeated_unit_dim": (26, lambda t: t.reshape(26, 1).repeat(1, 1).reshape(26, 1, 1)),
    # split_of_broadcast_dim_keeps_zero: [26, 1] expanded to [26, 16] (strides [1, 0]) ->
    # [26, 4, 4]
    "split_broadcast_dim": (26, lambda t: t.reshape(26, 1).expand(26, 16).reshape(26, 4, 4)),
    # split_strides_plain_unsqueeze: [26, 16] -> [26, 16, 1]
    "plain_unsqueeze": (416, lambda t: t.reshape(26, 16).reshape(26, 16, 1)),
    # is_dense_permuted: [2, 2, 2, 2] with strides [8, 1, 4, 2], flattened
    "permuted": (16, lambda t: t.reshape(2, 2, 2, 2).permute(0, 3, 1, 2).reshape(16)),
    # is_dense_pitched_row: [2, 2, 2, 2] with strides [16, 8, 4, 1] (rows of 4 read 2 wide)
    "pitched_rows": (32, lambda t: t.reshape(2, 2, 2, 4)[..., :2].reshape(4, 4)),
    # and [1, 8, 6, 6] with strides [384, 48, 8, 1]
    "pitched_planes": (384, lambda t: t.reshape(1, 8, 6, 8)[..., :6].reshape(8, 36)),
    # is_dense_unit_dims_carry_no_layout: [1, 4, 1] from a broadcast
    "unit_dims": (4, lambda t: t.reshape(4, 1).expand(4, 1).unsqueeze(0).reshape(4)),
}


@pytest.mark.parametrize("name", list(LAYOUTS))
def test_reshape_of_strided_views(name):
    size, build = LAYOUTS[name]
    out, grad, expected, torch_g = grad_through(build, np.arange(size, dtype=np.float32))
    assert out.shape == expected.shape
    eq(out, expected)
    close(grad, torch_g, 1e-4)


def test_scatter_add_with_an_index_built_from_a_repeated_unit_dim():
    # split_strides_trailing_unit_dim_broadcast_view's regression: an index from unsqueeze +
    # repeat_dim must keep one row per entry, or every update lands on row 0
    index = rg.tensor([2, 0]).unsqueeze_dim(1).repeat_dim(1, 1).unsqueeze_dim(2).repeat_dim(2, 1)
    base = rg.tensor([[[1.0]], [[2.0]], [[3.0]], [[4.0]]]).require_grad()
    values = rg.tensor([[[10.0]], [[20.0]]]).require_grad()
    out = base.scatter(0, index, values, "add")
    eq(out, [[[21.0]], [[2.0]], [[13.0]], [[4.0]]])
    grads = (out * rg.tensor([[[1.0]], [[2.0]], [[3.0]], [[4.0]]])).sum().backward()
    close(base.grad(grads), [[[1.0]], [[2.0]], [[3.0]], [[4.0]]])
    close(values.grad(grads), [[[3.0]], [[1.0]]])


# ---- burn-std src/ops.rs: convolution and unfold options -----------------------------------------

CONV_CALLS = {
    "conv1d": lambda **kw: F.conv1d(rg.ones((1, 2, 6)), rg.ones((2, 2, 3)), **kw),
    "conv2d": lambda **kw: F.conv2d(rg.ones((1, 2, 5, 5)), rg.ones((2, 2, 3, 3)), **kw),
    "conv3d": lambda **kw: F.conv3d(rg.ones((1, 2, 4, 4, 4)), rg.ones((2, 2, 2, 2, 2)), **kw),
    "conv_transpose1d": lambda **kw: F.conv_transpose1d(
        rg.ones((1, 2, 4)), rg.ones((2, 2, 3)), **kw
    ),
    "conv_transpose2d": lambda **kw: F.conv_transpose2d(
        rg.ones((1, 2, 4, 4)), rg.ones((2, 2, 3, 3)), **kw
    ),
    "conv_transpose3d": lambda **kw: F.conv_transpose3d(
        rg.ones((1, 2, 3, 3, 3)), rg.ones((2, 2, 2, 2, 2)), **kw
    ),
    "deform_conv2d": lambda **kw: F.deform_conv2d(
        rg.ones((1, 2, 4, 4)), rg.zeros((1, 18, 2, 2)), rg.ones((2, 2, 3, 3)), **kw
    ),
    "unfold": lambda **kw: F.unfold(rg.ones((1, 2, 4, 4)), 2, **kw),
}


@pytest.mark.parametrize(
    "op, option",
    [
        (op, option)
        for op in CONV_CALLS
        for option in ("stride", "dilation", "groups")
        if not (option == "groups" and op in ("deform_conv2d", "unfold"))
    ],
)
def test_conv_options_must_be_positive(op, option):
    # conv_options_stride_zero, ..._dilation_zero, ..._groups_zero and their conv_transpose,
    # deform_conv and unfold siblings: a zero in any dimension is refused
    call = CONV_CALLS[op]
    assert call().ndim > 0
    spatial = 2 if op == "unfold" else int(op[-2])
    value = 0 if option == "groups" else (0,) + (1,) * (spatial - 1)
    with pytest.raises(rg.ShapeError, match=rf"{op}: {option} must be positive"):
        call(**{option: value})


def test_deform_conv2d_offset_groups_must_be_positive():
    # deform_conv_options_offset_groups_zero: torchvision's deform_conv2d takes the offset groups
    # from the offset's channels, so none is an offset of 0 channels (it divided by zero)
    x, weight = rg.ones((1, 2, 4, 4)), rg.ones((2, 2, 3, 3))
    with pytest.raises(rg.ShapeError, match=r"deform_conv2d: offset must be .*\[1, 0, 2, 2\]"):
        F.deform_conv2d(x, rg.zeros((1, 0, 2, 2)), weight)
    # deform_conv_options_weights_groups_zero: the weight's groups follow from its shape too
    with pytest.raises(rg.ShapeError, match=r"deform_conv2d: weight .* into groups"):
        F.deform_conv2d(x, rg.zeros((1, 18, 2, 2)), rg.ones((2, 0, 3, 3)))
    with pytest.raises(rg.ShapeError, match=r"deform_conv2d: weight .* empty kernel"):
        F.deform_conv2d(x, rg.zeros((1, 18, 2, 2)), rg.ones((2, 2, 0, 3)))


@pytest.mark.parametrize("op", [op for op in CONV_CALLS if op.startswith("conv")])
def test_conv_kernel_must_not_be_empty(op):
    # Burn's options checks refuse zero sizes; an empty kernel is torch's RuntimeError ("kernel
    # size should be greater than zero"), where retrograd gave an output of bias alone
    spatial = int(op[-2])
    x = rg.ones((1, 2) + (4,) * spatial)
    weight = rg.ones((2, 2, 0) + (3,) * (spatial - 1))
    with pytest.raises(rg.ShapeError, match=rf"{op}: kernel size must be positive"):
        getattr(F, op)(x, weight)


# ---- burn-backend src/backend/ops/modules/conv.rs and unfold.rs: output sizes --------------------


@pytest.mark.parametrize(
    "kernel, stride, padding, dilation, size_in, size_out",
    [
        (3, 1, 1, 1, 3, 3),  # test_calculate_output_size_1
        (5, 2, 3, 1, 27, 15),  # test_calculate_output_size_2
        (5, 2, 3, 2, 27, 13),  # test_calculate_output_size_3
        (3, 1, "same", 1, 3, 3),  # test_calculate_same_padding_1
        (3, 2, 4, 1, 7, 7),  # test_calculate_same_padding_2: calculate_conv_padding gives 4
        (3, 2, 7, 1, 7, 10),  # test_calculate_output_padding_1: padding 7 for 10 outputs
    ],
)
def test_conv_output_sizes(kernel, stride, padding, dilation, size_in, size_out):
    base = np.linspace(-1.0, 1.0, 2 * size_in, dtype=np.float32).reshape(1, 2, size_in)
    weight = np.linspace(0.5, -0.5, 6 * kernel, dtype=np.float32).reshape(3, 2, kernel)
    options = dict(stride=stride, padding=padding, dilation=dilation)
    out, grad, expected, torch_g = grad_through(
        lambda t: F.conv1d(t, rg.tensor(weight), **options),
        base,
        lambda t: torch.nn.functional.conv1d(t, torch.tensor(weight), **options),
    )
    assert out.shape == (1, 3, size_out)
    close(out, expected, 1e-5)
    close(grad, torch_g, 1e-5)


def test_conv2d_output_shape():
    # test_expect_conv2d_output_shape: [12, 3, 27, 3] * [8, 3, 5, 3], stride [2, 1], padding
    # [3, 1], dilation [2, 1] -> [12, 8, 13, 3]
    out = F.conv2d(
        rg.ones((12, 3, 27, 3)),
        rg.ones((8, 3, 5, 3)),
        stride=(2, 1),
        padding=(3, 1),
        dilation=(2, 1),
    )
    assert out.shape == (12, 8, 13, 3)


@pytest.mark.parametrize(
    "size, window, step, windows",
    [
        # test_calculate_unfold_windows
        (3, 3, 1, 1),
        (4, 3, 1, 2),
        (5, 3, 1, 3),
        (3, 3, 2, 1),
        (4, 3, 2, 1),
        (5, 3, 2, 2),
        # Burn counts 0 windows here; torch's (API.md's) unfold refuses a window longer than
        # the dimension
        (2, 5, 1, 0),
        (2, 3, 1, 0),
        (2, 3, 2, 0),
    ],
)
def test_unfold_windows(size, window, step, windows):
    base = np.arange(1, size + 1, dtype=np.float32)
    if windows == 0:
        with pytest.raises(rg.ShapeError, match=rf"unfold: window size {window}"):
            rg.tensor(base).unfold(0, window, step)
        with pytest.raises(RuntimeError):
            torch.tensor(base).unfold(0, window, step)
        return
    out, grad, expected, torch_g = grad_through(lambda t: t.unfold(0, window, step), base)
    assert out.shape == (windows, window)
    eq(out, expected)
    close(grad, torch_g)


def test_unfold_shape():
    # test_calculate_unfold_shape: [2, 6, 6] unfolded along 1 by 3, step 2 -> [2, 2, 6, 3]
    base = np.arange(72, dtype=np.float32).reshape(2, 6, 6)
    out, grad, expected, torch_g = grad_through(lambda t: t.unfold(1, 3, 2), base)
    assert out.shape == (2, 2, 6, 3)
    eq(out, expected)
    close(grad, torch_g)


# ---- burn-std src/tensor/dtype.rs, src/data/tensor/base.rs, src/data/compare.rs ------------------


@pytest.mark.parametrize("dtype", ["float64", "float32", "float16", "bfloat16"])
def test_finfo(dtype):
    # finfo_f32 / finfo_f64 / finfo_f16 / finfo_bf16 and finfo_invariants
    info, reference = rg.finfo(dtype), torch.finfo(getattr(torch, dtype))
    assert (info.eps, info.max, info.min, info.tiny) == (
        reference.eps,
        reference.max,
        reference.min,
        reference.tiny,
    )
    assert info.eps > 0 and info.tiny > 0 and info.max > 0 and info.min < 0
    assert info.max > info.tiny
    if dtype in ("float16", "bfloat16"):
        assert info.eps > rg.finfo("float32").eps
    if dtype in ("float32", "float64"):
        numpy_info = np.finfo(dtype)
        assert (info.eps, info.max, info.min, info.tiny) == (
            numpy_info.eps,
            numpy_info.max,
            numpy_info.min,
            numpy_info.tiny,
        )


def test_finfo_of_a_non_float_dtype():
    # dtype_finfo_returns_none_for_non_float: torch raises TypeError; rg's DTypeError is one
    for dtype in ("int64", "bool"):
        with pytest.raises(rg.DTypeError, match="finfo"):
            rg.finfo(dtype)


def test_conversions_to_bool_int_and_float():
    # should_convert_negative_values_to_bool_store: any nonzero value is true
    eq(rg.tensor([-1, 0, 1, -12]).bool(), [True, False, True, True])
    eq(rg.tensor([-1.5, 0.0, 0.5]).bool(), [True, False, True])
    # test_to_vec_as: a float to int cast truncates (toward zero, as torch's)
    eq(rg.tensor([0.0, 1.0, 2.5]).int(), [0, 1, 2])
    eq(rg.tensor([-2.5, -0.5, 3.9]).int(), torch.tensor([-2.5, -0.5, 3.9]).long().numpy())
    # test_into_vec_as: int to float
    converted = rg.tensor([0, 1, 2, 3]).float()
    assert converted.dtype == "float32"
    eq(converted, [0.0, 1.0, 2.0, 3.0])
    # test_precision: 0..32 through every dtype and back
    for dtype in ("float32", "float64", "int64"):
        eq(rg.arange(0, 32).cast(dtype).int(), np.arange(32))


def test_float64_to_float32_overflows_to_infinity():
    # element/cast.rs to_element_float: past float32's range is +-inf, its max stays, NaN stays
    big = float(np.finfo(np.float32).max)
    values = np.array([1e39, -1e39, big, -big, np.inf, -np.inf, np.nan])
    x = rg.tensor(values).require_grad()
    narrowed = x.cast("float32")
    assert narrowed.dtype == "float32"
    eq(narrowed, values.astype(np.float32))
    eq(rg.tensor([1e39, -1e39]), [np.inf, -np.inf])  # Python floats are float32 already
    grads = (narrowed[:4] * 2.0).sum().backward()  # the cast passes the gradient back in float64
    close(x.grad(grads), [2.0, 2.0, 2.0, 2.0, 0.0, 0.0, 0.0])
    assert x.grad(grads).dtype == "float64"


def test_int_float_element_casts():
    # to_element_int_to_float and to_element_float_to_int (truncation); Burn's unsigned
    # overflow panics have no counterpart (int64 is the one int dtype)
    eq(rg.tensor([-1, 255, 65_535]).float(), [-1.0, 255.0, 65_535.0])
    eq(rg.tensor([-1, 255, 65_535]).cast("float64"), [-1.0, 255.0, 65_535.0])
    eq(rg.tensor([-1.0, 1.0, 1.8, 123.456]).int(), [-1, 1, 1, 123])


def test_assert_close_with_an_absolute_tolerance():
    # should_assert_appox_eq_limit / ..._above_limit / ..._check_shape
    assert_close(rg.tensor([[3.0, 5.0, 6.0]]), rg.tensor([[3.03, 5.0, 6.0]]), atol=3e-2, rtol=0)
    with pytest.raises(AssertionError, match="not close"):
        assert_close(
            rg.tensor([[3.0, 5.0, 6.0]]), rg.tensor([[3.031, 5.0, 6.0]]), atol=1e-2, rtol=0
        )
    with pytest.raises(AssertionError, match="shape"):
        assert_close(
            rg.tensor([[3.0, 5.0, 6.0, 7.0]]), rg.tensor([[3.0, 5.0, 6.0]]), atol=1e-2, rtol=0
        )
