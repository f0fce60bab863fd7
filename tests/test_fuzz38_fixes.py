"""The defects the round-38 random programs (``tests/test_random_programs_38.py``) found, each
checked against torch 2.13's behaviour and failing on the code before its fix."""

from __future__ import annotations

import math

import numpy as np
import pytest

import retrograd as rg

OVERLAP = "refer to a single memory location"


def _grid(requires_grad: bool = False):
    x = rg.tensor(np.arange(12.0).reshape(3, 4), dtype=rg.float64)
    return x.requires_grad_(True) * 1.0 if requires_grad else x


# torch 2.13 refuses each of these writes ("unsupported operation: some elements of the input
# tensor and the written-to tensor refer to a single memory location"): the source overlaps
# the tensor written to in part, so torch would read elements it had already written
@pytest.mark.parametrize(
    "write",
    [
        lambda x: x[1:].__iadd__(x[:-1]),
        lambda x: x.__setitem__(slice(1, None), x[:-1]),
        lambda x: x.__setitem__(slice(0, 2), x[1:3]),
        lambda x: x.add_(x[0, 0]),
        lambda x: x[0].add_(x[0, 1:2]),
        lambda x: x[0, 1:].sub_(x[0, :-1]),
        lambda x: x[1:].mul_(x[:-1]),
        lambda x: x[1:].div_(x[:-1]),
        lambda x: x[1:].addcmul_(x[:-1], x[:-1]),
        lambda x: x[1:].lerp_(x[:-1], 0.5),
        lambda x: x[1:].clamp_(min=x[:-1]),
        lambda x: x.view(4, 3).add_(x.t()),
        lambda x: x.__setitem__(rg.tensor([1, 2]), x[0]),
        lambda x: x.__setitem__(rg.tensor([1, 2]), x[0, 0]),
        lambda x: x[1:].atan2_(x[:-1]),
        lambda x: x[1:].hypot_(x[:-1]),
        lambda x: x[1:].fmod_(x[:-1]),
        lambda x: x[1:].multiply_(other=x[:-1]),
        lambda x: x.index_put_((rg.tensor([1, 2]),), x[0]),
        lambda x: x.index_put_((rg.tensor([1, 2]),), x[0], accumulate=True),
    ],
    ids=[
        "iadd-shifted",
        "setitem-shifted",
        "setitem-rows",
        "add-first-element",
        "row-add-element",
        "sub-shifted-row",
        "mul-shifted",
        "div-shifted",
        "addcmul",
        "lerp",
        "clamp-tensor-min",
        "same-range-other-strides",
        "index-put-row",
        "index-put-element",
        "atan2",
        "hypot",
        "fmod",
        "multiply-keyword",
        "index-put-method",
        "index-put-method-accumulate",
    ],
)
@pytest.mark.parametrize("requires_grad", [False, True])
def test_a_write_from_a_partly_overlapping_view_is_refused_as_torch(write, requires_grad):
    x = _grid(requires_grad)
    before = x.detach().numpy().copy()
    with pytest.raises(rg.InvalidArgumentError, match=OVERLAP):
        write(x)
    np.testing.assert_array_equal(x.detach().numpy(), before)  # left as it was
    x.add_(1.0)  # and usable
    np.testing.assert_array_equal(x.detach().numpy(), before + 1.0)


