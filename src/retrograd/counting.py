"""torch's ``torch.utils.flop_counter`` and ``torch.utils.module_tracker``: the FLOPs of a
forward and backward, per module and in total, as torch's ``FlopCounterMode`` counts them::

    from retrograd.utils.flop_counter import FlopCounterMode
    with FlopCounterMode(display=False) as counter:
        model(x).sum().backward()
    counter.get_total_flops()             # 2 * m * n * k per product, as torch
    counter.get_flop_counts()["Sequential.0"]

torch counts the ATen ops its dispatcher sees; retrograd counts the kernels that reach its inner
backend (``matmul``, ``linear``, ``conv``, ``conv_backward``, ``attention``...), with torch's
formulas, under torch's names of the ops those kernels stand for (``aten.mm``, ``aten.addmm``,
``aten.bmm``, ``aten.convolution``, ``aten.convolution_backward``). While a counter is active a
counting wrapper sits over those methods of the current backend's inner backend (as the
profiler's timing wrapper); nothing is patched otherwise, so a step without a counter pays
nothing. A kernel that a backend composes of others (a protocol default calling ``matmul``)
counts once, at the outermost call. Attention counts as torch's math path on the CPU (its
reference): two batched products forward, four backward. A value that the backend's
checkpointing strategy dropped and recomputes in backward (a retro-forward) is not counted
again: the count is the program's, the same under every strategy and memory budget (torch's
``utils.checkpoint`` reruns the function in the user's code, which torch's counter sees; here the
strategy recomputes, out of the program's sight).
"""

from __future__ import annotations

import threading
import warnings
import weakref
from collections import defaultdict
from collections.abc import Callable
from math import prod
from typing import Any

from .autodiff.checkpoint.retro_forward import recomputing
from .autodiff.runtime import running_tape
from .autograd.graph import register_multi_grad_hook
from .backend.protocol import METADATA
from .context import current_backend
from .errors import InvalidArgumentError, check_callable
from .nn.modules.module import register_module_forward_hook, register_module_forward_pre_hook
from .tensor import Tensor
from .utils._pytree import tree_flatten

__all__ = ["FlopCounterMode", "ModuleTracker", "register_flop_formula"]


class ModuleTracker:
    """torch's ``ModuleTracker``: ``parents`` holds the fully qualified names of the modules
    whose forward (or backward) is running, always with ``"Global"``. A module first met is
    named by its class (``Sequential``), its children by their paths below it
    (``Sequential.0``)."""

    def __init__(self) -> None:
        self._parents = {"Global"}
        self._known: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._seen: weakref.WeakSet = weakref.WeakSet()
        self._entered_in_backward = False
        self._hooks: list[Any] = []
        self._handles: list[Any] = []

    @property
    def parents(self) -> set[str]:
        # torch resets the set when the backward that entered modules ends (an engine
        # callback); here, at the first look after it
        if self._entered_in_backward and running_tape() is None:
            self._parents = {"Global"}
            self._entered_in_backward = False
        return self._parents

    @property
    def is_bw(self) -> bool:
        """Whether a backward is running (in this thread)."""
        return running_tape() is not None

    def _name(self, module: Any) -> str:
        if module not in self._known:
            self._known[module] = type(module).__name__
        name = self._known[module]
        if module not in self._seen:
            for child_name, child in module.named_children():
                self._known[child] = f"{name}.{child_name}"
                self._name(child)
            self._seen.add(module)
        return name

    def _enter(self, name: str, in_backward: bool) -> Callable[..., None]:
        def enter(*_: Any) -> None:
            parents = self.parents
            if in_backward:
                self._entered_in_backward = True
            parents.add(name)

        return enter

    def _leave(self, name: str) -> Callable[..., None]:
        def leave(*_: Any) -> None:
            self.parents.discard(name)

        return leave

    @staticmethod
    def _grad_tensors(value: Any) -> list[Tensor]:
        return [t for t in tree_flatten(value)[0] if isinstance(t, Tensor) and t.requires_grad]

    def _forward_pre_hook(self, module: Any, args: Any) -> None:
        name = self._name(module)
        self._enter(name, False)()
        tensors = self._grad_tensors(args)
        if tensors:
            self._hooks.append(register_multi_grad_hook(tensors, self._leave(name)))

    def _forward_hook(self, module: Any, args: Any, output: Any) -> None:
        name = self._name(module)
        self._leave(name)()
        tensors = self._grad_tensors(output)
        if tensors:
            enter = self._enter(name, True)
            nodes = [getattr(t._prim, "node", None) for t in tensors]

            def enter_unless_root(grads: Any) -> None:
                # torch's multi-grad hook does not fire on the tensor backward starts from:
                # a module that returns the loss itself is not entered in its backward there
                tape = running_tape()
                if tape is not None and any(
                    node is not None and node.id in tape.nodes and node.id not in tape.children
                    for node in nodes
                ):
                    return
                enter(grads)

            self._hooks.append(register_multi_grad_hook(tensors, enter_unless_root))

    def __enter__(self) -> ModuleTracker:
        self._handles = [
            register_module_forward_pre_hook(self._forward_pre_hook),
            register_module_forward_hook(self._forward_hook),
        ]
        return self

    def __exit__(self, *exc: Any) -> None:
        for handle in self._handles + self._hooks:
            handle.remove()
        self._handles, self._hooks = [], []


