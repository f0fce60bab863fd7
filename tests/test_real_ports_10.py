# ruff: noqa: E501  (the programs are kept as their authors wrote them)
"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):

- loralib's ``Linear`` (github.com/microsoft/LoRA ``loralib/layers.py``, ``utils.py``): a
  class deriving from ``nn.Linear`` and a plain mixin, ``nn.Linear.__init__`` and
  ``nn.Linear.reset_parameters(self)`` called explicitly, ``self.weight.new_zeros``, an
  override of ``train(mode)`` that merges ``B @ A`` into ``weight.data`` on ``eval()`` and
  takes it out on ``train()``, ``fan_in_fan_out`` transposing ``weight.data``, ``result +=``
  into ``F.linear``'s output, ``mark_only_lora_as_trainable`` and ``lora_state_dict``; beside
  it a layer written after ``nn.Linear`` (``kaiming_uniform_(a=math.sqrt(5))`` and
  ``nn.init._calculate_fan_in_and_fan_out``), and ``torch.set_float32_matmul_precision``.

The defects found:

- ``Module.train(mode)`` set ``training`` on every sub-module directly; torch calls each
  child's ``train``, so a module overriding it (LoRA's merge) saw nothing on ``model.eval()``;
- no ``reset_parameters`` on ``Linear``, the convolutions, ``Embedding``(``Bag``),
  ``Bilinear``, the norms and ``PReLU`` (nor ``reset_running_stats`` on the instance norms):
  ``nn.Linear.reset_parameters(self)`` failed, and the k-fold idiom ``if hasattr(layer,
  'reset_parameters'): layer.reset_parameters()`` silently reset nothing;
- no ``nn.init._calculate_fan_in_and_fan_out`` and no ``torch.set_float32_matmul_precision``.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import retrograd as rg
from real_ports import assert_records_agree, both

