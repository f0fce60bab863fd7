"""Random programs of recurrent layers and packed sequences against PyTorch, round 62.

Each program draws a configuration, builds it in torch and in retrograd from the same weights
and inputs, and compares everything observable:

* a layer: ``nn.RNN`` (``tanh``/``relu``), ``nn.LSTM`` (``proj_size`` too), ``nn.GRU`` with
  random ``num_layers``, ``bidirectional``, ``batch_first``, ``bias``, ``dropout`` (in eval
  mode, or 0), float32/float64, batched or unbatched input, ``hx`` given, omitted or of a
  wrong shape (both must raise); its ``state_dict`` names and shapes, ``all_weights``,
  ``flatten_parameters()``; the outputs' values, shapes and dtypes, and in float64 the
  gradients wrt the input, ``hx`` and every weight; then a few SGD steps compared step by
  step;
* a cell: ``RNNCell``/``LSTMCell``/``GRUCell``, a few steps of a loop, the same checks;
* packed sequences: ``pad_sequence`` (``batch_first``, ``padding_value``, ``padding_side``),
  ``pack_sequence``, ``pack_padded_sequence`` (sorted, or ``enforce_sorted=False``; unsorted
  lengths with ``enforce_sorted=True`` must raise in both), a ``PackedSequence``'s fields and
  conversions (``.to``, ``.double()``, ``.float()``), a packed batch through a layer (with
  ``hx`` too), ``pad_packed_sequence`` (``batch_first``, ``padding_value``,
  ``total_length``, one too short must raise), and the float64 gradients that reach the
  padded input.

Where torch raises, retrograd must raise a ``RetrogradError`` that is also the Python class
of torch's error when that is no ``RuntimeError`` (``ValueError``, ``TypeError``...), a
``ShapeError`` for torch's "Dimension out of range" ``IndexError`` (API.md section 7).

Not drawn, where torch checks nothing and retrograd refuses: a wrong ``c_0`` of an LSTM given
a packed batch, a wrong ``hx`` of a batch packed unsorted (torch permutes it before its
check), a state of two dimensions for an unbatched cell input (torch broadcasts it); lengths
longer than the padded input are drawn, and retrograd alone is checked to refuse them
(torch makes an inconsistent ``PackedSequence`` of them). Gradients' strides, which torch
leaves open, are not compared.
"""

from __future__ import annotations

import numpy as np
import pytest

import retrograd as rg

torch = pytest.importorskip("torch")

MODES = ("RNN_TANH", "RNN_RELU", "LSTM", "GRU")
#: torch's IndexError for a dimension out of range (a cell's ``hx`` of one dimension for a
#: batched input), retrograd's ShapeError by API.md section 7
DIMENSION_OUT_OF_RANGE = "Dimension out of range"


class Mismatch(AssertionError):  # noqa: N818 (read as "a mismatch with torch")
    """retrograd and torch disagree."""


def _np(t) -> np.ndarray:
    return t.detach().numpy().copy()


def _dtype(t) -> str:
    return str(t.dtype).replace("torch.", "").replace("retrograd.", "")


def _tol(dtype: str) -> dict:
    # float32: a recurrence over a few steps and layers sums in another order than torch's
    # kernels; the differences measured stay under 1e-5 of values of order 1
    return {"rtol": 1e-4, "atol": 1e-5} if dtype == "float32" else {"rtol": 1e-9, "atol": 1e-11}


