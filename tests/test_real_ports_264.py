# ruff: noqa: E501  (the programs are kept as their authors wrote them: long lines)
"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):
the "PyTorch Benchmark" recipe (pytorch/tutorials ``recipes_source/recipes/benchmark.py``), run
as a script (``__main__``, so its ``setup='from __main__ import batched_dot_mul_sum'`` works) under
torch and ported: ``batched_dot_mul_sum`` and ``batched_dot_bmm`` (``torch.bmm(a, b).flatten(-3)``)
checked equal with ``allclose``, ``timeit.Timer`` against ``benchmark.Timer(...).timeit(100)``,
``num_threads``/``label``/``sub_label``, ``blocked_autorange`` and its ``mean``/``median``,
``Compare`` over sizes and thread counts, A/B environments pickled and loaded back
(``trim_significant_figures``, ``colorize``), and the fuzzed inputs of section 7:
``Fuzzer(parameters=[FuzzedParameter(..., distribution='loguniform')], tensors=[FuzzedTensor(...,
probability_contiguous=0.6)], seed=0)`` and ``op_fuzzers.binary.BinaryOpFuzzer(seed=0)``.

Cut down: ``min_run_time`` 0.01 s rather than 1 s, sizes ``[1, 64]`` and threads ``[1, 4]``,
three draws of each fuzzer rather than ten; the CUDA section and section 8 (C++ through
``cpp_extension`` and Callgrind) left out. The timings differ run to run; what is compared is
what the recipe shows besides them: the measurements' titles, the tables' rows and columns,
and the fuzzed sizes and layouts, which for ``seed=0`` are the recipe's own printed ones.

The lines changed: the ``import`` lines. The defect found: there was no ``Fuzzer``,
``FuzzedParameter``, ``FuzzedTensor``, ``ParameterAlias`` nor ``op_fuzzers`` (torch 2.13's own
``BinaryOpFuzzer`` refuses its normalized distributions, an inverted check, so the binary
fuzzer's draws are checked against the recipe's printed table).
"""

from __future__ import annotations

import sys
import types

import torch

import retrograd as rg

BENCHMARK_SOURCE = """
import torch


def batched_dot_mul_sum(a, b):
    '''Computes batched dot by multiplying and summing'''
    return a.mul(b).sum(-1)


def batched_dot_bmm(a, b):
    '''Computes batched dot by reducing to ``bmm``'''
    a = a.reshape(-1, 1, a.shape[-1])
    b = b.reshape(-1, b.shape[-1], 1)
    return torch.bmm(a, b).flatten(-3)


# Input for benchmarking
x = torch.randn(10000, 64)

# Ensure that both functions compute the same output
assert batched_dot_mul_sum(x, x).allclose(batched_dot_bmm(x, x))

import timeit

t0 = timeit.Timer(
    stmt='batched_dot_mul_sum(x, x)',
    setup='from __main__ import batched_dot_mul_sum',
    globals={'x': x})

t1 = timeit.Timer(
    stmt='batched_dot_bmm(x, x)',
    setup='from __main__ import batched_dot_bmm',
    globals={'x': x})

print(f'mul_sum(x, x):  {t0.timeit(100) / 100 * 1e6:>5.1f} us')
print(f'bmm(x, x):      {t1.timeit(100) / 100 * 1e6:>5.1f} us')

import torch.utils.benchmark as benchmark

t0 = benchmark.Timer(
    stmt='batched_dot_mul_sum(x, x)',
    setup='from __main__ import batched_dot_mul_sum',
    globals={'x': x})

t1 = benchmark.Timer(
    stmt='batched_dot_bmm(x, x)',
    setup='from __main__ import batched_dot_bmm',
    globals={'x': x})

print(t0.timeit(100))
print(t1.timeit(100))
record.append(repr(t0.timeit(100)).splitlines()[1:3])

num_threads = torch.get_num_threads()
print(f'Benchmarking on {num_threads} threads')

t0 = benchmark.Timer(
    stmt='batched_dot_mul_sum(x, x)',
    setup='from __main__ import batched_dot_mul_sum',
    globals={'x': x},
    num_threads=num_threads,
    label='Multithreaded batch dot',
    sub_label='Implemented using mul and sum')

