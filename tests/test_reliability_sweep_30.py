"""Round 30 of the reliability sweep: ``rg.load`` of the files ``torch.save`` writes
(``retrograd/torch_files.py``), with torch 2.13's ``torch.load`` as the reference.

Every object here is saved by torch, in both of its formats (the zip, and the legacy one of
``_use_new_zipfile_serialization=False``), and loaded by both libraries; :func:`_assert_same`
walks the two results together: values, dtypes, shapes, container classes (an ``OrderedDict``
stays one, a tuple stays a tuple), ``Parameter``-ness and ``requires_grad``, and the ties
between tensors (one object in torch's result is one in retrograd's; tensors torch loads as
identical views of one storage load as one object, other views as equal values).

Covered: seeded random nests of containers, scalars and tensors of every dtype retrograd has
(float16/bfloat16 on the torch backend; on NumPy a DTypeError naming the dtype), views
(transposed, strided, offset, expanded, empty, 0-d) sharing storages; the state dicts of the
``nn`` modules with state (loaded into retrograd's module, whose forward then gives torch's);
the state dicts of every optimizer after two steps (the next step gives torch's); the LR
schedulers' state dicts; ``weights_only`` parity for the globals torch allows and refuses,
``add_safe_globals``/``safe_globals``, ``weights_only=False``; ``map_location`` in every form,
``mmap``, paths, ``pathlib.Path``, file objects, non-seekable streams; damage (every cut,
flipped bits, missing entries, a big-endian byte order, a storage shorter than its view,
crafted pickles with huge lengths or deep nesting): always an InvalidArgumentError naming the
file; ``Module.load_state_dict(path)``, ``hub.load_state_dict_from_url`` from the cache and
``get_unsafe_globals_in_checkpoint``.

Where retrograd deliberately differs, the case is left out or checked for its own rule:
* complex tensors and torch's dtypes retrograd has no tensors of (uint16, float8...): a
  DTypeError naming the dtype (retrograd has no such tensors).
* a whole ``torch.nn`` module or ``torch.optim`` optimizer under ``weights_only=False``: torch
  rebuilds it, retrograd refuses it by its class name (it would need torch's own classes).
* a ``collections.defaultdict`` with items, its class allowed by ``safe_globals``: torch's
  weights_only unpickler still refuses it (it sets items only on dict, OrderedDict and
  Counter); retrograd builds it, as the caller allowed. The case saves an empty one.
* ``get_unsafe_globals_in_checkpoint`` of a legacy file: torch refuses it (zip files only);
  retrograd reads its pickle too. Compared on zip files.
* views of one storage that are not identical load as copies (retrograd's tensors share no
  storage), so writing into one does not change the other, as it would in torch.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import io
import math
import pathlib
import pickle
import zipfile
from collections import OrderedDict

import numpy as np
import pytest
import torch

import retrograd as rg
from backends import on_torch

FORMATS = {"zip": True, "legacy": False}
REAL_DTYPES = ["float32", "float64", "int64", "int32", "int16", "int8", "uint8", "bool"]
HALF_DTYPES = ["float16", "bfloat16"]


def _saved(obj, zip_format: bool = True) -> bytes:
    buffer = io.BytesIO()
    torch.save(obj, buffer, _use_new_zipfile_serialization=zip_format)
    return buffer.getvalue()


def _both(data: bytes, **kwargs):
    return torch.load(io.BytesIO(data), **kwargs), rg.load(io.BytesIO(data), **kwargs)


def _view_key(t: torch.Tensor) -> tuple:
    return (
        type(t),
        t.untyped_storage().data_ptr(),
        t.dtype,
        t.storage_offset(),
        tuple(t.shape),
        t.stride(),
        t.requires_grad,
    )


class _Ties:
    """The ties between torch's tensors and retrograd's: a one-to-one map of torch's views
    (storage, offset, shape, strides) onto retrograd's objects."""

    def __init__(self):
        self.theirs: dict[tuple, int] = {}
        self.ours: dict[int, tuple] = {}
        self.held: list = []

    def check(self, expected: torch.Tensor, got, where: str) -> None:
        key = _view_key(expected)
        if key in self.theirs:
            assert self.theirs[key] == id(got), f"{where}: a view torch shares is a copy"
        else:
            assert id(got) not in self.ours, f"{where}: two of torch's tensors are one here"
            self.theirs[key], self.ours[id(got)] = id(got), key
            self.held.append(got)


