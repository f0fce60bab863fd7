"""Containers: ``Sequential``, ``ModuleList``, ``ModuleDict``, ``ParameterList``,
``ParameterDict``, as PyTorch's (members named by position, ``"0"``, ``"1"``, ..., or by key),
so dotted names and state dicts match."""

from __future__ import annotations

import operator
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from ...errors import (
    DTypeError,
    IndexOutOfRangeError,
    InvalidArgumentError,
    KeyMismatchError,
    MissingMemberError,
    check_iterable,
)
from ...tensor import Tensor
from ...tensor.functions import typename
from ..parameter import Parameter
from .module import Module, _global_module_registration_hooks, _registered, adopted

__all__ = ["ModuleDict", "ModuleList", "ParameterDict", "ParameterList", "Sequential"]


def _checked(owner: str, index: Any, module: Any) -> Module | None:
    # None holds a place, as torch's add_module lets it (HRNet's fuse layers keep None on
    # their diagonal so that ``fuse_layers[i][j]`` lines up with branch ``j``)
    module = adopted(module)
    if module is not None and not isinstance(module, Module):
        raise DTypeError(f"{owner}: item {index!r} is not a Module: {type(module).__name__}")
    return module


def _pairs(owner: str, given: Any) -> list[tuple[Any, Any]]:
    """The ``(key, value)`` pairs of ``given`` (a mapping, a ``ModuleDict`` or
    ``ParameterDict``, or an iterable of pairs), all read before any is added, as torch's
    ``update`` reads them; a wrong item is a ``DTypeError`` naming its position."""
    check_iterable(f"{owner}.update", given, "the argument (a mapping or key/value pairs)")
    if isinstance(given, Mapping | ModuleDict | ParameterDict):
        return list(given.items())
    pairs = []
    for j, pair in enumerate(given):
        if isinstance(pair, str | bytes) or not isinstance(pair, Iterable):
            raise DTypeError(
                f"{owner}.update: sequence element #{j} should be a (key, value) pair, got {pair!r}"
            )
        pair = tuple(pair)
        if len(pair) != 2:  # torch's ValueError: an iterable, of the wrong length
            raise InvalidArgumentError(
                f"{owner}.update: sequence element #{j} has length {len(pair)}; 2 is required "
                f"(a (key, value) pair), got {pair!r}"
            )
        pairs.append(pair)
    return pairs


def _all_or_none(table: dict[str, Any], add: Any, items: Iterable[Any]) -> None:
    """``add(item)`` for each of ``items``; a failure puts ``table`` (the owner's
    ``_modules`` or ``_parameters``) back as it was: a bad item adds nothing."""
    before = dict(table)
    try:
        for item in items:
            add(item)
    except BaseException:
        table.clear()
        table.update(before)
        raise


def _position(owner: str, index: Any) -> int:
    """``index`` as an int (``operator.index``: NumPy integers too), or a ``DTypeError``."""
    try:
        return operator.index(index)
    except TypeError:
        raise DTypeError(
            f"{owner}: index must be an integer (a slice only to read or delete), got "
            f"{type(index).__name__} {index!r}"
        ) from None


def _missing(owner: str, key: Any, keys: Iterable[str]) -> KeyMismatchError:
    return KeyMismatchError(f"{owner}: no entry named {key!r}; it has {list(keys)}")


