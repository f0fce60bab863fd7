"""Compiling a recording into the program a replay runs.

The recording is split at optimizer steps into *segments* (runs of inner calls) and
:class:`OptimizerCall` items. Each segment becomes straight-line Python, one line per call,
with a ``del`` right after a value's last use (so a replay holds no more memory than the eager
step did); on the NumPy backend, chains of elementwise calls are first grouped into fused
kernels (:mod:`.fusion`). A segment whose inputs are all torch CUDA tensors may instead be
replayed through a CUDA graph (:class:`CudaGraphSegment`).
"""

from __future__ import annotations

from typing import Any

from ..optim.bound import BoundStep
from .fusion import fuse_calls
from .linear import fuse_linear_epilogues
from .norm import fuse_layer_norm_backward_add
from .recording import CaptureError, Recorder, slots_of
from .slices import gather_slices
from .squares import fuse_squares_total

__all__ = ["CudaGraphSegment", "OptimizerCall", "Segment", "compile_program"]

#: Calls that draw from or reseed a random generator: not repeatable in CUDA-graph warm-ups.
_RANDOM = frozenset({"random", "bernoulli", "seed"})


class Segment:
    """A run of recorded calls, compiled into one Python function of its input slots."""

    def __init__(self, calls: list[tuple], ins: list[int], outs: list[int], last: dict, index):
        self.ins, self.outs, self.calls = ins, outs, calls
        self.random = any(call[2] in _RANDOM for call in calls)
        namespace: dict[str, Any] = {}
        lines = [f"def segment_{index}({', '.join(f'v{s}' for s in ins)}):"]
        keep = set(outs)
        for position, (_, function, name, args, kwargs, call_outs) in enumerate(calls):
            fname = f"{name}_{position}"
            namespace[fname] = function
            rendered = [_render(arg, namespace) for arg in args]
            rendered += [f"{key}={_render(value, namespace)}" for key, value in kwargs.items()]
            call = f"{fname}({', '.join(rendered)})"
            if call_outs is None:
                lines.append(f"    {call}")
                targets: tuple = ()
            elif type(call_outs) is tuple:
                targets = call_outs
                names = ", ".join(f"v{s}" for s in targets)
                comma = "," if len(targets) == 1 else ""
                lines.append(f"    {names}{comma} = {call}" if targets else f"    {call}")
            else:
                targets = (call_outs,)
                lines.append(f"    v{call_outs} = {call}")
            # values read for the last time here, and outputs nothing reads
            dead = [s for s in slots_of(args, kwargs) if last.get(s) == position and s not in keep]
            dead += [s for s in targets if s not in last and s not in keep]
            dead = sorted(set(dead))
            if dead:
                lines.append(f"    del {', '.join(f'v{s}' for s in dead)}")
        lines.append(f"    return ({''.join(f'v{s}, ' for s in outs)})")
        self.source = "\n".join(lines)
        exec(compile(self.source, f"<captured segment {index}>", "exec"), namespace)
        # taken out of its own globals: a function in its globals is a reference cycle,
        # which held the segment's constants (arrays) until the garbage collector ran
        self.function = namespace.pop(f"segment_{index}")
        self.run = self.function


def _render(encoded: tuple, namespace: dict) -> str:
    kind, payload = encoded
    if kind == "s":
        return f"v{payload}"
    if kind == "c":
        name = f"c{len(namespace)}"
        namespace[name] = payload
        return name
    items = ", ".join(_render(item, namespace) for item in payload)
    return f"[{items}]" if kind == "l" else f"({items}{',' if len(payload) == 1 else ''})"


class OptimizerCall:
    """An optimizer step at replay: the replayed gradients handed to the optimizer, bound
    at capture to the parameters they are the gradients of (:class:`~retrograd.optim.bound.
    BoundStep`: the update kernels called directly, the eager step's bits and state), or to
    ``optimizer.step`` in a ``Gradients`` value for an optimizer without a fused kernel."""

    def __init__(
        self,
        optimizer: Any,
        grad_slots: list[tuple[int, tuple]],
        outs: list[int],
        parameters: list[Any],
    ):
        self.optimizer = optimizer
        self.grad_slots = grad_slots  # (state index, encoded gradient)
        self.ins = [encoded[1] for _, encoded in grad_slots if encoded[0] == "s"]
        self.outs = outs  # the state values after the step, one per state entry
        #: the state entries' tensors at capture (``parameters[index]``, index a state index)
        self.parameters = [parameters[index] for index, _ in grad_slots]
        #: ``None`` for an optimizer whose step is its own code: ``optimizer.step`` is called
        self.bound = BoundStep(optimizer, self.parameters) if BoundStep.binds(optimizer) else None


