"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):
programs written here in the style of the "PyTorch Benchmark" recipe (pytorch/tutorials), run as
scripts (``__main__``, so ``setup='from __main__ import ...'`` works) under torch and ported.

Surface: two row-wise dot products (``mul`` + ``sum(-1)`` against ``reshape`` + ``torch.bmm``
+ ``flatten(-3)``) checked equal with ``allclose``; ``timeit.Timer`` beside
``benchmark.Timer(...).timeit(n)`` and its printed title lines; ``num_threads``, ``label``,
``sub_label``, ``description``, ``env``; ``blocked_autorange`` with ``mean``/``median``/``title``;
``Compare`` over sizes and thread counts; measurements pickled and loaded back
(``trim_significant_figures``, ``colorize``); ``Fuzzer`` with ``FuzzedParameter(...,
distribution='loguniform')`` and ``FuzzedTensor(..., probability_contiguous=...)``,
``ParameterAlias`` importable, and ``op_fuzzers.binary.BinaryOpFuzzer(seed=0)``. Timings differ
run to run; what is compared is the rest: titles, the tables' rows, the fuzzed sizes and layouts.

Regression guarded: there was no ``Fuzzer``, ``FuzzedParameter``, ``FuzzedTensor``,
``ParameterAlias`` nor ``op_fuzzers``. torch 2.13's own ``BinaryOpFuzzer`` refuses its normalized
distributions (an inverted check), so its draws for ``seed=0`` are checked against the sizes the
recipe prints for them.
"""

from __future__ import annotations

import sys
import types

import torch

import retrograd as rg

TIMING_SOURCE = """
import pickle
import timeit

import torch
from torch.utils import benchmark
from torch.utils.benchmark import FuzzedParameter, FuzzedTensor, Fuzzer, ParameterAlias


def rowdot_elementwise(u, v):
    # one multiply then a reduction over the feature axis
    return u.mul(v).sum(-1)


def rowdot_matmul(u, v):
    # the same thing as a batch of 1xK @ Kx1 matrix products
    width = u.shape[-1]
    return torch.bmm(u.reshape(-1, 1, width), v.reshape(-1, width, 1)).flatten(-3)


feats = torch.randn(2000, 32)
assert rowdot_elementwise(feats, feats).allclose(rowdot_matmul(feats, feats))

plain = timeit.Timer(stmt="rowdot_matmul(feats, feats)",
                     setup="from __main__ import rowdot_matmul", globals={"feats": feats})
print(f"bmm via timeit: {plain.timeit(10) / 10 * 1e6:.1f} us")


def make_timer(fn_name, data, **labels):
    return benchmark.Timer(stmt=f"{fn_name}(data, data)",
                           setup=f"from __main__ import {fn_name}",
                           globals={"data": data}, **labels)


simple = make_timer("rowdot_elementwise", feats)
print(simple.timeit(10))
record.append(repr(simple.timeit(10)).splitlines()[1:3])

threads = torch.get_num_threads()
labelled = make_timer("rowdot_matmul", feats, num_threads=threads,
                      label="Row dot products", sub_label="bmm of reshaped rows")
record.append(repr(labelled.timeit(10)).splitlines()[1:3])
auto = labelled.blocked_autorange(min_run_time=0.005)
print(f"mean {auto.mean * 1e6:.2f} us, median {auto.median * 1e6:.2f} us")
record.append([auto.mean > 0, auto.median > 0, auto.title])


def table_rows(compare):
    # the row labels of a printed comparison, without the timings
    return [" ".join(line.split("|")[0].replace("-", " ").split())
            for line in str(compare).splitlines()]


grid = []
for rows, n_threads in [(1, 1), (16, 1), (16, 2)]:
    data = torch.ones(rows, 8)
    for fn_name, column in [("rowdot_elementwise", "mul/sum"), ("rowdot_matmul", "bmm")]:
        grid.append(make_timer(fn_name, data, num_threads=n_threads, label="Row dot",
                               sub_label=f"{rows} rows", description=column)
                    .blocked_autorange(min_run_time=0.002))
record.append(table_rows(benchmark.Compare(grid)))
reloaded = pickle.loads(pickle.dumps(grid))
assert str(benchmark.Compare(reloaded)) == str(benchmark.Compare(grid))