def _assert_same(got, expected, where: str = "the object", ties: _Ties | None = None) -> None:
    ties = _Ties() if ties is None else ties
    if isinstance(expected, torch.Tensor):
        parameter = isinstance(expected, torch.nn.Parameter)
        assert isinstance(got, rg.nn.Parameter if parameter else rg.Tensor), where
        assert parameter or not isinstance(got, rg.nn.Parameter), where
        assert str(got.dtype) == str(expected.dtype).removeprefix("torch."), where
        assert tuple(got.shape) == tuple(expected.shape), where
        assert bool(got.requires_grad) == expected.requires_grad, where
        theirs = expected.detach()
        if theirs.dtype in (torch.float16, torch.bfloat16):
            np.testing.assert_array_equal(
                got.detach().float().numpy(), theirs.float().numpy(), err_msg=where
            )
        else:
            np.testing.assert_array_equal(got.detach().numpy(), theirs.numpy(), err_msg=where)
        ties.check(expected, got, where)
        return
    if isinstance(expected, torch.Size):
        assert isinstance(got, rg.Size) and tuple(got) == tuple(expected), where
        return
    if isinstance(expected, torch.device):
        assert got == rg.device(str(expected)), where
        return
    if isinstance(expected, torch.dtype):
        assert got == getattr(rg, str(expected).removeprefix("torch.")), where
        return
    assert type(got) is type(expected), f"{where}: {type(got)} is not {type(expected)}"
    if isinstance(expected, dict):
        assert list(got) == list(expected), where
        for key, value in expected.items():
            _assert_same(got[key], value, f"{where}[{key!r}]", ties)
        for name in ("_metadata",):
            assert getattr(got, name, None) == getattr(expected, name, None), where
    elif isinstance(expected, list | tuple):
        assert len(got) == len(expected), where
        for i, (mine, theirs) in enumerate(zip(got, expected)):
            _assert_same(mine, theirs, f"{where}[{i}]", ties)
    elif isinstance(expected, float) and math.isnan(expected):
        assert math.isnan(got), where
    else:
        assert got == expected, where


# ----------------------------------------------------------------------------------------------
# seeded random objects


def _dtypes() -> list[str]:
    return REAL_DTYPES + (HALF_DTYPES if on_torch() else [])


def _random_tensor(gen: np.random.Generator, pool: list) -> torch.Tensor:
    """A tensor of a random dtype and view: new, or a view of one made before (a shared
    storage), or the very same object again."""
    choice = int(gen.integers(0, 10))
    if pool and choice == 0:
        return pool[int(gen.integers(0, len(pool)))]
    if pool and choice <= 3:
        base = pool[int(gen.integers(0, len(pool)))]
        if base.dim() == 2 and base.shape[0] > 1 and base.shape[1] > 2:
            view = [base.t(), base[1:], base[:, ::2], base[1, 1:], base[0, 0], base[:0]]
            return view[int(gen.integers(0, len(view)))]
        return base.view(-1)[: max(0, base.numel() - 1)]
    dtype = getattr(torch, _dtypes()[int(gen.integers(0, len(_dtypes())))])
    shape = [(), (0,), (3,), (3, 4), (2, 3, 4), (4, 5)][int(gen.integers(0, 6))]
    values = torch.tensor(gen.standard_normal(shape) * 20)
    made = values.to(dtype) if dtype != torch.bool else values > 0
    if choice == 9 and made.dim() == 1 and made.numel():
        made = made[:1].expand(4)  # a zero stride
    if dtype in (torch.float32, torch.float64) and gen.integers(0, 3) == 0:
        made = torch.nn.Parameter(made, requires_grad=bool(gen.integers(0, 2)))
    pool.append(made)
    return made


def _random_leaf(gen: np.random.Generator, pool: list):
    kind = int(gen.integers(0, 12))
    leaves = [
        lambda: int(gen.integers(-(2**40), 2**40)),
        lambda: float(gen.standard_normal()),
        lambda: [math.inf, -math.inf, math.nan, -0.0][int(gen.integers(0, 4))],
        lambda: bool(gen.integers(0, 2)),
        lambda: None,
        lambda: "".join(chr(int(c)) for c in gen.integers(32, 0x3000, 4)),
        lambda: bytes(gen.integers(0, 256, 3).astype(np.uint8)),
        lambda: complex(float(gen.standard_normal()), 1.5),
        lambda: 2**70 * int(gen.integers(1, 5)),
    ]
    if kind < len(leaves):
        return leaves[kind]()
    return _random_tensor(gen, pool)


def _random_object(gen: np.random.Generator, pool: list, depth: int = 0):
    kind = int(gen.integers(0, 7)) if depth < 3 else 6
    count = int(gen.integers(0, 4))
    if kind == 0:
        return {f"k{i}": _random_object(gen, pool, depth + 1) for i in range(count)}
    if kind == 1:
        return OrderedDict((i, _random_object(gen, pool, depth + 1)) for i in range(count))
    if kind == 2:
        return [_random_object(gen, pool, depth + 1) for _ in range(count)]
    if kind == 3:
        return tuple(_random_object(gen, pool, depth + 1) for _ in range(count))
    if kind == 4:
        return {int(gen.integers(0, 9)) for _ in range(count)} | {("t", count)}
    if kind == 5:
        return {(1, "a"): _random_object(gen, pool, depth + 1), 2.5: None, None: [], True: ()}
    return _random_leaf(gen, pool)


@pytest.mark.parametrize("form", list(FORMATS))
def test_seeded_random_objects_load_as_torch_loads_them(form):
    for seed in range(24):
        gen = np.random.default_rng(seed)
        pool: list = []
        obj = [_random_object(gen, pool) for _ in range(3)]
        theirs, ours = _both(_saved(obj, FORMATS[form]))
        _assert_same(ours, theirs, f"seed {seed}")


