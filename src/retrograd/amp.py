"""torch's automatic mixed precision names: ``autocast`` and ``GradScaler`` (``torch.amp``,
``torch.autocast``, ``torch.cuda.amp``), so that training scripts written for AMP run.

*autocast.* Inside an enabled region, the ops on torch's autocast lists for the region's
device type compute as torch's do (:mod:`retrograd.tensor.autocasting`): on the CPU, matrix
products, convolutions, ``linear``, ``prelu`` and attention in the region's dtype (bfloat16
by default), the losses, ``prod``, ``cdist``, the linear algebra and a few poolings and
paddings in float32; every other op in its inputs' dtypes. Parameters stay float32 and get
float32 gradients (each cast's backward casts back), the casts of parameters are cached for
the outermost region (``cache_enabled``), regions nest, ``enabled=False`` turns autocast off
inside an enabled region, and ``autocast`` is a decorator too. The state is per thread and
per device type, as torch's (:func:`retrograd.is_autocast_enabled`,
:func:`retrograd.get_autocast_dtype`). A region for ``"cuda"`` while no backend computes on
a GPU is turned off with torch's warning; only tensors on the region's device type are cast.

A backend without the region's dtype (``NumpyBackend`` holds neither bfloat16 nor float16)
computes the block in the inputs' own dtypes -- the results torch would round to bfloat16 or
float16 are kept at full precision -- and the region warns once that it does so; use
``rg.Autodiff(rg.TorchBackend())`` for mixed precision.

*custom_fwd / custom_bwd.* torch's decorators of a custom ``Function``'s ``forward`` and
``backward``: with ``cast_inputs``, inside an enabled region, forward runs with autocast off
on its floating inputs cast; backward runs under the autocast state forward ran in.

*GradScaler.* Dynamic loss scaling as torch's, with the gradients a value (``backward()``
returns them; API.md section 3), so its calls take them where torch's read them from the
parameters::

    grads = scaler.scale(loss).backward()
    scaler.unscale_(optimizer, grads)          # optional, before clipping
    rg.nn.utils.clip_grad_norm_(grads, model.parameters(), 1.0)
    scaler.step(optimizer, grads)              # skipped when a gradient is inf or NaN
    scaler.update()

``enabled=False`` makes every call a pass-through (``scale`` returns the loss, ``step`` calls
``optimizer.step(grads)``); so does a scaler for ``"cuda"`` (the default device, and
``cuda.amp.GradScaler``'s) where no backend computes on a GPU, with torch's warning, as
torch's turns itself off without CUDA. Enabled, the scale starts at ``init_scale``, is multiplied by
``backoff_factor`` after a step with non-finite gradients (which is skipped) and by
``growth_factor`` after ``growth_interval`` finite steps in a row, as torch's. The scale is a
float32 value, as torch's scale tensor: each new scale is rounded to float32 (a growth that
would overflow float32 is not made), and gradients are unscaled by the float32 reciprocal.

>>> import retrograd as rg
>>> with rg.autocast("cpu", enabled=False):
...     rg.ones((2,)).sum().item()
2.0
"""

from __future__ import annotations

import functools
import warnings
from typing import Any

import numpy as np

from .context import current_backend
from .errors import (
    AutodiffError,
    DTypeError,
    GradientDTypeError,
    InvalidArgumentError,
    ScalerOrderError,
    check_callable,
    guard,
)
from .tensor.autocasting import DEFAULT_DTYPES, cast_floats, state

# the cache flag's functions are torch's top-level names (``torch.is_autocast_cache_enabled``)
__all__ = ["GradScaler", "autocast", "custom_bwd", "custom_fwd", "is_autocast_available"]

_DEVICE_TYPES = ("cpu", "cuda", "mps", "xpu", "hpu", "xla", "meta")
_LOWER_DTYPES = ("bfloat16", "float16")
_warned_no_dtype: set[str] = set()  # the backends already warned of (by name)


def is_autocast_cache_enabled() -> bool:
    """torch's ``torch.is_autocast_cache_enabled()``: True unless set off (per thread)."""
    return state.cache_enabled


def set_autocast_cache_enabled(enabled: bool) -> None:
    """torch's: sets the flag :func:`is_autocast_cache_enabled` reads (a bool, as torch's)."""
    if not isinstance(enabled, bool):
        raise DTypeError(
            f"set_autocast_cache_enabled: enabled must be a bool (got {type(enabled).__name__})"
        )
    state.cache_enabled = enabled