def _same(
    log: list[str], what: str, ours, theirs, tol: dict | None = None, strides: bool = True
) -> None:
    where = "\n".join(log)
    if (ours is None) != (theirs is None):
        raise Mismatch(f"{where}\n{what}: retrograd {ours!r}, torch {theirs!r}")
    if theirs is None:
        return
    if tuple(ours.shape) != tuple(theirs.shape):
        raise Mismatch(f"{where}\n{what}: shape {tuple(ours.shape)} vs torch {tuple(theirs.shape)}")
    if _dtype(ours) != _dtype(theirs):
        raise Mismatch(f"{where}\n{what}: dtype {_dtype(ours)} vs torch {_dtype(theirs)}")
    if strides and ours.stride() != theirs.stride():
        raise Mismatch(f"{where}\n{what}: strides {ours.stride()} vs torch {theirs.stride()}")
    a, b = _np(ours), _np(theirs)
    if tol is None or a.dtype.kind not in "fc":
        if not np.array_equal(a, b):
            raise Mismatch(f"{where}\n{what}:\n{a}\ntorch:\n{b}")
    else:
        try:
            np.testing.assert_allclose(a, b, **tol)
        except AssertionError as e:
            raise Mismatch(f"{where}\n{what}: {e}") from None


def _both(log: list[str], call, loose: bool = False):
    """``call(lib)`` on both; ``(ours, theirs)``, or ``None`` when both raised (checked; any
    ``RetrogradError`` when ``loose``)."""
    try:
        theirs = call(torch)
        torch_error = None
    except Exception as e:  # any refusal of torch's is compared
        torch_error = e
    try:
        ours = call(rg)
        error = None
    except Exception as e:
        if torch_error is None:
            raise Mismatch("\n".join(log) + f"\nretrograd raised {e!r}, torch did not") from e
        error = e
    if torch_error is None:
        return ours, theirs
    where = "\n".join(log)
    if error is None:
        raise Mismatch(f"{where}\ntorch raised {torch_error!r}, retrograd did not")
    if not isinstance(error, rg.RetrogradError):
        raise Mismatch(f"{where}\n{error!r} is no RetrogradError (torch: {torch_error!r})")
    if loose:
        log.append(f"  both raised: {type(torch_error).__name__}, {type(error).__name__}")
        return None
    if isinstance(torch_error, IndexError) and DIMENSION_OUT_OF_RANGE in str(torch_error):
        if not isinstance(error, rg.ShapeError):  # API.md section 7
            raise Mismatch(f"{where}\n{error!r} is no ShapeError (torch: {torch_error!r})")
        log.append("  both raised (a dimension out of range)")
        return None
    for cls in (IndexError, TypeError, ValueError):
        if isinstance(torch_error, cls) and not isinstance(error, cls):
            raise Mismatch(f"{where}\n{error!r}, torch {torch_error!r}")
    log.append(f"  both raised: {type(torch_error).__name__}")
    return None


def _lib_dtype(lib, name: str):
    return getattr(lib, name)


def _pair(rng, shape, dtype: str, grad: bool = False):
    values = rng.standard_normal(shape).astype(dtype)
    return tuple(lib.tensor(values, dtype=_lib_dtype(lib, dtype), requires_grad=grad)
                 for lib in (rg, torch))  # fmt: skip


# -- modules -----------------------------------------------------------------------------------
def _layer_kwargs(rng) -> tuple[str, dict]:
    mode = str(rng.choice(MODES))
    hidden = int(rng.integers(2, 6))
    kwargs = {
        "input_size": int(rng.integers(1, 5)),
        "hidden_size": hidden,
        "num_layers": int(rng.integers(1, 4)),
        "bias": bool(rng.random() < 0.75),
        "batch_first": bool(rng.random() < 0.5),
        "bidirectional": bool(rng.random() < 0.5),
    }
    if rng.random() < 0.3 and kwargs["num_layers"] > 1:
        kwargs["dropout"] = float(rng.choice([0.0, 0.3]))
    if mode.startswith("RNN"):
        kwargs["nonlinearity"] = "relu" if mode == "RNN_RELU" else "tanh"
    if mode == "LSTM" and rng.random() < 0.4:
        kwargs["proj_size"] = int(rng.integers(1, hidden))
    return mode, kwargs


def _module_class(lib, mode: str, cell: bool = False):
    name = {"RNN_TANH": "RNN", "RNN_RELU": "RNN"}.get(mode, mode)
    return getattr(lib.nn, name + ("Cell" if cell else ""))