@pytest.mark.parametrize("form", list(FORMATS))
def test_every_dtype_and_view_of_shared_storages(form):
    gen = np.random.default_rng(30)
    base = torch.tensor(gen.standard_normal((4, 6)) * 30)
    saved = {}
    for name in _dtypes():
        typed = base > 0 if name == "bool" else base.to(getattr(torch, name))
        saved[name] = typed
        saved[f"{name}.t"] = typed.t()
        saved[f"{name}.strided"] = typed[::2, 1::3]
        saved[f"{name}.offset"] = typed[1:, 2:]
        saved[f"{name}.row"] = typed[2]
        saved[f"{name}.0d"] = typed[1, 1]
        saved[f"{name}.empty"] = typed[:, :0]
        saved[f"{name}.expanded"] = typed[0, :1].expand(3, 2)
        saved[f"{name}.again"] = typed[1:, 2:]  # an identical view: one object
    saved["0-d alone"] = torch.tensor(7, dtype=torch.int16)
    saved["zero size"] = torch.zeros(0, 3, 0)
    saved["same object"] = saved["float32"]
    theirs, ours = _both(_saved(saved, FORMATS[form]))
    _assert_same(ours, theirs)
    assert ours["float32.offset"] is ours["float32.again"]
    assert ours["float32"] is ours["same object"]


@pytest.mark.parametrize("form", list(FORMATS))
@pytest.mark.parametrize("dtype", HALF_DTYPES)
def test_half_precision_is_torch_s_on_torch_and_a_dtype_error_on_numpy(form, dtype):
    gen = np.random.default_rng(31)
    values = torch.tensor(gen.standard_normal((3, 4))).to(getattr(torch, dtype))
    data = _saved({"w": values, "v": values[:, 1:3]}, FORMATS[form])
    if on_torch():
        theirs, ours = _both(data)
        _assert_same(ours, theirs)
        return
    with pytest.raises(rg.DTypeError, match=dtype):
        rg.load(io.BytesIO(data))


@pytest.mark.parametrize("form", list(FORMATS))
def test_parameters_and_tensors_that_require_grad(form):
    torch.manual_seed(30)
    trainable = torch.nn.Parameter(torch.randn(2, 3))
    frozen = torch.nn.Parameter(torch.randn(3), requires_grad=False)
    leaf = torch.randn(4, requires_grad=True)
    saved = {
        "trainable": trainable,
        "frozen": frozen,
        "leaf": leaf,
        "again": [trainable, frozen, leaf],
        "data": trainable.data,  # the same storage, a plain tensor
        "tuple": (frozen,),
    }
    theirs, ours = _both(_saved(saved, FORMATS[form]))
    _assert_same(ours, theirs)
    assert ours["again"][0] is ours["trainable"] and ours["tuple"][0] is ours["frozen"]


# ----------------------------------------------------------------------------------------------
# state dicts of modules, optimizers and schedulers

#: The ``nn`` modules that have state: (class, args, kwargs, input shapes; an int in a shape
#: list is a tensor of that many class indices in [0, 4)).
MODULES = [
    ("Linear", (3, 2), {}, [(2, 3)]),
    ("Bilinear", (3, 2, 4), {}, [(2, 3), (2, 2)]),
    ("Conv1d", (2, 3, 3), {"padding": 1}, [(1, 2, 5)]),
    ("Conv2d", (2, 3, 3), {"groups": 1, "stride": 2}, [(1, 2, 5, 5)]),
    ("Conv3d", (2, 2, 2), {}, [(1, 2, 3, 3, 3)]),
    ("ConvTranspose1d", (2, 3, 3), {}, [(1, 2, 4)]),
    ("ConvTranspose2d", (2, 3, 2), {"stride": 2}, [(1, 2, 3, 3)]),
    ("ConvTranspose3d", (2, 2, 2), {}, [(1, 2, 2, 2, 2)]),
    ("BatchNorm1d", (3,), {}, [(4, 3)]),
    ("BatchNorm2d", (3,), {}, [(2, 3, 2, 2)]),
    ("BatchNorm3d", (2,), {}, [(2, 2, 2, 2, 2)]),
    ("InstanceNorm1d", (3,), {"affine": True, "track_running_stats": True}, [(2, 3, 4)]),
    ("InstanceNorm2d", (2,), {"affine": True, "track_running_stats": True}, [(2, 2, 3, 3)]),
    ("InstanceNorm3d", (2,), {"affine": True}, [(1, 2, 2, 2, 2)]),
    ("LayerNorm", ((3, 4),), {}, [(2, 3, 4)]),
    ("GroupNorm", (2, 4), {}, [(2, 4, 3)]),
    ("RMSNorm", (4,), {}, [(2, 4)]),
    ("PReLU", (3,), {}, [(2, 3)]),
    ("Embedding", (5, 3), {"padding_idx": 0}, [5]),
    ("LSTM", (3, 4), {"num_layers": 2, "bidirectional": True, "proj_size": 2}, [(2, 5, 3)]),
    ("GRU", (3, 4), {"batch_first": True}, [(2, 5, 3)]),
    ("RNN", (3, 4), {"nonlinearity": "relu", "bias": False}, [(5, 2, 3)]),
    ("LSTMCell", (3, 4), {}, [(2, 3)]),
    ("GRUCell", (3, 4), {}, [(2, 3)]),
    ("RNNCell", (3, 4), {}, [(2, 3)]),
    ("MultiheadAttention", (4, 2), {"kdim": 3, "vdim": 5}, [(3, 2, 4), (6, 2, 3), (6, 2, 5)]),
    ("MultiheadAttention", (4, 2), {"bias": False, "batch_first": True}, [(2, 3, 4)] * 3),
    ("TransformerEncoderLayer", (4, 2, 8), {"dropout": 0.0}, [(3, 2, 4)]),
    ("TransformerDecoderLayer", (4, 2, 8), {"dropout": 0.0, "norm_first": True}, [(3, 2, 4)] * 2),
    (
        "Transformer",
        (),
        {
            "d_model": 4,
            "nhead": 2,
            "num_encoder_layers": 1,
            "num_decoder_layers": 1,
            "dim_feedforward": 6,
            "dropout": 0.0,
        },
        [(3, 2, 4), (2, 2, 4)],
    ),
    ("CrossEntropyLoss", (), {"weight": [1.0, 2.0, 0.5, 1.5]}, [(3, 4), 3]),
    ("NLLLoss", (), {"weight": [1.0, 2.0, 0.5, 1.5]}, [(3, 4), 3]),
    ("BCEWithLogitsLoss", (), {"pos_weight": [1.0, 3.0]}, [(3, 2), (3, 2)]),
    ("MultiMarginLoss", (), {"weight": [1.0, 2.0, 0.5, 1.5]}, [(3, 4), 3]),
]


