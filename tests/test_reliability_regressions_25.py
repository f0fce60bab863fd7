"""Regressions of reliability round 25 (today's surfaces: ``rg.stft``, the ``_foreach_*``
functions, ``scatter_reduce``): one test per defect, each against torch 2.13."""

import numpy as np
import pytest
import torch

import retrograd as rg

SIGNAL = np.random.default_rng(25).standard_normal(16).astype(np.float32)


def _lists(lib):
    return [lib.tensor([1.0, -2.0, 0.0, 4.0]), lib.tensor([[3.0, 0.5], [-1.0, 2.0]])]


def _assert_lists_equal(got, expected):
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        assert str(g.dtype).split(".")[-1] == str(e.dtype).split(".")[-1]
        np.testing.assert_allclose(g.numpy(), e.numpy(), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("name", ["_foreach_add", "_foreach_add_", "_foreach_mul"])
def test_foreach_of_an_empty_list_is_refused_as_torch_refuses_it(name):
    with pytest.raises(RuntimeError):
        getattr(torch, name)([], 1.0)
    with pytest.raises(rg.InvalidArgumentError, match=name):
        getattr(rg, name)([], 1.0)
    for unary in ("_foreach_exp", "_foreach_zero_", "_foreach_norm"):
        with pytest.raises(rg.InvalidArgumentError, match=unary):
            getattr(rg, unary)([])


def test_foreach_unknown_keyword_is_the_hierarchy_s_error_naming_the_op():
    with pytest.raises(TypeError):
        torch._foreach_mul(_lists(torch), 2.0, foo=1)
    with pytest.raises(rg.RetrogradError, match="_foreach_mul"):
        rg._foreach_mul(_lists(rg), 2.0, foo=1)


def test_foreach_pow_of_a_scalar_base_gives_torch_s_powers():
    expected = torch._foreach_pow(2.0, _lists(torch))
    _assert_lists_equal(rg._foreach_pow(2.0, _lists(rg)), expected)


def test_foreach_add_of_a_scalar_with_alpha_is_refused_as_torch_refuses_it():
    with pytest.raises(TypeError):
        torch._foreach_add(_lists(torch), 2.0, alpha=3)
    with pytest.raises(rg.DTypeError, match="_foreach_add"):
        rg._foreach_add(_lists(rg), 2.0, alpha=3)
    # a list of tensors takes alpha, as torch's
    _assert_lists_equal(
        rg._foreach_add(_lists(rg), _lists(rg), alpha=3),
        torch._foreach_add(_lists(torch), _lists(torch), alpha=3),
    )


@pytest.mark.parametrize("name", ["_foreach_maximum", "_foreach_minimum_"])
def test_foreach_maximum_and_minimum_of_a_scalar_give_torch_s_values(name):
    ours, theirs = _lists(rg), _lists(torch)
    got, expected = getattr(rg, name)(ours, 0.5), getattr(torch, name)(theirs, 0.5)
    if name.endswith("_"):
        assert got is ours and expected is theirs
    _assert_lists_equal(got, expected)


@pytest.mark.parametrize(
    "name, args",
    [("_foreach_mul_", (2.0,)), ("_foreach_exp_", ()), ("_foreach_zero_", ()),
     ("_foreach_addcmul_", ("lists", "lists")), ("_foreach_lerp_", ("lists", 0.25))],
)  # fmt: skip
def test_foreach_in_place_forms_return_the_list_written_as_torch_s(name, args):
    """torch 2.13's in-place forms return the list given (they returned None)."""
    ours, theirs = _lists(rg), _lists(torch)
    expected = getattr(torch, name)(theirs, *[_lists(torch) if a == "lists" else a for a in args])
    got = getattr(rg, name)(ours, *[_lists(rg) if a == "lists" else a for a in args])
    assert expected is theirs and got is ours
    _assert_lists_equal(ours, theirs)


def test_foreach_addcmul_scalars_tensor_must_be_1d_and_scalars_keyword_is_taken():
    with pytest.raises(RuntimeError):
        torch._foreach_addcmul(
            _lists(torch), _lists(torch), _lists(torch), torch.tensor([[1.0, 2.0]])
        )
    with pytest.raises(rg.ShapeError, match="_foreach_addcmul"):
        rg._foreach_addcmul(_lists(rg), _lists(rg), _lists(rg), rg.tensor([[1.0, 2.0]]))
    expected = torch._foreach_addcdiv(
        _lists(torch), _lists(torch), _lists(torch), scalars=[0.5, 2.0]
    )
    got = rg._foreach_addcdiv(_lists(rg), _lists(rg), _lists(rg), scalars=[0.5, 2.0])
    _assert_lists_equal(got, expected)


def test_stft_with_a_float64_window_gives_torch_s_float64_result():
    window = np.hanning(8)
    expected = torch.stft(
        torch.tensor(SIGNAL), 8, window=torch.tensor(window), return_complex=False
    )
    got = rg.stft(rg.tensor(SIGNAL), 8, window=rg.tensor(window), return_complex=False)
    assert got.dtype == rg.float64 and expected.dtype == torch.float64
    np.testing.assert_allclose(got.numpy(), expected.numpy(), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("bad", [np.nan, np.inf])
@pytest.mark.parametrize("onesided", [True, False])
def test_stft_of_nonfinite_samples_keeps_the_real_bins_imaginary_parts_zero(bad, onesided):
    """The frequencies 0 and n_fft / 2 have no imaginary part: 0 in torch, NaN before."""
    signal = SIGNAL.copy()
    signal[5] = bad
    expected = torch.stft(torch.tensor(signal), 8, onesided=onesided, return_complex=False)
    got = rg.stft(rg.tensor(signal), 8, onesided=onesided, return_complex=False).numpy()
    for frequency in (0, 4):
        np.testing.assert_array_equal(got[frequency, :, 1], expected.numpy()[frequency, :, 1])
    clean = np.isfinite(expected.numpy()).all(axis=(0, 2))  # frames the bad sample is not in
    np.testing.assert_allclose(got[:, clean], expected.numpy()[:, clean], rtol=1e-5, atol=1e-5)


def test_stft_refuses_a_non_bool_return_complex_and_a_list_window_as_torch():
    with pytest.raises(TypeError):
        torch.stft(torch.tensor(SIGNAL), 8, return_complex=0)
    with pytest.raises(rg.DTypeError, match="stft"):
        rg.stft(rg.tensor(SIGNAL), 8, return_complex=0)
    with pytest.raises(TypeError):
        torch.stft(torch.tensor(SIGNAL), 8, window=[1.0] * 8, return_complex=False)
    with pytest.raises(rg.DTypeError, match="stft"):
        rg.stft(rg.tensor(SIGNAL), 8, window=[1.0] * 8, return_complex=False)


def test_scatter_reduce_refuses_a_non_bool_include_self():
    args = (0, [0, 1, 0, 2], [1.0, 2.0, 3.0, 4.0], "sum")
    with pytest.raises(TypeError):
        torch.zeros(3).scatter_reduce(
            args[0], torch.tensor(args[1]), torch.tensor(args[2]), args[3], include_self="no"
        )
    with pytest.raises(rg.DTypeError, match="scatter_reduce"):
        rg.zeros(3).scatter_reduce(
            args[0], rg.tensor(args[1]), rg.tensor(args[2]), args[3], include_self="no"
        )


@pytest.mark.parametrize(
    "dtype, start, end",
    [("uint8", -2, 3), ("uint8", -300, -296), ("uint8", 250, 260), ("int32", 2**31 - 2, 2**31 + 2)],
)
def test_integer_arange_wraps_into_a_narrow_dtype_as_torch_s(dtype, start, end):
    """torch counts in int64 and wraps (uint8 from -2 is 254); NumPy's arange refused it."""
    expected = torch.arange(start, end, dtype=getattr(torch, dtype))
    got = rg.arange(start, end, dtype=getattr(rg, dtype))
    assert got.dtype == getattr(rg, dtype)
    np.testing.assert_array_equal(got.numpy(), expected.numpy())


@pytest.mark.parametrize(
    "dtype, low, high",
    [("uint8", 0, 300), ("uint8", -1, 5), ("int32", 0, 2**31 + 1), ("int32", -(2**31) - 1, 0)],
)
def test_randint_bounds_outside_a_narrow_dtype_are_refused_as_torch_refuses_them(dtype, low, high):
    """The draws wrapped (uint8's randint(0, 300) gave values of 300 as 44)."""
    with pytest.raises(RuntimeError, match="out of bounds"):
        torch.randint(low, high, (4,), dtype=getattr(torch, dtype))
    with pytest.raises(rg.InvalidArgumentError, match="randint"):
        rg.randint(low, high, (4,), dtype=getattr(rg, dtype))
    rg.manual_seed(0)  # the widest bounds the dtype allows are taken, as torch's
    top = 256 if dtype == "uint8" else 2**31
    draws = rg.randint(top - 1, top, (4,), dtype=getattr(rg, dtype))
    assert draws.tolist() == torch.full((4,), top - 1, dtype=getattr(torch, dtype)).tolist()


@pytest.mark.parametrize(
    "dtype, low, high", [("uint8", 0, 300), ("uint8", -1, 5), ("int32", 0, 2**32)]
)
def test_random_bounds_outside_a_narrow_dtype_are_refused_as_torch_refuses_them(dtype, low, high):
    with pytest.raises(RuntimeError, match="out of bounds"):
        torch.zeros(3, dtype=getattr(torch, dtype)).random_(low, high)
    with pytest.raises(rg.InvalidArgumentError, match="random_"):
        rg.zeros(3, dtype=getattr(rg, dtype)).random_(low, high)


def test_random_without_bounds_draws_int32_from_0_to_its_max_as_torch():
    """torch draws [0, 2**31 - 1]; retrograd drew int64's range and wrapped (negatives)."""
    rg.manual_seed(0)
    draws = rg.zeros(200, dtype=rg.int32).random_().numpy()
    assert draws.dtype == np.int32 and draws.min() >= 0
    assert draws.max() > 2**30  # the whole range, not a narrower one


def test_new_full_and_new_tensor_write_numbers_into_uint8_int32_as_torch():
    """``new_full(-1)`` of a uint8 tensor raised NumPy's bounds error (torch: 255, as
    ``full``'s); ``new_tensor([2**40])`` of an int32 one gave 0 (torch refuses it)."""
    for lib in (torch, rg):
        byte = lib.tensor([1], dtype=lib.uint8)
        assert byte.new_full((2,), -1).tolist() == [255, 255]
        assert byte.new_full((2,), 2.7).tolist() == [2, 2]
    with pytest.raises(RuntimeError, match="overflow"):
        torch.tensor([1], dtype=torch.int32).new_tensor([2**40])
    with pytest.raises(rg.InvalidArgumentError):
        rg.tensor([1], dtype=rg.int32).new_tensor([2**40])
    with pytest.raises(RuntimeError, match="overflow"):
        torch.tensor([1], dtype=torch.uint8).new_full((2,), 300)
    with pytest.raises(rg.InvalidArgumentError, match="new_full"):
        rg.tensor([1], dtype=rg.uint8).new_full((2,), 300)


@pytest.mark.parametrize("op", ["linspace", "logspace"])
@pytest.mark.parametrize(
    "dtype, start, end",
    [("uint8", -2, 3), ("uint8", -1, 255), ("uint8", 0, 300), ("uint8", -3.5, 2.5),
     ("uint8", 0.5, -0.5), ("int32", 0, 2**33), ("int32", -5, 5)],
)  # fmt: skip
def test_integer_linspace_and_logspace_convert_their_ends_to_the_dtype_first(op, dtype, start, end):
    """torch writes both ends into uint8/int32 first (-2 is 254; 300 and -3.5 are refused);
    retrograd counted from -2 and wrapped the values, or gave values past the dtype."""
    options = {"base": 2} if op == "logspace" else {}

    def make(lib):
        return getattr(lib, op)(start, end, 4, dtype=getattr(lib, dtype), **options)

    try:
        expected = make(torch)
    except RuntimeError:
        with pytest.raises(rg.InvalidArgumentError, match=op):
            make(rg)
        return
    np.testing.assert_array_equal(make(rg).numpy(), expected.numpy())