def _twin_modules(rng, log, mode: str, kwargs: dict, dtype: str, cell: bool = False):
    """The same module in both libraries, its weights drawn here; its names, shapes and
    dtypes compared."""
    mods = {}
    convert = rng.random() < 0.3  # made in float32, then .double()/.to(dtype)/.float()
    if convert:
        log.append(f"  converted to {dtype}")
    how = str(rng.choice(["method", "to"]))
    for lib in (rg, torch):
        if convert:
            mod = _module_class(lib, mode, cell)(**kwargs)
            mods[lib] = getattr(mod, dtype[:-2] if dtype == "float32" else "double")() if (
                how == "method") else mod.to(_lib_dtype(lib, dtype))  # fmt: skip
        else:
            mods[lib] = _module_class(lib, mode, cell)(**kwargs, dtype=_lib_dtype(lib, dtype))
    ours, theirs = mods[rg], mods[torch]
    names = list(theirs.state_dict())
    if list(ours.state_dict()) != names:
        raise Mismatch(f"{log}\nstate_dict names {list(ours.state_dict())} vs torch {names}")
    state_t, state_r = {}, {}
    for name, value in theirs.state_dict().items():
        values = rng.uniform(-0.6, 0.6, tuple(value.shape)).astype(dtype)
        state_t[name] = torch.tensor(values)
        state_r[name] = rg.tensor(values)
    theirs.load_state_dict(state_t)
    ours.load_state_dict(state_r)
    for (name, p), (tname, tp) in zip(
        ours.named_parameters(), theirs.named_parameters(), strict=True
    ):
        if name != tname:
            raise Mismatch(f"{log}\nparameter {name} vs torch {tname}")
        _same(log, name, p, tp)
    if not cell:
        shapes = [[tuple(p.shape) for p in layer] for layer in ours.all_weights]
        tshapes = [[tuple(p.shape) for p in layer] for layer in theirs.all_weights]
        if shapes != tshapes:
            raise Mismatch(f"{log}\nall_weights {shapes} vs torch {tshapes}")
        if rng.random() < 0.3:
            ours.flatten_parameters()
            theirs.flatten_parameters()
    if rng.random() < 0.5:
        ours.eval()
        theirs.eval()
    elif kwargs.get("dropout"):
        kwargs["dropout"] = 0.0  # (a training run with dropout draws its masks at random)
        ours.dropout = theirs.dropout = 0.0
    return ours, theirs


def _state_shapes(mode: str, kwargs: dict, batch: int | None) -> list[tuple[int, ...]]:
    directions = 2 if kwargs.get("bidirectional") else 1
    lead = (kwargs["num_layers"] * directions,) if "num_layers" in kwargs else ()
    mid = () if batch is None else (batch,)
    h = kwargs.get("proj_size") or kwargs["hidden_size"]
    shapes = [(*lead, *mid, h)]
    if mode == "LSTM":
        shapes.append((*lead, *mid, kwargs["hidden_size"]))
    return shapes


def _wrong(rng, shape: tuple[int, ...], same_ndim: bool = False) -> tuple[int, ...]:
    shape = list(shape)
    k = int(rng.integers(len(shape) + (not same_ndim)))
    if k == len(shape):
        return (*shape, 1) if rng.random() < 0.5 else tuple(shape[:-1])
    shape[k] += int(rng.choice([-1, 1])) if shape[k] > 1 else 1
    return tuple(shape)


