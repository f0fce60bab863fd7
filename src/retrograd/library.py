"""torch's ``torch.library``: custom operators written in Python (NumPy, another library, a
fused kernel) made callable ops with a gradient of one's own::

    @rg.library.custom_op("mylib::numpy_sin", mutates_args=())
    def numpy_sin(x: rg.Tensor) -> rg.Tensor:
        return rg.from_numpy(np.sin(x.numpy()))

    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])

    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * x.cos()

    numpy_sin.register_autograd(backward, setup_context=setup_context)
    rg.ops.mylib.numpy_sin(x)          # the same op, by its qualified name

An op's kernel runs without recording (torch runs it below autograd); its gradient is the one
``register_autograd`` gives, through :class:`retrograd.autograd.Function`. Backward through an
op without one fails as torch's does, naming the op. ``register_fake`` is kept (retrograd runs
eagerly, with no fake tensors: :func:`opcheck` checks a fake against the kernel's shapes and
dtypes). ``register_kernel`` picks a kernel by the inputs' device type.

Of the low-level API, ``Library(ns, "DEF"/"FRAGMENT")`` with ``define`` and ``impl`` (and the
module-level ``define``/``impl``) make ops of the same kind: a ``CompositeImplicitAutograd``
kernel is differentiated through the tensor ops it runs, other keys name a device type's
kernel. Overriding torch's own ATen ops (``Library("aten", "IMPL")``) is refused: retrograd has
no ATen dispatcher.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from .autodiff import is_grad_enabled
from .autograd.function import Function
from .errors import AutodiffError, DTypeError, InvalidArgumentError, check_callable
from .tensor import Tensor

__all__ = [
    "CustomOpDef",
    "Library",
    "custom_op",
    "define",
    "fallthrough_kernel",
    "get_ctx",
    "impl",
    "impl_abstract",
    "opcheck",
    "ops",
    "register_autograd",
    "register_fake",
    "register_kernel",
]

#: "ns::name" -> its op
_OPS: dict[str, CustomOpDef] = {}

#: dispatch keys whose kernel is differentiated through the tensor ops it runs
_COMPOSITE = {"compositeimplicitautograd", "autograd"}


def _split(qualname: str, op: str) -> tuple[str, str]:
    if not isinstance(qualname, str) or qualname.count("::") != 1:
        raise InvalidArgumentError(
            f"{op}: expected a qualified name 'namespace::name' (such as 'mylib::my_op'), "
            f"got {qualname!r}"
        )
    namespace, name = qualname.split("::")
    if not namespace.isidentifier() or not name.replace(".", "_").isidentifier():
        raise InvalidArgumentError(f"{op}: {qualname!r} is not 'namespace::name' of identifiers")
    return namespace, name


def _lookup(qualname: Any, op: str) -> CustomOpDef:
    if isinstance(qualname, CustomOpDef):
        return qualname
    _split(qualname, op)
    found = _OPS.get(qualname)
    if found is None:
        raise InvalidArgumentError(
            f"{op}: no operator {qualname!r} is defined (custom_op or define it first)"
        )
    return found


def _device_type(args: Iterable[Any]) -> str | None:
    for value in args:
        if isinstance(value, Tensor):
            return value.device.type
        if isinstance(value, list | tuple):
            found = _device_type(value)
            if found is not None:
                return found
    return None


def _tensors(value: Any) -> list[Tensor]:
    if isinstance(value, Tensor):
        return [value]
    if isinstance(value, list | tuple):
        return [t for v in value for t in _tensors(v)]
    return []


def _check_schema(schema: Any, op: str) -> None:
    """torch's schema parser's complaints, for what it parses: ``[name](args) -> returns``
    with balanced brackets and a return."""
    if not isinstance(schema, str):
        raise DTypeError(f"{op}: schema must be a str, got {type(schema).__name__}")
    start = schema.find("(")
    depth, end = 0, -1
    for i in range(max(start, 0), len(schema)):
        if schema.startswith("->", i) and depth > 0:
            break
        depth += {"(": 1, ")": -1}.get(schema[i], 0)
        if depth == 0:
            end = i
            break
    rest = schema[end + 1 :].strip() if end >= 0 else ""
    returns = rest[2:].strip() if rest.startswith("->") else ""
    if start < 0 or end < 0 or not returns or returns.count("(") != returns.count(")"):
        at = "its end" if end < 0 else repr(rest[:10] or "its end")
        raise InvalidArgumentError(
            f"{op}: malformed schema {schema!r}: expected '(Type name, ...) -> Type' "
            f"({'expected ) before ' + at if end < 0 else 'expected -> and a return at ' + at})"
        )


def _schema_kind(type_text: str) -> str | None:
    """``"Tensor"``, ``"Tensor?"`` or ``"Tensor[]"`` for a schema type of tensors."""
    text = type_text.strip()
    return text if text in ("Tensor", "Tensor?", "Tensor[]") else None


def _annotation_kind(annotation: Any) -> str | None:
    """The schema type torch infers for an annotation of tensors (``None``: not tensors)."""
    text = annotation if isinstance(annotation, str) else None
    if text is None:
        if annotation is Tensor:
            return "Tensor"
        args = [a for a in getattr(annotation, "__args__", ()) or () if a is not type(None)]
        origin = getattr(annotation, "__origin__", None)
        if len(args) == 1 and args[0] is Tensor:
            if origin in (list, tuple) or getattr(origin, "__name__", "") == "Sequence":
                return "Tensor[]"
            return "Tensor?"  # Optional[Tensor], Tensor | None
        return None
    text = text.replace(" ", "").replace("rg.", "").replace("retrograd.", "")
    text = text.replace("typing.", "").replace("collections.abc.", "")
    if text == "Tensor":
        return "Tensor"
    if text in ("Tensor|None", "None|Tensor", "Optional[Tensor]"):
        return "Tensor?"
    if text in ("list[Tensor]", "List[Tensor]", "Sequence[Tensor]"):
        return "Tensor[]"
    return None


def _return_kinds(annotation: Any) -> list[str | None] | str | None:
    """What the kernel must return: a kind, a list of kinds (a tuple), or ``None`` (anything)."""
    if isinstance(annotation, str):
        text = annotation.replace(" ", "").replace("rg.", "").replace("retrograd.", "")
        for prefix in ("tuple[", "Tuple[", "typing.Tuple["):
            if text.startswith(prefix) and text.endswith("]"):
                return [_annotation_kind(part) for part in text[len(prefix) : -1].split(",")]
        return _annotation_kind(annotation)
    if getattr(annotation, "__origin__", None) is tuple:
        return [_annotation_kind(part) for part in annotation.__args__]
    return _annotation_kind(annotation)


def _split_top(text: str) -> list[str]:
    parts, depth, current = [], 0, ""
    for char in text:
        depth += {"(": 1, "[": 1, ")": -1, "]": -1}.get(char, 0)
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    return [p.strip() for p in [*parts, current] if p.strip()]


def _schema_kinds(schema: str) -> tuple[list[str | None], list[str | None] | str | None]:
    """The tensor kinds of a schema's arguments (in order) and of its return."""
    inside, returns = schema[schema.find("(") + 1 :].rsplit("->", 1)
    inside = inside.strip()[:-1]  # the closing parenthesis
    arguments = [
        _schema_kind(p.split("=")[0].rsplit(" ", 1)[0]) for p in _split_top(inside) if p != "*"
    ]
    returns = returns.strip()
    if returns.replace(" ", "") == "()":
        return arguments, None  # returns nothing: the kernel's None
    if returns.startswith("("):
        return arguments, [_schema_kind(p.rsplit(" ", 1)[0]) for p in _split_top(returns[1:-1])]
    return arguments, _schema_kind(returns.split(" ")[0])


