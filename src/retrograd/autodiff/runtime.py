"""Backward: walk the graph from the root, build the tape, run the steps.

As in Burn's autodiff server: the walk collects every node reachable from the root (with an
explicit stack, never recursion), groups the nodes by depth, and runs their steps deepest first,
so every node has received all its gradient contributions before its own step runs. The walk
consumes what it visits unless ``retain_graph``; a node consumed earlier stops the walk with an
:class:`~retrograd.errors.AutodiffError` before anything is changed.

The checkpointing strategy is met through one narrow interface: ``begin_backward(tape, inner,
consume)`` gives the :class:`~.checkpoint.Checkpointer` of this backward, whose ``retrieve``
each step calls for the values its rules read, and whose ``end`` reports what it did.
"""

from __future__ import annotations

import os
import threading
import traceback
import warnings
from collections.abc import Callable
from contextlib import suppress
from operator import attrgetter
from typing import Any

from ..errors import AutodiffError
from .checkpoint import Checkpointer
from .checkpoint.builder import NOTHING_SAVED
from .gradients import Gradients
from .graph import FROZEN_LEAVES, AutodiffPrimitive, Node
from .ops import OPS, sum_to_shape
from .saved_hooks import EVER_PACKED, unpack_step

__all__ = ["ANOMALY", "BACKWARD_HOOKS", "Tape", "backward", "running_tape"]

#: torch's anomaly mode (``rg.autograd.detect_anomaly`` sets it): while ``enabled`` and
#: ``check_nan``, every backward step's gradients are checked for NaN as they are registered,
#: and the first one holding NaN stops the backward with an error naming the node (torch's
#: "Function 'SqrtBackward0' returned nan values in its 0th output"). ``name`` gives a node's
#: torch class name; the tensor API, which knows those names, sets it.
ANOMALY: dict[str, Any] = {"enabled": False, "check_nan": True, "name": None}

#: Objects with ``begin(tape, grads)`` and ``end(grads)``, called around every backward, in
#: every thread (a hook decides from ``grads.device`` and the tape whether it applies), and
#: optionally ``abandon(grads)``, called instead of ``end`` when the backward raised (a hook,
#: rule or Function of the user's): what ``begin`` set aside for that backward is dropped.
#: Data-parallel training registers one to all-reduce gradients as they become final.
BACKWARD_HOOKS: list = []

_depth = attrgetter("order")
#: The order backward runs its steps in: deepest first (Burn's groups by depth), and within a
#: depth the node created last first, as torch's engine runs the ready node of the highest
#: sequence number first. Hooks then fire in torch's order: a module called once per step of
#: a recurrence has its full backward hooks fired in the reverse order of its calls, which
#: Opacus's per-sample gradients rely on (they ``pop()`` the activations of the last call).
_run_order = attrgetter("order", "id")
_node_id = attrgetter("id")


