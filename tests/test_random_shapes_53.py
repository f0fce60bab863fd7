"""Random shape, view and joining programs against PyTorch, round 53.

Three families. Chains of two to four shape ops drawn for the shape at hand (``movedim``
with tuples, ``permute``, ``swapaxes``, ``mT``/``mH``/``adjoint``, ``flatten``/``unflatten``
with ``-1``, ``squeeze`` of a dim tuple, ``expand``, ``repeat``/``tile``/
``repeat_interleave`` with a tensor of repeats and ``output_size``, ``roll`` over several
dims, ``flip``/``rot90``, ``diagonal``/``diag_embed`` with offsets and dims, ``tril``/``triu``,
``narrow`` with a tensor start, ``select``, ``Tensor.unfold``, ``tensor_split`` by sections
and by a tensor of indices, ``hsplit``/``vsplit``/``dsplit``) are compared in values, dtype,
shape and the float64 gradient. Chains of views are compared in their strides, storage
offsets, contiguity and ``data_ptr`` (as offsets from the input's), then written through
(``add_``, ``fill_``, ``zero_``, ``mul_``, ``masked_fill_``) and the input compared: the
writes an expanded or overlapping view takes (a fill) and the ones torch refuses (an update).
Joins of mixed dtypes and ranks (``cat`` with torch's legacy 1-d empty tensors, ``stack``,
the ``*stack`` family) and bad calls whose errors must be ``RetrogradError``s that leave the
inputs usable close the file.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import retrograd as rg

torch = pytest.importorskip("torch")


def _np(x) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        return x.detach().resolve_conj().numpy().copy()
    return np.asarray(x.detach().numpy()).copy()


def _same(expected, got, what: str) -> None:
    a, b = _np(expected), _np(got)
    assert a.shape == b.shape, f"{what}: shape {a.shape} != {b.shape}"
    assert str(expected.dtype).replace("torch.", "") == str(got.dtype).replace("rg.", ""), (
        f"{what}: dtype {expected.dtype} != {got.dtype}"
    )
    np.testing.assert_allclose(b, a, rtol=1e-6, atol=1e-9, err_msg=what)


# -- drawing shape ops -----------------------------------------------------------------------
def _draw_op(rng: np.random.Generator, shape: tuple[int, ...]):
    """A (name, f(lib, t)) shape op that applies to a tensor of ``shape``."""
    n = len(shape)
    choices = ["flatten", "unsqueeze", "roll", "flip", "repeat", "tile"]
    if n >= 1:
        choices += ["movedim", "permute", "narrow", "select", "unfold", "split", "rep_int"]
    if n >= 2:
        choices += ["swapaxes", "mT", "adjoint", "diagonal", "tril", "rot90", "expand"]
    if n <= 2:
        choices.append("diag_embed")
    if 1 in shape:
        choices.append("squeeze")
    if n >= 1 and shape[-1] % 2 == 0:
        choices.append("unflatten")
    name = str(rng.choice(choices))
    d = int(rng.integers(0, max(n, 1))) if n else 0
    if name == "flatten":
        start = int(rng.integers(0, max(n, 1)))
        return name, lambda m, t: t.flatten(start) if n else t.flatten()
    if name == "unsqueeze":
        at = int(rng.integers(-n - 1, n + 1))
        return name, lambda m, t: t.unsqueeze(at)
    if name == "roll":
        if n < 2:
            k = int(rng.integers(-4, 5))
            return name, lambda m, t: m.roll(t, k)
        shifts = (int(rng.integers(-3, 4)), int(rng.integers(-3, 4)))
        return name, lambda m, t: m.roll(t, shifts, (0, -1))
    if name == "flip":
        dims = tuple(int(i) for i in rng.permutation(n)[: int(rng.integers(0, n + 1))])
        return name, lambda m, t: m.flip(t, dims)
    if name == "repeat":
        reps = tuple(int(r) for r in rng.integers(1, 3, n + int(rng.integers(0, 2))))
        return name, lambda m, t: t.repeat(*reps) if reps else t.repeat(())
    if name == "tile":
        reps = tuple(int(r) for r in rng.integers(1, 3, int(rng.integers(1, 3))))
        return name, lambda m, t: m.tile(t, reps)
    if name == "movedim":
        k = int(rng.integers(1, n + 1))
        src = tuple(int(i) for i in rng.permutation(n)[:k])
        dst = tuple(int(i) - n for i in rng.permutation(n)[:k])
        return name, lambda m, t: m.movedim(t, src, dst)
    if name == "permute":
        order = [int(i) for i in rng.permutation(n)]
        return name, lambda m, t: t.permute(*order)
    if name == "narrow":
        length = int(rng.integers(0, shape[d] + 1))
        start = int(rng.integers(0, shape[d] - length + 1))
        as_tensor = bool(rng.integers(0, 2))
        return name, lambda m, t: m.narrow(t, d, m.tensor(start) if as_tensor else start, length)
    if name == "select":
        if shape[d] == 0:
            return "flip", lambda m, t: t.flip(0)
        i = int(rng.integers(-shape[d], shape[d]))
        return name, lambda m, t: t.select(d, i)
    if name == "unfold":
        size = int(rng.integers(0, shape[d] + 1))
        step = int(rng.integers(1, 3))
        return name, lambda m, t: t.unfold(d, size, step)
    if name == "split":
        how = int(rng.integers(0, 4))
        if how == 0:
            k = int(rng.integers(1, 4))
            return "tensor_split", lambda m, t: m.tensor_split(t, k, d)[-1]
        if how == 1:
            idx = sorted(int(i) for i in rng.integers(-shape[d], shape[d] + 2, 2))
            return "tensor_split idx", lambda m, t: m.tensor_split(t, m.tensor(idx), dim=d)[1]
        if how == 2:
            k = int(rng.integers(1, 4))
            return "chunk", lambda m, t: t.chunk(k, d)[0]
        sizes = [int(rng.integers(0, shape[d] + 1))]
        sizes.append(shape[d] - sizes[0])
        return "split sizes", lambda m, t: t.split(sizes, d)[1]
    if name == "rep_int":
        reps = [int(r) for r in rng.integers(0, 3, shape[d])]
        given = bool(rng.integers(0, 2))
        return name, lambda m, t: t.repeat_interleave(
            m.tensor(reps, dtype=m.int64), d, output_size=sum(reps) if given else None
        )
    if name == "swapaxes":
        a, b = (int(i) for i in rng.integers(-n, n, 2))
        return name, lambda m, t: m.swapaxes(t, a, b)
    if name == "mT":
        return name, lambda m, t: t.mT
    if name == "adjoint":
        return name, lambda m, t: t.adjoint()
    if name == "diagonal":
        a, b = (int(i) for i in rng.permutation(n)[:2])
        off = int(rng.integers(-2, 3))
        return name, lambda m, t: m.diagonal(t, off, a, b)
    if name == "tril":
        off = int(rng.integers(-2, 3))
        upper = bool(rng.integers(0, 2))
        return name, lambda m, t: m.triu(t, off) if upper else m.tril(t, off)
    if name == "rot90":
        k = int(rng.integers(-3, 5))
        a, b = (int(i) for i in rng.permutation(n)[:2])
        return name, lambda m, t: m.rot90(t, k, (a, b))
    if name == "expand":
        return name, lambda m, t: t.unsqueeze(0).expand(2, *([-1] * n))
    if name == "diag_embed":
        off = int(rng.integers(-1, 2))
        return name, lambda m, t: m.diag_embed(t, off, -1, 0) if n else m.diag_embed(t, off)
    if name == "squeeze":
        ones = tuple(i for i, s in enumerate(shape) if s == 1)
        extra = (d,) if bool(rng.integers(0, 2)) else ()
        return name, lambda m, t: t.squeeze(ones + extra)
    # unflatten
    return name, lambda m, t: t.unflatten(-1, (-1, 2))


def _numel_ok(t) -> bool:
    return 0 < t.numel() <= 400 and t.ndim <= 5


@pytest.mark.parametrize("seed", range(4))
def test_random_shape_chains_match_torch_with_gradients(seed: int) -> None:
    rng = np.random.default_rng(5300 + seed)
    torch.manual_seed(seed)
    for program in range(45):
        shape = tuple(int(s) for s in rng.integers(1, 4, int(rng.integers(1, 4))))
        data = rng.standard_normal(shape)
        tx = torch.tensor(data, requires_grad=True)
        rx = rg.tensor(data, requires_grad=True)
        t_out, r_out, names = tx, rx, []
        for _ in range(int(rng.integers(2, 5))):
            name, op = _draw_op(rng, tuple(t_out.shape))
            try:
                t_next = op(torch, t_out)
            except (RuntimeError, IndexError, ValueError) as exc:
                with pytest.raises(rg.RetrogradError):
                    op(rg, r_out)
                assert not isinstance(exc, TypeError)
                continue
            if not _numel_ok(t_next):
                continue
            names.append(name)
            t_out, r_out = t_next, op(rg, r_out)
            _same(t_out, r_out, f"seed {seed} program {program}: {names} on {shape}")
        cot = rng.standard_normal(tuple(t_out.shape))
        (t_out * torch.tensor(cot)).sum().backward()
        grads = (r_out * rg.tensor(cot)).sum().backward()
        _same(tx.grad, rx.grad(grads), f"grad of {names} on {shape}")


# -- views: metadata and writes through them ------------------------------------------------
def _draw_view(rng: np.random.Generator, shape: tuple[int, ...]):
    n = len(shape)
    choices = ["transpose", "narrow", "select", "unsqueeze", "view", "unfold", "split", "mT"]
    if 1 in shape:
        choices.append("squeeze_expand")
    if n >= 2:
        choices.append("diagonal")
    name = str(rng.choice(choices))
    if n == 0:
        name = "unsqueeze"
    d = int(rng.integers(0, max(n, 1)))
    if name == "transpose" and n >= 2:
        a, b = (int(i) for i in rng.permutation(n)[:2])
        return name, lambda t: t.transpose(a, b)
    if name == "narrow" and shape[d] >= 1:
        length = int(rng.integers(1, shape[d] + 1))
        start = int(rng.integers(0, shape[d] - length + 1))
        return name, lambda t: t.narrow(d, start, length)
    if name == "select" and shape[d] >= 1:
        i = int(rng.integers(0, shape[d]))
        return name, lambda t: t.select(d, i)
    if name == "view":
        return name, lambda t: t.view(-1) if t.is_contiguous() else t.unflatten(d, (shape[d], 1))
    if name == "unfold" and shape[d] >= 1:
        # (windows that do not overlap: torch's update of overlapping ones depends on the
        # order its loop visits them in; their fills are drawn below)
        size = int(rng.integers(1, shape[d] + 1))
        step = size + int(rng.integers(0, 2))
        return name, lambda t: t.unfold(d, size, step)
    if name == "split" and shape[d] >= 2:
        which = int(rng.integers(0, 2))
        return name, lambda t: t.split(1, d)[which] if which else t.unbind(d)[0]
    if name == "mT" and n >= 2:
        return name, lambda t: t.mT
    if name == "squeeze_expand":
        ones = tuple(i for i, s in enumerate(shape) if s == 1)
        sizes = [3 if i in ones else -1 for i in range(n)]
        return "expand", lambda t: t.expand(*sizes)
    if name == "diagonal":
        off = int(rng.integers(-1, 2))
        return name, lambda t: t.diagonal(off, 0, -1)
    at = int(rng.integers(0, n + 1))
    return "unsqueeze", lambda t: t.unsqueeze(at)


_WRITES = {
    "add_": lambda m, v: v.add_(1.5),
    "mul_": lambda m, v: v.mul_(-2.0),
    "fill_": lambda m, v: v.fill_(7.0),
    "zero_": lambda m, v: v.zero_(),
    "masked_fill_": lambda m, v: v.masked_fill_(m.ones(v.shape[-1:], dtype=m.bool), -3.0),
    "copy_": lambda m, v: v.copy_(m.full(tuple(v.shape), 4.0)),
}


def _offsets(t, base) -> tuple:
    return (tuple(t.stride()), t.storage_offset(), t.is_contiguous(), t.data_ptr() - base)


@pytest.mark.parametrize("seed", range(3))
def test_random_view_chains_alias_as_torch(seed: int) -> None:
    rng = np.random.default_rng(5310 + seed)
    torch.manual_seed(seed)
    for program in range(60):
        shape = tuple(int(s) for s in rng.integers(1, 5, int(rng.integers(1, 4))))
        data = np.arange(float(np.prod(shape))).reshape(shape)
        tx, rx = torch.tensor(data), rg.tensor(data)
        tv, rv, names = tx, rx, []
        for _ in range(int(rng.integers(1, 4))):
            name, op = _draw_view(rng, tuple(tv.shape))
            t_next = op(tv)
            if t_next.numel() == 0:
                break
            names.append(name)
            tv, rv = t_next, op(rv)
            what = f"seed {seed} program {program}: {names} on {shape}"
            _same(tv, rv, what)
            assert _offsets(rv, rx.data_ptr()) == _offsets(tv, tx.data_ptr()), what
        write = str(rng.choice(sorted(_WRITES)))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # (torch's deprecation of masked_fill_ on expands)
            try:
                _WRITES[write](torch, tv)
            except RuntimeError:
                with pytest.raises(rg.RetrogradError):
                    _WRITES[write](rg, rv)
                _same(tx, rx, f"{names} {write}: input after the refused write")
                continue
            _WRITES[write](rg, rv)
        _same(tx, rx, f"{names} then {write}: the input")
        _same(tv, rv, f"{names} then {write}: the view")


def test_fills_through_overlapping_views_write_the_shared_memory() -> None:
    """torch checks the overlap in updates and copy_ only: a fill through an expanded
    tensor, overlapping unfold windows or as_strided positions writes every element once."""
    programs = [
        lambda m, x: x[:, :1].expand(3, 4).fill_(9.0),
        lambda m, x: x[:1].expand(3, 4).fill_diagonal_(5.0),
        lambda m, x: x[0].unfold(0, 3, 1).zero_(),
        lambda m, x: (
            x[1].as_strided((2, 3), (1, 1)).masked_fill_(m.tensor([True, False, True]), 2.0)
        ),
        lambda m, x: x[2:].expand(2, 3, 4).index_fill_(2, m.tensor([1, 3]), -1.0),
    ]
    for k, program in enumerate(programs):
        tx = torch.arange(12.0).reshape(3, 4)
        rx = rg.arange(12.0).reshape(3, 4)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            program(torch, tx)
        program(rg, rx)
        _same(tx, rx, f"fill program {k}")


# -- joins ------------------------------------------------------------------------------------
_DTYPES = ["float32", "float64", "int64", "int32", "bool", "uint8"]


def _tensor_pair(rng, shape, dtype):
    data = rng.standard_normal(shape) * 3
    if dtype == "bool":
        data = data > 0
    t = torch.tensor(data).to(getattr(torch, dtype))
    return t, rg.tensor(t.numpy().copy())


@pytest.mark.parametrize("seed", range(2))
def test_random_joins_promote_and_shape_as_torch(seed: int) -> None:
    rng = np.random.default_rng(5320 + seed)
    torch.manual_seed(seed)
    joins = ["cat", "concat", "concatenate", "stack", "hstack", "vstack", "dstack",
             "column_stack", "row_stack"]  # fmt: skip
    for program in range(80):
        join = str(rng.choice(joins))
        rank = int(rng.integers(0, 4))
        shape = [int(s) for s in rng.integers(1, 4, rank)]
        count = int(rng.integers(1, 4))
        tensors_t, tensors_r = [], []
        for _ in range(count):
            this = list(shape)
            if rank and join in ("cat", "concat", "concatenate") and rng.random() < 0.5:
                this[0] = int(rng.integers(0, 3))
            if join == "cat" and rng.random() < 0.15:
                this = [0]  # torch's legacy rule: a 1-d empty tensor joins anything
            t, r = _tensor_pair(rng, tuple(this), str(rng.choice(_DTYPES)))
            tensors_t.append(t)
            tensors_r.append(r)
        dim = int(rng.integers(-rank - 1, rank + 1)) if rank else 0
        kwargs = {"axis": dim} if join == "concatenate" else {}
        args = () if join.endswith("stack") and join != "stack" else (dim,)
        if kwargs:
            args = ()
        what = f"program {program}: {join}{args or kwargs} of {[tuple(t.shape) for t in tensors_t]}"
        try:
            expected = getattr(torch, join)(tensors_t, *args, **kwargs)
        except (RuntimeError, IndexError, ValueError):
            with pytest.raises(rg.RetrogradError):
                getattr(rg, join)(tensors_r, *args, **kwargs)
            _same(tensors_t[0] + 1, tensors_r[0] + 1, f"{what}: input after the error")
            continue
        _same(expected, getattr(rg, join)(tensors_r, *args, **kwargs), what)


def test_splits_of_every_kind_match_torch_and_write_through() -> None:
    torch.manual_seed(0)
    np.random.seed(0)
    data = np.random.default_rng(0).standard_normal((4, 6, 5))
    splits = [
        lambda m, x: m.hsplit(x, 3),
        lambda m, x: m.vsplit(x, [1, 3]),
        lambda m, x: m.dsplit(x, m.tensor([2, 4]).tolist()),
        lambda m, x: m.tensor_split(x, m.tensor(4), 2),
        lambda m, x: m.tensor_split(x, m.tensor([3, 1, 6]), 1),
        lambda m, x: x.split([2, 0, 2], 0),
        lambda m, x: x.chunk(4, -1),
        lambda m, x: x.unbind(-2),
    ]
    for k, split in enumerate(splits):
        tx, rx = torch.tensor(data), rg.tensor(data)
        t_parts, r_parts = split(torch, tx), split(rg, rx)
        assert len(t_parts) == len(r_parts), k
        for j, (a, b) in enumerate(zip(t_parts, r_parts)):
            _same(a, b, f"split {k} part {j}")
            assert b.storage_offset() == a.storage_offset(), (k, j)
            assert tuple(b.stride()) == tuple(a.stride()), (k, j)
        t_parts[-1].mul_(-1)
        r_parts[-1].mul_(-1)
        _same(tx, rx, f"split {k}: the input after a write through its last part")


# -- errors -----------------------------------------------------------------------------------
_BAD = [
    ("cat", lambda m, x: m.cat([x, x.sum()])),
    ("stack", lambda m, x: m.stack([x, x[:1]])),
    ("cat", lambda m, x: m.cat([x, x.unsqueeze(0)], 5)),
    ("view", lambda m, x: x.transpose(0, 1).view(-1)),
    ("view", lambda m, x: x.T.view(m.int32)),
    ("view", lambda m, x: x.view(4, -1, -1)),
    ("permute", lambda m, x: x.permute(0, 0)),
    ("unflatten", lambda m, x: x.unflatten(1, (4, 2))),
    ("squeeze", lambda m, x: x.squeeze((0, 3))),
    ("expand", lambda m, x: x.expand(4, 2)),
    ("unfold", lambda m, x: x.unfold(0, 5, 1)),
    ("unfold", lambda m, x: x.unfold(1, 1, 0)),
    ("narrow", lambda m, x: m.narrow(x, 1, 2, 2)),
    ("narrow", lambda m, x: m.narrow(x, 0, m.tensor([0, 1]), 1)),
    ("select", lambda m, x: x.select(2, 0)),
    ("split", lambda m, x: x.split([1, 1], 0)),
    ("chunk", lambda m, x: x.chunk(0)),
    ("tensor_split", lambda m, x: m.tensor_split(x, 0)),
    ("hsplit", lambda m, x: m.hsplit(x, 2)),
    ("dsplit", lambda m, x: m.dsplit(x, 1)),
    ("rot90", lambda m, x: m.rot90(x, 1, (0, 0))),
    ("roll", lambda m, x: m.roll(x, (1, 2), (0,))),
    ("diagonal", lambda m, x: m.diagonal(x, 0, 1, 1)),
    ("diag", lambda m, x: m.diag(x.unsqueeze(0))),
    ("repeat", lambda m, x: x.repeat(2)),
    ("repeat_interleave", lambda m, x: x.repeat_interleave(m.tensor([1, 2]), 0)),
    ("repeat_interleave", lambda m, x: x.repeat_interleave(m.tensor([1, -1, 1, 1]), 0)),
    ("broadcast", lambda m, x: m.broadcast_tensors(x, x.T)),
    ("movedim", lambda m, x: m.movedim(x, (0, 0), (0, 1))),
    ("add_", lambda m, x: x[:, :1].expand(4, 3).add_(1)),
    ("copy_", lambda m, x: x[:, :1].expand(4, 3).copy_(m.zeros(4, 3))),
    ("mul_", lambda m, x: x.as_strided((2, 2), (0, 1)).mul_(2)),
    ("fill_", lambda m, x: x[:, :1].expand(4, 3).fill_(m.tensor(1.0))),
]


def test_bad_shape_calls_raise_retrograd_errors_naming_the_op_and_leave_inputs_usable() -> None:
    data = np.arange(12.0).reshape(4, 3)
    for k, (op, bad) in enumerate(_BAD):
        tx, rx = torch.tensor(data), rg.tensor(data)
        with pytest.raises((RuntimeError, IndexError, ValueError)):
            bad(torch, tx)
        with pytest.raises(rg.RetrogradError) as info:
            bad(rg, rx)
        assert op in str(info.value), (k, str(info.value))
        _same(tx * 2, rx * 2, f"bad call {k}: the input after")
        _same(tx.T.contiguous(), rx.T.contiguous(), f"bad call {k}: a view after")
