"""Round 25 of the differential fuzzer against PyTorch: whole modules and optimizers rather than
single ops. Each generator takes a ``numpy`` generator and returns a
:class:`fuzz12_cases.Trial` written once against a namespace ``lib`` (``torch`` or
``retrograd``); :func:`check` runs it on both and raises :class:`fuzz_cases.Mismatch` on the
first difference in raising or not, dtype, shape or value (gradients included).

- ``stack``: random float64 stacks of ``nn`` modules over one of three input families
  (sequences: Embedding, Linear, LayerNorm, LSTM/GRU with ``num_layers``, ``bidirectional``,
  ``batch_first``, ``proj_size``, MultiheadAttention with ``add_bias_kv``/``add_zero_attn``
  and causal or padding masks; 1-d maps: Conv1d with every ``padding_mode``, ``padding="same"``,
  strides, dilation and groups, BatchNorm1d with ``momentum=None`` and without running stats,
  GroupNorm, InstanceNorm1d; 2-d maps: the same with Conv2d/BatchNorm2d), with activations
  and ``Dropout(0)`` between, loaded with torch's initial weights: in train mode the outputs,
  the gradients of the input and of every parameter, then one SGD step and a second forward,
  the buffers after both; in eval mode the outputs;
- ``optim``: every common optimizer on random settings (``foreach`` included) over two or
  three parameter groups with different learning rates, under none, one or two chained
  learning-rate schedulers, on random convex quadratics in float64 or float32: parameters and
  learning rates after each step; then the same run saved mid-way (optimizer and scheduler
  ``state_dict``), loaded into a fresh optimizer and schedulers and continued: retrograd's
  resumed run must be bit-identical to its uninterrupted one (torch's own resumed runs leave
  its uninterrupted ones: round 12's notes, and by 1e-9 in NAdam under OneCycleLR);
- ``clip``: ``clip_grad_norm_`` (norm types 2, 1, inf, 0.5, 3, 0, -inf; ``max_norm`` above
  and below the norm; ``error_if_nonfinite``; ``foreach``) and ``clip_grad_value_`` over
  float64/float32 gradients, some parameters without a gradient, some gradients with inf or
  NaN entries: the total norm (as a number: retrograd's is float64 whatever the gradients'
  dtype, API.md), refusals and the clipped gradients.

Known differences are left out of the draws and named where they are.
"""

from __future__ import annotations

import copy

import numpy as np

import retrograd as rg
from fuzz12_cases import Trial, _optimizer_options, _pick, _scheduler_maker
from fuzz14_cases import _weight_fn, check
from fuzz_cases import Mismatch, _torch

__all__ = ["GENERATORS", "check"]

GENERATORS: dict = {}


def gen(name):
    def register(fn):
        GENERATORS[name] = fn
        return fn

    return register


ACTIVATIONS = ("Tanh", "ReLU", "GELU", "SiLU", "ELU", "LeakyReLU", "Sigmoid", "Mish", "Hardswish")


# ---- module stacks -------------------------------------------------------------------------


def _seq_layers(rng, width):
    """(layers, width) for (N, L, width) input; a layer is a tuple (kind, kwargs)."""
    layers = []
    for _ in range(int(rng.integers(1, 4))):
        kind = str(_pick(rng, "Linear", "LayerNorm", "LSTM", "GRU", "MHA", "act", "Dropout"))
        if kind == "Linear":
            out = int(rng.integers(2, 6))
            layers.append(
                ("Linear", dict(in_features=width, out_features=out, bias=bool(rng.random() < 0.7)))
            )
            width = out
        elif kind == "LayerNorm":
            layers.append(
                (
                    "LayerNorm",
                    dict(
                        normalized_shape=width,
                        elementwise_affine=bool(rng.random() < 0.7),
                        bias=bool(rng.random() < 0.7),
                        eps=float(_pick(rng, 1e-5, 0.1)),
                    ),
                )
            )
        elif kind in ("LSTM", "GRU"):
            hidden = int(rng.integers(2, 5))
            bidirectional = bool(rng.random() < 0.5)
            kwargs = dict(
                input_size=width,
                hidden_size=hidden,
                num_layers=int(rng.integers(1, 3)),
                bias=bool(rng.random() < 0.8),
                batch_first=bool(rng.random() < 0.5),
                bidirectional=bidirectional,
            )
            if kind == "LSTM" and rng.random() < 0.3:
                kwargs["proj_size"] = int(rng.integers(1, hidden))
            layers.append((kind, kwargs))
            width = kwargs.get("proj_size", hidden) * (2 if bidirectional else 1)
        elif kind == "MHA":
            heads = int(_pick(rng, 1, 2))
            if width % heads:
                heads = 1
            layers.append(
                (
                    "MHA",
                    dict(
                        embed_dim=width,
                        num_heads=heads,
                        bias=bool(rng.random() < 0.8),
                        add_bias_kv=bool(rng.random() < 0.3),
                        add_zero_attn=bool(rng.random() < 0.3),
                        batch_first=bool(rng.random() < 0.5),
                    ),
                    dict(
                        mask=str(_pick(rng, "none", "causal", "padding")),
                        average=bool(rng.random() < 0.5),
                    ),
                )
            )
        elif kind == "act":
            layers.append(("act", str(_pick(rng, *ACTIVATIONS))))
        else:
            layers.append(("Dropout", {}))
    return layers, width


