"""uint8 and int32 tensors, checked against torch 2.13 op by op: creation, NumPy arrays kept as
uint8/int32 (``torch.from_numpy``), casts with torch's wrap-around, promotion with each other,
int64, bool, floats and Python scalars, reductions to int64, indexing with int32 indices where
torch takes them (and torch's refusals where it does not), printing and serialization."""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch

import retrograd as rg

U_VALUES = [250, 3, 0, 128]
I_VALUES = [2**31 - 1, -5, 7, -(2**31)]


def operands(lib):
    """The same four operands in ``lib`` (rg or torch): uint8, int32, int64, bool, float32."""
    return {
        "u": lib.tensor(U_VALUES, dtype=lib.uint8),
        "i": lib.tensor(I_VALUES, dtype=lib.int32),
        "l": lib.tensor([1, -2, 3, 40]),
        "b": lib.tensor([True, False, True, True]),
        "f": lib.tensor([0.5, -1.5, 2.25, 3.0]),
    }


def same(ours, theirs):
    """``ours`` (retrograd) holds ``theirs``'s (torch's) values and dtype, for tensors, tuples of
    them and Python scalars."""
    if isinstance(theirs, tuple | list):
        assert len(ours) == len(theirs)
        for a, b in zip(ours, theirs, strict=True):
            same(a, b)
        return
    if isinstance(theirs, str):  # a type's name: torch.ByteTensor is retrograd.ByteTensor
        assert ours == theirs.replace("torch.", "retrograd.")
        return
    if not isinstance(theirs, torch.Tensor):
        assert type(ours) is type(theirs) and ours == theirs
        return
    assert str(ours.dtype) == str(theirs.dtype).removeprefix("torch."), (ours.dtype, theirs.dtype)
    assert tuple(ours.shape) == tuple(theirs.shape)
    if theirs.is_floating_point():  # (float kernels: NumPy's exp may differ in the last bit)
        np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-6)
    else:
        np.testing.assert_array_equal(ours.numpy(), theirs.numpy())


def compare(expression):
    """Evaluate ``expression`` (a function of the library and its operands) with retrograd and
    with torch: the same values and dtype, or, where torch raises, an error of retrograd's own
    hierarchy."""
    try:
        theirs = expression(torch, operands(torch))
    except (RuntimeError, TypeError, IndexError, ValueError) as error:
        with pytest.raises(rg.RetrogradError):
            expression(rg, operands(rg))
        return str(error)
    same(expression(rg, operands(rg)), theirs)
    return None