def _draw_hx(rng, log, mode, kwargs, batch, dtype, grad: bool, wrong: bool = True):
    """``(ours, theirs, leaves)``: ``hx`` in each library (``None`` when omitted), a wrong
    shape sometimes, and the pairs of leaves to differentiate."""
    choice = rng.random()
    if choice < 0.3:
        log.append("  hx omitted")
        return None, None, []
    shapes = _state_shapes(mode, kwargs, batch)
    if choice > 0.9 and wrong:
        k = int(rng.integers(len(shapes)))
        # torch's cells unsqueeze an unbatched input's states and run on a state of 2
        # dimensions, broadcasting it; retrograd refuses it, so the same dimensions there
        same_ndim = batch is None and "num_layers" not in kwargs
        shapes[k] = _wrong(rng, shapes[k], same_ndim)
    log.append(f"  hx {shapes}")
    if len(shapes[0]) == 3 and rng.random() < 0.25:
        # non-contiguous states: transposes of contiguous leaves
        log.append("  hx non-contiguous")
        pairs = [_pair(rng, (s[1], s[0], s[2]), dtype, grad) for s in shapes]
        views = [(a.transpose(0, 1), b.transpose(0, 1)) for a, b in pairs]
        if mode == "LSTM":
            return tuple(v[0] for v in views), tuple(v[1] for v in views), pairs
        return views[0][0], views[0][1], pairs
    pairs = [_pair(rng, s, dtype, grad) for s in shapes]
    if mode == "LSTM":
        return tuple(p[0] for p in pairs), tuple(p[1] for p in pairs), pairs
    return pairs[0][0], pairs[0][1], pairs


def _flat(result) -> list:
    out = []
    for r in result if isinstance(result, tuple | list) else (result,):
        out.extend(_flat(r) if isinstance(r, tuple | list) else [r])
    return out


def _compare_grads(rng, log, outputs, leaves, ours_mod, theirs_mod, dtype) -> None:
    """The gradient of a random weighted sum of ``outputs`` (pairs) wrt each pair of
    ``leaves`` and every parameter."""
    loss_r, loss_t = 0.0, 0.0
    for ours, theirs in outputs:
        w = rng.standard_normal(tuple(theirs.shape))
        loss_r = loss_r + (ours * rg.tensor(w, dtype=ours.dtype)).sum()
        loss_t = loss_t + (theirs * torch.tensor(w, dtype=theirs.dtype)).sum()
    params_r = list(ours_mod.named_parameters())
    params_t = list(theirs_mod.named_parameters())
    inputs_r = [p for _, p in params_r] + [a for a, _ in leaves]
    inputs_t = [p for _, p in params_t] + [b for _, b in leaves]
    grads_r = rg.autograd.grad(loss_r, inputs_r, allow_unused=True)
    grads_t = torch.autograd.grad(loss_t, inputs_t, allow_unused=True)
    names = [n for n, _ in params_t] + [f"leaf {k}" for k in range(len(leaves))]
    for name, g, tg in zip(names, grads_r, grads_t, strict=True):
        _same(log, f"grad {name}", g, tg, _tol(dtype), strides=False)  # (undocumented)


def _train(rng, log, ours_mod, theirs_mod, x_r, x_t, dtype) -> None:
    """A few SGD steps on ``(output ** 2).mean()`` (of the padded output, for a packed
    input), parameters compared after each."""
    lr = float(rng.choice([0.05, 0.1, 0.5]))
    momentum = float(rng.choice([0.0, 0.9]))
    opt_r = rg.optim.SGD(ours_mod.parameters(), lr=lr, momentum=momentum)
    opt_t = torch.optim.SGD(theirs_mod.parameters(), lr=lr, momentum=momentum)
    log.append(f"  train lr={lr} momentum={momentum}")
    for step in range(3):
        # retrograd's gradients are the value backward() returns (API.md section 8)
        out_r, out_t = ours_mod(x_r)[0], theirs_mod(x_t)[0]
        if isinstance(out_t, torch.nn.utils.rnn.PackedSequence):
            out_r = rg.nn.utils.rnn.pad_packed_sequence(out_r)[0]
            out_t = torch.nn.utils.rnn.pad_packed_sequence(out_t)[0]
        opt_r.step((out_r**2).mean().backward())
        opt_t.zero_grad()
        (out_t**2).mean().backward()
        opt_t.step()
        for (name, p), (_, tp) in zip(ours_mod.named_parameters(), theirs_mod.named_parameters()):
            _same(log, f"step {step} {name}", p, tp, _tol(dtype))