# -- the formulas (torch's, over shapes) ------------------------------------------------------
def mm_flop(a_shape: Any, b_shape: Any, *args: Any, out_shape: Any = None, **kwargs: Any) -> int:
    """``2 * m * n * k`` for ``[m, k] @ [k, n]`` (torch's ``mm_flop``)."""
    m, k = a_shape
    k2, n = b_shape
    if k != k2:
        raise InvalidArgumentError(f"mm_flop: inner sizes differ: {a_shape} @ {b_shape}")
    return m * n * 2 * k


def bmm_flop(a_shape: Any, b_shape: Any, out_shape: Any = None, **kwargs: Any) -> int:
    """``2 * b * m * n * k`` for ``[b, m, k] @ [b, k, n]`` (torch's ``bmm_flop``)."""
    b, m, k = a_shape
    b2, k2, n = b_shape
    if b != b2 or k != k2:
        raise InvalidArgumentError(f"bmm_flop: sizes differ: {a_shape} @ {b_shape}")
    return b * m * n * 2 * k


def conv_flop_count(x_shape: Any, w_shape: Any, out_shape: Any, transposed: bool = False) -> int:
    """torch's ``conv_flop_count``: multiplications (times 2) of a convolution, bias aside."""
    batch_size = x_shape[0]
    conv_shape = (x_shape if transposed else out_shape)[2:]
    c_out, c_in, *filter_size = w_shape
    return prod(conv_shape) * prod(filter_size) * batch_size * c_out * c_in * 2


def _transposed(shape: Any) -> list[int]:
    return [shape[1], shape[0], *shape[2:]]


def conv_backward_flop(
    grad_out_shape: Any, x_shape: Any, w_shape: Any, transposed: bool, output_mask: Any
) -> int:
    """torch's ``conv_backward_flop``: the input gradient a convolution of the other
    orientation, the weight gradient a convolution of the input with the output gradient."""
    count = 0
    if output_mask[0]:
        count += conv_flop_count(grad_out_shape, w_shape, x_shape, not transposed)
    if output_mask[1]:
        first, second = (grad_out_shape, x_shape) if transposed else (x_shape, grad_out_shape)
        count += conv_flop_count(
            _transposed(first), _transposed(second), _transposed(w_shape), transposed=False
        )
    return count