def _inputs(lib, shapes, gen):
    made = []
    for shape in shapes:
        if isinstance(shape, int):
            made.append(lib.tensor(gen.integers(0, 4, shape)))
        else:
            made.append(lib.tensor(gen.standard_normal(shape).astype(np.float32)))
    return made


def _built(lib, name, args, kwargs):
    kwargs = {k: lib.tensor(v) if isinstance(v, list) else v for k, v in kwargs.items()}
    return getattr(lib.nn, name)(*args, **kwargs)


def _first(output):
    while isinstance(output, tuple | list):
        output = output[0]
    return output


@pytest.mark.parametrize("form", list(FORMATS))
def test_module_state_dicts_load_into_retrograd_modules_and_compute_as_torch(form):
    for number, (name, args, kwargs, shapes) in enumerate(MODULES):
        torch.manual_seed(number)
        theirs = _built(torch, name, args, kwargs)
        with torch.no_grad():  # every buffer and parameter away from its initial value
            for value in theirs.state_dict().values():
                if value.is_floating_point():
                    value.add_(torch.rand_like(value))
        for module in theirs.modules():
            if hasattr(module, "num_batches_tracked") and module.num_batches_tracked is not None:
                module.num_batches_tracked.fill_(3)
        theirs.eval()
        state = theirs.state_dict()
        loaded = rg.load(io.BytesIO(_saved(state, FORMATS[form])))
        _assert_same(loaded, torch.load(io.BytesIO(_saved(state, FORMATS[form]))), name)
        ours = _built(rg, name, args, kwargs)
        ours.load_state_dict(loaded)
        ours.eval()
        gen = np.random.default_rng(number)
        expected = _first(theirs(*_inputs(torch, shapes, gen))).detach().numpy()
        gen = np.random.default_rng(number)
        got = _first(ours(*_inputs(rg, shapes, gen))).detach().numpy()
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5, err_msg=name)


def _optimizers(lib):
    return {
        "SGD": lambda p: lib.optim.SGD(p, lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01),
        "Adam": lambda p: lib.optim.Adam(p, lr=0.01, amsgrad=True),
        "AdamW": lambda p: lib.optim.AdamW(p, lr=0.01),
        "Adamax": lambda p: lib.optim.Adamax(p, lr=0.01),
        "NAdam": lambda p: lib.optim.NAdam(p, lr=0.01, decoupled_weight_decay=True),
        "RAdam": lambda p: lib.optim.RAdam(p, lr=0.01),
        "Adagrad": lambda p: lib.optim.Adagrad(p, lr=0.1, lr_decay=0.01),
        "Adadelta": lambda p: lib.optim.Adadelta(p, lr=0.5),
        "Adafactor": lambda p: lib.optim.Adafactor(p, lr=0.01),
        "RMSprop": lambda p: lib.optim.RMSprop(p, lr=0.01, momentum=0.5, centered=True),
        "Rprop": lambda p: lib.optim.Rprop(p, lr=0.01),
        "ASGD": lambda p: lib.optim.ASGD(p, lr=0.01, t0=1),
        "LBFGS": lambda p: lib.optim.LBFGS(p, lr=0.5, history_size=3, max_iter=3),
    }


def _loss_of(lib, weights, batch):
    first, second = weights
    return ((lib.tensor(batch) @ first).tanh() @ second).pow(2).mean()


