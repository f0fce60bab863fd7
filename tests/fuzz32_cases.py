"""Generators of round 32 of the differential fuzzer against PyTorch (``tests/test_fuzz32.py``):
the ``nn.Module`` and container API that real code drives, on the same random module trees
built in both libraries.

A draw is ``(spec, steps)``: ``spec`` a random tree of ``Node`` modules (a ``Module`` subclass
with parameters, persistent and non-persistent buffers and children), ``Sequential``,
``ModuleList``, ``ModuleDict``, ``ParameterList``, ``ParameterDict`` and leaves (``Linear``,
``ReLU``, ``Tanh``, ``BatchNorm1d``), every value drawn from NumPy so both libraries hold the
same weights; ``steps`` a list of edits and queries drawn from the seed alone: ``__setattr__``
of a Parameter, a tensor, ``None`` or a module, ``__delattr__``, ``register_buffer`` (persistent
or not), ``register_parameter(None)``, tied submodules and parameters, ``train``/``eval``,
``requires_grad_(False)`` on subtrees, ``apply``, the containers' ``append``, ``extend``,
``insert``, ``pop``, ``del``, slicing, ``+``, ``+=``, negative indexing, ``update``, ``keys``,
``items``, ``in``, ``get_submodule``/``get_parameter``/``get_buffer`` on good and bad paths,
``state_dict(prefix=, keep_vars=)``, ``add_module``/``register_module``, ``copy.deepcopy``
(ties kept in the copy) and ``load_state_dict(strict=True/False)`` of edited dicts (keys
dropped or added, values doubled or of a wrong shape).

``run`` replays a draw in one library and records what each step returned or whether it
raised, then every traversal (``named_modules``/``named_parameters``/``named_buffers``/
``named_children`` with ``prefix``, ``recurse`` and ``remove_duplicate``, ``modules()``,
``children()``, ``parameters(recurse=False)``), the ``training`` and ``requires_grad`` flags,
``state_dict`` keys and values, and the forward output and gradients of the edited tree.
Modules and parameters are recorded by identity (labels in order of first sight), so a tied
module or a copied list is told apart from a fresh one. Where torch raises, retrograd must
raise a ``RetrogradError``.

Left out (torch's quirks rather than meanings): assigning a plain tensor to a registered
parameter's name (torch refuses with a ``TypeError``; retrograd copies the values into the
Parameter, an extension its ``__setattr__`` documents), counted as ``extension`` by ``check``;
``ModuleList.insert`` at a negative index or past the end (torch files the module under
``str(index)``, leaving a gap in the numbering, or fails on the key ``"-1"`` after shifting
the modules). A ``load_state_dict`` that raises loads nothing in retrograd (its documented
all-or-nothing rule) while torch has copied the good entries: after one, values are no
longer compared, only names, identities and flags. A parameter, buffer or plain attribute
under a number on a ``Sequential`` or ``ModuleList`` (torch's ``append``/``extend`` then
refuse that number, after adding the modules before it; retrograd's overwrite). A Parameter
assigned under a bad name (``""``, ``"x.y"``) that a sub-module holds (torch drops the
sub-module, then refuses the name; retrograd refuses first).
"""

from __future__ import annotations

import copy

import numpy as np

import retrograd as rg

WIDTH = 3
NAMES = ("a", "b", "w", "weight", "bias", "lin", "0", "1", "2", "k")
BAD_NAMES = ("", "x.y")


class Mismatch(AssertionError):  # noqa: N818 (read as "a mismatch with torch")
    """retrograd and torch disagree."""


def _torch():
    import torch

    return torch


_NODE_CLASSES: dict[str, type] = {}


def node_class(lib):
    """A ``Module`` subclass of ``lib`` whose forward runs its children in order and adds the
    sum of its own parameters and floating buffers."""
    if lib.__name__ in _NODE_CLASSES:
        return _NODE_CLASSES[lib.__name__]

    class Node(lib.nn.Module):
        def __init__(self) -> None:
            super().__init__()

        def forward(self, x):
            for child in self.children():
                x = run_child(lib, child, x)
            for p in self.parameters(recurse=False):
                x = x + p.sum()
            for b in self.buffers(recurse=False):
                if b.dtype == lib.float32:
                    x = x + b.sum()
            return x

    _NODE_CLASSES[lib.__name__] = Node
    return Node


