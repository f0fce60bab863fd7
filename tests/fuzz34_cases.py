"""Generators of round 34 of the differential fuzzer against PyTorch (``tests/test_fuzz34.py``):
how real code calls the names ranked about 151 to 500 by use in
``shared/torch_surface/names.tsv`` that round 31 (``tests/fuzz31_cases.py``) left out.

Each generator draws ``(description, program, operands)`` in round 31's form and is checked by
round 31's ``check``: both libraries must agree on raising or not and on every output's type,
dtype, shape and values, and on the gradients of the float64 outputs.

- ``modules``: the ``nn`` constructors of that range (``Conv1d``, ``Conv3d``,
  ``ConvTranspose2d``, ``PReLU``, ``InstanceNorm2d``, ``GroupNorm``, ``BatchNorm3d``,
  ``Dropout2d``, the pads, ``Unfold``, ``MaxPool3d``, ``AdaptiveAvgPool3d``, ``PixelShuffle``,
  the activations, the losses, ``LSTMCell``, ``RNN``, ``LSTM``) with torch's keyword names,
  drawn positional or keyword in torch's order, defaults left out: the ``repr``, the
  parameter and buffer names and shapes, the forward on the same weights (both set from NumPy),
  the parameter gradients and the buffers after a training forward.
- ``optimizers``: ``SGD``, ``AdamW``, ``Adadelta``, ``RAdam``, ``RMSprop`` with their keyword
  options, ``StepLR``/``LambdaLR`` beside them: the parameters and learning rates after a few
  steps, the ``param_groups`` defaults.
- ``ops``: ``mm``, ``diag``, ``bucketize``, ``expand_as``, ``type_as``, ``reshape_as``, the
  dtype conversions (``double``, ``int``, ``bool``, ``float``), ``scalar_tensor``,
  ``from_numpy``, ``Tensor.unfold``, ``F.unfold``, ``F.batch_norm``, ``F.normalize``,
  ``pad_sequence``, ``sqrt_``, ``detach_``, ``torch.clip``, ``torch.neg``, ``unique``...
- ``init``: ``nn.init``'s ``orthogonal_``, ``xavier_uniform_``, ``xavier_normal_``,
  ``kaiming_uniform_``, ``trunc_normal_``, ``uniform_`` with their keyword names: the same
  tensor returned, its dtype and shape, the bounds of the draw (compared as booleans, the
  values being random), ``W Wᵀ = gain² I`` for ``orthogonal_``, and the errors.
- ``random``: ``Tensor.uniform_``, ``normal_``, ``random_``, ``bernoulli_``, ``randperm``,
  ``multinomial``, ``randn_like``, ``torch.normal``: dtype, shape, range, as booleans.
"""

from __future__ import annotations

import inspect

import numpy as np

# (check and Mismatch are round 31's, read through this module by tests/test_fuzz34.py)
from fuzz31_cases import (
    NP,
    OMIT,
    D,
    Mismatch,
    T,
    _dim,
    _values,
    call,
    check,
    describe_call,
    resolve,
)

__all__ = ["GENERATORS", "Mismatch", "check"]


def _torch():
    import torch

    return torch


def _ordered(torch_callable, values: dict, keyword_only=(), skip: int = 0) -> list:
    """``values`` as round 31's ``[(name, value, keyword_only)]`` in ``torch_callable``'s own
    parameter order (read with ``inspect``, so the positional order is torch's), after its
    first ``skip`` parameters (the operands the program passes itself)."""
    order = [p for p in inspect.signature(torch_callable).parameters if p != "self"][skip:]
    kinds = inspect.signature(torch_callable).parameters
    missing = [k for k in values if k not in order]
    assert not missing, f"{torch_callable}: no parameters {missing}"
    out = []
    for name in order:
        if kinds[name].kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
            continue
        kw = name in keyword_only or kinds[name].kind == inspect.Parameter.KEYWORD_ONLY
        # (a parameter left out stops the positional ones there)
        out.append((name, values.get(name, OMIT), kw))
    return out


def _arguments(lib, params, n_positional: int) -> tuple[list, dict]:
    """The first ``n_positional`` of ``params`` (up to the first left out) positional, the
    rest by keyword."""
    args, kwargs = [], {}
    for k, (pname, value, kw_only) in enumerate(params):
        if value is OMIT:
            n_positional = min(n_positional, k)
            continue
        value = _resolve(lib, value)
        if k < n_positional and not kw_only:
            args.append(value)
        else:
            kwargs[pname] = value
    return args, kwargs


def _construct(lib, path: str, params, n_positional: int):
    owner = lib
    for part in path.split("."):
        owner = getattr(owner, part)
    args, kwargs = _arguments(lib, params, n_positional)
    return owner(*args, **kwargs)


def _describe_ctor(path, params, n_positional) -> str:
    shown = []
    for k, (pname, value, kw_only) in enumerate(params):
        if value is OMIT:
            n_positional = min(n_positional, k)
            continue
        shown.append(f"{value!r}" if k < n_positional and not kw_only else f"{pname}={value!r}")
    return f"{path}({', '.join(shown)})"


def _resolve(lib, v):
    return resolve(lib, v)


def _m(rng, value, p=0.6):
    """``value`` or left out (the default)."""
    return value if rng.random() < p else OMIT


def _int_or_tuple(rng, value, n):
    r = rng.random()
    if r < 0.5:
        return value
    return tuple([value] * n) if r < 0.8 else [value] * n


# -- modules ---------------------------------------------------------------------------------------
def _conv_spec(rng, n):
    cls = {1: "Conv1d", 3: "Conv3d"}.get(n, "Conv1d") if n != 2 else "ConvTranspose2d"
    groups = int(rng.choice([1, 1, 2]))
    cin, cout = 2 * groups, int(rng.choice([1, 2])) * groups
    k = int(rng.integers(1, 3))
    stride = int(rng.integers(1, 3))
    values = {
        "in_channels": cin,
        "out_channels": cout,
        "kernel_size": _int_or_tuple(rng, k, n),
        "stride": _m(rng, _int_or_tuple(rng, stride, n), 0.5),
        "dilation": _m(rng, int(rng.integers(1, 3)), 0.3),
        "groups": _m(rng, groups, 0.9) if groups > 1 else _m(rng, 1, 0.2),
        "bias": _m(rng, bool(rng.random() < 0.5), 0.4),
    }
    if cls == "ConvTranspose2d":
        values["padding"] = _m(rng, _int_or_tuple(rng, int(rng.integers(0, 2)), n), 0.5)
        # (an output_padding reaching stride and dilation: retrograd's documented extension)
        if values["stride"] not in (OMIT, 1, (1, 1), [1, 1]) or values["dilation"] not in (OMIT, 1):
            values["output_padding"] = _m(rng, 1, 0.5)
    else:
        padding = rng.choice(["int", "same", "valid", "omit"])
        if padding == "int":
            values["padding"] = _int_or_tuple(rng, int(rng.integers(0, 2)), n)
        elif padding != "omit":
            values["padding"] = str(padding)
        values["padding_mode"] = _m(
            rng, str(rng.choice(["zeros", "reflect", "replicate", "circular"])), 0.3
        )
    spatial = {1: 5, 2: 3, 3: 3}[n]
    shape = (int(rng.integers(1, 3)), cin) + (spatial,) * n
    if rng.random() < 0.2:
        shape = shape[1:]  # (unbatched)
    return cls, values, [shape], None


def _norm_spec(rng):
    cls = str(rng.choice(["InstanceNorm2d", "GroupNorm", "BatchNorm3d"]))
    c = int(rng.choice([2, 4]))
    if cls == "GroupNorm":
        values = {
            "num_groups": int(rng.choice([1, 2])),
            "num_channels": c,
            "eps": _m(rng, 1e-3, 0.3),
            "affine": _m(rng, bool(rng.random() < 0.5), 0.4),
        }
        shape = (2, c, 3)
    else:
        values = {
            "num_features": c,
            "eps": _m(rng, 1e-3, 0.3),
            "momentum": _m(rng, [0.3, None][int(rng.integers(2))], 0.4),
            "affine": _m(rng, bool(rng.random() < 0.5), 0.4),
            "track_running_stats": _m(rng, bool(rng.random() < 0.5), 0.4),
        }
        shape = (2, c, 2, 3) if cls == "InstanceNorm2d" else (2, c, 2, 1, 2)
        if cls == "InstanceNorm2d" and rng.random() < 0.2:
            shape = shape[1:]
    if rng.random() < 0.2:
        values["bias"] = bool(rng.random() < 0.5)
    return cls, values, [shape], None


