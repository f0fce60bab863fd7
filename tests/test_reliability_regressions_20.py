"""Round 20 of the reliability work: one regression per defect the sweep
(``test_reliability_sweep_20.py``) and its probes found; each fails on the code before the fix.

Expected values and errors come from torch (the same program run there), or from math where
torch's own behaviour is the defect (said at the test)."""

from __future__ import annotations

import collections
import warnings

import numpy as np
import pytest
import torch
import torch.utils.data as TD  # noqa: N812

import retrograd as rg
import retrograd.utils.data as RD  # noqa: N812
from retrograd import nn


# == tensor(): Python ints past int64's range ====================================================
@pytest.mark.parametrize("data", [[-(2**63) - 1], 2**64, [1, 2**70], [[3], [-(2**80)]]])
def test_tensor_of_ints_past_int64_names_the_value(data):
    # Only a positive int below 2**64 (a uint64 array) was named; the rest (an object array)
    # read "cannot make a tensor from data of dtype object", naming neither value nor range.
    with pytest.raises(ValueError):  # torch: "Overflow when unpacking long long"
        torch.tensor(data)
    with pytest.raises(rg.InvalidArgumentError, match=r"tensor: -?\d+ is out of int64's range"):
        rg.tensor(data)
    assert rg.tensor([-(2**63), 2**63 - 1]).tolist() == [-(2**63), 2**63 - 1]


# == default_collate: samples of different kinds =================================================
def test_collate_of_a_tensor_then_a_number_is_a_dtype_error():
    # A bare AttributeError ("'int' object has no attribute 'shape'") from the stack.
    with pytest.raises(TypeError, match="expected Tensor as element 1"):
        next(iter(TD.DataLoader([torch.ones(1), 2], batch_size=2)))
    loader = RD.DataLoader([rg.ones(1), 2], batch_size=2)
    with pytest.raises(rg.DTypeError, match=r"default_collate: .*Tensor, sample 1 is a int"):
        next(iter(loader))
    assert RD.default_collate([rg.ones(1), rg.zeros(1)]).tolist() == [[1.0], [0.0]]


def test_collate_of_a_sequence_then_a_number_is_a_dtype_error():
    # A bare TypeError ("object of type 'int' has no len()").
    with pytest.raises(rg.DTypeError, match=r"default_collate: .*sample 1 is a int"):
        RD.default_collate([(1, 2), 3])


# == DataLoader: indices past the dataset's end, len of a stream, persistent workers =============
@pytest.mark.parametrize(
    "options", [{"sampler": [0, 7]}, {"batch_sampler": [[0, 5]]}, {"sampler": [-4]}]
)
def test_loader_whose_sampler_draws_past_a_list_names_the_index(options):
    # A bare "list index out of range" from the list dataset, naming neither index nor size.
    with pytest.raises(IndexError):
        list(TD.DataLoader([1, 2, 3], **options))
    with pytest.raises(rg.IndexOutOfRangeError, match=r"DataLoader: .*index -?\d, out of range "):
        list(RD.DataLoader([1, 2, 3], **options))


def test_subset_whose_indices_run_past_the_dataset_names_them():
    with pytest.raises(IndexError):
        TD.Subset([1, 2, 3], [5])[0]
    with pytest.raises(rg.IndexOutOfRangeError, match=r"Subset: .*index 5, out of range .* 3 "):
        RD.Subset([1, 2, 3], [5])[0]
    with pytest.raises(rg.IndexOutOfRangeError, match="Subset: index 2 is out of range for 2"):
        RD.Subset([1, 2, 3], [2, 0])[2]
    assert RD.Subset([1, 2, 3], [2, 0])[-1] == TD.Subset([1, 2, 3], [2, 0])[-1] == 1


class _Stream(RD.IterableDataset):
    def __iter__(self):
        return iter(range(5))


def test_len_of_a_loader_over_a_stream_without_len_is_a_dtype_error():
    # A bare TypeError ("object of type '_Stream' has no len()") from inside __len__.
    loader = RD.DataLoader(_Stream(), batch_size=2)
    with pytest.raises(rg.DTypeError, match=r"DataLoader: len.*_Stream lacks"):
        len(loader)
    assert [b.tolist() for b in loader] == [[0, 1], [2, 3], [4]]


def test_persistent_workers_without_workers_is_refused():
    with pytest.raises(ValueError, match="persistent_workers option needs num_workers > 0"):
        TD.DataLoader([1], persistent_workers=True)
    with pytest.raises(rg.InvalidArgumentError, match="persistent_workers option needs"):
        RD.DataLoader([1], persistent_workers=True)
    assert len(RD.DataLoader([1], num_workers=1, persistent_workers=True)) == 1


