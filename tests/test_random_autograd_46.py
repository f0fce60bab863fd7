"""Random programs against PyTorch, round 46: the autograd API's semantics, not op math.

Each program draws a small graph (a chain of ops, some of which torch's engine saves tensors
for and some not) over two float64 leaves, then a random use of the autograd API on it:
``backward`` twice (with or without ``retain_graph``, ``gradient=``, ``inputs=``), gradients
summed over calls (torch's ``.grad`` accumulation; retrograd's ``Gradients`` added),
``autograd.grad`` with its flags (``grad_outputs``, ``allow_unused``, ``materialize_grads``,
``create_graph`` then a second order, ``retain_graph`` then a second call), tensor hooks
(returning a replacement or ``None``, removed by handle) with ``retain_grad`` and a non-leaf
among the inputs, custom ``autograd.Function`` forms (saving or not, ``setup_context``,
``set_materialize_grads(False)``, ``once_differentiable``, ``None`` gradients), grad-mode
nesting with ``detach``/``detach_``/``requires_grad_``, in-place writes on leaves and their
views, and ``autograd.functional`` with ``strict``/``vectorize``/``strategy``/
``create_graph``. retrograd must agree with torch on each step: the values, the gradients
(``None`` or a tensor), whether it raises (ours a ``RetrogradError``), and the graph must stay
usable after an error. retrograd's documented departures are not drawn: a part of the graph
a backward consumed refuses a second walk even where it saved nothing (API.md section 3), a
saved value is never changed by a later in-place op (API.md section 10), ``backward()`` of a
non-scalar seeds with ones (section 3). The inner backend and checkpointing strategy are the
suite's.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import retrograd as rg

torch = pytest.importorskip("torch")

X = [[0.5, -1.25, 2.0], [1.5, 0.75, -0.5]]
W = [0.25, -1.5, 1.0]


def _examples(count: int) -> int:
    """``count``, times ``FUZZ46_SCALE`` (a longer hunt than the suite's)."""
    return count * int(os.environ.get("FUZZ46_SCALE", "1"))


SETTINGS = settings(
    max_examples=_examples(12),
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)


class Failed:
    """A step that raised: only whether it did is compared (and that ours is ours)."""

    def __init__(self, error: BaseException):
        self.error = error

    def __repr__(self) -> str:
        return f"raised {type(self.error).__name__}: {self.error}"


# -- the graph: a chain of ops on x (2x3) and w (3) ---------------------------------------------
# torch saves tensors for the second group's backward and none for the first: a second
# backward without retain_graph is refused exactly when one of the second group is walked
CHAIN = {
    "add_scalar": lambda lib, t, w: t + 1.5,
    "sub_w": lambda lib, t, w: t - w[: t.shape[-1]] if t.shape[-1] <= 3 else t - 1.0,
    "neg": lambda lib, t, w: -t,
    "transpose": lambda lib, t, w: t.t().t() if t.dim() == 2 else t,
    "slice": lambda lib, t, w: t[..., 1:] if t.shape[-1] > 1 else t,
    "cat": lambda lib, t, w: lib.cat([t, t], -1),
    "flip": lambda lib, t, w: t.flip(-1),
    "reshape": lambda lib, t, w: t.reshape(-1).reshape(t.shape),
    "mean_keep": lambda lib, t, w: t.mean(-1, keepdim=True),
    "mul_w": lambda lib, t, w: t * w[: t.shape[-1]] if t.shape[-1] <= 3 else t * 2.0,
    "mul_scalar": lambda lib, t, w: t * 0.5,
    "div_scalar": lambda lib, t, w: t / 4.0,
    "exp": lambda lib, t, w: (t * 0.3).exp(),
    "tanh": lambda lib, t, w: t.tanh(),
    "square": lambda lib, t, w: t**2,
}


def leaves(lib):
    x = lib.tensor(X, dtype=lib.float64, requires_grad=True)
    w = lib.tensor(W, dtype=lib.float64, requires_grad=True)
    return x, w


def chain(lib, names, x, w):
    t = x
    for name in names:
        t = CHAIN[name](lib, t, w)
    return t


def grad_of(lib, t, grads):
    """torch's ``t.grad``; retrograd's gradient of ``t`` in ``grads`` (``None`` without)."""
    if lib is torch:
        return t.grad
    return None if grads is None else t.grad(grads)


class Accumulated:
    """torch's ``.grad`` summed over backward calls, read the same way on both libraries:
    retrograd's Gradients of every call added up."""

    def __init__(self, lib):
        self.lib = lib
        self.total = None

    def add(self, result):
        if self.lib is not torch and result is not None:
            self.total = result if self.total is None else self.total + result

    def of(self, t):
        return grad_of(self.lib, t, self.total)


def run_steps(lib, steps):
    """Each step's value as NumPy at once (torch's ``.grad`` is added into in place later),
    or Failed, in order; a step that raised does not stop the rest."""
    trace = []
    for step in steps:
        try:
            trace.append(as_numpy(step()))
        except Exception as error:
            trace.append(Failed(error))
    return trace


def as_numpy(value):
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, Failed):
        return value
    if isinstance(value, list | tuple):
        return [as_numpy(v) for v in value]
    return np.array(value.detach().numpy() if hasattr(value, "detach") else value)  # a copy