def _shape_module_spec(rng):
    cls = str(
        rng.choice(
            [
                "ZeroPad2d",
                "ReflectionPad2d",
                "Unfold",
                "MaxPool3d",
                "AdaptiveAvgPool3d",
                "PixelShuffle",
                "Dropout2d",
                "PReLU",
            ]
        )
    )
    if cls in ("ZeroPad2d", "ReflectionPad2d"):
        pad = int(rng.integers(0, 3))
        padding = pad if rng.random() < 0.5 else tuple(int(v) for v in rng.integers(0, 3, 4))
        if rng.random() < 0.2:
            padding = list(padding) if isinstance(padding, tuple) else -1
        return cls, {"padding": padding}, [(int(rng.integers(1, 3)), 3, 3, 4)], None
    if cls == "Unfold":
        values = {
            "kernel_size": _int_or_tuple(rng, int(rng.integers(1, 3)), 2),
            "dilation": _m(rng, int(rng.integers(1, 3)), 0.3),
            "padding": _m(rng, int(rng.integers(0, 2)), 0.4),
            "stride": _m(rng, _int_or_tuple(rng, int(rng.integers(1, 3)), 2), 0.4),
        }
        shape = (2, 2, 4, 4) if rng.random() < 0.8 else (2, 4, 4)
        return cls, values, [shape], None
    if cls == "MaxPool3d":
        values = {
            "kernel_size": _int_or_tuple(rng, int(rng.integers(1, 3)), 3),
            "stride": _m(rng, _int_or_tuple(rng, int(rng.integers(1, 3)), 3), 0.4),
            "padding": _m(rng, int(rng.integers(0, 2)), 0.3),
            "dilation": _m(rng, int(rng.integers(1, 3)), 0.2),
            "return_indices": _m(rng, bool(rng.random() < 0.5), 0.3),
            "ceil_mode": _m(rng, bool(rng.random() < 0.5), 0.3),
        }
        shape = (1, 2, 3, 4, 3) if rng.random() < 0.8 else (2, 3, 4, 3)
        return cls, values, [shape], None
    if cls == "AdaptiveAvgPool3d":
        sizes = [int(rng.integers(1, 4)) for _ in range(3)]
        r = rng.random()
        output_size = (
            sizes[0]
            if r < 0.3
            else tuple(s if rng.random() < 0.7 else None for s in sizes)
            if r < 0.8
            else list(sizes)
        )
        return cls, {"output_size": output_size}, [(1, 2, 3, 4, 2)], None
    if cls == "PixelShuffle":
        factor = int(rng.choice([1, 2]))
        c = int(rng.choice([4, 8, 3]))
        return cls, {"upscale_factor": factor}, [(1, c, 2, 3)], None
    if cls == "Dropout2d":
        p = float(rng.choice([0.0, 1.0, 0.5]))
        values = {"p": _m(rng, p, 0.7)}
        values["inplace"] = _m(rng, False, 0.2)
        random_mask = p not in (0.0, 1.0) or values["p"] is OMIT
        return cls, values, [(2, 3, 2, 2)], "eval" if random_mask or rng.random() < 0.5 else None
    n = int(rng.choice([1, 3]))
    values = {"num_parameters": _m(rng, n, 0.8 if n > 1 else 0.3), "init": _m(rng, -0.5, 0.4)}
    return cls, values, [(2, 3, 2)], None


def _activation_spec(rng):
    cls = str(rng.choice(["SiLU", "Hardswish", "ReLU6", "Hardsigmoid"]))
    return cls, {"inplace": _m(rng, False, 0.3)}, [_small_shape(rng)], None


def _small_shape(rng):
    return tuple(int(rng.integers(1, 4)) for _ in range(int(rng.integers(0, 4))))


def _loss_spec(rng):
    cls = str(rng.choice(["BCELoss", "L1Loss", "CrossEntropyLoss", "BCEWithLogitsLoss", "NLLLoss"]))
    values = {"reduction": _m(rng, str(rng.choice(["mean", "sum", "none"])), 0.6)}
    if cls in ("CrossEntropyLoss", "NLLLoss"):
        c = 3
        n = int(rng.integers(1, 4))
        if rng.random() < 0.3:
            values["weight"] = T(rng.uniform(0.5, 2, c), "float64")
        if rng.random() < 0.3:
            values["ignore_index"] = int(rng.choice([0, 1, -100]))
        if cls == "CrossEntropyLoss" and rng.random() < 0.3:
            values["label_smoothing"] = float(rng.choice([0.0, 0.1]))
        target = T(rng.integers(0, c, n), "int64")
        if cls == "CrossEntropyLoss" and rng.random() < 0.2:
            target = T(rng.dirichlet(np.ones(c), n), "float64")
        return cls, values, [(n, c)], target
    shape = _small_shape(rng)
    if cls == "BCELoss" and rng.random() < 0.3:
        values["weight"] = T(rng.uniform(0.5, 2, shape[-1:]), "float64")
    if cls == "BCEWithLogitsLoss" and rng.random() < 0.3:
        values["pos_weight"] = T(rng.uniform(0.5, 2, shape[-1:]), "float64")
    target = T(rng.uniform(0, 1, shape), "float64")
    return cls, values, [shape], target


def _rnn_spec(rng):
    cls = str(rng.choice(["LSTMCell", "RNN", "LSTM"]))
    values = {"input_size": 2, "hidden_size": int(rng.choice([2, 3]))}
    values["bias"] = _m(rng, bool(rng.random() < 0.5), 0.3)
    if cls == "LSTMCell":
        return cls, values, [(int(rng.integers(1, 3)), 2)], None
    values["num_layers"] = _m(rng, int(rng.choice([1, 2])), 0.5)
    values["batch_first"] = _m(rng, bool(rng.random() < 0.5), 0.5)
    values["bidirectional"] = _m(rng, bool(rng.random() < 0.5), 0.4)
    if cls == "RNN":
        values["nonlinearity"] = _m(rng, str(rng.choice(["tanh", "relu"])), 0.4)
    elif rng.random() < 0.2:
        values["proj_size"] = 1
    shape = (3, 2, 2) if rng.random() < 0.8 else (3, 2)
    return cls, values, [shape], None


def _transformer_spec(rng):
    d = int(rng.choice([2, 4]))
    values = {
        "d_model": d,
        "nhead": int(rng.choice([1, 2])),
        "dim_feedforward": int(rng.choice([3, 5])),
        "dropout": 0.0,
        "activation": _m(rng, str(rng.choice(["relu", "gelu"])), 0.5),
        "layer_norm_eps": _m(rng, 1e-3, 0.3),
        "batch_first": _m(rng, bool(rng.random() < 0.5), 0.6),
        "norm_first": _m(rng, bool(rng.random() < 0.5), 0.5),
        "bias": _m(rng, bool(rng.random() < 0.5), 0.3),
    }
    shape = (3, 2, d) if rng.random() < 0.8 else (3, d)
    return "TransformerEncoderLayer", values, [shape], "eval"


# RNN and LSTM take ``*args, **kwargs``: their documented order
_RNN_ORDER = {
    "RNN": [
        "input_size",
        "hidden_size",
        "num_layers",
        "nonlinearity",
        "bias",
        "batch_first",
        "dropout",
        "bidirectional",
    ],
    "LSTM": [
        "input_size",
        "hidden_size",
        "num_layers",
        "bias",
        "batch_first",
        "dropout",
        "bidirectional",
        "proj_size",
    ],
}


def _initial_state(rng, cls, values, shape):
    """The ``hx`` (or ``(h, c)``) a recurrent module's forward is handed."""
    hidden = values["hidden_size"]
    if cls == "LSTMCell":
        return [_values(rng, shape[:-1] + (hidden,)) for _ in range(2)]
    layers = values["num_layers"] if values["num_layers"] is not OMIT else 1
    directions = 2 if values["bidirectional"] is True else 1
    batched = len(shape) == 3
    batch = (shape[0] if values["batch_first"] is True else shape[1]) if batched else None
    lead = (layers * directions,) + ((batch,) if batched else ())
    proj = values.get("proj_size", OMIT)
    h = _values(rng, lead + ((proj if proj is not OMIT else hidden),))
    if cls == "RNN":
        return [h]
    return [h, _values(rng, lead + (hidden,))]


def _module_params(cls, values):
    torch = _torch()
    if cls in _RNN_ORDER:
        return [(n, values.get(n, OMIT), False) for n in _RNN_ORDER[cls]]
    return _ordered(getattr(torch.nn, cls).__init__, values)


def _fill(lib, module, seed):
    """Every parameter and float buffer set from NumPy (the same in both libraries)."""
    rng = np.random.default_rng(seed)
    with lib.no_grad():
        for _, p in sorted(module.named_parameters()):
            p.copy_(lib.tensor(rng.uniform(-1, 1, tuple(p.shape))))
        for name, b in sorted(module.named_buffers()):
            if b.dtype.is_floating_point:
                low = 0.5 if "var" in name else -1
                b.copy_(lib.tensor(rng.uniform(low, 1, tuple(b.shape))))


