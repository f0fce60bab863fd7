"""torch's ``torch.utils._pytree``: nested containers ("pytrees") flattened to their leaves and
a :class:`TreeSpec` that rebuilds them, as torch 2.13 does.

Nodes are tuples, lists, dicts, ``OrderedDict``, ``defaultdict``, ``deque``, namedtuples and
the types given to :func:`register_pytree_node`; everything else is a leaf, ``None`` included.
Leaves come in torch's order: a sequence's in order, a dict's in insertion order (not sorted).
A structure mismatch raises :class:`~retrograd.errors.InvalidArgumentError` (the
``ValueError`` torch raises), with torch's message.

>>> leaves, spec = tree_flatten((1, [None, {"b": 2, "a": 3}]))
>>> leaves
[1, None, 2, 3]
>>> tree_unflatten([10, 20, 30, 40], spec)
(10, [20, {'b': 30, 'a': 40}])
>>> tree_map(lambda x: x * 2, {"x": 7, "y": (42, 64)})
{'x': 14, 'y': (84, 128)}
"""

from __future__ import annotations

import dataclasses
import functools
import types
from collections import OrderedDict, defaultdict, deque, namedtuple
from collections.abc import Callable, Hashable, Iterable, Iterator
from typing import Any, NamedTuple

from ..errors import DTypeError, InvalidArgumentError

__all__ = [
    "Context",
    "FlattenFn",
    "GetAttrKey",
    "LeafSpec",
    "MappingKey",
    "PyTree",
    "PyTreeSpec",
    "SequenceKey",
    "TreeSpec",
    "UnflattenFn",
    "is_namedtuple",
    "is_namedtuple_class",
    "is_namedtuple_instance",
    "key_get",
    "keystr",
    "map_only",
    "register_pytree_node",
    "tree_all",
    "tree_all_only",
    "tree_any",
    "tree_any_only",
    "tree_flatten",
    "tree_flatten_with_path",
    "tree_is_leaf",
    "tree_iter",
    "tree_leaves",
    "tree_leaves_with_path",
    "tree_map",
    "tree_map_",
    "tree_map_only",
    "tree_map_only_",
    "tree_map_with_path",
    "tree_structure",
    "tree_unflatten",
    "treespec_dict",
    "treespec_leaf",
    "treespec_pprint",
    "treespec_tuple",
]

Context = Any
PyTree = Any
FlattenFn = Callable[[PyTree], tuple[list[Any], Context]]
UnflattenFn = Callable[[Iterable[Any], Context], PyTree]
FlattenWithKeysFn = Callable[[PyTree], tuple[list[tuple[Any, Any]], Context]]


class NodeDef(NamedTuple):
    type: type[Any]
    flatten_fn: FlattenFn
    unflatten_fn: UnflattenFn
    flatten_with_keys_fn: FlattenWithKeysFn | None


#: node type -> how to flatten and rebuild it (namedtuples are registered under ``namedtuple``)
SUPPORTED_NODES: dict[type[Any], NodeDef] = {}


# -- key paths --------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True, slots=True)
class SequenceKey:
    idx: int

    def __str__(self) -> str:
        return f"[{self.idx!r}]"

    def get(self, sequence: Any) -> Any:
        return sequence[self.idx]


@dataclasses.dataclass(frozen=True, slots=True)
class MappingKey:
    key: Hashable

    def __str__(self) -> str:
        return f"[{self.key!r}]"

    def get(self, mapping: Any) -> Any:
        return mapping[self.key]


@dataclasses.dataclass(frozen=True, slots=True)
class GetAttrKey:
    name: str

    def __str__(self) -> str:
        return f".{self.name}"

    def get(self, obj: Any) -> Any:
        return getattr(obj, self.name)


def keystr(kp: tuple[Any, ...]) -> str:
    """A key path as Python would index with it: ``"[0]['a'].x"``."""
    return "".join(str(k) for k in kp)


def key_get(obj: Any, kp: tuple[Any, ...]) -> Any:
    """The subtree of ``obj`` at key path ``kp``."""
    for k in kp:
        obj = k.get(obj)
    return obj