def _has_kind(value: Any, kind: str | None) -> bool:
    if kind is None or value is None:  # (torch passes None for a Tensor as an undefined one)
        return True
    if kind == "Tensor[]":
        return isinstance(value, list | tuple) and all(isinstance(v, Tensor) for v in value)
    return isinstance(value, Tensor)


def _kind_name(value: Any) -> str:
    return type(value).__name__


@contextlib.contextmanager
def _inputs_only(ctx: Any) -> Iterator[None]:
    """``ctx.needs_input_grad`` of the op's inputs only, while the user's code runs (the
    Function's first argument is the kernel's call)."""
    everything = ctx.needs_input_grad
    ctx.needs_input_grad = everything[1:]
    try:
        yield
    finally:
        ctx.needs_input_grad = everything


class CustomOpDef:
    """torch's ``CustomOpDef``: the op ``custom_op`` makes (call it, or reach it as
    ``rg.ops.<namespace>.<name>``), with its kernels, fake and autograd formula."""

    def __init__(
        self,
        namespace: str,
        name: str,
        fn: Callable[..., Any] | None,
        mutates_args: Any,
        schema: str | None = None,
        composite: bool = False,
    ) -> None:
        self._namespace, self._name = namespace, name
        self._qualname = f"{namespace}::{name}"
        self._init_fn = fn
        self._signature = inspect.signature(fn) if fn is not None else None
        self._mutates_args = mutates_args
        self._schema = schema
        self._kernels: dict[str, Callable[..., Any]] = {}
        self._composite = composite
        self._fake: Callable[..., Any] | None = None
        self._backward: Callable[..., Any] | None = None
        self._setup_context: Callable[..., Any] | None = None
        self._function = self._make_function()
        self._argument_kinds, self._output_kinds = self._kinds()
        self.__name__ = name
        self.__doc__ = getattr(fn, "__doc__", None)

    def __repr__(self) -> str:
        return f"<CustomOpDef({self._qualname})>"

    def _kinds(self) -> tuple[list[str | None], list[str | None] | str | None]:
        """The tensor kinds of the arguments and return, from the schema or annotations."""
        if self._schema is not None:
            return _schema_kinds(self._schema)
        if self._signature is None:
            return [], None
        arguments = [_annotation_kind(p.annotation) for p in self._signature.parameters.values()]
        return arguments, _return_kinds(self._signature.return_annotation)

    def _check_arguments(self, values: tuple) -> None:
        if self._signature is not None:
            names = list(self._signature.parameters)
        else:  # a defined op's: the schema's "Type name=default" parts
            inside = (self._schema or "(").split("(", 1)[1].rsplit("->", 1)[0].strip()[:-1]
            names = [p.split("=")[0].split()[-1] for p in _split_top(inside) if p != "*"]
        for position, (value, kind) in enumerate(zip(values, self._argument_kinds)):
            if not _has_kind(value, kind):
                name = names[position] if position < len(names) else f"#{position}"
                raise DTypeError(
                    f"{self._qualname}() Expected a value of type '{kind}' for argument "
                    f"'{name}' but instead found type '{_kind_name(value)}' (position "
                    f"{position}, value {value!r})"
                )

    def _check_output(self, output: Any) -> None:
        kinds = self._output_kinds
        if isinstance(kinds, list):
            fits = isinstance(output, tuple | list) and len(output) == len(kinds)
            fits = fits and all(_has_kind(o, k) for o, k in zip(output, kinds))
            wanted = f"({', '.join(k or 'Any' for k in kinds)})"
        else:
            fits, wanted = output is not None and _has_kind(output, kinds), kinds
            fits = fits or kinds is None
        if not fits:
            raise DTypeError(
                f"{self._qualname}: Unable to cast the kernel's return {output!r} "
                f"({_kind_name(output)}) to {wanted}, the op's declared return"
            )

    @property
    def default(self) -> CustomOpDef:
        """torch's ``OpOverload`` of the op (the op itself here)."""
        return self

    # -- registrations ---------------------------------------------------------------------
    def register_kernel(
        self, device_types: str | Iterable[str] | None, fn: Callable[..., Any] | None = None
    ) -> Any:
        """A kernel for inputs of ``device_types`` (``"cpu"``, ``"cuda"``; ``None``: every
        device), in place of the function the op was made from."""
        types = (
            [device_types]
            if device_types is None or isinstance(device_types, str)
            else list(device_types)
        )

        def register(kernel: Callable[..., Any]) -> Callable[..., Any]:
            check_callable(f"{self._qualname}.register_kernel", kernel, "fn")
            for device_type in types:
                self._kernels["*" if device_type is None else device_type.lower()] = kernel
            return kernel

        return register if fn is None else register(fn)

    def register_fake(self, fn: Callable[..., Any] | None = None, /) -> Any:
        """The op's fake (shape and dtype) implementation, kept for :func:`opcheck`."""

        def register(fake: Callable[..., Any]) -> Callable[..., Any]:
            check_callable(f"{self._qualname}.register_fake", fake, "fn")
            self._fake = fake
            return fake

        return register if fn is None else register(fn)

    def register_autograd(
        self, backward: Callable[..., Any], /, *, setup_context: Callable[..., Any] | None = None
    ) -> None:
        """The op's gradient: ``setup_context(ctx, inputs, output)`` after the kernel, then
        ``backward(ctx, *grads)`` returning one gradient (or ``None``) per input."""
        check_callable(f"{self._qualname}.register_autograd", backward, "backward")
        if setup_context is not None:
            check_callable(f"{self._qualname}.register_autograd", setup_context, "setup_context")
        self._backward, self._setup_context = backward, setup_context

    def register_torch_dispatch(self, *args: Any, **kwargs: Any) -> None:
        raise InvalidArgumentError(
            f"{self._qualname}.register_torch_dispatch: retrograd has no torch dispatch modes"
        )

    # -- the call --------------------------------------------------------------------------
    def _kernel(self, args: tuple) -> Callable[..., Any]:
        device_type = _device_type(args)
        kernel = self._kernels.get(device_type or "cpu") or self._kernels.get("*")
        kernel = kernel or self._init_fn
        if kernel is None:
            raise InvalidArgumentError(
                f"{self._qualname}: no kernel registered for device type {device_type!r} "
                f"(kernels for {sorted(self._kernels) or 'none'})"
            )
        return kernel

    def _positional(self, args: tuple, kwargs: dict) -> tuple[tuple, Callable[[tuple], Any]]:
        """All arguments in the signature's order, and how to call a kernel with them."""
        if self._signature is None or not kwargs:
            return args, lambda values: self._kernel(values)(*values)
        bound = self._signature.bind(*args, **kwargs)
        bound.apply_defaults()
        names = list(bound.arguments)
        keyword_only = {
            n for n, p in self._signature.parameters.items() if p.kind is p.KEYWORD_ONLY
        }

        def call(values: tuple) -> Any:
            positional = [v for n, v in zip(names, values, strict=True) if n not in keyword_only]
            named = {n: v for n, v in zip(names, values, strict=True) if n in keyword_only}
            return self._kernel(values)(*positional, **named)

        return tuple(bound.arguments.values()), call

    def _checked(self, output: Any, inputs: tuple) -> Any:
        self._check_output(output)
        ids = {id(t) for t in _tensors(inputs)}
        for out in _tensors(output):
            if id(out) in ids:
                raise InvalidArgumentError(
                    f"{self._qualname}: The output of this custom operator must not also be "
                    "an input to it; return a clone of the offending output (x.clone())"
                )
        return output

    def _make_function(self) -> type[Function]:
        op = self

        class _OpFunction(Function):
            _hidden_inputs = 1  # the kernel's call, passed first to apply

            @staticmethod
            def forward(call: Any, *inputs: Any) -> Any:
                return op._checked(call(inputs), inputs)

            @staticmethod
            def setup_context(ctx: Any, inputs: tuple, output: Any) -> None:
                if op._setup_context is not None:
                    with _inputs_only(ctx):
                        op._setup_context(ctx, inputs[1:], output)

            @staticmethod
            def backward(ctx: Any, *grads: Any) -> Any:
                if op._backward is None:
                    raise AutodiffError(
                        f"Trying to backward through {op._namespace}.{op._name}.default but no "
                        "autograd formula was registered. Please use register_autograd to add one."
                    )
                with _inputs_only(ctx):
                    result = op._backward(ctx, *grads)
                    inputs = len(ctx.needs_input_grad)
                result = tuple(result) if isinstance(result, tuple | list) else (result,)
                if len(result) > inputs and all(extra is None for extra in result[inputs:]):
                    result = result[:inputs]  # torch drops surplus trailing Nones
                if len(result) != inputs:  # (counted here: the Function's count adds the call)
                    raise AutodiffError(
                        f"{op._qualname}: the backward registered with register_autograd "
                        f"returned {len(result)} gradients for the op's {inputs} inputs; "
                        "return one gradient (or None) per input, in order"
                    )
                return (None, *result)

        _OpFunction.__name__ = self._name  # (the engine's messages add "Backward")
        return _OpFunction

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        current = _OPS.get(self._qualname)
        if current is not None and current is not self:
            return current(*args, **kwargs)  # redefined: torch's handle calls the new op
        values, call = self._positional(args, kwargs)
        self._check_arguments(values)
        wants_grad = is_grad_enabled() and any(t.requires_grad for t in _tensors(values))
        if self._composite or not wants_grad:
            return self._checked(call(values), values)
        return self._function.apply(call, *values)


