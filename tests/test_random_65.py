"""Random programs of mixed precision against PyTorch, round 65.

Three families, each drawn from a seed and run on torch and on retrograd from the same inputs:

* *autocast programs* (on the torch inner backend: NumPy holds no bfloat16 nor float16): a
  chain of ops on float32 parameters and inputs inside a region opened as scripts write it --
  ``torch.autocast("cpu", dtype=...)``, ``torch.amp.autocast("cpu")``,
  ``torch.cpu.amp.autocast``, ``torch.autocast("cuda")`` (turned off with torch's warning on a
  machine without a GPU), nested ``enabled=False`` regions and regions of the other dtype --
  with ops of torch's CPU lists (``linear``, ``matmul``, ``addmm``, ``bmm``, ``conv1d`` in the
  region's dtype; ``mse_loss``, ``prod``, ``cross_entropy`` in float32), unlisted ops
  (activations, ``softmax``, ``layer_norm``, ``pow``, reductions) in their inputs' dtypes, the
  promoting ops (``add``/``cat``/``stack`` of mixed dtypes), a ``custom_fwd``/``custom_bwd``
  Function, ``.float()``/``.to(dtype)`` casts, and a float64 leaf autocast leaves alone. Every
  intermediate's dtype and shape, and its value within the precision of the dtypes it went
  through, are compared; then the gradients of every leaf (their dtypes are the leaves').
  Where torch raises (a product of mixed dtypes inside an ``enabled=False`` region), retrograd
  must raise an error of its hierarchy that is torch's class.
* *GradScaler programs* (both inner backends, float32): ``GradScaler("cpu")`` with random
  factors, or ``enabled=False``, over a few iterations of a linear model whose loss is
  sometimes inf or NaN; optional ``unscale_`` and ``clip_grad_norm_``, ``update()`` or
  ``update(new_scale)``, a ``state_dict`` reloaded into a fresh scaler mid-run, and the misuses
  torch refuses (``unscale_`` twice, ``step`` twice, ``update`` with no step). Scale, state
  dict, the skipped steps and the parameters are compared after each iteration.
* *bfloat16/float16 modules* (torch inner backend): a small MLP made ``.bfloat16()``,
  ``.half()`` or ``.to(dtype)`` and trained a few SGD steps in that dtype; parameters, their
  dtypes and the losses are compared within that dtype's precision.

retrograd's gradients are a value (API.md section 3): ``backward()`` returns them and the
scaler's ``unscale_``/``step`` take them, as ``retrograd.amp`` documents.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import backends
import retrograd as rg

torch = pytest.importorskip("torch")

on_torch_only = pytest.mark.skipif(
    not backends.on_torch(), reason="NumPy inner backend has no bfloat16 nor float16"
)

#: the precision one step in each dtype keeps; a value is compared within ``TOL[dtype]`` times
#: its magnitude (plus one), summed over the lower-precision steps it went through: the two
#: libraries round the same products of the same inputs, but may sum them in other orders
TOL = {"bfloat16": 1.6e-2, "float16": 2e-3, "float32": 2e-5, "float64": 1e-12}


class Mismatch(AssertionError):  # noqa: N818 (read as "a mismatch with torch")
    """retrograd and torch disagree."""


def _dtype(t) -> str:
    return str(t.dtype).rpartition(".")[2]


def _np(t) -> np.ndarray:
    return (
        t.detach().float().numpy().astype(np.float64)
        if _dtype(t)
        in (
            "bfloat16",
            "float16",
        )
        else t.detach().numpy().astype(np.float64)
    )


def _close(log, what, mine, theirs, tol):
    a, b = _np(mine), _np(theirs)
    if a.shape != b.shape:
        raise Mismatch(f"{log}\n{what}: shape {a.shape} vs torch's {b.shape}")
    scale = float(np.max(np.abs(b), initial=0.0)) + 1.0
    finite = np.isfinite(b)
    if not np.array_equal(finite, np.isfinite(a)) or not np.array_equal(
        a[~finite], b[~finite], equal_nan=True
    ):
        raise Mismatch(f"{log}\n{what}: non-finite entries differ\n{a}\n{b}")
    err = float(np.max(np.abs(a[finite] - b[finite]), initial=0.0))
    if err > tol * scale:
        raise Mismatch(f"{log}\n{what}: off by {err:.3g} > {tol * scale:.3g}\n{a}\n{b}")


# -- family 1: autocast programs -------------------------------------------------------------
def _region(lib, kind: str, dtype: str):
    low = getattr(lib, dtype)
    if kind == "autocast":
        return lib.autocast("cpu", dtype=low)
    if kind == "amp":
        return lib.amp.autocast("cpu", dtype=low)
    if kind == "cpu.amp":
        return lib.cpu.amp.autocast(dtype=low)
    if kind == "default":  # the CPU's default dtype, bfloat16
        return lib.autocast("cpu")
    if kind == "cuda":  # no GPU: torch turns it off with a warning
        return lib.autocast("cuda")
    if kind == "cuda.amp":
        return lib.cuda.amp.autocast()
    raise AssertionError(kind)


def _custom_function(lib, cast_inputs):
    """A custom Function ``x * w`` decorated as torch's docs show; backward notes the autocast
    state it ran in."""

    class Scale(lib.autograd.Function):
        @staticmethod
        @lib.amp.custom_fwd(device_type="cpu", cast_inputs=cast_inputs)
        def forward(ctx, x, w):
            ctx.save_for_backward(x, w)
            return x * w

        @staticmethod
        @lib.amp.custom_bwd(device_type="cpu")
        def backward(ctx, grad):
            x, w = ctx.saved_tensors
            return grad * w, (grad * x).sum(0)

    return Scale


def _promotable(lib, h):
    """``h``, or ``h.float()`` where torch's autocast would fail to promote it: a float16 or
    bfloat16 value in a region of the other dtype makes torch's ``cat``/``stack`` (its
    "promote" list) raise an internal error ("Unexpected floating ScalarType in
    at::autocast::prioritize"), which retrograd does not copy -- it promotes as outside a
    region."""
    if (
        lib.is_autocast_enabled("cpu")
        and _dtype(h) in ("float16", "bfloat16")
        and h.dtype != lib.get_autocast_dtype("cpu")
    ):
        return h.float()
    return h


def _draw_step(rng, width: int, low: str, depth: int):
    """``(description, new width, step(lib, env, h) -> h)``: one op on the running value
    ``h`` of shape (N, width)."""
    kinds = [
        "linear", "matmul", "addmm", "bmm", "conv1d", "relu", "gelu", "tanh", "softmax",
        "log_softmax", "layer_norm", "pow", "add_f32", "add_f64", "cat", "stack", "prod_rows",
        "float", "to_low", "mul_scalar", "exp_clamped", "sum_keep", "off_matmul", "nested",
        "custom",
    ]  # fmt: skip
    if depth > 0:  # inside a nested region: no deeper nesting
        kinds.remove("nested")
    kind = str(rng.choice(kinds))
    out = int(rng.integers(2, 6))
    pid = f"p{rng.integers(1 << 30)}"

    def param(env, lib, shape):
        """A float32 leaf that requires grad, the same values on both sides."""
        key = (pid, shape)
        if key not in env["arrays"]:
            env["arrays"][key] = (rng.standard_normal(shape) * 0.5).astype(np.float32)
        if key not in env["leaves"]:
            env["leaves"][key] = lib.tensor(env["arrays"][key], requires_grad=True)
        return env["leaves"][key]

    if kind == "linear":
        bias = bool(rng.random() < 0.7)

        def step(lib, env, h):
            w = param(env, lib, (out, width))
            b = param(env, lib, (out,)) if bias else None
            return lib.nn.functional.linear(h, w, b)

        return f"linear({width}->{out}, bias={bias})", out, step
    if kind == "matmul":
        return f"h @ w({width},{out})", out, lambda lib, env, h: h @ param(env, lib, (width, out))
    if kind == "addmm":
        return (
            f"addmm(b, h, w({width},{out}))",
            out,
            lambda lib, env, h: lib.addmm(
                param(env, lib, (out,)), h, param(env, lib, (width, out))
            ),
        )
    if kind == "bmm":
        return (
            f"bmm(h[None], w[None]) ({width},{out})",
            out,
            lambda lib, env, h: lib.bmm(h.unsqueeze(0), param(env, lib, (1, width, out)))[0],
        )
    if kind == "conv1d":
        k = int(rng.integers(1, min(width, 3) + 1))
        new = width - k + 1
        return (
            f"conv1d(h[:, None], k{k})",
            new,
            lambda lib, env, h: lib.nn.functional.conv1d(
                h.unsqueeze(1), param(env, lib, (1, 1, k)), param(env, lib, (1,))
            ).squeeze(1),
        )
    if kind in ("relu", "gelu", "tanh"):
        return kind, width, lambda lib, env, h: getattr(lib.nn.functional, kind)(h)
    if kind in ("softmax", "log_softmax"):
        return (
            f"{kind}(-1)",
            width,
            lambda lib, env, h: getattr(lib.nn.functional, kind)(h, dim=-1),
        )
    if kind == "layer_norm":
        affine = bool(rng.random() < 0.6)

        def step(lib, env, h):
            w = param(env, lib, (width,)) if affine else None
            b = param(env, lib, (width,)) if affine else None
            return lib.nn.functional.layer_norm(h, (width,), w, b)

        return f"layer_norm(affine={affine})", width, step
    if kind == "pow":
        return "h.pow(2)", width, lambda lib, env, h: h.pow(2)
    if kind == "add_f32":
        return "h + p(f32)", width, lambda lib, env, h: h + param(env, lib, (width,))
    if kind == "add_f64":
        key = f"{pid}-f64"

        def step(lib, env, h):
            if key not in env["arrays"]:
                env["arrays"][key] = rng.standard_normal(width)
            if key not in env["leaves"]:
                env["leaves"][key] = lib.tensor(
                    env["arrays"][key], dtype=lib.float64, requires_grad=True
                )
            return h + env["leaves"][key]

        return "h + p(f64)", width, step
    if kind == "cat":
        return (
            "cat([h, h.float()], 1)",
            2 * width,
            lambda lib, env, h: lib.cat([_promotable(lib, h), h.float()], 1),
        )
    if kind == "stack":
        return (
            "stack([h, p(f32)]).sum(0)",
            width,
            lambda lib, env, h: lib.stack(
                [_promotable(lib, h), param(env, lib, (h.shape[0], width))]
            ).sum(0),
        )
    if kind == "prod_rows":
        return (
            "h.tanh().prod(1, keepdim=True)",
            1,
            lambda lib, env, h: h.tanh().prod(1, keepdim=True),
        )
    if kind == "float":
        return "h.float()", width, lambda lib, env, h: h.float()
    if kind == "to_low":
        return f"h.to({low})", width, lambda lib, env, h: h.to(getattr(lib, low))
    if kind == "mul_scalar":
        c = float(rng.choice([0.5, -2.0, 3.0]))
        return f"h * {c}", width, lambda lib, env, h: h * c
    if kind == "exp_clamped":
        return "h.clamp(-3, 3).exp()", width, lambda lib, env, h: h.clamp(-3, 3).exp()
    if kind == "sum_keep":
        return "h.sum(1, keepdim=True) + h", width, lambda lib, env, h: h.sum(1, keepdim=True) + h
    if kind == "off_matmul":
        # a product inside enabled=False: the running value may be in the lower dtype, so
        # torch may refuse the mixed dtypes (retrograd must too)
        cast = bool(rng.random() < 0.5)

        def step(lib, env, h):
            with lib.autocast("cpu", enabled=False):
                return (h.float() if cast else h) @ param(env, lib, (width, out))

        return f"enabled=False: {'h.float()' if cast else 'h'} @ w", out, step
    if kind == "custom":
        cast_inputs = str(rng.choice(["none", "float32", "low"]))

        def step(lib, env, h):
            target = {"none": None, "float32": lib.float32, "low": getattr(lib, low)}
            fn = _custom_function(lib, target[cast_inputs])
            return fn.apply(h, param(env, lib, (width,)))

        return f"custom_fwd(cast_inputs={cast_inputs})", width, step
    # nested region of the other lower dtype, or turned off, around one or two steps
    inner = str(rng.choice(["off", "bfloat16", "float16"]))
    inner_steps = []
    w = width
    for _ in range(int(rng.integers(1, 3))):
        d, w, s = _draw_step(rng, w, inner if inner != "off" else low, depth + 1)
        inner_steps.append((d, s))

    def step(lib, env, h):
        region = (
            lib.autocast("cpu", enabled=False)
            if inner == "off"
            else lib.autocast("cpu", dtype=getattr(lib, inner))
        )
        with region:
            for _, s in inner_steps:
                h = env["record"](s(lib, env, h))
        return h

    return f"nested({inner}: {'; '.join(d for d, _ in inner_steps)})", w, step


def _draw_autocast_program(seed: int):
    rng = np.random.default_rng(seed)
    kind = str(rng.choice(["autocast", "amp", "cpu.amp", "default", "cuda", "cuda.amp"]))
    low = (
        str(rng.choice(["bfloat16", "float16"]))
        if kind in ("autocast", "amp", "cpu.amp")
        else ("bfloat16")
    )
    n, width = int(rng.integers(1, 4)), int(rng.integers(2, 6))
    x = rng.standard_normal((n, width)).astype(np.float32)
    steps = []
    for _ in range(int(rng.integers(2, 7))):
        d, width, s = _draw_step(rng, width, low, 0)
        steps.append((d, s))
    loss = str(rng.choice(["sum", "mse_loss", "cross_entropy", "mean_float"]))
    labels = rng.integers(0, width, n)
    target = rng.standard_normal((n, width)).astype(np.float32)
    return kind, low, x, steps, loss, labels, target


def _run_autocast(lib, program, arrays):
    kind, low, x, steps, loss_kind, labels, target = program
    env = {"arrays": arrays, "leaves": {}, "trace": []}

    def record(h):
        env["trace"].append(h)
        return h

    env["record"] = record
    xt = lib.tensor(x, requires_grad=True)
    env["leaves"]["x"] = xt
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        region = _region(lib, kind, low)
    cuda_warned = any("CUDA is not available" in str(w.message) for w in caught)
    try:
        with region:
            h = xt
            for _, s in steps:
                h = record(s(lib, env, h))
            F = lib.nn.functional  # noqa: N806
            if loss_kind == "sum":
                loss = h.sum()
            elif loss_kind == "mse_loss":
                loss = F.mse_loss(h, lib.tensor(target))
            elif loss_kind == "cross_entropy":
                loss = F.cross_entropy(h, lib.tensor(labels))
            else:
                loss = h.float().mean()
            record(loss)
    except Exception as error:  # (compared with torch's)
        return {"error": error, "trace": env["trace"], "cuda_warned": cuda_warned}
    leaves = list(env["leaves"].items())
    grads = lib.autograd.grad(loss.float(), [leaf for _, leaf in leaves], allow_unused=True)
    return {
        "trace": env["trace"],
        "grads": dict(zip([k for k, _ in leaves], grads, strict=True)),
        "leaves": dict(leaves),
        "cuda_warned": cuda_warned,
    }


def _tol_of(trace) -> list[float]:
    """The tolerance of each traced value: the sum of its steps' precisions so far."""
    tols, acc = [], 0.0
    for t in trace:
        acc += TOL.get(_dtype(t), 0.0)
        tols.append(acc + 1e-6)
    return tols


def check_autocast_program(seed: int) -> None:
    program = _draw_autocast_program(seed)
    kind, low, _, steps, loss_kind, _, _ = program
    log = f"seed {seed}: region {kind} ({low}), steps {[d for d, _ in steps]}, loss {loss_kind}"
    arrays: dict = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = _run_autocast(torch, program, arrays)
        mine = _run_autocast(rg, program, arrays)
    if mine["cuda_warned"] != theirs["cuda_warned"]:
        raise Mismatch(f"{log}\nCUDA warning: {mine['cuda_warned']} vs {theirs['cuda_warned']}")
    if "error" in theirs:
        error = mine.get("error")
        if error is None:
            raise Mismatch(f"{log}\ntorch raised {theirs['error']!r}, retrograd did not")
        if not isinstance(error, rg.RetrogradError) or not isinstance(error, type(theirs["error"])):
            raise Mismatch(f"{log}\n{error!r}, torch's {theirs['error']!r}") from error
    elif "error" in mine:
        raise Mismatch(f"{log}\nretrograd raised {mine['error']!r}") from mine["error"]
    if len(mine["trace"]) != len(theirs["trace"]):
        raise Mismatch(f"{log}\n{len(mine['trace'])} steps ran, torch {len(theirs['trace'])}")
    for i, (a, b, tol) in enumerate(
        zip(mine["trace"], theirs["trace"], _tol_of(theirs["trace"]), strict=True)
    ):
        if _dtype(a) != _dtype(b) or tuple(a.shape) != tuple(b.shape):
            raise Mismatch(
                f"{log}\nstep {i}: {_dtype(a)}{tuple(a.shape)} vs torch's "
                f"{_dtype(b)}{tuple(b.shape)}"
            )
        _close(log, f"step {i}", a, b, tol)
    if "error" in theirs:
        return
    tol = 4 * _tol_of(theirs["trace"])[-1]
    for key, b in theirs["grads"].items():
        a = mine["grads"][key]
        if (a is None) != (b is None):
            raise Mismatch(f"{log}\ngrad of {key}: {a!r} vs torch's {b!r}")
        if b is None:
            continue
        if _dtype(a) != _dtype(b) or _dtype(b) != _dtype(theirs["leaves"][key]):
            raise Mismatch(f"{log}\ngrad of {key}: {_dtype(a)} vs torch's {_dtype(b)}")
        _close(log, f"grad of {key}", a, b, tol)


AUTOCAST_SEEDS = range(40)


@on_torch_only
@pytest.mark.parametrize("seed", AUTOCAST_SEEDS)
def test_random_autocast_program(seed):
    check_autocast_program(seed)


# -- family 2: GradScaler programs -----------------------------------------------------------
def _draw_scaler_program(seed: int):
    rng = np.random.default_rng(seed)
    config = {
        # (2**80: a "huge" loss's scaled gradients overflow float32, its own do not)
        "init_scale": float(2.0 ** rng.choice([*range(-2, 18), 80])),
        "growth_factor": float(rng.choice([2.0, 1.5, 4.0])),
        "backoff_factor": float(rng.choice([0.5, 0.25, 0.75])),
        "growth_interval": int(rng.integers(1, 4)),
        "enabled": bool(rng.random() < 0.85),
    }
    x = rng.standard_normal((3, 4)).astype(np.float32)
    w = (rng.standard_normal((2, 4)) * 0.5).astype(np.float32)
    iterations = []
    for _ in range(int(rng.integers(2, 7))):
        iterations.append(
            {
                "poison": str(rng.choice(["none", "none", "none", "inf", "nan", "huge"])),
                "unscale": bool(rng.random() < 0.4),
                "clip": bool(rng.random() < 0.5),
                "new_scale": float(2.0 ** rng.integers(0, 8)) if rng.random() < 0.15 else None,
                "reload": bool(rng.random() < 0.2),
                "misuse": str(
                    rng.choice(["none"] * 6 + ["unscale_twice", "step_twice", "update_first"])
                ),
            }
        )
    return config, x, w, iterations


class _Run:
    """One library's run of a scaler program; torch's and retrograd's differ only where the
    gradients are (a value here, ``.grad`` there)."""

    def __init__(self, lib, config, x, w):
        self.lib = lib
        self.weight = lib.tensor(w, requires_grad=True)
        self.x = lib.tensor(x)
        self.opt = lib.optim.SGD([self.weight], lr=0.1)
        self.scaler = lib.amp.GradScaler("cpu", **config)
        self.config = config

    def backward(self, poison):
        lib = self.lib
        # "huge": finite gradients whose squares (clip_grad_norm_'s) stay in float32's range
        # -- NumPy's norm sums squares in float64, torch's in float32 (backend/protocol.py)
        factor = {"none": 1.0, "inf": float("inf"), "nan": float("nan"), "huge": 1e15}[poison]
        loss = ((self.x @ self.weight.T).tanh() * factor).sum()
        scaled = self.scaler.scale(loss)
        if lib is torch:
            self.opt.zero_grad()
            scaled.backward()
            return None
        return scaled.backward()

    def unscale(self, grads):
        if self.lib is torch:
            self.scaler.unscale_(self.opt)
        else:
            self.scaler.unscale_(self.opt, grads)

    def clip(self, grads):
        if self.lib is torch:
            return float(torch.nn.utils.clip_grad_norm_([self.weight], 1.0))
        return float(rg.nn.utils.clip_grad_norm_(grads, [self.weight], 1.0))

    def step(self, grads):
        if self.lib is torch:
            return self.scaler.step(self.opt)
        return self.scaler.step(self.opt, grads)

    def observe(self):
        state = {
            k: float(v.item()) if hasattr(v, "item") else v
            for k, v in self.scaler.state_dict().items()
        }
        return self.scaler.get_scale(), state, self.weight.detach().numpy().copy()


def _attempt(log, name, calls):
    """Run ``name`` on both (torch's first); both must succeed or both raise, the same way."""
    outcomes = []
    for call in calls:
        try:
            outcomes.append((call(), None))
        except Exception as error:  # (compared with torch's)
            outcomes.append((None, error))
    (theirs, their_error), (mine, error) = outcomes
    if (their_error is None) != (error is None):
        raise Mismatch(f"{log}\n{name}: torch raised {their_error!r}, retrograd {error!r}")
    if error is not None and not (
        isinstance(error, rg.RetrogradError) and isinstance(error, type(their_error))
    ):
        raise Mismatch(f"{log}\n{name}: {error!r}, torch's {their_error!r}")
    return theirs, mine, error is not None


def check_scaler_program(seed: int) -> None:
    config, x, w, iterations = _draw_scaler_program(seed)
    log = f"seed {seed}: GradScaler({config})"
    runs = [_Run(torch, config, x, w), _Run(rg, config, x, w)]
    for i, it in enumerate(iterations):
        log += f"\niteration {i}: {it}"
        if it["misuse"] == "update_first":
            _attempt(log, "update() first", [r.scaler.update for r in runs])
        grads = [r.backward(it["poison"]) for r in runs]
        if it["unscale"] or it["misuse"] == "unscale_twice":
            for _ in range(2 if it["misuse"] == "unscale_twice" else 1):
                _attempt(
                    log, "unscale_", [lambda r=r, g=g: r.unscale(g) for r, g in zip(runs, grads)]
                )
        # clipping after unscale_, as torch's docs do (the scaled gradients of a huge loss
        # would overflow the float32 sum of squares, which NumPy's norm sums in float64)
        if it["clip"] and (it["unscale"] or not config["enabled"]):
            theirs, mine, _ = _attempt(
                log, "clip", [lambda r=r, g=g: r.clip(g) for r, g in zip(runs, grads)]
            )
            if not (np.isnan(theirs) and np.isnan(mine)) and not np.isclose(
                mine, theirs, rtol=1e-5
            ):
                raise Mismatch(f"{log}\nclip norm {mine} vs torch's {theirs}")
        for _ in range(2 if it["misuse"] == "step_twice" else 1):
            theirs, mine, failed = _attempt(
                log, "step", [lambda r=r, g=g: r.step(g) for r, g in zip(runs, grads)]
            )
            if not failed and (theirs is None) != (mine is None):
                raise Mismatch(f"{log}\nstep returned {mine!r}, torch's {theirs!r}")
        if it["new_scale"] is not None:
            for r in runs:
                r.scaler.update(it["new_scale"])
        else:
            _attempt(log, "update", [r.scaler.update for r in runs])
        if it["reload"]:
            for r in runs:
                saved = r.scaler.state_dict()
                r.scaler = r.lib.amp.GradScaler("cpu", enabled=config["enabled"])
                r.scaler.load_state_dict(saved)
        (their_scale, their_state, their_w), (scale, state, weight) = (r.observe() for r in runs)
        if (scale, state) != (their_scale, their_state):
            raise Mismatch(f"{log}\nscale {scale} {state} vs torch's {their_scale} {their_state}")
        _close(log, "weight", rg.tensor(weight), torch.tensor(their_w), 1e-6)


SCALER_SEEDS = range(60)


@pytest.mark.parametrize("seed", SCALER_SEEDS)
def test_random_grad_scaler_program(seed):
    check_scaler_program(seed)


# -- family 3: modules in bfloat16 / float16 -------------------------------------------------
def _draw_module_program(seed: int):
    rng = np.random.default_rng(seed)
    dtype = str(rng.choice(["bfloat16", "float16"]))
    how = str(rng.choice(["method", "to", "to_kw"]))
    sizes = [int(s) for s in rng.integers(2, 6, 3)]
    act = str(rng.choice(["ReLU", "Tanh", "GELU", "Sigmoid"]))
    momentum = float(rng.choice([0.0, 0.9]))
    x = rng.standard_normal((4, sizes[0])).astype(np.float32)
    y = rng.standard_normal((4, sizes[2])).astype(np.float32)
    weights = [
        (rng.standard_normal((sizes[i + 1], sizes[i])) * 0.5).astype(np.float32) for i in range(2)
    ]
    biases = [(rng.standard_normal(sizes[i + 1]) * 0.1).astype(np.float32) for i in range(2)]
    return dtype, how, sizes, act, momentum, x, y, weights, biases, int(rng.integers(1, 4))


def _train_module(lib, program):
    dtype, how, sizes, act, momentum, x, y, weights, biases, steps = program
    nn = lib.nn
    model = nn.Sequential(
        nn.Linear(sizes[0], sizes[1]), getattr(nn, act)(), nn.Linear(sizes[1], sizes[2])
    )
    with lib.no_grad():
        for i, layer in enumerate((model[0], model[2])):
            layer.weight.copy_(lib.tensor(weights[i]))
            layer.bias.copy_(lib.tensor(biases[i]))
    low = getattr(lib, dtype)
    if how == "method":
        model = model.bfloat16() if dtype == "bfloat16" else model.half()
    elif how == "to":
        model = model.to(low)
    else:
        model = model.to(dtype=low)
    opt = lib.optim.SGD(model.parameters(), lr=0.05, momentum=momentum)
    xs, ys = lib.tensor(x).to(low), lib.tensor(y).to(low)
    losses = []
    for _ in range(steps):
        loss = lib.nn.functional.mse_loss(model(xs), ys)
        if lib is torch:
            opt.zero_grad()
            loss.backward()
            opt.step()
        else:
            opt.step(loss.backward())
        losses.append(loss)
    return model, losses


def check_module_program(seed: int) -> None:
    program = _draw_module_program(seed)
    log = f"seed {seed}: {program[:5]}, {program[-1]} steps"
    their_model, their_losses = _train_module(torch, program)
    model, losses = _train_module(rg, program)
    # one rounding of the dtype: the update is torch eager's op for op; what differs is the
    # last bit of a backward (gelu, sigmoid) in the lower dtype, compounding over the steps
    tol = TOL[program[0]] / 4 * program[-1]  # (per step)
    for i, (a, b) in enumerate(zip(losses, their_losses, strict=True)):
        if _dtype(a) != _dtype(b):
            raise Mismatch(f"{log}\nloss {i}: {_dtype(a)} vs torch's {_dtype(b)}")
        _close(log, f"loss {i}", a, b, tol)
    theirs = dict(their_model.named_parameters())
    for name, p in model.named_parameters():
        if _dtype(p) != _dtype(theirs[name]):
            raise Mismatch(f"{log}\n{name}: {_dtype(p)} vs torch's {_dtype(theirs[name])}")
        _close(log, name, p, theirs[name], tol)


MODULE_SEEDS = range(20)


@on_torch_only
@pytest.mark.parametrize("seed", MODULE_SEEDS)
def test_random_half_precision_module(seed):
    check_module_program(seed)
