# ruff: noqa: N803  (L and F: torch or retrograd and its nn.functional, one case code for both)
"""Round 29 of the reliability sweep: the numerical robustness of the composite functions real
training leans on (``nn.functional``, ``nn`` layers, ``nn.utils`` clipping, optimizers) at
extreme inputs, values and gradients, with torch 2.13 as the reference.

Each case runs the same code through torch and retrograd (``lib`` is ``torch`` or ``rg``, ``F``
the matching ``nn.functional``); the sum of the outputs is differentiated in the float inputs
marked for it. The rule, for every value and gradient:

* where torch's is NaN or infinite, retrograd's is too, at the same entries (NaN for NaN; an
  infinity of the same sign);
* where torch's is finite, retrograd's is finite and close: ``rtol=1e-4, atol=1e-5`` in
  float32 (``atol=1e-3`` for a normalization of a constant input, where torch's float32
  rounding of the mean, times ``rsqrt(eps)``, leaves ~3e-5 that retrograd does not have);
  ``rtol=atol=3e-2`` in float16 and bfloat16;
* where torch raises, retrograd raises an error of API.md section 7 that names the op.

Covered: ``cross_entropy``/``nll_loss`` at logits of +-1e4 and -inf, label smoothing, class
weights, every target ignored (NaN for a mean), probability targets; ``log_softmax``,
``softmax``, ``softmin``, ``logsumexp`` over rows all -inf and partly -inf;
``binary_cross_entropy(_with_logits)`` at |x| = 100 and 1e4, probabilities exactly 0 and 1
(the logs clamped at -100), ``pos_weight``; ``softplus`` at its threshold; ``kl_div`` with
zero targets both ways; ``poisson_nll_loss`` both ways and ``full``; ``gaussian_nll_loss`` with
the variance at and under eps; ``huber``/``smooth_l1`` at beta/delta 0; ``cosine_similarity``,
``normalize``, ``pairwise_distance``, ``cdist`` and norms of zero vectors; ``layer_norm``,
``group_norm``, ``batch_norm``, ``instance_norm``, ``rms_norm`` of constant input (zero
variance) and their gradients; ``scaled_dot_product_attention`` and ``nn.MultiheadAttention``
with fully masked rows (bool and float masks; torch 2.13's CPU kernel gives zeros there, not
NaN), ``is_causal`` with L != S; activations at +-inf; the margin losses and ``ctc_loss`` at
the edges; ``gumbel_softmax(hard=True)`` gradients; ``clip_grad_norm_`` with inf/NaN gradients
(``error_if_nonfinite`` both ways, ``norm_type`` inf), ``clip_grad_value_``,
``get_total_norm``; Adam/AdamW/RMSprop/Adagrad and others stepping with zero, infinite, NaN
gradients and ``eps=0``; the losses in float16/bfloat16 (the torch backend; the NumPy backend
refuses half precision with a DTypeError that says to use the torch backend).

Where retrograd deliberately differs, the case is left out and the reason stated here:
* ``layer_norm`` of ``[1e20, -1e20, 0, 1]``: torch's float32 variance overflows to inf (output
  0); retrograd's is finite (the right answer).
* ``clip_grad_norm_`` of gradients of 1e30 on NumPy: retrograd sums the squares in float64
  (documented), finite where torch's float32 overflows.
* ``RMSprop(centered=True, eps=0)`` with gradients of 1e30: torch's fused multiply-add keeps
  ``inf - 1e56`` at inf where retrograd's separate ops give NaN.
* the gradient in the target of ``binary_cross_entropy`` at probabilities 0 and 1: torch's is
  infinite, retrograd's the clamped logs' (finite, by design; see ``binary_cross_entropy``).
* ``ctc_loss`` of an impossible alignment without ``zero_infinity``: torch's gradient is NaN,
  retrograd's 0 (Burn's contract, ``tests/test_burn_ports_2.py``); with a -inf blank column
  torch's kernel gives NaN gradients for a possible alignment, retrograd the finite ones.
* ``gelu(+inf)``: torch gives NaN, retrograd inf (the limit).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as TF  # noqa: N812 (torch's name)

import retrograd as rg
import retrograd.nn.functional as RF  # noqa: N812 (torch's name)
from backends import on_torch
from retrograd.errors import NonFiniteError

INF = math.inf
F32 = np.float32
TOL32 = (1e-4, 1e-5)
CONSTANT_NORM_TOL = (1e-4, 1e-3)
HALF_TOL = (3e-2, 3e-2)


# -- running one case through both libraries ------------------------------------------------------
def _to_numpy(t) -> np.ndarray | None:
    if t is None:
        return None
    if isinstance(t, torch.Tensor):
        t = t.detach()
        return (t.float() if t.dtype in (torch.float16, torch.bfloat16) else t).numpy()
    if t.dtype in ("float16", "bfloat16"):
        t = t.float()
    return np.asarray(t.numpy())


def _leaves(lib, arrays, grad_mask, dtype):
    tensors = []
    for array, wants_grad in zip(arrays, grad_mask, strict=True):
        if lib is torch:
            t = torch.tensor(array)
            if dtype and t.is_floating_point():
                t = t.to(getattr(torch, dtype))
            tensors.append(t.requires_grad_() if wants_grad else t)
        else:
            t = rg.tensor(array)
            if dtype and t.is_floating_point():
                t = t.to(getattr(rg, dtype))
            tensors.append(t.require_grad() if wants_grad else t)
    return tensors


def run_case(lib, fn, arrays, grad_mask, dtype=None):
    """The outputs of ``fn`` and the gradients of their summed float32 values."""
    functional = TF if lib is torch else RF
    leaves = _leaves(lib, arrays, grad_mask, dtype)
    out = fn(lib, functional, *leaves)
    outs = out if isinstance(out, tuple) else (out,)
    tracked = [o for o in outs if o.requires_grad]
    grads = [None] * len(leaves)
    if any(grad_mask) and tracked:
        total = tracked[0].float().sum()
        for o in tracked[1:]:
            total = total + o.float().sum()
        wanted = [t for t, g in zip(leaves, grad_mask, strict=True) if g]
        if lib is torch:
            found = iter(torch.autograd.grad(total, wanted, allow_unused=True))
        else:
            gradients = total.backward()
            found = iter([t.grad(gradients) for t in wanted])
        grads = [next(found) if g else None for g in grad_mask]
    return [_to_numpy(o) for o in outs], [_to_numpy(g) for g in grads]


def assert_like(got, expected, tol, what: str) -> None:
    """NaN and infinities at torch's entries; finite entries close."""
    if expected is None:  # no gradient in torch: none here, or zeros
        assert got is None or not np.any(got), f"{what}: {got} where torch has no gradient"
        return
    if got is None:  # no gradient here: torch's must be zeros
        assert not np.any(expected), f"{what}: no gradient, torch's is {expected}"
        return
    got = np.asarray(got, dtype=np.float64)
    expected = np.asarray(expected, dtype=np.float64)
    assert got.shape == expected.shape, f"{what}: shape {got.shape}, torch's {expected.shape}"
    nan = np.isnan(expected)
    np.testing.assert_array_equal(np.isnan(got), nan, err_msg=f"{what}: NaN pattern")
    inf = np.isinf(expected)
    np.testing.assert_array_equal(np.isinf(got), inf, err_msg=f"{what}: inf pattern")
    np.testing.assert_array_equal(got[inf], expected[inf], err_msg=f"{what}: inf signs")
    finite = ~(nan | inf)
    rtol, atol = tol
    np.testing.assert_allclose(got[finite], expected[finite], rtol=rtol, atol=atol, err_msg=what)


