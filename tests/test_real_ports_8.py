# ruff: noqa: E501  (the programs are kept as their authors wrote them)
"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):

- nanoGPT's ``train.py`` loop over its ``model.py`` (github.com/karpathy/nanoGPT), one
  process, small: a ``nullcontext``/``torch.amp.autocast`` context, ``torch.cuda.amp.GradScaler
  (enabled=(dtype == 'float16'))``, ``get_batch`` by ``torch.randint(high, size)`` whose 0-d
  entries slice a NumPy array (``data[i:i+block_size]``) for ``torch.from_numpy(...).astype``
  and ``torch.stack``, ``estimate_loss`` under ``@torch.no_grad()`` writing ``losses[k] =
  loss.item()`` into ``torch.zeros`` and comparing the mean with a float, the cosine ``get_lr``
  written into every ``param_group['lr']``, gradient accumulation over micro-steps
  (``loss / gradient_accumulation_steps``), ``scaler.unscale_`` before ``clip_grad_norm_``,
  ``scaler.step``/``update``, ``zero_grad(set_to_none=True)``; the model with weight tying,
  ``F.scaled_dot_product_attention(is_causal=True)``, the hand-written ``LayerNorm`` over
  ``F.layer_norm``, and ``configure_optimizers`` reading ``inspect.signature(torch.optim.AdamW)``
  for ``fused``.

The port changes the gradient lines only: each micro-step's gradients are summed
(``grads = micro_grads if micro_step == 0 else grads + micro_grads``), where torch sums them
into ``.grad``.
"""

from __future__ import annotations

import types

import numpy as np
import pytest
import torch

import retrograd as rg
from real_ports import assert_records_agree, both

NANOGPT_SOURCE = """
import inspect
import time
from contextlib import nullcontext

class CausalSelfAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        assert config.n_embd % config.n_head == 0
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd, bias=config.bias)
        self.c_proj = nn.Linear(config.n_embd, config.n_embd, bias=config.bias)
        self.attn_dropout = nn.Dropout(config.dropout)
        self.resid_dropout = nn.Dropout(config.dropout)
        self.n_head = config.n_head
        self.n_embd = config.n_embd
        self.dropout = config.dropout
        self.flash = hasattr(torch.nn.functional, 'scaled_dot_product_attention')
    def forward(self, x):
        B, T, C = x.size()
        q, k, v  = self.c_attn(x).split(self.n_embd, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        y = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=None, dropout_p=self.dropout if self.training else 0, is_causal=True)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        y = self.resid_dropout(self.c_proj(y))
        return y

class LayerNorm(nn.Module):
    def __init__(self, ndim, bias):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(ndim))
        self.bias = nn.Parameter(torch.zeros(ndim)) if bias else None
    def forward(self, input):
        return F.layer_norm(input, self.weight.shape, self.weight, self.bias, 1e-5)