def modules(rng):
    pick = rng.random()
    if pick < 0.25:
        cls, values, shapes, extra = _conv_spec(rng, int(rng.choice([1, 2, 3])))
    elif pick < 0.4:
        cls, values, shapes, extra = _norm_spec(rng)
    elif pick < 0.6:
        cls, values, shapes, extra = _shape_module_spec(rng)
    elif pick < 0.7:
        cls, values, shapes, extra = _activation_spec(rng)
    elif pick < 0.85:
        cls, values, shapes, extra = _loss_spec(rng)
    elif pick < 0.96:
        cls, values, shapes, extra = _rnn_spec(rng)
    else:
        cls, values, shapes, extra = _transformer_spec(rng)
    double = rng.random() < 0.7
    for value in values.values():
        if isinstance(value, T) and not double:
            value.dtype = "float32"  # (the module's own dtype, as torch requires)
    params = _module_params(cls, values)
    n_positional = int(rng.integers(0, len(params) + 1))
    dtype = "float64" if double else "float32"
    x_values = _values(rng, shapes[0])
    if cls == "BCELoss":
        x_values = rng.uniform(0.05, 0.95, shapes[0])
    if cls == "NLLLoss":
        x_values = -rng.uniform(0.1, 3, shapes[0])
    operands = [(x_values, dtype, double)]
    mode = extra if isinstance(extra, str) else None
    target = extra if isinstance(extra, T) else None
    train_forward = cls in ("InstanceNorm2d", "BatchNorm3d") and rng.random() < 0.5
    fill_seed = int(rng.integers(1 << 30))
    state = None  # (an initial state handed to a recurrent module's forward)
    if cls in ("LSTMCell", "RNN", "LSTM") and rng.random() < 0.4:
        state = _initial_state(rng, cls, values, shapes[0])
    causal = cls == "TransformerEncoderLayer" and rng.random() < 0.4
    wrapped = cls == "TransformerEncoderLayer" and rng.random() < 0.3

    def program(lib, x):
        module = _construct(lib, f"nn.{cls}", params, n_positional)
        if wrapped:
            module = lib.nn.TransformerEncoder(module, num_layers=2, enable_nested_tensor=False)
        if double:
            module = module.double()
        _fill(lib, module, fill_seed)
        if mode == "eval" or (cls in ("InstanceNorm2d", "BatchNorm3d") and not train_forward):
            module.eval()
        names = [
            (n, tuple(p.shape), str(p.dtype).split(".")[-1]) for n, p in module.named_parameters()
        ]
        buffers = [(n, tuple(b.shape)) for n, b in module.named_buffers()]
        if target is not None:
            t = resolve(lib, target)
            out = module(x, t.to(x.dtype) if t.dtype.is_floating_point else t)
        elif state is not None:
            hx = [lib.tensor(a).to(x.dtype) for a in state]
            out = module(x, hx[0] if len(hx) == 1 else tuple(hx))
        elif causal:
            n = x.shape[-3] if x.ndim == 3 and values["batch_first"] is not True else x.shape[-2]
            mask = lib.nn.Transformer.generate_square_subsequent_mask(n, dtype=x.dtype)
            out = module(x, mask=mask, is_causal=True) if wrapped else module(x, src_mask=mask)
        else:
            out = module(x)
        first = out[0] if isinstance(out, tuple) else out
        grads = []
        parameters = [p for _, p in module.named_parameters()]
        if parameters and first.requires_grad:
            weights = lib.tensor(np.random.default_rng(5).uniform(-1, 1, tuple(first.shape)))
            loss = (first * weights.to(first.dtype)).sum()
            found = lib.autograd.grad(loss, parameters, retain_graph=True, allow_unused=True)
            grads = [g if g is not None else "unused" for g in found]
        after = [b.detach().clone() for _, b in module.named_buffers()]
        return repr(module), names, buffers, out, grads, after

    desc = f"{_describe_ctor('nn.' + cls, params, n_positional)}{'.double()' if double else ''}"
    desc += f"({mode or ''} x{shapes[0]}{', target' if target is not None else ''}"
    desc += f"{', hx' if state is not None else ''}{', causal' if causal else ''})"
    desc += " in TransformerEncoder(num_layers=2)" if wrapped else ""
    return desc, program, operands


# -- optimizers ------------------------------------------------------------------------------------
def _optimizer_values(rng, name):
    lr = float(rng.choice([0.1, 0.01, 0.5]))
    values = {"lr": _m(rng, lr, 0.8)}
    if name == "SGD":
        momentum = float(rng.choice([0.0, 0.9]))
        values["momentum"] = _m(rng, momentum, 0.7)
        values["dampening"] = _m(rng, float(rng.choice([0.0, 0.1])), 0.3)
        values["nesterov"] = _m(rng, bool(momentum > 0 and rng.random() < 0.5), 0.4)
        values["weight_decay"] = _m(rng, 0.1, 0.3)
        values["maximize"] = _m(rng, True, 0.2)
    elif name == "AdamW":
        values["betas"] = _m(rng, (0.8, 0.99) if rng.random() < 0.7 else [0.5, 0.9], 0.4)
        values["eps"] = _m(rng, 1e-6, 0.3)
        values["weight_decay"] = _m(rng, float(rng.choice([0.0, 0.1])), 0.4)
        values["amsgrad"] = _m(rng, bool(rng.random() < 0.5), 0.4)
        values["maximize"] = _m(rng, True, 0.2)
    elif name == "Adadelta":
        values["rho"] = _m(rng, 0.8, 0.4)
        values["eps"] = _m(rng, 1e-4, 0.3)
        values["weight_decay"] = _m(rng, 0.1, 0.3)
        values["maximize"] = _m(rng, True, 0.2)
    elif name == "RAdam":
        values["betas"] = _m(rng, (0.8, 0.99), 0.4)
        values["eps"] = _m(rng, 1e-6, 0.3)
        values["weight_decay"] = _m(rng, 0.1, 0.3)
        values["decoupled_weight_decay"] = _m(rng, bool(rng.random() < 0.5), 0.4)
        values["maximize"] = _m(rng, True, 0.2)
    else:
        values["alpha"] = _m(rng, 0.9, 0.4)
        values["eps"] = _m(rng, 1e-6, 0.3)
        values["weight_decay"] = _m(rng, 0.1, 0.3)
        values["momentum"] = _m(rng, 0.5, 0.4)
        values["centered"] = _m(rng, bool(rng.random() < 0.5), 0.4)
        values["maximize"] = _m(rng, True, 0.2)
    if rng.random() < 0.04:
        values["lr"] = -0.1  # (refused by both)
    return {k: v for k, v in values.items() if v is not OMIT}


OPTIMIZERS = ["SGD", "AdamW", "Adadelta", "RAdam", "RMSprop"]


def optimizers(rng):
    torch = _torch()
    name = str(rng.choice(OPTIMIZERS))
    values = _optimizer_values(rng, name)
    params = _ordered(getattr(torch.optim, name).__init__, values, skip=1)
    n_positional = int(rng.integers(0, len(params) + 1))
    scheduler = str(rng.choice(["none", "StepLR", "LambdaLR"]))
    step_size, gamma = int(rng.integers(1, 3)), float(rng.choice([0.5, 0.1]))
    sched_kw = rng.random() < 0.5
    groups = rng.random() < 0.3
    steps = int(rng.integers(1, 4))
    w0 = _values(rng, (2, 3))
    b0 = _values(rng, (3,))
    data = _values(rng, (4, 2))

    def program(lib):
        w = lib.tensor(w0.copy(), requires_grad=True)
        b = lib.tensor(b0.copy(), requires_grad=True)
        where = [{"params": [w]}, {"params": [b], "lr": 0.05}] if groups else [w, b]
        args, kwargs = _arguments(lib, params, n_positional)
        opt = getattr(lib.optim, name)(where, *args, **kwargs)
        sched = None
        if scheduler == "StepLR":
            cls = lib.optim.lr_scheduler.StepLR
            sched = (
                cls(opt, step_size=step_size, gamma=gamma)
                if sched_kw
                else cls(opt, step_size, gamma)
            )
        elif scheduler == "LambdaLR":
            cls = lib.optim.lr_scheduler.LambdaLR
            sched = (
                cls(opt, lr_lambda=lambda e: 1.0 / (e + 1))
                if sched_kw
                else cls(opt, lambda e: 0.5**e)
            )
        x = lib.tensor(data)
        lrs = []
        for _ in range(steps):
            opt.zero_grad()
            loss = ((x @ w + b).tanh() ** 2).sum()
            grads = loss.backward()
            opt.step() if grads is None else opt.step(grads)  # (retrograd's gradients are a value)
            if sched is not None:
                sched.step()
                lrs.append(sched.get_last_lr())
        defaults = sorted(
            (k, v)
            for k, v in opt.param_groups[0].items()
            if k
            in (
                "lr",
                "momentum",
                "betas",
                "eps",
                "weight_decay",
                "amsgrad",
                "nesterov",
                "dampening",
                "rho",
                "alpha",
                "centered",
                "maximize",
                "decoupled_weight_decay",
                "initial_lr",
            )
        )
        # (numbers as floats: torch keeps its ``weight_decay=0`` default an int)
        defaults = [
            (k, tuple(v) if isinstance(v, list | tuple) else v if isinstance(v, bool) else float(v))
            for k, v in defaults
        ]
        state_keys = sorted(opt.state_dict()["state"].get(0, {}).keys())
        # (as NumPy: retrograd's detached leaf keeps requires_grad, API.md section 3)
        return w.detach().numpy().copy(), b.detach().numpy().copy(), lrs, defaults, state_keys

    desc = f"{_describe_ctor('optim.' + name, [('params', 'P', False)] + params, n_positional + 1)}"
    desc += f" groups={groups} {scheduler} x{steps}"
    return desc, program, []


# -- ops -------------------------------------------------------------------------------------------
def _int_values(rng, shape):
    return np.round(_values(rng, shape)).astype(np.int64)


def _operand(rng, shape, dtype):
    values = _values(rng, shape)
    if dtype == "int64":
        values = np.round(values).astype(np.int64)
    elif dtype == "bool":
        values = values > 0
    return (values, dtype, dtype == "float64")


