# ruff: noqa: E501  (the programs are kept as their authors wrote them)
"""Real PyTorch programs ported to retrograd (see ``tests/real_ports.py`` for the harness):

- minGPT (github.com/karpathy/minGPT ``mingpt/model.py``): ``NewGELU`` written out with
  ``torch.pow``, the ``tril`` mask buffer viewed to 4-d and ``masked_fill`` with ``-inf``,
  ``split(n_embd, dim=2)``, an ``nn.ModuleDict`` MLP called through a lambda, ``self.apply``
  of an ``_init_weights`` on ``isinstance``, ``named_parameters`` re-initialised by suffix,
  ``configure_optimizers`` (``named_modules`` x ``named_parameters`` into decay / no-decay
  sets, AdamW parameter groups with ``betas``), ``cross_entropy(ignore_index=-1)``,
  ``clip_grad_norm_``, and ``generate`` under ``@torch.no_grad()`` with top-k masking by
  ``logits[logits < v[:, [-1]]] = -float('Inf')``;
- makemore, lecture 6 (nn-zero-to-hero ``makemore_part5_cnn1``): hand-written ``Linear``,
  ``BatchNorm1d`` over ``(0, 1)`` of a 3-d input with buffers updated under ``no_grad``,
  ``FlattenConsecutive`` by ``view`` and ``squeeze(1)``, a ``Sequential`` of plain objects,
  ``p.data += -lr * p.grad``, ``loss.log10()``, ``torch.tensor(lossi).view(-1, 2).mean(1)``,
  sampling with ``argmax``;
- makemore (github.com/karpathy/makemore ``makemore.py``): Bigram, MLP (``torch.roll`` and an
  in-place write into its result), RNN and GRU cells (``self.start.expand((b, -1))``,
  ``torch.stack(hiddens, 1)``), BoW (``torch.zeros`` attention masked to ``-inf``), a
  ``Dataset`` of padded words with ``-1`` targets, ``DataLoader``, AdamW with ``betas`` and
  ``eps``, ``@torch.inference_mode()`` evaluation and ``generate``.

The defects they found each have a focused test below: ``torch.roll``, ``flip`` and ``F.pad``
returned their input (a view) when they moved nothing, so an in-place write into the result
changed the input (makemore's MLP fed a one-column ``idx`` wrote its blank token into the
caller's tensor).
"""

from __future__ import annotations

import types

import numpy as np
import pytest
import torch

import retrograd as rg
from real_ports import WithDraws, assert_records_agree, both, port, run_source, state_of