class MLP(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.c_fc    = nn.Linear(config.n_embd, 4 * config.n_embd, bias=config.bias)
        self.gelu    = nn.GELU()
        self.c_proj  = nn.Linear(4 * config.n_embd, config.n_embd, bias=config.bias)
        self.dropout = nn.Dropout(config.dropout)
    def forward(self, x):
        x = self.c_fc(x)
        x = self.gelu(x)
        x = self.c_proj(x)
        x = self.dropout(x)
        return x

class Block(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.ln_1 = LayerNorm(config.n_embd, bias=config.bias)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = LayerNorm(config.n_embd, bias=config.bias)
        self.mlp = MLP(config)
    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        x = x + self.mlp(self.ln_2(x))
        return x

class GPT(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.transformer = nn.ModuleDict(dict(
            wte = nn.Embedding(config.vocab_size, config.n_embd),
            wpe = nn.Embedding(config.block_size, config.n_embd),
            drop = nn.Dropout(config.dropout),
            h = nn.ModuleList([Block(config) for _ in range(config.n_layer)]),
            ln_f = LayerNorm(config.n_embd, bias=config.bias),
        ))
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.transformer.wte.weight = self.lm_head.weight
        self.apply(self._init_weights)
        for pn, p in self.named_parameters():
            if pn.endswith('c_proj.weight'):
                torch.nn.init.normal_(p, mean=0.0, std=0.02/math.sqrt(2 * config.n_layer))
    def _init_weights(self, module):
        if isinstance(module, nn.Linear):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                torch.nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)
    def forward(self, idx, targets=None):
        device = idx.device
        b, t = idx.size()
        pos = torch.arange(0, t, dtype=torch.long, device=device)
        tok_emb = self.transformer.wte(idx)
        pos_emb = self.transformer.wpe(pos)
        x = self.transformer.drop(tok_emb + pos_emb)
        for block in self.transformer.h:
            x = block(x)
        x = self.transformer.ln_f(x)
        if targets is not None:
            logits = self.lm_head(x)
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)
        else:
            logits = self.lm_head(x[:, [-1], :])
            loss = None
        return logits, loss
    def configure_optimizers(self, weight_decay, learning_rate, betas, device_type):
        param_dict = {pn: p for pn, p in self.named_parameters()}
        param_dict = {pn: p for pn, p in param_dict.items() if p.requires_grad}
        decay_params = [p for n, p in param_dict.items() if p.dim() >= 2]
        nodecay_params = [p for n, p in param_dict.items() if p.dim() < 2]
        optim_groups = [
            {'params': decay_params, 'weight_decay': weight_decay},
            {'params': nodecay_params, 'weight_decay': 0.0}
        ]
        fused_available = 'fused' in inspect.signature(torch.optim.AdamW).parameters
        use_fused = fused_available and device_type == 'cuda'
        extra_args = dict(fused=True) if use_fused else dict()
        optimizer = torch.optim.AdamW(optim_groups, lr=learning_rate, betas=betas, **extra_args)
        return optimizer

def main(config, train_data, val_data, dtype, state=None, max_iters=4):
    gradient_accumulation_steps = 2
    batch_size = 3
    block_size = config.block_size
    learning_rate = 6e-3
    weight_decay = 1e-1
    beta1 = 0.9
    beta2 = 0.95
    grad_clip = 1.0
    decay_lr = True
    warmup_iters = 2
    lr_decay_iters = 4
    min_lr = 6e-4
    eval_interval = 2
    eval_iters = 2
    device = 'cpu'
    device_type = 'cuda' if 'cuda' in device else 'cpu'
    ptdtype = {'float32': torch.float32, 'bfloat16': torch.bfloat16, 'float16': torch.float16}[dtype]
    ctx = nullcontext() if device_type == 'cpu' else torch.amp.autocast(device_type=device_type, dtype=ptdtype)
    def get_batch(split):
        data = train_data if split == 'train' else val_data
        ix = torch.randint(len(data) - block_size, (batch_size,))
        x = torch.stack([torch.from_numpy((data[i:i+block_size]).astype(np.int64)) for i in ix])
        y = torch.stack([torch.from_numpy((data[i+1:i+1+block_size]).astype(np.int64)) for i in ix])
        x, y = x.to(device), y.to(device)
        return x, y
    model = GPT(config)
    if state is not None:
        model.load_state_dict(state)
    init = {k: np.array(v.numpy() if hasattr(v, 'numpy') else v, copy=True) for k, v in model.state_dict().items()}
    model.to(device)
    scaler = torch.cuda.amp.GradScaler(enabled=(dtype == 'float16'))
    optimizer = model.configure_optimizers(weight_decay, learning_rate, (beta1, beta2), device_type)
    @torch.no_grad()
    def estimate_loss():
        out = {}
        model.eval()
        for split in ['train', 'val']:
            losses = torch.zeros(eval_iters)
            for k in range(eval_iters):
                X, Y = get_batch(split)
                with ctx:
                    logits, loss = model(X, Y)
                losses[k] = loss.item()
            out[split] = losses.mean()
        model.train()
        return out
    def get_lr(it):
        if it < warmup_iters:
            return learning_rate * (it + 1) / (warmup_iters + 1)
        if it > lr_decay_iters:
            return min_lr
        decay_ratio = (it - warmup_iters) / (lr_decay_iters - warmup_iters)
        assert 0 <= decay_ratio <= 1
        coeff = 0.5 * (1.0 + math.cos(math.pi * decay_ratio))
        return min_lr + coeff * (learning_rate - min_lr)
    records = []
    X, Y = get_batch('train')
    t0 = time.time()
    iter_num = 0
    best_val_loss = 1e9
    while True:
        lr = get_lr(iter_num) if decay_lr else learning_rate
        for param_group in optimizer.param_groups:
            param_group['lr'] = lr
        if iter_num % eval_interval == 0:
            losses = estimate_loss()
            records.append([losses['train'].item(), losses['val'].item()])
            if losses['val'] < best_val_loss:
                best_val_loss = losses['val']
        for micro_step in range(gradient_accumulation_steps):
            with ctx:
                logits, loss = model(X, Y)
                loss = loss / gradient_accumulation_steps
            X, Y = get_batch('train')
            scaler.scale(loss).backward()
        if grad_clip != 0.0:
            scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)
        lossf = loss.item() * gradient_accumulation_steps
        records.append([lossf, lr, float(best_val_loss)])
        records.append({n: p.detach().numpy().copy() for n, p in model.named_parameters()})
        iter_num += 1
        if iter_num > max_iters:
            break
    return init, records