def _layer_program(seed: int) -> None:
    rng = np.random.default_rng(seed)
    mode, kwargs = _layer_kwargs(rng)
    dtype = str(rng.choice(["float32", "float64"]))
    log = [f"seed {seed}: {mode} {kwargs} {dtype}"]
    ours_mod, theirs_mod = _twin_modules(rng, log, mode, kwargs, dtype)
    steps, batch = int(rng.integers(1, 5)), int(rng.integers(1, 4))
    unbatched = rng.random() < 0.2
    if unbatched:
        shape, hx_batch = (steps, kwargs["input_size"]), None
    elif kwargs["batch_first"]:
        shape, hx_batch = (batch, steps, kwargs["input_size"]), batch
    else:
        shape, hx_batch = (steps, batch, kwargs["input_size"]), batch
    bad = rng.random()  # inputs both refuse, sometimes
    if bad < 0.04:
        shape = (*shape[:-1], shape[-1] + 1)
    elif bad < 0.06:
        shape = (1, *shape) if rng.random() < 0.5 else shape[-1:]
    elif bad < 0.08:
        shape = (0, *shape[1:])
    log.append(f"  input {shape}")
    grad = dtype == "float64"
    x_dtype = dtype
    if 0.08 <= bad < 0.11:
        x_dtype = "float32" if dtype == "float64" else "float64"
        log.append(f"  input {x_dtype}")
    if bad > 0.97:
        x_dtype = "int64"
        log.append("  input int64")
    if x_dtype == "int64":
        x_r, x_t = (lib.tensor(rng.integers(-3, 3, shape)) for lib in (rg, torch))
    elif len(shape) == 3 and rng.random() < 0.3:
        # a non-contiguous input: the transpose of a contiguous one
        log.append("  input non-contiguous")
        x_r, x_t = _pair(rng, (shape[1], shape[0], shape[2]), x_dtype, grad)
        x_r, x_t = x_r.transpose(0, 1), x_t.transpose(0, 1)
    else:
        x_r, x_t = _pair(rng, shape, x_dtype, grad)
    hx_r, hx_t, leaves = _draw_hx(rng, log, mode, kwargs, hx_batch, dtype, grad)
    # torch reads hx[0] and hx[1] of an LSTM's hx and unpacks another's: a tensor given to
    # an LSTM is an IndexError or a RuntimeError by its first dimension there, a tuple given
    # to another a TypeError or a RuntimeError; retrograd refuses each by its kind
    loose = 0.11 <= bad < 0.13 and hx_r is not None
    if loose:
        hx_r, hx_t = _flat(hx_r)[0], _flat(hx_t)[0]  # one tensor for an LSTM, a tuple else
        if mode != "LSTM":
            hx_r, hx_t = (hx_r, hx_r), (hx_t, hx_t)
        log.append("  hx of the wrong kind")
    elif 0.13 <= bad < 0.15 and hx_r is not None:
        hx_r, hx_t = (
            tuple(h.to(rg.float32 if dtype == "float64" else rg.float64) for h in _flat(hx_r)),
            tuple(h.to(torch.float32 if dtype == "float64" else torch.float64)
                  for h in _flat(hx_t)),
        )  # fmt: skip
        hx_r, hx_t = (hx_r, hx_t) if mode == "LSTM" else (hx_r[0], hx_t[0])
        log.append("  hx of the other dtype")
    result = _both(log, lambda lib: (ours_mod if lib is rg else theirs_mod)(
        x_r if lib is rg else x_t, hx_r if lib is rg else hx_t), loose)  # fmt: skip
    if result is None:
        return
    outs = list(zip(_flat(result[0]), _flat(result[1]), strict=True))
    for k, (a, b) in enumerate(outs):
        _same(log, f"output {k}", a, b, _tol(dtype))
    if grad:
        _compare_grads(rng, log, outs, [(x_r, x_t), *leaves], ours_mod, theirs_mod, dtype)
    if rng.random() < 0.4:
        _train(rng, log, ours_mod, theirs_mod, x_r.detach(), x_t.detach(), dtype)


