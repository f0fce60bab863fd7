"""retrograd: reverse-mode automatic differentiation as a backend decorator.

>>> import retrograd as rg
>>> x = rg.tensor([1.0, 2.0, 3.0]).require_grad()
>>> grads = (x.exp() * x).sum().backward()
>>> x.grad(grads).shape
retrograd.Size([3])
"""

from . import distributed, nn, optim
from .autodiff import (
    Autodiff,
    BalancedCheckpointing,
    BudgetCheckpointing,
    CheckpointStrategy,
    Gradients,
    NoCheckpointing,
    enable_grad,
    is_grad_enabled,
    no_grad,
    set_grad_enabled,
)
from .autodiff.params import ParamId
from .backend import Backend, NumpyBackend
from .capture import CapturedStep, CaptureError, capture
from .context import current_backend, default_backend, set_default_backend, use_backend
from .device import Device
from .errors import (
    AutodiffError,
    DeviceUnavailableError,
    DistributedError,
    DTypeError,
    IndexOutOfRangeError,
    InvalidArgumentError,
    OutOfMemoryError,
    RetrogradError,
    ShapeError,
)
from .errors import guard_namespace as _guard_namespace
from .tensor import (
    Tensor,
    arange,
    cat,
    eye,
    flatten,
    full,
    multinomial,
    ones,
    ones_like,
    rand,
    randn,
    random,
    seed,
    stack,
    tensor,
    topk,
    tril,
    triu,
    zeros,
    zeros_like,
)

# isort: split
# -- torch's surface (API.md section 10): each name as torch's ``torch.<name>`` ------------------
import math as _math
import sys as _sys

from . import (
    _C,  # noqa: F401 (private, as torch's: torchaudio's modules call _log_api_usage_once)
    __future__,  # noqa: F401 (torch.__future__'s conversion flags)
    _dynamo,  # noqa: F401 (private, as torch's: scripts set rg._dynamo.config...)
    _inductor,  # noqa: F401
    accelerator,
    amp,
    ao,
    autograd,
    backends,
    compiler,
    counting,  # noqa: F401 (torch.utils.flop_counter's home, registered below)
    cpu,
    cuda,
    distributions,
    export,  # noqa: F401 (torch.export, refused by name)
    fft,
    func,
    futures,
    fx,
    hub,
    jit,
    library,  # noqa: F401 (torch.library: custom ops)
    linalg,
    mps,
    multiprocessing,
    nested,
    onnx,
    onnx_operators,  # noqa: F401 (torch.onnx.operators, registered by module_paths)
    profiler,
    quasirandom,
    return_types,
    signal,
    sparse,
    special,
    testing,
    torch_version,
    utils,
    version,
    xpu,
)
from ._dynamo import compile  # noqa: A004 (torch.compile)
from .amp import GradScaler, autocast
from .autograd import (
    inference_mode,
    is_anomaly_check_nan_enabled,
    is_anomaly_enabled,
    is_inference_mode_enabled,
    set_anomaly_enabled,
    vmap,
)
from .defaults import (
    autocast_decrement_nesting,
    autocast_increment_nesting,
    clear_autocast_cache,
    get_autocast_cpu_dtype,
    get_autocast_dtype,
    get_autocast_gpu_dtype,
    get_autocast_ipu_dtype,
    get_autocast_xla_dtype,
    get_default_device,
    is_autocast_cache_enabled,
    is_autocast_cpu_enabled,
    is_autocast_enabled,
    is_autocast_ipu_enabled,
    is_autocast_xla_enabled,
    set_autocast_cache_enabled,
    set_autocast_cpu_dtype,
    set_autocast_cpu_enabled,
    set_autocast_dtype,
    set_autocast_enabled,
    set_autocast_gpu_dtype,
    set_autocast_ipu_dtype,
    set_autocast_ipu_enabled,
    set_autocast_xla_dtype,
    set_autocast_xla_enabled,
    set_default_device,
)
from .device import Device as device  # noqa: N813 (torch's name)
from .distributions.special import torch_sample_dirichlet as _sample_dirichlet  # noqa: F401
from .distributions.special import torch_standard_gamma as _standard_gamma  # noqa: F401
from .jit import _assert  # noqa: F401 (torch._assert, a private name model code calls)
from .library import ops  # noqa: F401 (torch.ops: the custom ops, by namespace)
from .linalg import (  # top level in torch
    geqrf,
    lu_unpack,
    orgqr,
    ormqr,
    pca_lowrank,
    svd_lowrank,
)
from .nn.functional import torch_forms as _torch_forms
from .nn.functional.torch_forms import *  # noqa: F403 (torch.dropout, torch.embedding...)
from .runtime_settings import (
    are_deterministic_algorithms_enabled,
    can_cast,
    get_default_dtype,
    get_deterministic_debug_mode,
    get_float32_matmul_precision,
    get_num_interop_threads,
    get_num_threads,
    get_printoptions,
    is_deterministic_algorithms_warn_only_enabled,
    is_warn_always_enabled,
    promote_types,
    result_type,
    set_default_dtype,
    set_default_tensor_type,
    set_deterministic_debug_mode,
    set_float32_matmul_precision,
    set_flush_denormal,
    set_num_interop_threads,
    set_num_threads,
    set_printoptions,
    set_warn_always,
    use_deterministic_algorithms,
)
from .serialization import load, save
from .signal import istft, stft
from .sparse import sparse_coo_tensor, spmm
from .tensor import (
    as_tensor,
    asarray,
    empty,
    empty_like,
    from_numpy,
    full_like,
    linspace,
    logspace,
    normal,
    poisson,
    rand_like,
    randint,
    randint_like,
    randn_like,
    randperm,
    scalar_tensor,
)
from .tensor import assembly as _assembly
from .tensor import foreach as _foreach
from .tensor import functions as _functions
from .tensor import torch_functions as _torch_functions
from .tensor.assembly import *  # noqa: F403 (more function forms: assembly.__all__)
from .tensor.complexes import complex, polar, view_as_complex, view_as_real  # noqa: A004 (torch's names)
from .tensor.creation import torch_range as range  # noqa: A004 (torch's deprecated range)
from .tensor.dtypes import DTYPE_OBJECTS as _DTYPES
from .tensor.dtypes import Size, dtype, finfo, iinfo
from .tensor.functions import *  # noqa: F403 (torch's function forms: functions.__all__)
from .tensor.generator import (
    Generator,
    default_generator,
    get_rng_state,
    initial_seed,
    manual_seed,
    set_rng_state,
    thread_safe_generator,
)
from .tensor.generator import random_namespace as random  # noqa: F811 (rg.random, callable)
from .tensor.layouts import (
    channels_last,
    channels_last_3d,
    contiguous_format,
    jagged,
    layout,
    memory_format,
    preserve_format,
    sparse_coo,
    strided,
)
from .tensor.layouts import factory_options as _factory_options
from .tensor.legacy import (
    BFloat16Tensor,
    BoolTensor,
    ByteTensor,
    CharTensor,
    DoubleTensor,
    FloatTensor,
    HalfTensor,
    IntTensor,
    LongTensor,
    ShortTensor,
)
from .tensor.special import xlogy
from .tensor.storage import TypedStorage, UntypedStorage, is_storage
from .tensor.torch_functions import *  # noqa: F403 (more function forms: torch_functions.__all__)