def _map_layers(rng, channels, dims):
    """(layers, channels) for (N, C, *spatial) input with ``dims`` spatial dims."""
    layers = []
    for _ in range(int(rng.integers(1, 4))):
        kind = str(_pick(rng, "Conv", "Conv", "BatchNorm", "GroupNorm", "InstanceNorm", "act"))
        if kind == "Conv":
            groups = int(_pick(rng, 1, 1, 2))
            if channels % groups:
                groups = 1
            out = groups * int(rng.integers(1, 3))
            stride = int(_pick(rng, 1, 1, 2))
            padding = _pick(rng, 0, 1, 2, "same", "valid")
            if padding == "same":
                stride = 1
            layers.append(
                (
                    f"Conv{dims}d",
                    dict(
                        in_channels=channels,
                        out_channels=out,
                        kernel_size=int(_pick(rng, 1, 2, 3)),
                        stride=stride,
                        padding=padding,
                        dilation=int(_pick(rng, 1, 1, 2)),
                        groups=groups,
                        bias=bool(rng.random() < 0.7),
                        padding_mode=str(_pick(rng, "zeros", "reflect", "replicate", "circular")),
                    ),
                )
            )
            channels = out
        elif kind == "BatchNorm":
            layers.append(
                (
                    f"BatchNorm{dims}d",
                    dict(
                        num_features=channels,
                        momentum=_pick(rng, 0.1, 0.5, None),
                        affine=bool(rng.random() < 0.7),
                        track_running_stats=bool(rng.random() < 0.8),
                    ),
                )
            )
        elif kind == "GroupNorm":
            groups = int(_pick(rng, 1, channels))
            layers.append(
                (
                    "GroupNorm",
                    dict(num_groups=groups, num_channels=channels, affine=bool(rng.random() < 0.7)),
                )
            )
        elif kind == "InstanceNorm":
            layers.append(
                (
                    f"InstanceNorm{dims}d",
                    dict(
                        num_features=channels,
                        affine=bool(rng.random() < 0.5),
                        track_running_stats=bool(rng.random() < 0.5),
                    ),
                )
            )
        else:
            layers.append(("act", str(_pick(rng, *ACTIVATIONS))))
    return layers, channels


def _build_stack(lib, layers):
    nn = lib.nn
    mods = []
    for layer in layers:
        kind = layer[0]
        if kind == "act":
            mods.append(getattr(nn, layer[1])())
        elif kind == "Dropout":
            mods.append(nn.Dropout(0.0))
        elif kind == "MHA":
            mods.append(nn.MultiheadAttention(**layer[1]))
        else:
            mods.append(getattr(nn, kind)(**layer[1]))
    return nn.ModuleList(mods)