class _Indexed(Module):
    """Sub-modules named ``"0"``, ``"1"``, ...: indexing, slicing, length, iteration."""

    def _index(self, index: Any) -> str:
        """The name of the module at ``index`` (any integer, a NumPy one too, negative from
        the end, as torch's ``operator.index``); another kind of index (a float, a str, a
        slice where one module is set) is a ``DTypeError``, as torch's TypeError."""
        size = len(self._modules)
        position = _position(type(self).__name__, index)
        if not -size <= position < size:
            raise IndexOutOfRangeError(
                f"{type(self).__name__}: index {index!r} is out of range for {size} modules"
            )
        return list(self._modules)[position % size]

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self) -> Iterator[Module]:
        return iter(self._modules.values())

    def __getitem__(self, index: int | slice) -> Any:
        if isinstance(index, slice):
            return type(self)(*list(self._modules.values())[index])
        return self._modules[self._index(index)]

    def _register(self, key: str, module: Module | None) -> None:
        """``module`` under ``key``, through the global module registration hooks, where
        torch's containers call ``add_module`` or ``setattr`` (construction, ``append``,
        ``[i] = m``; its ``insert`` and renumbering write ``_modules`` without them)."""
        self._modules[key] = _registered(_global_module_registration_hooks, self, key, module)

    def __setitem__(self, index: int, module: Module) -> None:
        key = self._index(index)  # (the index first: a slice is refused as such)
        self._register(key, _checked(type(self).__name__, index, module))

    def __delitem__(self, index: int | slice) -> None:
        keys = list(self._modules)
        for key in keys[index] if isinstance(index, slice) else [self._index(index)]:
            del self._modules[key]
        # Renumber, as PyTorch does, so the names stay "0", "1", ...
        modules = list(self._modules.values())
        self._modules.clear()
        for position, module in enumerate(modules):
            self._modules[str(position)] = module

    def append(self, module: Module) -> Any:
        name = str(len(self._modules))
        # torch's add_module rule: a parameter, buffer or attribute already under the number
        # is refused, not shadowed by a module of the same name
        self._check_name(f"{type(self).__name__}.append", name, "_modules")
        self._register(name, _checked(type(self).__name__, "new", module))
        return self

    def extend(self, modules: Iterable[Module]) -> Any:
        owner = type(self).__name__
        if not isinstance(modules, Iterable):
            raise DTypeError(
                f"{owner}.extend: expected an iterable of Modules, got {type(modules).__name__}"
            )
        # all checked before any is added: a bad item leaves the list as it was
        start = len(self._modules)
        checked = [_checked(owner, start + i, m) for i, m in enumerate(modules)]
        for i in range(len(checked)):
            self._check_name(f"{owner}.extend", str(start + i), "_modules")
        for module in checked:
            self.append(module)
        return self

    def insert(self, index: int, module: Module) -> None:
        """``module`` put before ``index`` (negative: from the end; ``len(self)``: last). An
        index past either end is refused, as torch's ``Sequential.insert`` refuses it (torch's
        ``ModuleList.insert`` raised a bare ``KeyError`` for a negative index, after moving
        the modules, and named a module past the end out of the numbering)."""
        owner = f"{type(self).__name__}.insert"
        if isinstance(index, bool):
            raise DTypeError(f"{owner}: index must be an int, got {index!r}")
        position = _position(owner, index)
        size = len(self._modules)
        if not -size <= position <= size:
            raise IndexOutOfRangeError(
                f"{owner}: index {index!r} is out of range for {size} modules (from "
                f"{-size} to {size})"
            )
        modules = list(self._modules.values())
        modules.insert(position, _checked(type(self).__name__, index, module))
        self._modules.clear()
        for position, item in enumerate(modules):
            self._modules[str(position)] = item

    def pop(self, index: int | slice) -> Any:
        """Remove the module at ``index`` and return it (torch's ``pop``)."""
        module = self[index]
        del self[index]
        return module


class Sequential(_Indexed):
    """Modules applied in order; sub-modules named ``"0"``, ``"1"``, ... (or by the keys of
    an ``OrderedDict`` given as the only argument).

    >>> from retrograd import nn
    >>> model = nn.Sequential(nn.Linear(2, 2), nn.ReLU())
    >>> len(model), type(model[1]).__name__
    (2, 'ReLU')
    """

    def __init__(self, *modules: Module | Mapping[str, Module]):
        super().__init__()
        if len(modules) == 1 and isinstance(modules[0], OrderedDict | dict):
            for name, module in modules[0].items():
                self.register_module(name, _checked("Sequential", name, module))
            return
        for index, module in enumerate(modules):
            self._register(str(index), _checked("Sequential", index, module))

    def __getitem__(self, index: int | slice) -> Any:
        if isinstance(index, slice):
            # torch's: a slice of a subclass is of the subclass (its methods come along)
            return type(self)(OrderedDict(list(self._modules.items())[index]))
        return self._modules[self._index(index)]

    def forward(self, input: Any) -> Any:
        for module in self._modules.values():
            input = module(input)  # noqa: A001 (torch rebinds its input too)
        return input

    def insert(self, index: int, module: Module) -> Sequential:
        """``module`` put at ``index`` (torch's: an index past either end is refused, not
        clamped as a list's ``insert`` clamps it)."""
        super().insert(index, module)
        return self

    # torch's operators: ``a + b`` chains two Sequentials, ``a * n`` repeats one n times (the
    # same module objects, so the repeats share their parameters)
    def __add__(self, other: Sequential) -> Sequential:
        return Sequential(*self._modules.values()).__iadd__(other)

    def __iadd__(self, other: Sequential) -> Sequential:
        if not isinstance(other, Sequential):
            raise InvalidArgumentError(
                "Sequential: + supports only another Sequential, got " + type(other).__name__
            )
        return self.extend(list(other._modules.values()))

    def __mul__(self, times: int) -> Sequential:
        return Sequential(*self._modules.values()).__imul__(times)

    __rmul__ = __mul__

    def __imul__(self, times: int) -> Sequential:
        if isinstance(times, bool) or not isinstance(times, int):
            raise DTypeError(
                f"Sequential: * takes an int number of repeats, got {type(times).__name__}"
            )
        if times <= 0:
            raise InvalidArgumentError(
                f"Sequential: non-positive multiplication factor {times} for Sequential"
            )
        return self.extend(list(self._modules.values()) * (times - 1))