def check_case(fn, arrays, grad_mask=None, dtype=None, tol=TOL32, refused_by=None) -> None:
    """torch's values and gradients, or, where torch refuses (``refused_by``: the op), an
    error of the hierarchy that names the op."""
    if grad_mask is None:
        grad_mask = [np.asarray(a).dtype.kind == "f" for a in arrays]
    if refused_by is not None:
        with pytest.raises((RuntimeError, ValueError)):
            run_case(torch, fn, arrays, grad_mask, dtype)
        with pytest.raises(rg.RetrogradError, match=refused_by):
            run_case(rg, fn, arrays, grad_mask, dtype)
        return
    expected = run_case(torch, fn, arrays, grad_mask, dtype)
    got = run_case(rg, fn, arrays, grad_mask, dtype)
    for k, (g, e) in enumerate(zip(got[0], expected[0], strict=True)):
        assert_like(g, e, tol, f"output {k}")
    for k, (g, e) in enumerate(zip(got[1], expected[1], strict=True)):
        if grad_mask[k]:
            assert_like(g, e, tol, f"gradient of input {k}")


# -- the cases ------------------------------------------------------------------------------------
CASES: dict[str, tuple] = {}


def case(name: str, fn, arrays, grad_mask=None, tol=TOL32, refused_by=None) -> None:
    assert name not in CASES, name
    CASES[name] = (fn, arrays, grad_mask, tol, refused_by)


HUGE = np.array([[1e4, -1e4, 0.0], [-1e4, 1e4, 1e4], [1e4, 1e4, 1e4]], F32)
NEG_INF = np.array([[0.0, -INF, 1.0], [-INF, -INF, 2.0], [3.0, 0.0, -INF]], F32)
CLASS_WEIGHTS = np.array([0.5, 2.0, 1.0], F32)
PROBS = np.array([[1.0, 0.0, 0.0], [0.0, 0.0, 1.0], [0.5, 0.5, 0.0]], F32)
GAUSS = np.random.default_rng(0).standard_normal((3, 4)).astype(F32)
X_W = [True, False, False]  # the logits differentiated, not the targets or weights

for label, logits, targets in (
    ("huge", HUGE, np.array([0, 1, 2])),
    ("neg_inf", NEG_INF, np.array([0, 2, 0])),
    ("neg_inf_at_target", NEG_INF, np.array([1, 0, 2])),
):
    for red in ("mean", "none"):
        case(
            f"cross_entropy_{label}_{red}",
            lambda L, F, x, t, red=red: F.cross_entropy(x, t, reduction=red),
            [logits, targets],
        )
        case(
            f"cross_entropy_{label}_smoothing_{red}",
            lambda L, F, x, t, red=red: F.cross_entropy(x, t, reduction=red, label_smoothing=0.1),
            [logits, targets],
        )
        case(
            f"cross_entropy_{label}_weights_smoothing_{red}",
            lambda L, F, x, t, w, red=red: F.cross_entropy(
                x, t, weight=w, reduction=red, label_smoothing=0.2
            ),
            [logits, targets, CLASS_WEIGHTS],
            X_W,
        )
    case(
        f"cross_entropy_{label}_probabilities",
        lambda L, F, x, p: F.cross_entropy(x, p),
        [logits, PROBS],
        [True, True],
    )
    case(
        f"cross_entropy_{label}_probabilities_weights_smoothing",
        lambda L, F, x, p, w: F.cross_entropy(x, p, weight=w, label_smoothing=0.1),
        [logits, PROBS, CLASS_WEIGHTS],
        X_W,
    )
for red in ("mean", "sum", "none"):
    case(
        f"cross_entropy_all_ignored_{red}",
        lambda L, F, x, t, red=red: F.cross_entropy(x, t, reduction=red),
        [GAUSS, np.array([-100, -100, -100])],
    )
    case(
        f"cross_entropy_all_ignored_smoothing_{red}",
        lambda L, F, x, t, red=red: F.cross_entropy(x, t, reduction=red, label_smoothing=0.1),
        [GAUSS, np.array([-100, -100, -100])],
    )
    case(
        f"cross_entropy_all_ignored_weights_{red}",
        lambda L, F, x, t, w, red=red: F.cross_entropy(
            x, t, ignore_index=2, weight=w, reduction=red
        ),
        [GAUSS, np.array([2, 2, 2]), np.array([1.0, 2.0, 3.0, 4.0], F32)],
        X_W,
    )
    case(
        f"nll_loss_all_ignored_{red}",
        lambda L, F, x, t, red=red: F.nll_loss(x, t, ignore_index=1, reduction=red),
        [GAUSS, np.array([1, 1, 1])],
    )
case(
    "cross_entropy_zero_total_weight",
    lambda L, F, x, t, w: F.cross_entropy(x, t, weight=w),
    [GAUSS, np.array([0, 0, 0]), np.array([0.0, 1.0, 1.0, 1.0], F32)],
    X_W,
)
case(
    "nll_loss_neg_inf_log_probability",
    lambda L, F, x, t: F.nll_loss(x, t),
    [np.array([[-INF, 0.0], [0.0, -INF]], F32), np.array([0, 0])],
)
case(
    "cross_entropy_4d_huge",
    lambda L, F, x, t: F.cross_entropy(x, t, label_smoothing=0.05),
    [
        np.full((1, 3, 2, 2), 1e4, F32) * np.array([1, -1, 0], F32)[None, :, None, None],
        np.array([[[0, 1], [2, 0]]]),
    ],
)

ROWS = np.array([[-INF, -INF, -INF], [-INF, 0.0, 1.0], [1e4, -1e4, 0.0], [INF, 0.0, 0.0]], F32)
for dim in (0, 1):
    case(f"log_softmax_dim{dim}", lambda L, F, x, d=dim: F.log_softmax(x, dim=d), [ROWS])
    case(f"softmax_dim{dim}", lambda L, F, x, d=dim: F.softmax(x, dim=d), [ROWS])
    case(f"softmin_dim{dim}", lambda L, F, x, d=dim: F.softmin(x, dim=d), [ROWS])
    case(f"logsumexp_dim{dim}", lambda L, F, x, d=dim: L.logsumexp(x, dim=d), [ROWS])
