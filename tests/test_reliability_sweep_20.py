"""Round 20 of the reliability sweep: the data pipeline (``rg.utils.data``), ``nn.init`` on odd
shapes and dtypes, ``nn.utils`` with bad input, and tensors made from odd Python input, each
case run in torch too.

Where torch raises, retrograd must raise an error of API.md section 7's hierarchy (an IndexError
where torch's is one) naming the op;
where torch gives a value, retrograd must give the same value. The defects it found have their
regressions in ``test_reliability_regressions_20.py``."""

from __future__ import annotations

import collections
import warnings

import numpy as np
import pytest
import torch
import torch.nn.utils.rnn as TR  # noqa: N812
import torch.utils.data as TD  # noqa: N812

import retrograd as rg
import retrograd.nn.utils.rnn as RR  # noqa: N812
import retrograd.utils.data as RD  # noqa: N812
from retrograd import nn


def _value(x):
    """A comparable plain value: tensors as (dtype name, nested list), containers through."""
    if isinstance(x, rg.Tensor | torch.Tensor):
        return (str(x.dtype).removeprefix("torch."), x.tolist())
    if isinstance(x, dict):
        return {k: _value(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_value(v) for v in x]
    return x


def _same(run_rg, run_torch, op: str):
    """torch's outcome: a value retrograd must equal, or an error retrograd must raise as an
    rg error naming ``op`` and sharing torch's builtin base where it has one."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            expected = run_torch()
        except Exception as error:  # torch's outcome decides what we expect
            expected = error
        if isinstance(expected, Exception):
            with pytest.raises(rg.RetrogradError) as info:
                run_rg()
            assert op in str(info.value), (op, str(info.value))
            if type(expected) is IndexError and "imension" not in str(expected):
                # torch's IndexError of an index (not of a dimension: a ShapeError here)
                assert isinstance(info.value, IndexError), (type(info.value), expected)
            return
        assert _value(run_rg()) == _value(expected)


# == tensor creation from odd Python input =======================================================
_BIG = 2**63
_DATA = {
    "ragged": [[1, 2], [3]],
    "ragged-scalar": [[1, 2], 3],
    "bool-int": [True, 2],
    "int-float": [1, 2.5],
    "bool-float": [True, 2.5],
    "int64-edge": [-_BIG, _BIG - 1],
    "past-int64": [_BIG],
    "past-int64-neg": [-_BIG - 1],
    "string": "abc",
    "strings": ["a", "b"],
    "none": None,
    "list-none": [1, None],
    "np-f32": np.float32(1.5),
    "np-0d": np.array(3.5),
    "np-strided": np.arange(12.0).reshape(3, 4)[:, ::2],
    "np-object": np.array([1, "a"], dtype=object),
    "np-f64-in-list": [np.float64(0.5), 2.0],
    "np-f32-in-list": [np.float32(0.5), 2.0],
    "np-arrays": [np.arange(2.0), np.ones(2)],
    "np-arrays-ragged": [np.ones(2), np.ones(3)],
    "empty": [],
    "empty-nested": [[], []],
    "tuple": ((1, 2), (3, 4)),
    "range": range(3),
    "dict": {1: 2},
    "bytes": b"ab",
}


@pytest.mark.parametrize("name", list(_DATA))
def test_tensor_of_odd_python_input_as_torch(name):
    data = _DATA[name]
    _same(lambda: rg.tensor(data), lambda: torch.tensor(data), "tensor")


@pytest.mark.parametrize(
    ("data", "dtype"),
    [
        ([2**70, 1], "float64"),
        ([2**70], "int64"),
        ([1e30], "int64"),
        ([0.5, 0.0, -2.0], "bool"),
        ([1.7, -1.7], "int64"),
        ([True, False], "float32"),
    ],
)
def test_tensor_with_a_dtype_as_torch(data, dtype):
    _same(
        lambda: rg.tensor(data, dtype=getattr(rg, dtype)),
        lambda: torch.tensor(data, dtype=getattr(torch, dtype)),
        "tensor",
    )


def test_tensor_of_lists_of_tensors_as_torch():
    for make in (
        lambda m: [m.tensor(1.0), m.tensor(2.5)],
        lambda m: [m.ones(1), 3.0],
        lambda m: [[m.tensor(2)], [3]],
    ):
        _same(lambda f=make: rg.tensor(f(rg)), lambda f=make: torch.tensor(f(torch)), "tensor")


# == creation functions with bad sizes ==========================================================
@pytest.mark.parametrize(
    "call",
    [
        lambda m: m.ones(-1),
        lambda m: m.ones(2.5),
        lambda m: m.zeros("a"),
        lambda m: m.arange(0, 5, 0),
        lambda m: m.arange(0, 5, -1),
        lambda m: m.linspace(0, 1, -1),
        lambda m: m.eye(-1),
        lambda m: m.randint(5, 5, (2,)),
        lambda m: m.full((2,), True),
        lambda m: m.arange(np.int64(3)),
    ],
)
def test_creation_with_bad_sizes_as_torch(call):
    _same(lambda: call(rg), lambda: call(torch), "")


def test_tensor_protocols_as_torch():
    t, tt = rg.tensor([1.0, 2.0]), torch.tensor([1.0, 2.0])
    _same(lambda: f"{t:.1f}", lambda: f"{tt:.1f}", "__format__")
    _same(lambda: "x" in t, lambda: "x" in tt, "__contains__")
    _same(lambda: 2 in t, lambda: 2 in tt, "__contains__")
    _same(lambda: f"{t[0]:.3f}", lambda: f"{tt[0]:.3f}", "")
    with pytest.raises(rg.RetrogradError):
        float(t)
    assert [1, 2, 3][rg.tensor(1)] == 2


# == the data pipeline ==========================================================================
_P = collections.namedtuple("_P", "a b")


def _samples(m):
    return [
        {"x": m.ones(2) * i, "y": (i, float(i), "s"), "p": _P(m.zeros(1) + i, i)} for i in range(5)
    ]


def test_collate_of_nested_samples_as_torch():
    got = [_value(b) for b in RD.DataLoader(_samples(rg), batch_size=2)]
    expected = [_value(b) for b in TD.DataLoader(_samples(torch), batch_size=2)]
    assert got == expected


@pytest.mark.parametrize(
    "batch",
    [
        lambda m: [m.ones(2), m.ones(3)],
        lambda m: [{"a": 1}, {"b": 2}],
        lambda m: [(1, 2), (1,)],
        lambda m: [None, None],
        lambda m: [m.ones(1), 2],
        lambda m: [[1, 2], 3],
        lambda m: [np.ones(2), np.zeros(2)],
        lambda m: [np.float32(1), np.float32(2)],
        lambda m: [True, False],
        lambda m: [1, 2.5],
        lambda m: ["a", "b"],
        lambda m: [m.ones(1), m.ones(1, dtype=m.int64)],
    ],
)
def test_default_collate_as_torch(batch):
    def run(data_module, m):
        return data_module.default_collate(batch(m))

    expected_kind = None
    try:
        run(TD, torch)
    except KeyError:  # torch's bare KeyError: ours a KeyMismatchError (a KeyError too)
        expected_kind = KeyError
    except Exception:  # the other errors: _same checks them
        pass
    if expected_kind is KeyError:
        with pytest.raises(rg.errors.KeyMismatchError, match="default_collate"):
            run(RD, rg)
        return
    _same(lambda: run(RD, rg), lambda: run(TD, torch), "default_collate")


@pytest.mark.parametrize(
    "options",
    [
        {"batch_size": 0},
        {"batch_size": -1},
        {"batch_size": 1.5},
        {"batch_size": 2, "batch_sampler": [[0, 1]]},
        {"shuffle": True, "batch_sampler": [[0, 1]]},
        {"shuffle": True, "sampler": [0, 1]},
        {"drop_last": True, "batch_sampler": [[0, 1]]},
        {"batch_size": None, "drop_last": True},
        {"num_workers": -1},
        {"prefetch_factor": 2},
        {"timeout": -1},
        {"persistent_workers": True},
        {"collate_fn": 3},
        {"batch_sampler": [[0, 1], [2]]},
        {"batch_sampler": [[0, 5]]},
        {"sampler": [2, 0]},
        {"sampler": [7]},
        {"batch_size": 2, "drop_last": True},
        {"batch_size": None},
        {"batch_sampler": [0, 1]},
        {"sampler": [0.0, 1.0]},
        {"sampler": 3},
    ],
)
def test_dataloader_options_as_torch(options):
    data = [1, 2, 3]

    def run(data_module):
        loader = data_module.DataLoader(data, **options)
        return [len(loader), list(loader)]

    _same(lambda: run(RD), lambda: run(TD), "DataLoader")


class _RStream(RD.IterableDataset):
    def __iter__(self):
        return iter(range(5))


class _TStream(TD.IterableDataset):
    def __iter__(self):
        return iter(range(5))


@pytest.mark.parametrize(
    "options",
    [
        {"shuffle": True},
        {"sampler": [0]},
        {"batch_sampler": [[0]]},
        {"batch_size": 2, "drop_last": True},
        {"batch_size": 2},
        {"batch_size": None},
    ],
)
def test_dataloader_over_a_stream_as_torch(options):
    _same(
        lambda: list(RD.DataLoader(_RStream(), **options)),
        lambda: list(TD.DataLoader(_TStream(), **options)),
        "DataLoader",
    )
    if options in ({"batch_size": 2}, {"batch_size": None}):
        with pytest.raises(rg.DTypeError, match="DataLoader"):
            len(RD.DataLoader(_RStream(), **options))


@pytest.mark.parametrize(
    "lengths",
    [[0.3, 0.7], [0.33, 0.33, 0.34], [3, 7], [3, 4], [0.5, 0.6], [1.5, -0.5], [], [10, 0]],
)
def test_random_split_as_torch(lengths):
    def run(data_module):
        return sorted(len(s) for s in data_module.random_split(range(10), lengths))

    _same(lambda: run(RD), lambda: run(TD), "random_split")


def test_random_split_covers_the_dataset_once():
    parts = RD.random_split(range(10), [0.25, 0.25, 0.5])
    assert sorted(i for part in parts for i in part) == list(range(10))
    assert [len(p) for p in parts] == [
        len(p) for p in TD.random_split(range(10), [0.25] * 2 + [0.5])
    ]


@pytest.mark.parametrize(
    "call",
    [
        lambda d: d.Subset([1, 2, 3], [2, 0])[1],
        lambda d: d.Subset([1, 2, 3], [5])[0],
        lambda d: d.Subset([1, 2, 3], [2, 0])[-2],
        lambda d: d.ConcatDataset([[1, 2], [3]])[-1],
        lambda d: d.ConcatDataset([[1, 2], [3]])[3],
        lambda d: len(d.ConcatDataset([[1, 2], [3], []])),
        lambda d: d.ConcatDataset([]),
        lambda d: d.StackDataset([1, 2], [3, 4])[5],
        lambda d: d.StackDataset([1, 2], [3, 4])[-2],
        lambda d: d.StackDataset(a=[1, 2], b=[3, 4])[1],
        lambda d: d.StackDataset([1, 2], [1]),
        lambda d: d.StackDataset(),
        lambda d: len(d.TensorDataset()),
        lambda d: d.TensorDataset(np.ones(3), np.ones(4)),
        lambda d: list(d.ChainDataset([d.StackDataset([1, 2])])),
        lambda d: list(d.DistributedSampler(list(range(5)), num_replicas=2, rank=1, shuffle=False)),
        lambda d: list(
            d.DistributedSampler(range(5), num_replicas=2, rank=1, shuffle=False, drop_last=True)
        ),
        lambda d: d.DistributedSampler(list(range(5)), num_replicas=2, rank=2),
        lambda d: d.DistributedSampler(list(range(5)), num_replicas=0, rank=0),
    ],
)
def test_subset_and_concat_as_torch(call):
    _same(lambda: call(RD), lambda: call(TD), "")


@pytest.mark.parametrize(
    ("weights", "num", "replacement"),
    [
        ([1, -1], 2, True),
        ([0, 0], 2, True),
        ([1, float("nan")], 2, True),
        ([1, float("inf")], 2, True),
        ([[1, 2]], 2, True),
        ([1, 1], 3, False),
        ([1, 1], 0, True),
        ([1, 1], 1.5, True),
        ([1, 1], 2, "no"),
        ([0, 1], 4, True),
        ([0, 0, 1], 1, False),
    ],
)
def test_weighted_random_sampler_as_torch(weights, num, replacement):
    def run(data_module):
        return sorted(data_module.WeightedRandomSampler(weights, num, replacement=replacement))

    _same(lambda: run(RD), lambda: run(TD), "")


@pytest.mark.parametrize(
    "call",
    [
        lambda d: d.RandomSampler([1, 2], num_samples=0),
        lambda d: d.RandomSampler([1, 2], replacement=1),
        lambda d: len(list(d.RandomSampler([1, 2], num_samples=5))),
        lambda d: d.BatchSampler([0, 1], 0, False),
        lambda d: d.BatchSampler([0, 1], 1, "x"),
        lambda d: d.BatchSampler([0, 1], True, False),
        lambda d: list(d.BatchSampler(range(5), 2, True)),
        lambda d: list(d.BatchSampler(range(5), 2, False)),
        lambda d: sorted(d.SubsetRandomSampler([3, 1])),
        lambda d: list(d.SequentialSampler(range(3))),
    ],
)
def test_samplers_as_torch(call):
    _same(lambda: call(RD), lambda: call(TD), "")


def test_a_failed_batch_leaves_the_loader_usable():
    loader = RD.DataLoader([1, 2, 3], sampler=[0, 9, 2])
    batches = iter(loader)
    assert next(batches).tolist() == [1]
    with pytest.raises(rg.IndexOutOfRangeError, match="index 9"):
        next(batches)
    assert next(batches).tolist() == [3]
    assert [b.tolist() for b in RD.DataLoader([1, 2, 3], batch_size=2)] == [[1, 2], [3]]


# == nn.init ====================================================================================
_SHAPES = [(), (3,), (0,), (0, 3), (3, 0), (2, 3, 0), (2, 3, 4)]
_INITS = [
    ("xavier_uniform_", ()),
    ("xavier_normal_", ()),
    ("kaiming_uniform_", ()),
    ("kaiming_normal_", ()),
    ("orthogonal_", ()),
    ("sparse_", (0.5,)),
    ("eye_", ()),
    ("dirac_", ()),
    ("zeros_", ()),
    ("constant_", (2.0,)),
]


@pytest.mark.parametrize("shape", _SHAPES)
@pytest.mark.parametrize(("name", "args"), _INITS)
def test_init_on_odd_shapes_as_torch(name, args, shape):
    def run(m, module):
        t = getattr(module, name)(m.empty(shape), *args)
        return (
            tuple(t.shape),
            t.tolist() if name in ("eye_", "dirac_", "zeros_", "constant_") else None,
        )

    _same(lambda: run(rg, nn.init), lambda: run(torch, torch.nn.init), name)


@pytest.mark.parametrize(
    "call",
    [
        lambda m, i: i.kaiming_uniform_(m.empty(2, 3), mode="x"),
        lambda m, i: i.kaiming_uniform_(m.empty(2, 3), nonlinearity="x"),
        lambda m, i: i.calculate_gain("x"),
        lambda m, i: i.calculate_gain("leaky_relu", "a"),
        lambda m, i: i.calculate_gain("leaky_relu", True),
        lambda m, i: i.calculate_gain("leaky_relu", 0.2),
        lambda m, i: i.calculate_gain("selu"),
        lambda m, i: i.uniform_(m.empty(3), 2, 1),
        lambda m, i: i.normal_(m.empty(3), 0, -1),
        lambda m, i: i.normal_(m.zeros(3, dtype=m.int64)),
        lambda m, i: i.zeros_(m.ones(3, dtype=m.int64)).tolist(),
        lambda m, i: i.dirac_(m.empty(3, 2, 3), groups=2),
        lambda m, i: i.dirac_(m.empty(4, 2, 3), groups=2).tolist(),
        lambda m, i: i._calculate_fan_in_and_fan_out(m.empty(3)),
        lambda m, i: i._calculate_fan_in_and_fan_out(m.empty(4, 3, 2)),
    ],
)
def test_init_arguments_as_torch(call):
    _same(lambda: call(rg, nn.init), lambda: call(torch, torch.nn.init), "")


# == nn.utils ===================================================================================
def _params(m, module):
    return [module.Parameter(m.ones(3)), module.Parameter(m.ones(2, 2))]


@pytest.mark.parametrize(
    "call",
    [
        lambda m, u, mod: u.parameters_to_vector([]),
        lambda m, u, mod: u.parameters_to_vector(_params(m, mod)),
        lambda m, u, mod: u.vector_to_parameters(m.ones(3), _params(m, mod)),
        lambda m, u, mod: u.vector_to_parameters(m.ones(30), _params(m, mod)),
        lambda m, u, mod: u.vector_to_parameters(m.ones(7, 1), _params(m, mod)),
        lambda m, u, mod: u.vector_to_parameters([1.0] * 7, _params(m, mod)),
        lambda m, u, mod: u.weight_norm(mod.Linear(2, 2), name="x"),
        lambda m, u, mod: u.weight_norm(mod.Linear(2, 2), dim=5),
        lambda m, u, mod: u.remove_weight_norm(mod.Linear(2, 2)),
        lambda m, u, mod: u.spectral_norm(mod.Linear(2, 2), name="x"),
        lambda m, u, mod: u.remove_spectral_norm(mod.Linear(2, 2)),
        lambda m, u, mod: u.parametrizations.orthogonal(mod.Linear(2, 2), orthogonal_map="x"),
        lambda m, u, mod: u.parametrizations.orthogonal(mod.Linear(2, 2), name="bias"),
    ],
)
def test_nn_utils_misuse_as_torch(call):
    _same(
        lambda: call(rg, nn.utils, nn),
        lambda: call(torch, torch.nn.utils, torch.nn),
        "",
    )


@pytest.mark.parametrize(
    "call",
    [
        lambda m, r: r.pack_padded_sequence(m.ones(3, 2, 1), [3, 0]),
        lambda m, r: r.pack_padded_sequence(m.ones(3, 2, 1), [2, 3]),
        lambda m, r: r.pack_padded_sequence(m.ones(3, 2, 1), [3, -1]),
        lambda m, r: r.pack_padded_sequence(m.ones(3, 2, 1), [3]),
        lambda m, r: r.pack_padded_sequence(m.ones(3, 2, 1), [[3, 2]]),
        lambda m, r: r.pack_padded_sequence(m.ones(()), [1]),
        lambda m, r: r.pad_sequence([]),
        lambda m, r: r.pad_sequence([m.ones(2, 3), m.ones(1, 4)]),
        lambda m, r: r.pad_sequence([m.ones(()), m.ones(())]),
        lambda m, r: r.pad_sequence([m.ones(2)], padding_side="x"),
        lambda m, r: r.pad_sequence([m.ones(2), m.ones(1)], batch_first=True, padding_value=-1),
        lambda m, r: r.pad_packed_sequence(
            r.pack_padded_sequence(m.ones(3, 2, 1), [3, 2]), total_length=2
        ),
        lambda m, r: r.pad_packed_sequence(
            r.pack_padded_sequence(m.ones(3, 2, 1), [3, 2]), total_length=5
        ),
        lambda m, r: r.pack_sequence([]),
        lambda m, r: r.pack_sequence([m.ones(1), m.ones(2)]),
        lambda m, r: r.pack_sequence([m.ones(2), m.ones(0)]),
    ],
)
def test_rnn_packing_with_bad_lengths_as_torch(call):
    _same(lambda: call(rg, RR), lambda: call(torch, TR), "")


def test_memory_stays_flat_over_epochs_with_failing_batches():
    # Each epoch: a shuffled pass, a batch failing mid-epoch, a collate failing; what stays
    # allocated after 20 epochs is not more than after the first ones (no saved tracebacks,
    # no iterators kept).
    import gc
    import tracemalloc

    ds = RD.TensorDataset(rg.randn(16, 4), rg.arange(16))

    def epoch():
        for _x, _y in RD.DataLoader(ds, batch_size=8, shuffle=True):
            pass
        batches = iter(RD.DataLoader([1, 2, 3], sampler=[0, 9, 2]))
        next(batches)
        with pytest.raises(IndexError):
            next(batches)
        with pytest.raises(TypeError):
            RD.default_collate([rg.ones(1), 2])

    for _ in range(3):
        epoch()
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for _ in range(20):
            epoch()
        gc.collect()
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert grown < 16 * 1024, grown
