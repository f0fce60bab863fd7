"""Generators of round 35 of the differential fuzzer against PyTorch (``tests/test_fuzz35.py``):
hooks and the functional use of modules, on the same random small module trees built in both
libraries (weights drawn from NumPy, so both hold the same values), in train and eval mode.

Four families, each a draw from the seed alone and a scenario replayed in each library:

- ``module_hooks``: forward pre-hooks and forward hooks (``prepend``, ``with_kwargs``,
  ``always_call``; returning a replacement or ``None``; raising), full backward pre-hooks and
  full backward hooks (logging ``grad_input``/``grad_output`` as torch gives them, or
  replacing the gradient), the global ``register_module_forward_pre_hook`` /
  ``register_module_forward_hook`` / ``register_module_full_backward_pre_hook`` /
  ``register_module_full_backward_hook``, handles removed between two runs or by a hook mid-run;
  the log of calls (module, kind, arguments), outputs, gradients and buffers are compared.
- ``tensor_hooks``: ``register_hook`` on leaves and intermediates (logging, replacing),
  ``retain_grad``, ``autograd.graph.register_multi_grad_hook`` (``"all"``/``"any"``) and
  ``saved_tensors_hooks`` pack/unpack pairs that change the held value and undo it.
- ``parametrize``: stacked ``register_parametrization`` (with and without ``right_inverse``,
  ``unsafe``), assignment through ``right_inverse``, ``cached()``,
  ``remove_parametrizations(leave_parametrized=...)``, ``parametrizations.orthogonal`` /
  ``spectral_norm`` / ``weight_norm`` and the old ``nn.utils.weight_norm`` / ``spectral_norm``
  (their random power-iteration vectors copied from torch).
- ``functional``: ``func.functional_call`` (tied weights, ``strict``, ``tie_weights``,
  buffers updated in train mode), ``nn.utils.stateless.functional_call``, per-sample gradients
  by ``vmap`` over ``func.grad`` / ``jacrev`` of a ``functional_call``, model ensembling with
  ``stack_module_state``, ``parameters_to_vector`` / ``vector_to_parameters``.

Gradients are read the ported way: in retrograd ``grads = loss.backward()`` then
``p.grad(grads)``, in torch ``loss.backward()`` then ``p.grad``. Where torch raises, retrograd
must raise an error of its hierarchy (or Python's ``AttributeError`` where torch's is one).

Left out (documented departures): ``register_post_accumulate_grad_hook`` (refused: gradients
are values); the number of ``saved_tensors_hooks`` pack calls (ops save what the op table
declares); backward hooks on modules called with several tensors (refused with an error); the
order in which the hooks of different tensors run within one backward (the engine's
scheduling: the events of a backward are compared sorted by hook, each hook's calls in order).
(Backward hooks returning ``None`` gradients follow torch since leftovers 11:
``tests/test_leftovers_11.py``.)
"""

from __future__ import annotations

import contextlib

import numpy as np

import retrograd as rg

WIDTH = 3
BATCH = 4


class Mismatch(AssertionError):  # noqa: N818 (read as "a mismatch with torch")
    """retrograd and torch disagree."""


def _torch():
    import torch

    return torch


def _array(rng, shape):
    return np.asarray(rng.standard_normal(shape), dtype=np.float32)


# -- module trees -------------------------------------------------------------------------------
_NODE_CLASSES: dict[str, type] = {}


def node_class(lib):
    """A ``Module`` subclass of ``lib``: its children in order, then ``x * scale + shift``
    with its own parameter ``scale`` and buffer ``shift``."""
    if lib.__name__ in _NODE_CLASSES:
        return _NODE_CLASSES[lib.__name__]

    class Node(lib.nn.Module):
        def __init__(self, scale, shift, children) -> None:
            super().__init__()
            self.scale = lib.nn.Parameter(lib.tensor(scale.copy()))
            self.register_buffer("shift", lib.tensor(shift.copy()))
            self.body = lib.nn.ModuleList(children)

        def forward(self, x, gain=1.0):
            for child in self.body:
                x = child(x)
            return x * self.scale * gain + self.shift

    _NODE_CLASSES[lib.__name__] = Node
    return Node