case("log_softmax_float64", lambda L, F, x: F.log_softmax(x, -1, dtype=L.float64), [ROWS])
case(
    "logsumexp_keepdim_inf_rows",
    lambda L, F, x: L.logsumexp(x, 1, keepdim=True),
    [np.array([[INF, INF], [INF, -INF], [-INF, -INF]], F32)],
)

LOGITS = np.array([100.0, -100.0, 0.0, 50.0, -50.0, 1e4, -1e4], F32)
LABELS = np.array([1.0, 0.0, 1.0, 0.0, 1.0, 0.5, 1.0], F32)
EDGE_P = np.array([0.0, 1.0, 0.0, 1.0, 0.5, 1e-30], F32)
EDGE_Y = np.array([0.0, 1.0, 1.0, 0.0, 1.0, 1.0], F32)
for red in ("mean", "sum", "none"):
    case(
        f"bce_with_logits_{red}",
        lambda L, F, x, y, red=red: F.binary_cross_entropy_with_logits(x, y, reduction=red),
        [LOGITS, LABELS],
        [True, True],
    )
    case(
        f"bce_with_logits_pos_weight_{red}",
        lambda L, F, x, y, p, red=red: F.binary_cross_entropy_with_logits(
            x, y, pos_weight=p, reduction=red
        ),
        [LOGITS, LABELS, np.full(7, 3.0, F32)],
        [True, True, False],
    )
    case(
        f"bce_with_logits_weight_zero_pos_weight_{red}",
        lambda L, F, x, y, w, p, red=red: F.binary_cross_entropy_with_logits(
            x, y, weight=w, pos_weight=p, reduction=red
        ),
        [LOGITS, LABELS, np.arange(7, dtype=F32), np.zeros(7, F32)],
        [True, True, False, False],
    )
    case(
        f"bce_probabilities_0_and_1_{red}",
        lambda L, F, x, y, red=red: F.binary_cross_entropy(x, y, reduction=red),
        [EDGE_P, EDGE_Y],
        [True, False],
    )
    case(
        f"bce_probabilities_0_and_1_weight_{red}",
        lambda L, F, x, y, w, red=red: F.binary_cross_entropy(x, y, weight=w, reduction=red),
        [EDGE_P, EDGE_Y, np.arange(6, dtype=F32)],
        [True, False, False],
    )
case(
    "bce_with_logits_infinite_logits",
    lambda L, F, x, y: F.binary_cross_entropy_with_logits(x, y, reduction="none"),
    [np.array([INF, -INF, INF, -INF], F32), np.array([1.0, 0.0, 0.0, 1.0], F32)],
    [True, True],
)
case(
    "BCEWithLogitsLoss_broadcast_pos_weight",
    lambda L, F, x, y, p: L.nn.BCEWithLogitsLoss(pos_weight=p)(x, y),
    [
        np.array([[100.0, -100.0], [0.0, 3.0]], F32),
        np.array([[1.0, 0.0], [1.0, 1.0]], F32),
        np.array([2.0, 0.5], F32),
    ],
    [True, True, False],
)

SOFTPLUS_X = np.array([19.9, 20.0, 20.1, -20.0, 10.0, 10.000001, 5.0, 0.0, -100.0, 100.0], F32)
for beta, threshold in ((1, 20), (2, 10), (0.5, 20), (1, 0), (-1, 20)):
    case(
        f"softplus_beta{beta}_threshold{threshold}",
        lambda L, F, x, b=beta, t=threshold: F.softplus(x, beta=b, threshold=t),
        [SOFTPLUS_X],
    )

LOG_Q = np.log(np.array([[0.2, 0.3, 0.5], [0.1, 0.1, 0.8]], F32))
ZERO_P = np.array([[0.0, 0.5, 0.5], [1.0, 0.0, 0.0]], F32)
with np.errstate(divide="ignore"):
    LOG_ZERO_P = np.log(ZERO_P)
for red in ("batchmean", "sum", "none"):
    case(
        f"kl_div_zero_targets_{red}",
        lambda L, F, x, y, red=red: F.kl_div(x, y, reduction=red),
        [LOG_Q, ZERO_P],
        [True, True],
    )
    case(
        f"kl_div_log_targets_neg_inf_{red}",
        lambda L, F, x, y, red=red: F.kl_div(x, y, reduction=red, log_target=True),
        [LOG_Q, LOG_ZERO_P],
        [True, True],
    )
    case(
        f"kl_div_neg_inf_input_{red}",
        lambda L, F, x, y, red=red: F.kl_div(x, y, reduction=red),
        [np.array([[-INF, 0.0]], F32), np.array([[0.0, 1.0]], F32)],
        [True, True],
    )

RATES = np.array([0.0, 1.0, 2.0, -100.0, 100.0, 1e-9], F32)
COUNTS = np.array([0.0, 0.0, 3.0, 1.0, 2.0, 1.0], F32)
for log_input in (True, False):
    for full in (False, True):
        case(
            f"poisson_nll_log_input{log_input}_full{full}",
            lambda L, F, x, y, li=log_input, fu=full: F.poisson_nll_loss(
                x, y, log_input=li, full=fu, reduction="none"
            ),
            [RATES if log_input else np.abs(RATES), COUNTS],
            [True, True],
        )
case(
    "poisson_nll_eps0",
    lambda L, F, x, y: F.poisson_nll_loss(x, y, log_input=False, eps=0.0, reduction="none"),
    [np.array([0.0, 1.0], F32), np.array([1.0, 0.0], F32)],
    [True, True],
)

MEANS = np.array([[0.0, 1.0], [2.0, 3.0]], F32)
OBSERVED = np.array([[0.5, 1.0], [2.0, -3.0]], F32)
for label, var in (
    ("at_and_under_eps", np.array([[0.0, 1e-6], [1e-7, 1.0]], F32)),
    ("all_eps", np.full((2, 2), 1e-6, F32)),
    ("per_row", np.array([[0.0], [0.5]], F32)),
):
    for full in (False, True):
        for red in ("mean", "none"):
            case(
                f"gaussian_nll_{label}_full{full}_{red}",
                lambda L, F, x, y, v, fu=full, red=red: F.gaussian_nll_loss(
                    x, y, v, full=fu, reduction=red
                ),
                [MEANS, OBSERVED, var],
                [True, True, True],
            )
case(
    "gaussian_nll_negative_var",
    lambda L, F, x, y, v: F.gaussian_nll_loss(x, y, v),
    [MEANS, OBSERVED, -np.ones((2, 2), F32)],
    [True, True, True],
    refused_by="gaussian_nll_loss",
)

