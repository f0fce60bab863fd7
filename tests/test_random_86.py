"""Random programs against PyTorch, round 86: linear algebra with every option.

Round 50 (``test_random_linalg_50.py``) drew the decompositions with their default options; this
round draws each ``torch.linalg`` call and matrix tensor method with its options:
``svd(full_matrices)``, ``svdvals``, ``eigh``/``eigvalsh(UPLO)`` on non-symmetric inputs (only
the named triangle is read), ``qr(mode=reduced/complete/r)``, ``cholesky(upper)``,
``cholesky_ex``, ``lu_factor``/``lu_solve(left, adjoint)``/``lu(pivot)``/``lu_unpack``,
``solve(left)``, ``solve_triangular(upper, left, unitriangular)``, ``lstsq(driver, rcond)``,
``inv``/``inv_ex``, ``pinv(hermitian, rtol, atol)``, ``det``/``slogdet``/``logdet``,
``matrix_power`` (negative powers), ``matrix_exp``, ``matrix_norm``/``norm``/``cond`` over
``fro``/``nuc``/2/-2/inf/-inf/1/-1, ``matrix_rank(atol, rtol, hermitian)``, ``cross``,
``vecdot``, ``multi_dot``, ``householder_product``, ``tensorsolve``/``tensorinv``, and the
tensor methods (``t.inverse()``, ``t.pinverse()``, ``t.det()``, ``t.cholesky_solve``,
``t.cholesky_inverse``, ``t.triangular_solve``); batched shapes, float32/float64/complex128.

Each program returns quantities free of the factorization's sign or phase freedom (singular
values and ``U diag(S) Vh``, ``|U|^2``, eigenvalues and ``|V|^2``, ``Q R`` and ``|R|``); the
values, dtypes and shapes are compared, and the gradient of every input under a random
upstream gradient (float64 and complex128 against torch's autograd; complex outputs enter the
loss through their real part). Where torch raises (singular matrices, a non-positive-definite
Cholesky, bad shapes, ``qr(mode='r')``'s backward), retrograd must raise an error of the
API.md section 7 hierarchy naming the op, and the inputs stay usable.

Left out, by design (documented departures, see ``test_random_linalg_50.py``): the partial
LAPACK results of a failed ``inv_ex``/``cholesky_ex`` (``info`` is compared, the values not),
``gelsy``'s basic solution of a rank-deficient ``lstsq``, and gradients of
``pinv(hermitian=True)`` at a non-symmetric input.
Also left: the ``lu``/``lu_factor``/``lu_solve``/``solve_triangular``/``triangular_solve``/
``cholesky_solve``/``cholesky_inverse`` families draw real inputs only (their complex inputs,
refused until round 87, are compared with torch in ``test_cplx87_solvers.py``), and at a
singular matrix torch's LU backward is NaN where retrograd's is finite (its gradients are not
compared there).
"""

from __future__ import annotations

import numpy as np
import pytest

import retrograd as rg

torch = pytest.importorskip("torch")

PROGRAMS = 60
INF = float("inf")


def _dtype_name(dtype) -> str:
    return str(dtype).rsplit(".", 1)[-1]


def _numpy(value) -> np.ndarray:
    if isinstance(value, torch.Tensor):
        return value.detach().resolve_conj().resolve_neg().numpy()
    return np.asarray(value.detach().numpy())


def _outputs(result) -> list:
    return list(result) if isinstance(result, tuple | list) else [result]


def _run(lib, program, arrays, grads_of):
    leaves = []
    for i, a in enumerate(arrays):
        wants = i in grads_of and a.dtype.kind in "fc"
        leaves.append((torch if lib is torch else rg).tensor(a, requires_grad=wants))
    try:
        return leaves, _outputs(program(lib, leaves)), None
    except Exception as error:  # (the kind is compared by the caller)
        return leaves, None, error


def _loss(lib, outputs, weights):
    total = None
    for out, w in zip(outputs, weights):
        if w is None:
            continue
        term = out * lib.tensor(w)
        term = (term.real if out.is_complex() else term).sum()
        total = term if total is None else total + term
    return total