def draw_tree(rng, depth=0, batchnorm=True):
    if depth >= 2 or rng.random() < 0.45:
        kinds = ["linear", "linear", "tanh", "relu"] + (["bn"] if batchnorm else [])
        kind = kinds[int(rng.integers(len(kinds)))]
        if kind == "linear":
            bias = _array(rng, (WIDTH,)) if rng.random() < 0.75 else None
            return ("linear", _array(rng, (WIDTH, WIDTH)) * 0.7, bias)
        if kind == "bn":
            return ("bn", _array(rng, (WIDTH,)), np.abs(_array(rng, (WIDTH,))) + 0.5)
        return (kind,)
    if rng.random() < 0.12:  # one module called twice (a tied layer)
        return ("shared", draw_tree(rng, 2, batchnorm))
    children = [draw_tree(rng, depth + 1, batchnorm) for _ in range(int(rng.integers(1, 4)))]
    if rng.random() < 0.5:
        return ("seq", children)
    return ("node", _array(rng, (WIDTH,)), _array(rng, (WIDTH,)), children)


def build(lib, spec):
    nn = lib.nn
    kind = spec[0]
    if kind == "linear":
        _, w, b = spec
        m = nn.Linear(WIDTH, WIDTH, bias=b is not None)
        with lib.no_grad():
            m.weight.copy_(lib.tensor(w.copy()))
            if b is not None:
                m.bias.copy_(lib.tensor(b.copy()))
        return m
    if kind == "tanh":
        return nn.Tanh()
    if kind == "relu":
        return nn.ReLU()
    if kind == "bn":
        m = nn.BatchNorm1d(WIDTH)
        with lib.no_grad():
            m.running_mean.copy_(lib.tensor(spec[1].copy()))
            m.running_var.copy_(lib.tensor(spec[2].copy()))
        return m
    if kind == "seq":
        return nn.Sequential(*[build(lib, c) for c in spec[1]])
    if kind == "shared":
        layer = build(lib, spec[1])
        return nn.Sequential(layer, layer)
    return node_class(lib)(spec[1], spec[2], [build(lib, c) for c in spec[3]])


# -- records ------------------------------------------------------------------------------------
def record(value, decimals=4):
    """A comparable form of ``value``: tensors as (shape, rounded values), containers
    element-wise."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return ("F", round(value, decimals))
    if isinstance(value, tuple | list):
        return [record(v, decimals) for v in value]
    if isinstance(value, dict):
        return [(k, record(v, decimals)) for k, v in value.items()]
    if hasattr(value, "shape") and hasattr(value, "detach"):
        data = np.asarray(value.detach().numpy())
        return ("T", tuple(value.shape), np.asarray(data.astype(np.float64).round(decimals)))
    if hasattr(value, "shape"):  # a NumPy array or a state-dict value
        data = np.asarray(value)
        return ("T", tuple(data.shape), np.asarray(data.astype(np.float64).round(decimals)))
    return ("other", type(value).__name__)


class Log:
    """The events of one scenario, in order; ``step`` records what a call returned or that it
    raised (a raise ends nothing: the scenario goes on)."""

    def __init__(self) -> None:
        self.events: list = []

    def add(self, *event) -> None:
        self.events.append(("event", record(list(event))))

    def sort_since(self, mark: int) -> None:
        """The events after ``mark`` ordered by their first field (stable): the hooks of
        different tensors, whose relative order is the engine's scheduling."""
        tail = self.events[mark:]
        tail.sort(key=lambda e: (e[0], repr(e[1][0]) if e[0] == "event" else ""))
        self.events[mark:] = tail

    def step(self, name, fn, *args, **kwargs):
        try:
            result = fn(*args, **kwargs)
        except Exception as error:  # either library's refusal is a result here
            self.events.append(("raise", name, error))
            return None
        return result


def backward(lib, loss, params):
    """The ported gradient lines: the gradients of ``loss`` for ``params`` (``None`` for one
    backward did not reach)."""
    if lib is rg:
        grads = loss.backward()
        return [p.grad(grads) for p in params], grads
    for p in params:
        if p.is_leaf:
            p.grad = None
    loss.backward()
    return [p.grad for p in params], None


def grad_of(lib, t, grads):
    return t.grad(grads) if lib is rg else t.grad


# -- family: module hooks -----------------------------------------------------------------------
HOOK_KINDS = ("pre", "post", "bwd", "bwd_pre", "global_pre", "global_post", "global_bwd")
HOOK_KINDS += ("global_bwd_pre",)
BEHAVIOURS = ("log", "log", "replace", "raise", "remove_self")