RESIDUAL_X = np.array([0.0, 1.0, -1.0, 0.5, 2.0], F32)
RESIDUAL_Y = np.array([0.0, 1.0, 0.0, 0.0, 0.0], F32)
for red in ("mean", "none"):
    for name, fn, refused_by in (
        (
            "smooth_l1_beta0",
            lambda L, F, x, y, r: F.smooth_l1_loss(x, y, beta=0.0, reduction=r),
            None,
        ),
        (
            "huber_delta0",
            lambda L, F, x, y, r: F.huber_loss(x, y, delta=0.0, reduction=r),
            "huber_loss",
        ),
        (
            "huber_delta_half",
            lambda L, F, x, y, r: F.huber_loss(x, y, delta=0.5, reduction=r),
            None,
        ),
        ("l1_zero_residual", lambda L, F, x, y, r: F.l1_loss(x, y, reduction=r), None),
    ):
        case(
            f"{name}_{red}",
            lambda L, F, x, y, fn=fn, red=red: fn(L, F, x, y, red),
            [RESIDUAL_X, RESIDUAL_Y],
            [True, True],
            refused_by=refused_by,
        )
    for name, fn in (
        ("smooth_l1", lambda L, F, x, y, r: F.smooth_l1_loss(x, y, reduction=r)),
        ("mse", lambda L, F, x, y, r: F.mse_loss(x, y, reduction=r)),
    ):
        case(
            f"{name}_infinite_{red}",
            lambda L, F, x, y, fn=fn, red=red: fn(L, F, x, y, red),
            [np.array([INF, -INF, 1e30], F32), np.zeros(3, F32)],
            [True, True],
        )

ZEROS_ROWS = np.array([[0.0, 0.0, 0.0], [1.0, 2.0, 3.0], [1e-9, 0.0, 0.0]], F32)
OTHER_ROWS = np.array([[0.0, 0.0, 0.0], [0.0, 0.0, 0.0], [1.0, 1.0, 1.0]], F32)
TWO = [True, True]
case(
    "cosine_similarity_zero_vectors",
    lambda L, F, a, b: F.cosine_similarity(a, b, dim=1),
    [ZEROS_ROWS, OTHER_ROWS],
    TWO,
)
case(
    "cosine_similarity_same_zero_vectors",
    lambda L, F, a, b: F.cosine_similarity(a, b, dim=1),
    [ZEROS_ROWS, ZEROS_ROWS.copy()],
    TWO,
)
case(
    "cosine_similarity_huge",
    lambda L, F, a, b: F.cosine_similarity(a, b),
    [np.full((2, 3), 1e25, F32), np.full((2, 3), 1e25, F32)],
    TWO,
)
case(
    "cosine_similarity_broadcast",
    lambda L, F, a, b: F.cosine_similarity(a, b, dim=-1),
    [ZEROS_ROWS[:, None, :], OTHER_ROWS[None, :, :]],
    TWO,
)
case(
    "CosineSimilarity_dim0",
    lambda L, F, a, b: L.nn.CosineSimilarity(dim=0)(a, b),
    [ZEROS_ROWS, OTHER_ROWS],
    TWO,
)
case(
    "cosine_embedding_loss_zero_vectors",
    lambda L, F, a, b, y: F.cosine_embedding_loss(a, b, y),
    [ZEROS_ROWS, OTHER_ROWS, np.array([1.0, -1.0, 1.0], F32)],
    [True, True, False],
)
for p in (2, 1, INF, 0.5):
    case(f"normalize_zero_p{p}", lambda L, F, a, p=p: F.normalize(a, p=p, dim=1), [ZEROS_ROWS])
    case(
        f"pairwise_distance_zero_p{p}",
        lambda L, F, a, b, p=p: F.pairwise_distance(a, b, p=p),
        [ZEROS_ROWS, ZEROS_ROWS.copy()],
        TWO,
    )
    case(
        f"pairwise_distance_zero_eps0_p{p}",
        lambda L, F, a, b, p=p: F.pairwise_distance(a, b, p=p, eps=0.0),
        [ZEROS_ROWS, ZEROS_ROWS.copy()],
        TWO,
    )
    case(
        f"cdist_zero_p{p}",
        lambda L, F, a, b, p=p: L.cdist(a, b, p=p),
        [ZEROS_ROWS, ZEROS_ROWS.copy()],
        TWO,
    )
case("normalize_zero_dim0", lambda L, F, a: F.normalize(a, dim=0), [OTHER_ROWS])
case(
    "triplet_margin_zero",
    lambda L, F, a, b, c: F.triplet_margin_loss(a, b, c),
    [ZEROS_ROWS, ZEROS_ROWS.copy(), ZEROS_ROWS.copy()],
    [True, True, True],
)
case("norm_zero_rows", lambda L, F, a: a.norm(dim=1), [ZEROS_ROWS])
case("vector_norm_zero_rows", lambda L, F, a: L.linalg.vector_norm(a, dim=1), [ZEROS_ROWS])
case(
    "pdist_duplicate_rows",
    lambda L, F, x: F.pdist(x),
    [np.array([[1.0, 2.0], [1.0, 2.0], [0.0, 0.0]], F32)],
)

