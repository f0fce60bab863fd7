"""torch's ``torch.nn.modules.channelshuffle``: ``ChannelShuffle``."""

from __future__ import annotations

from ...tensor import Tensor
from .. import functional as F  # noqa: N812 (PyTorch's idiom)
from .module import Module

__all__ = ["ChannelShuffle"]


class ChannelShuffle(Module):
    """``F.channel_shuffle(x, groups)``: ShuffleNet's regrouping of channels.

    >>> ChannelShuffle(2)(rg.arange(4.0).reshape((1, 4, 1))).flatten().tolist()
    [0.0, 2.0, 1.0, 3.0]
    """

    def __init__(self, groups: int):
        super().__init__()
        self.groups = groups

    def forward(self, input: Tensor) -> Tensor:
        return F.channel_shuffle(input, self.groups)

    def extra_repr(self) -> str:
        return f"groups={self.groups}"