# == random_split: a fraction outside [0, 1] =====================================================
def test_random_split_names_the_fraction_outside_0_1():
    # The fractions were turned into counts first: "sum of input lengths [15, -5] does not
    # equal the length of the input dataset (10)", counts the caller never wrote.
    with pytest.raises(ValueError, match="Fraction at index 0 is not between 0 and 1"):
        TD.random_split(range(10), [1.5, -0.5])
    with pytest.raises(rg.InvalidArgumentError, match=r"fraction at index 0 is 1.5, not betw"):
        RD.random_split(range(10), [1.5, -0.5])


# == nn.init ====================================================================================
@pytest.mark.parametrize(
    ("name", "args"),
    [
        ("normal_", ()),
        ("uniform_", ()),
        ("xavier_uniform_", ()),
        ("xavier_normal_", ()),
        ("kaiming_uniform_", ()),
        ("kaiming_normal_", ()),
        ("trunc_normal_", ()),
        ("orthogonal_", ()),
        ("sparse_", (0.5,)),
    ],
)
def test_random_init_of_an_int_tensor_is_a_dtype_error(name, args):
    # The float draws were cast into the int tensor (normal_ gave mostly zeros); torch
    # refuses ("normal_kernel_cpu" not implemented for 'Long').
    with pytest.raises((NotImplementedError, RuntimeError)):
        getattr(torch.nn.init, name)(torch.zeros(3, 3, dtype=torch.int64), *args)
    t = rg.zeros((3, 3), dtype=rg.int64)
    with pytest.raises(rg.DTypeError, match=f"{name}: random values need a floating-point"):
        getattr(nn.init, name)(t, *args)
    assert t.tolist() == [[0] * 3] * 3


@pytest.mark.parametrize("name", ["kaiming_uniform_", "kaiming_normal_"])
def test_kaiming_of_an_empty_1d_tensor_is_a_no_op(name):
    # A ShapeError (no fans for a 1-d tensor) where torch warns and returns the tensor.
    with pytest.warns(UserWarning, match="zero-element tensors is a no-op"):
        expected = getattr(torch.nn.init, name)(torch.empty(0))
    t = rg.empty(0)
    with pytest.warns(UserWarning, match="zero-element tensors is a no-op"):
        assert getattr(nn.init, name)(t) is t
    assert t.shape == tuple(expected.shape)


def test_dirac_with_groups_not_dividing_dim_0_is_refused():
    # Taken: 3 output channels in 2 groups made a 1-channel group pattern, with the third
    # channel left zero.
    with pytest.raises(ValueError, match="dim 0 must be divisible by groups"):
        torch.nn.init.dirac_(torch.empty(3, 2, 3), groups=2)
    with pytest.raises(rg.ShapeError, match=r"dirac_: dim 0 of shape \[3, 2, 3\] .*groups=2"):
        nn.init.dirac_(rg.empty((3, 2, 3)), groups=2)


@pytest.mark.parametrize("slope", [True, "a", None])
def test_calculate_gain_refuses_a_slope_that_is_not_a_number(slope):
    # True read as slope 1 (gain 1.0), where torch refuses a bool.
    if slope is None:
        assert nn.init.calculate_gain("leaky_relu") == torch.nn.init.calculate_gain("leaky_relu")
        return
    with pytest.raises(ValueError, match="not a valid number"):
        torch.nn.init.calculate_gain("leaky_relu", slope)
    with pytest.raises(rg.InvalidArgumentError, match="calculate_gain: negative_slope"):
        nn.init.calculate_gain("leaky_relu", slope)


def test_a_namedtuple_batch_still_collates():
    # the collate check above keeps namedtuples and lists of numbers as they were
    pair = collections.namedtuple("pair", "a b")
    batch = [pair(rg.ones(2), 1), pair(rg.zeros(2), 2)]
    out = RD.default_collate(batch)
    tout = TD.default_collate([pair(torch.ones(2), 1), pair(torch.zeros(2), 2)])
    assert type(out).__name__ == "pair"
    np.testing.assert_array_equal(out.a.numpy(), tout.a.numpy())
    np.testing.assert_array_equal(out.b.numpy(), tout.b.numpy())
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert RD.default_collate([[1, 2], [3, 4]])[0].tolist() == [1, 3]


