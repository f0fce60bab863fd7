"""The error hierarchy of API.md section 7.

Every error raised on bad input derives from :class:`RetrogradError` and also from the built-in
exception a Python user would catch for it (``ValueError`` for shapes, ``TypeError`` for dtypes,
``IndexError`` for indices, ``RuntimeError`` for graph and communication failures).
"""

from __future__ import annotations

import functools
import inspect
import os
import sys
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from .effects import DRAWS, WRITES

__all__ = [
    "ArgumentConflictError",
    "ArgumentTypeError",
    "AssertedDTypeError",
    "AssertedShapeError",
    "AutodiffError",
    "DTypeError",
    "DamagedFileError",
    "DerivativeNotImplementedError",
    "DeviceUnavailableError",
    "DistributedError",
    "DivisionByZeroError",
    "EmptyReductionError",
    "GradientDTypeError",
    "IndexDTypeError",
    "IndexOutOfRangeError",
    "InnerOperandError",
    "InvalidMaxIndexError",
    "InvalidValueError",
    "KernelArgumentError",
    "KernelDTypeError",
    "KernelIndexError",
    "KeyMismatchError",
    "LinAlgError",
    "MemoryLayoutError",
    "MissingMemberError",
    "MixedDTypeError",
    "NonFiniteError",
    "OptimizerGroupsError",
    "OutOfMemoryError",
    "PaddingIndexError",
    "PartialOverlapError",
    "RecurrentDTypeError",
    "ResultCastError",
    "RetrogradError",
    "SamplingError",
    "ScalerOrderError",
    "ShapeError",
    "SizeMismatchError",
    "StateValueTypeError",
    "UninitializedError",
    "UnsupportedDTypeError",
    "UnsupportedModeError",
    "guard",
    "guard_namespace",
    "reported",
    "translate",
    "warn_at_caller",
]


class RetrogradError(Exception):
    """Base class of every error retrograd raises on purpose."""


class ShapeError(RetrogradError, ValueError):
    """Shapes or dimensions that do not fit the operation."""


class SizeMismatchError(ShapeError, RuntimeError):
    """A state dict value whose shape is not the module's (``load_state_dict``), or samples of
    one batch whose sizes differ (``default_collate``): a :class:`ShapeError` of the hierarchy
    and the ``RuntimeError`` torch raises there, which ``try: load_state_dict(...) except
    RuntimeError:`` fallbacks catch. Also the sizes an op's kernel refuses where torch's
    raises its ``RuntimeError`` (a loss's targets, a pooling window or convolution kernel
    larger than the padded input, a pad wider than the dimension it reflects), operands that
    do not broadcast together, an in-place or ``out=`` result whose broadcast shape is not the
    target's."""


class EmptyReductionError(ShapeError, IndexError, RuntimeError):
    """A reduction with no identity over an empty dimension or tensor (``amin``,
    ``aminmax``, ``nanmedian``): a :class:`ShapeError` of the hierarchy, the ``IndexError``
    torch raises for a dimension ("Expected reduction dim 0 to have non-zero size") and the
    ``RuntimeError`` it raises for a whole empty tensor."""


class MemoryLayoutError(ShapeError, RuntimeError):
    """What torch refuses for how a tensor lies in memory: a ``view`` whose sizes its
    strides cannot give (after a transpose), a write into elements that share memory (an
    expanded tensor). A :class:`ShapeError` of the hierarchy and the ``RuntimeError`` torch
    raises there, which ``try: x.view(s) except RuntimeError: x.reshape(s)`` fallbacks
    catch."""


class InvalidArgumentError(RetrogradError, ValueError):
    """An argument value the operation does not accept (an unknown mode, a negative size)."""


class UnsupportedModeError(ShapeError, InvalidArgumentError, NotImplementedError):
    """A mode torch has no kernel for, where it raises ``NotImplementedError``: an unknown
    mode (``interpolate(mode="cubic")``, ``pad(mode="wrap")``) or an input of a rank the mode
    does not take (``interpolate(mode="bilinear")`` of a 3-d input, ``pad`` in reflect mode
    of a 6-d one, ``affine_grid`` of a 3-d size)."""


class ArgumentConflictError(InvalidArgumentError, RuntimeError):
    """Options an op refuses together, or one without the other, where torch raises its
    ``RuntimeError``: multi-head attention's ``is_causal`` hint without an ``attn_mask``."""


class InvalidValueError(InvalidArgumentError, RuntimeError):
    """An argument value outside what an op's kernel takes where torch's raises its
    ``RuntimeError`` (``cdist``'s negative ``p``, ``vander``'s negative ``N``, ``diff``'s
    negative ``n``, ``histc``'s ``max`` below ``min``, ``bincount``'s negative input): an
    :class:`InvalidArgumentError` of the hierarchy and torch's class."""


class PartialOverlapError(InvalidArgumentError, RuntimeError):
    """An in-place or ``out=`` write whose input shares part of the memory written
    (``x[1:] += x[:-1]``, ``torch.mul(x, 2, out=x.t())``): an :class:`InvalidArgumentError` of
    the hierarchy and the ``RuntimeError`` torch raises there."""


