"""Real models, written as PyTorch users write them, checked against PyTorch from identical
weights in float64: a ResNet-style CNN (basic blocks, BatchNorm2d, AdaptiveAvgPool2d),
torchvision's ResNet-18 and milesial's U-Net (``benchmarks/cnn_models.py``, narrower, on the
suite's inner backend) and a small GPT written like nanoGPT (ModuleDict transformer,
ModuleList of blocks, weight tying, AdamW with two parameter groups, warm-up + cosine
learning rate through ``param_groups``, ``clip_grad_norm_``), under NoCheckpointing and
BalancedCheckpointing.

The ResNet's code is the same text for both libraries (``make_resnet(nn, F)``). The GPT's
retrograd version uses today's spellings where the tensor surface of section 8 is being built
in parallel (``reshape((...))`` for ``view(...)``, ``swap_dims`` for ``transpose(1, 2)``,
``mask_fill`` for ``masked_fill``, ``p.ndim`` for ``p.dim()``); everything module- and
optimizer-side is PyTorch's.
"""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

import retrograd as rg
from backends import inner_backend
from retrograd import nn as rnn
from retrograd import optim as roptim
from retrograd.nn import functional as RF  # noqa: N812

torch = pytest.importorskip("torch")

#: every test trains on backends of its own, one per strategy (``autodiff``)
pytestmark = pytest.mark.own_checkpointing("each test builds its backends' strategies itself")
tnn, TF = torch.nn, torch.nn.functional

STRATEGIES = {"none": rg.NoCheckpointing, "balanced": rg.BalancedCheckpointing}
RTOL, ATOL = 1e-10, 1e-12


def autodiff(strategy: str) -> rg.Autodiff:
    return rg.Autodiff(rg.NumpyBackend(), checkpointing=STRATEGIES[strategy]())


def torch_state(state: dict) -> dict:
    return {k: torch.from_numpy(np.array(v, copy=True)) for k, v in state.items()}


# -- ResNet ---------------------------------------------------------------------------------------
def make_resnet(nn, F, num_classes=5):  # noqa: N803  (the libraries' own names)
    """A small ResNet (He et al. 2016), CIFAR style, in the given library's ``nn`` and ``F``."""

    class BasicBlock(nn.Module):
        def __init__(self, in_planes, planes, stride=1):
            super().__init__()
            self.conv1 = nn.Conv2d(in_planes, planes, 3, stride=stride, padding=1, bias=False)
            self.bn1 = nn.BatchNorm2d(planes)
            self.conv2 = nn.Conv2d(planes, planes, 3, stride=1, padding=1, bias=False)
            self.bn2 = nn.BatchNorm2d(planes)
            self.shortcut = nn.Sequential()
            if stride != 1 or in_planes != planes:
                self.shortcut = nn.Sequential(
                    nn.Conv2d(in_planes, planes, 1, stride=stride, bias=False),
                    nn.BatchNorm2d(planes),
                )

        def forward(self, x):
            out = F.relu(self.bn1(self.conv1(x)))
            out = self.bn2(self.conv2(out))
            out = out + self.shortcut(x)
            return F.relu(out)

    class ResNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(3, 8, 3, stride=1, padding=1, bias=False)
            self.bn1 = nn.BatchNorm2d(8)
            self.layer1 = nn.Sequential(BasicBlock(8, 8), BasicBlock(8, 8))
            self.layer2 = nn.Sequential(BasicBlock(8, 16, stride=2))
            self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
            self.flatten = nn.Flatten()
            self.fc = nn.Linear(16, num_classes)
            for m in self.modules():
                if isinstance(m, nn.Conv2d):
                    nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
                elif isinstance(m, nn.BatchNorm2d):
                    nn.init.constant_(m.weight, 1)
                    nn.init.constant_(m.bias, 0)

        def forward(self, x):
            out = F.relu(self.bn1(self.conv1(x)))
            out = self.layer2(self.layer1(out))
            return self.fc(self.flatten(self.avgpool(out)))

    return ResNet()


def _check_grads(model, reference, grads, names=None):
    theirs = dict(reference.named_parameters())
    checked = 0
    for name, p in model.named_parameters():
        g = p.grad(grads)
        assert g is not None, name
        np.testing.assert_allclose(
            g.numpy(), theirs[name].grad.numpy(), rtol=1e-9, atol=1e-11, err_msg=name
        )
        checked += 1
    assert checked == len(theirs)
    return checked


