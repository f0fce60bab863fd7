"""Random linear-algebra programs against PyTorch (round 50): products and contractions,
norms and decompositions, each run by retrograd and by torch on the same NumPy data.

Families (one test each, ``PROGRAMS`` seeded draws per family):

- ``products``: ``matmul``/``@`` with broadcast batch dims, 1-d operands and 0-size dims,
  ``mm``/``bmm``/``mv``/``dot``/``vdot``/``inner``/``outer``, ``addmm``/``addbmm``/
  ``baddbmm``/``addmv``/``addr`` with drawn ``alpha``/``beta`` (``beta=0`` with a NaN in
  ``input``, which torch ignores), ``chain_matmul``/``linalg.multi_dot``, mixed dtypes;
- ``einsum``: drawn equations (repeated indices, diagonals, ellipsis, implicit output, the
  sublist format, operands as a list), ``tensordot`` with int and paired dims, ``kron``,
  ``cross``/``linalg.cross`` (default and explicit ``dim``);
- ``norms``: ``linalg.vector_norm``/``matrix_norm``/``norm`` and ``torch.norm`` over drawn
  ``ord`` (``inf``, ``-inf``, 0, fractional, ``'fro'``, ``'nuc'``), ``dim``, ``keepdim``,
  ``dtype``;
- ``decompositions``: ``det``/``slogdet``/``inv``/``solve``/``lstsq``/``pinv``/
  ``matrix_rank``/``cholesky``/``qr``/``svdvals``/``eigvalsh``/``eigh``/``matrix_power``/
  ``matrix_exp``/``cond`` on batches, including singular, non-square, integer and complex
  inputs; ``eigh`` and ``svd`` compared through sign-free quantities (values, projectors).

Compared: values, result dtype and shape, float64 gradients of every input by torch's autograd
(a drawn weighted sum of the outputs), and whether an error is raised; ours must be of the
API.md section 7 hierarchy and name the op, and the inputs must stay usable after it. The
inner backend is the suite's (``RETROGRAD_INNER``). Left out (documented departures): the
partial LAPACK results of a failed ``inv_ex``/``cholesky_ex`` (NaN here), gelsy's rank and
basic solution of a rank-deficient ``lstsq``, ``addmm`` of integer tensors with a float
``beta`` (refused here; torch truncates it), and gradients of ``pinv(hermitian=True)`` at a
non-symmetric input.
"""

from __future__ import annotations

import numpy as np
import pytest

import retrograd as rg

torch = pytest.importorskip("torch")

PROGRAMS = 40
INF = float("inf")


def _dtype_name(dtype) -> str:
    return str(dtype).rsplit(".", 1)[-1]


def _numpy(value):
    if isinstance(value, torch.Tensor):
        return value.detach().resolve_conj().resolve_neg().numpy()
    return np.asarray(value.detach().numpy())


def _outputs(result):
    return list(result) if isinstance(result, tuple | list) else [result]


def _run(lib, program, arrays):
    leaves = []
    for a in arrays:
        wants_grad = a.dtype.kind in "fc"
        if lib is torch:
            leaves.append(torch.tensor(a, requires_grad=wants_grad))
        else:
            leaves.append(rg.tensor(a, requires_grad=wants_grad))
    try:
        return leaves, _outputs(program(lib, leaves)), None
    except Exception as error:  # (the kind is compared below)
        return leaves, None, error


