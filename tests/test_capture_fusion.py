"""Fusion in captured steps: chains of elementwise NumPy calls run as one compiled kernel.

The default fusion (``fuse=True``) must compute bit for bit what the calls it replaces computed:
random programs of the exact ops (arithmetic, square root, comparisons, selection, ReLU,
clamps, casts), on values that include signed zeros, infinities and NaN, with broadcasting,
are run call by call with NumPy and as fused kernels, and compared on their bits. The
``fuse="fast"`` mode also fuses transcendental functions, whose compiled versions are the C
library's: those are compared within the stated tolerance. Whole training steps (an MLP, the
nanoGPT step) are then compared with their eager twins.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

import retrograd as rg
from retrograd import nn, optim
from retrograd.backend.numpy_backend import NumpyBackend
from retrograd.capture import fusion, kernels
from retrograd.capture.program import Segment
from retrograd.nn import functional as F  # noqa: N812

pytestmark = pytest.mark.numpy_only("fusion compiles kernels for the NumPy backend only")

BACKEND = NumpyBackend()
SHAPES = [(3, 4, 5), (4, 5), (5,), (1, 5), (4, 1), ()]
SPECIAL = [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-38, -3.5, 2.0]
EXACT_BINARY = ["add", "sub", "mul", "div", "relu_backward"]
# sin and cos are fused where the compiled versions give NumPy's bits (kernels.matches_numpy)
EXACT_UNARY = ["neg", "abs", "square", "sqrt", "recip", "relu", "sin", "cos"]
EXACT_SCALAR = ["add_scalar", "sub_scalar", "mul_scalar", "div_scalar", "rsub_scalar"]
FAST_UNARY = ["exp", "log", "sin", "cos", "tanh", "sigmoid", "gelu", "expm1", "log1p"]


def _values(rng, shape, dtype):
    values = rng.standard_normal(shape).astype(dtype) * 3
    if values.ndim:
        flat = values.reshape(-1)
        picks = rng.random(flat.size) < 0.2
        flat[picks] = rng.choice(SPECIAL, int(picks.sum()))
    return values


def random_program(rng, dtype, ops_unary, n_calls=14):
    """A random list of recorded calls (as the recorder encodes them) on a (3, 4, 5) output
    shape, with the slots' metadata; returns ``(calls, meta, inputs, live)``."""
    meta: list = []
    inputs = []
    for shape in [(3, 4, 5), *SHAPES[1:]]:
        value = _values(rng, shape, dtype)
        inputs.append(value)
        meta.append((type(value), value.shape, value.dtype, value.strides))
    mask = rng.random((4, 5)) < 0.5
    inputs.append(mask)
    meta.append((np.ndarray, mask.shape, mask.dtype, mask.strides))
    values = list(inputs)
    calls = []
    floats = [i for i, v in enumerate(values) if v.dtype == dtype]

    def emit(name, args, out_value):
        slot = len(values)
        values.append(out_value)
        meta.append((type(out_value), out_value.shape, out_value.dtype, out_value.strides))
        calls.append(("call", getattr(BACKEND, name), name, args, {}, slot))
        return slot

    with np.errstate(all="ignore"):
        for _ in range(n_calls):
            kind = rng.integers(0, 5)
            a = int(rng.choice(floats))
            if kind == 0:
                name = str(rng.choice(EXACT_BINARY))
                b = int(rng.choice(floats))
                out = getattr(BACKEND, name)(values[a], values[b])
                args = [("s", a), ("s", b)]
            elif kind == 1:
                name = str(rng.choice(ops_unary))
                out = getattr(BACKEND, name)(values[a])
                args = [("s", a)]
            elif kind == 2:
                name = str(rng.choice(EXACT_SCALAR))
                c = float(rng.choice([0.5, -3.0, 1e-3, 7]))
                out = getattr(BACKEND, name)(values[a], c)
                args = [("s", a), ("c", c)]
            elif kind == 3:
                name = str(rng.choice(["mask_fill", "clamp"]))
                if name == "mask_fill":
                    out = BACKEND.mask_fill(values[a], mask, -1.5)
                    args = [("s", a), ("s", len(inputs) - 1), ("c", -1.5)]
                else:
                    out = BACKEND.clamp(values[a], -0.5, 2.0)
                    args = [("s", a), ("c", -0.5), ("c", 2.0)]
            else:
                name = str(rng.choice(["greater_elem", "lower_equal_elem"]))
                flags = getattr(BACKEND, name)(values[a], 0.25)
                flag_slot = emit(name, [("s", a), ("c", 0.25)], flags)
                b = int(rng.choice(floats))
                out = BACKEND.mask_where(values[a], values[flag_slot], values[b])
                args = [("s", a), ("s", flag_slot), ("s", b)]
                name = "mask_where"
            if not isinstance(out, np.ndarray):
                continue
            slot = emit(name, args, out)
            if out.dtype == dtype:
                floats.append(slot)
    live = set(range(len(inputs), len(values))[-4:])
    return calls, meta, inputs, live