def custom_op(
    name: str,
    fn: Callable[..., Any] | None = None,
    /,
    *,
    mutates_args: str | Iterable[str],
    device_types: str | Iterable[str] | None = None,
    schema: str | None = None,
) -> Any:
    """torch's ``custom_op``: ``fn`` (its parameters and return annotated, as torch infers
    its schema from them) made the op ``name`` (``"namespace::name"``); as a decorator
    without ``fn``. ``mutates_args`` names the parameters the function writes into
    (``"unknown"``: any)."""
    namespace, op_name = _split(name, "custom_op")
    if schema is not None:
        _check_schema(schema, f"custom_op({name!r})")

    def make(function: Callable[..., Any]) -> CustomOpDef:
        check_callable("custom_op", function, "fn")
        signature = inspect.signature(function)
        if schema is None:
            for parameter in signature.parameters.values():
                if parameter.annotation is inspect.Parameter.empty:
                    raise InvalidArgumentError(
                        f"infer_schema(func): Parameter {parameter.name} must have a type "
                        f"annotation. Got func with signature {signature}"
                    )
                if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
                    raise InvalidArgumentError(
                        f"custom_op: {name}: *args and **kwargs are not supported (torch's "
                        "schemas have named parameters only)"
                    )
            if signature.return_annotation is inspect.Signature.empty:
                raise InvalidArgumentError(
                    f"infer_schema(func): No return type annotation was provided. Got func "
                    f"with signature {signature}"
                )
        if mutates_args != "unknown":
            if isinstance(mutates_args, str):
                raise DTypeError(
                    f"custom_op: mutates_args must be 'unknown' or an iterable of parameter "
                    f"names, got {mutates_args!r}"
                )
            unknown = set(mutates_args) - set(signature.parameters)
            if unknown:
                raise InvalidArgumentError(
                    f"custom_op: {name}: mutates_args names {sorted(unknown)}, which are not "
                    f"parameters of {signature}"
                )
        op = CustomOpDef(namespace, op_name, function, mutates_args, schema)
        if device_types is not None:
            op._kernels.clear()
            op.register_kernel(device_types, function)
            op._init_fn = None
        _OPS[op._qualname] = op
        return op

    return make if fn is None else make(fn)