def _check_state(model, reference):
    theirs = reference.state_dict()
    ours = model.state_dict()
    assert list(ours) == list(theirs)
    for name, value in theirs.items():
        np.testing.assert_allclose(ours[name], value.numpy(), rtol=1e-9, atol=1e-11, err_msg=name)
        assert ours[name].dtype == value.numpy().dtype, name


@pytest.mark.numpy_only(
    "autodiff() builds rg.NumpyBackend() by name: another pass would repeat this run"
)
@pytest.mark.parametrize("optimizer", ["sgd_momentum", "adamw"])
@pytest.mark.parametrize("strategy", sorted(STRATEGIES))
def test_resnet_matches_torch(strategy, optimizer):
    rng = np.random.default_rng(0)
    with rg.use_backend(autodiff(strategy)):
        rg.seed(0)
        model = make_resnet(rnn, RF).double()
        reference = make_resnet(tnn, TF).double()
        reference.load_state_dict(torch_state(model.state_dict()))
        assert len(list(model.parameters())) == len(list(reference.parameters())) == 26
        if optimizer == "sgd_momentum":
            ours = roptim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=5e-4)
            theirs = torch.optim.SGD(
                reference.parameters(), lr=0.05, momentum=0.9, weight_decay=5e-4
            )
        else:
            ours = roptim.AdamW(model.parameters(), lr=1e-2)
            theirs = torch.optim.AdamW(reference.parameters(), lr=1e-2)
        for step in range(5):
            x = rng.standard_normal((6, 3, 8, 8))
            y = rng.integers(0, 5, 6)
            logits = model(rg.tensor(x))
            expected = reference(torch.from_numpy(x))
            np.testing.assert_allclose(
                logits.numpy(), expected.detach().numpy(), rtol=RTOL, atol=ATOL
            )
            loss = RF.cross_entropy(logits, rg.tensor(y))
            grads = loss.backward()
            theirs.zero_grad()
            TF.cross_entropy(expected, torch.from_numpy(y)).backward()
            if step == 0:
                assert _check_grads(model, reference, grads) == 26
            norm = rnn.utils.clip_grad_norm_(grads, model.parameters(), 0.5)
            expected_norm = tnn.utils.clip_grad_norm_(reference.parameters(), 0.5)
            assert norm == pytest.approx(expected_norm.item(), rel=1e-10)
            ours.step(grads)
            theirs.step()
            _check_state(model, reference)  # parameters and running statistics
        model.eval()
        reference.eval()
        x = rng.standard_normal((4, 3, 8, 8))
        np.testing.assert_allclose(
            model(rg.tensor(x)).numpy(),
            reference(torch.from_numpy(x)).detach().numpy(),
            rtol=RTOL,
            atol=ATOL,
        )
        # state dicts both ways: a fresh torch model from ours, a fresh one of ours from torch
        fresh_torch = make_resnet(tnn, TF).double().eval()
        fresh_torch.load_state_dict(torch_state(model.state_dict()))
        rg.seed(5)
        fresh_ours = make_resnet(rnn, RF).double().eval()
        fresh_ours.load_state_dict(reference.state_dict())
        expected = reference(torch.from_numpy(x)).detach().numpy()
        np.testing.assert_allclose(
            fresh_torch(torch.from_numpy(x)).detach().numpy(), expected, rtol=RTOL, atol=ATOL
        )
        np.testing.assert_allclose(fresh_ours(rg.tensor(x)).numpy(), expected, rtol=RTOL, atol=ATOL)
        assert fresh_ours.state_dict()["bn1.num_batches_tracked"] == 5


# -- ResNet-18 and U-Net, as their authors write them ---------------------------------------------
def _benchmark_module(name: str):
    """A module of ``benchmarks/`` (the model code the CNN benchmarks time), loaded by path."""
    path = Path(__file__).resolve().parents[1] / "benchmarks" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"benchmarks_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


CNN_MODELS = _benchmark_module("cnn_models")
# name: (builder, options, input shape, targets' shape, classes)
REAL_CNNS = {
    "resnet18": (CNN_MODELS.make_resnet18, {"num_classes": 7, "width": 8}, (3, 3, 32, 32), (3,)),
    "unet": (CNN_MODELS.make_unet, {"n_classes": 3, "width": 4}, (2, 3, 16, 16), (2, 16, 16)),
    "unet-bilinear": (
        CNN_MODELS.make_unet,
        {"n_classes": 3, "width": 4, "bilinear": True},
        (2, 3, 16, 16),
        (2, 16, 16),
    ),
}


