"""The fused update kernels' calling conventions, one declaration per algorithm.

SGD, Adam(W) and RMSprop each run one backend kernel per parameter (``Backend.sgd_update``,
``adam_update``, ``rmsprop_update``). A kernel takes the value, the gradient, the state's
buffers in a fixed order, the hyper-parameters in a fixed order and ``in_place``; it returns the
new value and the new buffers. A :class:`FusedUpdate` states that convention once. The eager
step (:func:`~.optimizers.sgd_update` and the others, on tensors through ``apply``) and a
captured step's replay (:class:`~.bound.BoundStep`, on the inner backend's raw values) both call
the kernel through it, so they cannot disagree on which buffer or setting goes where, and an
algorithm with a fused kernel is bound for replay by declaring it here and nowhere else.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from ..errors import DTypeError
from ..tensor import Tensor, zeros, zeros_like
from ..tensor.internal import apply

__all__ = ["ADAM", "RMSPROP", "SGD_MOMENTUM", "Buffer", "FusedUpdate", "empty_buffer"]

State = dict[str, Any]


class Buffer(NamedTuple):
    """One state buffer of a kernel, for given settings."""

    #: its name in the optimizer's per-parameter state
    key: str
    #: whether the settings use it; a buffer not used is passed empty and not kept
    used: bool
    #: what a used buffer missing from the state is passed as: ``"zeros"`` (zeros like the
    #: gradient; a captured replay leaves that first step to the eager path, which makes them)
    #: or ``"empty"`` (the kernel's own first step: SGD's momentum buffer starts as the step)
    start: str = "zeros"


_NUMBERS = frozenset({float, int, bool})


@dataclass(frozen=True)
class FusedUpdate:
    """A fused update kernel: its backend method, its hyper-parameters' names in argument
    order (``"step"`` is the state's step count, after this step), and its buffers for given
    settings (a mapping from those names to values).

    >>> [b.key for b in RMSPROP.buffers({"centered": False, "momentum": 0.9}) if b.used]
    ['square_avg', 'momentum_buffer']
    >>> SGD_MOMENTUM.hyper_values({"lr": 0.1, "momentum": 0.9, "dampening": 0.0,
    ...                            "weight_decay": 0.0, "nesterov": False}, {"step": 3})
    (0.1, 0.9, 0.0, 0.0, False)
    """

    kernel: str
    hyper: tuple[str, ...]
    buffers: Callable[[Mapping[str, Any]], tuple[Buffer, ...]]

    def hyper_values(self, settings: Mapping[str, Any], state: State) -> tuple:
        values = tuple(state["step"] if name == "step" else settings[name] for name in self.hyper)
        if all(type(value) in _NUMBERS for value in values):  # the common case: plain numbers
            return values
        # torch's one-element tensor lr (``group["lr"] = torch.tensor(...)``) as its number:
        # the torch backend's kernels took it for one of their own tensors and failed
        values = tuple(
            value.item() if isinstance(value, Tensor) and value.numel() == 1 else value
            for value in values
        )
        for name, value in zip(self.hyper, values):
            if type(value) not in _NUMBERS and not hasattr(value, "__float__"):
                # a group's entry set to a str or None between steps (a schedule's typo): named
                # here, before the kernel's arithmetic fails on it, in an eager step or a replay
                raise DTypeError(
                    f"{self.kernel}: hyper-parameter {name!r} of the parameter group must be a "
                    f"number, got {value!r}"
                )
        return values

    def ready(self, settings: Mapping[str, Any], state: State) -> bool:
        """Whether ``state`` holds every buffer the kernel cannot start by itself."""
        return all(
            state.get(b.key) is not None
            for b in self.buffers(settings)
            if b.used and b.start == "zeros"
        )

    def run(
        self,
        value: Tensor,
        grad: Tensor,
        state: State,
        settings: Mapping[str, Any],
        in_place: bool = False,
    ) -> tuple[Tensor, State]:
        """The pure update on tensors: ``(new value, new state)``; ``in_place`` lets the
        kernel write into ``value`` and the state's buffers (same bits), for a caller holding
        the only references to them (:func:`~.optimizers.sole_reference`)."""
        state = dict(state)
        buffers = self.buffers(settings)
        given = []
        for buffer in buffers:
            kept = state.get(buffer.key) if buffer.used else None
            if kept is None:
                start = buffer.used and buffer.start == "zeros"
                kept = zeros_like(grad) if start else empty_buffer(value)
            elif kept.dtype != value.dtype and kept.is_floating_point():
                # a buffer made before the model was cast (model.double()): computed in the
                # value's dtype, kept in its own by the step (torch's in-place update)
                kept = kept.cast(value.dtype)
            given.append(kept)
        hyper = (*self.hyper_values(settings, state), in_place)
        value, *news = apply(self.kernel, (value, grad, *given), hyper)
        for buffer, new in zip(buffers, news):
            if buffer.used:
                state[buffer.key] = new
        return value, state

    def run_inner(
        self,
        inner: Any,
        value: Any,
        grad: Any,
        state: State,
        settings: Mapping[str, Any],
        in_place: bool,
        empty: Any,
    ) -> tuple[Any, list[tuple[str, Tensor | None, Any]]]:
        """The kernel on ``inner``'s raw values, the state :meth:`ready`: the new raw value
        and, per buffer used, ``(key, the state's tensor, the new raw buffer)``."""
        used = [b.key if b.used else None for b in self.buffers(settings)]
        olds = [state.get(key) if key is not None else None for key in used]
        raws = [empty if old is None else old._prim for old in olds]
        hyper = self.hyper_values(settings, state)
        new, *news = getattr(inner, self.kernel)(value, grad, *raws, *hyper, in_place)
        kept = [(key, old, raw) for key, old, raw in zip(used, olds, news) if key is not None]
        return new, kept


#: Empty buffers (the kernels' "no buffer"), one per backend object, dtype and device: making
#: a tensor costs more than a small parameter's whole update, and a buffer of no elements is
#: never written.
_EMPTY: dict[tuple, tuple[Any, Tensor]] = {}


def empty_buffer(value: Tensor) -> Tensor:
    """An empty tensor of ``value``'s backend, dtype and device (shared, never written)."""
    key = (id(value.backend), value.dtype, value.device)
    cached = _EMPTY.get(key)
    if cached is None or cached[0] is not value.backend:
        if len(_EMPTY) >= 16:
            _EMPTY.clear()
        empty = zeros((0,), dtype=value.dtype, backend=value.backend, device=value.device)
        cached = _EMPTY[key] = (value.backend, empty)
    return cached[1]


#: ``torch.optim.SGD`` (momentum, dampening, Nesterov, L2 weight decay)
SGD_MOMENTUM = FusedUpdate(
    "sgd_update",
    ("lr", "momentum", "dampening", "weight_decay", "nesterov"),
    lambda s: (Buffer("momentum_buffer", bool(s["momentum"]), "empty"),),
)

#: ``torch.optim.Adam`` and, with ``decoupled``, ``AdamW``
ADAM = FusedUpdate(
    "adam_update",
    ("step", "lr", "beta1", "beta2", "eps", "weight_decay", "decoupled"),
    lambda s: (Buffer("exp_avg", True), Buffer("exp_avg_sq", True)),
)

#: ``torch.optim.RMSprop`` (centered, momentum, L2 weight decay)
RMSPROP = FusedUpdate(
    "rmsprop_update",
    ("lr", "alpha", "eps", "weight_decay", "momentum", "centered"),
    lambda s: (
        Buffer("square_avg", True),
        Buffer("grad_avg", bool(s["centered"])),
        Buffer("momentum_buffer", s["momentum"] > 0.0),
    ),
)