def _run_stack(lib, layers, model, x):
    """The stack's output, and every other output its layers return (hidden states, weights)."""
    extra = []
    for layer, mod in zip(layers, model):
        kind = layer[0]
        if kind in ("LSTM", "GRU"):
            seq = x if layer[1]["batch_first"] else x.transpose(0, 1)
            seq, hidden = mod(seq)
            x = seq if layer[1]["batch_first"] else seq.transpose(0, 1)
            extra.extend(hidden if isinstance(hidden, tuple) else (hidden,))
        elif kind == "MHA":
            batch_first = layer[1]["batch_first"]
            n, length = x.shape[0], x.shape[1]
            mask = padding = None
            if layer[2]["mask"] == "causal":
                mask = lib.triu(lib.ones(length, length, dtype=lib.bool), diagonal=1)
            elif layer[2]["mask"] == "padding":
                padding = lib.zeros(n, length, dtype=lib.bool)
                padding[0, length - 1] = True
            q = x if batch_first else x.transpose(0, 1)
            out, weights = mod(
                q,
                q * 0.5,
                q,
                key_padding_mask=padding,
                attn_mask=mask,
                average_attn_weights=layer[2]["average"],
            )
            x = out if batch_first else out.transpose(0, 1)
            extra.append(weights)
        else:
            x = mod(x)
    return x, extra


def _stack(lib, spec):
    torch = _torch()
    layers = spec["layers"]
    torch.manual_seed(spec["seed"])
    reference = _build_stack(torch, layers).double()
    weights = {k: v.detach().numpy().copy() for k, v in reference.state_dict().items()}
    model = _build_stack(lib, layers).double()
    model.load_state_dict({k: lib.tensor(v) for k, v in weights.items()})
    if "embedding" in spec:
        embedding = spec["embedding"]
        table = lib.nn.Embedding(**embedding).double()
        table.load_state_dict({"weight": lib.tensor(spec["table"])})
        tokens = lib.tensor(spec["tokens"])
        x = table(tokens)
        leaves = [table.weight]
    else:
        x = lib.tensor(spec["x"]).requires_grad_(True)
        leaves = [x]
    params = list(model.parameters())
    out = []
    y, extra = _run_stack(lib, layers, model, x)
    results = [y, *extra]
    weight = spec["weight"]
    total = 0
    for k, r in enumerate(results):
        if r is not None and r.requires_grad:
            total = total + (r * lib.tensor(weight(tuple(r.shape)) * (k + 1))).sum()
    out.extend(r.detach() * 1 if r is not None else None for r in results)
    grads = lib.autograd.grad(total, leaves + params, allow_unused=True, retain_graph=True)
    out.extend(grads)
    out.extend(b * 1 for b in model.buffers())
    # one SGD step, then a second training forward on new data (the buffers move again)
    opt = lib.optim.SGD(params or [lib.zeros(1, requires_grad=True)], lr=0.1, momentum=0.5)
    if not params:
        pass  # (a stack without parameters: nothing to step)
    elif lib is torch:
        opt.zero_grad()
        total.backward()
        opt.step()
    else:
        opt.step(total.backward())
    out.extend(p.detach() * 1 for p in params)
    x2 = x.detach() * 0.7 + 0.1
    y2, _ = _run_stack(lib, layers, model, x2)
    out.append(y2.detach() * 1)
    out.extend(b * 1 for b in model.buffers())
    model.eval()
    with lib.no_grad():
        y3, extra3 = _run_stack(lib, layers, model, x2)
    out.append(y3 * 1)
    out.extend(e * 1 for e in extra3 if e is not None)
    return out


@gen("stack")
def _stack_gen(rng):
    family = str(_pick(rng, "seq", "seq", "map1", "map2"))
    n = int(rng.integers(2, 4))
    spec: dict = dict(seed=int(rng.integers(1 << 30)), weight=_weight_fn(rng))
    if family == "seq":
        length = int(rng.integers(1, 5))
        width = int(rng.integers(2, 5))
        if rng.random() < 0.4:
            vocab = int(rng.integers(3, 7))
            spec["embedding"] = dict(
                num_embeddings=vocab,
                embedding_dim=width,
                padding_idx=_pick(rng, None, 0, -1),
                scale_grad_by_freq=bool(rng.random() < 0.3),
                max_norm=_pick(rng, None, None, 0.5),
            )
            spec["table"] = rng.uniform(-1, 1, size=(vocab, width))
            spec["tokens"] = rng.integers(0, vocab, size=(n, length))
        else:
            spec["x"] = rng.uniform(-1.5, 1.5, size=(n, length, width))
        layers, _ = _seq_layers(rng, width)
    else:
        dims = 1 if family == "map1" else 2
        channels = int(rng.integers(1, 5))
        shape = (n, channels) + tuple(int(v) for v in rng.integers(2, 6, size=dims))
        spec["x"] = rng.uniform(-1.5, 1.5, size=shape)
        layers, _ = _map_layers(rng, channels, dims)
    spec["layers"] = layers
    extra = {k: v for k, v in spec.items() if k in ("embedding",)}
    return Trial(f"stack {family} {layers} {extra}", lambda lib: _stack(lib, spec), rtol=1e-8)


