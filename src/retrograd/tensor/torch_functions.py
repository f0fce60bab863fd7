"""More of torch's function forms (``torch.<name>``) that real scripts call: the function
forms of Tensor methods (``torch.get_device``, ``torch.fill``, ``torch.unsafe_split``...),
layouts and interchange (``torch.empty_strided``, ``torch.frombuffer``, ``torch.from_dlpack``,
``torch.to_dlpack``), ``torch.binomial``, ``torch.histogramdd``, the deprecated norms
(``torch.frobenius_norm``, ``torch.nuclear_norm``), fake quantization
(``torch.fake_quantize_per_tensor_affine``, :mod:`.fake_quantize`); ``torch.svd_lowrank`` and
``torch.pca_lowrank`` are :mod:`retrograd.linalg`'s."""

from __future__ import annotations

import builtins
import numbers
from collections import namedtuple
from typing import Any

import numpy as np

from ..errors import DTypeError, InvalidArgumentError, ShapeError, shape_text
from ._dispatch import TensorBase
from .dtypes import DTYPE_OBJECTS, canonical_dtype
from .fake_quantize import fake_quantize_per_channel_affine, fake_quantize_per_tensor_affine
from .norms import matrix_norm, vector_norm
from .torch_forms import nonzero_static, strided_extent

__all__ = [
    "adjoint",
    "binomial",
    "empty_strided",
    "fake_quantize_per_channel_affine",
    "fake_quantize_per_tensor_affine",
    "fill",
    "frobenius_norm",
    "from_dlpack",
    "frombuffer",
    "get_device",
    "histogramdd",
    "is_inference",
    "nonzero_static",
    "nuclear_norm",
    "resize_as_",
    "to_dlpack",
    "unsafe_chunk",
    "unsafe_split",
    "unsafe_split_with_sizes",
]

HistogramddResult = namedtuple("histogramdd", ["hist", "bin_edges"])


def _tensor(op: str, value: Any, what: str = "input") -> Any:
    if not isinstance(value, TensorBase):
        raise DTypeError(f"{op}: {what} must be a tensor, got {type(value).__name__}")
    return value


def empty_strided(
    size: Any,
    stride: Any,
    *,
    dtype: Any = None,
    layout: Any = None,
    device: Any = None,
    requires_grad: bool = False,
    pin_memory: bool = False,
) -> Any:
    """``torch.empty_strided``: a tensor of ``size`` laid out with ``stride`` (zeros here)."""
    from .creation import zeros

    storage = zeros(strided_extent("empty_strided", size, stride), dtype=dtype, device=device)
    out = storage.as_strided(tuple(size), tuple(stride))
    return out.require_grad() if requires_grad else out


def get_device(input: Any) -> int:  # noqa: A002 (torch's name)
    """The device index of a tensor on a GPU, -1 on the CPU."""
    return _tensor("get_device", input).get_device()


def is_inference(input: Any) -> bool:  # noqa: A002
    """:meth:`Tensor.is_inference`."""
    return _tensor("is_inference", input).is_inference()


def adjoint(input: Any) -> Any:  # noqa: A002
    """:meth:`Tensor.adjoint`."""
    return _tensor("adjoint", input).adjoint()


def fill(input: Any, value: Any) -> Any:  # noqa: A002
    """A tensor like ``input`` holding ``value`` everywhere (out of place; the gradient goes
    to ``value`` where it is a tensor, none to ``input``)."""
    return _tensor("fill", input).clone().fill_(value)


def resize_as_(input: Any, the_template: Any, *, memory_format: Any = None) -> Any:  # noqa: A002
    """:meth:`Tensor.resize_as_`."""
    return _tensor("resize_as_", input).resize_as_(the_template, memory_format=memory_format)


def unsafe_chunk(input: Any, chunks: int, dim: int = 0) -> tuple[Any, ...]:  # noqa: A002
    return _tensor("unsafe_chunk", input).unsafe_chunk(chunks, dim)


def unsafe_split(tensor: Any, split_size: int, dim: int = 0) -> tuple[Any, ...]:
    return _tensor("unsafe_split", tensor).unsafe_split(split_size, dim)