class DivisionByZeroError(InvalidArgumentError, ZeroDivisionError):
    """A computation that divides by a zero argument where torch's raises Python's
    ``ZeroDivisionError`` (``StepLR(step_size=0)`` at its first step): the hierarchy's
    class, which ``except ZeroDivisionError`` catches as well."""


class KeyMismatchError(InvalidArgumentError, KeyError, RuntimeError):
    """Names that do not match (a state dict's keys against a module's under strict
    loading): an :class:`InvalidArgumentError` of the hierarchy, the ``KeyError`` it was
    before, and the ``RuntimeError`` torch raises there, so each ``except`` catches it."""

    def __str__(self) -> str:  # KeyError's own quotes the message
        return str(self.args[0]) if self.args else ""


class MissingMemberError(KeyMismatchError, AttributeError):
    """A dotted name a module does not have (``get_parameter``, ``get_buffer``) or a key a
    ``ParameterDict`` does not hold: the :class:`KeyMismatchError` retrograd raised before and
    the ``AttributeError`` torch raises there (its lookups are attribute lookups)."""


class DamagedFileError(InvalidArgumentError, OSError):
    """A file whose bytes are not what its format says (a truncated PNG, an image of garbage):
    the :class:`InvalidArgumentError` of the hierarchy, naming the file, and the ``OSError``
    PIL raises there, which the ``except OSError:`` of a loop that skips unreadable images
    (an ``ImageFolder`` of scraped files) catches."""


class LinAlgError(InvalidArgumentError, RuntimeError):
    """A matrix that a factorization or an inverse cannot take (singular, not
    positive-definite): the :class:`InvalidArgumentError` retrograd raised before, and torch's
    ``torch.linalg.LinAlgError`` (a ``RuntimeError``; here also ``rg.linalg.LinAlgError``), so
    the jitter retries of Gaussian-process code (``except torch.linalg.LinAlgError:`` or
    ``except RuntimeError:`` around a Cholesky factorization) catch it."""


class DTypeError(RetrogradError, TypeError):
    """A dtype the operation does not accept (an int mask, a float index, grad on ints...)."""


class UnsupportedDTypeError(DTypeError, NotImplementedError):
    """A dtype an op has no kernel for, where torch raises ``NotImplementedError``
    (``"logcumsumexp_out_cpu" not implemented for 'Long'``) or its ``RuntimeError``
    (``cdist`` of integers): a :class:`DTypeError` of the hierarchy, and a
    ``NotImplementedError``, so also a ``RuntimeError``."""


class ResultCastError(DTypeError, RuntimeError):
    """A result whose dtype torch's casting rules do not let into the tensor written (an
    in-place op's own tensor, an ``out=`` tensor: ``int_t.add_(0.5)``): a :class:`DTypeError`
    of the hierarchy and the ``RuntimeError`` torch raises there ("result type Float can't be
    cast to the desired output type Long")."""


class GradientDTypeError(DTypeError, ValueError):
    """Gradients of a dtype the call cannot take (``GradScaler.unscale_`` of float16
    gradients): a :class:`DTypeError` of the hierarchy and the ``ValueError`` torch raises
    there ("Attempting to unscale FP16 gradients")."""


class MixedDTypeError(DTypeError, RuntimeError):
    """Operands of different dtypes given to an op that takes one (a matrix product, a
    convolution, ``linear``'s bias, a normalization's parameters), which torch refuses rather
    than promotes -- the refusal mixed-precision code meets outside an autocast region: a
    :class:`DTypeError` of the hierarchy and the ``RuntimeError`` torch raises there
    ("expected m1 and m2 to have the same dtype")."""


class ArgumentTypeError(DTypeError, ShapeError):
    """A size, a shape, a dimension or another int argument of the wrong type (a float, a
    str, a tensor of several elements given for a shape): torch's ``TypeError``, and the
    ``ShapeError`` (a ``ValueError``) retrograd raised for it before, so that either
    ``except`` catches it."""


class StateValueTypeError(DTypeError, RuntimeError):
    """A state dict value that holds no numbers (``None``, a str) where a module's tensor is
    loaded (``load_state_dict``): a :class:`DTypeError` of the hierarchy and the
    ``RuntimeError`` torch raises there, as :class:`SizeMismatchError` is for shapes."""


class RecurrentDTypeError(DTypeError, ValueError, RuntimeError):
    """A recurrent layer's input of another dtype than its weights or its initial state: a
    :class:`DTypeError` of the hierarchy, the ``ValueError`` torch's ``nn.LSTM``/``GRU``/``RNN``
    raise there ("RNN input dtype ... does not match weight dtype"), and the ``RuntimeError``
    of its cells and of a state of another dtype, so that a port's ``except`` catches it."""


