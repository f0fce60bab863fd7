"""torch's ``torch.utils.data._utils``: the module path of ``collate`` (which torch's
documentation gives for extending ``default_collate``)."""

from . import collate

__all__ = ["collate"]