def check(name, program, arrays, *, op, grads_of=None, tol=1e-7, compare=None, grad=True):
    """Runs ``program(lib, leaves)`` on torch and on retrograd and compares the outcomes;
    ``grads_of`` names the inputs whose gradients are compared (all by default), ``compare``
    the outputs that are compared (all by default)."""
    grads_of = set(range(len(arrays))) if grads_of is None else set(grads_of)
    t_leaves, t_out, t_error = _run(torch, program, arrays, grads_of)
    r_leaves, r_out, r_error = _run(rg, program, arrays, grads_of)
    if t_error is not None:
        assert r_error is not None, f"{name}: torch raised {t_error!r}, retrograd did not"
        assert isinstance(r_error, rg.RetrogradError), f"{name}: {r_error!r}"
        assert op in str(r_error), f"{name}: the error does not name {op}: {r_error}"
        _still_usable(r_leaves)
        return
    assert r_error is None, f"{name}: retrograd raised {r_error!r}, torch did not ({op})"
    assert len(r_out) == len(t_out), name
    if any(_dtype_name(a.dtype) in ("float32", "complex64") for a in arrays):
        tol = max(tol, 2e-4)
    indices = list(range(len(t_out))) if compare is None else list(compare)
    for i in indices:
        t, r = t_out[i], r_out[i]
        assert _dtype_name(r.dtype) == _dtype_name(t.dtype), f"{name}[{i}]: dtype {r.dtype}"
        assert tuple(r.shape) == tuple(t.shape), f"{name}[{i}]: shape {tuple(r.shape)}"
        np.testing.assert_allclose(
            _numpy(r), _numpy(t), rtol=tol, atol=tol, equal_nan=True, err_msg=f"{name}[{i}]"
        )
    if tol > 1e-6 or not grad:  # gradients are compared in double precision only
        return
    if not all(torch.isfinite(out).all() for out in t_out if out.is_floating_point()):
        return  # (the gradient of an infinite cond: torch's NaN, ours 0; not compared)
    differentiable = [i for i in indices if t_out[i].requires_grad and t_out[i].numel()]
    wanted = [leaf for leaf in t_leaves if leaf.requires_grad]
    if not differentiable or not wanted:
        return
    rng = np.random.RandomState(7)
    weights = [
        rng.randn(*t_out[i].shape) if i in differentiable else None for i in range(len(t_out))
    ]
    t_loss = _loss(torch, t_out, weights)
    try:
        t_grads = torch.autograd.grad(t_loss, wanted, allow_unused=True)
    except RuntimeError as error:
        if "modified by an inplace operation" in str(error):
            return  # torch's own bug (cond of a 1x1 matrix), not a refusal to compare with
        r_loss = _loss(rg, r_out, weights)
        with pytest.raises(rg.RetrogradError) as caught:
            r_loss.backward()
        assert op in str(caught.value), f"{name}: backward error {caught.value} ({error})"
        _still_usable(r_leaves)
        return
    grads = _loss(rg, r_out, weights).backward()
    r_wanted = [leaf for leaf in r_leaves if leaf.requires_grad]
    for k, (t_grad, leaf) in enumerate(zip(t_grads, r_wanted)):
        expected = np.zeros(leaf.shape) if t_grad is None else _numpy(t_grad)
        ours = leaf.grad(grads)
        assert ours is not None, f"{name}: no gradient for input {k}"
        np.testing.assert_allclose(
            _numpy(ours), expected, rtol=1e-6, atol=1e-7, err_msg=f"{name}: grad {k}"
        )


def _still_usable(leaves) -> None:
    for leaf in leaves:
        if leaf.requires_grad and not leaf.is_complex():
            grads = (leaf * 2.0).sum().backward()
            np.testing.assert_allclose(_numpy(leaf.grad(grads)), 2.0)


# -- drawing inputs ----------------------------------------------------------------------------
def _array(rng, shape, dtype) -> np.ndarray:
    values = rng.randn(*shape)
    if dtype == "complex128":
        values = values + 1j * rng.randn(*shape)
    return np.asarray(values).astype(dtype)


def _batch(rng) -> tuple[int, ...]:
    return tuple(int(v) for v in rng.choice([1, 2, 3], rng.randint(0, 3)))


def _dtype(rng, complex_ok=True) -> str:
    choices = ["float64", "float64", "float32"] + (["complex128"] if complex_ok else [])
    return str(rng.choice(choices))