# -- minGPT ----------------------------------------------------------------------------------------
MINGPT_SOURCE = """
class NewGELU(nn.Module):
    def forward(self, x):
        return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))

class CausalSelfAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        assert config.n_embd % config.n_head == 0
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd)
        self.c_proj = nn.Linear(config.n_embd, config.n_embd)
        self.attn_dropout = nn.Dropout(config.attn_pdrop)
        self.resid_dropout = nn.Dropout(config.resid_pdrop)
        self.register_buffer("bias", torch.tril(torch.ones(config.block_size, config.block_size))
                                     .view(1, 1, config.block_size, config.block_size))
        self.n_head = config.n_head
        self.n_embd = config.n_embd

    def forward(self, x):
        B, T, C = x.size()
        q, k ,v  = self.c_attn(x).split(self.n_embd, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:,:,:T,:T] == 0, float('-inf'))
        att = F.softmax(att, dim=-1)
        att = self.attn_dropout(att)
        y = att @ v
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        y = self.resid_dropout(self.c_proj(y))
        return y

class Block(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.n_embd)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = nn.LayerNorm(config.n_embd)
        self.mlp = nn.ModuleDict(dict(
            c_fc    = nn.Linear(config.n_embd, 4 * config.n_embd),
            c_proj  = nn.Linear(4 * config.n_embd, config.n_embd),
            act     = NewGELU(),
            dropout = nn.Dropout(config.resid_pdrop),
        ))
        m = self.mlp
        self.mlpf = lambda x: m.dropout(m.c_proj(m.act(m.c_fc(x))))

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        x = x + self.mlpf(self.ln_2(x))
        return x

class GPT(nn.Module):
    def __init__(self, config):
        super().__init__()
        assert config.vocab_size is not None
        assert config.block_size is not None
        self.block_size = config.block_size
        self.transformer = nn.ModuleDict(dict(
            wte = nn.Embedding(config.vocab_size, config.n_embd),
            wpe = nn.Embedding(config.block_size, config.n_embd),
            drop = nn.Dropout(config.embd_pdrop),
            h = nn.ModuleList([Block(config) for _ in range(config.n_layer)]),
            ln_f = nn.LayerNorm(config.n_embd),
        ))
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.apply(self._init_weights)
        for pn, p in self.named_parameters():
            if pn.endswith('c_proj.weight'):
                torch.nn.init.normal_(p, mean=0.0, std=0.02/math.sqrt(2 * config.n_layer))
        n_params = sum(p.numel() for p in self.transformer.parameters())
        self.n_params = n_params

    def _init_weights(self, module):
        if isinstance(module, nn.Linear):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                torch.nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)
        elif isinstance(module, nn.LayerNorm):
            torch.nn.init.zeros_(module.bias)
            torch.nn.init.ones_(module.weight)

    def configure_optimizers(self, train_config):
        decay = set()
        no_decay = set()
        whitelist_weight_modules = (torch.nn.Linear, )
        blacklist_weight_modules = (torch.nn.LayerNorm, torch.nn.Embedding)
        for mn, m in self.named_modules():
            for pn, p in m.named_parameters():
                fpn = '%s.%s' % (mn, pn) if mn else pn
                if pn.endswith('bias'):
                    no_decay.add(fpn)
                elif pn.endswith('weight') and isinstance(m, whitelist_weight_modules):
                    decay.add(fpn)
                elif pn.endswith('weight') and isinstance(m, blacklist_weight_modules):
                    no_decay.add(fpn)
        param_dict = {pn: p for pn, p in self.named_parameters()}
        inter_params = decay & no_decay
        union_params = decay | no_decay
        assert len(inter_params) == 0, "parameters %s made it into both decay/no_decay sets!" % (str(inter_params), )
        assert len(param_dict.keys() - union_params) == 0, "parameters %s were not separated into either decay/no_decay set!" \\
                                                    % (str(param_dict.keys() - union_params), )
        optim_groups = [
            {"params": [param_dict[pn] for pn in sorted(list(decay))], "weight_decay": train_config.weight_decay},
            {"params": [param_dict[pn] for pn in sorted(list(no_decay))], "weight_decay": 0.0},
        ]
        optimizer = torch.optim.AdamW(optim_groups, lr=train_config.learning_rate, betas=train_config.betas)
        return optimizer

    def forward(self, idx, targets=None):
        device = idx.device
        b, t = idx.size()
        assert t <= self.block_size, f"Cannot forward sequence of length {t}, block size is only {self.block_size}"
        pos = torch.arange(0, t, dtype=torch.long, device=device).unsqueeze(0)
        tok_emb = self.transformer.wte(idx)
        pos_emb = self.transformer.wpe(pos)
        x = self.transformer.drop(tok_emb + pos_emb)
        for block in self.transformer.h:
            x = block(x)
        x = self.transformer.ln_f(x)
        logits = self.lm_head(x)
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)
        return logits, loss

    @torch.no_grad()
    def generate(self, idx, max_new_tokens, temperature=1.0, do_sample=False, top_k=None):
        for _ in range(max_new_tokens):
            idx_cond = idx if idx.size(1) <= self.block_size else idx[:, -self.block_size:]
            logits, _ = self(idx_cond)
            logits = logits[:, -1, :] / temperature
            if top_k is not None:
                v, _ = torch.topk(logits, top_k)
                logits[logits < v[:, [-1]]] = -float('Inf')
            probs = F.softmax(logits, dim=-1)
            if do_sample:
                idx_next = torch.multinomial(probs, num_samples=1)
            else:
                _, idx_next = torch.topk(probs, k=1, dim=-1)
            idx = torch.cat((idx, idx_next), dim=1)
        return idx

def train(model, config, batches):
    model.train()
    optimizer = model.configure_optimizers(config)
    records = []
    for x, y in batches:
        x = torch.tensor(x, dtype=torch.long)
        y = torch.tensor(y, dtype=torch.long)
        logits, loss = model(x, y)
        model.zero_grad(set_to_none=True)
        loss.backward()
        gn = torch.nn.utils.clip_grad_norm_(model.parameters(), config.grad_norm_clip)
        optimizer.step()
        records.append((loss.item(), float(gn)))
        records.append({n: p.detach().numpy().copy() for n, p in model.named_parameters()})
    model.eval()
    out = model.generate(torch.tensor([[1, 2]], dtype=torch.long), 5, top_k=3)
    records.append(out.numpy())
    records.append([len(g["params"]) for g in optimizer.param_groups])
    records.append(model.n_params)
    return records
"""