class Tape:
    """The walked graph: its nodes deepest first, by id, and each node's count of children.

    Burn groups the steps by depth and runs the deepest group first; ``steps`` is that order,
    nodes of one depth newest first (``_run_order``).
    """

    __slots__ = ("__weakref__", "children", "nodes", "run", "skipped", "steps", "stop")

    def __init__(self, root: Node, stop: frozenset[int] | None = None, claim: bool = False):
        self.stop = stop
        if stop is not None:
            self._toward(root, stop)
            return
        if claim:  # a consuming backward: see CLAIMED
            with _CLAIMS:
                self._walk(root, True)
        else:
            self._walk(root, False)

    def _walk(self, root: Node, claim: bool) -> None:
        nodes = {root.id: root}
        children: dict[int, int] = {}
        walked: list[Node] = []
        stack = [root]
        try:
            while stack:
                node = stack.pop()
                if node.consumed:
                    raise _consumed(node)
                walked.append(node)
                if claim and node.op is not None:
                    node.consumed = CLAIMED
                for parent in node.parents:
                    if parent is not None:
                        parent_id = parent.id
                        if parent_id in nodes:
                            children[parent_id] += 1
                        else:
                            children[parent_id] = 1
                            nodes[parent_id] = parent
                            stack.append(parent)
        except BaseException:
            # a consumed node met, or an interrupt mid-walk: what was claimed is given back,
            # or the graph would refuse every later backward as consumed
            if claim:
                _unclaim(walked)
            raise
        # deepest first, and within a depth newest first (_run_order): two sorts on one
        # attribute each, the second stable, cost less than one on (order, id) pairs
        walked.sort(key=_node_id, reverse=True)
        walked.sort(key=_depth, reverse=True)
        self.steps = self.run = walked
        self.nodes = nodes
        self.children = children
        self.skipped = ()

    def _toward(self, root: Node, stop: frozenset[int]) -> None:
        """The steps a backward needs for the gradients of the nodes ``stop`` only (torch's
        ``inputs=``): a node runs when one of them lies below it. Nothing else is walked
        through or consumed, so the graph below the inputs stays for a later backward (MAML's
        fast weights, differentiated first order, then through by the meta loss)."""
        reached = {root.id: root}
        stack = [root]
        while stack:
            for parent in stack.pop().parents:
                if parent is not None and parent.id not in reached:
                    reached[parent.id] = parent
                    stack.append(parent)
        needed: set[int] = set()
        for node in sorted(reached.values(), key=_depth):  # parents before their children
            if any(p is not None and (p.id in stop or p.id in needed) for p in node.parents):
                needed.add(node.id)
        steps = [node for node in reached.values() if node.id in needed]
        if not stop <= reached.keys():
            # an input not reached: through a consumed node (its parents dropped) it may lie
            # on the way there, and that is the walk's error, not an unused input's None
            consumed = next((n for n in reached.values() if n.consumed), None)
            if consumed is not None:
                raise _consumed(consumed)
        for node in steps:
            if node.consumed:
                raise _consumed(node)
        steps.sort(key=_run_order, reverse=True)
        children: dict[int, int] = {}
        for node in steps:
            for parent in node.parents:
                if parent is not None and (parent.id in stop or parent.id in needed):
                    children[parent.id] = children.get(parent.id, 0) + 1
        self.run = steps
        self.children = children
        #: every node reached, by id: what the checkpointer sees (a value a step reads may
        #: be recomputed from below the inputs) and where create_graph's rules find the node
        #: of a saved value (a weight below an op run stays tracked for a second backward)
        self.nodes = reached
        #: the recorded nodes reached but not run: their reads are drained after the run,
        #: nothing consumed; ``steps`` lists them last (a checkpointer plans reads in order).
        #: Not those a running consuming backward has claimed: their values are that
        #: backward's now, none left for this one to read (the DEQ's implicit backward calls
        #: ``autograd.grad(f0, z0, y)`` from a hook, and ``f0`` is computed from the input
        #: that backward has still to walk)
        skipped = [
            n
            for n in reached.values()
            if n.op is not None and n.id not in needed and not n.consumed
        ]
        skipped.sort(key=_run_order, reverse=True)
        self.skipped = skipped
        self.steps = steps + skipped

    def runs_hooks_of(self, node: Node) -> bool:
        """Whether this backward reaches ``node`` to run its tensor hooks (torch's
        ``_will_engine_execute_node``): a node it walks, or a leaf among ``inputs=``."""
        if node.id not in self.nodes:
            return False
        if self.stop is None:
            return True
        return (node.op is None and node.id in self.stop) or any(n is node for n in self.run)


_RUNNING = threading.local()


def running_tape() -> Tape | None:
    """The graph the innermost backward running in this thread walks, or ``None`` (torch's
    current graph task)."""
    tapes = getattr(_RUNNING, "tapes", None)
    return tapes[-1] if tapes else None


def running_gradient(node: Node) -> tuple[Gradients | None, Any]:
    """The innermost backward running in this thread (its :class:`Gradients`, ``None`` if
    none runs), and the gradient it holds for ``node`` now, left in place (``None``: none
    arrived). A node's gradient is final once every node deeper than it has run: a custom
    function's backward reads those of its other outputs' nodes, which are as deep."""
    running = getattr(_RUNNING, "gradients", None)
    if not running:
        return None, None
    grads = running[-1]
    return grads, grads.values.get(node.id)


