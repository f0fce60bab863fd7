"""The :class:`Tensor` class: the mixins combined over the data every tensor holds.

A :class:`Tensor` is a backend primitive, the backend it belongs to, and a device label
(:class:`~retrograd.tensor._dispatch.TensorBase`). Its methods come from the mixins, organised
as tinygrad's tensor surface is: each mixin declares the one primitive it needs and gives its
methods in terms of it. Here that primitive is ``_apply``
(:func:`~retrograd.tensor._dispatch.apply`), which this class provides:

- :class:`~retrograd.tensor.elementwise.ElementwiseMixin`: arithmetic, operators, unary math,
  activations, comparisons, logic;
- :class:`~retrograd.tensor.reduce.ReduceMixin`: reductions, sorting, matmul;
- :class:`~retrograd.tensor.shape.ShapeMixin`: reshaping, broadcasting, splitting;
- :class:`~retrograd.tensor.indexing.IndexingMixin`: ``t[...]``, slices, gather/scatter, masks;
- :class:`~retrograd.tensor.burn_names.BurnNamesMixin`: Burn's names for ops the others have.

What is left here is what is particular to a tensor: metadata, conversion to host values
(the user asked for them), casts, devices, and the autodiff surface (``require_grad``,
``backward``, gradients). Every method validates its arguments; errors come out of the
hierarchy in :mod:`retrograd.errors`, naming the operation and the shapes or values at fault,
and leave every tensor and graph as they were.
"""

from __future__ import annotations

import math
import numbers
import sys
import threading
import warnings
import weakref
from multiprocessing.reduction import ForkingPickler
from typing import Any, NoReturn

import numpy as np

from ..autodiff.grad_mode import enable_grad, in_inference_mode, is_grad_enabled
from ..backend.accelerators import (
    HOSTED_DEVICE_KINDS,
    absent_device_refusal,
    cpu_backend_gpu_refusal,
)
from ..backend.protocol import Backend
from ..context import current_backend
from ..device import Device
from ..errors import (
    AutodiffError,
    DeviceUnavailableError,
    DTypeError,
    InvalidArgumentError,
    KernelDTypeError,
    RetrogradError,
    ShapeError,
    SizeMismatchError,
    check_bool,
    check_flag,
    guard,
    shape_text,
)
from ..unsupported import no_shared_memory
from ._dispatch import (
    APPLY_CLASSES,
    COMPLEX_DTYPES,
    DTYPES,
    FLOAT_DTYPES,
    GRAD_DTYPES,
    TensorBase,
    apply,
    check_narrow_data,
    dispatch,
    joined,
    lift,
    normalize_dim,
    on_backend,
    preserved_layout,
)
from .burn_names import BurnNamesMixin
from .dtypes import (
    DTYPE_OBJECTS,
    Size,
    canonical_dtype,
    default_float_dtype,
    legacy_type_dtype,
    legacy_type_name,
)
from .elementwise import ElementwiseMixin
from .indexing import IndexingMixin
from .inference import mark_inference, refuse_require_grad
from .inplace import InplaceMixin, assign
from .layouts import (
    SPARSE_ADMISSION,
    SPARSE_CLASSES,
    check_memory_format,
    factory_options,
    preserve_format,
    strided,
    suggested_format,
)
from .printing import tensor_text
from .products import ProductsMixin
from .reduce import ReduceMixin
from .selection import SelectionMixin, stands_for
from .shape import ShapeMixin, by_keyword, laid_out_in, lay_out
from .special import SpecialMixin
from .storage import StorageMixin
from .torch_forms import TorchFormsMixin
from .views import (
    KIND,
    PARAMS,
    base_of,
    detached_view,
    keep_former_key,
    link,
    outside_graph,
    refuse_rebased_no_grad_view,
    strides_of,
    unlink,
)

__all__ = ["Tensor"]

_new = object.__new__


class _NestedResults(list):
    """The gradients of the backwards called while one backward ran; weakly referenced from
    the thread's stack, so that only the running call keeps it."""

    __slots__ = ("__weakref__",)


class _RunningBackwards(threading.local):
    """The backwards running on this thread, innermost last, each with the gradients of the
    backwards called while it ran (a custom ``autograd.Function``'s ``backward`` that calls
    ``torch.autograd.backward``, as reversible networks do to get their parameters'
    gradients: torch accumulates those into ``.grad``, where the step reads them).

    The stack holds weak references: an interrupt that lands between a call's push and its
    ``try``, or in its ``finally`` before the pop, leaves a dead entry, which the next push
    drops, where a strong one kept every later backward's gradients for good (a soak of
    interrupted training steps grew by a ``Gradients`` a step)."""

    def __init__(self) -> None:
        self.nested: list[weakref.ref[_NestedResults]] = []

    def push(self, results: _NestedResults) -> None:
        stack = self.nested
        while stack and stack[-1]() is None:
            stack.pop()
        stack.append(weakref.ref(results))

    def pop(self, results: _NestedResults) -> None:
        stack = self.nested
        if stack and stack[-1]() is results:
            stack.pop()

    def innermost(self) -> _NestedResults | None:
        for ref in reversed(self.nested):
            results = ref()
            if results is not None:
                return results
        return None


_running_backwards = _RunningBackwards()


def refuse_mixed_complex_grad(op: str, output: Tensor, grad: Tensor) -> None:
    """torch's refusal of a gradient that is complex where its output is real, or real where
    it is complex: a cast would drop an imaginary part or make one up (torch's
    ``RuntimeError``, "For complex Tensors, both grad_output and output are required to have
    the same dtype")."""
    if output.is_complex() != grad.is_complex():
        raise KernelDTypeError(
            f"{op}: for complex tensors, both the gradient and the output must be complex or "
            f"both real; got a gradient of dtype {grad.dtype} for an output of dtype "
            f"{output.dtype}"
        )


def refuse_untracked_inputs(op: str, inputs: list) -> None:
    """torch's refusals of ``backward(inputs=...)``: an empty list (every gradient would be
    dropped: a typo's silent answer) and a tensor that does not require grad (it has no
    gradient to give; torch cannot retain one)."""
    if not inputs:
        raise AutodiffError(f"{op}: the inputs argument cannot be empty")
    for i, t in enumerate(inputs):
        if not t.requires_grad:
            raise AutodiffError(
                f"{op}: inputs[{i}] ({shape_text(t.shape)} {t.dtype}) does not require grad, "
                "so it has no gradient; call require_grad() on it before the forward"
            )


def _wraps_a_primitive(args: tuple, kwargs: dict) -> bool:
    """``Tensor(primitive, backend[, device])``, the internal form: a backend second (any
    other second argument is torch's legacy form, ``rg.Tensor(2, 3)``, which checks it; a
    tensor or a str taken for the backend made a tensor every later op failed on)."""
    if "backend" in kwargs:
        if not isinstance(kwargs["backend"], Backend):
            raise DTypeError(
                f"Tensor: backend must be a backend (rg.NumpyBackend(), rg.Autodiff(...)), got "
                f"{type(kwargs['backend']).__name__}"
            )
        return True
    return len(args) >= 2 and isinstance(args[1], Backend)


class _GradMethod:
    """``Tensor.grad``: the method ``p.grad(grads)``, which an assignment does not replace.
    torch's ``p.grad = None`` (or ``= tensor``) would otherwise hide the method behind an
    instance attribute, and the next ``p.grad(grads)`` (``clip_grad_norm_``'s, an
    optimizer's) fail far away as "'NoneType' object is not callable"; here it is refused at
    the line, saying what takes its place."""

    def __init__(self, method: Any):
        self.method = method
        self.__doc__ = method.__doc__
        self.__name__ = method.__name__
        self.__qualname__ = method.__qualname__

    def __get__(self, tensor: Any, owner: Any = None) -> Any:
        return self.method if tensor is None else self.method.__get__(tensor, owner)

    def __set__(self, tensor: Any, value: Any) -> NoReturn:
        raise AutodiffError(
            f"{type(tensor).__name__}.grad cannot be assigned ({type(value).__name__} given): "
            "retrograd keeps gradients in the Gradients value backward() returns, not on the "
            "tensors, so there is nothing to clear before a backward (drop 'p.grad = None' "
            "there, as zero_grad() would), and after one 'p.grad_remove(grads)' drops a "
            "gradient and 'p.grad(grads)' reads it (in-place writes into it reach the step)"
        )

    def __delete__(self, tensor: Any) -> NoReturn:
        self.__set__(tensor, None)


def warn_copy_construct(call: str) -> None:
    """torch's UserWarning for a tensor copied by ``torch.tensor(t)`` or ``t.new_tensor(u)``:
    the copy leaves the graph, which ``detach().clone()`` says plainly."""
    warnings.warn(
        "To copy construct from a tensor, it is recommended to use sourceTensor.detach().clone()"
        " or sourceTensor.detach().clone().requires_grad_(True), rather than " + call + ".",
        UserWarning,
        stacklevel=4,
    )