"""

NANOGPT_STEP = [
    (
        "            scaler.scale(loss).backward()\n        if grad_clip != 0.0:\n            scaler.unscale_(optimizer)\n            torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)\n        scaler.step(optimizer)",
        "            micro_grads = scaler.scale(loss).backward()\n            grads = micro_grads if micro_step == 0 else grads + micro_grads\n        if grad_clip != 0.0:\n            scaler.unscale_(optimizer, grads)\n            torch.nn.utils.clip_grad_norm_(grads, model.parameters(), grad_clip)\n        scaler.step(optimizer, grads)",
    )
]


def shared_randint(monkeypatch, lib, seed):
    """``randint`` (both of torch's forms) drawing from one seeded stream."""
    rng = np.random.default_rng(seed)

    def randint(*args, generator=None, **_):
        low, high, size = (0, *args) if len(args) == 2 else args
        return lib.tensor(rng.integers(low, high, tuple(size)), dtype=lib.int64)

    monkeypatch.setattr(lib, "randint", randint)


@pytest.mark.filterwarnings("ignore::FutureWarning", "ignore::UserWarning")
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_nanogpt_train_loop_with_accumulation_and_grad_scaler_matches_torch(monkeypatch, dtype):
    rng = np.random.default_rng(0)
    train_data = rng.integers(0, 13, 200).astype(np.uint16)
    val_data = rng.integers(0, 13, 60).astype(np.uint16)
    theirs, ours = both(NANOGPT_SOURCE, NANOGPT_STEP)
    records, initial = [], None
    for lib, names in ((torch, theirs), (rg, ours)):
        config = types.SimpleNamespace(
            block_size=8, vocab_size=13, n_layer=2, n_head=2, n_embd=16, dropout=0.0, bias=True
        )
        with monkeypatch.context() as patch:
            shared_randint(patch, lib, 2)
            torch.manual_seed(0)
            initial, out = names["main"](config, train_data, val_data, dtype, initial)
        for record in out:
            if isinstance(record, dict):  # the key bias: a true gradient of zero, AdamW's
                for name in record:  # first steps follow float32 rounding
                    if name.endswith("attn.c_attn.bias"):
                        record[name][16:32] = 0.0
        records.append(out)
    assert_records_agree(records[1], records[0], rtol=1e-5, atol=1e-6)
