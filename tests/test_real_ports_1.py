"""Real ports (the harness: ``tests/real_ports.py``): programs written here in the style of
Karpathy's minGPT and makemore, run under torch and, ported, under retrograd from the same
weights, their records compared.

- A small GPT in the style of minGPT's ``model.py``: the tanh GELU written out with
  ``torch.pow``, a ``tril`` mask buffer viewed to 4-d and ``masked_fill`` with ``-inf``,
  ``split(n_embd, dim=2)`` of a fused projection, an ``nn.ModuleDict`` MLP called through a
  lambda, ``self.apply`` of an initializer dispatching on ``isinstance``, parameters
  re-initialised by name suffix, an optimizer configuration that walks ``named_modules`` x
  ``named_parameters`` into decay / no-decay sets (AdamW parameter groups with ``betas``),
  ``cross_entropy(ignore_index=-1)``, ``zero_grad(set_to_none=True)``, ``clip_grad_norm_``,
  and generation under ``@torch.no_grad()`` with top-k masking by
  ``logits[logits < v[:, [-1]]] = -float("inf")``;
- a WaveNet-like character model in the style of makemore's lecture 6, from hand-written
  layers: ``Linear`` drawing with a ``torch.Generator``, ``BatchNorm1d`` over ``(0, 1)`` of a
  3-d input with running buffers updated under ``no_grad``, ``FlattenConsecutive`` by ``view``
  and ``squeeze(1)``, a ``Sequential`` of plain objects, ``p.grad = None`` and
  ``p.data += -lr * p.grad``, ``loss.log10()``, ``torch.tensor(lossi).view(-1, 2).mean(1)``,
  an ``@torch.no_grad()`` evaluation and greedy sampling by ``argmax``;
- makemore's model zoo in the style of ``makemore.py``: bigram table, MLP over
  ``torch.roll``-shifted contexts with an in-place write into the rolled result, RNN and GRU
  cells (``self.start.expand((b, -1))``, ``torch.stack(hiddens, 1)``), a bag of words
  (``torch.zeros`` attention masked to ``-inf``), a ``Dataset`` of padded words with ``-1``
  targets, ``DataLoader``, AdamW with ``betas`` and ``eps``, an ``@torch.inference_mode()``
  evaluation and generation.

The regression guarded (focused tests below): ``torch.roll``, ``flip`` and ``F.pad`` returned
their input (a view) when they moved nothing, so an in-place write into the result changed the
input (the MLP fed a one-column context at the start of generation wrote its blank token into
the caller's tensor).
"""

from __future__ import annotations

import types

import numpy as np
import pytest
import torch

import retrograd as rg
from real_ports import WithDraws, assert_records_agree, both, port, run_source, state_of

