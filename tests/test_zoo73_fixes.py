"""The defect the zoo's round 73 (language models) found, on its own.

Hugging Face's masks are written with ``torch.finfo(dtype).min``; written into a float32 tensor a
float64 ``finfo.min`` (or any finite number past float32's range) is refused by torch ("value
cannot be converted to type float without overflow"), where retrograd wrote ``-inf``, whose
fully masked rows then soften to NaN. The same check covers every scalar torch converts to the
tensor's dtype: fills, ``where``'s and ``clamp``'s bounds, ``alpha``, ``addcmul``'s ``value``,
``lerp``'s weight, ``nn.init.constant_``.
"""

from __future__ import annotations

import numpy as np
import pytest

import retrograd as rg
from retrograd.errors import InvalidArgumentError

torch = pytest.importorskip("torch")

TOO_BIG = 1e300
F64_MIN = float(np.finfo(np.float64).min)
MASK = [True, False, True]

WRITES = {
    "full": lambda t, v: t.full((3,), v, dtype=t.float32),
    "full (default dtype)": lambda t, v: t.full((3,), v),
    "full_like": lambda t, v: t.full_like(t.ones(3), v),
    "new_full": lambda t, v: t.ones(3).new_full((3,), v),
    "fill_": lambda t, v: t.ones(3).fill_(v),
    "fill_ (numpy float)": lambda t, v: t.ones(3).fill_(np.float64(v)),
    "masked_fill": lambda t, v: t.ones(3).masked_fill(t.tensor(MASK), v),
    "masked_fill_": lambda t, v: t.ones(3).masked_fill_(t.tensor(MASK), v),
    "index_fill": lambda t, v: t.ones(3).index_fill(0, t.tensor([1]), v),
    "where": lambda t, v: t.where(t.tensor(MASK), t.ones(3), v),
    "clamp min": lambda t, v: t.ones(3).clamp(min=v),
    "clamp max": lambda t, v: t.ones(3).clamp(max=-v),
    "add alpha": lambda t, v: t.ones(3).add(t.ones(3), alpha=v),
    "setitem": lambda t, v: t.ones(3).__setitem__(1, v),
    "setitem slice": lambda t, v: t.ones(3).__setitem__(slice(0, 2), v),
    "scatter": lambda t, v: t.ones(3).scatter(0, t.tensor([1]), v),
    "pad": lambda t, v: t.nn.functional.pad(t.ones(3), (1, 1), value=v),
    "addcmul": lambda t, v: t.ones(3).addcmul(t.ones(3), t.ones(3), value=v),
    "addcdiv": lambda t, v: t.ones(3).addcdiv(t.ones(3), t.ones(3), value=v),
    "lerp": lambda t, v: t.ones(3).lerp(t.ones(3), v),
    "constant_": lambda t, v: t.nn.init.constant_(t.ones(3), v),
    "linspace": lambda t, v: t.linspace(0, v, 3, dtype=t.float32),
    "logspace": lambda t, v: t.logspace(v, 0, 2, dtype=t.float32),
}


@pytest.mark.parametrize("value", [TOO_BIG, F64_MIN])
@pytest.mark.parametrize("name", WRITES)
def test_a_finite_number_past_float32s_range_is_refused_as_torch(name, value):
    with pytest.raises(RuntimeError, match="without overflow"):
        WRITES[name](torch, value)
    op = name.split()[0].rstrip("_") if name.startswith("masked") else name.split()[0]
    with pytest.raises(InvalidArgumentError, match=f"{op}.*cannot be converted to float32"):
        WRITES[name](rg, value)


@pytest.mark.parametrize(
    "value", [float("inf"), -float("inf"), float(np.finfo(np.float32).max), -3.0e38, 2**62]
)
@pytest.mark.parametrize("name", WRITES)
def test_infinities_and_numbers_within_float32s_range_are_written_as_torch(name, value):
    """The check refuses only finite numbers past the range: infinities (``-inf`` masks),
    float32's own extremes and integers are written as torch writes them; float64 takes
    1e300."""
    expected = WRITES[name](torch, value)
    got = WRITES[name](rg, value)
    if expected is None:  # (setitem)
        return
    np.testing.assert_array_equal(got.numpy(), expected.numpy())
    assert str(got.dtype).split(".")[-1] == str(expected.dtype).split(".")[-1]


def test_float64_tensors_take_any_float_and_the_llm_mask_works():
    """``full(..., finfo(float64).min, dtype=float64)`` and an HF causal mask: softmax of a
    fully masked row by ``finfo.min`` is uniform (no NaN), as torch's."""
    for lib in (rg, torch):
        mask = lib.full((3, 3), lib.finfo(lib.float64).min, dtype=lib.float64).triu(1)
        mask[0] = lib.finfo(lib.float64).min  # a row masked everywhere
        probs = lib.softmax(mask, dim=-1)
        np.testing.assert_allclose(np.asarray(probs.tolist())[0], [1 / 3] * 3, rtol=1e-15)
    assert rg.ones(2, dtype=rg.float64).fill_(TOO_BIG).tolist() == [TOO_BIG, TOO_BIG]


def test_complex64_parts_and_one_step_ranges_as_torch():
    """complex64 takes each part within float32's range; ``linspace`` of one step writes only
    its start, ``logspace`` of one step computes ``base ** start`` (inf, no refusal)."""
    for value in (complex(1e300, 0), complex(1, -1e300)):
        with pytest.raises(RuntimeError, match="without overflow"):
            torch.full((2,), value, dtype=torch.complex64)
        with pytest.raises(InvalidArgumentError, match=r"full.*complex64 without overflow"):
            rg.full((2,), value, dtype=rg.complex64)
        assert rg.full((1,), value, dtype=rg.complex128).tolist() == [value]
    assert rg.linspace(0, 1e300, 1, dtype=rg.float32).tolist() == [0.0]
    with pytest.raises(InvalidArgumentError, match="linspace"):
        rg.linspace(1e300, 0, 1, dtype=rg.float32)
    assert rg.logspace(1e300, 0, 1, dtype=rg.float32).tolist() == [float("inf")]
    assert torch.logspace(1e300, 0, 1, dtype=torch.float32).tolist() == [float("inf")]
