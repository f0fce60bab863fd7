"""rg.autograd.functional (torch.autograd.functional) and rg.func (torch.func) against torch
2.13 in float64: the values, and the structure of the results (a tensor, a tuple, a tuple of
tuples), on elementwise, matmul-based, multi-input, multi-output and scalar functions; nested
transforms, ``has_aux``, ``argnums``; the errors of bad input."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.func as tfunc
from torch.autograd import functional as taf

import retrograd as rg
from retrograd import func as rfunc
from retrograd.autograd import functional as raf

# torch.func itself scripts a helper on first use
pytestmark = pytest.mark.filterwarnings("ignore:`torch.jit.script`:DeprecationWarning")

RNG = np.random.default_rng(7)
A = RNG.uniform(-1.0, 1.0, (3, 4))
B = RNG.uniform(-1.0, 1.0, (3, 4))
W = RNG.uniform(-1.0, 1.0, (2, 3))
M = RNG.uniform(-1.0, 1.0, (4, 2))


def lib_of(x):
    return torch if isinstance(x, torch.Tensor) else rg


def const(like, array):
    """``array`` as a tensor of ``like``'s library."""
    if isinstance(like, torch.Tensor):
        return torch.tensor(array, dtype=torch.float64)
    return rg.tensor(array, dtype=rg.float64)


# Functions written once for both libraries (the methods used have the same names in both).
def elementwise(x):
    return x.sin() * x.exp() + x * x


def matmul(x):
    return (const(x, W) @ x).tanh() @ const(x, M)


def two_inputs(x, y):
    return (x * y).sin() + x.exp() * y


def two_outputs(x, y):
    return (x.sin() * y, (x @ y.transpose(0, 1)).tanh())


def scalar(x):
    return (x.sin() * x).sum() + (const(x, W) @ x).tanh().sum()


def scalar_two(x, y):
    return ((x * y).sin() * x).sum() + (x.exp() * y * y).sum()


def tensors(*arrays, torch_lib=False):
    if torch_lib:
        return tuple(torch.tensor(a, dtype=torch.float64) for a in arrays)
    return tuple(rg.tensor(a, dtype=rg.float64) for a in arrays)


def assert_same(ours, theirs, path="result"):
    """Same structure (tensor / tuple, lengths), shapes, and values to 1e-12."""
    if isinstance(theirs, torch.Tensor):
        assert isinstance(ours, rg.Tensor), f"{path}: expected a tensor, got {type(ours)}"
        assert tuple(ours.shape) == tuple(theirs.shape), f"{path}: shape"
        np.testing.assert_allclose(
            np.asarray(ours.numpy()), theirs.detach().numpy(), rtol=1e-12, atol=1e-12,
            err_msg=path,
        )  # fmt: skip
    elif isinstance(theirs, dict):
        assert isinstance(ours, dict) and list(ours) == list(theirs), path
        for key in theirs:
            assert_same(ours[key], theirs[key], f"{path}[{key!r}]")
    else:
        assert isinstance(theirs, tuple), path
        assert isinstance(ours, tuple), f"{path}: expected a tuple, got {type(ours)}"
        assert len(ours) == len(theirs), f"{path}: length"
        for i, (o, t) in enumerate(zip(ours, theirs)):
            assert_same(o, t, f"{path}[{i}]")


def both(arrays, as_tuple):
    ours, theirs = tensors(*arrays), tensors(*arrays, torch_lib=True)
    if as_tuple:
        return ours, theirs
    return ours[0], theirs[0]


# -- torch.autograd.functional ---------------------------------------------------------------------
# (function, input arrays, inputs as a tuple?)
CASES = {
    "elementwise": (elementwise, (A,), False),
    "elementwise_in_tuple": (elementwise, (A,), True),
    "matmul": (matmul, (A,), False),
    "two_inputs": (two_inputs, (A, B), True),
    "two_outputs": (two_outputs, (A, B), True),
    "scalar": (scalar, (A,), False),
}


def output_arrays(f, arrays):
    outs = f(*tensors(*arrays, torch_lib=True))
    outs = outs if isinstance(outs, tuple) else (outs,)
    return [RNG.uniform(-1.0, 1.0, tuple(o.shape)) for o in outs], isinstance(
        f(*tensors(*arrays, torch_lib=True)), tuple
    )