MINGPT_STEP = [
    (
        "        loss.backward()\n        gn = torch.nn.utils.clip_grad_norm_(model.parameters(), config.grad_norm_clip)\n        optimizer.step()",
        "        grads = loss.backward()\n        gn = torch.nn.utils.clip_grad_norm_(grads, model.parameters(), config.grad_norm_clip)\n        optimizer.step(grads)",
    )
]


def test_mingpt_configure_optimizers_training_and_generation_match_torch():
    config = types.SimpleNamespace(
        vocab_size=11, block_size=6, n_layer=2, n_head=2, n_embd=16, embd_pdrop=0.0,
        resid_pdrop=0.0, attn_pdrop=0.0, weight_decay=0.1, learning_rate=3e-3,
        betas=(0.9, 0.95), grad_norm_clip=1.0,
    )  # fmt: skip
    rng = np.random.default_rng(0)
    batches = []
    for _ in range(3):
        x = rng.integers(0, 11, (4, 6))
        y = np.roll(x, -1, 1)
        y[:, -1] = -1
        batches.append((x, y))
    theirs, ours = both(MINGPT_SOURCE, MINGPT_STEP)
    torch.manual_seed(0)
    reference = theirs["GPT"](config).double()
    model = ours["GPT"](config).double()
    model.load_state_dict(state_of(reference))
    expected = theirs["train"](reference, config, batches)
    got = ours["train"](model, config, batches)
    # the decay group: every Linear weight; the other: biases, LayerNorm and Embedding weights
    assert got[-2] == expected[-2] == [9, 20]
    assert_records_agree(got, expected, rtol=1e-9, atol=1e-11)