def register_fake(op: Any, fn: Callable[..., Any] | None = None, /, **kwargs: Any) -> Any:
    """torch's ``register_fake("ns::op")``: the op's fake implementation (a decorator
    without ``fn``)."""
    return _lookup(op, "register_fake").register_fake(fn)


impl_abstract = register_fake


def register_autograd(
    op: Any, backward: Callable[..., Any], /, *, setup_context: Callable[..., Any] | None = None
) -> None:
    """torch's ``register_autograd("ns::op", backward, setup_context=...)``."""
    _lookup(op, "register_autograd").register_autograd(backward, setup_context=setup_context)


def register_kernel(
    op: Any, device_types: str | Iterable[str] | None, fn: Callable[..., Any] | None = None, /
) -> Any:
    """torch's ``register_kernel("ns::op", "cpu")``: a decorator without ``fn``."""
    return _lookup(op, "register_kernel").register_kernel(device_types, fn)


def get_ctx() -> Any:
    raise InvalidArgumentError(
        "library.get_ctx: a fake implementation's context (dynamic output sizes) exists only "
        "while tracing with fake tensors; retrograd runs eagerly"
    )


# -- the low-level API: define and impl ------------------------------------------------------
def _schema_name(schema: str) -> str:
    name = schema.split("(", 1)[0].strip()
    if not name or "(" not in schema or "->" not in schema:
        raise InvalidArgumentError(
            f"define: expected a schema 'name(Tensor x, ...) -> Tensor', got {schema!r}"
        )
    return name.split(".", 1)[0]