def compare(ours, theirs, where=""):
    if isinstance(theirs, Failed) or isinstance(ours, Failed):
        assert isinstance(ours, Failed) == isinstance(theirs, Failed), (
            f"{where}: retrograd {ours!r}, torch {theirs!r}"
        )
        assert isinstance(ours.error, rg.RetrogradError), f"{where}: {ours!r} is not ours"
        return
    if theirs is None or ours is None:
        assert ours is None and theirs is None, f"{where}: retrograd {ours!r}, torch {theirs!r}"
        return
    if isinstance(theirs, list):
        assert isinstance(ours, list) and len(ours) == len(theirs), f"{where}: {ours} {theirs}"
        for i, (a, b) in enumerate(zip(ours, theirs)):
            compare(a, b, f"{where}[{i}]")
        return
    if isinstance(theirs, np.ndarray):
        assert isinstance(ours, np.ndarray), f"{where}: {ours!r} vs {theirs!r}"
        assert ours.shape == theirs.shape, f"{where}: shape {ours.shape} vs {theirs.shape}"
        np.testing.assert_allclose(ours, theirs, rtol=1e-7, atol=1e-10, err_msg=where)
        return
    assert ours == theirs, f"{where}: retrograd {ours!r}, torch {theirs!r}"


def check(program, *args):
    """``program(lib, *args)`` returns its steps; both libraries run them, step by step."""
    theirs = run_steps(torch, program(torch, *args))
    ours = run_steps(rg, program(rg, *args))
    assert len(ours) == len(theirs)
    for i, (a, b) in enumerate(zip(ours, theirs)):
        compare(a, b, f"{args} step {i}")


chains = st.lists(st.sampled_from(sorted(CHAIN)), min_size=1, max_size=3)
#: the ops of CHAIN torch's engine saves tensors for (the second group above)
SAVING = {"mul_w", "mul_scalar", "div_scalar", "exp", "tanh", "square"}
#: chains a walk without retain_graph leaves unwalkable in both libraries, at the op next to
#: the loss: API.md section 3 consumes every node walked, where torch's engine walks again
#: through ops that saved nothing (a chain of those alone, or the part above the first op
#: that saved, whose leaves torch accumulates into before it refuses), a departure
#: test_fuzz46_fixes.py pins
saving_chains = chains.filter(lambda names: names[-1] in SAVING)


# -- backward twice -------------------------------------------------------------------------------
def twice_program(lib, names, first_retain, seeded, wanted, second_wanted):
    x, w = leaves(lib)
    y = chain(lib, names, x, w)
    loss = y.sum()
    acc = Accumulated(lib)
    inputs = {"all": None, "x": [x], "w": [w], "both": [x, w]}

    def backward(retain, wanted_key):
        gradient = lib.tensor(1.5 if seeded else 1.0, dtype=lib.float64)
        kwargs = {"gradient": gradient, "retain_graph": retain}
        if inputs[wanted_key] is not None:
            kwargs["inputs"] = inputs[wanted_key]
        acc.add(loss.backward(**kwargs))
        return [acc.of(x), acc.of(w)]

    def fresh():  # the leaves stay usable whatever happened: a new graph differentiates
        out = (x * x).sum() + (w * 3.0).sum()
        acc.add(out.backward())
        return [acc.of(x), acc.of(w)]

    return [
        lambda: backward(first_retain, wanted),
        lambda: backward(False, second_wanted),
        fresh,
    ]


