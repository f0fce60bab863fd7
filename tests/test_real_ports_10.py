"""Real ports, continued (the harness: ``tests/real_ports.py``): a program written here in the
style of microsoft/LoRA's ``loralib`` (a low-rank adapted ``Linear``), run under torch and,
ported, under retrograd from the same weights.

Its surface: a class deriving from ``nn.Linear`` and a plain mixin, ``nn.Linear.__init__``
and ``nn.Linear.reset_parameters(self)`` called explicitly, ``self.weight.new_zeros``, an
override of ``train(mode)`` that merges ``B @ A`` into ``weight.data`` on ``eval()`` and takes
it out on ``train()``, ``fan_in_fan_out`` transposing ``weight.data``, ``out +=`` into
``F.linear``'s result, freezing all but the adapters (and biases) and saving only their
state; beside it a layer written after ``nn.Linear`` (``kaiming_uniform_(a=math.sqrt(5))``
and ``nn.init._calculate_fan_in_and_fan_out``), the re-initialization idiom ``if
hasattr(m, "reset_parameters"): m.reset_parameters()``, and
``torch.set_float32_matmul_precision``.

The regressions guarded:

- ``Module.train(mode)`` set ``training`` on every sub-module directly; torch calls each
  child's ``train``, so a module overriding it (the adapter's merge) saw nothing on
  ``model.eval()``;
- no ``reset_parameters`` on ``Linear``, the convolutions, ``Embedding``(``Bag``),
  ``Bilinear``, the norms and ``PReLU`` (nor ``reset_running_stats`` on the instance norms):
  ``nn.Linear.reset_parameters(self)`` failed, and the re-initialization idiom silently reset
  nothing;
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
class Adapted:
    """What every low-rank adapted layer keeps, whatever layer it adapts."""

    def setup_adapter(self, rank, alpha, dropout, merge_on_eval):
        self.rank, self.alpha, self.merge_on_eval, self.merged = rank, alpha, merge_on_eval, False
        self.adapter_dropout = nn.Dropout(p=dropout) if dropout > 0.0 else (lambda x: x)

class LowRankLinear(nn.Linear, Adapted):
    # y = x W^T + b + (x A^T B^T) * alpha / rank, with W frozen and B starting at zero
    def __init__(
        self, n_in, n_out, rank=0, alpha=1, dropout=0.0, fan_in_fan_out=False,
        merge_on_eval=True, **kwargs
    ):
        nn.Linear.__init__(self, n_in, n_out, **kwargs)
        self.setup_adapter(rank, alpha, dropout, merge_on_eval)
        self.fan_in_fan_out = fan_in_fan_out  # W stored as (in, out), as GPT-2's Conv1D does
        if rank > 0:
            self.lora_A = nn.Parameter(self.weight.new_zeros((rank, n_in)))
            self.lora_B = nn.Parameter(self.weight.new_zeros((n_out, rank)))
            self.scale = alpha / rank
            self.weight.requires_grad = False  # only the adapters learn
        self.reset_parameters()
        if fan_in_fan_out:
            self.weight.data = self.weight.data.transpose(1, 0)

    def reset_parameters(self):
        nn.Linear.reset_parameters(self)  # the base layer's own draw first
        if hasattr(self, "lora_A"):
            nn.init.kaiming_uniform_(self.lora_A, a=5 ** 0.5)
            nn.init.zeros_(self.lora_B)

    def oriented(self, w):
        return w.transpose(1, 0) if self.fan_in_fan_out else w

    def delta(self):
        return self.oriented(self.lora_B @ self.lora_A) * self.scale

    def train(self, mode=True):
        nn.Linear.train(self, mode)
        if self.rank > 0 and self.merge_on_eval and mode == self.merged:
            # eval folds the update into W (one matmul at inference); train takes it out again
            if mode:
                self.weight.data -= self.delta()
            else:
                self.weight.data += self.delta()
            self.merged = not mode
        return self

    def forward(self, x):
        out = F.linear(x, self.oriented(self.weight), bias=self.bias)
        if self.rank > 0 and not self.merged:
            low = self.adapter_dropout(x) @ self.lora_A.transpose(0, 1)
            out += (low @ self.lora_B.transpose(0, 1)) * self.scale
        return out

def freeze_all_but_adapters(model, bias="none"):
    for name, p in model.named_parameters():
        p.requires_grad = "lora_" in name or (bias == "all" and "bias" in name)

def adapter_state(model, bias="none"):
    full = model.state_dict()
    return {k: v for k, v in full.items() if "lora_" in k or (bias == "all" and "bias" in k)}

class PlainLinear(nn.Module):
    """Written after nn.Linear: its initialization spelled out."""

    def __init__(self, n_in, n_out):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(n_out, n_in))
        self.bias = nn.Parameter(torch.empty(n_out))
        self.reset_parameters()

    def reset_parameters(self):
        nn.init.kaiming_uniform_(self.weight, a=math.sqrt(5.0))
        fan_in = nn.init._calculate_fan_in_and_fan_out(self.weight)[0]
        limit = 1 / math.sqrt(fan_in) if fan_in > 0 else 0
        nn.init.uniform_(self.bias, -limit, limit)

    def forward(self, x):
        return F.linear(x, self.weight, bias=self.bias)

class TwoAdapters(nn.Module):
    def __init__(self, transposed=False):
        super().__init__()
        self.embed = PlainLinear(5, 10)
        self.query = LowRankLinear(10, 10, rank=2, alpha=4, fan_in_fan_out=transposed)
        self.value = LowRankLinear(10, 10, rank=2, alpha=4, fan_in_fan_out=transposed)
        self.head = nn.Linear(10, 3)

    def forward(self, x):
        h = torch.tanh(self.embed(x))
        return self.head(torch.tanh(self.query(h)) + self.value(h))

def main(x, y, transposed, state=None):
    torch.set_float32_matmul_precision("high")
    model = TwoAdapters(transposed)
    for m in model.modules():  # draw every layer again, as a k-fold loop does between folds
        if m is not model and hasattr(m, "reset_parameters"):
            m.reset_parameters()
    if state is not None:
        model.load_state_dict(state)
    with torch.no_grad():  # B away from zero, so that the adapters matter from the start
        for name, p in model.named_parameters():
            if name.endswith("lora_B"):
                p.copy_(torch.linspace(-0.05, 0.05, p.numel()).view_as(p))
    start = {k: v.numpy().copy() for k, v in model.state_dict().items()}
    freeze_all_but_adapters(model, bias="all")
    log = [[name for name, p in model.named_parameters() if p.requires_grad]]
    learning = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(learning, lr=1e-2, weight_decay=0.01)
    for _ in range(3):
        model.train()
        logits = model(x)
        loss = F.cross_entropy(logits, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        model.eval()
        with torch.no_grad():
            merged_loss = F.cross_entropy(model(x), y)
        log.append([loss.item(), merged_loss.item(), model.query.merged])
        log.append({n: p.detach().numpy().copy() for n, p in model.named_parameters()})
    log.append({k: v.numpy().copy() for k, v in adapter_state(model, bias="all").items()})
    log.append(torch.get_float32_matmul_precision())
    return start, log
'''

LORA_STEP = [
    (
        "        loss.backward()\n        opt.step()",
        "        grads = loss.backward()\n        opt.step(grads)",
    )
]


@pytest.fixture
def matmul_precision():
    yield
    torch.set_float32_matmul_precision("highest")
    rg.set_float32_matmul_precision("highest")


@pytest.mark.parametrize("fan_in_fan_out", [False, True])
def test_low_rank_adapters_merging_on_eval_match_torch(matmul_precision, fan_in_fan_out):
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((6, 5)), rng.integers(0, 3, 6)
    theirs, ours = both(LORA_SOURCE, LORA_STEP)
    torch.manual_seed(0)
    f32 = torch.float32
    initial, expected = theirs["main"](torch.tensor(x, dtype=f32), torch.tensor(y), fan_in_fan_out)
    _, got = ours["main"](rg.tensor(x, dtype=rg.float32), rg.tensor(y), fan_in_fan_out, initial)
    assert got[0] == expected[0]  # the trainable names: the adapters and every bias
    assert [r[2] for r in got[1:-2:2]] == [True] * 3  # merged by each eval()
    assert got[-1] == expected[-1] == "high"
    assert_records_agree(got[1:-1], expected[1:-1], rtol=1e-5, atol=1e-6)


# -- the defects found -----------------------------------------------------------------------------
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