def define(qualname: str, schema: str, *, lib: Any = None, tags: Any = ()) -> None:
    """torch's ``define("ns::name", "(Tensor x) -> Tensor")``: an op without kernels yet
    (``impl`` gives them)."""
    namespace, name = _split(qualname, "define")
    _check_schema(schema, f"define({qualname!r})")
    _OPS[qualname] = CustomOpDef(namespace, name, None, "unknown", schema)


def impl(
    qualname: str,
    types: str | Iterable[str],
    func: Callable[..., Any] | None = None,
    *,
    lib: Any = None,
) -> Any:
    """torch's ``impl("ns::name", "cpu")``: a kernel of a defined op for a device type, or
    for ``"CompositeImplicitAutograd"`` (then differentiated through the ops it runs)."""
    op = _lookup(qualname, "impl")
    keys = [types] if isinstance(types, str) else list(types)

    def register(kernel: Callable[..., Any]) -> Callable[..., Any]:
        for key in keys:
            lowered = key.lower()
            if lowered in _COMPOSITE or lowered == "compositeexplicitautograd":
                op._composite = lowered in _COMPOSITE
                op.register_kernel(None, kernel)
            else:
                op.register_kernel(lowered, kernel)
        return kernel

    return register if func is None else register(func)


def fallthrough_kernel() -> None:
    raise InvalidArgumentError("fallthrough_kernel: retrograd has no dispatch keys to fall through")


