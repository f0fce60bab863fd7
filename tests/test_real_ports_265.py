# ruff: noqa: E501  (the programs are kept as their authors wrote them: long lines)
"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):
three recipes of pytorch/tutorials about where a module's tensors live, run under torch and
ported, from the same weights:

- "Changing default device" (``recipes_source/recipes/changing_default_device.py``):
  ``torch.randn(128, 20, device=device)``, ``with torch.device(...)`` building a module and its
  input, ``torch.set_default_device(...)``; ``'cuda'`` replaced by ``'meta'`` (no GPU here; the
  recipe's point, the default device of factories and modules, is the same);
- "Tips for Loading an ``nn.Module`` from a Checkpoint" (``module_load_state_dict_tips.py``):
  ``torch.save(m.state_dict(), 'checkpoint.pth')``, ``torch.load(..., mmap=True)``, a
  ``SomeModule`` skeleton built under ``with torch.device('meta')`` and loaded with
  ``load_state_dict(state_dict, assign=True)``;
- "Extension points in ``nn.Module`` for ``load_state_dict`` and tensor subclasses"
  (``swap_tensors.py``): ``torch.utils.swap_tensors(t1, t2)``, the optimizer that keeps the old
  parameter after ``mod.weight = torch.nn.Parameter(2 * mod.weight)``,
  ``torch.__future__.set_swap_module_params_on_conversion(True)`` around a dtype conversion,
  and a meta skeleton whose weights ``m.apply(fn)`` re-wraps, loaded with ``assign=True``. Left
  out: the ``__torch_dispatch__``/``__torch_function__`` subclass ``MyQuantizedLinearWeight``
  (retrograd tensors have no dispatch subclasses); ``m.bfloat16()`` written ``m.double()``
  (NumPy has no bfloat16).

What is compared: the devices' types, the loaded values, the parameters' identities, the
printed swaps. The lines changed: the ``import`` lines. The defects found: there was no
``torch.utils.swap_tensors`` nor ``torch.__future__``; ``load_state_dict(assign=True)`` into a
meta skeleton left every parameter on the meta device (torch's takes the state's tensors).
"""

from __future__ import annotations

import numpy as np
import torch

import retrograd as rg
from real_ports import run_source

DEFAULT_DEVICE_SOURCE = """
import torch

USE_CUDA = False

mod = torch.nn.Linear(20, 30)
if USE_CUDA:
    mod.cuda()

device = 'cpu'
if USE_CUDA:
    device = 'cuda'
inp = torch.randn(128, 20, device=device)
print(mod(inp).device)
record.append([mod(inp).device.type, list(mod(inp).shape)])

with torch.device('meta'):
    mod = torch.nn.Linear(20, 30)
    print(mod.weight.device)
    print(mod(torch.randn(128, 20)).device)
    record.append([mod.weight.device.type, mod(torch.randn(128, 20)).device.type, list(mod(torch.randn(128, 20)).shape)])
record.append([torch.randn(2).device.type, torch.get_default_device().type])

torch.set_default_device('meta')

mod = torch.nn.Linear(20, 30)
print(mod.weight.device)
print(mod(torch.randn(128, 20)).device)
record.append([mod.weight.device.type, mod(torch.randn(128, 20)).device.type, torch.zeros(2).device.type, torch.get_default_device().type])
torch.set_default_device(None)
record.append([torch.zeros(2).device.type, torch.get_default_device().type])
"""

LOAD_TIPS_SOURCE = """
import torch
from torch import nn

class SomeModule(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linears = nn.ModuleList([nn.Linear(1, 1) for i in range(10)])

    def forward(self, x):
        return self.linears(x)


m = SomeModule()
initialize(m)
torch.save(m.state_dict(), 'checkpoint.pth')
state_dict = torch.load('checkpoint.pth', mmap=True)
with torch.device('meta'):
  meta_m = SomeModule()
record.append([p.device.type for p in meta_m.parameters()][:2])
meta_m.load_state_dict(state_dict, assign=True)
record.append(state_of(meta_m))
record.append([[p.device.type, p.requires_grad, isinstance(p, nn.Parameter)] for p in meta_m.parameters()][:2])

state_dict = torch.load('checkpoint.pth')
m = SomeModule()
m.load_state_dict(state_dict)
record.append(state_of(m))

with torch.device('meta'):
  meta_m = SomeModule()
keys = meta_m.load_state_dict(state_dict, assign=True)
record.append([list(keys.missing_keys), list(keys.unexpected_keys), meta_m.linears[3].bias.device.type])
record.append(state_of(meta_m))
"""

SWAP_SOURCE = """
import torch
import torch.nn as nn
t1 = torch.arange(2)
t2 = torch.arange(3)
print(f"Before swapping, t1: {t1}, t2: {t2}")
torch.utils.swap_tensors(t1, t2)
print(f"After swapping, t1: {t1}, t2: {t2}")
record.append([t1.tolist(), t2.tolist()])

mod = torch.nn.Linear(1, 2, bias=False)
initialize(mod)
optimizer = torch.optim.SGD(mod.parameters())
print(f"weight in mod: {mod.weight}")
print(f"weight in optimizer: {optimizer.param_groups[0]['params']}")
mod.weight = torch.nn.Parameter(2 * mod.weight)
print(f"weight in mod: {mod.weight}")
print(f"weight in optimizer: {optimizer.param_groups[0]['params']}")
record.append([optimizer.param_groups[0]['params'][0] is mod.weight, mod.weight.detach().numpy().copy(), optimizer.param_groups[0]['params'][0].detach().numpy().copy()])

torch.__future__.set_swap_module_params_on_conversion(True)
m = nn.Linear(3, 5, dtype=torch.float32)
print(f"Before: id(m.weight)={id(m.weight)}, id(m.bias)={id(m.bias)}")
before = (id(m.weight), id(m.bias))
m.double()
print(f"After: id(m.weight)={id(m.weight)}, id(m.bias)={id(m.bias)}")
print(f"m.weight.dtype: {m.weight.dtype}")
print(f"m.bias.dtype: {m.bias.dtype}")
record.append([before == (id(m.weight), id(m.bias)), m.weight.dtype == torch.float64, m.bias.dtype == torch.float64, torch.__future__.get_swap_module_params_on_conversion()])
torch.__future__.set_swap_module_params_on_conversion(False)
record.append(torch.__future__.get_swap_module_params_on_conversion())

def fn(m):
    if isinstance(m, nn.Linear):
        requires_grad = m.weight.requires_grad
        m.weight = torch.nn.Parameter(
                    m.weight * 1, requires_grad=requires_grad
                   )

with torch.device("meta"):
    m = nn.Linear(3, 5)
    m.apply(fn)

torch.__future__.set_swap_module_params_on_conversion(True)
print(f"Before: id(weight)={id(m.weight)}, id(bias)={id(m.bias)}")
source = nn.Linear(3, 5)
initialize(source)
state_dict = source.state_dict()
m.load_state_dict(state_dict, assign=True)
print(f"After: id(weight)={id(m.weight)}, id(bias)={id(m.bias)}")
record.append(state_of(m))
record.append([m.weight.device.type, m.bias.device.type, m.weight.requires_grad, m.bias.requires_grad])
torch.__future__.set_swap_module_params_on_conversion(False)
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
    torch.utils._device._device_constructors.cache_clear()
    theirs, ours = runs(DEFAULT_DEVICE_SOURCE)
    assert theirs == [
        ["cpu", [128, 30]],
        ["meta", "meta", [128, 30]],
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
    np.testing.assert_array_equal(theirs[1]["linears.0.weight"], theirs[3]["linears.0.weight"])


def test_swap_tensors_recipe_without_the_dispatch_subclass_as_torch(capsys):
    theirs, ours = runs(SWAP_SOURCE)
    assert theirs[0] == [[0, 1, 2], [0, 1]]
    assert theirs[1][0] is False  # the optimizer kept the old parameter
    np.testing.assert_array_equal(theirs[1][1], 2 * theirs[1][2])
    assert theirs[2] == [True, True, True, True] and theirs[3] is False
    assert theirs[-1] == ["cpu", "cpu", True, True]
    assert_same(ours, theirs)
    log = capsys.readouterr().out
    assert log.count("After swapping, t1: tensor([0, 1, 2]") == 2  # (retrograd's adds the dtype)