class ModuleList(_Indexed):
    """A list of sub-modules, registered (their parameters are the owner's), named by
    position; it has no ``forward`` of its own.

    >>> from retrograd import nn
    >>> blocks = nn.ModuleList([nn.Linear(2, 2) for _ in range(3)])
    >>> len(blocks), [name for name, _ in blocks.named_parameters()][:2]
    (3, ['0.weight', '0.bias'])
    """

    def __init__(self, modules: Iterable[Module] | None = None):
        super().__init__()
        if modules is not None:
            self.extend(modules)

    def __getitem__(self, index: int | slice) -> Any:
        if isinstance(index, slice):
            return type(self)(list(self._modules.values())[index])  # (torch's: the subclass)
        return self._modules[self._index(index)]

    def __iadd__(self, modules: Iterable[Module]) -> ModuleList:
        return self.extend(modules)

    def __add__(self, other: Iterable[Module]) -> ModuleList:
        """A new list of this one's modules then ``other``'s (the same module objects)."""
        combined = ModuleList(list(self._modules.values()))
        return combined.extend(other)

    def __repr__(self) -> str:
        """torch's: a run of modules that print alike is printed once, as ``(i-j): n x``."""
        runs: list[list] = []  # [first index, last index, repr]
        for i, module in enumerate(self._modules.values()):
            text = repr(module)
            if runs and runs[-1][2] == text:
                runs[-1][1] = i
            else:
                runs.append([i, i, text])
        if not runs:
            return f"{type(self).__name__}()"
        lines = [
            (f"({first}): " if first == last else f"({first}-{last}): {last - first + 1} x ")
            + text.replace("\n", "\n  ")
            for first, last, text in runs
        ]
        return f"{type(self).__name__}(\n  " + "\n  ".join(lines) + "\n)"


class ModuleDict(Module):
    """A dict of sub-modules, registered under their keys (in insertion order).

    >>> from retrograd import nn
    >>> layers = nn.ModuleDict({"wte": nn.Embedding(5, 2), "ln_f": nn.LayerNorm(2)})
    >>> [name for name, _ in layers.named_parameters()]
    ['wte.weight', 'ln_f.weight', 'ln_f.bias']
    """

    def __init__(self, modules: Mapping[str, Module] | Iterable[tuple[str, Module]] | None = None):
        super().__init__()
        if modules is not None:
            self.update(modules)

    def __getitem__(self, key: str) -> Module:
        try:
            return self._modules[key]
        except (KeyError, TypeError):  # a missing name, or an unhashable key
            raise KeyMismatchError(
                f"ModuleDict: no module named {key!r}; it has {list(self._modules)}"
            ) from None

    def __setitem__(self, key: str, module: Module) -> None:
        self.register_module(key, _checked("ModuleDict", key, module))

    def __delitem__(self, key: str) -> None:
        self[key]  # a missing key: the hierarchy's KeyError naming the keys there are
        del self._modules[key]

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self) -> Iterator[str]:
        return iter(self._modules)

    def __contains__(self, key: object) -> bool:
        return key in self._modules

    def keys(self) -> Any:
        return self._modules.keys()

    def values(self) -> Any:
        return self._modules.values()

    def items(self) -> Any:
        return self._modules.items()

    def pop(self, key: str) -> Module:
        module = self[key]
        del self._modules[key]
        return module

    def clear(self) -> None:
        self._modules.clear()

    def update(self, modules: Mapping[str, Module] | Iterable[tuple[str, Module]]) -> None:
        pairs = _pairs("ModuleDict", modules)
        _all_or_none(self._modules, lambda pair: self.__setitem__(*pair), pairs)