def clear_autocast_cache() -> None:
    """torch's: empties autocast's cache of cast weights (the outermost region's end does)."""
    state.cache.clear()


def is_autocast_available(device_type: str) -> bool:
    """Whether torch's autocast knows ``device_type`` (every device type but ``"meta"``);
    an unknown one is refused, as torch refuses it."""
    if not isinstance(device_type, str) or device_type not in _DEVICE_TYPES:
        raise InvalidArgumentError(
            f"is_autocast_available: expected one of {list(_DEVICE_TYPES)} as device_type, got "
            f"{device_type!r}"
        )
    return device_type != "meta"


def _dtype_name(op: str, dtype: Any) -> str:
    from .tensor.dtypes import canonical_dtype

    return canonical_dtype(op, dtype)  # type: ignore[return-value]


class autocast:  # noqa: N801 (torch's name)
    """torch's ``autocast(device_type, dtype=None, enabled=True, cache_enabled=None)``: a
    context manager and decorator; see the module docstring for what it does."""

    def __init__(
        self,
        device_type: str,
        dtype: Any = None,
        enabled: bool = True,
        cache_enabled: bool | None = None,
    ):
        if not isinstance(device_type, str) or device_type not in _DEVICE_TYPES:
            raise InvalidArgumentError(
                f"autocast: device_type must be one of {list(_DEVICE_TYPES)}, got {device_type!r}"
            )
        if device_type == "meta":
            raise InvalidArgumentError(
                "autocast: unsupported autocast device_type 'meta' (as torch's)"
            )
        # torch's parser takes a bool alone (an int or a NumPy bool too is a TypeError): a
        # str's truth would turn autocast on for enabled="False"
        for name, flag in (("enabled", enabled), ("cache_enabled", cache_enabled)):
            if not (isinstance(flag, bool) or (name == "cache_enabled" and flag is None)):
                raise DTypeError(f"autocast: {name} must be a bool, got {flag!r}")
        self.device = self.device_type = device_type
        self.fast_dtype = (
            state.dtypes.get(device_type, DEFAULT_DTYPES.get(device_type, "float32"))
            if dtype is None
            else _dtype_name("autocast", dtype)
        )
        self.dtype = dtype
        self._cache_enabled = state.cache_enabled if cache_enabled is None else bool(cache_enabled)
        self.cache_enabled = cache_enabled
        enabled = bool(enabled)
        if enabled and device_type == "cuda" and current_backend().default_device.kind != "cuda":
            warnings.warn(
                "autocast: CUDA is not available (no backend computes on a GPU). Disabling "
                "autocast.",
                UserWarning,
                stacklevel=2,
            )
            enabled = False
        elif enabled and self.fast_dtype not in _LOWER_DTYPES:
            warnings.warn(
                f"autocast: in {device_type.upper()} autocast, but the target dtype "
                f"{self.fast_dtype} is not supported (only bfloat16 and float16). Disabling "
                "autocast.",
                UserWarning,
                stacklevel=2,
            )
            enabled = False
        self._enabled = self.enabled = enabled

    def __enter__(self) -> autocast:
        device = self.device
        self._prev_cache_enabled = state.cache_enabled
        self._prev = state.enabled.get(device, False)
        self._prev_dtype = state.dtypes.get(device)
        state.enabled[device] = self._enabled
        state.dtypes[device] = self.fast_dtype
        state.nesting += 1
        state.cache_enabled = self._cache_enabled
        state.refresh()
        if self._enabled:
            backend = current_backend()
            if not backend.has_dtype(self.fast_dtype) and backend.name not in _warned_no_dtype:
                _warned_no_dtype.add(backend.name)
                warnings.warn(
                    f"autocast: {backend.name} has no {self.fast_dtype}; ops inside compute in "
                    "their inputs' dtypes (full precision where torch would round to "
                    f"{self.fast_dtype}). Use rg.Autodiff(rg.TorchBackend()) for mixed "
                    "precision.",
                    RuntimeWarning,
                    stacklevel=2,
                )
        return self

    def __exit__(self, *exc: object) -> None:
        device = self.device
        state.nesting -= 1
        if state.nesting == 0:
            state.cache.clear()
        state.enabled[device] = self._prev
        if self._prev_dtype is None:
            state.dtypes.pop(device, None)
        else:
            state.dtypes[device] = self._prev_dtype
        state.cache_enabled = self._prev_cache_enabled
        state.refresh()

    def __call__(self, fn: Any) -> Any:
        # torch: "autocast()(func) requires a callable"; a tensor or an int decorated failed
        # only when called, far from the mistake
        check_callable("autocast", fn, "the function it decorates")

        @functools.wraps(fn)
        def run(*args: Any, **kwargs: Any) -> Any:
            with self:
                return fn(*args, **kwargs)

        return run


