"""The harness of the ``tests/test_real_ports_*.py`` files: PyTorch programs written here in the
style of public projects (minGPT, makemore, cleanrl, the PyTorch tutorials...), reaching the
torch surface those projects reach, each kept once as text and run twice: as written, in a
namespace where ``torch``, ``nn``, ``F`` and ``optim`` are PyTorch's, and ported, where they are
retrograd's and :func:`port` has changed only the lines that must change (the gradient lines:
``backward()`` returns the gradients, ``step`` and ``clip_grad_norm_`` take them; ``import``
lines naming ``torch.``). Both start from torch's weights and the same random draws;
:func:`assert_records_agree` compares what each run recorded (losses, parameters after every
step, samples).
"""

from __future__ import annotations

import math
import random
import types
from typing import Any

import numpy as np
import pytest
import torch

import retrograd as rg


@pytest.fixture(autouse=True)
def seeded_draws() -> None:
    """Every generator a port draws from seeded alike before each test (torch's, NumPy's,
    Python's, retrograd's): autouse in the files that import it."""
    torch.manual_seed(0)
    np.random.seed(0)
    random.seed(0)
    rg.seed(0)


def port(source: str, replacements: list[tuple[str, str]]) -> str:
    """``source`` with each ``(torch text, retrograd text)`` replaced wherever it occurs (it
    must occur)."""
    for old, new in replacements:
        assert old in source, f"{old!r} does not occur"
        source = source.replace(old, new)
    return source


def run_source(source: str, lib: Any, **shared: Any) -> dict[str, Any]:
    """Execute ``source`` with ``torch`` bound to ``lib`` (torch or retrograd); return its
    globals."""
    names = {
        "torch": lib,
        "nn": lib.nn,
        "optim": lib.optim,
        "F": lib.nn.functional,
        "math": math,
        "np": np,
        **shared,
    }
    exec(compile(source, f"<{getattr(lib, '__name__', 'lib')} port>", "exec"), names)
    if lib.nn is not torch.nn:  # (the ported run: retrograd, or a wrapper of it)
        _assert_torch_is_not_bound(names, shared)
    return names


def _is_torchs(qualified: Any) -> bool:
    return isinstance(qualified, str) and (qualified == "torch" or qualified.startswith("torch."))


def _torch_name(value: Any) -> str | None:
    """What ``value`` is of PyTorch's own, or ``None``: one of its modules (``torch.nn``), a
    class or function it defines (``Tensor``, ``autograd.Function``, ``optim.Optimizer``,
    ``weight_norm``, ``torch.ones``), or an object of one of its classes (a tensor, a
    dtype)."""
    if isinstance(value, types.ModuleType):
        return value.__name__ if _is_torchs(value.__name__) else None
    if isinstance(value, type | types.FunctionType | types.BuiltinFunctionType):
        module = getattr(value, "__module__", None)
        if _is_torchs(module):
            return f"{module}.{getattr(value, '__qualname__', value.__name__)}"
        return None
    module = type(value).__module__
    return f"a {module}.{type(value).__qualname__}" if _is_torchs(module) else None


def _assert_torch_is_not_bound(names: dict[str, Any], shared: dict[str, Any]) -> None:
    """A port whose ``import torch`` (or ``from torch import nn``) was left as written rebinds
    the name to PyTorch's own module and then runs on torch, agreeing with torch trivially
    (a port of round 54 did, until this check): no global of the ported program may be one
    of torch's modules, classes, functions or objects (``from torch import Tensor`` left in
    a port makes its annotations and ``isinstance`` checks torch's; ``from torch.autograd
    import Function`` runs its custom op on torch), but what the test itself handed in."""
    bound = {
        name: qualified
        for name, value in names.items()
        if name not in shared and (qualified := _torch_name(value)) is not None
    }
    assert not bound, (
        f"the ported program binds PyTorch's own names {bound}: an import line was not ported"
    )


def ported_imports(source: str) -> str:
    """``source`` with its ``from torch. ... import`` and ``from torch import`` lines naming
    retrograd (the lines a port changes: ``from torch import Tensor`` left as written binds
    torch's class, which :func:`_assert_torch_is_not_bound` refuses)."""
    return source.replace("from torch.", "from retrograd.").replace(
        "from torch import ", "from retrograd import "
    )


def both(source: str, replacements: list[tuple[str, str]], **shared: Any):
    """The namespaces of ``source`` run under torch and of its port run under retrograd."""
    theirs = run_source(source, torch, **shared)
    ported = ported_imports(port(source, replacements))
    ours = run_source(ported, rg, **shared)
    return theirs, ours


