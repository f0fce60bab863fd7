"""Round 63's defects in ``torch.utils.data`` (and the ``multinomial`` under its weighted
sampler), each against torch: refusals that torch raises as ``RuntimeError`` (a batch whose
tensors, arrays or lists differ in size; ``multinomial``'s weights and counts, so a
``WeightedRandomSampler`` drawing more than it has without replacement; a ``RandomSampler``
with replacement of an empty dataset) were only ``ValueError``s; a ``RandomSampler`` without
replacement of an empty dataset raised a bare ``ZeroDivisionError`` of no error class of ours;
``len()`` of a ``ChainDataset`` of a stream without ``__len__`` a bare ``TypeError``; a
batch of a NumPy scalar and then an array a ``ValueError`` where torch's is a ``TypeError``;
the string fields of named tuples collated to lists where torch keeps the tuple ``zip`` makes;
a ``ConcatDataset`` index below ``-len`` was an ``IndexError`` where torch's is a ``ValueError``.
"""

from __future__ import annotations

import numpy as np
import pytest

import retrograd as rg

torch = pytest.importorskip("torch")


def _raised(make, lib):
    try:
        make(lib)
    except Exception as error:  # what each library raises is the point here
        return error
    raise AssertionError(f"{lib.__name__} raised nothing")


def _check_like_torch(make, ours_is):
    theirs = _raised(make, torch)
    ours = _raised(make, rg)
    assert isinstance(ours, rg.RetrogradError), repr(ours)
    assert isinstance(ours, type(theirs)), f"{ours!r} is no {type(theirs).__name__}: {theirs!r}"
    assert isinstance(ours, ours_is), repr(ours)
    return ours


# -- default_collate: samples of different sizes are torch's RuntimeError --------------------------
COLLATE_MISMATCHES = {
    "tensors": lambda lib: [lib.zeros(2, 3), lib.zeros(2, 3), lib.zeros(3, 3)],
    "tensors in dicts": lambda lib: [{"x": lib.zeros(2)}, {"x": lib.zeros(1)}],
    "numpy arrays": lambda lib: [np.zeros(2), np.zeros(3)],
    "numpy array then a number": lambda lib: [np.zeros(2), 1.5],
    "lists": lambda lib: [[1, 2.0], [1]],
}


@pytest.mark.parametrize("name", sorted(COLLATE_MISMATCHES))
def test_collate_of_samples_of_different_sizes_is_a_runtime_error(name):
    batch = COLLATE_MISMATCHES[name]
    ours = _check_like_torch(lambda lib: lib.utils.data.default_collate(batch(lib)), rg.ShapeError)
    assert "default_collate" in str(ours)


def test_loader_batch_of_different_sizes_is_a_runtime_error():
    def read(lib):
        data = [lib.zeros(2), lib.zeros(2), lib.zeros(3)]
        return list(lib.utils.data.DataLoader(data, batch_size=3))

    ours = _check_like_torch(read, rg.ShapeError)
    assert "[2]" in str(ours) and "[3]" in str(ours)


# -- multinomial and the weighted sampler ------------------------------------------------------
MULTINOMIAL_REFUSALS = {
    "more draws than categories": lambda lib: lib.multinomial(lib.tensor([1.0, 2.0]), 3),
    "a negative weight": lambda lib: lib.multinomial(lib.tensor([1.0, -2.0]), 1, True),
    "an infinite weight": lambda lib: lib.multinomial(lib.tensor([1.0, float("inf")]), 1),
    "all zero": lambda lib: lib.multinomial(lib.zeros(2, 3), 1, True),
    "no draw": lambda lib: lib.multinomial(lib.tensor([1.0, 2.0]), 0, True),
}


@pytest.mark.parametrize("name", sorted(MULTINOMIAL_REFUSALS))
def test_multinomial_refusals_are_runtime_errors(name):
    ours = _check_like_torch(MULTINOMIAL_REFUSALS[name], rg.InvalidArgumentError)
    assert isinstance(ours, rg.errors.SamplingError)
    assert "multinomial" in str(ours)


def test_weighted_sampler_drawing_more_than_it_has_is_a_runtime_error():
    def draw(lib):
        return list(lib.utils.data.WeightedRandomSampler([0.5, 1.0, 2.0], 4, replacement=False))

    ours = _check_like_torch(draw, rg.InvalidArgumentError)
    assert "4" in str(ours) and "3" in str(ours)


# -- RandomSampler of an empty dataset ------------------------------------------------------------
@pytest.mark.parametrize("replacement", [False, True])
def test_random_sampler_of_an_empty_dataset(replacement):
    def draw(lib):
        sampler = lib.utils.data.RandomSampler([], replacement=replacement, num_samples=3)
        return list(sampler)

    ours = _check_like_torch(draw, rg.InvalidArgumentError)
    assert "RandomSampler" in str(ours) and "empty" in str(ours)


# -- ChainDataset of a stream without a length -----------------------------------------------------
def test_chain_dataset_len_of_a_stream_without_len():
    def length(lib):
        class Stream(lib.utils.data.IterableDataset):
            def __iter__(self):
                return iter(range(3))

        class Sized(Stream):
            def __len__(self):
                return 3

        chain = lib.utils.data.ChainDataset([Sized(), Stream()])
        assert list(chain) == [0, 1, 2, 0, 1, 2]
        return len(chain)

    ours = _check_like_torch(length, rg.DTypeError)
    assert "ChainDataset" in str(ours) and "Stream" in str(ours)


# -- NumPy scalars, named tuples ------------------------------------------------------------------
def test_collate_of_a_numpy_scalar_then_an_array_is_a_type_error():
    batch = [np.float32(1.0), np.zeros(2, np.float32)]
    ours = _check_like_torch(lambda lib: lib.utils.data.default_collate(batch), rg.DTypeError)
    assert "NumPy scalar" in str(ours) and "[2]" in str(ours)


def test_collate_of_named_tuples_keeps_string_fields_a_tuple():
    import collections

    pair = collections.namedtuple("pair", "name x")
    for lib in (torch, rg):
        batch = [pair("a", lib.tensor([1.0])), pair("b", lib.tensor([2.0]))]
        out = lib.utils.data.default_collate(batch)
        assert type(out) is pair
        assert out.name == ("a", "b")
        assert type(out.name) is tuple, lib.__name__
        assert out.x.tolist() == [[1.0], [2.0]]


def test_concat_dataset_index_below_minus_len_is_a_value_error():
    def read(lib, index):
        return lib.utils.data.ConcatDataset([[1, 2], [3]])[index]

    ours = _check_like_torch(lambda lib: read(lib, -4), rg.InvalidArgumentError)
    assert "-4" in str(ours) and "ConcatDataset" in str(ours)
    _check_like_torch(lambda lib: read(lib, 3), rg.IndexOutOfRangeError)  # past the end
    assert read(rg, -3) == read(torch, -3) == 1