def unsafe_split_with_sizes(input: Any, split_sizes: Any, dim: int = 0) -> tuple[Any, ...]:  # noqa: A002
    return _tensor("unsafe_split_with_sizes", input).unsafe_split_with_sizes(split_sizes, dim)


# -- interchange -------------------------------------------------------------------------------
def frombuffer(
    buffer: Any,
    *,
    dtype: Any,
    count: int = -1,
    offset: int = 0,
    requires_grad: bool = False,
) -> Any:
    """A 1-d tensor of ``count`` elements of ``dtype`` read from an object of the buffer
    protocol, from byte ``offset`` (all that remain for ``count=-1``). torch's shares the
    buffer's memory; here the values are copied (retrograd's tensors own their values)."""
    from .creation import tensor

    op = "frombuffer"
    name = canonical_dtype(op, dtype)
    try:
        view = memoryview(buffer)
    except TypeError:
        raise DTypeError(
            f"{op}: expected an object of the buffer protocol, got {type(buffer).__name__}"
        ) from None
    itemsize = DTYPE_OBJECTS[name].itemsize
    length = view.nbytes
    if not isinstance(offset, numbers.Integral) or not 0 <= offset < max(length, 1):
        raise InvalidArgumentError(
            f"{op}: offset must be a non-negative int smaller than the buffer's {length} bytes, "
            f"got {offset!r}"
        )
    if not isinstance(count, numbers.Integral) or count == 0 or count < -1:
        raise InvalidArgumentError(f"{op}: count must be a positive int or -1, got {count!r}")
    if count == -1:
        if (length - offset) % itemsize:
            raise InvalidArgumentError(
                f"{op}: the buffer's {length - offset} bytes after offset {offset} are not a "
                f"multiple of {name}'s element size {itemsize}"
            )
        count = (length - offset) // itemsize
    if offset + count * itemsize > length:
        raise InvalidArgumentError(
            f"{op}: {count} elements of {name} from offset {offset} need "
            f"{offset + count * itemsize} bytes; the buffer has {length}"
        )
    np_dtype = np.float32 if name == "bfloat16" else np.dtype(name)
    raw = np.frombuffer(view.cast("B"), dtype=np.uint8, count=count * itemsize, offset=offset)
    if name == "bfloat16":  # NumPy has no bfloat16: its bits are a float32's upper half
        values = (raw.view(np.uint16).astype(np.uint32) << 16).view(np.float32)
    else:
        values = raw.view(np_dtype)
    out = tensor(values.copy(), dtype=name)
    return out.require_grad() if requires_grad else out


def from_dlpack(ext_tensor: Any, *, device: Any = None, copy: bool | None = None) -> Any:
    """A tensor of the values of an object of the DLPack protocol (a NumPy array, a torch
    tensor on the CPU, a DLPack capsule from :func:`to_dlpack`), its dtype kept. Copied:
    retrograd's tensors own their values."""
    from .creation import tensor

    op = "from_dlpack"
    if isinstance(ext_tensor, TensorBase):
        return ext_tensor if not copy else ext_tensor.clone()
    if type(ext_tensor).__name__ == "PyCapsule":
        holder = _Capsule(ext_tensor)
        array = np.from_dlpack(holder)
    elif hasattr(ext_tensor, "__dlpack__"):
        kind = getattr(ext_tensor, "__dlpack_device__", lambda: (1, 0))()[0]
        if kind != 1:  # kDLCPU
            raise InvalidArgumentError(
                f"{op}: the tensor lives on DLPack device type {kind}, not on the CPU; move it "
                "to the CPU first"
            )
        if getattr(ext_tensor, "dtype", None) is not None and "bfloat16" in str(ext_tensor.dtype):
            return tensor(ext_tensor.float().numpy(), dtype="bfloat16")
        array = np.from_dlpack(ext_tensor)
    else:
        raise DTypeError(
            f"{op}: expected an object of the DLPack protocol (__dlpack__), got "
            f"{type(ext_tensor).__name__}"
        )
    out = tensor(np.array(array, copy=True))
    return out if device is None else out.to(device)