def _well_conditioned(rng, shape, dtype) -> np.ndarray:
    n = shape[-1]
    return _array(rng, shape, dtype) + (n + 1) * np.eye(n, dtype=dtype)


def _singular(rng, shape, dtype) -> np.ndarray:
    a = _array(rng, shape, dtype)
    # a zero last row and column: every LAPACK meets an exactly zero pivot in A and in A^T.
    # (Two equal rows are not enough: getrf scales by the pivot's reciprocal, x * (1 / x) is
    # not always 1, and then whether a pivot is exactly zero depends on the LAPACK build.)
    a[..., -1, :] = 0
    a[..., :, -1] = 0
    return a


def _spd(rng, shape, dtype) -> np.ndarray:
    a = _array(rng, shape, dtype)
    return a @ np.conj(np.swapaxes(a, -1, -2)) + shape[-1] * np.eye(shape[-1], dtype=dtype)


def _square(rng, shape, dtype, singular_p=0.15) -> np.ndarray:
    if rng.rand() < singular_p and shape[-1] > 1:
        return _singular(rng, shape, dtype)
    return _well_conditioned(rng, shape, dtype)


def _mh(lib, t):
    return t.mT.conj() if t.is_complex() else t.mT


# -- the programs --------------------------------------------------------------------------------
def _draw_svd(rng):
    b, m, n = _batch(rng), int(rng.randint(1, 5)), int(rng.randint(1, 5))
    dtype = _dtype(rng)
    full = bool(rng.rand() < 0.5)
    k = min(m, n)
    a = _array(rng, b + (m, n), dtype)
    choice = rng.randint(4)
    if choice == 0:

        def program(lib, t):
            u, s, vh = lib.linalg.svd(t[0], full_matrices=full)
            recon = (u[..., :k] * s.unsqueeze(-2).to(u.dtype)) @ vh[..., :k, :]
            return s, recon, u.abs() ** 2 if not full else s * 1, vh.abs()[..., :k, :] ** 2

        return f"linalg.svd(full_matrices={full})", program, [a], "svd"
    if choice == 1:
        return "linalg.svdvals", lambda lib, t: lib.linalg.svdvals(t[0]), [a], "svdvals"
    if choice == 2:
        some = bool(rng.rand() < 0.5)

        def program(lib, t):
            u, s, v = t[0].svd(some=some)
            return s, (u[..., :k] * s.unsqueeze(-2).to(u.dtype)) @ _mh(lib, v[..., :k])

        return f"Tensor.svd(some={some})", program, [a], "svd"

    def program(lib, t):
        u, s, _ = lib.linalg.svd(t[0], full_matrices=full)
        return (u.abs() ** 2).sum(-2), s.sum(-1)

    return f"linalg.svd norms(full={full})", program, [a], "svd"


def _draw_eigh(rng):
    b, n = _batch(rng), int(rng.randint(1, 5))
    dtype = _dtype(rng)
    uplo = str(rng.choice(["L", "U"]))
    a = _array(rng, b + (n, n), dtype)
    if rng.rand() < 0.5:  # symmetric: the gradient is comparable whatever the triangle
        a = a + np.conj(np.swapaxes(a, -1, -2))
    if rng.rand() < 0.5:
        return (
            f"linalg.eigvalsh(UPLO={uplo})",
            lambda lib, t: lib.linalg.eigvalsh(t[0], UPLO=uplo),
            [a],
            "eigvalsh",
        )

    def program(lib, t):
        w, v = lib.linalg.eigh(t[0], UPLO=uplo)
        return w, v.abs() ** 2

    return f"linalg.eigh(UPLO={uplo})", program, [a], "eigh"


def _draw_qr(rng):
    b, m, n = _batch(rng), int(rng.randint(1, 5)), int(rng.randint(1, 5))
    dtype = _dtype(rng)
    mode = str(rng.choice(["reduced", "complete", "r"]))
    a = _array(rng, b + (m, n), dtype)
    if rng.rand() < 0.3:

        def method(lib, t):
            q, r = t[0].qr(some=mode != "complete")
            return q @ r, r.abs()

        return f"Tensor.qr(some={mode != 'complete'})", method, [a], "qr"

    def program(lib, t):
        q, r = lib.linalg.qr(t[0], mode=mode)
        if mode == "r":
            return r.abs(), q.shape[-1] * r.sum(-1), r
        return q @ r, r.abs(), q.abs() ** 2

    return f"linalg.qr(mode={mode})", program, [a], "qr"


