"""Real ports, continued (the harness: ``tests/real_ports.py``): where a module's tensors
live, programs written here in the style of pytorch/tutorials' recipes on the default device,
on loading a module from a checkpoint and on swapping tensors, run under torch and ported,
from the same weights.

- the default device: ``torch.randn(..., device=device)``, a module and its input built under
  ``with torch.device('meta')`` (``'meta'`` stands for ``'cuda'``: no GPU here; the point, the
  default device of factories and modules, is the same), ``torch.set_default_device('meta')``
  and back to ``None``, ``torch.get_default_device()``;
- a checkpoint: ``torch.save(model.state_dict(), path)``, ``torch.load(path, mmap=True)``, a
  skeleton with an ``nn.ModuleList`` built on the meta device and filled by
  ``load_state_dict(state, assign=True)`` (its result's ``missing_keys``/``unexpected_keys``);
- swapping: ``torch.utils.swap_tensors(a, b)``, an optimizer that keeps the old parameter
  after ``layer.weight = nn.Parameter(...)``,
  ``torch.__future__.set_swap_module_params_on_conversion(True)`` around ``.double()``
  (parameters keep their identity), a meta skeleton whose weights ``apply(fn)`` re-wraps, then
  loaded with ``assign=True``. Left out: the tutorial's ``__torch_dispatch__`` subclass
  (retrograd tensors have no dispatch subclasses); bfloat16 conversions written ``double()``.

What is compared: device types, loaded values, parameter identities, printed swaps. The lines
changed: the ``import`` lines. Regressions guarded: there was no ``torch.utils.swap_tensors``
nor ``torch.__future__``; ``load_state_dict(assign=True)`` into a meta skeleton left every
parameter on the meta device (torch's takes the state's tensors).
"""

from __future__ import annotations

import numpy as np
import torch

import retrograd as rg
from real_ports import run_source

DEFAULT_DEVICE_SOURCE = """
import torch

on_gpu = False
where = "cuda" if on_gpu else "cpu"
head = torch.nn.Linear(6, 4)
batch = torch.randn(16, 6, device=where)
out = head(batch)
print("plain:", out.device)
record.append([out.device.type, list(out.shape)])

# factories and layers made inside the context land on its device
with torch.device("meta"):
    ghost = torch.nn.Linear(6, 4)
    ghost_out = ghost(torch.randn(16, 6))
    record.append([ghost.weight.device.type, ghost_out.device.type, list(ghost_out.shape)])
record.append([torch.randn(3).device.type, torch.get_default_device().type])

# the same, process-wide, until it is reset
torch.set_default_device("meta")
ghost = torch.nn.Linear(6, 4)
print("default meta:", ghost.weight.device)
fresh = [ghost.weight, ghost(torch.randn(16, 6)), torch.zeros(3), torch.get_default_device()]
record.append([getattr(v, "device", v).type for v in fresh])
torch.set_default_device(None)  # back to the CPU
record.append([torch.ones(3).device.type, torch.get_default_device().type])
"""

LOAD_TIPS_SOURCE = """
import torch
from torch import nn


class Stack(nn.Module):
    def __init__(self, depth=6):
        super().__init__()
        self.blocks = nn.ModuleList(nn.Linear(2, 2) for _ in range(depth))

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return x


trained = Stack()
initialize(trained)
torch.save(trained.state_dict(), "stack.pt")

# mmap: the file's bytes are read lazily; the skeleton allocates nothing
lazy_state = torch.load("stack.pt", mmap=True)
with torch.device("meta"):
    skeleton = Stack()
record.append([p.device.type for p in skeleton.parameters()][-2:])
skeleton.load_state_dict(lazy_state, assign=True)
record.append(state_of(skeleton))
kinds = [
    [p.device.type, p.requires_grad, isinstance(p, nn.Parameter)] for p in skeleton.parameters()
]
record.append(kinds[-2:])

eager = Stack()
eager.load_state_dict(torch.load("stack.pt"))
record.append(state_of(eager))

with torch.device("meta"):
    skeleton = Stack()
report = skeleton.load_state_dict(torch.load("stack.pt"), assign=True)
leftover = [list(report.missing_keys), list(report.unexpected_keys)]
record.append(leftover + [skeleton.blocks[4].bias.device.type])
record.append(state_of(skeleton))
"""

