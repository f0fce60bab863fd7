"""Real ports, continued (the harness: ``tests/real_ports.py``): a program written here in the
style of mamba-minimal (a selective state-space language model in plain PyTorch and einops).

- the configuration as a ``@dataclass`` whose ``__post_init__`` derives the inner width, the
  step-size rank (``'auto'`` -> ``math.ceil(width / 16)``, a ``Union[int, str]`` field) and
  pads the vocabulary to a multiple of 8;
- the model: an ``nn.Embedding`` tied to the output head (``head.weight = embed.weight``,
  which must survive ``load_state_dict``), residual layers in an ``nn.ModuleList``, an RMS
  norm ``x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * scale``, a depthwise causal
  ``nn.Conv1d(groups=inner, padding=k - 1)`` cut back by ``[:, :, :length]``,
  ``split(split_size=[...], dim=...)`` (torch's keyword), ``F.silu``, ``F.softplus`` step
  sizes, ``nn.Parameter(torch.log(A))`` of an int64 ``arange`` repeated by einops and
  ``-torch.exp(self.log_decay.float())``, the selective scan as a Python loop from
  ``torch.zeros((b, d, n))`` gathered by ``torch.stack(..., dim=2)``;
- AdamW on ``F.cross_entropy`` of shifted tokens, then greedy decoding under
  ``torch.no_grad()``: ``torch.topk(probs, k=...)``, the masked write ``probs[probs <
  kth[:, -1, None]] = 0``, ``probs.sum(axis=1, keepdims=True)`` (NumPy's keywords, which
  torch takes), ``torch.argmax(probs, dim=-1)[:, None]`` and ``torch.cat`` of the tokens.

einops' ``rearrange``/``repeat``/``einsum`` are called the same way in both runs.
"""

import numpy as np
import pytest
import torch

import retrograd as rg
from real_ports import assert_records_agree, both

pytest.importorskip("einops", minversion="0.8")

