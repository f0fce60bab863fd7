"""Burn's linalg tests (``crates/burn-backend-tests/tests/tensor/float/linalg``, tracel-ai/burn at
2c06be351006851d42fdb6df16b976f4a82d9747) not ported before: qr.rs and lu.rs whole, and the
det.rs, outer.rs, diag.rs, trace.rs and vector_norm.rs cases that ``test_burn_tensor_ports_5``
leaves out, under every checkpointing strategy on the chosen inner backend. Expected values are
Burn's. Burn's names map to torch's (API.md section 10): ``linalg::qr(t, reduced)`` is
``rg.linalg.qr(t, mode="reduced" | "complete")``, ``linalg::lu`` is ``rg.linalg.lu`` (both give
``A = P @ L @ U``), ``linalg::det`` is ``rg.linalg.det``, ``linalg::diag`` is
``t.diagonal(0, -2, -1)``, ``linalg::trace`` of a batch is that diagonal's ``sum_dim(-1)``,
``linalg::vector_norm(x, p, d)`` is ``rg.linalg.vector_norm(x, p, d, keepdim=True)`` and
``vector_normalize(x, p, d, eps)`` is ``F.normalize``. Burn's ``Distribution::Default`` random
inputs are ``rg.random`` (uniform on [0, 1)) under a fixed seed.

Deliberate differences (torch's forms, which API.md section 10 fixes): ``det`` of one 2-d
matrix is its determinant (Burn requires a batch dimension and panics); ``outer`` takes 1-d
vectors only (Burn's batched ``outer`` and ``outer_dim`` are written here as the broadcast
products they are); the norms take float tensors only (Burn's ``max_abs_norm`` of an int
tensor is ``abs().amax``)."""

from __future__ import annotations

import math

import numpy as np
import pytest

import retrograd as rg
import retrograd.nn.functional as F  # noqa: N812
from test_burn_ports import backend  # noqa: F401 (the autouse fixture: every strategy)
from test_burn_tensor_ports import eq


def close(actual, expected, rtol=1e-3, atol=1e-3):
    """Burn's ``assert_approx_eq`` with ``Tolerance::rel_abs(rtol, atol)`` (its default:
    ``Tolerance::default()``, 1e-3 here as in the conformance suite)."""
    np.testing.assert_allclose(
        np.asarray(actual, dtype=np.float64), np.asarray(expected, dtype=np.float64), rtol, atol
    )


def uniform(shape, seed=0):
    """Burn's ``TestTensor::random(shape, Distribution::Default)``."""
    rg.seed(seed)
    return rg.random(shape)


# ---- qr.rs: Q @ R reconstructs the input (REL 5e-3, ABS 2e-3) --------------------------------

QR_TOL = {"rtol": 5e-3, "atol": 2e-3}


def assert_qr_reconstructs(tensor, reduced=False):
    q, r = rg.linalg.qr(tensor, mode="reduced" if reduced else "complete")
    m, n = tensor.shape[-2:]
    k = min(m, n) if reduced else m
    assert q.shape == tensor.shape[:-2] + (m, k)
    assert r.shape == tensor.shape[:-2] + (k, n)
    close(q.matmul(r), tensor, **QR_TOL)


QR_SMALL = {
    "1x1": [[5.0]],
    "2x2": [[4.0, 3.0], [6.0, 3.0]],
    "3x3": [[4.0, 7.0, 3.0], [6.0, 1.0, 3.0], [8.0, 3.0, 7.0]],
    "identity_matrix": [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]],
    "zero_matrix": [[0.0, 0.0, 0.0], [0.0, 0.0, 0.0], [0.0, 0.0, 0.0]],
    "singular_maxtrix": [
        [0.0, 4.0, 2.0, 6.0],
        [0.0, 2.0, 2.0, 11.0],
        [0.0, 3.0, 9.0, 6.0],
        [0.0, 7.0, 10.0, 9.0],
    ],
    "identity_singular_maxtrix": np.ones((4, 4), dtype=np.float32).tolist(),
    "v0_zero": [[0.0, 4.0, 2.0], [1.0, 2.0, 2.0], [2.0, 3.0, 9.0]],
    "diagonilized_col": [[1.0, 4.0, 2.0], [0.0, 2.0, 2.0], [0.0, 3.0, 9.0]],
}