# -- a small GPT -----------------------------------------------------------------------------------
GPT_SOURCE = """
def gelu_tanh(x):
    # the tanh approximation of GELU, spelled out
    inner = math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))
    return 0.5 * x * (1.0 + torch.tanh(inner))

class GeluTanh(nn.Module):
    def forward(self, x):
        return gelu_tanh(x)

class MaskedSelfAttention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        assert cfg.n_embd % cfg.n_head == 0
        self.heads, self.width = cfg.n_head, cfg.n_embd
        self.qkv = nn.Linear(cfg.n_embd, 3 * cfg.n_embd)
        self.c_proj = nn.Linear(cfg.n_embd, cfg.n_embd)
        self.drop = nn.Dropout(cfg.dropout)
        lower = torch.tril(torch.ones(cfg.block_size, cfg.block_size))
        self.register_buffer("causal", lower.view(1, 1, cfg.block_size, cfg.block_size))

    def forward(self, x):
        B, T, C = x.size()
        def heads(t):
            return t.view(B, T, self.heads, C // self.heads).transpose(1, 2)
        q, k, v = map(heads, self.qkv(x).split(self.width, dim=2))
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(k.size(-1))
        scores = scores.masked_fill(self.causal[:, :, :T, :T] == 0, float("-inf"))
        mixed = self.drop(F.softmax(scores, dim=-1)) @ v
        return self.c_proj(mixed.transpose(1, 2).contiguous().view(B, T, C))

class Layer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.norm_a, self.norm_b = nn.LayerNorm(cfg.n_embd), nn.LayerNorm(cfg.n_embd)
        self.attn = MaskedSelfAttention(cfg)
        self.ff = nn.ModuleDict(dict(
            up=nn.Linear(cfg.n_embd, 4 * cfg.n_embd),
            act=GeluTanh(),
            c_proj=nn.Linear(4 * cfg.n_embd, cfg.n_embd),
        ))
        ff = self.ff
        self.feed_forward = lambda h: ff.c_proj(ff.act(ff.up(h)))

    def forward(self, x):
        x = x + self.attn(self.norm_a(x))
        return x + self.feed_forward(self.norm_b(x))

class TinyGPT(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.block_size = cfg.block_size
        self.body = nn.ModuleDict(dict(
            tokens=nn.Embedding(cfg.vocab_size, cfg.n_embd),
            places=nn.Embedding(cfg.block_size, cfg.n_embd),
            layers=nn.ModuleList([Layer(cfg) for _ in range(cfg.n_layer)]),
            norm=nn.LayerNorm(cfg.n_embd),
        ))
        self.head = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)
        self.apply(self.init_module)
        # residual projections start smaller, scaled by depth
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight"):
                torch.nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * cfg.n_layer))
        self.n_params = sum(p.numel() for p in self.body.parameters())

    def init_module(self, m):
        if isinstance(m, (nn.Linear, nn.Embedding)):
            torch.nn.init.normal_(m.weight, mean=0.0, std=0.02)
        if isinstance(m, nn.Linear) and m.bias is not None:
            torch.nn.init.zeros_(m.bias)
        elif isinstance(m, nn.LayerNorm):
            torch.nn.init.ones_(m.weight)
            torch.nn.init.zeros_(m.bias)

    def optimizer(self, cfg):
        # weight decay for Linear weights only; biases, norms and embeddings go without
        decayed, plain = set(), set()
        for module_name, m in self.named_modules():
            for name, _ in m.named_parameters():
                full = f"{module_name}.{name}" if module_name else name
                undecayed_weight = isinstance(m, (nn.LayerNorm, nn.Embedding))
                if name.endswith("bias") or (name.endswith("weight") and undecayed_weight):
                    plain.add(full)
                elif name.endswith("weight") and isinstance(m, nn.Linear):
                    decayed.add(full)
        by_name = dict(self.named_parameters())
        assert not decayed & plain and set(by_name) == decayed | plain
        groups = [
            {"params": [by_name[n] for n in sorted(decayed)], "weight_decay": cfg.weight_decay},
            {"params": [by_name[n] for n in sorted(plain)], "weight_decay": 0.0},
        ]
        return torch.optim.AdamW(groups, lr=cfg.learning_rate, betas=cfg.betas)

    def forward(self, idx, target=None):
        t = idx.size(1)
        assert t <= self.block_size, f"{t} tokens do not fit a block of {self.block_size}"
        where = torch.arange(0, t, dtype=torch.long, device=idx.device).unsqueeze(0)
        x = self.body.tokens(idx) + self.body.places(where)
        for layer in self.body.layers:
            x = layer(x)
        logits = self.head(self.body.norm(x))
        if target is None:
            return logits, None
        flat = logits.view(-1, logits.size(-1))
        return logits, F.cross_entropy(flat, target.view(-1), ignore_index=-1)

    @torch.no_grad()
    def extend(self, idx, steps, top_k=None, do_sample=False):
        for _ in range(steps):
            logits, _ = self(idx[:, -self.block_size:])
            logits = logits[:, -1, :]
            if top_k is not None:
                kth, _ = torch.topk(logits, top_k)
                logits[logits < kth[:, [-1]]] = -float("inf")
            p_next = F.softmax(logits, dim=-1)
            if do_sample:
                nxt = torch.multinomial(p_next, num_samples=1)
            else:
                nxt = torch.topk(p_next, k=1, dim=-1)[1]
            idx = torch.cat((idx, nxt), dim=1)
        return idx

def fit(gpt, cfg, batches):
    gpt.train()
    opt = gpt.optimizer(cfg)
    out = []
    for xs, ys in batches:
        _, loss = gpt(torch.tensor(xs, dtype=torch.long), torch.tensor(ys, dtype=torch.long))
        gpt.zero_grad(set_to_none=True)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(gpt.parameters(), cfg.clip)
        opt.step()
        out.append((loss.item(), float(norm)))
        out.append({n: p.detach().numpy().copy() for n, p in gpt.named_parameters()})
    gpt.eval()
    out.append(gpt.extend(torch.tensor([[3, 1]], dtype=torch.long), 4, top_k=3).numpy())
    out.append([len(group["params"]) for group in opt.param_groups])
    out.append(gpt.n_params)
    return out
"""