def draw_module_hooks(rng):
    spec = draw_tree(rng, 0)
    n_modules = _count(spec)
    hooks = []
    for _ in range(int(rng.integers(1, 7))):
        kind = str(rng.choice(HOOK_KINDS))
        behaviour = str(rng.choice(BEHAVIOURS))
        if behaviour == "raise" and rng.random() < 0.6:
            behaviour = "log"
        flags = {
            "prepend": bool(rng.random() < 0.3),
            "with_kwargs": bool(rng.random() < 0.4),
            "always_call": bool(rng.random() < 0.4),
        }
        if behaviour == "remove_self" or (kind == "global_post" and flags["with_kwargs"]):
            # left out: torch's except path iterates the live table (a hook removing itself
            # there is "OrderedDict mutated during iteration") and calls a global with_kwargs
            # hook without the kwargs (its TypeError silenced)
            flags["always_call"] = False
        hooks.append((kind, int(rng.integers(n_modules)), behaviour, flags))
    return {
        "spec": spec,
        "train": bool(rng.integers(2)),
        "x": _array(rng, (BATCH, WIDTH)),
        "x_grad": bool(rng.random() < 0.7),
        "freeze": [int(rng.integers(n_modules)) for _ in range(int(rng.integers(0, 2)))],
        "hooks": hooks,
        "remove": [int(rng.integers(len(hooks))) for _ in range(int(rng.integers(0, 3)))],
        "remove_before_backward": bool(rng.random() < 0.3),
        "square": bool(rng.integers(2)),
        "gain": None if rng.random() < 0.6 else float(rng.choice([0.5, 2.0])),
        "keyword": bool(rng.random() < 0.25),  # the tensor as torch's keyword: m(input=x)
    }


def _count(spec):
    if spec[0] == "shared":
        return 2
    if spec[0] == "seq":
        return 1 + sum(_count(c) for c in spec[1])
    if spec[0] == "node":
        return 2 + sum(_count(c) for c in spec[3])  # the node and its ModuleList
    return 1


def _summary(value):
    if value is None:
        return None
    if isinstance(value, tuple | list):
        return [_summary(v) for v in value]
    if isinstance(value, dict):
        return sorted((k, _summary(v)) for k, v in value.items())
    if hasattr(value, "shape"):
        return value
    return type(value).__name__


def _make_hook(lib, log, label, kind, behaviour, flags, handles, index):
    def finish(result):
        if behaviour == "raise":
            raise ValueError(f"hook {label} raises")
        if behaviour == "remove_self":
            handles[index].remove()
            return None
        return result if behaviour == "replace" else None

    if kind in ("pre", "global_pre"):
        if flags["with_kwargs"] and kind == "pre":

            def hook(module, args, kwargs):
                log.add(label, module.__class__.__name__, "pre", _summary(args), _summary(kwargs))
                new_kwargs = {k: v * 2.0 for k, v in kwargs.items()}
                return finish(((args[0] * 1.5,), new_kwargs))

            return hook

        def hook(module, args):
            log.add(label, module.__class__.__name__, "pre", _summary(args))
            return finish((args[0] * 1.5,))

        return hook
    if kind in ("post", "global_post"):
        if flags["with_kwargs"]:

            def hook(module, args, kwargs, output):
                log.add(
                    label,
                    module.__class__.__name__,
                    "post",
                    _summary(args),
                    _summary(kwargs),
                    _summary(output),
                )
                return finish(None if output is None else output * 0.5 + 0.25)

            return hook

        def hook(module, args, output):
            log.add(label, module.__class__.__name__, "post", _summary(args), _summary(output))
            return finish(None if output is None else output * 0.5 + 0.25)

        return hook
    if kind in ("bwd", "global_bwd"):

        def hook(module, grad_input, grad_output):
            log.add(
                label, type(module).__name__, "bwd", _summary(grad_input), _summary(grad_output)
            )
            replaced = tuple(None if g is None else g * 2.0 for g in grad_input)
            return finish(replaced)

        return hook

    def hook(module, grad_output):
        log.add(label, type(module).__name__, "bwd_pre", _summary(grad_output))
        return finish(tuple(g * -0.5 for g in grad_output))

    return hook


def _register(lib, module, kind, hook, flags):
    globals_ = lib.nn.modules.module
    if kind == "pre":
        return module.register_forward_pre_hook(
            hook, prepend=flags["prepend"], with_kwargs=flags["with_kwargs"]
        )
    if kind == "post":
        return module.register_forward_hook(
            hook,
            prepend=flags["prepend"],
            with_kwargs=flags["with_kwargs"],
            always_call=flags["always_call"],
        )
    if kind == "bwd":
        return module.register_full_backward_hook(hook, prepend=flags["prepend"])
    if kind == "bwd_pre":
        return module.register_full_backward_pre_hook(hook, prepend=flags["prepend"])
    if kind == "global_pre":
        return globals_.register_module_forward_pre_hook(hook)
    if kind == "global_bwd":
        return globals_.register_module_full_backward_hook(hook)
    if kind == "global_bwd_pre":
        return globals_.register_module_full_backward_pre_hook(hook)
    return globals_.register_module_forward_hook(
        hook, with_kwargs=flags["with_kwargs"], always_call=flags["always_call"]
    )


