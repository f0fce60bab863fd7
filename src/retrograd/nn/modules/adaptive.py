"""torch's ``torch.nn.modules.adaptive``: ``AdaptiveLogSoftmaxWithLoss``, the adaptive softmax
of Grave et al. (2017), with torch's constructor, parameters (``head``, ``tail.i.0``,
``tail.i.1``: a torch state dict loads unchanged) and methods (``forward(input, target)``
returning the ``(output, loss)`` named tuple, ``log_prob``, ``predict``).

>>> asm = AdaptiveLogSoftmaxWithLoss(8, 10, [4, 7])
>>> sorted(asm.state_dict())
['head.weight', 'tail.0.0.weight', 'tail.0.1.weight', 'tail.1.0.weight', 'tail.1.1.weight']
>>> asm(rg.ones((3, 8)), rg.tensor([0, 5, 9])).output.shape
retrograd.Size([3])
"""

from __future__ import annotations

import itertools
from collections import namedtuple
from collections.abc import Sequence
from typing import Any

from ...errors import (
    DTypeError,
    InvalidArgumentError,
    KernelIndexError,
    ShapeError,
    SizeMismatchError,
)
from ...tensor import Tensor, cat
from .. import functional as F  # noqa: N812  (PyTorch's idiom)
from .container import ModuleList, Sequential
from .linear import Linear
from .module import Module

__all__ = ["AdaptiveLogSoftmaxWithLoss"]

_ASMoutput = namedtuple("_ASMoutput", ["output", "loss"])