def _draw_cholesky(rng):
    b, n = _batch(rng), int(rng.randint(1, 5))
    dtype = _dtype(rng)
    upper = bool(rng.rand() < 0.5)
    a = _spd(rng, b + (n, n), dtype)
    if rng.rand() < 0.2:
        a = -a  # not positive definite
    choice = rng.randint(5)
    if choice == 0:
        return (
            f"linalg.cholesky(upper={upper})",
            lambda lib, t: lib.linalg.cholesky(t[0], upper=upper),
            [a],
            "cholesky",
        )
    if choice == 1:

        def program(lib, t):
            factor, info = lib.linalg.cholesky_ex(t[0], upper=upper)
            return factor, info

        compare = [1] if (a[..., 0, 0].real < 0).any() else None
        return f"linalg.cholesky_ex(upper={upper})", program, [a], "cholesky", compare
    if choice == 2:
        a, dtype = a.real.copy(), "float64"
        rhs = _array(rng, b + (n, int(rng.randint(1, 3))), dtype)

        def program(lib, t):
            factor = lib.linalg.cholesky(t[0], upper=upper)
            return t[1].cholesky_solve(factor, upper=upper)

        return f"cholesky_solve(upper={upper})", program, [a, rhs], "cholesky"
    if choice == 3:
        a = a.real.copy()

        def program(lib, t):
            factor = lib.linalg.cholesky(t[0], upper=upper)
            return lib.cholesky_inverse(factor, upper=upper)

        return f"cholesky_inverse(upper={upper})", program, [a], "cholesky"
    return (
        f"Tensor.cholesky(upper={upper})",
        lambda lib, t: t[0].cholesky(upper=upper),
        [a],
        "cholesky",
    )


def _draw_lu(rng):
    b, n = _batch(rng), int(rng.randint(1, 5))
    dtype = _dtype(rng, complex_ok=False)
    a = _square(rng, b + (n, n), dtype)
    left, adjoint = bool(rng.rand() < 0.6), bool(rng.rand() < 0.4)
    k = int(rng.randint(1, 3))
    rhs = _array(rng, b + ((n, k) if left else (k, n)), dtype)
    choice = rng.randint(4)
    if choice == 0:

        def program(lib, t):
            lu, pivots = lib.linalg.lu_factor(t[0])
            return lib.linalg.lu_solve(lu, pivots, t[1], left=left, adjoint=adjoint)

        return f"lu_solve(left={left}, adjoint={adjoint})", program, [a, rhs], "lu"
    if choice == 1:
        pivot = bool(rng.rand() < 0.8)
        m = int(rng.randint(1, 5))
        rect = _array(rng, b + (m, n), dtype)

        def program(lib, t):
            p, low, up = lib.linalg.lu(t[0], pivot=pivot)
            return p, low, up

        return f"linalg.lu(pivot={pivot})", program, [rect], "lu"
    if choice == 2:

        def program(lib, t):
            lu, pivots = lib.linalg.lu_factor(t[0])
            p, low, up = lib.lu_unpack(lu, pivots)
            return lu, pivots, p, low, up

        return "lu_factor + lu_unpack", program, [a], "lu"

    def program(lib, t):
        lu, pivots, info = lib.linalg.lu_factor_ex(t[0])
        return lu, pivots, info

    # at a singular matrix torch's LU backward divides by the zero pivot (NaN); ours is finite
    singular = bool(np.isclose(np.linalg.det(a), 0).any())
    return "linalg.lu_factor_ex", program, [a], "lu", None, not singular