# -- arithmetic, promotion, comparisons, bitwise, unary -------------------------------------------
ELEMENTWISE = {
    "u+10 wraps": lambda lib, t: t["u"] + 10,
    "u+300 wraps the scalar": lambda lib, t: t["u"] + 300,
    "u-300": lambda lib, t: t["u"] - 300,
    "u+(-1)": lambda lib, t: t["u"] + (-1),
    "10-u": lambda lib, t: 10 - t["u"],
    "u*2": lambda lib, t: t["u"] * 2,
    "u*u": lambda lib, t: t["u"] * t["u"],
    "u+True": lambda lib, t: t["u"] + True,
    "u+1.5 is float": lambda lib, t: t["u"] + 1.5,
    "u/2 true division": lambda lib, t: t["u"] / 2,
    "u/u": lambda lib, t: t["u"] / t["u"].clamp(min=1),
    "i/i": lambda lib, t: t["i"] / 3,
    "u//7": lambda lib, t: t["u"] // 7,
    "i//-7": lambda lib, t: t["i"] // -7,
    "u%7": lambda lib, t: t["u"] % 7,
    "i%-3": lambda lib, t: t["i"] % -3,
    "i.fmod(-3)": lambda lib, t: t["i"].fmod(-3),
    "u**2": lambda lib, t: t["u"] ** 2,
    "i+1 wraps": lambda lib, t: t["i"] + 1,
    "i*i wraps": lambda lib, t: t["i"] * t["i"],
    "u+i": lambda lib, t: t["u"] + t["i"],
    "i+l": lambda lib, t: t["i"] + t["l"],
    "u+l": lambda lib, t: t["u"] + t["l"],
    "u+b": lambda lib, t: t["u"] + t["b"],
    "i*b": lambda lib, t: t["i"] * t["b"],
    "u+f": lambda lib, t: t["u"] + t["f"],
    "i*f": lambda lib, t: t["i"] * t["f"],
    "u + 0-d int64": lambda lib, t: t["u"] + lib.tensor(7),
    "u + 0-d float64": lambda lib, t: t["u"] + lib.tensor(1.0, dtype=lib.float64),
    "i + 0-d uint8": lambda lib, t: t["i"] + lib.tensor(7, dtype=lib.uint8),
    "0-d int32 + l": lambda lib, t: lib.tensor(2, dtype=lib.int32) + t["l"],
    "u-b refused": lambda lib, t: t["u"] - t["b"],
    "u<300 wraps the scalar": lambda lib, t: t["u"] < 300,
    "u<-1": lambda lib, t: t["u"] < -1,
    "u==-6": lambda lib, t: t["u"] == -6,
    "u>2.5": lambda lib, t: t["u"] > 2.5,
    "u==i": lambda lib, t: t["u"] == t["i"],
    "i>=l": lambda lib, t: t["i"] >= t["l"],
    "u&3": lambda lib, t: t["u"] & 3,
    "u|256": lambda lib, t: t["u"] | 256,
    "u^i": lambda lib, t: t["u"] ^ t["i"],
    "u&b": lambda lib, t: t["u"] & t["b"],
    "~u": lambda lib, t: ~t["u"],
    "~i": lambda lib, t: ~t["i"],
    "u<<1": lambda lib, t: t["u"] << 1,
    "i>>2": lambda lib, t: t["i"] >> 2,
    "-u wraps": lambda lib, t: -t["u"],
    "u.neg()": lambda lib, t: t["u"].neg(),
    "-i": lambda lib, t: -t["i"],
    "abs(i)": lambda lib, t: abs(t["i"]),
    "abs(u)": lambda lib, t: abs(t["u"]),
    "u.sign()": lambda lib, t: t["u"].sign(),
    "i.sign()": lambda lib, t: t["i"].sign(),
    "u.sqrt() is float": lambda lib, t: t["u"].sqrt(),
    "i.exp() is float": lambda lib, t: (t["i"] % 5).exp(),
    "u.clamp(2, 100)": lambda lib, t: t["u"].clamp(2, 100),
    "i.clamp(min=0)": lambda lib, t: t["i"].clamp(min=0),
    "maximum(u, i)": lambda lib, t: lib.maximum(t["u"], t["i"]),
    "minimum(u, l)": lambda lib, t: lib.minimum(t["u"], t["l"]),
    "u.logical_not()": lambda lib, t: t["u"].logical_not(),
    "u.logical_and(i)": lambda lib, t: t["u"].logical_and(t["i"]),
    "where(u>3, u, i)": lambda lib, t: lib.where(t["u"] > 3, t["u"], t["i"]),
    "where(b, u, 0)": lambda lib, t: lib.where(t["b"], t["u"], 0),
    "where(u, u, 0) uint8 condition": lambda lib, t: lib.where(t["u"], t["u"], 0),
    "where(b, i, 1.5)": lambda lib, t: lib.where(t["b"], t["i"], 1.5),
    "isin": lambda lib, t: lib.isin(t["u"], lib.tensor([3, 250], dtype=lib.uint8)),
    "i.div(-7, floor)": lambda lib, t: t["i"].div(-7, rounding_mode="floor"),
    "u.div(2, trunc)": lambda lib, t: t["u"].div(2, rounding_mode="trunc"),
    "i @ i": lambda lib, t: (t["i"] % 9).reshape(2, 2) @ (t["i"] % 5).reshape(2, 2),
    "u.float().div(255)": lambda lib, t: t["u"].float().div(255),
    "2**u": lambda lib, t: 2 ** (t["u"] % 4),
    "u**i": lambda lib, t: (t["u"] % 4) ** (t["i"] % 3).abs(),
    "f**u": lambda lib, t: t["f"] ** (t["u"] % 4),
    "u//l": lambda lib, t: t["u"] // t["l"],
    "u//-2 wraps the scalar": lambda lib, t: t["u"] // -2,
    "i.remainder(l)": lambda lib, t: t["i"].remainder(t["l"]),
    "logical_xor(u, i)": lambda lib, t: lib.logical_xor(t["u"], t["i"]),
    "gcd(u, u)": lambda lib, t: lib.gcd(t["u"], lib.tensor([10, 6, 4, 12], dtype=lib.uint8)),
    "u.square() wraps": lambda lib, t: t["u"].square(),
    "i.reciprocal()": lambda lib, t: (t["i"] % 7 + 1).reciprocal(),
    "relu(i)": lambda lib, t: lib.relu(t["i"]),
    "u.softmax refused": lambda lib, t: t["u"].softmax(0),
}