def run_child(lib, child, x):
    nn = lib.nn
    if isinstance(child, nn.ModuleList):
        for m in child:
            x = run_child(lib, m, x)
        return x
    if isinstance(child, nn.ModuleDict):
        for m in child.values():
            x = run_child(lib, m, x)
        return x
    if isinstance(child, nn.ParameterList):
        for p in child:
            x = x + p.sum()
        return x
    if isinstance(child, nn.ParameterDict):
        for p in child.values():
            x = x + p.sum()
        return x
    return child(x)


# -- specs: what to build, drawn from the seed alone ---------------------------------------------
def _array(rng, shape=None):
    if shape is None:
        shape = tuple(int(rng.integers(1, 3)) for _ in range(int(rng.integers(0, 3))))
    return np.asarray(rng.standard_normal(shape), dtype=np.float32)


def draw_leaf(rng):
    kind = ["linear", "linear", "relu", "tanh", "bn"][int(rng.integers(5))]
    if kind == "linear":
        bias = bool(rng.integers(4))
        w = _array(rng, (WIDTH, WIDTH))
        return ("linear", w, _array(rng, (WIDTH,)) if bias else None)
    return (kind,)


def draw_spec(rng, depth=0, kind=None):
    """A random tree spec; containers only hold forward-able modules where they run."""
    if kind is None and (depth >= 2 or rng.random() < 0.3):
        return draw_leaf(rng)
    if kind is None:
        kind = ["node", "node", "seq", "list", "dict", "node"][int(rng.integers(6))]
    n = int(rng.integers(0, 4))
    if kind == "node":
        members = []
        names = list(rng.permutation(NAMES))
        for name in names[: int(rng.integers(1, 5))]:
            what = int(rng.integers(6))
            if what <= 1:
                members.append(("child", str(name), draw_spec(rng, depth + 1)))
            elif what == 2:
                members.append(("param", str(name), _array(rng)))
            elif what == 3:
                members.append(("buffer", str(name), _array(rng), bool(rng.integers(2))))
            elif what == 4:
                values = [_array(rng) for _ in range(int(rng.integers(0, 3)))]
                members.append(("plist", str(name), values))
            else:
                keys = list(rng.permutation(["p", "q", "r"]))[: int(rng.integers(0, 3))]
                members.append(("pdict", str(name), [(str(k), _array(rng)) for k in keys]))
        return ("node", members)
    children = [draw_spec(rng, depth + 1) for _ in range(n)]
    if kind == "seq":
        children = [c if c[0] not in ("list", "dict") else draw_leaf(rng) for c in children]
        return ("seq", children)
    if kind == "list":
        return ("list", children)
    keys = list(rng.permutation(["x", "y", "z", "u"]))[:n]
    return ("dict", [(str(k), c) for k, c in zip(keys, children)])


def build(lib, spec, pool):
    """``spec`` built in ``lib``; every module appended to ``pool`` in building order."""
    nn = lib.nn
    kind = spec[0]
    if kind == "linear":
        _, w, b = spec
        m = nn.Linear(WIDTH, WIDTH, bias=b is not None)
        m.weight = nn.Parameter(lib.tensor(w.copy()))
        if b is not None:
            m.bias = nn.Parameter(lib.tensor(b.copy()))
    elif kind == "relu":
        m = nn.ReLU()
    elif kind == "tanh":
        m = nn.Tanh()
    elif kind == "bn":
        m = nn.BatchNorm1d(WIDTH)
    elif kind == "seq":
        m = nn.Sequential(*[build(lib, c, pool) for c in spec[1]])
    elif kind == "list":
        m = nn.ModuleList([build(lib, c, pool) for c in spec[1]])
    elif kind == "dict":
        m = nn.ModuleDict({k: build(lib, c, pool) for k, c in spec[1]})
    else:
        m = node_class(lib)()
        for member in spec[1]:
            what, name = member[0], member[1]
            if what == "child":
                setattr(m, name, build(lib, member[2], pool))
            elif what == "param":
                setattr(m, name, nn.Parameter(lib.tensor(member[2].copy())))
            elif what == "buffer":
                m.register_buffer(name, lib.tensor(member[2].copy()), persistent=member[3])
            elif what == "plist":
                values = [nn.Parameter(lib.tensor(v.copy())) for v in member[2]]
                setattr(m, name, nn.ParameterList(values))
            else:
                params = {k: nn.Parameter(lib.tensor(v.copy())) for k, v in member[2]}
                setattr(m, name, nn.ParameterDict(params))
    pool.append((kind, m))
    return m