SSM_SOURCE = """
import dataclasses
from typing import Union
from einops import einsum, rearrange, repeat


@dataclasses.dataclass
class SSMConfig:
    width: int
    depth: int
    vocab: int
    state: int = 16
    expand: int = 2
    step_rank: Union[int, str] = 'auto'
    kernel: int = 4
    vocab_multiple: int = 8

    def __post_init__(self):
        self.inner = self.expand * self.width
        if self.step_rank == 'auto':
            self.step_rank = math.ceil(self.width / 16)
        spare = self.vocab % self.vocab_multiple
        if spare:
            self.vocab += self.vocab_multiple - spare  # friendlier matmul shapes


class RootMeanNorm(nn.Module):
    def __init__(self, size: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.scale = nn.Parameter(torch.ones(size))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.scale


class SelectiveMixer(nn.Module):
    def __init__(self, cfg: SSMConfig):
        super().__init__()
        self.cfg = cfg
        self.widen = nn.Linear(cfg.width, 2 * cfg.inner, bias=False)
        self.local = nn.Conv1d(cfg.inner, cfg.inner, kernel_size=cfg.kernel,
                               groups=cfg.inner, padding=cfg.kernel - 1)
        self.to_params = nn.Linear(cfg.inner, cfg.step_rank + 2 * cfg.state, bias=False)
        self.to_step = nn.Linear(cfg.step_rank, cfg.inner)
        rates = repeat(torch.arange(1, cfg.state + 1), 'n -> d n', d=cfg.inner)
        self.log_decay = nn.Parameter(torch.log(rates))
        self.skip = nn.Parameter(torch.ones(cfg.inner))
        self.narrow = nn.Linear(cfg.inner, cfg.width, bias=False)

    def forward(self, x):
        length = x.shape[1]
        both_paths = rearrange(self.widen(x), 'b t c -> b c t')
        u, gate = both_paths.split(split_size=[self.cfg.inner, self.cfg.inner], dim=1)
        u = F.silu(self.local(u)[:, :, :length])  # drop the right padding: stays causal
        y = self.scan(u) * F.silu(gate)
        return self.narrow(rearrange(y, 'b c t -> b t c'))

    def scan(self, u):
        decay = -torch.exp(self.log_decay.float())
        n = decay.shape[1]
        params = self.to_params(rearrange(u, 'b c t -> b t c'))
        step, into, out = params.split(split_size=[self.cfg.step_rank, n, n], dim=-1)
        step = F.softplus(self.to_step(step))
        keep = torch.exp(einsum(step, decay, 'b t c, c n -> b c t n'))
        push = einsum(step, into, u, 'b t c, b t n, b c t -> b c t n')
        h = torch.zeros((u.shape[0], u.shape[1], n))
        outputs = []
        for t in range(u.shape[2]):
            h = keep[:, :, t] * h + push[:, :, t]
            outputs.append(einsum(h, out[:, t], 'b c n, b n -> b c'))
        return torch.stack(outputs, dim=2) + u * rearrange(self.skip, 'c -> c 1')


class Layer(nn.Module):
    def __init__(self, cfg: SSMConfig):
        super().__init__()
        self.norm = RootMeanNorm(cfg.width)
        self.mixer = SelectiveMixer(cfg)

    def forward(self, x):
        return x + self.mixer(self.norm(x))


class TinySSM(nn.Module):
    def __init__(self, cfg: SSMConfig):
        super().__init__()
        self.embed = nn.Embedding(cfg.vocab, cfg.width)
        self.layers = nn.ModuleList(Layer(cfg) for _ in range(cfg.depth))
        self.final_norm = RootMeanNorm(cfg.width)
        self.head = nn.Linear(cfg.width, cfg.vocab, bias=False)
        self.head.weight = self.embed.weight  # one matrix reads and writes tokens

    def forward(self, tokens):
        h = self.embed(tokens)
        for layer in self.layers:
            h = layer(h)
        return self.head(self.final_norm(h))


def fit(model, tokens, steps, lr):
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    history = []
    for _ in range(steps):
        logits = model(tokens[:, :-1])
        loss = F.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten())
        opt.zero_grad()
        loss.backward()
        opt.step()
        history.append(loss.item())
    return history


def decode(model, prompt, new_tokens, keep=5):
    model.eval()
    tokens = prompt
    for _ in range(new_tokens):
        with torch.no_grad():
            last = model(tokens)[:, -1]
        probs = F.softmax(last, dim=-1)
        kth, _ = torch.topk(probs, k=keep)
        probs[probs < kth[:, -1, None]] = 0
        probs = probs.div(probs.sum(axis=1, keepdims=True))
        choice = torch.argmax(probs, dim=-1)[:, None]
        tokens = torch.cat([tokens, choice], dim=1)
    return tokens, probs
"""

SSM_STEP = [
    (
        "        loss.backward()\n        opt.step()",
        "        grads = loss.backward()\n        opt.step(grads)",
    )
]


def test_selective_ssm_training_and_decoding_match_torch():
    theirs, ours = both(SSM_SOURCE, SSM_STEP)
    assert theirs["SSMConfig"](width=16, depth=1, vocab=8).step_rank == 1
    assert ours["SSMConfig"](width=16, depth=1, vocab=8).vocab == 8
    tokens = np.random.default_rng(34).integers(0, 21, (3, 8))
    records, initial = [], None
    for lib, names in ((torch, theirs), (rg, ours)):
        torch.manual_seed(0)
        cfg = names["SSMConfig"](width=20, depth=2, vocab=21, state=4, kernel=3)
        assert cfg.vocab == 24 and cfg.step_rank == 2 and cfg.inner == 40
        model = names["TinySSM"](cfg)
        if initial is None:
            initial = {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}
        else:
            model.load_state_dict({k: rg.tensor(v) for k, v in initial.items()})
        assert model.head.weight is model.embed.weight
        history = names["fit"](model, lib.tensor(tokens), steps=3, lr=1e-2)
        out, probs = names["decode"](model, lib.tensor(tokens[:2, :3]), new_tokens=4)
        records.append(
            [
                history,
                out.numpy(),
                probs.numpy(),
                {n: p.detach().numpy().copy() for n, p in model.named_parameters()},
            ]
        )
    assert records[0][0][-1] < records[0][0][0]
    assert_records_agree(records[1], records[0], rtol=2e-4, atol=2e-5)
