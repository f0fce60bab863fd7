"""Random training steps for the memory budget's round 67 (``tests/test_random_budget_67.py``).

:func:`program` draws, from a seed, a small training step (a random DAG of 5-30 ops over
float32 or float64 values of one shape) and the loop around it: leaves and the input rebuilt
from NumPy every step, masks and labels drawn per step, a dropout seeded per step, and one head
(one loss; two losses through a retained graph; a gradient penalty through
``autograd.grad(create_graph=True)``; ``backward(inputs=...)``). Some programs raise on purpose
at one step (a hook that raises in backward, a matmul of a bad shape in forward), and the loop
goes on. :func:`run` runs a program's loop under a checkpointing strategy and returns, per
step, its values (losses and gradients as NumPy copies, or the error it raised) and what the
budget held when the step ended.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

import retrograd as rg
from backends import inner_backend

F = rg.nn.functional

STEPS = 6

_UNARY: dict[str, Callable] = {
    "tanh": lambda x: x.tanh(),
    "sigmoid": lambda x: x.sigmoid(),
    "relu": lambda x: x.relu(),
    "gelu": lambda x: F.gelu(x),
    "silu": lambda x: F.silu(x),
    "softplus": lambda x: F.softplus(x),
    "sin": lambda x: x.sin(),
    "exp_tanh": lambda x: x.tanh().exp(),
    "square": lambda x: x * x * 0.5,
    "abs": lambda x: x.abs(),
    "log1p_sq": lambda x: (x * x + 1.0).log(),
}

_BINARY: dict[str, Callable] = {
    "add": lambda a, b: a + b,
    "sub": lambda a, b: a - b,
    "mul": lambda a, b: a * b,
    "max": lambda a, b: rg.maximum(a, b),
    "where": lambda a, b: rg.where(a > b, a, b * 0.5),
}


class Square(rg.autograd.Function):
    """A custom function: ``x * x`` saved for backward through ``save_for_backward``."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * x * 2.0


class PurposeError(Exception):
    """What a program raises on purpose (a hook's error)."""


class Program:
    """A random training step and its loop, drawn from ``seed``."""

    def __init__(self, seed: int):
        rng = np.random.default_rng(seed)
        self.seed = seed
        self.dtype = np.float32 if rng.random() < 0.6 else np.float64
        self.rows = int(rng.choice([4, 6, 8]))
        self.width = int(rng.choice([4, 6, 8]))
        self.ops: list[tuple] = []
        self.leaves: list[np.ndarray] = []  # weights and biases, the first (width, width)
        self._leaf(rng, (self.width, self.width))
        count = int(rng.integers(5, 31))
        values = 1  # the input
        for _ in range(count):
            kind = str(rng.choice(_KINDS))
            args = [int(rng.integers(0, values)) for _ in range(2)]
            extra = self._draw(kind, rng)
            self.ops.append((kind, args, extra))
            values += 1
        self.head = str(rng.choice(["loss", "two_heads", "late_head", "penalty", "inputs"]))
        self.loss = str(rng.choice(["mse", "cross_entropy"]))
        self.readout = int(rng.integers(max(0, values - 3), values))
        self.second = int(rng.integers(0, values))
        #: the step at which it raises on purpose, and how (or None)
        self.error = None
        if rng.random() < 0.35:
            self.error = (int(rng.integers(1, STEPS - 1)), str(rng.choice(["hook", "shape"])))
        self.hook_at = int(rng.integers(1, values))  # the value the hooks are registered on

    def _leaf(self, rng, shape) -> int:
        self.leaves.append((rng.standard_normal(shape) / np.sqrt(shape[0])).astype(self.dtype))
        return len(self.leaves) - 1

    def _draw(self, kind: str, rng) -> tuple:
        w = self.width
        if kind == "linear":
            return (self._leaf(rng, (w, w)), self._leaf(rng, (w,)), bool(rng.random() < 0.5))
        if kind == "glu":
            return (self._leaf(rng, (w, 2 * w)),)
        if kind in ("unary", "custom"):
            return (str(rng.choice(list(_UNARY))),)
        if kind == "binary":
            return (str(rng.choice(list(_BINARY))), str(rng.choice(["full", "row", "col"])))
        if kind == "reduce":
            return (str(rng.choice(["mean", "sum", "amax", "var"])), int(rng.integers(0, 2)))
        if kind == "view":
            return (str(rng.choice(["reshape_t", "slice_cat", "expand", "unfold", "unbind"])),)
        if kind == "inplace":
            return (str(rng.choice(["add_", "mul_view", "relu_", "t_view"])),)
        if kind == "multi":
            return (str(rng.choice(["max", "sort", "chunk", "split"])),)
        if kind == "constant":
            return (str(rng.choice(["mask_fill", "mask_mul", "table"])),)
        if kind == "island":
            return (str(rng.choice(["detach", "no_grad"])),)
        if kind == "dropout":
            return (str(rng.choice(["functional", "generator"])),)
        return ()

    # -- one step --------------------------------------------------------------------------
    def step(self, i: int) -> tuple[dict[str, np.ndarray], list[rg.Gradients]]:
        """The program's ``i``-th step: its losses and gradients, and its Gradients."""
        rng = np.random.default_rng((self.seed, i))
        scale = 1.0 + 0.05 * i
        leaves = [rg.tensor(a * scale).requires_grad_() for a in self.leaves]
        x = rg.tensor(rng.standard_normal((self.rows, self.width)).astype(self.dtype))
        data = {"rng": rng, "step": i}
        values = [x]
        for index, (kind, (a, b), extra) in enumerate(self.ops):
            out = _OPS[kind](self, values[a], values[b], leaves, extra, data)
            values.append(out)
            if index + 1 == self.hook_at and out.requires_grad:
                out.register_hook(lambda g: g * 0.5)
        if self.error == (i, "shape"):
            values[-1] @ leaves[0][:-1]  # (rows, width) @ (width - 1, width): raises
        out = values[self.readout]
        if not out.requires_grad:  # an island at the end: join the leaves in
            out = out + values[0] @ leaves[0]
        if self.error == (i, "hook"):  # (on the readout: every backward passes it)
            out.register_hook(_raise)
        loss = self._loss(out, rng)
        return self._head(loss, values, leaves)

    def _loss(self, out, rng):
        if self.loss == "mse":
            target = rg.tensor(rng.standard_normal(out.shape).astype(self.dtype))
            return F.mse_loss(out, target)
        labels = rg.tensor(rng.integers(0, self.width, self.rows))
        return F.cross_entropy(out, labels)

    def _head(self, loss, values, leaves) -> tuple[dict, list]:
        found: dict[str, np.ndarray] = {"loss": _array(loss)}
        reports = []
        if self.head in ("two_heads", "late_head"):
            other = values[self.second]
            other = other if other.requires_grad else values[0] @ leaves[0]
            if self.head == "two_heads":  # both heads recorded before the first backward
                other = (other.tanh() * other).mean()
                first = loss.backward(retain_graph=True)
            else:  # the second head recorded after it: a step of its own
                first = loss.backward(retain_graph=True)
                other = (other.tanh() * other).mean()
            second = other.backward()
            reports = [first, second]
            for n, grads in enumerate(reports):
                found.update({f"g{n}.{k}": _array(w.grad(grads)) for k, w in enumerate(leaves)})
            return found, reports
        if self.head == "penalty":
            found_grads = rg.autograd.grad(loss, leaves, create_graph=True, allow_unused=True)
            total = loss + 0.1 * sum((g * g).sum() for g in found_grads if g is not None)
            found["total"] = _array(total)
            grads = total.backward()
        elif self.head == "inputs":
            leaves = leaves[::2]
            grads = loss.backward(inputs=leaves)
        else:
            grads = loss.backward()
        found.update({f"g.{k}": _array(w.grad(grads)) for k, w in enumerate(leaves)})
        return found, [grads]