class DeviceUnavailableError(DTypeError, RuntimeError, AssertionError):
    """A GPU asked of a backend that computes on the CPU, or of a machine without CUDA
    (``t.cuda()``, ``t.to("cuda")``, ``rg.zeros(2, device="cuda")``): the :class:`DTypeError`
    retrograd raised for it before, and both exceptions torch raises there (a CPU build's
    ``AssertionError: Torch not compiled with CUDA enabled``, a build without a driver's
    ``RuntimeError``), so that a port's ``except`` catches it."""


class IndexOutOfRangeError(RetrogradError, IndexError):
    """An index value outside the dimension it indexes."""


class InvalidMaxIndexError(IndexOutOfRangeError, RuntimeError):
    """An index of ``max_unpool`` outside the plane it writes: an out-of-range index of the
    hierarchy and the ``RuntimeError`` torch raises there ("Found an invalid max index")."""


class KernelIndexError(IndexOutOfRangeError, RuntimeError):
    """An index value outside its range where torch's kernel raises a ``RuntimeError``, not
    an ``IndexError`` (``embedding_bag``'s "Expected idx >= 0 && idx < num_embeddings",
    ``one_hot``'s class values): an out-of-range index of the hierarchy and torch's class."""


class PaddingIndexError(IndexOutOfRangeError, AssertionError):
    """A ``padding_idx`` that names no row of the table (``nn.Embedding``, ``F.embedding``):
    an out-of-range index of the hierarchy and the ``AssertionError`` torch asserts it with
    ("Padding_idx must be within num_embeddings")."""


class IndexDTypeError(DTypeError, IndexOutOfRangeError):
    """An index tensor of a dtype the op does not take, where torch raises an ``IndexError``
    for it (``index_fill``'s "Expected dtype int64 for index"): a :class:`DTypeError`, as
    before, and an ``IndexError``, as torch's, so that either ``except`` catches it."""


class AutodiffError(RetrogradError, RuntimeError):
    """Misuse of the autodiff graph: a consumed graph, grad on a non-leaf, no graph at all."""


class DerivativeNotImplementedError(AutodiffError, NotImplementedError):
    """A derivative torch does not implement either (an ``igamma`` gradient in its first
    argument, a second derivative through ``embedding_bag``): the :class:`AutodiffError` of
    the hierarchy and the ``NotImplementedError`` torch raises there ("the derivative for ...
    is not implemented")."""


class ScalerOrderError(AutodiffError, AssertionError):
    """A ``GradScaler`` call out of the order its state needs where torch asserts it
    (``update()`` before any ``step()``/``unscale_()``: "No inf checks were recorded prior to
    update"): the :class:`AutodiffError` retrograd raised for it before, and the
    ``AssertionError`` torch raises there, so that a port's ``except`` catches it."""


class AssertedShapeError(ShapeError, InvalidArgumentError, AssertionError):
    """A shape or size torch checks with an ``AssertionError`` in Python: multi-head
    attention's (a model width other than ``embed_dim``, one not divisible by ``num_heads``,
    keys and values of other shapes, a key padding mask of another shape). A
    :class:`ShapeError` (and :class:`InvalidArgumentError`, which the divisibility check
    raised before) of the hierarchy, and torch's class, so that a port's ``except`` catches
    it."""


class AssertedDTypeError(DTypeError, AssertionError):
    """A dtype torch checks with an ``AssertionError`` in Python: multi-head attention's
    masks of a dtype other than bool or floating ("only bool and floating types of
    key_padding_mask are supported"). The :class:`DTypeError` retrograd raised for it before,
    and torch's class, so that a port's ``except`` catches it."""


class OptimizerGroupsError(InvalidArgumentError, AssertionError, RuntimeError):
    """An optimizer's parameter groups not as many as a step needs: ``LBFGS`` stepped after
    ``add_param_group`` ("Expected exactly one param_group", torch's ``AssertionError``), a
    ``ReduceLROnPlateau`` given one ``min_lr`` per group reducing after a group was added
    (torch's ``RuntimeError``). An :class:`InvalidArgumentError`, and both of torch's classes,
    so that a port's ``except`` catches it."""


class InnerOperandError(AutodiffError):
    """A tensor that requires grad met a tensor of its autodiff decorator's inner backend,
    which records no graph, in an op whose result would land on that inner backend (``G @ w``
    of a gradient ``G`` and a parameter ``w``). :func:`guard` answers it: the public entry the
    user called runs again with ``rejoin(args, kwargs)``, its inner-backend operands lifted
    onto the decorator as constants, so that the op records its graph as torch's does. Where
    no entry can (an in-place write into the inner tensor, whose backend cannot hold the
    graph), it reaches the user as the ``AutodiffError`` it is."""

    def __init__(
        self,
        message: str,
        rejoin: Callable[[tuple, dict], tuple[tuple, dict, Callable[[str], None]] | None]
        | None = None,
    ) -> None:
        super().__init__(message)
        #: ``(args, kwargs, write_back)``: the arguments with the inner-backend tensors among
        #: them (in lists, tuples and dicts too) lifted onto the decorator, and what to call
        #: with the op's name once the op ran on them (it writes back into the inner tensors
        #: what the op wrote into their copies); ``None`` where there is none to lift.
        #: Without it (the error raised again under another message) nothing is retried
        self.rejoin = rejoin