# dtypes, under torch's names and aliases (each a str: rg.float32 == "float32")
float32 = _DTYPES["float32"]
float64 = _DTYPES["float64"]
float16 = _DTYPES["float16"]
bfloat16 = _DTYPES["bfloat16"]
int64 = _DTYPES["int64"]
int32 = _DTYPES["int32"]
int16 = _DTYPES["int16"]
int8 = _DTYPES["int8"]
uint8 = _DTYPES["uint8"]
complex64 = _DTYPES["complex64"]
complex128 = _DTYPES["complex128"]
bool = _DTYPES["bool"]  # noqa: A001 (torch's name)
float = float32  # noqa: A001 (torch's name)
double = float64
half = float16
long = int64
int = int32  # noqa: A001 (torch's name)
short = int16
cfloat = complex64
cdouble = complex128
pi = 3.141592653589793
e = 2.718281828459045
inf = _math.inf
nan = _math.nan

__version__ = version.__version__
newaxis = None  # torch's alias of None in indexing (``x[:, rg.newaxis]``)

# torch's low-rank methods draw their sketch by ``torch.randn`` looked up when called: the
# same here, so a program that replaces or seeds ``rg.randn`` draws the same sketch
linalg.draw_sketches_with(lambda *size, **options: _sys.modules[__name__].randn(*size, **options))

# torch.sparse carries the torch module (it imports it), and real code reaches the package
# through it (``torch.sparse.torch.eye(n)``): the same here (sparse may not import the package)
sparse.torch = _sys.modules[__name__]


def __getattr__(name: str):
    """``rg.TorchBackend``, resolved on first use: ``import retrograd`` must not need torch."""
    if name == "TorchBackend":
        from .backend import torch_backend

        return torch_backend.TorchBackend
    raise AttributeError(f"module 'retrograd' has no attribute {name!r}")