def _as_parameter(value: Any) -> Any:
    """torch's rule: a tensor put in a parameter container becomes a ``Parameter``."""
    if isinstance(value, Tensor) and not isinstance(value, Parameter):
        return Parameter(value)
    return value


def _parameter_lines(items: Iterable[tuple[Any, Any]], by_type_name: bool = False) -> str:
    """torch's ``extra_repr`` of a parameter container: one ``(key): Parameter containing:
    [dtype of size AxB]`` line per entry (the device too when not the CPU). ``by_type_name``:
    the tensor described by its type name (``FloatTensor``) instead of its dtype, as torch's
    ``ParameterDict`` does (its ``ParameterList`` prints the dtype)."""
    lines = []
    for key, value in items:
        if isinstance(value, Tensor):
            size = "x".join(str(n) for n in value.shape)
            device = "" if value.device.type == "cpu" else f" ({value.device})"
            kind = "Parameter" if isinstance(value, Parameter) else "Tensor"
            described = typename(value) if by_type_name else repr(value.dtype)
            lines.append(f"  ({key}): {kind} containing: [{described} of size {size}{device}]")
        else:
            lines.append(f"  ({key}): Object of type: {type(value).__name__}")
    return "\n".join(lines)


class ParameterList(Module):
    """Parameters named ``"0"``, ``"1"``, ...: indexing, ``append``, ``extend``, iteration;
    a tensor given is made a ``Parameter``. As torch's, an entry that is not a tensor (an
    int, a string, ``None``, a module) is kept in its place in the list as a plain attribute
    (a module as a sub-module): it is listed, indexed and printed, never trained.

    >>> import retrograd as rg
    >>> params = ParameterList([rg.zeros(2), rg.ones(3), 4])
    >>> [name for name, _ in params.named_parameters()], params[2]
    (['0', '1'], 4)
    """

    def __init__(self, values: Iterable[Any] | None = None):
        super().__init__()
        self._size = 0
        for value in values or ():
            self.append(value)

    def __len__(self) -> int:
        return self._size

    def __iter__(self) -> Iterator[Any]:
        return (self[i] for i in range(self._size))

    def _key(self, index: Any) -> str:
        """The entry name of ``index``, checked (torch's ``operator.index`` and range)."""
        index = _position("ParameterList", index)
        if not -self._size <= index < self._size:
            raise IndexOutOfRangeError(
                f"ParameterList: index {index!r} is out of range for a list of {self._size}"
            )
        return str(index % self._size)

    def __getitem__(self, index: int | slice) -> Any:
        if isinstance(index, slice):  # torch's: a new list of the same entries
            sliced = type(self)()
            for i in range(*index.indices(self._size)):
                sliced.append(self[i])
            return sliced
        return getattr(self, self._key(index))

    def __setitem__(self, index: int, value: Any) -> None:
        self._put(self._key(index), value)

    def _put(self, key: str, value: Any) -> None:
        """torch's ``setattr(self, key, value)``, a tensor made a ``Parameter`` first: a
        parameter's place takes only a ``Parameter`` or ``None``."""
        value = _as_parameter(value)
        if key in self._parameters and value is not None and not isinstance(value, Parameter):
            raise DTypeError(
                f"ParameterList: cannot assign {type(value).__name__} as parameter {key!r} "
                "(nn.Parameter or None expected)"
            )
        setattr(self, key, value)

    def append(self, value: Any) -> ParameterList:
        self._size += 1
        try:
            self._put(str(self._size - 1), value)
        except BaseException:
            self._size -= 1
            raise
        return self

    def extend(self, values: Iterable[Any]) -> ParameterList:
        check_iterable("ParameterList.extend", values, "values")
        size = self._size
        try:
            for value in values:
                self.append(value)
        except BaseException:  # a bad entry adds nothing
            for index in range(size, self._size):
                delattr(self, str(index))
            self._size = size
            raise
        return self

    def __iadd__(self, values: Iterable[Any]) -> ParameterList:
        return self.extend(values)

    def extra_repr(self) -> str:
        return _parameter_lines(enumerate(self))