class KernelDTypeError(DTypeError, RuntimeError):
    """A tensor of a dtype torch's kernel refuses with a ``RuntimeError`` (``embedding``'s
    float indices: "Expected tensor for argument #1 'indices' to have one of the following
    scalar types: Long, Int"; ``F.one_hot`` of int32; an int input of a float-only function,
    "not implemented for 'Long'"): a :class:`DTypeError` of the hierarchy and torch's
    class."""


class KernelArgumentError(InvalidArgumentError, RuntimeError):
    """An argument value torch's kernel refuses with a ``RuntimeError`` (``embedding_bag``'s
    offsets, ``group_norm``'s groups that do not divide the channels, ``one_hot`` of an empty
    tensor with ``num_classes=-1``): an :class:`InvalidArgumentError` of the hierarchy and
    torch's class."""


class UninitializedError(InvalidArgumentError, RuntimeError):
    """Use of a lazy module's parameter before its first call set its shape: the
    ``ValueError`` torch's ops raise there, and the ``RuntimeError`` of its ``shape``."""


class SamplingError(InvalidArgumentError, RuntimeError):
    """Weights or a count that ``multinomial`` cannot draw from (a negative, infinite or NaN
    weight, an all-zero row, no draw, more draws without replacement than categories), and so
    the ``WeightedRandomSampler`` built on it, or a ``RandomSampler`` with replacement of an
    empty dataset (torch's ``randint(0, 0)``): an :class:`InvalidArgumentError` of the
    hierarchy and the ``RuntimeError`` torch raises there."""


class NonFiniteError(InvalidArgumentError, RuntimeError):
    """A value that had to be finite was not (``clip_grad_norm_(..., error_if_nonfinite=True)``
    of a NaN or infinite norm): an :class:`InvalidArgumentError` of the hierarchy and the
    ``RuntimeError`` torch raises there."""


class OutOfMemoryError(RetrogradError, MemoryError):
    """An allocation the machine cannot make (a size typed wrong: ``zeros((10**8, 10**8))``);
    torch's ``OutOfMemoryError``, a ``MemoryError`` here as NumPy's."""


class DistributedError(RetrogradError, RuntimeError):
    """A collective that failed: a peer that died, never arrived, or disagreed."""


def index_error(message: str | Exception) -> Exception:
    """What a failed range check raises (``Backend.check_index_range``): an
    :class:`IndexOutOfRangeError` of ``message``, or ``message`` itself where the check's
    message maker gave an exception (a value check built on the index check, such as a
    probability outside [0, 1], raises the hierarchy's class for values)."""
    return message if isinstance(message, Exception) else IndexOutOfRangeError(message)


def check_callable(op: str, value: Any, what: str = "func") -> None:
    """Refuse a ``value`` that cannot be called where ``op`` calls it (a tensor passed as the
    function of a transform): a ``DTypeError`` naming ``op`` at the call, not Python's
    "object is not callable" from inside (functions that run the user's code are not guarded,
    so that its own exceptions pass unchanged)."""
    if not callable(value):
        raise DTypeError(f"{op}: {what} must be callable, got {_describe(value)}")


def check_sized(op: str, value: Any, what: str) -> int:
    """``len(value)``, or a ``DTypeError`` naming ``op`` where ``value`` has no length (an int
    given for a dataset), not Python's "object of type 'int' has no len()" from inside. Only
    the type is asked: a user's own ``__len__`` runs unguarded, its exceptions unchanged."""
    if not hasattr(type(value), "__len__"):
        raise DTypeError(f"{op}: {what} must have a length, got {_describe(value)}")
    return len(value)


def check_iterable(op: str, value: Any, what: str) -> None:
    """Refuse a ``value`` that cannot be iterated where ``op`` iterates it (an int given for
    a sampler or a list of datasets): a ``DTypeError`` naming ``op`` at the call, not
    Python's "object is not iterable" at the first use."""
    kind = type(value)
    if not (hasattr(kind, "__iter__") or hasattr(kind, "__getitem__")):
        raise DTypeError(f"{op}: {what} must be iterable, got {_describe(value)}")


def check_flag(
    op: str, value: Any, what: str, kind: type[RetrogradError] = InvalidArgumentError
) -> None:
    """Refuse a ``value`` that is not a bool where ``op`` takes a flag checked in Python code
    (torch's samplers say "should be a boolean value"): a ``kind`` naming ``op``, the class
    of torch's error there (``RandomSampler``'s is a ``TypeError``, ``BatchSampler``'s a
    ``ValueError``). A flag torch's argument parser reads is :func:`check_bool`'s."""
    if not isinstance(value, bool):
        raise kind(f"{op}: {what} should be a boolean value, got {value!r}")