# ---- optimizers under schedulers, resumed mid-run ---------------------------------------------

OPTIMIZERS = ("SGD", "Adam", "AdamW", "Adamax", "NAdam", "RAdam", "Adagrad", "Adadelta", "RMSprop")
#: ones that step once per epoch on their own; ReduceLROnPlateau is stepped with the loss and
#: never chained; OneCycleLR sets every rate itself, so it is never chained either
CHAINABLE = (
    "StepLR", "MultiStepLR", "ExponentialLR", "CosineAnnealingLR", "CosineAnnealingWarmRestarts",
    "LambdaLR", "MultiplicativeLR", "LinearLR", "ConstantLR", "PolynomialLR",
)  # fmt: skip
ALONE = ("ReduceLROnPlateau", "OneCycleLR", "SequentialLR", "CyclicLR")


def _quadratic(lib, ps, problem):
    total = 0
    for p, (a, c) in zip(ps, problem):
        d = p.reshape(-1) - lib.tensor(c, dtype=p.dtype)
        total = total + 0.5 * (d * (lib.tensor(a, dtype=p.dtype) @ d)).sum()
    return total


def _optim_run(lib, spec, reload_at):
    """Parameters and rates after each step; optimizer and schedulers rebuilt from their state
    dicts after step ``reload_at`` (-1: never)."""
    torch = _torch()
    dtype = getattr(lib, spec["dtype"])
    ps = [lib.nn.Parameter(lib.tensor(a, dtype=dtype)) for a in spec["inits"]]

    def build():
        groups = [dict(params=[ps[i] for i in g], **o) for g, o in spec["groups"]]
        opt = getattr(lib.optim, spec["optimizer"])(groups, **spec["options"])
        return opt, [make(lib, opt) for make in spec["makers"]]

    opt, scheds = build()
    history = []
    for k in range(spec["steps"]):
        loss = _quadratic(lib, ps, spec["problem"])
        if lib is torch:
            opt.zero_grad()
            loss.backward()
            opt.step()
        else:
            opt.step(loss.backward())
        for name, s in zip(spec["schedulers"], scheds):
            s.step(float(loss)) if name == "ReduceLROnPlateau" else s.step()
        history.append(float(loss))
        history.extend(p.detach() * 1 for p in ps)
        history.extend(float(g["lr"]) for g in opt.param_groups)
        if k == reload_at:
            opt_state = copy.deepcopy(opt.state_dict())
            sched_states = [copy.deepcopy(s.state_dict()) for s in scheds]
            opt, scheds = build()
            opt.load_state_dict(opt_state)
            for s, state in zip(scheds, sched_states):
                s.load_state_dict(state)
    return history


def _plain_floats(history):
    return [h.numpy().copy() if isinstance(h, rg.Tensor) else h for h in history]


def _optim(lib, spec):
    straight = _optim_run(lib, spec, -1)
    resumed = _optim_run(lib, spec, spec["reload_at"])
    if spec["optimizer"] == "NAdam" and spec["dtype"] == "float64":
        # torch's load casts NAdam's float32 mu_product to the parameters' float64, in which
        # its later steps multiply it: its resumed run leaves its uninterrupted one by 1e-9,
        # and retrograd's resumed run is torch's resumed one (both runs compared with torch's)
        return straight + resumed
    if lib is rg:
        a, b = _plain_floats(straight), _plain_floats(resumed)
        for k, (u, v) in enumerate(zip(a, b)):
            if not np.array_equal(np.asarray(u), np.asarray(v), equal_nan=True):
                raise Mismatch(
                    f"retrograd's run resumed after step {spec['reload_at']} leaves its "
                    f"uninterrupted one at result {k}: {v} != {u}"
                )
    # (retrograd's resumed run is its uninterrupted one, bit for bit, and that is compared
    # with torch's uninterrupted one: torch's resumed runs leave its own uninterrupted ones,
    # by its recursive schedules' re-applied factors (round 12) and by 1e-9 in NAdam's
    # momentum cycled by OneCycleLR)
    return straight