def _remove(handles, which):
    for k in which:
        if handles[k] is not None:
            handles[k].remove()
            handles[k].remove()  # twice: the second does nothing


def run_module_hooks(lib, draw):
    log = Log()
    root = build(lib, draw["spec"])
    root.train(draw["train"])
    modules = list(root.modules())
    for k in draw["freeze"]:
        modules[k].requires_grad_(False)
    handles: list = [None] * len(draw["hooks"])
    try:
        for index, (kind, target, behaviour, flags) in enumerate(draw["hooks"]):
            label = f"h{index}"
            hook = _make_hook(lib, log, label, kind, behaviour, flags, handles, index)
            handles[index] = log.step(
                f"register {kind}", _register, lib, modules[target], kind, hook, flags
            )
        params = [p for p in root.parameters() if p.requires_grad]
        for attempt in range(2):
            x = lib.tensor(draw["x"].copy())
            if draw["x_grad"]:
                x.requires_grad_(True)
            if draw["gain"] is not None and draw["spec"][0] == "node":
                y = log.step("forward", root, x, gain=draw["gain"])
            elif draw["keyword"]:
                y = log.step("forward", root, input=x)
            else:
                y = log.step("forward", root, x)
            log.add("forward", attempt, y)
            if attempt == 0 and draw["remove_before_backward"]:
                _remove(handles, draw["remove"])
            if y is not None and y.requires_grad:
                loss = (y * y).sum() if draw["square"] else y.sum()
                result = log.step("backward", backward, lib, loss, params + [x] * draw["x_grad"])
                if result is not None:
                    log.add("grads", attempt, result[0])
            log.add("buffers", attempt, [b for _, b in root.named_buffers()])
            if attempt == 0:
                _remove(handles, draw["remove"])
    finally:
        for handle in handles:
            if handle is not None:
                handle.remove()
    return log


# -- family: tensor hooks -----------------------------------------------------------------------
def draw_tensor_hooks(rng):
    spec = draw_tree(rng, 0)
    hooks = []
    for _ in range(int(rng.integers(0, 6))):
        hooks.append(
            (
                str(rng.choice(["x", "h", "y", "param"])),
                str(rng.choice(["log", "log", "double", "add", "remove_self"])),
            )
        )
    return {
        "spec": spec,
        "train": bool(rng.integers(2)),
        "x": _array(rng, (BATCH, WIDTH)),
        "hooks": hooks,
        "retain": [str(rng.choice(["h", "y", "x"])) for _ in range(int(rng.integers(0, 3)))],
        "multi": (
            None
            if rng.random() < 0.4
            else (str(rng.choice(["all", "any"])), list(rng.choice(["x", "h", "y"], 2)))
        ),
        "saved": int(rng.integers(3)),  # none, scale-and-undo, clone
        "remove": [int(rng.integers(6)) for _ in range(int(rng.integers(0, 2)))],
        "twice": bool(rng.integers(2)),
    }


def run_tensor_hooks(lib, draw):
    log = Log()
    root = build(lib, draw["spec"])
    root.train(draw["train"])
    params = list(root.parameters())
    x = lib.tensor(draw["x"].copy())
    x.requires_grad_(True)
    pack_calls = []

    def pack(t):
        pack_calls.append(1)
        return (t * 2.0) if draw["saved"] == 1 else t.clone()

    def unpack(t):
        return (t / 2.0) if draw["saved"] == 1 else t

    context = (
        lib.autograd.graph.saved_tensors_hooks(pack, unpack)
        if draw["saved"]
        else contextlib.nullcontext()
    )
    with context:
        h = x * 1.5 + 0.5
        y = root(h)
        loss = (y * h).sum() + (y * y).sum() * 0.25
    named = {"x": x, "h": h, "y": y}
    handles = []
    for index, (where, behaviour) in enumerate(draw["hooks"]):
        target = params[0] if where == "param" and params else named.get(where, x)
        label = f"t{index}"

        def hook(grad, label=label, behaviour=behaviour, index=index):
            log.add(label, "grad", grad)
            if behaviour == "double":
                return grad * 2.0
            if behaviour == "add":
                return grad + 1.0
            if behaviour == "remove_self":
                handles[index].remove()
            return None

        handles.append(log.step("register_hook", target.register_hook, hook))
    for k in draw["remove"]:
        if k < len(handles) and handles[k] is not None:
            handles[k].remove()
    for where in draw["retain"]:
        log.step("retain_grad", named[where].retain_grad)
        log.add("retains_grad", where, bool(named[where].retains_grad))
    multi = None
    if draw["multi"] is not None:
        mode, names = draw["multi"]

        def on_all(grads):
            log.add("multi", mode, grads)

        multi = log.step(
            "register_multi_grad_hook",
            lib.autograd.graph.register_multi_grad_hook,
            [named[n] for n in names],
            on_all,
            mode=mode,
        )
    mark = len(log.events)
    result = log.step("backward", backward, lib, loss, params + [x])
    log.sort_since(mark)
    if result is not None:
        grads, kept = result
        log.add("grads", grads)
        for where in draw["retain"]:
            if where != "x":
                log.add("retained", where, grad_of(lib, named[where], kept))
    if draw["twice"]:
        with context:
            loss2 = (root(x * 1.5 + 0.5) ** 2).sum()
        mark = len(log.events)
        result = log.step("backward 2", backward, lib, loss2, params + [x])
        log.sort_since(mark)
        if result is not None:
            log.add("grads 2", result[0])
    if multi is not None:
        multi.remove()
    log.add("pack was called", bool(pack_calls))
    return log


