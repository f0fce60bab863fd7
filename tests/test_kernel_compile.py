"""Numba kernels compiled in a background process on a cold cache while NumPy twins of the same
bits run (``backend/kernel_compile.py``, the Winograd twins in ``backend/winograd_numpy.py``).

- Each Winograd twin gives its kernel's bits: the convolutions (forward, input and weight
  gradients, transposed), tile 2 and 4, on odd shapes (partial tiles, padding 0 to 2, batch
  blocks), with exact and signed zeros in the data, once with every transform on the twins and
  once with the kernels; and with the two alternating call by call (a switch at any point, as
  when the background compile ends between a forward and its recomputation).
- The mechanism, in a fresh process on a fresh (cold) ``NUMBA_CACHE_DIR``, with a small kernel
  of its own (seconds, not the Winograd kernels' half minute): the first calls run the twin
  and return its values while the background process compiles; once it answers, the kernel
  (loaded from the cache it filled) runs; a second fresh process finds the cache warm and never
  runs the twin; ``RETROGRAD_KERNEL_COMPILE=wait`` compiles in the process; a direct call of
  the dispatcher compiles as Numba does; a cache folder that cannot be written leaves the
  kernel compiled in the process (no twin forever).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import retrograd as rg
from retrograd.backend import kernel_compile, numpy_conv, winograd_numpy

pytestmark = pytest.mark.numpy_only("the NumPy backend's compiled kernels")

NUMPY = rg.NumpyBackend()
TWINNED = [getattr(winograd_numpy, name) for name in winograd_numpy.__all__]
SRC = str(Path(kernel_compile.__file__).resolve().parents[2])

# (x shape [N, C, H, W], out channels, padding)
SHAPES = [((2, 3, 7, 6), 4, 1), ((1, 5, 9, 10), 3, 0), ((2, 2, 5, 5), 3, 2), ((3, 4, 13, 11), 6, 1)]


def data(rng, shape):
    """float32 normals with exact zeros and negative zeros among them."""
    x = rng.standard_normal(shape).astype(np.float32)
    x[rng.random(shape) < 0.1] = 0.0
    x[rng.random(shape) < 0.1] = -0.0
    return x


def convolutions(shape, c_out, p, seed=0):
    """The forward, both gradients and the transposed convolution, as raw bits."""
    rng = np.random.default_rng(seed)
    x, w, b = data(rng, shape), data(rng, (c_out, shape[1], 3, 3)), data(rng, (c_out,))
    params = ((1, 1), (p, p), (1, 1), 1)
    out = NUMPY.conv(x, w, b, *params)
    g = data(rng, out.shape)
    dx, dw, _ = NUMPY.conv_backward(g, x, w, *params, (True, True, False))
    t = NUMPY.conv_transpose(g, w, x[0, :, 0, 0], (1, 1), (p, p), (0, 0), (1, 1), 1)
    return [np.ascontiguousarray(a).view(np.uint32) for a in (out, dx, dw, t)]


@pytest.fixture
def winograd(monkeypatch):
    """Winograd at every size, small batch blocks, weight gradients by Winograd."""

    def force(tile):
        monkeypatch.setattr(numpy_conv, "WINOGRAD_MIN_CELLS", 1)
        monkeypatch.setattr(numpy_conv, "WINOGRAD_MIN_CHANNELS", 1)
        monkeypatch.setattr(numpy_conv, "WINOGRAD_TILE", tile)
        monkeypatch.setattr(numpy_conv, "WINOGRAD_BLOCK_BYTES", 4096)
        monkeypatch.setattr(numpy_conv, "WINOGRAD_WEIGHT_GRADIENT", True)

    return force


def route(monkeypatch, choose):
    """Every twinned kernel's call goes to ``choose(kernel)``'s pick: the kernel (compiled in
    the foreground) or the twin."""
    calls = {"kernel": 0, "twin": 0}

    def call(self, *args):
        which = choose(self)
        calls[which] += 1
        return (self.dispatcher if which == "kernel" else self.twin)(*args)

    monkeypatch.setattr(kernel_compile.Twinned, "__call__", call)
    return calls


@pytest.mark.parametrize("tile", [2, 4])
def test_winograd_twins_give_the_kernels_bits(tile, winograd, monkeypatch):
    winograd(tile)
    for shape, c_out, p in SHAPES:
        calls = route(monkeypatch, lambda kernel: "kernel")
        kernels = convolutions(shape, c_out, p)
        assert calls["twin"] == 0 and calls["kernel"] > 0
        calls = route(monkeypatch, lambda kernel: "twin")
        twins = convolutions(shape, c_out, p)
        assert calls["kernel"] == 0 and calls["twin"] > 0
        for name, a, b in zip(("forward", "dx", "dw", "transposed"), kernels, twins):
            assert np.array_equal(a, b), f"{name} of {shape}: the twin's bits differ"
    monkeypatch.undo()


@pytest.mark.parametrize("tile", [2, 4])
def test_a_switch_at_any_call_keeps_the_bits(tile, winograd, monkeypatch):
    """Kernel and twin alternating call by call give the kernel's bits (the values cannot
    depend on when the background compile ends)."""
    winograd(tile)
    shape, c_out, p = SHAPES[-1]
    route(monkeypatch, lambda kernel: "kernel")
    kernels = convolutions(shape, c_out, p, seed=1)
    turn = [0]

    def alternate(kernel):
        turn[0] += 1
        return "kernel" if turn[0] % 2 else "twin"

    calls = route(monkeypatch, alternate)
    mixed = convolutions(shape, c_out, p, seed=1)
    assert calls["kernel"] > 0 and calls["twin"] > 0
    for a, b in zip(kernels, mixed):
        assert np.array_equal(a, b)


def test_every_winograd_kernel_has_a_twin():
    from retrograd.backend import compiled_winograd

    kernels = {
        name
        for name in compiled_winograd.__all__
        if hasattr(getattr(compiled_winograd, name), "py_func")
    }
    assert kernels == set(winograd_numpy.__all__)
    assert all(k.dispatcher is getattr(compiled_winograd, k.name) for k in TWINNED)


# -- the mechanism, in fresh processes -------------------------------------------------------------
KERNEL_MODULE = """
import numba
import numpy as np
from retrograd.backend.kernel_compile import Twinned