def ops(rng):
    name = str(rng.choice(sorted(_OPS)))
    return _OPS[name](rng)


def _dtype_pick(rng, pool=("float64", "float64", "float32", "int64", "bool")):
    return str(rng.choice(pool))


def _op_mm(rng):
    n, k, m = (int(v) for v in rng.integers(1, 4, 3))
    da, db = (
        _dtype_pick(rng, ("float64", "float64", "float32", "int64")),
        _dtype_pick(rng, ("float64", "float64", "float32", "int64")),
    )
    if rng.random() < 0.1:
        k2 = k + 1
    else:
        k2 = k
    form = str(rng.choice(["function", "method", "mat2_kw", "input_kw"]))
    shape_a = (n, k) if rng.random() > 0.05 else (k,)

    def program(lib, a, b):
        if form == "method":
            return a.mm(b)
        if form == "mat2_kw":
            return lib.mm(a, mat2=b)
        if form == "input_kw":
            return lib.mm(input=a, mat2=b)
        return lib.mm(a, b)

    return (
        f"mm {form} {shape_a}:{da} @ {(k2, m)}:{db}",
        program,
        [_operand(rng, shape_a, da), _operand(rng, (k2, m), db)],
    )


def _op_diag(rng):
    nd = int(rng.choice([0, 1, 2, 2, 3]))
    shape = tuple(int(v) for v in rng.integers(1, 4, nd))
    dtype = _dtype_pick(rng)
    diagonal = _m(rng, int(rng.integers(-3, 4)), 0.6)
    params = [("diagonal", diagonal, False)]
    style = (str(rng.choice(["method", "function", "input_kw"])), int(rng.integers(0, 2)))

    def program(lib, x):
        return call(lib, style, "diag", x, params)

    return (
        f"{describe_call(style, 'diag', params)} x{shape}:{dtype}",
        program,
        [_operand(rng, shape, dtype)],
    )


def _op_bucketize(rng):
    shape = _small_shape(rng)
    boundaries = np.sort(np.round(rng.standard_normal(int(rng.integers(1, 5))) * 2, 1))
    bdtype = str(rng.choice(["float64", "float32", "int64"]))
    if bdtype == "int64":
        boundaries = np.round(boundaries).astype(np.int64)
    xdtype = _dtype_pick(rng, ("float64", "float32", "int64"))
    values = {
        "boundaries": T(boundaries, bdtype),
        "out_int32": _m(rng, bool(rng.random() < 0.5), 0.4),
        "right": _m(rng, bool(rng.random() < 0.5), 0.5),
    }
    params = [(k, v, k != "boundaries") for k, v in values.items()]
    style = (str(rng.choice(["function", "input_kw"])), int(rng.integers(0, 2)))
    scalar = rng.random() < 0.15

    def program(lib, x):
        if scalar:
            b = values["boundaries"]
            return lib.bucketize(1.0, lib.tensor(b.array, dtype=getattr(lib, b.dtype)))
        return call(lib, style, "bucketize", x, params)

    desc = f"{describe_call(style, 'bucketize', params)} x{shape}:{xdtype} scalar={scalar}"
    return desc, program, [(_operand(rng, shape, xdtype)[0], xdtype, False)]


def _op_as(rng):
    """``expand_as``, ``type_as``, ``reshape_as``, ``view_as`` with the other operand's dtype."""
    name = str(rng.choice(["expand_as", "type_as", "reshape_as"]))
    shape = _small_shape(rng)
    da, db = _dtype_pick(rng), _dtype_pick(rng)
    if name == "expand_as":
        other_shape = (int(rng.integers(1, 3)),) + tuple(
            s if rng.random() < 0.7 else s + 1 for s in shape
        )
        shape = tuple(1 if rng.random() < 0.4 else s for s in shape)
    elif name == "reshape_as":
        n = int(np.prod(shape)) if shape else 1
        other_shape = (n,) if rng.random() < 0.5 else (1, n)
        if rng.random() < 0.1:
            other_shape = (n + 1,)
    else:
        other_shape = _small_shape(rng)
    keyword = rng.random() < 0.3

    def program(lib, x, y):
        out = getattr(x, name)(other=y) if keyword else getattr(x, name)(y)
        return out

    desc = f"x{shape}:{da}.{name}({'other=' if keyword else ''}y{other_shape}:{db})"
    return desc, program, [_operand(rng, shape, da), _operand(rng, other_shape, db)]


def _op_convert(rng):
    name = str(rng.choice(["double", "int", "bool", "float", "long", "half"]))
    if name == "half":
        name = "float"
    shape = _small_shape(rng)
    dtype = _dtype_pick(rng)
    chained = rng.random() < 0.3

    def program(lib, x):
        out = getattr(x, name)()
        return (out, out is x, out.requires_grad) if not chained else getattr(out, name)() * 2

    return f"x{shape}:{dtype}.{name}() chained={chained}", program, [_operand(rng, shape, dtype)]


def _op_scalar_tensor(rng):
    value = [1, 2.5, True, -3, NP(np.float32(1.5)), NP(np.int64(4))][int(rng.integers(6))]
    dtype = _m(rng, D(str(rng.choice(["float64", "float32", "int64", "bool"]))), 0.5)
    rg_ = _m(rng, True, 0.2)
    params = [("dtype", dtype, True), ("requires_grad", rg_, True)]

    def program(lib):
        kwargs = {n: _resolve(lib, v) for n, v, _ in params if v is not OMIT}
        out = lib.scalar_tensor(_resolve(lib, value), **kwargs)
        return out

    return f"scalar_tensor({value!r}, {params})", program, []


def _op_from_numpy(rng):
    dtype = str(rng.choice(["float64", "float32", "int64", "int32", "bool", "uint8", "int16"]))
    shape = _small_shape(rng)
    values = _values(rng, shape)
    array = (values > 0) if dtype == "bool" else (np.abs(values) * 3).astype(dtype)
    noncontig = rng.random() < 0.2 and len(shape) >= 2

    def program(lib):
        a = array.copy()
        if noncontig:
            a = a.T
        # (retrograd copies the array, its tensors never write their memory: no write compared)
        t = lib.from_numpy(a)
        return t, t.dtype, t.shape, t.requires_grad

    return f"from_numpy({shape}:{dtype}, T={noncontig})", program, []


def _op_tensor_unfold(rng):
    shape = tuple(int(v) for v in rng.integers(1, 5, int(rng.integers(0, 4))))
    nd = len(shape)
    dim = _dim(rng, nd)
    length = shape[dim] if nd and -nd <= dim < nd else 1
    size = int(rng.integers(0, length + 2))
    step = int(rng.integers(1, 3))
    keyword = rng.random() < 0.3
    dtype = _dtype_pick(rng)

    def program(lib, x):
        if keyword:
            return x.unfold(dimension=dim, size=size, step=step)
        return x.unfold(dim, size, step)

    desc = f"x{shape}:{dtype}.unfold({dim}, {size}, {step}) kw={keyword}"
    return desc, program, [_operand(rng, shape, dtype)]


def _op_f_unfold(rng):
    values = {
        "kernel_size": _int_or_tuple(rng, int(rng.integers(1, 3)), 2),
        "dilation": _m(rng, int(rng.integers(1, 3)), 0.3),
        "padding": _m(rng, _int_or_tuple(rng, int(rng.integers(0, 2)), 2), 0.4),
        "stride": _m(rng, int(rng.integers(1, 3)), 0.4),
    }
    torch = _torch()
    params = _ordered(torch.nn.functional.unfold, values, skip=1)
    style = (str(rng.choice(["function", "input_kw"])), int(rng.integers(0, len(params) + 1)))
    shape = (1, 2, 3, 4) if rng.random() < 0.8 else (2, 3, 3)
    dtype = str(rng.choice(["float64", "float64", "float32"]))
    fold = rng.random() < 0.3

    def program(lib, x):
        cols = call(lib, style, "unfold", x, params, "F")
        if fold and x.ndim == 4:
            kw = {n: _resolve(lib, v) for n, v, _ in params if v is not OMIT}
            return cols, lib.nn.functional.fold(cols, output_size=(3, 4), **kw)
        return cols

    desc = f"{describe_call(style, 'unfold', params, 'F')} x{shape}:{dtype} fold={fold}"
    return desc, program, [_operand(rng, shape, dtype)]