class _TensorType(type):
    """``Tensor``'s metaclass: a program's ``isinstance(s, rg.Tensor)`` holds for a sparse
    COO tensor too, as torch's (``if isinstance(adj, torch.Tensor): adj = adj.to(device)``).
    A :class:`~.sparse_coo.SparseTensor` is no dense tensor here, and so no subclass: its
    dense methods are refused by name, ``issubclass`` and ``rg.nn.Parameter`` do not admit
    it, and the library's own modules, whose checks mean "a dense tensor" (a buffer, a
    value saved for backward), keep getting ``False``. Python asks only where the object's
    class is not ``Tensor`` itself.

    The hook (:func:`_admitting_sparse`) is installed when the first sparse tensor is made
    (:func:`admit_sparse_instances`): until then ``isinstance(p, rg.Tensor)`` of a
    ``Parameter``, a number or an array, which the library asks on every layer call, is
    ``type``'s own C check, not a Python call (about a microsecond each)."""

    #: the class that admits sparse tensors (``Tensor``), set once it is made
    admits_sparse: type | None = None


def _admitting_sparse(cls: type, instance: Any) -> bool:
    """``_TensorType.__instancecheck__`` once sparse tensors exist."""
    if type(instance) in SPARSE_CLASSES:
        if cls is not _TensorType.admits_sparse:
            return False
        caller = sys._getframe(1).f_globals.get("__name__", "")  # who called isinstance
        return not caller.startswith(_LIBRARY)
    return type.__instancecheck__(cls, instance)


def admit_sparse_instances() -> None:
    """Make ``isinstance(s, rg.Tensor)`` hold for sparse tensors (see :class:`_TensorType`):
    called as the first one is made; Python looks the hook up at every ``isinstance``, so it
    takes effect at once."""
    if "__instancecheck__" not in _TensorType.__dict__:
        _TensorType.__instancecheck__ = _admitting_sparse  # type: ignore[method-assign]


SPARSE_ADMISSION[0] = admit_sparse_instances


_LIBRARY = __name__.split(".")[0] + "."


#: whether :func:`_warn_complex_to_real` has warned in this process
_COMPLEX_TO_REAL_WARNED = [False]


def _warn_complex_to_real() -> None:
    """torch's warning on a cast of complex values to a real dtype (``x.float()``,
    ``Module.to(float32)`` of complex parameters, a ``copy_`` into a real tensor): a
    ``UserWarning``, once per process as torch's ``TORCH_WARN_ONCE``."""
    if _COMPLEX_TO_REAL_WARNED[0]:
        return
    _COMPLEX_TO_REAL_WARNED[0] = True
    warnings.warn(
        "Casting complex values to real discards the imaginary part", UserWarning, stacklevel=3
    )


