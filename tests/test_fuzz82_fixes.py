"""Round 82's defects in hooks, custom Functions and in-place writes, each against torch.

- a tensor hook that wrote into its gradient in place (``g.mul_(s)``, returning ``None``)
  changed what flowed on but not what ``autograd.grad`` returned for that non-leaf, where
  torch's captured gradient is that very tensor;
- a custom Function's ``backward`` under ``create_graph`` was called once per input (its
  cache keyed by a weak reference, which a recorded gradient does not take): with two outputs
  every input but the first got ``None``, with one the user's ``backward`` ran once per input;
- a second ``ctx.mark_non_differentiable(...)`` added to the first where torch's replaces it;
- a leaf frozen by ``requires_grad_(False)`` (or ``detach_()``) after an in-place write under
  ``no_grad`` still got the gradient of graphs recorded before the write (torch's ``.grad``
  stays ``None``: its engine accumulates into no leaf that does not require grad), and a
  view of a leaf taken before the freeze left the graph (torch's keeps its ``grad_fn``);
- a tensor hook returning something other than a tensor or ``None`` raised an
  ``AutodiffError`` (a ``RuntimeError``) where torch raises a ``TypeError``;
- ``retain_grad()`` then an in-place write (``y.add_(1)``, through a view too) lost the
  retained gradient (``None``), where torch's is the written value's;
- ``ctx.mark_dirty`` was refused: now the input forward wrote into is the output, in the
  graph (a view writes through to its base), with torch's refusals of a leaf that requires
  grad, of a view returned beside other outputs and of a dirty input not returned.
"""

from __future__ import annotations

import numpy as np
import pytest

import retrograd as rg

torch = pytest.importorskip("torch")

LIBS = [torch, rg]


def _grad(lib, t, grads):
    return t.grad if lib is torch else t.grad(grads)


def _np(t):
    return None if t is None else np.asarray(t.detach().numpy())


def _same(ours, theirs):
    assert (ours is None) == (theirs is None), (ours, theirs)
    if theirs is not None:
        np.testing.assert_allclose(_np(ours), _np(theirs), rtol=1e-12, atol=0)


def test_autograd_grad_captures_what_a_hook_wrote_into_the_gradient():
    def run(lib):
        x = lib.tensor([1.0, 2.0, -0.5], dtype=lib.float64, requires_grad=True)
        a = x * 2.0

        def halve(g):
            g.mul_(0.25)  # (returns None: the tensor written is the gradient)

        a.register_hook(halve)
        return lib.autograd.grad((a * a).sum(), [a, x])

    ours, theirs = run(rg), run(torch)
    for o, t in zip(ours, theirs):
        _same(o, t)
    assert theirs[0].tolist() == [1.0, 2.0, -0.5]  # (torch's: 2a written to a quarter)


def _two_output_function(lib, calls):
    class Pair(lib.autograd.Function):
        @staticmethod
        def forward(ctx, x, y):
            ctx.save_for_backward(x, y)
            return x * y, x.exp()

        @staticmethod
        def backward(ctx, g_prod, g_exp):
            calls.append(1)
            x, y = ctx.saved_tensors
            return g_prod * y + g_exp * x.exp(), g_prod * x

    return Pair


@pytest.mark.parametrize("outputs", [1, 2])
def test_function_backward_under_create_graph_gives_every_input_its_gradient(outputs):
    def run(lib):
        calls = []
        x = lib.tensor([1.0, 2.0], dtype=lib.float64, requires_grad=True)
        y = lib.tensor([3.0, -2.0], dtype=lib.float64, requires_grad=True)
        prod, e = _two_output_function(lib, calls).apply(x, y)
        loss = (prod * prod).sum() + (e.sum() if outputs == 2 else 0.0)
        gx, gy = lib.autograd.grad(loss, [x, y], create_graph=True)
        first_calls = len(calls)  # (the second order calls backward again, through prod)
        second = lib.autograd.grad((gx * gy).sum(), [x, y])
        return [gx, gy, *second], first_calls

    (ours, our_calls), (theirs, their_calls) = run(rg), run(torch)
    for o, t in zip(ours, theirs):
        _same(o, t)
    assert our_calls == their_calls == 1


