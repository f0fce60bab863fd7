"""Fuzz round 37: forward-mode AD (``autograd.forward_ad``, ``func.jvp``/``jacfwd``/``hessian``,
``autograd.functional.jvp``/``hvp``) against torch's forward mode, the reference for every
expected value here."""

import numpy as np
import pytest
import torch
import torch.autograd.forward_ad as tfw

import retrograd as rg
import retrograd.autograd.forward_ad as rfw

SHAPE = (3, 4)
#: zeros, ties and signs where elementwise ops have kinks
KINKS = np.array([0.0, -1.0, 1.0, 0.0, 2.0, -0.0, 0.5, -2.0, 0.0, 1.0, -1.0, 3.0]).reshape(SHAPE)


def _positive(rng, shape):
    return np.abs(rng.standard_normal(shape)) + 0.1


def _kinks(rng, shape):
    return KINKS


def _tangents(lib, fwd, fn, primals, tangents, dtype):
    """The tangents of ``fn``'s outputs, duals made of ``primals`` (``None``: a plain tensor)."""
    with fwd.dual_level():
        args = [
            lib.tensor(p, dtype=dtype)
            if t is None
            else fwd.make_dual(lib.tensor(p, dtype=dtype), lib.tensor(t, dtype=dtype))
            for p, t in zip(primals, tangents)
        ]
        out = fn(lib, *args)
        outs = out if isinstance(out, tuple | list) else (out,)
        found = [fwd.unpack_dual(o).tangent for o in outs]
        return [None if t is None else np.asarray(t.tolist()) for t in found]


# name, function of (library, *tensors), argument shapes, primal generator, which carry a
# tangent, whether the values must be the same bits (linear maps: no rounding to differ in)
CASES = [
    ("relu", lambda lib, x: lib.relu(x), [SHAPE], _kinks, None, True),
    ("abs", lambda lib, x: lib.abs(x), [SHAPE], _kinks, None, True),
    ("sign", lambda lib, x: lib.sign(x), [SHAPE], _kinks, None, True),
    ("sqrt", lambda lib, x: lib.sqrt(x), [SHAPE], _positive, None, False),
    ("tanh", lambda lib, x: lib.tanh(x), [SHAPE], None, None, False),
    ("hardtanh", lambda lib, x: lib.nn.functional.hardtanh(x), [SHAPE], _kinks, None, True),
    ("leaky_relu", lambda lib, x: lib.nn.functional.leaky_relu(x), [SHAPE], _kinks, None, True),
    ("clamp", lambda lib, x: lib.clamp(x, -1.0, 1.0), [SHAPE], _kinks, None, True),
    ("where", lambda lib, x, y: lib.where(x > 0, x, y), [SHAPE, SHAPE], _kinks, None, True),
    ("max_tie", lambda lib, x: lib.maximum(x, x), [SHAPE], None, None, False),
    ("amax_tie", lambda lib, x: lib.amax(x * 0 + 1, 1), [SHAPE], None, None, False),
    ("div_by_zero", lambda lib, x, y: x / (y * 0), [SHAPE, SHAPE], None, None, False),
    ("rpow_zero", lambda lib, x: 0.0**x, [SHAPE], _positive, None, False),
    ("pow", lambda lib, x, y: lib.pow(x, y), [SHAPE, SHAPE], _positive, None, False),
    ("logcumsumexp", lambda lib, x: lib.logcumsumexp(x, 1), [SHAPE], None, None, False),
    ("prod_zero", lambda lib, x: lib.prod(x, 1), [SHAPE], _kinks, None, False),
    ("logsumexp", lambda lib, x: lib.logsumexp(x, 0, keepdim=True), [SHAPE], None, None, False),
    ("var", lambda lib, x: lib.var(x, 1), [SHAPE], None, None, False),
    ("norm", lambda lib, x: lib.linalg.vector_norm(x, dim=1), [SHAPE], None, None, False),
    ("matmul", lambda lib, a, b: a @ b.mT, [SHAPE, SHAPE], None, [True, False], False),
    (
        "conv2d",
        lambda lib, x, w: lib.nn.functional.conv2d(x, w, padding=1),
        [(1, 2, 4, 4), (3, 2, 3, 3)],
        None,
        None,
        False,
    ),
    ("log_softmax", lambda lib, x: lib.log_softmax(x, 1), [SHAPE], None, None, False),
    (
        "layer_norm",
        lambda lib, x: lib.nn.functional.layer_norm(x, (4,)),
        [SHAPE],
        None,
        None,
        False,
    ),
    (
        "batch_norm_train",
        lambda lib, x: lib.nn.functional.batch_norm(x, None, None, training=True),
        [SHAPE],
        None,
        None,
        False,
    ),
    (
        "gather_scatter",
        lambda lib, x, s: lib.gather(x, 1, lib.tensor([[0, 0], [1, 3], [2, 2]])).scatter(
            1, lib.tensor([[1], [0], [1]]), s
        ),
        [SHAPE, (3, 1)],
        None,
        None,
        True,
    ),
    (
        "cat_views",
        lambda lib, a, b: lib.cat([a.t(), b.t()], 1)[1:, ::2].flip(0),
        [SHAPE, SHAPE],
        None,
        [True, False],
        True,
    ),
    ("integer_output", lambda lib, x: (x > 0, x.argmax(1)), [SHAPE], None, None, True),
]


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize(
    "name, fn, shapes, generate, carried, exact", CASES, ids=[c[0] for c in CASES]
)
def test_tangents_match_torch_forward_mode(name, fn, shapes, generate, carried, exact, dtype):
    rng = np.random.default_rng(37)
    primals = [(generate or (lambda r, s: r.standard_normal(s)))(rng, s) for s in shapes]
    tangents = [rng.standard_normal(s) for s in shapes]
    if carried is not None:
        tangents = [t if c else None for t, c in zip(tangents, carried)]
    primals, tangents = (
        [p.tolist() for p in primals],
        [None if t is None else t.tolist() for t in tangents],
    )
    expected = _tangents(torch, tfw, fn, primals, tangents, getattr(torch, dtype))
    got = _tangents(rg, rfw, fn, primals, tangents, dtype)
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        assert (g is None) == (e is None), name
        if e is None:
            continue
        if exact:
            np.testing.assert_array_equal(g, e)
        else:
            tol = 1e-12 if dtype == "float64" else 2e-5
            np.testing.assert_allclose(g, e, rtol=tol, atol=tol)