@pytest.mark.parametrize("name", sorted(CASES))
def test_vjp_jvp_jacobian_against_torch(name):
    f, arrays, as_tuple = CASES[name]
    ours, theirs = both(arrays, as_tuple)
    outs, out_tuple = output_arrays(f, arrays)
    v_ours, v_theirs = both(outs, out_tuple)
    assert_same(raf.vjp(f, ours, v_ours), taf.vjp(f, theirs, v_theirs), f"{name} vjp")
    tangents = [RNG.uniform(-1.0, 1.0, a.shape) for a in arrays]
    t_ours, t_theirs = both(tangents, as_tuple)
    assert_same(raf.jvp(f, ours, t_ours), taf.jvp(f, theirs, t_theirs), f"{name} jvp")
    assert_same(raf.jacobian(f, ours), taf.jacobian(f, theirs), f"{name} jacobian")


SCALAR_CASES = {
    "scalar": (scalar, (A,), False),
    "scalar_in_tuple": (scalar, (A,), True),
    "scalar_two": (scalar_two, (A, B), True),
}


@pytest.mark.parametrize("name", sorted(SCALAR_CASES))
def test_hessian_vhp_hvp_against_torch(name):
    f, arrays, as_tuple = SCALAR_CASES[name]
    ours, theirs = both(arrays, as_tuple)
    assert_same(raf.hessian(f, ours), taf.hessian(f, theirs), f"{name} hessian")
    vectors = [RNG.uniform(-1.0, 1.0, a.shape) for a in arrays]
    v_ours, v_theirs = both(vectors, as_tuple)
    assert_same(raf.vhp(f, ours, v_ours), taf.vhp(f, theirs, v_theirs), f"{name} vhp")
    assert_same(raf.hvp(f, ours, v_ours), taf.hvp(f, theirs, v_theirs), f"{name} hvp")


def test_scalar_input_needs_no_v_and_forward_mode_strategy_gives_the_same_jacobian():
    f = lambda x: (x.exp() * 3.0).sin()  # noqa: E731
    ours, theirs = rg.tensor([0.3], dtype=rg.float64), torch.tensor([0.3], dtype=torch.float64)
    assert_same(raf.jvp(f, ours), taf.jvp(f, theirs))
    assert_same(raf.vjp(lambda x: f(x).sum(), ours), taf.vjp(lambda x: f(x).sum(), theirs))
    assert_same(raf.hvp(lambda x: f(x).sum(), ours), taf.hvp(lambda x: f(x).sum(), theirs))
    x2, t2 = both((A,), False)
    assert_same(
        raf.jacobian(matmul, x2, vectorize=True, strategy="forward-mode"),
        taf.jacobian(matmul, t2, vectorize=True, strategy="forward-mode"),
    )


def test_results_are_plain_tensors_and_the_inputs_are_untouched():
    x = rg.tensor(A, dtype=rg.float64)
    out, g = raf.vjp(scalar, x)
    assert not out.requires_grad and not g.requires_grad and not x.requires_grad
    # even from an input that requires grad, without create_graph: torch detaches
    w = rg.tensor(A, dtype=rg.float64).require_grad()
    out, g = raf.vjp(lambda a: a, w, rg.tensor(B, dtype=rg.float64))
    assert not out.requires_grad and not g.requires_grad
    assert not raf.jacobian(elementwise, w).requires_grad


def test_create_graph_results_are_differentiable_with_respect_to_the_inputs():
    ours = rg.tensor(A, dtype=rg.float64).require_grad()
    theirs = torch.tensor(A, dtype=torch.float64, requires_grad=True)
    totals = {
        "jacobian": lambda m, x: m.jacobian(elementwise, x, create_graph=True).sum(),
        "vjp": lambda m, x: m.vjp(scalar, x, create_graph=True)[1].square().sum(),
        "hessian": lambda m, x: m.hessian(scalar, x, create_graph=True).sum(),
        "jvp": lambda m, x: (m.jvp(matmul, x, x.cos(), create_graph=True)[1] ** 2).sum(),
        "hvp": lambda m, x: m.hvp(scalar, x, x.sin(), create_graph=True)[1].sum(),
    }
    for name, total in totals.items():
        ours_total = total(raf, ours)
        assert ours_total.requires_grad, name
        (expected,) = torch.autograd.grad(total(taf, theirs), theirs)
        (got,) = rg.autograd.grad(ours_total, ours)
        assert_same(got, expected, name)


