"""torch's ``nn.AdaptiveLogSoftmaxWithLoss`` (Grave et al., "Efficient softmax approximation for
GPUs"): a head over the frequent classes and one entry per tail cluster, each cluster's
classes scored by a low-rank projection."""

from __future__ import annotations

from collections import namedtuple
from typing import Any

from ...errors import InvalidArgumentError, ShapeError, shape_text
from ...tensor import Tensor, cat
from .. import functional as F  # noqa: N812  (PyTorch's idiom)
from .container import ModuleList, Sequential
from .linear import Linear
from .module import Module

__all__ = ["AdaptiveLogSoftmaxWithLoss"]

_ASMoutput = namedtuple("_ASMoutput", ["output", "loss"])


class AdaptiveLogSoftmaxWithLoss(Module):
    """torch's: ``forward(input, target)`` gives ``(output, loss)``, the target classes'
    log-probabilities and their negated mean; ``log_prob(input)`` every class's;
    ``predict(input)`` the most probable class (both of a minibatch ``[N, in_features]``)."""

    def __init__(
        self,
        in_features: int,
        n_classes: int,
        cutoffs: Any,
        div_value: float = 4.0,
        head_bias: bool = False,
        device: Any = None,
        dtype: Any = None,
    ):
        super().__init__()
        cutoffs = list(cutoffs)
        if (
            len(cutoffs) == 0
            or cutoffs != sorted(cutoffs)
            or min(cutoffs) <= 0
            or max(cutoffs) > n_classes - 1
            or len(set(cutoffs)) != len(cutoffs)
            or any(int(c) != c for c in cutoffs)
        ):
            raise InvalidArgumentError(
                "AdaptiveLogSoftmaxWithLoss: cutoffs should be a sequence of unique, positive "
                "integers sorted in an increasing order, where each value is between 1 and "
                f"n_classes-1 ({n_classes - 1}), got {cutoffs}"
            )
        self.in_features, self.n_classes = in_features, n_classes
        self.cutoffs = cutoffs + [n_classes]
        self.div_value, self.head_bias = div_value, head_bias
        self.shortlist_size = self.cutoffs[0]
        self.n_clusters = len(self.cutoffs) - 1
        self.head_size = self.shortlist_size + self.n_clusters
        factory = {"device": device, "dtype": dtype}
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
        for i2h, h2o in self.tail:
            i2h.reset_parameters()
            h2o.reset_parameters()

    def forward(self, input_: Tensor, target_: Tensor) -> _ASMoutput:
        targ_dim = target_.dim()
        if targ_dim == 1:
            if input_.size(0) != target_.size(0) or input_.dim() != 2:
                raise ShapeError(
                    "AdaptiveLogSoftmaxWithLoss: a 1-d target takes a 2-d input of as many "
                    f"rows, got input {shape_text(input_.shape)} and target "
                    f"{shape_text(target_.shape)}"
                )
        elif targ_dim != 0 or input_.dim() != 1:
            raise ShapeError(
                "AdaptiveLogSoftmaxWithLoss: expected a 0-d target with a 1-d input or a 1-d "
                f"target with a 2-d input, got input {shape_text(input_.shape)} and target "
                f"{shape_text(target_.shape)}"
            )
        is_batched = targ_dim > 0
        input = input_ if is_batched else input_.unsqueeze(0)  # noqa: A001 (torch's name)
        target = target_ if is_batched else target_.unsqueeze(0)
        used_rows = 0
        batch_size = target.size(0)
        output = input.new_zeros(batch_size)
        gather_inds = target.new_zeros(batch_size)
        cutoff_values = [0] + self.cutoffs
        for i in range(len(cutoff_values) - 1):
            low_idx, high_idx = cutoff_values[i], cutoff_values[i + 1]
            target_mask = (target >= low_idx) & (target < high_idx)
            row_indices = target_mask.nonzero().reshape(-1)
            if row_indices.numel() == 0:
                continue
            if i == 0:
                gather_inds.index_copy_(0, row_indices, target[target_mask])
            else:
                relative_target = target[target_mask] - low_idx
                cluster_output = self.tail[i - 1](input.index_select(0, row_indices))
                gather_inds.index_fill_(0, row_indices, self.shortlist_size + i - 1)
                cluster_logprob = F.log_softmax(cluster_output, dim=1)
                local_logprob = cluster_logprob.gather(1, relative_target.unsqueeze(1))
                output = output.index_copy(0, row_indices, local_logprob.squeeze(1))
            used_rows += row_indices.numel()
        if used_rows != batch_size:
            raise InvalidArgumentError(
                f"AdaptiveLogSoftmaxWithLoss: target values should be in [0, "
                f"{self.n_classes - 1}], but values in range [{target.min().item()}, "
                f"{target.max().item()}] were found"
            )
        head_logprob = F.log_softmax(self.head(input), dim=1)
        output = output + head_logprob.gather(1, gather_inds.unsqueeze(1)).reshape(-1)
        loss = (-output).mean()
        if not is_batched:
            output = output.squeeze(0)
        return _ASMoutput(output, loss)

    def _get_full_log_prob(self, input: Tensor, head_output: Tensor) -> Tensor:  # noqa: A002
        head_logprob = F.log_softmax(head_output, dim=1)
        pieces = [head_logprob[:, : self.shortlist_size]]
        for i in range(self.n_clusters):
            cluster_logprob = F.log_softmax(self.tail[i](input), dim=1)
            pieces.append(cluster_logprob + head_logprob[:, self.shortlist_size + i].unsqueeze(1))
        return cat(pieces, 1)

    def log_prob(self, input: Tensor) -> Tensor:  # noqa: A002 (torch's name)
        _check_minibatch("log_prob", input)
        return self._get_full_log_prob(input, self.head(input))

    def predict(self, input: Tensor) -> Tensor:  # noqa: A002 (torch's name)
        _check_minibatch("predict", input)
        head_output = self.head(input)
        output = head_output.argmax(dim=1)
        not_in_shortlist = output >= self.shortlist_size
        if not_in_shortlist.any().item():
            log_prob = self._get_full_log_prob(
                input[not_in_shortlist], head_output[not_in_shortlist]
            )
            output[not_in_shortlist] = log_prob.argmax(dim=1)
        return output


def _check_minibatch(method: str, input: Tensor) -> None:  # noqa: A002
    if input.dim() != 2:
        raise ShapeError(
            f"AdaptiveLogSoftmaxWithLoss.{method}: expected a minibatch [N, in_features], got "
            f"{shape_text(input.shape)}"
        )