def _raise(grad):
    raise PurposeError("a hook raised on purpose")


def _array(value) -> np.ndarray:
    if value is None:  # (a leaf the backward does not reach)
        return np.array(["None"])
    return np.array(value.detach().numpy(), copy=True)


# -- the ops: each maps values of shape (rows, width) to one of the same shape ---------------
def _linear(p, a, b, leaves, extra, data):
    w, bias, fused = extra
    if fused:
        return F.linear(a, leaves[w].t(), leaves[bias])
    return a @ leaves[w] + leaves[bias]


def _glu(p, a, b, leaves, extra, data):
    left, right = (a @ leaves[extra[0]]).chunk(2, -1)
    return left * right.sigmoid()


def _unary(p, a, b, leaves, extra, data):
    return _UNARY[extra[0]](a)


def _custom(p, a, b, leaves, extra, data):
    return Square.apply(_UNARY[extra[0]](a) * 0.5)


def _binary(p, a, b, leaves, extra, data):
    name, form = extra
    if form == "row":
        b = b.mean(0, keepdim=True)  # (1, width), broadcast over rows
    elif form == "col":
        b = b[:, :1]  # (rows, 1), broadcast over columns
    return _BINARY[name](a, b)


def _reduce(p, a, b, leaves, extra, data):
    name, dim = extra
    if name == "var":
        r = a.var(dim, keepdim=True)
    else:
        r = getattr(a, name)(dim, keepdim=True)
    return a - r * 0.5