# -- namedtuples ------------------------------------------------------------------------------
def is_namedtuple_class(cls: type) -> bool:
    """Whether ``cls`` is a namedtuple class (a tuple with ``_fields``, ``_make``,
    ``_asdict``)."""
    return (
        isinstance(cls, type)
        and issubclass(cls, tuple)
        and isinstance(getattr(cls, "_fields", None), tuple)
        and all(type(field) is str for field in cls._fields)
        and callable(getattr(cls, "_make", None))
        and callable(getattr(cls, "_asdict", None))
    )


def is_namedtuple(obj: object) -> bool:
    """Whether ``obj`` is a namedtuple class or instance."""
    return is_namedtuple_class(obj if isinstance(obj, type) else type(obj))


def is_namedtuple_instance(obj: object) -> bool:
    return is_namedtuple_class(type(obj))


# -- registration -----------------------------------------------------------------------------
def _register(
    cls: type[Any],
    flatten_fn: FlattenFn,
    unflatten_fn: UnflattenFn,
    flatten_with_keys_fn: FlattenWithKeysFn | None = None,
) -> None:
    SUPPORTED_NODES[cls] = NodeDef(cls, flatten_fn, unflatten_fn, flatten_with_keys_fn)


def register_pytree_node(
    cls: type[Any],
    flatten_fn: FlattenFn,
    unflatten_fn: UnflattenFn,
    *,
    serialized_type_name: str | None = None,
    to_dumpable_context: Callable[[Context], Any] | None = None,
    from_dumpable_context: Callable[[Any], Context] | None = None,
    flatten_with_keys_fn: FlattenWithKeysFn | None = None,
) -> None:
    """Make ``cls`` a node: ``flatten_fn(node) -> (children, context)`` and
    ``unflatten_fn(children, context) -> node``. The serialization arguments are accepted
    for torch's signature (retrograd does not serialize tree specs)."""
    if cls in SUPPORTED_NODES:
        raise InvalidArgumentError(
            f"register_pytree_node: {cls} is already registered as pytree node."
        )
    if (to_dumpable_context is None) ^ (from_dumpable_context is None):
        raise InvalidArgumentError(
            f"register_pytree_node: Both to_dumpable_context and from_dumpable_context for "
            f"{cls} must be None or registered."
        )
    _register(cls, flatten_fn, unflatten_fn, flatten_with_keys_fn)


def _sequence_with_keys(node: Any) -> tuple[list[tuple[Any, Any]], Context]:
    children, context = SUPPORTED_NODES[_node_type(node)].flatten_fn(node)
    return [(SequenceKey(i), v) for i, v in enumerate(children)], context


def _mapping_with_keys(node: Any) -> tuple[list[tuple[Any, Any]], Context]:
    return [(MappingKey(k), v) for k, v in node.items()], _node_flatten(node)[1]


def _namedtuple_with_keys(node: Any) -> tuple[list[tuple[Any, Any]], Context]:
    return [(GetAttrKey(f), v) for f, v in zip(node._fields, node, strict=True)], type(node)


def _defaultdict_unflatten(values: Iterable[Any], context: Context) -> defaultdict:
    factory, keys = context
    return defaultdict(factory, zip(keys, values, strict=True))


_register(tuple, lambda d: (list(d), None), lambda v, c: tuple(v), _sequence_with_keys)
_register(list, lambda d: (d, None), lambda v, c: list(v), _sequence_with_keys)
_register(
    dict,
    lambda d: (list(d.values()), list(d.keys())),
    lambda v, c: dict(zip(c, v, strict=True)),
    _mapping_with_keys,
)
_register(
    namedtuple,  # type: ignore[arg-type]  (torch's key for every namedtuple class)
    lambda d: (list(d), type(d)),
    lambda v, c: c(*v),
    _namedtuple_with_keys,
)
_register(
    OrderedDict,
    lambda d: (list(d.values()), list(d.keys())),
    lambda v, c: OrderedDict(zip(c, v, strict=True)),
    _mapping_with_keys,
)
_register(
    defaultdict,
    lambda d: (list(d.values()), [d.default_factory, list(d.keys())]),
    _defaultdict_unflatten,
    _mapping_with_keys,
)
_register(
    deque, lambda d: (list(d), d.maxlen), lambda v, c: deque(v, maxlen=c), _sequence_with_keys
)

