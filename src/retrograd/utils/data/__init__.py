"""torch's ``torch.utils.data``: datasets, samplers and the ``DataLoader``.

>>> import retrograd as rg
>>> from retrograd.utils.data import DataLoader, TensorDataset
>>> data = TensorDataset(rg.arange(10).float(), rg.arange(10))
>>> [x.shape for x, y in DataLoader(data, batch_size=4)]
[retrograd.Size([4]), retrograd.Size([4]), retrograd.Size([2])]
"""

from ...errors import guard_namespace as _guard_namespace
from . import _utils as _utils  # torch's module path of collate (private, not in __all__)
from . import dataloader, dataset, distributed, sampler
from .dataloader import DataLoader, default_collate, default_convert, get_worker_info
from .dataset import (
    ChainDataset,
    ConcatDataset,
    Dataset,
    IterableDataset,
    StackDataset,
    Subset,
    TensorDataset,
    random_split,
)
from .distributed import DistributedSampler
from .sampler import (
    BatchSampler,
    RandomSampler,
    Sampler,
    SequentialSampler,
    SubsetRandomSampler,
    WeightedRandomSampler,
)

__all__ = [
    "BatchSampler",
    "ChainDataset",
    "ConcatDataset",
    "DataLoader",
    "Dataset",
    "DistributedSampler",
    "IterableDataset",
    "RandomSampler",
    "Sampler",
    "SequentialSampler",
    "StackDataset",
    "Subset",
    "SubsetRandomSampler",
    "TensorDataset",
    "WeightedRandomSampler",
    "dataloader",
    "dataset",
    "default_collate",
    "default_convert",
    "distributed",
    "get_worker_info",
    "random_split",
    "sampler",
]


# Arguments no check foresaw (a str or None for a tensor, a str for a size) get an error of
# the hierarchy naming the function (errors.guard), as rg.* and nn.functional's do.
_guard_namespace(globals(), __all__)