@pytest.mark.parametrize("name", list(QR_SMALL))
def test_qr_small_matrices(name):
    assert_qr_reconstructs(rg.tensor(QR_SMALL[name]))


@pytest.mark.parametrize(
    ("shape", "q_shape", "r_shape"),
    [
        ((5, 5), (5, 5), (5, 5)),
        ((10, 5), (10, 5), (5, 5)),
        ((5, 10), (5, 5), (5, 10)),
        ((3, 8, 6), (3, 8, 6), (3, 6, 6)),
        ((2, 3, 12, 4), (2, 3, 12, 4), (2, 3, 4, 4)),
    ],
)
def test_qr_reduced_shapes(shape, q_shape, r_shape):
    q, r = rg.linalg.qr(rg.ones(shape), mode="reduced")
    assert q.shape == q_shape
    assert r.shape == r_shape


@pytest.mark.parametrize(
    ("shape", "reduced"),
    [((6, 6), False), ((6, 6), True), ((8, 5), False), ((5, 8), False), ((5, 8), True)]
    + [((256, 128), False), ((128, 256), False), ((3, 6, 6), False), ((3, 8, 5), False)]
    + [((3, 5, 8), False), ((2, 2, 6, 6), False), ((2, 2, 8, 5), False), ((2, 2, 5, 8), False)],
)
def test_qr_random(shape, reduced):
    # Burn's test_qr_2d_tall_reduced factors with reduced=false, as test_qr_2d_tall does
    assert_qr_reconstructs(uniform(shape), reduced)


@pytest.mark.parametrize("shape", [(8, 5), (5, 8)])
@pytest.mark.parametrize("reduced", [False, True])
def test_qr_singular_first_column(shape, reduced):
    # tensor.slice_assign(s![.., 0..1], zeros)
    tensor = uniform(shape).slice_assign([slice(None), (0, 1)], rg.zeros((shape[0], 1)))
    assert_qr_reconstructs(tensor, reduced)


@pytest.mark.parametrize("matrix", [(6, 6), (8, 5), (5, 8)])
def test_qr_4d_with_singularities(matrix):
    # Burn also assigns ones at s![2..3, 1..2, .., ..], past the end of the batch's first
    # dimension (size 2): an empty range there, so that write changes nothing.
    ones = rg.ones((1, 1) + matrix)
    tensor = uniform((2, 2) + matrix).slice_assign([(0, 1), (0, 1)], ones)
    assert_qr_reconstructs(tensor)


def test_qr_panic_rank_less_than_2():
    with pytest.raises(rg.ShapeError, match="qr"):
        rg.linalg.qr(rg.tensor([1.0, 2.0, 3.0]))


# ---- lu.rs: P @ L @ U reconstructs the input (REL 5e-3, ABS 1e-3) ----------------------------


def assert_lu_reconstructs(tensor):
    p, lower, upper = rg.linalg.lu(tensor)
    close(p.matmul(lower).matmul(upper), tensor, rtol=5e-3, atol=1e-3)


@pytest.mark.parametrize(
    "name", ["1x1", "2x2", "3x3", "identity_matrix", "singular_maxtrix"], ids=str
)
def test_lu_small_matrices(name):
    # Burn's test_lu_singular_zero_pivot is qr.rs's singular matrix (a zero first column)
    assert_lu_reconstructs(rg.tensor(QR_SMALL[name]))


@pytest.mark.parametrize(
    "shape",
    [(6, 6), (8, 5), (5, 8), (256, 128), (128, 256), (3, 6, 6), (3, 8, 5), (3, 5, 8)]
    + [(2, 2, 6, 6), (2, 2, 8, 5), (2, 2, 5, 8)],
)
def test_lu_random(shape):
    assert_lu_reconstructs(uniform(shape))


