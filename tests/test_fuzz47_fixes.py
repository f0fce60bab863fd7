"""Regressions found by the round-47 indexing programs (tests/test_random_indexing_47.py);
expected values from torch."""

from __future__ import annotations

import numpy as np
import pytest

import retrograd as rg

torch = pytest.importorskip("torch")


def test_put_reads_an_index_of_any_shape_in_flat_order() -> None:
    torch.manual_seed(0)
    base = torch.randn(3, 4, dtype=torch.float64)
    index = torch.tensor([[0, -1, 5], [2, 2, 7]])
    source = torch.randn(2, 3, dtype=torch.float64)
    for accumulate in (False, True):
        leaf = base.clone().requires_grad_(True)
        src = source.clone().requires_grad_(True)
        expected = leaf.put(index, src, accumulate=accumulate)
        weights = torch.randn(3, 4, dtype=torch.float64)
        want = torch.autograd.grad((expected * weights).sum(), [leaf, src])

        x = rg.tensor(base.numpy()).requires_grad_(True)
        s = rg.tensor(source.numpy()).requires_grad_(True)
        got = x.put(rg.tensor(index.numpy()), s, accumulate=accumulate)
        np.testing.assert_allclose(got.detach().numpy(), expected.detach().numpy())
        have = rg.autograd.grad((got * rg.tensor(weights.numpy())).sum(), [x, s])
        for h, w in zip(have, want):
            np.testing.assert_allclose(h.numpy(), w.numpy())
    inplace = rg.tensor(base.numpy()).put_([[1, 2]], rg.tensor([[10.0, 20.0]], dtype=rg.float64))
    np.testing.assert_allclose(
        inplace.numpy(),
        base.put(torch.tensor([[1, 2]]), torch.tensor([[10.0, 20.0]], dtype=torch.float64)).numpy(),
    )


def test_put_refuses_a_source_of_another_size_naming_the_op() -> None:
    x = rg.zeros(5)
    with pytest.raises(rg.ShapeError, match="put"):
        x.put(rg.tensor([0, 1]), rg.ones(3))
    assert x.tolist() == [0.0] * 5


@pytest.mark.parametrize(
    "write",
    [
        lambda t: t.__setitem__(0, 1 + 2j),
        lambda t: t.__setitem__((0, [0]), 1j),
        lambda t: t.fill_(1j),
        lambda t: t.masked_fill(t > -1, 1j),
        lambda t: t.index_fill(0, rg.tensor([0]), 1j),
        lambda t: t.scatter(0, rg.tensor([[0]]), 1j),
        lambda t: rg.full((2,), 1j, dtype=rg.float32),
    ],
)
def test_a_complex_scalar_written_into_a_real_tensor_is_refused(write) -> None:
    # torch: "value cannot be converted to type float without overflow"; retrograd wrote zero
    # (index_fill, scatter, full) or raised a bare TypeError (setitem)
    t = rg.zeros(2, 3)
    with pytest.raises(rg.DTypeError, match="complex value"):
        write(t)
    t[0] = 5.0  # still usable
    assert t.tolist() == [[5.0] * 3, [0.0] * 3]


def test_a_complex_scalar_with_no_imaginary_part_is_its_real_part() -> None:
    for lib in (torch, rg):
        t = lib.zeros(2, 3)
        t.fill_(2 + 0j)
        t[1] = 3 + 0j
        b = lib.zeros(2, dtype=lib.bool).fill_(1j)
        i = lib.zeros(2, dtype=lib.int64).fill_(4 + 0j)
        if lib is torch:
            expected = (t.tolist(), b.tolist(), i.tolist())
    assert (t.tolist(), b.tolist(), i.tolist()) == expected


def test_a_zero_dim_numpy_integer_index_is_an_int() -> None:
    # torch reads np.array(1) as the int 1 (a basic index); retrograd read it as an index
    # tensor, which moved the advanced dimensions first and refused a value of another dtype
    keys = [
        lambda lib: (np.array(1), None, slice(None), lib.tensor([0, 1])),
        lambda lib: (slice(None), np.array(-1), None, lib.tensor([0, 1])),
        lambda lib: (None, False, None, np.array(0), 0),
    ]
    data = np.arange(24.0).reshape(3, 2, 4)
    for key in keys:
        expected = torch.tensor(data)[key(torch)]
        got = rg.tensor(data)[key(rg)]
        assert got.shape == tuple(expected.shape)
        np.testing.assert_array_equal(got.numpy(), expected.numpy())
    for lib in (torch, rg):
        y = lib.zeros(3, dtype=lib.float64)
        y[np.array(1)] = lib.tensor(5.0, dtype=lib.float32)  # a copy_, which converts
        assert y.tolist() == [0.0, 5.0, 0.0]


def test_index_put_with_a_mask_beside_an_int_index_broadcasts_as_torch() -> None:
    rows = [[-1, -2], [-1, 1]]
    values = np.arange(8.0).reshape(2, 2, 2)
    for accumulate in (False, True):
        expected = torch.zeros(3, 2, 2, dtype=torch.float64).index_put_(
            (torch.tensor(rows), torch.tensor([True, False])), torch.tensor(values), accumulate
        )
        got = rg.zeros(3, 2, 2, dtype=rg.float64).index_put_(
            (rg.tensor(rows), rg.tensor([True, False])), rg.tensor(values), accumulate
        )
        np.testing.assert_array_equal(got.numpy(), expected.numpy())


def test_an_index_into_an_empty_result_is_not_checked() -> None:
    # torch checks an index as it copies an element: none when the result is empty
    data = np.zeros((0, 3, 1), dtype=bool)
    for key in [(Ellipsis, [[2, 1]]), (slice(None), [5])]:
        expected = torch.tensor(data)[key]
        assert rg.tensor(data)[key].shape == tuple(expected.shape)
    with pytest.raises(IndexError):
        torch.tensor(data)[[5]]
    with pytest.raises(rg.RetrogradError, match="out of range"):
        rg.tensor(data)[[5]]


@pytest.mark.parametrize(
    "call",
    [
        lambda lib, x: x.index_copy(0, lib.tensor([3]), lib.zeros(1, 0, dtype=lib.float64)),
        lambda lib, x: x.index_add(0, lib.tensor([3, -9]), lib.zeros(2, 0, dtype=lib.float64)),
        lambda lib, x: x.index_fill(0, lib.tensor([7]), 1.0),
    ],
)
def test_index_writes_into_an_empty_tensor_check_no_index(call) -> None:
    # torch checks an index as it writes a slice: an empty tensor has none to write
    expected = call(torch, torch.zeros(3, 0, dtype=torch.float64, requires_grad=True))
    x = rg.zeros(3, 0, dtype=rg.float64).requires_grad_(True)
    got = call(rg, x)
    assert got.shape == tuple(expected.shape) and got.dtype == rg.float64
    (g,) = rg.autograd.grad(got.sum(), [x], allow_unused=True, materialize_grads=True)
    assert g.shape == (3, 0)
    with pytest.raises(rg.RetrogradError, match="index_fill"):
        rg.zeros(3, 2).index_fill(1, rg.tensor([3]), 1.0)  # a non-empty tensor still checks