@pytest.mark.parametrize("name", list(ELEMENTWISE))
def test_elementwise(name):
    compare(ELEMENTWISE[name])


# -- reductions, selection, shape --------------------------------------------------------------
REDUCTIONS = {
    "u.sum() is int64": lambda lib, t: t["u"].sum(),
    "i.sum()": lambda lib, t: t["i"].sum(),
    "u.sum(0, keepdim)": lambda lib, t: t["u"].reshape(2, 2).sum(0, keepdim=True),
    "u.sum(dtype=uint8)": lambda lib, t: t["u"].sum(dtype=lib.uint8),
    "u.prod()": lambda lib, t: t["u"].clamp(min=1).prod(),
    "i.prod(0)": lambda lib, t: t["i"].reshape(2, 2).prod(0),
    "u.cumsum(0)": lambda lib, t: t["u"].cumsum(0),
    "i.cumsum(0)": lambda lib, t: t["i"].cumsum(0),
    "i.cumprod(0)": lambda lib, t: (t["i"] % 9).cumprod(0),
    "u.mean() refused": lambda lib, t: t["u"].mean(),
    "i.mean(0) refused": lambda lib, t: t["i"].mean(0),
    "i.float().mean()": lambda lib, t: t["i"].float().mean(),
    "u.std() refused": lambda lib, t: t["u"].std(),
    "u.max()": lambda lib, t: t["u"].max(),
    "i.min()": lambda lib, t: t["i"].min(),
    "u.max(0)": lambda lib, t: tuple(t["u"].max(0)),
    "i.min(0)": lambda lib, t: tuple(t["i"].min(0)),
    "u.argmax()": lambda lib, t: t["u"].argmax(),
    "i.argmin()": lambda lib, t: t["i"].argmin(),
    "u.amax(0)": lambda lib, t: t["u"].reshape(2, 2).amax(0),
    "u.sort()": lambda lib, t: tuple(t["u"].sort()),
    "i.sort(descending)": lambda lib, t: tuple(t["i"].sort(descending=True)),
    "u.argsort()": lambda lib, t: t["u"].argsort(),
    "i.topk(2)": lambda lib, t: tuple(t["i"].topk(2)),
    "unique(u)": lambda lib, t: lib.unique(t["u"]),
    "u.count_nonzero()": lambda lib, t: t["u"].count_nonzero(),
    "u.nonzero()": lambda lib, t: t["u"].nonzero(),
    "i.any()": lambda lib, t: t["i"].any(),
    "cat(u, i)": lambda lib, t: lib.cat([t["u"], t["i"]]),
    "cat(u, f)": lambda lib, t: lib.cat([t["u"], t["f"]]),
    "cat(u, b)": lambda lib, t: lib.cat([t["u"], t["b"]]),
    "stack(i, l)": lambda lib, t: lib.stack([t["i"], t["l"]]),
    "tril of a uint8 ones": lambda lib, t: lib.tril(lib.ones(3, 3, dtype=lib.uint8)),
    "tril uint8 then bool": lambda lib, t: lib.tril(lib.ones(3, 3, dtype=lib.uint8)).bool(),
    "u.view(2, 2).t()": lambda lib, t: t["u"].view(2, 2).t().contiguous(),
    "i.flip(0)": lambda lib, t: t["i"].flip(0),
    "u.repeat(2)": lambda lib, t: t["u"].repeat(2),
    "bincount(i)": lambda lib, t: lib.bincount((t["i"] % 4).abs()),
    "u.all() is uint8 (torch's)": lambda lib, t: t["u"].all(),
    "u.any(0)": lambda lib, t: t["u"].reshape(2, 2).any(0),
    "u.median()": lambda lib, t: t["u"].median(),
    "i.cummax(0)": lambda lib, t: tuple(t["i"].cummax(0)),
    "u.sum(dtype=int32)": lambda lib, t: t["u"].sum(dtype=lib.int32),
    "u.cumsum(dtype=uint8) wraps": lambda lib, t: t["u"].cumsum(0, dtype=lib.uint8),
    "argwhere(u)": lambda lib, t: lib.argwhere(t["u"]),
    "unique(u, return_counts)": lambda lib, t: lib.unique(t["u"], return_counts=True),
    "diff(u)": lambda lib, t: lib.diff(t["u"]),
    "pad(u)": lambda lib, t: lib.nn.functional.pad(t["u"].reshape(1, 4), (1, 1)),
    "outer(u, u) wraps": lambda lib, t: lib.outer(t["u"], t["u"]),
    "einsum of int32": lambda lib, t: lib.einsum("i,i->", t["i"] % 7, t["i"] % 5),
}