def test_a_second_mark_non_differentiable_replaces_the_first():
    def run(lib):
        class Two(lib.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                a, b = x * 2.0, x * 3.0
                ctx.mark_non_differentiable(a)
                ctx.mark_non_differentiable(b)
                return a, b

            @staticmethod
            def backward(ctx, ga, gb):
                return ga * 2.0

        x = lib.tensor([1.0, 2.0], requires_grad=True)
        return [t.requires_grad for t in Two.apply(x)]

    assert run(rg) == run(torch) == [True, False]


@pytest.mark.parametrize("how", ["requires_grad_", "detach_", "thawed"])
def test_a_leaf_frozen_after_a_no_grad_write_gets_no_gradient_of_an_older_graph(how):
    def run(lib):
        x = lib.tensor([1.0, 2.0, 3.0], dtype=lib.float64, requires_grad=True)
        early = x * 1.5
        with lib.no_grad():
            x[1:].mul_(2.0)
        if how == "detach_":
            x.detach_()
        else:
            x.requires_grad_(False)
        if how == "thawed":
            x.requires_grad_(True)
        grads = ((x * 1.0).sum() + (early * 2.0).sum()).backward()
        return _grad(lib, x, grads), x.requires_grad

    ours, theirs = run(rg), run(torch)
    _same(ours[0], theirs[0])
    assert ours[1] == theirs[1]


def test_a_view_of_a_leaf_keeps_its_graph_when_the_leaf_is_frozen():
    def run(lib):
        x = lib.tensor([1.0, 2.0, 3.0], dtype=lib.float64, requires_grad=True)
        view = x[1:]
        x.requires_grad_(False)
        state = [view.requires_grad, view.is_leaf]
        grads = (view * view).sum().backward()
        return state, _grad(lib, x, grads)

    ours, theirs = run(rg), run(torch)
    assert ours[0] == theirs[0] == [True, False]
    _same(ours[1], theirs[1])


def _dirty_function(lib, outputs=1, returned=True):
    class Scale(lib.autograd.Function):
        @staticmethod
        def forward(ctx, x, y):
            x.mul_(2.0).add_(y)
            ctx.mark_dirty(x)
            if not returned:
                return y * 1.0
            return x if outputs == 1 else (x, y * 2.0)

        @staticmethod
        def backward(ctx, g, *rest):
            gy = g.reshape(-1, 2).sum(0)
            if rest:
                gy = gy + rest[0] * 2.0
            return g * 2.0, gy

    return Scale


@pytest.mark.parametrize("kind", ["nonleaf", "plain", "view", "no_grad"])
def test_mark_dirty_makes_the_input_the_output_in_the_graph(kind):
    def run(lib):
        a = lib.tensor([[1.0, 2.0], [3.0, 4.0]], dtype=lib.float64, requires_grad=True)
        y = lib.tensor([0.5, -1.0], dtype=lib.float64, requires_grad=True)
        base = (
            a * 1.0 if kind != "plain" else lib.tensor([[1.0, 2.0], [3.0, 4.0]], dtype=lib.float64)
        )
        x = base[1] if kind == "view" else base
        if kind == "no_grad":
            with lib.no_grad():
                out = _dirty_function(lib).apply(x, y)
            return [out is x, out.requires_grad, _np(base)]
        out = _dirty_function(lib).apply(x, y)
        state = [out is x, out.requires_grad, out.is_leaf, _np(base)]
        grads = ((base * base).sum() + (out * 0.5).sum()).backward()
        return state + [_np(_grad(lib, a, grads)), _np(_grad(lib, y, grads))]

    ours, theirs = run(rg), run(torch)
    assert len(ours) == len(theirs)
    for o, t in zip(ours, theirs):
        if isinstance(t, np.ndarray) or t is None:
            assert (o is None) == (t is None)
            if t is not None:
                np.testing.assert_allclose(o, t, rtol=1e-12)
        else:
            assert o == t


@pytest.mark.parametrize("case", ["leaf", "leaf_view", "view_two_outputs", "not_returned"])
def test_mark_dirty_refusals_are_torchs(case):
    def run(lib):
        a = lib.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
        y = lib.tensor([0.5, -1.0], requires_grad=True)
        x = {"leaf": a, "leaf_view": a[0], "view_two_outputs": (a * 1.0)[1]}.get(case, a * 1.0)
        fn = _dirty_function(lib, 2 if case == "view_two_outputs" else 1, case != "not_returned")
        with pytest.raises(RuntimeError) as caught:
            fn.apply(x, y)
        return caught.value, x

    (ours, x_ours), (theirs, x_theirs) = run(rg), run(torch)
    assert isinstance(ours, rg.RetrogradError), ours
    words = {"leaf": "leaf", "leaf_view": "leaf", "view_two_outputs": "view",
             "not_returned": "dirty"}  # fmt: skip
    assert words[case] in str(theirs).lower() and words[case] in str(ours).lower(), ours
    np.testing.assert_array_equal(x_ours.detach().numpy(), x_theirs.detach().numpy())


@pytest.mark.parametrize("write", ["add_", "view", "twice"])
def test_retain_grad_follows_the_tensor_through_an_in_place_write(write):
    def run(lib):
        x = lib.tensor([1.0, 2.0, 3.0], dtype=lib.float64, requires_grad=True)
        y = x * 2.0
        y.retain_grad()
        if write == "add_":
            y.add_(1.0)
        elif write == "view":
            y[1:].mul_(3.0)
        else:
            y.add_(1.0)
            y.mul_(x)
        grads = (y * y).sum().backward()
        return _grad(lib, y, grads), _grad(lib, x, grads), y.retains_grad

    ours, theirs = run(rg), run(torch)
    _same(ours[0], theirs[0])
    _same(ours[1], theirs[1])
    assert ours[2] == theirs[2] is True


def test_a_hook_returning_no_tensor_raises_a_type_error_as_torchs():
    def run(lib):
        x = lib.tensor([1.0, 2.0], requires_grad=True)
        y = x * 2.0
        y.register_hook(lambda g: 3.0)
        with pytest.raises(TypeError) as caught:
            (y * 1.0).sum().backward()
        return caught.value

    ours, theirs = run(rg), run(torch)
    assert isinstance(ours, rg.RetrogradError) and "float" in str(ours), ours
    assert "float" in str(theirs)