class AdaptiveLogSoftmaxWithLoss(Module):
    """Adaptive softmax: the ``cutoffs[0]`` most frequent classes (the shortlist) and one
    entry per tail cluster are scored by ``head``; cluster ``i`` (classes ``cutoffs[i]`` to
    ``cutoffs[i+1] - 1``) is scored by ``tail[i]``, a projection to
    ``in_features // div_value ** (i + 1)`` features and a linear map to the cluster's
    classes. Labels are expected sorted by frequency (0 the most frequent)."""

    def __init__(
        self,
        in_features: int,
        n_classes: int,
        cutoffs: Sequence[int],
        div_value: float = 4.0,
        head_bias: bool = False,
        device: Any = None,
        dtype: Any = None,
    ) -> None:
        super().__init__()
        cutoffs = list(cutoffs)
        if len(cutoffs) == 0:
            raise InvalidArgumentError(
                "AdaptiveLogSoftmaxWithLoss: cutoffs should be a sequence of length larger than 0"
            )
        if (
            cutoffs != sorted(cutoffs)
            or min(cutoffs) <= 0
            or max(cutoffs) > n_classes - 1
            or len(set(cutoffs)) != len(cutoffs)
            or any(int(c) != c for c in cutoffs)
        ):
            raise InvalidArgumentError(
                "AdaptiveLogSoftmaxWithLoss: cutoffs should be a sequence of unique, positive "
                "integers sorted in an increasing order, where each value is between 1 and "
                f"n_classes-1 (n_classes={n_classes}), got {cutoffs}"
            )
        factory = {"device": device, "dtype": dtype}
        self.in_features = in_features
        self.n_classes = n_classes
        self.cutoffs = cutoffs + [n_classes]
        self.div_value = div_value
        self.head_bias = head_bias
        self.shortlist_size = self.cutoffs[0]
        self.n_clusters = len(self.cutoffs) - 1
        self.head_size = self.shortlist_size + self.n_clusters
        self.head = Linear(in_features, self.head_size, bias=head_bias, **factory)
        self.tail = ModuleList()
        for i in range(self.n_clusters):
            hidden = int(in_features // (div_value ** (i + 1)))
            width = self.cutoffs[i + 1] - self.cutoffs[i]
            self.tail.append(
                Sequential(
                    Linear(in_features, hidden, bias=False, **factory),
                    Linear(hidden, width, bias=False, **factory),
                )
            )

    def reset_parameters(self) -> None:
        self.head.reset_parameters()
        for to_hidden, to_classes in self.tail:
            to_hidden.reset_parameters()
            to_classes.reset_parameters()

    def forward(self, input_: Tensor, target_: Tensor) -> _ASMoutput:
        op = "AdaptiveLogSoftmaxWithLoss"
        if not isinstance(input_, Tensor) or not isinstance(target_, Tensor):
            raise DTypeError(
                f"{op}: input and target must be tensors, got {type(input_).__name__} and "
                f"{type(target_).__name__}"
            )
        if target_.dtype not in ("int64", "int32", "int16", "int8", "uint8"):
            raise DTypeError(f"{op}: target must be an integer tensor, got {target_.dtype}")
        if target_.dim() == 1:
            if input_.dim() != 2:
                raise SizeMismatchError(
                    f"{op}: 1D target tensor expects 2D input tensors, but found inputs with "
                    f"size {tuple(input_.shape)}"
                )
            if input_.shape[0] != target_.shape[0]:
                raise SizeMismatchError(
                    f"{op}: Input and target should have the same size in the batch dimension "
                    f"(input {tuple(input_.shape)}, target {tuple(target_.shape)})"
                )
        elif target_.dim() == 0:
            if input_.dim() != 1:
                raise SizeMismatchError(
                    f"{op}: 0D target tensor expects 1D input tensors, but found inputs with "
                    f"size {tuple(input_.shape)}"
                )
        else:
            raise SizeMismatchError(
                f"{op}: 0D or 1D target tensor expected, multi-target not supported (target "
                f"{tuple(target_.shape)})"
            )
        if input_.shape[-1] != self.in_features:
            raise SizeMismatchError(
                f"{op}: input has {input_.shape[-1]} features, expected in_features="
                f"{self.in_features} (input {tuple(input_.shape)})"
            )
        is_batched = target_.dim() > 0
        rows_in = input_ if is_batched else input_.unsqueeze(0)
        target = (target_ if is_batched else target_.unsqueeze(0)).long()
        batch_size = target.shape[0]
        if batch_size and (int(target.min()) < 0 or int(target.max()) >= self.n_classes):
            raise KernelIndexError(
                f"{op}: Target values should be in [0, {self.n_classes - 1}], but values in "
                f"range [{int(target.min())}, {int(target.max())}] were found"
            )
        # Each row's log-probability: its class's in the head for the shortlist; for a tail
        # class, its cluster's entry in the head plus its log-probability within the cluster.
        output = rows_in.new_zeros(batch_size)
        head_column = target.clone()
        bounds = [0, *self.cutoffs]
        for i in range(1, len(bounds) - 1):
            low, high = bounds[i], bounds[i + 1]
            in_cluster = (target >= low) & (target < high)
            rows = in_cluster.nonzero().flatten()
            if rows.numel() == 0:
                continue
            cluster_logprob = F.log_softmax(self.tail[i - 1](rows_in.index_select(0, rows)), dim=1)
            relative_target = (target.index_select(0, rows) - low).unsqueeze(1)
            local_logprob = cluster_logprob.gather(1, relative_target).squeeze(1)
            output = output.index_copy(0, rows, local_logprob)
            head_column = head_column.index_fill(0, rows, self.shortlist_size + i - 1)
        head_logprob = F.log_softmax(self.head(rows_in), dim=1)
        output = output + head_logprob.gather(1, head_column.unsqueeze(1)).squeeze(1)
        loss = (-output).mean()
        if not is_batched:
            output = output.squeeze(0)
        return _ASMoutput(output, loss)

    def _get_full_log_prob(self, input: Tensor, head_output: Tensor) -> Tensor:
        """Log-probabilities of every class from ``input`` and ``self.head(input)``."""
        head_logprob = F.log_softmax(head_output, dim=1)
        pieces = [head_logprob[:, : self.shortlist_size]]
        for i, _ in enumerate(itertools.pairwise(self.cutoffs)):
            cluster_logprob = F.log_softmax(self.tail[i](input), dim=1)
            pieces.append(cluster_logprob + head_logprob[:, self.shortlist_size + i].unsqueeze(1))
        return cat(pieces, dim=1)

    def _check_minibatch(self, op: str, input: Any) -> None:
        """torch's ``log_prob`` and ``predict`` take rows only (a 1-d input failed deep inside,
        naming ``argmax``)."""
        if not isinstance(input, Tensor) or input.ndim != 2:
            shape = list(getattr(input, "shape", ()))
            raise ShapeError(
                f"AdaptiveLogSoftmaxWithLoss.{op}: expected a minibatch (N, in_features), got "
                f"shape {shape}"
            )

    def log_prob(self, input: Tensor) -> Tensor:
        """Log-probabilities of all ``n_classes`` classes: ``(N, in_features)`` ->
        ``(N, n_classes)``."""
        self._check_minibatch("log_prob", input)
        return self._get_full_log_prob(input, self.head(input))

    def predict(self, input: Tensor) -> Tensor:
        """The most probable class of each row of ``(N, in_features)``: ``log_prob(input)
        .argmax(dim=1)``, computing the tail clusters only for rows whose head's best entry is
        a cluster."""
        self._check_minibatch("predict", input)
        head_output = self.head(input)
        output = head_output.argmax(dim=1)
        not_in_shortlist = output >= self.shortlist_size
        if not bool(not_in_shortlist.any()):
            return output
        if bool(not_in_shortlist.all()):
            return self._get_full_log_prob(input, head_output).argmax(dim=1)
        log_prob = self._get_full_log_prob(input[not_in_shortlist], head_output[not_in_shortlist])
        output[not_in_shortlist] = log_prob.argmax(dim=1)
        return output