def test_an_input_the_function_ignores_gets_zeros_or_raises_in_strict_mode():
    f = lambda x, y: x.exp()  # noqa: E731
    ours, theirs = both((A, B), True)
    v_ours, v_theirs = both((B,), False)
    assert_same(raf.vjp(f, ours, v_ours), taf.vjp(f, theirs, v_theirs))
    assert_same(raf.jacobian(f, ours), taf.jacobian(f, theirs))
    with pytest.raises(rg.AutodiffError, match=r"vjp.*independent of input 1 \(\[3, 4\]\)"):
        raf.vjp(f, ours, v_ours, strict=True)
    with pytest.raises(rg.AutodiffError, match=r"jacobian.*output 0 .*independent of input 1"):
        raf.jacobian(f, ours, strict=True)
    # an output computed without the inputs
    const_out = lambda x: rg.tensor(B, dtype=rg.float64)  # noqa: E731
    with pytest.raises(rg.AutodiffError, match=r"jvp: output 0 \(\[3, 4\]\).*strict"):
        raf.jvp(const_out, ours[0], v_ours, strict=True)
    # a linear function's Hessian is independent of the input
    with pytest.raises(rg.AutodiffError, match=r"hessian.*independent"):
        raf.hessian(lambda x: x.sum(), ours[0], strict=True)


def test_the_closed_over_input_is_not_taken_for_the_argument():
    # torch's rule: the function's argument is a new tensor, even if it also uses the input
    x, t = both((A,), False)
    assert_same(raf.vjp(lambda a: a * x, x, x), taf.vjp(lambda a: a * t, t, t))


def test_bad_input_raises_the_library_errors_naming_the_function_and_shapes():
    x = rg.tensor(A, dtype=rg.float64)
    with pytest.raises(rg.DTypeError, match=r"vjp: the inputs .* has type list"):
        raf.vjp(elementwise, [x])
    with pytest.raises(TypeError, match=r"jacobian: the inputs .*index 1 has type float"):
        raf.jacobian(two_inputs, (x, 1.0))
    with pytest.raises(rg.DTypeError, match=r"outputs of the user-provided function.*float"):
        raf.vjp(lambda a: 3.0, x)
    with pytest.raises(rg.ShapeError, match=r"vjp: v has shape \[4, 3\], expected \[3, 4\]"):
        raf.vjp(elementwise, x, rg.tensor(A.T, dtype=rg.float64))
    with pytest.raises(rg.ShapeError, match=r"jvp: v is a tuple of 1 tensors, expected 2"):
        raf.jvp(two_inputs, (x, x), (x,))
    with pytest.raises(rg.ShapeError, match=r"vjp: v can only be None .*\[3, 4\]"):
        raf.vjp(elementwise, x)
    with pytest.raises(rg.ShapeError, match=r"hessian: .*single element, got shape \[3, 4\]"):
        raf.hessian(elementwise, x)
    with pytest.raises(rg.ShapeError, match=r"vhp: .*single element, got shape \[3, 4\]"):
        raf.vhp(elementwise, x, x)
    with pytest.raises(rg.InvalidArgumentError, match=r"strategy"):
        raf.jacobian(elementwise, x, strategy="sideways")
    with pytest.raises(rg.DTypeError, match=r"only float tensors.*\[2\] int64"):
        raf.jacobian(elementwise, rg.tensor([1, 2], dtype=rg.int64))


