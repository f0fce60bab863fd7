"""The models ``retrograd train`` and ``retrograd graph`` build: a small CNN and an MLP, and
the character-level :class:`GPT` of ``retrograd train --model gpt`` (:mod:`.gpt`).

>>> import retrograd as rg
>>> model = build_model("cnn", (1, 8, 8), classes=10)
>>> model(rg.zeros((2, 1, 8, 8))).shape
retrograd.Size([2, 10])
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import retrograd as rg

from .. import nn
from ..errors import InvalidArgumentError
from ..nn import functional as F  # noqa: N812  (PyTorch's idiom)

__all__ = ["GPT", "MODELS", "GPTConfig", "build_model"]

MODELS = ("cnn", "mlp")


def build_model(name: str, image_shape: tuple[int, int, int], classes: int = 10) -> nn.Module:
    """``"cnn"``: two 3x3 convolutions (64 and 128 channels, padding 1), each followed by ReLU
    and 2x2 max pooling, then a linear classifier. ``"mlp"``: flatten, a 128-wide hidden layer
    with layer norm and GELU, then a linear classifier.

    Parameters are drawn from the generator :func:`retrograd.seed` seeds, on the current
    backend.
    """
    channels, height, width = image_shape
    if name == "cnn":
        pooled = (height // 2 // 2) * (width // 2 // 2)
        return nn.Sequential(
            nn.Conv2d(channels, 64, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(64, 128, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Flatten(),
            nn.Linear(128 * pooled, classes),
        )
    if name == "mlp":
        hidden = 128
        return nn.Sequential(
            nn.Flatten(),
            nn.Linear(channels * height * width, hidden),
            nn.LayerNorm(hidden),
            nn.GELU(),
            nn.Linear(hidden, classes),
        )
    raise InvalidArgumentError(f"unknown model {name!r}; expected one of {', '.join(MODELS)}")


# -- a character-level GPT, written as a PyTorch user writes it (after nanoGPT) -----------------
@dataclass
class GPTConfig:
    """The GPT's sizes (``retrograd train --model gpt`` options)."""

    vocab_size: int = 96
    block_size: int = 64
    n_layer: int = 2
    n_head: int = 4
    n_embd: int = 64
    dropout: float = 0.0
    bias: bool = True


class CausalSelfAttention(nn.Module):
    """Multi-head self-attention where each position sees itself and the positions before."""

    def __init__(self, config: GPTConfig):
        super().__init__()
        if config.n_embd % config.n_head:
            raise InvalidArgumentError(
                f"GPT: n_embd {config.n_embd} is not a multiple of n_head {config.n_head}"
            )
        # q, k and v of every head in one projection
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd, bias=config.bias)
        self.c_proj = nn.Linear(config.n_embd, config.n_embd, bias=config.bias)
        self.attn_dropout = nn.Dropout(config.dropout)
        self.resid_dropout = nn.Dropout(config.dropout)
        self.n_head, self.n_embd, self.dropout = config.n_head, config.n_embd, config.dropout
        # The fused attention op when this retrograd has it (as nanoGPT checks for torch's).
        self.flash = hasattr(F, "scaled_dot_product_attention")

    def forward(self, x: rg.Tensor) -> rg.Tensor:
        B, T, C = x.size()  # noqa: N806  (batch, time, channels: nanoGPT's names)
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        if self.flash:
            y = F.scaled_dot_product_attention(
                q, k, v, dropout_p=self.dropout if self.training else 0.0, is_causal=True
            )
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            # The causal mask, made on the input's backend for each call (nanoGPT keeps it as
            # a buffer; register_buffer would hold it once).
            causal = rg.tril(rg.ones(T, T, dtype="bool", backend=x.backend, device=x.device))
            att = att.masked_fill(~causal, float("-inf"))
            att = F.softmax(att, dim=-1)
            att = self.attn_dropout(att)
            y = att @ v  # (B, nh, T, hs)
        y = y.transpose(1, 2).contiguous().view(B, T, C)  # heads side by side again
        return self.resid_dropout(self.c_proj(y))


class MLP(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.c_fc = nn.Linear(config.n_embd, 4 * config.n_embd, bias=config.bias)
        self.gelu = nn.GELU()
        self.c_proj = nn.Linear(4 * config.n_embd, config.n_embd, bias=config.bias)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x: rg.Tensor) -> rg.Tensor:
        return self.dropout(self.c_proj(self.gelu(self.c_fc(x))))


