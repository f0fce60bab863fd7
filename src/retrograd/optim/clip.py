"""Gradient clipping: ``clip_grad_norm`` is :func:`retrograd.nn.utils.clip_grad_norm_`
(PyTorch keeps it in ``torch.nn.utils``; this is the name ``rg.optim`` has always had)."""

from __future__ import annotations

from ..nn.utils import clip_grad_norm, clip_grad_norm_

__all__ = ["clip_grad_norm", "clip_grad_norm_"]