def run(calls, inputs, live):
    ins = list(range(len(inputs)))
    outs = sorted(live)
    last = {}
    for position, call in enumerate(calls):
        for slot in fusion.slots_of(call[3], call[4]):
            last[slot] = position
    return Segment(calls, ins, outs, {s: p for s, p in last.items() if s not in live}, 0).run(
        *inputs
    )


def same_bits(a, b):
    a, b = np.asarray(a), np.asarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


@pytest.fixture
def fuse_small(monkeypatch):
    """Fuse groups of any size (the default leaves small groups on small arrays alone)."""
    monkeypatch.setattr(fusion, "MIN_CALLS", 2)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("seed", range(12))
def test_exact_fusion_is_bit_identical_to_the_calls(fuse_small, dtype, seed):
    rng = np.random.default_rng(seed)
    calls, meta, inputs, live = random_program(rng, dtype, EXACT_UNARY)
    fused, count = fusion.fuse_calls(calls, meta, live, exact=True)
    assert count >= 1 and len(fused) < len(calls)
    with np.errstate(all="ignore"):
        expected = run(calls, inputs, live)
        got = run(fused, inputs, live)
    for e, g in zip(expected, got):
        assert same_bits(e, g), (e, g)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("seed", range(6))
def test_fast_fusion_agrees_within_the_stated_tolerance(fuse_small, dtype, seed):
    rng = np.random.default_rng(100 + seed)
    calls, meta, inputs, live = random_program(rng, dtype, FAST_UNARY, n_calls=8)
    fused, count = fusion.fuse_calls(calls, meta, live, exact=False)
    assert count >= 1
    with np.errstate(all="ignore"):
        expected = run(calls, inputs, live)
        got = run(fused, inputs, live)
    # per transcendental call: within 4 ulp of NumPy's (the C library's exp, log, sin, cos,
    # tanh differ by at most 3; docs/capture.md); a random chain compounds them
    tolerance = 1e-4 if dtype == np.float32 else 1e-11
    for e, g in zip(expected, got):
        np.testing.assert_allclose(g, e, rtol=tolerance, atol=tolerance, equal_nan=True)


def test_transcendentals_are_left_alone_by_exact_fusion(fuse_small):
    rng = np.random.default_rng(0)
    calls, meta, _, live = random_program(rng, np.float32, ["exp", "log"], n_calls=20)
    fused, _ = fusion.fuse_calls(calls, meta, live, exact=True)
    kept = [call[2] for call in fused]
    assert kept.count("exp") + kept.count("log") == sum(c[2] in ("exp", "log") for c in calls)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("ufunc", ["sin", "cos"])
def test_sine_and_cosine_are_numpys_where_numpy_has_fma(ufunc, dtype):
    # NumPy's float32 sin and cos are its own FMA algorithm where the CPU has FMA3 (the C
    # library's otherwise, which the port is not); float64 is the C library's everywhere
    features = np._core._multiarray_umath.__cpu_features__
    expected = dtype == "float64" or bool(features.get("FMA3") and features.get("AVX2"))
    assert kernels.matches_numpy(ufunc, dtype) is expected


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_fused_sine_of_huge_arguments_takes_numpys_fallback(fuse_small, dtype):
    # beyond the float32 reduction's range NumPy calls the C library: the kernel's vectorized
    # loop sees the guard and runs again with the exact element functions
    rng = np.random.default_rng(7)
    x = (rng.standard_normal((4, 5)) * 3).astype(dtype)
    x[0, :3] = [2e5, -1e7, np.inf]
    info = (np.ndarray, (4, 5), np.dtype(dtype), None)
    meta = [info] * 5
    calls = [
        ("call", BACKEND.mul_scalar, "mul_scalar", [("s", 0), ("c", 3.0)], {}, 1),
        ("call", BACKEND.sin, "sin", [("s", 1)], {}, 2),
        ("call", BACKEND.cos, "cos", [("s", 1)], {}, 3),
        ("call", BACKEND.add, "add", [("s", 2), ("s", 3)], {}, 4),
    ]
    fused, count = fusion.fuse_calls(calls, meta, {4}, exact=True)
    assert count == 1 and [call[2] for call in fused] == ["fused"]
    with np.errstate(all="ignore"):
        assert same_bits(run(fused, [x], {4})[0], run(calls, [x], {4})[0])


