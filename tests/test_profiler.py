"""rg.profiler: one event per inner-backend call, named ranges, torch's schedule semantics and
trace files; nothing left patched."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

import retrograd as rg
from retrograd.context import current_backend
from retrograd.errors import InvalidArgumentError


def step(model, optimizer, x, y):
    optimizer.step(rg.nn.functional.cross_entropy(model(x), y).backward())


def setup():
    rg.manual_seed(0)
    model = rg.nn.Sequential(rg.nn.Linear(8, 16), rg.nn.Tanh(), rg.nn.Linear(16, 3))
    return model, rg.optim.SGD(model.parameters(), lr=0.1), rg.randn(4, 8), rg.tensor([0, 1, 2, 1])


def test_events_per_call_and_named_ranges():
    model, optimizer, x, y = setup()
    with rg.profiler.profile(record_shapes=True) as prof:
        for _ in range(3):
            with rg.profiler.record_function("train_step"):
                step(model, optimizer, x, y)
    averages = {row.key: row for row in prof.key_averages()}
    assert averages["train_step"].count == 3
    assert averages["tanh"].count == 3  # one forward call per step
    assert averages["linear"].count == 6
    ranges = [e for e in prof.events() if e.name == "train_step"]
    for outer in ranges:  # every call of the step sits inside its range
        assert outer.children and outer.self_cpu_time_total >= 0
        assert outer.cpu_time_total >= sum(c.cpu_time_total for c in outer.children)
    whole = sum(row.self_cpu_time_total for row in prof.key_averages())
    assert whole == pytest.approx(sum(r.cpu_time_total for r in ranges), rel=1e-9)
    shapes = {
        row.input_shapes
        for row in prof.key_averages(group_by_input_shape=True)
        if row.key == "tanh"
    }
    assert shapes == {"[[4, 16]]"}
    table = prof.key_averages().table(sort_by="cpu_time_total", row_limit=3)
    assert table.splitlines()[3].startswith("train_step") and "Self CPU time total" in table
    inner = current_backend().inner
    assert not any(name in vars(inner) for name in ("linear", "tanh", "matmul"))  # unpatched


def test_schedule_is_torchs_and_traces_are_handed_over(tmp_path):
    for options in (
        {"wait": 1, "warmup": 1, "active": 2},
        {"wait": 0, "warmup": 2, "active": 1, "repeat": 2, "skip_first": 3},
    ):
        ours, theirs = rg.profiler.schedule(**options), torch.profiler.schedule(**options)
        assert [ours(s).name for s in range(20)] == [theirs(s).name for s in range(20)]
    model, optimizer, x, y = setup()
    traces = []
    plan = rg.profiler.schedule(wait=1, warmup=1, active=2, repeat=1)
    with rg.profiler.profile(
        schedule=plan, on_trace_ready=lambda p: traces.append(len(p.events()))
    ) as prof:
        for _ in range(6):
            step(model, optimizer, x, y)
            prof.step()
    assert len(traces) == 1
    per_step = traces[0] // 2  # the two active steps, the same calls each
    assert traces[0] == 2 * per_step > 0
    handler = rg.profiler.tensorboard_trace_handler(str(tmp_path / "log"), worker_name="w")
    with rg.profiler.profile(on_trace_ready=handler):
        step(model, optimizer, x, y)
    (written,) = (tmp_path / "log").glob("w.*.pt.trace.json")
    events = json.loads(written.read_text())["traceEvents"]
    assert {"linear", "tanh"} <= {e["name"] for e in events} and all(e["dur"] >= 0 for e in events)


def test_misuse_is_a_clear_error_and_disabled_records_nothing():
    model, optimizer, x, y = setup()
    with rg.profiler.profile(), pytest.raises(InvalidArgumentError, match="already recording"):
        rg.profiler.profile().start()
    with rg.profiler.profile(enabled=False) as prof:
        step(model, optimizer, x, y)
    assert len(prof.events()) == 0
    with rg.autograd.profiler.profile() as prof:  # torch.autograd.profiler's spelling
        step(model, optimizer, x, y)
    with pytest.raises(InvalidArgumentError, match="sort_by must be one of"):
        prof.key_averages().table(sort_by="cuda_time")
    with pytest.raises(InvalidArgumentError, match="active > 0"):
        rg.profiler.schedule(wait=0, warmup=0, active=0)
    with rg.profiler.record_function("outside"):  # no profile: nothing to record
        assert np.isfinite(x.sum().item())
