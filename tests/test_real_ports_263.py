"""Real ports, continued (the harness: ``tests/real_ports.py``): a program written here in the
style of the PyTorch profiler recipe, run under torch and ported, each run's results checked for
what such a program shows. A small residual convolutional network (``Conv2d`` without bias,
``BatchNorm2d``, ``ReLU(inplace=True)``, ``AdaptiveAvgPool2d``, ``torch.flatten``, ``Linear``)
moved ``.to(device)`` after the ``torch.cuda``/``torch.xpu`` availability checks, then profiled
four ways: a ``record_function`` range around the forward pass with ``record_shapes=True``
(``key_averages().table(sort_by=..., row_limit=...)`` and ``group_by_input_shape=True``, the
averages iterated by ``key``/``count``); ``profile_memory=True`` tables sorted by
``"self_cpu_memory_usage"`` and ``"cpu_memory_usage"`` and ``export_chrome_trace``;
``with_stack=True`` with ``key_averages(group_by_stack_n=...)`` and ``export_stacks``; a
``schedule(skip_first=, wait=, warmup=, active=, repeat=)`` read step by step (``.name``) and a
scheduled loop whose ``on_trace_ready`` handler prints a table and exports a trace named by
``p.step_num``. The trace files go under a temporary directory.

Regressions guarded: ``table(sort_by="self_cpu_memory_usage")`` was refused and
``profile_memory=True`` measured nothing (no memory columns; the convolutions' outputs are now
counted as torch counts them); ``with_stack=True`` recorded no stacks and ``group_by_stack_n``
was ignored; there was no ``export_stacks``; a scheduled profile had no ``ProfilerStep#<n>``
ranges (torch's ``ProfilerStep*`` row). Left out: the memory timeline
(``export_memory_timeline``): retrograd's profiler counts allocations but not frees, and says so
(``tests/test_realports43_fixes.py``).

The lines changed: the ``import`` lines.
"""

from __future__ import annotations

import json
import os

import torch

import retrograd as rg
from real_ports import port, run_source

PROFILER_SOURCE = """
import torch
import torch.nn as nn
from torch.profiler import ProfilerActivity, profile, record_function, schedule


class Residual(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.norm = nn.BatchNorm2d(channels)
        self.act = nn.ReLU(inplace=True)

    def forward(self, x):
        return self.act(x + self.norm(self.conv(x)))


class SmallConvNet(nn.Module):
    def __init__(self, classes=5):
        super().__init__()
        self.stem = nn.Conv2d(3, 6, kernel_size=3)
        self.block = Residual(6)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.head = nn.Linear(6, classes)

    def forward(self, images):
        features = self.pool(self.block(self.stem(images)))
        return self.head(torch.flatten(features, start_dim=1))


if torch.cuda.is_available():
    device, activities = "cuda", [ProfilerActivity.CPU, ProfilerActivity.CUDA]
elif hasattr(torch, "xpu") and torch.xpu.is_available():
    device, activities = "xpu", [ProfilerActivity.CPU, ProfilerActivity.XPU]
else:
    print("no accelerator found: profiling the CPU alone")
    device, activities = "cpu", [ProfilerActivity.CPU]

net = SmallConvNet().to(device)
batch = torch.randn(4, 3, 12, 12).to(device)

# where the time goes, and for which input shapes
with profile(record_shapes=True, activities=activities) as timing:
    with record_function("forward_pass"):
        net(batch)
by_time = timing.key_averages().table(sort_by="cpu_time_total", row_limit=8)
by_shape = timing.key_averages(group_by_input_shape=True).table(sort_by=device + "_time_total")
print(by_time)
forward_calls = [e.count for e in timing.key_averages() if e.key == "forward_pass"]

# what each op allocates, by itself and through the ops it calls
with profile(activities=activities, profile_memory=True) as prof:
    net(batch)
by_self_memory = prof.key_averages().table(sort_by="self_cpu_memory_usage", row_limit=8)
print(prof.key_averages().table(sort_by="cpu_memory_usage", row_limit=8))
allocated = {
    e.key: (e.cpu_memory_usage, e.self_cpu_memory_usage, e.count) for e in prof.key_averages()
}
prof.export_chrome_trace(os.path.join(out_dir, "memory.json"))

# which lines of this program call the costly ops
with profile(activities=activities, with_stack=True) as prof:
    net(batch)
by_stack = prof.key_averages(group_by_stack_n=4).table(sort_by="self_cpu_time_total", row_limit=3)
prof.export_stacks(os.path.join(out_dir, "stacks.txt"), "self_cpu_time_total")

# a long loop profiled in windows
plan = schedule(skip_first=3, wait=2, warmup=1, active=2, repeat=3)
phases = [plan(step).name for step in range(30)]
windows = []


def on_window(p):
    print(p.key_averages().table(sort_by="self_cpu_time_total", row_limit=5))
    p.export_chrome_trace(os.path.join(out_dir, f"window_{p.step_num}.json"))
    windows.append((p.step_num, {e.key: e.count for e in p.key_averages()}))


window_plan = torch.profiler.schedule(wait=1, warmup=1, active=3)
with profile(activities=activities, schedule=window_plan, on_trace_ready=on_window) as p:
    for _ in range(10):
        net(batch)
        p.step()
"""