def _op_batch_norm(rng):
    c = int(rng.choice([1, 3]))
    shape = (2, c) + tuple(int(v) for v in rng.integers(1, 3, int(rng.integers(0, 3))))
    training = bool(rng.random() < 0.5)
    stats = rng.random() < 0.8 or not training
    values = {
        "running_mean": T(_values(rng, (c,)), "float64") if stats else None,
        "running_var": T(rng.uniform(0.5, 2, c), "float64") if stats else None,
        "weight": _m(rng, T(rng.uniform(0.5, 2, c), "float64", grad=True), 0.5),
        "bias": _m(rng, T(_values(rng, (c,)), "float64", grad=True), 0.5),
        "training": _m(rng, training, 0.8),
        "momentum": _m(rng, 0.3, 0.3),
        "eps": _m(rng, 1e-3, 0.3),
    }
    torch = _torch()
    params = _ordered(torch.nn.functional.batch_norm, values, skip=1)
    style = (str(rng.choice(["function", "input_kw"])), int(rng.integers(0, len(params) + 1)))

    def program(lib, x):
        args, kwargs = _arguments(lib, params, style[1])
        holders = {n: v for n, v in kwargs.items() if n.startswith("running") and v is not None}
        holders.update(
            {
                n: v
                for (n, _, _), v in zip(params, args)
                if n.startswith("running") and v is not None
            }
        )
        fn = lib.nn.functional.batch_norm
        out = (
            fn(input=x, **kwargs) if style[0] == "input_kw" and not args else fn(x, *args, **kwargs)
        )
        return out, [holders[k] for k in sorted(holders)]

    desc = f"{describe_call(style, 'batch_norm', params, 'F')} x{shape}"
    return desc, program, [_operand(rng, shape, "float64")]


def _op_normalize(rng):
    shape = _small_shape(rng) or (3,)
    values = {
        "p": _m(rng, float(rng.choice([1.0, 2.0, 3.0])), 0.4),
        "dim": _m(rng, _dim(rng, len(shape)), 0.6),
        "eps": _m(rng, 1e-3, 0.3),
    }
    torch = _torch()
    params = _ordered(torch.nn.functional.normalize, values, skip=1)
    style = (str(rng.choice(["function", "input_kw"])), int(rng.integers(0, len(params) + 1)))
    dtype = str(rng.choice(["float64", "float64", "float32"]))

    def program(lib, x):
        return call(lib, style, "normalize", x, params, "F")

    desc = f"{describe_call(style, 'normalize', params, 'F')} x{shape}:{dtype}"
    return desc, program, [_operand(rng, shape, dtype)]


def _op_pad_sequence(rng):
    lengths = [int(v) for v in rng.integers(0, 4, int(rng.integers(1, 4)))]
    trailing = tuple(int(v) for v in rng.integers(1, 3, int(rng.integers(0, 2))))
    values = {
        "batch_first": _m(rng, bool(rng.random() < 0.5), 0.6),
        "padding_value": _m(rng, float(rng.choice([0.0, -1.5, 2])), 0.5),
        "padding_side": _m(rng, str(rng.choice(["right", "left"])), 0.3),
    }
    torch = _torch()
    params = _ordered(torch.nn.utils.rnn.pad_sequence, values, skip=1)
    n_pos = int(rng.integers(0, len(params) + 1))
    dtype = str(rng.choice(["float64", "float64", "int64"]))
    operands = [_operand(rng, (n,) + trailing, dtype) for n in lengths]
    as_tuple = rng.random() < 0.3

    def program(lib, *xs):
        args, kwargs = _arguments(lib, params, n_pos)
        seq = tuple(xs) if as_tuple else list(xs)
        return lib.nn.utils.rnn.pad_sequence(seq, *args, **kwargs)

    desc = f"pad_sequence({lengths}x{trailing}:{dtype}, {params}, n_pos={n_pos})"
    return desc, program, operands


def _op_inplace_misc(rng):
    name = str(rng.choice(["sqrt_", "detach_", "clip", "neg", "clamp_", "abs_", "log_"]))
    shape = _small_shape(rng)
    dtype = _dtype_pick(rng, ("float64", "float32", "int64"))
    kind = str(rng.choice(["method", "function"]))
    low = _m(rng, -0.5, 0.6)
    high = _m(rng, T(np.float64(1.0), "float64"), 0.3) if rng.random() < 0.3 else _m(rng, 1, 0.6)

    def program(lib, x):
        y = x * 1 if x.dtype.is_floating_point else x.clone()
        if name == "detach_":
            z = y.detach_()
            return z is y, y.requires_grad, y.grad_fn is None, y
        if name in ("clip", "clamp_"):
            kwargs = {
                k: _resolve(lib, v) for k, v in (("min", low), ("max", high)) if v is not OMIT
            }
            if kind == "function" and name == "clip":
                return lib.clip(y, **kwargs)
            return getattr(y, name)(**kwargs), y
        if name == "neg":
            return lib.neg(y) if kind == "function" else y.neg()
        if kind == "function" and hasattr(lib, name):
            out = getattr(lib, name)(y)
        else:
            out = getattr(y, name)()
        return out is y, y

    desc = f"{kind} {name} x{shape}:{dtype} min={low} max={high}"
    return desc, program, [_operand(rng, shape, dtype)]


def _op_triangular(rng):
    name = str(rng.choice(["triu", "tril", "triu_", "tril_"]))
    shape = tuple(int(v) for v in rng.integers(1, 4, int(rng.choice([1, 2, 2, 3]))))
    dtype = _dtype_pick(rng)
    diagonal = _m(rng, int(rng.integers(-3, 4)), 0.6)
    keyword = rng.random() < 0.5

    def program(lib, x):
        y = x * 1 if x.dtype.is_floating_point else x.clone()
        kw = {} if diagonal is OMIT else ({"diagonal": diagonal} if keyword else None)
        args = () if kw is not None else (diagonal,)
        kw = kw or {}
        if name.endswith("_"):
            out = getattr(y, name)(*args, **kw)
            return out is y, y
        return getattr(lib, name)(y, *args, **kw)

    return (
        f"{name}(x{shape}:{dtype}, diagonal={diagonal}, kw={keyword})",
        program,
        [_operand(rng, shape, dtype)],
    )


def _op_prod_round(rng):
    name = str(rng.choice(["prod", "round", "unique", "argsort", "unbind"]))
    shape = _small_shape(rng)
    dtype = _dtype_pick(rng)
    nd = len(shape)
    if name == "prod":
        values = {"dim": _m(rng, _dim(rng, nd), 0.7), "keepdim": _m(rng, bool(rng.random() < 0.5))}
        values["dtype"] = _m(rng, D(str(rng.choice(["float64", "int64", "float32"]))), 0.3)
        if values["dim"] is OMIT:
            values.pop("keepdim")
    elif name == "round":
        values = {"decimals": _m(rng, int(rng.integers(-1, 3)), 0.6)}
    elif name == "unique":
        values = {
            "sorted": _m(rng, True, 0.3),
            "return_inverse": _m(rng, bool(rng.random() < 0.5)),
            "return_counts": _m(rng, bool(rng.random() < 0.5)),
            "dim": _m(rng, _dim(rng, nd), 0.3),
        }
    elif name == "argsort":
        values = {
            "dim": _m(rng, _dim(rng, nd), 0.6),
            "descending": _m(rng, bool(rng.random() < 0.5)),
            "stable": _m(rng, True, 0.5),
        }
    else:
        values = {"dim": _m(rng, _dim(rng, nd), 0.7)}
    keyword_only = {"decimals", "stable", "dtype"} if name != "prod" else {"dtype"}
    params = [(k, v, k in keyword_only) for k, v in values.items()]
    style = (
        str(rng.choice(["method", "function", "input_kw"])),
        int(rng.integers(0, len(params) + 1)),
    )
    if name == "unique":
        values_arr = np.round(_values(rng, shape))
        operands = [(values_arr, dtype if dtype != "bool" else "float64", False)]
    else:
        operands = [_operand(rng, shape, dtype)]

    def program(lib, x):
        return call(lib, style, name, x, params)

    return f"{describe_call(style, name, params)} x{shape}:{dtype}", program, operands


_OPS = {
    "mm": _op_mm,
    "diag": _op_diag,
    "bucketize": _op_bucketize,
    "as": _op_as,
    "convert": _op_convert,
    "scalar_tensor": _op_scalar_tensor,
    "from_numpy": _op_from_numpy,
    "tensor_unfold": _op_tensor_unfold,
    "f_unfold": _op_f_unfold,
    "batch_norm": _op_batch_norm,
    "normalize": _op_normalize,
    "pad_sequence": _op_pad_sequence,
    "inplace_misc": _op_inplace_misc,
    "triangular": _op_triangular,
    "prod_round": _op_prod_round,
}