@pytest.mark.parametrize("name", list(REDUCTIONS))
def test_reductions_and_shapes(name):
    compare(REDUCTIONS[name])


# -- indexing with int32 (and uint8) indices: torch takes them in some ops, not others ----------
X = [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]
INDEXING = {
    "x[int32]": lambda lib, t: lib.tensor(X)[lib.tensor([1, 0, 1], dtype=lib.int32)],
    "x[:, int32]": lambda lib, t: lib.tensor(X)[:, lib.tensor([2, 0], dtype=lib.int32)],
    "x[int32, int32]": lambda lib, t: lib.tensor(X)[
        lib.tensor([1, 0], dtype=lib.int32), lib.tensor([2, 2], dtype=lib.int32)
    ],
    "u[int32]": lambda lib, t: t["u"][lib.tensor([3, 0], dtype=lib.int32)],
    "u[1:3]": lambda lib, t: t["u"][1:3],
    "u[bool mask]": lambda lib, t: t["u"][t["b"]],
    "index_select int32": lambda lib, t: lib.tensor(X).index_select(
        1, lib.tensor([2, 0], dtype=lib.int32)
    ),
    "gather int32": lambda lib, t: lib.tensor(X).gather(
        1, lib.tensor([[2, 0], [1, 1]], dtype=lib.int32)
    ),
    "gather uint8 refused": lambda lib, t: lib.tensor(X).gather(
        1, lib.tensor([[2, 0], [1, 1]], dtype=lib.uint8)
    ),
    "scatter int32": lambda lib, t: lib.zeros(2, 3).scatter(
        1, lib.tensor([[2], [0]], dtype=lib.int32), 1.0
    ),
    "scatter_add int32": lambda lib, t: lib.zeros(2, 3).scatter_add(
        1, lib.tensor([[2, 2], [0, 1]], dtype=lib.int32), lib.ones(2, 2)
    ),
    "index_add int32": lambda lib, t: lib.zeros(4).index_add(
        0, lib.tensor([1, 0, 1], dtype=lib.int32), lib.ones(3)
    ),
    "index_put int32": lambda lib, t: lib.zeros(4).index_put(
        (lib.tensor([1, 3], dtype=lib.int32),), lib.ones(2)
    ),
    "take_along_dim int32 with a dim refused": lambda lib, t: lib.tensor(X).take_along_dim(
        lib.tensor([[2], [0]], dtype=lib.int32), 1
    ),
    "take_along_dim int32 flat": lambda lib, t: lib.tensor(X).take_along_dim(
        lib.tensor([4, 0], dtype=lib.int32)
    ),
    "x[uint8 mask] (torch's legacy byte mask)": lambda lib, t: lib.tensor(X)[
        lib.tensor([[1, 0, 1], [0, 0, 1]], dtype=lib.uint8)
    ],
    "x[0-d int32]": lambda lib, t: lib.tensor(X)[lib.tensor(1, dtype=lib.int32)],
    "x[NumPy uint8 array] is a mask": lambda lib, t: lib.tensor(X)[np.array([1, 0], np.uint8)],
    "x[NumPy int32 array]": lambda lib, t: lib.tensor(X)[np.array([1, 0], np.int32)],
    "x[uint8 mask] = v refused": lambda lib, t: lib.tensor(X).__setitem__(
        lib.tensor([[1, 0, 1], [0, 0, 1]], dtype=lib.uint8), 5.0
    ),
    "index_put with a uint8 mask refused": lambda lib, t: lib.zeros(4).index_put(
        (lib.tensor([1, 0, 0, 1], dtype=lib.uint8),), lib.tensor(1.0)
    ),
    "x[int32] = v": lambda lib, t: (
        lambda x: (x.__setitem__(lib.tensor([1, 0], dtype=lib.int32), 7.0), x)[1]
    )(lib.zeros(3)),
    "index_select uint8 refused": lambda lib, t: lib.tensor(X).index_select(
        1, lib.tensor([1], dtype=lib.uint8)
    ),
    "where with an int32 condition refused": lambda lib, t: lib.where(t["i"], 1, 2),
    "nll_loss uint8 target": lambda lib, t: lib.nn.functional.nll_loss(
        lib.tensor(X), lib.tensor([1, 0], dtype=lib.uint8)
    ),
    "embedding_bag int32": lambda lib, t: lib.nn.functional.embedding_bag(
        lib.tensor([1, 0], dtype=lib.int32), lib.tensor(X).t().contiguous(), lib.tensor([0])
    ),
    "repeat_interleave int32 counts": lambda lib, t: lib.repeat_interleave(
        lib.tensor([1.0, 2.0]), lib.tensor([1, 2], dtype=lib.int32)
    ),
    "take int32 refused": lambda lib, t: lib.tensor(X).take(lib.tensor([1, 0], dtype=lib.int32)),
    "index_fill int32 refused": lambda lib, t: lib.zeros(4).index_fill(
        0, lib.tensor([1, 0], dtype=lib.int32), 1.0
    ),
    "index_copy int32 refused": lambda lib, t: lib.zeros(4).index_copy(
        0, lib.tensor([1, 0], dtype=lib.int32), lib.ones(2)
    ),
    "masked_fill uint8 mask refused": lambda lib, t: lib.ones(4).masked_fill(
        t["u"].clamp(max=1), 0.0
    ),
    "masked_fill of uint8 with a bool mask": lambda lib, t: t["u"].masked_fill(t["b"], 9),
    "masked_fill of int32 with a wide value": lambda lib, t: t["i"].masked_fill(t["b"], 7),
    "one_hot int32 refused": lambda lib, t: lib.nn.functional.one_hot(
        lib.tensor([1, 0], dtype=lib.int32)
    ),
    "embedding int32": lambda lib, t: lib.nn.functional.embedding(
        lib.tensor([[1, 0]], dtype=lib.int32), lib.tensor(X).t().contiguous()
    ),
    "embedding uint8 refused": lambda lib, t: lib.nn.functional.embedding(
        lib.tensor([1, 0], dtype=lib.uint8), lib.tensor(X).t().contiguous()
    ),
    "cross_entropy int32 target refused": lambda lib, t: lib.nn.functional.cross_entropy(
        lib.tensor(X), lib.tensor([1, 0], dtype=lib.int32)
    ),
}