def backward(
    backend: Any,
    root: AutodiffPrimitive,
    seed: Any = None,
    retain_graph: bool = False,
    create_graph: bool = False,
    device: Any = None,
    stop: frozenset[int] | None = None,
) -> Gradients:
    """Backpropagate from ``root`` on the autodiff ``backend``; see ``Tensor.backward``.
    ``stop``: the node ids whose gradients are wanted, walking no further (``inputs=``)."""
    root_node = root.node
    if root_node is None:
        raise AutodiffError(
            "backward: this tensor does not require grad and is not computed from anything that "
            "does; call require_grad() on the leaves you want gradients for"
        )
    # torch's: create_graph only sets retain_graph's default (Tensor.backward and
    # autograd.grad resolve it); an explicit retain_graph=False frees the graph walked, and a
    # second order then walks into it only where the first one's rules read no freed value
    retain = retain_graph
    # a recorded backward (create_graph) reads its graph's records without consuming them,
    # even when it releases the nodes it ran (retain_graph=False): the graph it records reads
    # values of the walked graph, which a checkpointer may have to recompute from them
    reading = retain or create_graph
    inner = backend.inner
    # toward some inputs only: the graph's records keep their values (a later backward may
    # walk the part below the inputs); the nodes run are released below as usual
    consume = not reading and stop is None
    tape = checkpointer = node = grads = nodes = taken = read_step = running = gathering = None
    hooks: list = []
    # From the walk on, whatever stops the backward (an interrupt while its gradients are set
    # up included) gives the graph back and tells the strategy, below, or a budget's planner
    # would wait for the end of a backward that never runs, and record the next step's
    # forward as the rest of this one. The walk and the strategy's checkpointer are made
    # inside the ``try``: made before it, an interrupt landing between them and the ``try``
    # left the graph claimed ("being consumed by a backward() still running", for good) or
    # a retaining backward's tape among the reading ones.
    try:
        if consume:
            tape = _tape(backend, root_node, claim=True)
            checkpointer = backend.checkpointing.begin_backward(tape, inner, consume=True)
        elif reading:  # the walk and the values it gathers are taken before another claims
            with _CLAIMS:
                tape = _tape(backend, root_node, stop)
                checkpointer = backend.checkpointing.begin_backward(tape, inner, consume=False)
                _READING.append(tape)
        else:  # toward some inputs, releasing the nodes it runs
            tape = _tape(backend, root_node, stop)
            checkpointer = backend.checkpointing.begin_backward(tape, inner, consume=False)
        rules_backend = backend if create_graph else inner
        checking = ANOMALY["enabled"] and ANOMALY["check_nan"]
        if checking:
            grads = _CheckedGradients(rules_backend, device, dict(tape.children))
            grads.inner = inner
        else:
            grads = Gradients(rules_backend, device, dict(tape.children))
            # sums of plain arrays, which no rule reads yet (an anomaly check sees each
            # contribution alone, which an in-place sum would not show it)
            grads.in_place = not create_graph
        if stop is not None:
            grads.kept = stop
        # the leaves whose hooks may run (grouped by run_leaf_hooks if some has hooks): the
        # walk's, or toward inputs, those of the inputs (no leaf is a step then)
        grads.leaf_groups = (
            tape.run if stop is None else [tape.nodes[i] for i in stop if i in tape.nodes]
        )
        hooks = list(BACKWARD_HOOKS)
        for hook in hooks:
            hook.begin(tape, grads)
        if seed is None:
            seed = inner.ones_like(root.value)
        grads.register(root_node, AutodiffPrimitive(seed, None) if create_graph else seed)

        nodes = tape.nodes if create_graph else None
        # what a consuming backward took from the records of the steps it has not run yet
        taken = getattr(checkpointer, "taken", None) if consume else None
        # a checkpointer that recomputes reads each step's values together, and so does the
        # held one of an eager step (a call per step, not per value); a strategy's own may
        # read them one by one
        read_step = getattr(checkpointer, "retrieve_step", None)
        running = getattr(_RUNNING, "tapes", None)
        if running is None:
            running = _RUNNING.tapes = []
        gathering = getattr(_RUNNING, "gradients", None)
        if gathering is None:
            gathering = _RUNNING.gradients = []
        running.append(tape)
        gathering.append(grads)
        with inner.arithmetic_warnings_ignored():
            for node in tape.run:
                if node.op is not None:
                    if checking:
                        grads.begin_step(node)
                    _step(node, rules_backend, grads, checkpointer, nodes, read_step)
                    if taken is not None:
                        taken.pop(node.id, None)
                    if not retain:
                        if _READING or node.saved.may_outlive_release:
                            _release(node)
                        else:  # _release, inlined (a call less per step)
                            if node.op.on_release is not None:
                                node.op.on_release(node)
                            node.parents = ()
                            node.params = ()
                            node.saved = NOTHING_SAVED
                            node.consumed = True
                            if node.bshapes is not None:
                                node.bshapes = None
                elif node.hooks is not None and node.id not in grads.hooked:
                    grads.run_leaf_hooks(node)  # a leaf's, final now
            if stop is not None:  # inputs whose step did not run: their hooks run now
                for node_id in stop:
                    node = tape.nodes.get(node_id)
                    if node is not None and node.hooks is not None and node_id not in grads.hooked:
                        if node.op is None:
                            grads.run_leaf_hooks(node)
                            continue
                        hooked = grads.run_hooks(node, grads.values.get(node_id))
                        # a non-leaf input's gradient is captured after its tensor hooks
                        # when its own step does not run, as torch 2's autograd.grad
                        if hooked is not None and node.op is not None:
                            grads.values[node_id] = hooked

            for node in tape.skipped:  # the reads a skipped step would have made
                for key in node.saved.keys:
                    checkpointer.retrieve(key)
        _leave(tape, grads, running, gathering, reading)
    except BaseException as error:
        if tape is None:  # the walk itself stopped (``_tape`` told the strategy)
            raise
        _leave(tape, grads, running, gathering, reading)  # (before the tape goes below)
        # A rule, hook or Function raised (or an interrupt came): the caller may keep the
        # error (a notebook keeps the last one), and its traceback keeps this frame and those
        # below it, with the walk's nodes, their saved values and the gradients in flight.
        # They go now, so that dropping the graph frees them as after a finished backward.
        _clear_library_frames(error.__traceback__)
        if consume and checkpointer is None:  # the strategy took nothing: only the claim
            _unclaim(tape.run)
        elif consume:  # the steps not run yet keep their graph, as torch's do
            if taken is None:  # (stopped before the walk read what its checkpointer took)
                taken = getattr(checkpointer, "taken", None)
            _give_back(tape.run, taken)
            _unclaim(tape.run)
        # the strategy hears of it (a budget's planner plans from no half step); a strategy of
        # one's own may return a checkpointer without ``abandon``
        abandon = getattr(checkpointer, "abandon", None)
        if abandon is not None:
            abandon()
        _abandon_hooks(hooks, grads)
        del tape, grads, checkpointer, abandon, nodes, node, root, seed, taken, read_step, hooks
        raise
    grads.in_place = False  # what the caller adds to it later makes new arrays
    grads.recomputed_bytes, grads.recomputed_ops, grads.peak_bytes = checkpointer.end()
    for hook in hooks:
        hook.end(grads)
    grads.remaining.clear()
    grads.leaf_groups = None  # (the walk's nodes: not kept alive by the gradients)
    if stop is not None:  # torch's inputs=: every other tensor's gradient is left out, but
        # a retain_grad() tensor the walk ran through (torch fills its .grad on the way)
        kept = stop | {node.id for node in tape.run if node.retain is True}
        for key in [k for k in grads.values if k not in kept]:
            del grads.values[key]
    if FROZEN_LEAVES:
        for key in [k for k in list(FROZEN_LEAVES.keys()) if k in grads.values]:
            del grads.values[key]
    return grads