def check_bool(op: str, value: Any, what: str) -> bool:
    """``value`` where it is a Python bool, as torch's argument parser takes a ``bool``
    parameter (``keepdim``, ``ceil_mode``, ``sparse``, ``requires_grad_``...): anything else,
    a ``1``, ``None``, a NumPy bool or a 0-d tensor, is its ``TypeError`` ("must be bool"), an
    :class:`ArgumentTypeError` naming ``op`` here. The one check of such flags, for the
    guarded entries (:func:`_check_flags`) and the layers that check their own."""
    if value is not True and value is not False:
        shown = repr(value) if type(value).__module__ == "numpy" else _describe(value)
        raise ArgumentTypeError(f"{op}: {what} must be a bool, got {shown}")
    return value


def check_count(op: str, value: Any, what: str) -> int:
    """``value`` as an int where it is a positive integer (a NumPy one too, not a bool), else
    an ``InvalidArgumentError`` naming ``op`` (torch's "should be a positive integer value")."""
    if isinstance(value, bool) or not hasattr(type(value), "__index__") or value < 1:
        raise InvalidArgumentError(
            f"{op}: {what} should be a positive integer value, got {value!r}"
        )
    return int(value)


def shape_text(shape: Sequence[int]) -> str:
    """``[2, 3]``: a shape as error messages write it."""
    return "[" + ", ".join(str(n) for n in shape) + "]"


def translate(op: str, error: Exception, backend: Any, inputs: Sequence[Any] = ()) -> Exception:
    """What the user sees for ``error``, raised by ``backend`` while running ``op`` on ``inputs``.

    The backend says which class of the hierarchy its exception means
    (``Backend.error_class``: NumPy's ``ValueError`` is a shape error, torch's ``RuntimeError``
    about sizes too); errors already in the hierarchy, and exceptions the backend does not
    recognise as bad input (bugs), come back unchanged, to propagate with their own cause and
    context. ``inputs`` are tensors (anything with ``shape`` and ``dtype``) named in the
    message. A translated error hides its context (the kernel's traceback is noise to the
    user), so ``raise translate(...)`` in an ``except`` clause needs no ``from None``, which
    would also wipe an untranslated error's context.
    """
    if isinstance(error, RetrogradError):
        return error
    kind = backend.error_class(error)
    if kind is None:
        return error
    described = ", ".join(f"{shape_text(t.shape)} {t.dtype}" for t in inputs)
    message = f"{op}: {error}" + (f" (inputs: {described})" if described else "")
    translated = kind(message)
    translated.__suppress_context__ = True
    return translated


class reported:  # noqa: N801  (used as a ``with`` statement, like contextlib's helpers)
    """``with reported(op, backend, inputs): ...``: the one place a backend's exceptions become
    the hierarchy's, naming the op and the inputs' shapes (:func:`translate`).

    A class, not a ``contextlib`` generator: entering and leaving cost two plain method calls,
    which matters on paths that run once per op.
    """

    __slots__ = ("backend", "inputs", "op")

    def __init__(self, op: str, backend: Any, inputs: Sequence[Any] = ()):
        self.op = op
        self.backend = backend
        self.inputs = inputs

    def __enter__(self) -> reported:
        return self

    def __exit__(self, kind: Any, error: Any, traceback: Any) -> bool:
        if error is None or not isinstance(error, Exception):
            return False
        translated = translate(self.op, error, self.backend, self.inputs)
        if translated is error:
            return False
        raise translated


#: What Python and NumPy raise on arguments a function cannot use (a str for a dim, None for
#: a tensor, a float for a size) before any kernel runs: the class of the hierarchy each means.
_ARGUMENT_ERRORS: tuple[tuple[type, type], ...] = (
    (IndexError, IndexOutOfRangeError),
    (TypeError, DTypeError),
    (AttributeError, DTypeError),
    (ValueError, InvalidArgumentError),
    (KeyError, KeyMismatchError),  # (torch's Python lookups raise it too)
    (ZeroDivisionError, DivisionByZeroError),  # (torch's Python arithmetic raises it too)
    (OverflowError, InvalidArgumentError),
    (StopIteration, InvalidArgumentError),
    (MemoryError, OutOfMemoryError),
)
_CAUGHT = tuple(kind for kind, _ in _ARGUMENT_ERRORS)
#: A device backend's allocator says it is out of memory, or that a size overflows, in a
#: ``RuntimeError`` (torch's CPU allocator, its ``OutOfMemoryError``): words, not classes.
_RUNTIME_WORDS = (
    ("allocate memory", OutOfMemoryError),
    ("out of memory", OutOfMemoryError),
    ("integer multiplication overflow", InvalidArgumentError),
    ("storage size calculation overflowed", InvalidArgumentError),  # (NumPy's "too big")
    # a torch tensor of several elements given where a number or flag belongs (torch's own
    # functions refuse it with a TypeError, its truth value raises this)
    ("boolean value of tensor with more than one value is ambiguous", DTypeError),
)