def state_of(model: Any) -> dict[str, np.ndarray]:
    """A module's state as NumPy copies (torch's tensors or retrograd's arrays)."""
    return {
        k: np.array(v.detach().numpy() if hasattr(v, "detach") else v, copy=True)
        for k, v in model.state_dict().items()
    }


def params_of(*modules: Any) -> dict[str, np.ndarray]:
    return {
        f"{i}.{name}": np.array(p.detach().numpy(), copy=True)
        for i, module in enumerate(modules)
        for name, p in module.named_parameters()
    }


def assert_records_agree(
    ours: list, theirs: list, rtol: float, atol: float, skip=(), noise: dict | None = None
) -> None:
    """Each record equal within the tolerances: numbers and arrays, dicts of arrays (names
    in ``skip`` left out: parameters whose true gradient is zero, so Adam's first steps follow
    the rounding noise; ``noise`` maps a name to the slice of its first axis left out for the
    same reason, such as the key third of a fused qkv bias), lists of those, and anything else
    (strings, token lists) exactly."""
    noise = noise or {}
    assert len(ours) == len(theirs), (len(ours), len(theirs))
    for i, (mine, reference) in enumerate(zip(ours, theirs)):
        where = f"record {i}"
        if isinstance(reference, dict):
            assert list(mine) == list(reference), where
            for name, value in reference.items():
                if name in skip:
                    continue
                left = np.asarray(mine[name], dtype=np.float64)
                right = np.asarray(value, dtype=np.float64)
                if name in noise:
                    kept = np.ones(right.shape[0], dtype=bool)
                    kept[noise[name]] = False
                    left, right = left[kept], right[kept]
                np.testing.assert_allclose(
                    left,
                    right,
                    rtol=rtol,
                    atol=atol,
                    err_msg=f"{where}: {name}",
                )
        elif isinstance(reference, str) or (
            isinstance(reference, list) and reference and isinstance(reference[0], str | list)
        ):
            assert mine == reference, where
        else:
            np.testing.assert_allclose(
                np.asarray(mine, dtype=np.float64),
                np.asarray(reference, dtype=np.float64),
                rtol=rtol,
                atol=atol,
                err_msg=where,
            )


class Draws:
    """One seeded stream of draws for both libraries: the stand-ins for ``torch.randn`` and
    ``torch.randint`` (which take torch's ``generator=``, ignored: the stream is the
    generator), so both runs draw the same numbers."""

    def __init__(self, lib: Any, seed: int):
        self.lib = lib
        self.rng = np.random.default_rng(seed)

    def randn(self, *size: Any, generator: Any = None, dtype: Any = None, **_: Any) -> Any:
        shape = size[0] if len(size) == 1 and not isinstance(size[0], int) else size
        lib = self.lib
        return lib.tensor(self.rng.standard_normal(tuple(shape)), dtype=dtype or lib.float32)

    def randint(self, low: int, high: int, size: Any, generator: Any = None, **_: Any) -> Any:
        return self.lib.tensor(self.rng.integers(low, high, tuple(size)), dtype=self.lib.int64)


class WithDraws:
    """``lib`` with ``randn``/``randint`` taken from :class:`Draws` (everything else is
    ``lib``'s own)."""

    def __init__(self, lib: Any, seed: int):
        draws = Draws(lib, seed)
        self._lib = lib
        self.randn, self.randint = draws.randn, draws.randint

    def __getattr__(self, name: str) -> Any:
        return getattr(self._lib, name)


def runs_with_draws(source, steps, capsys, seed, **names):
    """The records and logs of ``source`` under torch and of its port under retrograd, each
    run with ``torch.rand``/``randn``/``randn_like``/``randint`` drawing from one stream seeded
    by ``seed`` (the same in both runs), NumPy's and Python's global streams seeded by it."""
    records, logs = [], []
    for lib in (torch, rg):
        record = []
        torch.manual_seed(0)
        np.random.seed(seed)
        random.seed(seed)
        text = source if lib is torch else ported_imports(port(source, steps))
        shared = {  # make_<name>(lib) gives each run its own <name>
            k.removeprefix("make_"): v(lib) if k.startswith("make_") else v
            for k, v in names.items()
        }
        with SharedDraws(lib, seed):
            run_source(text, lib, record=record, **shared)
        records.append(record)
        logs.append(capsys.readouterr().out)
    return records, logs