def _step(
    node: Node,
    backend: Any,
    grads: Gradients,
    checkpointer: Checkpointer,
    nodes: dict | None,
    read_step: Callable[[tuple], list] | None = None,
) -> None:
    """Run ``node``'s backward rules and register the gradients of its tracked inputs; its
    saved values read through ``read_step`` when given (the checkpointer's
    ``retrieve_step``), else one by one."""
    op = node.op
    plan = node.plan
    keys = node.saved.keys
    if keys:  # read even when no gradient arrived, so the checkpointer drains
        if read_step is None:
            saved = list(map(checkpointer.retrieve, keys))  # no comprehension frame per step
        else:
            saved = read_step(keys)
        if EVER_PACKED[0]:  # some values are held as saved_tensors_hooks packed them
            keys, saved = unpack_step(keys, saved)
        if nodes is not None:  # create_graph: rules run on tracked values
            saved = [AutodiffPrimitive(v, nodes.get(k)) for k, v in zip(keys, saved)]
        out = saved.pop() if plan.save_out else None
        env = (out, *saved, *node.params)
    else:
        env = (None, *node.params)
    # grads.consume(node), inlined (a call less per step): a recorded node's gradient is
    # read once, popped unless it is a result too (a retained or an ``inputs=`` one)
    node_id = node.id
    if grads.owned:  # from here on it is read: no longer added into
        grads.owned.pop(node_id, None)
    if node.retain or node_id in grads.kept:
        g = grads.values.get(node_id)
    else:
        g = grads.values.pop(node_id, None)
    if g is None:
        if op.without_gradient is not None and op.without_gradient(*node.params):
            _variadic_step(node, backend, grads, None)
        return
    if node.hooks is not None and node_id not in grads.hooked:  # (a custom Function's
        g = grads.run_hooks(node, g)  # output's, run as a sibling output's step read it)
    if nodes is not None and op.aux:
        env = (*env[:-1], AutodiffPrimitive(env[-1], None))
    if node.input_hooks is not None:
        _hooked_step(node, backend, grads, g, env)
        return
    register = grads.register
    if op.variadic:
        _variadic_step(node, backend, grads, g)
        return
    arguments = plan.arguments
    bshapes = node.bshapes
    rules = op.vjps
    links = op.links
    if op.accumulate is not None and grads.in_place:  # unary, its rule's result fresh
        parent = node.parents[0]
        positions = arguments[0]
        if parent is None or positions is None:
            return
        acc = grads.owned_sum(parent)
        if acc is not None:
            params = node.params[: len(op.params)]
            grads.replace_sum(parent, op.accumulate(backend, acc, g, *params))
        else:
            register(parent, rules[0](backend, g, *[env[k] for k in positions]), True)
        return
    if op.joint:  # one rule gives every input's gradient (a fused backward kernel)
        needs = tuple([positions is not None for positions in arguments])
        if True not in needs:
            return
        first = needs.index(True)
        joint = rules[first](backend, g, needs, *[env[k] for k in arguments[first]])
        # parameters (leaves) first: their gradients are final at once, so a data-parallel
        # all-reduce can start before the inputs' gradients flow on, and a memory probe
        # sampling at registrations sees them as gradients, not as activations
        parents = sorted(enumerate(node.parents), key=_leaves_first)
        for index, parent in parents:
            if parent is None or not needs[index]:
                continue
            grad = joint[index]
            if bshapes is not None and bshapes[index] is not None:
                grad = sum_to_shape(backend, grad, bshapes[index])
            if links is not None and nodes is not None and index in links:
                grad = _linked(backend, node, index, grad, env)
            register(parent, grad)
        return
    for index, parent in enumerate(node.parents):
        if parent is None:
            continue
        positions = arguments[index]
        if positions is None:
            continue
        if not positions:
            grad = rules[index](backend, g)
        elif len(positions) == 1:
            grad = rules[index](backend, g, env[positions[0]])
        else:
            grad = rules[index](backend, g, *[env[k] for k in positions])
        if grad is None:  # (a gradient_link of kind "none": torch's derivative is undefined)
            grads.absent(parent)
            continue
        if bshapes is not None and bshapes[index] is not None:
            grad = sum_to_shape(backend, grad, bshapes[index])
        if links is not None and nodes is not None and index in links:
            grad = _linked(backend, node, index, grad, env)
        register(parent, grad)


