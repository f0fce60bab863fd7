"""Real ports, continued (the harness: ``tests/real_ports.py``): programs written here in the
style of a multivariate forecasting project's ``models.py`` and training loop: three
heteroscedastic forecasters behind one ``build(config)`` registry, each predicting a residual on
the last input frame and an exponentiated variance.

- a recurrent forecaster: a two-layer ``nn.GRU(batch_first=True)`` whose last layer's state
  ``h_n[-1]`` feeds ``LayerNorm``/``ReLU`` heads;
- a temporal convolution network: causal dilated ``Conv1d`` wrapped in
  ``torch.nn.utils.parametrizations.weight_norm``, cropped on the right by ``[:, :, :-pad]``,
  ``GroupNorm(1, C)``, ``GELU`` and a 1x1 ``Conv1d`` on the residual when the width changes;
- a patch transformer: patches by ``view``, a learnable position ``nn.Parameter(torch.randn(...))``,
  ``nn.MultiheadAttention(batch_first=True)`` with ``BatchNorm1d`` over the transposed channels,
  ``flatten(1, 2)`` heads;
- a device chosen from ``torch.cuda.is_available()`` / ``torch.backends.mps.is_available()``
  and printed; windows cut by ``series.unfold(0, w + 1, 1).permute(0, 2, 1)``;
  ``nn.GaussianNLLLoss()(mean, target, var)``, ``AdamW`` and ``clip_grad_norm_``; the
  state-dict keys, the weight norm's ``parametrizations.weight.original0``/``original1``
  among them, must be torch's.

Only the import and gradient lines differ in the port. The weights are torch's
(``initialize``); dropout is 0 (each library draws its own masks).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import retrograd as rg
from real_ports import (
    assert_records_agree,
    initializer,
    params_of,
    port,
    ported_imports,
    run_source,
    runs_with_draws,
)

MODELS_SOURCE = """
import torch
import torch.nn as nn
from torch.nn.utils import parametrizations


def pick_device():
    if torch.cuda.is_available():
        name = "cuda"
    elif torch.backends.mps.is_available():
        name = "mps"
    else:
        name = "cpu"
    dev = torch.device(name)
    print(f"running on {dev}")
    return dev


class Heads(nn.Module):
    # shared by every backbone: a residual mean on the last frame and a positive variance
    def __init__(self, width, out_dim, drop):
        super().__init__()
        self.hidden = nn.Sequential(
            nn.Linear(width, width), nn.LayerNorm(width), nn.ReLU(), nn.Dropout(drop)
        )
        self.mu = nn.Linear(width, out_dim)
        self.log_var = nn.Linear(width, out_dim)

    def forward(self, feats, last):
        z = self.hidden(feats)
        return last + self.mu(z), self.log_var(z).exp()


class Recurrent(nn.Module):
    def __init__(self, n_in, width, layers=2, drop=0.0):
        super().__init__()
        self.rnn = nn.GRU(n_in, width, layers, batch_first=True, dropout=drop)
        self.norm = nn.LayerNorm(width)
        self.heads = Heads(width, n_in, drop)

    def forward(self, x):
        _, h_n = self.rnn(x)  # [layers, B, width]
        top = torch.relu(self.norm(h_n[-1]))
        return self.heads(top, x[:, -1, :])


class CausalConv(nn.Module):
    def __init__(self, c_in, c_out, k, dilation):
        super().__init__()
        self.pad = (k - 1) * dilation
        conv = nn.Conv1d(c_in, c_out, k, padding=self.pad, dilation=dilation)
        self.conv = parametrizations.weight_norm(conv)

    def forward(self, x):
        return self.conv(x)[:, :, : -self.pad]  # the right-hand pad would see the future


class TemporalBlock(nn.Module):
    def __init__(self, c_in, c_out, k, dilation, drop):
        super().__init__()
        self.first = CausalConv(c_in, c_out, k, dilation)
        self.second = CausalConv(c_out, c_out, k, dilation)
        self.gn1, self.gn2 = nn.GroupNorm(1, c_out), nn.GroupNorm(1, c_out)
        self.act, self.drop = nn.GELU(), nn.Dropout(drop)
        self.skip = nn.Conv1d(c_in, c_out, 1) if c_in != c_out else None

    def forward(self, x):
        y = self.drop(self.act(self.gn1(self.first(x))))
        y = self.drop(self.gn2(self.second(y)))
        return self.act(y + (x if self.skip is None else self.skip(x)))