# -- family: parametrizations -------------------------------------------------------------------
_PARAM_CLASSES: dict[str, dict] = {}


def parametrization_classes(lib):
    if lib.__name__ in _PARAM_CLASSES:
        return _PARAM_CLASSES[lib.__name__]
    nn = lib.nn

    class Scale(nn.Module):
        def forward(self, w):
            return w * 2.0

        def right_inverse(self, w):
            return w / 2.0

    class Shift(nn.Module):
        def forward(self, w):
            return w + 1.0

        def right_inverse(self, w):
            return w - 1.0

    class Symmetric(nn.Module):
        def forward(self, w):
            return w.triu() + w.triu(1).transpose(0, 1)

    class Square(nn.Module):
        def forward(self, w):
            return w * w

    class Split(nn.Module):
        def forward(self, a, b):
            return a + b

        def right_inverse(self, w):
            return w * 0.25, w * 0.75

    class Learn(nn.Module):  # a parametrization with its own parameter and buffer
        def __init__(self):
            super().__init__()
            self.gain = nn.Parameter(lib.full((), 1.5))
            self.register_buffer("offset", lib.full((), 0.25))

        def forward(self, w):
            return w * self.gain + self.offset

        def right_inverse(self, w):
            return (w - self.offset) / self.gain

    class Widen(nn.Module):  # changes the shape: only with unsafe=True
        def forward(self, w):
            return lib.cat([w, w], 0)

    classes = {c.__name__: c for c in (Scale, Shift, Symmetric, Square, Split, Learn, Widen)}
    _PARAM_CLASSES[lib.__name__] = classes
    return classes


PARAMETRIZE_OPS = (
    "forward",
    "forward",
    "assign",
    "cached",
    "remove_true",
    "remove_false",
    "state_dict",
    "eval",
)


def draw_parametrize(rng):
    kind = str(rng.choice(["custom", "custom", "orthogonal", "spectral", "weight_norm", "old"]))
    stack = []
    if kind == "custom":
        names = ["Scale", "Shift", "Symmetric", "Square", "Split", "Learn", "Widen"]
        for _ in range(int(rng.integers(1, 4))):
            stack.append((str(rng.choice(names)), bool(rng.random() < 0.3)))
    extra = {
        "orthogonal_map": str(rng.choice(["matrix_exp", "cayley", "householder"])),
        "trivialization": bool(rng.integers(2)),
        "dim": int(rng.integers(0, 2)),
        "old": str(rng.choice(["weight_norm", "spectral_norm"])),
        "iterations": int(rng.integers(1, 3)),
    }
    return {
        "kind": kind,
        "stack": stack,
        "extra": extra,
        "tensor": str(rng.choice(["weight", "weight", "bias"])),
        "w": _array(rng, (WIDTH, WIDTH)),
        "b": _array(rng, (WIDTH,)),
        "new": _array(rng, (WIDTH, WIDTH)),
        "x": _array(rng, (BATCH, WIDTH)),
        "train": bool(rng.integers(2)),
        "ops": [str(rng.choice(PARAMETRIZE_OPS)) for _ in range(int(rng.integers(1, 5)))],
    }


def _linear(lib, draw):
    m = lib.nn.Linear(WIDTH, WIDTH)
    with lib.no_grad():
        m.weight.copy_(lib.tensor(draw["w"].copy()))
        m.bias.copy_(lib.tensor(draw["b"].copy()))
    return m