# -- torch.func ------------------------------------------------------------------------------------
def test_func_grad_and_grad_and_value_against_torch():
    ours, theirs = both((A, B), True)
    assert_same(rfunc.grad(scalar)(ours[0]), tfunc.grad(scalar)(theirs[0]))
    assert_same(rfunc.grad(scalar_two)(*ours), tfunc.grad(scalar_two)(*theirs))
    for argnums in (1, (0, 1), (1,), -1):
        assert_same(
            rfunc.grad_and_value(scalar_two, argnums=argnums)(*ours),
            tfunc.grad_and_value(scalar_two, argnums=argnums)(*theirs),
            f"argnums={argnums}",
        )

    def with_aux(x, y):
        return scalar_two(x, y), (x.cos(), y)

    got = rfunc.grad(with_aux, argnums=(0, 1), has_aux=True)(*ours)
    expected = tfunc.grad(with_aux, argnums=(0, 1), has_aux=True)(*theirs)
    assert_same(got, expected)
    # torch wants tensors only in aux, and refuses anything else
    with pytest.raises(rg.DTypeError, match="aux"):
        rfunc.grad(lambda x: (x.sum(), "label"), has_aux=True)(ours[0])
    with pytest.raises(RuntimeError, match="Expected tensors"):
        tfunc.grad(lambda x: (x.sum(), "label"), has_aux=True)(theirs[0])
    got = rfunc.grad_and_value(with_aux, has_aux=True)(*ours)
    expected = tfunc.grad_and_value(with_aux, has_aux=True)(*theirs)
    assert_same((got[0], got[1][0], got[1][1][0]), (expected[0], expected[1][0], expected[1][1][0]))
    assert not got[0].requires_grad and not got[1][0].requires_grad
    assert not got[1][1][0].requires_grad and not ours[0].requires_grad


def test_func_grad_nests_to_higher_orders():
    x, t = rg.tensor(0.7, dtype=rg.float64), torch.tensor(0.7, dtype=torch.float64)
    f = lambda x: x.sin() * x.exp()  # noqa: E731
    ours, theirs = f, f
    for order in range(1, 4):
        ours, theirs = rfunc.grad(ours), tfunc.grad(theirs)
        assert_same(ours(x), theirs(t), f"order {order}")
    # a vector argument: the gradient of a function of the gradient
    xs, ts = both((A,), False)
    g_of_g = lambda gr: gr(lambda z: (gr(scalar)(z) ** 2).sum())  # noqa: E731
    assert_same(g_of_g(rfunc.grad)(xs), g_of_g(tfunc.grad)(ts))
    # jacobian of jacobian is the Hessian
    assert_same(rfunc.jacrev(rfunc.jacrev(scalar))(xs), tfunc.hessian(scalar)(ts))


def test_func_grad_of_an_argument_that_requires_grad_is_recorded():
    ours = rg.tensor(A, dtype=rg.float64).require_grad()
    theirs = torch.tensor(A, dtype=torch.float64, requires_grad=True)
    g_ours, g_theirs = rfunc.grad(scalar)(ours), tfunc.grad(scalar)(theirs)
    assert g_ours.requires_grad
    (expected,) = torch.autograd.grad((g_theirs**2).sum(), theirs)
    (got,) = rg.autograd.grad((g_ours**2).sum(), ours)
    assert_same(got, expected)


@pytest.mark.parametrize("transform", ["grad", "grad_of_grad", "jacrev", "hessian", "keyword"])
def test_func_results_are_recorded_for_a_passed_argument_that_requires_grad(transform):
    # a physics-informed loss as torch.func code writes it: vmap(grad(f), in_dims=(0, None))
    # (x, params) with params = dict(model.named_parameters()) an argument not differentiated;
    # the results were cut from the graph, so the loss's gradient missed their part
    # (found by realports8's PINN)
    def derivative(lib, params, xs):
        func = lib.func

        def f(x, p):
            return func.functional_call(module[lib], p, (x.reshape(1, 1),)).squeeze() ** 3

        if transform == "grad":
            return func.vmap(func.grad(f), in_dims=(0, None))(xs, params)
        if transform == "grad_of_grad":
            return func.vmap(func.grad(func.grad(f)), in_dims=(0, None))(xs, params)
        if transform == "jacrev":
            return func.jacrev(f)(xs[0], params)
        if transform == "hessian":
            return func.hessian(f)(xs[0], params)
        return func.grad(f)(xs[0], p=params)

    module = {lib: lib.nn.Linear(1, 1).double() for lib in (rg, torch)}
    state = module[torch].state_dict()
    module[rg].load_state_dict({k: v.detach().numpy() for k, v in state.items()})
    xs = [0.3, -0.7, 1.2]
    out_t = derivative(torch, dict(module[torch].named_parameters()), torch.tensor(xs).double())
    out_o = derivative(rg, dict(module[rg].named_parameters()), rg.tensor(xs).double())
    assert out_o.requires_grad and out_t.requires_grad
    assert_same(out_o, out_t)
    expected = torch.autograd.grad((out_t**2).sum(), list(module[torch].parameters()))
    got = rg.autograd.grad((out_o**2).sum(), list(module[rg].parameters()))
    for g_o, g_t in zip(got, expected):
        assert_same(g_o, g_t)