def _cell_program(seed: int) -> None:
    rng = np.random.default_rng(seed)
    mode = str(rng.choice(MODES))
    kwargs = {
        "input_size": int(rng.integers(1, 5)),
        "hidden_size": int(rng.integers(0 if rng.random() < 0.05 else 1, 5)),
        "bias": bool(rng.random() < 0.75),
    }
    if mode.startswith("RNN"):
        kwargs["nonlinearity"] = "relu" if mode == "RNN_RELU" else "tanh"
    dtype = str(rng.choice(["float32", "float64"]))
    log = [f"seed {seed}: {mode} cell {kwargs} {dtype}"]
    ours_mod, theirs_mod = _twin_modules(rng, log, mode, kwargs, dtype, cell=True)
    unbatched = rng.random() < 0.3
    batch = None if unbatched else int(rng.integers(1, 4))
    grad = dtype == "float64"
    hx_r, hx_t, leaves = _draw_hx(rng, log, mode, kwargs, batch, dtype, grad)
    outs, xs = [], []
    for step in range(int(rng.integers(1, 4))):
        shape = (kwargs["input_size"],) if unbatched else (batch, kwargs["input_size"])
        bad = rng.random()
        if bad < 0.03:
            shape = (*shape[:-1], shape[-1] + 1)
        elif bad < 0.05:
            shape = (2, *shape)
        elif bad < 0.07 and not unbatched:
            shape = (shape[0] + 1, shape[1])
        x_r, x_t = _pair(rng, shape, dtype, grad)
        xs.append((x_r, x_t))
        log.append(f"  step {step} input {shape}")
        result = _both(log, lambda lib, x_r=x_r, x_t=x_t, h_r=hx_r, h_t=hx_t: (
            ours_mod if lib is rg else theirs_mod)(x_r if lib is rg else x_t,
                                                   h_r if lib is rg else h_t))  # fmt: skip
        if result is None:
            return
        hx_r, hx_t = result
        for k, (a, b) in enumerate(zip(_flat(hx_r), _flat(hx_t), strict=True)):
            _same(log, f"step {step} state {k}", a, b, _tol(dtype))
            outs.append((a, b))
    if grad:
        _compare_grads(rng, log, outs, [*xs, *leaves], ours_mod, theirs_mod, dtype)


# -- packed sequences ----------------------------------------------------------------------
def _packed_fields(log, what, ours, theirs, dtype) -> None:
    _same(log, f"{what}.data", ours.data, theirs.data, _tol(dtype))
    for field in ("batch_sizes", "sorted_indices", "unsorted_indices"):
        _same(log, f"{what}.{field}", getattr(ours, field), getattr(theirs, field))