def _runtime_kind(error: RuntimeError, args: Sequence[Any] = ()) -> type | None:
    """The class a device backend's ``RuntimeError`` means: its allocator's words, or what the
    backend of the first tensor among ``args`` says (``Backend.error_class``, as
    :func:`translate` asks it); ``None``: not about the input, a bug to propagate."""
    text = str(error).lower()
    kind = next((kind for words, kind in _RUNTIME_WORDS if words in text), None)
    backend = next((a._backend for a in args if hasattr(a, "_backend")), None)
    if kind is None and backend is not None:
        kind = backend.error_class(error)
    return kind


def _describe(value: Any) -> str:
    """An argument as an error message names it: a tensor by its shape and dtype, a short
    value by its repr, anything else by its type (a half-built module's repr may fail)."""
    try:
        shape, dtype = getattr(value, "shape", None), getattr(value, "dtype", None)
        if isinstance(shape, tuple) and dtype is not None:
            return f"{type(value).__name__} {shape_text(shape)} {dtype}"
        text = repr(value)
    except Exception:
        return type(value).__name__
    return text if len(text) <= 40 and "\n" not in text else type(value).__name__


def argument_error(op: str, error: BaseException, args: Sequence[Any], kwargs: dict) -> Exception:
    """``error`` (a built-in exception raised inside ``op``) as the hierarchy's, naming the op
    and the arguments it was given."""
    kind = _runtime_kind(error, args) if isinstance(error, RuntimeError) else None
    kind = kind or next(target for source, target in _ARGUMENT_ERRORS if isinstance(error, source))
    given = [_describe(a) for a in args] + [f"{k}={_describe(v)}" for k, v in kwargs.items()]
    text = str(error.args[0] if isinstance(error, KeyError) and error.args else error)
    text = text.strip().splitlines()[0] if text.strip() else ""  # one line (torch's run on)
    what = "out of memory for" if kind is OutOfMemoryError else "invalid arguments"
    return kind(f"{op}: {what} ({', '.join(given)}): {text or type(error).__name__}")


#: torch's arg parser takes NumPy's names for two parameters of every native function:
#: ``axis`` for ``dim`` and ``keepdims`` for ``keepdim`` (``torch.cumprod(a, axis=0)``,
#: ``x.sum(axis=1, keepdims=True)``)
_NUMPY_NAMES = (("axis", "dim"), ("keepdims", "keepdim"))


def _numpy_aliases(function: Callable[..., Any]) -> tuple[tuple[str, str], ...]:
    """The NumPy names ``function`` takes for its parameters (those it has, under torch's
    name and not under NumPy's)."""
    try:
        parameters = inspect.signature(function).parameters
    except (TypeError, ValueError):
        return ()
    return tuple(
        (alias, name)
        for alias, name in _NUMPY_NAMES
        if name in parameters and alias not in parameters
    )


def _renamed(op: str, function: Callable[..., Any], kwargs: dict[str, Any]) -> dict[str, Any]:
    """``kwargs`` with the NumPy names ``function`` takes renamed to torch's (read from its
    signature only when a NumPy name is given: nothing is paid at import or per call)."""
    kwargs = dict(kwargs)
    for alias, name in _numpy_aliases(function):
        if alias in kwargs:
            if name in kwargs:
                raise DTypeError(f"{op}: got {name} twice (as {name}= and as {alias}=)")
            kwargs[name] = kwargs.pop(alias)
    return kwargs


#: The flag parameters torch's argument parser takes as a Python ``bool`` only (a ``1``, a
#: ``"yes"``, ``None``, a NumPy or 0-d tensor bool are a ``TypeError`` there), by name
_FLAGS = frozenset(("keepdim", "descending", "largest", "sorted", "unbiased"))


def _flag_parameters(function: Callable[..., Any]) -> tuple[tuple[str, int | None], ...]:
    """The flag parameters (:data:`_FLAGS`) of ``function`` (of what it wraps) and their
    positions (``None``: keyword only), read from its code object: nothing is paid per call
    by functions without one."""
    code = getattr(inspect.unwrap(function), "__code__", None)
    if code is None:
        return ()
    positional = code.co_argcount
    names = code.co_varnames[: positional + code.co_kwonlyargcount]
    return tuple(
        (name, i if i < positional else None) for i, name in enumerate(names) if name in _FLAGS
    )


def _check_flags(
    op: str, flags: tuple[tuple[str, int | None], ...], args: tuple, kwargs: dict
) -> None:
    """:func:`check_bool` of each flag given (``sum(0, keepdim="yes")``, where torch raises a
    ``TypeError``)."""
    for name, position in flags:
        if name in kwargs:
            value = kwargs[name]
        elif position is not None and position < len(args):
            value = args[position]
        else:
            continue
        check_bool(op, value, name)