def test_values_passed_between_kernels_live_in_the_arena(fuse_small):
    # u (4, 5) is made by one kernel and read only by another (of shape (3, 4, 5)): it lives
    # in a row of the arena's stack, never as an array, and the results keep their bits
    rng = np.random.default_rng(3)
    x, big = _values(rng, (4, 5), np.float64), _values(rng, (3, 4, 5), np.float64)
    small = (np.ndarray, (4, 5), np.dtype(np.float64), None)
    large = (np.ndarray, (3, 4, 5), np.dtype(np.float64), None)
    meta = [small, large, small, small, large, large]
    calls = [
        ("call", BACKEND.mul, "mul", [("s", 0), ("s", 0)], {}, 2),
        ("call", BACKEND.add_scalar, "add_scalar", [("s", 2), ("c", 1.0)], {}, 3),
        ("call", BACKEND.mul, "mul", [("s", 1), ("s", 3)], {}, 4),
        ("call", BACKEND.mul, "mul", [("s", 4), ("s", 4)], {}, 5),
    ]
    fused, count = fusion.fuse_calls(calls, meta, {5}, exact=True)
    assert count == 2 and [call[5] for call in fused] == [None, 5]
    stacks = [arg[1] for call in fused for arg in call[3] if arg[0] == "c"]
    assert any(isinstance(v, np.ndarray) and v.shape == (1, 4, 5) for v in stacks)
    with np.errstate(all="ignore"):
        expected = run(calls, [x, big], {5})
        for _ in range(2):  # the arena is reused from replay to replay
            assert same_bits(run(fused, [x, big], {5})[0], expected[0])


def test_an_input_written_in_place_later_seals_the_group(fuse_small):
    # v2 = a * b; v3 = slice_accumulate(a, g, ...) (into a, in place); v4 = v2 + v3; v5 = v4 * v4:
    # the product must be computed before a is overwritten, so the sum may not join its kernel
    a, b, g = np.arange(6.0).reshape(2, 3), np.ones((2, 3)), np.full((1, 3), 10.0)
    slices = (slice(0, 1), slice(None))
    info = (np.ndarray, (2, 3), np.dtype(np.float64), None)
    meta = [info, info, (np.ndarray, (1, 3), np.dtype(np.float64), None), info, info, info, info]
    calls = [
        ("call", BACKEND.mul, "mul", [("s", 0), ("s", 1)], {}, 3),
        (
            "call",
            BACKEND.slice_accumulate,
            "slice_accumulate",
            [("s", 0), ("s", 2), ("c", slices)],
            {},
            4,
        ),
        ("call", BACKEND.add, "add", [("s", 3), ("s", 4)], {}, 5),
        ("call", BACKEND.mul, "mul", [("s", 5), ("s", 5)], {}, 6),
    ]
    fused, _ = fusion.fuse_calls(calls, meta, {6}, exact=True)
    after = a.copy()
    after[slices] += g
    expected = (a * b + after) ** 2
    got = run(fused, [a.copy(), b, g], {6})
    assert np.array_equal(got[0], expected)
    assert [call[2] for call in fused] == ["mul", "slice_accumulate", "fused"]


def test_kernels_are_shared_by_structure():
    body = [("t0", "x0 * x1", "float32"), ("t1", "t0 + k0", "float32")]
    first = kernels.build_kernel(
        2, [((False, False), "float32")] * 2, ["float32"], body, [("t1", "float32")]
    )
    second = kernels.build_kernel(
        2, [((False, False), "float32")] * 2, ["float32"], body, [("t1", "float32")]
    )
    assert first.function is second.function
    x = np.ones((2, 3), np.float32)
    assert np.array_equal(first.function(x, x, np.float32(2.0), 2, 3), np.full((2, 3), 3.0))


def _chain_kernel(links):
    """A kernel of ``links`` links ``y = y * w + x`` over (6, 7) float32 operands that writes
    every link's value out, as a chain whose values backward reads does."""
    body, outputs, y = [], [], "x0"
    for link in range(links):
        body += [(f"t{2 * link}", f"{y} * x1", "float32")]
        body += [(f"t{2 * link + 1}", f"t{2 * link} + x2", "float32")]
        y = f"t{2 * link + 1}"
        outputs.append((y, "float32"))
    full = ((False, False), "float32")
    return kernels.build_kernel(2, [full] * 3, [], body, outputs)


