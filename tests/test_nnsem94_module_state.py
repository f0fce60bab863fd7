"""nn.Module's container and state bookkeeping against torch 2.13 (helper nnsem94).

Each test runs the same program on torch and on retrograd and compares what it observes:

- ``nn.ParameterDict``'s keys are torch's ``_keys``: the entries put in through the
  dictionary. What is registered on it behind the dictionary's back (``register_parameter``,
  ``add_module``, ``pd.name = value``) is trained and saved but is no key; a key whose
  parameter pruning or a parametrization took over stays a key whose value is the pruned or
  parametrized tensor. An entry put over a name registered otherwise is torch's ``setattr``
  (a buffer replaced, an int over a sub-module refused), and a key that is no string is
  refused first.
- ``Module.xpu()``/``mtia()``/``ipu()`` (torch's public names, missing) refuse the move as
  torch's build without those devices does, and ``Module.call_super_init``,
  ``dump_patches`` and ``T_destination`` exist as torch's class attributes.
- ``nn.modules.module.register_module_{buffer,module,parameter}_registration_hook`` (torch's
  public names, missing) see every registration torch's see, in its order, and their
  results replace the value registered.
- A seeded sweep of random module-tree programs (shared sub-modules, tied parameters,
  buffers persistent or not, ``None`` entries, containers edited in place, ``requires_grad_``,
  ``train``/``eval``, dtype casts, ``load_state_dict(strict=False)``, deep copies and pickles)
  compares after every call the names listed by ``named_modules``/``named_parameters``/
  ``named_buffers`` (either ``remove_duplicate``), which entries are the same object, the
  state dict's keys, dtypes and values, the ``training`` flags and ``repr``. Locally it ran
  for 150 seeds per backend; here five, three of them those that found the ``ParameterDict``
  keys (16, 52, 56).
"""

from __future__ import annotations

import copy
import pickle
import warnings

import numpy as np
import pytest

import retrograd as rg

torch = pytest.importorskip("torch")
pytest.importorskip("torch.nn.utils.prune")
pytest.importorskip("torch.nn.utils.parametrize")

LIBRARIES = (torch, rg)


def _no_grad(lib):
    return torch.no_grad() if lib is torch else rg.no_grad()


def _values(tensor) -> list:
    return np.asarray(tensor.detach().numpy(), dtype=np.float64).round(6).tolist()


def _printed(module) -> str:
    return repr(module).replace("torch.", "").replace("retrograd.", "")


def _table(lib):
    return lib.nn.ParameterDict({"w": lib.nn.Parameter(lib.tensor([1.0, -2.0])), "s": 3})


def _summary(table) -> tuple:
    return (
        list(table.keys()),
        len(table),
        [name for name, _ in table.named_parameters()],
        list(table.state_dict()),
        _printed(table),
    )


# -- ParameterDict's keys ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "register",
    ["setattr_module", "add_module", "setattr_parameter", "register_parameter"],
)
def test_what_is_registered_behind_a_parameter_dict_is_no_key(register):
    # retrograd listed the extra entry as a key (len 3, printed twice for a module)
    def observe(lib):
        table = _table(lib)
        if register == "setattr_module":
            table.m = lib.nn.ReLU()
        elif register == "add_module":
            table.add_module("m", lib.nn.ReLU())
        elif register == "setattr_parameter":
            table.p = lib.nn.Parameter(lib.ones(1))
        else:
            table.register_parameter("p", lib.nn.Parameter(lib.ones(1)))
        return _summary(table), "m" in table or "p" in table

    assert observe(rg) == observe(torch)


def test_a_pruned_parameter_dict_entry_keeps_its_key():
    # retrograd's key became "w_orig" and table["w"] raised
    def observe(lib):
        prune = torch.nn.utils.prune if lib is torch else rg.nn.utils.prune
        table = _table(lib)
        prune.l1_unstructured(table, "w", amount=1)
        seen = [_summary(table), type(table["w"]).__name__, _values(table["w"])]
        prune.remove(table, "w")
        seen += [_summary(table), type(table["w"]).__name__, _values(table["w"])]
        return seen

    assert observe(rg) == observe(torch)


def test_a_pruned_parameter_dict_entry_takes_a_new_parameter():
    def observe(lib):
        prune = torch.nn.utils.prune if lib is torch else rg.nn.utils.prune
        table = _table(lib)
        prune.l1_unstructured(table, "w", amount=1)
        table["w"] = lib.nn.Parameter(lib.full((2,), 5.0))
        return _summary(table), _values(table["w"])

    assert observe(rg) == observe(torch)