def _random_state(module):
    """The power-iteration vectors drawn at registration (spectral norms), by name."""
    return {
        name: np.array(b.detach().numpy())
        for name, b in module.named_buffers()
        if name.endswith(("_u", "_v"))
    }


def _copy_random_state(drawn, module):
    """The vectors torch drew, into retrograd's module (same names)."""
    for name, buffer in module.named_buffers():
        if name in drawn:
            buffer.copy_(rg.tensor(drawn[name].copy()))


def run_parametrize(lib, draw, torch_twin=None):
    log = Log()
    parametrize = lib.nn.utils.parametrize
    m = _linear(lib, draw)
    m.train(draw["train"])
    name = draw["tensor"] if draw["kind"] == "custom" else "weight"
    classes = parametrization_classes(lib)
    extra = draw["extra"]
    if draw["kind"] == "custom":
        for cls_name, unsafe in draw["stack"]:
            log.step(
                f"register {cls_name}",
                parametrize.register_parametrization,
                m,
                name,
                classes[cls_name](),
                unsafe=unsafe,
            )
    elif draw["kind"] == "orthogonal":
        log.step(
            "orthogonal",
            lib.nn.utils.parametrizations.orthogonal,
            m,
            orthogonal_map=extra["orthogonal_map"],
            use_trivialization=extra["trivialization"],
        )
    elif draw["kind"] == "spectral":
        log.step(
            "spectral_norm",
            lib.nn.utils.parametrizations.spectral_norm,
            m,
            n_power_iterations=extra["iterations"],
            dim=extra["dim"],
        )
    elif draw["kind"] == "weight_norm":
        log.step("weight_norm", lib.nn.utils.parametrizations.weight_norm, m, dim=extra["dim"])
    else:
        maker = getattr(lib.nn.utils, extra["old"])
        kwargs = {"dim": extra["dim"]}
        if extra["old"] == "spectral_norm":
            kwargs["n_power_iterations"] = extra["iterations"]
        log.step(extra["old"], maker, m, **kwargs)
    if torch_twin is not None:
        _copy_random_state(torch_twin, m)
    drawn = _random_state(m)
    log.add("parametrized", parametrize.is_parametrized(m), type(m).__name__)
    for op in draw["ops"]:
        if op == "forward" or op == "eval":
            if op == "eval":
                m.eval()
            x = lib.tensor(draw["x"].copy())
            y = log.step("forward", m, x)
            if y is None:
                continue
            params = [p for p in m.parameters()]
            log.add("forward", y, [n for n, _ in m.named_parameters()])
            result = log.step("backward", backward, lib, (y * y).sum(), params)
            if result is not None:
                log.add("grads", result[0])
        elif op == "assign":
            if name in m._parameters:
                # left out: torch refuses a plain tensor for a registered parameter (a
                # TypeError); retrograd copies it into the Parameter (its documented extension)
                continue
            value = lib.tensor(draw["new"].copy())
            if name == "bias":
                value = value[0]
            log.step("assign", setattr, m, name, value)
            value = log.step("read", getattr, m, name)
            log.add("after assign", value, [p for _, p in m.named_parameters()])
        elif op == "cached":
            with parametrize.cached():
                first = log.step("read 1", getattr, m, name)
                second = log.step("read 2", getattr, m, name)
                log.add("cached", first, first is second and first is not None)
        elif op in ("remove_true", "remove_false"):
            leave = op == "remove_true"
            log.step(
                "remove", parametrize.remove_parametrizations, m, name, leave_parametrized=leave
            )
            value = log.step("read", getattr, m, name, None)
            log.add("removed", parametrize.is_parametrized(m), type(m).__name__, value)
        else:
            log.add("state_dict", list(m.state_dict().items()))
    log.add("final", list(m.named_parameters()), list(m.named_buffers()))
    return log, drawn


# -- family: functional use of modules ---------------------------------------------------------
FUNCTIONAL_OPS = ("call", "call", "tied", "per_sample", "ensemble", "vector", "stateless")


def draw_functional(rng):
    op = str(rng.choice(FUNCTIONAL_OPS))
    batchnorm = op in ("call", "tied", "stateless")
    spec = ("seq", [draw_tree(rng, 1, batchnorm) for _ in range(int(rng.integers(1, 3)))])
    if op == "tied":
        spec = ("seq", [draw_tree(rng, 2, False), ("linear", _array(rng, (3, 3)), None)])
    return {
        "op": op,
        "spec": spec,
        "others": [draw_tree_like(rng, spec) for _ in range(2)],
        "train": bool(rng.integers(2)) if op != "per_sample" else False,
        "x": _array(rng, (BATCH, WIDTH)),
        "targets": _array(rng, (BATCH, WIDTH)),
        "keep": float(rng.random()),
        "seed": int(rng.integers(1000)),
        "strict": bool(rng.integers(2)),
        "tie_weights": bool(rng.integers(2)),
        "extra_key": bool(rng.random() < 0.2),
        "jac": bool(rng.integers(2)),
        "tie_given": int(rng.integers(3)),
        "keyword": bool(rng.random() < 0.25),
    }