def _linked(backend: Any, node: Node, index: int, grad: Any, env: tuple) -> Any:
    """Under create_graph: the gradient ``grad`` of ``node``'s input ``index`` recorded as a
    function of the inputs its op's ``links`` name (torch's backward kernel takes them), so
    that it requires grad where torch's does and differentiates in them as torch's (zeros,
    none, or a refusal). The anchor stands for the input's node only: its value is never
    read (the link's rules read its ``shape`` parameter), so nothing of the input is held."""
    op = node.op
    name = node.params[op.params.index("op")] if "op" in op.params else op.name
    link = OPS["gradient_link"]
    saved_inputs = node.plan.saved_inputs
    for anchor_index, kind in op.links[index]:
        parent = node.parents[anchor_index]
        if parent is None:
            continue
        if anchor_index == index:
            shape = backend.shape(grad)
        elif anchor_index in saved_inputs:  # (another input: its zeros take its shape)
            shape = backend.shape(env[1 + saved_inputs.index(anchor_index)])
        elif kind == "zeros":
            continue
        else:
            shape = ()
        anchor = AutodiffPrimitive(grad.value, parent)
        grad = backend.apply(link, grad, anchor, params=(kind, shape, name))
    return grad


class _CheckedGradients(Gradients):
    """The gradients of a backward in anomaly mode: each contribution a step registers is
    checked for NaN first, as torch checks each backward function's outputs."""

    __slots__ = ("inner", "registered", "stepping")

    def begin_step(self, node: Node) -> None:
        """``node``'s step runs next: what it registers is its gradients."""
        self.stepping = node
        self.registered: dict[int, int] = {}

    def register(self, node: Node, value: Any, fresh: bool = False) -> None:
        stepping = getattr(self, "stepping", None)
        if stepping is not None:
            inner = self.inner
            array = value.value if isinstance(value, AutodiffPrimitive) else value
            if inner.any(inner.is_nan(array)):
                raise _anomaly(stepping, node, inner.shape(array), self.registered)
            self.registered[node.id] = self.registered.get(node.id, 0) + 1
        super().register(node, value, fresh)