class SharedDraws:
    """``torch.rand``, ``randn``, ``randn_like`` and ``randint`` of a library drawing from one
    seeded stream (floating draws in the library's default dtype, as torch's)."""

    NAMES = ("rand", "randn", "randn_like", "randint")

    def __init__(self, lib, seed):
        self.lib, self.rng = lib, np.random.default_rng(seed)

    def __enter__(self):
        lib, rng = self.lib, self.rng

        def shape_of(size):
            return tuple(size[0] if len(size) == 1 and not isinstance(size[0], int) else size)

        def rand(*size, dtype=None, device=None, requires_grad=False, **_):
            drawn = rng.uniform(size=shape_of(size))
            drawn = lib.tensor(drawn, dtype=dtype or lib.get_default_dtype(), device=device)
            return drawn.requires_grad_(requires_grad)

        def randn(*size, dtype=None, device=None, requires_grad=False, **_):
            drawn = rng.standard_normal(shape_of(size))
            drawn = lib.tensor(drawn, dtype=dtype or lib.get_default_dtype(), device=device)
            return drawn.requires_grad_(requires_grad)

        def randn_like(t, **_):
            return randn(*t.shape, dtype=t.dtype)

        def randint(*args, low=None, high=None, size=None, **_):
            given = [v for v in (low, high) if v is not None]  # torch.randint(low=, high=, size=)
            args = (*given, *args) if size is None else (*given, *args, size)
            low, high, size = (0, *args) if len(args) == 2 else args
            return lib.tensor(rng.integers(low, high, tuple(size)), dtype=lib.int64)

        self.saved = [getattr(lib, name) for name in self.NAMES]
        for name, f in zip(self.NAMES, (rand, randn, randn_like, randint)):
            setattr(lib, name, f)
        return self

    def __exit__(self, *exc):
        for name, f in zip(self.NAMES, self.saved):
            setattr(self.lib, name, f)
        return False


def initializer():
    """``initialize(module)``: torch's run keeps the weights of each module it is given, in
    order; the port loads them into its modules in the same order."""
    states, loaded = [], []

    def initialize(module):
        if isinstance(module, torch.nn.Module):
            states.append({k: v.detach().numpy().copy() for k, v in module.state_dict().items()})
        else:
            module.load_state_dict(states[len(loaded)])
            loaded.append(module)

    return initialize


class SharedFills:
    """``Tensor.uniform_(a, b)`` and ``Tensor.normal_(mean, std)`` of a library filling the
    tensor (a view too, in place) from one seeded stream, in the tensor's dtype: the same
    numbers in both runs (SmoothGrad's noise, a PGD's random start). A parameter's
    initialisation still draws as the library draws (the initializer overwrites it with
    torch's weights)."""

    def __init__(self, lib, seed):
        self.lib, self.rng = lib, np.random.default_rng(seed)

    def __enter__(self):
        lib, rng = self.lib, self.rng
        self.saved = {name: getattr(lib.Tensor, name) for name in ("uniform_", "normal_")}

        def filler(name, draw):
            def fill(tensor, first=None, second=None, *, generator=None, **named):
                # torch's keywords: normal_(mean=, std=), uniform_(from=, to=)
                first = named.pop("mean", named.pop("from", first))
                second = named.pop("std", named.pop("to", second))
                assert not named, f"{name}: unexpected {sorted(named)}"
                if isinstance(tensor, lib.nn.Parameter):
                    given = [v for v in (first, second) if v is not None]
                    return self.saved[name](tensor, *given, generator=generator)
                drawn = draw(tuple(tensor.shape), first, second)
                with lib.no_grad():
                    tensor.copy_(lib.tensor(drawn, dtype=tensor.dtype))
                return tensor

            return fill

        lib.Tensor.uniform_ = filler(
            "uniform_", lambda shape, a, b: rng.uniform(a or 0.0, 1.0 if b is None else b, shape)
        )
        lib.Tensor.normal_ = filler(
            "normal_", lambda shape, m, s: rng.normal(m or 0.0, 1.0 if s is None else s, shape)
        )
        return self

    def __exit__(self, *exc):
        for name, method in self.saved.items():
            setattr(self.lib.Tensor, name, method)
        return False


@pytest.fixture
def global_streams_restored():
    """Python's, NumPy's, torch's and retrograd's global random streams as they were before the
    test (a program ported as written seeds them: ``np.random.seed(123)``,
    ``torch.manual_seed(1)``); use it with ``pytest.mark.usefixtures``."""
    states = random.getstate(), np.random.get_state(), torch.get_rng_state(), rg.get_rng_state()
    yield
    random.setstate(states[0])
    np.random.set_state(states[1])
    torch.set_rng_state(states[2])
    rg.set_rng_state(states[3])
