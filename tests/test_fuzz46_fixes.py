"""Regressions found by ``test_random_autograd_46.py`` (the autograd API against torch).

- A second backward without ``retain_graph`` is refused through any walked node, also where
  torch's engine walks again (``(x + 1).sum()``: torch refuses only where a node walked had
  saved tensors its first backward freed). This is API.md section 3's contract (Burn's: a
  backward consumes the part of the graph it walks), kept on purpose; the tests below pin
  both sides of the departure.
- ``create_graph=True`` with an explicit ``retain_graph=False`` kept the graph; torch frees it.
- A tensor hook of a non-leaf input of ``autograd.grad`` whose own step does not run was not
  called (torch 2 captures that gradient after the hooks); a ``retain_grad()`` tensor lost its
  gradient in ``backward(inputs=)`` that walked through it, and kept the unhooked one when it
  was among the inputs.
- ``autograd.functional.jacobian``/``hessian`` accepted the combinations torch refuses
  (``strategy="forward-mode"`` without ``vectorize``, or with ``create_graph`` or ``strict``;
  ``strict`` with ``vectorize``).
- ``vmap`` over a custom Function ran where torch refuses (the ``forward(ctx, ...)`` form, or
  no ``vmap`` rule nor ``generate_vmap_rule``); ``Function.vmap`` did not exist.
- A view of a tensor that requires grad, taken under ``no_grad``, did not require grad.
- ``enable_grad`` (or ``set_grad_enabled(True)``) inside ``inference_mode`` recorded again;
  torch records nothing there whatever the grad mode.
"""

from __future__ import annotations

import numpy as np
import pytest

import retrograd as rg

torch = pytest.importorskip("torch")

X = [[0.5, -1.25, 2.0], [1.5, 0.75, -0.5]]


def leaf(lib, data=X):
    return lib.tensor(data, dtype=lib.float64, requires_grad=True)


def outcome(lib, program):
    """``program(lib)``'s values as NumPy, or the kind of what it raised: ``"refused"`` (ours
    must be a RetrogradError)."""
    try:
        values = program(lib)
    except Exception as error:
        if lib is rg:
            assert isinstance(error, rg.RetrogradError), repr(error)
        return "refused"
    return [None if v is None else np.array(v.detach().numpy()) for v in values]


def assert_like_torch(program):
    ours, theirs = outcome(rg, program), outcome(torch, program)
    if theirs == "refused" or ours == "refused":
        assert ours == theirs, f"retrograd {ours}, torch {theirs}"
        return
    assert len(ours) == len(theirs)
    for a, b in zip(ours, theirs):
        assert (a is None) == (b is None)
        if a is not None:
            np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)


def total_grad(lib, t, results):
    """torch's ``.grad`` (accumulated over calls); the sum of retrograd's Gradients."""
    if lib is torch:
        return t.grad
    found = [t.grad(r) for r in results if t.grad(r) is not None]
    return sum(found[1:], found[0]) if found else None


# -- a second backward through a consumed part --------------------------------------------------
SECOND_BACKWARD = {  # the program, and whether torch's engine walks it a second time
    "add_scalar_sum": (lambda lib, x: (x + 1.5).sum(), True),
    "views_and_reductions": (lambda lib, x: lib.cat([x.t(), x.t()], 1)[1:].flip(0).mean(), True),
    "neg_sub": (lambda lib, x: (-x - x.flip(1)).sum(), True),
    "mul_scalar": (lambda lib, x: (x * 2.0).sum(), False),  # torch saves the wrapped scalar
    "div_scalar": (lambda lib, x: (x / 4.0).sum(), False),
    "exp": (lambda lib, x: x.exp().sum(), False),
    "saving_below_stateless": (lambda lib, x: (x * x + 1.0).sum(), False),
    "mask": (lambda lib, x: x.masked_fill(x > 0, 0.0).sum(), False),  # torch saves the mask
}


@pytest.mark.parametrize("name", sorted(SECOND_BACKWARD))
def test_second_backward_through_a_consumed_part_is_refused_as_api_md_says(name):
    make, torch_walks_again = SECOND_BACKWARD[name]

    def program(lib):
        x = leaf(lib)
        loss = make(lib, x)
        results = [loss.backward()]
        results.append(loss.backward())
        return [total_grad(lib, x, results)]

    assert outcome(rg, program) == "refused"  # an AutodiffError (outcome checks the kind)
    assert (outcome(torch, program) != "refused") == torch_walks_again
    with pytest.raises(rg.AutodiffError, match=r"consumed|retain_graph"):
        program(rg)