class _Capsule:
    """A DLPack capsule given to :func:`numpy.from_dlpack`, which reads the protocol's
    methods: the capsule is handed over once, on the CPU."""

    def __init__(self, capsule: Any):
        self._capsule = capsule

    def __dlpack__(self, **kwargs: Any) -> Any:
        return self._capsule

    def __dlpack_device__(self) -> tuple[int, int]:
        return (1, 0)


def to_dlpack(tensor: Any) -> Any:
    """A DLPack capsule of ``tensor``'s values (a copy of them on the host), for
    ``from_dlpack`` of NumPy, torch or retrograd."""
    values = _tensor("to_dlpack", tensor, "tensor")
    return values.__dlpack__()


# -- random --------------------------------------------------------------------------------------
def binomial(count: Any, prob: Any, generator: Any = None) -> Any:
    """Draws of Binomial(``count``, ``prob``) elementwise (``count`` and ``prob``
    broadcast; floats of ``count``'s dtype), reproducible under ``rg.manual_seed`` (the
    draws differ from torch's: they are NumPy's, seeded from the stream it seeds)."""
    from .creation import randint, tensor

    op = "binomial"
    count, prob = _tensor(op, count, "count"), _tensor(op, prob, "prob")
    if not count.is_floating_point():
        raise DTypeError(
            f"{op}: only floating-point dtypes are supported for count, got {count.dtype}"
        )
    if not prob.is_floating_point():  # (torch's ValueError: a complex or bool prob)
        raise DTypeError(
            f"{op}: only floating-point dtypes are supported for prob, got {prob.dtype}"
        )
    if generator is not None:
        raise InvalidArgumentError(
            f"{op}: a generator is not taken here; draws come from the stream rg.manual_seed seeds"
        )
    trials = np.asarray(count.detach().float().numpy(), dtype=np.float64)
    chance = np.asarray(prob.detach().float().numpy(), dtype=np.float64)
    if (trials < 0).any() or np.isnan(trials).any():
        raise InvalidArgumentError(f"{op}: count must be non-negative, got {trials.min()}")
    # A probability computed as a ratio (p / remainder of a stick-breaking loop) lands past 1
    # or below 0 by a rounding: torch draws it as 1 (or 0); one past [0, 1] by more is a bug.
    rounding = 1e-6
    if ((chance < -rounding) | (chance > 1 + rounding) | np.isnan(chance)).any():
        raise InvalidArgumentError(f"{op}: prob must lie in [0, 1]")
    chance = np.clip(chance, 0.0, 1.0)
    seed = int(randint(0, 2**62, ()).item())
    # NumPy answers 0-d arguments with a Python int, not an array
    draws = np.asarray(
        np.random.default_rng(seed).binomial(np.floor(trials).astype(np.int64), chance)
    )
    return tensor(draws.astype(np.float64), dtype=count.dtype, device=count.device)