#: by op name, what names the backward node of a result the op (a composite) made as torch
#: names its node (``x.sum(1)``: ``SumBackward1``); filled by the tensor package, never
#: raising, read by :func:`guard` (the outermost op names the node last)
class _NodeNamers(dict):
    """:data:`NODE_NAMERS`: a dict whose items (set and deleted by key) are mirrored in one
    one-item list per op, which each guard holds, so that a guarded call reads its op's
    namer without a dict lookup (``cell``)."""

    def __init__(self) -> None:
        super().__init__()
        self.cells: dict[str, list] = {}

    def cell(self, op: str) -> list:
        """The one-item list holding the namer of ``op`` (``None``: none), kept current."""
        cell = self.cells.get(op)
        if cell is None:
            cell = self.cells[op] = [self.get(op)]
        return cell

    def __setitem__(self, op: str, namer: Callable[[tuple, dict, Any], None]) -> None:
        super().__setitem__(op, namer)
        self.cell(op)[0] = namer

    def __delitem__(self, op: str) -> None:
        super().__delitem__(op)
        self.cell(op)[0] = None

    def update(self, *args: Any, **kwargs: Any) -> None:  # type: ignore[override]
        for op, namer in dict(*args, **kwargs).items():
            self[op] = namer

    def setdefault(self, op: str, namer: Any = None) -> Any:  # type: ignore[override]
        if op not in self:
            self[op] = namer
        return self[op]

    def pop(self, op: str, *default: Any) -> Any:  # type: ignore[override]
        namer = super().pop(op, *default)
        self.cell(op)[0] = None
        return namer

    def clear(self) -> None:
        super().clear()
        for cell in self.cells.values():
            cell[0] = None


NODE_NAMERS: dict[str, Callable[[tuple, dict, Any], None]] = _NodeNamers()


#: what sees each guarded entry's ``(args, result)`` while some thread runs inside
#: ``inference_mode()`` (the tensor package's marking of inference tensors), else ``None``:
#: ordinary code pays one list read per call for it
RESULT_WATCH: list[Callable[[tuple, Any], None] | None] = [None]
#: what an in-place entry calls with its name and the tensor it writes, where that tensor is
#: an inference tensor (``_inference``): the tensor package's refusal outside the block
WRITE_WATCH: list[Callable[[str, Any], None] | None] = [None]


def _undone_effects(draws: int, writes: int) -> str | None:
    """Why an op's first run, begun when :data:`effects.DRAWS` and :data:`effects.WRITES`
    counted ``draws`` and ``writes``, cannot run again unseen (``None`` where it can: its
    draws, if any, are put back)."""
    if WRITES.count != writes:
        return (
            "it had written into a tensor in place before, which running it again on the"
            " autodiff decorator would write twice"
        )
    if not DRAWS.rewind(draws):
        return (
            "it had drawn random numbers before, which running it again on the autodiff"
            " decorator cannot draw again as the first run did"
        )
    return None


#: torch's in-place methods that change a tensor's autograd flags, not its values: allowed on
#: an inference tensor outside inference_mode (round 93: ``detach_()`` of one was refused
#: as an in-place update)
_FLAGS_IN_PLACE = frozenset({"detach_", "requires_grad_", "share_memory_"})


def _writes_in_place(op: str) -> bool:
    """Whether the op named ``op`` (``add_``, ``Tensor.index_add_``, ``nn.init.normal_``) writes
    into its operand's values, torch's trailing underscore."""
    return (
        op.endswith("_") and not op.endswith("__") and op.rpartition(".")[2] not in _FLAGS_IN_PLACE
    )