def _draw_solve(rng):
    b, n = _batch(rng), int(rng.randint(1, 5))
    dtype = _dtype(rng)
    a = _square(rng, b + (n, n), dtype)
    left = bool(rng.rand() < 0.6)
    k = int(rng.randint(1, 3))
    choice = rng.randint(4)
    if choice == 0:
        rhs_shape = (n,) if rng.rand() < 0.3 and left else ((n, k) if left else (k, n))
        rhs = _array(rng, b + rhs_shape, dtype)
        return (
            f"linalg.solve(left={left})",
            lambda lib, t: lib.linalg.solve(t[0], t[1], left=left),
            [a, rhs],
            "solve",
        )
    if choice in (1, 2) and dtype == "complex128":
        dtype = "float64"
        a, rhs = a.real.copy(), None
    if choice == 1:
        upper, unit = bool(rng.rand() < 0.5), bool(rng.rand() < 0.3)
        rhs = _array(rng, b + ((n, k) if left else (k, n)), dtype)
        return (
            f"solve_triangular(upper={upper}, left={left}, unitriangular={unit})",
            lambda lib, t: lib.linalg.solve_triangular(
                t[0], t[1], upper=upper, left=left, unitriangular=unit
            ),
            [a, rhs],
            "solve_triangular",
        )
    if choice == 2:
        upper, unit, trans = (bool(rng.rand() < 0.5) for _ in range(3))
        rhs = _array(rng, b + (n, k), dtype)
        return (
            f"triangular_solve(upper={upper}, transpose={trans}, unitriangular={unit})",
            lambda lib, t: t[1].triangular_solve(
                t[0], upper=upper, transpose=trans, unitriangular=unit
            ),
            [a, rhs],
            "triangular_solve",
        )
    rhs = _array(rng, b + (n,) if rng.rand() < 0.5 else b + (n, k), dtype)

    def program(lib, t):
        x, info = lib.linalg.solve_ex(t[0], t[1])
        return x, info

    compare = [1] if np.isclose(np.linalg.det(a), 0).any() else None
    return "linalg.solve_ex", program, [a, rhs], "solve", compare


def _draw_lstsq(rng):
    b, m, n = _batch(rng), int(rng.randint(1, 5)), int(rng.randint(1, 5))
    dtype = _dtype(rng)
    driver = str(rng.choice(["gelsy", "gelsd", "gelss", "gels"]))
    if driver == "gels":
        m = max(m, n)  # full rank, tall
    rcond = None if rng.rand() < 0.5 else float(rng.choice([1e-3, 0.3]))
    a = _array(rng, b + (m, n), dtype)
    rhs = _array(rng, b + (m, int(rng.randint(1, 3))), dtype)

    def program(lib, t):
        result = lib.linalg.lstsq(t[0], t[1], rcond=rcond, driver=driver)
        return result.solution, result.residuals, result.rank, result.singular_values

    compare = [0]
    if driver in ("gelsd", "gelss"):
        compare += [2, 3]
    if rcond is not None and driver != "gels":
        compare = [2] if driver != "gelsy" else []
    return f"linalg.lstsq(driver={driver}, rcond={rcond})", program, [a, rhs], "lstsq", compare


def _draw_inverse(rng):
    b, n = _batch(rng), int(rng.randint(1, 5))
    dtype = _dtype(rng)
    a = _square(rng, b + (n, n), dtype, singular_p=0.25)
    choice = rng.randint(4)
    if choice == 0:
        return "linalg.inv", lambda lib, t: lib.linalg.inv(t[0]), [a], "inv"
    if choice == 1:

        def program(lib, t):
            inverse, info = lib.linalg.inv_ex(t[0])
            return inverse, info

        compare = [1] if np.isclose(np.linalg.det(a), 0).any() else None
        return "linalg.inv_ex", program, [a], "inv", compare
    if choice == 2:
        return "Tensor.inverse", lambda lib, t: t[0].inverse(), [a], "inv"
    power = int(rng.choice([-3, -2, -1, 0, 1, 2, 3]))
    return (
        f"matrix_power({power})",
        lambda lib, t: lib.linalg.matrix_power(t[0], power),
        [a],
        "matrix_power",
    )


def _draw_pinv(rng):
    b, m, n = _batch(rng), int(rng.randint(1, 5)), int(rng.randint(1, 5))
    dtype = _dtype(rng)
    hermitian = bool(rng.rand() < 0.4)
    if hermitian:
        m = n
    a = _array(rng, b + (m, n), dtype)
    if hermitian:
        a = a + np.conj(np.swapaxes(a, -1, -2))
    kwargs = {}
    if rng.rand() < 0.5:
        kwargs["rtol"] = float(rng.choice([0.0, 1e-3, 0.5]))
    if rng.rand() < 0.4:
        kwargs["atol"] = float(rng.choice([0.0, 0.5, 2.0]))
    if rng.rand() < 0.3:
        return "Tensor.pinverse", lambda lib, t: t[0].pinverse(rcond=0.2), [a], "pinv"
    return (
        f"linalg.pinv(hermitian={hermitian}, {kwargs})",
        lambda lib, t: lib.linalg.pinv(t[0], hermitian=hermitian, **kwargs),
        [a],
        "pinv",
    )