@pytest.mark.parametrize("name", list(INDEXING))
def test_indexing(name):
    compare(INDEXING[name])


# -- creation and casts ---------------------------------------------------------------------------
CREATION = {
    "zeros": lambda lib, t: lib.zeros(2, 3, dtype=lib.uint8),
    "ones int32": lambda lib, t: lib.ones((2,), dtype=lib.int32),
    "full": lambda lib, t: lib.full((2,), 7, dtype=lib.uint8),
    "full past uint8 refused": lambda lib, t: lib.full((2,), 300, dtype=lib.uint8),
    "arange int32": lambda lib, t: lib.arange(5, dtype=lib.int32),
    "arange uint8 step": lambda lib, t: lib.arange(1, 9, 3, dtype=lib.uint8),
    "empty shape": lambda lib, t: lib.empty(2, dtype=lib.int32).shape,
    "zeros_like u": lambda lib, t: lib.zeros_like(t["u"]),
    "ones_like f as int32": lambda lib, t: lib.ones_like(t["f"], dtype=lib.int32),
    "full_like i": lambda lib, t: lib.full_like(t["i"], 4),
    "new_zeros": lambda lib, t: t["u"].new_zeros(3),
    "tensor(-1, uint8)": lambda lib, t: lib.tensor([-1, 255, -129], dtype=lib.uint8),
    "tensor(1.5, uint8) truncates": lambda lib, t: lib.tensor([1.5, 255.0], dtype=lib.uint8),
    "tensor(300, uint8) refused": lambda lib, t: lib.tensor([300], dtype=lib.uint8),
    "tensor(255.5, uint8) refused": lambda lib, t: lib.tensor([255.5], dtype=lib.uint8),
    "tensor(2**31, int32) refused": lambda lib, t: lib.tensor([2**31], dtype=lib.int32),
    "tensor(array of 300, uint8) wraps": lambda lib, t: lib.tensor(
        np.array([300]), dtype=lib.uint8
    ),
    "full(-1, uint8) wraps": lambda lib, t: lib.full((2,), -1, dtype=lib.uint8),
    "full(2.7, int32) truncates": lambda lib, t: lib.full((2,), 2.7, dtype=lib.int32),
    "tensor of a uint8 array": lambda lib, t: lib.tensor(np.array([1, 200], dtype=np.uint8)),
    "tensor of an int32 array": lambda lib, t: lib.tensor(np.array([1, -2], dtype=np.int32)),
    "from_numpy uint8 image": lambda lib, t: lib.from_numpy(
        np.arange(12, dtype=np.uint8).reshape(2, 2, 3)
    ),
    "from_numpy int32": lambda lib, t: lib.from_numpy(np.array([[4, -2]], dtype=np.int32)),
    "np.int32 scalar": lambda lib, t: lib.tensor(np.int32(5)),
    "int16 array still int64-free": lambda lib, t: lib.tensor(
        np.array([1, 2], dtype=np.int16)
    ).long(),
    "IntTensor": lambda lib, t: lib.IntTensor([1, 2]),
    "ByteTensor": lambda lib, t: lib.ByteTensor([1, 2]),
    ".byte() of floats truncates and wraps": lambda lib, t: lib.tensor([1.7, 0.2, 255.9]).byte(),
    ".byte() of int64 wraps": lambda lib, t: lib.tensor([300, -1, 256]).byte(),
    ".int() of int64 wraps": lambda lib, t: lib.tensor([2**40 + 3, -(2**33) - 1]).int(),
    ".int() of floats": lambda lib, t: lib.tensor([-2.7, 3.9]).int(),
    ".int() of bools": lambda lib, t: t["b"].int(),
    ".to(uint8)": lambda lib, t: t["l"].to(lib.uint8),
    ".to(int32) of u": lambda lib, t: t["u"].to(lib.int32),
    ".type(IntTensor)": lambda lib, t: t["f"].type(lib.IntTensor),
    ".type(uint8)": lambda lib, t: t["i"].type(lib.uint8),
    ".type() names": lambda lib, t: (t["u"].type(), t["i"].type()),
    "u.long()": lambda lib, t: t["u"].long(),
    "u.bool()": lambda lib, t: t["u"].bool(),
    "u.double()": lambda lib, t: t["u"].double(),
    "i.float()": lambda lib, t: t["i"].float(),
    "element_size": lambda lib, t: (t["u"].element_size(), t["i"].element_size()),
    "nbytes": lambda lib, t: (t["u"].nbytes, t["i"].nbytes),
    "item": lambda lib, t: (t["u"][0].item(), t["i"][1].item()),
    "tolist": lambda lib, t: (t["u"].tolist(), t["i"].tolist()),
    "is_signed": lambda lib, t: (t["u"].is_signed(), t["i"].is_signed()),
    "is_floating_point": lambda lib, t: t["i"].is_floating_point(),
    "index by a 0-d int32": lambda lib, t: [10, 20, 30][lib.tensor(2, dtype=lib.int32)],
    "iinfo uint8": lambda lib, t: (lib.iinfo(lib.uint8).min, lib.iinfo(lib.uint8).max),
    "iinfo int32": lambda lib, t: (lib.iinfo(lib.int32).min, lib.iinfo(lib.int32).max),
    "requires_grad refused": lambda lib, t: lib.zeros(2, dtype=lib.uint8).requires_grad_(),
    "requires_grad= refused": lambda lib, t: lib.ones(2, dtype=lib.int32, requires_grad=True),
    "in-place add of a float refused": lambda lib, t: t["i"].add_(1.5),
    "in-place add of int32 into uint8": lambda lib, t: t["u"].add_(t["i"]),
    "in-place fill_": lambda lib, t: t["i"].fill_(4),
    # a number written into a uint8 tensor: -1 wraps, 256 is refused (arithmetic wraps both)
    "fill_(300) refused": lambda lib, t: t["u"].fill_(300),
    "fill_(-1) wraps": lambda lib, t: t["u"].fill_(-1),
    "masked_fill(-1) wraps": lambda lib, t: t["u"].masked_fill(t["b"], -1),
    "masked_fill(300) refused": lambda lib, t: t["u"].masked_fill(t["b"], 300),
    "clamp(0, 300) refused": lambda lib, t: t["u"].clamp(0, 300),
    "setitem -1": lambda lib, t: (t["u"].__setitem__(0, -1), t["u"])[1],
    "setitem 256 refused": lambda lib, t: (t["u"].__setitem__(0, 256), t["u"])[1],
    "setitem 2.7 into int32": lambda lib, t: (t["i"].__setitem__(slice(0, 2), 2.7), t["i"])[1],
    "where(b, u, 300) refused": lambda lib, t: lib.where(t["b"], t["u"], 300),
    "add_(300) wraps": lambda lib, t: t["u"].add_(300),
    "copy_ of int64 wraps": lambda lib, t: lib.zeros(3, dtype=lib.uint8).copy_(
        lib.tensor([300, -1, 7])
    ),
    "view(0-d int32, -1)": lambda lib, t: lib.ones(2, 2).view(lib.tensor(4, dtype=lib.int32)),
    "eye int32": lambda lib, t: lib.eye(2, dtype=lib.int32),
    "linspace uint8": lambda lib, t: lib.linspace(0, 10, 5, dtype=lib.uint8),
    "logspace int32": lambda lib, t: lib.logspace(1, 2.5, 4, base=2, dtype=lib.int32),
    "arange uint8 past 255 wraps": lambda lib, t: lib.arange(250, 260, dtype=lib.uint8),
    "new_tensor uint8": lambda lib, t: t["f"].new_tensor([1, 2], dtype=lib.uint8),
    "as_tensor of a uint8 array": lambda lib, t: lib.as_tensor(np.array([1, 2], np.uint8)),
}