@numba.njit(cache=True)
def _scaled(x, out):
    for i in range(x.shape[0]):
        out[i] = x[i] * np.float32(3) + np.float32(1)

def _twin(x, out):
    out[:] = x * np.float32(3) + np.float32(1)

scaled = Twinned(_scaled, _twin)
"""

PROGRAM = """
import json, sys, time
import numpy as np
import toykernel
from retrograd.backend.kernel_compile import compiler
x = np.linspace(-2, 2, 7, dtype=np.float32)
first, later = np.empty_like(x), np.empty_like(x)
toykernel.scaled(x, first)
twin_first = toykernel.scaled.twin_calls
done = compiler().wait(timeout=120)
toykernel.scaled(x, later)
expected = x * np.float32(3) + np.float32(1)
print(json.dumps({
    "twin_first": twin_first,
    "twin_calls": toykernel.scaled.twin_calls,
    "compiled_here": toykernel._scaled.stats.cache_misses.__len__(),
    "loaded": sum(toykernel._scaled.stats.cache_hits.values()),
    "done": done,
    "sent": len(compiler().sent),
    "same": bool(np.array_equal(first, expected) and np.array_equal(later, expected)),
}))
"""


def fresh_process(folder, cache, program=PROGRAM, **env):
    """``program`` in a fresh interpreter beside ``toykernel.py`` in ``folder``, with
    ``NUMBA_CACHE_DIR=cache`` (``None``: unset) and ``env``; its JSON line."""
    if not (folder / "toykernel.py").exists():
        (folder / "toykernel.py").write_text(textwrap.dedent(KERNEL_MODULE))
    environment = dict(os.environ)
    for name in ("NUMBA_CACHE_DIR", kernel_compile.MODE_VARIABLE):
        environment.pop(name, None)
    if cache is not None:
        environment["NUMBA_CACHE_DIR"] = str(cache)
    extra = [env.pop("EXTRA_PATH")] if "EXTRA_PATH" in env else []
    environment.update(env, PYTHONPATH=os.pathsep.join([*extra, str(folder), SRC]))
    result = subprocess.run(
        [sys.executable, "-c", program],
        env=environment,
        capture_output=True,
        text=True,
        timeout=300,
        cwd=folder,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_cold_cache_runs_the_twin_then_the_kernel_the_background_compiled(tmp_path):
    cache = tmp_path / "cache"
    cold = fresh_process(tmp_path, cache)
    # the first call ran the twin (a cold cache), the background process compiled, and the
    # next call loaded its cache entry: nothing compiled in this process
    assert cold["twin_first"] == 1 and cold["twin_calls"] == 1
    assert cold["done"] and cold["sent"] == 1
    assert cold["compiled_here"] == 0 and cold["loaded"] == 1
    assert cold["same"]
    assert any(cache.rglob("*.nbc"))
    warm = fresh_process(tmp_path, cache)
    # a warm cache: the kernel from the first call, no background process
    assert warm["twin_calls"] == 0 and warm["sent"] == 0
    assert warm["compiled_here"] == 0 and warm["loaded"] == 1 and warm["same"]


#: ``PROGRAM`` twice in one fresh process (its imports paid once), each time on a kernel module of
#: its own (a cold cache for each): with ``RETROGRAD_KERNEL_COMPILE=wait``, then without it on
#: ``toydirect`` (a copy of ``toykernel``) calling the dispatcher itself
_DIRECT = PROGRAM.replace("toykernel", "toydirect").replace(
    "toydirect.scaled(x, first)", "toydirect._scaled(x, first)"
)
IN_PROCESS_COMPILES = f"""
import contextlib, io, json, os
results = dict()
for name, program, mode in (("wait", {PROGRAM!r}, "wait"), ("direct", {_DIRECT!r}, None)):
    if mode:
        os.environ[{kernel_compile.MODE_VARIABLE!r}] = mode
    else:
        os.environ.pop({kernel_compile.MODE_VARIABLE!r}, None)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(program, dict())
    results[name] = json.loads(printed.getvalue().strip().splitlines()[-1])