class Library:
    """torch's ``Library(ns, kind)``: ``"DEF"`` or ``"FRAGMENT"`` define ops of ``ns``
    (``define``, ``impl``); ``"IMPL"`` adds kernels to ops defined here. torch's own
    namespaces (``aten``, ``prim``) are refused."""

    def __init__(self, ns: str, kind: str, dispatch_key: str = "") -> None:
        if kind not in ("DEF", "IMPL", "FRAGMENT"):
            raise InvalidArgumentError(f"Library: Unsupported kind {kind!r} (DEF, IMPL, FRAGMENT)")
        if ns in ("aten", "prim", "prims", "_ops"):
            raise InvalidArgumentError(
                f"Library: {ns!r} is torch's own namespace; retrograd has no ATen dispatcher to "
                "override its ops (write a custom_op of your own namespace instead)"
            )
        self.ns, self.kind, self.dispatch_key = ns, kind, dispatch_key

    def define(self, schema: str, alias_analysis: str = "", *, tags: Any = ()) -> str:
        name = _schema_name(schema)
        define(f"{self.ns}::{name}", schema[len(schema.split("(", 1)[0]) :])
        return name

    def impl(
        self,
        op_name: Any,
        fn: Callable[..., Any],
        dispatch_key: str = "",
        *,
        with_keyset: bool = False,
    ) -> None:
        if with_keyset:
            raise InvalidArgumentError(
                "Library.impl: with_keyset (a DispatchKeySet first) is not supported"
            )
        name = op_name if isinstance(op_name, str) else op_name._name
        impl(
            f"{self.ns}::{name}",
            dispatch_key or self.dispatch_key or "CompositeImplicitAutograd",
            fn,
        )

    def _destroy(self) -> None:
        for qualname in [q for q in _OPS if q.startswith(f"{self.ns}::")]:
            del _OPS[qualname]