@pytest.mark.parametrize("form", list(FORMATS))
@pytest.mark.parametrize("kind", list(_optimizers(torch)))
def test_optimizer_state_dicts_resume_as_torch_s(form, kind):
    gen = np.random.default_rng(32)
    start = [gen.standard_normal((3, 4)), gen.standard_normal((4, 2))]
    batches = [gen.standard_normal((5, 3)) for _ in range(3)]
    theirs = [torch.nn.Parameter(torch.tensor(w, dtype=torch.float32)) for w in start]
    groups = [{"params": theirs}] if kind == "LBFGS" else [{"params": [w]} for w in theirs]
    optimizer = _optimizers(torch)[kind](groups)

    def torch_step(batch):
        def closure():
            optimizer.zero_grad()
            loss = _loss_of(torch, theirs, batch.astype(np.float32))
            loss.backward()
            return loss

        optimizer.step(closure)

    for batch in batches[:2]:
        torch_step(batch)
    data = _saved(
        {"weights": [w.detach() for w in theirs], "opt": optimizer.state_dict()}, FORMATS[form]
    )
    torch_step(batches[2])

    checkpoint = rg.load(io.BytesIO(data))
    _assert_same(checkpoint, torch.load(io.BytesIO(data)))
    ours = [rg.nn.Parameter(w.detach()) for w in checkpoint["weights"]]
    groups = [{"params": ours}] if kind == "LBFGS" else [{"params": [w]} for w in ours]
    ours_optimizer = _optimizers(rg)[kind](groups)
    ours_optimizer.load_state_dict(checkpoint["opt"])

    def closure():
        ours_optimizer.zero_grad()
        loss = _loss_of(rg, ours, batches[2].astype(np.float32))
        return loss, loss.backward()  # (retrograd's gradients are a value)

    ours_optimizer.step(closure)
    for mine, expected in zip(ours, theirs):
        np.testing.assert_allclose(
            mine.detach().numpy(), expected.detach().numpy(), rtol=1e-4, atol=1e-6, err_msg=kind
        )


def _schedulers(lib):
    sched = lib.optim.lr_scheduler
    return {
        "StepLR": lambda o: sched.StepLR(o, 2, gamma=0.5),
        "MultiStepLR": lambda o: sched.MultiStepLR(o, [1, 3], gamma=0.5),
        "ExponentialLR": lambda o: sched.ExponentialLR(o, 0.9),
        "CosineAnnealingLR": lambda o: sched.CosineAnnealingLR(o, 5, eta_min=0.01),
        "CosineAnnealingWarmRestarts": lambda o: sched.CosineAnnealingWarmRestarts(o, 2, 2),
        "ConstantLR": lambda o: sched.ConstantLR(o, 0.5, total_iters=3),
        "LinearLR": lambda o: sched.LinearLR(o, 0.2, total_iters=4),
        "PolynomialLR": lambda o: sched.PolynomialLR(o, 6, power=2.0),
        "CyclicLR": lambda o: sched.CyclicLR(o, 0.01, 0.1, step_size_up=2),
        "OneCycleLR": lambda o: sched.OneCycleLR(o, 0.5, total_steps=10),
        "ReduceLROnPlateau": lambda o: sched.ReduceLROnPlateau(o, patience=0, factor=0.5),
        "LambdaLR": lambda o: sched.LambdaLR(o, lambda epoch: 0.9**epoch),
        "MultiplicativeLR": lambda o: sched.MultiplicativeLR(o, lambda epoch: 0.95),
        "SequentialLR": lambda o: sched.SequentialLR(
            o, [sched.ConstantLR(o, 0.5, total_iters=2), sched.ExponentialLR(o, 0.9)], [2]
        ),
        "ChainedScheduler": lambda o: sched.ChainedScheduler(
            [sched.ConstantLR(o, 0.5, total_iters=2), sched.ExponentialLR(o, 0.9)]
        ),
    }


@pytest.mark.parametrize("form", list(FORMATS))
def test_lr_scheduler_state_dicts_continue_as_torch_s(form):
    for kind in _schedulers(torch):
        weight = torch.nn.Parameter(torch.ones(2))
        optimizer = torch.optim.SGD([weight], lr=0.1, momentum=0.9)
        scheduler = _schedulers(torch)[kind](optimizer)
        plateau = kind == "ReduceLROnPlateau"
        for step in range(3):
            optimizer.step()
            scheduler.step(*([1.0 + step] if plateau else []))
        data = _saved(
            {"opt": optimizer.state_dict(), "sched": scheduler.state_dict()}, FORMATS[form]
        )
        checkpoint = rg.load(io.BytesIO(data))
        _assert_same(checkpoint, torch.load(io.BytesIO(data)), kind)
        ours_weight = rg.nn.Parameter(rg.ones(2))
        ours_optimizer = rg.optim.SGD([ours_weight], lr=0.1, momentum=0.9)
        ours_scheduler = _schedulers(rg)[kind](ours_optimizer)
        ours_optimizer.load_state_dict(checkpoint["opt"])
        ours_scheduler.load_state_dict(checkpoint["sched"])
        for step in range(3):
            scheduler.step(*([0.5] if plateau else []))
            ours_scheduler.step(*([0.5] if plateau else []))
            expected = [group["lr"] for group in optimizer.param_groups]
            got = [group["lr"] for group in ours_optimizer.param_groups]
            np.testing.assert_allclose(got, expected, rtol=1e-9, err_msg=f"{kind} {step}")


# ----------------------------------------------------------------------------------------------
# weights_only


@dataclasses.dataclass
class Settings:
    rate: float = 0.1