def _anomaly(stepping: Node, parent: Node, shape: tuple, registered: dict[int, int]) -> Exception:
    """The error for a NaN gradient that ``stepping``'s step gave its input ``parent``."""
    # torch numbers a node's outputs by its op's inputs: the one that gets this gradient is
    # the parent's first position not given one yet in this step (``x * x`` gives two)
    positions = [i for i, p in enumerate(stepping.parents) if p is parent]
    seen = registered.get(parent.id, 0)
    index = positions[seen] if seen < len(positions) else (positions[0] if positions else 0)
    namer = ANOMALY["name"]
    name = namer(stepping) if namer is not None else stepping.op.name
    stack = stepping.__dict__.get("forward_stack")
    where = ""
    if stack:
        # torch's warning, with the traceback of the forward call that made the node
        warnings.warn(
            f"Error detected in {name}. Traceback of forward call that caused the error:\n"
            + "".join(traceback.format_list(stack)),
            UserWarning,
            stacklevel=2,
        )
        where = f", called at {stack[-1].filename}:{stack[-1].lineno}"
    return AutodiffError(
        f"backward: anomaly detected: Function '{name}' returned nan values in its "
        f"{index}th output (the gradient of input {index} of the forward op "
        f"{stepping.op.name}{where}, shape {list(shape)})"
    )


def forward_stack() -> traceback.StackSummary:
    """The caller's stack outside retrograd: where anomaly mode says a recorded op was
    called (torch records each node's forward traceback while the mode is on)."""
    stack = traceback.extract_stack()
    while stack and stack[-1].filename.startswith(_PACKAGE):
        stack.pop()
    return stack


def _variadic_step(node: Node, backend: Any, grads: Gradients, g: Any) -> None:
    rule = node.op.vjps[0]
    for index, parent in enumerate(node.parents):
        if parent is not None:
            grad = rule(backend, g, index, *node.params)
            if grad is None:  # no gradient for this input (a custom function's None)
                grads.absent(parent)
            else:
                grads.register(parent, grad)


