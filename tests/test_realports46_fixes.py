"""Regression tests for the defects the realports46 ports (time series, tabular and
recommender programs) exposed: expected values from torch."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import retrograd as rg


@pytest.mark.parametrize(
    "call, points",
    [
        (lambda lib: lib.fft.irfft(lib.ones(3, dtype=lib.cfloat), n=0), 0),
        (lambda lib: lib.fft.irfft(lib.ones(3, dtype=lib.cfloat), n=-2), -2),
        (lambda lib: lib.fft.hfft(lib.ones(3, dtype=lib.cfloat), n=0), 0),
        (lambda lib: lib.fft.irfft2(lib.ones(3, 3, dtype=lib.cfloat), s=(4, 0)), 0),
        (lambda lib: lib.fft.irfftn(lib.ones(3, 3, dtype=lib.cfloat), s=(-3, 4)), -3),
        (lambda lib: lib.fft.irfftn(lib.ones(3, 3, dtype=lib.cfloat), s=(4, -3)), -3),
    ],
)
def test_inverse_real_fft_refuses_a_bad_length_naming_the_length_given(call, points):
    # torch: "Invalid number of data points (n) specified"; retrograd said "narrow: start 1
    # and length -1 do not fit..." for n=0, and named n // 2 + 1 for a negative n
    with pytest.raises(RuntimeError, match=rf"Invalid number of data points \({points}\)"):
        call(torch)
    with pytest.raises(
        rg.InvalidArgumentError, match=rf"invalid number of data points \({points}\)"
    ):
        call(rg)


def test_inverse_real_fft_still_takes_the_lengths_torch_takes():
    rng = np.random.default_rng(46)
    spectrum = (rng.standard_normal((2, 5)) + 1j * rng.standard_normal((2, 5))).astype(np.complex64)
    for n in (1, 2, 7, 8, 12):
        np.testing.assert_allclose(
            rg.fft.irfft(rg.tensor(spectrum), n=n).numpy(),
            torch.fft.irfft(torch.tensor(spectrum), n=n).numpy(),
            rtol=1e-5,
            atol=1e-6,
        )
    np.testing.assert_allclose(
        rg.fft.irfftn(rg.tensor(spectrum), s=(2, -1)).numpy(),
        torch.fft.irfftn(torch.tensor(spectrum), s=(2, -1)).numpy(),
        rtol=1e-5,
        atol=1e-6,
    )


def test_negative_binomial_of_zero_total_count_at_zero_has_probability_one():
    # torch masks the normalization lgamma(0) - lgamma(0) there to 0; retrograd multiplied it
    # by 0 and got NaN
    results = []
    for lib in (torch, rg):
        total_count = lib.tensor([0.0, 5.0, 0.0, 2.5], dtype=lib.float64, requires_grad=True)
        logits = lib.tensor([1.0, -1.0, 0.5, 0.2], dtype=lib.float64, requires_grad=True)
        value = lib.tensor([0.0, 0.0, 2.0, 3.0], dtype=lib.float64)
        log_prob = lib.distributions.NegativeBinomial(total_count, logits=logits).log_prob(value)
        if lib is torch:
            log_prob.sum().backward()
            grads = (total_count.grad.numpy(), logits.grad.numpy())
        else:
            found = log_prob.sum().backward()
            grads = (total_count.grad(found).numpy(), logits.grad(found).numpy())
        results.append((log_prob.detach().numpy(), *grads))
    theirs, ours = results
    assert theirs[0][0] == 0.0
    for mine, reference in zip(ours, theirs):
        np.testing.assert_allclose(mine, reference, rtol=1e-12, atol=1e-12)


def test_poisson_log_prob_differentiates_in_the_count_as_torch_at_zero():
    # torch's log_prob is value.xlogy(rate) - ...: at a zero count its derivative in the count
    # is log(rate) - digamma(1); retrograd's 0 * log(rate) branch gave -digamma(1) alone (a
    # zero-inflated mixture of Poissons inherited it)
    results = []
    for lib in (torch, rg):
        rate = lib.tensor([0.7, 2.5, 0.0, 9.0], dtype=lib.float64, requires_grad=True)
        count = lib.tensor([0.0, 3.0, 0.0, 0.0], dtype=lib.float64, requires_grad=True)
        log_prob = lib.distributions.Poisson(rate, validate_args=False).log_prob(count)
        weights = lib.tensor([[0.1, -0.3], [1.0, 2.0]], dtype=lib.float64, requires_grad=True)
        mixture = lib.distributions.MixtureSameFamily(
            lib.distributions.Categorical(logits=weights),
            lib.distributions.Poisson(rate[[0, 1, 1, 3]].reshape(2, 2)),
        ).log_prob(count[:2])
        total = log_prob[[0, 1, 3]].sum() + mixture.sum()
        tensors = (rate, count, weights)
        if lib is torch:
            total.backward()
            grads = [t.grad.numpy() for t in tensors]
        else:
            found = total.backward()
            grads = [t.grad(found).numpy() for t in tensors]
        results.append((log_prob.detach().numpy(), mixture.detach().numpy(), *grads))
    theirs, ours = results
    for mine, reference in zip(ours, theirs):
        np.testing.assert_allclose(mine, reference, rtol=1e-12, atol=1e-12)


def test_poisson_log_prob_count_derivative_matches_finite_differences():
    rate = rg.tensor([0.7, 2.5], dtype=rg.float64)
    count = rg.tensor([0.0, 3.0], dtype=rg.float64, requires_grad=True)
    found = rg.distributions.Poisson(rate).log_prob(count).sum().backward()
    step = 1e-6
    plus = rg.distributions.Poisson(rate, validate_args=False).log_prob(count.detach() + step)
    minus = rg.distributions.Poisson(rate, validate_args=False).log_prob(count.detach() - step)
    # (at the zero count the one-sided difference: log_prob is not defined below 0)
    at = rg.distributions.Poisson(rate, validate_args=False).log_prob(count.detach())
    expected = ((plus - minus) / (2 * step)).detach().numpy()  # (writable: detached)
    expected[0] = ((plus - at) / step).numpy()[0]
    np.testing.assert_allclose(count.grad(found).numpy(), expected, rtol=1e-4)


def _causal_stack(lib, weight_norm):
    """Two weight-normalized dilated convolutions in a ``Sequential`` (a TCN's shape)."""
    return lib.nn.Sequential(
        weight_norm(lib.nn.Conv1d(2, 3, 2, padding=1, dilation=1)),
        lib.nn.ReLU(),
        weight_norm(lib.nn.Conv1d(3, 2, 2, padding=2, dilation=2)),
    )


def test_a_checkpoint_of_the_old_weight_norm_loads_into_parametrizations_weight_norm():
    # torch's parametrizations.weight_norm registers a load pre-hook that renames weight_g /
    # weight_v (the deprecated nn.utils.weight_norm's keys, in old TCN and vocoder checkpoints)
    # to parametrizations.weight.original0 / original1; retrograd refused those keys
    import copy

    torch.manual_seed(46)
    old = _causal_stack(torch, torch.nn.utils.weight_norm)
    checkpoint = {k: v.detach().numpy().copy() for k, v in old.state_dict().items()}
    assert "0.weight_g" in checkpoint and "2.weight_v" in checkpoint
    x = np.linspace(-1.0, 1.0, 14, dtype=np.float32).reshape(1, 2, 7)
    expected = old(torch.tensor(x)).detach().numpy()

    reference = _causal_stack(torch, torch.nn.utils.parametrizations.weight_norm)
    reference.load_state_dict({k: torch.tensor(v) for k, v in checkpoint.items()})
    np.testing.assert_allclose(reference(torch.tensor(x)).detach().numpy(), expected, rtol=1e-6)

    ours = _causal_stack(rg, rg.nn.utils.parametrizations.weight_norm)
    ours.load_state_dict({k: rg.tensor(v) for k, v in checkpoint.items()})
    np.testing.assert_allclose(ours(rg.tensor(x)).numpy(), expected, rtol=1e-5, atol=1e-7)
    assert sorted(ours.state_dict()) == sorted(reference.state_dict())
    again = copy.deepcopy(ours)
    np.testing.assert_allclose(again(rg.tensor(x)).numpy(), expected, rtol=1e-5, atol=1e-7)
    # the parametrization's own keys still load, and a half-old checkpoint still says what is
    # missing
    ours.load_state_dict(reference.state_dict())
    partial = {k: rg.tensor(v) for k, v in checkpoint.items() if k != "2.weight_g"}
    with pytest.raises(rg.InvalidArgumentError, match=r"2\.weight_v"):
        ours.load_state_dict(partial)


def test_a_parametrized_module_refuses_pickling_as_torch_and_still_deep_copies(tmp_path):
    # torch: "Serialization of parametrized modules is only supported through state_dict()";
    # retrograd's pickle failed on the class made at parametrization ("attribute lookup
    # ParametrizedConv1d ... failed"), from rg.save of a whole model too
    import copy
    import pickle

    def model(lib):
        return lib.nn.Sequential(
            lib.nn.utils.parametrizations.weight_norm(lib.nn.Conv1d(2, 3, 2)), lib.nn.ReLU()
        )

    with pytest.raises(RuntimeError, match="only supported through state_dict"):
        pickle.dumps(model(torch))
    ours = model(rg)
    with pytest.raises(rg.InvalidArgumentError, match="only supported through state_dict"):
        pickle.dumps(ours)
    with pytest.raises(rg.RetrogradError, match="only supported through state_dict"):
        rg.save(ours, tmp_path / "model.pt")
    rg.save(ours.state_dict(), tmp_path / "state.pt")  # the supported way
    x = rg.tensor(np.linspace(-1.0, 1.0, 10, dtype=np.float32).reshape(1, 2, 5))
    twin = copy.deepcopy(ours)
    assert type(twin[0]) is type(ours[0])
    np.testing.assert_array_equal(twin(x).numpy(), ours(x).numpy())
    with rg.no_grad():  # the copy's weights are its own
        twin[0].parametrizations.weight.original0.mul_(2.0)
    assert not np.array_equal(twin[0](x).numpy(), ours[0](x).numpy())  # (before the ReLU)
    restored = model(rg)
    restored.load_state_dict(rg.load(tmp_path / "state.pt"))
    np.testing.assert_array_equal(restored(x).numpy(), ours(x).numpy())