def test_a_dual_updated_in_place_carries_the_updated_tangent():
    # torch's tangent of x.mul_(2) is 2 t; the dual kept the tangent it was made with
    results = []
    for lib, fwd in ((torch, tfw), (rg, rfw)):
        with fwd.dual_level():
            x = fwd.make_dual(lib.tensor([1.0, -2.0, 0.0]), lib.tensor([1.0, 2.0, 3.0]))
            x.mul_(2.0)
            x.add_(x * x)
            results.append(fwd.unpack_dual(x).tangent.tolist())
    assert results[1] == results[0]


def test_make_dual_of_a_tensor_with_a_tangent_is_refused():
    # torch refuses; the dual used to add both tangents silently
    with rfw.dual_level():
        x = rfw.make_dual(rg.tensor([1.0, 2.0]), rg.tensor([1.0, 1.0]))
        for tensor in (x, x * 3):
            with pytest.raises(rg.AutodiffError, match=r"make_dual: .* already has a tangent"):
                rfw.make_dual(tensor, rg.tensor([2.0, 2.0]))
        # its primal has none, as torch's: a dual of it is allowed and carries only its own
        primal = rfw.unpack_dual(x * 3).primal
        y = rfw.make_dual(primal, rg.tensor([0.0, 5.0]))
        assert rfw.unpack_dual(y * 2).tangent.tolist() == [0.0, 10.0]


def test_the_primal_of_a_dual_carries_no_tangent():
    for lib, fwd in ((torch, tfw), (rg, rfw)):
        with fwd.dual_level():
            x = fwd.make_dual(lib.tensor([1.0, 2.0]), lib.tensor([1.0, 1.0]))
            assert fwd.unpack_dual(fwd.unpack_dual(x).primal * 2).tangent is None
            assert fwd.unpack_dual(fwd.unpack_dual(x * x).primal * 2).tangent is None
            with pytest.raises(TypeError):
                fwd.unpack_dual(3.0)