GPT_STEP = [
    (
        "        loss.backward()\n"
        "        norm = torch.nn.utils.clip_grad_norm_(gpt.parameters(), cfg.clip)\n"
        "        opt.step()",
        "        grads = loss.backward()\n"
        "        norm = torch.nn.utils.clip_grad_norm_(grads, gpt.parameters(), cfg.clip)\n"
        "        opt.step(grads)",
    )
]


def test_small_gpt_optimizer_groups_training_and_generation_match_torch():
    cfg = types.SimpleNamespace(
        vocab_size=9, block_size=5, n_layer=2, n_head=2, n_embd=8, dropout=0.0,
        weight_decay=0.1, learning_rate=3e-3, betas=(0.9, 0.95), clip=1.0,
    )  # fmt: skip
    rng = np.random.default_rng(0)
    batches = []
    for _ in range(2):
        xs = rng.integers(0, 9, (3, 5))
        ys = np.roll(xs, -1, 1)
        ys[:, -1] = -1  # nothing to predict after the last token
        batches.append((xs, ys))
    theirs, ours = both(GPT_SOURCE, GPT_STEP)
    torch.manual_seed(0)
    reference = theirs["TinyGPT"](cfg).double()
    model = ours["TinyGPT"](cfg).double()
    model.load_state_dict(state_of(reference))
    expected = theirs["fit"](reference, cfg, batches)
    got = ours["fit"](model, cfg, batches)
    # decayed: every Linear weight (4 a layer, 2 layers, and the head); the rest not
    assert got[-2] == expected[-2] == [9, 20]
    assert_records_agree(got, expected, rtol=1e-9, atol=1e-11)


# -- a WaveNet-like character model from hand-written layers ---------------------------------------
WAVENET_SOURCE = """
class Dense:
    def __init__(self, n_in, n_out, bias=True):
        self.weight = torch.randn((n_in, n_out), generator=gen) / n_in ** 0.5
        self.bias = torch.zeros(n_out) if bias else None

    def __call__(self, x):
        self.out = x @ self.weight
        if self.bias is not None:
            self.out += self.bias
        return self.out

    def parameters(self):
        return [self.weight] if self.bias is None else [self.weight, self.bias]

class BatchNorm:
    # statistics over every axis but the last: the batch, and the positions of a 3-d input
    def __init__(self, width, eps=1e-5, momentum=0.1):
        self.eps, self.momentum, self.training = eps, momentum, True
        self.gain, self.shift = torch.ones(width), torch.zeros(width)
        self.running_mean, self.running_var = torch.zeros(width), torch.ones(width)

    def __call__(self, x):
        if self.training:
            axes = 0 if x.ndim == 2 else (0, 1)
            mean, var = x.mean(axes, keepdim=True), x.var(axes, keepdim=True)
            with torch.no_grad():
                m = self.momentum
                self.running_mean = (1 - m) * self.running_mean + m * mean
                self.running_var = (1 - m) * self.running_var + m * var
        else:
            mean, var = self.running_mean, self.running_var
        self.out = self.gain * (x - mean) / torch.sqrt(var + self.eps) + self.shift
        return self.out

    def parameters(self):
        return [self.gain, self.shift]

class Tanh:
    def __call__(self, x):
        self.out = torch.tanh(x)
        return self.out

    def parameters(self):
        return []

class Lookup:
    def __init__(self, rows, width):
        self.weight = torch.randn((rows, width))

    def __call__(self, idx):
        self.out = self.weight[idx]
        return self.out

    def parameters(self):
        return [self.weight]

class Pairs:
    # (B, T, C) to (B, T / n, C * n): n neighbours side by side; a single group drops its axis
    def __init__(self, n):
        self.n = n

    def __call__(self, x):
        B, T, C = x.shape
        x = x.view(B, T // self.n, C * self.n)
        self.out = x.squeeze(1) if x.shape[1] == 1 else x
        return self.out

    def parameters(self):
        return []

class Stack:
    def __init__(self, layers):
        self.layers = layers

    def __call__(self, x):
        for layer in self.layers:
            x = layer(x)
        return x

    def parameters(self):
        return [p for part in self.layers for p in part.parameters()]

def examples(words, index, context):
    xs, ys = [], []
    for word in words:
        window = [0] * context
        for ch in word + ".":
            xs.append(window)
            ys.append(index[ch])
            window = window[1:] + [index[ch]]
    return torch.tensor(xs), torch.tensor(ys)

def run(words, steps=4):
    global gen
    letters = sorted(set("".join(words)))
    index = {ch: i + 1 for i, ch in enumerate(letters)}
    index["."] = 0
    letter_of = {i: ch for ch, i in index.items()}
    xs, ys = examples(words, index, 4)
    gen = torch.Generator().manual_seed(1234)
    emb, hid = 5, 12
    net = Stack([
        Lookup(len(index), emb),
        Pairs(2), Dense(emb * 2, hid, bias=False), BatchNorm(hid), Tanh(),
        Pairs(2), Dense(hid * 2, hid, bias=False), BatchNorm(hid), Tanh(),
        Dense(hid, len(index)),
    ])
    with torch.no_grad():
        net.layers[-1].weight *= 0.1  # a less confident start
    params = net.parameters()
    for p in params:
        p.requires_grad = True
    log = [sum(p.nelement() for p in params)]
    history = []
    for step in range(steps):
        pick = torch.randint(0, xs.shape[0], (6,), generator=gen)
        loss = F.cross_entropy(net(xs[pick]), ys[pick])
        for p in params:
            p.grad = None
        loss.backward()
        lr = 0.1 if step < 2 else 0.02
        for p in params:
            p.data += -lr * p.grad
        history.append(loss.log10().item())
        log.append([p.detach().numpy().copy() for p in params])
    log.append(history)
    log.append(torch.tensor(history).view(-1, 2).mean(1).numpy())
    for layer in net.layers:
        layer.training = False
    log.append([net.layers[3].running_mean.numpy(), net.layers[3].running_var.numpy()])

    @torch.no_grad()
    def full_loss():
        return F.cross_entropy(net(xs), ys).item()

    log.append(full_loss())
    for _ in range(2):
        window, name = [0] * 4, ""
        while True:
            nxt = torch.argmax(F.softmax(net(torch.tensor([window])), dim=1), dim=1).item()
            window = window[1:] + [nxt]
            if nxt == 0 or len(name) >= 8:
                break
            name += letter_of[nxt]
        log.append(name)
    return log
"""