def sdpa_flop_count(query_shape: Any, key_shape: Any, value_shape: Any) -> int:
    """``q @ k^T`` and ``probs @ v`` (torch's ``sdpa_flop_count``)."""
    *lead, s_q, d_q = query_shape
    s_k, d_v = key_shape[-2], value_shape[-1]
    batch = prod(lead)
    return bmm_flop((batch, s_q, d_q), (batch, d_q, s_k)) + bmm_flop(
        (batch, s_q, s_k), (batch, s_k, d_v)
    )


def sdpa_backward_flop_count(query_shape: Any, key_shape: Any, value_shape: Any) -> int:
    """The four products of attention's backward on torch's CPU path (``dv``, ``dprobs``,
    ``dq``, ``dk``): twice the forward's."""
    return 2 * sdpa_flop_count(query_shape, key_shape, value_shape)


def _matmul_name(x_shape: Any, y_shape: Any) -> str:
    # torch folds a batch of left operands against a plain matrix into one mm
    return "aten.mm" if len(y_shape) == 2 else "aten.bmm"


def _matmul_flops(x_shape: Any, y_shape: Any) -> int:
    batch = prod(_broadcast(x_shape[:-2], y_shape[:-2]))
    return batch * x_shape[-2] * y_shape[-1] * 2 * x_shape[-1]


def _broadcast(a: Any, b: Any) -> tuple[int, ...]:
    a, b = tuple(a), tuple(b)
    width = max(len(a), len(b))
    a, b = (1,) * (width - len(a)) + a, (1,) * (width - len(b)) + b
    return tuple(max(i, j) for i, j in zip(a, b, strict=True))