def _device_type_of(op: str, device_type: str | None) -> str:
    if device_type is not None and device_type not in _DEVICE_TYPES:
        raise InvalidArgumentError(
            f"{op}: device_type must be one of {list(_DEVICE_TYPES)}, got {device_type!r}"
        )
    return device_type or "cuda"  # torch.cuda.amp's forms name no device type


def custom_fwd(fwd: Any = None, *, device_type: str | None = None, cast_inputs: Any = None) -> Any:
    """torch's decorator of a custom ``Function``'s ``forward`` (``@custom_fwd(device_type=
    "cuda", cast_inputs=torch.float32)``): records the autocast state forward runs in (for
    :func:`custom_bwd`); with ``cast_inputs``, inside an enabled region, forward runs with
    autocast off on its floating inputs (on ``device_type``, not float64) cast to that dtype.
    ``torch.amp``'s form names the ``device_type``; ``torch.cuda.amp``'s
    (:mod:`retrograd.cuda.amp`) does not."""
    device = _device_type_of("custom_fwd", device_type)
    if fwd is None:
        return lambda f: custom_fwd(f, device_type=device_type, cast_inputs=cast_inputs)
    target = None if cast_inputs is None else _dtype_name("custom_fwd", cast_inputs)

    @functools.wraps(fwd)
    def decorate_fwd(*args: Any, **kwargs: Any) -> Any:
        ctx = args[0] if args else None
        autocasting = state.enabled.get(device, False)
        if ctx is not None:
            ctx._dtype = state.dtypes.get(device, DEFAULT_DTYPES.get(device, "float32"))
            ctx._fwd_used_autocast = autocasting and target is None
        if target is None or not autocasting:
            return fwd(*args, **kwargs)
        with autocast(device, enabled=False):
            args, kwargs = cast_floats(args, kwargs, device, target)
            return fwd(*args, **kwargs)

    return decorate_fwd


def custom_bwd(bwd: Any = None, *, device_type: str | None = None) -> Any:
    """torch's decorator of a custom ``Function``'s ``backward``, which runs it under the
    autocast state its forward (decorated by :func:`custom_fwd`) ran in."""
    device = _device_type_of("custom_bwd", device_type)
    if bwd is None:
        return lambda f: custom_bwd(f, device_type=device_type)

    @functools.wraps(bwd)
    def decorate_bwd(*args: Any, **kwargs: Any) -> Any:
        ctx = args[0] if args else None
        enabled = bool(getattr(ctx, "_fwd_used_autocast", False))
        dtype = getattr(ctx, "_dtype", None)
        region = autocast(device, dtype=dtype, enabled=False)
        region._enabled = enabled  # (forward's state, taken as it was: no availability check)
        with region:
            return bwd(*args, **kwargs)

    return decorate_bwd


def _float32(value: float) -> float:
    """``value`` rounded to float32 (torch's scale tensor holds one), ``inf`` past its range."""
    with np.errstate(over="ignore"):
        return float(np.float32(value))