# -- makemore, lecture 6 (WaveNet) -----------------------------------------------------------------
WAVENET_SOURCE = """
class Linear:
  def __init__(self, fan_in, fan_out, bias=True):
    self.weight = torch.randn((fan_in, fan_out), generator=g) / fan_in**0.5 # note: kaiming init
    self.bias = torch.zeros(fan_out) if bias else None
  def __call__(self, x):
    self.out = x @ self.weight
    if self.bias is not None:
      self.out += self.bias
    return self.out
  def parameters(self):
    return [self.weight] + ([] if self.bias is None else [self.bias])

class BatchNorm1d:
  def __init__(self, dim, eps=1e-5, momentum=0.1):
    self.eps = eps
    self.momentum = momentum
    self.training = True
    # parameters (trained with backprop)
    self.gamma = torch.ones(dim)
    self.beta = torch.zeros(dim)
    # buffers (trained with a running 'momentum update')
    self.running_mean = torch.zeros(dim)
    self.running_var = torch.ones(dim)
  def __call__(self, x):
    # calculate the forward pass
    if self.training:
      if x.ndim == 2:
        dim = 0
      elif x.ndim == 3:
        dim = (0,1)
      xmean = x.mean(dim, keepdim=True) # batch mean
      xvar = x.var(dim, keepdim=True) # batch variance
    else:
      xmean = self.running_mean
      xvar = self.running_var
    xhat = (x - xmean) / torch.sqrt(xvar + self.eps) # normalize to unit variance
    self.out = self.gamma * xhat + self.beta
    # update the buffers
    if self.training:
      with torch.no_grad():
        self.running_mean = (1 - self.momentum) * self.running_mean + self.momentum * xmean
        self.running_var = (1 - self.momentum) * self.running_var + self.momentum * xvar
    return self.out
  def parameters(self):
    return [self.gamma, self.beta]

class Tanh:
  def __call__(self, x):
    self.out = torch.tanh(x)
    return self.out
  def parameters(self):
    return []

class Embedding:
  def __init__(self, num_embeddings, embedding_dim):
    self.weight = torch.randn((num_embeddings, embedding_dim))
  def __call__(self, IX):
    self.out = self.weight[IX]
    return self.out
  def parameters(self):
    return [self.weight]

class FlattenConsecutive:
  def __init__(self, n):
    self.n = n
  def __call__(self, x):
    B, T, C = x.shape
    x = x.view(B, T//self.n, C*self.n)
    if x.shape[1] == 1:
      x = x.squeeze(1)
    self.out = x
    return self.out
  def parameters(self):
    return []

class Sequential:
  def __init__(self, layers):
    self.layers = layers
  def __call__(self, x):
    for layer in self.layers:
      x = layer(x)
    self.out = x
    return self.out
  def parameters(self):
    # get parameters of all layers and stretch them out into one list
    return [p for layer in self.layers for p in layer.parameters()]

def build_dataset(words, stoi, block_size):
  X, Y = [], []
  for w in words:
    context = [0] * block_size
    for ch in w + '.':
      ix = stoi[ch]
      X.append(context)
      Y.append(ix)
      context = context[1:] + [ix] # crop and append
  X = torch.tensor(X)
  Y = torch.tensor(Y)
  return X, Y

def main(words, max_steps=4):
  global g
  chars = sorted(list(set(''.join(words))))
  stoi = {s:i+1 for i,s in enumerate(chars)}
  stoi['.'] = 0
  itos = {i:s for s,i in stoi.items()}
  vocab_size = len(itos)
  block_size = 8
  Xtr, Ytr = build_dataset(words, stoi, block_size)
  g = torch.Generator().manual_seed(2147483647)
  n_embd = 6 # the dimensionality of the character embedding vectors
  n_hidden = 16 # the number of neurons in the hidden layer of the MLP
  model = Sequential([
    Embedding(vocab_size, n_embd),
    FlattenConsecutive(2), Linear(n_embd * 2, n_hidden, bias=False), BatchNorm1d(n_hidden), Tanh(),
    FlattenConsecutive(2), Linear(n_hidden*2, n_hidden, bias=False), BatchNorm1d(n_hidden), Tanh(),
    FlattenConsecutive(2), Linear(n_hidden*2, n_hidden, bias=False), BatchNorm1d(n_hidden), Tanh(),
    Linear(n_hidden, vocab_size),
  ])
  # parameter init
  with torch.no_grad():
    model.layers[-1].weight *= 0.1 # last layer make less confident
  parameters = model.parameters()
  n = sum(p.nelement() for p in parameters)
  for p in parameters:
    p.requires_grad = True
  records = [n]
  lossi = []
  batch_size = 8
  for i in range(max_steps):
    # minibatch construct
    ix = torch.randint(0, Xtr.shape[0], (batch_size,), generator=g)
    Xb, Yb = Xtr[ix], Ytr[ix] # batch X,Y
    # forward pass
    logits = model(Xb)
    loss = F.cross_entropy(logits, Yb) # loss function
    # backward pass
    for p in parameters:
      p.grad = None
    loss.backward()
    # update: simple SGD
    lr = 0.1 if i < 3 else 0.01 # step learning rate decay
    for p in parameters:
      p.data += -lr * p.grad
    lossi.append(loss.log10().item())
    records.append([p.detach().numpy().copy() for p in parameters])
  records.append(lossi)
  records.append(torch.tensor(lossi).view(-1, 2).mean(1).numpy())
  for layer in model.layers:
    layer.training = False
  records.append([model.layers[3].running_mean.numpy(), model.layers[3].running_var.numpy()])
  # evaluate the loss
  @torch.no_grad() # this decorator disables gradient tracking inside pytorch
  def split_loss(x, y):
    logits = model(x)
    loss = F.cross_entropy(logits, y)
    return loss.item()
  records.append(split_loss(Xtr, Ytr))
  # sample from the model
  for _ in range(2):
      out = []
      context = [0] * block_size # initialize with all ...
      while True:
        # forward pass the neural net
        logits = model(torch.tensor([context]))
        probs = F.softmax(logits, dim=1)
        # sample from the distribution
        ix = torch.argmax(probs, dim=1).item()
        # shift the context window and track the samples
        context = context[1:] + [ix]
        out.append(ix)
        # if we sample the special '.' token, break
        if ix == 0 or len(out) > 10:
          break
      records.append(''.join(itos[i] for i in out))
  return records
"""