t1 = benchmark.Timer(
    stmt='batched_dot_bmm(x, x)',
    setup='from __main__ import batched_dot_bmm',
    globals={'x': x},
    num_threads=num_threads,
    label='Multithreaded batch dot',
    sub_label='Implemented using bmm')

print(t0.timeit(100))
print(t1.timeit(100))
record.append(repr(t1.timeit(100)).splitlines()[1:3])

m0 = t0.blocked_autorange(min_run_time=0.01)
m1 = t1.blocked_autorange(min_run_time=0.01)

print(m0)
print(m1)

print(f"Mean:   {m0.mean * 1e6:6.2f} us")
print(f"Median: {m0.median * 1e6:6.2f} us")
record.append([m0.mean > 0, m0.median > 0, m0.title, m1.title])

from itertools import product

# Compare takes a list of measurements which we'll save in results.
results = []

sizes = [1, 64]
for b, n in product(sizes, sizes):
    # label and sub_label are the rows
    # description is the column
    label = 'Batched dot'
    sub_label = f'[{b}, {n}]'
    x = torch.ones((b, n))
    for num_threads in [1, 4]:
        results.append(benchmark.Timer(
            stmt='batched_dot_mul_sum(x, x)',
            setup='from __main__ import batched_dot_mul_sum',
            globals={'x': x},
            num_threads=num_threads,
            label=label,
            sub_label=sub_label,
            description='mul/sum',
        ).blocked_autorange(min_run_time=0.01))
        results.append(benchmark.Timer(
            stmt='batched_dot_bmm(x, x)',
            setup='from __main__ import batched_dot_bmm',
            globals={'x': x},
            num_threads=num_threads,
            label=label,
            sub_label=sub_label,
            description='bmm',
        ).blocked_autorange(min_run_time=0.01))

compare = benchmark.Compare(results)
compare.print()
record.append([' '.join(line.split('|')[0].replace('-', ' ').split()) for line in str(compare).splitlines()])

import pickle

ab_test_results = []
for env in ('environment A: mul/sum', 'environment B: bmm'):
    for b, n in ((1, 1), (64, 64)):
        x = torch.ones((b, n))
        dot_fn = (batched_dot_mul_sum if env == 'environment A: mul/sum' else batched_dot_bmm)
        m = benchmark.Timer(
            stmt='batched_dot(x, x)',
            globals={'x': x, 'batched_dot': dot_fn},
            num_threads=1,
            label='Batched dot',
            description=f'[{b}, {n}]',
            env=env,
        ).blocked_autorange(min_run_time=0.01)
        ab_test_results.append(pickle.dumps(m))

ab_results = [pickle.loads(i) for i in ab_test_results]
compare = benchmark.Compare(ab_results)
compare.trim_significant_figures()
compare.colorize()
compare.print()
record.append([' '.join(line.split('|')[0].replace('-', ' ').split()) for line in str(compare).splitlines()])

# And just to show that we can round trip all of the results from earlier:
round_tripped_results = pickle.loads(pickle.dumps(results))
assert(str(benchmark.Compare(results)) == str(benchmark.Compare(round_tripped_results)))

from torch.utils.benchmark import Fuzzer, FuzzedParameter, FuzzedTensor, ParameterAlias

# Generates random tensors with 128 to 10000000 elements and sizes k0 and k1 chosen from a
# ``loguniform`` distribution in [1, 10000], 40% of which will be discontiguous on average.
example_fuzzer = Fuzzer(
    parameters = [
        FuzzedParameter('k0', minval=1, maxval=10000, distribution='loguniform'),
        FuzzedParameter('k1', minval=1, maxval=10000, distribution='loguniform'),
    ],
    tensors = [
        FuzzedTensor('x', size=('k0', 'k1'), min_elements=128, max_elements=10000000, probability_contiguous=0.6)
    ],
    seed=0,
)