pickled = []
for env_name, fn in [("before: mul/sum", rowdot_elementwise), ("after: bmm", rowdot_matmul)]:
    for rows in (2, 32):
        measured = benchmark.Timer(stmt="dot(data, data)",
                                   globals={"data": torch.ones(rows, rows), "dot": fn},
                                   num_threads=1, label="Row dot", description=f"{rows}x{rows}",
                                   env=env_name).blocked_autorange(min_run_time=0.002)
        pickled.append(pickle.dumps(measured))
env_compare = benchmark.Compare([pickle.loads(blob) for blob in pickled])
env_compare.trim_significant_figures()
env_compare.colorize()
env_compare.print()
record.append(table_rows(env_compare))

alias_type = ParameterAlias
fuzzer = Fuzzer(
    parameters=[FuzzedParameter("rows", minval=1, maxval=10000, distribution="loguniform"),
                FuzzedParameter("cols", minval=1, maxval=10000, distribution="loguniform")],
    tensors=[FuzzedTensor("data", size=("rows", "cols"), min_elements=128,
                          max_elements=10000000, probability_contiguous=0.6)],
    seed=0,
)
fuzzed = []
for tensors, tensor_params, params in fuzzer.take(n_draws):
    layout = tensor_params["data"]
    tag = f"{params['rows']} x {params['cols']}" + ("" if layout["is_contiguous"] else " strided")
    fuzzed.append(benchmark.Timer(stmt="rowdot_elementwise(data, data)",
                                  setup="from __main__ import rowdot_elementwise",
                                  globals=tensors, label="Fuzzed row dot", sub_label=tag,
                                  description="mul/sum").blocked_autorange(min_run_time=0.002))
    record.append([tag, list(tensors["data"].shape), layout["numel"], list(layout["order"]),
                   layout["steps"]])
fuzzed_compare = benchmark.Compare(fuzzed)
fuzzed_compare.trim_significant_figures()
record.append(table_rows(fuzzed_compare))
"""

BINARY_FUZZER_SOURCE = """
from torch.utils import benchmark
from torch.utils.benchmark.op_fuzzers import binary as binary_fuzzers

measured = []
for tensors, layouts, params in binary_fuzzers.BinaryOpFuzzer(seed=0).take(n_draws):
    strided = not layouts["x"]["is_contiguous"]
    tag = f"{params['k0']} x {params['k1']}" + (" strided" if strided else "")
    measured.append(benchmark.Timer(stmt="x.mul(x).sum(-1)", globals=tensors, label="Fuzzed add",
                                    sub_label=tag).blocked_autorange(min_run_time=0.002))
    record.append(tag)
table = benchmark.Compare(measured)
table.trim_significant_figures()
table.colorize(rowwise=True)
table.print()
"""

IMPORT_STEPS = [
    ("import torch\n", "import retrograd as torch\n"),
    ("from torch.utils import benchmark\n", "from retrograd.utils import benchmark\n"),
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


def test_benchmark_timers_compare_and_fuzzer_as_torch(monkeypatch, capsys):
    records = {}
    for lib in (torch, rg):
        torch.manual_seed(0)
        rg.manual_seed(0)
        record = []
        run_as_main(TIMING_SOURCE, lib, monkeypatch, record=record, n_draws=3)
        records[lib.__name__] = record
    theirs, ours = records["torch"], records["retrograd"]
    assert ours == theirs
    assert theirs[0] == [
        "rowdot_elementwise(data, data)",
        "setup: from __main__ import rowdot_elementwise",
    ]
    assert theirs[1] == [
        "Row dot products: bmm of reshaped rows",
        "setup: from __main__ import rowdot_matmul",
    ]
    # Fuzzer(seed=0) with these parameters draws the sizes the recipe prints for its own
    assert [r[1] for r in theirs[5:8]] == [[725, 257], [49, 383], [34, 1468]]
    assert "bmm via timeit:" in capsys.readouterr().out


def test_binary_op_fuzzer_draws_the_recipes_inputs(monkeypatch):
    record = []
    run_as_main(BINARY_FUZZER_SOURCE, rg, monkeypatch, record=record, n_draws=3)
    # the sizes and layouts the recipe prints for BinaryOpFuzzer(seed=0)
    assert record == ["64 x 473 strided", "16384 x 12642115 strided", "8192 x 892"]