_STANDARD_DICT_TYPES = frozenset({dict, OrderedDict, defaultdict})
_BUILTIN_TYPES = frozenset({tuple, list, dict, namedtuple, OrderedDict, defaultdict, deque})


def _node_type(tree: Any) -> Any:
    kind = type(tree)
    return namedtuple if is_namedtuple_class(kind) else kind


def _node_flatten(node: Any) -> tuple[list[Any], Context]:
    return SUPPORTED_NODES[_node_type(node)].flatten_fn(node)


def tree_is_leaf(tree: PyTree, is_leaf: Callable[[PyTree], bool] | None = None) -> bool:
    """Whether ``tree`` is a leaf: not a registered node type (``None`` is a leaf), or
    ``is_leaf(tree)`` says so."""
    if is_leaf is not None and is_leaf(tree):
        return True
    return _node_type(tree) not in SUPPORTED_NODES


# -- tree specs -------------------------------------------------------------------------------
class TreeSpec:
    """The structure of a pytree: the root's node type, its ``context`` (a dict's keys, a
    namedtuple's class...) and one spec per child; a leaf's spec has type ``None``."""

    __slots__ = ("_children", "_context", "num_children", "num_leaves", "num_nodes", "type")

    def __init__(
        self,
        type: Any,  # noqa: A002 (torch's name)
        context: Context,
        children_specs: list[TreeSpec],
    ) -> None:
        self.type = type
        self._context = context
        self._children = list(children_specs)
        if type is None:
            if context is not None or self._children:
                raise InvalidArgumentError(
                    "TreeSpec: a leaf node should have neither a context nor children"
                )
            self.num_nodes, self.num_leaves, self.num_children = 1, 1, 0
        else:
            self.num_nodes = 1 + sum(child.num_nodes for child in self._children)
            self.num_leaves = sum(child.num_leaves for child in self._children)
            self.num_children = len(self._children)

    def __repr__(self, indent: int = 0) -> str:
        if self.type is None:
            return "*"
        children = ""
        if self.num_children > 0:
            indent += 2
            children = self._children[0].__repr__(indent)
            children += "," if self.num_children > 1 else ""
            children += ",".join(
                "\n" + " " * indent + child.__repr__(indent) for child in self._children[1:]
            )
        return f"TreeSpec({self.type.__name__}, {self._context}, [{children}])"

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if not isinstance(other, TreeSpec):
            return NotImplemented
        return (
            str(self.type) == str(other.type)
            and self._context == other._context
            and self._children == other._children
        )

    def __hash__(self) -> int:
        if self.type is defaultdict:
            context: Any = (self._context[0], tuple(self._context[1]))
        elif self.type in (dict, OrderedDict):
            context = tuple(self._context)
        elif self.type is None or self.type in _BUILTIN_TYPES:
            context = self._context
        else:
            context = None  # a custom node's context may not be hashable
        return hash((self.type, context, tuple(self._children)))

    @property
    def context(self) -> Context:
        return self._context

    @property
    def children_specs(self) -> list[TreeSpec]:
        return self._children

    def is_leaf(self) -> bool:
        return self.num_nodes == 1 and self.num_leaves == 1

    def children(self) -> list[TreeSpec]:
        return self._children.copy()

    def child(self, index: int) -> TreeSpec:
        return self._children[index]

    def flatten_up_to(self, tree: PyTree) -> list[PyTree]:
        """The subtrees of ``tree`` at this spec's leaves (``tree`` has this spec as a
        prefix); a node whose type, arity or keys differ raises ``InvalidArgumentError``."""
        subtrees: list[PyTree] = []
        _flatten_up_to(self, tree, subtrees)
        return subtrees

    def unflatten(self, leaves: Iterable[Any]) -> PyTree:
        """The pytree of this structure holding ``leaves`` in order."""
        if not isinstance(leaves, list | tuple):
            leaves = list(leaves)
        if len(leaves) != self.num_leaves:
            raise InvalidArgumentError(
                f"treespec.unflatten(leaves): `leaves` has length {len(leaves)} but the spec "
                f"refers to a pytree that holds {self.num_leaves} items ({self})."
            )
        return _build(self, iter(leaves))


