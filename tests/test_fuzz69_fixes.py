"""Round 69's defects in the losses, each against torch.

- ``cross_entropy`` with probability targets of another dtype than the logits smoothed the
  targets (``label_smoothing``) after promoting them, torch before: a float32 target with
  float64 logits differed in the eighth digit;
- ``hinge_embedding_loss`` and ``soft_margin_loss`` of a float32 input and a float64 target
  were float64 (torch's: the input's dtype);
- ``kl_div`` took integer and bool targets, which torch refuses;
- ``multilabel_soft_margin_loss`` refused a target that broadcasts the input larger (torch's
  composite broadcasts both ways);
- the refusals torch raises as ``RuntimeError`` were ``ValueError``s or ``TypeError``s only:
  class-index targets of another dtype than int64 (``cross_entropy``, ``nll_loss``,
  ``multi_margin_loss``, ``multilabel_margin_loss``) or of the wrong shape (but for a batch
  size that differs, torch's ``ValueError``), a class weight of the wrong length, probability
  targets of another shape, targets that do not broadcast with the input (the regression
  losses, ``kl_div``, ``poisson_nll_loss``, ``soft_margin_loss``, ``hinge_embedding_loss``,
  ``margin_ranking_loss``), ``margin_ranking_loss``'s inputs of different ranks and
  ``cosine_embedding_loss``'s targets of the wrong shape.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import retrograd as rg

torch = pytest.importorskip("torch")

RNG = np.random.default_rng(69)
X = RNG.standard_normal((3, 4))


def _both(make):
    """``make(lib)`` on torch and on retrograd."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return make(torch), make(rg)


def test_cross_entropy_smooths_probability_targets_in_their_own_dtype():
    p = np.exp(RNG.standard_normal((3, 4)))
    target = (p / p.sum(1, keepdims=True)).astype(np.float32)

    def make(lib):
        return lib.nn.functional.cross_entropy(
            lib.tensor(X), lib.tensor(target), reduction="none", label_smoothing=0.25
        )

    expected, got = _both(make)
    assert str(got.dtype).endswith("float64")
    np.testing.assert_allclose(got.numpy(), expected.numpy(), rtol=1e-12)


@pytest.mark.parametrize("name", ["hinge_embedding_loss", "soft_margin_loss"])
def test_a_float64_target_keeps_a_float32_inputs_dtype(name):
    target = np.sign(RNG.standard_normal((3, 4)))

    def make(lib):
        fn = getattr(lib.nn.functional, name)
        return fn(lib.tensor(X.astype(np.float32)), lib.tensor(target), reduction="none")

    expected, got = _both(make)
    assert str(got.dtype).rpartition(".")[2] == str(expected.dtype).rpartition(".")[2]
    np.testing.assert_allclose(got.numpy(), expected.numpy(), rtol=1e-6)


@pytest.mark.parametrize("dtype", ["int64", "int32", "bool"])
def test_kl_div_refuses_integral_targets(dtype):
    for lib in (torch, rg):
        with pytest.raises(RuntimeError, match="ntegral"):
            lib.nn.functional.kl_div(lib.tensor(X), lib.tensor(np.ones((3, 4), dtype=dtype)))


def test_multilabel_soft_margin_loss_broadcasts_a_target_that_grows_the_input():
    def make(lib):
        fn = lib.nn.functional.multilabel_soft_margin_loss
        return fn(lib.tensor(X[:, :1]), lib.tensor(np.ones((3, 0))), reduction="none")

    expected, got = _both(make)
    assert tuple(got.shape) == tuple(expected.shape) == (3,)
    np.testing.assert_array_equal(got.numpy(), expected.numpy())


F32 = np.float32
LONG = np.int64
#: (name, call(tensor, functional)) of refusals torch raises as RuntimeError
RUNTIME_ERRORS = {
    "cross_entropy int32 target": lambda t, f: f.cross_entropy(t(X), t(np.zeros(3, np.int32))),
    "nll_loss float target": lambda t, f: f.nll_loss(t(X), t(np.zeros(3))),
    "multi_margin_loss bool target": lambda t, f: f.multi_margin_loss(t(X), t(np.zeros(3, bool))),
    "multilabel_margin_loss float target": lambda t, f: f.multilabel_margin_loss(
        t(X), t(np.zeros((3, 4)))
    ),
    "nll_loss spatial target shape": lambda t, f: f.nll_loss(
        t(np.zeros((3, 4, 2))), t(np.zeros((3, 1), LONG))
    ),
    "multi_margin_loss target shape": lambda t, f: f.multi_margin_loss(t(X), t(np.zeros(2, LONG))),
    "multilabel_margin_loss target shape": lambda t, f: f.multilabel_margin_loss(
        t(X), t(np.zeros((3, 3), LONG))
    ),
    "cross_entropy weight length": lambda t, f: f.cross_entropy(
        t(X), t(np.zeros(3, LONG)), weight=t(np.ones(3))
    ),
    "cross_entropy probability shape": lambda t, f: f.cross_entropy(t(X), t(np.ones((3, 3)))),
    "mse_loss shapes": lambda t, f: f.mse_loss(t(X), t(np.ones((3, 3)))),
    "huber_loss shapes": lambda t, f: f.huber_loss(t(X), t(np.ones((3, 3)))),
    "kl_div shapes": lambda t, f: f.kl_div(t(X), t(np.ones((3, 3)))),
    "poisson_nll_loss shapes": lambda t, f: f.poisson_nll_loss(t(X), t(np.ones((3, 3)))),
    "soft_margin_loss shapes": lambda t, f: f.soft_margin_loss(t(X), t(np.ones((3, 3)))),
    "hinge_embedding_loss shapes": lambda t, f: f.hinge_embedding_loss(t(X), t(np.ones((3, 3)))),
    "margin_ranking_loss shapes": lambda t, f: f.margin_ranking_loss(
        t(X[0]), t(X[0]), t(np.ones(3))
    ),
    "margin_ranking_loss ranks": lambda t, f: f.margin_ranking_loss(
        t(X[0]), t(X[0]), t(np.ones((1, 4)))
    ),
    "cosine_embedding_loss 2-d target": lambda t, f: f.cosine_embedding_loss(
        t(X), t(X), t(np.ones((3, 1)))
    ),
    "cosine_embedding_loss batch": lambda t, f: f.cosine_embedding_loss(t(X), t(X), t(np.ones(2))),
}


@pytest.mark.parametrize("name", sorted(RUNTIME_ERRORS))
def test_refusals_torch_raises_as_runtime_errors(name):
    call = RUNTIME_ERRORS[name]
    for lib in (torch, rg):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with pytest.raises(RuntimeError):
                call(lib.tensor, lib.nn.functional)
    with pytest.raises(rg.RetrogradError):  # an error of the hierarchy, too
        call(rg.tensor, rg.nn.functional)


def test_a_batch_size_that_differs_stays_torchs_value_error():
    for lib in (torch, rg):
        with pytest.raises(ValueError):
            lib.nn.functional.cross_entropy(lib.tensor(X), lib.tensor(np.zeros(2, LONG)))