def draw_tree_like(rng, spec):
    """``spec`` with fresh values (an ensemble member of the same structure)."""
    if isinstance(spec, np.ndarray):
        return _array(rng, spec.shape)
    if isinstance(spec, tuple | list):
        out = [draw_tree_like(rng, s) for s in spec]
        return tuple(out) if isinstance(spec, tuple) else out
    return spec


def _has_shared(spec):
    if spec[0] == "shared":
        return True
    children = spec[1] if spec[0] == "seq" else spec[3] if spec[0] == "node" else []
    return any(_has_shared(c) for c in children)


def _tie(lib, root):
    """The first Linear's weight used again as the last Linear's (torch's weight tying)."""
    linears = [m for m in root.modules() if isinstance(m, lib.nn.Linear)]
    if len(linears) >= 2:
        linears[-1].weight = linears[0].weight
    return len(linears) >= 2


def run_functional(lib, draw):
    log = Log()
    op = draw["op"]
    root = build(lib, draw["spec"])
    root.train(draw["train"])
    if op == "tied":
        log.add("tied", _tie(lib, root))
    x = lib.tensor(draw["x"].copy())
    rng = np.random.default_rng(draw["seed"])
    named_params = list(root.named_parameters(remove_duplicate=False))
    if op in ("call", "tied", "stateless"):
        given = {}
        for name, p in named_params:
            if rng.random() < draw["keep"] or draw["strict"]:
                given[name] = lib.tensor(_array(rng, tuple(p.shape))).requires_grad_(True)
        if op == "tied" and draw["tie_given"] == 1 and len(given) >= 2:
            first = next(iter(given.values()))
            for k in list(given):
                if k.endswith("weight"):
                    given[k] = first if given[k].shape == first.shape else given[k]
        buffers = {}
        for name, b in root.named_buffers():
            if rng.random() < 0.5 or draw["strict"]:
                buffers[name] = lib.tensor(np.asarray(b.detach().numpy()).copy())
        if draw["extra_key"]:
            given["nothing.here"] = lib.zeros(2)
        if op == "stateless":
            call = lib.nn.utils.stateless.functional_call
            y = log.step("stateless", call, root, {**given, **buffers}, (x,))
        else:
            y = log.step(
                "functional_call",
                lib.func.functional_call,
                root,
                (given, buffers),
                () if draw["keyword"] else (x,),
                {"input": x} if draw["keyword"] else None,
                strict=draw["strict"],
                tie_weights=draw["tie_weights"],
            )
        log.add("out", y)
        log.add("buffers given", buffers)
        log.add("own buffers", list(root.named_buffers()))
        if draw["tie_weights"] or not _has_shared(draw["spec"]):
            # left out: torch restores a module called under two names (tie_weights=False)
            # in the order it swapped them, leaving the second name's value in it
            log.add("own params", list(root.named_parameters()))
        if y is not None and y.requires_grad:
            wanted = list(given.values())
            result = log.step("backward", backward, lib, (y * y).sum(), wanted)
            if result is not None:
                log.add("grads", result[0])
        return log
    params = {k: v.detach() for k, v in root.named_parameters()}
    buffers = {k: v.detach() for k, v in root.named_buffers()}
    targets = lib.tensor(draw["targets"].copy())
    if op == "per_sample":
        if not params:
            return log  # left out: torch's grad of an empty dict fails inside its pytree code

        def loss_of(p, b, sample, target):
            out = lib.func.functional_call(root, (p, b), (sample.unsqueeze(0),))
            return ((out - target.unsqueeze(0)) ** 2).sum()

        transform = lib.func.jacrev if draw["jac"] else lib.func.grad
        per_sample = lib.func.vmap(transform(loss_of), in_dims=(None, None, 0, 0))
        grads = log.step("per-sample grads", per_sample, params, buffers, x, targets)
        log.add("per-sample", grads)
        return log
    if op == "ensemble":
        models = [root] + [build(lib, s) for s in draw["others"]]
        for m in models:
            m.train(draw["train"])
        stacked = log.step("stack_module_state", lib.func.stack_module_state, models)
        if stacked is None:
            return log
        p, b = stacked
        log.add("stacked", p, b, [v.requires_grad for v in p.values()])

        def model_of(p, b, data):
            return lib.func.functional_call(root, (p, b), (data,))

        if draw["train"] and b:
            return log  # torch's batch norm refuses to update running stats under vmap
        out = log.step("ensemble", lib.func.vmap(model_of, in_dims=(0, 0, None)), p, b, x)
        log.add("ensemble", out)
        if out is not None and p:
            result = log.step("backward", backward, lib, out.sum(), list(p.values()))
            if result is not None:
                log.add("grads", result[0])
        return log
    if op == "vector":
        utils = lib.nn.utils
        vector = log.step("parameters_to_vector", utils.parameters_to_vector, root.parameters())
        if vector is None:
            return log
        log.add("vector", vector, vector.requires_grad)
        y = root(x)
        result = log.step(
            "backward", backward, lib, (y * vector.sum()).sum(), list(root.parameters())
        )
        if result is not None:
            log.add("grads", result[0])
        fresh = lib.tensor(_array(rng, tuple(vector.shape)))
        log.step("vector_to_parameters", utils.vector_to_parameters, fresh, root.parameters())
        log.add("params", list(root.named_parameters()), root(x))
        log.step("bad length", utils.vector_to_parameters, fresh[1:], root.parameters())
        return log
    raise AssertionError(op)


