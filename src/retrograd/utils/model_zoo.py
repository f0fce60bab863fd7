"""torch's ``torch.utils.model_zoo``: ``load_url``, the older name of
:func:`retrograd.hub.load_state_dict_from_url` (which reads the hub's cached checkpoints; this
library downloads nothing)."""

from __future__ import annotations

from ..hub import load_state_dict_from_url

__all__ = ["load_url"]

load_url = load_state_dict_from_url
