"""``kl_divergence(p, q)`` for two distributions of one family (torch's closed forms)."""

from __future__ import annotations

from typing import Any

from .bernoulli import Bernoulli
from .categorical import Categorical
from .normal import Normal

__all__ = ["kl_divergence"]


def kl_divergence(p: Any, q: Any) -> Any:
    """KL(p || q), over the batch."""
    if isinstance(p, Normal) and isinstance(q, Normal):
        var_ratio = (p.scale / q.scale).pow(2)
        t1 = ((p.loc - q.loc) / q.scale).pow(2)
        return 0.5 * (var_ratio + t1 - 1 - var_ratio.log())
    if isinstance(p, Categorical) and isinstance(q, Categorical):
        t = p.probs * (p.logits - q.logits)
        t = t.masked_fill(q.probs.eq(0).expand(t.shape), float("inf"))
        t = t.masked_fill(p.probs.eq(0).expand(t.shape), 0.0)
        return t.sum(-1)
    if isinstance(p, Bernoulli) and isinstance(q, Bernoulli):
        t1 = p.probs * (p.probs.log() - q.probs.log())
        t2 = (1 - p.probs) * ((1 - p.probs).log() - (1 - q.probs).log())
        return t1 + t2
    raise NotImplementedError(
        f"kl_divergence: no closed form for {type(p).__name__} and {type(q).__name__}"
    )