PROFILER_IMPORTS = [
    (
        "import torch\nimport torch.nn as nn\n",
        "import retrograd as torch\nimport retrograd.nn as nn\n",
    ),
    ("from torch.profiler import", "from retrograd.profiler import"),
]

CONV_OUTPUT_BYTES = 2 * 4 * 6 * 10 * 10 * 4  # two float32 4x6x10x10 convolution outputs


def test_profiler_program_tables_memory_stacks_and_schedule_as_torch(tmp_path, capsys):
    namespaces = {}
    for lib in (torch, rg):
        out_dir = tmp_path / lib.__name__
        out_dir.mkdir()
        source = PROFILER_SOURCE if lib is torch else port(PROFILER_SOURCE, PROFILER_IMPORTS)
        namespaces[lib.__name__] = run_source(source, lib, os=os, out_dir=str(out_dir))
    theirs, ours = namespaces["torch"], namespaces["retrograd"]
    assert capsys.readouterr().out.count("no accelerator found") == 2

    for ns in (theirs, ours):
        # the named range holds the whole forward: the first row by total time, one call
        first_row = ns["by_time"].splitlines()[3].split()
        assert first_row[0] == "forward_pass" and first_row[-1] == "1"
        assert ns["forward_calls"] == [1]
        assert "Self CPU time total" in ns["by_time"]
        assert "Input Shapes" in ns["by_shape"]  # every row: the stem's may be far down
        assert "[4, 3, 12, 12]" in ns["by_shape"] and "[6, 6, 3, 3]" in ns["by_shape"]
        # profile_memory: torch's columns, the convolutions' outputs counted in full
        header = ns["by_self_memory"].splitlines()[1]
        assert "CPU Mem" in header and "Self CPU Mem" in header
        assert "18.75 KB" in ns["by_self_memory"]
        assert ns["phases"].count("RECORD_AND_SAVE") == 3
        # the scheduled loop: windows handed over at steps 5 and 10, each of three steps
        assert [step for step, _ in ns["windows"]] == [5, 10]
        for _, counts in ns["windows"]:
            assert counts["ProfilerStep*"] == 3
        for name in ("memory.json", "window_5.json", "window_10.json"):
            trace = json.loads((tmp_path / ns["torch"].__name__ / name).read_text())
            assert trace["traceEvents"]
    assert theirs["phases"] == ours["phases"]
    assert theirs["allocated"]["aten::conv2d"][:1] == (CONV_OUTPUT_BYTES,)
    assert ours["allocated"]["conv"] == (CONV_OUTPUT_BYTES, CONV_OUTPUT_BYTES, 2)
    # with_stack: the port's rows point at the program's own lines
    assert "Source Location" in ours["by_stack"]
    assert "<retrograd port>(" in ours["by_stack"]
    stacks = (tmp_path / "retrograd" / "stacks.txt").read_text().splitlines()
    assert stacks and all("<retrograd port>(" in line for line in stacks)
    assert any(";conv " in line for line in stacks)