def check(name, program, arrays, *, op, grad=True, rtol=1e-7, atol=1e-9, compare=None):
    """Runs ``program(lib, leaves)`` on torch and retrograd; compares outcomes (``compare``
    selects the outputs to compare by index)."""
    t_leaves, t_out, t_error = _run(torch, program, arrays)
    r_leaves, r_out, r_error = _run(rg, program, arrays)
    if t_error is not None:
        assert r_error is not None, f"{name}: torch raised {t_error!r}, retrograd did not"
        assert isinstance(r_error, rg.RetrogradError), f"{name}: {r_error!r}"
        assert op in str(r_error), f"{name}: the error does not name {op}: {r_error}"
        for leaf in r_leaves:  # still usable after the failed call
            if leaf.requires_grad and not leaf.is_complex():
                grads = (leaf * 2.0).sum().backward()
                np.testing.assert_allclose(_numpy(leaf.grad(grads)), 2.0)
        return
    assert r_error is None, f"{name}: retrograd raised {r_error!r}, torch did not"
    if any(_dtype_name(a.dtype) in ("float32", "complex64") for a in arrays):
        rtol, atol = max(rtol, 5e-5), max(atol, 5e-5)
    indices = range(len(t_out)) if compare is None else compare
    assert len(r_out) == len(t_out), name
    for i in indices:
        t, r = t_out[i], r_out[i]
        assert _dtype_name(r.dtype) == _dtype_name(t.dtype), f"{name}[{i}]: dtype"
        assert tuple(r.shape) == tuple(t.shape), f"{name}[{i}]: shape"
        np.testing.assert_allclose(
            _numpy(r), _numpy(t), rtol=rtol, atol=atol, equal_nan=True, err_msg=f"{name}[{i}]"
        )
    differentiable = [
        i
        for i in indices
        if t_out[i].requires_grad and t_out[i].numel() and t_out[i].is_floating_point()
    ]
    if not grad or not differentiable:
        return
    rng = np.random.RandomState(7)
    weights = {i: rng.randn(*t_out[i].shape) for i in differentiable}
    t_loss = sum((t_out[i] * torch.tensor(weights[i])).sum() for i in differentiable)
    wanted = [leaf for leaf in t_leaves if leaf.requires_grad]
    t_grads = torch.autograd.grad(t_loss, wanted, allow_unused=True)
    r_loss = sum((r_out[i] * rg.tensor(weights[i])).sum() for i in differentiable)
    grads = r_loss.backward()
    r_wanted = [leaf for leaf in r_leaves if leaf.requires_grad]
    for k, (t_grad, leaf) in enumerate(zip(t_grads, r_wanted)):
        expected = np.zeros(leaf.shape) if t_grad is None else _numpy(t_grad)
        ours = leaf.grad(grads)
        assert ours is not None, f"{name}: no gradient for input {k}"
        np.testing.assert_allclose(
            _numpy(ours),
            expected,
            rtol=max(rtol, 1e-6),
            atol=max(atol, 1e-8),
            err_msg=f"{name}: grad {k}",
        )


def _array(rng, shape, kind="f"):
    if kind == "i":
        return rng.randint(-3, 4, size=shape).astype(np.int64)
    if kind == "c":
        return rng.randn(*shape) + 1j * rng.randn(*shape)
    if kind == "f32":
        return rng.randn(*shape).astype(np.float32)
    return np.asarray(rng.randn(*shape))


# -- products --------------------------------------------------------------------------------
def _draw_product(rng):
    n, k, m = (int(v) for v in rng.choice([0, 1, 2, 3], 3, p=[0.1, 0.2, 0.35, 0.35]))
    batch = [tuple(rng.choice([1, 2, 3], rng.randint(0, 3))) for _ in range(2)]
    kind = rng.choice(["f", "f", "f", "f", "i", "c", "mixed"])
    if kind == "mixed" and 0 in (n, k, m):
        kind = "f"  # (torch skips its dtype check for some empty products)
    kinds = ("f", "f32") if kind == "mixed" else (kind, kind)
    choice = rng.randint(12)
    if choice == 0:
        shapes = [(k,) if rng.rand() < 0.3 else batch[0] + (n, k)]
        shapes.append((k,) if rng.rand() < 0.3 else batch[1] + (k, m))
        if rng.rand() < 0.1:
            shapes[1] = (k + 1, m)  # a contraction mismatch
        return "matmul", lambda lib, t: lib.matmul(t[0], t[1]), shapes, kinds
    if choice == 1:
        shapes = [(n, k), (k, m)] if rng.rand() < 0.8 else [(2, n, k), (k, m)]
        return "mm", lambda lib, t: lib.mm(t[0], t[1]), shapes, kinds
    if choice == 2:
        b = int(rng.choice([1, 2]))
        return "bmm", lambda lib, t: lib.bmm(t[0], t[1]), [(b, n, k), (2, k, m)], kinds
    if choice == 3:
        return (
            "mv",
            lambda lib, t: lib.mv(t[0], t[1]),
            [(n, k), (k if rng.rand() < 0.9 else k + 1,)],
            kinds,
        )
    if choice == 4:
        op = rng.choice(["dot", "vdot", "inner", "outer"])
        shapes = [(k,), (k,)] if op != "inner" else [batch[0] + (k,), (m, k)]
        if op == "outer":
            shapes = [(n,), (m,)]
        return op, lambda lib, t: getattr(lib, op)(t[0], t[1]), shapes, kinds
    if choice == 5:
        count = rng.randint(1, 4)
        sizes = [int(v) for v in rng.choice([1, 2, 3], count + 1)]
        shapes = [(sizes[i], sizes[i + 1]) for i in range(count)]
        if count > 1 and rng.rand() < 0.5:
            shapes[0], shapes[-1] = shapes[0][1:], shapes[-1][:1]  # 1-d ends
        if rng.rand() < 0.5:
            return "multi_dot", lambda lib, t: lib.linalg.multi_dot(list(t)), shapes, (kind, kind)
        shapes = [(sizes[i], sizes[i + 1]) for i in range(count)]
        return "chain_matmul", lambda lib, t: lib.chain_matmul(*t), shapes, (kind, kind)
    beta = float(rng.choice([0.0, 1.0, 0.5, -2.0]))
    alpha = float(rng.choice([0.0, 1.0, 2.0, -0.5]))
    if kind == "i":
        beta, alpha = int(beta), int(alpha)
    op = rng.choice(["addmm", "addbmm", "baddbmm", "addmv", "addr"])
    shapes = {
        "addmm": [(n, m) if rng.rand() < 0.6 else (m,), (n, k), (k, m)],
        "addbmm": [(n, m), (2, n, k), (2, k, m)],
        "baddbmm": [(2, n, m) if rng.rand() < 0.6 else (1, m), (2, n, k), (2, k, m)],
        "addmv": [(n,), (n, k), (k,)],
        "addr": [(n, m) if rng.rand() < 0.6 else (1,), (n,), (m,)],
    }[op]
    return (
        op,
        lambda lib, t: getattr(lib, op)(t[0], t[1], t[2], beta=beta, alpha=alpha),
        shapes,
        (kinds[0], kinds[0], kinds[1]),
    )