__all__ = [
    "Autodiff",
    "AutodiffError",
    "Backend",
    "BalancedCheckpointing",
    "BudgetCheckpointing",
    "CaptureError",
    "CapturedStep",
    "CheckpointStrategy",
    "DTypeError",
    "Device",
    "DeviceUnavailableError",
    "DistributedError",
    "Gradients",
    "IndexOutOfRangeError",
    "InvalidArgumentError",
    "NoCheckpointing",
    "NumpyBackend",
    "OutOfMemoryError",
    "ParamId",
    "RetrogradError",
    "ShapeError",
    "Tensor",
    "arange",
    "capture",
    "cat",
    "current_backend",
    "default_backend",
    "distributed",
    "enable_grad",
    "eye",
    "flatten",
    "full",
    "is_grad_enabled",
    "multinomial",
    "nn",
    "no_grad",
    "ones",
    "ones_like",
    "optim",
    "rand",
    "randn",
    "random",
    "range",
    "seed",
    "set_default_backend",
    "set_grad_enabled",
    "stack",
    "tensor",
    "topk",
    "tril",
    "triu",
    "use_backend",
    "zeros",
    "zeros_like",
]

# torch's surface (API.md section 10)
__all__ += [
    *_functions.__all__,
    *_assembly.__all__,
    "BFloat16Tensor",
    "BoolTensor",
    "ByteTensor",
    "CharTensor",
    "DoubleTensor",
    "FloatTensor",
    "HalfTensor",
    "IntTensor",
    "LongTensor",
    "ShortTensor",
    "Size",
    "as_tensor",
    "asarray",
    "autograd",
    "bfloat16",
    "bool",
    "cdouble",
    "cfloat",
    "complex",
    "complex128",
    "complex64",
    "device",
    "distributions",
    "double",
    "dtype",
    "e",
    "empty",
    "empty_like",
    "finfo",
    "float",
    "float16",
    "float32",
    "float64",
    "from_numpy",
    "full_like",
    "half",
    "iinfo",
    "inf",
    "inference_mode",
    "int",
    "int16",
    "int32",
    "int64",
    "int8",
    "linspace",
    "load",
    "lu_unpack",
    "geqrf",
    "orgqr",
    "ormqr",
    "logspace",
    "long",
    "manual_seed",
    "nan",
    "normal",
    "poisson",
    "pi",
    "rand_like",
    "randint",
    "randint_like",
    "randn_like",
    "randperm",
    "save",
    "scalar_tensor",
    "short",
    "testing",
    "uint8",
    "utils",
]
# memory formats, torch.futures, the default device and autocast state
__all__ += [
    "Generator",
    "accelerator",
    "ao",
    "channels_last",
    "channels_last_3d",
    "clear_autocast_cache",
    "contiguous_format",
    "cuda",
    "fft",
    "func",
    "futures",
    "fx",
    "get_autocast_cpu_dtype",
    "get_autocast_dtype",
    "get_autocast_gpu_dtype",
    "get_default_device",
    "get_rng_state",
    "hub",
    "initial_seed",
    "is_autocast_cache_enabled",
    "is_autocast_cpu_enabled",
    "is_autocast_enabled",
    "linalg",
    "memory_format",
    "mps",
    "multiprocessing",
    "onnx",
    "preserve_format",
    "profiler",
    "quasirandom",
    "set_autocast_cache_enabled",
    "set_default_device",
    "set_rng_state",
    "signal",
    "special",
]
# torch's layouts and the forms that cannot hold here (unsupported.py, each a clear error):
# complex, nested; sparse COO tensors (sparse.py, tensor/sparse_coo.py)
__all__ += [
    "istft",
    "jagged",
    "layout",
    "nested",
    "polar",
    "sparse_coo",
    "sparse_coo_tensor",
    "spmm",
    "strided",
    "view_as_complex",
    "view_as_real",
]
__all__ += ["jit", "vmap", "xlogy"]
__all__ += ["stft"]  # torch's stft in its real form (signal.py)
# more of torch's names scripts call (tensor/torch_functions.py, return_types.py, cpu.py,
# version.py, the process-wide flags of defaults.py, runtime_settings.py and autograd)
__all__ += [
    *_torch_functions.__all__,
    "GradScaler",
    "TypedStorage",
    "UntypedStorage",
    "autocast_decrement_nesting",
    "autocast_increment_nesting",
    "clear_autocast_cache",
    "cpu",
    "default_generator",
    "get_autocast_ipu_dtype",
    "get_autocast_xla_dtype",
    "get_deterministic_debug_mode",
    "is_anomaly_check_nan_enabled",
    "is_anomaly_enabled",
    "is_autocast_cache_enabled",
    "is_autocast_ipu_enabled",
    "is_autocast_xla_enabled",
    "is_deterministic_algorithms_warn_only_enabled",
    "is_inference_mode_enabled",
    "is_storage",
    "is_warn_always_enabled",
    "newaxis",
    "pca_lowrank",
    "return_types",
    "set_anomaly_enabled",
    "set_autocast_cache_enabled",
    "set_autocast_cpu_dtype",
    "set_autocast_cpu_enabled",
    "set_autocast_dtype",
    "set_autocast_enabled",
    "set_autocast_gpu_dtype",
    "set_autocast_ipu_dtype",
    "set_autocast_ipu_enabled",
    "set_autocast_xla_dtype",
    "set_autocast_xla_enabled",
    "set_default_tensor_type",
    "set_deterministic_debug_mode",
    "set_warn_always",
    "svd_lowrank",
    "thread_safe_generator",
    "torch_version",
    "version",
    "xpu",
]
# torch's top-level forms of functional operations (torch.conv2d, torch.pdist, torch.dropout)
globals().update(
    {_name: getattr(nn.functional, _name) for _name in _torch_forms.SAME_AS_FUNCTIONAL}
)
__all__ += [*_torch_forms.SAME_AS_FUNCTIONAL, *_torch_forms.__all__]
# mixed precision, backend flags and process-wide settings (amp.py, backends.py,
# runtime_settings.py)
__all__ += [
    "amp",
    "are_deterministic_algorithms_enabled",
    "autocast",
    "backends",
    "can_cast",
    "compile",
    "compiler",
    "get_default_dtype",
    "get_float32_matmul_precision",
    "get_num_interop_threads",
    "get_num_threads",
    "get_printoptions",
    "promote_types",
    "result_type",
    "set_default_dtype",
    "set_float32_matmul_precision",
    "set_flush_denormal",
    "set_num_interop_threads",
    "set_num_threads",
    "set_printoptions",
    "use_deterministic_algorithms",
]