@SETTINGS
@given(
    names=saving_chains,
    first_retain=st.booleans(),
    seeded=st.booleans(),
    wanted=st.sampled_from(["all", "x", "both"]),
    second_wanted=st.sampled_from(["all", "x", "both"]),
)
def test_backward_twice_matches_torch(names, first_retain, seeded, wanted, second_wanted):
    check(twice_program, names, first_retain, seeded, wanted, second_wanted)


# -- autograd.grad with its flags ------------------------------------------------------------------
def grad_program(lib, names, flags):
    allow_unused, materialize, create_graph, retain, scaled, with_unused = flags
    x, w = leaves(lib)
    z = lib.tensor([1.0, 2.0], dtype=lib.float64, requires_grad=True)  # unused
    y = chain(lib, names, x, w)
    targets = [x, w, z] if with_unused else [x, w]
    grad_outputs = lib.full(y.shape, 0.5, dtype=lib.float64) if scaled else lib.ones_like(y)
    kwargs = {
        "grad_outputs": grad_outputs,
        "allow_unused": allow_unused,
        "materialize_grads": materialize,
        "create_graph": create_graph,
        "retain_graph": retain,
    }
    found = []

    def first():
        found[:] = lib.autograd.grad(y, targets, **kwargs)
        return [g for g in found] + [None if g is None else g.requires_grad for g in found]

    def again():  # a second call: torch's error unless the graph was kept
        return list(lib.autograd.grad(y, [x], grad_outputs=grad_outputs, allow_unused=True))

    def second_order():  # through the first gradient, when it was recorded
        g = found[0] if found else None
        if g is None or not g.requires_grad:
            return "not recorded"
        return list(lib.autograd.grad((g * g).sum(), [x, w], allow_unused=True))

    def fresh():
        return list(lib.autograd.grad((x * w).sum(), [x, w]))

    return [first, second_order, again, fresh]


@SETTINGS
@given(names=saving_chains, flags=st.tuples(*[st.booleans()] * 6))
def test_autograd_grad_flags_match_torch(names, flags):
    check(grad_program, names, flags)


# -- tensor hooks, retain_grad and a non-leaf among the inputs -------------------------------------
HOOKS = {
    "double": lambda g: g * 2.0,
    "plus_one": lambda g: g + 1.0,
    "none": lambda g: None,
}


def hook_program(lib, names, hooks, removed, retained, target, use_grad):
    x, w = leaves(lib)
    y = chain(lib, names, x, w) * 1.0  # a non-leaf of its own
    calls = []
    handles = []
    for name in hooks:
        hook = HOOKS[name]
        handles.append(y.register_hook(lambda g, hook=hook: calls.append(1) or hook(g)))
    if x_hooked := (len(hooks) % 2 == 1):
        x.register_hook(lambda g: g * 3.0)
    if removed and handles:
        handles[0].remove()
    if retained:
        y.retain_grad()
    out = (y * y).sum() if target == "square" else (y * 2.0).sum()
    acc = Accumulated(lib)
    wanted = {"y": [y], "y_x": [y, x], "x": [x], "w": [w]}[use_grad[1]]

    def run():
        if use_grad[0]:
            return list(lib.autograd.grad(out, wanted, allow_unused=True))
        acc.add(out.backward(inputs=wanted))
        return [acc.of(x), acc.of(w)] + ([acc.of(y)] if retained else [])

    return [run, lambda: len(calls), lambda: x_hooked]


@SETTINGS
@given(
    names=chains,
    hooks=st.lists(st.sampled_from(sorted(HOOKS)), max_size=3),
    removed=st.booleans(),
    retained=st.booleans(),
    target=st.sampled_from(["square", "double"]),
    use_grad=st.tuples(st.booleans(), st.sampled_from(["y", "y_x", "x", "w"])),
)
def test_hooks_match_torch(names, hooks, removed, retained, target, use_grad):
    check(hook_program, names, hooks, removed, retained, target, use_grad)