PyTreeSpec = TreeSpec


class LeafSpec(TreeSpec):
    """The spec of a leaf (``*`` in a spec's repr)."""

    __slots__ = ()

    def __init__(self) -> None:
        super().__init__(None, None, [])


_LEAF_SPEC = LeafSpec()


def treespec_leaf() -> LeafSpec:
    return _LEAF_SPEC


def treespec_tuple(iterable: Iterable[TreeSpec] = (), /) -> TreeSpec:
    children = list(iterable)
    if any(not isinstance(child, TreeSpec) for child in children):
        raise DTypeError(f"treespec_tuple: Expected a tuple of TreeSpec values, got: {children!r}.")
    return TreeSpec(tuple, None, children)


def treespec_dict(mapping: Any = (), /, **kwargs: TreeSpec) -> TreeSpec:
    entries = dict(mapping, **kwargs)
    if any(not isinstance(child, TreeSpec) for child in entries.values()):
        raise DTypeError(
            f"treespec_dict: Expected a dictionary of TreeSpec values, got: {entries!r}."
        )
    return TreeSpec(dict, list(entries), list(entries.values()))


def treespec_pprint(treespec: TreeSpec) -> str:
    """The spec drawn as the tree it describes, leaves as ``*``: ``(*, [*, *])``."""
    dummy = treespec.unflatten(_Star() for _ in range(treespec.num_leaves))
    return repr(dummy)


class _Star:
    def __repr__(self) -> str:
        return "*"


# Recursive module functions, not closures: a closure that calls itself is a reference cycle,
# which would hold the leaves (tensors and their graphs) until the garbage collector ran.
def _flatten_into(node: PyTree, leaves: list[Any], is_leaf: Callable | None) -> TreeSpec:
    if tree_is_leaf(node, is_leaf):
        leaves.append(node)
        return _LEAF_SPEC
    kind = _node_type(node)
    children, context = SUPPORTED_NODES[kind].flatten_fn(node)
    return TreeSpec(kind, context, [_flatten_into(child, leaves, is_leaf) for child in children])


def _build(spec: TreeSpec, leaves: Iterator[Any]) -> PyTree:
    if spec.is_leaf():
        return next(leaves)
    children = [_build(child, leaves) for child in spec._children]
    return SUPPORTED_NODES[spec.type].unflatten_fn(children, spec._context)


def _flatten_up_to(spec: TreeSpec, node: PyTree, subtrees: list[PyTree]) -> None:
    if spec.is_leaf():
        subtrees.append(node)
        return
    kind = _node_type(node)
    if spec.type not in _BUILTIN_TYPES:  # a custom node type must match exactly
        if kind != spec.type:
            raise InvalidArgumentError(f"Type mismatch; expected {spec.type!r}, but got {kind!r}.")
        children, context = SUPPORTED_NODES[kind].flatten_fn(node)
        if len(children) != spec.num_children:
            raise InvalidArgumentError(
                f"Node arity mismatch; expected {spec.num_children}, but got {len(children)}."
            )
        if context != spec._context:
            raise InvalidArgumentError(f"Node context mismatch for custom node type {spec.type!r}.")
    else:
        both_dicts = spec.type in _STANDARD_DICT_TYPES and kind in _STANDARD_DICT_TYPES
        if not both_dicts and kind != spec.type:
            raise InvalidArgumentError(
                f"Node type mismatch; expected {spec.type!r}, but got {kind!r}."
            )
        if len(node) != spec.num_children:
            raise InvalidArgumentError(
                f"Node arity mismatch; expected {spec.num_children}, but got {len(node)}."
            )
        if both_dicts:  # dict kinds match one another, keys in the spec's order
            keys = spec._context if spec.type is not defaultdict else spec._context[1]
            if set(node) != set(keys):
                missing, extra = set(keys) - set(node), set(node) - set(keys)
                message = f"; missing key(s): {missing}" if missing else ""
                message += f"; extra key(s): {extra}" if extra else ""
                raise InvalidArgumentError(f"Node keys mismatch{message}.")
            children = [node[key] for key in keys]
        else:
            children, context = SUPPORTED_NODES[kind].flatten_fn(node)
            if kind is not deque and context != spec._context:  # a deque's maxlen may differ
                raise InvalidArgumentError(
                    f"Node context mismatch for node type {spec.type!r}; expected "
                    f"{spec._context!r}, but got {context!r}."
                )
    for child, child_spec in zip(children, spec._children, strict=True):
        _flatten_up_to(child_spec, child, subtrees)