class Tensor(
    ElementwiseMixin,
    SpecialMixin,
    ReduceMixin,
    ProductsMixin,
    SelectionMixin,
    ShapeMixin,
    IndexingMixin,
    InplaceMixin,
    BurnNamesMixin,
    StorageMixin,
    TorchFormsMixin,
    TensorBase,
    metaclass=_TensorType,
):
    """An n-dimensional array on a backend; differentiable on the autodiff backend.

    >>> import retrograd as rg
    >>> x = rg.tensor([[1.0, 2.0], [3.0, 4.0]]).require_grad()
    >>> grads = (x * x).sum().backward()
    >>> x.grad(grads).tolist()
    [[2.0, 4.0], [6.0, 8.0]]
    """

    #: ``_view``: how this tensor was taken from its base (a :data:`.views.Link`), and
    #: ``_views``: weak references to the views taken from it (see :mod:`.views`). They live
    #: in the instance ``__dict__``, which CPython makes only when a view op first writes
    #: one: until then the class defaults below answer reads, without the exception a
    #: missing slot costs.
    #: ``_weak_base``: the weak reference its detached views hold it by, when it is computed
    #: in the graph (:func:`.views.link`), made once.
    #: ``_former_keys``: the gradient keys of the leaves this tensor held before in-place
    #: writes made it a fresh leaf, each a ``RetiredLeaf`` (``.key``; called, whether it can
    #: still be read), newest first (see :func:`.views.remember_leaf`).
    __slots__ = ("__dict__",)
    _view: Any = None
    _views: Any = None
    _weak_base: Any = None
    _former_keys: tuple = ()
    #: ``_no_grad_view``: taken under ``no_grad`` (or from such a view), as torch's views
    #: whose in-place writes with grad on it refuses (see :func:`.views.link`).
    _no_grad_view: bool = False
    #: ``_multi_output_view``: ``(output number, torch's op name)`` of an output of
    #: ``split``/``chunk``/``unbind`` taken with grad on from a tensor that requires grad (or
    #: of a view of one): torch refuses its in-place writes with grad on (see
    #: :func:`.views.refuse_multi_output_view`).
    _multi_output_view: Any = None
    __array_priority__ = 1000  # NumPy defers to our reflected operators
    __hash__ = object.__hash__  # ``==`` is elementwise; a tensor hashes by identity

    #: torch's legacy constructor forms (:func:`.legacy.legacy_new`), installed by
    #: :mod:`.legacy`, which needs the creation functions that need this class.
    _legacy_new: Any = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        reduce_for_another_process_of(cls)  # (``multiprocessing`` looks the exact class up)

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        """``Tensor(primitive, backend, device)`` wraps a backend primitive; torch's legacy
        forms make one of the default dtype: ``rg.Tensor(2, 3)`` (zeros: torch leaves it
        uninitialized), ``rg.Tensor([1, 2])``, ``rg.Tensor()`` (empty), ``rg.Tensor(t)`` (``t``
        itself, a view sharing its value)."""
        if cls is not Tensor or not args or _wraps_a_primitive(args, kwargs):
            return _new(cls)  # bare: ``__init__`` fills it (copy and unpickling: their state)
        device = kwargs.pop("device", None)
        return Tensor._legacy_new("Tensor", default_float_dtype(), args, device, True)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        if _wraps_a_primitive(args, kwargs):
            TensorBase.__init__(self, *args, **kwargs)
        elif not args and not kwargs:  # ``rg.Tensor()``: torch's empty float tensor
            empty = Tensor._legacy_new("Tensor", default_float_dtype(), (), None)
            TensorBase.__init__(self, empty._prim, empty._backend, empty._device)
        # else a legacy form, which ``__new__`` made

    #: The one primitive the mixins need, ``self._apply(op, inputs, params=())``: run a backend
    #: kernel, operands lifted and promoted, errors translated (:func:`._dispatch.apply`).
    _apply = dispatch

    # -- metadata -----------------------------------------------------------------------------
    @property
    def shape(self) -> Size:
        """The dimensions, as a tuple of ints: an ``rg.Size``, as torch's ``shape`` is a
        ``torch.Size``, so the legacy constructors (``rg.FloatTensor(x.shape)``,
        ``x.new(x.size())``) read it as a shape where a plain tuple is data."""
        return tuple.__new__(Size, self._backend.shape(self._prim))

    @property
    def ndim(self) -> int:
        return len(self._backend.shape(self._prim))

    @property
    def dtype(self) -> Any:
        """The dtype (``rg.float32``, ``rg.float64``, ``rg.int64``, ``rg.bool``...): a
        :class:`~retrograd.tensor.dtypes.dtype`, equal to its name (``"float32"``)."""
        return DTYPE_OBJECTS[self._backend.dtype(self._prim)]

    @property
    def device(self) -> Device:
        return self._device

    @property
    def backend(self) -> Any:
        return self._backend

    @property
    def primitive(self) -> Any:
        """The backend primitive this tensor wraps."""
        return self._prim

    def is_float(self) -> bool:
        return self.dtype in FLOAT_DTYPES

    def dim(self) -> int:
        """The number of dimensions (torch's ``dim()``; :attr:`ndim`)."""
        return len(self._backend.shape(self._prim))

    def numel(self) -> int:
        return math.prod(self.shape)

    def size(self, dim: int | None = None) -> Any:
        """The shape, or with ``dim`` the size of that dimension (negative counts from the end)."""
        shape = self.shape
        return shape if dim is None else shape[normalize_dim("size", dim, len(shape))]

    def __len__(self) -> int:
        shape = self.shape
        if not shape:
            raise DTypeError("len() of a 0-d tensor")
        return shape[0]

    # -- conversion ---------------------------------------------------------------------------
    def numpy(self, *, force: bool = False) -> np.ndarray:
        """The values as a NumPy array (shares memory with the tensor where it can).
        ``force`` (torch's: detach and copy to the host first) changes nothing here: the
        array is always the host's, and a tensor that requires grad gives its values too (a
        writable view: by Burn's rule a tensor computed from ``p.detach()`` requires grad,
        and torch scripts write into ``out.detach().squeeze().numpy()``)."""
        return np.asarray(self._backend.to_numpy(self._prim))

    def __array__(self, dtype=None, copy=None):
        array = self.numpy()
        if dtype is not None:
            array = array.astype(dtype, copy=False)
        return np.array(array, copy=True) if copy else array

    def tolist(self) -> Any:
        return self.numpy().tolist()

    def item(self) -> Any:
        """The value of a one-element tensor as a Python scalar."""
        array = self.numpy()
        if array.size != 1:  # (torch: "a Tensor with 2 elements cannot be converted to Scalar")
            raise SizeMismatchError(
                f"item: expected a one-element tensor, got shape {list(array.shape)}"
            )
        return array.reshape(()).item()

    def _python_number(self, op: str, to: type) -> Any:
        """The value of a one-element tensor as Python's ``int``/``float`` read it, with
        torch's refusals in retrograd's errors: several elements, a complex value into a real
        number (torch: "value cannot be converted"), a NaN or infinity into an int."""
        value = self._one_value(op)
        if isinstance(value, complex) and value.imag == 0:
            value = value.real  # (torch's checked conversion: a zero imaginary part is no loss)
        if isinstance(value, complex):  # (torch's RuntimeError)
            raise KernelDTypeError(
                f"{op}: the complex value {value!r} cannot be converted to a real number (as "
                "torch refuses it); take .real or .abs() of it first"
            )
        if to is int and isinstance(value, float) and not math.isfinite(value):
            raise InvalidArgumentError(f"{op}: cannot convert float {value!r} to an integer")
        return to(value)

    def __float__(self) -> float:
        return self._python_number("__float__", float)

    def _one_value(self, op: str) -> Any:
        """The value of a one-element tensor; a :class:`ShapeError` naming ``op`` otherwise."""
        if self.numel() != 1:
            raise ShapeError(
                f"{op}: only a one-element tensor can be converted to a Python number, got "
                f"shape {shape_text(self.shape)}"
            )
        return self.item()

    def __complex__(self) -> complex:
        return complex(self._one_value("__complex__"))

    def __int__(self) -> int:
        return self._python_number("__int__", int)

    def __bool__(self) -> bool:
        if self.numel() != 1:  # (torch's RuntimeError)
            raise SizeMismatchError(
                f"bool: the truth value of a tensor of shape {shape_text(self.shape)} (more "
                "than one value, or none) is ambiguous; use .any() or .all()"
            )
        return bool(self.item())

    def __floor__(self) -> int:
        """``math.floor(t)``: Python's floor of ``float(t)``, as torch's tensors have it (they
        define no hook: Python falls back on ``__float__``), a NaN or an infinity refused in
        retrograd's terms rather than Python's bare ``ValueError``/``OverflowError``."""
        return math.floor(self._finite_float("math.floor"))

    def __ceil__(self) -> int:
        """``math.ceil(t)``: as :meth:`__floor__`."""
        return math.ceil(self._finite_float("math.ceil"))

    def _finite_float(self, op: str) -> float:
        value = self._python_number(op, float)
        if not math.isfinite(value):
            raise InvalidArgumentError(f"{op}: cannot convert float {value!r} to an integer")
        return value

    # torch's tensors define none of Python's rounding hooks nor ``divmod``: refused as torch's
    # TypeError, but in retrograd's terms and naming what to call instead
    def __round__(self, ndigits: Any = None) -> NoReturn:
        raise DTypeError(
            "round(): a tensor does not take Python's round() (as torch's); call "
            "t.round() or t.round(decimals=n)"
        )

    def __trunc__(self) -> NoReturn:
        raise DTypeError(
            "math.trunc(): a tensor does not take Python's math.trunc() (as torch's); call "
            "t.trunc(), or math.trunc(t.item())"
        )

    def __divmod__(self, other: Any) -> NoReturn:
        raise DTypeError(
            "divmod(): tensors do not take Python's divmod() (as torch's); call "
            "t.div(other, rounding_mode='floor') and t.remainder(other)"
        )

    def __rdivmod__(self, other: Any) -> NoReturn:
        self.__divmod__(other)

    def __index__(self) -> int:
        """torch's: an integer or bool tensor of one element is an int (``[a, b][t]``,
        ``range(t)``); anything else is a ``TypeError`` (``DTypeError``), as torch's, so that
        Python's fallbacks run (``bytes(t)`` iterates a tensor that is not an index)."""
        if self.dtype in GRAD_DTYPES or self.numel() != 1:
            raise DTypeError(
                "__index__: only an integer or bool tensor of one element can be used as an "
                f"index, got a {shape_text(self.shape)} {self.dtype} tensor"
            )
        return int(self.item())

    def __format__(self, format_spec: str) -> str:
        """torch's: a 0-d tensor formats as its value (``f"{loss:.4f}"``, ``"{avg:6.2f}"``);
        any other tensor only with an empty spec, as its ``str``."""
        if self.ndim == 0:
            value = self.item()
            try:
                return format(value, format_spec)
            except (TypeError, ValueError) as error:  # Python's: 'd' of a float, 'x' of a complex
                raise InvalidArgumentError(
                    f"__format__: format spec {format_spec!r} does not apply to a {self.dtype} "
                    f"tensor's value {value!r} ({error})"
                ) from None
        if format_spec:  # object.__format__'s own TypeError names neither spec nor shape
            raise DTypeError(
                f"__format__: format spec {format_spec!r} needs a 0-d tensor, got shape "
                f"{shape_text(self.shape)} (format its str, or .item() of one element)"
            )
        return object.__format__(self, format_spec)

    def __contains__(self, element: Any) -> bool:
        """torch's ``element in tensor``: ``(tensor == element).any()`` for a number or a
        tensor; anything else refused (iteration's ``==`` read a string as never there)."""
        if not isinstance(element, Tensor | numbers.Number):
            raise DTypeError(
                f"__contains__: only a tensor or a number can be looked for in a tensor, got "
                f"{type(element).__name__}"
            )
        return bool((self == element).any())

    def __repr__(self) -> str:
        """torch's ``repr`` (its ``_tensor_str`` rules, the options of
        ``rg.set_printoptions``), the dtype named as ``retrograd.float64``."""
        try:
            grad_fn = self.grad_fn
        except AutodiffError:  # (torch's view whose grad_fn it refuses prints <Invalid>)
            grad_fn = "Invalid"
        kind = self._device.kind
        made_here = type(self).__module__.partition(".")[0] == "retrograd"
        # torch's: a subclass of the user's prints under its own name (``MyTensor([1.])``)
        prefix = "tensor(" if made_here else f"{type(self).__name__}("
        meta = kind == "meta"  # no values to show: torch's "..." and the size
        return tensor_text(
            None if meta else self.numpy(),
            self.dtype,
            default_float_dtype(),
            device_text=None if kind == "cpu" else kind if meta else str(self._device),
            shape=tuple(self.shape),
            grad_fn_name=None if grad_fn is None else str(grad_fn),
            requires_grad=bool(self.requires_grad),
            prefix=prefix,
        )

    def cast(self, dtype: Any) -> Tensor:
        """This tensor in ``dtype`` (a name or an ``rg`` dtype); float-to-float casts keep
        the gradient flowing. The same dtype gives the tensor itself, as torch's ``to``."""
        if dtype.__class__ is not str or dtype not in DTYPES:
            dtype = canonical_dtype("cast", dtype)
        own = self._backend.dtype(self._prim)
        if dtype == own:
            return self
        if own in COMPLEX_DTYPES and dtype not in COMPLEX_DTYPES:
            _warn_complex_to_real()
        return apply("cast", (self,), (dtype,))

    def _cast_in_format(self, op: str, dtype: str, memory_format: Any) -> Tensor:
        """A cast method: ``to(dtype, memory_format=memory_format)``, the format checked as
        torch checks it."""
        check_memory_format(op, memory_format, self.ndim)
        return self._in_format(self.cast(dtype), memory_format)

    def _in_format(self, out: Tensor, memory_format: Any) -> Tensor:
        """``out`` (this tensor, or its copy on another device or in another dtype) laid out
        in ``memory_format`` as torch's ``to`` lays it: ``self`` itself where nothing else
        changed and torch's ``suggest_memory_format`` gives that format already, else a copy
        with that format's strides (:mod:`.layouts`); ``preserve_format`` keeps ``out``."""
        if memory_format is None or memory_format is preserve_format:
            return out
        if out is self:
            if suggested_format(tuple(self.shape), strides_of(self)) is memory_format:
                return self
            return laid_out_in(self, memory_format)
        lay_out(out, memory_format)
        return out

    def float(self, memory_format: Any = preserve_format) -> Tensor:
        """Cast to float32 (torch's ``float()``: a float64 tensor becomes float32)."""
        return self._cast_in_format("float", "float32", memory_format)

    def double(self, memory_format: Any = preserve_format) -> Tensor:
        """Cast to float64."""
        return self._cast_in_format("double", "float64", memory_format)

    def cfloat(self, memory_format: Any = preserve_format) -> Tensor:
        """Cast to complex64."""
        return self._cast_in_format("cfloat", "complex64", memory_format)

    def cdouble(self, memory_format: Any = preserve_format) -> Tensor:
        """Cast to complex128."""
        return self._cast_in_format("cdouble", "complex128", memory_format)

    def long(self, memory_format: Any = preserve_format) -> Tensor:
        """Cast to int64."""
        return self._cast_in_format("long", "int64", memory_format)

    def int(self, memory_format: Any = preserve_format) -> Tensor:
        """Cast to int32 (wrapping values past its range, as torch's)."""
        return self._cast_in_format("int", "int32", memory_format)

    def bool(self, memory_format: Any = preserve_format) -> Tensor:
        return self._cast_in_format("bool", "bool", memory_format)

    def half(self, memory_format: Any = preserve_format) -> Tensor:
        """Cast to float16 (on backends that hold it: TorchBackend)."""
        return self._cast_in_format("half", "float16", memory_format)

    def bfloat16(self, memory_format: Any = preserve_format) -> Tensor:
        """Cast to bfloat16 (on backends that hold it: TorchBackend)."""
        return self._cast_in_format("bfloat16", "bfloat16", memory_format)

    def byte(self, memory_format: Any = preserve_format) -> Tensor:
        """Cast to uint8 (wrapping values modulo 256, floats truncated toward zero, as torch's)."""
        return self._cast_in_format("byte", "uint8", memory_format)

    def type(self, dtype: Any = None, non_blocking: bool = False) -> Any:
        """Without ``dtype``, the type's name (``"retrograd.FloatTensor"``, as torch's
        ``"torch.FloatTensor"``); with one (a dtype, a legacy type such as
        ``rg.LongTensor``, or its name), this tensor cast to it (and moved to the GPU for
        a CUDA type such as ``rg.cuda.FloatTensor``)."""
        if dtype is None:
            return legacy_type_name(self.dtype)
        if dtype is Tensor:
            # ``t.type(type(x.data))`` (ssd.pytorch): the tensor class names the default
            # tensor type, as torch's ``t.type(torch.Tensor)`` does
            dtype = default_float_dtype()
        cast = self.cast(legacy_type_dtype(dtype))
        return cast.to("cuda") if getattr(dtype, "device_kind", None) == "cuda" else cast

    def type_as(self, other: Tensor) -> Tensor:
        """This tensor cast to ``other``'s dtype."""
        return self.cast(other.dtype)

    def is_floating_point(self) -> bool:
        return self.dtype in FLOAT_DTYPES

    @property
    def layout(self) -> Any:
        """``rg.strided``: every retrograd tensor is dense (:mod:`.layouts`)."""
        return strided

    @property
    def is_sparse(self) -> bool:
        return False

    def to_sparse(
        self,
        sparse_dim: int | None = None,
        *,
        layout: Any = None,
        blocksize: Any = None,
        dense_dim: Any = None,
    ) -> Any:
        """This tensor's nonzeros as a sparse COO tensor (:mod:`.sparse_coo`), coalesced and
        differentiable in this tensor; hybrid and other layouts are refused."""
        from .sparse_coo import dense_to_sparse

        if blocksize is not None or dense_dim not in (None, 0):
            raise InvalidArgumentError(
                "to_sparse: blocksize and dense_dim (block and hybrid layouts) are not "
                "supported in retrograd"
            )
        return dense_to_sparse(self, sparse_dim, layout)

    def to_sparse_coo(self) -> Any:
        """``to_sparse()`` (torch's name for the COO layout)."""
        return self.to_sparse()

    def to_sparse_csr(self, dense_dim: Any = None) -> Any:
        """Refused: retrograd's sparse tensors are COO only (``to_sparse()``)."""
        raise InvalidArgumentError(
            "to_sparse_csr: the sparse CSR layout is not supported in retrograd; "
            "to_sparse() gives the COO layout"
        )

    def to_sparse_csc(self, dense_dim: Any = None) -> Any:
        """Refused: retrograd's sparse tensors are COO only (``to_sparse()``)."""
        raise InvalidArgumentError(
            "to_sparse_csc: the sparse CSC layout is not supported in retrograd; "
            "to_sparse() gives the COO layout"
        )

    def to_dense(self, dtype: Any = None, *, masked_grad: Any = None) -> Tensor:
        """This tensor itself, as torch's ``to_dense`` of a strided tensor (every one is here:
        GCN code calls ``adj.to_dense()`` whatever the adjacency's layout), or cast to
        ``dtype`` (a differentiable cast, as torch's)."""
        return self if dtype is None else self.to(dtype)

    def element_size(self) -> int:
        """Bytes per element."""
        return DTYPE_OBJECTS[self.dtype].itemsize

    def nelement(self) -> int:
        return math.prod(self.shape)

    def ndimension(self) -> int:
        return len(self._backend.shape(self._prim))

    # -- devices ------------------------------------------------------------------------------
    def to(self, *args: Any, **kwargs: Any) -> Tensor:
        """torch's ``to``: ``to(dtype)``, ``to(device)``, ``to(device, dtype)``,
        ``to(other)`` (its device and dtype), with ``device=``/``dtype=``/``copy=`` keywords
        (``non_blocking`` is accepted; ``memory_format`` is checked and keeps the values:
        :mod:`.layouts`). Returns this tensor itself when nothing changes, unless
        ``copy=True``."""
        device = kwargs.pop("device", None)
        dtype = kwargs.pop("dtype", None)
        copy = bool(kwargs.pop("copy", False))
        kwargs.pop("non_blocking", None)
        memory_format = kwargs.pop("memory_format", None)
        check_memory_format("to", memory_format, self.ndim)
        if kwargs:
            raise TypeError(f"to: unexpected keyword arguments {sorted(kwargs)}")
        for arg in args:
            if isinstance(arg, TensorBase):
                device, dtype = arg.device, arg.dtype
            elif isinstance(arg, bool):
                continue  # torch's positional non_blocking / copy flags
            elif _is_dtype(arg):
                dtype = arg
            else:
                device = arg
        out = self
        if device is not None:
            target = _device(device)
            if target is not self._device:
                if target.kind == "cuda" and self._backend.default_device.kind != "cuda":
                    raise DeviceUnavailableError(
                        f"to: cannot move a tensor of {self._backend!r} to {target}: "
                        + cpu_backend_gpu_refusal()
                    )
                if target.kind not in HOSTED_DEVICE_KINDS:
                    raise DeviceUnavailableError(
                        f"to: cannot move a tensor to {target}: "
                        + absent_device_refusal(target.kind)
                    )
                moved = self._backend.to_device(self._prim, target)
                out = Tensor(moved, self._backend, target)
        if dtype is not None:
            out = out.cast(dtype)
        if copy and out is self:
            out = self.clone(memory_format=memory_format)
        return self._in_format(out, memory_format)

    def cpu(self) -> Tensor:
        """This tensor on the CPU (itself when it is there already)."""
        if self._device.kind == "cpu":
            return self
        return self.to("cpu")

    def cuda(self, device: Any = None, non_blocking: bool = False) -> Tensor:
        """This tensor on a GPU: its backend must compute on one (``rg.TorchBackend("cuda")``);
        otherwise an error that says so."""
        if device is None or isinstance(device, int):
            index = device or 0
        else:
            index = _device(device).index
        return self.to(Device("cuda", index))

    @property
    def is_cuda(self) -> bool:
        return self._device.kind == "cuda"

    def get_device(self) -> int:
        """The device index on a GPU, -1 on the CPU (torch's convention)."""
        return self._device.index if self._device.kind == "cuda" else -1

    def pin_memory(self) -> Tensor:
        """The tensor itself: host memory is the backend's business."""
        return self

    def is_pinned(self, device: Any = None) -> bool:
        """False: no tensor is in page-locked memory here (:meth:`pin_memory` keeps it as it
        is), as a tensor torch has not pinned (data prefetchers ask before pinning); ``device``
        (torch's deprecated accelerator to ask about) changes nothing."""
        return False

    def share_memory_(self) -> Tensor:
        """torch's ``share_memory_``: returns this tensor, marked shared. Within a process
        there is nothing to share: every thread already sees this tensor and its in-place
        updates (a model shared between threads needs no call). What cannot be shared is the
        tensor handed to another process, which would receive a copy its updates never
        leave (a Hogwild loop would train nothing): a marked tensor given to a process
        (``multiprocessing``'s pickling of its arguments, a queue) is refused there, with
        :func:`.no_shared_memory`'s advice."""
        self.__dict__[_SHARED_MARK] = True
        return self

    def is_shared(self) -> bool:
        """Whether :meth:`share_memory_` marked this tensor (torch's answer after it; Hogwild
        code asks before sharing: ``if not p.is_shared(): p.share_memory_()``)."""
        return bool(self.__dict__.get(_SHARED_MARK, False))

    # -- new tensors like this one (torch's ``new_*``) ------------------------------------------
    def _new_like(self, op: str, size: Any, dtype: Any, device: Any, fill: Any) -> Tensor:
        from .shape import varargs_shape

        shape = varargs_shape(op, size if isinstance(size, tuple) else (size,))
        if any(n < 0 for n in shape):
            raise ShapeError(f"{op}: negative dimension in shape {shape_text(shape)}")
        dtype = self.dtype if dtype is None else canonical_dtype(op, dtype)
        device = self._device if device is None else _device(device)
        backend = self._backend
        return Tensor(backend.full(shape, fill, dtype, device), backend, device)

    @factory_options("new_zeros")
    def new_zeros(self, *args: Any, size: Any = None, dtype: Any = None, device: Any = None,
                  requires_grad: bool = False) -> Tensor:  # fmt: skip
        """Zeros of ``size`` (varargs, one sequence or ``size=``), with this tensor's dtype and
        device unless given."""
        out = self._new_like("new_zeros", _sized("new_zeros", args, size), dtype, device, 0)
        return out.require_grad() if requires_grad else out

    @factory_options("new_ones")
    def new_ones(self, *args: Any, size: Any = None, dtype: Any = None, device: Any = None,
                 requires_grad: bool = False) -> Tensor:  # fmt: skip
        out = self._new_like("new_ones", _sized("new_ones", args, size), dtype, device, 1)
        return out.require_grad() if requires_grad else out

    @factory_options("new_empty")
    def new_empty(self, *args: Any, size: Any = None, dtype: Any = None, device: Any = None,
                  requires_grad: bool = False) -> Tensor:  # fmt: skip
        """torch's ``new_empty`` (values unspecified: here zeros)."""
        size = _sized("new_empty", args, size)
        return self.new_zeros(*size, dtype=dtype, device=device, requires_grad=requires_grad)

    @factory_options("new_full")
    def new_full(self, size: Any, fill_value: Any, *, dtype: Any = None, device: Any = None,
                 requires_grad: bool = False) -> Tensor:  # fmt: skip
        from ._dispatch import written_scalar

        if isinstance(fill_value, TensorBase):
            fill_value = fill_value.item()
        # as ``full``'s: into uint8, -1 wraps to 255 and 300 is refused (torch's bounds)
        target = self.dtype if dtype is None else canonical_dtype("new_full", dtype)
        fill_value = written_scalar("new_full", fill_value, target)
        out = self._new_like("new_full", tuple(size), dtype, device, fill_value)
        return out.require_grad() if requires_grad else out

    def new_tensor(self, data: Any, dtype: Any = None, device: Any = None,
                   requires_grad: bool = False) -> Tensor:  # fmt: skip
        """A copy of ``data`` with this tensor's dtype and device unless given."""
        dtype = self.dtype if dtype is None else canonical_dtype("new_tensor", dtype)
        device = self._device if device is None else _device(device)
        backend = self._backend
        if isinstance(data, TensorBase):  # a tensor is cast (wrapping), as torch's
            warn_copy_construct("tensor.new_tensor(sourceTensor)")
            out = Tensor(backend.from_data(data.numpy(), dtype, device), backend, device)
        else:  # numbers are checked as ``tensor`` checks them (2**40 into int32 is refused)
            check_narrow_data("new_tensor", data, dtype)
            out = Tensor(backend.from_data(np.asarray(data), dtype, device), backend, device)
        return out.require_grad() if requires_grad else out

    # -- copies and the value outside the graph -----------------------------------------------
    def clone(self, *, memory_format: Any = None) -> Tensor:
        """A new tensor with the same values, the gradient flowing back to this one; it
        aliases nothing (an in-place op on either leaves the other alone). As torch's
        ``preserve_format`` (the default), the copy of a permuted tensor (non-overlapping
        and dense) keeps its strides: ``x.t().clone().stride()`` is ``x.t()``'s."""
        check_memory_format("clone", memory_format, self.ndim)
        backend = self._backend
        if backend.is_autodiff and not is_grad_enabled() and backend.is_tracked(self._prim):
            # under no_grad torch's clone is outside the graph, as every op's result there
            out = Tensor(backend.wrap(self._own_copy()), backend, self._device)
        elif backend.is_autodiff and backend.is_tracked(self._prim) and self.requires_grad:
            # torch's clone of a leaf is not a leaf, and a clone of a tensor computed in the
            # graph is a node of its own: record an identity op on the graph. (Sharing the
            # computed tensor's node, the clone's retain_grad() and hooks got that tensor's
            # whole gradient: ``c = a.clone(); (2 * c).sum() + (3 * a).sum()`` gave c the
            # gradient 5, torch's 2; its grad_fn was a's: round 93.) Its value is a copy
            # (the op's forward), as the other branches' are.
            out = apply("clone", (self,))
        else:
            value = self._own_copy()
            out = Tensor(
                backend.wrap(value) if backend.is_autodiff else value, backend, self._device
            )
            if self._inference:  # (made from its source's primitive, an inference one)
                mark_inference(out, in_inference_mode())
        if memory_format is None or memory_format is preserve_format:
            strides = preserved_layout(self)
            if strides is not None:
                out._layout = (self.shape, strides)
        else:
            lay_out(out, memory_format)
        return out

    def __deepcopy__(self, memo: dict) -> Tensor:
        """``copy.deepcopy``: a new leaf of this tensor's class (a ``Parameter`` stays one) on
        the same backend and device, with this one's values, requiring grad iff it does
        (torch's copy of a leaf). The copy has a node of its own: a target network or an EMA
        model copied from a model gets gradients of its own, not its source's. Attributes
        set on the tensor are copied; view links are not (the copy is a base of its own); a
        ``distributed`` mark is not (the copy is not the parameter the other devices reduce).

        A tensor computed in the graph (not a leaf) is refused, as torch refuses it: its copy
        could be neither a leaf (it would not be the user's) nor in the graph (the copy of a
        module's computed weight, as ``nn.utils.weight_norm``'s and ``spectral_norm``'s hooks
        keep, would never pass its gradient back to the trained parameters)."""
        if not self.is_leaf:
            raise AutodiffError(
                f"deepcopy: only tensors created explicitly by the user (graph leaves) can be "
                f"deep-copied; this {self.dtype} tensor of shape {shape_text(self.shape)} is "
                f"the output of {self.grad_fn.name()}. A module copied with such a tensor "
                "as an attribute (the weight nn.utils.weight_norm's hook computes) cannot be "
                "copied either: detach() the tensor, or use "
                "nn.utils.parametrizations.weight_norm"
            )
        copied = _fresh_leaf(
            type(self), self._backend, self._device, self._own_copy(), self.requires_grad
        )
        memo[id(self)] = copied
        _copy_attributes(copied, self.__dict__, memo)
        return copied

    def __reduce_ex__(self, protocol: Any) -> tuple:
        """Pickled as its values, class, backend, device and whether it requires grad, never
        its graph; unpickled as a new leaf, on the current backend where that equals the
        pickled one (see :func:`_unpickled`)."""
        state = {k: v for k, v in self.__dict__.items() if k not in _VIEW_ATTRIBUTES}
        return _unpickled, (
            type(self),
            self._backend,
            self._device,
            self._leaf_value(),
            self.requires_grad,
            state,
        )

    def _own_copy(self) -> Any:
        """The inner backend's value of this tensor in memory of its own, for ``clone`` and
        ``deepcopy``: values are never written in place by ops, but :meth:`numpy` hands the
        memory out writable, and a clone or a deep-copied model that shared it took the
        user's writes into the source (``c = t.clone(); t.numpy()[0] = 9`` changed ``c``:
        round 94)."""
        backend = self._backend
        inner = backend.inner if backend.is_autodiff else backend
        return inner.copy_value(self._leaf_value())

    def _leaf_value(self) -> Any:
        """The inner backend's value of this tensor (values are never written in place, so a
        copy may share it)."""
        backend = self._backend
        return backend.inner_value(self._prim) if backend.is_autodiff else self._prim

    @property
    def data(self) -> Tensor:
        """This tensor's values outside the graph, aliasing it: ``p.data.add_(g, alpha=-lr)``
        updates ``p`` and records nothing (torch's ``.data``). Assigning ``p.data = x`` gives
        ``p`` the values of ``x`` (its shape and dtype too), the object kept; an ``x`` outside
        any graph then shares them with ``p``, as torch's shares its storage: a later in-place
        write to either (an optimizer's step) shows in both. Where ``x`` is a view
        (``dec.weight.data = enc.weight.data.t()``: tied weights), ``p`` becomes the same view
        of ``x``'s base."""
        backend = self._backend
        device = self._device
        rebuilt = detached_view(self, lambda prim: Tensor(prim, backend, device))
        if rebuilt is not None:  # a view computed in the graph: linked through to its root
            # (whose own .data it is, for the setter: its chain's base is the root, not self)
            rebuilt._data_of = weakref.ref(self)
            return rebuilt
        prim = backend.wrap(backend.inner_value(self._prim)) if backend.is_autodiff else self._prim
        return link(Tensor(prim, backend, device), self, "data")

    @data.setter
    def data(self, value: Any) -> None:
        from .inplace import assign

        share = getattr(value, "_share_storage_with", None)
        if isinstance(value, np.ndarray) and callable(share):
            # a module's state-dict value (nn's StateValue), which is a tensor in torch: there
            # p.data = state[name] makes p and the value one storage (the lottery ticket's
            # rewind of its biases from a deepcopy of state_dict(), trained in place after)
            self.data = lift(self, np.asarray(value.numpy()), "data")
            share(self)
            return
        if not isinstance(value, TensorBase):
            raise DTypeError(f"data: expected a tensor, got {type(value).__name__}")
        alias = getattr(value, "_view", None)
        data_of = value.__dict__.get("_data_of") if hasattr(value, "__dict__") else None
        if (data_of is not None and data_of() is self) or (
            alias is not None and alias[KIND] == "data" and base_of(alias) is self
        ):
            # this tensor's own .data, written in place: ``x.data += d`` ends in
            # ``x.data = <x.data after +=>``, which keeps x's storage (and its base's: a leaf
            # made from a view of JEM's replay buffer writes on to the buffer) as torch's does
            return
        if self.requires_grad and not (value.is_floating_point() or value.is_complex()):
            raise DTypeError(
                "data: data set to a tensor that requires gradients must be floating point or "
                f"complex dtype, got {value.dtype} (as torch refuses it)"
            )
        unlink(self)
        backend = self._backend
        if (
            backend.is_autodiff
            and backend.is_tracked(self._prim)
            and not backend.is_require_grad(self._prim)
            and (value.shape, value.dtype, value.device) == (self.shape, self.dtype, self.device)
        ):
            # a tensor computed in the graph stays there, as torch's does (a later use sends
            # its gradient through to what it was computed from): a write through .data
            self.data.copy_(value)
            return
        old, old_device = self._prim, self._device
        assign(self, value, "data", check_shape=False, keep_dtype=False, device=value.device)
        if (
            backend.is_autodiff
            and backend.is_tracked(old)
            and not backend.is_require_grad(old)
            and value.device == old_device
        ):
            # values of another shape or dtype: torch's y keeps its grad_fn too, a later use
            # sending its gradient back cast to the old dtype (an old shape that does not
            # expand to the new one: torch's "invalid gradient" error, at that backward)
            with enable_grad():
                self._prim = backend.data_replace(old, self._prim)
            stands_for(getattr(self._prim, "node", None), getattr(old, "node", None))
            return
        if value is self or value._backend is not backend:
            return
        computed = (
            backend.is_autodiff
            and backend.is_tracked(value._prim)
            and not backend.is_require_grad(value._prim)
        )
        if alias is None and not computed:
            # torch's p.data = x makes p and x one storage (davda54/sam restores its weights by
            # p.data = state[p]["old_p"], and the step after updates both); x a parameter too
            # (p1.data = p2: weight tying by storage), whose graph stays its own
            link(value, self, "data")
        elif (
            alias is not None
            and base_of(alias) is not None
            and (
                outside_graph(value)
                or not (backend.is_autodiff and backend.is_tracked(value._prim))
            )
        ):
            # a view outside the graph (tied weights: dec.weight.data = enc.weight.data.t()):
            # torch's p then views the same storage, so an optimizer's step on either shows in
            # both; p becomes that view of the same base, a leaf of its own
            link(self, base_of(alias), alias[KIND], alias[PARAMS])

    @property
    def is_leaf(self) -> bool:
        """torch's ``is_leaf``: not the result of a recorded op (a tensor that requires grad
        and was made by the user, or any tensor that does not require grad). A view taken
        under ``no_grad`` whose memory was later written in place refuses, as torch's
        (:func:`.views.refuse_rebased_no_grad_view`)."""
        backend = self._backend
        if not backend.is_autodiff or not backend.is_tracked(self._prim):
            return True
        refuse_rebased_no_grad_view("is_leaf", self)
        return backend.is_require_grad(self._prim)

    # -- autodiff -----------------------------------------------------------------------------
    def _autodiff(self, op: str) -> Any:
        backend = self._backend
        if not backend.is_autodiff:
            raise AutodiffError(
                f"{op}: tensors of {backend!r} do not track gradients; "
                "create them on rg.Autodiff(...) (the default backend)"
            )
        return backend

    def require_grad(self) -> Tensor:
        """Mark this leaf as requiring grad (in place, returns ``self``); error on a non-leaf.

        >>> import retrograd as rg
        >>> rg.tensor([1.0]).require_grad().is_require_grad()
        True
        """
        backend = self._float_autodiff("require_grad")
        if self._inference:
            refuse_require_grad("require_grad", self)
            self._prim = backend.inference_primitive(backend.require_grad(self._prim), True)
            return self
        self._prim = backend.require_grad(self._prim)
        return self

    def _float_autodiff(self, op: str) -> Any:
        """The autodiff backend, for ``op`` that makes this tensor require grad: a float one."""
        backend = self._autodiff(op)
        if self.dtype not in GRAD_DTYPES:
            raise DTypeError(f"{op}: only float tensors can require grad, this one is {self.dtype}")
        return backend

    def requires_grad_(self, requires_grad: bool = True) -> Tensor:
        """torch's: set :attr:`requires_grad` in place and return ``self``."""
        check_bool("requires_grad_", requires_grad, "requires_grad")
        self.requires_grad = requires_grad
        return self

    def is_require_grad(self) -> bool:
        """Whether this is a leaf that requires grad."""
        return self._backend.is_autodiff and self._backend.is_require_grad(self._prim)

    @property
    def requires_grad(self) -> bool:
        """Whether gradients flow through this tensor (leaf or tracked intermediate).

        Settable on a leaf, as in torch (``param.requires_grad = False`` freezes a
        parameter: backward computes no gradient for it and optimizers skip it); the tensor
        object stays and keeps its values. A tracked intermediate cannot stop requiring grad
        (``detach()`` it instead).

        >>> import retrograd as rg
        >>> w = rg.tensor([1.0]).require_grad()
        >>> w.requires_grad = False
        >>> w.requires_grad, w.tolist()
        (False, [1.0])
        """
        return self._backend.is_autodiff and self._backend.is_tracked(self._prim)

    @requires_grad.setter
    def requires_grad(self, requires_grad: bool) -> None:
        check_flag("requires_grad", requires_grad, "requires_grad", AutodiffError)
        if requires_grad == self.requires_grad:
            return
        if requires_grad and self._inference:
            refuse_require_grad("requires_grad_", self)
        if requires_grad:
            self.require_grad()
            stashed = self.__dict__.pop("_frozen_leaf", None)
            if stashed is not None:
                frozen, former = stashed
                for key in (frozen, *former):
                    self._backend.freeze_leaf(key, False)
                self._former_keys = tuple(key for key in former if key())
                if frozen():
                    # frozen and thawed again (dreamerv3-torch's ``RequiresGrad`` around the
                    # forward, then around the backward): torch's ``.grad`` is the one
                    # tensor's, so a graph recorded before the freeze still finds this
                    # tensor's gradient
                    keep_former_key(self, frozen)
            return
        if not self.is_require_grad():
            raise AutodiffError(
                f"requires_grad: only a leaf can stop requiring grad; this {list(self.shape)} "
                "tensor is computed from others (use t.detach() for a value outside the graph)"
            )
        frozen = self._backend.retired_leaf(self._prim)
        assign(self, self, "requires_grad_", untrack=True)
        if frozen is not None:
            # the keys of the leaves that in-place writes replaced are frozen with it: a
            # backward after the freeze gives it no gradient, as torch's engine accumulates
            # none into a leaf that does not require grad, but the gradients of backwards
            # before it are still its ``.grad`` (they come back as its own with a thaw)
            for key in (frozen, *self._former_keys):
                self._backend.freeze_leaf(key, True)
            self._frozen_leaf = (frozen, self._former_keys)
            self._former_keys = ()

    def detach(self) -> Tensor:
        """A new leaf cut from the graph, requiring grad iff this one was such a leaf (Burn's
        rule, API.md section 3). It aliases this tensor, as torch's: an in-place op on either
        is seen by the other, and is not recorded."""
        backend = self._backend
        device = self._device
        if backend.is_autodiff and not backend.is_require_grad(self._prim):
            rebuilt = detached_view(self, lambda prim: Tensor(prim, backend, device))
            if rebuilt is not None:  # a view computed in the graph: linked through to its root
                return rebuilt
        prim = backend.detach(self._prim) if backend.is_autodiff else self._prim
        return link(Tensor(prim, backend, device), self, "detach")

    def retain_grad(self) -> Tensor:
        """Keep this intermediate's gradient in the result of ``backward`` (returns ``self``)."""
        self._autodiff("retain_grad").retain_grad(self._prim)
        return self

    def backward(
        self,
        grad: Tensor | None = None,
        retain_graph: bool | None = None,
        create_graph: bool = False,
        inputs: Any = None,
        *,
        gradient: Tensor | None = None,
    ) -> Any:
        """Backpropagate from this tensor and return the :class:`~retrograd.Gradients`.

        ``grad`` (torch's keyword: ``gradient``) seeds the backward (ones of this tensor's
        shape by default). The part of the graph walked is consumed unless ``retain_graph``
        (by default, as torch's None: kept exactly when ``create_graph``);
        ``create_graph`` records the backward itself, so gradients are tracked tensors that can
        be differentiated again. ``inputs`` (torch's): the tensors whose gradients are wanted;
        the backward walks only toward them and leaves the rest of the graph unconsumed.
        """
        if gradient is not None:
            if grad is not None:
                raise DTypeError("backward: got the gradient twice (as grad and as gradient)")
            grad = gradient
        wanted = None
        if inputs is not None:
            items = [inputs] if isinstance(inputs, Tensor) else inputs
            iterable = not isinstance(items, str | bytes) and hasattr(items, "__iter__")
            wanted = list(items) if iterable else []
            if not iterable or not all(isinstance(t, Tensor) for t in wanted):
                raise DTypeError(
                    f"backward: inputs must be a tensor or a sequence of tensors, got {inputs!r}"
                )
            refuse_untracked_inputs("backward", wanted)
        # A backward called while another runs (from a Function's backward) adds its
        # gradients to the outer one's result too, as torch accumulates both into ``.grad``.
        nested = _NestedResults()
        try:
            _running_backwards.push(nested)
            result = self._backward(grad, retain_graph, create_graph, wanted)
        finally:
            _running_backwards.pop(nested)
        for inner in nested:
            if inner.backend == result.backend:  # (another backend's leaves are not these)
                result = result + inner
        outer = _running_backwards.innermost()
        if outer is not None:
            outer.append(result)
        return result

    def _backward(
        self, grad: Any, retain_graph: bool | None, create_graph: bool, wanted: list | None
    ) -> Any:
        """:meth:`backward` with ``inputs`` already a checked list (or ``None``): ``autograd.grad``
        calls it with the differentiated tensors that require grad, which may be none."""
        if retain_graph is None:  # torch's default: kept when the backward is recorded
            retain_graph = create_graph
        backend = self._autodiff("backward")
        seed = None
        if grad is None and self.dtype in COMPLEX_DTYPES:
            raise AutodiffError(
                f"backward: grad can be implicitly created only for real outputs, this one is "
                f"{self.dtype} (as torch); take .real, .abs() or a real loss of it, or pass grad"
            )
        if grad is not None:
            grad = lift(self, grad, "backward")
            refuse_mixed_complex_grad("backward", self, grad)
            if grad.shape != self.shape:
                raise ShapeError(
                    f"backward: grad has shape {shape_text(grad.shape)}, expected "
                    f"{shape_text(self.shape)}"
                )
            seed = backend.inner_value(grad.cast(self.dtype)._prim)
        if wanted is None:
            return backend.backward(self._prim, seed, retain_graph, create_graph, self._device)
        prims = [t._prim for t in wanted if t._backend is backend]
        # (a leaf an in-place write under no_grad replaced: graphs recorded before the write
        # send its gradient to the old leaf, which Tensor.grad adds in)
        retired = [old.key for t in wanted for old in t._former_keys if old()]
        return backend.backward(
            self._prim,
            seed,
            retain_graph,
            create_graph,
            self._device,
            inputs=prims,
            retired=retired,
        )

    def grad(self, grads: Any) -> Tensor | None:
        """This tensor's gradient in ``grads``, on the inner backend, or ``None``.

        As torch's ``p.grad`` is the gradient itself, an in-place write into the tensor
        returned (``p.grad(grads).data.clamp_(-c, c)``, ``.mul_(s)``, ``[mask] = 0``, through
        its views too) writes the new value into ``grads``, where an optimizer step then reads
        it."""
        backend = self._autodiff("grad")
        value = backend.grad(self._prim, _gradients("grad", grads))
        key = backend.grad_key(self._prim)
        former_keys = self._gradient_keys(key)
        if former_keys:
            key, value = self._merged_grad(grads, key, value, former_keys)
        if value is None:
            return None
        out = Tensor(value, grads.backend, self._device)
        # read by views.write at the root; the key, not the leaf: holding the parameter's
        # value would stop an optimizer step from updating it in place (sole_reference)
        out._grad_sink = (grads, key)
        return out

    grad = _GradMethod(grad)

    def _gradient_keys(self, key: Any) -> tuple:
        """The retired leaves (``RetiredLeaf``) whose gradients are also this tensor's: those
        in-place writes replaced, and, where ``requires_grad_(False)`` froze it (no ``key``
        of its own), the frozen leaf first: torch's ``.grad`` keeps what backwards before the
        freeze gave it (those after it give the frozen leaf none: the engine's
        ``FROZEN_LEAVES``)."""
        frozen = self.__dict__.get("_frozen_leaf")
        if frozen is not None and key is None:
            return (frozen[0], *frozen[1])
        return self._former_keys

    def _merged_grad(self, grads: Any, key: Any, value: Any, former_keys: tuple) -> tuple[Any, Any]:
        """``(key, gradient)`` of a leaf that in-place writes (under no_grad, or through
        ``.data``) made a fresh leaf: a graph recorded before a write sent its gradient to the
        old leaf, torch's to the one tensor. The gradients under this tensor's former keys are
        added into one entry of ``grads`` (under the newest key found), so that what one
        reads, replaces or removes is the tensor's whole gradient."""
        found = [] if value is None else [key]
        total = value
        for former in former_keys:
            part = grads.get(former.key)
            if part is not None:
                total = part if total is None else grads.backend.add(total, part)
                found.append(former.key)
        if len(found) > 1:
            for k in found[1:]:
                grads.remove(k)
            grads.replace(found[0], total)
        return (found[0] if found else key), total

    def grad_remove(self, grads: Any) -> Tensor | None:
        """Remove this tensor's gradient from ``grads`` and return it."""
        backend = self._autodiff("grad_remove")
        _gradients("grad_remove", grads)
        if self._former_keys or "_frozen_leaf" in self.__dict__:
            merged = self.grad(grads)  # (the whole gradient, merged under one key by grad)
            if merged is None:
                return None
            grads.remove(merged._grad_sink[1])
            return Tensor(merged._prim, grads.backend, self._device)
        value = backend.grad_remove(self._prim, grads)
        return None if value is None else Tensor(value, grads.backend, self._device)

    def grad_replace(self, grads: Any, grad: Tensor) -> None:
        """Set this tensor's gradient in ``grads`` to ``grad``."""
        backend = self._autodiff("grad_replace")
        _gradients("grad_replace", grads)
        if not isinstance(grad, Tensor):
            raise DTypeError(f"grad_replace: grad must be a tensor, got {type(grad).__name__}")
        if grad.shape != self.shape:
            raise ShapeError(
                f"grad_replace: grad has shape {shape_text(grad.shape)}, expected "
                f"{shape_text(self.shape)}"
            )
        value = grad._prim
        if grad._backend is not grads.backend:
            value = on_backend(grad, grads.backend, "grad_replace")._prim
        key = backend.grad_key(self._prim)
        former_keys = self._gradient_keys(key)
        if key is None and "_frozen_leaf" in self.__dict__:
            # a frozen leaf's gradient (torch's .grad it keeps): under its key before the
            # freeze, as a step over a frozen parameter with its kept gradient writes it back
            grads.replace(former_keys[0].key, value)
            former_keys = former_keys[1:]
        else:
            backend.grad_replace(self._prim, grads, value)
        for former in former_keys:  # the new gradient is the tensor's whole one
            if former.key in grads:
                grads.remove(former.key)

    def inner(self, other: Any = None) -> Tensor:
        """The same values on the inner backend, without graph; with ``other``, torch's
        ``x.inner(other)`` (the sum of products over the last dimension of both, recorded as
        any op: :func:`retrograd.inner`)."""
        if other is not None:
            return self._inner_product(other)
        backend = self._autodiff("inner")
        return Tensor(backend.inner_value(self._prim), backend.inner, self._device)

    def _inner_product(self, other: Any) -> Tensor:
        """torch's ``inner``: a product for a 0-d operand, else the sum over the last
        dimension of both (``[..a, k]`` and ``[..b, k]`` give ``[..a, ..b]``), as one matmul."""
        a, other = joined(self, other, "inner")  # (a gradient with a tracked tensor: recorded)
        if a is not self:
            return a._inner_product(other)
        if self.ndim == 0 or other.ndim == 0:
            return self * other
        size = self.shape[-1]
        if other.shape[-1] != size:
            raise ShapeError(
                f"inner: the last dimension must match on both input tensors but got shapes "
                f"{shape_text(self.shape)} and {shape_text(other.shape)}"
            )
        product = self.reshape((-1, size)).matmul(other.reshape((-1, size)).mT)
        return product.reshape(self.shape[:-1] + other.shape[:-1])

    @staticmethod
    def from_inner(inner_tensor: Tensor, backend: Any = None) -> Tensor:
        """An untracked tensor of the autodiff ``backend`` holding ``inner_tensor``'s values."""
        if not isinstance(inner_tensor, TensorBase):
            raise DTypeError(
                f"from_inner: expected a tensor of the inner backend, got "
                f"{type(inner_tensor).__name__}"
            )
        backend = backend if backend is not None else current_backend()
        if not getattr(backend, "is_autodiff", False):
            raise AutodiffError(f"from_inner: {backend!r} is not an autodiff backend")
        if inner_tensor._backend != backend.inner:  # wrapped, its primitive would not fit
            raise RetrogradError(
                f"from_inner: the tensor ({shape_text(inner_tensor.shape)} "
                f"{inner_tensor.dtype}) is one of {inner_tensor._backend!r}, not of "
                f"{backend!r}'s inner backend {backend.inner!r}"
            )
        return Tensor(backend.wrap(inner_tensor._prim), backend, inner_tensor._device)

    def set_distributed(self, param_id: Any) -> Tensor:
        """Mark this parameter's gradient for all-reduce during backward (returns ``self``)."""
        backend = self._float_autodiff("set_distributed")
        self._prim = backend.set_distributed(self._prim, param_id)
        return self

    def is_distributed(self) -> bool:
        return self._backend.is_autodiff and self._backend.param_id(self._prim) is not None