# -- nn.init -----------------------------------------------------------------------------------
def init(rng):
    name = str(
        rng.choice(
            [
                "orthogonal_",
                "xavier_uniform_",
                "xavier_normal_",
                "kaiming_uniform_",
                "trunc_normal_",
                "uniform_",
            ]
        )
    )
    nd = int(rng.choice([1, 2, 2, 3, 4]))
    shape = tuple(int(v) for v in rng.integers(1, 5, nd))
    dtype = str(rng.choice(["float64", "float32"]))
    gain = _m(rng, float(rng.choice([1.0, 0.5, 2.0])), 0.5)
    if name in ("orthogonal_", "xavier_uniform_", "xavier_normal_"):
        values = {"gain": gain}
    elif name == "kaiming_uniform_":
        values = {
            "a": _m(rng, float(rng.choice([0.0, 0.2, 5**0.5])), 0.5),
            "mode": _m(rng, str(rng.choice(["fan_in", "fan_out"])), 0.5),
            "nonlinearity": _m(
                rng, str(rng.choice(["relu", "leaky_relu", "linear", "tanh", "selu"])), 0.5
            ),
        }
    elif name == "trunc_normal_":
        values = {"mean": _m(rng, 0.5), "std": _m(rng, 0.1), "a": _m(rng, -0.2), "b": _m(rng, 0.3)}
    else:
        values = {"a": _m(rng, -2.0), "b": _m(rng, 3.0)}
    torch = _torch()
    params = _ordered(getattr(torch.nn.init, name), values, skip=1)
    n_pos = int(rng.integers(0, len(params) + 1))
    as_parameter = rng.random() < 0.4

    def program(lib, x):
        t = lib.nn.Parameter(x.detach().clone()) if as_parameter else x.detach().clone()
        args, kwargs = _arguments(lib, params, n_pos)
        out = getattr(lib.nn.init, name)(t, *args, **kwargs)
        summary = [
            out is t,
            t.requires_grad,
            t.is_leaf,
            str(t.dtype).split(".")[-1],
            tuple(t.shape),
        ]
        with lib.no_grad():
            flat = t.reshape(-1)
            g = 1.0 if gain is OMIT else gain
            if name == "orthogonal_":
                rows = t.reshape(t.shape[0], -1)
                small = rows @ rows.T if rows.shape[0] <= rows.shape[1] else rows.T @ rows
                eye = lib.eye(small.shape[0], dtype=small.dtype) * g * g
                summary.append(bool(((small - eye).abs() < 1e-4).all()))
            elif name == "uniform_":
                lo = -2.0 if values["a"] is not OMIT else 0.0
                hi = 3.0 if values["b"] is not OMIT else 1.0
                summary.append(bool(((flat >= lo) & (flat <= hi)).all()))
            elif name == "trunc_normal_":
                lo = -0.2 if values["a"] is not OMIT else -2.0
                hi = 0.3 if values["b"] is not OMIT else 2.0
                summary.append(bool(((flat >= lo) & (flat <= hi)).all()))
            elif name == "xavier_uniform_":
                fan_in = t.shape[1] * (int(np.prod(t.shape[2:])) if t.ndim > 2 else 1)
                fan_out = t.shape[0] * (int(np.prod(t.shape[2:])) if t.ndim > 2 else 1)
                bound = g * (6.0 / (fan_in + fan_out)) ** 0.5
                summary.append(bool((flat.abs() <= bound + 1e-6).all()))
            elif name == "kaiming_uniform_":
                summary.append(bool(flat.abs().max() < 10))
        return summary

    desc = f"nn.init.{name}(x{shape}:{dtype}, {params}, n_pos={n_pos}) param={as_parameter}"
    return desc, program, [(_values(rng, shape), dtype, False)]


# -- random ----------------------------------------------------------------------------------------
def random(rng):
    name = str(
        rng.choice(
            [
                "uniform_",
                "normal_",
                "random_",
                "bernoulli_",
                "randperm",
                "multinomial",
                "randn_like",
                "normal",
            ]
        )
    )
    shape = _small_shape(rng)
    dtype = str(rng.choice(["float64", "float32", "int64", "bool"]))
    form = rng.random() < 0.5
    variant = int(rng.integers(0, 6))

    def program(lib, x):
        if name == "uniform_":
            y = x.clone()
            out = y.uniform_(-2, 3) if form else y.uniform_(**{"from": -2, "to": 3})
            return out is y, out.dtype, out.shape, bool(((out >= -2) & (out <= 3)).all())
        if name == "normal_":
            y = x.clone()
            out = y.normal_(5.0, 0.01) if form else y.normal_(mean=5.0, std=0.01)
            return out is y, out.dtype, out.shape, bool(((out - 5).abs() < 0.2).all())
        if name == "random_":
            y = x.clone()
            low, high = (2, 5) if form else (0, 4)
            out = [
                lambda: y.random_(2, 5),
                lambda: y.random_(2, to=5),
                lambda: y.random_(**{"from": 2, "to": 5}),
                lambda: y.random_(to=4),
                lambda: y.random_(4),
            ][variant % 3 if form else 3 + variant % 2]()
            inside = (out >= low) & (out < high)
            if variant == 4 and form:
                out = y.random_()  # (bools too: torch's random bools)
                inside = out >= 0
            if variant == 5 and form:
                out = y.random_(2, None)  # (up to its dtype's largest)
                inside = out >= low
            return out is y, out.dtype, out.shape, bool(inside.all())
        if name == "bernoulli_":
            y = x.clone()
            out = y.bernoulli_(0.0) if form else y.bernoulli_(p=1.0)
            return out is y, out
        if name == "randperm":
            n = int(np.prod(shape)) if shape else 0
            kw = {} if dtype == "bool" else {"dtype": getattr(lib, dtype)}
            if variant < 2:
                kw["requires_grad"] = True
            out = lib.randperm(n, **kw) if variant % 2 else lib.randperm(n=n, **kw)
            values = sorted(out.tolist())  # (retrograd's detach keeps the flag: API.md)
            return out.dtype, out.shape, values, out.requires_grad, out.is_leaf
        if name == "multinomial":
            probs = x.abs().double() + 0.1 if x.ndim in (1, 2) and x.numel() else x.double()
            n = 1 if form else 2
            if variant < 2:
                out = lib.multinomial(input=probs, num_samples=n, replacement=not form)
            else:
                out = lib.multinomial(probs, n, replacement=not form)
            return out.dtype, out.shape
        if name == "randn_like":
            out = lib.randn_like(x) if form else lib.randn_like(x, dtype=lib.float64)
            return out.dtype, out.shape, out.requires_grad
        mean = x.double()
        grad = {"requires_grad": True} if variant < 2 else {}
        if form:
            out = lib.normal(mean, 1e-3, **grad)  # (refused by both with requires_grad)
        else:
            out = lib.normal(mean=2.0, std=1e-3, size=shape, **grad)
        drawn = np.asarray(out.tolist())
        near = bool((np.abs(drawn - (np.asarray(mean.tolist()) if form else 2.0)) < 0.1).all())
        return out.dtype, out.shape, near, out.requires_grad, out.is_leaf

    desc = f"{name} x{shape}:{dtype} form={form}"
    return desc, program, [_operand(rng, shape, dtype)]


# -- misc: autograd.grad, checkpoint, distributions, grid_sample, MultiheadAttention, finfo --------
def _misc_grad(rng):
    shape = _small_shape(rng)
    create = _m(rng, bool(rng.random() < 0.5), 0.4)
    retain = _m(rng, bool(rng.random() < 0.5), 0.3)
    unused = _m(rng, bool(rng.random() < 0.5), 0.5)
    materialize = _m(rng, bool(rng.random() < 0.5), 0.3)
    seed_form = str(rng.choice(["none", "tensor", "list", "scalar_out"]))
    inputs_form = str(rng.choice(["tuple", "list", "single", "dict"]))
    with_z = rng.random() < 0.4
    keyword_outputs = rng.random() < 0.3
    twice = rng.random() < 0.3
    extra = {
        k: v
        for k, v in (
            ("create_graph", create),
            ("retain_graph", retain),
            ("allow_unused", unused),
            ("materialize_grads", materialize),
        )
        if v is not OMIT
    }

    def program(lib, x, y):
        z = lib.tensor(np.ones(shape), requires_grad=True)
        out = (x * y).sin() + x**2
        if seed_form == "scalar_out":
            out, grad_outputs = out.sum(), None
        elif seed_form == "tensor":
            grad_outputs = lib.tensor(np.full(shape, 0.5))
        elif seed_form == "list":
            grad_outputs = [lib.tensor(np.full(shape, -1.5))]
        else:
            grad_outputs = None
        leaves = [x, y] + ([z] if with_z else [])
        inputs = {
            "tuple": tuple(leaves),
            "list": leaves,
            "single": x,
            "dict": {f"p{k}": t for k, t in enumerate(leaves)},
        }[inputs_form]
        kwargs = dict(extra)
        if grad_outputs is not None:
            kwargs["grad_outputs"] = grad_outputs
        if keyword_outputs:
            grads = lib.autograd.grad(outputs=out, inputs=inputs, **kwargs)
        else:
            grads = lib.autograd.grad(out, inputs, **kwargs)
        results = [grads if not isinstance(grads, dict) else sorted(grads.items())]
        if twice:
            results.append(lib.autograd.grad(out.sum(), x, allow_unused=True))
        if create is True:
            first = grads[0] if not isinstance(grads, dict) else grads["p0"]
            results.append(lib.autograd.grad(first.sum(), x, allow_unused=True))
        return results

    desc = f"autograd.grad {seed_form} inputs={inputs_form} z={with_z} {extra} twice={twice}"
    return desc, program, [_operand(rng, shape, "float64"), _operand(rng, shape, "float64")]


def _misc_checkpoint(rng):
    shape = _small_shape(rng)
    # (use_reentrant=False only: torch's reentrant form refuses autograd.grad, which check uses)
    reentrant = False
    kwarg = rng.random() < 0.3
    preserve = _m(rng, bool(rng.random() < 0.5), 0.3)

    def program(lib, x, y):
        def block(a, b=None, scale=1.0):
            return (a * b).tanh() * scale + a.exp()

        kwargs = {} if reentrant is OMIT else {"use_reentrant": reentrant}
        if preserve is not OMIT:
            kwargs["preserve_rng_state"] = preserve
        if kwarg:
            out = lib.utils.checkpoint.checkpoint(block, x, b=y, scale=2.0, **kwargs)
        else:
            out = lib.utils.checkpoint.checkpoint(block, x, y, **kwargs)
        return out

    desc = f"checkpoint(use_reentrant={reentrant}, kwarg={kwarg}, preserve={preserve}) x{shape}"
    return desc, program, [_operand(rng, shape, "float64"), _operand(rng, shape, "float64")]