class Temporal(nn.Module):
    def __init__(self, n_in, widths=(6, 8), k=2, drop=0.0):
        super().__init__()
        chans = [n_in, *widths]
        self.blocks = nn.Sequential(
            *[TemporalBlock(chans[i], chans[i + 1], k, 2**i, drop) for i in range(len(widths))]
        )
        self.heads = Heads(widths[-1], n_in, drop)

    def forward(self, x):
        h = self.blocks(x.transpose(1, 2))
        return self.heads(h[:, :, -1], x[:, -1, :])


class PatchBlock(nn.Module):
    def __init__(self, d, heads, ff, drop):
        super().__init__()
        self.attn = nn.MultiheadAttention(d, heads, dropout=drop, batch_first=True)
        self.bn_attn, self.bn_ff = nn.BatchNorm1d(d), nn.BatchNorm1d(d)
        self.ff = nn.Sequential(nn.Linear(d, ff), nn.GELU(), nn.Dropout(drop), nn.Linear(ff, d))

    @staticmethod
    def channel_norm(bn, x):  # BatchNorm1d wants the features on dim 1
        return bn(x.transpose(1, 2)).transpose(1, 2)

    def forward(self, x):
        mixed, _ = self.attn(x, x, x)
        x = self.channel_norm(self.bn_attn, x + mixed)
        return self.channel_norm(self.bn_ff, x + self.ff(x))


class PatchTransformer(nn.Module):
    def __init__(self, length, n_in, patch, d, heads, ff, depth, drop=0.0):
        super().__init__()
        assert length % patch == 0, f"length {length} is not a multiple of patch {patch}"
        self.n_patch, self.patch = length // patch, patch
        self.embed = nn.Linear(patch, d)
        self.pos = nn.Parameter(torch.randn(1, self.n_patch, d))
        self.blocks = nn.ModuleList([PatchBlock(d, heads, ff, drop) for _ in range(depth)])
        self.mu = nn.Linear(self.n_patch * d, 1)
        self.log_var = nn.Linear(self.n_patch * d, 1)

    def forward(self, x):
        b, t, c = x.shape
        per_channel = x.permute(0, 2, 1).reshape(b * c, t)
        h = self.embed(per_channel.view(-1, self.n_patch, self.patch)) + self.pos
        for block in self.blocks:
            h = block(h)
        h = h.flatten(1, 2)
        return x[:, -1, :] + self.mu(h).view(b, c), self.log_var(h).view(b, c).exp()


REGISTRY = {"gru": Recurrent, "tcn": Temporal, "patch": PatchTransformer}


def build(config):
    config = dict(config)
    return REGISTRY[config.pop("type")](**config)
"""

TRAINING_SOURCE = """
dev = pick_device()
net = build(model_config)
initialize(net)
net.to(dev)
values = torch.tensor(series_values)
windows = values.unfold(0, window + 1, 1).permute(0, 2, 1)  # [N, window + 1, C]
past, nxt = windows[:, :-1, :], windows[:, -1, :]
nll = nn.GaussianNLLLoss()
opt = torch.optim.AdamW(net.parameters(), lr=5e-3, weight_decay=1e-2)
net.train()
for epoch in range(2):
    for i in range(0, len(past), batch_size):
        mean, var = net(past[i : i + batch_size].to(dev))
        loss = nll(mean, nxt[i : i + batch_size].to(dev), var)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(net.parameters(), max_norm=1.0)
        opt.step()
        record.append(loss.item())
    record.append(params_of(net))
net.eval()
with torch.no_grad():
    mean, var = net(past[:4])
