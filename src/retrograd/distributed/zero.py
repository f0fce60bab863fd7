"""``ZeroRedundancyOptimizer``: optimizer state sharded across ranks (ZeRO stage 1,
Rajbhandari et al., SC 2020; PyTorch's ``torch.distributed.optim.ZeroRedundancyOptimizer``).

Every rank still holds every parameter and, after the gradient sync of data parallel, every
gradient; but each parameter has one *owner* rank (:func:`assign_owners`, balanced by bytes),
and only the owner keeps its optimizer state and computes its update. A step is then:

1. each rank steps the wrapped optimizer over the parameters it owns (a local optimizer made
   of the same class, whose groups mirror the owned part of each of ``param_groups``);
2. the new values travel to every rank in one all-gather per dtype: each rank packs its owned
   parameters into one flat buffer, padded to the largest share, and unpacks the others'.

Optimizer state per rank is therefore about ``1/n`` of the wrapped optimizer's (plus at most
one parameter's worth of imbalance), at the communication cost of one all-gather of the
parameters per step. Gradients stay whole on every rank, so ``clip_grad_norm_`` over them is
the global norm, and anything that reads gradients works as without sharding.

The wrapped optimizer over *every* parameter is also made once, and never stepped: it parses
the parameters as any retrograd optimizer does (a module, tensors, groups; a tied parameter is
one parameter), owns ``param_groups`` (so a schedule's ``g["lr"] = ...`` reaches every rank's
local optimizer at its next step), and gives the state dict its layout: ``state_dict()`` is the
wrapped optimizer's format (``{"state": {index: ...}, "param_groups": [...]}``, indices by
position across the groups), this rank's share of the state until ``consolidate_state_dict``
gathers every share on one rank. ``load_state_dict`` takes that full format on every rank,
whatever the number of ranks it was saved with, and each rank keeps its share.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..device import Device
from ..errors import AutodiffError, DistributedError, DTypeError, InvalidArgumentError
from ..step_hooks import StepHooks, hooked_step
from ..tensor.kept_gradients import mark_gradient_held
from .calls import Call
from .registry import active_context

__all__ = ["ZeroRedundancyOptimizer", "assign_owners", "optimizer_state_bytes"]

_ITEMSIZE = {
    "bfloat16": 2,
    "float16": 2,
    "float32": 4,
    "float64": 8,
    "int64": 8,
    "int32": 4,
    "int16": 2,
    "int8": 1,
}


def assign_owners(sizes: Sequence[int], ranks: int) -> list[int]:
    """The owner rank of each parameter of byte ``sizes``: the largest first, each to the rank
    holding the fewest bytes so far (the lowest such rank on ties). The heaviest rank then
    holds at most ``sum / ranks`` plus one parameter. Deterministic: every rank computes the
    same owners from the same sizes.

    >>> assign_owners([400, 100, 100, 100, 100], 2)
    [0, 1, 1, 1, 1]
    >>> assign_owners([10, 30, 20, 40], 2)
    [0, 1, 1, 0]
    >>> assign_owners([8, 8, 8], 4)
    [0, 1, 2]
    """
    if ranks < 1:
        raise InvalidArgumentError(f"assign_owners: needs at least one rank, got {ranks}")
    loads = [0] * ranks
    owners = [0] * len(sizes)
    for index in sorted(range(len(sizes)), key=lambda i: (-sizes[i], i)):
        rank = min(range(ranks), key=lambda r: (loads[r], r))
        owners[index] = rank
        loads[rank] += sizes[index]
    return owners


def optimizer_state_bytes(optimizer: Any) -> int:
    """Bytes of the tensors an optimizer holds as state on this rank (for a
    :class:`ZeroRedundancyOptimizer`, its share).

    >>> import retrograd as rg
    >>> w = rg.tensor([1.0, 2.0]).require_grad()
    >>> opt = rg.optim.Adam([w], lr=0.1)
    >>> opt.step((w * w).sum().backward())
    >>> optimizer_state_bytes(opt)  # two moments of 2 float32, and the 0-d float32 step
    20
    """
    from ..tensor import Tensor

    state = optimizer.local.state if isinstance(optimizer, ZeroRedundancyOptimizer) else None
    state = optimizer.state if state is None else state
    total = 0
    for entry in state.values():
        for value in entry.values():
            if isinstance(value, Tensor):
                total += value.numel() * _itemsize(value.dtype)
    return total


def _itemsize(dtype: str) -> int:
    return _ITEMSIZE.get(dtype) or np.dtype(dtype).itemsize


class ZeroRedundancyOptimizer(StepHooks):
    """The wrapped ``optimizer_class`` with its state sharded across the ranks of the running
    :class:`~retrograd.distributed.DistributedContext` that hosts the parameters' device. See
    the module docstring.

    Made inside the context (on every rank, with the same parameters in the same order)::

        opt = dist.ZeroRedundancyOptimizer(model, rg.optim.AdamW, lr=3e-4, weight_decay=0.1)
        grads = loss.backward()                  # parameters marked with set_distributed
        rg.nn.utils.clip_grad_norm_(grads, model.parameters(), 1.0)
        opt.step(grads)                          # collective
    """

    def __init__(
        self,
        params: Any,
        optimizer_class: type,
        process_group: Any = None,
        parameters_as_bucket_view: bool = False,
        overlap_with_ddp: bool = False,
        **defaults: Any,
    ):
        # torch's own options: the group is the context hosting the parameters (torch's
        # default group); bucket views are a memory layout with the same results
        if overlap_with_ddp:
            raise InvalidArgumentError(
                "ZeroRedundancyOptimizer: overlap_with_ddp=True is not supported (it needs "
                "DDP communication hooks); step after backward() instead"
            )
        #: the wrapped optimizer over every parameter: groups, validation, state-dict layout;
        #: never stepped
        if not isinstance(optimizer_class, type):  # a str or an instance given for the class
            raise DTypeError(
                f"ZeroRedundancyOptimizer: optimizer_class must be an optimizer class "
                f"(rg.optim.Adam), got {type(optimizer_class).__name__}"
            )
        self.full = optimizer_class(params, **defaults)
        self.optimizer_class = optimizer_class
        self.defaults = self.full.defaults
        self.param_groups = self.full.param_groups
        parameters = [p for group in self.param_groups for p in group["params"]]
        device = Device(parameters[0].device)
        context = active_context(device)
        if context is None:
            raise DistributedError(
                f"ZeroRedundancyOptimizer: no running DistributedContext hosts {device}; make "
                "it inside `with DistributedContext(...)` (each rank, the same parameters)"
            )
        others = [str(p.device) for p in parameters if Device(p.device) != device]
        if others:
            raise DistributedError(
                f"ZeroRedundancyOptimizer: parameters on {device} and {', '.join(others)}; "
                "one device per rank"
            )
        self.context, self.device = context, device
        #: every rank's device (threads of one process: the context's devices)
        self.devices = context.devices
        self.rank, self.world_size = self.devices.index(device), len(self.devices)
        sizes = [p.numel() * _itemsize(p.dtype) for p in parameters]
        #: the owner rank of each parameter, by position across the groups
        self.owners = assign_owners(sizes, self.world_size)
        self._owner_of = {id(p): r for p, r in zip(parameters, self.owners)}
        self._parameters = parameters
        #: the local optimizer: the wrapped class over the parameters this rank owns
        self.local = optimizer_class(
            [
                {**_hyper(group), "params": [p for p in group["params"] if self._owns(p)]}
                for group in self.param_groups
            ],
            **defaults,
        )
        self._consolidated: dict[str, Any] | None = None

    def _owns(self, p: Any) -> bool:
        return self._owner_of[id(p)] == self.rank

    # -- the step ---------------------------------------------------------------------------
    def zero_grad(self, set_to_none: bool = True) -> None:
        """Gradients are a value: nothing to clear. ``set_to_none=False`` keeps torch's zero
        gradients, as every retrograd optimizer's does (:meth:`Optimizer.zero_grad`): the
        parameters this rank owns are stepped with them where a step gives them none."""
        self.full.zero_grad(set_to_none)

    @property
    def lr(self) -> float:
        """The first group's learning rate; setting it sets every group's (as the wrapped
        optimizer's, whose groups these are)."""
        return self.full.lr

    @lr.setter
    def lr(self, value: float) -> None:
        self.full.lr = value

    def step(self, grads: Any = None) -> None:
        """Update the parameters this rank owns from ``grads``, then all-gather every rank's
        new values (collective: every rank calls it)."""
        if grads is None:  # torch's step(), refused as every retrograd optimizer refuses it
            raise AutodiffError(
                "ZeroRedundancyOptimizer.step: pass the gradients backward() returned, "
                "opt.step(loss.backward()) (gradients are a value here, not kept on the "
                "parameters)"
            )
        for group, local in zip(self.param_groups, self.local.param_groups):
            local.update(_hyper(group))
        self.local.step(grads)
        for p in self._parameters:  # the others' (torch's p.grad is on every rank)
            if not self._owns(p) and p.grad(grads) is not None:
                mark_gradient_held(p)
        self._gather_parameters()
        self._consolidated = None

    def _gather_parameters(self) -> None:
        """Every rank's owned parameters to every rank: one all-gather per dtype of flat
        buffers padded to the largest share."""
        from ..tensor import cat, zeros
        from ..tensor.inplace import assign
        from .collective import all_gather

        for dtype in dict.fromkeys(p.dtype for p in self._parameters):
            shares: list[list[Any]] = [[] for _ in range(self.world_size)]
            for p, owner in zip(self._parameters, self.owners):
                if p.dtype == dtype:
                    shares[owner].append(p)
            width = max(sum(p.numel() for p in share) for share in shares)
            if width == 0:
                continue
            mine = [_value(p).reshape(-1) for p in shares[self.rank]]
            backend = _value(self._parameters[0]).backend
            padding = width - sum(p.numel() for p in shares[self.rank])
            if padding or not mine:
                mine.append(zeros((padding,), dtype=dtype, backend=backend, device=self.device))
            flat = cat(mine) if len(mine) > 1 else mine[0]
            gathered = all_gather(flat, self.devices).resolve()
            for owner, share in enumerate(shares):
                if owner == self.rank:
                    continue
                offset = owner * width
                for p in share:
                    piece = gathered[offset : offset + p.numel()].reshape(p.shape)
                    assign(p, piece, "ZeroRedundancyOptimizer.step")
                    offset += p.numel()

    # -- state dicts -------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """The wrapped optimizer's format: after ``consolidate_state_dict(to=r)``, on rank
        ``r``, the full state; otherwise this rank's share (the entries of the parameters it
        owns, under their indices in the full layout)."""
        if self._consolidated is not None:
            return self._consolidated
        return self._own_state_dict()

    def _own_state_dict(self) -> dict[str, Any]:
        self.full.state = dict(self.local.state)  # the same entries, numbered in full
        try:
            return self.full.state_dict()
        finally:
            self.full.state = {}

    def consolidate_state_dict(self, to: int = 0) -> None:
        """Gather every rank's share on rank ``to`` (collective: every rank calls it), whose
        ``state_dict()`` is then the full state, as the wrapped optimizer would give it."""
        if not (isinstance(to, int) and 0 <= to < self.world_size):
            raise InvalidArgumentError(
                f"consolidate_state_dict: to must be a rank in [0, {self.world_size}), got {to!r}"
            )
        own = self._own_state_dict()
        from ..tensor import tensor

        inner = _value(self._parameters[0])

        def as_tensor(array: np.ndarray) -> Any:  # where the wrapped optimizer keeps its state
            return tensor(array, backend=inner.backend, device=inner.device)

        shares = _gather_states(self.context, self.device, self.devices, own["state"], as_tensor)
        if self.rank != to:
            self._consolidated = None
            return
        state: dict[int, Any] = {}
        for share in shares:
            state.update(share)
        self._consolidated = {
            "state": dict(sorted(state.items())),
            "param_groups": own["param_groups"],
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Load the full state (``consolidate_state_dict``'s, or the wrapped optimizer's own,
        saved with any number of ranks) on every rank: each keeps the entries of the parameters
        it owns; hyper-parameters come from it too."""
        self.full.load_state_dict(state_dict)
        state, self.full.state = self.full.state, {}
        self.local.state = {p: entry for p, entry in state.items() if self._owns(p)}
        for group, local in zip(self.param_groups, self.local.param_groups):
            local.update(_hyper(group))
        self._consolidated = None

    def __repr__(self) -> str:
        owned = sum(owner == self.rank for owner in self.owners)
        return (
            f"ZeroRedundancyOptimizer({self.optimizer_class.__name__}, rank {self.rank} of "
            f"{self.world_size}, owns {owned} of {len(self._parameters)} parameters)"
        )