def test_a_parametrized_parameter_dict_entry_keeps_its_key():
    # retrograd dropped "w" from the keys and listed "parametrizations" instead
    def observe(lib):
        parametrize = torch.nn.utils.parametrize if lib is torch else rg.nn.utils.parametrize

        class Double(lib.nn.Module):
            def forward(self, x):
                return x * 2

        table = _table(lib)
        parametrize.register_parametrization(table, "w", Double())
        seen = [list(table.keys()), len(table), "w" in table, _values(table["w"])]
        seen.append([name for name, _ in table.named_parameters()])
        parametrize.remove_parametrizations(table, "w")
        seen += [list(table.keys()), _values(table["w"])]
        return seen

    assert observe(rg) == observe(torch)


@pytest.mark.parametrize(
    "held, given",
    [("buffer", "parameter"), ("buffer", "tensor"), ("buffer", "int"), ("buffer", "module"),
     ("module", "parameter"), ("module", "int"), ("module", "none"), ("parameter", "module"),
     ("plain", "module")],
)  # fmt: skip
def test_a_parameter_dict_entry_over_a_registered_name_is_torchs_setattr(held, given):
    # retrograd refused a parameter or module over a buffer's name ("already a buffer"),
    # and put an int or None over a sub-module as a plain entry, where torch's setattr
    # replaces the buffer, refuses the int and keeps None as the sub-module
    def observe(lib):
        table = lib.nn.ParameterDict({"k": lib.ones(1)})
        if held == "buffer":
            table.register_buffer("a", lib.ones(2))
        else:
            table["a"] = {"module": lib.nn.ReLU, "parameter": lambda: lib.ones(3)}.get(
                held, lambda: 5
            )()
        value = {
            "parameter": lambda: lib.nn.Parameter(lib.zeros(1)),
            "tensor": lambda: lib.zeros(1),
            "int": lambda: 3,
            "none": lambda: None,
            "module": lib.nn.Tanh,
        }[given]()
        try:
            table["a"] = value
        except TypeError:
            return "TypeError"
        return (
            list(table),
            [name for name, _ in table.named_parameters()],
            [name for name, _ in table.named_buffers()],
            list(table._modules),
            type(table["a"]).__name__,
        )

    assert observe(rg) == observe(torch)


@pytest.mark.parametrize("key", [["a"], 1, ("a",)])
def test_a_parameter_dict_key_that_is_no_string_is_refused_by_the_hierarchy(key):
    # an unhashable key reached a dict lookup first: a bare "unhashable type" TypeError
    with pytest.raises(TypeError):
        torch.nn.ParameterDict().setdefault(key, "x")
    table = rg.nn.ParameterDict({"w": rg.ones(1)})
    with pytest.raises(rg.errors.DTypeError, match="keys must be strings"):
        table.setdefault(key, "x")
    with pytest.raises(rg.errors.DTypeError, match="keys must be strings"):
        table[key] = rg.ones(1)
    assert list(table) == ["w"]


# -- Module's missing public names ---------------------------------------------------------------


@pytest.mark.parametrize("move", ["xpu", "mtia", "ipu"])
def test_moves_to_an_absent_accelerator_are_refused_as_torchs(move):
    # retrograd had no Module.xpu/mtia/ipu (an AttributeError); torch's CPU build raises
    # AssertionError (xpu, mtia) or RuntimeError (ipu), and the hierarchy's
    # DeviceUnavailableError is both
    torch_module = torch.nn.Linear(2, 2)
    with pytest.raises((AssertionError, RuntimeError)) as expected:
        getattr(torch_module, move)()
    module = rg.nn.Linear(2, 2)
    weight = module.weight
    with pytest.raises(expected.type, match=f"not compiled with {move.upper()}"):
        getattr(module, move)()
    with pytest.raises(rg.errors.DeviceUnavailableError):
        getattr(module, move)(0)
    assert module.weight is weight and str(module.weight.device) == "cpu"
    assert getattr(rg.nn.Module(), move)() is not None  # nothing to move, as torch's


@pytest.mark.backend_independent("class attributes, no tensor involved")
def test_module_class_attributes_are_torchs():
    for name in ("call_super_init", "dump_patches"):
        assert getattr(rg.nn.Module, name) == getattr(torch.nn.Module, name)
    assert repr(rg.nn.Module.T_destination) == repr(torch.nn.Module.T_destination)
    assert [
        n for n in dir(torch.nn.Module) if not n.startswith("_") and n not in dir(rg.nn.Module)
    ] == []