def _sized(op: str, args: tuple, size: Any) -> tuple:
    """The size of a ``new_*`` method: varargs, one sequence, or torch's ``size=``."""
    return by_keyword(op, args, "size", size)


def _gradients(op: str, grads: Any) -> Any:
    """``grads`` checked to be what ``backward()`` returns (an ``rg.Gradients``: known by its
    ``get`` and ``backend``, so that this module needs no import of the autodiff engine)."""
    if not (callable(getattr(grads, "get", None)) and hasattr(grads, "backend")):
        raise DTypeError(
            f"{op}: expected the gradients backward() returned (grads = loss.backward()), "
            f"got {type(grads).__name__}"
        )
    return grads


def _is_dtype(value: Any) -> bool:
    """Whether a positional argument of ``to`` names a dtype rather than a device."""
    if isinstance(value, str):
        name = value.removeprefix("torch.").removeprefix("retrograd.")
        return name in DTYPE_OBJECTS or name in ("float", "double", "long", "half", "int")
    return isinstance(value, type | np.dtype) or type(value).__name__ == "dtype"


def _device(value: Any) -> Device:
    """A device argument (``"cpu"``, ``"cuda:1"``, ``rg.device(...)``, a torch device)."""
    if isinstance(value, Device):
        return value
    if isinstance(value, str):
        return Device(value)
    kind, index = getattr(value, "type", None), getattr(value, "index", None)
    if isinstance(kind, str):  # a torch.device
        return Device(kind, index)
    raise DTypeError(f"expected a device, got {value!r}")