# -- steps --------------------------------------------------------------------------------------
def _name(rng):
    if rng.random() < 0.08:
        return str(rng.choice(BAD_NAMES))
    return str(rng.choice(NAMES))


def _path(rng):
    parts = [str(rng.choice(NAMES + ("x", "y", "weight", "running_mean")))]
    while rng.random() < 0.5:
        parts.append(str(rng.choice(NAMES + ("x", "y", "weight", "running_mean"))))
    return ".".join(parts)


STEP_KINDS = (
    "set_param",
    "set_none",
    "set_module",
    "tie_module",
    "tie_param",
    "delattr",
    "register_buffer",
    "register_parameter",
    "train",
    "requires_grad",
    "apply",
    "list_op",
    "seq_op",
    "dict_op",
    "plist_op",
    "pdict_op",
    "get",
    "load",
    "named",
    "add_module",
    "state_dict",
    "set_buffer",
    "deepcopy",
)


def draw_steps(rng, pool_size):
    steps = []
    for _ in range(int(rng.integers(1, 7))):
        kind = str(rng.choice(STEP_KINDS))
        target = int(rng.integers(pool_size))
        other = int(rng.integers(pool_size))
        payload = None
        if kind == "set_param":
            payload = (_name(rng), _array(rng), bool(rng.integers(2)))
        elif kind in ("set_none", "delattr"):
            payload = _name(rng)
        elif kind == "set_module":
            payload = (_name(rng), draw_leaf(rng))
        elif kind in ("tie_module", "tie_param"):
            payload = _name(rng)
        elif kind == "register_buffer":
            value = None if rng.random() < 0.2 else _array(rng)
            payload = (_name(rng), value, bool(rng.integers(2)))
        elif kind == "register_parameter":
            value = None if rng.random() < 0.6 else _array(rng)
            payload = (_name(rng), value)
        elif kind == "train":
            payload = int(rng.integers(3))  # train(), train(False), eval()
        elif kind == "requires_grad":
            payload = bool(rng.integers(2))
        elif kind == "apply":
            payload = int(rng.integers(2))
        elif kind in ("list_op", "seq_op"):
            op = str(
                rng.choice(
                    [
                        "append",
                        "extend",
                        "insert",
                        "pop",
                        "del",
                        "del_slice",
                        "slice",
                        "index",
                        "setitem",
                        "add",
                        "iadd",
                        "len",
                    ]
                )
            )
            k = int(rng.integers(-4, 5))
            stop = int(rng.integers(-4, 5))
            leaves = [draw_leaf(rng) for _ in range(int(rng.integers(0, 3)))]
            payload = (op, k, stop, leaves)
        elif kind == "dict_op":
            op = str(
                rng.choice(
                    ["update", "update_dict", "clear", "pop", "del", "setitem", "keys", "items"]
                    + ["in", "index"]
                )
            )
            key = str(rng.choice(["x", "y", "z", "u", "v", "a.b"]))
            pairs = [
                (str(rng.choice(["x", "y", "v", "w"])), draw_leaf(rng))
                for _ in range(int(rng.integers(0, 3)))
            ]
            payload = (op, key, pairs)
        elif kind == "plist_op":
            op = str(rng.choice(["append", "extend", "index", "setitem", "len"]))
            values = [_array(rng) for _ in range(int(rng.integers(0, 3)))]
            payload = (op, int(rng.integers(-3, 4)), values)
        elif kind == "pdict_op":
            op = str(rng.choice(["update", "pop", "setitem", "del", "keys", "in", "index"]))
            key = str(rng.choice(["p", "q", "s"]))
            pairs = [(str(rng.choice(["p", "s", "t"])), _array(rng)) for _ in range(2)]
            payload = (op, key, pairs)
        elif kind == "get":
            payload = (
                str(rng.choice(["get_submodule", "get_parameter", "get_buffer"])),
                _path(rng),
            )
            if rng.random() < 0.15:
                payload = (payload[0], "")
        elif kind == "load":
            payload = (
                bool(rng.integers(2)),  # strict
                int(rng.integers(4)),  # how many keys to drop
                [str(rng.choice(["extra", "a.extra", "x.y.z"]))] * int(rng.integers(0, 2)),
                int(rng.integers(1000)),
                int(rng.integers(3)),  # values as saved, doubled, or one of a wrong shape
            )
        elif kind == "add_module":
            leaf = None if rng.random() < 0.15 else draw_leaf(rng)
            payload = (_name(rng), leaf, bool(rng.integers(2)))
        elif kind == "state_dict":
            payload = (str(rng.choice(["", "pre.", "a"])), bool(rng.integers(2)))
        elif kind == "set_buffer":
            value = None if rng.random() < 0.2 else _array(rng)
            payload = (str(rng.choice(NAMES + ("running_mean",))), value)
        elif kind == "named":
            payload = (
                str(rng.choice(["", "pre", "m.x"])),
                bool(rng.integers(2)),
                bool(rng.integers(2)),
            )
        steps.append((kind, target, other, payload))
    return steps