@pytest.mark.parametrize("name", list(CREATION))
def test_creation_and_casts(name):
    compare(CREATION[name])


def test_randint_and_numpy():
    rg.manual_seed(0)
    drawn = rg.randint(0, 5, (50,), dtype=rg.uint8)
    assert drawn.dtype == rg.uint8 and int(drawn.min()) >= 0 and int(drawn.max()) < 5
    assert rg.randint_like(rg.zeros(3, dtype=rg.int32), 4).dtype == rg.int32
    # .numpy() gives the array in its own dtype, and a uint8 image pipeline reads as torch's
    image = np.random.default_rng(1).integers(0, 256, (2, 3, 4), dtype=np.uint8)
    ours = rg.from_numpy(image)
    assert ours.numpy().dtype == np.uint8 and ours.int().numpy().dtype == np.int32
    expected = torch.from_numpy(image).permute(2, 0, 1).float().div(255)
    np.testing.assert_allclose(ours.permute(2, 0, 1).float().div(255).numpy(), expected.numpy())


def test_repr_follows_torch():
    # torch's repr, the dtype named as retrograd's repr names it (``dtype=retrograd.uint8``)
    for make in (
        lambda lib: lib.tensor([250, 3], dtype=lib.uint8),
        lambda lib: lib.tensor(250, dtype=lib.uint8),
        lambda lib: lib.tensor([[2**31 - 1, -5]], dtype=lib.int32),
    ):
        assert repr(make(rg)) == repr(make(torch)).replace("torch.", "retrograd.")
    assert repr(rg.uint8) == "retrograd.uint8" and repr(rg.int) == "retrograd.int32"