def _hooked_step(node: Node, backend: Any, grads: Gradients, g: Any, env: tuple) -> None:
    """``node``'s step with its ``input_hooks``: every input's gradient computed (``None``
    for an untracked input), handed with the node's own gradient to each hook (a non-``None``
    result replaces them all), then registered."""
    op = node.op
    parents = node.parents
    found: list[Any] = [None] * len(parents)
    if op.variadic:
        for index, parent in enumerate(parents):
            if parent is not None:
                found[index] = op.vjps[0](backend, g, index, *node.params)
    else:
        arguments = node.plan.arguments
        if op.joint:
            needs = tuple([positions is not None for positions in arguments])
            if True in needs:
                first = needs.index(True)
                joint = op.vjps[first](backend, g, needs, *[env[k] for k in arguments[first]])
                for index, parent in enumerate(parents):
                    if parent is not None and needs[index]:
                        found[index] = joint[index]
        else:
            for index, parent in enumerate(parents):
                positions = arguments[index]
                if parent is not None and positions is not None:
                    found[index] = op.vjps[index](backend, g, *[env[k] for k in positions])
        bshapes = node.bshapes
        if bshapes is not None:
            for index, shape in enumerate(bshapes):
                if shape is not None and found[index] is not None:
                    found[index] = sum_to_shape(backend, found[index], shape)
    for hook in list(node.input_hooks.values()):
        result = hook(backend, tuple(found), g)
        if result is not None:
            found = list(result)
    for parent, grad in zip(parents, found):
        if parent is None:
            continue
        if grad is None:
            grads.absent(parent)
        else:
            grads.register(parent, grad)


#: ``Node.consumed`` of a node a running backward will release. A consuming backward marks
#: the recorded nodes it walks so, under ``_CLAIMS``, before it runs any step: two threads
#: differentiating one graph without ``retain_graph`` both walked it whole, then ran steps on
#: nodes the other released (a bare ``KeyError``, or gradients missing); now the second is
#: refused by name, as torch's second backward through a graph is.
CLAIMED = "claimed"
_CLAIMS = threading.RLock()  # re-entrant: a strategy's begin_backward runs under it


#: The tapes of the backwards running now that keep their graph (``retain_graph``,
#: ``create_graph``). A consuming backward on another thread may claim a graph
#: such a backward has walked already (its walk found nothing claimed), and then released
#: nodes the other was still to read: its gradients came back silently ``None`` or partial.
#: Now a consuming backward leaves a node any of these tapes holds to the last of them
#: (``_DEFERRED``), and both backwards give full gradients, as when they run one after the
#: other. Changed under ``_CLAIMS``.
_READING: list[Tape] = []
_DEFERRED: dict[int, Node] = {}


def _leave(
    tape: Tape, grads: Any, running: list | None, gathering: list | None, reading: bool
) -> None:
    """A backward's tape and gradients off its thread's stacks, and its tape off the reading
    ones: the last step of a finished backward, and the first of an interrupted one. Each
    part is done only where it is still to do, because an interrupt can land between two of
    them, and the handler then runs this again: popped outside the ``try``, an interrupt
    between the two pops left the gradients on the thread's stack for good (one
    ``Gradients`` and what it held, in a soak of interrupted optimizer steps)."""
    if running and running[-1] is tape:
        running.pop()
    if gathering and gathering[-1] is grads:
        gathering.pop()
    if reading and any(t is tape for t in _READING):
        _stop_reading(tape)


def _abandon_hooks(hooks: list, grads: Gradients | None) -> None:
    """The backward hooks whose ``begin`` saw a backward that then raised hear of it
    (``abandon``, where they have it): ``end`` never comes for it. Data parallel's hook kept
    what ``begin`` set aside by ``id(grads)`` until ``end``: a ``no_sync`` backward that raised
    left its parameter slots there for good (one entry per failure), and a later backward
    whose ``Gradients`` reused the id took the stale entry as its own (a synced one's
    ``list.remove`` failed with a bare ``ValueError`` in the next backward to end, or stale
    slots were summed into the accumulated gradients)."""
    if grads is None:
        return
    for hook in hooks:
        abandon = getattr(hook, "abandon", None)
        if abandon is not None:
            abandon(grads)


def _stop_reading(tape: Tape) -> None:
    """A retaining backward has finished reading its tape: the nodes a consuming backward
    released meanwhile, and no other reading tape holds, are freed now."""
    with _CLAIMS:
        _READING.remove(tape)
        if _DEFERRED:
            for node_id in [k for k in _DEFERRED if not any(k in t.nodes for t in _READING)]:
                _release(_DEFERRED.pop(node_id))  # (no reading tape holds it now)