def test_kernels_over_one_shape_run_one_vectorized_loop():
    # operands of the output's shape: one loop over the elements, which LLVM vectorizes even
    # with many outputs (each a pointer it must check against the others at run time)
    kernel = _chain_kernel(12)
    assert "for i in range(n):" in kernel.source
    rng = np.random.default_rng(0)
    x, w, b = (rng.standard_normal((6, 7)).astype(np.float32) for _ in range(3))
    outs = kernel.function(x, w, b, 6, 7)
    namespace: dict = {}  # compiled afresh (a kernel loaded from the disk cache has no IR)
    text = kernels._HEADER + kernels._DECORATOR.format(cache=False) + kernel.source
    exec(compile(text, "<vectorization check>", "exec"), namespace)
    namespace["run"](x, w, b, 6, 7)
    compiled = namespace["kernel"]
    ir = compiled.inspect_llvm(compiled.signatures[0])
    assert re.search(r"<\d+ x float>", ir), "the fused loop was not vectorized"
    y = x
    for out in outs:
        y = y * w + b
        assert np.array_equal(out, y)


def test_a_one_loop_kernel_reads_strided_and_broadcast_views():
    kernel = _chain_kernel(3)
    rng = np.random.default_rng(1)
    x = rng.standard_normal((7, 6)).astype(np.float32).T  # not C-contiguous
    w = np.broadcast_to(np.float32(0.5), (6, 7))  # strides 0
    b = rng.standard_normal((6, 14)).astype(np.float32)[:, ::2]
    y = x
    for out in kernel.function(x, w, b, 6, 7):
        y = y * w + b
        assert np.array_equal(out, y)


# -- whole steps ------------------------------------------------------------------------------
def mlp_twins():
    def make():
        rg.seed(0)
        model = nn.Sequential(
            nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 128), nn.GELU(), nn.Linear(128, 10)
        )
        return model, optim.Adam(model, lr=1e-3)

    return make(), make(), make()


def mlp_step_for(model, opt):
    def train_step(x, y):
        logits = model(x)
        loss = F.cross_entropy(logits, y) + (logits * 0.5).relu().square().mean() * 0.01
        grads = loss.backward()
        optim.clip_grad_norm(grads, model, 1.0)
        opt.step(grads)
        return loss

    return train_step


def mlp_data(n=4):
    rng = np.random.default_rng(3)
    return [
        (
            rg.tensor(rng.standard_normal((96, 64)).astype(np.float32)),
            rg.tensor(rng.integers(0, 10, 96)),
        )
        for _ in range(n)
    ]


def test_a_fused_mlp_step_equals_the_eager_step_bit_for_bit():
    (eager, eager_opt), (fused, fused_opt), _ = mlp_twins()
    data = mlp_data()
    expected = [mlp_step_for(eager, eager_opt)(*batch).numpy() for batch in data]
    step = rg.capture(mlp_step_for(fused, fused_opt), *data[0], state=[fused_opt])
    assert step.num_fused >= 1  # the extra term's backward chain, ending in ReLU's backward
    assert "fused_" in step.code
    got = [step.result.numpy()] + [step(*batch).numpy() for batch in data[1:]]
    assert all(np.array_equal(e, g) for e, g in zip(expected, got))
    for (name, p), (_, q) in zip(eager.named_parameters(), fused.named_parameters()):
        assert np.array_equal(p.numpy(), q.numpy()), name


def test_a_fast_fused_mlp_step_agrees_with_the_eager_step():
    (eager, eager_opt), (fast, fast_opt), _ = mlp_twins()
    data = mlp_data()
    expected = [mlp_step_for(eager, eager_opt)(*batch).numpy() for batch in data]
    step = rg.capture(mlp_step_for(fast, fast_opt), *data[0], state=[fast_opt], fuse="fast")
    got = [step.result.numpy()] + [step(*batch).numpy() for batch in data[1:]]
    np.testing.assert_allclose(got, expected, rtol=1e-5)
    for (name, p), (_, q) in zip(eager.named_parameters(), fast.named_parameters()):
        np.testing.assert_allclose(q.numpy(), p.numpy(), rtol=1e-4, atol=1e-6, err_msg=name)