@pytest.mark.parametrize("transform", ["jacrev", "jacfwd", "grad", "hessian", "vjp", "jvp"])
def test_func_results_are_recorded_when_the_function_closes_over_parameters(transform):
    # vmap(jacrev(model))(x) with the module's parameters closed over, as PINN code writes
    # it: torch's levels keep their graph, so a loss of the derivative trains the model; ours
    # treated them as constants (silently no gradient; found by realports8)
    def derivative(lib, xs):
        func, net = lib.func, module[lib]

        def f(x):
            return net(x).squeeze(-1).tanh()

        if transform == "grad":
            return func.vmap(func.grad(f))(xs)
        if transform == "hessian":
            return func.hessian(f)(xs[0])
        if transform == "vjp":
            out, vjp_fn = func.vjp(f, xs)
            return out + vjp_fn(xs[:, 0] * 0.5 + 1.0)[0].sum(-1)
        if transform == "jvp":
            out, tangent = func.jvp(f, (xs,), (xs * 0.5 + 1.0,))
            return out + tangent
        return func.vmap(getattr(func, transform)(f))(xs)

    module = {lib: lib.nn.Linear(2, 1).double() for lib in (rg, torch)}
    state = module[torch].state_dict()
    module[rg].load_state_dict({k: v.detach().numpy() for k, v in state.items()})
    xs = [[0.3, 0.2], [0.7, -0.1], [-1.0, 0.5]]
    out_t = derivative(torch, torch.tensor(xs).double())
    out_o = derivative(rg, rg.tensor(xs).double())
    assert out_o.requires_grad and out_t.requires_grad
    assert_same(out_o, out_t)
    expected = torch.autograd.grad((out_t**2).sum(), list(module[torch].parameters()))
    got = rg.autograd.grad((out_o**2).sum(), list(module[rg].parameters()))
    for g_o, g_t in zip(got, expected):
        assert_same(g_o, g_t)
    # a tensor closed over that does not require grad leaves the results plain
    with rg.no_grad():
        frozen = rg.tensor([2.0, 3.0]).double()
    plain = rg.func.grad(lambda x: (x * frozen).sum() ** 2)(rg.tensor([1.0, 1.0]).double())
    assert not plain.requires_grad and plain.tolist() == [20.0, 30.0]


def test_func_vjp_and_jvp_against_torch():
    ours, theirs = both((A, B), True)
    out_o, fn_o = rfunc.vjp(two_outputs, *ours)
    out_t, fn_t = tfunc.vjp(two_outputs, *theirs)
    assert_same(out_o, out_t)
    assert not out_o[0].requires_grad
    cot = [RNG.uniform(-1.0, 1.0, tuple(o.shape)) for o in out_t]
    c_ours, c_theirs = both(cot, True)
    for _ in range(2):  # vjp_fn can be called again
        assert_same(fn_o(c_ours), fn_t(c_theirs))
    out_o, fn_o = rfunc.vjp(elementwise, ours[0])
    out_t, fn_t = tfunc.vjp(elementwise, theirs[0])
    assert_same(fn_o(ours[1]), fn_t(theirs[1]))  # one primal: still a tuple
    tangents = [RNG.uniform(-1.0, 1.0, a.shape) for a in (A, B)]
    t_ours, t_theirs = both(tangents, True)
    for f in (two_inputs, two_outputs):
        assert_same(rfunc.jvp(f, ours, t_ours), tfunc.jvp(f, theirs, t_theirs), f.__name__)
    assert_same(
        rfunc.jvp(matmul, ours[:1], t_ours[:1]), tfunc.jvp(matmul, theirs[:1], t_theirs[:1])
    )

    def with_aux(x):
        return x.exp(), x.sum()

    got = rfunc.jvp(with_aux, ours[:1], t_ours[:1], has_aux=True)
    expected = tfunc.jvp(with_aux, theirs[:1], t_theirs[:1], has_aux=True)
    assert_same(got, expected)
    got = rfunc.vjp(with_aux, ours[0], has_aux=True)
    expected = tfunc.vjp(with_aux, theirs[0], has_aux=True)
    assert_same((got[0], got[2]), (expected[0], expected[2]))
    assert_same(got[1](ours[1]), expected[1](theirs[1]))