#: Methods left unguarded (:func:`~retrograd.errors.guard`): the hottest ones, whose arguments
#: are checked where they are used (a guard is a Python call more per op), and those that run
#: user code (hooks during ``backward``), whose own exceptions must pass unchanged.
_UNGUARDED = frozenset(
    [
        "add",
        "sub",
        "mul",
        "div",
        "matmul",
        "neg",
        "exp",
        "log",
        "tanh",
        "sigmoid",
        "relu",
        "sqrt",
        "pow",
        "square",
        "abs",
        "numpy",
        "item",
        "tolist",
        "detach",
        "grad",
        "grad_remove",
        "grad_replace",
        "require_grad",
        "requires_grad_",
        "is_require_grad",
        "inner",
        "cast",
        "float",
        "double",
        "size",
        "dim",
        "backward",
        "register_hook",
        "from_inner",
    ]
)


#: what links a view and its base (:mod:`.views`), and the gradient keys of this tensor's
#: former leaves (an in-place write's, a freeze's), and its storage's address and output number
#: (:mod:`.storage`): never copied or pickled (a copy is a leaf of its own, whose gradients are
#: not its source's, in a storage of its own)
#: the attribute :meth:`Tensor.share_memory_` sets (a copy or an unpickled tensor is not
#: shared, as torch's are not)
_SHARED_MARK = "_shared_memory_requested"
_VIEW_ATTRIBUTES = frozenset(
    {"_view", "_views", "_weak_base", "_former_keys", "_frozen_leaf", "_storage_address",
     "_output_nr", "_no_grad_view", "_multi_output_view", "_data_of", _SHARED_MARK,
     "_retains_grad_after_detach"}
)  # fmt: skip


