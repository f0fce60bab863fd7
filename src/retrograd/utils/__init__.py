"""torch's ``torch.utils``: :mod:`.data` (datasets, samplers, ``DataLoader``),
:mod:`.checkpoint`, :mod:`.hooks` (``RemovableHandle``), :mod:`.model_zoo` (``load_url``)
and :mod:`._pytree` (nested containers flattened to their leaves and rebuilt), :mod:`.benchmark`
(torch's Timer, Measurement and Compare), ``swap_tensors``. torch's ``utils.flop_counter`` and
``utils.module_tracker`` are registered over :mod:`retrograd.counting` (module_paths.py)."""

from ..tensor.ownership import swap_tensors
from . import _pytree, benchmark, checkpoint, data, hooks, model_zoo  # noqa: F401 (torch.utils._pytree)

__all__ = ["benchmark", "checkpoint", "data", "hooks", "model_zoo", "swap_tensors"]
