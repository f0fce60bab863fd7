"""torch's ``torch.distributed.elastic``: the names training scripts import from it,
:mod:`.multiprocessing.errors`'s ``record`` and ``ChildFailedError`` (``torchrun`` itself is
torch's launcher, which retrograd's engine ``"torch"`` runs under: see ``launch.py``)."""

from . import multiprocessing

__all__ = ["multiprocessing"]