def _misc_distribution(rng):
    name = str(rng.choice(["Normal", "Categorical"]))
    shape = _small_shape(rng)
    form = str(rng.choice(["positional", "keyword", "number"]))
    sample_shape = [(), (2,), (1, 2)][int(rng.integers(3))]
    value_array = _values(rng, shape) * 0.5

    def program(lib, x, y):
        d = lib.distributions
        if name == "Normal":
            scale = y.abs() + 0.5
            if form == "number":
                dist = d.Normal(0.5, 2.0)
            elif form == "keyword":
                dist = d.Normal(loc=x, scale=scale)
            else:
                dist = d.Normal(x, scale)
            value = lib.tensor(value_array)  # (a fresh tensor: retrograd's detach keeps the flag)
            sample = dist.sample(sample_shape)
            rsample = dist.rsample(sample_shape)
            return (
                dist.log_prob(value),
                dist.entropy(),
                dist.mean,
                dist.stddev,
                dist.variance,
                tuple(sample.shape),
                rsample.requires_grad,
                tuple(dist.batch_shape),
                tuple(dist.event_shape),
                dist.cdf(value),
            )
        logits = x if x.ndim else x.reshape(1)
        if form == "keyword":
            dist = d.Categorical(logits=logits)
        elif form == "number":
            dist = d.Categorical(probs=logits.softmax(-1))
        else:
            dist = d.Categorical(logits.softmax(-1))
        value = lib.zeros(tuple(logits.shape[:-1]), dtype=lib.int64)
        sample = dist.sample(sample_shape)
        return (
            dist.log_prob(value),
            dist.entropy(),
            dist.probs,
            dist.logits,
            tuple(sample.shape),
            sample.dtype,
            tuple(dist.batch_shape),
            dist.param_shape,
        )

    desc = f"distributions.{name} {form} x{shape} sample{sample_shape}"
    return desc, program, [_operand(rng, shape, "float64"), _operand(rng, shape, "float64")]


def _misc_grid_sample(rng):
    values = {
        "mode": _m(rng, str(rng.choice(["bilinear", "nearest", "bicubic"])), 0.6),
        "padding_mode": _m(rng, str(rng.choice(["zeros", "border", "reflection"])), 0.5),
        "align_corners": _m(rng, bool(rng.random() < 0.5), 0.7),
    }
    torch = _torch()
    params = _ordered(torch.nn.functional.grid_sample, values, skip=2)
    n_pos = int(rng.integers(0, len(params) + 1))
    c, h, w = (int(v) for v in rng.integers(1, 4, 3))
    gh, gw = (int(v) for v in rng.integers(1, 4, 2))
    grid = np.round(rng.uniform(-1.3, 1.3, (1, gh, gw, 2)), 2) + 0.003

    def program(lib, x, g):
        args, kwargs = _arguments(lib, params, n_pos)
        return lib.nn.functional.grid_sample(x, g, *args, **kwargs)

    desc = f"F.grid_sample(x(1,{c},{h},{w}), grid{grid.shape}, {params}, n_pos={n_pos})"
    return desc, program, [_operand(rng, (1, c, h, w), "float64"), (grid, "float64", True)]


def _misc_mha(rng):
    torch = _torch()
    e = int(rng.choice([2, 4]))
    heads = int(rng.choice([1, 2]))
    values = {
        "embed_dim": e,
        "num_heads": heads,
        "bias": _m(rng, bool(rng.random() < 0.5), 0.3),
        "add_bias_kv": _m(rng, bool(rng.random() < 0.5), 0.2),
        "add_zero_attn": _m(rng, bool(rng.random() < 0.5), 0.2),
        "kdim": _m(rng, 3, 0.2),
        "batch_first": _m(rng, bool(rng.random() < 0.5), 0.5),
    }
    if values["kdim"] is not OMIT:
        values["vdim"] = 3
    params = _ordered(torch.nn.MultiheadAttention.__init__, values)
    n_pos = int(rng.integers(0, len(params) + 1))
    batched = rng.random() < 0.8
    length, source = int(rng.integers(1, 4)), int(rng.integers(1, 4))
    batch = 2
    kdim = 3 if values["kdim"] is not OMIT else e
    forward = {
        "need_weights": _m(rng, bool(rng.random() < 0.5), 0.5),
        "average_attn_weights": _m(rng, bool(rng.random() < 0.5), 0.4),
    }
    masked = rng.random() < 0.3
    padding = rng.random() < 0.3 and batched
    batch_first = values["batch_first"] is True
    q_shape = ((batch, length) if batch_first else (length, batch)) if batched else (length,)
    k_shape = ((batch, source) if batch_first else (source, batch)) if batched else (source,)
    fill_seed = int(rng.integers(1 << 30))
    mask = rng.random((length, source)) < 0.3
    pad = np.zeros((batch, source), dtype=bool)
    pad[0, -1] = True

    def program(lib, q, k, v):
        module = _construct(lib, "nn.MultiheadAttention", params, n_pos).double()
        _fill(lib, module, fill_seed)
        kwargs = {n: v for n, v in forward.items() if v is not OMIT}
        if masked:
            kwargs["attn_mask"] = lib.tensor(mask)
        if padding:
            kwargs["key_padding_mask"] = lib.tensor(pad)
        out = module(q, k, v, **kwargs)
        return repr(module), [n for n, _ in module.named_parameters()], out

    desc = f"{_describe_ctor('nn.MultiheadAttention', params, n_pos)}(q{q_shape}, {forward}, "
    desc += f"mask={masked}, pad={padding})"
    return (
        desc,
        program,
        [
            _operand(rng, q_shape + (e,), "float64"),
            _operand(rng, k_shape + (kdim,), "float64"),
            _operand(rng, k_shape + (kdim,), "float64"),
        ],
    )


def _misc_finfo(rng):
    dtype = str(
        rng.choice(["float64", "float32", "float16", "bfloat16", "int64", "int32", "uint8"])
    )
    attrs = ["eps", "max", "min", "tiny", "resolution", "bits", "smallest_normal", "dtype"]

    def program(lib):
        info = (
            lib.finfo(getattr(lib, dtype))
            if dtype.startswith(("float", "bf"))
            else lib.iinfo(getattr(lib, dtype))
        )
        out = []
        for a in attrs:
            if hasattr(info, a) or a in ("bits", "max", "min", "dtype"):
                value = getattr(info, a)
                out.append(str(value) if a == "dtype" else value)
        return out

    return f"finfo/iinfo({dtype})", program, []


def _misc_grad_mode(rng):
    form = str(
        rng.choice(
            [
                "set_grad_enabled",
                "set_grad_enabled_call",
                "inference_mode",
                "no_grad_decorator",
                "enable_grad",
            ]
        )
    )
    flag = bool(rng.random() < 0.5)
    keyword = rng.random() < 0.4
    shape = _small_shape(rng)

    def program(lib, x):
        if form == "set_grad_enabled":
            cm = lib.set_grad_enabled(mode=flag) if keyword else lib.set_grad_enabled(flag)
            with cm:
                y = x * 2
            return y, y.requires_grad, lib.is_grad_enabled()
        if form == "set_grad_enabled_call":
            before = lib.is_grad_enabled()
            lib.set_grad_enabled(flag)
            y = x * 2
            inside = lib.is_grad_enabled()
            lib.set_grad_enabled(before)
            return y.requires_grad, inside, lib.is_grad_enabled()
        if form == "inference_mode":
            cm = lib.inference_mode(mode=flag) if keyword else lib.inference_mode(flag)
            with cm:
                y = x * 2
            return y.requires_grad, lib.is_grad_enabled()
        if form == "enable_grad":
            with lib.no_grad(), lib.enable_grad():
                y = x * 3
            return y, y.requires_grad

        @lib.no_grad()
        def f(t):
            return t * 2, lib.is_grad_enabled()

        y, enabled = f(x)
        return y.requires_grad, enabled, lib.is_grad_enabled()

    return f"{form}({flag}, kw={keyword}) x{shape}", program, [_operand(rng, shape, "float64")]


