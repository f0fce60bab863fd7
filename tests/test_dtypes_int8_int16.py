"""int8 and int16 tensors, checked against torch 2.13 op by op: creation, NumPy arrays kept as
int8/int16 (``torch.from_numpy``), casts with torch's wrap-around, promotion with each other,
uint8 (int8 with uint8 meets at int16), int32, int64, bool, floats and Python scalars,
reductions to int64, integer division by zero, bitwise ops, indexing with int8/int16 indices
(torch refuses them where it does), serialization, and the real uses that need them: int16 PCM
audio read with ``scipy.io.wavfile`` and int8 weight quantization written by hand."""

from __future__ import annotations

import io

import numpy as np
import pytest
import scipy.io.wavfile
import torch

import retrograd as rg

C_VALUES = [127, -128, 5, -3]  # int8 ("char")
S_VALUES = [32767, -32768, 300, -7]  # int16 ("short")


def operands(lib):
    """The same operands in ``lib`` (rg or torch): int8, int16, uint8, int32, int64, bool,
    float32."""
    return {
        "c": lib.tensor(C_VALUES, dtype=lib.int8),
        "s": lib.tensor(S_VALUES, dtype=lib.int16),
        "u": lib.tensor([250, 3, 0, 128], dtype=lib.uint8),
        "i": lib.tensor([2**31 - 1, -5, 7, -(2**31)], dtype=lib.int32),
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
    if isinstance(theirs, str):  # a type's name: torch.CharTensor is retrograd.CharTensor
        assert ours == theirs.replace("torch.", "retrograd.")
        return
    if isinstance(theirs, torch.dtype):
        assert str(ours) == str(theirs).removeprefix("torch.")
        return
    if not isinstance(theirs, torch.Tensor):
        assert type(ours) is type(theirs) and ours == theirs
        return
    assert str(ours.dtype) == str(theirs.dtype).removeprefix("torch."), (ours.dtype, theirs.dtype)
    assert tuple(ours.shape) == tuple(theirs.shape)
    if theirs.dtype is torch.bfloat16:  # (NumPy has no bfloat16: compared widened)
        theirs = theirs.float()
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
    except (RuntimeError, TypeError, IndexError, ValueError, NotImplementedError):
        with pytest.raises(rg.RetrogradError):
            expression(rg, operands(rg))
        return
    same(expression(rg, operands(rg)), theirs)


# -- arithmetic, promotion, comparisons, bitwise, unary -------------------------------------------
ELEMENTWISE = {
    "c+1 wraps": lambda lib, t: t["c"] + 1,
    "c+200 wraps the scalar": lambda lib, t: t["c"] + 200,
    "c-300": lambda lib, t: t["c"] - 300,
    "s+40000 wraps the scalar": lambda lib, t: t["s"] + 40000,
    "s*2 wraps": lambda lib, t: t["s"] * 2,
    "c*c wraps": lambda lib, t: t["c"] * t["c"],
    "s*s wraps": lambda lib, t: t["s"] * t["s"],
    "10-c": lambda lib, t: 10 - t["c"],
    "-c wraps": lambda lib, t: -t["c"],
    "-s wraps": lambda lib, t: -t["s"],
    "abs(c) wraps": lambda lib, t: abs(t["c"]),
    "c.sign()": lambda lib, t: t["c"].sign(),
    "c+True": lambda lib, t: t["c"] + True,
    "c+1.5 is float": lambda lib, t: t["c"] + 1.5,
    "s/2 true division": lambda lib, t: t["s"] / 2,
    "c/c": lambda lib, t: t["c"] / t["c"],
    "c//7": lambda lib, t: t["c"] // 7,
    "c//-1 wraps": lambda lib, t: t["c"] // -1,
    "s//-7": lambda lib, t: t["s"] // -7,
    "c%7": lambda lib, t: t["c"] % 7,
    "s%-3": lambda lib, t: t["s"] % -3,
    "c%-1": lambda lib, t: t["c"] % -1,
    "c.fmod(-3)": lambda lib, t: t["c"].fmod(-3),
    "c//0 refused": lambda lib, t: t["c"] // 0,
    "c%0 refused": lambda lib, t: t["c"] % 0,
    "s//256 wraps to no zero": lambda lib, t: t["s"] // 256,
    "c//256 wraps the divisor to 0": lambda lib, t: t["c"] // 256,
    "s%65536 wraps the divisor to 0": lambda lib, t: t["s"] % 65536,
    "c // zero tensor refused": lambda lib, t: t["c"] // lib.zeros(4, dtype=lib.int8),
    "c.div(-2, trunc)": lambda lib, t: t["c"].div(-2, rounding_mode="trunc"),
    "s.div(3, floor)": lambda lib, t: t["s"].div(3, rounding_mode="floor"),
    "c**2 wraps": lambda lib, t: t["c"] ** 2,
    "c**200 refused": lambda lib, t: t["c"] ** 200,
    "2**s": lambda lib, t: 2 ** (t["s"] % 5),
    "c.square()": lambda lib, t: t["c"].square(),
    # promotion: int8 with uint8 meets at int16, as torch's lattice
    "c+u is int16": lambda lib, t: t["c"] + t["u"],
    "u*c is int16": lambda lib, t: t["u"] * t["c"],
    "s+u is int16": lambda lib, t: t["s"] + t["u"],
    "c+s": lambda lib, t: t["c"] + t["s"],
    "c+i": lambda lib, t: t["c"] + t["i"],
    "s+l": lambda lib, t: t["s"] + t["l"],
    "c+b": lambda lib, t: t["c"] + t["b"],
    "s*b": lambda lib, t: t["s"] * t["b"],
    "c+f": lambda lib, t: t["c"] + t["f"],
    "s*f": lambda lib, t: t["s"] * t["f"],
    "c + 0-d int64": lambda lib, t: t["c"] + lib.tensor(300),
    "c + 0-d uint8": lambda lib, t: t["c"] + lib.tensor(200, dtype=lib.uint8),
    "0-d int8 + u": lambda lib, t: lib.tensor(-1, dtype=lib.int8) + t["u"],
    "c + 0-d float64": lambda lib, t: t["c"] + lib.tensor(1.0, dtype=lib.float64),
    "s + 0-d int8": lambda lib, t: t["s"] + lib.tensor(-2, dtype=lib.int8),
    "c-b refused": lambda lib, t: t["c"] - t["b"],
    "c.add(s, alpha=300)": lambda lib, t: t["c"].add(t["s"], alpha=300),
    "c.add(2, alpha=100) wraps": lambda lib, t: t["c"].add(2, alpha=100),
    # torch converts alpha to the result's dtype within its bounds (uint8's too)
    "c.sub(c, alpha=200) refused": lambda lib, t: t["c"].sub(t["c"], alpha=200),
    "s.add(1, alpha=-40000) refused": lambda lib, t: t["s"].add(1, alpha=-40000),
    "u.add(1, alpha=300) refused": lambda lib, t: t["u"].add(1, alpha=300),
    "u.sub(u, alpha=200) wraps": lambda lib, t: t["u"].sub(t["u"], alpha=200),
    "c.add(l, alpha=300) is int64": lambda lib, t: t["c"].add(t["l"], alpha=300),
    "torch.result_type(c, u)": lambda lib, t: lib.promote_types(lib.int8, lib.uint8),
    # comparisons
    "c<200 wraps the scalar": lambda lib, t: t["c"] < 200,
    "c==-3": lambda lib, t: t["c"] == -3,
    "c>2.5": lambda lib, t: t["c"] > 2.5,
    "c==u": lambda lib, t: t["c"] == t["u"],
    "s>=c": lambda lib, t: t["s"] >= t["c"],
    "s<40000 wraps the scalar": lambda lib, t: t["s"] < 40000,
    "maximum(c, u)": lambda lib, t: lib.maximum(t["c"], t["u"]),
    "minimum(s, c)": lambda lib, t: lib.minimum(t["s"], t["c"]),
    "c.clamp(-5, 100)": lambda lib, t: t["c"].clamp(-5, 100),
    "c.clamp(-200, 0) refused": lambda lib, t: t["c"].clamp(-200, 0),
    "s.clamp(min=0)": lambda lib, t: t["s"].clamp(min=0),
    # bitwise and shifts
    "c&3": lambda lib, t: t["c"] & 3,
    "c|-128": lambda lib, t: t["c"] | -128,
    "c^u": lambda lib, t: t["c"] ^ t["u"],
    "s&c": lambda lib, t: t["s"] & t["c"],
    "c&b": lambda lib, t: t["c"] & t["b"],
    "~c": lambda lib, t: ~t["c"],
    "~s": lambda lib, t: ~t["s"],
    "c<<1 wraps": lambda lib, t: t["c"] << 1,
    "c>>1 arithmetic": lambda lib, t: t["c"] >> 1,
    "s<<3": lambda lib, t: t["s"] << 3,
    "s>>c": lambda lib, t: t["s"] >> (t["c"] & 7),
    "gcd(c, c)": lambda lib, t: lib.gcd(t["c"], lib.tensor([6, 4, 10, 9], dtype=lib.int8)),
    "c.logical_not()": lambda lib, t: t["c"].logical_not(),
    "logical_and(c, s)": lambda lib, t: lib.logical_and(t["c"], t["s"]),
    # torch's logical ops cast both operands to the promoted dtype first: a 0-d int64 256
    # beside an int8 or uint8 tensor wraps to 0 (false), a 0-d float64 1e-50 beside float32 too
    "logical_and(c, 0-d 256)": lambda lib, t: lib.logical_and(t["c"], lib.tensor(256)),
    "logical_or(0-d 256, u)": lambda lib, t: lib.logical_or(lib.tensor(256), t["u"] * 0),
    "logical_xor(s, 0-d 65536)": lambda lib, t: lib.logical_xor(t["s"], lib.tensor(65536)),
    "logical_or(f*0, 0-d 1e-50)": lambda lib, t: lib.logical_or(
        t["f"] * 0, lib.tensor(1e-50, dtype=lib.float64)
    ),
    # floats from ints
    "s.sqrt() is float": lambda lib, t: t["s"].abs().sqrt(),
    "c.exp() is float": lambda lib, t: (t["c"] % 5).exp(),
    "c.float()/127": lambda lib, t: t["c"].float() / 127,
    "s.softmax refused": lambda lib, t: t["s"].softmax(0),
    "relu(c)": lambda lib, t: lib.relu(t["c"]),
    "where(b, c, u)": lambda lib, t: lib.where(t["b"], t["c"], t["u"]),
    "where(b, c, 0)": lambda lib, t: lib.where(t["b"], t["c"], 0),
    "where(b, c, 200) refused": lambda lib, t: lib.where(t["b"], t["c"], 200),
    "where(c, 1, 2) refused": lambda lib, t: lib.where(t["c"], 1, 2),
    "c @ c": lambda lib, t: (t["c"] % 9).reshape(2, 2) @ (t["c"] % 5).reshape(2, 2),
    "isin(s, ...)": lambda lib, t: lib.isin(t["s"], lib.tensor([300, 7], dtype=lib.int16)),
}


@pytest.mark.parametrize("name", list(ELEMENTWISE))
def test_elementwise(name):
    compare(ELEMENTWISE[name])


# -- reductions, selection, shape --------------------------------------------------------------
REDUCTIONS = {
    "c.sum() is int64": lambda lib, t: t["c"].sum(),
    "s.sum()": lambda lib, t: t["s"].sum(),
    "c.sum(0, keepdim)": lambda lib, t: t["c"].reshape(2, 2).sum(0, keepdim=True),
    "c.sum(dtype=int8) wraps": lambda lib, t: t["c"].sum(dtype=lib.int8),
    "s.sum(dtype=int16)": lambda lib, t: t["s"].sum(dtype=lib.int16),
    "c.prod()": lambda lib, t: t["c"].prod(),
    "s.prod(0)": lambda lib, t: t["s"].reshape(2, 2).prod(0),
    "c.cumsum(0)": lambda lib, t: t["c"].cumsum(0),
    "s.cumsum(0)": lambda lib, t: t["s"].cumsum(0),
    "c.cumsum(dtype=int8) wraps": lambda lib, t: t["c"].cumsum(0, dtype=lib.int8),
    "s.cumprod(0)": lambda lib, t: t["s"].cumprod(0),
    "c.mean() refused": lambda lib, t: t["c"].mean(),
    "s.float().mean()": lambda lib, t: t["s"].float().mean(),
    "c.max()": lambda lib, t: t["c"].max(),
    "s.min(0)": lambda lib, t: tuple(t["s"].min(0)),
    "c.argmax()": lambda lib, t: t["c"].argmax(),
    "c.sort()": lambda lib, t: tuple(t["c"].sort()),
    "s.topk(2)": lambda lib, t: tuple(t["s"].topk(2)),
    "unique(c)": lambda lib, t: lib.unique(t["c"]),
    "c.all() is bool": lambda lib, t: t["c"].all(),
    "s.any(0)": lambda lib, t: t["s"].reshape(2, 2).any(0),
    "c.count_nonzero()": lambda lib, t: t["c"].count_nonzero(),
    "c.nonzero()": lambda lib, t: t["c"].nonzero(),
    "cat(c, u)": lambda lib, t: lib.cat([t["c"], t["u"]]),
    "cat(c, s)": lambda lib, t: lib.cat([t["c"], t["s"]]),
    "stack(c, f)": lambda lib, t: lib.stack([t["c"], t["f"]]),
    "bincount(c)": lambda lib, t: lib.bincount(t["c"] & 3),
    "diff(s)": lambda lib, t: lib.diff(t["s"]),
    "c.flip(0)": lambda lib, t: t["c"].flip(0),
    "s.median()": lambda lib, t: t["s"].median(),
    "s.cummax(0)": lambda lib, t: tuple(t["s"].cummax(0)),
    "einsum of int16": lambda lib, t: lib.einsum("i,i->", t["s"] % 7, t["s"] % 5),
}


@pytest.mark.parametrize("name", list(REDUCTIONS))
def test_reductions_and_shapes(name):
    compare(REDUCTIONS[name])


# -- indexing with int8/int16 indices: torch refuses them, but for 0-d ones and NumPy arrays ----
X = [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]


def _index(lib, dtype, values=(1, 0)):
    return lib.tensor(list(values), dtype=getattr(lib, dtype))


def _weight(lib):
    return lib.tensor(X).t().contiguous()


#: the ops torch refuses int8/int16 index tensors in, or takes them in; ``d`` names the dtype
INDEXING_BY_DTYPE = {
    "x[{}] refused": lambda lib, d: lib.tensor(X)[_index(lib, d)],
    "x[0-d {}] selects": lambda lib, d: lib.tensor(X)[lib.tensor(1, dtype=getattr(lib, d))],
    "x[:, 0-d {}]": lambda lib, d: lib.tensor(X)[:, lib.tensor(2, dtype=getattr(lib, d))],
    "x[NumPy {} array]": lambda lib, d: lib.tensor(X)[np.array([1, 0], dtype=d)],
    "x[{}] = v refused": lambda lib, d: lib.zeros(3).__setitem__(_index(lib, d), 1.0),
    "index_select {} refused": lambda lib, d: lib.tensor(X).index_select(1, _index(lib, d)),
    "gather {} refused": lambda lib, d: lib.tensor(X).gather(1, _index(lib, d).reshape(2, 1)),
    "scatter {} refused": lambda lib, d: lib.zeros(2, 3).scatter(
        1, _index(lib, d).reshape(2, 1), 1.0
    ),
    "index_add {} refused": lambda lib, d: lib.zeros(4).index_add(0, _index(lib, d), lib.ones(2)),
    "index_put {} refused": lambda lib, d: lib.zeros(4).index_put((_index(lib, d),), lib.ones(2)),
    "index_put_ {} accumulating refused": lambda lib, d: lib.zeros(4).index_put_(
        (_index(lib, d),), lib.ones(2), accumulate=True
    ),
    "tril_indices {} refused": lambda lib, d: lib.tril_indices(2, 2, dtype=getattr(lib, d)),
    "take {} refused": lambda lib, d: lib.tensor(X).take(_index(lib, d)),
    "embedding {} refused": lambda lib, d: lib.nn.functional.embedding(
        _index(lib, d), _weight(lib)
    ),
    "one_hot {} refused": lambda lib, d: lib.nn.functional.one_hot(_index(lib, d)),
    "nll_loss {} target refused": lambda lib, d: lib.nn.functional.nll_loss(
        lib.tensor(X), _index(lib, d)
    ),
    "repeat_interleave {} counts refused": lambda lib, d: lib.repeat_interleave(
        lib.tensor([1.0, 2.0]), _index(lib, d)
    ),
    "masked_fill {} mask refused": lambda lib, d: lib.ones(2).masked_fill(_index(lib, d), 0.0),
    # (torch promotes the input with the offsets: int64 offsets make it int64)
    "embedding_bag {} with int64 offsets": lambda lib, d: lib.nn.functional.embedding_bag(
        _index(lib, d), _weight(lib), lib.tensor([0])
    ),
    "embedding_bag {} with its own offsets refused": lambda lib, d: lib.nn.functional.embedding_bag(
        _index(lib, d), _weight(lib), _index(lib, d, (0,))
    ),
    "view(0-d {}, -1)": lambda lib, d: lib.ones(2, 2).view(lib.tensor(4, dtype=getattr(lib, d))),
    "list[0-d {}]": lambda lib, d: [10, 20, 30][lib.tensor(2, dtype=getattr(lib, d))],
}
INDEXING = {
    name.format(d): lambda lib, t, make=make, d=d: make(lib, d)
    for name, make in INDEXING_BY_DTYPE.items()
    for d in ("int8", "int16")
}
INDEXING.update(
    {
        "c[1:3]": lambda lib, t: t["c"][1:3],
        "c[bool mask]": lambda lib, t: t["c"][t["b"]],
        "s[int64]": lambda lib, t: t["s"][lib.tensor([3, 0])],
        "index_put_ accumulating through a uint8 mask": lambda lib, t: lib.zeros(4).index_put_(
            (t["u"] > 100,), lib.tensor(2.0), accumulate=True
        ),
        "index_put_ accumulating through a byte mask": lambda lib, t: lib.zeros(4).index_put_(
            ((t["u"] > 100).byte(),), lib.tensor(2.0), accumulate=True
        ),
        "index_put_ accumulating float indices refused": lambda lib, t: lib.zeros(4).index_put_(
            (t["f"].abs(),), lib.ones(4), accumulate=True
        ),
        "triu_indices int32": lambda lib, t: lib.triu_indices(3, 3, 1, dtype=lib.int32),
        "frexp's exponent is int32": lambda lib, t: tuple(lib.frexp(t["f"])),
        "c.gather(int64)": lambda lib, t: t["c"].gather(0, lib.tensor([2, 2, 0])),
        "masked_fill of int8 with a bool mask": lambda lib, t: t["c"].masked_fill(t["b"], -7),
        "masked_fill(200) into int8 refused": lambda lib, t: t["c"].masked_fill(t["b"], 200),
        "c[mask] = 2.9 truncates": lambda lib, t: (t["c"].__setitem__(t["b"], 2.9), t["c"])[1],
        "s.scatter_add(int64)": lambda lib, t: t["s"].scatter_add(
            0, lib.tensor([0, 0, 1]), lib.tensor([32767, 1, 2], dtype=lib.int16)
        ),
    }
)


@pytest.mark.parametrize("name", list(INDEXING))
def test_indexing(name):
    compare(INDEXING[name])


# -- creation and casts ---------------------------------------------------------------------------
CREATION = {
    "zeros int8": lambda lib, t: lib.zeros(2, 3, dtype=lib.int8),
    "ones int16": lambda lib, t: lib.ones((2,), dtype=lib.int16),
    "rg.short": lambda lib, t: lib.ones(2, dtype=lib.short),
    "full int8": lambda lib, t: lib.full((2,), -7, dtype=lib.int8),
    "full(128) into int8 refused": lambda lib, t: lib.full((2,), 128, dtype=lib.int8),
    "full(-129) into int8 refused": lambda lib, t: lib.full((2,), -129, dtype=lib.int8),
    "full(127.9) into int8 refused": lambda lib, t: lib.full((2,), 127.9, dtype=lib.int8),
    "full(-2.7) into int16 truncates": lambda lib, t: lib.full((2,), -2.7, dtype=lib.int16),
    "full(32768) into int16 refused": lambda lib, t: lib.full((2,), 32768, dtype=lib.int16),
    "tensor(int8) bounds": lambda lib, t: lib.tensor([-128, 127, 1.9], dtype=lib.int8),
    "tensor(200, int8) refused": lambda lib, t: lib.tensor([200], dtype=lib.int8),
    "tensor(-40000, int16) refused": lambda lib, t: lib.tensor([-40000], dtype=lib.int16),
    "tensor(array of 200, int8) wraps": lambda lib, t: lib.tensor(np.array([200]), dtype=lib.int8),
    "arange int8 past 127 wraps": lambda lib, t: lib.arange(125, 131, dtype=lib.int8),
    "arange int16": lambda lib, t: lib.arange(-3, 9, 4, dtype=lib.int16),
    "linspace int8": lambda lib, t: lib.linspace(-100, 100, 5, dtype=lib.int8),
    "eye int16": lambda lib, t: lib.eye(2, dtype=lib.int16),
    "zeros_like c": lambda lib, t: lib.zeros_like(t["c"]),
    "full_like s": lambda lib, t: lib.full_like(t["s"], -4),
    "new_full(-1) int8": lambda lib, t: t["c"].new_full((2,), -1),
    "new_tensor int16": lambda lib, t: t["f"].new_tensor([1, -2], dtype=lib.int16),
    "tensor of an int8 array": lambda lib, t: lib.tensor(np.array([1, -100], dtype=np.int8)),
    "tensor of an int16 array": lambda lib, t: lib.tensor(np.array([1, -2], dtype=np.int16)),
    "from_numpy int16 PCM": lambda lib, t: lib.from_numpy(np.array([[4, -2]], dtype=np.int16)),
    "from_numpy int8": lambda lib, t: lib.from_numpy(np.array([-128, 127], dtype=np.int8)),
    "as_tensor of an int8 array": lambda lib, t: lib.as_tensor(np.array([3], np.int8)),
    "np.int16 scalar": lambda lib, t: lib.tensor(np.int16(5)),
    "list of np.int8": lambda lib, t: lib.tensor([np.int8(3), np.int8(-4)]),
    "list of np.int8 and np.uint8": lambda lib, t: lib.tensor([np.int8(3), np.uint8(200)]),
    "ShortTensor": lambda lib, t: lib.ShortTensor([1, 2]),
    "CharTensor": lambda lib, t: lib.CharTensor([1, -2]),
    ".char() of floats truncates and wraps": lambda lib, t: lib.tensor([1.7, -0.2, -127.9]).char(),
    ".char() of int64 wraps": lambda lib, t: lib.tensor([200, -129, 256]).char(),
    ".short() of int64 wraps": lambda lib, t: lib.tensor([40000, -32769, 2**40 + 5]).short(),
    ".short() of floats": lambda lib, t: lib.tensor([-2.7, 3.9, 1000.5]).short(),
    ".char() of bools": lambda lib, t: t["b"].char(),
    "u.char() wraps": lambda lib, t: t["u"].char(),
    "c.byte() wraps": lambda lib, t: t["c"].byte(),
    "s.char() wraps": lambda lib, t: t["s"].char(),
    "c.short()": lambda lib, t: t["c"].short(),
    ".to(int8)": lambda lib, t: t["l"].to(lib.int8),
    ".to(int16) of i": lambda lib, t: t["i"].to(lib.int16),
    ".type(ShortTensor)": lambda lib, t: t["f"].type(lib.ShortTensor),
    ".type(int8)": lambda lib, t: t["s"].type(lib.int8),
    ".type() names": lambda lib, t: (t["c"].type(), t["s"].type()),
    "c.long()": lambda lib, t: t["c"].long(),
    "c.bool()": lambda lib, t: t["c"].bool(),
    "s.double()": lambda lib, t: t["s"].double(),
    "element_size": lambda lib, t: (t["c"].element_size(), t["s"].element_size()),
    "nbytes": lambda lib, t: (t["c"].nbytes, t["s"].nbytes),
    "item": lambda lib, t: (t["c"][1].item(), t["s"][0].item()),
    "tolist": lambda lib, t: (t["c"].tolist(), t["s"].tolist()),
    "is_signed": lambda lib, t: (t["c"].is_signed(), t["s"].is_signed()),
    "dtype is_signed, itemsize": lambda lib, t: (lib.int8.is_signed, lib.int16.itemsize),
    "iinfo int8": lambda lib, t: (lib.iinfo(lib.int8).min, lib.iinfo(lib.int8).max),
    "iinfo short": lambda lib, t: (lib.iinfo(lib.short).min, lib.iinfo(lib.int16).bits),
    "requires_grad refused": lambda lib, t: lib.zeros(2, dtype=lib.int8).requires_grad_(),
    "in-place add of a float refused": lambda lib, t: t["c"].add_(1.5),
    "in-place add of int16 into int8 wraps": lambda lib, t: t["c"].add_(t["s"]),
    "in-place add of int8 into uint8": lambda lib, t: t["u"].add_(t["c"]),
    "add_(200) wraps": lambda lib, t: t["c"].add_(200),
    "fill_(128) into int8 refused": lambda lib, t: t["c"].fill_(128),
    "fill_(-128)": lambda lib, t: t["c"].fill_(-128),
    "setitem -129 refused": lambda lib, t: (t["c"].__setitem__(0, -129), t["c"])[1],
    "setitem 2.7 into int16": lambda lib, t: (t["s"].__setitem__(slice(0, 2), 2.7), t["s"])[1],
    "copy_ of int64 wraps": lambda lib, t: lib.zeros(3, dtype=lib.int8).copy_(
        lib.tensor([200, -129, 7])
    ),
    "randint(-200, 0) int8 refused": lambda lib, t: lib.randint(-200, 0, (2,), dtype=lib.int8),
}


@pytest.mark.parametrize("name", list(CREATION))
def test_creation_and_casts(name):
    compare(CREATION[name])


# -- view(dtype): the bytes read as another dtype ---------------------------------------------
VIEWS = {
    "float32 as int32": lambda lib, t: t["f"].view(lib.int32),
    "int32 as float32": lambda lib, t: lib.tensor([1065353216, -1073741824], dtype=lib.int32).view(
        lib.float32
    ),
    "uint8 as int8": lambda lib, t: t["u"].view(lib.int8),
    "int8 as uint8": lambda lib, t: t["c"].view(lib.uint8),
    "uint8 as bool": lambda lib, t: (t["u"] % 2).view(lib.bool),
    "bool as int8": lambda lib, t: t["b"].view(lib.int8),
    "float64 as int64": lambda lib, t: t["f"].double().view(lib.int64),
    "int64 as float64": lambda lib, t: t["l"].view(lib.float64),
    "int16 as uint8 (last dim doubled)": lambda lib, t: t["s"].reshape(2, 2).view(lib.uint8),
    "int8 as int16 (last dim halved)": lambda lib, t: t["c"].reshape(2, 2).view(lib.int16),
    "int8 as int32": lambda lib, t: t["c"].view(lib.int32),
    "float32 as int16": lambda lib, t: t["f"].view(lib.int16),
    "dtype= keyword": lambda lib, t: t["f"].view(dtype=lib.int32),
    "same dtype": lambda lib, t: t["c"].view(lib.int8),
    "0-d float32 as int32": lambda lib, t: t["f"][0].view(lib.int32),
    "transposed, same itemsize": lambda lib, t: t["f"].reshape(2, 2).t().view(lib.int32),
    "transposed keeps its strides": lambda lib, t: (
        t["f"].reshape(2, 2).t().view(lib.int32).stride()
    ),
    "0-d as int16 refused": lambda lib, t: t["f"][0].view(lib.int16),
    "transposed as int16 refused": lambda lib, t: t["f"].reshape(2, 2).t().view(lib.int16),
    "size(-1) 3 as float64 refused": lambda lib, t: lib.ones(2, 3).view(lib.float64),
    "storage offset 1 as int16 refused": lambda lib, t: t["c"][1:3].view(lib.int16),
    "stride(0) 3 as int16 refused": lambda lib, t: lib.ones(2, 3, dtype=lib.int8)[:, :2].view(
        lib.int16
    ),
    "no gradient, as torch's": lambda lib, t: (
        lib.ones(2, requires_grad=True).view(lib.float32).requires_grad
    ),
}


@pytest.mark.parametrize("name", list(VIEWS))
def test_view_as_another_dtype(name):
    compare(VIEWS[name])


def _written_through(lib):
    """In-place writes into ``view(dtype)`` views and into their bases, seen by the other."""
    x = lib.tensor([1.0, 2.0, 3.0, 4.0])
    bits = x.view(lib.int32)
    bits[0] = 0
    bits.add_(1)  # (the float's lowest mantissa bit)
    x.mul_(2)  # (seen in bits)
    narrow = lib.tensor([[1, 2, 3, 4]], dtype=lib.int8)
    wide = narrow.view(lib.int16)
    wide[0, 1] = -1
    narrow[0, 0] = 5
    image = lib.zeros(2, 4, dtype=lib.uint8)
    image.view(lib.int32)[1] = -1
    floats = lib.zeros(4)
    floats[1:3].view(lib.int32).fill_(1065353216)  # 1.0's bits, through a slice
    short = lib.zeros(2, 2, dtype=lib.int16)
    short.view(lib.int8).view(lib.uint8)[:, 0] = 255
    transposed = lib.arange(6.0).reshape(2, 3).t()
    transposed.view(lib.int32)[0, 1] = 0
    return x, bits, narrow, wide, wide.stride(), image, floats, short, transposed


def test_view_as_another_dtype_aliases_as_torch_s():
    same(_written_through(rg), _written_through(torch))


def test_a_write_through_view_dtype_reaches_a_leaf_outside_the_graph():
    # torch's view(dtype) is not differentiable: an in-place write through it changes a leaf
    # that requires grad without recording anything (a bit trick on a weight's float bits)
    def run(lib):
        weight = lib.ones(2, requires_grad=True)
        weight.view(lib.int32).add_(1)  # (the next float up)
        loss = (weight * weight).sum()
        grads = loss.backward()
        grad = weight.grad if lib is torch else weight.grad(grads)
        return weight.detach(), grad, weight.view(lib.int32)

    same(run(rg), run(torch))


def test_view_as_complex64_reads_the_bits_as_torch():
    x = rg.tensor([1.0, 2.0])
    assert x.view(rg.complex64).tolist() == torch.tensor([1.0, 2.0]).view(torch.complex64).tolist()
    assert x.view(rg.int32).tolist() == [1065353216, 1073741824]


def test_view_between_int16_and_the_half_types_on_the_torch_backend():
    if isinstance(rg.default_backend().inner, rg.NumpyBackend):
        with pytest.raises(rg.DTypeError, match="TorchBackend"):  # (no half types there)
            rg.tensor([15360], dtype=rg.int16).view(rg.float16)
        return
    for half in ("float16", "bfloat16"):
        bits = [15360, -16384, 32767, 0]
        ours = rg.tensor(bits, dtype=rg.int16).view(getattr(rg, half))
        theirs = torch.tensor(bits, dtype=torch.int16).view(getattr(torch, half))
        same(ours, theirs)
        same(ours.view(rg.int16), theirs.view(torch.int16))


def test_randint_and_random_stay_in_bounds():
    rg.manual_seed(0)
    drawn = rg.randint(-128, 128, (200,), dtype=rg.int8)
    assert drawn.dtype == rg.int8 and int(drawn.min()) >= -128 and int(drawn.max()) <= 127
    filled = rg.zeros(200, dtype=rg.int16).random_()  # torch's [0, 2**15 - 1]
    assert filled.dtype == rg.int16 and int(filled.min()) >= 0 and int(filled.max()) < 2**15


def test_int16_pcm_audio_from_wavfile():
    # a mono 16-bit WAV written and read back with SciPy, turned into float samples in
    # [-1, 1) as torchaudio-free pipelines do, then framed and averaged
    pcm = np.array([0, 16384, -16384, 32767, -32768, 100, -1, 7], dtype=np.int16)
    buffer = io.BytesIO()
    scipy.io.wavfile.write(buffer, 8000, pcm)
    buffer.seek(0)
    rate, read = scipy.io.wavfile.read(buffer)
    assert rate == 8000 and read.dtype == np.int16

    def run(lib):
        samples = lib.from_numpy(read)
        floats = samples.float() / 32768
        frames = floats.reshape(2, 4)
        loud = samples.abs() > 16000  # (abs(-32768) wraps to -32768 in int16, as torch's)
        return samples, floats, frames.pow(2).mean(1), loud, samples.sum(), samples.long().max()

    same(run(rg), run(torch))


def test_int8_weight_quantization_by_hand():
    rng = np.random.default_rng(0)
    weight = rng.standard_normal((4, 3)).astype(np.float32)
    inputs = rng.standard_normal((2, 3)).astype(np.float32)

    def run(lib):
        w = lib.tensor(weight)
        scale = w.abs().max() / 127
        q = (w / scale).round().clamp(-128, 127).to(lib.int8)
        restored = q.float() * scale
        out = lib.tensor(inputs) @ restored.t()
        # per-row scales, as per-channel quantization keeps them
        row_scale = w.abs().amax(1, keepdim=True) / 127
        per_row = (w / row_scale).round().clamp(-128, 127).to(lib.int8)
        error = (per_row.float() * row_scale - w).abs().max()
        return q, restored, out, per_row, error < row_scale.max()

    ours, theirs = run(rg), run(torch)
    same(ours, theirs)
    assert ours[0].dtype == rg.int8 and ours[0].numpy().dtype == np.int8


def test_repr_and_dtype_names():
    for make in (
        lambda lib: lib.tensor([127, -128], dtype=lib.int8),
        lambda lib: lib.tensor(-7, dtype=lib.int16),
        lambda lib: lib.tensor([[32767, -5]], dtype=lib.int16),
    ):
        assert repr(make(rg)) == repr(make(torch)).replace("torch.", "retrograd.")
    assert repr(rg.int8) == "retrograd.int8" and rg.short == rg.int16 == "int16"
    assert rg.promote_types(rg.uint8, rg.int8) == "int16"


def test_serialization_round_trips_int8_and_int16():
    class Quantized(rg.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("q", rg.tensor([[-128, 127], [3, -4]], dtype=rg.int8))
            self.register_buffer("pcm", rg.tensor([32767, -32768, 0], dtype=rg.int16))

    buffer = io.BytesIO()
    rg.save(Quantized().state_dict(), buffer)
    buffer.seek(0)
    state = rg.load(buffer)
    assert state["q"].dtype == rg.int8 and state["pcm"].dtype == rg.int16
    np.testing.assert_array_equal(state["q"].numpy(), np.array([[-128, 127], [3, -4]], np.int8))
    np.testing.assert_array_equal(state["pcm"].numpy(), np.array([32767, -32768, 0], np.int16))
    fresh = Quantized()
    fresh.load_state_dict(state)
    assert fresh.q.dtype == rg.int8


def test_a_refusal_leaves_the_tensor_usable():
    x = rg.tensor([1, 2], dtype=rg.int8)
    with pytest.raises(rg.RetrogradError, match="int8"):
        x.fill_(300)
    with pytest.raises(rg.RetrogradError):
        x // 0
    assert x.tolist() == [1, 2]


@pytest.mark.parametrize("dtype", ["int8", "int16"])
def test_both_backends_sum_and_multiply_int8_int16_in_int64(dtype):
    # the protocol's rule (torch's): NumPy's own cumsum of int8 would stay int8 and wrap
    for backend in (rg.NumpyBackend(), rg.TorchBackend("cpu")):
        x = backend.from_data(np.array([[100, 100], [3, 4]]), dtype, None)
        outs = [
            backend.sum(x),
            backend.sum_dim(x, (0,)),
            backend.sum_dim(x, ()),
            backend.prod(x),
            backend.prod_dim(x, 0),
            backend.cumsum(x, 0),
            backend.cumprod(x, 1),
        ]
        reference = torch.tensor([[100, 100], [3, 4]]).to(getattr(torch, dtype))
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