# torch's ZeroRedundancyOptimizer is an Optimizer: its step runs its own hooks and the global
# ones (StepHooks), and the local optimizer's step runs the global ones again
ZeroRedundancyOptimizer.step = hooked_step(ZeroRedundancyOptimizer.step)


def _hyper(group: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in group.items() if k != "params"}


def _value(p: Any) -> Any:
    """A parameter's value on its inner backend (no graph)."""
    return p.inner() if p.backend.is_autodiff else p


def _encode_state(state: dict[int, dict[str, Any]]) -> bytes:
    """A share of optimizer state as bytes, without pickle (a rank never runs code another
    sent): a JSON header (each entry's index and key, and either its plain value or its
    array's dtype, shape and place), then the arrays' bytes."""
    from ..tensor import Tensor

    header, chunks, offset = [], [], 0
    for index, entry in state.items():
        for key, value in entry.items():
            # (the state's tensors as tensors again: state_dict() holds tensors, as torch's)
            held = isinstance(value, Tensor) and value.dtype in (
                "bool",
                "int64",
                "float32",
                "float64",
            )
            numeric = isinstance(value, (np.ndarray, np.generic)) and value.dtype.kind in "biuf"
            if held or numeric:
                array = np.array(np.asarray(value), order="C")
                scalar = isinstance(value, np.generic)
                header.append(
                    [index, key, array.dtype.str, list(array.shape), offset, scalar, held]
                )
                chunks.append(array.tobytes())
                offset += array.nbytes
            elif value is None or isinstance(value, (bool, int, float, str)):
                header.append([index, key, value])
            else:
                raise DistributedError(
                    f"consolidate_state_dict: optimizer state {key!r} of parameter {index} is "
                    f"a {type(value).__name__}, which ranks do not exchange (arrays of numbers "
                    "and plain numbers only)"
                )
    meta = json.dumps(header).encode()
    return len(meta).to_bytes(8, "little") + meta + b"".join(chunks)