def _reduce_for_another_process(tensor: Tensor) -> tuple:
    """How ``multiprocessing`` sends a tensor to another process (its ``ForkingPickler``):
    as a copy, as pickling gives, unless :meth:`Tensor.share_memory_` marked it, where the
    copy would silently part from the tensor the sender meant to share."""
    if tensor.is_shared():
        no_shared_memory(
            f"sending a shared tensor of shape {shape_text(tensor.shape)} to another process"
        )
    return tensor.__reduce_ex__(2)  # (our reduction reads no protocol)


def reduce_for_another_process_of(cls: type) -> None:
    """Make ``multiprocessing`` send tensors of class ``cls`` (exactly: its pickler looks a
    class up) as :func:`_reduce_for_another_process` says."""
    ForkingPickler.register(cls, _reduce_for_another_process)


def _fresh_leaf(cls: type, backend: Any, device: Device, value: Any, requires_grad: bool) -> Any:
    """A new leaf of class ``cls`` on ``backend`` holding the inner value ``value``, made as
    unpickling makes an object (no ``__init__``: a ``Parameter``'s would check its input)."""
    primitive = backend.wrap(value) if backend.is_autodiff else value
    if requires_grad:
        primitive = backend.require_grad(primitive)
    leaf = _new(cls)
    TensorBase.__init__(leaf, primitive, backend, device)
    return leaf