def _packed_program(seed: int) -> None:
    rng = np.random.default_rng(seed)
    dtype = str(rng.choice(["float32", "float64"]))
    batch, features = int(rng.integers(1, 5)), int(rng.integers(1, 4))
    lengths = [int(n) for n in rng.integers(1, 5, batch)]
    if rng.random() < 0.4:
        lengths.sort(reverse=True)
    enforce = bool(rng.random() < 0.5)
    batch_first = bool(rng.random() < 0.5)
    grad = dtype == "float64"
    log = [f"seed {seed}: lengths {lengths} enforce_sorted={enforce} batch_first={batch_first} "
           f"{dtype}"]  # fmt: skip
    trailing = (features,) if rng.random() < 0.8 else (features, 2)
    seqs = [_pair(rng, (n, *trailing), dtype, grad) for n in lengths]
    how = str(rng.choice(["pad_sequence", "pack_sequence", "padded"]))
    log.append(f"  {how}")
    leaves = list(seqs)
    if how == "pad_sequence":
        side = str(rng.choice(["right", "left"]))
        value = float(rng.choice([0.0, -1.5]))
        log.append(f"  padding_side={side} padding_value={value}")
        mixed = seqs
        if rng.random() < 0.2 and batch > 1:  # a sequence of another dtype, not the first
            log.append("  mixed dtypes")
            mixed = [seqs[0], *((a.double(), b.double()) if dtype == "float32" else
                                (a.float(), b.float()) for a, b in seqs[1:])]  # fmt: skip
        result = _both(log, lambda lib: lib.nn.utils.rnn.pad_sequence(
            [s[0] if lib is rg else s[1] for s in mixed], batch_first=batch_first,
            padding_value=value, padding_side=side))  # fmt: skip
        if result is None:
            return
        _same(log, "pad_sequence", *result)
        if side == "left":
            return
    if how == "pack_sequence":
        result = _both(log, lambda lib: lib.nn.utils.rnn.pack_sequence(
            [s[0] if lib is rg else s[1] for s in seqs], enforce_sorted=enforce))  # fmt: skip
    else:
        longest = max(lengths) + int(rng.integers(0, 2))
        bad = rng.random()
        if bad < 0.04:
            longest -= 1  # a length longer than the input: both refuse
        elif bad < 0.07:
            lengths[int(rng.integers(batch))] = int(rng.choice([0, -1]))
            log.append(f"  lengths {lengths}")
        padded = np.zeros((batch, max(longest, 1), features), dtype)
        for b, n in enumerate(lengths):
            n = max(0, min(n, longest))
            padded[b, :n] = rng.standard_normal((n, features))
        if not batch_first:
            padded = padded.transpose(1, 0, 2).copy()
        x_r, x_t = (lib.tensor(padded, requires_grad=grad) for lib in (rg, torch))
        leaves = [(x_r, x_t)]
        as_tensor = rng.random() < 0.5
        if 0 < longest < max(lengths):
            # torch packs lengths longer than the input without a check, into a packed batch
            # whose batch_sizes count more steps than its data holds: retrograd refuses it
            with pytest.raises(rg.ShapeError, match="longer than the input"):
                rg.nn.utils.rnn.pack_padded_sequence(x_r, lengths, batch_first, enforce)
            return
        result = _both(log, lambda lib: lib.nn.utils.rnn.pack_padded_sequence(
            x_r if lib is rg else x_t, lib.tensor(lengths) if as_tensor else lengths,
            batch_first=batch_first, enforce_sorted=enforce))  # fmt: skip
    if result is None:
        return
    packed_r, packed_t = result
    _packed_fields(log, "packed", packed_r, packed_t, dtype)
    conversion = str(rng.choice(["none", "double", "float", "to", "made"]))
    if conversion == "made":  # PackedSequence(data, batch_sizes[, sorted_indices])
        fields = 2 if packed_t.sorted_indices is None else int(rng.integers(2, 4))
        log.append(f"  PackedSequence(...) of {fields} fields")
        packed_r = rg.nn.utils.rnn.PackedSequence(*packed_r[:fields])
        packed_t = torch.nn.utils.rnn.PackedSequence(*packed_t[:fields])
        _packed_fields(log, "made", packed_r, packed_t, dtype)
    elif conversion != "none":
        log.append(f"  .{conversion}()")
        before_r, before_t = packed_r, packed_t
        if conversion == "to":
            packed_r, packed_t = packed_r.to(rg.float64), packed_t.to(torch.float64)
        else:
            packed_r, packed_t = getattr(packed_r, conversion)(), getattr(packed_t, conversion)()
        same_r, same_t = packed_r is before_r, packed_t is before_t
        if same_r != same_t:
            raise Mismatch(f"{log}\nreturned its input: retrograd {same_r}, torch {same_t}")
        dtype = "float32" if conversion == "float" else "float64"
        _packed_fields(log, "converted", packed_r, packed_t, dtype)
    outs = []
    mod_r = mod_t = None
    if rng.random() < 0.6:
        mode, kwargs = _layer_kwargs(rng)
        kwargs["input_size"], kwargs["batch_first"] = features, batch_first
        log.append(f"  through {mode} {kwargs}")
        mod_r, mod_t = _twin_modules(rng, log, mode, kwargs, dtype)
        # torch checks no c_0 of an LSTM given a packed batch (it runs on a wrong one: more
        # layers, a projection's size), and checks hx of a batch packed unsorted after its
        # permutation (a larger batch passes): retrograd refuses both, so no wrong shape
        wrong = mode != "LSTM" and packed_t.sorted_indices is None
        hx_r, hx_t, hx_leaves = _draw_hx(rng, log, mode, kwargs, batch, dtype, grad, wrong)
        leaves += hx_leaves
        result = _both(log, lambda lib: (mod_r if lib is rg else mod_t)(
            packed_r if lib is rg else packed_t, hx_r if lib is rg else hx_t))  # fmt: skip
        if result is None:
            return
        packed_in = (packed_r, packed_t)
        (packed_r, state_r), (packed_t, state_t) = result
        _packed_fields(log, "output", packed_r, packed_t, dtype)
        for k, (a, b) in enumerate(zip(_flat(state_r), _flat(state_t), strict=True)):
            _same(log, f"final state {k}", a, b, _tol(dtype))
            outs.append((a, b))
        if rng.random() < 0.3:  # a second module trained on the packed input
            train_r, train_t = _twin_modules(rng, log, mode, dict(kwargs), dtype)
            data = (packed_in[0].data.detach(), packed_in[1].data.detach())
            _train(rng, log, train_r, train_t, packed_in[0]._replace(data=data[0]),
                   packed_in[1]._replace(data=data[1]), dtype)  # fmt: skip
    unpack_first = bool(rng.random() < 0.5)
    value = float(rng.choice([0.0, 2.5]))
    total = None if rng.random() < 0.5 else max(lengths) + int(rng.integers(-1, 3))
    log.append(f"  pad_packed_sequence batch_first={unpack_first} value={value} total={total}")
    result = _both(log, lambda lib: lib.nn.utils.rnn.pad_packed_sequence(
        packed_r if lib is rg else packed_t, batch_first=unpack_first, padding_value=value,
        total_length=total))  # fmt: skip
    if result is not None:
        (padded_r, lengths_r), (padded_t, lengths_t) = result
        _same(log, "padded", padded_r, padded_t, _tol(dtype))
        _same(log, "lengths", lengths_r, lengths_t)
        outs.append((padded_r, padded_t))
        pieces_r = rg.nn.utils.rnn.unpad_sequence(padded_r, lengths_r, unpack_first)
        pieces_t = torch.nn.utils.rnn.unpad_sequence(padded_t, lengths_t, unpack_first)
        _same(log, "padded after unpad_sequence", padded_r, padded_t, _tol(dtype))
        for k, (a, b) in enumerate(zip(pieces_r, pieces_t, strict=True)):
            _same(log, f"unpad_sequence {k}", a, b, _tol(dtype))
    pieces_r = rg.nn.utils.rnn.unpack_sequence(packed_r)
    pieces_t = torch.nn.utils.rnn.unpack_sequence(packed_t)
    for k, (a, b) in enumerate(zip(pieces_r, pieces_t, strict=True)):
        _same(log, f"unpack_sequence {k}", a, b, _tol(dtype))
        outs.append((a, b))
    if grad and outs:
        _compare_grads(rng, log, outs, leaves, *(
            (mod_r, mod_t) if mod_r is not None else (rg.nn.Module(), torch.nn.Module())),
            dtype)  # fmt: skip


PROGRAMS = {"layer": _layer_program, "cell": _cell_program, "packed": _packed_program}
BLOCKS = 4


@pytest.mark.parametrize("block", range(BLOCKS))
@pytest.mark.parametrize("family", sorted(PROGRAMS))
def test_recurrent_programs_in_lockstep_with_torch(family: str, block: int) -> None:
    torch.manual_seed(62)
    base = {"layer": 620_000, "cell": 621_000, "packed": 622_000}[family]
    count = {"layer": 10, "cell": 12, "packed": 12}[family]
    for seed in range(base + count * block, base + count * (block + 1)):
        PROGRAMS[family](seed)