def _decode_state(data: bytes, as_tensor: Any) -> dict[int, dict[str, Any]]:
    """:func:`_encode_state`'s input back, its tensors made by ``as_tensor(array)``."""
    size = int.from_bytes(data[:8], "little")
    body = memoryview(data)[8 + size :]
    state: dict[int, dict[str, Any]] = {}
    for item in json.loads(data[8 : 8 + size]):
        if len(item) == 3:
            index, key, value = item
        else:
            index, key, dtype, shape, offset, scalar, held = item
            dtype = np.dtype(dtype)
            count = int(np.prod(shape, dtype=np.int64))
            array = np.frombuffer(body, dtype, count, offset).reshape(shape).copy()
            value = array[()] if scalar else as_tensor(array) if held else array
        state.setdefault(int(index), {})[key] = value
    return state


def _gather_states(
    context: Any, device: Device, devices: tuple, state: dict, as_tensor: Any
) -> list[dict]:
    """Every rank's share of optimizer state, in rank order: their lengths, then their bytes
    padded to the longest, in two all-gathers of int64 words."""
    data = _encode_state(state)
    call = Call("all_gather", None, tuple(devices), dim=0)

    def gather(buffer: np.ndarray) -> np.ndarray:
        pending = context.start_collective(call, device, buffer)
        return np.asarray(context.wait_for(pending, "consolidate_state_dict")[0])

    lengths = gather(np.array([len(data)], np.int64)).reshape(-1)
    width = -(-int(lengths.max()) // 8)
    padded = np.zeros(width * 8, np.uint8)
    padded[: len(data)] = np.frombuffer(data, np.uint8)
    rows = gather(padded.view(np.int64)).reshape(len(devices), width)
    return [
        _decode_state(row.view(np.uint8)[: int(n)].tobytes(), as_tensor)
        for row, n in zip(rows, lengths)
    ]