WAVENET_STEP = [
    (
        "        for p in params:\n            p.grad = None\n        loss.backward()",
        "        grads = loss.backward()",
    ),
    ("p.data += -lr * p.grad", "p.data += -lr * p.grad(grads)"),
]  # fmt: skip

WORDS = ["ada", "beth", "cora", "dina", "edith", "fern", "greta", "hazel", "ivy", "june",
         "kira", "lena", "mara", "nell"]  # fmt: skip


def _flat(records):
    out = []
    for r in records:
        if isinstance(r, list) and r and isinstance(r[0], np.ndarray):
            out.append({str(i): a for i, a in enumerate(r)})
        else:
            out.append(r)
    return out


def test_wavenet_like_model_from_hand_written_layers_matches_torch():
    theirs = run_source(WAVENET_SOURCE, WithDraws(torch, 3))["run"](WORDS[:8])
    ours = run_source(port(WAVENET_SOURCE, WAVENET_STEP), WithDraws(rg, 3))["run"](WORDS[:8])
    assert_records_agree(_flat(ours), _flat(theirs), rtol=1e-5, atol=1e-6)


# -- makemore's model zoo --------------------------------------------------------------------------
MAKEMORE_SOURCE = """
from torch.utils.data import DataLoader, Dataset

def lm_loss(logits, target):
    if target is None:
        return None
    flat = logits.view(-1, logits.size(-1))
    return F.cross_entropy(flat, target.view(-1), ignore_index=-1)

class BigramTable(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.table = nn.Parameter(torch.zeros((cfg.vocab_size, cfg.vocab_size)))

    def context_size(self):
        return 1

    def forward(self, idx, target=None):
        logits = self.table[idx]
        return logits, lm_loss(logits, target)

class ShiftMLP(nn.Module):
    # each position sees the embeddings of its block_size predecessors, shifted in by roll
    def __init__(self, cfg):
        super().__init__()
        self.block_size, self.blank = cfg.block_size, cfg.vocab_size
        self.embed = nn.Embedding(cfg.vocab_size + 1, cfg.n_embd)  # one more row: the blank
        self.net = nn.Sequential(
            nn.Linear(cfg.block_size * cfg.n_embd, cfg.n_embd2), nn.Tanh(),
            nn.Linear(cfg.n_embd2, cfg.vocab_size),
        )

    def context_size(self):
        return self.block_size

    def forward(self, idx, target=None):
        seen = []
        for _ in range(self.block_size):
            seen.append(self.embed(idx))
            idx = torch.roll(idx, 1, 1)
            idx[:, 0] = self.blank  # written into roll's result: never into the caller's idx
        logits = self.net(torch.cat(seen, -1))
        return logits, lm_loss(logits, target)

class TanhCell(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.step = nn.Linear(cfg.n_embd + cfg.n_embd2, cfg.n_embd2)

    def forward(self, x, h):
        return F.tanh(self.step(torch.cat([x, h], dim=1)))

class GatedCell(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        joint = cfg.n_embd + cfg.n_embd2
        self.update = nn.Linear(joint, cfg.n_embd2)
        self.reset = nn.Linear(joint, cfg.n_embd2)
        self.candidate = nn.Linear(joint, cfg.n_embd2)

    def forward(self, x, h):
        xh = torch.cat([x, h], dim=1)
        r, z = F.sigmoid(self.reset(xh)), F.sigmoid(self.update(xh))
        proposal = F.tanh(self.candidate(torch.cat([x, r * h], dim=1)))
        return (1 - z) * h + z * proposal

class Recurrent(nn.Module):
    def __init__(self, cfg, gated):
        super().__init__()
        self.block_size = cfg.block_size
        self.start = nn.Parameter(torch.zeros(1, cfg.n_embd2))
        self.embed = nn.Embedding(cfg.vocab_size, cfg.n_embd)
        self.cell = GatedCell(cfg) if gated else TanhCell(cfg)
        self.out = nn.Linear(cfg.n_embd2, cfg.vocab_size)

    def context_size(self):
        return self.block_size

    def forward(self, idx, target=None):
        b, t = idx.size()
        x = self.embed(idx)
        h = self.start.expand((b, -1))
        states = []
        for i in range(t):
            h = self.cell(x[:, i, :], h)
            states.append(h)
        logits = self.out(torch.stack(states, 1))
        return logits, lm_loss(logits, target)

class BagOfWords(nn.Module):
    # each position averages the (embedded) positions up to it, then an MLP on the sum
    def __init__(self, cfg):
        super().__init__()
        self.block_size = cfg.block_size
        self.tokens = nn.Embedding(cfg.vocab_size, cfg.n_embd)
        self.places = nn.Embedding(cfg.block_size, cfg.n_embd)
        past = torch.tril(torch.ones(cfg.block_size, cfg.block_size))
        self.register_buffer("past", past.view(1, cfg.block_size, cfg.block_size))
        self.mix = nn.ModuleDict(
            dict(a=nn.Linear(cfg.n_embd, cfg.n_embd2), b=nn.Linear(cfg.n_embd2, cfg.n_embd))
        )
        self.out = nn.Linear(cfg.n_embd, cfg.vocab_size)

    def context_size(self):
        return self.block_size

    def forward(self, idx, target=None):
        b, t = idx.size()
        where = torch.arange(0, t, dtype=torch.long, device=idx.device).unsqueeze(0)
        x = self.tokens(idx) + self.places(where)
        weights = torch.zeros((b, t, t), device=x.device)
        weights = F.softmax(weights.masked_fill(self.past[:, :t, :t] == 0, float("-inf")), dim=-1)
        x = x + weights @ x
        x = x + self.mix.b(F.tanh(self.mix.a(x)))
        logits = self.out(x)
        return logits, lm_loss(logits, target)

@torch.no_grad()
def continue_from(model, idx, steps, top_k=None):
    span = model.context_size()
    for _ in range(steps):
        logits, _ = model(idx if idx.size(1) <= span else idx[:, -span:])
        logits = logits[:, -1, :]
        if top_k is not None:
            kth, _ = torch.topk(logits, top_k)
            logits[logits < kth[:, [-1]]] = -float("inf")
        _, best = torch.topk(F.softmax(logits, dim=-1), k=1, dim=-1)
        idx = torch.cat((idx, best), dim=1)
    return idx

@torch.inference_mode()
def mean_loss(model, data):
    model.eval()
    loader = DataLoader(data, shuffle=False, batch_size=2, num_workers=0)
    losses = [model(x, y)[1].item() for x, y in loader]
    model.train()
    return torch.tensor(losses).mean().item()

class Words(Dataset):
    # x: a 0 (start) then the word's codes; y: the codes, a 0 (end), then -1 (ignored)
    def __init__(self, words, letters, longest):
        self.words, self.longest = words, longest
        self.code = {ch: i + 1 for i, ch in enumerate(letters)}

    def __len__(self):
        return len(self.words)

    def __getitem__(self, i):
        codes = torch.tensor([self.code[ch] for ch in self.words[i]], dtype=torch.long)
        n = len(codes)
        x = torch.zeros(self.longest + 1, dtype=torch.long)
        y = torch.zeros(self.longest + 1, dtype=torch.long)
        x[1:1 + n] = codes
        y[:n] = codes
        y[n + 1:] = -1
        return x, y

def run(words, cfg, kind, state=None, steps=3):
    letters = sorted(set("".join(words)))
    longest = max(len(w) for w in words)
    train, held_out = Words(words[:-2], letters, longest), Words(words[-2:], letters, longest)
    cfg.vocab_size, cfg.block_size = len(letters) + 1, longest + 1
    lm = {
        "bigram": lambda: BigramTable(cfg), "mlp": lambda: ShiftMLP(cfg),
        "rnn": lambda: Recurrent(cfg, gated=False), "gru": lambda: Recurrent(cfg, gated=True),
        "bow": lambda: BagOfWords(cfg),
    }[kind]()
    if kind != "bow":  # the bag's torch.zeros weights are float32: that lm stays so
        lm = lm.double()
    if state is not None:
        lm.load_state_dict(state)
    start = {k: np.array(v.numpy(), copy=True) for k, v in lm.state_dict().items()}
    opt = torch.optim.AdamW(
        lm.parameters(), lr=5e-3, weight_decay=0.01, betas=(0.9, 0.99), eps=1e-8
    )
    log = []
    for step, (x, y) in enumerate(DataLoader(train, batch_size=4, shuffle=False, num_workers=0)):
        if step == steps:
            break
        _, loss = lm(x, y)
        lm.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        log.append(loss.item())
        log.append({n: p.detach().numpy().copy() for n, p in lm.named_parameters()})
    log.append(mean_loss(lm, held_out))
    prompt = torch.zeros(2, 1, dtype=torch.long)  # one column: the MLP's roll moves nothing
    log.append(continue_from(lm, prompt, 5, top_k=4)[:, 1:].tolist())
    log.append(prompt.tolist())
    return start, log
"""