print(json.dumps(results))
"""


@pytest.fixture(scope="module")
def in_process_compiles(tmp_path_factory) -> dict:
    folder = tmp_path_factory.mktemp("in-process")
    (folder / "toydirect.py").write_text(textwrap.dedent(KERNEL_MODULE))
    return fresh_process(folder, folder / "cache", program=IN_PROCESS_COMPILES)


def test_wait_mode_compiles_in_the_process(in_process_compiles):
    result = in_process_compiles["wait"]
    assert result["twin_calls"] == 0 and result["sent"] == 0
    assert result["compiled_here"] == 1 and result["same"]


#: For a user who may write anywhere (root: the folder's mode bits do not stop it), Numba's
#: test that a source folder's ``__pycache__`` is writable, made to fail as it does for others
#: (both processes import it: ``sitecustomize`` runs at every interpreter's start)
READ_ONLY_AS_ROOT = """
import os
from numba.core import caching

_ensure = caching.InTreeCacheLocator.ensure_cache_path

def _read_only(self):
    if not os.access(os.path.dirname(self.get_cache_path()), os.W_OK) or os.geteuid() == 0:
        raise PermissionError(13, "read-only install", self.get_cache_path())
    return _ensure(self)

caching.InTreeCacheLocator.ensure_cache_path = _read_only
"""


def test_a_read_only_install_compiles_into_the_user_cache(tmp_path):
    """Kernels in a folder that cannot be written (site-packages of a system install): Numba
    caches them in the user's cache folder instead; the background process fills it, and the
    next process finds them there."""
    package, user_cache, site = tmp_path / "site", tmp_path / "user-cache", tmp_path / "custom"
    package.mkdir()
    site.mkdir()
    (package / "toykernel.py").write_text(textwrap.dedent(KERNEL_MODULE))
    (site / "sitecustomize.py").write_text(READ_ONLY_AS_ROOT)
    package.chmod(0o555)
    env = {"XDG_CACHE_HOME": str(user_cache), "EXTRA_PATH": str(site)}
    try:
        cold = fresh_process(package, None, **env)
        warm = fresh_process(package, None, **env)
    finally:
        package.chmod(0o755)
    assert cold["twin_first"] == 1 and cold["done"] and cold["loaded"] == 1 and cold["same"]
    assert cold["compiled_here"] == 0
    assert not any(package.rglob("*.nb[ci]"))  # Numba wrote nothing beside the source
    assert any(user_cache.rglob("*.nbc"))
    assert warm["twin_calls"] == 0 and warm["compiled_here"] == 0 and warm["loaded"] == 1


def test_a_direct_dispatcher_call_compiles_as_numba_does(in_process_compiles):
    result = in_process_compiles["direct"]
    assert result["twin_first"] == 0 and result["sent"] == 0 and result["compiled_here"] == 1


def test_an_unknown_mode_is_refused(monkeypatch):
    monkeypatch.setenv(kernel_compile.MODE_VARIABLE, "later")
    with pytest.raises(rg.errors.InvalidArgumentError, match="RETROGRAD_KERNEL_COMPILE"):
        kernel_compile.mode()


# -- retrograd warmup ------------------------------------------------------------------------------
def test_the_conv_warmup_calls_every_winograd_kernel(monkeypatch):
    """``retrograd warmup``'s convolutional step compiles (here: loads or compiles in this
    process) every Winograd kernel, both tiles and the flipped weight."""
    from retrograd.app import warmup

    monkeypatch.setenv(kernel_compile.MODE_VARIABLE, "wait")
    called = set()

    def call(self, *args):
        called.add(self.name)
        return self.dispatcher(*args)

    monkeypatch.setattr(kernel_compile.Twinned, "__call__", call)
    warmup.run_workload("conv")
    assert called == set(winograd_numpy.__all__)


def test_a_failing_warmup_says_which_and_why(monkeypatch):
    from retrograd.app import warmup

    monkeypatch.setattr(warmup, "WORKLOADS", ("nonesuch",))
    with pytest.raises(RuntimeError, match=r"(?s)nonesuch warm-up failed.*KeyError"):
        warmup.warmup(jobs=1, echo=lambda *a: None)


def test_signatures_travel_to_the_compiler_intact():
    """The argument types the kernels take (arrays of each layout, read-only ones, integers,
    booleans) reach the background process as the same Numba types; others are refused
    (and then compiled in the process)."""
    import numba

    x = np.zeros((4, 5, 6), np.float32)
    frozen = np.zeros(3, np.float64)
    frozen.setflags(write=False)
    values = [x, x[:, ::2], np.asfortranarray(x), frozen, 3, True, np.float32(2), np.int32(1)]
    signature = tuple(numba.typeof(v) for v in values)
    sent = json.loads(json.dumps(kernel_compile._encode(signature)))
    assert kernel_compile._decode(sent) == signature
    with pytest.raises(ValueError, match="no encoding"):
        kernel_compile._encode((numba.typeof((1, 2)),))


@pytest.mark.parametrize(
    "strategy", [rg.BalancedCheckpointing(), rg.BudgetCheckpointing(4096)], ids=repr
)
def test_a_switch_between_forward_and_recomputation_keeps_the_gradients(
    strategy, winograd, monkeypatch
):
    """The twins for the first forward, the kernels from the backward on (as when the
    background compile ends mid-step, so that a checkpointing strategy recomputes a
    convolution on the kernel the forward ran as a twin): the gradients of
    NoCheckpointing on the kernels, bit for bit."""
    from retrograd import nn
    from retrograd.nn import functional as F  # noqa: N812

    winograd(4)
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 3, 10, 9)).astype(np.float32)
    y = rng.integers(0, 4, 2)

    def gradients(checkpointing, phase):
        backend = rg.Autodiff(rg.NumpyBackend(), checkpointing=checkpointing)
        with rg.use_backend(backend):
            rg.seed(0)
            model = nn.Sequential(
                nn.Conv2d(3, 8, 3, padding=1),
                nn.ReLU(),
                nn.Conv2d(8, 8, 3, padding=1),
                nn.ReLU(),
                nn.Flatten(),
                nn.Linear(8 * 10 * 9, 4),
            )
            loss = F.cross_entropy(model(rg.tensor(x)), rg.tensor(y))
            phase[0] = "kernel"
            grads = loss.backward()
            return [
                np.asarray(p.grad(grads).numpy()).view(np.uint32).copy() for p in model.parameters()
            ]

    calls = route(monkeypatch, lambda kernel: "kernel")
    expected = gradients(rg.NoCheckpointing(), ["kernel"])
    phase = ["twin"]
    calls = route(monkeypatch, lambda kernel: phase[0])
    switched = gradients(strategy, phase)
    assert calls["twin"] > 0 and calls["kernel"] > 0
    for a, b in zip(expected, switched):
        assert np.array_equal(a, b)
