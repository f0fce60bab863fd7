"""torch's ``torch.utils``: :mod:`.data` (datasets, samplers, ``DataLoader``),
:mod:`.checkpoint`, :mod:`.hooks` (``RemovableHandle``) and :mod:`.model_zoo`
(``load_url``)."""

from . import checkpoint, data, hooks, model_zoo

__all__ = ["checkpoint", "data", "hooks", "model_zoo"]