record.extend([mean.numpy(), var.numpy(), sorted(net.state_dict())])
"""

MODELS_STEPS = [
    (
        "import torch\nimport torch.nn as nn\n",
        "import retrograd as torch\nimport retrograd.nn as nn\n",
    ),
    (
        "        loss.backward()\n"
        "        torch.nn.utils.clip_grad_norm_(net.parameters(), max_norm=1.0)\n"
        "        opt.step()\n",
        "        grads = loss.backward()\n"
        "        torch.nn.utils.clip_grad_norm_(grads, net.parameters(), max_norm=1.0)\n"
        "        opt.step(grads)\n",
    ),
]

CONFIGS = {
    "gru": {"type": "gru", "n_in": 3, "width": 8, "layers": 2},
    "tcn": {"type": "tcn", "n_in": 3, "widths": (6, 8), "k": 2},
    "patch": {
        "type": "patch",
        "length": 8,
        "n_in": 3,
        "patch": 4,
        "d": 8,
        "heads": 2,
        "ff": 16,
        "depth": 2,
    },
}


def drawn_series(seed: int, length: int = 28) -> np.ndarray:
    """Three noisy seasonal channels with a trend."""
    rng = np.random.default_rng(seed)
    t = np.arange(length)[:, None]
    season = np.sin(2 * np.pi * t / np.array([6.0, 4.0, 10.0])) * np.array([1.0, 0.5, 2.0])
    return (season + 0.02 * t + 0.2 * rng.standard_normal((length, 3))).astype(np.float32)


@pytest.mark.parametrize("kind", list(CONFIGS))
def test_heteroscedastic_forecasters_train_as_torch(capsys, kind):
    (theirs, ours), logs = runs_with_draws(
        MODELS_SOURCE + TRAINING_SOURCE, MODELS_STEPS, capsys, 3200,
        model_config=CONFIGS[kind], series_values=drawn_series(320), window=8, batch_size=8,
        initialize=initializer(), params_of=params_of,
    )  # fmt: skip
    assert logs[0] == logs[1] == "running on cpu\n"
    assert len(theirs) == 2 * (3 + 1) + 3
    if kind == "tcn":
        assert "blocks.0.first.conv.parametrizations.weight.original0" in theirs[-1]
    if kind != "patch":
        assert_records_agree(ours, theirs, rtol=2e-4, atol=2e-5)
        return
    # the value bias, out_proj's bias and the feed-forward's last bias add a constant per
    # channel just before a training-mode BatchNorm1d, which removes it (the key bias never
    # matters): their true gradient is zero, so AdamW steps them by rounding noise; the eval
    # predictions read them through the running statistics, so they are checked from one
    # state below
    skip = [
        f"0.blocks.{i}.{name}" for i in range(2) for name in ("attn.out_proj.bias", "ff.3.bias")
    ]
    noise = {f"0.blocks.{i}.attn.in_proj_bias": slice(8, 24) for i in range(2)}
    assert_records_agree(ours[:-3], theirs[:-3], rtol=2e-4, atol=2e-5, skip=skip, noise=noise)
    assert ours[-1] == theirs[-1]


def test_patch_transformer_predicts_in_eval_mode_as_torch_from_the_same_state():
    rng = np.random.default_rng(3201)
    x = rng.standard_normal((5, 8, 3)).astype(np.float32)
    predictions = []
    state = None
    for lib in (torch, rg):
        text = (
            MODELS_SOURCE if lib is torch else ported_imports(port(MODELS_SOURCE, MODELS_STEPS[:1]))
        )
        model = run_source(text, lib)["build"](CONFIGS["patch"])
        if state is None:  # torch's: drawn weights and running statistics
            for name, buffer in model.named_buffers():
                if name.endswith("running_mean") or name.endswith("running_var"):
                    buffer.copy_(torch.tensor(rng.uniform(0.5, 1.5, buffer.shape)))
            state = {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}
        else:
            model.load_state_dict(state)
        model.eval()
        with lib.no_grad():
            mean, var = model(lib.tensor(x))
        predictions.append((mean.numpy(), var.numpy()))
    for theirs, ours in zip(*predictions):
        np.testing.assert_allclose(ours, theirs, rtol=2e-5, atol=2e-6)