# -- the tree functions -----------------------------------------------------------------------
def tree_flatten(
    tree: PyTree, is_leaf: Callable[[PyTree], bool] | None = None
) -> tuple[list[Any], TreeSpec]:
    """The leaves of ``tree`` in order and the :class:`TreeSpec` that rebuilds it."""
    leaves: list[Any] = []
    spec = _flatten_into(tree, leaves, is_leaf)
    return leaves, spec


def tree_unflatten(leaves: Iterable[Any], treespec: TreeSpec) -> PyTree:
    """The pytree of ``treespec`` holding ``leaves``: the inverse of :func:`tree_flatten`
    (the two arguments may come in either order, as torch allows)."""
    if not isinstance(treespec, TreeSpec):
        if not isinstance(leaves, TreeSpec):
            raise DTypeError(
                "tree_unflatten: Expected `treespec` to be an instance of PyTreeSpec but got "
                f"item of type {type(treespec)}."
            )
        leaves, treespec = treespec, leaves
    return treespec.unflatten(leaves)


def tree_iter(tree: PyTree, is_leaf: Callable[[PyTree], bool] | None = None) -> Iterator[Any]:
    """The leaves of ``tree``, one at a time."""
    if tree_is_leaf(tree, is_leaf):
        yield tree
        return
    for child in _node_flatten(tree)[0]:
        yield from tree_iter(child, is_leaf)


def tree_leaves(tree: PyTree, is_leaf: Callable[[PyTree], bool] | None = None) -> list[Any]:
    return tree_flatten(tree, is_leaf)[0]


def tree_structure(tree: PyTree, is_leaf: Callable[[PyTree], bool] | None = None) -> TreeSpec:
    return tree_flatten(tree, is_leaf)[1]


def tree_map(
    func: Callable[..., Any],
    tree: PyTree,
    *rests: PyTree,
    is_leaf: Callable[[PyTree], bool] | None = None,
) -> PyTree:
    """The tree of ``tree``'s structure holding ``func(leaf, *leaves of rests)``; each of
    ``rests`` has ``tree``'s structure as a prefix (its subtree there is given whole).

    >>> tree_map(lambda x, y: [x] + y, [5, 6], [[7, 9], [1, 2]])
    [[5, 7, 9], [6, 1, 2]]
    """
    leaves, spec = tree_flatten(tree, is_leaf)
    columns = [leaves] + [spec.flatten_up_to(rest) for rest in rests]
    return spec.unflatten(map(func, *columns))


def tree_map_(
    func: Callable[..., Any],
    tree: PyTree,
    *rests: PyTree,
    is_leaf: Callable[[PyTree], bool] | None = None,
) -> PyTree:
    """``func`` called on each leaf for its side effect; returns ``tree`` itself."""
    leaves, spec = tree_flatten(tree, is_leaf)
    columns = [leaves] + [spec.flatten_up_to(rest) for rest in rests]
    deque(map(func, *columns), maxlen=0)
    return tree


def map_only(type_or_types_or_pred: Any, /) -> Callable[[Callable], Callable]:
    """A decorator making ``func`` apply to the leaves of the given type(s), or that
    satisfy the predicate, and return the others unchanged."""
    if isinstance(type_or_types_or_pred, type | tuple | types.UnionType):
        kinds = type_or_types_or_pred

        def pred(x: Any) -> bool:
            return isinstance(x, kinds)

    elif callable(type_or_types_or_pred):
        pred = type_or_types_or_pred
    else:
        raise DTypeError("map_only: Argument must be a type, a tuple of types, or a callable.")

    def wrapper(func: Callable[[Any], Any]) -> Callable[[Any], Any]:
        @functools.wraps(func)
        def wrapped(x: Any) -> Any:
            return func(x) if pred(x) else x

        return wrapped

    return wrapper