# -- custom autograd.Function ----------------------------------------------------------------------
def function_class(lib, seen, saves, split, materialize, once, none_grad):
    """``x * k`` and ``x * x`` (two outputs) in the form drawn; its backward notes in
    ``seen`` which incoming gradients were ``None``."""

    def backward(ctx, g1, g2):
        seen.append((g1 is None, g2 is None))
        if saves:
            (x,) = ctx.saved_tensors
        else:
            x = ctx.x_value
        total = 0.0
        if g1 is not None:
            total = total + g1 * ctx.k
        if g2 is not None:
            total = total + g2 * 2.0 * x
        return (None if none_grad else total), None

    def setup(ctx, x, k):
        ctx.k = k
        if not materialize:
            ctx.set_materialize_grads(False)
        if saves:
            ctx.save_for_backward(x)
        else:
            ctx.x_value = x.detach()

    if once:
        backward = lib.autograd.function.once_differentiable(backward)
    if split:

        class Split(lib.autograd.Function):
            @staticmethod
            def forward(x, k):
                return x * k, x * x

            @staticmethod
            def setup_context(ctx, inputs, output):
                setup(ctx, *inputs)

        Split.backward = staticmethod(backward)
        return Split

    class Joined(lib.autograd.Function):
        @staticmethod
        def forward(ctx, x, k):
            setup(ctx, x, k)
            return x * k, x * x

    Joined.backward = staticmethod(backward)
    return Joined


def function_program(lib, names, form, uses_second, twice, create_graph):
    x, w = leaves(lib)
    seen = []
    fn = function_class(lib, seen, *form)
    a, b = fn.apply(chain(lib, names, x, w), 3.0)
    loss = (a.sum() + b.sum()) if uses_second else a.sum()
    acc = Accumulated(lib)

    def first():
        if create_graph:
            gx = lib.autograd.grad(loss, [x], create_graph=True, allow_unused=True)[0]
            if gx is None or not gx.requires_grad:
                return [gx, "not recorded"]
            return [gx, lib.autograd.grad(gx.sum(), [x], allow_unused=True)[0]]
        acc.add(loss.backward(retain_graph=twice == "retain"))
        return [acc.of(x), acc.of(w)]

    def second():
        if twice == "no":
            return "not run"
        acc.add(loss.backward())
        return [acc.of(x), acc.of(w)]

    # (with both outputs used retrograd calls backward once per output's gradient, the other
    # given as zeros or None, where torch calls it once with both: the gradients agree, the
    # calls do not; and torch's refusal of a second backward comes from saved_tensors, inside
    # the call, ours before it: so the calls are compared for one output and one backward)
    calls = uses_second or twice == "again" or seen
    return [first, second, lambda: [a.requires_grad, b.requires_grad, calls]]


@SETTINGS
@given(
    names=chains,
    form=st.tuples(*[st.booleans()] * 5),
    uses_second=st.booleans(),
    twice=st.sampled_from(["no", "retain", "again"]),
    create_graph=st.booleans(),
)
def test_custom_functions_match_torch(names, form, uses_second, twice, create_graph):
    check(function_program, names, form, uses_second, twice, create_graph)