SWAP_SOURCE = """
import torch
import torch.nn as nn

left, right = torch.arange(4), torch.arange(1)
torch.utils.swap_tensors(left, right)
print(f"swapped: left={left} right={right}")
record.append([left.tolist(), right.tolist()])

# rebinding a module's parameter leaves the optimizer holding the old one
proj = nn.Linear(2, 3, bias=False)
initialize(proj)
sgd = torch.optim.SGD(proj.parameters(), lr=0.1)
proj.weight = nn.Parameter(proj.weight * 3)
held = sgd.param_groups[0]["params"][0]
values = [proj.weight.detach().numpy().copy(), held.detach().numpy().copy()]
record.append([held is proj.weight] + values)

def swapping(on):
    torch.__future__.set_swap_module_params_on_conversion(on)


# with swapping on, a dtype conversion keeps each parameter object
swapping(True)
cast = nn.Linear(4, 2)
ids = [id(p) for p in cast.parameters()]
cast.double()
same = ids == [id(p) for p in cast.parameters()]
record.append([same, cast.weight.dtype == torch.float64, cast.bias.dtype == torch.float64,
               torch.__future__.get_swap_module_params_on_conversion()])
swapping(False)
record.append(torch.__future__.get_swap_module_params_on_conversion() is True)


def rewrap(module):
    if isinstance(module, nn.Linear):
        keep = module.weight.requires_grad
        module.weight = nn.Parameter(module.weight + 0, requires_grad=keep)


with torch.device("meta"):
    shell = nn.Linear(4, 2)
    shell.apply(rewrap)
swapping(True)
donor = nn.Linear(4, 2)
initialize(donor)
shell.load_state_dict(donor.state_dict(), assign=True)
record.append(state_of(shell))
pair = (shell.weight, shell.bias)
record.append([p.device.type for p in pair] + [p.requires_grad for p in pair])
swapping(False)
"""

STEPS = [
    ("import torch\n", "import retrograd as torch\n"),
    ("from torch import nn\n", "from retrograd import nn\n"),
    ("import torch.nn as nn\n", "import retrograd.nn as nn\n"),
]


def runs(source, **names):
    from real_ports import initializer, state_of

    initialize = initializer()
    records = []
    for lib in (torch, rg):
        record = []
        text = source
        if lib is rg:
            text = source
            for old, new in STEPS:
                text = text.replace(old, new)
        try:
            run_source(text, lib, record=record, initialize=initialize, state_of=state_of, **names)
        finally:
            lib.set_default_device(None)
        records.append(record)
    return records


def assert_same(ours, theirs):
    assert len(ours) == len(theirs)
    for mine, reference in zip(ours, theirs):
        if isinstance(reference, dict):
            assert list(mine) == list(reference)
            for key in reference:
                np.testing.assert_array_equal(mine[key], reference[key], err_msg=key)
        elif isinstance(reference, list) and any(isinstance(v, np.ndarray) for v in reference):
            for a, b in zip(mine, reference):
                np.testing.assert_array_equal(a, b)
        else:
            assert mine == reference


def test_changing_default_device_recipe_as_torch(capsys):
    # torch lists its factory functions once a process (an lru_cache), from its namespace as it
    # is then: listed while another test's harness had swapped torch.randn for its shared
    # draws, the list misses the real one and torch.device("meta") leaves it on the CPU
    # (imported here: run alone, nothing has imported torch.utils._device yet)
    import torch.utils._device

    torch.utils._device._device_constructors.cache_clear()
    theirs, ours = runs(DEFAULT_DEVICE_SOURCE)
    assert theirs == [
        ["cpu", [16, 4]],
        ["meta", "meta", [16, 4]],
        ["cpu", "cpu"],
        ["meta", "meta", "meta", "meta"],
        ["cpu", "cpu"],
    ]
    assert ours == theirs


def test_loading_from_a_checkpoint_tips_meta_skeleton_assign_as_torch(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    theirs, ours = runs(LOAD_TIPS_SOURCE)
    assert theirs[0] == ["meta", "meta"]
    assert theirs[2] == [["cpu", True, True]] * 2  # assign=True: the state's tensors, on the CPU
    assert_same(ours, theirs)
    np.testing.assert_array_equal(theirs[1]["blocks.0.weight"], theirs[3]["blocks.0.weight"])
    assert theirs[4] == [[], [], "cpu"]


def test_swap_tensors_recipe_without_the_dispatch_subclass_as_torch(capsys):
    theirs, ours = runs(SWAP_SOURCE)
    assert theirs[0] == [[0], [0, 1, 2, 3]]
    assert theirs[1][0] is False  # the optimizer kept the old parameter
    np.testing.assert_array_equal(theirs[1][1], 3 * theirs[1][2])
    assert theirs[2] == [True, True, True, True] and theirs[3] is False
    assert theirs[-1] == ["cpu", "cpu", True, True]
    assert_same(ours, theirs)
    log = capsys.readouterr().out
    assert log.count("swapped: left=tensor([0]") == 2  # (retrograd's adds the dtype)