LORA_SOURCE = '''
class LoRALayer():
    def __init__(self, r, lora_alpha, lora_dropout, merge_weights):
        self.r = r
        self.lora_alpha = lora_alpha
        if lora_dropout > 0.:
            self.lora_dropout = nn.Dropout(p=lora_dropout)
        else:
            self.lora_dropout = lambda x: x
        self.merged = False
        self.merge_weights = merge_weights

class Linear(nn.Linear, LoRALayer):
    def __init__(self, in_features, out_features, r=0, lora_alpha=1, lora_dropout=0., fan_in_fan_out=False, merge_weights=True, **kwargs):
        nn.Linear.__init__(self, in_features, out_features, **kwargs)
        LoRALayer.__init__(self, r=r, lora_alpha=lora_alpha, lora_dropout=lora_dropout,
                           merge_weights=merge_weights)
        self.fan_in_fan_out = fan_in_fan_out
        if r > 0:
            self.lora_A = nn.Parameter(self.weight.new_zeros((r, in_features)))
            self.lora_B = nn.Parameter(self.weight.new_zeros((out_features, r)))
            self.scaling = self.lora_alpha / self.r
            self.weight.requires_grad = False
        self.reset_parameters()
        if fan_in_fan_out:
            self.weight.data = self.weight.data.transpose(0, 1)

    def reset_parameters(self):
        nn.Linear.reset_parameters(self)
        if hasattr(self, 'lora_A'):
            nn.init.kaiming_uniform_(self.lora_A, a=math.sqrt(5))
            nn.init.zeros_(self.lora_B)

    def train(self, mode: bool = True):
        def T(w):
            return w.transpose(0, 1) if self.fan_in_fan_out else w
        nn.Linear.train(self, mode)
        if mode:
            if self.merge_weights and self.merged:
                if self.r > 0:
                    self.weight.data -= T(self.lora_B @ self.lora_A) * self.scaling
                self.merged = False
        else:
            if self.merge_weights and not self.merged:
                if self.r > 0:
                    self.weight.data += T(self.lora_B @ self.lora_A) * self.scaling
                self.merged = True

    def forward(self, x):
        def T(w):
            return w.transpose(0, 1) if self.fan_in_fan_out else w
        if self.r > 0 and not self.merged:
            result = F.linear(x, T(self.weight), bias=self.bias)
            result += (self.lora_dropout(x) @ self.lora_A.transpose(0, 1) @ self.lora_B.transpose(0, 1)) * self.scaling
            return result
        else:
            return F.linear(x, T(self.weight), bias=self.bias)

def mark_only_lora_as_trainable(model, bias='none'):
    for n, p in model.named_parameters():
        if 'lora_' not in n:
            p.requires_grad = False
    if bias == 'none':
        return
    elif bias == 'all':
        for n, p in model.named_parameters():
            if 'bias' in n:
                p.requires_grad = True

def lora_state_dict(model, bias='none'):
    my_state_dict = model.state_dict()
    if bias == 'none':
        return {k: my_state_dict[k] for k in my_state_dict if 'lora_' in k}
    elif bias == 'all':
        return {k: my_state_dict[k] for k in my_state_dict if 'lora_' in k or 'bias' in k}

class CustomLinear(nn.Module):
    """A layer written after nn.Linear's reset_parameters."""
    def __init__(self, in_features, out_features):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(out_features, in_features))
        self.bias = nn.Parameter(torch.empty(out_features))
        self.reset_parameters()
    def reset_parameters(self):
        nn.init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        fan_in, _ = nn.init._calculate_fan_in_and_fan_out(self.weight)
        bound = 1 / math.sqrt(fan_in) if fan_in > 0 else 0
        nn.init.uniform_(self.bias, -bound, bound)
    def forward(self, x):
        return F.linear(x, self.weight, self.bias)

class Model(nn.Module):
    def __init__(self, fan_in_fan_out=False):
        super().__init__()
        self.inp = CustomLinear(6, 12)
        self.q = Linear(12, 12, r=4, lora_alpha=8, fan_in_fan_out=fan_in_fan_out)
        self.v = Linear(12, 12, r=4, lora_alpha=8, fan_in_fan_out=fan_in_fan_out)
        self.out = nn.Linear(12, 3)
    def forward(self, x):
        h = torch.tanh(self.inp(x))
        h = torch.tanh(self.q(h)) + self.v(h)
        return self.out(h)

def main(x, y, fan_in_fan_out, state=None):
    torch.set_float32_matmul_precision('high')
    model = Model(fan_in_fan_out)
    if state is not None:
        model.load_state_dict(state)
    with torch.no_grad():
        for n, p in model.named_parameters():
            if n.endswith('lora_B'):
                p.copy_(torch.linspace(-0.1, 0.1, p.numel()).view_as(p))
    init = {k: np.array(v.numpy() if hasattr(v, 'numpy') else v, copy=True) for k, v in model.state_dict().items()}
    mark_only_lora_as_trainable(model, bias='all')
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2, weight_decay=0.01)
    records = [trainable]
    for step in range(3):
        model.train()
        loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        model.eval()
        with torch.no_grad():
            eval_loss = F.cross_entropy(model(x), y)
        records.append([loss.item(), eval_loss.item(), model.q.merged])
        records.append({n: p.detach().numpy().copy() for n, p in model.named_parameters()})
    records.append({k: (v.numpy() if hasattr(v, 'numpy') else np.asarray(v)).copy() for k, v in lora_state_dict(model, bias='all').items()})
    records.append(torch.get_float32_matmul_precision())
    return init, records
'''

LORA_STEP = [
    (
        "        loss.backward()\n        optimizer.step()",
        "        grads = loss.backward()\n        optimizer.step(grads)",
    )
]


@pytest.fixture
def matmul_precision():
    yield
    torch.set_float32_matmul_precision("highest")
    rg.set_float32_matmul_precision("highest")


@pytest.mark.parametrize("fan_in_fan_out", [False, True])
def test_loralib_linear_merging_on_eval_matches_torch(matmul_precision, fan_in_fan_out):
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((8, 6)), rng.integers(0, 3, 8)
    theirs, ours = both(LORA_SOURCE, LORA_STEP)
    torch.manual_seed(0)
    f32 = torch.float32
    initial, expected = theirs["main"](torch.tensor(x, dtype=f32), torch.tensor(y), fan_in_fan_out)
    _, got = ours["main"](rg.tensor(x, dtype=rg.float32), rg.tensor(y), fan_in_fan_out, initial)
    assert got[0] == expected[0]  # the trainable names: LoRA's and every bias
    assert [r[2] for r in got[1:-2:2]] == [True] * 3  # merged by each eval()
    assert got[-1] == expected[-1] == "high"
    assert_records_agree(got[1:-1], expected[1:-1], rtol=1e-5, atol=1e-6)


# -- the defects found ------------------------------------------------------------------------------
def test_train_and_eval_call_each_child_s_own_train_as_torch_does():
    calls = {}
    for lib in (torch, rg):
        seen = []

        class Child(lib.nn.Module):
            def train(self, mode=True, seen=seen):
                seen.append(mode)
                return super().train(mode)

        model = lib.nn.Sequential(lib.nn.Linear(2, 2), lib.nn.Sequential(Child()), Child())
        model.eval()
        model.train()
        calls[lib.__name__] = (seen, model[1][0].training, model[2].training)
        with pytest.raises(ValueError, match="boolean"):
            model.train(1)
    assert calls["retrograd"] == calls["torch"] == ([False, False, True, True], True, True)


