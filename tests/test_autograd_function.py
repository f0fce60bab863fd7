"""``rg.autograd.Function`` against ``torch.autograd.Function``: the same custom functions
written once for both libraries (``forward``/``backward`` with ``ctx``, and the
``setup_context`` form), values and gradients in float64, several outputs, non-tensor
arguments, ``None`` gradients, non-differentiable outputs, second order, checkpointing, and
the errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import retrograd as rg

RNG = np.random.default_rng(41)


def functions(lib):
    """Custom functions written against ``lib`` (retrograd or torch)."""

    class ScaledExp(lib.autograd.Function):
        """exp(alpha * x) * y: a non-tensor argument, two inputs, a saved output."""

        @staticmethod
        def forward(ctx, x, alpha, y):
            out = (x * alpha).exp() * y
            ctx.save_for_backward(x, y, out)
            ctx.alpha = alpha
            return out

        @staticmethod
        def backward(ctx, grad):
            x, _, out = ctx.saved_tensors
            gx = grad * out * ctx.alpha if ctx.needs_input_grad[0] else None
            gy = grad * (x * ctx.alpha).exp() if ctx.needs_input_grad[2] else None
            return gx, None, gy

    class StraightThrough(lib.autograd.Function):
        """round in forward, identity in backward (a straight-through estimator)."""

        @staticmethod
        def forward(ctx, x):
            return x.round()

        @staticmethod
        def backward(ctx, grad):
            return grad

    class SplitMoments(lib.autograd.Function):
        """Two outputs: the row sums and the row sums of squares; an int output too."""

        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            argmax = x.argmax(1)
            ctx.mark_non_differentiable(argmax)
            return x.sum(1), (x * x).sum(1), argmax

        @staticmethod
        def backward(ctx, g_sum, g_squares, g_argmax):
            (x,) = ctx.saved_tensors
            return g_sum.unsqueeze(1) + 2 * x * g_squares.unsqueeze(1)

    class Cube(lib.autograd.Function):
        """torch's newer form: forward without ctx, setup_context; a broadcast gradient."""

        @staticmethod
        def forward(x, bias):
            return x * x * x + bias

        @staticmethod
        def setup_context(ctx, inputs, output):
            ctx.save_for_backward(inputs[0])

        @staticmethod
        def backward(ctx, grad):
            (x,) = ctx.saved_tensors
            return 3 * x * x * grad, grad  # the bias's gradient still [N, F]: summed

    return ScaledExp, StraightThrough, SplitMoments, Cube


def _run(lib, case, arrays):
    scaled_exp, straight, split, cube = functions(lib)
    xs = [lib.tensor(a, dtype=lib.float64) for a in arrays]
    if lib is rg:
        xs = [x.require_grad() for x in xs]
    else:
        xs = [x.requires_grad_() for x in xs]
    if case == "scaled_exp":
        out = scaled_exp.apply(xs[0], 0.7, xs[1])
    elif case == "straight_through":
        out = (straight.apply(xs[0] * 3.0) * xs[0]).sin()
    elif case == "two_outputs":
        total, squares, argmax = split.apply(xs[0])
        out = total * squares.cos() + argmax.to(total.dtype)
    else:
        out = cube.apply(xs[0], xs[1])
    seed = np.random.default_rng(3).standard_normal(tuple(out.shape))
    loss = (out * lib.tensor(seed)).sum()
    if lib is rg:
        grads = loss.backward()
        return out.numpy(), [x.grad(grads).numpy() for x in xs]
    loss.backward()
    return out.detach().numpy(), [x.grad.numpy() for x in xs]


CASES = {
    "scaled_exp": [RNG.standard_normal((3, 4)), RNG.standard_normal((3, 4))],
    "straight_through": [RNG.standard_normal((5,))],
    "two_outputs": [RNG.standard_normal((4, 3))],
    "setup_context": [RNG.standard_normal((4, 3)), RNG.standard_normal((3,))],
}


@pytest.mark.parametrize("case", list(CASES))
def test_custom_functions_match_torchs(case):
    ours, theirs = _run(rg, case, CASES[case]), _run(torch, case, CASES[case])
    np.testing.assert_allclose(ours[0], theirs[0], rtol=1e-12, atol=1e-13)
    for mine, reference in zip(ours[1], theirs[1]):
        np.testing.assert_allclose(mine, reference, rtol=1e-10, atol=1e-12)


def test_backward_is_recorded_for_second_order_and_checkpointing_keeps_it():
    a = RNG.standard_normal((3, 4))
    for lib in (rg, torch):
        scaled_exp = functions(lib)[0]
        x = lib.tensor(a)
        x = x.require_grad() if lib is rg else x.requires_grad_()
        y = lib.tensor(np.ones((3, 4)))
        (g,) = lib.autograd.grad(scaled_exp.apply(x, 1.3, y).sum(), x, create_graph=True)
        (gg,) = lib.autograd.grad((g * g).sum(), x)
        if lib is rg:
            ours = gg.numpy()
        else:
            np.testing.assert_allclose(ours, gg.numpy(), rtol=1e-10)
    backend = rg.Autodiff(rg.current_backend().inner, checkpointing=rg.BalancedCheckpointing())
    with rg.use_backend(backend):
        x = rg.tensor(a).require_grad()
        out = functions(rg)[0].apply(x.tanh(), 0.5, rg.tensor(np.ones((3, 4))))
        grads = (out * out).sum().backward()
        t = np.tanh(a)
        expected = np.exp(t) * (1 - t * t)  # d/dx of exp(0.5 tanh x)^2
        np.testing.assert_allclose(x.grad(grads).numpy(), expected, rtol=1e-10)


def test_without_grad_the_forward_alone_runs_and_errors_name_the_function():
    straight = functions(rg)[1]
    x = rg.tensor([1.0, 2.0])
    assert not straight.apply(x).requires_grad

    class WrongCount(rg.autograd.Function):
        @staticmethod
        def forward(ctx, x, y):
            return x * y

        @staticmethod
        def backward(ctx, grad):
            return grad

    class WrongShape(rg.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x.sum()

        @staticmethod
        def backward(ctx, grad):
            return rg.ones((7,))

    leaf = rg.tensor([1.0, 2.0]).require_grad()
    with pytest.raises(rg.AutodiffError, match="incorrect number of gradients"):
        WrongCount.apply(leaf, leaf).sum().backward()
    with pytest.raises(rg.ShapeError, match="invalid gradient at index 0"):
        WrongShape.apply(leaf).backward()
    assert (leaf * 2.0).sum().backward() is not None  # the leaf stays usable


# -- vmap ----------------------------------------------------------------------------------------
def test_vmap_matches_torchs_values_and_gradients():
    from surface_testing import same_gradients

    x, w, b = RNG.standard_normal((5, 3)), RNG.standard_normal((3, 4)), RNG.standard_normal((4,))

    def per_sample(lib, xs, weight, bias):
        return lib.vmap(lambda row, m: (row @ m + bias).tanh(), in_dims=(0, None))(xs, weight)

    same_gradients(per_sample, [x, w, b])

    def two_outputs(lib, xs):
        pair = lib.vmap(lambda row: (row * row, row.sum()), in_dims=1, out_dims=(1, 0))(xs)
        return pair[0].sum(0) * pair[1]

    same_gradients(two_outputs, [x])
    with pytest.raises(rg.ShapeError, match="same size in the mapped dimension"):
        rg.vmap(lambda a, c: a + c)(rg.ones((3,)), rg.ones((4,)))