def draw(rng):
    spec = draw_spec(rng, 0, "node" if rng.random() < 0.7 else None)
    pool: list = []
    build(rg, spec, pool)
    return spec, draw_steps(rng, len(pool))


# -- running a draw ----------------------------------------------------------------------------
class Labels:
    """Names objects by identity in order of first sight, so both libraries' records agree on
    which results are the same object."""

    def __init__(self) -> None:
        self.ids: dict[int, int] = {}
        self.keep: list = []

    def __call__(self, obj) -> int:
        if id(obj) not in self.ids:
            self.ids[id(obj)] = len(self.ids)
            self.keep.append(obj)
        return self.ids[id(obj)]


def normalize(lib, labels, value):
    nn = lib.nn
    if isinstance(value, nn.Module):
        return ("M", type(value).__name__, labels(value))
    if isinstance(value, nn.Parameter):
        return ("P", labels(value), *_tensor_record(value))
    if isinstance(value, lib.Tensor):
        return ("T", *_tensor_record(value))
    if isinstance(value, np.ndarray):  # retrograd's state-dict values (``StateValue``)
        data = np.asarray(value)
        return ("T", str(data.dtype), data.shape, False, data.astype(np.float64).round(4))
    if isinstance(value, tuple | list):
        return [normalize(lib, labels, v) for v in value]
    if isinstance(value, dict):
        return [(k, normalize(lib, labels, v)) for k, v in value.items()]
    if hasattr(value, "missing_keys"):
        return ("keys", list(value.missing_keys), list(value.unexpected_keys))
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return ("other", type(value).__name__)


def _tensor_record(t, decimals=4):
    data = np.asarray(t.detach().numpy() if hasattr(t, "detach") else t, dtype=np.float64)
    return (
        str(t.dtype).split(".")[-1],
        tuple(t.shape),
        bool(t.requires_grad),
        data.round(decimals),
    )


def _find(pool, kind_names):
    return [m for kind, m in pool if kind in kind_names]


def _leaf(lib, spec, pool):
    return build(lib, spec, pool)