def test_a_node_consumed_by_one_graph_refuses_another_graph_under_every_strategy():
    # the suite's strategy (a budget under RETROGRAD_CHECKPOINTING), and Balanced's recomputed
    # memory-bound nodes: the refusal is the same, and the tensors stay usable after it
    balanced = rg.Autodiff(rg.default_backend().inner, checkpointing=rg.BalancedCheckpointing())
    for backend in (rg.default_backend(), balanced):
        x = rg.tensor([1.0, 2.0, 3.0], dtype=rg.float64, backend=backend).require_grad()
        shifted = x + 1.0
        shifted.sum().backward()  # walks (and consumes) the add
        with pytest.raises(rg.AutodiffError):
            ((shifted.reshape(3, 1) ** 2).exp()).sum().backward()
        grads = ((x + 1.0) ** 2).exp().sum().backward()  # a new graph from the same leaf
        expected = (
            2 * (np.array([1.0, 2.0, 3.0]) + 1) * np.exp((np.array([1.0, 2.0, 3.0]) + 1) ** 2)
        )
        np.testing.assert_allclose(x.grad(grads).numpy(), expected, rtol=1e-12)


def _function(lib, saves, reads=True):
    class Scale(lib.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            if saves:
                ctx.save_for_backward(x)
            return x * 3.0

        @staticmethod
        def backward(ctx, g):
            if saves and reads:
                (x,) = ctx.saved_tensors
                return g * 3.0 + x * 0.0
            return g * 3.0

    return Scale


@pytest.mark.parametrize("saves", [False, True])
@pytest.mark.parametrize("reads", [False, True])
def test_a_second_backward_through_a_function_is_refused_as_api_md_says(saves, reads):
    def program(lib):
        x = leaf(lib)
        loss = _function(lib, saves, reads).apply(x).sum()
        results = [loss.backward(), loss.backward()]
        return [total_grad(lib, x, results)]

    assert outcome(rg, program) == "refused"
    # torch refuses only where the backward reads what the first one freed
    assert (outcome(torch, program) == "refused") == (saves and reads)


def test_a_function_of_two_outputs_reads_its_saved_tensors_for_both_in_one_backward():
    def program(lib):
        class Pair(lib.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                ctx.save_for_backward(x)
                return x * 2.0, x * x

            @staticmethod
            def backward(ctx, g1, g2):
                (x,) = ctx.saved_tensors
                return g1 * 2.0 + g2 * 2.0 * x

        x = leaf(lib)
        a, b = Pair.apply(x)
        loss = a.sum() + b.sum()
        first = [total_grad(lib, x, [loss.backward()])]
        try:
            loss.backward()
        except Exception as error:
            assert lib is torch or isinstance(error, rg.AutodiffError), repr(error)
            return first
        raise AssertionError("a second backward read the freed saved tensors")

    assert_like_torch(program)


# -- create_graph with retain_graph=False --------------------------------------------------------
@pytest.mark.parametrize("power", [False, True])
def test_create_graph_with_retain_graph_false_frees_the_graph_as_torch(power):
    def first_order(lib):
        x = leaf(lib)
        y = (x**3).sum() if power else x.exp().sum()
        (g,) = lib.autograd.grad(y, x, create_graph=True, retain_graph=False)
        return x, y, g

    def again(lib):
        x, y, _ = first_order(lib)
        return list(lib.autograd.grad(y, x))

    def second_order(lib):
        x, _, g = first_order(lib)
        return list(lib.autograd.grad(g.sum(), x))

    assert outcome(rg, again) == outcome(torch, again) == "refused"
    # through x ** 3 the first order's rules read the leaf only; through exp, its output
    assert_like_torch(second_order)
    assert (outcome(rg, second_order) == "refused") == (not power)


# -- tensor hooks on the inputs of autograd.grad and backward(inputs=) ----------------------------
@pytest.mark.parametrize("inputs", ["y", "y_and_x"])
def test_autograd_grad_of_a_hooked_non_leaf_captures_as_torch(inputs):
    def program(lib):
        x = leaf(lib)
        y = x * x
        calls = []
        y.register_hook(lambda g: calls.append(1) or g * 2.0)
        wanted = [y] if inputs == "y" else [y, x]
        found = list(lib.autograd.grad((y * 3.0).sum(), wanted))
        return [*found, lib.tensor(float(len(calls)))]

    assert_like_torch(program)


def test_a_hook_returning_none_on_the_only_input_runs_once():
    def program(lib):
        x = leaf(lib)
        y = x * x
        calls = []
        y.register_hook(lambda g: calls.append(1))
        return [*lib.autograd.grad((y * 3.0).sum(), [y]), lib.tensor(float(len(calls)))]

    assert_like_torch(program)


@pytest.mark.parametrize("wanted", ["y", "x", "y_and_x"])
@pytest.mark.parametrize("grad_wanted", [False, True])
def test_retained_gradient_under_backward_inputs_is_torchs(wanted, grad_wanted):
    def program(lib):
        x = leaf(lib)
        y = x * x
        y.retain_grad()
        y.register_hook(lambda g: g * 2.0)
        loss = (y * 3.0).sum()
        inputs = {"y": [y], "x": [x], "y_and_x": [y, x]}[wanted]
        if grad_wanted:
            return list(lib.autograd.grad(loss, inputs))
        result = loss.backward(inputs=inputs)
        return [total_grad(lib, y, [result]), total_grad(lib, x, [result])]

    assert_like_torch(program)


# -- autograd.functional's refused combinations --------------------------------------------------
FUNCTIONAL = {
    "forward_without_vectorize": lambda af, f, s, x: af.jacobian(f, x, strategy="forward-mode"),
    "forward_with_create_graph": lambda af, f, s, x: af.jacobian(
        f, x, vectorize=True, strategy="forward-mode", create_graph=True
    ),
    "forward_with_strict": lambda af, f, s, x: af.jacobian(
        f, x, vectorize=True, strategy="forward-mode", strict=True
    ),
    "strict_with_vectorize": lambda af, f, s, x: af.jacobian(f, x, strict=True, vectorize=True),
    "hessian_forward_without_vectorize": lambda af, f, s, x: af.hessian(
        s, x, outer_jacobian_strategy="forward-mode"
    ),
    "hessian_strict_with_vectorize": lambda af, f, s, x: af.hessian(
        s, x, strict=True, vectorize=True
    ),
}


@pytest.mark.parametrize("name", sorted(FUNCTIONAL))
def test_functional_combinations_torch_refuses_are_refused(name):
    # (the forms torch accepts are left out: its first forward-mode Jacobian costs seconds)
    def program(lib):
        x = lib.tensor(X, dtype=lib.float64)
        return [
            FUNCTIONAL[name](
                lib.autograd.functional, lambda t: (t**3).sum(-1), lambda t: (t**3).sum(), x
            )
        ]

    assert_like_torch(program)
    assert outcome(rg, program) == "refused"


def test_forward_mode_with_vectorize_gives_reverse_modes_values():
    x = rg.tensor(X, dtype=rg.float64)
    af = rg.autograd.functional
    f, s = (lambda t: (t**3).sum(-1)), (lambda t: (t**3).sum())
    forward = af.jacobian(f, x, vectorize=True, strategy="forward-mode")
    np.testing.assert_allclose(forward.numpy(), af.jacobian(f, x).numpy(), rtol=1e-12)
    hessian = af.hessian(s, x, vectorize=True, outer_jacobian_strategy="forward-mode")
    np.testing.assert_allclose(hessian.numpy(), af.hessian(s, x).numpy(), rtol=1e-12)


# -- vmap over custom Functions -------------------------------------------------------------------
def _mappable(lib, form):
    if form == "ctx_forward":
        return _function(lib, False)

    class Doubled(lib.autograd.Function):
        generate_vmap_rule = form == "generated"

        @staticmethod
        def forward(x):
            return x * 2.0

        @staticmethod
        def setup_context(ctx, inputs, output):
            pass

        @staticmethod
        def backward(ctx, g):
            return g * 2.0

    if form == "own_rule":
        Doubled.vmap = staticmethod(lambda info, in_dims, x: (x * 2.0, in_dims[0]))
    return Doubled


@pytest.mark.parametrize("form", ["ctx_forward", "no_rule", "generated", "own_rule"])
def test_vmap_over_a_function_follows_torchs_rules(form):
    def program(lib):
        return [lib.vmap(_mappable(lib, form).apply)(leaf(lib))]

    assert_like_torch(program)
    assert (outcome(rg, program) == "refused") == (form in ("ctx_forward", "no_rule"))


def test_function_vmap_exists_and_refuses_when_called():
    fn = _mappable(rg, "no_rule")
    with pytest.raises(rg.AutodiffError, match="override the vmap staticmethod"):
        fn.vmap(None, (0,), rg.ones(2))


# -- views taken under no_grad ---------------------------------------------------------------------
VIEWS = {
    "view": lambda x: x.view(6),
    "reshape": lambda x: x.reshape(3, 2),
    "transpose": lambda x: x.t(),
    "select": lambda x: x[1],
    "slice": lambda x: x[:, 1:],
    "unsqueeze": lambda x: x.unsqueeze(0),
    "expand": lambda x: x[:1].expand(2, 3),
}


@pytest.mark.parametrize("name", sorted(VIEWS))
def test_a_view_taken_under_no_grad_requires_grad_as_torch(name):
    for lib in (torch, rg):
        x = leaf(lib)
        with lib.no_grad():
            view = VIEWS[name](x)
            computed = x * 2.0
        assert view.requires_grad and view.is_leaf, lib.__name__
        assert not computed.requires_grad
        out = (view * 2.0).sum()
        assert out.requires_grad
        result = out.backward()
        assert total_grad(lib, x, [result]) is None  # the graph reaches the view, not x


# -- inference_mode and the grad mode inside it -------------------------------------------------
def test_enable_grad_inside_inference_mode_records_nothing_as_torch():
    for lib in (torch, rg):
        x = leaf(lib)
        seen = []
        with lib.inference_mode():
            seen.append(lib.is_grad_enabled())
            with lib.enable_grad():
                seen += [lib.is_grad_enabled(), (x * 2.0).requires_grad]
                with lib.inference_mode(False):
                    seen += [(x * 2.0).requires_grad]
            with lib.set_grad_enabled(True):
                seen += [(x * 2.0).requires_grad]
        seen += [lib.is_grad_enabled(), (x * 2.0).requires_grad]
        assert seen == [False, True, False, True, False, True, True], lib.__name__