# -- rg.ops.<namespace>.<name> ---------------------------------------------------------------
class _Namespace:
    def __init__(self, namespace: str) -> None:
        self._namespace = namespace

    def __getattr__(self, name: str) -> CustomOpDef:
        op = _OPS.get(f"{self._namespace}::{name}")
        if op is None:
            raise AttributeError(
                f"'_OpNamespace' '{self._namespace}' object has no attribute '{name}'"
            )
        return op


class _Ops:
    """torch's ``torch.ops``: the custom ops by namespace (``rg.ops.mylib.my_op``)."""

    def __getattr__(self, namespace: str) -> _Namespace:
        if namespace.startswith("__"):
            raise AttributeError(namespace)
        if namespace == "aten":
            raise AttributeError(
                "ops.aten: retrograd has no ATen operators; call the tensor ops (rg.add, ...)"
            )
        return _Namespace(namespace)

    def load_library(self, path: str) -> None:
        raise InvalidArgumentError(
            f"ops.load_library({path!r}): retrograd loads no C++ operator libraries"
        )


ops = _Ops()


# -- opcheck -------------------------------------------------------------------------------------
def _describe(value: Any) -> list[tuple]:
    return [(tuple(t.shape), t.dtype, t.device) for t in _tensors(value)]


def opcheck(
    op: Any,
    args: tuple,
    kwargs: dict | None = None,
    *,
    test_utils: str | Iterable[str] = (
        "test_schema",
        "test_autograd_registration",
        "test_faketensor",
    ),
    raise_exception: bool = True,
    atol: float | None = None,
    rtol: float | None = None,
) -> dict[str, str]:
    """torch's ``opcheck``, for what holds eagerly: ``test_schema`` (no output aliases an
    input; arguments not in ``mutates_args`` keep their values), ``test_autograd_registration``
    (inputs that require grad have a formula to go to), ``test_faketensor`` (the fake gives the
    kernel's shapes, dtypes and devices). Returns ``{test: "SUCCESS"}``, or the exceptions
    when ``raise_exception`` is false."""
    op = _lookup(op, "opcheck")
    kwargs = dict(kwargs or {})
    tests = [test_utils] if isinstance(test_utils, str) else list(test_utils)
    known = ("test_schema", "test_autograd_registration", "test_faketensor")
    for test in tests:
        if test not in known:
            raise InvalidArgumentError(
                f"opcheck: test_utils {test!r} is not one retrograd runs (it runs {known}; "
                "torch's test_aot_dispatch_* need its compiler)"
            )
    results: dict[str, Any] = {}
    for test in tests:
        try:
            if test == "test_schema":
                inputs = _tensors((args, tuple(kwargs.values())))
                before = {id(t): t.detach().clone() for t in inputs}
                op(*args, **kwargs)  # an output aliasing an input raises here
                mutable = op._mutates_args
                if mutable != "unknown" and op._signature is not None:
                    bound = op._signature.bind(*args, **kwargs)
                    for name, value in bound.arguments.items():
                        if name in mutable:
                            continue
                        for t in _tensors(value):
                            old, new = before[id(t)], t.detach()
                            kept = (old == new) | (old.isnan() & new.isnan())
                            if not bool(kept.all()):
                                raise InvalidArgumentError(
                                    f"opcheck: {op._qualname}: argument {name!r} was written "
                                    "but is not in mutates_args"
                                )
            elif test == "test_autograd_registration":
                wants = any(t.requires_grad for t in _tensors((args, kwargs)))
                if wants and op._backward is None and not op._composite:
                    raise AutodiffError(
                        f"opcheck: {op._qualname}: inputs require grad but no autograd formula "
                        "is registered (register_autograd)"
                    )
            else:
                if op._fake is None:
                    raise InvalidArgumentError(
                        f"opcheck: {op._qualname}: no fake implementation (register_fake)"
                    )
                real = op(*args, **kwargs)
                fake = op._fake(*args, **kwargs)
                if _describe(real) != _describe(fake):
                    raise InvalidArgumentError(
                        f"opcheck: {op._qualname}: the fake gives {_describe(fake)}, the kernel "
                        f"{_describe(real)}"
                    )
            results[test] = "SUCCESS"
        except Exception as error:
            if raise_exception:
                raise
            results[test] = error
    return results