@pytest.mark.parametrize("seed", range(PROGRAMS))
def test_random_products(seed):
    rng = np.random.RandomState(5000 + seed)
    torch.manual_seed(seed)
    op, program, shapes, kinds = _draw_product(rng)
    arrays = [_array(rng, s, kinds[min(i, len(kinds) - 1)]) for i, s in enumerate(shapes)]
    if op.startswith("add") and arrays[0].size and arrays[0].dtype.kind == "f":
        arrays[0].flat[0] = np.nan  # propagates unless beta = 0, as torch's
    # (torch's addr promotes mixed dtypes but its backward then refuses them)
    grad = not (op == "addr" and len(set(kinds)) > 1)
    check(f"{op} {shapes}", program, arrays, op=op, grad=grad)


# -- einsum, tensordot, kron, cross ----------------------------------------------------------
def _draw_equation(rng):
    letters = "abcd"
    sizes = {c: int(rng.choice([1, 2, 3])) for c in letters}
    operands, subscripts = [], []
    ellipsis = rng.rand() < 0.25
    for _ in range(rng.randint(1, 3)):
        labels = "".join(rng.choice(list(letters), rng.randint(1, 4)))
        subscripts.append(("..." if ellipsis else "") + labels)
        operands.append((2,) * ellipsis + tuple(sizes[c] for c in labels))
    equation = ",".join(subscripts)
    if rng.rand() < 0.6:
        seen = sorted(set("".join(subscripts).replace(".", "")))
        chosen = [c for c in seen if rng.rand() < 0.5]
        rng.shuffle(chosen)
        equation += "->" + ("..." if ellipsis else "") + "".join(chosen)
    return equation, operands