def _draw_det(rng):
    b, n = _batch(rng), int(rng.randint(1, 5))
    dtype = _dtype(rng)
    a = _array(rng, b + (n, n), dtype)
    choice = rng.randint(4)
    if choice == 0:
        return "linalg.det", lambda lib, t: lib.linalg.det(t[0]), [a], "det"
    if choice == 1:
        return "Tensor.det", lambda lib, t: t[0].det(), [a], "det"
    if choice == 2:
        return "linalg.slogdet", lambda lib, t: tuple(lib.linalg.slogdet(t[0])), [a], "slogdet"
    a = _spd(rng, b + (n, n), dtype) if rng.rand() < 0.7 else a
    return "logdet", lambda lib, t: lib.logdet(t[0]), [a], "logdet"


def _draw_exp(rng):
    b, n = _batch(rng), int(rng.randint(1, 5))
    dtype = _dtype(rng)
    a = _array(rng, b + (n, n), dtype) * float(rng.choice([0.1, 1.0, 3.0]))
    if rng.rand() < 0.5:
        return "linalg.matrix_exp", lambda lib, t: lib.linalg.matrix_exp(t[0]), [a], "matrix_exp"
    return "Tensor.matrix_exp", lambda lib, t: t[0].matrix_exp(), [a], "matrix_exp"


def _draw_norm(rng):
    b, m, n = _batch(rng), int(rng.randint(1, 5)), int(rng.randint(1, 5))
    dtype = _dtype(rng)
    ord_ = rng.choice(["fro", "nuc", 2, -2, INF, -INF, 1, -1])
    ord_ = ord_ if isinstance(ord_, str) else float(ord_)
    keepdim = bool(rng.rand() < 0.4)
    a = _array(rng, b + (m, n), dtype)
    choice = rng.randint(4)
    if choice == 0:
        return (
            f"linalg.matrix_norm(ord={ord_}, keepdim={keepdim})",
            lambda lib, t: lib.linalg.matrix_norm(t[0], ord=ord_, keepdim=keepdim),
            [a],
            "norm",
        )
    if choice == 1:
        return (
            f"linalg.norm(ord={ord_}, dim=(-2, -1))",
            lambda lib, t: lib.linalg.norm(t[0], ord=ord_, dim=(-2, -1), keepdim=keepdim),
            [a],
            "norm",
        )
    if choice == 2:
        square = _square(rng, b + (n, n), dtype)
        ord_c = None if rng.rand() < 0.3 else ord_
        return (
            f"linalg.cond(p={ord_c})",
            lambda lib, t: lib.linalg.cond(t[0], p=ord_c),
            [square],
            "cond",
        )
    kwargs = {}
    hermitian = bool(rng.rand() < 0.3)
    if hermitian:
        a = _array(rng, b + (n, n), dtype)
        a = a + np.conj(np.swapaxes(a, -1, -2))
    elif rng.rand() < 0.4:
        a = _singular(rng, b + (max(m, 2), n), dtype)
    if rng.rand() < 0.5:
        kwargs["atol"] = float(rng.choice([0.0, 0.5, 2.0]))
    if rng.rand() < 0.5:
        kwargs["rtol"] = float(rng.choice([0.0, 1e-3, 0.5]))
    return (
        f"linalg.matrix_rank(hermitian={hermitian}, {kwargs})",
        lambda lib, t: lib.linalg.matrix_rank(t[0], hermitian=hermitian, **kwargs),
        [a],
        "matrix_rank",
    )