# torch 2.13 runs these (each expected value printed by torch): no overlap, the same tensor,
# another storage, or a layout torch does not check (a copy of the values is read then)
@pytest.mark.parametrize(
    ("write", "first_row_after", "second_row_after"),
    [
        (lambda x: x.__setitem__(1, x[0]), [0, 1, 2, 3], [0, 1, 2, 3]),
        (lambda x: x.mul_(x), [0, 1, 4, 9], [16, 25, 36, 49]),
        (lambda x: x.add_(x.view(12).view(3, 4)), [0, 2, 4, 6], [8, 10, 12, 14]),
        (lambda x: x.view(4, 3).add_(x.view(4, 3)), [0, 2, 4, 6], [8, 10, 12, 14]),
        (lambda x: x.copy_(x.flip(0)), [8, 9, 10, 11], [4, 5, 6, 7]),
        (lambda x: x[1:].clamp_(min=x[:1]), [0, 1, 2, 3], [4, 5, 6, 7]),
        (lambda x: x[0].add_(x.detach()[1]), [4, 6, 8, 10], [4, 5, 6, 7]),
        (lambda x: x.__setitem__(x > 5, x[0, 0]), [0, 1, 2, 3], [4, 5, 0, 0]),
        (lambda x: x.__setitem__((0, slice(0, 3)), x[:, 1]), [1, 5, 9, 3], [4, 5, 6, 7]),
        (lambda x: x.view(-1)[1:].add_(x.view(-1)[0]), [0, 1, 2, 3], [4, 5, 6, 7]),
    ],
)
def test_writes_torch_allows_still_run(write, first_row_after, second_row_after):
    x = _grid()
    write(x)
    np.testing.assert_array_equal(x.numpy()[0], first_row_after)
    np.testing.assert_array_equal(x.numpy()[1], second_row_after)


def test_a_refused_overlap_leaves_the_gradient_path_usable():
    """After the refusal, the same tensor is written from a copy and differentiated: the
    gradient is torch's (``x[1:] += x[:-1].clone()``, sum weighted by row index: x's
    gradient row i is (i) + (i + 1) for i < 2 and 2 for the last row)."""
    leaf = rg.tensor(np.arange(12.0).reshape(3, 4), dtype=rg.float64).requires_grad_(True)
    x = leaf * 1.0
    with pytest.raises(rg.InvalidArgumentError, match=OVERLAP):
        x[1:] += x[:-1]
    x[1:] += x[:-1].clone()
    weights = rg.tensor([[0.0], [1.0], [2.0]], dtype=rg.float64)
    (grad,) = rg.autograd.grad((x * weights).sum(), [leaf])
    np.testing.assert_array_equal(grad.numpy(), np.repeat([[1.0], [3.0], [2.0]], 4, axis=1))


# torch's ``t[basic] = v`` (``copy_to``): a 0-d value is a fill, one of the target's shape is
# copied as it is; neither refused when it is the target's own region (torch 2.13 runs each)
def test_setitem_of_the_targets_own_values_runs_as_torch():
    x = rg.arange(12.0).reshape(3, 4) * 1.0
    x[2, 0::3] += rg.ones(1)  # x[2, 0::3] = (its own values + 1)
    x[2:3, 0::3] += 1
    x[1, 0:1] = x[1, 0:1].reshape(())
    np.testing.assert_array_equal(x.numpy()[2], [10.0, 9.0, 10.0, 13.0])
    np.testing.assert_array_equal(x.numpy()[1], [4.0, 5.0, 6.0, 7.0])


def test_copy_from_the_same_region_in_another_shape_is_refused_as_torch():
    x = rg.arange(12.0)
    with pytest.raises(rg.InvalidArgumentError, match=OVERLAP):
        x[0:1].copy_(x[0:1].view(()))
    with pytest.raises(rg.InvalidArgumentError, match=OVERLAP):
        x[0:4].view(2, 2).copy_(x[0:4].view(4))