class ParameterDict(Module):
    """Parameters by key: ``pd[key]``, ``keys()``, ``items()``, ``update``...; a tensor given
    is made a ``Parameter``. As torch's, a value that is not a tensor (an int, a string,
    ``None``, a module) is kept under its key in its place (a module as a sub-module): it is
    listed, looked up and printed, never trained. A parameter's key takes only a tensor or
    ``None`` (torch's ``TypeError`` otherwise).

    The keys are the entries put in through the dictionary (``pd[key] = v``, ``update``,
    ``setdefault``), torch's ``_keys``; a key's value is looked up as torch's ``getattr``
    finds it. So what is registered on the module behind the dictionary's back
    (``register_parameter``, ``add_module``, ``pd.name = value``) is trained and saved but is
    no key, and a key whose parameter pruning re-registers as ``<key>_orig`` stays a key whose
    value is the pruned tensor.

    >>> import retrograd as rg
    >>> table = ParameterDict({"w": rg.zeros(2), "scale": 0.5})
    >>> [name for name, _ in table.named_parameters()], table["scale"], list(table)
    (['w'], 0.5, ['scale', 'w'])
    """

    def __init__(self, parameters: Mapping[str, Any] | None = None):
        super().__init__()
        # Every key in its order, and the values that are neither parameters nor modules:
        # kept apart from the attributes, so that a key such as "keys" or "update" shadows
        # no method (torch's setattr would).
        self._order: dict[str, None] = {}
        self._plain: dict[str, Any] = {}
        if parameters is not None:
            self.update(parameters)

    def _tables(self) -> tuple[dict[str, Any], ...]:
        # (a ParameterDict pickled before it kept plain values has neither table)
        state = self.__dict__
        return (
            self._parameters,
            self._modules,
            state.setdefault("_plain", {}),
            state.setdefault("_order", dict.fromkeys(self._parameters)),
        )

    def _keys_now(self) -> list[str]:
        """The keys in their order: those put in through the dictionary, as torch's ``_keys``
        (a value registered behind its back is no key; one removed behind its back, as
        ``del pd._parameters[key]``, leaves its key, whose lookup then fails as torch's)."""
        return list(self._tables()[-1])

    def _value(self, key: str) -> Any:
        """torch's ``getattr(self, key)``: the registered parameter, sub-module or buffer, the
        plain entry, an attribute set on the module (pruning's recomputed tensor, set under
        the key once its parameter became ``<key>_orig``) or a property of its class (a
        parametrization's value)."""
        parameters, modules, plain, _ = self._tables()
        for table in (parameters, modules, plain, self._buffers):
            if key in table:
                return table[key]
        if isinstance(key, str) and not _is_bookkeeping(key):
            if key in self.__dict__:
                return self.__dict__[key]
            if isinstance(getattr(type(self), key, None), property):
                return getattr(self, key)
        raise KeyError(key)

    def __getitem__(self, key: str) -> Any:
        try:
            return self._value(key)
        except (KeyError, TypeError):  # a missing name, or an unhashable key
            # torch's lookup is getattr's: its AttributeError, and the KeyError of before
            raise MissingMemberError(
                f"ParameterDict: no entry named {key!r}; it has {self._keys_now()}"
            ) from None

    def __setitem__(self, key: str, value: Any) -> None:
        if not isinstance(key, str):  # torch's _key_to_attr, before any table is asked
            raise DTypeError(
                f"ParameterDict: keys must be strings, got {type(key).__name__} {key!r}"
            )
        _, modules, plain, order = self._tables()
        value = _as_parameter(value)
        if key in self._parameters and not isinstance(value, Parameter):
            if value is not None:  # the check of torch's Module.__setattr__
                raise DTypeError(
                    f"ParameterDict: cannot assign {type(value).__name__} as parameter {key!r} "
                    "(nn.Parameter or None expected)"
                )
            self._parameters[key] = None
        elif isinstance(value, Parameter):
            self._drop_registered(key, modules)
            self.register_parameter(key, value)
            plain.pop(key, None)
        elif isinstance(adopted(value), Module):
            self._drop_registered(key)
            self.add_module(key, adopted(value))
            plain.pop(key, None)
        elif key in self._buffers or key in modules:
            # torch's setattr onto a buffer or a sub-module: only None (or a tensor, a module)
            setattr(self, key, value)
        else:
            plain[key] = value
        order[key] = None

    def _drop_registered(self, key: str, modules: dict[str, Any] | None = None) -> None:
        """What torch's ``Module.__setattr__`` of a parameter (or module) removes first: a
        buffer (and a sub-module) of that name, and a plain attribute (pruning's
        recomputed tensor, once the key is given a new parameter)."""
        self._buffers.pop(key, None)
        self._non_persistent_buffers.discard(key)
        if modules is not None:
            modules.pop(key, None)
        self._drop_attribute(key)

    def _drop_attribute(self, key: Any) -> None:
        """A plain attribute named ``key`` removed; the module's own bookkeeping is never
        one."""
        if isinstance(key, str) and not _is_bookkeeping(key):
            self.__dict__.pop(key, None)

    def __delitem__(self, key: str) -> None:
        if key not in self:  # the hierarchy's KeyError naming the keys there are
            raise MissingMemberError(
                f"ParameterDict: no entry named {key!r}; it has {self._keys_now()}"
            )
        for table in (*self._tables(), self._buffers):
            table.pop(key, None)
        self._drop_attribute(key)

    def __len__(self) -> int:
        return len(self._keys_now())

    def __iter__(self) -> Iterator[str]:
        return iter(self._keys_now())

    def __contains__(self, key: object) -> bool:
        try:
            return key in self._tables()[-1]
        except TypeError:  # an unhashable key is in no dictionary
            return False

    def keys(self) -> Iterable[str]:
        return self._keys_now()

    def values(self) -> Iterable[Any]:
        return [self[key] for key in self._keys_now()]

    def items(self) -> Iterable[tuple[str, Any]]:
        return [(key, self[key]) for key in self._keys_now()]

    def pop(self, key: str) -> Any:
        """Remove the entry ``key`` and return its value (torch's ``ParameterDict.pop``)."""
        value = self[key]
        del self[key]
        return value

    def update(self, parameters: Mapping[str, Any] | Iterable[tuple[str, Any]]) -> None:
        pairs = _pairs("ParameterDict", parameters)
        if isinstance(parameters, Mapping) and not isinstance(parameters, OrderedDict):
            # torch's rule: a plain mapping's entries go in sorted by key (an OrderedDict's,
            # a ParameterDict's and a sequence's in their order), which orders
            # named_parameters(), the state dict and an optimizer's parameters
            pairs.sort(key=lambda pair: pair[0])
        tables = self._tables()
        before = [dict(table) for table in tables]
        try:
            for key, value in pairs:
                self[key] = value
        except BaseException:  # a bad entry adds nothing
            for table, kept in zip(tables, before, strict=True):
                table.clear()
                table.update(kept)
            raise

    def get(self, key: str, default: Any = None) -> Any:
        """The value under ``key``, or ``default`` when there is none (torch's
        ``ParameterDict.get``)."""
        return self[key] if key in self else default  # noqa: SIM401 (this is get)

    def setdefault(self, key: str, default: Any = None) -> Any:
        """The value under ``key``; when there is none, ``default`` put there first."""
        if key not in self:
            self[key] = default
        return self[key]

    def popitem(self) -> tuple[str, Any]:
        """Remove the entry put in last and return its ``(key, value)``."""
        keys = self._keys_now()
        if not keys:
            raise MissingMemberError("ParameterDict.popitem: the dictionary is empty")
        key = keys[-1]
        return key, self.pop(key)

    def clear(self) -> None:
        for key in self._keys_now():
            del self[key]

    def copy(self) -> ParameterDict:
        """A new dictionary holding the same entries, in the same order."""
        return ParameterDict(OrderedDict(self.items()))

    def fromkeys(self, keys: Iterable[str], default: Any = None) -> ParameterDict:
        """A new dictionary with ``default`` under each of ``keys`` (torch's is a method)."""
        check_iterable("ParameterDict.fromkeys", keys, "keys")
        return ParameterDict([(key, default) for key in keys])

    def __or__(self, other: ParameterDict) -> ParameterDict:
        merged = self.copy()
        merged.update(other)
        return merged

    def __ror__(self, other: ParameterDict) -> ParameterDict:
        merged = other.copy()
        merged.update(self)
        return merged

    def __ior__(self, other: ParameterDict) -> ParameterDict:
        self.update(other)
        return self

    def __reversed__(self) -> Iterator[str]:
        return reversed(self._keys_now())

    def extra_repr(self) -> str:
        return _parameter_lines(self.items(), by_type_name=True)


def _is_bookkeeping(name: str) -> bool:
    """A name the module keeps its own state under (``_parameters``, ``_order``,
    ``training``), never a ``ParameterDict`` entry's value."""
    return name.startswith("_") or name == "training"