@gen("optim")
def _optim_gen(rng):
    name = str(_pick(rng, *OPTIMIZERS))
    options = _optimizer_options(rng, name)
    if rng.random() < 0.5:
        options["foreach"] = bool(rng.random() < 0.5)
    n_groups = int(rng.integers(1, 4))
    sizes = [int(rng.integers(1, 4)) for _ in range(4)]
    inits = [rng.standard_normal(s) for s in sizes]
    problem = []
    for s in sizes:
        m = rng.standard_normal((s, s))
        problem.append((m @ m.T + 0.5 * np.eye(s), rng.standard_normal(s)))
    order = [int(i) for i in rng.permutation(4)]
    cuts = sorted(int(c) for c in rng.choice(np.arange(1, 4), size=n_groups - 1, replace=False))
    indices = [order[a:b] for a, b in zip([0, *cuts], [*cuts, 4])]
    # (not SGD's coupled momentum/nesterov/dampening, nor Adagrad's accumulator: round 12)
    fixed = ("momentum", "nesterov", "dampening", "initial_accumulator_value", "foreach")
    groups = []
    for g in indices:
        alternative = _optimizer_options(rng, name)
        overrides = {k: v for k, v in alternative.items() if k not in fixed and rng.random() < 0.3}
        overrides["lr"] = float(options["lr"] * _pick(rng, 1.0, 0.5, 2.0, 0.1))
        groups.append((g, overrides))
    kind = str(_pick(rng, "none", "one", "two", "alone"))
    if kind == "none":
        schedulers = []
    elif kind == "alone":
        schedulers = [str(_pick(rng, *ALONE))]
    else:
        schedulers = [str(_pick(rng, *CHAINABLE)) for _ in range(1 if kind == "one" else 2)]
        if kind == "two" and rng.random() < 0.3:
            # (after a chainable one: a closed form that sets the rate, or the plateau rule)
            schedulers[1] = str(_pick(rng, "CosineAnnealingWarmRestarts", "ReduceLROnPlateau"))
    makers = [_scheduler_maker(s, int(rng.integers(1 << 30))) for s in schedulers]
    if "LambdaLR" in schedulers:
        # (round 12's LambdaLR has two lambdas, one for each of two groups)
        makers = [
            _lambda_maker(n_groups) if s == "LambdaLR" else m for s, m in zip(schedulers, makers)
        ]
    if "OneCycleLR" in schedulers or "CyclicLR" in schedulers:
        # (their list-valued settings are for two groups; and Adagrad-like optimizers have no
        # momentum for cycle_momentum to cycle)
        makers = [_cyclic_maker(s, rng, n_groups, name) for s in schedulers]
    dtype = str(_pick(rng, "float64", "float64", "float32"))
    steps = int(rng.integers(3, 7))
    spec = dict(
        optimizer=name,
        options=options,
        groups=groups,
        schedulers=schedulers,
        makers=makers,
        dtype=dtype,
        inits=[a.astype(dtype) for a in inits],
        problem=problem,
        steps=steps,
        reload_at=int(rng.integers(0, steps - 1)),
    )
    desc = (
        f"{name} {options} groups {groups} schedulers {schedulers} {dtype} "
        f"reload@{spec['reload_at']}"
    )
    return Trial(desc, lambda lib: _optim(lib, spec), rtol=1e-9 if dtype == "float64" else 1e-4)


def _lambda_maker(n_groups):
    def make(lib, o):
        lambdas = [lambda e: 0.9**e, lambda e: 1 / (e + 1), lambda e: 0.5 if e % 2 else 1.0]
        return lib.optim.lr_scheduler.LambdaLR(o, lr_lambda=lambdas[:n_groups])

    return make