def guard(
    op: str,
    function: Callable[..., Any],
    owner: Any = None,
    qualname: str | None = None,
    first_name: str | None = None,
) -> Callable[..., Any]:
    """``function`` whose built-in exceptions about its arguments (``_ARGUMENT_ERRORS``: an
    ``AttributeError`` of an int given for a tensor, a ``TypeError`` of a str given for a dim)
    come out as the hierarchy's, naming ``op`` and the arguments, the original as the cause.

    The public entry points are guarded (:func:`guard_namespace`), so that an argument no
    check foresaw still gets an error of API.md section 7, never a bare traceback; errors
    already in the hierarchy pass on, their message prefixed with ``op`` where it names
    another op only (an op ``op`` called), and ``NotImplementedError`` passes unchanged. An
    :class:`InnerOperandError` (a tensor that requires grad met an inner-backend one) runs
    the function again on its arguments lifted onto the autodiff decorator, unless ``op``
    writes in place (torch's trailing underscore): it then passes on.

    ``owner`` (a module or class) and ``qualname``: where the guarded function is found, so
    that pickle, which finds a function by its name, finds the guarded one. ``first_name``:
    torch's name of the first parameter, accepted as a keyword too (``F.relu(input=x)`` for
    a ``relu(x)``) and shown in the signature.
    """

    flags = _flag_parameters(function)
    in_place = _writes_in_place(op)
    namer_cell = NODE_NAMERS.cell(op)  # type: ignore[attr-defined]

    @functools.wraps(function)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        if first_name is not None and first_name in kwargs:
            if args:
                raise DTypeError(f"{op}: got the {first_name} twice (by position and by name)")
            args = (kwargs.pop(first_name),)
        if kwargs and ("axis" in kwargs or "keepdims" in kwargs):
            kwargs = _renamed(op, function, kwargs)
        if flags:
            _check_flags(op, flags, args, kwargs)
        if in_place and args and getattr(args[0], "_inference", False):
            WRITE_WATCH[0](op, args[0])  # type: ignore[misc]
        draws, writes = DRAWS.count, WRITES.count
        try:
            result = function(*args, **kwargs)
            namer = namer_cell[0]  # NODE_NAMERS.get(op), without the lookup
            if namer is not None:
                namer(args, kwargs, result)
            watch = RESULT_WATCH[0]
            if watch is not None:
                watch(args, result)
            return result
        except InnerOperandError as refusal:
            # a tensor requiring grad met an inner-backend one: the op again, on the autodiff
            # decorator (an in-place op writes into its operand, which a copy would not be),
            # unseen: the streams put back where they were, never after an in-place write
            retry = None if refusal.rejoin is None or in_place else refusal.rejoin(args, kwargs)
            if retry is not None:
                undone = _undone_effects(draws, writes)
                if undone is not None:  # (an outer entry must not run it again either)
                    retry, refusal.rejoin = None, None
                    refusal.args = (f"{refusal.args[0]} ({undone})", *refusal.args[1:])
            if retry is None:
                if refusal.args and isinstance(refusal.args[0], str) and op not in refusal.args[0]:
                    refusal.args = (f"{op}: {refusal.args[0]}", *refusal.args[1:])
                raise
            lifted_args, lifted_kwargs, write_back = retry
            result = guarded(*lifted_args, **lifted_kwargs)
            write_back(op)
            return result
        except RetrogradError as error:
            # raised by an op this one called (``all`` calls ``sum``): named after both
            if error.args and isinstance(error.args[0], str) and op not in error.args[0]:
                error.args = (f"{op}: {error.args[0]}", *error.args[1:])
            raise
        except _CAUGHT as error:
            raise argument_error(op, error, args, kwargs) from error
        except NotImplementedError:  # a RuntimeError, but a limit of ours, not bad input
            raise
        except RuntimeError as error:  # what the backend knows as bad input; others are bugs
            if _runtime_kind(error, args) is None:
                raise
            raise argument_error(op, error, args, kwargs) from error

    guarded.__retrograd_guarded__ = True  # type: ignore[attr-defined]
    if first_name is not None:
        signature = inspect.signature(function)
        first, *rest = signature.parameters.values()
        guarded.__signature__ = signature.replace(  # type: ignore[attr-defined]
            parameters=[first.replace(name=first_name), *rest]
        )
    if owner is not None:
        guarded.__module__ = owner if isinstance(owner, str) else owner.__module__
        guarded.__qualname__ = qualname or op
    return guarded


def guard_methods(
    classes: Iterable[tuple[str, type]],
    methods: Sequence[str],
    op_name: Callable[[str, str], str],
    constructor_only: Iterable[str] = (),
) -> None:
    """Replace each of ``methods`` that each ``(name, class)`` of ``classes`` has as a plain
    function (its own or a base's) by its :func:`guard`, under the op name ``op_name(name,
    method)``; the classes named in ``constructor_only`` (wrappers of objects that may be the
    user's, whose exceptions pass unchanged) get their ``__init__`` guarded alone. A base's
    guarded method is guarded again under the subclass's name."""
    constructor_only = frozenset(constructor_only)
    for name, cls in classes:
        for method in methods:
            if method != "__init__" and name in constructor_only:
                continue
            function = inspect.getattr_static(cls, method, None)
            if getattr(function, "__retrograd_guarded__", False):
                function = function.__wrapped__
            if type(function).__name__ != "function":
                continue
            qualname = f"{cls.__qualname__}.{method}"
            setattr(cls, method, guard(op_name(name, method), function, cls, qualname))


def guard_namespace(
    namespace: dict[str, Any], names: Iterable[str], first_names: Mapping[str, str] | None = None
) -> None:
    """Replace each plain function among ``namespace[name]`` (a module's globals) by its
    :func:`guard`; ``first_names[name]``: its first parameter's torch name."""
    for name in names:
        value = namespace.get(name)
        if (
            callable(value)
            and type(value).__name__ == "function"
            and not getattr(value, "__retrograd_guarded__", False)
        ):
            first = (first_names or {}).get(name)
            namespace[name] = guard(name, value, namespace["__name__"], name, first)


_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


def warn_at_caller(message: str, category: type[Warning] = UserWarning) -> None:
    """Warn as torch's C++ ``TORCH_WARN`` does, attributed to the first frame outside
    retrograd: Python's filters (``default``: once per call site) and a test's
    ``pytest.warns`` see the user's line, however deep in retrograd the warning arose."""
    frame = sys._getframe(1)
    level = 2  # (1 is this function; 2 its caller)
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE_DIR):
        frame = frame.f_back
        level += 1
    warnings.warn(message, category, stacklevel=level)