class Block(nn.Module):
    """Pre-norm transformer block: attention, then MLP, each added to the residual stream."""

    def __init__(self, config: GPTConfig):
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.n_embd)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = nn.LayerNorm(config.n_embd)
        self.mlp = MLP(config)

    def forward(self, x: rg.Tensor) -> rg.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    """A GPT language model (token + position embeddings, ``n_layer`` blocks, a final layer
    norm and a linear head), initialised as GPT-2: weights N(0, 0.02), residual projections
    N(0, 0.02 / sqrt(2 n_layer)), biases zero.

    >>> model = GPT(GPTConfig(vocab_size=10, block_size=8, n_layer=1, n_head=2, n_embd=8))
    >>> logits, loss = model(rg.zeros((2, 5), dtype="int64"), rg.zeros((2, 5), dtype="int64"))
    >>> logits.shape, loss.shape
    (retrograd.Size([2, 5, 10]), retrograd.Size([]))
    """

    def __init__(self, config: GPTConfig):
        super().__init__()
        self.config = config
        self.wte = nn.Embedding(config.vocab_size, config.n_embd)
        self.wpe = nn.Embedding(config.block_size, config.n_embd)
        self.drop = nn.Dropout(config.dropout)
        self.h = nn.ModuleList([Block(config) for _ in range(config.n_layer)])
        self.ln_f = nn.LayerNorm(config.n_embd)
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        # Weight tying, as nanoGPT: one parameter, listed once (as "wte.weight"), whose gradient
        # sums the embedding's and the head's.
        self.wte.weight = self.lm_head.weight
        self._init_weights(config)

    def _init_weights(self, config: GPTConfig) -> None:
        residual_std = 0.02 / math.sqrt(2 * config.n_layer)
        for name, p in self.named_parameters():
            if name.endswith("bias"):
                nn.init.zeros_(p)
            elif ".ln_" in name or name.startswith("ln_"):
                continue  # layer norms keep weight 1, bias 0
            else:
                std = residual_std if name.endswith("c_proj.weight") else 0.02
                nn.init.normal_(p, mean=0.0, std=std)

    def forward(
        self, idx: rg.Tensor, targets: rg.Tensor | None = None
    ) -> tuple[rg.Tensor, rg.Tensor | None]:
        """Logits ``(B, T, vocab)`` for the token indices ``idx`` ``(B, T)`` and, with
        ``targets``, the mean cross-entropy of predicting them."""
        _, t = idx.size()
        if t > self.config.block_size:
            raise InvalidArgumentError(
                f"GPT: sequence of length {t} is longer than block_size {self.config.block_size}"
            )
        pos = rg.arange(0, t, backend=idx.backend, device=idx.device)  # (t,)
        x = self.drop(self.wte(idx) + self.wpe(pos))
        for block in self.h:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))
        return logits, loss

    @rg.no_grad()
    def generate(
        self,
        idx: rg.Tensor,
        max_new_tokens: int,
        temperature: float = 1.0,
        top_k: int | None = None,
    ) -> rg.Tensor:
        """``idx`` ``(B, T)`` followed by ``max_new_tokens`` sampled tokens (from the seeded
        generator: :func:`retrograd.seed`); nothing is recorded."""
        for _ in range(max_new_tokens):
            context = (
                idx if idx.size(1) <= self.config.block_size else idx[:, -self.config.block_size :]
            )
            logits, _ = self(context)
            logits = logits[:, [-1], :].view(idx.size(0), -1)
            scaled = logits / temperature
            if bool(rg.isfinite(logits).all()) and not bool(rg.isfinite(scaled).all()):
                # a temperature so small that the logits overflow (softmax's NaN refused by
                # multinomial): its limit, the likeliest token
                idx = rg.cat((idx, logits.argmax(dim=-1, keepdim=True)), dim=1)
                continue
            logits = scaled
            if top_k is not None:
                v, _ = rg.topk(logits, min(top_k, logits.size(-1)))
                logits = logits.masked_fill(logits < v[:, [-1]], float("-inf"))
            probs = F.softmax(logits, dim=-1)
            idx_next = rg.multinomial(probs, num_samples=1)
            idx = rg.cat((idx, idx_next), dim=1)
        return idx