def test_lu_block_dispatch():
    # Burn's 500x500, 300x500, 5x300x300, 3x300x500 and 3x500x300 cases test the same blocked
    # kernel path of its own backends; one of its six keeps this file fast.
    assert_lu_reconstructs(uniform((500, 300)))


def test_lu_panics():
    with pytest.raises(rg.ShapeError, match="lu"):
        rg.linalg.lu(rg.tensor([1.0, 2.0, 3.0]))


# ---- lu_decomposition.rs (burn-tensor's linalg tests before they moved, at 5cf7900b^): the
# packed factors are torch's lu_factor's; Burn's permutation vector is the row of P holding the
# one of each column. A singular matrix panics in Burn and is refused by lu_factor (torch's
# too); a non-square one panics in Burn and is factored by torch's lu_factor (kept).


def test_lu_decomposition_packed_factors():
    lu, pivots = rg.linalg.lu_factor(rg.tensor([[4.0, 3.0], [6.0, 3.0]]))
    close(lu, [[6.0, 3.0], [2.0 / 3.0, 1.0]], 1e-6, 1e-6)
    a = rg.tensor([[0.0, 5.0, 22.0 / 3.0], [4.0, 2.0, 1.0], [2.0, 7.0, 9.0]])
    lu, pivots = rg.linalg.lu_factor(a)
    close(lu, [[4.0, 2.0, 1.0], [0.5, 6.0, 8.5], [0.0, 0.8333333, 0.25000048]])
    p, _, _ = rg.lu_unpack(lu, pivots)
    eq(p.argmax(0), [1, 2, 0])
    eq(rg.linalg.lu_factor(rg.tensor([[5.0]]))[0], [[5.0]])
    eq(rg.linalg.lu_factor(rg.eye(4))[0], np.eye(4))
    with pytest.raises(rg.InvalidArgumentError, match="singular"):
        rg.linalg.lu_factor(rg.tensor([[1.0, 2.0], [2.0, 4.0]]))
    a = uniform((50, 50))
    lu, pivots = rg.linalg.lu_factor(a)
    p, lower, upper = rg.lu_unpack(lu, pivots)
    close(p.matmul(lower).matmul(upper), a, 1e-2, 1e-2)


# ---- det.rs (the cases test_burn_tensor_ports_5.test_det leaves out) -------------------------


def test_det_300x300_zeros_and_ones():
    close(rg.linalg.det(rg.zeros((1, 300, 300))), [0.0], atol=5e-3)
    close(rg.linalg.det(rg.ones((1, 300, 300))), [0.0], atol=5e-3)


def test_det_large_diagonal():
    values = rg.arange(1, 9).float()
    tensor = (rg.eye(8) * values.unsqueeze_dim(0)).unsqueeze_dim(0)
    close(rg.linalg.det(tensor), [40320.0])


def test_det_mixed_singular_non_singular_batch():
    singular = uniform((10, 10)).slice_assign([slice(None), (8, 9)], rg.zeros((10, 1)))
    batch = rg.stack([singular, rg.eye(10)], 0)
    close(rg.linalg.det(batch), [0.0, 1.0])


def test_det_batches():
    det = rg.linalg.det
    close(det(rg.tensor([[[2.0]], [[3.0]], [[5.0]]])), [2.0, 3.0, 5.0])
    batch = [[[1.0, 2.0], [3.0, 4.0]], [[2.0, 0.0], [0.0, 3.0]], [[5.0, 6.0], [7.0, 8.0]]]
    close(det(rg.tensor(batch)), [-2.0, 6.0, -2.0])
    batch = [
        [[4.0, 7.0, 3.0], [6.0, 1.0, 3.0], [8.0, 3.0, 7.0]],
        [[1.0, 0.0, 0.0], [0.0, 2.0, 0.0], [0.0, 0.0, 3.0]],
        [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [7.0, 8.0, 9.0]],
    ]
    close(det(rg.tensor(batch)), [-104.0, 6.0, 0.0])
    square = rg.tensor(
        [
            [np.eye(3) * 1, np.eye(3) * 2],
            [np.eye(3) * 3, np.eye(3) * 4],
        ]
    ).float()
    close(det(square), [[1.0, 8.0], [27.0, 64.0]])
    assert det(uniform((3, 4, 5, 5))).shape == (3, 4)