# -- histograms ----------------------------------------------------------------------------------
def histogramdd(
    input: Any,  # noqa: A002 (torch's names)
    bins: Any,
    *,
    range: Any = None,  # noqa: A002
    weight: Any = None,
    density: bool = False,
    out: Any = None,
) -> Any:
    """The histogram of the points ``input[..., :]`` (``D`` coordinates in the last
    dimension) over ``D`` dimensions: ``bins`` an int, ``D`` ints, or ``D`` tensors of bin
    edges; ``range`` ``[min_0, max_0, min_1, ...]`` (the data's by default); ``weight`` one
    per point. Returns ``(hist, bin_edges)``, both of ``input``'s dtype (not
    differentiable, as torch's)."""
    op = "histogramdd"
    points_in = _tensor(op, input)
    if out is not None:
        raise InvalidArgumentError(f"{op}: out= is not supported; use the returned value")
    if points_in.ndim < 2:
        raise ShapeError(
            f"{op}: the input should have at least 2 dimensions (points of D coordinates), "
            f"got {shape_text(points_in.shape)}"
        )
    if not points_in.is_floating_point():
        raise DTypeError(f"{op}: expected a floating-point points_in, got {points_in.dtype}")
    dims = points_in.shape[-1]
    points = np.asarray(
        points_in.detach().float().numpy()
        if points_in.dtype in ("float16", "bfloat16")
        else points_in.detach().numpy(),
        dtype=np.float64,
    ).reshape(-1, dims)
    if isinstance(bins, numbers.Integral) and not isinstance(bins, bool):
        edges_arg: Any = int(bins)
    elif isinstance(bins, list | tuple) and len(bins) == dims:
        edges_arg = [
            np.asarray(b.detach().numpy(), dtype=np.float64)
            if isinstance(b, TensorBase)
            else int(b)
            for b in bins
        ]
    else:
        raise InvalidArgumentError(
            f"{op}: bins must be an int or {dims} ints or tensors of edges (one per dimension "
            f"of the last dimension of {shape_text(points_in.shape)}), got {bins!r}"
        )
    bounds = None
    if range is not None:
        flat = [float(v) for v in range]
        if len(flat) != 2 * dims:
            raise InvalidArgumentError(
                f"{op}: range must hold 2 * {dims} values (a min and a max per dimension), got "
                f"{len(flat)}"
            )
        bounds = [(flat[2 * i], flat[2 * i + 1]) for i in builtins.range(dims)]
    weights = None
    if weight is not None:
        weight = _tensor(op, weight, "weight")
        if weight.dtype != points_in.dtype:
            raise DTypeError(
                f"{op}: the weight must have the input's dtype {points_in.dtype}, got "
                f"{weight.dtype}"
            )
        if tuple(weight.shape) != tuple(points_in.shape[:-1]):
            raise ShapeError(
                f"{op}: weight must have shape {shape_text(points_in.shape[:-1])} (one per point), "
                f"got {shape_text(weight.shape)}"
            )
        weights = np.asarray(weight.detach().numpy(), dtype=np.float64).reshape(-1)
    hist, edges = np.histogramdd(
        points, bins=edges_arg, range=bounds, weights=weights, density=bool(density)
    )
    from .creation import tensor

    dtype = points_in.dtype
    return HistogramddResult(
        tensor(hist, dtype=dtype), tuple(tensor(e, dtype=dtype) for e in edges)
    )


# -- norms ---------------------------------------------------------------------------------------
def frobenius_norm(input: Any, dim: Any, keepdim: bool = False) -> Any:  # noqa: A002
    """``sqrt(sum(input ** 2))`` over ``dim`` (one or two dimensions; torch's deprecated
    form of ``linalg.vector_norm(input, 2, dim, keepdim)``)."""
    op = "frobenius_norm"
    _tensor(op, input)
    dims = (dim,) if isinstance(dim, numbers.Integral) else tuple(dim)
    if len(dims) > 2:
        raise ShapeError(f"{op}: expected at most 2 dimensions, got {len(dims)}: {dims}")
    return vector_norm(input, 2, dim=dims, keepdim=keepdim)


def nuclear_norm(input: Any, dim: Any = None, keepdim: bool = False) -> Any:  # noqa: A002
    """The sum of the singular values of the matrices over ``dim`` (two dimensions; the last
    two of a matrix by default; torch's deprecated form of ``linalg.matrix_norm(input, "nuc",
    dim, keepdim)``)."""
    op = "nuclear_norm"
    _tensor(op, input)
    if isinstance(dim, bool) and keepdim is False:  # torch.nuclear_norm(input, keepdim)
        dim, keepdim = None, dim
    if dim is None:  # torch's: the last two dimensions, any leading ones a batch
        if input.ndim < 2:
            raise ShapeError(
                f"{op}: expected a tensor of at least 2 dimensions without dim, "
                f"got {shape_text(input.shape)}"
            )
        dim = (-2, -1)
    dims = tuple(dim)
    if len(dims) != 2:
        raise ShapeError(f"{op}: dim must name 2 dimensions, got {dims}")
    return matrix_norm(input, "nuc", dim=dims, keepdim=keepdim)