def _view(p, a, b, leaves, extra, data):
    name = extra[0]
    rows, width = a.shape
    if name == "reshape_t":
        t = a.reshape(rows, 2, width // 2).transpose(1, 2) * 1.5
        return t.reshape(rows, width) + b
    if name == "slice_cat":
        return rg.cat([a[:, 1:], a[:, :1] * 2.0], -1) * b.flip(0)
    if name == "expand":
        return a.sum(-1, keepdim=True).expand(rows, width) * b
    if name == "unfold":
        u = a.unfold(-1, 2, 1).sum(-1)  # (rows, width - 1)
        return rg.cat([u, b[:, -1:]], -1)
    rows_ = a.unbind(0)
    return rg.stack([r * rows_[0] for r in rows_]) + b


def _inplace(p, a, b, leaves, extra, data):
    name = extra[0]
    y = a * 1.0  # a non-leaf of its own
    if name == "add_":
        y.add_(b)
    elif name == "mul_view":
        y[:, : y.shape[1] // 2].mul_(b[:, : y.shape[1] // 2])
    elif name == "relu_":
        y.relu_()
    else:
        y.t()[0].add_(b[:, 0])
    return y


def _multi(p, a, b, leaves, extra, data):
    name = extra[0]
    if name == "max":
        values, indices = a.max(-1, keepdim=True)
        return (a - values) + b.gather(-1, indices)
    if name == "sort":
        values, indices = a.sort(-1)
        return values * b + indices.to(a.dtype) * 0.1
    if name == "split":  # uneven parts
        first, second = a.split([1, a.shape[1] - 1], -1)
        return rg.cat([second * first, first.exp()], -1)
    first, second = a.chunk(2, -1)
    return rg.cat([second * first, first], -1)


def _constant(p, a, b, leaves, extra, data):
    name = extra[0]
    rng = data["rng"]
    if name == "mask_fill":
        mask = rg.tensor(rng.random(a.shape) < 0.3)
        return a.masked_fill(mask, 0.0) + b
    if name == "mask_mul":
        mask = rg.tensor((rng.random(a.shape) < 0.7).astype(p.dtype))
        return a * mask + b
    table = rg.tensor(rng.standard_normal(a.shape).astype(p.dtype))
    return a * table + b


def _island(p, a, b, leaves, extra, data):
    if extra[0] == "detach":
        return a.detach().tanh() * b + a
    with rg.no_grad():
        c = (a * 2.0).sigmoid()
    return b * c + a


def _dropout(p, a, b, leaves, extra, data):
    seed = p.seed * 100 + data["step"]
    if extra[0] == "generator":  # its mask drawn from a generator seeded per step
        generator = rg.Generator().manual_seed(seed)
        keep = rg.rand(*a.shape, generator=generator) > 0.3
        return a * keep.to(a.dtype) / 0.7 + b
    rg.manual_seed(seed)
    return F.dropout(a, 0.3, training=True) + b


_OPS = {
    "linear": _linear,
    "glu": _glu,
    "unary": _unary,
    "custom": _custom,
    "binary": _binary,
    "reduce": _reduce,
    "view": _view,
    "inplace": _inplace,
    "multi": _multi,
    "constant": _constant,
    "island": _island,
    "dropout": _dropout,
}
_KINDS = [*_OPS, "linear", "unary", "binary"]  # the common ones twice as often


# -- a loop -----------------------------------------------------------------------------------
class Run:
    """A program's loop under one strategy: per step, its values or the error it raised, its
    Gradients' peaks and recomputed ops, and the budget's held bytes at the step's end."""

    def __init__(self):
        self.values: list[dict | str] = []
        self.reports: list[list[tuple[int, int]]] = []
        self.held: list[int] = []


def run(program: Program, strategy: rg.CheckpointStrategy, on_step=None) -> Run:
    result = Run()
    with rg.use_backend(rg.Autodiff(inner_backend(), strategy)):
        for i in range(STEPS):
            try:
                found, reports = program.step(i)
            except (PurposeError, rg.errors.ShapeError) as error:
                if program.error is None or program.error[0] != i:
                    raise
                result.values.append(type(error).__name__)
                result.reports.append([])
            else:
                result.values.append(found)
                result.reports.append([(g.peak_bytes, g.recomputed_ops) for g in reports])
                del found, reports
            if isinstance(strategy, rg.BudgetCheckpointing):
                result.held.append(strategy.held_bytes)
            if on_step is not None:
                on_step(i)
    return result


# -- the checks ---------------------------------------------------------------------------------
FRACTIONS = (0.1, 0.3, 0.5, 0.8, 1.0, 2.0)


def budget_of(plain: Run, choice) -> int:
    """The budget ``choice`` names: ``"256"`` bytes, or a fraction of ``plain``'s peak."""
    if choice == "256":
        return 256
    return int(choice * max(peak for step in plain.reports for peak, _ in step))


def differences(plain: Run, other: Run) -> list[str]:
    """Where ``other``'s values differ from ``plain``'s (bit for bit), step by step."""
    found = []
    for i, (mine, theirs) in enumerate(zip(other.values, plain.values)):
        if isinstance(theirs, str) or isinstance(mine, str):
            if mine != theirs:
                found.append(f"step {i}: {mine} where NoCheckpointing gave {theirs}")
            continue
        if list(mine) != list(theirs):
            found.append(f"step {i}: values {list(mine)} against {list(theirs)}")
            continue
        for key, expected in theirs.items():
            value = mine[key]
            floats = expected.dtype.kind == "f"
            if value.shape != expected.shape or not np.array_equal(value, expected, floats):
                found.append(f"step {i}: {key} differs")
    return found