def do_step(lib, root, pool, step, labels):
    kind, target, other, payload = step
    nn = lib.nn
    module = pool[target][1]
    partner = pool[other][1]
    name = payload[0] if isinstance(payload, tuple) else payload
    plain_kinds = ("set_param", "set_none", "register_buffer", "register_parameter", "set_buffer")
    numbered = isinstance(module, nn.Sequential | nn.ModuleList)
    bad_name = name in BAD_NAMES
    if kind in ("set_param", "tie_param") and bad_name and name in module.__dict__["_modules"]:
        # left out: torch drops the sub-module of that name before refusing the name
        return "skip"
    if kind in plain_kinds + ("tie_param",) and numbered and str(name).isdigit():
        # left out: a non-module under a number blocks torch's append/extend ("attribute '2'
        # already exists", after adding the modules before it), not retrograd's
        return "skip"
    if kind == "set_param":
        name, value, as_parameter = payload
        tensor = lib.tensor(value.copy())
        setattr(module, name, nn.Parameter(tensor) if as_parameter else tensor)
        return getattr(module, name)
    if kind == "set_none":
        setattr(module, payload, None)
        return getattr(module, payload)
    if kind == "set_module":
        name, leaf = payload
        setattr(module, name, _leaf(lib, leaf, []))
        return getattr(module, name)
    if kind == "tie_module":
        if pool[other][0] not in ("linear", "relu", "tanh", "bn") or partner is module:
            return "skip"  # a container tied under its own subtree would loop forward
        setattr(module, payload, partner)
        return getattr(module, payload)
    if kind == "tie_param":
        params = list(partner.parameters(recurse=False))
        if not params:
            return "none"
        setattr(module, payload, params[0])
        return getattr(module, payload) is params[0]
    if kind == "delattr":
        delattr(module, payload)
        return hasattr(module, payload)
    if kind == "register_buffer":
        name, value, persistent = payload
        tensor = None if value is None else lib.tensor(value.copy())
        module.register_buffer(name, tensor, persistent=persistent)
        return getattr(module, name)
    if kind == "register_parameter":
        name, value = payload
        param = None if value is None else nn.Parameter(lib.tensor(value.copy()))
        module.register_parameter(name, param)
        return getattr(module, name)
    if kind == "train":
        out = module.train() if payload == 0 else module.train(False) if payload == 1 else None
        if payload == 2:
            out = module.eval()
        return out is module
    if kind == "requires_grad":
        return module.requires_grad_(payload) is module
    if kind == "apply":
        seen = []

        def visit(m):
            seen.append(type(m).__name__)
            if payload and isinstance(m, nn.Linear):
                m.train(False)

        return [module.apply(visit) is module, seen]
    if kind in ("list_op", "seq_op"):
        containers = _find(pool, ("list",) if kind == "list_op" else ("seq",))
        if not containers:
            return "none"
        box = containers[target % len(containers)]
        op, k, stop, leaves = payload
        made = [_leaf(lib, leaf, []) for leaf in leaves]
        if op == "append":
            return box.append(made[0] if made else nn.ReLU()) is box
        if op == "extend":
            return box.extend(made) is box
        if op == "insert":
            if kind == "list_op" and not 0 <= k <= len(box):
                # torch's ModuleList files it under str(k), leaving a gap, and a negative k
                # fails on the key "-1" after shifting the modules
                return "skip"
            return box.insert(k, made[0] if made else nn.Tanh())
        if op == "pop":
            return box.pop(k)
        if op == "del":
            del box[k]
            return len(box)
        if op == "del_slice":
            del box[k:stop]
            return len(box)
        if op == "slice":
            piece = box[k:stop]
            return [type(piece).__name__, list(piece.named_children()), piece is box]
        if op == "index":
            return box[k]
        if op == "setitem":
            box[k] = made[0] if made else nn.ReLU()
            return box[k]
        if op == "add":
            right = nn.Sequential(*made) if kind == "seq_op" else nn.ModuleList(made)
            total = box + right
            return [type(total).__name__, list(total.named_children()), total is box]
        if op == "iadd":
            right = nn.Sequential(*made) if kind == "seq_op" else nn.ModuleList(made)
            before = box
            box += right
            return [box is before, list(box.named_children())]
        return len(box)
    if kind == "dict_op":
        containers = _find(pool, ("dict",))
        if not containers:
            return "none"
        box = containers[target % len(containers)]
        op, key, pairs = payload
        if op == "update":
            box.update([(k, _leaf(lib, leaf, [])) for k, leaf in pairs])
            return list(box.keys())
        if op == "update_dict":
            box.update({k: _leaf(lib, leaf, []) for k, leaf in pairs})
            return list(box.keys())
        if op == "clear":
            box.clear()
            return [len(box), list(box.named_children())]
        if op == "pop":
            return box.pop(key)
        if op == "del":
            del box[key]
            return list(box.keys())
        if op == "setitem":
            box[key] = _leaf(lib, pairs[0][1], []) if pairs else nn.ReLU()
            return list(box.items())
        if op == "keys":
            return [list(box.keys()), list(box.values()), len(box), list(box)]
        if op == "items":
            return list(box.items())
        if op == "in":
            return key in box
        return box[key]
    if kind in ("plist_op", "pdict_op"):
        containers = _find(pool, ("node",))
        boxes = []
        for node in containers:
            for child in node.children():
                wanted = nn.ParameterList if kind == "plist_op" else nn.ParameterDict
                if isinstance(child, wanted):
                    boxes.append(child)
        if not boxes:
            return "none"
        box = boxes[target % len(boxes)]
        op, k, values = payload
        if kind == "plist_op":
            made = [nn.Parameter(lib.tensor(v.copy())) for v in values]
            if op == "append":
                return box.append(made[0] if made else nn.Parameter(lib.zeros(1))) is box
            if op == "extend":
                return box.extend(made) is box
            if op == "index":
                return box[k]
            if op == "setitem":
                box[k] = made[0] if made else nn.Parameter(lib.ones(2))
                return box[k]
            return [len(box), list(box)]
        made = [(key, nn.Parameter(lib.tensor(v.copy()))) for key, v in values]
        if op == "update":
            box.update(made)
            return list(box.keys())
        if op == "pop":
            return box.pop(k)
        if op == "setitem":
            box[k] = made[0][1]
            return list(box.keys())
        if op == "del":
            del box[k]
            return list(box.keys())
        if op == "keys":
            return [list(box.keys()), list(box.values()), len(box)]
        if op == "in":
            return k in box
        return box[k]
    if kind == "get":
        method, path = payload
        return getattr(module, method)(path)
    if kind == "load":
        strict, drop, extra, seed, change = payload
        state = {k: lib.tensor(np.array(v)) for k, v in root.state_dict().items()}
        keys = list(state)
        order = np.random.default_rng(seed).permutation(len(keys))
        for j in order[:drop]:
            del state[keys[j]]
        for key in extra:
            state[key] = lib.zeros(1)
        floats = [k for k, v in state.items() if v.dtype == lib.float32]
        if change == 1:
            state = {k: v * 2 if k in floats else v for k, v in state.items()}
        elif change == 2 and floats:
            state[floats[seed % len(floats)]] = lib.zeros(4, 5)
        return root.load_state_dict(state, strict=strict)
    if kind == "add_module":
        name, leaf, as_register = payload
        made = None if leaf is None else _leaf(lib, leaf, [])
        method = module.register_module if as_register else module.add_module
        method(name, made)
        return [list(module.named_children()), list(module._modules)]
    if kind == "state_dict":
        prefix, keep_vars = payload
        return list(module.state_dict(prefix=prefix, keep_vars=keep_vars).items())
    if kind == "deepcopy":
        # ties survive a copy: the copy's duplicate names point at its own shared objects
        twin = copy.deepcopy(module)
        return [
            list(twin.named_modules(remove_duplicate=False)),
            list(twin.named_parameters(remove_duplicate=False)),
            list(twin.state_dict().items()),
        ]
    if kind == "set_buffer":
        name, value = payload
        setattr(module, name, None if value is None else lib.tensor(value.copy()))
        return [getattr(module, name), list(module.named_buffers())]
    if kind == "named":
        prefix, recurse, remove_duplicate = payload
        return [
            list(module.named_modules(prefix=prefix, remove_duplicate=remove_duplicate)),
            list(module.named_parameters(prefix, recurse, remove_duplicate)),
            list(module.named_buffers(prefix, recurse, remove_duplicate)),
            list(module.named_children()),
            list(module.parameters(recurse=False)),
        ]
    raise AssertionError(kind)


