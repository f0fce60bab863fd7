"""torch's ``torch.utils``: :mod:`.data` (datasets, samplers, ``DataLoader``),
:mod:`.checkpoint`, :mod:`.hooks` (``RemovableHandle``), :mod:`.model_zoo` (``load_url``)
and :mod:`._pytree` (nested containers flattened to their leaves and rebuilt)."""

from . import _pytree, checkpoint, data, hooks, model_zoo  # noqa: F401 (torch.utils._pytree)

__all__ = ["checkpoint", "data", "hooks", "model_zoo"]