def tree_map_only(
    type_or_types_or_pred: Any,
    /,
    func: Callable[[Any], Any],
    tree: PyTree,
    is_leaf: Callable[[PyTree], bool] | None = None,
) -> PyTree:
    """:func:`tree_map` of ``func`` on the leaves of the given type(s) (or predicate);
    the other leaves are kept."""
    return tree_map(map_only(type_or_types_or_pred)(func), tree, is_leaf=is_leaf)


def tree_map_only_(
    type_or_types_or_pred: Any,
    /,
    func: Callable[[Any], Any],
    tree: PyTree,
    is_leaf: Callable[[PyTree], bool] | None = None,
) -> PyTree:
    return tree_map_(map_only(type_or_types_or_pred)(func), tree, is_leaf=is_leaf)


def tree_all(
    pred: Callable[[Any], bool], tree: PyTree, is_leaf: Callable[[PyTree], bool] | None = None
) -> bool:
    return all(map(pred, tree_iter(tree, is_leaf)))


def tree_any(
    pred: Callable[[Any], bool], tree: PyTree, is_leaf: Callable[[PyTree], bool] | None = None
) -> bool:
    return any(map(pred, tree_iter(tree, is_leaf)))


def tree_all_only(
    type_or_types: Any,
    /,
    pred: Callable[[Any], bool],
    tree: PyTree,
    is_leaf: Callable[[PyTree], bool] | None = None,
) -> bool:
    return all(pred(x) for x in tree_iter(tree, is_leaf) if isinstance(x, type_or_types))


def tree_any_only(
    type_or_types: Any,
    /,
    pred: Callable[[Any], bool],
    tree: PyTree,
    is_leaf: Callable[[PyTree], bool] | None = None,
) -> bool:
    return any(pred(x) for x in tree_iter(tree, is_leaf) if isinstance(x, type_or_types))


# -- key paths of the leaves ------------------------------------------------------------------
def _flatten_with_path_into(
    node: PyTree, path: tuple[Any, ...], out: list[tuple[Any, Any]], is_leaf: Callable | None
) -> None:
    if tree_is_leaf(node, is_leaf):
        out.append((path, node))
        return
    kind = _node_type(node)
    with_keys = SUPPORTED_NODES[kind].flatten_with_keys_fn
    if with_keys is None:
        raise InvalidArgumentError(
            f"tree_flatten_with_path: Did not find a flatten_with_keys_fn for type: {kind}. "
            "Please pass a flatten_with_keys_fn argument to register_pytree_node."
        )
    for key, child in with_keys(node)[0]:
        _flatten_with_path_into(child, (*path, key), out, is_leaf)


def tree_flatten_with_path(
    tree: PyTree, is_leaf: Callable[[PyTree], bool] | None = None
) -> tuple[list[tuple[tuple[Any, ...], Any]], TreeSpec]:
    """``[(key path, leaf), ...]`` and the spec of ``tree``."""
    return tree_leaves_with_path(tree, is_leaf), tree_structure(tree, is_leaf)


def tree_leaves_with_path(
    tree: PyTree, is_leaf: Callable[[PyTree], bool] | None = None
) -> list[tuple[tuple[Any, ...], Any]]:
    out: list[tuple[Any, Any]] = []
    _flatten_with_path_into(tree, (), out, is_leaf)
    return out


def tree_map_with_path(
    func: Callable[..., Any],
    tree: PyTree,
    *rests: PyTree,
    is_leaf: Callable[[PyTree], bool] | None = None,
) -> PyTree:
    """:func:`tree_map` whose ``func`` also gets each leaf's key path first."""
    pairs, spec = tree_flatten_with_path(tree, is_leaf)
    paths, leaves = [p for p, _ in pairs], [leaf for _, leaf in pairs]
    columns = [paths, leaves] + [spec.flatten_up_to(rest) for rest in rests]
    return spec.unflatten(map(func, *columns))