def observe(lib, root, labels):
    record = {
        "named_modules": list(root.named_modules()),
        "named_modules_dup": list(root.named_modules(remove_duplicate=False)),
        "modules": list(root.modules()),
        "children": list(root.children()),
        "named_children": list(root.named_children()),
        "named_parameters": list(root.named_parameters()),
        "named_parameters_dup": list(root.named_parameters(remove_duplicate=False)),
        "parameters_own": list(root.parameters(recurse=False)),
        "named_buffers": list(root.named_buffers()),
        "named_buffers_own": list(root.named_buffers(recurse=False)),
        "training": [(n, m.training) for n, m in root.named_modules()],
        "state_dict": list(root.state_dict().items()),
    }
    out = {k: normalize(lib, labels, v) for k, v in record.items()}
    x = lib.tensor(np.linspace(-1, 1, 2 * WIDTH, dtype=np.float32).reshape(2, WIDTH))
    try:
        y = root(x) if not isinstance(root, lib.nn.ModuleList | lib.nn.ModuleDict) else None
        if y is None:
            y = run_child(lib, root, x)
        out["forward"] = ("T", *_tensor_record(y))
        params = [p for p in root.parameters() if p.requires_grad]
        if params and y.requires_grad:
            grads = lib.autograd.grad(y.sum(), params, allow_unused=True)
            # (rounded coarser: a train-mode BatchNorm's gradients are zero up to float32 noise)
            out["grads"] = [None if g is None else _tensor_record(g, 2) for g in grads]
    except Exception:
        # (torch reads a deleted ``Linear.bias`` as a missing attribute; either refusal will do)
        out["forward"] = "raise"
    return out