def test_func_jvp_of_logcumsumexp_and_rpow_at_zero_match_torch():
    # the double-backward trick differentiated the backward at a zero output gradient, where
    # logcumsumexp's (in log space) and 0 ** x's (times -inf) gave NaN
    x = [[0.3, -1.2, 2.0], [1.0, 0.5, -0.5]]
    v = [[1.0, -2.0, 0.5], [0.25, 1.0, -1.0]]
    for fn in (lambda lib, a: lib.logcumsumexp(a, 1), lambda lib, a: 0.0 ** (a * a)):
        t64 = torch.float64
        expected = torch.func.jvp(
            lambda a, fn=fn: fn(torch, a),
            (torch.tensor(x, dtype=t64),),
            (torch.tensor(v, dtype=t64),),
        )[1]
        got = rg.func.jvp(
            lambda a, fn=fn: fn(rg, a),
            (rg.tensor(x, dtype="float64"),),
            (rg.tensor(v, dtype="float64"),),
        )[1]
        # (torch's logcumsumexp tangent is off by some 1e-13: its first is not exactly 1)
        np.testing.assert_allclose(got.numpy(), expected.numpy(), rtol=1e-11, atol=1e-15)


def _reverse_over_forward(lib, fwd):
    """Gradients of tangents: with respect to a primal (a Hessian-vector product), to a
    tangent, and to a weight the function closes over."""
    torch_like = lib is torch
    a = lib.tensor([1.0, 2.0, 3.0], dtype=lib.float64, requires_grad=True)
    v = lib.tensor([1.0, 0.5, -1.0], dtype=lib.float64, requires_grad=True)
    w = lib.tensor([[1.0, 2.0, 0.5], [0.3, -1.0, 2.0]], dtype=lib.float64)
    w = w.requires_grad_() if torch_like else w.require_grad()
    with fwd.dual_level():
        x = fwd.make_dual(a, v)
        tangent = fwd.unpack_dual(lib.tanh(w @ lib.sin(x)).sum() * x.prod()).tangent
        assert tangent.requires_grad
        grads = lib.autograd.grad(tangent, [a, v, w])
    return [g.tolist() for g in grads]


def test_tangents_are_differentiable_as_torchs():
    # the tangent was detached: no reverse mode over forward mode
    expected = _reverse_over_forward(torch, tfw)
    got = _reverse_over_forward(rg, rfw)
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g, e, rtol=1e-13)


def _custom_jvp(lib, fwd):
    class Exp(lib.autograd.Function):
        @staticmethod
        def forward(x):
            return x.exp()

        @staticmethod
        def setup_context(ctx, inputs, output):
            ctx.save_for_forward(output)

        @staticmethod
        def jvp(ctx, tangent):
            (out,) = ctx.saved_tensors
            return tangent * out

    with fwd.dual_level():
        x = fwd.make_dual(lib.tensor([0.0, 1.0]), lib.tensor([1.0, 2.0]))
        return fwd.unpack_dual(Exp.apply(x) * 3).tangent.tolist()


def test_a_custom_function_saving_for_forward():
    # ctx.save_for_forward was missing (AttributeError)
    np.testing.assert_allclose(_custom_jvp(rg, rfw), _custom_jvp(torch, tfw), rtol=1e-6)


def test_functional_call_with_dual_parameters_and_a_consumed_graph():
    results = []
    for lib, fwd in ((torch, tfw), (rg, rfw)):
        lib.manual_seed(0)
        model = lib.nn.Sequential(lib.nn.Linear(3, 4), lib.nn.Tanh(), lib.nn.Linear(4, 2))
        params = dict(model.named_parameters())
        with lib.no_grad():
            for i, p in enumerate(params.values()):
                p.copy_(lib.arange(p.numel(), dtype=p.dtype).reshape(p.shape) / 10 - 0.3 * i)
        with fwd.dual_level():
            duals = {n: fwd.make_dual(p, lib.ones_like(p) / 10) for n, p in params.items()}
            out = lib.func.functional_call(model, duals, (lib.arange(6.0).reshape(2, 3),))
            results.append(fwd.unpack_dual(out).tangent.tolist())
            if lib is rg:
                loss = out.sum()
                loss.backward()
                # not a silent None: the graph the tangent needs is gone
                with pytest.raises(rg.AutodiffError, match="consumed"):
                    fwd.unpack_dual(loss)
    np.testing.assert_allclose(results[1], results[0], rtol=1e-6)