@pytest.mark.parametrize("seed", range(PROGRAMS))
def test_random_contractions(seed):
    rng = np.random.RandomState(6000 + seed)
    torch.manual_seed(seed)
    choice = seed % 5
    if choice <= 1:
        equation, shapes = _draw_equation(rng)
        arrays = [_array(rng, s) for s in shapes]
        as_list = rng.rand() < 0.3
        check(
            f"einsum {equation} {shapes}",
            lambda lib, t: lib.einsum(equation, list(t)) if as_list else lib.einsum(equation, *t),
            arrays,
            op="einsum",
        )
        if len(shapes) == 2 and "..." not in equation and "->" in equation:
            ids = {c: i for i, c in enumerate("abcd")}
            lhs, out = equation.split("->")
            subs = [[ids[c] for c in s] for s in lhs.split(",")]
            check(
                f"einsum sublist {equation}",
                lambda lib, t: lib.einsum(t[0], subs[0], t[1], subs[1], [ids[c] for c in out]),
                arrays,
                op="einsum",
            )
    elif choice == 2:
        a_shape = tuple(int(v) for v in rng.choice([1, 2, 3], rng.randint(1, 4)))
        count = rng.randint(0, len(a_shape) + 1)
        b_shape = a_shape[len(a_shape) - count :] + tuple(int(v) for v in rng.choice([2, 3], 1))
        dims = count if rng.rand() < 0.5 else (
            list(range(len(a_shape) - count, len(a_shape))), list(range(count))
        )  # fmt: skip
        if rng.rand() < 0.15:
            b_shape = (4,) + b_shape  # a mismatch
        check(
            f"tensordot {a_shape} {b_shape} {dims}",
            lambda lib, t: lib.tensordot(t[0], t[1], dims=dims),
            [_array(rng, a_shape), _array(rng, b_shape)],
            op="tensordot",
        )
    elif choice == 3:
        shapes = [tuple(int(v) for v in rng.choice([1, 2, 3], rng.randint(0, 3))) for _ in range(2)]
        check(
            f"kron {shapes}",
            lambda lib, t: lib.kron(t[0], t[1]),
            [_array(rng, s) for s in shapes],
            op="kron",
        )
    else:
        shape = (int(rng.choice([1, 2])), 3) if rng.rand() < 0.7 else (3, int(rng.choice([2, 4])))
        other = shape if rng.rand() < 0.7 else (1,) + shape
        form = rng.randint(3)
        programs = [
            lambda lib, t: lib.cross(t[0], t[1]),
            lambda lib, t: lib.linalg.cross(t[0], t[1]),
            lambda lib, t: lib.linalg.cross(t[0], t[1], dim=-2),
        ]
        check(
            f"cross form {form} {shape} {other}",
            programs[form],
            [_array(rng, shape), _array(rng, other)],
            op="cross",
        )


# -- norms -----------------------------------------------------------------------------------
@pytest.mark.parametrize("seed", range(PROGRAMS))
def test_random_norms(seed):
    rng = np.random.RandomState(7000 + seed)
    torch.manual_seed(seed)
    shape = tuple(int(v) for v in rng.choice([0, 2, 3], rng.randint(1, 4), p=[0.1, 0.45, 0.45]))
    kind = rng.choice(["f", "f", "f", "c", "f32", "i"])
    array = _array(rng, shape, kind)
    if array.size and array.dtype.kind == "f":
        array.flat[0] = 0.0  # a zero entry: the gradients' subgradient choices
    keepdim = bool(rng.rand() < 0.4)
    family = seed % 3
    if family == 0:
        ord_ = rng.choice([2, 1, 0, INF, -INF, 3, 0.5, -1])
        dims = [None] + [d for d in range(-len(shape), len(shape))]
        dim = dims[rng.randint(len(dims))]
        dtype = "float64" if kind == "f32" and rng.rand() < 0.5 else None
        check(
            f"vector_norm {shape} {kind} ord={ord_} dim={dim} keepdim={keepdim} dtype={dtype}",
            lambda lib, t: lib.linalg.vector_norm(
                t[0], ord_, dim, keepdim, dtype=None if dtype is None else getattr(lib, dtype)
            ),
            [array],
            op="vector_norm",
        )
    elif family == 1:
        ord_ = ["fro", "nuc", 1, -1, 2, -2, INF, -INF][rng.randint(8)]
        dim = (-2, -1) if rng.rand() < 0.7 else (-1, 0)
        check(
            f"matrix_norm {shape} {kind} ord={ord_} dim={dim} keepdim={keepdim}",
            lambda lib, t: lib.linalg.matrix_norm(t[0], ord_, dim, keepdim),
            [array],
            op="matrix_norm",
        )
    else:
        ord_ = [None, "fro", "nuc", 2, 1, INF, 0][rng.randint(7)]
        dim = [None, 0, (0, 1), -1][rng.randint(4)]
        check(
            f"norm {shape} {kind} ord={ord_} dim={dim} keepdim={keepdim}",
            lambda lib, t: lib.linalg.norm(t[0], ord_, dim, keepdim),
            [array],
            op="norm",
        )