def _refused_globals():
    """(object, the global torch names refusing it, what allows it)."""
    parameter = torch.nn.Parameter(torch.ones(1))
    return [
        (argparse.Namespace(lr=0.1), "argparse.Namespace", [argparse.Namespace]),
        (np.float64(2.0), "numpy", [np._core.multiarray.scalar, np.dtype, np.dtypes.Float64DType]),
        (
            np.arange(3),
            "numpy",
            [np._core.multiarray._reconstruct, np.ndarray, np.dtype, np.dtypes.Int64DType],
        ),
        (Settings(0.5), "Settings", [Settings]),
        (print, "builtins.print", [print]),
        (frozenset({1}), "builtins.frozenset", [frozenset]),
        (
            collections.defaultdict(list),
            "collections.defaultdict",
            [collections.defaultdict, list],
        ),
        (
            argparse.Namespace(lr=1),
            "argparse.Namespace",
            [(argparse.Namespace, "argparse.Namespace")],
        ),
        (torch.nn.Linear(1, 1), "torch.nn.modules.linear.Linear", None),
        (torch.optim.SGD([parameter], lr=0.1), "torch.optim.sgd.SGD", None),
    ]


@pytest.mark.parametrize("form", list(FORMATS))
def test_weights_only_allows_and_refuses_what_torch_does(form):
    for obj, named, allow in _refused_globals():
        data = _saved({"x": obj, "w": torch.ones(2)}, FORMATS[form])
        with pytest.raises(pickle.UnpicklingError):
            torch.load(io.BytesIO(data))
        with pytest.raises(rg.InvalidArgumentError, match=named) as refused:
            rg.load(io.BytesIO(data))
        assert "file object" in str(refused.value)
        if allow is None:  # torch's own classes: refused by name whatever the flag
            with pytest.raises(rg.InvalidArgumentError, match=named):
                rg.load(io.BytesIO(data), weights_only=False)
            continue
        with torch.serialization.safe_globals(allow):
            expected = torch.load(io.BytesIO(data))
        with rg.serialization.safe_globals(allow):
            got = rg.load(io.BytesIO(data))
        for loaded in (got, rg.load(io.BytesIO(data), weights_only=False)):
            if isinstance(obj, np.ndarray):
                np.testing.assert_array_equal(loaded["x"], expected["x"])
            else:
                assert loaded["x"] == expected["x"] and type(loaded["x"]) is type(expected["x"])
            assert loaded["w"].tolist() == [1.0, 1.0]
        with pytest.raises(rg.InvalidArgumentError):  # the block's allowance ended with it
            rg.load(io.BytesIO(data))


@pytest.mark.parametrize("form", list(FORMATS))
def test_torch_s_default_allow_list_loads_or_is_refused_by_what_it_is(form):
    plain = {
        "c": collections.Counter("aab"),
        "b": bytearray(b"\x00\x01"),
        "z": 2 - 1j,
        "s": {1, 2},
        "d": torch.float64,
        "dev": torch.device("cpu"),
        "size": torch.Size([]),
    }
    theirs, ours = _both(_saved(plain, FORMATS[form]))
    _assert_same(ours, theirs)
    lacking = [torch.uint16, torch.float8_e4m3fn, torch.quint8]
    for dtype in lacking:
        data = _saved({"dtype": dtype}, FORMATS[form])
        assert torch.load(io.BytesIO(data))["dtype"] == dtype
        with pytest.raises(rg.DTypeError, match=str(dtype)):
            rg.load(io.BytesIO(data))
    for obj, what in [
        (torch.per_tensor_affine, "quantized"),
        (torch.ones(2).to_sparse(), "sparse"),
        (torch.ones(2).untyped_storage(), "storage"),
    ]:
        if not FORMATS[form] and what == "storage":
            continue  # torch 2.13 cannot read its own legacy file of an untyped storage
        data = _saved([obj], FORMATS[form])
        torch.load(io.BytesIO(data))
        for weights_only in (True, False):
            with pytest.raises(rg.InvalidArgumentError, match=what) as refused:
                rg.load(io.BytesIO(data), weights_only=weights_only)
            assert "weights_only=False" not in str(refused.value)  # (it would not help)


def test_unsafe_globals_in_checkpoint_are_torch_s():
    for obj, _named, _allow in _refused_globals():
        for extra in (
            [],
            [torch.uint16, torch.ones(2, dtype=torch.uint16), torch.per_channel_affine],
        ):
            data = _saved({"x": obj, "extra": extra})
            expected = torch.serialization.get_unsafe_globals_in_checkpoint(io.BytesIO(data))
            got = rg.serialization.get_unsafe_globals_in_checkpoint(io.BytesIO(data))
            assert set(got) == set(expected), obj
            with torch.serialization.safe_globals([argparse.Namespace, print]):
                expected = torch.serialization.get_unsafe_globals_in_checkpoint(io.BytesIO(data))
            with rg.serialization.safe_globals([argparse.Namespace, print]):
                got = rg.serialization.get_unsafe_globals_in_checkpoint(io.BytesIO(data))
            assert set(got) == set(expected), obj


# ----------------------------------------------------------------------------------------------
# map_location and the kinds of file