def _draw_vectors(rng):
    b = _batch(rng)
    dtype = _dtype(rng)
    choice = rng.randint(4)
    if choice == 0:
        dim = int(rng.choice([-1, 0])) if b else -1
        shape = ((3,) + b) if dim == 0 else (b + (3,))
        # (one of fewer dims, which torch refuses and retrograd broadcasts as API.md section
        # 2's cross does, is not drawn: tests/test_fuzz86_fixes.py has it)
        other = shape if rng.rand() < 0.8 else (1,) * (len(shape) - 1) + shape[-1:]
        x, y = _array(rng, shape, dtype), _array(rng, other if dim == -1 else shape, dtype)
        return (
            f"linalg.cross(dim={dim})",
            lambda lib, t: lib.linalg.cross(t[0], t[1], dim=dim),
            [x, y],
            "cross",
        )
    if choice == 1:
        n = int(rng.randint(1, 5))
        x, y = _array(rng, b + (n,), dtype), _array(rng, (n,), dtype)
        dim = -1
        if rng.rand() < 0.3:
            x, y, dim = _array(rng, (n, 2), dtype), _array(rng, (n, 1), dtype), 0
        return (
            f"linalg.vecdot(dim={dim})",
            lambda lib, t: lib.linalg.vecdot(t[0], t[1], dim=dim),
            [x, y],
            "vecdot",
        )
    if choice == 2:
        count = int(rng.randint(2, 5))
        sizes = [int(v) for v in rng.choice([1, 2, 3, 4], count + 1)]
        shapes = [(sizes[i], sizes[i + 1]) for i in range(count)]
        if rng.rand() < 0.4:
            shapes[0] = shapes[0][1:]
        if rng.rand() < 0.4:
            shapes[-1] = shapes[-1][:1]
        arrays = [_array(rng, s, dtype) for s in shapes]
        return "linalg.multi_dot", lambda lib, t: lib.linalg.multi_dot(list(t)), arrays, "multi_dot"
    m = int(rng.randint(1, 5))
    n = int(rng.randint(1, m + 1))
    k = int(rng.randint(0, n + 1))
    a, tau = _array(rng, b + (m, n), dtype), _array(rng, b + (k,), dtype)
    return (
        "linalg.householder_product",
        lambda lib, t: lib.linalg.householder_product(t[0], t[1]),
        [a, tau],
        "householder_product",
    )


def _draw_tensor_ops(rng):
    dtype = _dtype(rng)
    if rng.rand() < 0.5:
        ind = int(rng.choice([1, 2]))
        shape = (2, 3, 6) if ind == 1 else (2, 3, 3, 2)
        a = _array(rng, (6, 6), dtype) + 7 * np.eye(6)
        a = a.reshape(shape)
        return (
            f"linalg.tensorinv(ind={ind})",
            lambda lib, t: lib.linalg.tensorinv(t[0], ind=ind),
            [a],
            "tensorinv",
        )
    a = (_array(rng, (6, 6), dtype) + 7 * np.eye(6)).reshape(2, 3, 6)
    rhs = _array(rng, (2, 3), dtype)
    if rng.rand() < 0.4:
        a = np.moveaxis(a, -1, 0).copy()  # (6, 2, 3): solved over dims=(0,)
        return (
            "linalg.tensorsolve(dims=(0,))",
            lambda lib, t: lib.linalg.tensorsolve(t[0], t[1], dims=(0,)),
            [a, rhs],
            "tensorsolve",
        )
    return (
        "linalg.tensorsolve",
        lambda lib, t: lib.linalg.tensorsolve(t[0], t[1]),
        [a, rhs],
        "tensorsolve",
    )


FAMILIES = {
    "svd": _draw_svd,
    "eigh": _draw_eigh,
    "qr": _draw_qr,
    "cholesky": _draw_cholesky,
    "lu": _draw_lu,
    "solve": _draw_solve,
    "lstsq": _draw_lstsq,
    "inverse": _draw_inverse,
    "pinv": _draw_pinv,
    "det": _draw_det,
    "exp": _draw_exp,
    "norm": _draw_norm,
    "vectors": _draw_vectors,
    "tensor_ops": _draw_tensor_ops,
}


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_random_linalg_options(family):
    rng = np.random.RandomState(8600 + sorted(FAMILIES).index(family))
    for seed in range(PROGRAMS):
        drawn = FAMILIES[family](rng)
        name, program, arrays, op = drawn[:4]
        compare = drawn[4] if len(drawn) > 4 else None
        grad = drawn[5] if len(drawn) > 5 else True
        check(f"seed {seed}: {name}", program, arrays, op=op, compare=compare, grad=grad)
