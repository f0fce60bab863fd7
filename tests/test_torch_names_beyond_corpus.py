"""torch names that generic code calls beyond the counted corpus, against torch 2.13: the
conjugate and device flags of real tensors (``x.conj()``, ``x.real``, ``x.is_mps``...),
``unravel_index`` (wrapping indices as torch's), ``asarray``'s copy rules, ``typename`` and
the thread and denormal settings."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import retrograd as rg
from retrograd.errors import (
    DTypeError,
    IndexOutOfRangeError,
    InvalidArgumentError,
    RetrogradError,
)


def test_real_tensors_are_their_own_conjugates_as_torchs():
    x, t = rg.tensor([1.0, -2.0]), torch.tensor([1.0, -2.0])
    for name in ("conj", "resolve_conj", "resolve_neg", "conj_physical"):
        assert (getattr(x, name)() is x) == (getattr(t, name)() is t) is True
        assert (getattr(rg, name)(x) is x) == (getattr(torch, name)(t) is t) is True
    assert (x.real is x) and (t.real is t) and rg.real(x) is x
    assert x.is_conj() == t.is_conj() is False and rg.is_neg(x) is torch.is_neg(t) is False
    with pytest.raises(RuntimeError, match="non-complex"):
        t.imag  # noqa: B018
    with pytest.raises(DTypeError, match="non-complex"):
        x.imag  # noqa: B018
    with pytest.raises(DTypeError, match="imag"):
        rg.imag(x)
    with pytest.raises(DTypeError, match="Tensor"):
        rg.conj([1.0])


@pytest.mark.parametrize(
    "flag", ["is_meta", "is_mps", "is_xpu", "is_ipu", "is_maia", "is_mtia", "is_vulkan",
             "is_mkldnn", "is_quantized", "is_sparse_csr"],
)  # fmt: skip
def test_device_and_layout_flags_of_a_cpu_tensor(flag):
    assert getattr(rg.ones(2), flag) is getattr(torch.ones(2), flag) is False


@pytest.mark.parametrize(
    ("indices", "shape"),
    [([5, 1, 0], (2, 3)), (4, (2, 3)), ([6, -1, -7, 11], (2, 3)), ([[3, 7], [0, 23]], (2, 3, 4)),
     ([2], (5,)), (0, ()), ([1, 2], 4), ([], (0, 3)), ([9], (3, 1, 3)), ([1], (2**40, 2**40))],
)  # fmt: skip
@pytest.mark.parametrize("dtype", ["int64", "int32", "uint8"])
def test_unravel_index_as_torchs(indices, shape, dtype):
    if dtype == "uint8" and np.size(indices) and np.min(indices) < 0:
        return
    theirs = torch.unravel_index(torch.tensor(indices, dtype=getattr(torch, dtype)), shape)
    ours = rg.unravel_index(rg.tensor(indices, dtype=dtype), shape)
    assert len(ours) == len(theirs)
    for a, b in zip(ours, theirs):
        assert a.dtype == rg.int64 and b.dtype == torch.int64
        assert a.shape == tuple(b.shape) and a.tolist() == b.tolist()


@pytest.mark.parametrize(
    ("indices", "shape", "error"),
    [(rg.tensor([1.0]), (2, 3), DTypeError), (rg.tensor([True]), (2, 3), DTypeError),
     (rg.tensor([1]), (2, -3), InvalidArgumentError), (rg.tensor([1]), (2, 1.5), DTypeError),
     (rg.tensor([1]), (2, 2**62, 4), InvalidArgumentError), (3, (2, 3), DTypeError),
     (rg.tensor([0]), (0, 3), IndexOutOfRangeError)],
)  # fmt: skip
def test_unravel_index_refusals(indices, shape, error):
    with pytest.raises(error, match="unravel_index"):
        rg.unravel_index(indices, shape)
    if isinstance(indices, rg.Tensor):  # torch refuses it too
        with pytest.raises((TypeError, ValueError, RuntimeError, OverflowError)):
            torch.unravel_index(torch.from_numpy(np.asarray(indices)), shape)


def test_asarray_copies_as_torchs():
    x, t = rg.ones(2), torch.ones(2)
    assert (rg.asarray(x) is x) and (torch.asarray(t) is t)
    assert (rg.asarray(x, copy=True) is not x) and (torch.asarray(t, copy=True) is not t)
    copied = rg.asarray(x, copy=True)
    copied.add_(1.0)
    assert x.tolist() == [1.0, 1.0]
    assert rg.asarray(x, dtype=rg.float64).dtype == rg.float64
    with pytest.raises(ValueError):
        torch.asarray(t, dtype=torch.float64, copy=False)
    with pytest.raises(InvalidArgumentError, match="copy=False"):
        rg.asarray(x, dtype=rg.float64, copy=False)
    for data in ([1, 2], [1.0, 2.0], [[True]], np.arange(3, dtype=np.int32), 2.5):
        ours, theirs = rg.asarray(data), torch.asarray(data)
        assert str(ours.dtype).split(".")[-1] == str(theirs.dtype).split(".")[-1]
        assert ours.tolist() == theirs.tolist()
    leaf = rg.asarray([1.0, 2.0], requires_grad=True)
    assert leaf.requires_grad and leaf.is_leaf
    tracked = rg.asarray(x, requires_grad=True)
    assert tracked.requires_grad and tracked.is_leaf and not x.requires_grad


def test_typename_as_torchs():
    assert rg.typename(3) == torch.typename(3) == "int"
    assert rg.typename(rg.ones(2)) == rg.ones(2).type()
    assert rg.typename(rg.nn.Linear(1, 1)) == "retrograd.nn.modules.linear.Linear"
    assert torch.typename(torch.nn.Linear(1, 1)) == "torch.nn.modules.linear.Linear"
    assert rg.typename(len) == torch.typename(len) == "len"


def test_thread_and_denormal_settings():
    before = rg.get_num_interop_threads()
    try:
        rg.set_num_interop_threads(3)
        assert rg.get_num_interop_threads() == 3
    finally:
        rg.set_num_interop_threads(before)
    with pytest.raises(RetrogradError, match="positive int"):
        rg.set_num_interop_threads(0)
    assert rg.set_flush_denormal(False) is False
    tiny = np.float32(1e-40)  # a float32 denormal stays one: nothing was switched
    assert (rg.tensor([tiny]) * 1.0).tolist() == [float(tiny)]