# -- comparing ----------------------------------------------------------------------------------
FAMILIES = {
    "module_hooks": (draw_module_hooks, run_module_hooks),
    "tensor_hooks": (draw_tensor_hooks, run_tensor_hooks),
    "parametrize": (draw_parametrize, None),
    "functional": (draw_functional, run_functional),
}


def run(lib, family, draw, twin=None):
    if family == "parametrize":
        return run_parametrize(lib, draw, twin)
    return FAMILIES[family][1](lib, draw), None


def _same_refusal(error, torch_error) -> bool:
    """retrograd's error of the hierarchy, caught by the ``except`` torch's would be (torch's
    many ``RuntimeError`` refusals of bad input are ``ValueError``/``TypeError`` ones here);
    the user's own exception (a hook, a parametrization's forward) passed on unchanged."""
    if type(error) is type(torch_error) and str(error) == str(torch_error):
        return True
    if type(torch_error) is NotImplementedError:  # parametrize's "no right_inverse" signal
        return type(error) is NotImplementedError
    builtin = next(c for c in type(torch_error).__mro__ if c.__module__ == "builtins")
    if not isinstance(error, builtin) and builtin is not RuntimeError:
        return False
    return isinstance(error, rg.RetrogradError) or type(error) is AttributeError


def check(family, draw) -> str:
    torch = _torch()
    torch.manual_seed(0)
    want, twin = run(torch, family, draw)
    got, _ = run(rg, family, draw, twin)
    verdict = "ok"
    for k, (w, g) in enumerate(zip(want.events, got.events)):
        where = f"event {k}"
        if w[0] == "raise":
            if g[0] != "raise":
                raise Mismatch(f"{where}: torch raises {type(w[2]).__name__} in {w[1]}: {w[2]}")
            if not _same_refusal(g[2], w[2]):
                raise Mismatch(
                    f"{where} {w[1]}: torch raises {type(w[2]).__name__}: {w[2]}; rg raises "
                    f"{type(g[2]).__name__}: {g[2]}"
                )
            verdict = "raise"
            continue
        if g[0] == "raise":
            raise Mismatch(f"{where}: rg raises {type(g[2]).__name__} in {g[1]}: {g[2]}") from g[2]
        _same(g[1], w[1], f"{where} {_short(w[1])}")
    if len(want.events) != len(got.events):
        extra = (want.events if len(want.events) > len(got.events) else got.events)[
            min(len(want.events), len(got.events))
        ]
        raise Mismatch(
            f"{len(got.events)} events in rg, {len(want.events)} in torch; next: {_short(extra)}"
        )
    return verdict


def _short(value):
    return repr(value).replace("\n", " ")[:160]


def _same(got, want, where):
    if isinstance(want, np.ndarray):
        if not isinstance(got, np.ndarray) or got.shape != want.shape:
            raise Mismatch(f"{where}: {_short(got)} != {_short(want)}")
        if not np.allclose(got, want, rtol=2e-3, atol=2e-3, equal_nan=True):
            raise Mismatch(f"{where}: values {got} != {want}")
        return
    if isinstance(want, tuple | list):
        if not isinstance(got, tuple | list) or len(got) != len(want):
            raise Mismatch(f"{where}: {_short(got)} != {_short(want)}")
        for g, w in zip(got, want):
            _same(g, w, where)
        return
    if got != want:
        raise Mismatch(f"{where}: {got!r} != {want!r}")