def _registrations(lib) -> list:
    """What torch's global registration hooks see while a program builds and edits modules
    (each library's ``nn.modules.module`` functions); a hook's result replaces the value."""
    nn = lib.nn
    module_functions = torch.nn.modules.module if lib is torch else rg.nn.modules.module
    seen: list = []

    def on_parameter(module, name, value):
        seen.append(("parameter", type(module).__name__, name, tuple(value.shape)))
        if name == "bias":
            return nn.Parameter(lib.full(tuple(value.shape), 7.0))
        return None

    def on_buffer(module, name, value):
        kind = None if value is None else str(value.dtype).replace("torch.", "")
        seen.append(("buffer", type(module).__name__, name, kind))

    def on_module(module, name, value):
        seen.append(("module", type(module).__name__, name, type(value).__name__))
        return nn.Tanh() if isinstance(value, nn.ReLU) else None

    handles = [
        module_functions.register_module_parameter_registration_hook(on_parameter),
        module_functions.register_module_buffer_registration_hook(on_buffer),
        module_functions.register_module_module_registration_hook(on_module),
    ]
    try:
        model = nn.Sequential(nn.Linear(2, 2), nn.BatchNorm1d(2), nn.ReLU())
        model[0].bias = None  # (an absent parameter: no hook, as torch's)
        model[0].bias = nn.Parameter(lib.ones(2))
        linear = model[0]
        model[1].running_mean = lib.zeros(2)
        holder = nn.Module()
        holder.add_module("extra", nn.ReLU())
        seen.append(type(holder.extra).__name__)
        holder.extra = None
        holder.register_buffer("absent", None)
        model.append(nn.ReLU())
        model.insert(1, nn.GELU())  # torch's insert writes _modules itself: no hook
        model[0] = nn.SiLU()
        seen.append(("slice", [type(m).__name__ for m in model[1:3]]))
        blocks = nn.ModuleList([nn.ReLU()])
        blocks.insert(0, nn.GELU())
        blocks += [nn.ReLU()]
        nn.ModuleDict({"a": nn.ReLU()}).update([("b", nn.GELU())])
        nn.ParameterList([lib.ones(1)]).append(lib.ones(1))
        nn.ParameterDict({"a": lib.ones(1)})["b"] = lib.ones(1)
        nn.LSTM(1, 1)
    finally:
        for handle in handles:
            handle.remove()
    nn.Linear(1, 1)  # removed: seen by none
    seen.append([type(m).__name__ for m in model])
    seen.append(_values(linear.bias))  # the hook's replacement (7s), not the ones assigned
    return seen


def test_global_registration_hooks_see_what_torchs_see():
    # retrograd had no register_module_{buffer,module,parameter}_registration_hook
    assert _registrations(rg) == _registrations(torch)


# -- random module-tree programs -----------------------------------------------------------------

NAMES = ["a", "b", "c", "weight", "bias", "0", "1"]
LEAVES = ["linear", "linear_no_bias", "batch_norm", "relu", "sequential", "module_list",
          "module_dict", "plain", "parameter_list", "parameter_dict"]  # fmt: skip
CALLS = ["set_module", "set_existing_module", "set_parameter", "tie", "buffer",
         "buffer_not_persistent", "delete", "set_none", "add_module", "sequential",
         "module_list", "module_dict", "parameter_list", "parameter_dict", "requires_grad_",
         "train", "dtype", "load", "copy"]  # fmt: skip


def _canonical(objects) -> list[int]:
    """Which entries are one object: each object numbered by its first place."""
    first: dict[int, int] = {}
    return [first.setdefault(id(item), len(first)) for item in objects]


def _fingerprint(root) -> dict:
    named_all = list(root.named_modules(remove_duplicate=False))
    parameters = list(root.named_parameters())
    parameters_all = list(root.named_parameters(remove_duplicate=False))
    buffers = list(root.named_buffers(remove_duplicate=False))
    state = root.state_dict()
    return {
        "modules": [(name, type(m).__name__) for name, m in root.named_modules()],
        "modules_all": [name for name, _ in named_all],
        "module_ties": _canonical(m for _, m in named_all),
        "parameters": [name for name, _ in parameters],
        "parameters_all": [name for name, _ in parameters_all],
        "parameter_ties": _canonical(p for _, p in parameters_all),
        "parameter_kinds": [
            (str(p.dtype).replace("torch.", ""), tuple(p.shape), p.requires_grad)
            for _, p in parameters
        ],
        "buffers": [
            (name, None if b is None else str(b.dtype).replace("torch.", "")) for name, b in buffers
        ],
        "buffers_once": [name for name, _ in root.named_buffers()],
        "state": [
            (k, str(v.dtype).replace("torch.", ""), tuple(v.shape)) for k, v in state.items()
        ],
        "state_values": [
            np.asarray(v.detach().numpy() if hasattr(v, "detach") else v, dtype=np.float64)
            .round(5)
            .tolist()
            for v in state.values()
        ],
        "training": [m.training for _, m in named_all],
        "children": [name for name, _ in root.named_children()],
        "printed": _printed(root),
    }