#: inner backend kernel -> (its arguments, the shape function) -> [(torch's op name, flops)]
def _kernel_counts(kernel: str, shape: Callable[[Any], tuple], args: tuple) -> list:
    if kernel == "matmul":
        xs, ys = shape(args[0]), shape(args[1])
        return [(_matmul_name(xs, ys), _matmul_flops(xs, ys))]
    if kernel == "linear":
        xs, ws, bs = shape(args[0]), shape(args[1]), shape(args[2])
        name = "aten.addmm" if bs and bs[0] else "aten.mm"
        return [(name, prod(xs[:-1]) * ws[0] * 2 * xs[-1])]
    if kernel in ("conv", "conv_transpose"):
        xs, ws = shape(args[0]), shape(args[1])
        transposed = kernel == "conv_transpose"
        out = None if transposed else _conv_out(xs, ws, *args[3:6])
        return [("aten.convolution", conv_flop_count(xs, ws, out, transposed))]
    if kernel in ("conv_backward", "conv_transpose_backward"):
        gs, xs, ws = shape(args[0]), shape(args[1]), shape(args[2])
        needs = args[-1]
        transposed = kernel == "conv_transpose_backward"
        return [("aten.convolution_backward", conv_backward_flop(gs, xs, ws, transposed, needs))]
    if kernel == "conv_weight_grad":
        # conv(x, out_grad) with batch and channels swapped: the weight gradient's count
        xs, gs = shape(args[0]), shape(args[1])
        ws = (gs[1], xs[1] // args[-1], *args[2])
        count = conv_flop_count(_transposed(xs), _transposed(gs), _transposed(ws), False)
        return [("aten.convolution", count)]
    if kernel == "attention":
        return [("aten.bmm", sdpa_flop_count(shape(args[0]), shape(args[1]), shape(args[2])))]
    if kernel == "attention_backward":
        q, k, v = shape(args[1]), shape(args[2]), shape(args[3])
        return [("aten.bmm", sdpa_backward_flop_count(q, k, v))]
    return []


def _conv_out(x_shape: Any, w_shape: Any, stride: Any, padding: Any, dilation: Any) -> list:
    spatial = [
        (size + 2 * pad - dil * (kernel - 1) - 1) // step + 1
        for size, kernel, step, pad, dil in zip(
            x_shape[2:], w_shape[2:], stride, padding, dilation, strict=True
        )
    ]
    return [x_shape[0], w_shape[0], *spatial]


_COUNTED = (
    "matmul",
    "linear",
    "conv",
    "conv_transpose",
    "conv_backward",
    "conv_transpose_backward",
    "conv_weight_grad",
    "attention",
    "attention_backward",
)

#: user formulas by kernel name (register_flop_formula): ``formula(*args, shape=...)``
_custom_formulas: dict[str, Callable[..., int]] = {}


def register_flop_formula(targets: Any, get_raw: bool = False) -> Callable:
    """torch's decorator registering a FLOP formula; here ``targets`` name inner backend
    kernels (``"matmul"``, ``"softmax"``...), and the formula receives the kernel's argument
    shapes (tensors replaced by their shapes, other arguments as they are) and returns an int.
    A formula for a kernel counted already replaces torch's."""
    names = [targets] if isinstance(targets, str) else list(targets)
    for name in names:
        if not isinstance(name, str):
            raise InvalidArgumentError(
                "register_flop_formula: retrograd counts its backend's kernels by name (a str "
                f"such as 'matmul'), got {type(name).__name__}: torch's ATen ops do not run here"
            )

    def register(formula: Callable[..., int]) -> Callable[..., int]:
        check_callable("register_flop_formula", formula, "formula")
        for name in names:
            _custom_formulas[name] = formula
        return formula

    return register


class FlopCounterMode:
    """torch's ``FlopCounterMode``: counts the FLOPs of the products, convolutions and
    attention run inside it, forward and backward, under ``"Global"`` and under each module
    whose forward (or backward) runs them. Not reentrant, as torch's."""

    def __init__(
        self,
        mods: Any = None,
        depth: int = 2,
        display: bool = True,
        custom_mapping: dict[Any, Any] | None = None,
    ) -> None:
        if mods is not None:
            warnings.warn(
                "mods argument is not needed anymore, you can stop passing it", stacklevel=2
            )
        self.flop_counts: dict[str, dict[Any, int]] = defaultdict(lambda: defaultdict(int))
        self.depth = depth
        self.display = display
        self.mod_tracker = ModuleTracker()
        self._custom = dict(custom_mapping or {})
        for key in self._custom:
            if not isinstance(key, str):
                raise InvalidArgumentError(
                    "FlopCounterMode: custom_mapping's keys name backend kernels (str such as "
                    f"'matmul'), got {type(key).__name__}"
                )
        #: (backend, kernel name, what it had before, the counting wrapper put in its place)
        self._saved: list[tuple[Any, str, Any, Callable]] = []
        self._depth = threading.local()

    def get_total_flops(self) -> int:
        return sum(self.flop_counts["Global"].values())

    def get_flop_counts(self) -> dict[str, dict[Any, int]]:
        """``{module name: {op name: flops}}``, ``"Global"`` for everything counted."""
        return {k: dict(v) for k, v in self.flop_counts.items()}

    def get_table(self, depth: int | None = None) -> str:
        """torch's table (module, FLOP, % of total) to ``depth`` levels of modules."""
        depth = self.depth if depth is None else depth
        if depth is None:
            depth = 999999
        global_flops = self.get_total_flops()
        suffix = _suffix(global_flops)
        subsumed = False
        rows: list[list[str]] = []

        def module_rows(name: str, level: int) -> list[list[str]]:
            nonlocal subsumed
            total = sum(self.flop_counts[name].values())
            subsumed |= total >= global_flops
            pad = " " * level
            out = [[pad + name, _with_suffix(total, suffix), _percent(total, global_flops)]]
            for op, count in self.flop_counts[name].items():
                out.append(
                    [
                        pad + " - " + str(op),
                        _with_suffix(count, suffix),
                        _percent(count, global_flops),
                    ]
                )
            return out

        for name in sorted(self.flop_counts):
            if name == "Global":
                continue
            level = name.count(".") + 1
            if level <= depth:
                rows.extend(module_rows(name, level - 1))
        if "Global" in self.flop_counts and not subsumed:
            for row in rows:
                row[0] = " " + row[0]
            rows = module_rows("Global", 0) + rows
        if not rows:
            rows = [["Global", "0", "0%"]]
        return _simple_table(["Module", "FLOP", "% Total"], rows)

    def _count(self, kernel: str, shape: Callable[[Any], tuple], args: tuple) -> None:
        formula = self._custom.get(kernel) or _custom_formulas.get(kernel)
        if formula is not None:
            shaped = [shape(a) if _is_primitive(a, shape) else a for a in args]
            counts = [(kernel, int(formula(*shaped)))]
        else:
            counts = _kernel_counts(kernel, shape, args)
        if not counts:
            return
        for parent in set(self.mod_tracker.parents):
            for op, flops in counts:
                self.flop_counts[parent][op] += flops

    def _counting(self, kernel: str, method: Callable, shape: Callable) -> Callable:
        state = self._depth

        def counted(*args: Any, **kwargs: Any) -> Any:
            depth = getattr(state, "depth", 0)
            # (_saved empty: exited, and a later counter's wrapper calls this one)
            if depth == 0 and self._saved and not recomputing():
                self._count(kernel, shape, args)
            state.depth = depth + 1
            try:
                return method(*args, **kwargs)
            finally:
                state.depth = depth

        return counted

    def __enter__(self) -> FlopCounterMode:
        if self._saved:
            raise InvalidArgumentError("FlopCounterMode: this counter is already active")
        self.flop_counts.clear()
        self.mod_tracker.__enter__()
        backend = current_backend()
        inner = backend.inner if backend.is_autodiff else backend
        kernels = set(_COUNTED) | set(self._custom) | set(_custom_formulas)
        for name in sorted(kernels - METADATA):
            method = getattr(inner, name, None)
            if method is None:
                continue
            counting = self._counting(name, method, inner.shape)
            self._saved.append((inner, name, vars(inner).get(name, _MISSING), counting))
            setattr(inner, name, counting)
        _ACTIVE.append(self)
        return self

    def __exit__(self, *exc: Any) -> None:
        for owner, name, old, counting in reversed(self._saved):
            if vars(owner).get(name) is counting:
                if old is _MISSING:
                    delattr(owner, name)
                else:
                    setattr(owner, name, old)
            else:  # a counter entered after this one is still active (exits out of order):
                # it wraps this one's wrapper, and restores what this one had instead
                for other in _ACTIVE:
                    other._saved = [
                        (o, n, old if saved is counting else saved, c)
                        for o, n, saved, c in other._saved
                    ]
        self._saved.clear()
        if self in _ACTIVE:
            _ACTIVE.remove(self)
        self.mod_tracker.__exit__()
        if self.display:
            print(self.get_table(self.depth))


_MISSING = object()
#: The counters entered and not yet exited, oldest first.
_ACTIVE: list[FlopCounterMode] = []


def _is_primitive(value: Any, shape: Callable[[Any], tuple]) -> bool:
    if isinstance(value, int | float | bool | str | tuple | list | type(None)):
        return False
    try:
        shape(value)
    except Exception:
        return False
    return True


_SUFFIXES = ["", "K", "M", "B", "T"]


def _suffix(number: int) -> str:
    return _SUFFIXES[max(0, min(len(_SUFFIXES) - 1, (len(str(number)) - 2) // 3))]


def _with_suffix(number: int, suffix: str) -> str:
    index = _SUFFIXES.index(suffix)
    return f"{number / 1000**index:.3f}" + suffix


def _percent(number: int, total: int) -> str:
    return "0%" if total == 0 else f"{number / total:.2%}"


def _simple_table(header: list[str], rows: list[list[str]]) -> str:
    """tabulate's ``simple`` format, first column left-aligned, the others right."""
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]

    def line(cells: list[str]) -> str:
        return "  ".join(
            cell.ljust(w) if i == 0 else cell.rjust(w)
            for i, (cell, w) in enumerate(zip(cells, widths, strict=True))
        ).rstrip()

    return "\n".join([line(header), "  ".join("-" * w for w in widths), *map(line, rows)])