results = []
for tensors, tensor_params, params in example_fuzzer.take(n_draws):
    # description is the column label
    sub_label=f"{params['k0']:<6} x {params['k1']:<4} {'' if tensor_params['x']['is_contiguous'] else '(discontiguous)'}"
    results.append(benchmark.Timer(
        stmt='batched_dot_mul_sum(x, x)',
        setup='from __main__ import batched_dot_mul_sum',
        globals=tensors,
        label='Batched dot',
        sub_label=sub_label,
        description='mul/sum',
    ).blocked_autorange(min_run_time=0.01))
    results.append(benchmark.Timer(
        stmt='batched_dot_bmm(x, x)',
        setup='from __main__ import batched_dot_bmm',
        globals=tensors,
        label='Batched dot',
        sub_label=sub_label,
        description='bmm',
    ).blocked_autorange(min_run_time=0.01))
    record.append([sub_label, list(tensors['x'].shape), tensor_params['x']['numel'], list(tensor_params['x']['order']), tensor_params['x']['steps']])

compare = benchmark.Compare(results)
compare.trim_significant_figures()
compare.print()
record.append([' '.join(line.split('|')[0].replace('-', ' ').split()) for line in str(compare).splitlines()])
"""

BINARY_SOURCE = """
import torch
import torch.utils.benchmark as benchmark
from torch.utils.benchmark.op_fuzzers import binary

results = []
for tensors, tensor_params, params in binary.BinaryOpFuzzer(seed=0).take(n_draws):
    sub_label=f"{params['k0']:<6} x {params['k1']:<4} {'' if tensor_params['x']['is_contiguous'] else '(discontiguous)'}"
    results.append(benchmark.Timer(
        stmt='batched_dot_mul_sum(x, x)',
        setup='from __main__ import batched_dot_mul_sum',
        globals=tensors,
        label='Batched dot',
        sub_label=sub_label,
        description='mul/sum',
    ).blocked_autorange(min_run_time=0.01))
    record.append(sub_label.rstrip())

compare = benchmark.Compare(results)
compare.trim_significant_figures()
compare.colorize(rowwise=True)
compare.print()
"""

IMPORT_STEPS = [
    ("import torch\n", "import retrograd as torch\n"),
    (
        "import torch.utils.benchmark as benchmark\n",
        "import retrograd.utils.benchmark as benchmark\n",
    ),
    ("from torch.utils.benchmark import", "from retrograd.utils.benchmark import"),
    ("from torch.utils.benchmark.op_fuzzers", "from retrograd.utils.benchmark.op_fuzzers"),
]


def run_as_main(source, lib, monkeypatch, **names):
    """``source`` run as a script is: its globals are ``__main__``'s."""
    if lib is rg:
        for old, new in IMPORT_STEPS:
            source = source.replace(old, new)
    main = types.ModuleType("__main__")
    main.__dict__.update(names)
    monkeypatch.setitem(sys.modules, "__main__", main)
    exec(compile(source, f"<{lib.__name__} port>", "exec"), main.__dict__)
    return main.__dict__


def test_benchmark_recipe_timers_compare_and_fuzzer_as_torch(monkeypatch, capsys):
    records = {}
    for lib in (torch, rg):
        record = []
        run_as_main(BENCHMARK_SOURCE, lib, monkeypatch, record=record, n_draws=3)
        records[lib.__name__] = record
    theirs, ours = records["torch"], records["retrograd"]
    assert ours == theirs
    assert theirs[0] == [
        "batched_dot_mul_sum(x, x)",
        "setup: from __main__ import batched_dot_mul_sum",
    ]
    assert theirs[1] == [
        "Multithreaded batch dot: Implemented using bmm",
        "setup: from __main__ import batched_dot_bmm",
    ]
    # the recipe's own printed fuzzed sizes for seed=0 (its table of section 7)
    assert [r[0] for r in theirs[5:8]] == ["725    x 257  ", "49     x 383  ", "34     x 1468 "]
    assert "mul_sum(x, x):" in capsys.readouterr().out


def test_binary_op_fuzzer_draws_the_recipes_inputs(monkeypatch):
    record = []
    namespace = run_as_main(
        BINARY_SOURCE, rg, monkeypatch, record=record, n_draws=3,
        batched_dot_mul_sum=lambda a, b: a.mul(b).sum(-1),
    )  # fmt: skip
    # the first rows of the recipe's printed table for BinaryOpFuzzer(seed=0)
    assert record == [
        "64     x 473  (discontiguous)",
        "16384  x 12642115 (discontiguous)",
        "8192   x 892",
    ]
    assert len(namespace["results"]) == 3
