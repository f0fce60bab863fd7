"""Random ``nn.functional`` programs against PyTorch (round 39): the spatial, normalization,
embedding and loss functions on drawn argument grids, each run by retrograd and by torch on the
same NumPy data in float64 (tight tolerance) and float32 (looser).

Families (each one hypothesis test, plus ``programs`` that chains several layers):

- ``conv``: ``conv{1,2,3}d`` and ``conv_transpose{1,2,3}d`` with ints or per-dim tuples of
  stride, padding (also ``'same'``/``'valid'``), dilation, groups, output padding, bias on and
  off, and a non-``zeros`` padding mode applied the way ``nn.Conv*d`` does (``F.pad`` first);
- ``pool``: max/avg/lp/adaptive pools 1d-3d with ``ceil_mode``, ``count_include_pad``,
  ``divisor_override``, ``return_indices`` feeding ``max_unpool``;
- ``resample``: ``interpolate`` in every mode with ``size`` or ``scale_factor``,
  ``align_corners``, ``recompute_scale_factor``, ``antialias``; ``fold``/``unfold``;
  ``pixel_shuffle``/``pixel_unshuffle``; ``F.pad`` modes; ``affine_grid`` into ``grid_sample``;
- ``norm``: batch/instance/group/layer norm, ``local_response_norm`` and ``rms_norm`` in train
  and eval, with and without affine parameters and running statistics (compared after the call);
- ``embedding``: ``embedding`` with ``padding_idx``/``max_norm``/``scale_grad_by_freq`` and
  ``embedding_bag`` in every mode with offsets, ``per_sample_weights``, ``include_last_offset``;
- ``losses``: the classification and regression losses under every reduction with ``weight``,
  ``ignore_index`` and ``label_smoothing``.

Random shapes include size-1 and odd sizes. Outputs and the gradients of every input and
parameter are compared. Draws that torch refuses must be refused by retrograd with an error of
its hierarchy (API.md section 7) that names the op. The inner backend is the suite's
(``RETROGRAD_INNER``). Derandomized: the same draws on every run; ``FUZZ_EXAMPLES`` sets how
many per test (60).

Left out (documented departures): ``output_padding`` of ``max(stride, dilation)`` or more
(accepted, as Burn); an ``int`` ``normalized_shape`` for ``layer_norm``/``rms_norm`` (accepted;
torch's functions want a tuple); gradients of the ``weight``/``pos_weight`` of the binary cross
entropies (given; torch refuses them); uint8 and integer inputs. Torch bugs left out: a
transposed convolution with an output size of 0 (torch's 3-d kernels accept or refuse it by
the batch size and groups), max-pool windows over padding alone, antialiased resizes to an
output width of 1 with a new height (torch copies the first row).
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import retrograd as rg
import retrograd.nn.functional as F  # noqa: N812  (PyTorch's idiom)

torch = pytest.importorskip("torch")
tF = torch.nn.functional  # noqa: N816

TOLERANCE = {
    "float64": {"rtol": 1e-9, "atol": 1e-10},
    "float32": {"rtol": 2e-4, "atol": 2e-4},
}
SETTINGS = settings(
    max_examples=int(os.environ.get("FUZZ_EXAMPLES", "60")),
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


class Mismatch(AssertionError):  # noqa: N818 (read as "a mismatch with torch")
    """retrograd and torch disagree."""


def _leaf(lib, array: np.ndarray, dtype: str, grad: bool):
    if array.dtype.kind == "f":
        array = array.astype(dtype)
    if lib is torch:
        t = torch.tensor(array)
        return t.requires_grad_() if grad else t
    t = rg.tensor(array)
    return t.require_grad() if grad else t


def _numpy(t) -> np.ndarray:
    if isinstance(t, torch.Tensor):
        return t.detach().numpy()
    return t.detach().numpy()


def differential(op: str, program, arrays: dict, grads=(), dtype="float64", state=()):
    """Runs ``program(lib, F, tensors)`` in torch and retrograd; compares raising or not, the
    outputs (a tensor or a tuple), the tensors named in ``state`` after the call (running
    statistics written in place) and the gradients of the leaves named in ``grads`` of a
    weighted sum of the float outputs."""
    tol = TOLERANCE[dtype]
    theirs = {k: _leaf(torch, v, dtype, k in grads) for k, v in arrays.items()}
    try:
        expected = program(torch, tF, theirs)
    except Exception as error:  # torch refuses: retrograd must refuse, with its own error
        ours = {k: _leaf(rg, v, dtype, False) for k, v in arrays.items()}
        try:
            program(rg, F, ours)
        except rg.RetrogradError as mine:
            text = str(mine)
            if not any(name in text for name in op.split("|")):
                raise Mismatch(f"{op}: the message does not name the op: {text!r}") from mine
            if isinstance(error, TypeError) and not isinstance(mine, TypeError):
                raise Mismatch(f"{op}: torch raises TypeError, retrograd {mine!r}") from mine
            return "refused"
        except Exception as mine:
            raise Mismatch(f"{op}: torch raises {error!r}; retrograd {mine!r}") from mine
        raise Mismatch(f"{op}: torch raises {error!r}; retrograd does not") from None
    ours = {k: _leaf(rg, v, dtype, k in grads) for k, v in arrays.items()}
    try:
        got = program(rg, F, ours)
    except Exception as mine:
        raise Mismatch(f"{op}: torch computes, retrograd raises {mine!r}") from mine
    expected_list = list(expected) if isinstance(expected, (tuple, list)) else [expected]
    got_list = list(got) if isinstance(got, (tuple, list)) else [got]
    if len(expected_list) != len(got_list):
        raise Mismatch(f"{op}: {len(got_list)} outputs, torch {len(expected_list)}")
    rng = np.random.default_rng(7)
    seeds = []
    for i, (e, g) in enumerate(zip(expected_list, got_list)):
        _close(op, f"output {i}", _numpy(e), _numpy(g), tol)
        if str(e.dtype).replace("torch.", "") != str(g.dtype).replace("retrograd.", ""):
            raise Mismatch(f"{op}: output {i} dtype {g.dtype}, torch {e.dtype}")
        seeds.append(rng.standard_normal(tuple(e.shape)) if e.is_floating_point() else None)
    for name in state:
        _close(op, f"state {name}", _numpy(theirs[name]), _numpy(ours[name]), tol)
    if not grads:
        return "ok"
    wanted = [(e, g, s) for e, g, s in zip(expected_list, got_list, seeds) if s is not None]
    if not wanted or not any(e.requires_grad for e, _, _ in wanted):
        return "ok"
    loss_t = sum((e * torch.tensor(s.astype(dtype))).sum() for e, _, s in wanted)
    try:
        loss_t.backward()
    except RuntimeError:  # torch's backward of some empty results fails (adaptive pools)
        if any(e.numel() == 0 for e, _, _ in wanted):
            return "ok"
        raise
    loss_r = None
    for _, g, s in wanted:
        term = (g * rg.tensor(s.astype(dtype))).sum()
        loss_r = term if loss_r is None else loss_r + term
    gradients = loss_r.backward()
    for name in grads:
        mine = ours[name].grad(gradients)
        theirs_grad = theirs[name].grad
        if theirs_grad is None:
            if mine is not None and np.any(_numpy(mine) != 0):
                raise Mismatch(f"{op}: gradient of {name} nonzero where torch has none")
            continue
        if mine is None:
            raise Mismatch(f"{op}: no gradient of {name}; torch has one")
        _close(op, f"gradient of {name}", theirs_grad.numpy(), _numpy(mine), tol)
    return "ok"


def _close(op, what, expected: np.ndarray, got: np.ndarray, tol) -> None:
    if expected.shape != got.shape:
        raise Mismatch(f"{op}: {what} shape {got.shape}, torch {expected.shape}")
    if expected.dtype.kind in "iub":
        if not np.array_equal(expected, got):
            raise Mismatch(f"{op}: {what} differs:\n{got}\ntorch:\n{expected}")
        return
    scale = max(1.0, float(np.max(np.abs(expected[np.isfinite(expected)]), initial=0.0)))
    try:
        np.testing.assert_allclose(
            got, expected, rtol=tol["rtol"], atol=tol["atol"] * scale, equal_nan=True
        )
    except AssertionError as e:
        raise Mismatch(f"{op}: {what} differs: {e}") from None


def both_dtypes(op, program, arrays, grads=(), state=()):
    """The draw in float64, then float32 (the outcome must be the same in both)."""
    outcome = differential(op, program, arrays, grads, "float64", state)
    differential(op, program, arrays, grads, "float32", state)
    return outcome


def normal(rng, shape, scale=1.0):
    return rng.standard_normal(shape) * scale


def _int_or_tuple(draw, dim, lo, hi):
    """An int, or a tuple with one value per spatial dim."""
    if draw(st.booleans()):
        return draw(st.integers(lo, hi))
    return tuple(draw(st.integers(lo, hi)) for _ in range(dim))


def _per_dim(value, dim):
    return value if isinstance(value, tuple) else (value,) * dim


# -- convolutions --------------------------------------------------------------------------------
@SETTINGS
@given(data=st.data())
def test_convolutions_match_torch(data):
    draw = data.draw
    dim = draw(st.integers(1, 3))
    transpose = draw(st.booleans())
    groups = draw(st.sampled_from([1, 1, 2, 3]))
    c_in = groups * draw(st.integers(1, 2)) + (1 if draw(st.integers(0, 11)) == 0 else 0)
    c_out = groups * draw(st.integers(1, 2))
    top = 7 if dim < 3 else 4
    sizes = tuple(draw(st.integers(1, top)) for _ in range(dim))
    batched = draw(st.integers(0, 4)) > 0
    shape = ((draw(st.integers(1, 2)),) if batched else ()) + (c_in, *sizes)
    kernel = tuple(draw(st.integers(1, 3)) for _ in range(dim))
    stride = _int_or_tuple(draw, dim, 1, 3)
    dilation = _int_or_tuple(draw, dim, 1, 2)
    mode = "zeros"
    if transpose:
        padding = _int_or_tuple(draw, dim, 0, 2)
        limits = [max(s, d) for s, d in zip(_per_dim(stride, dim), _per_dim(dilation, dim))]
        output_padding = tuple(draw(st.integers(0, m - 1)) for m in limits)
        spans = zip(sizes, kernel, _per_dim(stride, dim), _per_dim(padding, dim), output_padding,
                    _per_dim(dilation, dim))  # fmt: skip
        if any((n - 1) * s - 2 * p + d * (k - 1) + o + 1 == 0 for n, k, s, p, o, d in spans):
            return  # torch accepts or refuses an empty 3-d output by the kernel it picks
        weight_shape = (c_in, c_out // groups, *kernel)
    else:
        padding = draw(
            st.one_of(st.sampled_from(["same", "valid"]), st.just(None))
        ) or _int_or_tuple(draw, dim, 0, 2)
        if not isinstance(padding, str):
            mode = draw(st.sampled_from(["zeros", "reflect", "replicate", "circular"]))
        weight_shape = (c_out, c_in // max(groups, 1) if c_in % groups == 0 else 1, *kernel)
    bias = draw(st.booleans())
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    arrays = {"x": normal(rng, shape), "w": normal(rng, weight_shape, 0.5)}
    if bias:
        arrays["b"] = normal(rng, (c_out,), 0.1)
    name = f"conv_transpose{dim}d" if transpose else f"conv{dim}d"

    def program(lib, nnf, t):
        x = t["x"]
        if mode != "zeros":  # nn.ConvNd's padding_mode: pad first, then a 0-padded conv
            pads = [p for p in reversed(_per_dim(padding, dim)) for _ in range(2)]
            x = nnf.pad(x, pads, mode=mode)
        fn = getattr(nnf, name)
        if transpose:
            return fn(x, t["w"], t.get("b"), stride, padding, output_padding, groups, dilation)
        return fn(
            x, t["w"], t.get("b"), stride=stride, padding=0 if mode != "zeros" else padding,
            dilation=dilation, groups=groups,
        )  # fmt: skip

    both_dtypes(name if mode == "zeros" else f"{name}|pad", program, arrays, grads=tuple(arrays))


# -- pooling -------------------------------------------------------------------------------------
@SETTINGS
@given(data=st.data())
def test_pooling_matches_torch(data):
    draw = data.draw
    dim = draw(st.integers(1, 3))
    kind = draw(st.sampled_from(["max", "max_unpool", "avg", "lp", "adaptive_max", "adaptive_avg"]))
    top = 7 if dim < 3 else 5
    sizes = tuple(draw(st.integers(1, top)) for _ in range(dim))
    batched = draw(st.integers(0, 3)) > 0
    shape = ((draw(st.integers(1, 2)),) if batched else ()) + (draw(st.integers(1, 3)), *sizes)
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    kernel = _int_or_tuple(draw, dim, 1, 3)
    stride = draw(st.one_of(st.none(), st.integers(1, 3)))
    ceil_mode = draw(st.booleans())
    arrays = {"x": normal(rng, shape)}
    if kind in ("max", "max_unpool"):
        padding = draw(st.integers(0, 2))
        dilation = 1 if kind == "max_unpool" else draw(st.integers(1, 2))
        indices = kind == "max_unpool" or draw(st.booleans())
        name = f"max_pool{dim}d"
        with_size = draw(st.booleans())

        def program(lib, nnf, t):
            out = getattr(nnf, name)(
                t["x"], kernel, stride, padding, dilation, ceil_mode=ceil_mode,
                return_indices=indices,
            )  # fmt: skip
            if kind != "max_unpool":
                return out
            values, where = out
            size = t["x"].shape[-dim:] if with_size else None
            unpool = getattr(nnf, f"max_unpool{dim}d")
            return unpool(values, where, kernel, stride, padding, output_size=size), where

    elif kind == "avg":
        padding = draw(st.integers(0, 2))
        include = draw(st.booleans())
        divisor = draw(st.one_of(st.none(), st.integers(1, 3)))
        name = f"avg_pool{dim}d"
        extra = {} if dim == 1 else {"divisor_override": divisor}

        def program(lib, nnf, t):
            return getattr(nnf, name)(
                t["x"], kernel, stride, padding, ceil_mode=ceil_mode,
                count_include_pad=include, **extra,
            )  # fmt: skip

    elif kind == "lp":
        norm_type = draw(st.sampled_from([1.0, 2.0, 3.0, 1.5]))
        if norm_type == 1.5:
            arrays["x"] = np.abs(arrays["x"]) + 0.1
        name = f"lp_pool{dim}d"

        def program(lib, nnf, t):
            return getattr(nnf, name)(t["x"], norm_type, kernel, stride, ceil_mode)

    else:
        output = tuple(
            draw(st.one_of(st.integers(1, 8), st.none())) if dim > 1 else draw(st.integers(1, 8))
            for _ in range(dim)
        )
        name = f"{kind}_pool{dim}d"
        extra = {"return_indices": draw(st.booleans())} if kind == "adaptive_max" else {}

        def program(lib, nnf, t):
            return getattr(nnf, name)(t["x"], output, **extra)

    if kind in ("max", "max_unpool"):
        with torch.no_grad():  # windows over padding alone: torch's backward writes outside
            try:
                probe = program(torch, tF, {"x": torch.tensor(arrays["x"])})
            except Exception:
                probe = None
            first = probe[0] if isinstance(probe, tuple) else probe
            if first is not None and kind == "max" and torch.isinf(first).any():
                return
    op = f"{name}|max_unpool{dim}d" if kind == "max_unpool" else name
    both_dtypes(op, program, arrays, grads=("x",))


# -- resampling ----------------------------------------------------------------------------------
INTERPOLATION_DIMS = {
    "nearest": (1, 2, 3),
    "nearest-exact": (1, 2, 3),
    "area": (1, 2, 3),
    "linear": (1,),
    "bilinear": (2,),
    "bicubic": (2,),
    "trilinear": (3,),
}


def _antialias_width_one(shape, kwargs) -> bool:
    """Whether torch's antialiased resize meets its bug: an output width of 1 with a new
    height skips the vertical pass (every row is the first one's), so it is not drawn."""
    probe = torch.zeros(shape, dtype=torch.float64)
    try:
        out = tF.interpolate(probe, **kwargs)
    except Exception:
        return False
    return out.shape[-1] == 1 and out.shape[-2] != shape[-2]


def _interpolate(draw, rng):
    mode = draw(st.sampled_from(sorted(INTERPOLATION_DIMS)))
    dim = draw(st.sampled_from(INTERPOLATION_DIMS[mode]))
    if draw(st.integers(0, 14)) == 0:  # a mode on the wrong rank: torch refuses
        dim = draw(st.integers(1, 3))
    top = 6 if dim < 3 else 4
    shape = (draw(st.integers(1, 2)), draw(st.integers(1, 2))) + tuple(
        draw(st.integers(1, top)) for _ in range(dim)
    )
    kwargs = {"mode": mode}
    if draw(st.booleans()):
        size = tuple(draw(st.integers(1, 8)) for _ in range(dim))
        kwargs["size"] = (
            size[0] if dim == 1 or (draw(st.booleans()) and len(set(size)) == 1) else size
        )
    else:
        factors = st.sampled_from([0.5, 0.75, 1.0, 1.5, 1.7, 2.0, 3.0])
        if draw(st.booleans()):
            kwargs["scale_factor"] = draw(factors)
        else:
            kwargs["scale_factor"] = tuple(draw(factors) for _ in range(dim))
        kwargs["recompute_scale_factor"] = draw(st.sampled_from([None, True, False]))
    if mode in ("linear", "bilinear", "bicubic", "trilinear") or draw(st.integers(0, 9)) == 0:
        kwargs["align_corners"] = draw(st.sampled_from([None, True, False]))
    if mode in ("bilinear", "bicubic") or draw(st.integers(0, 14)) == 0:
        kwargs["antialias"] = draw(st.booleans())
    arrays = {"x": normal(rng, shape)}
    if kwargs.get("antialias") and dim == 2 and _antialias_width_one(shape, kwargs):
        kwargs["antialias"] = False  # torch's bug: its rows all copy the first one

    def program(lib, nnf, t):
        return nnf.interpolate(t["x"], **kwargs)

    return "interpolate", program, arrays


def _fold(draw, rng):
    kernel = _int_or_tuple(draw, 2, 1, 3)
    dilation = _int_or_tuple(draw, 2, 1, 2)
    padding = _int_or_tuple(draw, 2, 0, 2)
    stride = _int_or_tuple(draw, 2, 1, 3)
    size = (draw(st.integers(1, 6)), draw(st.integers(1, 6)))
    batched = draw(st.booleans())
    shape = ((draw(st.integers(1, 2)),) if batched else ()) + (draw(st.integers(1, 3)), *size)
    arrays = {"x": normal(rng, shape)}
    options = dict(kernel_size=kernel, dilation=dilation, padding=padding, stride=stride)
    refold = draw(st.booleans())

    def program(lib, nnf, t):
        columns = nnf.unfold(t["x"], **options)
        if not refold:
            return columns
        return nnf.fold(columns * columns, output_size=size, **options)

    return "unfold|fold", program, arrays


def _shuffle(draw, rng):
    factor = draw(st.integers(1, 3))
    lead = tuple(draw(st.integers(1, 2)) for _ in range(draw(st.integers(0, 2))))
    if draw(st.booleans()):
        shape = (*lead, draw(st.integers(1, 2)) * factor**2 + draw(st.sampled_from([0, 0, 0, 1])))
        shape += (draw(st.integers(1, 4)), draw(st.integers(1, 4)))
        name = "pixel_shuffle"
    else:
        odd = draw(st.sampled_from([0, 0, 0, 1]))
        shape = (*lead, draw(st.integers(1, 3)), draw(st.integers(1, 3)) * factor + odd)
        shape += (draw(st.integers(1, 3)) * factor,)
        name = "pixel_unshuffle"
    arrays = {"x": normal(rng, shape)}

    def program(lib, nnf, t):
        return getattr(nnf, name)(t["x"], factor)

    return name, program, arrays


def _pad(draw, rng):
    mode = draw(st.sampled_from(["constant", "reflect", "replicate", "circular"]))
    padded = draw(st.integers(1, 3))
    rank = padded + draw(st.integers(1, 2)) if mode != "constant" else draw(st.integers(1, 4))
    shape = tuple(draw(st.integers(1, 4)) for _ in range(rank))
    low = -1 if mode == "constant" else 0
    pads = [draw(st.integers(low, 3)) for _ in range(2 * min(padded, rank))]
    value = draw(st.sampled_from([0.0, 1.5]))
    arrays = {"x": normal(rng, shape)}

    def program(lib, nnf, t):
        if mode == "constant":
            return nnf.pad(t["x"], pads, mode=mode, value=value)
        return nnf.pad(t["x"], pads, mode=mode)

    return "pad", program, arrays


def _grid_sample(draw, rng):
    dim = draw(st.integers(2, 3))
    mode = draw(st.sampled_from(["bilinear", "nearest"] + (["bicubic"] if dim == 2 else [])))
    padding_mode = draw(st.sampled_from(["zeros", "border", "reflection"]))
    align = draw(st.booleans())
    n = draw(st.integers(1, 2))
    top = 5 if dim == 2 else 3
    shape = (n, draw(st.integers(1, 2))) + tuple(draw(st.integers(1, top)) for _ in range(dim))
    out = tuple(draw(st.integers(1, 4)) for _ in range(dim))
    arrays = {"x": normal(rng, shape)}
    affine = draw(st.booleans())
    if affine:
        eye = np.eye(dim, dim + 1)
        arrays["theta"] = eye + normal(rng, (n, dim, dim + 1), 0.3)
    else:
        arrays["grid"] = rng.uniform(-1.3, 1.3, (n, *out, dim))

    def program(lib, nnf, t):
        if affine:
            grid = nnf.affine_grid(t["theta"], (n, shape[1], *out), align_corners=align)
        else:
            grid = t["grid"]
        return nnf.grid_sample(
            t["x"], grid, mode=mode, padding_mode=padding_mode, align_corners=align
        )

    return "grid_sample|affine_grid", program, arrays


RESAMPLERS = {
    "interpolate": _interpolate,
    "fold": _fold,
    "shuffle": _shuffle,
    "pad": _pad,
    "grid_sample": _grid_sample,
}


@SETTINGS
@given(data=st.data())
def test_resampling_matches_torch(data):
    draw = data.draw
    kind = draw(st.sampled_from(sorted(RESAMPLERS)))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    op, program, arrays = RESAMPLERS[kind](draw, rng)
    both_dtypes(op, program, arrays, grads=tuple(arrays))


# -- normalization -------------------------------------------------------------------------------
def _batch_norm(draw, rng, shape):
    c = shape[1]
    training = draw(st.booleans())
    stats = draw(st.booleans()) or (not training and draw(st.integers(0, 9)) > 0)
    affine = draw(st.booleans())
    momentum = draw(st.sampled_from([0.1, 0.5, 1.0]))
    arrays = {"x": normal(rng, shape)}
    if stats:
        arrays["mean"] = normal(rng, (c,), 0.2)
        arrays["var"] = rng.uniform(0.5, 1.5, (c,))
    if affine:
        arrays["w"], arrays["b"] = normal(rng, (c,)), normal(rng, (c,))

    def program(lib, nnf, t):
        return nnf.batch_norm(
            t["x"], t.get("mean"), t.get("var"), t.get("w"), t.get("b"), training, momentum, 1e-3
        )

    return "batch_norm", program, arrays, ("mean", "var") if stats else ()


def _instance_norm(draw, rng, shape):
    c = shape[1]
    use_input_stats = draw(st.integers(0, 4)) > 0
    stats = draw(st.booleans())
    affine = draw(st.booleans())
    arrays = {"x": normal(rng, shape)}
    if stats:
        arrays["mean"] = normal(rng, (c,), 0.2)
        arrays["var"] = rng.uniform(0.5, 1.5, (c,))
    if affine:
        arrays["w"], arrays["b"] = normal(rng, (c,)), normal(rng, (c,))

    def program(lib, nnf, t):
        return nnf.instance_norm(
            t["x"], t.get("mean"), t.get("var"), t.get("w"), t.get("b"), use_input_stats,
            0.2, 1e-3,
        )  # fmt: skip

    return "instance_norm", program, arrays, ("mean", "var") if stats else ()


def _group_norm(draw, rng, shape):
    c = shape[1]
    divisors = [g for g in range(1, c + 1) if c % g == 0]
    groups = draw(st.sampled_from(divisors + [c + 1] if draw(st.integers(0, 9)) == 0 else divisors))
    affine = draw(st.booleans())
    arrays = {"x": normal(rng, shape)}
    if affine:
        arrays["w"], arrays["b"] = normal(rng, (c,)), normal(rng, (c,))

    def program(lib, nnf, t):
        return nnf.group_norm(t["x"], groups, t.get("w"), t.get("b"), 1e-3)

    return "group_norm", program, arrays, ()


def _layer_norm(draw, rng, shape, rms=False):
    last = draw(st.integers(1, len(shape)))
    normalized = list(shape[-last:])
    if draw(st.integers(0, 11)) == 0:
        normalized[0] += 1  # torch refuses a shape that is not the input's trailing one
    weights = draw(st.booleans())
    arrays = {"x": normal(rng, shape)}
    if weights:
        arrays["w"] = normal(rng, tuple(normalized))
        if not rms and draw(st.booleans()):
            arrays["b"] = normal(rng, tuple(normalized))
    size = tuple(normalized)  # (an int is retrograd's extension: torch's functions refuse it)
    eps = draw(st.sampled_from([None, 1e-5, 1e-2])) if rms else 1e-5

    def program(lib, nnf, t):
        if rms:
            return nnf.rms_norm(t["x"], size, t.get("w"), eps=eps)
        return nnf.layer_norm(t["x"], size, t.get("w"), t.get("b"), eps)

    return "rms_norm" if rms else "layer_norm", program, arrays, ()


def _local_response_norm(draw, rng, shape):
    size = draw(st.integers(1, 4))
    alpha = draw(st.sampled_from([1e-4, 0.5, 1.0]))
    beta = draw(st.sampled_from([0.5, 0.75, 1.0]))
    k = draw(st.sampled_from([1.0, 2.0]))
    arrays = {"x": normal(rng, shape)}

    def program(lib, nnf, t):
        return nnf.local_response_norm(t["x"], size, alpha, beta, k)

    return "local_response_norm", program, arrays, ()


NORMS = {
    "batch_norm": _batch_norm,
    "instance_norm": _instance_norm,
    "group_norm": _group_norm,
    "layer_norm": _layer_norm,
    "rms_norm": lambda draw, rng, shape: _layer_norm(draw, rng, shape, rms=True),
    "local_response_norm": _local_response_norm,
}


@SETTINGS
@given(data=st.data())
def test_normalization_matches_torch(data):
    draw = data.draw
    kind = draw(st.sampled_from(sorted(NORMS)))
    rank = draw(st.integers(2 if kind in ("batch_norm", "layer_norm", "rms_norm") else 3, 5))
    shape = tuple(draw(st.sampled_from([1, 2, 3, 4])) for _ in range(rank))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    op, program, arrays, state = NORMS[kind](draw, rng, shape)
    grads = tuple(k for k in arrays if k not in state)
    both_dtypes(op, program, arrays, grads=grads, state=state)


# -- embeddings ----------------------------------------------------------------------------------
@SETTINGS
@given(data=st.data())
def test_embeddings_match_torch(data):
    draw = data.draw
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    num, width = draw(st.integers(1, 6)), draw(st.integers(1, 4))
    padding_idx = draw(st.one_of(st.none(), st.integers(-num, num - 1)))
    max_norm = draw(st.sampled_from([None, None, 0.5, 1.5]))
    norm_type = draw(st.sampled_from([1.0, 2.0, 3.0]))
    by_freq = draw(st.booleans())
    arrays = {"w": normal(rng, (num, width))}
    if draw(st.booleans()):
        index_shape = tuple(draw(st.integers(1, 4)) for _ in range(draw(st.integers(0, 3))))
        arrays["i"] = rng.integers(0, num, index_shape)

        def program(lib, nnf, t):
            return nnf.embedding(
                t["i"], t["w"], padding_idx, max_norm, norm_type, by_freq, sparse=False
            )

        op = "embedding"
    else:
        mode = draw(st.sampled_from(["sum", "mean", "max"]))
        per_sample = draw(st.integers(0, 3)) == 0
        last_offset = draw(st.booleans())
        if draw(st.booleans()):  # a 2-d batch of equal bags
            arrays["i"] = rng.integers(0, num, (draw(st.integers(1, 3)), draw(st.integers(1, 4))))
            offsets = None
            last_offset = False
        else:
            length = draw(st.integers(1, 7))
            arrays["i"] = rng.integers(0, num, (length,))
            cuts = sorted(draw(st.lists(st.integers(0, length), min_size=1, max_size=4)))
            offsets = [0] + cuts[1:] if not last_offset else [0] + cuts[1:] + [length]
            arrays["o"] = np.asarray(offsets, dtype=np.int64)
        if per_sample:
            arrays["p"] = normal(rng, arrays["i"].shape)

        def program(lib, nnf, t):
            return nnf.embedding_bag(
                t["i"], t["w"], t.get("o"), max_norm, norm_type, by_freq, mode, False,
                t.get("p"), last_offset, padding_idx,
            )  # fmt: skip

        op = "embedding_bag"
    grads = ("w", "p") if "p" in arrays else ("w",)
    both_dtypes(op, program, arrays, grads=grads, state=("w",) if max_norm else ())


# -- losses --------------------------------------------------------------------------------------
def _class_loss(draw, rng, reduction):
    """cross_entropy / nll_loss / multi_margin_loss on (C,), (N, C) or (N, C, d...) logits."""
    name = draw(st.sampled_from(["cross_entropy", "nll_loss", "multi_margin_loss"]))
    c = draw(st.integers(1, 4))
    extra = 0 if name == "multi_margin_loss" else draw(st.integers(0, 2))
    batched = name == "multi_margin_loss" or draw(st.integers(0, 4)) > 0
    n = draw(st.integers(1, 3))
    spatial = tuple(draw(st.integers(1, 3)) for _ in range(extra))
    shape = ((n,) if batched else ()) + (c, *spatial)
    target_shape = ((n,) if batched else ()) + spatial
    arrays = {"x": normal(rng, shape)}
    kwargs = {"reduction": reduction}
    if draw(st.booleans()):
        arrays["weight"] = rng.uniform(0.2, 2.0, (c,))
    probabilities = name == "cross_entropy" and draw(st.integers(0, 3)) == 0
    if probabilities:
        arrays["y"] = np.moveaxis(rng.dirichlet(np.ones(c), target_shape), -1, 1 if batched else 0)
    else:
        arrays["y"] = rng.integers(0, c, target_shape)
        if name != "multi_margin_loss" and draw(st.booleans()):
            ignore = draw(st.sampled_from([-100, 0, c - 1]))
            kwargs["ignore_index"] = ignore
            arrays["y"] = np.where(rng.random(target_shape) < 0.3, ignore, arrays["y"])
    if name == "cross_entropy":
        kwargs["label_smoothing"] = draw(st.sampled_from([0.0, 0.0, 0.1, 0.4]))
    if name == "multi_margin_loss":
        kwargs["p"] = draw(st.sampled_from([1, 2]))
        kwargs["margin"] = draw(st.sampled_from([0.5, 1.0, 2.0]))

    def program(lib, nnf, t):
        return getattr(nnf, name)(t["x"], t["y"], weight=t.get("weight"), **kwargs)

    return name, program, arrays, ("x", "y") if probabilities else ("x",)


def _binary_loss(draw, rng, reduction):
    name = draw(st.sampled_from(
        ["binary_cross_entropy", "binary_cross_entropy_with_logits", "multilabel_soft_margin_loss"]
    ))  # fmt: skip
    shape = tuple(draw(st.integers(1, 3)) for _ in range(draw(st.integers(1, 3))))
    if name == "multilabel_soft_margin_loss":
        shape = (draw(st.integers(1, 3)), draw(st.integers(1, 4)))
    logits = normal(rng, shape)
    arrays = {
        "x": 1 / (1 + np.exp(-logits)) if name == "binary_cross_entropy" else logits,
        "y": rng.uniform(0, 1, shape) if draw(st.booleans()) else rng.integers(0, 2, shape) * 1.0,
    }
    kwargs = {"reduction": reduction}
    if draw(st.booleans()):
        arrays["weight"] = rng.uniform(0.2, 2.0, shape[-1:])
    if name == "binary_cross_entropy_with_logits" and draw(st.booleans()):
        arrays["pos_weight"] = rng.uniform(0.2, 3.0, shape[-1:])

    def program(lib, nnf, t):
        if "pos_weight" in t:
            kwargs["pos_weight"] = t["pos_weight"]
        return getattr(nnf, name)(t["x"], t["y"], weight=t.get("weight"), **kwargs)

    # (torch refuses weights that require a gradient here; retrograd gives theirs)
    return name, program, arrays, ("x", "y")


def _regression_loss(draw, rng, reduction):
    name = draw(st.sampled_from([
        "mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss", "kl_div", "soft_margin_loss",
        "poisson_nll_loss", "gaussian_nll_loss", "hinge_embedding_loss", "margin_ranking_loss",
        "cosine_embedding_loss", "triplet_margin_loss",
    ]))  # fmt: skip
    shape = tuple(draw(st.integers(1, 3)) for _ in range(draw(st.integers(1, 3))))
    if name in ("cosine_embedding_loss", "triplet_margin_loss"):
        shape = (draw(st.integers(1, 3)), draw(st.integers(1, 4)))
    x, y = normal(rng, shape), normal(rng, shape)
    arrays = {"x": x, "y": y}
    kwargs = {"reduction": reduction}
    if name in ("soft_margin_loss", "hinge_embedding_loss"):
        arrays["y"] = np.where(y > 0, 1.0, -1.0)
    if name == "smooth_l1_loss":
        kwargs["beta"] = draw(st.sampled_from([0.0, 0.5, 1.0, 2.0]))
    if name == "huber_loss":
        kwargs["delta"] = draw(st.sampled_from([0.5, 1.0, 2.0]))
    if name == "kl_div":
        kwargs["log_target"] = draw(st.booleans())
        arrays["x"] = np.log(rng.uniform(0.1, 1.0, shape))
        arrays["y"] = np.log(rng.uniform(0.1, 1.0, shape)) if kwargs["log_target"] else (
            rng.uniform(0.0, 1.0, shape))  # fmt: skip
    if name == "poisson_nll_loss":
        kwargs["log_input"] = draw(st.booleans())
        kwargs["full"] = draw(st.booleans())
        arrays["y"] = rng.integers(0, 4, shape) * 1.0
        if not kwargs["log_input"]:
            arrays["x"] = rng.uniform(0.1, 2.0, shape)
    if name == "gaussian_nll_loss":
        kwargs["full"] = draw(st.booleans())
        kwargs["eps"] = draw(st.sampled_from([1e-6, 0.5]))
        var_shape = draw(st.sampled_from([shape, shape[:-1] + (1,), shape[:-1]]))
        arrays["var"] = rng.uniform(0.2, 2.0, var_shape)
    if name == "hinge_embedding_loss":
        kwargs["margin"] = draw(st.sampled_from([0.5, 1.0, 2.0]))
    if name in ("margin_ranking_loss", "cosine_embedding_loss"):
        arrays["y"] = np.where(rng.random(shape[:1] if name != "margin_ranking_loss" else shape)
                               > 0.5, 1.0, -1.0)  # fmt: skip
        arrays["z"] = normal(rng, shape) if name == "cosine_embedding_loss" else None
        kwargs["margin"] = draw(st.sampled_from([0.0, 0.3]))
        if name == "margin_ranking_loss":
            arrays["z"] = normal(rng, shape)
    if name == "triplet_margin_loss":
        arrays["z"] = normal(rng, shape)
        kwargs["margin"] = draw(st.sampled_from([0.5, 1.0]))
        kwargs["p"] = draw(st.sampled_from([1.0, 2.0, 3.0]))
        kwargs["swap"] = draw(st.booleans())
    arrays = {k: v for k, v in arrays.items() if v is not None}

    def program(lib, nnf, t):
        fn = getattr(nnf, name)
        if name == "gaussian_nll_loss":
            return fn(t["x"], t["y"], t["var"], **kwargs)
        if name == "margin_ranking_loss":
            return fn(t["x"], t["z"], t["y"], **kwargs)
        if name == "cosine_embedding_loss":
            return fn(t["x"], t["z"], t["y"], **kwargs)
        if name == "triplet_margin_loss":
            return fn(t["x"], t["y"], t["z"], **kwargs)
        return fn(t["x"], t["y"], **kwargs)

    grads = tuple(k for k in arrays if k != "y" or name not in (
        "soft_margin_loss", "hinge_embedding_loss", "margin_ranking_loss",
        "cosine_embedding_loss", "poisson_nll_loss"))  # fmt: skip
    return name, program, arrays, grads


LOSSES = {"class": _class_loss, "binary": _binary_loss, "regression": _regression_loss}


@SETTINGS
@given(data=st.data())
def test_losses_match_torch(data):
    draw = data.draw
    kind = draw(st.sampled_from(sorted(LOSSES)))
    reduction = draw(st.sampled_from(["none", "mean", "sum", "none", "mean", "sum", "average"]))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    op, program, arrays, grads = LOSSES[kind](draw, rng, reduction)
    both_dtypes(op, program, arrays, grads=grads)


# -- chained programs ----------------------------------------------------------------------------
STEPS = [
    "conv", "conv_transpose", "batch_norm", "group_norm", "instance_norm", "layer_norm",
    "activation", "max_pool", "avg_pool", "adaptive_avg", "interpolate", "pad",
]  # fmt: skip


def _draw_step(draw, rng, shape, index):
    """One layer for an input of ``shape``: (kind, options, its parameters by name)."""
    kind = draw(st.sampled_from(STEPS))
    dim, c = len(shape) - 2, shape[1]
    params, options = {}, {}
    if kind in ("conv", "conv_transpose"):
        groups = draw(st.sampled_from([g for g in (1, 2, 3) if c % g == 0]))
        out = groups * draw(st.integers(1, 2))
        k = tuple(draw(st.integers(1, 3)) for _ in range(dim))
        options = {"stride": draw(st.integers(1, 2)), "padding": draw(st.integers(0, 1)),
                   "groups": groups}  # fmt: skip
        if kind == "conv":
            options["dilation"] = draw(st.integers(1, 2))
            params[f"w{index}"] = normal(rng, (out, c // groups, *k), 0.5)
        else:
            params[f"w{index}"] = normal(rng, (c, out // groups, *k), 0.5)
        if draw(st.booleans()):
            params[f"b{index}"] = normal(rng, (out,), 0.1)
    elif kind in ("batch_norm", "instance_norm"):
        options["training"] = draw(st.booleans())
        params[f"w{index}"], params[f"b{index}"] = normal(rng, (c,)), normal(rng, (c,))
        params[f"mean{index}"] = normal(rng, (c,), 0.1)
        params[f"var{index}"] = rng.uniform(0.5, 1.5, (c,))
    elif kind == "group_norm":
        options["groups"] = draw(st.sampled_from([g for g in range(1, c + 1) if c % g == 0]))
        params[f"w{index}"] = normal(rng, (c,))
    elif kind == "layer_norm":
        params[f"w{index}"] = normal(rng, shape[-1:])
    elif kind == "activation":
        options["name"] = draw(st.sampled_from(["relu", "gelu", "tanh", "silu", "elu", "sigmoid"]))
    elif kind in ("max_pool", "avg_pool"):
        options = {"kernel_size": draw(st.integers(1, 3)), "ceil_mode": draw(st.booleans())}
        options["padding"] = draw(st.integers(0, options["kernel_size"] // 2))
    elif kind == "adaptive_avg":
        options["size"] = tuple(draw(st.integers(1, 4)) for _ in range(dim))
    elif kind == "interpolate":
        modes = ["nearest", "area", {1: "linear", 2: "bicubic", 3: "trilinear"}[dim]]
        options["mode"] = draw(st.sampled_from(modes + (["bilinear"] if dim == 2 else [])))
        options["size"] = tuple(draw(st.integers(1, 6)) for _ in range(dim))
    else:
        options["mode"] = draw(st.sampled_from(["constant", "reflect", "replicate", "circular"]))
        options["pad"] = [draw(st.integers(0, 1)) for _ in range(2 * dim)]
    return kind, options, params


def _apply_step(nnf, t, step, x, index):
    kind, options, _ = step
    dim = x.ndim - 2
    w, b = t.get(f"w{index}"), t.get(f"b{index}")
    if kind == "conv":
        return getattr(nnf, f"conv{dim}d")(x, w, b, **options)
    if kind == "conv_transpose":
        return getattr(nnf, f"conv_transpose{dim}d")(x, w, b, **options)
    if kind == "batch_norm":
        mean, var = t[f"mean{index}"], t[f"var{index}"]
        return nnf.batch_norm(x, mean, var, w, b, options["training"], 0.1, 1e-3)
    if kind == "instance_norm":
        mean, var = t[f"mean{index}"], t[f"var{index}"]
        return nnf.instance_norm(x, mean, var, w, b, options["training"], 0.1, 1e-3)
    if kind == "group_norm":
        return nnf.group_norm(x, options["groups"], w, None, 1e-3)
    if kind == "layer_norm":
        return nnf.layer_norm(x, tuple(x.shape[-1:]), w, None, 1e-3)
    if kind == "activation":
        return getattr(nnf, options["name"])(x)
    if kind == "max_pool":
        return getattr(nnf, f"max_pool{dim}d")(x, **options)
    if kind == "avg_pool":
        return getattr(nnf, f"avg_pool{dim}d")(x, **options)
    if kind == "adaptive_avg":
        return getattr(nnf, f"adaptive_avg_pool{dim}d")(x, options["size"])
    if kind == "interpolate":
        return nnf.interpolate(x, size=options["size"], mode=options["mode"])
    return nnf.pad(x, options["pad"], mode=options["mode"])


@SETTINGS
@given(data=st.data())
def test_random_layer_programs_match_torch(data):
    """Chains of two to five layers on one input, ending in a cross entropy over channels
    (``ignore_index`` and ``label_smoothing`` drawn): every layer's output, the loss, and the
    gradients of the input and of every parameter agree with torch's."""
    draw = data.draw
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    dim = draw(st.integers(1, 3))
    top = 6 if dim < 3 else 4
    shape = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    shape += tuple(draw(st.integers(1, top)) for _ in range(dim))
    arrays = {"x": normal(rng, shape)}
    steps = []
    probe = torch.zeros(shape, dtype=torch.float64)
    for index in range(draw(st.integers(2, 5))):
        step = _draw_step(draw, rng, tuple(probe.shape), index)
        held = {k: torch.tensor(v) for k, v in step[2].items()}
        try:
            out = _apply_step(tF, held, step, probe, index)
        except Exception:
            continue  # a layer that does not fit the current shape is left out
        if out.numel() == 0 or out.numel() > 4000 or (step[0] == "max_pool" and out.isinf().any()):
            continue
        steps.append((index, step))
        arrays.update(step[2])
        probe = out
    classes = probe.shape[1]
    target_shape = (probe.shape[0], *probe.shape[2:])
    ignore = draw(st.sampled_from([-100, 0]))
    target = np.where(
        rng.random(target_shape) < 0.2, ignore, rng.integers(0, classes, target_shape)
    )
    arrays["target"] = target
    smoothing = draw(st.sampled_from([0.0, 0.2]))
    stats = tuple(k for k in arrays if k.startswith(("mean", "var")))

    def program(lib, nnf, t):
        x = t["x"]
        outputs = []
        for index, step in steps:
            x = _apply_step(nnf, t, step, x, index)
            outputs.append(x)
        loss = nnf.cross_entropy(x, t["target"], ignore_index=ignore, label_smoothing=smoothing)
        return (*outputs, loss)

    grads = tuple(k for k in arrays if k not in stats and k != "target")
    names = "|".join(sorted({step[0] for _, step in steps} | {"cross_entropy"}))
    both_dtypes(names, program, arrays, grads=grads, state=stats)


# -- the comparison itself -----------------------------------------------------------------------
def test_the_comparison_catches_a_wrong_value_a_wrong_gradient_and_a_missed_refusal():
    arrays = {"x": np.arange(6.0).reshape(2, 3)}

    def wrong_value(lib, nnf, t):
        return nnf.relu(t["x"]) * (1.0 + 1e-6 if lib is rg else 1.0)

    def wrong_gradient(lib, nnf, t):
        x = t["x"].detach() if lib is rg else t["x"]
        return nnf.relu(x) + t["x"]

    def refused_by_torch_alone(lib, nnf, t):
        return nnf.pad(t["x"], [0, 5], mode="reflect" if lib is torch else "constant")

    for program in (wrong_value, wrong_gradient, refused_by_torch_alone):
        with pytest.raises(Mismatch):
            differential("relu|pad", program, arrays, grads=("x",))
    assert differential("relu", lambda lib, nnf, t: nnf.relu(t["x"]), arrays, ("x",)) == "ok"