class GradScaler:
    """torch's ``GradScaler(device="cuda", init_scale=2.0**16, growth_factor=2.0,
    backoff_factor=0.5, growth_interval=2000, enabled=True)``; see the module docstring."""

    def __init__(
        self,
        device: str = "cuda",
        init_scale: float = 2.0**16,
        growth_factor: float = 2.0,
        backoff_factor: float = 0.5,
        growth_interval: int = 2000,
        enabled: bool = True,
    ):
        enabled = bool(enabled)
        # torch's: a scaler for "cuda" where CUDA cannot compute turns itself off, with its
        # warning (as autocast's region does), and then checks none of its factors. A script
        # written for the GPU then steps unscaled on the CPU, as under torch: the same scale
        # (1.0), the same empty state_dict, and a step with an inf gradient taken, not skipped
        if enabled and device == "cuda" and current_backend().default_device.kind != "cuda":
            warnings.warn(
                "GradScaler: CUDA is not available (no backend computes on a GPU). Disabling.",
                UserWarning,
                stacklevel=2,
            )
            enabled = False
        if enabled and not growth_factor > 1.0:
            raise InvalidArgumentError(
                f"GradScaler: growth_factor must be > 1, got {growth_factor}"
            )
        if enabled and not 0.0 < backoff_factor < 1.0:
            raise InvalidArgumentError(
                f"GradScaler: backoff_factor must be in (0, 1), got {backoff_factor}"
            )
        self.device = device
        self._enabled = enabled
        self._scale = _float32(init_scale)
        self._growth_factor, self._backoff_factor = float(growth_factor), float(backoff_factor)
        self._growth_interval = int(growth_interval)
        self._growth_tracker = 0
        # id(optimizer) -> found inf this iteration (a device flag until read, None: no grads)
        self._unscaled: dict[int, Any] = {}
        self._stepped: set[int] = set()  # id(optimizer) of those stepped this iteration

    def is_enabled(self) -> bool:
        return self._enabled

    def get_scale(self) -> float:
        """The current scale (1.0 when disabled, as torch's)."""
        return self._scale if self._enabled else 1.0

    def get_growth_factor(self) -> float:
        return self._growth_factor

    def get_backoff_factor(self) -> float:
        return self._backoff_factor

    def get_growth_interval(self) -> int:
        return self._growth_interval

    def scale(self, outputs: Any) -> Any:
        """``outputs`` (a tensor, or nested lists/tuples of them) times the scale."""
        if not self._enabled:
            return outputs
        if isinstance(outputs, list | tuple):
            return type(outputs)(self.scale(o) for o in outputs)
        if hasattr(outputs, "backward"):  # a tensor (this module sits below the tensor API)
            return outputs * self._scale
        raise InvalidArgumentError(
            f"GradScaler.scale: outputs must be tensors, got {type(outputs).__name__}"
        )

    def unscale_(self, optimizer: Any, grads: Any = None) -> None:
        """Divide the gradients of ``optimizer``'s parameters in ``grads`` by the scale, in
        place, and note whether any is inf or NaN (then :meth:`step` skips the step)."""
        if not self._enabled:
            return
        if grads is None:
            raise AutodiffError(
                "GradScaler.unscale_: pass the gradients backward() returned, "
                "scaler.unscale_(optimizer, grads) (gradients are a value here)"
            )
        if id(optimizer) in self._stepped:
            raise AutodiffError("GradScaler.unscale_: unscale_() is being called after step()")
        if id(optimizer) in self._unscaled:
            raise AutodiffError(
                "GradScaler.unscale_: unscale_() has already been called on this optimizer "
                "since the last update()"
            )
        # torch's reciprocal of the float32 scale, in float64 then rounded to float32
        inverse = _float32(1.0 / self._scale)
        # one flag on the device for all the gradients, read once in step() (torch reads its
        # found_inf once per device): a read per gradient stalled an accelerator each time
        found_inf = None
        for group in optimizer.param_groups:
            for parameter in group["params"]:
                grad = parameter.grad(grads)
                if grad is None:
                    continue
                if grad.dtype == "float16":
                    raise GradientDTypeError(
                        "GradScaler.unscale_: attempting to unscale float16 gradients (keep "
                        "the parameters in float32; float16 is for the computation)"
                    )
                # (the scaled gradient is checked, as torch's kernel does)
                nonfinite = grad.isfinite().all().logical_not()
                found_inf = nonfinite if found_inf is None else found_inf.logical_or(nonfinite)
                parameter.grad_replace(grads, grad * inverse)
        self._unscaled[id(optimizer)] = found_inf

    def step(self, optimizer: Any, grads: Any = None, *args: Any, **kwargs: Any) -> Any:
        """``optimizer.step(grads)`` on the unscaled gradients, unless one is inf or NaN;
        returns what the step returned (``None`` when skipped). Once per optimizer between
        two :meth:`update` calls, without a closure, as torch's."""
        if not callable(getattr(optimizer, "step", None)):
            raise InvalidArgumentError(
                f"GradScaler.step: optimizer must be an optimizer, got {type(optimizer).__name__}"
            )
        if not self._enabled:
            return optimizer.step(grads, *args, **kwargs)
        if "closure" in kwargs:
            raise AutodiffError(
                "GradScaler.step: closure use is not supported while GradScaler is enabled"
            )
        if id(optimizer) in self._stepped:
            raise AutodiffError(
                "GradScaler.step: step() has already been called since the last update()"
            )
        if id(optimizer) not in self._unscaled:
            self.unscale_(optimizer, grads)
        if self._unscaled[id(optimizer)] is None:  # (torch asserts, before the step is noted)
            raise ScalerOrderError(
                "GradScaler.step: no inf checks were recorded for this optimizer (none of its "
                "parameters has a gradient in grads)"
            )
        self._stepped.add(id(optimizer))
        if self._found_inf(optimizer):
            return None
        return optimizer.step(grads, *args, **kwargs)

    def _found_inf(self, optimizer: Any) -> bool:
        """Whether ``optimizer``'s unscaled gradients held an inf or NaN (``optimizer`` or its
        id): the device flag read on the host once, then kept as a bool."""
        key = optimizer if isinstance(optimizer, int) else id(optimizer)
        flag = self._unscaled[key]
        if flag is not None and not isinstance(flag, bool):
            flag = bool(flag.item())
        self._unscaled[key] = bool(flag)
        return self._unscaled[key]

    def update(self, new_scale: Any = None) -> None:
        """Back off the scale after a skipped step, grow it after ``growth_interval`` good
        ones; or set it to ``new_scale``. Without ``new_scale``, after at least one
        :meth:`step` (or :meth:`unscale_`) since the last update, as torch's."""
        if not self._enabled:
            return
        if new_scale is not None:
            self._scale = _float32(new_scale.item() if hasattr(new_scale, "item") else new_scale)
        elif all(flag is None for flag in self._unscaled.values()):  # (no gradient checked)
            raise ScalerOrderError(
                "GradScaler.update: no inf checks were recorded prior to update(); call "
                "scaler.step(optimizer, grads) first"
            )
        elif any(self._found_inf(optimizer_id) for optimizer_id in list(self._unscaled)):
            self._scale = _float32(self._scale * self._backoff_factor)
            self._growth_tracker = 0
        else:
            self._growth_tracker += 1
            if self._growth_tracker == self._growth_interval:
                grown = _float32(self._scale * self._growth_factor)
                if np.isfinite(grown):  # (not past float32's range, as torch's)
                    self._scale = grown
                self._growth_tracker = 0
        self._begin_iteration()

    def _begin_iteration(self) -> None:
        """The optimizers' marks of the iteration dropped together, as torch replaces its
        per-optimizer states at once: clearing one and then the other let an interrupt
        (Ctrl-C) between them leave the optimizers marked stepped with no inf check
        recorded, and then every ``unscale_``, ``step`` and ``update`` refused (round 67)."""
        self._unscaled, self._stepped = {}, set()

    def state_dict(self) -> dict[str, Any]:
        if not self._enabled:
            return {}
        return {
            "scale": self._scale,
            "growth_factor": self._growth_factor,
            "backoff_factor": self._backoff_factor,
            "growth_interval": self._growth_interval,
            "_growth_tracker": self._growth_tracker,
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if not self._enabled:
            return
        if not state_dict:
            raise InvalidArgumentError(
                "GradScaler.load_state_dict: the state dict is empty (saved from a disabled scaler)"
            )
        scale, tracker = state_dict["scale"], state_dict["_growth_tracker"]
        # every value read before any is set: a state that fails half-way changes nothing
        values = (
            _float32(scale.item() if hasattr(scale, "item") else scale),
            float(state_dict["growth_factor"]),
            float(state_dict["backoff_factor"]),
            int(state_dict["growth_interval"]),
            int(tracker.item() if hasattr(tracker, "item") else tracker),
        )
        (self._scale, self._growth_factor, self._backoff_factor, self._growth_interval,
         self._growth_tracker) = values  # fmt: skip


# A str given for the scale, an int for a state dict: the hierarchy's errors naming the method
# (errors.guard), not float()'s or a subscript's. ``step`` runs the optimizer's step (and the
# user's closure), whose exceptions pass unchanged.
for _method in ("__init__", "scale", "unscale_", "update", "state_dict", "load_state_dict"):
    _op = "GradScaler" if _method == "__init__" else f"GradScaler.{_method}"
    setattr(
        GradScaler,
        _method,
        guard(_op, vars(GradScaler)[_method], GradScaler, f"GradScaler.{_method}"),
    )
del _method, _op