def _cyclic_maker(name, rng, n_groups, optimizer):
    momentum = optimizer in ("SGD", "RMSprop", "Adam", "AdamW", "Adamax", "NAdam", "RAdam")
    cycle = bool(momentum and rng.random() < 0.5)
    if optimizer == "RMSprop" or (optimizer == "SGD"):
        cycle = False  # (their momentum may be 0, which torch refuses to cycle from)
    scale = float(_pick(rng, 1.0, 2.0))

    def make(lib, o):
        S = lib.optim.lr_scheduler  # noqa: N806
        if name == "OneCycleLR":
            return S.OneCycleLR(
                o,
                max_lr=[0.1 * scale * (k + 1) for k in range(n_groups)],
                total_steps=8,
                pct_start=0.4,
                cycle_momentum=cycle,
                three_phase=scale > 1,
            )
        return S.CyclicLR(
            o,
            base_lr=[0.01 * (k + 1) for k in range(n_groups)],
            max_lr=0.2 * scale,
            step_size_up=2,
            mode="triangular2" if scale > 1 else "exp_range",
            gamma=0.9,
            cycle_momentum=cycle,
        )

    return make


# ---- gradient clipping ---------------------------------------------------------------------


def _clip(lib, spec):
    torch = _torch()
    ps = [
        lib.nn.Parameter(lib.tensor(a, dtype=getattr(lib, d)))
        for a, d in zip(spec["inits"], spec["dtypes"])
    ]
    loss = 0
    for p, w, used in zip(ps, spec["weights"], spec["used"]):
        if used:
            loss = loss + (p * p * lib.tensor(w, dtype=p.dtype)).sum()
    if lib is torch:
        loss.backward()
        given = []
    else:
        given = [loss.backward()]
    out = []
    listed = ps if spec["listing"] == "list" else ps[0] if spec["listing"] == "one" else iter(ps)
    if spec["kind"] == "norm":
        total = lib.nn.utils.clip_grad_norm_(
            *given,
            listed,
            spec["max_norm"],
            norm_type=spec["norm_type"],
            error_if_nonfinite=spec["error_if_nonfinite"],
            foreach=spec["foreach"],
        )
        # (as a float64 number: NaN compares equal to NaN in a tensor)
        out.append(lib.tensor(float(total), dtype=lib.float64))
    else:
        lib.nn.utils.clip_grad_value_(*given, listed, spec["clip_value"], foreach=spec["foreach"])
    for p in ps:
        g = p.grad if lib is torch else p.grad(given[0])
        out.append(None if g is None else g * 1)
    return out


@gen("clip")
def _clip_gen(rng):
    count = int(rng.integers(1, 4))
    shapes = [
        tuple(int(v) for v in rng.integers(1, 4, size=int(rng.integers(0, 3))))
        for _ in range(count)
    ]
    dtypes = [str(_pick(rng, "float64", "float64", "float32")) for _ in range(count)]
    inits = [rng.uniform(-2, 2, size=s) for s in shapes]
    weights = []
    for s in shapes:
        w = rng.uniform(-3, 3, size=s)
        if rng.random() < 0.15:
            flat = w.reshape(-1)
            flat[int(rng.integers(flat.size))] = _pick(rng, np.inf, -np.inf, np.nan)
            w = flat.reshape(s)
        weights.append(w)
    used = [bool(rng.random() < 0.85) for _ in range(count)]
    used[0] = True
    spec = dict(
        inits=inits,
        dtypes=dtypes,
        weights=weights,
        used=used,
        listing=str(_pick(rng, "list", "iter", "one")),
        kind=str(_pick(rng, "norm", "norm", "norm", "value")),
        max_norm=float(_pick(rng, 0.1, 1.0, 100.0, 0.0)),
        norm_type=float(_pick(rng, 2.0, 1.0, np.inf, 0.5, 3.0, 0.0, -np.inf, 2.0)),
        error_if_nonfinite=bool(rng.random() < 0.4),
        foreach=_pick(rng, None, True, False),
        clip_value=float(_pick(rng, 0.1, 1.0, 0.0)),
    )
    # (float32 gradients' norm is float32 in torch, float64 in retrograd: compared as numbers)
    desc = " ".join(f"{k}={v}" for k, v in spec.items() if k not in ("inits", "weights"))
    rtol = 1e-9 if set(dtypes) == {"float64"} else 1e-5
    return Trial(f"clip {desc}", lambda lib: _clip(lib, spec), rtol=rtol)