# torch 2.13's ``torch.add(number, tensor)`` and the other number-first functions: the number
# is a wrapped number, weaker than a 0-d tensor of a narrow integer dtype, and wrapped into its
# range (each (dtype, value) printed by torch)
@pytest.mark.parametrize(
    ("call", "dtype", "value"),
    [
        (lambda u, v: rg.add(300, u), "uint8", 47),
        (lambda u, v: rg.add(3, u, alpha=2), "uint8", 9),
        (lambda u, v: rg.sub(300, u), "uint8", 41),
        (lambda u, v: rg.add(-1, u), "uint8", 2),
        (lambda u, v: rg.remainder(7, u), "uint8", 1),
        (lambda u, v: rg.floor_divide(7, u), "uint8", 2),
        (lambda u, v: rg.div(7, u, rounding_mode="floor"), "uint8", 2),
        (lambda u, v: rg.bitwise_left_shift(1, u), "uint8", 8),
        (lambda u, v: rg.bitwise_and(259, u), "uint8", 3),
        (lambda u, v: rg.add(3, v), "int32", 4),
        (lambda u, v: rg.mul(2, v), "int32", 2),
        (lambda u, v: rg.div(300, u), "float32", 100.0),
        (lambda u, v: rg.true_divide(7, v), "float32", 7.0),
        (lambda u, v: rg.add(3, rg.tensor(True)), "int64", 4),
        (lambda u, v: rg.mul(2.5, u), "float32", 7.5),
    ],
)
def test_a_number_first_beside_a_narrow_integer_0d_tensor_promotes_as_torch(call, dtype, value):
    result = call(rg.tensor(3, dtype=rg.uint8), rg.tensor(1, dtype=rg.int32))
    assert result.dtype == getattr(rg, dtype)
    assert result.item() == value


def test_a_number_first_beside_a_narrow_integer_tensor_wraps_as_torch():
    result = rg.sub(200, rg.tensor([3, 4], dtype=rg.int8))
    assert result.dtype == rg.int8
    assert result.tolist() == [-59, -60]  # 200 is int8's -56


# the strides of flip, rot90 and tril/triu of a non-contiguous tensor, as torch 2.13 prints
# them: flip keeps its input's layout (so rot90, a flip then a transpose, is row-major again
# for a transposed input), tril/triu are row-major; view() follows from the strides
@pytest.mark.parametrize(
    ("make", "strides", "views"),
    [
        (lambda t: t.flip(0), (1, 4), False),
        (lambda t: t.flip(0, 1), (1, 4), False),
        (lambda t: t.rot90(), (4, 1), True),
        (lambda t: t.rot90(3), (4, 1), True),
        (lambda t: t.tril(), (3, 1), True),
        (lambda t: t.triu(1), (3, 1), True),
    ],
    ids=["flip", "flip-both", "rot90", "rot90-3", "tril", "triu"],
)
def test_strides_of_flip_rot90_and_triangles_of_a_transpose_are_torchs(make, strides, views):
    out = make(rg.arange(12.0).reshape(3, 4).t())
    assert out.stride() == strides
    assert out.is_contiguous() == (strides == (3, 1) or strides == (4, 1))
    if views:
        assert out.view(-1).shape == (12,)
    else:
        with pytest.raises(rg.RetrogradError):
            out.view(-1)


def test_strides_of_flip_of_a_permuted_3d_tensor_are_torchs():
    x = rg.arange(24.0).reshape(2, 3, 4)
    assert x.permute(1, 2, 0).flip(0).stride() == (4, 1, 12)
    assert x.transpose(0, 2).flip(1, 2).stride() == (1, 4, 12)
    assert x.transpose(0, 2).tril(1).stride() == (6, 2, 1)


# the gradient of cumprod at its first zero, as torch 2.13's (printed): the terms run up to the
# next zero and include it, so an infinity between them makes a NaN (inf * 0), and none past
# it count
@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ([0.0, math.inf, 1.0, 0.0], [math.nan, 0.0, 0.0, 0.0]),
        ([0.0, 0.0, math.inf], [1.0, 0.0, 0.0]),
        ([2.0, 0.0, 3.0, 0.0, math.inf], [1.0, 8.0, 0.0, 0.0, 0.0]),
    ],
)
def test_cumprod_gradient_at_the_first_zero_is_torchs(values, expected):
    x = rg.tensor(values, dtype=rg.float64).requires_grad_(True)
    (grad,) = rg.autograd.grad(x.cumprod(0).sum(), [x])
    np.testing.assert_array_equal(grad.numpy(), expected)