def _misc_hooks(rng):
    """``register_forward_hook`` / ``register_forward_pre_hook`` as real code uses them: a
    hook that records, one that replaces the output or the input, ``with_kwargs``,
    ``prepend``, ``always_call``, a removed handle, on a child of a ``Sequential``."""
    hooks = []
    for k in range(int(rng.integers(1, 4))):
        hooks.append(
            {
                "pre": bool(rng.random() < 0.4),
                "where": int(rng.integers(0, 3)),  # (0 the Sequential, 1 and 2 its Linears)
                "replace": str(rng.choice(["none", "scale", "tuple"])),
                "with_kwargs": _m(rng, bool(rng.random() < 0.5), 0.3),
                "prepend": _m(rng, bool(rng.random() < 0.5), 0.3),
                "always_call": _m(rng, bool(rng.random() < 0.5), 0.2),
                "remove": bool(rng.random() < 0.2),
                "tag": k,
            }
        )
    fill_seed = int(rng.integers(1 << 30))
    batch = int(rng.integers(1, 3))

    def program(lib, x):
        net = lib.nn.Sequential(lib.nn.Linear(2, 3), lib.nn.Tanh(), lib.nn.Linear(3, 2)).double()
        _fill(lib, net, fill_seed)
        targets = [net, net[0], net[2]]
        log = []

        def make(spec):
            tag = spec["tag"]

            def forward_hook(module, args, *rest):
                output = rest[-1]
                kwargs = rest[0] if len(rest) == 2 else None
                kwargs = sorted(kwargs.items()) if kwargs is not None else None
                log.append(("fwd", tag, type(module).__name__, len(args), kwargs))
                if spec["replace"] == "scale":
                    return output * 2
                return None

            def pre_hook(module, args, *rest):
                log.append(("pre", tag, type(module).__name__, len(args), bool(rest)))
                if spec["replace"] == "scale":
                    scaled = (args[0] * 0.5,)
                    return (scaled, rest[0]) if rest else scaled
                if spec["replace"] == "tuple" and not rest:
                    return args[0] + 1  # (a single value: torch wraps it in a tuple)
                return None

            return pre_hook if spec["pre"] else forward_hook

        handles = []
        for spec in hooks:
            kwargs = {
                k: spec[k]
                for k in ("with_kwargs", "prepend", "always_call")
                if spec[k] is not OMIT and not (k == "always_call" and spec["pre"])
            }
            target = targets[spec["where"]]
            register = (
                target.register_forward_pre_hook if spec["pre"] else (target.register_forward_hook)
            )
            handle = register(make(spec), **kwargs)
            handles.append(handle)
            if spec["remove"]:
                handle.remove()
        first = net(x)
        for h in handles:
            h.remove()
        second = net(x)
        return first, second, log

    desc = f"hooks {hooks}"
    return desc, program, [_operand(rng, (batch, 2), "float64")]


def _misc_data(rng):
    """``DataLoader`` with ``batch_size``, ``shuffle=False``, ``drop_last``, a ``TensorDataset``
    or a list of tuples or dicts; ``random_split`` lengths and fractions; ``RandomSampler``'s
    length with ``replacement`` and ``num_samples``."""
    n = int(rng.integers(1, 7))
    kind = str(rng.choice(["loader", "loader", "split", "sampler"]))
    dataset_kind = str(rng.choice(["tensors", "tuples", "dicts", "numbers"]))
    values = {
        "batch_size": _m(rng, [int(rng.integers(1, 4)), None][int(rng.random() < 0.1)], 0.8),
        "shuffle": _m(rng, False, 0.3),
        "drop_last": _m(rng, bool(rng.random() < 0.5), 0.5),
    }
    torch = _torch()
    params = _ordered(torch.utils.data.DataLoader.__init__, values, skip=1)
    n_pos = int(rng.integers(0, len(params) + 1))
    lengths = (
        [0.5, 0.5]
        if rng.random() < 0.3
        else [0.3, 0.3, 0.4]
        if rng.random() < 0.3
        else [n // 2, n - n // 2]
        if rng.random() < 0.8
        else [n, 1]
    )
    sampler_values = {
        "replacement": _m(rng, bool(rng.random() < 0.5), 0.5),
        "num_samples": _m(rng, int(rng.integers(1, 5)), 0.4),
    }
    sampler_params = _ordered(torch.utils.data.RandomSampler.__init__, sampler_values, skip=1)
    features = _values(rng, (n, 2))
    labels = np.arange(n) % 3

    def program(lib):
        data = lib.utils.data
        if dataset_kind == "tensors":
            dataset = data.TensorDataset(lib.tensor(features), lib.tensor(labels))
        elif dataset_kind == "tuples":
            dataset = [(lib.tensor(features[i]), int(labels[i])) for i in range(n)]
        elif dataset_kind == "dicts":
            dataset = [{"x": lib.tensor(features[i]), "y": float(labels[i])} for i in range(n)]
        else:
            dataset = [float(v) for v in features[:, 0]]
        if kind == "split":
            parts = data.random_split(dataset, lengths)
            return [len(p) for p in parts], sorted(i for p in parts for i in p.indices)
        if kind == "sampler":
            args, kwargs = _arguments(lib, sampler_params, 2)
            sampler = data.RandomSampler(dataset, *args, **kwargs)
            drawn = list(sampler)
            return len(sampler), len(drawn), all(0 <= i < n for i in drawn)
        args, kwargs = _arguments(lib, params, n_pos)
        loader = data.DataLoader(dataset, *args, **kwargs)
        batches = [sorted(b.items()) if isinstance(b, dict) else b for b in loader]
        return len(loader), batches, [type(b).__name__ for b in loader]

    desc = f"data.{kind} {dataset_kind} n={n} {params} n_pos={n_pos} lengths={lengths}"
    return desc, program, []


_SEEDED_DRAWS = {
    "rand": lambda lib, x, g: lib.rand(3, generator=g),
    "randn": lambda lib, x, g: lib.randn((2, 2), generator=g),
    "randint": lambda lib, x, g: lib.randint(0, 5, (3,), generator=g),
    "randperm": lambda lib, x, g: lib.randperm(5, generator=g),
    "multinomial": lambda lib, x, g: lib.multinomial(x.abs() + 0.1, 2, generator=g),
    "Tensor.multinomial": lambda lib, x, g: (x.abs() + 0.1).multinomial(3, True, generator=g),
    "bernoulli": lambda lib, x, g: lib.bernoulli(x.sigmoid(), generator=g),
    "normal": lambda lib, x, g: lib.normal(x, 1.0, generator=g),
    "rand_like": lambda lib, x, g: lib.rand_like(x, generator=g),
    "randn_like": lambda lib, x, g: lib.randn_like(x, generator=g),
    "randint_like": lambda lib, x, g: lib.randint_like(x, 4, generator=g),
    "normal_": lambda lib, x, g: x.clone().normal_(generator=g),
    "uniform_": lambda lib, x, g: x.clone().uniform_(-1, 1, generator=g),
    "random_": lambda lib, x, g: x.clone().random_(0, 9, generator=g),
    "bernoulli_": lambda lib, x, g: x.clone().bernoulli_(0.5, generator=g),
    "init.trunc_normal_": lambda lib, x, g: lib.nn.init.trunc_normal_(x.clone(), generator=g),
    "init.xavier_uniform_": lambda lib, x, g: lib.nn.init.xavier_uniform_(x.clone(), generator=g),
    "init.orthogonal_": lambda lib, x, g: lib.nn.init.orthogonal_(x.clone(), generator=g),
    "init.kaiming_uniform_": lambda lib, x, g: lib.nn.init.kaiming_uniform_(x.clone(), generator=g),
    "random_split": lambda lib, x, g: [
        list(p.indices) for p in lib.utils.data.random_split(range(6), [3, 3], generator=g)
    ],
    "RandomSampler": lambda lib, x, g: list(lib.utils.data.RandomSampler(range(6), generator=g)),
    "WeightedRandomSampler": lambda lib, x, g: list(
        lib.utils.data.WeightedRandomSampler([1.0, 2.0, 3.0], 4, generator=g)
    ),
    "DataLoader": lambda lib, x, g: [
        b.tolist()
        for b in lib.utils.data.DataLoader(list(range(6)), batch_size=4, shuffle=True, generator=g)
    ],
}


def _misc_generator(rng):
    """``generator=`` as real code passes it (``torch.Generator().manual_seed(k)``): the same
    seed gives the same draws, the global stream is left alone, ``get_state``/``set_state``
    replay (compared as booleans: the streams are the libraries' own)."""
    name = str(rng.choice(sorted(_SEEDED_DRAWS)))
    seed = int(rng.integers(0, 100))
    shape = (int(rng.integers(2, 4)), int(rng.integers(2, 4)))

    def program(lib, x):
        draw = _SEEDED_DRAWS[name]

        def as_list(v):
            return v.tolist() if hasattr(v, "tolist") else v

        g = lib.Generator()
        same_object = g.manual_seed(seed) is g
        first = as_list(draw(lib, x, g))
        state = g.get_state()
        second = as_list(draw(lib, x, g))
        g.set_state(state)
        replay = as_list(draw(lib, x, g))
        lib.manual_seed(1)
        before = lib.rand(4).tolist()
        lib.manual_seed(1)
        again = as_list(draw(lib, x, lib.Generator().manual_seed(seed)))
        after = lib.rand(4).tolist()
        return same_object, g.initial_seed(), first == again, second == replay, before == after

    return f"generator {name} seed={seed}", program, [_operand(rng, shape, "float64")]


_MISC = {
    "generator": _misc_generator,
    "hooks": _misc_hooks,
    "data": _misc_data,
    "grad": _misc_grad,
    "checkpoint": _misc_checkpoint,
    "distribution": _misc_distribution,
    "grid_sample": _misc_grid_sample,
    "mha": _misc_mha,
    "finfo": _misc_finfo,
    "grad_mode": _misc_grad_mode,
}


def misc(rng):
    return _MISC[str(rng.choice(sorted(_MISC)))](rng)


GENERATORS = {
    "misc": misc,
    "modules": modules,
    "optimizers": optimizers,
    "ops": ops,
    "init": init,
    "random": random,
}