def test_func_jacrev_jacfwd_hessian_against_torch():
    ours, theirs = both((A, B), True)
    for ours_t, theirs_t in ((rfunc.jacrev, tfunc.jacrev), (rfunc.jacfwd, tfunc.jacfwd)):
        for f, argnums in ((two_inputs, 0), (two_outputs, (0, 1)), (two_outputs, 1)):
            assert_same(
                ours_t(f, argnums=argnums)(*ours),
                theirs_t(f, argnums=argnums)(*theirs),
                f"{ours_t.__name__}({f.__name__}, argnums={argnums})",
            )
        assert_same(ours_t(matmul)(ours[0]), theirs_t(matmul)(theirs[0]))
    assert_same(rfunc.hessian(scalar)(ours[0]), tfunc.hessian(scalar)(theirs[0]))
    assert_same(
        rfunc.hessian(scalar_two, argnums=(0, 1))(*ours),
        tfunc.hessian(scalar_two, argnums=(0, 1))(*theirs),
    )

    # a dict argument (a pytree) and has_aux
    def on_dict(d):
        return (d["w"] @ d["x"]).sin(), d["x"].sum()

    d_ours = {"w": rg.tensor(W, dtype=rg.float64), "x": ours[0]}
    d_theirs = {"w": torch.tensor(W, dtype=torch.float64), "x": theirs[0]}
    assert_same(
        rfunc.jacrev(on_dict, has_aux=True)(d_ours), tfunc.jacrev(on_dict, has_aux=True)(d_theirs)
    )


def test_func_vmap_of_grad_gives_per_sample_gradients():
    assert rfunc.vmap is rg.vmap
    weights = RNG.uniform(-1.0, 1.0, 4)
    xs, ts = both((A, weights), True)

    def loss(w, x):
        return (x * w).sum().tanh()

    got = rfunc.vmap(rfunc.grad(loss), in_dims=(None, 0))(xs[1], xs[0])
    expected = tfunc.vmap(tfunc.grad(loss), in_dims=(None, 0))(ts[1], ts[0])
    assert_same(got, expected)


def test_func_bad_input_raises_the_library_errors():
    x = rg.tensor(A, dtype=rg.float64)
    with pytest.raises(rg.ShapeError, match=r"grad_and_value: .*scalar \(0-dim\).*\[3, 4\]"):
        rfunc.grad(elementwise)(x)
    with pytest.raises(rg.DTypeError, match=r"grad_and_value: .*return a tensor, got float"):
        rfunc.grad(lambda a: 1.0)(x)
    with pytest.raises(rg.DTypeError, match=r"must be tensors.*got float"):
        rfunc.grad(scalar)(1.0)
    with pytest.raises(rg.InvalidArgumentError, match=r"argnums 2 is out of range .* 2 pos"):
        rfunc.grad(scalar_two, argnums=2)(x, x)
    with pytest.raises(rg.DTypeError, match=r"jvp: expected primals to be a tuple"):
        rfunc.jvp(elementwise, x, (x,))
    with pytest.raises(
        rg.ShapeError, match=r"jvp: tangent 0 has shape \[4, 3\], expected \[3, 4\]"
    ):
        rfunc.jvp(elementwise, (x,), (rg.tensor(A.T, dtype=rg.float64),))
    _, vjp_fn = rfunc.vjp(elementwise, x)
    with pytest.raises(rg.ShapeError, match=r"vjp: cotangent 0 has shape \[3\], expected \[3, 4\]"):
        vjp_fn(rg.zeros(3, dtype=rg.float64))
    with pytest.raises(rg.AutodiffError, match=r"jvp: output 1 \(\[3\]\) .*independent"):
        rfunc.jvp(lambda a: (a, rg.ones(3)), (x,), (x,), strict=True)
    with pytest.raises(rg.DTypeError, match=r"has_aux=True .*tuple"):
        rfunc.grad(scalar, has_aux=True)(x)