LAYERS = {
    "Linear": ((200, 300), {}),
    "Conv1d": ((8, 16, 3), {}),
    "Conv2d": ((8, 16, 3), {"groups": 2}),
    "ConvTranspose2d": ((8, 16, 3), {"groups": 2}),
    "Bilinear": ((30, 20, 10), {}),
    "Embedding": ((50, 40), {"padding_idx": 3}),
    "EmbeddingBag": ((50, 40), {"padding_idx": 0}),
    "BatchNorm1d": ((5,), {}),
    "LayerNorm": ((5,), {}),
    "GroupNorm": ((2, 4), {}),
    "RMSNorm": ((4,), {}),
    "InstanceNorm1d": ((3,), {"affine": True, "track_running_stats": True}),
    "PReLU": ((3, 0.3), {}),
}


def _spoiled(lib, name):
    args, kwargs = LAYERS[name]
    layer = getattr(lib.nn, name)(*args, **kwargs)
    with lib.no_grad():
        for p in layer.parameters():
            p.fill_(7.0)
    for buffer_name in ("running_mean", "running_var"):
        if getattr(layer, buffer_name, None) is not None:
            getattr(layer, buffer_name).fill_(5.0)
    return layer


@pytest.mark.parametrize("name", sorted(LAYERS))
def test_reset_parameters_draws_again_as_torch_s(name):
    ours, theirs = _spoiled(rg, name), _spoiled(torch, name)
    weight = ours.weight
    ours.reset_parameters()
    theirs.reset_parameters()
    assert ours.weight is weight and ours.weight.requires_grad  # the same parameter, a leaf
    got = {k: np.asarray(v, dtype=np.float64) for k, v in ours.state_dict().items()}
    expected = {k: v.double().numpy() for k, v in theirs.state_dict().items()}
    assert list(got) == list(expected)
    for key, value in expected.items():
        mine = got[key]
        if key == "weight" and name in ("Embedding", "EmbeddingBag"):  # N(0, 1), a zero row
            padding = LAYERS[name][1]["padding_idx"]
            assert not mine[padding].any() and not value[padding].any()
            assert abs(mine.std() - 1.0) < 0.1
        elif np.unique(value).size > 1:  # drawn from U(-k, k) as torch's, k = 1/sqrt(fan_in)
            shape = expected["weight"].shape
            fan_in = shape[1] if name == "Bilinear" else shape[1] * math.prod(shape[2:])
            bound = 1.0 / math.sqrt(fan_in)
            assert np.abs(value).max() <= bound and np.abs(mine).max() <= bound
            assert np.unique(mine).size > 1
            if mine.size >= 1000:
                assert abs(mine.std() - bound / math.sqrt(3.0)) < 0.05 * bound
        else:  # constants (ones, zeros, statistics, counts)
            np.testing.assert_array_equal(mine, value, err_msg=key)


def test_reset_running_stats_of_an_instance_norm():
    layer = _spoiled(rg, "InstanceNorm1d")
    layer.reset_running_stats()
    assert layer.running_mean.tolist() == [0.0] * 3 and layer.running_var.tolist() == [1.0] * 3
    assert layer.weight.tolist() == [7.0] * 3


def test_fan_helper_and_matmul_precision_setting(matmul_precision):
    for shape in [(3, 4), (3, 4, 5), (8, 2, 3, 3)]:
        assert rg.nn.init._calculate_fan_in_and_fan_out(rg.ones(shape)) == (
            torch.nn.init._calculate_fan_in_and_fan_out(torch.ones(shape))
        )
    with pytest.raises(ValueError):
        rg.nn.init._calculate_fan_in_and_fan_out(rg.ones(3))
    assert rg.get_float32_matmul_precision() == "highest"
    rg.set_float32_matmul_precision("medium")
    assert rg.get_float32_matmul_precision() == "medium"
    # (as torch 2.13: an unknown precision warns and leaves the setting as it was)
    with pytest.warns(UserWarning, match="low is not one of"):
        rg.set_float32_matmul_precision("low")
    assert rg.get_float32_matmul_precision() == "medium"
    assert math.isclose(float((rg.ones(2, 2) @ rg.ones(2, 2)).sum()), 8.0)