def test_a_one_loop_kernel_reads_a_row_of_another_shape_once():
    # a 0-d value in the arena, read once by a (4, 5) kernel that loops over another stack
    body = [("t0", "x0 * x1", "float32"), ("t1", "t0 + x2", "float32")]
    full = ((False, False), "float32")
    inputs = [(*full, (1, 0)), ((), "float32", (0, 1)), full]
    kernel = kernels.build_kernel(2, inputs, [], body, [("t1", "float32")], ("float32",) * 2)
    assert "for i in range(n):" in kernel.source
    scalars = np.array([2.0, 3.0], np.float32)
    rows = np.arange(40, dtype=np.float32).reshape(2, 4, 5)
    b = np.ones((4, 5), np.float32)
    out = kernel.function(b, scalars, rows, np.array([1, 0]), 4, 5)
    assert np.array_equal(out, rows[1] * scalars[0] + b)


class _Chain(nn.Module):
    """bench_capture.py's chain, shortened: ``y = sin(y * w) + x``, then a sum."""

    def __init__(self, links):
        super().__init__()
        rng = np.random.default_rng(5)
        self.links = links
        for name in ("x", "w"):
            values = rg.tensor(rng.uniform(-1, 1, (8, 8)).astype(np.float32))
            self.register_parameter(name, rg.nn.Parameter(values))

    def forward(self):
        y = self.x
        for _ in range(self.links):
            y = (y * self.w).sin() + self.x
        return y.sum()


def test_the_seed_gradient_is_a_constant_of_the_fused_program():
    # backward's ones_like(loss) expanded to the summed shape is the same at every replay: made
    # once at capture and read by the fused kernels, read-only
    def twin():
        model = _Chain(6)
        opt = optim.SGD(model, lr=0.1)

        def train_step():
            loss = model()
            opt.step(loss.backward())
            return loss

        return model, opt, train_step

    eager, _, eager_step = twin()
    fused, fused_opt, fused_step = twin()
    expected = [eager_step().numpy() for _ in range(4)]
    step = rg.capture(fused_step, state=[fused_opt])
    assert step.num_fused >= 2
    assert "ones_like" not in step.code and "expand" not in step.code
    got = [step.result.numpy()] + [step().numpy() for _ in range(3)]
    assert all(np.array_equal(e, g) for e, g in zip(expected, got))
    for name in ("x", "w"):
        assert np.array_equal(getattr(eager, name).numpy(), getattr(fused, name).numpy()), name


def test_a_seed_read_by_a_call_that_stays_is_not_folded(fuse_small):
    meta = [(np.ndarray, (4, 5), np.dtype(np.float32), (20, 4))] * 2 + [None] * 6
    meta[2] = (np.ndarray, (4, 5), np.dtype(np.float32), (20, 4))
    meta[3] = (np.ndarray, (4, 5), np.dtype(np.float32), (0, 0))
    for slot in (4, 5, 6):
        meta[slot] = (np.ndarray, (4, 5), np.dtype(np.float32), (20, 4))
    calls = [
        ("call", BACKEND.ones_like, "ones_like", [("s", 0)], {}, 2),
        ("call", BACKEND.expand, "expand", [("s", 2), ("c", (4, 5))], {}, 3),
        ("call", BACKEND.mul, "mul", [("s", 3), ("s", 1)], {}, 4),
        ("call", BACKEND.add, "add", [("s", 4), ("s", 1)], {}, 5),
        ("call", BACKEND.mul, "mul", [("s", 5), ("s", 5)], {}, 6),
        ("call", BACKEND.sum, "sum", [("s", 3)], {}, 7),
    ]
    fused, count = fusion.fuse_calls(calls, meta, {6, 7}, exact=True)
    assert count == 1
    assert [call[2] for call in fused] == ["ones_like", "expand", "fused", "sum"]
    fused, count = fusion.fuse_calls(calls[:5], meta, {6}, exact=True)
    assert [call[2] for call in fused] == ["fused"]
    (constant,) = [a[1] for a in fused[0][3] if a[0] == "c" and isinstance(a[1], np.ndarray)]
    assert not constant.flags.writeable and np.array_equal(constant, np.ones((4, 5)))


def test_fusion_can_be_switched_off_and_bad_modes_are_refused():
    _, _, (model, opt) = mlp_twins()
    data = mlp_data(1)
    step = rg.capture(mlp_step_for(model, opt), *data[0], state=[opt], fuse=False)
    assert step.num_fused == 0 and "fused_" not in step.code
    with pytest.raises(rg.CaptureError, match="fuse must be"):
        rg.capture(mlp_step_for(model, opt), *data[0], state=[opt], fuse="yes")