# torch's multi-tensor ops (``torch._foreach_mul_(exp_avgs, beta1)``), private names there too
globals().update(_foreach.functions())

# torch's function forms that take ``out=`` (the tensor methods of the same ops do not); the
# factories make their values in out's dtype when given none
for _name in (
    "angle",
    "bucketize",
    "chain_matmul",
    "column_stack",
    "concat",
    "concatenate",
    "conj_physical",
    "cummax",
    "cummin",
    "dstack",
    "float_power",
    "hstack",
    "inner",
    "multinomial",
    "nonzero",
    "polygamma",
    "pow",
    "row_stack",
    "searchsorted",
    "tensordot",
    "vstack",
):
    globals()[_name] = _functions.accepts_out(_name)(globals()[_name])
for _name in ("empty", "eye", "full", "linspace", "normal", "rand", "randn", "randperm"):
    globals()[_name] = _functions.accepts_out(_name, dtype_from_out=True)(globals()[_name])
# torch's factories take ``layout`` (strided only here) and ``pin_memory`` (a no-op here)
for _name in (
    "arange",
    "bartlett_window",
    "blackman_window",
    "empty",
    "empty_like",
    "eye",
    "full",
    "full_like",
    "hamming_window",
    "hann_window",
    "kaiser_window",
    "linspace",
    "logspace",
    "ones",
    "ones_like",
    "rand",
    "rand_like",
    "randint",
    "randint_like",
    "randn",
    "randn_like",
    "randperm",
    "range",
    "scalar_tensor",
    "tril_indices",
    "triu_indices",
    "zeros",
    "zeros_like",
):
    globals()[_name] = _factory_options(_name)(globals()[_name])
del _name

# The function forms of the tensor API answer arguments no check foresaw with an error of the
# hierarchy naming the function (errors.guard); internal code keeps calling the plain ones.
_guard_namespace(
    globals(),
    [
        name
        for name, value in list(globals().items())
        if not name.startswith("_")
        and getattr(value, "__module__", "").startswith("retrograd.tensor")
    ],
)
# ... and so do the process settings and their queries (``rg.get_num_threads(x)``,
# ``rg.can_cast(x)``: Python's TypeError about the call came out bare), which run no user
# code; ``compile``, ``vmap``, ``capture``, ``save``/``load`` and the backend context
# functions stay as they are (their callers' own exceptions pass through them unchanged)
_guard_namespace(
    globals(),
    [
        name
        for name, value in list(globals().items())
        if not name.startswith("_")
        and getattr(value, "__module__", "")
        in (
            "retrograd.runtime_settings",
            "retrograd.defaults",
            "retrograd.amp",
            "retrograd.autograd.anomaly_mode",
            "retrograd.autodiff.grad_mode",
            "retrograd.sparse",
        )
    ]
    + ["is_inference_mode_enabled"],
)

# torch's module paths that scripts import from (``from torch.optim.adam import Adam``), each
# answered where retrograd keeps the names (module_paths.py); last, once every name is here
from . import module_paths as _module_paths  # noqa: E402

_module_paths.install(_sys.modules[__name__])

# einops' operations and layers on retrograd tensors (einops/__init__.py): its backend is
# defined when einops is imported (at once if it is already), without importing einops here
from . import einops as _einops  # noqa: E402

_einops.register_with_einops()