CONST3 = np.full((2, 3, 4), 5.0, F32)
CONST4 = np.full((2, 4, 3, 3), -2.0, F32)
W4 = np.array([1.0, 2.0, 3.0, 4.0], F32)
B4 = np.array([0.1, 0.2, 0.3, 0.4], F32)
ALL3 = [True, True, True]
CT = CONSTANT_NORM_TOL
case("layer_norm_constant", lambda L, F, x: F.layer_norm(x, (4,)), [CONST3], tol=CT)
case(
    "layer_norm_constant_affine",
    lambda L, F, x, w, b: F.layer_norm(x, (4,), w, b),
    [CONST3, W4, B4],
    ALL3,
    tol=CT,
)
case("layer_norm_constant_eps0", lambda L, F, x: F.layer_norm(x, (4,), eps=0.0), [CONST3])
case("layer_norm_constant_2d", lambda L, F, x: F.layer_norm(x, (3, 4)), [CONST3], tol=CT)
case("rms_norm_zeros", lambda L, F, x: F.rms_norm(x, (4,)), [np.zeros((2, 4), F32)])
case("rms_norm_zeros_eps", lambda L, F, x: F.rms_norm(x, (4,), eps=1e-6), [np.zeros((2, 4), F32)])
case("group_norm_constant", lambda L, F, x: F.group_norm(x, 2), [CONST4], tol=CT)
case(
    "group_norm_constant_affine",
    lambda L, F, x, w, b: F.group_norm(x, 2, w, b),
    [CONST4, W4, B4],
    ALL3,
    tol=CT,
)
case("group_norm_constant_eps0", lambda L, F, x: F.group_norm(x, 4, eps=0.0), [CONST4])
case("instance_norm_constant", lambda L, F, x: F.instance_norm(x), [CONST4], tol=CT)
case(
    "instance_norm_constant_affine",
    lambda L, F, x, w, b: F.instance_norm(x, weight=w, bias=b),
    [CONST4, W4, B4],
    ALL3,
    tol=CT,
)
case(
    "batch_norm_constant",
    lambda L, F, x: F.batch_norm(x, None, None, training=True),
    [CONST4],
    tol=CT,
)
case(
    "batch_norm_constant_affine",
    lambda L, F, x, w, b: F.batch_norm(x, None, None, w, b, training=True),
    [CONST4, W4, B4],
    ALL3,
    tol=CT,
)
case(
    "batch_norm_constant_running_stats",
    lambda L, F, x, m, v: (F.batch_norm(x, m, v, training=True), m, v),
    [CONST4, np.zeros(4, F32), np.ones(4, F32)],
    [True, False, False],
    tol=CT,
)
case(
    "batch_norm_eval_zero_running_var",
    lambda L, F, x, m, v: F.batch_norm(x, m, v, training=False),
    [CONST4, np.full(4, -2.0, F32), np.zeros(4, F32)],
    [True, False, False],
)
case(
    "batch_norm_eval_zero_running_var_eps0",
    lambda L, F, x, m, v: F.batch_norm(x, m, v, training=False, eps=0.0),
    [CONST4, np.full(4, -2.0, F32), np.zeros(4, F32)],
    [True, False, False],
)
case(
    "batch_norm_one_value_per_channel",
    lambda L, F, x: F.batch_norm(x, None, None, training=True),
    [np.ones((1, 4, 1, 1), F32)],
    refused_by="batch_norm",
)
case(
    "batch_norm_1d_constant",
    lambda L, F, x: F.batch_norm(x, None, None, training=True),
    [np.full((3, 4), 0.5, F32)],
    tol=CT,
)


def _batch_norm_module(L, F, x):
    module = L.nn.BatchNorm2d(4)
    return module(x), module.running_mean, module.running_var


def _instance_norm_module(L, F, x):
    module = L.nn.InstanceNorm2d(4, affine=True, track_running_stats=True)
    return module(x), module.running_mean, module.running_var


case("BatchNorm2d_constant", _batch_norm_module, [CONST4], tol=CT)
case("InstanceNorm2d_constant", _instance_norm_module, [CONST4], tol=CT)
case("LayerNorm_constant", lambda L, F, x: L.nn.LayerNorm(4)(x), [CONST3], tol=CT)
case("GroupNorm_constant", lambda L, F, x: L.nn.GroupNorm(2, 4)(x), [CONST4], tol=CT)
case("RMSNorm_zeros", lambda L, F, x: L.nn.RMSNorm(4)(x), [np.zeros((2, 4), F32)])

_gen = np.random.default_rng(0)
Q = _gen.standard_normal((1, 2, 3, 4)).astype(F32)
K = _gen.standard_normal((1, 2, 5, 4)).astype(F32)
V = _gen.standard_normal((1, 2, 5, 4)).astype(F32)
BOOL_MASK = np.ones((3, 5), bool)
BOOL_MASK[1] = False
FLOAT_MASK = np.where(BOOL_MASK, 0.0, -INF).astype(F32)
QKV_MASK = [True, True, True, False]


def _sdpa(**kwargs):
    return lambda L, F, q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m, **kwargs)


case("sdpa_bool_mask_row_masked", _sdpa(), [Q, K, V, BOOL_MASK], QKV_MASK)
case("sdpa_float_mask_row_neg_inf", _sdpa(), [Q, K, V, FLOAT_MASK], QKV_MASK)
case("sdpa_bool_mask_all_masked", _sdpa(), [Q, K, V, np.zeros((3, 5), bool)], QKV_MASK)
case("sdpa_float_mask_all_neg_inf", _sdpa(), [Q, K, V, np.full((3, 5), -INF, F32)], QKV_MASK)
case("sdpa_bool_mask_4d", _sdpa(), [Q, K, V, BOOL_MASK[None, None]], QKV_MASK)
case(
    "sdpa_float_mask_partly_neg_inf",
    _sdpa(),
    [Q, K, V, np.where(np.arange(5) < 2, -INF, 0.0).astype(F32)[None].repeat(3, 0)],
    QKV_MASK,
)
for label, (q, k, v) in (("L_lt_S", (Q, K, V)), ("L_gt_S", (K, Q, Q)), ("L_eq_S", (Q, Q, Q))):
    case(
        f"sdpa_causal_{label}",
        lambda L, F, q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
        [q, k, v],
    )
case(
    "sdpa_scale_zero",
    lambda L, F, q, k, v: F.scaled_dot_product_attention(q, k, v, scale=0.0),
    [Q, K, V],
)
# one-hot probabilities: the key's gradient is rounding times |q| ~ 1e4 in both
case(
    "sdpa_saturated_scores",
    lambda L, F, q, k, v: F.scaled_dot_product_attention(q, k, v),
    [Q * 1e4, K, V],
    tol=(1e-4, 5e-3),
)


def _attention_module(key_padding_mask=None, attn_mask=None, need_weights=True, average=True):
    def run(L, F, x, mask):
        module = L.nn.MultiheadAttention(4, 2, batch_first=True)
        with L.no_grad():
            for i, p in enumerate(module.parameters()):
                values = np.random.default_rng(i).standard_normal(tuple(p.shape)) * 0.3
                p.copy_(L.tensor(values.astype(F32)))
        masks = {"key_padding_mask": mask} if key_padding_mask else {"attn_mask": mask}
        out, weights = module(
            x, x, x, need_weights=need_weights, average_attn_weights=average, **masks
        )
        return (out, weights) if weights is not None else out

    return run


X3 = _gen.standard_normal((2, 3, 4)).astype(F32)
PADDING = np.array([[True, True, True], [False, True, False]])
CAUSAL_ROWS = np.array([[True, True, True], [False, True, True], [False, False, True]])
X_ONLY = [True, False]
case("mha_key_padding_all_masked", _attention_module(True), [X3, PADDING], X_ONLY)
case(
    "mha_key_padding_all_masked_no_weights",
    _attention_module(True, need_weights=False),
    [X3, PADDING],
    X_ONLY,
)
case(
    "mha_float_key_padding_all_neg_inf",
    _attention_module(True),
    [X3, np.where(PADDING, -INF, 0.0).astype(F32)],
    X_ONLY,
)
case("mha_attn_mask_row_masked", _attention_module(attn_mask=True), [X3, CAUSAL_ROWS], X_ONLY)
case(
    "mha_attn_mask_row_masked_no_weights",
    _attention_module(attn_mask=True, need_weights=False),
    [X3, CAUSAL_ROWS],
    X_ONLY,
)
case(
    "mha_attn_mask_row_masked_per_head",
    _attention_module(attn_mask=True, average=False),
    [X3, CAUSAL_ROWS],
    X_ONLY,
)