def test_serialization_round_trips_a_uint8_buffer():
    class Masked(rg.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("bias", rg.tril(rg.ones(3, 3, dtype=rg.uint8)))
            self.register_buffer("offsets", rg.arange(3, dtype=rg.int32))

    buffer = io.BytesIO()
    rg.save(Masked().state_dict(), buffer)
    buffer.seek(0)
    state = rg.load(buffer)
    assert state["bias"].dtype == rg.uint8 and state["offsets"].dtype == rg.int32
    np.testing.assert_array_equal(state["bias"].numpy(), np.tril(np.ones((3, 3), np.uint8)))
    fresh = Masked()
    fresh.load_state_dict(state)
    assert fresh.bias.dtype == rg.uint8
    # the causal mask as GPT-2 reads it: a uint8 buffer turned bool for torch.where
    scores = rg.ones(3, 3)
    masked = rg.where(fresh.bias.bool(), scores, rg.tensor(-1e4))
    np.testing.assert_array_equal(masked.numpy(), np.where(np.tri(3) > 0, 1.0, -1e4))


def test_refusals_name_the_dtypes():
    with pytest.raises(rg.DTypeError, match="quint8"):
        rg.zeros(2, dtype="quint8")
    with pytest.raises(rg.DTypeError, match="mask"):
        rg.ones(2).masked_fill(rg.ones(2, dtype=rg.uint8), 0.0)
    x = rg.tensor([1, 2], dtype=rg.uint8)
    with pytest.raises(rg.RetrogradError):
        x.mean()
    assert x.tolist() == [1, 2]  # left usable


@pytest.mark.parametrize("dtype", ["uint8", "int32", "bool"])
def test_both_backends_sum_and_multiply_narrow_integers_in_int64(dtype):
    # the protocol's rule (torch's): NumPy's own sums of uint8 are uint64, of int32 int64
    for backend in (rg.NumpyBackend(), rg.TorchBackend("cpu")):
        x = backend.from_data(np.array([[200, 100], [3, 4]]), dtype, None)
        outs = [
            backend.sum(x),
            backend.sum_dim(x, (0,)),
            backend.sum_dim(x, ()),
            backend.prod(x),
            backend.prod_dim(x, 0),
            backend.cumsum(x, 0),
            backend.cumprod(x, 1),
        ]
        reference = torch.tensor([[200, 100], [3, 4]]).to(getattr(torch, dtype))
        expected = [
            reference.sum(),
            reference.sum(0, keepdim=True),
            reference.long(),
            reference.prod(),
            reference.prod(0, keepdim=True),
            reference.cumsum(0),
            reference.cumprod(1),
        ]
        for out, want in zip(outs, expected, strict=True):
            assert backend.dtype(out) == "int64"
            np.testing.assert_array_equal(backend.to_numpy(out), want.numpy())


def test_gpt2_uint8_causal_mask_with_gradients():
    # HuggingFace GPT-2's attention: a uint8 tril buffer sliced, mixed into float scores by
    # arithmetic (``w * b - 1e4 * (1 - b)``) and as a mask (``where(b.bool(), ...)``)
    scores = np.random.default_rng(0).standard_normal((1, 2, 4, 4)).astype(np.float32)

    def run(lib):
        bias = lib.tril(lib.ones((4, 4), dtype=lib.uint8)).view(1, 1, 4, 4)[:, :, :4, :4]
        w = lib.tensor(scores, requires_grad=True)
        mixed = w * bias - 1e4 * (1 - bias)
        masked = lib.where(bias.bool(), w, lib.tensor(-1e4))
        loss = (mixed.softmax(-1) * masked).sum()
        grads = loss.backward()
        grad = w.grad if lib is torch else w.grad(grads)
        picks = mixed.argmax(-1).int()
        return mixed.detach().numpy(), masked.detach().numpy(), picks.numpy(), grad.numpy()

    for ours, theirs in zip(run(rg), run(torch), strict=True):
        assert ours.dtype == theirs.dtype
        np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-5)