# -- grad modes, detach and requires_grad_ toggles, in-place on leaves -----------------------------
def mode_program(lib, names, modes, toggle, write):
    x, w = leaves(lib)
    contexts = {
        "no_grad": lib.no_grad,
        "enable_grad": lib.enable_grad,
        "off": lambda: lib.set_grad_enabled(False),
        "on": lambda: lib.set_grad_enabled(True),
        "inference": lib.inference_mode,
        "inference_off": lambda: lib.inference_mode(False),
    }
    results = []

    def nested(i):
        if i == len(modes):
            t = chain(lib, names, x, w)
            results.append(t)
            return [t.requires_grad, lib.is_grad_enabled(), lib.is_inference_mode_enabled()]
        with contexts[modes[i]]():
            inner = nested(i + 1)
            results.append(x * 2.0)
            return [*inner, results[-1].requires_grad]

    def toggled():
        if not results:  # the chain raised (a shape torch refuses too)
            return "no chain"
        if "inference" in modes:
            # (torch's inference tensors refuse requires_grad_ and saving outside the block;
            # retrograd's are ordinary tensors: not drawn)
            return "inference"
        t = results[0]
        if toggle == "detach":
            d = t.detach()
            # (a leaf's detach() requires grad in retrograd, Burn's rule: API.md section 3)
            return [t.is_leaf or d.requires_grad, d.is_leaf, t.requires_grad]
        if toggle == "detach_":
            t.detach_()
            return [t.requires_grad, t.is_leaf]
        if toggle == "requires_grad_false":
            if t.is_leaf and t.requires_grad:
                # a view taken under no_grad: torch's keeps following its base's flag
                return "no_grad view"
            t.requires_grad_(False)
            return [t.requires_grad]
        if toggle == "leaf_off":
            x.requires_grad_(False)
            return [x.requires_grad, (x * 2.0).requires_grad]
        return [t.detach().requires_grad_().requires_grad]

    def written():
        if write == "leaf":
            x.add_(1.0)
        elif write == "leaf_view":
            x[0].mul_(2.0)
        elif write == "leaf_no_grad":
            with lib.no_grad():
                x.add_(1.0)
        elif write == "view_of_result":
            t = x * 1.0
            t[:, 0].mul_(3.0)
            return [t, lib.autograd.grad(t.sum(), [x])[0]]
        return x

    def usable():
        if not x.requires_grad:
            return "x off"
        return list(lib.autograd.grad((x * w).sum(), [x, w]))

    return [lambda: nested(0), toggled, written, usable]


@SETTINGS
@given(
    names=chains,
    modes=st.lists(
        st.sampled_from(["no_grad", "enable_grad", "off", "on", "inference", "inference_off"]),
        max_size=3,
    ),
    toggle=st.sampled_from(
        ["detach", "detach_", "requires_grad_false", "leaf_off", "requires_grad_on"]
    ),
    write=st.sampled_from(["leaf", "leaf_view", "leaf_no_grad", "view_of_result", "none"]),
)
def test_grad_modes_and_toggles_match_torch(names, modes, toggle, write):
    check(mode_program, names, modes, toggle, write)


# -- autograd.functional ---------------------------------------------------------------------------
def functional_program(lib, names, which, create_graph, strict, vectorize, forward):
    af = lib.autograd.functional
    w_value = lib.tensor(W, dtype=lib.float64)

    def f(x):
        return chain(lib, names, x, w_value).sum(-1)

    def scalar(x):
        return (chain(lib, names, x, w_value) ** 2).sum()

    x = lib.tensor(X, dtype=lib.float64)
    v_out = lib.ones(f(lib.tensor(X, dtype=lib.float64)).shape, dtype=lib.float64)
    strategy = "forward-mode" if forward else "reverse-mode"
    if lib is torch and forward and vectorize and not (create_graph or strict):
        # the same values by reverse mode: torch's first forward-mode Jacobian (functorch's
        # vmap) costs seconds of setup, more than this whole file may take
        strategy = "reverse-mode"

    def run():
        if which == "jacobian":
            return af.jacobian(
                f, x, create_graph=create_graph, strict=strict, vectorize=vectorize,
                strategy=strategy,
            )  # fmt: skip
        if which == "hessian":
            return af.hessian(
                scalar, x, create_graph=create_graph, strict=strict, vectorize=vectorize,
                outer_jacobian_strategy=strategy,
            )  # fmt: skip
        if which == "vjp":
            return list(af.vjp(f, x, v_out, create_graph=create_graph, strict=strict))
        if which == "jvp":
            return list(af.jvp(f, x, x, create_graph=create_graph, strict=strict))
        return list(af.hvp(scalar, x, x, create_graph=create_graph, strict=strict))

    return [run, lambda: list(af.vjp(f, x, v_out))]


@SETTINGS
@given(
    names=chains,
    which=st.sampled_from(["jacobian", "hessian", "vjp", "jvp", "hvp"]),
    create_graph=st.booleans(),
    strict=st.booleans(),
    vectorize=st.booleans(),
    forward=st.booleans(),
)
def test_functional_api_matches_torch(names, which, create_graph, strict, vectorize, forward):
    check(functional_program, names, which, create_graph, strict, vectorize, forward)
