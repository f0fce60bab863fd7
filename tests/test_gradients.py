"""Every differentiable op against central finite differences (float64), against PyTorch when
installed (values and gradients, float64 and float32), and identical under both strategies."""

from __future__ import annotations

import numpy as np
import pytest

import retrograd as rg
from backends import inner_backend
from op_cases import CASES

CASE_IDS = [c.name for c in CASES]
SMOOTH_CASES = [c for c in CASES if "rounds" not in c.tags]


def _run(case, arrays, dtype, strategy=None, cotangent=None):
    """Forward ``case`` on ``arrays``; backward seeded with ``cotangent``; return
    (output, [grad or None per input])."""
    backend = rg.Autodiff(inner_backend(), strategy or rg.NoCheckpointing())
    with rg.use_backend(backend):
        tensors = []
        for position, array in enumerate(arrays):
            if position in case.constant:
                tensors.append(array)
            else:
                tensors.append(rg.tensor(array.astype(dtype)).require_grad())
        out = case.fn(*tensors)
        seed = None if cotangent is None else rg.tensor(cotangent.astype(dtype))
        grads = out.backward(seed)
        return out.numpy(), [
            None if position in case.constant else tensors[position].grad(grads).numpy()
            for position in range(len(arrays))
        ]


def _forward(case, arrays):
    with rg.use_backend(rg.Autodiff(inner_backend())):
        tensors = [a if i in case.constant else rg.tensor(a) for i, a in enumerate(arrays)]
        return case.fn(*tensors).numpy()


def _numerical(case, arrays, cotangent, position, eps=1e-6):
    array = arrays[position].copy()
    grad = np.zeros_like(array)
    for index in np.ndindex(array.shape):
        original = array[index]
        values = []
        for shift in (eps, -eps):
            array[index] = original + shift
            trial = list(arrays)
            trial[position] = array
            values.append(float(np.sum(_forward(case, trial) * cotangent)))
        array[index] = original
        grad[index] = (values[0] - values[1]) / (2 * eps)
    return grad


@pytest.mark.parametrize("case", SMOOTH_CASES, ids=[c.name for c in SMOOTH_CASES])
def test_against_finite_differences(case):
    rng = np.random.default_rng(abs(hash(case.name)) % 2**32)
    arrays = case.inputs(rng)
    out = _forward(case, arrays)
    cotangent = rng.uniform(0.5, 1.5, size=np.shape(out))
    _, grads = _run(case, arrays, np.float64, cotangent=cotangent)
    for position in range(len(arrays)):
        if position in case.constant:
            continue
        expected = _numerical(case, arrays, cotangent, position)
        np.testing.assert_allclose(
            grads[position], expected, rtol=1e-5, atol=1e-6, err_msg=f"input {position}"
        )


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_against_torch(case, dtype):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(abs(hash(case.name)) % 2**32 + 1)
    arrays = case.inputs(rng)
    out, grads = None, None
    torch_inputs = []
    for position, array in enumerate(arrays):
        if position in case.constant:
            torch_inputs.append(array)
        else:
            torch_inputs.append(torch.tensor(array.astype(dtype), requires_grad=True))
    torch_out = case.torch_fn(*torch_inputs)
    cotangent = rng.uniform(0.5, 1.5, size=tuple(torch_out.shape))
    torch_out.backward(torch.tensor(cotangent.astype(dtype)))
    out, grads = _run(case, arrays, dtype, cotangent=cotangent)
    tolerance = (
        {"rtol": 1e-10, "atol": 1e-12} if dtype == np.float64 else {"rtol": 2e-5, "atol": 2e-6}
    )
    assert out.dtype == torch_out.detach().numpy().dtype
    np.testing.assert_allclose(out, torch_out.detach().numpy(), **tolerance)
    for position, t in enumerate(torch_inputs):
        if position in case.constant:
            continue
        assert grads[position].dtype == dtype
        np.testing.assert_allclose(
            grads[position], t.grad.numpy(), **tolerance, err_msg=f"input {position}"
        )


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_strategies_give_identical_gradients(case):
    rng = np.random.default_rng(abs(hash(case.name)) % 2**32 + 2)
    arrays = case.inputs(rng)
    cotangent = rng.uniform(0.5, 1.5, size=np.shape(_forward(case, arrays)))
    _, plain = _run(case, arrays, np.float32, rg.NoCheckpointing(), cotangent)
    _, balanced = _run(case, arrays, np.float32, rg.BalancedCheckpointing(), cotangent)
    for a, b in zip(plain, balanced):
        if a is not None:
            assert np.array_equal(a, b)