def _located(data: bytes, location: str) -> bytes:
    """A torch zip file whose storages say they were saved from ``location`` (a CUDA device,
    which this machine need not have)."""
    with zipfile.ZipFile(io.BytesIO(data)) as source:
        entries = {name: source.read(name) for name in source.namelist()}
    pickled = next(name for name in entries if name.endswith("data.pkl"))
    new = location.encode()
    entries[pickled] = entries[pickled].replace(
        b"X\x03\x00\x00\x00cpu", b"X" + len(new).to_bytes(4, "little") + new
    )
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as target:
        for name, content in entries.items():
            target.writestr(name, content)
    return out.getvalue()


def test_map_location_in_every_form_torch_takes():
    saved = {"w": torch.arange(6.0).reshape(2, 3), "v": torch.arange(6.0).reshape(2, 3)[1]}
    for zip_format in FORMATS.values():
        data = _saved(saved, zip_format)
        forms = [
            "cpu",
            torch.device("cpu"),
            rg.device("cpu"),
            {"cuda:0": "cpu"},
            {"cpu": "cpu"},
            {"cuda:1": "cuda:0"},
            lambda storage, location: storage,
            lambda storage, location: None,
        ]
        for form in forms:
            location = form if not isinstance(form, rg.device) else "cpu"
            expected = torch.load(io.BytesIO(data), map_location=location)
            _assert_same(rg.load(io.BytesIO(data), map_location=form), expected, repr(form))
    from_gpu = _located(_saved(saved), "cuda:0")
    theirs_seen, ours_seen = [], []
    expected = torch.load(
        io.BytesIO(from_gpu), map_location=lambda s, where: theirs_seen.append(where) or s
    )
    got = rg.load(io.BytesIO(from_gpu), map_location=lambda s, where: ours_seen.append(where) or s)
    _assert_same(got, expected)
    assert set(ours_seen) == set(theirs_seen) == {"cuda:0"}
    for form in ["cpu", {"cuda:0": "cpu"}]:
        _assert_same(
            rg.load(io.BytesIO(from_gpu), map_location=form),
            torch.load(io.BytesIO(from_gpu), map_location=form),
        )


class _Stream(io.RawIOBase):
    """A pipe's file object: read in small pieces, no seek, no tell."""

    def __init__(self, data: bytes):
        self.data = io.BytesIO(data)

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        piece = self.data.read(min(len(buffer), 5))
        buffer[: len(piece)] = piece
        return len(piece)


def test_paths_file_objects_streams_and_mmap(tmp_path):
    saved = OrderedDict(w=torch.arange(4.0), n=(1, "two"))
    for form, zip_format in FORMATS.items():
        data = _saved(saved, zip_format)
        expected = torch.load(io.BytesIO(data))
        path = tmp_path / f"{form}.pt"
        path.write_bytes(data)
        _assert_same(rg.load(path), expected)
        _assert_same(rg.load(str(path), mmap=True), expected)
        with open(path, "rb") as handle:
            _assert_same(rg.load(handle), expected)
        _assert_same(rg.load(_Stream(data)), expected)
        _assert_same(rg.load(io.BufferedReader(_Stream(data))), expected)
        late = io.BytesIO(b"head" + data)
        late.seek(4)  # torch reads from where the file object is
        _assert_same(rg.load(late), torch.load(io.BytesIO(data)))
    assert isinstance(tmp_path / "zip.pt", pathlib.Path)


# ----------------------------------------------------------------------------------------------
# damage


def _load_damaged(data: bytes) -> None:
    """``rg.load`` of a damaged file: loads (a flip in the values), or one clear error."""
    try:
        rg.load(io.BytesIO(data))
    except rg.InvalidArgumentError as error:
        assert "file object" in str(error), error


def _rezipped(entries: dict[str, bytes]) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as target:
        for name, content in entries.items():
            target.writestr(name, content)
    return out.getvalue()


DAMAGED_OBJECT = {
    "w": torch.arange(12.0).reshape(3, 4),
    "p": torch.nn.Parameter(torch.ones(2)),
    "o": OrderedDict(i=torch.ones(2, dtype=torch.int64)),
    "n": [1, 2.5, "s"],
}


@pytest.mark.parametrize("form", list(FORMATS))
def test_truncation_and_flipped_bits_are_one_clear_error(form):
    data = _saved(DAMAGED_OBJECT, FORMATS[form])
    for cut in range(0, len(data), 3):
        with pytest.raises(rg.InvalidArgumentError, match="file object"):
            rg.load(io.BytesIO(data[:cut]))
    gen = np.random.default_rng(33)
    for _ in range(200):
        damaged = bytearray(data)
        for position in gen.integers(0, len(data), 2):
            damaged[position] ^= 1 << int(gen.integers(0, 8))
        _load_damaged(bytes(damaged))