# == tensor(): float64 NumPy data inside lists, big ints as floats ==============================
@pytest.mark.parametrize(
    "make",
    [
        lambda m: [np.float64(1.5), np.float64(2.0)],
        lambda m: [np.ones(2), np.zeros(2)],
        lambda m: [1.5, np.float64(2.0)],
        lambda m: [[1], [np.float64(2.5)]],
        lambda m: [m.ones(1, dtype=m.float64), m.zeros(1)],
        lambda m: [np.float32(1.5), 2.5],
        lambda m: [1.5, 2.5],
    ],
)
def test_tensor_of_a_list_holding_float64_numpy_data_is_float64(make):
    # Python floats' default dtype (float32) was taken for the whole list: torch promotes the
    # list's float64 NumPy scalars, arrays and tensors to float64.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch: "a list of numpy.ndarrays is extremely slow"
        expected = torch.tensor(make(torch))
    got = rg.tensor(make(rg))
    assert str(got.dtype) == str(expected.dtype).removeprefix("torch.")
    np.testing.assert_array_equal(got.numpy(), expected.numpy())


def test_tensor_of_ints_past_int64_as_floats():
    # Refused ("cannot make a tensor from data of dtype object"); torch gives the floats.
    for dtype in ("float32", "float64"):
        expected = torch.tensor([2**70, -(2**65), 3], dtype=getattr(torch, dtype))
        got = rg.tensor([2**70, -(2**65), 3], dtype=getattr(rg, dtype))
        assert str(got.dtype) == dtype
        np.testing.assert_array_equal(got.numpy(), expected.numpy())
    with pytest.raises(rg.InvalidArgumentError, match="1180591620717411303424 is out of int64"):
        rg.tensor([2**70], dtype=rg.int64)


# == Tensor: format spec of a tensor of many elements, ``in`` with a string ======================
def test_format_spec_of_a_tensor_of_many_elements_is_a_dtype_error():
    # object.__format__'s bare TypeError ("unsupported format string passed to Tensor").
    with pytest.raises(TypeError, match="unsupported format string"):
        f"{torch.ones(2):.2f}"
    with pytest.raises(rg.DTypeError, match=r"__format__: format spec '.2f' needs a 0-d .*\[2\]"):
        f"{rg.ones(2):.2f}"
    assert f"{rg.tensor(1.25):.1f}" == f"{torch.tensor(1.25):.1f}"
    assert f"{rg.ones(2)}" == str(rg.ones(2))


def test_in_with_a_string_is_a_dtype_error():
    # Iteration's == read "a" as never there (False); torch refuses.
    with pytest.raises(RuntimeError, match="only supports Tensor or scalar"):
        "a" in torch.tensor([1, 2])  # noqa: B015
    with pytest.raises(rg.DTypeError, match=r"__contains__: .* got str"):
        "a" in rg.tensor([1, 2])  # noqa: B015
    t, tt = rg.tensor([[1.0, 2.0], [3.0, 4.0]]), torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    for element in (2, 2.5, True, 4.0):
        assert (element in t) == (element in tt)
    assert (rg.tensor([3.0, 4.0]) in t) == (torch.tensor([3.0, 4.0]) in tt)


# == datasets and loaders: more indices named ==================================================
def test_stack_dataset_index_past_the_end_is_named():
    # The first dataset's bare "list index out of range".
    with pytest.raises(IndexError):
        TD.StackDataset([1, 2], [3, 4])[5]
    with pytest.raises(rg.IndexOutOfRangeError, match="StackDataset: index 5 is out of range"):
        RD.StackDataset([1, 2], [3, 4])[5]
    assert RD.StackDataset([1, 2], [3, 4])[-1] == TD.StackDataset([1, 2], [3, 4])[-1]


def test_len_of_a_tensor_dataset_without_tensors_is_named():
    # A bare "tuple index out of range" from inside __len__.
    with pytest.raises(IndexError):
        len(TD.TensorDataset())
    with pytest.raises(rg.IndexOutOfRangeError, match="TensorDataset: holds no tensors"):
        len(RD.TensorDataset())


def test_batch_sampler_yielding_single_indices_is_named():
    # A bare "'int' object is not iterable" from the loader's draw.
    with pytest.raises(TypeError):
        list(TD.DataLoader([1, 2], batch_sampler=[0, 1]))
    with pytest.raises(rg.DTypeError, match="DataLoader: batch_sampler yielded 0, not a batch"):
        list(RD.DataLoader([1, 2], batch_sampler=[0, 1]))


def test_sampler_of_floats_over_a_list_is_named():
    # The list's bare "list indices must be integers or slices, not float".
    with pytest.raises(TypeError):
        list(TD.DataLoader([1, 2], sampler=[0.0, 1.0]))
    with pytest.raises(rg.DTypeError, match=r"DataLoader: the sampler drew index 0.0 \(float\)"):
        list(RD.DataLoader([1, 2], sampler=[0.0, 1.0]))
    assert [b.tolist() for b in RD.DataLoader([1, 2], sampler=[1, 0])] == [[2], [1]]