def _tape(
    backend: Any, root: Node, stop: frozenset[int] | None = None, claim: bool = False
) -> Tape:
    """The walk of a backward from ``root`` (:class:`Tape`). An interrupt during it (anything
    but the walk's own refusal of a consumed graph) is told to the strategy, which drops the
    step it was recording (:meth:`~.checkpoint.strategy.CheckpointStrategy.backward_interrupted`):
    the backward of that step will not run, and the next step's forward is a step of its own."""
    try:
        return Tape(root, stop, claim)
    except AutodiffError:
        raise
    except BaseException:
        backend.checkpointing.backward_interrupted()
        raise


def _unclaim(nodes: list[Node]) -> None:
    """A backward that stopped early (an error, an interrupt) gives back the nodes it did
    not reach: a later backward may still walk them."""
    for node in nodes:
        if node.consumed is CLAIMED:
            node.consumed = False


def _give_back(nodes: list[Node], taken: dict[int, list] | None) -> None:
    """A consuming backward stopped early (a rule, hook or Function raised, or an interrupt
    came): the steps it did not finish, the one that raised included, get back the records
    their checkpointer took when it began (``taken``), so that a later backward through them
    reads their values, as torch's engine keeps the saved tensors of the nodes it did not
    run. Before, the records stayed empty and that backward failed with a bare ``KeyError``.
    Where the records cannot be given back (``taken`` is None: a memory budget's slots let
    go of their values), a step that reads values is released instead, and a later backward
    through it says the graph was consumed."""
    for node in nodes:
        if node.consumed is not CLAIMED or node.op is None:
            continue
        saved = node.saved
        if taken is not None:
            actions = taken.pop(node.id, None)
            if actions is not None:
                saved.actions = actions
        elif saved.keys:  # (a step that reads nothing runs as it did)
            _release(node)


def _consumed(node: Node) -> AutodiffError:
    if node.consumed is CLAIMED:
        return AutodiffError(
            f"backward: the graph through {node.describe()} is being consumed by a backward() "
            "still running (on another thread, or the one whose hook called this), which "
            "frees what it walks; give the backward calls retain_graph=True to backpropagate "
            "through one graph more than once at a time"
        )
    return AutodiffError(
        f"backward: the graph through {node.describe()} was consumed by an earlier backward(), "
        "which frees what it walks (torch's words: Trying to backward through the graph a "
        "second time); call that earlier backward with retain_graph=True to backpropagate "
        "through the same graph again"
    )


def _leaves_first(item: tuple[int, Node | None]) -> bool:
    """Sort key: leaves (and untracked inputs) before recorded ops."""
    return item[1] is not None and item[1].op is not None


def _clear_library_frames(tb: Any) -> None:
    """Clear the locals of retrograd's finished frames in ``tb`` (a rule's saved values, the
    step's gradients); the caller's frames, a Function's backward or a hook, keep theirs for a
    post-mortem debugger. The running frame (``backward``'s own) cannot be cleared."""
    while tb is not None:
        frame = tb.tb_frame
        if frame.f_code.co_filename.startswith(_PACKAGE):
            with suppress(RuntimeError):  # still running
                frame.clear()
        tb = tb.tb_next


_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


def _release(node: Node) -> None:
    """Drop what a consumed node holds (its parents and what checkpointing kept for it), so
    the graph above it can be freed, and mark it consumed; a node a retaining backward is
    still reading is marked now and freed when that backward ends (see _READING). Every
    node walked is consumed, whatever its rules read (API.md section 3: a second backward
    through a consumed part raises; torch's engine refuses it only where a node saved
    tensors). The backward loop inlines the body below when no retaining backward reads."""
    if _READING:  # (the body stays inline: one call per node on every consuming backward)
        with _CLAIMS:
            if any(node.id in tape.nodes for tape in _READING):
                node.consumed = True
                _DEFERRED[node.id] = node
                return
    saved = node.saved
    if saved.may_outlive_release and saved.outlives_release():
        node.consumed = True  # (its recipe stays: another graph reads its evicted output)
        return
    if node.op is not None and node.op.on_release is not None:
        node.op.on_release(node)
    node.parents = ()
    node.params = ()
    node.saved = NOTHING_SAVED
    node.consumed = True
    if node.bshapes is not None:
        node.bshapes = None
