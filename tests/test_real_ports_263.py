# ruff: noqa: E501  (the programs are kept as their authors wrote them: long lines)
"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):
the "PyTorch Profiler" recipe (pytorch/tutorials ``recipes_source/recipes/profiler_recipe.py``),
run under torch and ported, each run's results checked for what the recipe shows: a
``record_function("model_inference")`` range holding the whole forward,
``key_averages().table(sort_by="cpu_time_total", row_limit=10)``, ``group_by_input_shape=True``
tables, ``profile_memory=True`` tables sorted by ``"self_cpu_memory_usage"`` and
``"cpu_memory_usage"`` (the "CPU Mem" and "Self CPU Mem" columns: a convolution's outputs counted
as torch counts them), ``export_chrome_trace``, ``with_stack=True`` with
``key_averages(group_by_stack_n=5)`` (and ``export_stacks``, from torch's profiler docs),
``schedule(skip_first=10, wait=5, warmup=1, active=3, repeat=2)`` and a training-loop
profile whose ``on_trace_ready`` handler prints the table and exports a trace at each
``p.step_num``.

Cut down: torchvision's ``resnet18`` replaced by a small residual network of the same layers
(``Conv2d``, ``BatchNorm2d``, ``ReLU(inplace=True)``, ``AdaptiveAvgPool2d``, ``Linear``) on a
5x3x16x16 batch; the recipe's ``sys.exit(0)`` on a machine with neither CUDA nor XPU replaced by
going on with ``device = 'cpu'``; the trace files written under a temporary directory; the
memory-timeline section (``export_memory_timeline``) left out: retrograd's profiler counts
allocations but not frees, and says so (``tests/test_realports43_fixes.py``).

The lines changed: the ``import`` lines. The defects found: ``table(sort_by=
"self_cpu_memory_usage")`` was refused and ``profile_memory=True`` measured nothing (the table
had no memory columns); ``with_stack=True`` recorded no stacks and ``group_by_stack_n`` was
ignored; there was no ``export_stacks``; a scheduled profile had no ``ProfilerStep#<n>`` ranges
(torch's ``ProfilerStep*`` row).
"""

from __future__ import annotations

import json
import os

import torch

import retrograd as rg
from real_ports import run_source

PROFILER_SOURCE = """
import torch
from torch.profiler import profile, record_function, ProfilerActivity
import torch.nn as nn


class BasicBlock(nn.Module):
    def __init__(self, planes):
        super().__init__()
        self.conv1 = nn.Conv2d(planes, planes, kernel_size=3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x):
        out = self.bn1(self.conv1(x))
        return self.relu(out + x)


class TinyResNet(nn.Module):  # (torchvision's resnet18 in the recipe)
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, kernel_size=3, bias=True)
        self.layer1 = BasicBlock(8)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(8, 4)

    def forward(self, x):
        x = self.layer1(self.conv1(x))
        return self.fc(torch.flatten(self.avgpool(x), 1))


model = TinyResNet()
inputs = torch.randn(5, 3, 16, 16)

with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
    with record_function("model_inference"):
        model(inputs)

print(prof.key_averages().table(sort_by="cpu_time_total", row_limit=10))
table_by_time = prof.key_averages().table(sort_by="cpu_time_total", row_limit=10)

print(prof.key_averages(group_by_input_shape=True).table(sort_by="cpu_time_total", row_limit=10))
table_by_shape = prof.key_averages(group_by_input_shape=True).table(sort_by="cpu_time_total", row_limit=10)
inference_rows = [row for row in prof.key_averages() if row.key == "model_inference"]

activities = [ProfilerActivity.CPU]
if torch.cuda.is_available():
    device = 'cuda'
    activities += [ProfilerActivity.CUDA]
elif torch.xpu.is_available():
    device = 'xpu'
    activities += [ProfilerActivity.XPU]
else:
    print('Neither CUDA nor XPU devices are available to demonstrate profiling on acceleration devices')
    device = 'cpu'  # (the recipe exits here: sys.exit(0))

sort_by_keyword = device + "_time_total"

model = TinyResNet().to(device)
inputs = torch.randn(5, 3, 16, 16).to(device)

with profile(activities=activities, record_shapes=True) as prof:
    with record_function("model_inference"):
        model(inputs)

print(prof.key_averages().table(sort_by=sort_by_keyword, row_limit=10))

model = TinyResNet()
inputs = torch.randn(5, 3, 16, 16)

with profile(activities=[ProfilerActivity.CPU],
        profile_memory=True, record_shapes=True) as prof:
    model(inputs)

print(prof.key_averages().table(sort_by="self_cpu_memory_usage", row_limit=10))
table_by_self_memory = prof.key_averages().table(sort_by="self_cpu_memory_usage", row_limit=10)

print(prof.key_averages().table(sort_by="cpu_memory_usage", row_limit=10))
memory_rows = {row.key: (row.cpu_memory_usage, row.self_cpu_memory_usage, row.count) for row in prof.key_averages()}

model = TinyResNet().to(device)
inputs = torch.randn(5, 3, 16, 16).to(device)

with profile(activities=activities) as prof:
    model(inputs)

prof.export_chrome_trace(os.path.join(out_dir, "trace.json"))

sort_by_keyword = "self_" + device + "_time_total"

with profile(
    activities=activities,
    with_stack=True,
) as prof:
    model(inputs)

# Print aggregated stats
print(prof.key_averages(group_by_stack_n=5).table(sort_by=sort_by_keyword, row_limit=2))
table_by_stack = prof.key_averages(group_by_stack_n=5).table(sort_by=sort_by_keyword, row_limit=2)
prof.export_stacks(os.path.join(out_dir, "profiler_stacks.txt"), "self_cpu_time_total")

from torch.profiler import schedule

my_schedule = schedule(
    skip_first=10,
    wait=5,
    warmup=1,
    active=3,
    repeat=2)
actions = [my_schedule(step).name for step in range(40)]

handled = []

def trace_handler(p):
    output = p.key_averages().table(sort_by=sort_by_keyword, row_limit=10)
    print(output)
    p.export_chrome_trace(os.path.join(out_dir, "trace_" + str(p.step_num) + ".json"))
    handled.append((p.step_num, {row.key: row.count for row in p.key_averages()}))

with profile(
    activities=activities,
    schedule=torch.profiler.schedule(
        wait=1,
        warmup=1,
        active=2),
    on_trace_ready=trace_handler
) as p:
    for idx in range(8):
        model(inputs)
        p.step()
"""

PROFILER_STEPS = [
    (
        "import torch\nfrom torch.profiler import profile, record_function, ProfilerActivity\nimport torch.nn as nn\n",
        "import retrograd as torch\nfrom retrograd.profiler import profile, record_function, ProfilerActivity\nimport retrograd.nn as nn\n",
    ),
    ("from torch.profiler import schedule\n", "from retrograd.profiler import schedule\n"),
]

CONV_OUTPUT_BYTES = 2 * 5 * 8 * 14 * 14 * 4  # two float32 5x8x14x14 convolution outputs


def test_profiler_recipe_tables_memory_stacks_and_schedule_as_torch(tmp_path, capsys):
    namespaces = {}
    for lib in (torch, rg):
        out_dir = tmp_path / lib.__name__
        out_dir.mkdir()
        source = PROFILER_SOURCE
        if lib is rg:
            for old, new in PROFILER_STEPS:
                assert old in source
                source = source.replace(old, new)
        namespaces[lib.__name__] = run_source(source, lib, os=os, out_dir=str(out_dir))
    theirs, ours = namespaces["torch"], namespaces["retrograd"]
    log = capsys.readouterr().out
    assert log.count("Neither CUDA nor XPU") == 2

    for ns in (theirs, ours):
        # the named range holds the whole forward: the first row by total time, one call
        first_row = ns["table_by_time"].splitlines()[3]
        assert first_row.split()[0] == "model_inference" and first_row.split()[-1] == "1"
        assert [row.count for row in ns["inference_rows"]] == [1]
        assert "Input Shapes" in ns["table_by_shape"] and "[5, 3, 16, 16]" in ns["table_by_shape"]
        assert "Self CPU time total" in ns["table_by_time"]
        # profile_memory: torch's columns, the convolutions' outputs counted in full
        header = ns["table_by_self_memory"].splitlines()[1]
        assert "CPU Mem" in header and "Self CPU Mem" in header
        assert "61.25 KB" in ns["table_by_self_memory"]
        assert ns["actions"].count("RECORD_AND_SAVE") == 2
        # the scheduled loop: traces handed over at steps 4 and 8, each of two steps
        assert [step for step, _ in ns["handled"]] == [4, 8]
        for _, counts in ns["handled"]:
            assert counts["ProfilerStep*"] == 2
        for name in ("trace.json", "trace_4.json", "trace_8.json"):
            trace = json.loads((tmp_path / ns["torch"].__name__ / name).read_text())
            assert trace["traceEvents"]
    assert theirs["actions"] == ours["actions"]
    assert theirs["memory_rows"]["aten::conv2d"][:1] == (CONV_OUTPUT_BYTES,)
    assert ours["memory_rows"]["conv"] == (CONV_OUTPUT_BYTES, CONV_OUTPUT_BYTES, 2)
    assert [counts["ProfilerStep*"] for _, counts in theirs["handled"]] == [
        counts["ProfilerStep*"] for _, counts in ours["handled"]
    ]
    # with_stack: the port's rows point at the program's own lines
    assert "Source Location" in ours["table_by_stack"]
    assert "<retrograd port>(" in ours["table_by_stack"]
    stacks = (tmp_path / "retrograd" / "profiler_stacks.txt").read_text().splitlines()
    assert stacks and all("<retrograd port>(" in line for line in stacks)
    assert any(";conv " in line for line in stacks)