EXTREMES = np.array(
    [-INF, -1e4, -100.0, -88.8, -20.0, -1e-8, 0.0, 1e-8, 20.0, 88.8, 100.0, 1e4, INF], F32
)
for name, fn in {
    "silu": lambda L, F, x: F.silu(x),
    "gelu_tanh": lambda L, F, x: F.gelu(x, approximate="tanh"),
    "mish": lambda L, F, x: F.mish(x),
    "elu": lambda L, F, x: F.elu(x),
    "selu": lambda L, F, x: F.selu(x),
    "celu": lambda L, F, x: F.celu(x, alpha=0.5),
    "logsigmoid": lambda L, F, x: F.logsigmoid(x),
    "softsign": lambda L, F, x: F.softsign(x),
    "tanhshrink": lambda L, F, x: F.tanhshrink(x),
    "hardswish": lambda L, F, x: F.hardswish(x),
    "softplus_small_beta": lambda L, F, x: F.softplus(x, beta=0.01, threshold=1),
    "glu": lambda L, F, x: F.glu(L.stack([x, x.flip(0)]), dim=0),
    "logit_of_sigmoid": lambda L, F, x: L.logit(L.sigmoid(x), eps=1e-6),
}.items():
    case(f"activation_{name}_extremes", fn, [EXTREMES])
case("activation_gelu_finite_extremes", lambda L, F, x: F.gelu(x), [EXTREMES[:-1]])

MARGIN_X = EXTREMES[1:-1]
MARGIN_Y = np.where(np.arange(11) % 2 == 0, 1.0, -1.0).astype(F32)
for red in ("mean", "none"):
    case(
        f"soft_margin_extremes_{red}",
        lambda L, F, x, y, red=red: F.soft_margin_loss(x, y, reduction=red),
        [MARGIN_X, MARGIN_Y],
        X_ONLY,
    )
    case(
        f"multilabel_soft_margin_extremes_{red}",
        lambda L, F, x, y, red=red: F.multilabel_soft_margin_loss(x, y, reduction=red),
        [MARGIN_X[None], (MARGIN_Y[None] > 0).astype(F32)],
        TWO,
    )
    case(
        f"multi_margin_huge_{red}",
        lambda L, F, x, t, red=red: F.multi_margin_loss(x, t, reduction=red),
        [np.array([[1e4, -1e4, 0.0], [0.0, 0.0, 0.0]], F32), np.array([1, 0])],
    )
    case(
        f"hinge_embedding_extremes_{red}",
        lambda L, F, x, y, red=red: F.hinge_embedding_loss(x, y, reduction=red),
        [MARGIN_X, MARGIN_Y],
        TWO,
    )
    case(
        f"margin_ranking_extremes_{red}",
        lambda L, F, a, b, y, red=red: F.margin_ranking_loss(a, b, y, reduction=red),
        [MARGIN_X, MARGIN_X[::-1].copy(), MARGIN_Y],
        [True, True, False],
    )

CTC_LOGITS = np.random.default_rng(1).standard_normal((3, 1, 4)).astype(F32)
CTC_MASK = [True, False, False, False]
for zero_infinity in (False, True):
    for red in ("mean", "sum", "none"):

        def ctc(L, F, x, t, il, tl, zi=zero_infinity, red=red):
            return F.ctc_loss(F.log_softmax(x, -1), t, il, tl, reduction=red, zero_infinity=zi)

        case(
            f"ctc_possible_zi{zero_infinity}_{red}",
            ctc,
            [CTC_LOGITS, np.array([[1, 2]]), np.array([3]), np.array([2])],
            CTC_MASK,
        )
        case(
            f"ctc_empty_target_zi{zero_infinity}_{red}",
            ctc,
            [CTC_LOGITS, np.array([[1, 2]]), np.array([3]), np.array([0])],
            CTC_MASK,
        )
        case(
            f"ctc_huge_logits_zi{zero_infinity}_{red}",
            ctc,
            [CTC_LOGITS * 1e4, np.array([[1, 2]]), np.array([3]), np.array([2])],
            CTC_MASK,
        )
        # an impossible alignment: inf (0 with zero_infinity); the gradient is compared
        # with zero_infinity only (see the module's docstring)
        case(
            f"ctc_impossible_zi{zero_infinity}_{red}",
            ctc,
            [CTC_LOGITS, np.array([[1, 1, 1]]), np.array([3]), np.array([3])],
            CTC_MASK if zero_infinity else [False] * 4,
        )


@pytest.mark.parametrize("name", sorted(CASES))
def test_extreme_inputs_give_torch_s_values_and_gradients(name):
    fn, arrays, grad_mask, tol, refused_by = CASES[name]
    check_case(fn, arrays, grad_mask, tol=tol, refused_by=refused_by)