class CudaGraphSegment:
    """A segment replayed through a CUDA graph (torch's public ``torch.cuda.graph`` API).

    The first call copies its inputs into static buffers, runs the segment a few times on a
    side stream (allocations and lazy initialisation happen outside the capture, as torch
    requires), captures one run into a ``CUDAGraph``, and replays it; later calls copy new
    inputs into the static buffers and replay. Outputs are cloned, since the next replay
    overwrites the graph's output buffers. Only used when every input is a torch CUDA tensor
    and the segment draws no random numbers (warm-up runs would consume them).
    """

    warmup = 3

    def __init__(self, segment: Segment):
        self.segment = segment
        self.ins, self.outs, self.calls = segment.ins, segment.outs, segment.calls
        self.graph = None
        self.static: list = []
        self.outputs: tuple = ()
        self.checks: list = []

    def run(self, *args: Any) -> tuple:
        import torch  # only here: torch is an optional dependency

        from ..backend.torch_backend import checks_recorded, checks_replayed

        if self.graph is None:
            self.static = [arg.clone() for arg in args]
            stream = torch.cuda.Stream()
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):
                for _ in range(self.warmup):
                    self.segment.function(*self.static)
            torch.cuda.current_stream().wait_stream(stream)
            graph = torch.cuda.CUDAGraph()
            # The segment's index checks: written by each replay, reported as an eager
            # step's are (a replayed step with an index out of range raises at the next read)
            with checks_recorded() as self.checks, torch.cuda.graph(graph):
                self.outputs = self.segment.function(*self.static)
            self.graph = graph
        for buffer, arg in zip(self.static, args):
            buffer.copy_(arg)
        self.graph.replay()
        checks_replayed(self.checks)
        return tuple(output.clone() for output in self.outputs)


def _outs_of(call: tuple) -> tuple:
    outs = call[5]
    return outs if type(outs) is tuple else () if outs is None else (outs,)


def _groups(recorder: Recorder) -> list[Any]:
    """The recording split at optimizer steps: lists of calls, and :class:`OptimizerCall`."""
    groups: list[Any] = []
    for step in recorder.steps:
        if step[0] == "call":
            if not groups or not isinstance(groups[-1], list):
                groups.append([])
            groups[-1].append(step)
        else:
            _, optimizer, grad_slots, outs, parameters = step
            groups.append(OptimizerCall(optimizer, grad_slots, outs, parameters))
    return groups


def _last_uses(groups: list[Any], live_at_end: list[int]) -> tuple[dict, dict]:
    """Where each slot is read last: ``{slot: group}`` and ``{(group, slot): position}``
    (the call within a segment); slots in ``live_at_end`` are read after the last group."""
    last_group: dict[int, int] = {}
    last_call: dict[tuple[int, int], int] = {}
    for g, group in enumerate(groups):
        if isinstance(group, OptimizerCall):
            for slot in group.ins:
                last_group[slot] = g
            continue
        for position, (_, _, _, args, kwargs, _) in enumerate(group):
            for slot in slots_of(args, kwargs):
                last_group[slot] = g
                last_call[(g, slot)] = position
    for slot in live_at_end:
        last_group[slot] = len(groups)
    return last_group, last_call


def compile_program(
    recorder: Recorder, live_at_end: list[int], cuda_graph: bool | str, fuse: bool | str
) -> tuple[list[Any], dict[int, int], int]:
    """The items a replay runs (segments and optimizer calls), the item at which each slot is
    used for the last time (the driver hands a value over there), and the number of fused
    kernels. ``live_at_end``: the slots read after the program (its result, write-backs)."""
    groups = _groups(recorder)
    last_group, _ = _last_uses(groups, live_at_end)
    fused = 0
    if fuse:
        for g, group in enumerate(groups):
            if isinstance(group, list):
                later = {slot for slot, where in last_group.items() if where > g}
                group = gather_slices(group, recorder.meta, later)
                group = fuse_layer_norm_backward_add(group, recorder.meta, later)
                group = fuse_linear_epilogues(group, recorder.meta, later)
                group = fuse_squares_total(group, recorder.meta, later)
                groups[g], count = fuse_calls(group, recorder.meta, later, exact=fuse != "fast")
                fused += count
    last_group, last_call = _last_uses(groups, live_at_end)
    produced: dict[int, int] = {}  # slot -> group that makes it
    for g, group in enumerate(groups):
        if isinstance(group, OptimizerCall):
            for slot in group.outs:
                produced[slot] = g
        else:
            for call in group:
                for slot in _outs_of(call):
                    produced[slot] = g
    items: list[Any] = []
    for g, group in enumerate(groups):
        if isinstance(group, OptimizerCall):
            group.outs = [slot if slot in last_group else None for slot in group.outs]
            items.append(group)
            continue
        used = {slot for call in group for slot in slots_of(call[3], call[4])}
        ins = sorted(slot for slot in used if produced.get(slot, -1) < g)
        outs = sorted(
            slot for slot, p in produced.items() if p == g and last_group.get(slot, -1) > g
        )
        last = {slot: last_call[(g, slot)] for slot in used if last_group[slot] == g}
        segment = Segment(group, ins, outs, last, len(items))
        items.append(_maybe_graph(segment, recorder, cuda_graph))
    return items, dict(last_group), fused


def _maybe_graph(segment: Segment, recorder: Recorder, cuda_graph: bool | str) -> Any:
    """The segment itself, or wrapped for CUDA-graph replay where that applies."""
    ins = segment.ins
    on_cuda = bool(ins) and all(recorder.on_cuda[s] for s in ins)
    if cuda_graph is True and not on_cuda:
        raise CaptureError(
            "capture: cuda_graph=True, but the step's values are not torch CUDA tensors "
            "(CUDA graphs need an inner backend on a CUDA device)"
        )
    use_graph = bool(cuda_graph) and on_cuda
    if use_graph and segment.random:
        if cuda_graph is True:
            raise CaptureError(
                "capture: cuda_graph=True, but the step draws random numbers (dropout, "
                "rg.random), which CUDA-graph warm-up runs would consume"
            )
        use_graph = False
    return CudaGraphSegment(segment) if use_graph else segment