def test_missing_entries_byte_order_and_short_storages():
    data = _saved(DAMAGED_OBJECT)
    with zipfile.ZipFile(io.BytesIO(data)) as source:
        entries = {name: source.read(name) for name in source.namelist()}
    for missing in entries:
        if missing.endswith(
            ("version", ".format_version", ".storage_alignment", "serialization_id", "byteorder")
        ):
            continue  # entries torch's reader does without too
        with pytest.raises(rg.InvalidArgumentError, match="file object"):
            rg.load(io.BytesIO(_rezipped({k: v for k, v in entries.items() if k != missing})))
    prefix = next(name for name in entries if name.endswith("data.pkl"))[: -len("data.pkl")]
    big = dict(entries, **{f"{prefix}byteorder": b"big"})
    big_endian = {
        k: (np.frombuffer(v, "<f4").astype(">f4").tobytes() if k == f"{prefix}data/0" else v)
        for k, v in big.items()
    }
    theirs, ours = _both(_rezipped(big_endian))
    _assert_same(ours, theirs)
    storage = f"{prefix}data/0"
    for short in (entries[storage][:-4], entries[storage][:-3], entries[storage] + b"\x00" * 3):
        with pytest.raises(rg.InvalidArgumentError, match="file object"):
            rg.load(io.BytesIO(_rezipped(dict(entries, **{storage: short}))))


def test_crafted_pickles_are_refused_quickly():
    data = _saved({"w": torch.ones(2)})
    with zipfile.ZipFile(io.BytesIO(data)) as source:
        entries = {name: source.read(name) for name in source.namelist()}
    pickled = next(name for name in entries if name.endswith("data.pkl"))
    crafted = [
        b"\x80\x02X\xff\xff\xff\x7f" + b"a" * 10 + b".",  # a string of 2 GB, 10 bytes given
        b"\x80\x04\x8e" + (2**62).to_bytes(8, "little") + b".",  # bytes of 2**62
        b"\x80\x05\x95" + (2**62).to_bytes(8, "little") + b"N.",  # a frame of 2**62
        b"\x80\x02c__builtin__\nbytearray\nJ\xff\xff\xff\x7f\x85R.",  # bytearray(2**31 - 1)
        b"\x80\x02ctorch\ndevice\nX\x03\x00\x00\x00foo\x85R.",
        b"\x80\x02ctorch\nSize\nX\x03\x00\x00\x00foo\x85R.",
        b"\x80\x02ctorch._utils\n_rebuild_parameter\nK\x01\x88N\x87R.",
        b"\x80\x02ctorch._utils\n_rebuild_tensor_v2\n)R.",
        b"\x80\x02h\x05.",
        b"",
    ]
    for pickle_bytes in crafted:
        with pytest.raises(rg.InvalidArgumentError, match="file object"):
            rg.load(io.BytesIO(_rezipped(dict(entries, **{pickled: pickle_bytes}))))
    deep = [
        b"\x80\x02" + b"(" * 50000 + b"l" * 50000 + b".",  # lists in lists: torch's too
        b"\x80\x02" + b"]" * 50000 + b"a" * 49999 + b".",
    ]
    for pickle_bytes in deep:
        _load_damaged(_rezipped(dict(entries, **{pickled: pickle_bytes})))


# ----------------------------------------------------------------------------------------------
# the readers built on load


def test_module_load_state_dict_from_a_torch_file_and_the_hub_cache(tmp_path):
    torch.manual_seed(34)
    theirs = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.LayerNorm(4))
    x = np.random.default_rng(34).standard_normal((2, 3)).astype(np.float32)
    expected = theirs(torch.tensor(x)).detach().numpy()
    for form, zip_format in FORMATS.items():
        path = tmp_path / f"{form}.pth"
        torch.save(theirs.state_dict(), path, _use_new_zipfile_serialization=zip_format)
        for source in (path, str(path)):
            ours = rg.nn.Sequential(rg.nn.Linear(3, 4), rg.nn.LayerNorm(4))
            ours.load_state_dict(source)
            np.testing.assert_allclose(ours(rg.tensor(x)).detach().numpy(), expected, rtol=1e-5)
    before = rg.hub.get_dir()
    rg.hub.set_dir(str(tmp_path / "hub"))
    try:
        (tmp_path / "hub" / "checkpoints").mkdir(parents=True)
        torch.save(theirs.state_dict(), tmp_path / "hub" / "checkpoints" / "net-0a1b.pth")
        ours = rg.nn.Sequential(rg.nn.Linear(3, 4), rg.nn.LayerNorm(4))
        ours.load_state_dict(rg.hub.load_state_dict_from_url("https://x.org/a/net-0a1b.pth"))
        np.testing.assert_allclose(ours(rg.tensor(x)).detach().numpy(), expected, rtol=1e-5)
    finally:
        rg.hub.set_dir(before)


class TensorKind(torch.Tensor):
    """A user's tensor subclass (torch rebuilds it under weights_only=False)."""


@pytest.mark.parametrize("form", list(FORMATS))
def test_a_tensor_subclass_is_refused_by_what_it_is(form):
    data = _saved({"t": torch.ones(2).as_subclass(TensorKind)}, FORMATS[form])
    assert type(torch.load(io.BytesIO(data), weights_only=False)["t"]) is TensorKind
    with pytest.raises(rg.InvalidArgumentError, match=r"TensorKind.*not allowed"):
        rg.load(io.BytesIO(data))
    with pytest.raises(rg.InvalidArgumentError, match=r"TensorKind \(a subclass of torch.Tensor"):
        rg.load(io.BytesIO(data), weights_only=False)