MAKEMORE_STEP = [
    (
        "        loss.backward()\n        opt.step()",
        "        grads = loss.backward()\n        opt.step(grads)",
    )
]


@pytest.mark.parametrize("kind", ["bigram", "mlp", "rnn", "gru", "bow"])
def test_makemore_models_match_torch(kind):
    theirs, ours = both(MAKEMORE_SOURCE, MAKEMORE_STEP)

    def cfg():
        return types.SimpleNamespace(n_embd=6, n_embd2=10)

    torch.manual_seed(0)
    start, expected = theirs["run"](WORDS, cfg(), kind)
    _, got = ours["run"](WORDS, cfg(), kind, state=start)
    assert expected[-1] == [[0], [0]]  # the prompt as it was
    tolerance = (1e-5, 1e-6) if kind == "bow" else (1e-9, 1e-11)
    assert_records_agree(got, expected, *tolerance)


# -- the defects found -----------------------------------------------------------------------------
@pytest.mark.parametrize(
    "make",
    [
        lambda lib, x: lib.roll(x, 1, 1),  # a whole turn of a one-column tensor
        lambda lib, x: lib.roll(x, 0, 0),
        lambda lib, x: x.roll(2, 0),
        lambda lib, x: lib.roll(x, 2),  # flattened, a whole turn
        lambda lib, x: x.flip([]),
        lambda lib, x: lib.nn.functional.pad(x, (0, 0)),
        lambda lib, x: lib.nn.functional.pad(x, (-0, 0, 0, 0), value=1.0),
        lambda lib, x: lib.nn.functional.pad(x, (0, 0), mode="replicate"),
    ],
)
def test_ops_that_move_nothing_still_return_a_copy_as_torch_does(make):
    results = []
    for lib in (torch, rg):
        x = lib.tensor([[1.0], [2.0]])
        y = make(lib, x)
        y[0, 0] = 7.0  # a write into the result ...
        y.mul_(2.0)
        results.append((x.tolist(), y.tolist()))  # ... leaves the input alone
    assert results[1] == results[0]
    assert results[0][0] == [[1.0], [2.0]]


def test_a_pad_that_only_crops_is_a_copy():
    x = rg.tensor([[1.0, 2.0, 3.0]])
    y = rg.nn.functional.pad(x, (-1, 0))
    y.mul_(0.0)
    assert x.tolist() == [[1.0, 2.0, 3.0]]
    assert y.tolist() == [[0.0, 0.0]]