def _made(kind: str, nn, vector, width_in: int, width_out: int):
    """A new module of ``kind`` from the library whose ``nn`` is given."""
    if kind == "linear":
        return nn.Linear(width_in, width_out)
    if kind == "linear_no_bias":
        return nn.Linear(width_in, width_out, bias=False)
    if kind == "batch_norm":
        return nn.BatchNorm1d(width_out)
    if kind == "parameter_list":
        return nn.ParameterList([vector])
    if kind == "parameter_dict":
        return nn.ParameterDict({"k": vector})
    plain = {"relu": nn.ReLU, "sequential": nn.Sequential, "module_list": nn.ModuleList}
    plain.update(module_dict=nn.ModuleDict, plain=nn.Module)
    return plain[kind]()


class _Twins:
    """The same module tree in torch and in retrograd, and a pool of the modules made so far
    (in both, at the same positions) that calls act on."""

    def __init__(self, rng: np.random.Generator) -> None:
        self.rng = rng
        self.pool: list[list] = [[torch.nn.Module()], [rg.nn.Module()]]
        self.roots = [self.pool[0][0], self.pool[1][0]]

    def leaf(self) -> list:
        kind = LEAVES[int(self.rng.integers(len(LEAVES)))]
        width_in, width_out = (int(n) for n in self.rng.integers(1, 3, size=2))
        weight = self.rng.standard_normal((width_out, width_in)).round(3)
        bias = self.rng.standard_normal(width_out).round(3)
        made = []
        for side, lib in enumerate(LIBRARIES):
            nn = lib.nn
            vector = nn.Parameter(lib.tensor(bias, dtype=lib.float32))
            module = _made(kind, nn, vector, width_in, width_out)
            if kind.startswith("linear"):
                with _no_grad(lib):
                    module.weight.copy_(lib.tensor(weight, dtype=lib.float32))
                    if module.bias is not None:
                        module.bias.copy_(lib.tensor(bias, dtype=lib.float32))
            self.pool[side].append(module)
            made.append(module)
        return made

    def call(self) -> tuple[str, list]:
        """One random call on both trees; what it was, and each side's outcome."""
        rng = self.rng
        target = int(rng.integers(len(self.pool[0])))
        name = NAMES[int(rng.integers(len(NAMES)))]
        call = CALLS[int(rng.integers(len(CALLS)))]
        made = self.leaf()
        vector = rng.standard_normal(2).round(3)
        position = int(rng.integers(-2, 3))
        flag = bool(rng.random() < 0.5)
        label = f"{call} on #{target} {type(self.pool[0][target]).__name__} {name!r} {position}"
        if call == "set_existing_module":
            source = int(rng.integers(len(self.pool[0])))
            if any(m is self.pool[0][target] for m in self.pool[0][source].modules()):
                return label + " (a cycle, skipped)", [("ok", None)] * 2
        if call == "tie":
            named = [list(root.named_parameters()) for root in self.roots]
            if not named[0]:
                return label + " (nothing to tie)", [("ok", None)] * 2
            tied = int(rng.integers(len(named[0])))
        if call == "load":
            keys = list(self.roots[0].state_dict())
            dropped = {key for key in keys if rng.random() < 0.3}
            scale = float(rng.integers(2, 5))
        if call == "copy":
            by_pickle = bool(rng.random() < 0.5)

        def run(side: int, lib, module):
            nn = lib.nn
            if call in ("set_module", "add_module"):
                if call == "set_module":
                    setattr(module, name, made[side])
                else:
                    module.add_module(name, made[side])
            elif call == "set_existing_module":
                setattr(module, name, self.pool[side][source])
            elif call == "set_parameter":
                setattr(module, name, nn.Parameter(lib.tensor(vector, dtype=lib.float32)))
            elif call == "tie":
                setattr(module, name, named[side][tied][1])
            elif call.startswith("buffer"):
                value = None if flag and position == 2 else lib.tensor(vector, dtype=lib.float32)
                value = lib.tensor([1, 2]) if position == -2 else value  # an integer buffer
                module.register_buffer(name, value, persistent=call == "buffer")
            elif call == "delete":
                delattr(module, name)
            elif call == "set_none":
                setattr(module, name, None)
            elif call == "sequential":
                if not isinstance(module, nn.Sequential):
                    raise TypeError
                [
                    lambda: module.append(made[side]),
                    lambda: module.insert(position, made[side]),
                    lambda: module.pop(position),
                    lambda: module.__delitem__(slice(position, None)),
                    lambda: module.extend([made[side]]),
                    lambda: module.__setitem__(position, made[side]),
                ][int(flag) * 3 + position % 3]()
            elif call == "module_list":
                if not isinstance(module, nn.ModuleList):
                    raise TypeError
                # (torch's insert past the end registers the module under that index, so
                # module_list[0] then fails; retrograd refuses it, as Sequential.insert does)
                inside = max(-len(module), min(position, len(module)))
                [
                    lambda: module.append(made[side]),
                    lambda: module.insert(inside, made[side]),
                    lambda: module.pop(position),
                    lambda: module.__delitem__(position),
                    lambda: module.extend([made[side]]),
                    lambda: module.__setitem__(position, made[side]),
                ][int(flag) * 3 + position % 3]()
            elif call == "module_dict":
                if not isinstance(module, nn.ModuleDict):
                    raise TypeError
                [
                    lambda: module.__setitem__(name, made[side]),
                    lambda: module.pop(name),
                    lambda: module.update({name: made[side], "z": made[side]}),
                ][position % 3]()
            elif call == "parameter_list":
                if not isinstance(module, nn.ParameterList):
                    raise TypeError
                tensor = lib.tensor(vector, dtype=lib.float32)
                module.append(nn.Parameter(tensor)) if flag else module.__setitem__(0, tensor)
            elif call == "parameter_dict":
                if not isinstance(module, nn.ParameterDict):
                    raise TypeError
                tensor = lib.tensor(vector, dtype=lib.float32)
                [
                    lambda: module.__setitem__(name, tensor),
                    lambda: module.pop(name),
                    lambda: module.setdefault(name, nn.Parameter(tensor)),
                ][position % 3]()
            elif call == "requires_grad_":
                module.requires_grad_(flag)
            elif call == "train":
                module.train(flag)
            elif call == "dtype":
                (module.double if flag else module.float)() if position % 2 else module.to(
                    lib.float64 if flag else lib.float32
                )
            elif call == "load":
                state = self.roots[side].state_dict()
                given = {
                    key: value * scale if value.dtype.is_floating_point else value
                    for key, value in state.items()
                    if key not in dropped
                }
                given["zz.extra"] = lib.ones(1)
                kept = self.roots[side].load_state_dict(given, strict=False)
                return sorted(kept.missing_keys), sorted(kept.unexpected_keys)
            elif call == "copy":
                root = self.roots[side]
                return pickle.loads(pickle.dumps(root)) if by_pickle else copy.deepcopy(root)
            return None

        outcomes = []
        for side, lib in enumerate(LIBRARIES):
            try:
                outcomes.append(("ok", run(side, lib, self.pool[side][target])))
            except Exception as error:  # compared by class below
                outcomes.append(("raised", type(error)))
        if call == "copy" and all(kind == "ok" for kind, _ in outcomes):
            self.roots = [value for _, value in outcomes]
            self.pool = [[m for _, m in root.named_modules()] for root in self.roots]
            outcomes = [("ok", None)] * 2
        return label, outcomes


def _agree(expected, got) -> bool:
    if expected[0] != got[0]:
        return False
    if expected[0] == "raised":  # retrograd's error is torch's class or a subclass of it
        return issubclass(got[1], expected[1]) or issubclass(got[1], rg.errors.RetrogradError)
    return expected == got


@pytest.mark.parametrize("seed", [16, 52, 56, 3, 11])
def test_random_module_tree_programs_match_torch(seed):
    rng = np.random.default_rng(seed)
    twins = _Twins(rng)
    done = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(25):
            label, (expected, got) = twins.call()
            done.append(label)
            assert _agree(expected, got), (done, expected, got)
            try:
                want = _fingerprint(twins.roots[0])
            except Exception as error:  # both must fail alike
                with pytest.raises(type(error)):
                    _fingerprint(twins.roots[1])
                continue
            have = _fingerprint(twins.roots[1])
            differing = {key: (want[key], have[key]) for key in want if want[key] != have[key]}
            assert not differing, (done[-5:], differing)