# -- decompositions --------------------------------------------------------------------------
def _spd(rng, batch, n):
    a = rng.randn(*batch, n, n)
    return a @ np.swapaxes(a, -1, -2) + n * np.eye(n)


def _distinct_symmetric(rng, batch, n):
    q, _ = np.linalg.qr(rng.randn(*batch, n, n))
    values = np.sort(rng.rand(*batch, n) * 3, -1) + np.arange(n)  # gaps of 1 at least
    return q @ (values[..., :, None] * np.swapaxes(q, -1, -2))


DECOMPOSITIONS = {
    "det": (lambda lib, t: lib.linalg.det(t[0]), "det"),
    "slogdet": (lambda lib, t: lib.linalg.slogdet(t[0]), "slogdet"),
    "inv": (lambda lib, t: lib.linalg.inv(t[0]), "inv"),
    "solve": (lambda lib, t: lib.linalg.solve(t[0], t[0].sum(-1) * 2 + 1), "solve"),
    "pinv": (lambda lib, t: lib.linalg.pinv(t[0]), "pinv"),
    "matrix_rank": (lambda lib, t: lib.linalg.matrix_rank(t[0]), "matrix_rank"),
    "svdvals": (lambda lib, t: lib.linalg.svdvals(t[0]), "svd"),
    "svd_projector": (
        lambda lib, t: (lambda usv: (usv[0] * usv[1].unsqueeze(-2)) @ usv[2])(
            lib.linalg.svd(t[0], full_matrices=False)
        ),
        "svd",
    ),
    "qr_r_abs": (lambda lib, t: lib.linalg.qr(t[0])[1].abs(), "qr"),
    "matrix_power": (lambda lib, t: lib.linalg.matrix_power(t[0], 3), "matrix_power"),
    "matrix_power_neg": (lambda lib, t: lib.linalg.matrix_power(t[0], -2), "matrix_power"),
    "matrix_exp": (lambda lib, t: lib.linalg.matrix_exp(t[0]), "matrix_exp"),
    "cond": (lambda lib, t: lib.linalg.cond(t[0], "fro"), "cond"),
    "cholesky": (lambda lib, t: lib.linalg.cholesky(t[0]), "cholesky"),
    "eigvalsh": (lambda lib, t: lib.linalg.eigvalsh(t[0]), "eigvalsh"),
    "eigh_projector": (
        lambda lib, t: (lambda wv: (wv[1] * wv[0].unsqueeze(-2)) @ wv[1].mT)(lib.linalg.eigh(t[0])),
        "eigh",
    ),
}


@pytest.mark.parametrize("seed", range(PROGRAMS))
def test_random_decompositions(seed):
    rng = np.random.RandomState(8000 + seed)
    torch.manual_seed(seed)
    names = sorted(DECOMPOSITIONS)
    name = names[seed % len(names)]
    program, op = DECOMPOSITIONS[name]
    batch = tuple(int(v) for v in rng.choice([1, 2], rng.randint(0, 2)))
    n = int(rng.choice([1, 2, 3]))
    variant = rng.choice(["regular", "regular", "singular", "nonsquare", "int", "empty"])
    if name in ("cholesky", "eigvalsh", "eigh_projector"):
        array = _distinct_symmetric(rng, batch, n) if name != "cholesky" else _spd(rng, batch, n)
    else:
        array = rng.randn(*batch, n, n) + (n * np.eye(n) if name == "matrix_power_neg" else 0)
    if variant == "singular" and n > 1:
        array[..., -1, :] = array[..., 0, :]  # two equal rows
    elif variant == "nonsquare":
        array = rng.randn(*batch, n, n + 1)
    elif variant == "int":
        array = rng.randint(-2, 3, size=batch + (n, n)).astype(np.int64)
    elif variant == "empty":
        array = rng.randn(*batch, 0, 0)
    singular = variant == "singular" and n > 1
    # at singular matrices: det's gradient (0, as torch's) and the functions of the singular
    # values alone (svdvals, matrix_exp) are defined; the rest have none
    # (svdvals' gradient at a zero singular value depends on LAPACK's choice of null vectors)
    grad = not singular or name in ("det", "matrix_exp", "matrix_power")
    grad = grad and name != "cond"  # (torch's cond backward fails: an in-place masked_fill_)
    check(
        f"{name} {variant} {array.shape}", program, [array], op=op, grad=grad, rtol=1e-6, atol=1e-8
    )