def run(lib, draw):
    """Each step's result or refusal, then the final observation."""
    spec, steps = draw
    pool: list = []
    labels = Labels()
    root = build(lib, spec, pool)
    for _, m in pool:
        labels(m)
    results = []
    for step in steps:
        try:
            results.append(("ok", normalize(lib, labels, do_step(lib, root, pool, step, labels))))
        except Exception as e:  # either library's refusal is a result here
            results.append(("raise", e))
    return results, observe(lib, root, labels)


def _failed_load(results, steps) -> int | None:
    """The index of the first load that raised, if any."""
    for k, ((kind, _), step) in enumerate(zip(results, steps)):
        if kind == "raise" and step[0] == "load":
            return k
    return None


def _same_refusal(error, torch_error) -> bool:
    """retrograd's error of the hierarchy, caught by the ``except`` torch's would be (a missing
    attribute stays Python's ``AttributeError``, which ``hasattr`` and ``getattr(m, name,
    default)`` rely on)."""
    builtin = next(c for c in type(torch_error).__mro__ if c.__module__ == "builtins")
    if not isinstance(error, builtin):
        return False
    return isinstance(error, rg.RetrogradError) or type(error) is AttributeError


def _extension(torch_error) -> bool:
    return isinstance(torch_error, TypeError) and "as parameter" in str(torch_error)


def check(draw) -> str:
    torch = _torch()
    want_steps, want_final = run(torch, draw)
    got_steps, got_final = run(rg, draw)
    verdict = "ok"
    failed_load = _failed_load(want_steps, draw[1])
    for k, ((want_kind, want), (got_kind, got), step) in enumerate(
        zip(want_steps, got_steps, draw[1])
    ):
        where = f"step {k} {step[0]}(pool {step[1]}, {step[2]}, {_short(step[3])})"
        if want_kind == "raise":
            if got_kind != "raise":
                if _extension(want):
                    return "extension"
                raise Mismatch(f"{where}: torch raises {type(want).__name__}: {want}; rg returns")
            if _extension(want):
                return "extension"
            if not _same_refusal(got, want):
                raise Mismatch(
                    f"{where}: torch raises {type(want).__name__}: {want}; rg raises "
                    f"{type(got).__name__}: {got}"
                )
            verdict = "raise"
            continue
        if got_kind == "raise":
            raise Mismatch(f"{where}: rg raises {type(got).__name__}: {got}") from got
        _same(got, want, where, values=failed_load is None or k < failed_load)
    for key in want_final:
        if key not in got_final:
            raise Mismatch(f"final {key}: missing in rg")
        if failed_load is not None and key in ("forward", "grads"):
            continue
        _same(got_final[key], want_final[key], f"final {key}", values=failed_load is None)
    return verdict


def _short(payload):
    text = repr(payload).replace("\n", " ")
    return text[:120]


def _same(got, want, where, values=True):
    if isinstance(want, np.ndarray | np.floating):
        if not isinstance(got, np.ndarray | np.floating) or np.shape(got) != np.shape(want):
            raise Mismatch(f"{where}: {got!r} != {want!r}")
        if not values:
            return
        if not np.allclose(got, want, rtol=1e-3, atol=2e-2, equal_nan=True):
            raise Mismatch(f"{where}: values {got} != {want}")
        return
    if isinstance(want, tuple | list):
        if not isinstance(got, tuple | list) or len(got) != len(want):
            raise Mismatch(f"{where}: {_short(got)} != {_short(want)}")
        for g, w in zip(got, want):
            _same(g, w, where, values)
        return
    if got != want or type(got) is not type(want):
        raise Mismatch(f"{where}: {got!r} != {want!r}")