def test_det_properties():
    a, b = uniform((1, 10, 10), seed=1), uniform((1, 10, 10), seed=2)
    close(rg.linalg.det(a.matmul(b)), rg.linalg.det(a) * rg.linalg.det(b))
    close(rg.linalg.det(a), rg.linalg.det(a.transpose()))
    close(rg.linalg.det(rg.tensor([[[-1.0, 2.0], [3.0, -4.0]]])), [-2.0])
    for n in (1, 2, 3, 10):
        tensor = uniform((1, n, n))
        assert rg.linalg.det(tensor).dtype == tensor.dtype


def test_det_panics():
    # Burn's rank-2 panic is torch's 2-d determinant here (the module docstring says why).
    close(rg.linalg.det(rg.tensor([[1.0, 2.0], [3.0, 4.0]])), -2.0)
    with pytest.raises(rg.ShapeError, match=r"^det: .*square.*got shape \[1, 2, 3\]"):
        rg.linalg.det(rg.tensor([[[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]]))
    with pytest.raises(rg.ShapeError, match=r"^det: "):
        rg.tensor([[[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]]).det()


def test_det_random_pytorch_comparison():
    tensor = rg.tensor(
        [
            [[0.8823, 0.9150, 0.3829], [0.9593, 0.3904, 0.6009], [0.2566, 0.7936, 0.9408]],
            [[0.1332, 0.9346, 0.5936], [0.8694, 0.5677, 0.7411], [0.4294, 0.8854, 0.5739]],
        ]
    )
    close(rg.linalg.det(tensor), [-0.5283, 0.0993])
    tensor = rg.tensor(
        [
            [
                [
                    [0.7713, 0.0208, 0.6336, 0.7488],
                    [0.4985, 0.2248, 0.1981, 0.7605],
                    [0.1691, 0.0883, 0.6854, 0.9534],
                    [0.0039, 0.5122, 0.8126, 0.6125],
                ],
                [
                    [0.7218, 0.2919, 0.9178, 0.7146],
                    [0.5425, 0.1422, 0.3733, 0.6741],
                    [0.4418, 0.4340, 0.6178, 0.5131],
                    [0.6503, 0.6011, 0.8052, 0.6985],
                ],
            ],
            [
                [
                    [0.2922, 0.0077, 0.5508, 0.5940],
                    [0.4512, 0.3444, 0.3599, 0.6226],
                    [0.8929, 0.8856, 0.1539, 0.8586],
                    [0.7683, 0.8819, 0.9567, 0.1534],
                ],
                [
                    [0.4885, 0.6690, 0.9967, 0.7013],
                    [0.5040, 0.2374, 0.1123, 0.1505],
                    [0.3819, 0.4428, 0.0835, 0.7866],
                    [0.6515, 0.7998, 0.1242, 0.5865],
                ],
            ],
        ]
    )
    close(rg.linalg.det(tensor), [[-0.1527, -0.0053], [0.0307, -0.1039]], atol=1e-4)


# ---- outer.rs --------------------------------------------------------------------------------


def batched_outer(x, y):
    """Burn's ``linalg::outer`` of ``[b, m]`` and ``[b, n]``: ``[b, m, n]``."""
    return x.unsqueeze_dim(2) * y.unsqueeze_dim(1)


def test_outer_vectors():
    close(rg.zeros((3,)).outer(rg.tensor([7.0, 8.0])), np.zeros((3, 2)))
    close(rg.tensor([1.0, -2.0, 3.0]).outer(rg.zeros((4,))), np.zeros((3, 4)))
    u, v = rg.tensor([1.0, 2.0, 3.0]), rg.tensor([4.0, 5.0])
    close(u.outer(v), u.reshape((3, 1)).matmul(v.reshape((1, 2))))
    u, v, w = rg.tensor([2.0, -1.0]), rg.tensor([3.0, 4.0]), rg.tensor([5.0, 6.0])
    close(u.outer(v).matmul(w.reshape((2, 1))).reshape((2,)), u * v.dot(w))
    close(rg.tensor([3.0]).outer(rg.tensor([4.0, 5.0, 6.0])), [[12.0, 15.0, 18.0]])
    big = 1.0e10
    out = rg.tensor([big, -big]).outer(rg.tensor([big, big]))
    close(out, [[big * big, big * big], [-big * big, -big * big]], rtol=1e-4, atol=0)
    out = np.asarray(rg.tensor([math.nan, 2.0]).outer(rg.tensor([3.0, 4.0]))).ravel()
    assert np.isnan(out[0]) and np.isnan(out[1])
    eq(out[2:], [6.0, 8.0])


def test_outer_batched():
    x = rg.tensor([[1.0, 2.0], [3.0, 4.0]])
    y = rg.tensor([[5.0, 6.0, 7.0], [8.0, 9.0, 10.0]])
    expected = [[[5, 6, 7], [10, 12, 14]], [[24, 27, 30], [32, 36, 40]]]
    close(batched_outer(x, y), expected)
    for b in range(2):
        close(batched_outer(x, y)[b], x[b].outer(y[b]))
    assert batched_outer(rg.zeros((3, 4)), rg.zeros((3, 5))).shape == (3, 4, 5)
    close(
        batched_outer(rg.zeros((2, 3)), rg.tensor([[7.0, 8.0], [9.0, 10.0]])), np.zeros((2, 3, 2))
    )
    close(
        batched_outer(rg.tensor([[1.0, -2.0, 3.0], [4.0, 5.0, -6.0]]), rg.zeros((2, 4))),
        0 * np.ones((2, 3, 4)),
    )
    x, y = rg.tensor([[-1.0, 2.0], [3.0, -4.0]]), rg.tensor([[3.0, -4.0], [-5.0, 6.0]])
    close(batched_outer(x, y), [[[-3, 4], [6, -8]], [[-15, 18], [20, -24]]])
    with pytest.raises(rg.ShapeError):
        batched_outer(rg.zeros((2, 3)), rg.zeros((3, 4)))
    # outer_dim(u, v, 0): the outer product along dim 0, the other dim a batch kept last
    u, v = rg.tensor([[1.0, 2.0], [3.0, 4.0]]), rg.tensor([[4.0, 5.0], [5.0, 6.0]])
    close(u.unsqueeze_dim(1) * v.unsqueeze_dim(0), [[[4, 10], [5, 12]], [[12, 20], [15, 24]]])


# ---- diag.rs and trace.rs --------------------------------------------------------------------


def diag(t):
    return t.diagonal(0, -2, -1)


def test_diag_batches_and_edges():
    eq(
        diag(
            rg.tensor([[[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], [[7.0, 8.0, 9.0], [10.0, 11.0, 12.0]]])
        ),
        [[1.0, 5.0], [7.0, 11.0]],
    )
    four = np.arange(1.0, 17.0, dtype=np.float32).reshape(2, 2, 2, 2)
    eq(diag(rg.tensor(four)), [[[1.0, 4.0], [5.0, 8.0]], [[9.0, 12.0], [13.0, 16.0]]])
    tall = np.arange(1.0, 13.0, dtype=np.float32).reshape(2, 1, 3, 2)
    eq(diag(rg.tensor(tall)), [[[1.0, 4.0]], [[7.0, 10.0]]])
    wide = np.arange(1.0, 17.0, dtype=np.float32).reshape(1, 2, 2, 4)
    eq(diag(rg.tensor(wide)), [[[1.0, 6.0], [9.0, 14.0]]])
    eq(diag(rg.tensor([[5.0]])), [5.0])
    eq(diag(rg.tensor([[1.0, 2.0, 3.0]])), [1.0])
    eq(diag(rg.tensor([[1.0], [2.0], [3.0]])), [1.0])
    eq(diag(rg.tensor([[0.0, 1.0], [2.0, 0.0]])), [0.0, 0.0])
    eq(diag(rg.tensor([[[5.0]], [[7.0]]])), [[5.0], [7.0]])
    eq(
        diag(rg.tensor([[[1.0, 2.0], [3.0, 0.0]], [[0.0, 5.0], [6.0, 7.0]]])),
        [[1.0, 0.0], [0.0, 7.0]],
    )
    eq(diag(rg.tensor([[1, 2], [3, 4]])), [1, 4])
    eq(diag(rg.tensor([[1, 2, 3], [4, 5, 6], [7, 8, 9]])), [1, 5, 9])
    with pytest.raises(rg.ShapeError):
        diag(rg.tensor([1.0, 2.0, 3.0]))


def test_trace_batches_and_edges():
    batch4 = rg.tensor([[[[1.0, 2.0], [3.0, 4.0]], [[5.0, 6.0], [7.0, 8.0]]]])
    eq(diag(batch4).sum_dim(-1), [[[5.0], [13.0]]])
    eq(rg.zeros((3, 3)).trace(), 0.0)
    eq(rg.tensor([[-1.0, 2.0], [3.0, -4.0]]).trace(), -5.0)
    with pytest.raises(rg.ShapeError, match="trace"):
        rg.tensor([1.0, 2.0, 3.0]).trace()


# ---- vector_norm.rs --------------------------------------------------------------------------


def norm(x, p, dim):
    return rg.linalg.vector_norm(x, p, dim, keepdim=True)


def lp_norm_naive(x, p, dim):
    return x.abs().powf_scalar(p).sum_dim(dim).powf_scalar(1.0 / p)


def test_l1_l2_norms():
    x = rg.tensor([[1.0, 2.0], [3.0, 4.0]])
    eq(norm(x, 1, 0), [[4.0, 6.0]])
    eq(norm(x, 1.0, 1), [[3.0], [7.0]])
    close(norm(x, 2, 0), [[3.16227766, 4.47213595]])
    close(norm(x, 2.0, 1), [[2.23606798], [5.0]])


def test_lp_norm():
    x = rg.tensor([[1.0, -2.0, 0.0], [0.0, 3.0, 4.0]])
    close(norm(x, 3, 0), [[1.0, 3.2710664, 4.0]])
    eq(norm(x, 0, 0), [[1.0, 2.0, 1.0]])
    eq(norm(x, 1, 0), [[1.0, 5.0, 4.0]])
    eq(lp_norm_naive(x, 1.0, 0), [[1.0, 5.0, 4.0]])
    close(norm(x, 2, 0), [[1.0, 3.6055512, 4.0]])
    close(lp_norm_naive(x, 2.0, 0), [[1.0, 3.6055512, 4.0]])
    eq(norm(x, math.inf, 0), [[1.0, 3.0, 4.0]])
    eq(norm(x, -math.inf, 0), [[0.0, 2.0, 0.0]])


def test_normalize():
    x = rg.tensor([[1.0, 2.0], [3.0, 4.0]])
    close(F.normalize(x, 1.0, 0, 0.25), [[1 / 4, 2 / 6], [3 / 4, 4 / 6]])
    close(F.normalize(x, 1.0, 0, 5.0), [[1 / 5, 2 / 6], [3 / 5, 4 / 6]])


def test_norms_negative_dimension():
    x = rg.tensor([[1.0, 2.0], [3.0, 4.0]])
    for p in (0, 1, 2, 3.0, math.inf, -math.inf):
        close(norm(x, p, -1), norm(x, p, 1))
    close(F.normalize(x, 1.0, -1, 1e-8), F.normalize(x, 1.0, 1, 1e-8))
    # Burn's max_abs_norm/min_abs_norm of an int tensor: torch's norms refuse int64, the
    # same values come from abs().amax / amin
    z = rg.tensor([[1, 2], [3, 4]])
    eq(z.abs().amax(0, keepdim=True), [[3, 4]])
    eq(z.abs().amin(1, keepdim=True), [[1], [3]])
    with pytest.raises(rg.DTypeError, match="vector_norm"):
        norm(z, math.inf, 0)
