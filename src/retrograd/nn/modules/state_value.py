"""What :meth:`Module.state_dict` holds: NumPy copies that answer torch's tensor idioms.

Real training code handles the values of a state dict as tensors: it copies the best model
(``{k: v.cpu().clone() for k, v in model.state_dict().items()}``), casts (``v.float()``,
``v.to(device)``), counts (``v.numel()``), and a timm-style EMA writes into another model
through them (``ema_v.copy_(decay * ema_v + (1 - decay) * model_v)``), since in torch a state
dict's tensors share the module's storage. A :class:`StateValue` is still a NumPy array (so
``np.savez``, ``torch.from_numpy`` and NumPy arithmetic take it) that has those methods; its
in-place writes reach the parameter or buffer it was copied from, and its reads see that
tensor's values of now (a value kept across optimizer steps, as MixMatch's ``WeightEMA`` keeps
them, is not a stale snapshot).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...errors import DTypeError, ShapeError
from ...tensor import Tensor, tensor
from ...tensor._dispatch import normalize_dim
from ...tensor.core import _is_dtype
from ...tensor.dtypes import Size, canonical_dtype
from ...tensor.inplace import assign

__all__ = ["StateDType", "StateValue"]

#: NumPy's dtype class -> the :class:`StateDType` subclass carrying its class attributes
_STATE_DTYPE_CLASSES: dict[type, type] = {}


class StateDType:
    """A state value's ``dtype``: NumPy's (it compares, hashes, prints and converts as NumPy's
    does, ``np.dtype(d)`` is NumPy's own) that also has torch's ``is_floating_point``,
    ``is_complex`` and ``is_signed``, which training code reads from state-dict values
    (YOLOv5's ``ModelEMA``: ``if v.dtype.is_floating_point: v *= d``). NumPy's dtypes cannot
    be subclassed; each NumPy dtype class gets a subclass of this one carrying its class
    attributes (``type(x.dtype)._is_numeric``, as ``np.testing`` reads it)."""

    __slots__ = ("dtype",)

    def __new__(cls, numpy_dtype: np.dtype) -> StateDType:
        kind = type(numpy_dtype)
        proxy_class = _STATE_DTYPE_CLASSES.get(kind)
        if proxy_class is None:
            carried = {
                name: getattr(kind, name)
                for name in ("_is_numeric", "_legacy", "_abstract", "_parametric", "type")
                if hasattr(kind, name)
            }
            proxy_class = type(f"State{kind.__name__}", (StateDType,), {"__slots__": (), **carried})
            _STATE_DTYPE_CLASSES[kind] = proxy_class
        proxy = object.__new__(proxy_class)
        object.__setattr__(proxy, "dtype", numpy_dtype)
        return proxy

    def __getattr__(self, name: str) -> Any:
        return getattr(self.dtype, name)

    def __eq__(self, other: Any) -> bool:
        return self.dtype == (other.dtype if isinstance(other, StateDType) else other)

    def __ne__(self, other: Any) -> bool:
        return not self == other

    def __hash__(self) -> int:
        return hash(self.dtype)

    def __repr__(self) -> str:
        return repr(self.dtype)

    def __str__(self) -> str:
        return str(self.dtype)

    def __reduce__(self) -> Any:  # pickled as NumPy's dtype
        return (np.dtype, (self.dtype.str,))

    @property
    def is_floating_point(self) -> bool:
        return self.dtype.kind == "f"

    @property
    def is_complex(self) -> bool:
        return self.dtype.kind == "c"

    @property
    def is_signed(self) -> bool:
        return self.dtype.kind not in "bu"


class ElementCount(int):
    """A state value's ``size``: NumPy's element count (NumPy code reads it as a number) that,
    called, answers torch's ``size()`` (the shape) and ``size(d)``, as the saving-and-loading
    recipes print a state dict: ``model.state_dict()[name].size()``."""

    def __new__(cls, shape: tuple[int, ...]) -> ElementCount:
        count = super().__new__(cls, int(np.prod(shape, dtype=np.int64)))
        count.shape = shape
        return count

    def __call__(self, dim: int | None = None) -> Any:
        shape = self.shape
        return Size(shape) if dim is None else shape[normalize_dim("size", dim, len(shape))]


class StateValue(np.ndarray):
    """A copy of a module's parameter or buffer, taken by ``state_dict()``; see the module
    docstring. Arrays computed from it (arithmetic, slices) write nowhere else. ``size``
    stays NumPy's element count (NumPy code reads it), which called is torch's shape
    (:class:`ElementCount`).

    >>> import retrograd as rg
    >>> layer = rg.nn.Linear(2, 1)
    >>> value = layer.state_dict()["bias"]
    >>> value.clone().shape, value.numel(), value.dim()
    ((1,), 1, 1)
    >>> _ = value.copy_(np.array([3.0]))
    >>> layer.bias.tolist()
    [3.0]
    """

    _source: Tensor | None

    def __new__(cls, array: np.ndarray, source: Tensor | None = None) -> StateValue:
        value = np.array(array, copy=True).view(cls)
        value._source = source
        return value

    def __array_finalize__(self, obj: Any) -> None:
        self._source = None  # derived arrays (views, results) write nowhere else

    @property
    def dtype(self) -> StateDType:  # type: ignore[override]
        """NumPy's dtype with torch's ``is_floating_point``/``is_complex``/``is_signed``
        (:class:`StateDType`)."""
        return StateDType(np.ndarray.dtype.__get__(self))

    @dtype.setter
    def dtype(self, value: Any) -> None:
        np.ndarray.dtype.__set__(self, value)

    def __repr__(self) -> str:
        # NumPy prints a dtype whose class is not its own in full (``dtype=dtype('float32')``)
        self._refresh()
        return repr(self.view(_PrintedStateValue))

    def __reduce__(self) -> Any:  # pickled (copy.deepcopy, torch.save) as a plain array
        self._refresh()
        return np.array(self).__reduce__()

    # -- reads see the module's tensor as it is now ----------------------------------------------
    def _refresh(self) -> None:
        """This value's numbers read again from the parameter or buffer it was copied from.
        torch's state-dict tensors share the module's storage, so code that keeps them across
        optimizer steps (MixMatch's ``WeightEMA`` holds ``list(model.state_dict().values())``
        and updates through them every step) reads the values of now, not those of when
        ``state_dict()`` was called."""
        source = self._source
        if source is None:
            return
        current = np.asarray(source.numpy())
        if current.shape == self.shape:
            np.copyto(self.view(np.ndarray), current, casting="unsafe")

    def __array_ufunc__(self, ufunc: Any, method: str, *inputs: Any, **kwargs: Any) -> Any:
        """NumPy's arithmetic on the current values (see :meth:`_refresh`); one written in
        place (``v += 1``, ``np.multiply(v, 2, out=v)``) reaches the module, as torch's does."""
        outs = kwargs.get("out", ())
        for operand in (*inputs, *outs):
            if isinstance(operand, StateValue):
                operand._refresh()
        plain = [x.view(np.ndarray) if isinstance(x, StateValue) else x for x in inputs]
        if outs:
            kwargs["out"] = tuple(
                o.view(np.ndarray) if isinstance(o, StateValue) else o for o in outs
            )
        result = getattr(ufunc, method)(*plain, **kwargs)
        for target in outs:
            if isinstance(target, StateValue):
                target._sync(ufunc.__name__)
        if outs:
            return outs[0] if len(outs) == 1 else outs
        if isinstance(result, tuple):
            return tuple(_derived(r) for r in result)
        return _derived(result)

    def __getitem__(self, key: Any) -> Any:
        self._refresh()
        return super().__getitem__(key)

    def tolist(self) -> Any:
        self._refresh()
        return super().tolist()

    def item(self, *args: Any) -> Any:
        self._refresh()
        return super().item(*args)

    @property
    def data(self) -> StateValue:  # type: ignore[override]
        """torch's ``.data``: the same storage (MixMatch's ``param.data.copy_(ema_param.data)``
        writes the module's parameter), where NumPy's is a ``memoryview``."""
        return self

    # -- torch's read-only idioms ----------------------------------------------------------------
    def clone(self, *, memory_format: Any = None) -> StateValue:
        """A copy that writes nowhere (``v.cpu().clone()`` keeps a best model's weights) and
        answers the tensor idioms, as torch's clone does."""
        self._refresh()
        return np.array(self, copy=True).view(StateValue)

    def detach(self) -> StateValue:
        return self

    def cpu(self) -> StateValue:
        return self

    def contiguous(self, memory_format: Any = None) -> StateValue:
        return self

    def _share_storage_with(self, tensor: Tensor) -> None:
        """Read and write ``tensor`` from now on: ``p.data = value`` made them one storage, as
        torch's assignment of a state-dict tensor does (the tensor's later in-place updates
        show here, and in-place writes here go to the tensor)."""
        self._source = tensor

    def numpy(self, *, force: bool = False) -> np.ndarray:
        self._refresh()
        return self.view(np.ndarray)

    def _saved_as_tensor(self) -> Tensor:
        """What ``rg.save`` stores for this value: a tensor of its values and dtype, so that a
        saved state dict loads back as tensors, as torch's does."""
        self._refresh()
        source = self._source
        # a bfloat16 parameter's values are held widened (NumPy has no bfloat16): saved in its
        # own dtype, as torch saves it, not as float32
        kept = source is not None and str(source.dtype) == "bfloat16" and self.dtype == np.float32
        # (NumPy's dtype, named by tensor() from a table: str(self.dtype) built a string that
        # NumPy kept some of, numpy_dtype_name)
        own = np.ndarray.dtype.__get__(self)
        return tensor(np.array(self, copy=True), dtype="bfloat16" if kept else own)

    def __retrograd_tensor__(self) -> Tensor:
        """The tensor this value stands for where a tensor is due (``torch.cat`` of state-dict
        entries): a copy of its current values in its dtype."""
        return self._saved_as_tensor()

    @property
    def size(self) -> ElementCount:  # type: ignore[override]
        return ElementCount(self.shape)

    def numel(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    def dim(self) -> int:
        return self.ndim

    def std(self, *args: Any, **kwargs: Any) -> Any:
        """torch's ``std`` (Bessel's correction unless told otherwise: ``v.std()`` of a
        weight, as CBAM's tests print it); NumPy's call (``np.std(v)``, which passes ``ddof``)
        keeps NumPy's."""
        return self._spread("std", args, kwargs)

    def var(self, *args: Any, **kwargs: Any) -> Any:
        """torch's ``var``; NumPy's call keeps NumPy's (see :meth:`std`)."""
        return self._spread("var", args, kwargs)

    def _spread(self, op: str, args: tuple, kwargs: dict) -> Any:
        if {"axis", "ddof", "dtype", "out"} & kwargs.keys():
            return getattr(np.ndarray, op)(self, *args, **kwargs)
        self._refresh()
        return getattr(tensor(self.view(np.ndarray)), op)(*args, **kwargs)

    def is_floating_point(self) -> bool:
        return self.dtype.kind == "f"

    def to(self, *args: Any, **kwargs: Any) -> StateValue:
        """A device changes nothing (host copies); a dtype (``rg``'s, torch's, NumPy's, a
        name) casts."""
        dtype = kwargs.get("dtype")
        for arg in args:
            if _is_dtype(arg):
                dtype = arg
        if dtype is None:
            return self
        return self._cast(np.dtype(canonical_dtype("to", dtype)))

    def float(self) -> StateValue:
        return self._cast(np.float32)

    def double(self) -> StateValue:
        return self._cast(np.float64)

    def half(self) -> StateValue:
        return self._cast(np.float16)

    def long(self) -> StateValue:
        return self._cast(np.int64)

    def _cast(self, dtype: Any) -> StateValue:
        """torch's cast: this value itself when it has ``dtype`` already (its writes reach the
        module, as torch's same tensor's do), else a copy that writes nowhere but still answers
        the tensor idioms (``v.float().numpy()``, ``.numel()``), as torch's new tensor does."""
        if self.dtype == dtype:
            return self
        self._refresh()
        return self.astype(dtype)

    def __getattr__(self, name: str) -> Any:
        """A tensor method NumPy's array lacks (``(a - b).abs().max()``, ``v.norm()``,
        ``v.clamp_(-1, 1)``, as code that compares or edits two models' state dicts writes):
        the tensor's, on this value's current numbers; an in-place one (``abs_``) writes its
        result here, and so into the module, as torch's state-dict tensor (the module's
        storage) does. Until 6 December only the methods defined here answered, and the rest
        raised ``AttributeError`` (a round-69 port found ``rg.equal`` and the norms; a copy
        made per call is the price of a value that stays a NumPy array)."""
        method = None if name.startswith("_") else getattr(Tensor, name, None)
        if method is None:
            raise AttributeError(f"'StateValue' object has no attribute {name!r}")
        if name.endswith("_") and callable(method):

            def in_place(*args: Any, **kwargs: Any) -> StateValue:
                written = self._saved_as_tensor()
                getattr(written, name)(*args, **kwargs)
                return self._write(name, written.numpy())

            in_place.__name__ = in_place.__qualname__ = name
            return in_place
        return getattr(self._saved_as_tensor(), name)

    # -- in-place writes, which reach the module's tensor ----------------------------------------
    def copy_(self, src: Any, non_blocking: bool = False) -> StateValue:
        source = np.asarray(_host(src))
        try:
            source = np.broadcast_to(source, self.shape)
        except ValueError:
            raise ShapeError(
                f"copy_: the source of shape {list(source.shape)} does not broadcast to the "
                f"state value's {list(self.shape)}"
            ) from None
        return self._write("copy_", source)

    def mul_(self, other: Any) -> StateValue:
        return self._write("mul_", self * _host(other))

    def add_(self, other: Any, *, alpha: Any = 1) -> StateValue:
        return self._write("add_", self + _host(other) * alpha)

    def sub_(self, other: Any, *, alpha: Any = 1) -> StateValue:
        return self._write("sub_", self - _host(other) * alpha)

    def div_(self, other: Any) -> StateValue:
        return self._write("div_", self / _host(other))

    def lerp_(self, end: Any, weight: Any) -> StateValue:
        # the tensor op's rounding, which is torch's (its formula changes at weight 0.5): an
        # EMA kept through state-dict values (timm's ModelEmaV3) gives torch's bits
        self._refresh()
        end, weight = _host(end), _host(weight)
        start = tensor(np.array(self, copy=True))
        weight = weight if isinstance(weight, int | float) else tensor(np.asarray(weight))
        return self._write("lerp_", start.lerp(tensor(np.asarray(end)), weight).numpy())

    def zero_(self) -> StateValue:
        return self._write("zero_", np.zeros_like(self))

    def fill_(self, value: Any) -> StateValue:
        value = np.asarray(_host(value))
        if value.ndim or value.dtype.kind not in "biuf":
            raise DTypeError(f"fill_: expected a number, got {value!r}")
        return self._write("fill_", np.full(self.shape, value, dtype=self.dtype))

    def __setitem__(self, key: Any, value: Any) -> None:
        """NumPy's item assignment (``state_dict()[key][...] = 0``, as CBAM's ResNet
        initializes its batch norms), reaching the module's tensor as torch's does."""
        value = np.asarray(_host(value))
        if value.dtype.kind not in "biuf":
            raise DTypeError(f"__setitem__: expected numbers, got {value.dtype} values")
        self._refresh()  # the entries not written keep the module's current values
        super().__setitem__(_host_index(key), value)
        self._sync("__setitem__")

    def _write(self, op: str, new: Any) -> StateValue:
        new = np.asarray(new)
        if new.shape != self.shape:
            raise ShapeError(
                f"{op}: the result has shape {list(new.shape)}, the state value {list(self.shape)}"
            )
        if new.dtype.kind not in "biuf":
            raise DTypeError(f"{op}: expected numbers, got {new.dtype} values")
        np.copyto(self, new, casting="unsafe")
        self._sync(op)
        return self

    def _sync(self, op: str) -> None:
        """This value's numbers written into the parameter or buffer it was copied from."""
        source = self._source
        if source is not None:
            value = tensor(np.array(self, copy=True), backend=source.backend, device=source.device)
            assign(source, value, f"state_dict {op}")


def _reading_current_values(name: str) -> Any:
    """NumPy's method ``name`` on the values the module's tensor holds now (see
    :meth:`StateValue._refresh`)."""
    numpy_method = getattr(np.ndarray, name)

    def read(self: StateValue, *args: Any, **kwargs: Any) -> Any:
        self._refresh()
        return numpy_method(self, *args, **kwargs)

    read.__name__ = read.__qualname__ = name
    read.__doc__ = f"NumPy's ``{name}`` of the module's current values."
    return read


#: NumPy's methods that read a state value's numbers without going through a ufunc or an index
#: (``v.sum()``, ``v.copy()``, ``v.astype(...)``, ``float(v)``, ``list(v)``, ``print(v)``): each
#: reads the module's tensor again first, so a value kept across optimizer steps answers with the
#: current numbers, as torch's state-dict tensor (the module's storage) does.
_READS = (
    "all", "any", "argmax", "argmin", "astype", "clip", "copy", "cumprod", "cumsum", "dot",
    "flatten", "max", "mean", "min", "nonzero", "prod", "ravel", "reshape", "round", "squeeze",
    "sum", "tobytes", "transpose", "__bool__", "__complex__", "__float__", "__format__",
    "__index__", "__int__", "__iter__", "__str__",
)  # fmt: skip
for _name in _READS:
    setattr(StateValue, _name, _reading_current_values(_name))
del _name


class _PrintedStateValue(np.ndarray):
    """A state value as NumPy prints it (``StateValue([1., 2.], dtype=float32)``)."""


_PrintedStateValue.__name__ = _PrintedStateValue.__qualname__ = "StateValue"


def host_array(value: Any) -> np.ndarray:
    """A state-dict entry (array, retrograd tensor, PyTorch tensor) as a NumPy array."""
    if isinstance(value, StateValue):
        value._refresh()
    if isinstance(value, np.ndarray | Tensor):
        return np.asarray(value)
    detach = getattr(value, "detach", None)  # a PyTorch tensor, possibly on a GPU
    if callable(detach):
        host = detach().cpu()
        if str(getattr(host, "dtype", "")) == "torch.bfloat16":  # NumPy has none: widened
            host = host.float()  # (exactly), then cast as any state value is
        return np.asarray(host.numpy())
    return np.asarray(value)


def _derived(result: Any) -> Any:
    """A NumPy result computed from state values: a :class:`StateValue` that writes nowhere
    (it still answers the tensor idioms; a reduction is 0-d, as NumPy makes a subclass's)."""
    if isinstance(result, np.ndarray | np.generic):
        return np.asarray(result).view(StateValue)
    return result


def _host_index(key: Any) -> Any:
    """An index of :meth:`StateValue.__setitem__` with its tensors (masks, index lists) as
    NumPy arrays."""
    if isinstance(key, tuple):
        return tuple(_host_index(k) for k in key)
    return host_array(key) if isinstance(key, Tensor) or hasattr(key, "detach") else key


def _host(value: Any) -> Any:
    """An operand of an in-place write: a Python number as it is (NumPy keeps the array's
    dtype), anything else as :func:`host_array`."""
    return value if isinstance(value, int | float | bool) else host_array(value)