# -- float16 and bfloat16 -----------------------------------------------------------------------
HALF_CASES: dict[str, tuple] = {}
HALF_LOGITS = np.array([[1e4, -1e4, 0.0], [-1e4, 1e4, 1e4], [60000.0, 0.0, -60000.0]], F32)
for red in ("mean", "sum", "none"):
    HALF_CASES[f"cross_entropy_huge_{red}"] = (
        lambda L, F, x, t, red=red: F.cross_entropy(x, t, reduction=red),
        [HALF_LOGITS, np.array([0, 1, 2])],
        [True, False],
    )
    HALF_CASES[f"cross_entropy_neg_inf_smoothing_{red}"] = (
        lambda L, F, x, t, red=red: F.cross_entropy(x, t, reduction=red, label_smoothing=0.1),
        [NEG_INF, np.array([0, 2, 0])],
        [True, False],
    )
    HALF_CASES[f"cross_entropy_probabilities_{red}"] = (
        lambda L, F, x, p, red=red: F.cross_entropy(x, p, reduction=red),
        [HALF_LOGITS, np.array([[1, 0, 0], [0, 0.5, 0.5], [0.2, 0.3, 0.5]], F32)],
        [True, True],
    )
    HALF_CASES[f"nll_loss_all_ignored_{red}"] = (
        lambda L, F, x, t, red=red: F.nll_loss(x, t, reduction=red),
        [HALF_LOGITS, np.array([-100, -100, -100])],
        [True, False],
    )
    HALF_CASES[f"bce_with_logits_{red}"] = (
        lambda L, F, x, y, red=red: F.binary_cross_entropy_with_logits(x, y, reduction=red),
        [np.array([100.0, -100.0, 0.0, 60000.0], F32), np.array([1.0, 1.0, 0.5, 0.0], F32)],
        [True, True],
    )
    HALF_CASES[f"bce_with_logits_pos_weight_{red}"] = (
        lambda L, F, x, y, p, red=red: F.binary_cross_entropy_with_logits(
            x, y, pos_weight=p, reduction=red
        ),
        [
            np.array([100.0, -100.0, 0.0, 20.0], F32),
            np.array([1.0, 1.0, 0.5, 0.0], F32),
            np.full(4, 3.0, F32),
        ],
        [True, True, False],
    )
    # probabilities at 0 and 1: values (torch's float16 gradient there is 0/0, its eps
    # rounded to 0; retrograd's is float32's, saturated); gradients off the edges
    HALF_CASES[f"bce_probabilities_0_and_1_{red}"] = (
        lambda L, F, x, y, red=red: F.binary_cross_entropy(x, y, reduction=red),
        [np.array([0.0, 1.0, 0.0, 1.0, 0.5], F32), np.array([0.0, 1.0, 1.0, 0.0, 1.0], F32)],
        [False, False],
    )
    HALF_CASES[f"bce_probabilities_near_edges_{red}"] = (
        lambda L, F, x, y, red=red: F.binary_cross_entropy(x, y, reduction=red),
        [np.array([1e-3, 0.999, 0.5, 1e-7], F32), np.array([1.0, 0.0, 1.0, 0.0], F32)],
        [True, False],
    )
    HALF_CASES[f"kl_div_zero_targets_{red}"] = (
        lambda L, F, x, y, red=red: F.kl_div(x, y, reduction=red),
        [LOG_Q, ZERO_P],
        [True, True],
    )
    HALF_CASES[f"mse_large_{red}"] = (
        lambda L, F, x, y, red=red: F.mse_loss(x, y, reduction=red),
        [np.array([300.0, -300.0, 1.0], F32), np.zeros(3, F32)],
        [True, True],
    )
    HALF_CASES[f"smooth_l1_beta0_{red}"] = (
        lambda L, F, x, y, red=red: F.smooth_l1_loss(x, y, reduction=red, beta=0.0),
        [np.array([300.0, -300.0, 0.0], F32), np.zeros(3, F32)],
        [True, True],
    )
    HALF_CASES[f"huber_{red}"] = (
        lambda L, F, x, y, red=red: F.huber_loss(x, y, reduction=red),
        [np.array([300.0, -300.0, 0.5], F32), np.zeros(3, F32)],
        [True, True],
    )
    HALF_CASES[f"poisson_nll_full_{red}"] = (
        lambda L, F, x, y, red=red: F.poisson_nll_loss(x, y, reduction=red, full=True),
        [np.array([0.0, 10.0, -10.0], F32), np.array([0.0, 3.0, 2.0], F32)],
        [True, True],
    )
    HALF_CASES[f"gaussian_nll_var_at_eps_{red}"] = (
        lambda L, F, x, y, v, red=red: F.gaussian_nll_loss(x, y, v, reduction=red),
        [
            np.array([0.0, 1.0, 2.0], F32),
            np.array([0.0, 3.0, 2.0], F32),
            np.array([0.0, 1e-6, 1.0], F32),
        ],
        [True, True, True],
    )
HALF_ROWS = np.concatenate([HALF_LOGITS[[0, 2]], NEG_INF])
HALF_CASES["log_softmax"] = (lambda L, F, x: F.log_softmax(x, -1), [HALF_ROWS], [True])
HALF_CASES["softmax"] = (lambda L, F, x: F.softmax(x, -1), [HALF_ROWS], [True])
HALF_CASES["softplus_threshold"] = (lambda L, F, x: F.softplus(x), [SOFTPLUS_X], [True])
HALF_CASES["layer_norm_constant"] = (
    lambda L, F, x: F.layer_norm(x, (4,)),
    [np.full((2, 4), 3.0, F32)],
    [True],
)
HALF_CASES["rms_norm_small"] = (
    lambda L, F, x: F.rms_norm(x, (4,)),
    [np.array([[1e-3, -2e-3, 1e-3, 5e-4], [1e-4, 1e-4, 1e-4, 1e-4]], F32)],
    [True],
)
HALF_CASES["normalize_small"] = (
    lambda L, F, x: F.normalize(x),
    [np.array([[1e-4, 1e-4, -1e-4], [3.0, 4.0, 0.0]], F32)],
    [True],
)
HALF_CASES["pairwise_distance_small"] = (
    lambda L, F, a, b: F.pairwise_distance(a, b),
    [np.array([[1e-4, 1e-4, -1e-4], [3.0, 4.0, 0.0]], F32), np.zeros((2, 3), F32)],
    [True, True],
)
HALF_CASES["ce_mean_many_rows"] = (
    lambda L, F, x, t: F.cross_entropy(x, t),
    [np.tile(np.array([[10.0, 0.0, -10.0]], F32), (64, 1)), np.full(64, 2)],
    [True, False],
)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("name", sorted(HALF_CASES))
def test_half_precision_losses_at_extremes_give_torch_s(name, dtype):
    fn, arrays, grad_mask = HALF_CASES[name]
    if not on_torch():  # the NumPy backend has no half precision and says so
        with pytest.raises(rg.DTypeError, match="TorchBackend"):
            run_case(rg, fn, arrays, grad_mask, dtype)
        return
    check_case(fn, arrays, grad_mask, dtype=dtype, tol=HALF_TOL)


# -- gumbel_softmax(hard=True) --------------------------------------------------------------------
@pytest.mark.parametrize("tau", [1.0, 0.1, 1e-3])
def test_hard_gumbel_softmax_is_one_hot_with_the_soft_sample_s_gradient(tau):
    logits = np.array([[1.0, 2.0, 3.0], [0.0, 0.0, 0.0], [1e4, -1e4, 0.0]], F32)
    weights = np.arange(1.0, 10.0, dtype=F32).reshape(3, 3)
    x = rg.tensor(logits).require_grad()
    rg.manual_seed(0)
    hard = RF.gumbel_softmax(x, tau=tau, hard=True)
    grad = x.grad((hard * rg.tensor(weights)).sum().backward()).numpy()
    values = hard.detach().numpy()
    assert set(np.unique(values)) <= {0.0, 1.0} and np.all(values.sum(-1) == 1.0)
    assert np.all(np.isfinite(grad))
    # the straight-through gradient is the soft sample's: softmax((x + g) / tau), whose
    # Jacobian rows sum to 0; the noise g is recovered from the same seed's soft sample
    rg.manual_seed(0)
    soft = RF.gumbel_softmax(rg.tensor(logits), tau=tau, hard=False).numpy().astype(np.float64)
    expected = soft * (weights - (soft * weights).sum(-1, keepdims=True)) / tau
    np.testing.assert_allclose(grad, expected, rtol=1e-4, atol=1e-4)
    assert np.argmax(values, -1).tolist() == np.argmax(soft, -1).tolist()