@pytest.mark.parametrize("strategy", sorted(STRATEGIES))
@pytest.mark.parametrize("name", REAL_CNNS)
def test_real_cnns_match_torch(name, strategy):
    """Two SGD steps (momentum, weight decay): logits, every parameter's gradient, the new
    parameters and the running statistics equal PyTorch's."""
    build, options, x_shape, y_shape = REAL_CNNS[name]
    classes = options.get("num_classes", options.get("n_classes"))
    rng = np.random.default_rng(3)
    backend = rg.Autodiff(inner_backend(), checkpointing=STRATEGIES[strategy]())
    with rg.use_backend(backend):
        rg.seed(1)
        model = build(rg, rnn, RF, **options).double()
        reference = build(torch, tnn, TF, **options).double()
        reference.load_state_dict(torch_state(model.state_dict()))
        ours = roptim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-4)
        theirs = torch.optim.SGD(reference.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-4)
        for _ in range(2):
            x, y = rng.standard_normal(x_shape), rng.integers(0, classes, y_shape)
            logits = model(rg.tensor(x))
            expected = reference(torch.from_numpy(x))
            np.testing.assert_allclose(
                logits.numpy(), expected.detach().numpy(), rtol=RTOL, atol=ATOL
            )
            grads = RF.cross_entropy(logits, rg.tensor(y)).backward()
            theirs.zero_grad()
            TF.cross_entropy(expected, torch.from_numpy(y)).backward()
            _check_grads(model, reference, grads)
            ours.step(grads)
            theirs.step()
            _check_state(model, reference)


# -- GPT ------------------------------------------------------------------------------------------
CONFIG = SimpleNamespace(
    block_size=8, vocab_size=11, n_layer=2, n_head=2, n_embd=16, dropout=0.0, bias=True
)