def _copy_attributes(tensor: Tensor, attributes: dict, memo: dict) -> None:
    import copy

    for name, value in attributes.items():
        if name not in _VIEW_ATTRIBUTES:
            tensor.__dict__[name] = copy.deepcopy(value, memo)


def _unpickled(cls: type, backend: Any, device: Device, value: Any, requires_grad: bool,
               attributes: dict) -> Any:  # fmt: skip
    """A pickled tensor, made again. On the current backend where it equals the pickled one
    (a tensor sent to a worker, or pickled and read back in one process, joins the backend
    running there, not a second instance of it with a checkpointer of its own)."""
    current = current_backend()
    if current is not backend and current == backend:
        backend = current
    leaf = _fresh_leaf(cls, backend, device, value, requires_grad)
    leaf.__dict__.update(attributes)
    return leaf


def _guard_methods(cls: type) -> None:
    """Guard every public method of ``cls`` (its mixins' too) but :data:`_UNGUARDED`."""
    import inspect

    for name in dir(cls):
        if name.startswith("_") or name in _UNGUARDED:
            continue
        value = inspect.getattr_static(cls, name)
        if type(value).__name__ == "function":
            setattr(cls, name, guard(name, value, cls, f"{cls.__qualname__}.{name}"))


_guard_methods(Tensor)
APPLY_CLASSES.append(Tensor)  # (its ``_apply`` rebound while inference blocks are open)
_TensorType.admits_sparse = Tensor


reduce_for_another_process_of(Tensor)