# -- gradient clipping --------------------------------------------------------------------------
CLIP_GRADIENTS = [
    [[1.0, 2.0], [INF, 0.0]],
    [[1.0, 2.0], [math.nan, 0.0]],
    [[1.0, 2.0], [-INF, 3.0]],
    [[3.0, 4.0], [0.0, 0.0]],
    [[0.0, 0.0], [0.0, 0.0]],
    [[1e-30, 0.0], [0.0, 0.0]],
]


def _torch_clipped(gradients, **kwargs):
    params = [torch.zeros(len(g), requires_grad=True) for g in gradients]
    for p, g in zip(params, gradients, strict=True):
        p.grad = torch.tensor(g, dtype=torch.float32)
    norm = torch.nn.utils.clip_grad_norm_(params, **kwargs)
    return float(norm), [p.grad.numpy() for p in params]


def _rg_parameters_with(gradients):
    params = [rg.zeros(len(g)).require_grad() for g in gradients]
    total = None
    for p, g in zip(params, gradients, strict=True):
        term = (p * rg.tensor(np.array(g, F32))).sum()
        total = term if total is None else total + term
    return params, total.backward()


@pytest.mark.parametrize("norm_type", [2.0, 1.0, INF, 0.5])
@pytest.mark.parametrize("error_if_nonfinite", [False, True])
@pytest.mark.parametrize("index", range(len(CLIP_GRADIENTS)))
def test_clip_grad_norm_with_nonfinite_gradients_as_torch(index, norm_type, error_if_nonfinite):
    gradients = CLIP_GRADIENTS[index]
    kwargs = {"max_norm": 1.0, "norm_type": norm_type, "error_if_nonfinite": error_if_nonfinite}
    params, grads = _rg_parameters_with(gradients)
    before = [p.grad(grads).numpy().copy() for p in params]
    try:
        expected_norm, expected = _torch_clipped(gradients, **kwargs)
    except RuntimeError:
        with pytest.raises(NonFiniteError, match="clip_grad_norm_"):
            rg.nn.utils.clip_grad_norm_(grads, params, **kwargs)
        for p, b in zip(params, before, strict=True):  # left as they were
            np.testing.assert_array_equal(p.grad(grads).numpy(), b)
        return
    norm = rg.nn.utils.clip_grad_norm_(grads, params, **kwargs)
    assert_like(np.array(norm.item()), np.array(expected_norm), (1e-5, 1e-6), "norm")
    for k, (p, e) in enumerate(zip(params, expected, strict=True)):
        assert_like(p.grad(grads).numpy(), e, (1e-5, 1e-6), f"clipped gradient {k}")


@pytest.mark.parametrize("index", range(len(CLIP_GRADIENTS)))
def test_clip_grad_value_and_get_total_norm_with_nonfinite_gradients_as_torch(index):
    gradients = CLIP_GRADIENTS[index]
    params = [torch.zeros(len(g), requires_grad=True) for g in gradients]
    for p, g in zip(params, gradients, strict=True):
        p.grad = torch.tensor(g, dtype=torch.float32)
    torch.nn.utils.clip_grad_value_(params, 0.5)
    mine, grads = _rg_parameters_with(gradients)
    rg.nn.utils.clip_grad_value_(grads, mine, 0.5)
    for p, q in zip(mine, params, strict=True):
        assert_like(p.grad(grads).numpy(), q.grad.numpy(), (0.0, 0.0), "clip_grad_value_")
    for norm_type in (2.0, INF, 1.0):
        tensors = [np.array(g, F32) for g in gradients]
        expected = torch.nn.utils.get_total_norm([torch.tensor(t) for t in tensors], norm_type)
        got = rg.nn.utils.get_total_norm([rg.tensor(t) for t in tensors], norm_type)
        assert_like(np.array(got.item()), np.array(float(expected)), (1e-5, 1e-6), "total norm")
        if not math.isfinite(float(expected)):
            with pytest.raises(NonFiniteError, match="get_total_norm"):
                rg.nn.utils.get_total_norm([rg.tensor(t) for t in tensors], norm_type, True)


# -- optimizers -----------------------------------------------------------------------------------
START = np.array([1.0, -2.0, 0.5, 3.0], F32)
SMALL = np.array([0.1, -0.2, 0.0, 1e-30], F32)
GRADIENT_SEQUENCES = {
    "zero": [np.zeros(4, F32)] * 3,
    "inf": [SMALL, np.array([INF, -INF, 1.0, 0.0], F32), SMALL],
    "nan": [SMALL, np.array([math.nan, 1.0, 1.0, 0.0], F32)],
    "huge": [np.full(4, 1e30, F32)] * 2,
}
OPTIMIZERS = [
    ("Adam", {}),
    ("Adam", {"eps": 0.0}),
    ("Adam", {"amsgrad": True, "eps": 0.0}),
    ("Adam", {"weight_decay": 0.1, "maximize": True}),
    ("AdamW", {}),
    ("AdamW", {"eps": 0.0, "weight_decay": 0.1}),
    ("AdamW", {"amsgrad": True}),
    ("RMSprop", {}),
    ("RMSprop", {"eps": 0.0}),
    ("RMSprop", {"momentum": 0.9}),
    ("Adagrad", {}),
    ("Adagrad", {"eps": 0.0}),
    ("Adagrad", {"initial_accumulator_value": 0.1, "eps": 0.0}),
    ("SGD", {"lr": 0.1, "momentum": 0.9, "nesterov": True}),
    ("Adamax", {"eps": 0.0}),
    ("NAdam", {"eps": 0.0}),
    ("RAdam", {"eps": 0.0}),
    ("Adadelta", {"eps": 0.0}),
]


@pytest.mark.parametrize("sequence", sorted(GRADIENT_SEQUENCES))
@pytest.mark.parametrize("which", range(len(OPTIMIZERS)))
def test_optimizer_steps_with_zero_infinite_and_nan_gradients_as_torch(which, sequence):
    name, kwargs = OPTIMIZERS[which]
    steps = GRADIENT_SEQUENCES[sequence]
    reference = torch.tensor(START, requires_grad=True)
    torch_optimizer = getattr(torch.optim, name)([reference], **kwargs)
    parameter = rg.nn.Parameter(rg.tensor(START))
    optimizer = getattr(rg.optim, name)([parameter], **kwargs)
    for step, gradient in enumerate(steps):
        reference.grad = torch.tensor(gradient)
        torch_optimizer.step()
        optimizer.step((parameter * rg.tensor(gradient)).sum().backward())
        assert_like(
            parameter.detach().numpy(), reference.detach().numpy(), (1e-5, 1e-6), f"step {step}"
        )