WAVENET_STEP = [
    (
        "    for p in parameters:\n      p.grad = None\n    loss.backward()",
        "    grads = loss.backward()",
    ),
    ("p.data += -lr * p.grad", "p.data += -lr * p.grad(grads)"),
]

WORDS = ["emma", "olivia", "ava", "isabella", "sophia", "mia", "amelia", "harper", "evelyn",
         "abigail", "ella", "zoe", "lily", "aria"]  # fmt: skip


def _flat(records):
    out = []
    for r in records:
        if isinstance(r, list) and r and isinstance(r[0], np.ndarray):
            out.append({str(i): a for i, a in enumerate(r)})
        else:
            out.append(r)
    return out


def test_makemore_wavenet_lecture_matches_torch():
    source = WAVENET_SOURCE
    theirs = run_source(source, WithDraws(torch, 3))["main"](WORDS[:10])
    ours = run_source(port(source, WAVENET_STEP), WithDraws(rg, 3))["main"](WORDS[:10])
    assert_records_agree(_flat(ours), _flat(theirs), rtol=1e-5, atol=1e-6)


# -- makemore.py -------------------------------------------------------------------------------
MAKEMORE_SOURCE = """
from torch.utils.data import Dataset
from torch.utils.data.dataloader import DataLoader

class CausalBoW(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.block_size = config.block_size
        self.register_buffer("bias", torch.tril(torch.ones(config.block_size, config.block_size))
                                    .view(1, config.block_size, config.block_size))
    def forward(self, x):
        B, T, C = x.size()
        att = torch.zeros((B, T, T), device=x.device)
        att = att.masked_fill(self.bias[:,:T,:T] == 0, float('-inf'))
        att = F.softmax(att, dim=-1)
        y = att @ x
        return y

class BoWBlock(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.cbow = CausalBoW(config)
        self.mlp = nn.ModuleDict(dict(
            c_fc    = nn.Linear(config.n_embd, config.n_embd2),
            c_proj  = nn.Linear(config.n_embd2, config.n_embd),
        ))
        m = self.mlp
        self.mlpf = lambda x: m.c_proj(F.tanh(m.c_fc(x)))
    def forward(self, x):
        x = x + self.cbow(x)
        x = x + self.mlpf(x)
        return x

class BoW(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.block_size = config.block_size
        self.vocab_size = config.vocab_size
        self.wte = nn.Embedding(config.vocab_size, config.n_embd)
        self.wpe = nn.Embedding(config.block_size, config.n_embd)
        self.context_block = BoWBlock(config)
        self.lm_head = nn.Linear(config.n_embd, self.vocab_size)
    def get_block_size(self):
        return self.block_size
    def forward(self, idx, targets=None):
        device = idx.device
        b, t = idx.size()
        assert t <= self.block_size, f"Cannot forward sequence of length {t}, block size is only {self.block_size}"
        pos = torch.arange(0, t, dtype=torch.long, device=device).unsqueeze(0) # shape (1, t)
        tok_emb = self.wte(idx) # token embeddings of shape (b, t, n_embd)
        pos_emb = self.wpe(pos) # position embeddings of shape (1, t, n_embd)
        x = tok_emb + pos_emb
        x = self.context_block(x)
        logits = self.lm_head(x)
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)
        return logits, loss

class RNNCell(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.xh_to_h = nn.Linear(config.n_embd + config.n_embd2, config.n_embd2)
    def forward(self, xt, hprev):
        xh = torch.cat([xt, hprev], dim=1)
        ht = F.tanh(self.xh_to_h(xh))
        return ht

class GRUCell(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.xh_to_z = nn.Linear(config.n_embd + config.n_embd2, config.n_embd2)
        self.xh_to_r = nn.Linear(config.n_embd + config.n_embd2, config.n_embd2)
        self.xh_to_hbar = nn.Linear(config.n_embd + config.n_embd2, config.n_embd2)
    def forward(self, xt, hprev):
        xh = torch.cat([xt, hprev], dim=1)
        r = F.sigmoid(self.xh_to_r(xh))
        hprev_reset = r * hprev
        xhr = torch.cat([xt, hprev_reset], dim=1)
        hbar = F.tanh(self.xh_to_hbar(xhr))
        z = F.sigmoid(self.xh_to_z(xh))
        ht = (1 - z) * hprev + z * hbar
        return ht

class RNN(nn.Module):
    def __init__(self, config, cell_type):
        super().__init__()
        self.block_size = config.block_size
        self.vocab_size = config.vocab_size
        self.start = nn.Parameter(torch.zeros(1, config.n_embd2)) # the starting hidden state
        self.wte = nn.Embedding(config.vocab_size, config.n_embd) # token embeddings table
        if cell_type == 'rnn':
            self.cell = RNNCell(config)
        elif cell_type == 'gru':
            self.cell = GRUCell(config)
        self.lm_head = nn.Linear(config.n_embd2, self.vocab_size)
    def get_block_size(self):
        return self.block_size
    def forward(self, idx, targets=None):
        device = idx.device
        b, t = idx.size()
        emb = self.wte(idx) # (b, t, n_embd)
        hprev = self.start.expand((b, -1)) # expand out the batch dimension
        hiddens = []
        for i in range(t):
            xt = emb[:, i, :] # (b, n_embd)
            ht = self.cell(xt, hprev) # (b, n_embd2)
            hprev = ht
            hiddens.append(ht)
        hidden = torch.stack(hiddens, 1) # (b, t, n_embd2)
        logits = self.lm_head(hidden)
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)
        return logits, loss

class MLP(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.block_size = config.block_size
        self.vocab_size = config.vocab_size
        self.wte = nn.Embedding(config.vocab_size + 1, config.n_embd) # token embeddings table
        self.mlp = nn.Sequential(
            nn.Linear(self.block_size * config.n_embd, config.n_embd2),
            nn.Tanh(),
            nn.Linear(config.n_embd2, self.vocab_size)
        )
    def get_block_size(self):
        return self.block_size
    def forward(self, idx, targets=None):
        embs = []
        for k in range(self.block_size):
            tok_emb = self.wte(idx) # token embeddings of shape (b, t, n_embd)
            idx = torch.roll(idx, 1, 1)
            idx[:, 0] = self.vocab_size # special <BLANK> token
            embs.append(tok_emb)
        x = torch.cat(embs, -1) # (b, t, n_embd * block_size)
        logits = self.mlp(x)
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)
        return logits, loss

class Bigram(nn.Module):
    def __init__(self, config):
        super().__init__()
        n = config.vocab_size
        self.logits = nn.Parameter(torch.zeros((n, n)))
    def get_block_size(self):
        return 1
    def forward(self, idx, targets=None):
        logits = self.logits[idx]
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)
        return logits, loss

@torch.no_grad()
def generate(model, idx, max_new_tokens, temperature=1.0, do_sample=False, top_k=None):
    block_size = model.get_block_size()
    for _ in range(max_new_tokens):
        idx_cond = idx if idx.size(1) <= block_size else idx[:, -block_size:]
        logits, _ = model(idx_cond)
        logits = logits[:, -1, :] / temperature
        if top_k is not None:
            v, _ = torch.topk(logits, top_k)
            logits[logits < v[:, [-1]]] = -float('Inf')
        probs = F.softmax(logits, dim=-1)
        if do_sample:
            idx_next = torch.multinomial(probs, num_samples=1)
        else:
            _, idx_next = torch.topk(probs, k=1, dim=-1)
        idx = torch.cat((idx, idx_next), dim=1)
    return idx

@torch.inference_mode()
def evaluate(model, dataset, batch_size=50, max_batches=None):
    model.eval()
    loader = DataLoader(dataset, shuffle=False, batch_size=batch_size, num_workers=0)
    losses = []
    for i, batch in enumerate(loader):
        X, Y = batch
        logits, loss = model(X, Y)
        losses.append(loss.item())
        if max_batches is not None and i >= max_batches:
            break
    mean_loss = torch.tensor(losses).mean().item()
    model.train() # reset model back to training mode
    return mean_loss

class CharDataset(Dataset):
    def __init__(self, words, chars, max_word_length):
        self.words = words
        self.chars = chars
        self.max_word_length = max_word_length
        self.stoi = {ch:i+1 for i,ch in enumerate(chars)}
        self.itos = {i:s for s,i in self.stoi.items()} # inverse mapping
    def __len__(self):
        return len(self.words)
    def contains(self, word):
        return word in self.words
    def get_vocab_size(self):
        return len(self.chars) + 1 # all the possible characters and special 0 token
    def get_output_length(self):
        return self.max_word_length + 1 # <START> token followed by words
    def encode(self, word):
        ix = torch.tensor([self.stoi[w] for w in word], dtype=torch.long)
        return ix
    def decode(self, ix):
        word = ''.join(self.itos[i] for i in ix)
        return word
    def __getitem__(self, idx):
        word = self.words[idx]
        ix = self.encode(word)
        x = torch.zeros(self.max_word_length + 1, dtype=torch.long)
        y = torch.zeros(self.max_word_length + 1, dtype=torch.long)
        x[1:1+len(ix)] = ix
        y[:len(ix)] = ix
        y[len(ix)+1:] = -1 # index -1 will mask the loss at the inactive locations
        return x, y

def create_datasets(words):
    chars = sorted(list(set(''.join(words)))) # all the possible characters
    max_word_length = max(len(w) for w in words)
    test_set_size = min(1000, int(len(words) * 0.1)) # 10% of the training set, or up to 1000 examples
    rp = list(range(len(words)))
    train_words = [words[i] for i in rp[:-test_set_size]]
    test_words = [words[i] for i in rp[-test_set_size:]]
    train_dataset = CharDataset(train_words, chars, max_word_length)
    test_dataset = CharDataset(test_words, chars, max_word_length)
    return train_dataset, test_dataset

def main(words, config, kind, state=None, steps=3):
    train_dataset, test_dataset = create_datasets(words)
    vocab_size = train_dataset.get_vocab_size()
    block_size = train_dataset.get_output_length()
    config.vocab_size = vocab_size
    config.block_size = block_size
    if kind == 'bigram':
        model = Bigram(config)
    elif kind == 'mlp':
        model = MLP(config)
    elif kind == 'rnn':
        model = RNN(config, cell_type='rnn')
    elif kind == 'gru':
        model = RNN(config, cell_type='gru')
    elif kind == 'bow':
        model = BoW(config)
    if kind != 'bow':  # BoW's torch.zeros attention is float32: the model stays so
        model = model.double()
    if state is not None:
        model.load_state_dict(state)
    init = {k: np.array(v.numpy() if hasattr(v, 'numpy') else v, copy=True) for k, v in model.state_dict().items()}
    optimizer = torch.optim.AdamW(model.parameters(), lr=5e-3, weight_decay=0.01, betas=(0.9, 0.99), eps=1e-8)
    loader = DataLoader(train_dataset, batch_size=4, shuffle=False, num_workers=0)
    records = []
    for step, batch in enumerate(loader):
        if step >= steps:
            break
        X, Y = batch
        logits, loss = model(X, Y)
        model.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        records.append(loss.item())
        records.append({n: p.detach().numpy().copy() for n, p in model.named_parameters()})
    records.append(evaluate(model, test_dataset, batch_size=2))
    X_init = torch.zeros(2, 1, dtype=torch.long)
    X_samp = generate(model, X_init, 5, top_k=None, do_sample=False)[:, 1:].tolist()
    records.append(X_samp)
    return init, records
"""

MAKEMORE_STEP = [
    (
        "        loss.backward()\n        optimizer.step()",
        "        grads = loss.backward()\n        optimizer.step(grads)",
    )
]


@pytest.mark.parametrize("kind", ["bigram", "mlp", "rnn", "gru", "bow"])
def test_makemore_models_match_torch(kind):
    theirs, ours = both(MAKEMORE_SOURCE, MAKEMORE_STEP)

    def config():
        return types.SimpleNamespace(n_layer=2, n_head=2, n_embd=8, n_embd2=12)

    torch.manual_seed(0)
    initial, expected = theirs["main"](WORDS, config(), kind)
    _, got = ours["main"](WORDS, config(), kind, state=initial)
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