class CausalSelfAttention(rnn.Module):
    def __init__(self, config):
        super().__init__()
        assert config.n_embd % config.n_head == 0
        self.c_attn = rnn.Linear(config.n_embd, 3 * config.n_embd, bias=config.bias)
        self.c_proj = rnn.Linear(config.n_embd, config.n_embd, bias=config.bias)
        self.attn_dropout = rnn.Dropout(config.dropout)
        self.resid_dropout = rnn.Dropout(config.dropout)
        self.n_head = config.n_head
        self.n_embd = config.n_embd
        mask = np.tril(np.ones((config.block_size, config.block_size)))
        self.register_buffer(
            "bias", rg.tensor(mask).reshape((1, 1, config.block_size, config.block_size))
        )

    def forward(self, x):
        B, T, C = x.shape  # noqa: N806  (nanoGPT's names)
        q, k, v = self.c_attn(x).split(self.n_embd, 2)
        k = k.reshape((B, T, self.n_head, C // self.n_head)).swap_dims(1, 2)
        q = q.reshape((B, T, self.n_head, C // self.n_head)).swap_dims(1, 2)
        v = v.reshape((B, T, self.n_head, C // self.n_head)).swap_dims(1, 2)
        # the explicit attention path: softmax of masked scores
        att = (q @ k.transpose()) * (1.0 / math.sqrt(k.shape[-1]))
        att = att.mask_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
        att = RF.softmax(att, -1)
        att = self.attn_dropout(att)
        y = att @ v
        y = y.swap_dims(1, 2).reshape((B, T, C))
        return self.resid_dropout(self.c_proj(y))


class MLP(rnn.Module):
    def __init__(self, config):
        super().__init__()
        self.c_fc = rnn.Linear(config.n_embd, 4 * config.n_embd, bias=config.bias)
        self.gelu = rnn.GELU()
        self.c_proj = rnn.Linear(4 * config.n_embd, config.n_embd, bias=config.bias)
        self.dropout = rnn.Dropout(config.dropout)

    def forward(self, x):
        return self.dropout(self.c_proj(self.gelu(self.c_fc(x))))


class Block(rnn.Module):
    def __init__(self, config):
        super().__init__()
        self.ln_1 = rnn.LayerNorm(config.n_embd, bias=config.bias)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = rnn.LayerNorm(config.n_embd, bias=config.bias)
        self.mlp = MLP(config)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(rnn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.transformer = rnn.ModuleDict(
            dict(
                wte=rnn.Embedding(config.vocab_size, config.n_embd),
                wpe=rnn.Embedding(config.block_size, config.n_embd),
                drop=rnn.Dropout(config.dropout),
                h=rnn.ModuleList([Block(config) for _ in range(config.n_layer)]),
                ln_f=rnn.LayerNorm(config.n_embd, bias=config.bias),
            )
        )
        self.lm_head = rnn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.transformer.wte.weight = self.lm_head.weight  # weight tying
        self.apply(self._init_weights)
        for pn, p in self.named_parameters():
            if pn.endswith("c_proj.weight"):
                rnn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * config.n_layer))

    def _init_weights(self, module):
        if isinstance(module, rnn.Linear):
            rnn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                rnn.init.zeros_(module.bias)
        elif isinstance(module, rnn.Embedding):
            rnn.init.normal_(module.weight, mean=0.0, std=0.02)

    def forward(self, idx, targets=None):
        _, t = idx.shape
        pos = rg.arange(0, t)
        tok_emb = self.transformer.wte(idx)
        pos_emb = self.transformer.wpe(pos)
        x = self.transformer.drop(tok_emb + pos_emb)
        for block in self.transformer.h:
            x = block(x)
        x = self.transformer.ln_f(x)
        logits = self.lm_head(x)
        loss = RF.cross_entropy(
            logits.reshape((-1, logits.shape[-1])), targets.reshape((-1,)), ignore_index=-1
        )
        return logits, loss

    def configure_optimizers(self, weight_decay, learning_rate, betas):
        param_dict = {pn: p for pn, p in self.named_parameters()}
        decay_params = [p for n, p in param_dict.items() if p.ndim >= 2]
        nodecay_params = [p for n, p in param_dict.items() if p.ndim < 2]
        optim_groups = [
            {"params": decay_params, "weight_decay": weight_decay},
            {"params": nodecay_params, "weight_decay": 0.0},
        ]
        return roptim.AdamW(optim_groups, lr=learning_rate, betas=betas)


# nanoGPT's model for PyTorch, as it is written there.
class TorchCausalSelfAttention(tnn.Module):
    def __init__(self, config):
        super().__init__()
        self.c_attn = tnn.Linear(config.n_embd, 3 * config.n_embd, bias=config.bias)
        self.c_proj = tnn.Linear(config.n_embd, config.n_embd, bias=config.bias)
        self.attn_dropout = tnn.Dropout(config.dropout)
        self.resid_dropout = tnn.Dropout(config.dropout)
        self.n_head = config.n_head
        self.n_embd = config.n_embd
        self.register_buffer(
            "bias",
            torch.tril(torch.ones(config.block_size, config.block_size)).view(
                1, 1, config.block_size, config.block_size
            ),
        )

    def forward(self, x):
        B, T, C = x.size()  # noqa: N806
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
        att = TF.softmax(att, dim=-1)
        att = self.attn_dropout(att)
        y = att @ v
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_dropout(self.c_proj(y))


class TorchMLP(tnn.Module):
    def __init__(self, config):
        super().__init__()
        self.c_fc = tnn.Linear(config.n_embd, 4 * config.n_embd, bias=config.bias)
        self.gelu = tnn.GELU()
        self.c_proj = tnn.Linear(4 * config.n_embd, config.n_embd, bias=config.bias)
        self.dropout = tnn.Dropout(config.dropout)

    def forward(self, x):
        return self.dropout(self.c_proj(self.gelu(self.c_fc(x))))


class TorchBlock(tnn.Module):
    def __init__(self, config):
        super().__init__()
        self.ln_1 = tnn.LayerNorm(config.n_embd, bias=config.bias)
        self.attn = TorchCausalSelfAttention(config)
        self.ln_2 = tnn.LayerNorm(config.n_embd, bias=config.bias)
        self.mlp = TorchMLP(config)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class TorchGPT(tnn.Module):
    def __init__(self, config):
        super().__init__()
        self.transformer = tnn.ModuleDict(
            dict(
                wte=tnn.Embedding(config.vocab_size, config.n_embd),
                wpe=tnn.Embedding(config.block_size, config.n_embd),
                drop=tnn.Dropout(config.dropout),
                h=tnn.ModuleList([TorchBlock(config) for _ in range(config.n_layer)]),
                ln_f=tnn.LayerNorm(config.n_embd, bias=config.bias),
            )
        )
        self.lm_head = tnn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.transformer.wte.weight = self.lm_head.weight

    def forward(self, idx, targets):
        _, t = idx.size()
        pos = torch.arange(0, t, dtype=torch.long)
        x = self.transformer.drop(self.transformer.wte(idx) + self.transformer.wpe(pos))
        for block in self.transformer.h:
            x = block(x)
        logits = self.lm_head(self.transformer.ln_f(x))
        loss = TF.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)
        return logits, loss

    def configure_optimizers(self, weight_decay, learning_rate, betas):
        param_dict = {pn: p for pn, p in self.named_parameters()}
        decay_params = [p for n, p in param_dict.items() if p.dim() >= 2]
        nodecay_params = [p for n, p in param_dict.items() if p.dim() < 2]
        optim_groups = [
            {"params": decay_params, "weight_decay": weight_decay},
            {"params": nodecay_params, "weight_decay": 0.0},
        ]
        return torch.optim.AdamW(optim_groups, lr=learning_rate, betas=betas)


def get_lr(it, warmup_iters=3, lr_decay_iters=10, learning_rate=6e-3, min_lr=6e-4):
    """nanoGPT's warm-up + cosine schedule."""
    if it < warmup_iters:
        return learning_rate * (it + 1) / (warmup_iters + 1)
    if it > lr_decay_iters:
        return min_lr
    decay_ratio = (it - warmup_iters) / (lr_decay_iters - warmup_iters)
    coeff = 0.5 * (1.0 + math.cos(math.pi * decay_ratio))
    return min_lr + coeff * (learning_rate - min_lr)


def run_gpt(strategy: str, steps: int = 10):
    """Train both GPTs side by side from torch's weights; returns ours' final state."""
    torch.manual_seed(0)
    reference = TorchGPT(CONFIG).double()
    with rg.use_backend(autodiff(strategy)):
        rg.seed(0)
        model = GPT(CONFIG).double()
        assert model.transformer.wte.weight is model.lm_head.weight
        model.load_state_dict(reference.state_dict())  # torch's weights, tie kept
        assert model.transformer.wte.weight is model.lm_head.weight
        names = [n for n, _ in model.named_parameters()]
        assert names == [n for n, _ in reference.named_parameters()] and len(names) == 28
        ours = model.configure_optimizers(0.1, 6e-3, (0.9, 0.95))
        theirs = reference.configure_optimizers(0.1, 6e-3, (0.9, 0.95))
        assert [len(g["params"]) for g in ours.param_groups] == [10, 18]
        rng = np.random.default_rng(1)
        for it in range(steps):
            lr = get_lr(it)
            for param_group in ours.param_groups:
                param_group["lr"] = lr
            for param_group in theirs.param_groups:
                param_group["lr"] = lr
            idx = rng.integers(0, CONFIG.vocab_size, (3, CONFIG.block_size))
            targets = rng.integers(0, CONFIG.vocab_size, (3, CONFIG.block_size))
            targets[0, :2] = -1  # ignored positions
            logits, loss = model(rg.tensor(idx), rg.tensor(targets))
            t_logits, t_loss = reference(torch.from_numpy(idx), torch.from_numpy(targets))
            np.testing.assert_allclose(
                logits.numpy(), t_logits.detach().numpy(), rtol=1e-9, atol=1e-12
            )
            assert loss.item() == pytest.approx(t_loss.item(), rel=1e-12)
            grads = loss.backward()
            theirs.zero_grad(set_to_none=True)
            t_loss.backward()
            if it == 0:  # every gradient, the tied one the sum of both uses
                assert _check_grads(model, reference, grads) == 28
            norm = rnn.utils.clip_grad_norm_(grads, model.parameters(), 1.0)
            t_norm = tnn.utils.clip_grad_norm_(reference.parameters(), 1.0)
            assert norm == pytest.approx(t_norm.item(), rel=1e-10)
            ours.step(grads)
            theirs.step()
        assert model.transformer.wte.weight is model.lm_head.weight
        assert len(ours.state) == 28
        _check_state(model, reference)
        return model.state_dict()


@pytest.mark.numpy_only(
    "autodiff() builds rg.NumpyBackend() by name: another pass would repeat this run"
)
def test_gpt_matches_torch_under_both_checkpointing_strategies():
    plain = run_gpt("none")
    balanced = run_gpt("balanced")
    for name in plain:  # gradients are identical under every strategy, so is training
        np.testing.assert_array_equal(plain[name], balanced[name], err_msg=name)
