# ruff: noqa: E501  (the programs are kept as their authors wrote them)
r"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):
SpecAugment and CTC as ESPnet writes them.

- ESPnet2's SpecAugment and CTC head (the docstrings and ``typeguard`` checks left out):
  ``espnet/nets/pytorch_backend/nets_utils.py``'s ``pad_list`` (``xs[0].new(n, max_len,
  *size).fill_(pad_value)`` and row writes), ``espnet2/layers/mask_along_axis.py`` whole
  (``torch.randint`` widths and positions, ``max(1, D - mask_length.max())`` of an int and a
  0-d tensor, the ``(mask_pos <= aran) * (aran < (mask_pos + mask_length))`` masks and
  ``any(dim=1)``, ``masked_fill`` or ``masked_fill_`` by whether the input requires grad,
  ``spec.mean()`` as the fill), ``espnet2/layers/time_warp.py`` (``center`` and ``warped``
  as 0-d tensors used as slice bounds and in ``F.interpolate``'s ``size``, bicubic with
  ``align_corners=False``, per-utterance warps through ``pad_list`` when lengths differ, the
  in-place ``x[:, :, :warped] = left`` writes or ``torch.cat`` under autograd),
  ``espnet2/asr/specaug/specaug.py``'s ``SpecAug`` and its ``extra_repr``\ s, and
  ``espnet2/asr/ctc.py``'s ``CTC`` (``nn.CTCLoss(reduction="none", zero_infinity=True)``,
  targets concatenated by ``torch.cat([ys_pad[i, :l] for i, l in enumerate(ys_lens)])``,
  ``.to(device=..., dtype=...)``); with the greedy decoder of torchaudio's CTC inference
  tutorial (``torch.unique_consecutive(indices, dim=-1)``, labels indexed by 0-d tensors);
  driven by the test: three Adam steps of a BLSTM encoder on augmented padded features.

The lines changed: the ``import`` lines and the gradient lines; ``torch.randn`` and
``torch.randint`` draw one shared stream in both runs; torch's weights are loaded into the
port's.
"""

from __future__ import annotations

from real_ports import assert_records_agree, initializer, params_of, runs_with_draws

ESPNET_SOURCE = r'''
# espnet/nets/pytorch_backend/nets_utils.py
import math
from typing import List, Sequence, Union

import torch
import torch.nn.functional as F


def pad_list(xs, pad_value):
    n_batch = len(xs)
    max_len = max(x.size(0) for x in xs)
    pad = xs[0].new(n_batch, max_len, *xs[0].size()[1:]).fill_(pad_value)

    for i in range(n_batch):
        pad[i, : xs[i].size(0)] = xs[i]

    return pad


# espnet2/layers/mask_along_axis.py
def mask_along_axis(
    spec: torch.Tensor,
    spec_lengths: torch.Tensor,
    mask_width_range: Sequence[int] = (0, 30),
    dim: int = 1,
    num_mask: int = 2,
    replace_with_zero: bool = True,
):
    org_size = spec.size()
    if spec.dim() == 4:
        # spec: (Batch, Channel, Length, Freq) -> (Batch * Channel, Length, Freq)
        spec = spec.view(-1, spec.size(2), spec.size(3))

    B = spec.shape[0]
    # D = Length or Freq
    D = spec.shape[dim]
    # mask_length: (B, num_mask, 1)
    mask_length = torch.randint(
        mask_width_range[0],
        mask_width_range[1],
        (B, num_mask),
        device=spec.device,
    ).unsqueeze(2)

    # mask_pos: (B, num_mask, 1)
    mask_pos = torch.randint(
        0, max(1, D - mask_length.max()), (B, num_mask), device=spec.device
    ).unsqueeze(2)

    # aran: (1, 1, D)
    aran = torch.arange(D, device=spec.device)[None, None, :]
    # mask: (Batch, num_mask, D)
    mask = (mask_pos <= aran) * (aran < (mask_pos + mask_length))
    # Multiply masks: (Batch, num_mask, D) -> (Batch, D)
    mask = mask.any(dim=1)
    if dim == 1:
        # mask: (Batch, Length, 1)
        mask = mask.unsqueeze(2)
    elif dim == 2:
        # mask: (Batch, 1, Freq)
        mask = mask.unsqueeze(1)

    if replace_with_zero:
        value = 0.0
    else:
        value = spec.mean()

    if spec.requires_grad:
        spec = spec.masked_fill(mask, value)
    else:
        spec = spec.masked_fill_(mask, value)
    spec = spec.view(*org_size)
    return spec, spec_lengths


class MaskAlongAxis(torch.nn.Module):
    def __init__(
        self,
        mask_width_range: Union[int, Sequence[int]] = (0, 30),
        num_mask: int = 2,
        dim: Union[int, str] = "time",
        replace_with_zero: bool = True,
    ):
        if isinstance(mask_width_range, int):
            mask_width_range = (0, mask_width_range)
        if len(mask_width_range) != 2:
            raise TypeError(
                f"mask_width_range must be a tuple of int and int values: "
                f"{mask_width_range}",
            )

        assert mask_width_range[1] > mask_width_range[0]
        if isinstance(dim, str):
            if dim == "time":
                dim = 1
            elif dim == "freq":
                dim = 2
            else:
                raise ValueError("dim must be int, 'time' or 'freq'")
        if dim == 1:
            self.mask_axis = "time"
        elif dim == 2:
            self.mask_axis = "freq"
        else:
            self.mask_axis = "unknown"

        super().__init__()
        self.mask_width_range = mask_width_range
        self.num_mask = num_mask
        self.dim = dim
        self.replace_with_zero = replace_with_zero

    def extra_repr(self):
        return (
            f"mask_width_range={self.mask_width_range}, "
            f"num_mask={self.num_mask}, axis={self.mask_axis}"
        )

    def forward(self, spec: torch.Tensor, spec_lengths: torch.Tensor = None):
        return mask_along_axis(
            spec,
            spec_lengths,
            mask_width_range=self.mask_width_range,
            dim=self.dim,
            num_mask=self.num_mask,
            replace_with_zero=self.replace_with_zero,
        )


class MaskAlongAxisVariableMaxWidth(torch.nn.Module):
    def __init__(
        self,
        mask_width_ratio_range: Union[float, Sequence[float]] = (0.0, 0.05),
        num_mask: int = 2,
        dim: Union[int, str] = "time",
        replace_with_zero: bool = True,
    ):
        if isinstance(mask_width_ratio_range, float):
            mask_width_ratio_range = (0.0, mask_width_ratio_range)
        if len(mask_width_ratio_range) != 2:
            raise TypeError(
                f"mask_width_ratio_range must be a tuple of float and float values: "
                f"{mask_width_ratio_range}",
            )

        assert mask_width_ratio_range[1] > mask_width_ratio_range[0]
        if isinstance(dim, str):
            if dim == "time":
                dim = 1
            elif dim == "freq":
                dim = 2
            else:
                raise ValueError("dim must be int, 'time' or 'freq'")
        if dim == 1:
            self.mask_axis = "time"
        elif dim == 2:
            self.mask_axis = "freq"
        else:
            self.mask_axis = "unknown"

        super().__init__()
        self.mask_width_ratio_range = mask_width_ratio_range
        self.num_mask = num_mask
        self.dim = dim
        self.replace_with_zero = replace_with_zero

    def extra_repr(self):
        return (
            f"mask_width_ratio_range={self.mask_width_ratio_range}, "
            f"num_mask={self.num_mask}, axis={self.mask_axis}"
        )

    def forward(self, spec: torch.Tensor, spec_lengths: torch.Tensor = None):
        max_seq_len = spec.shape[self.dim]
        min_mask_width = math.floor(max_seq_len * self.mask_width_ratio_range[0])
        min_mask_width = max([0, min_mask_width])
        max_mask_width = math.floor(max_seq_len * self.mask_width_ratio_range[1])
        max_mask_width = min([max_seq_len, max_mask_width])

        if max_mask_width > min_mask_width:
            return mask_along_axis(
                spec,
                spec_lengths,
                mask_width_range=(min_mask_width, max_mask_width),
                dim=self.dim,
                num_mask=self.num_mask,
                replace_with_zero=self.replace_with_zero,
            )
        return spec, spec_lengths


# espnet2/layers/time_warp.py
DEFAULT_TIME_WARP_MODE = "bicubic"


def time_warp(x: torch.Tensor, window: int = 80, mode: str = DEFAULT_TIME_WARP_MODE):
    # bicubic supports 4D or more dimension tensor
    org_size = x.size()
    if x.dim() == 3:
        # x: (Batch, Time, Freq) -> (Batch, 1, Time, Freq)
        x = x[:, None]

    t = x.shape[2]
    if t - window <= window:
        return x.view(*org_size)

    center = torch.randint(window, t - window, (1,))[0]
    warped = torch.randint(center - window, center + window, (1,))[0] + 1

    # left: (Batch, Channel, warped, Freq)
    # right: (Batch, Channel, time - warped, Freq)
    left = torch.nn.functional.interpolate(
        x[:, :, :center], (warped, x.shape[3]), mode=mode, align_corners=False
    )
    right = torch.nn.functional.interpolate(
        x[:, :, center:], (t - warped, x.shape[3]), mode=mode, align_corners=False
    )

    if x.requires_grad:
        x = torch.cat([left, right], dim=-2)
    else:
        x[:, :, :warped] = left
        x[:, :, warped:] = right

    return x.view(*org_size)


class TimeWarp(torch.nn.Module):
    def __init__(self, window: int = 80, mode: str = DEFAULT_TIME_WARP_MODE):
        super().__init__()
        self.window = window
        self.mode = mode

    def extra_repr(self):
        return f"window={self.window}, mode={self.mode}"

    def forward(self, x: torch.Tensor, x_lengths: torch.Tensor = None):
        if x_lengths is None or all(le == x_lengths[0] for le in x_lengths):
            # Note that applying same warping for each sample
            y = time_warp(x, window=self.window, mode=self.mode)
        else:
            # FIXME(kamo): I have no idea to batchify Timewarp
            ys = []
            for i in range(x.size(0)):
                _y = time_warp(
                    x[i][None, : x_lengths[i]],
                    window=self.window,
                    mode=self.mode,
                )[0]
                ys.append(_y)
            y = pad_list(ys, 0.0)

        return y, x_lengths


# espnet2/asr/specaug/specaug.py
class SpecAug(torch.nn.Module):
    def __init__(
        self,
        apply_time_warp: bool = True,
        time_warp_window: int = 5,
        time_warp_mode: str = DEFAULT_TIME_WARP_MODE,
        apply_freq_mask: bool = True,
        freq_mask_width_range: Union[int, Sequence[int]] = (0, 20),
        num_freq_mask: int = 2,
        apply_time_mask: bool = True,
        time_mask_width_range: Union[int, Sequence[int]] = (0, 100),
        num_time_mask: int = 2,
    ):
        if not apply_time_warp and not apply_time_mask and not apply_freq_mask:
            raise ValueError(
                "Either one of time_warp, time_mask, or freq_mask should be applied",
            )
        super().__init__()
        self.apply_time_warp = apply_time_warp
        self.apply_freq_mask = apply_freq_mask
        self.apply_time_mask = apply_time_mask

        if apply_time_warp:
            self.time_warp = TimeWarp(window=time_warp_window, mode=time_warp_mode)
        else:
            self.time_warp = None

        if apply_freq_mask:
            self.freq_mask = MaskAlongAxis(
                dim="freq",
                mask_width_range=freq_mask_width_range,
                num_mask=num_freq_mask,
            )
        else:
            self.freq_mask = None

        if apply_time_mask:
            self.time_mask = MaskAlongAxis(
                dim="time",
                mask_width_range=time_mask_width_range,
                num_mask=num_time_mask,
            )
        else:
            self.time_mask = None

    def forward(self, x, x_lengths=None):
        if self.time_warp is not None:
            x, x_lengths = self.time_warp(x, x_lengths)
        if self.freq_mask is not None:
            x, x_lengths = self.freq_mask(x, x_lengths)
        if self.time_mask is not None:
            x, x_lengths = self.time_mask(x, x_lengths)
        return x, x_lengths


# espnet2/asr/ctc.py
class CTC(torch.nn.Module):
    def __init__(
        self,
        odim: int,
        encoder_output_size: int,
        dropout_rate: float = 0.0,
        ctc_type: str = "builtin",
        reduce: bool = True,
        ignore_nan_grad: bool = None,
        zero_infinity: bool = True,
    ):
        super().__init__()
        eprojs = encoder_output_size
        self.dropout_rate = dropout_rate
        self.ctc_lo = torch.nn.Linear(eprojs, odim)
        self.ctc_type = ctc_type
        if ignore_nan_grad is not None:
            zero_infinity = ignore_nan_grad

        if self.ctc_type == "builtin":
            self.ctc_loss = torch.nn.CTCLoss(
                reduction="none", zero_infinity=zero_infinity
            )

        elif self.ctc_type == "gtnctc":
            from espnet.nets.pytorch_backend.gtn_ctc import GTNCTCLossFunction

            self.ctc_loss = GTNCTCLossFunction.apply
        else:
            raise ValueError(
                f'ctc_type must be "builtin" or "gtnctc": {self.ctc_type}'
            )

        self.reduce = reduce

    def loss_fn(self, th_pred, th_target, th_ilen, th_olen) -> torch.Tensor:
        if self.ctc_type == "builtin":
            th_pred = th_pred.log_softmax(2)
            loss = self.ctc_loss(th_pred, th_target, th_ilen, th_olen)
            size = th_pred.size(1)

            if self.reduce:
                # Batch-size average
                loss = loss.sum() / size
            else:
                loss = loss / size
            return loss

        elif self.ctc_type == "gtnctc":
            log_probs = torch.nn.functional.log_softmax(th_pred, dim=2)
            return self.ctc_loss(log_probs, th_target, th_ilen, 0, "none")

        else:
            raise NotImplementedError

    def forward(self, hs_pad, hlens, ys_pad, ys_lens):
        # hs_pad: (B, L, NProj) -> ys_hat: (B, L, Nvocab)
        ys_hat = self.ctc_lo(F.dropout(hs_pad, p=self.dropout_rate))

        if self.ctc_type == "gtnctc":
            # gtn expects list form for ys
            ys_true = [y[y != -1] for y in ys_pad]  # parse padded ys
        else:
            # ys_hat: (B, L, D) -> (L, B, D)
            ys_hat = ys_hat.transpose(0, 1)
            # (B, L) -> (BxL,)
            ys_true = torch.cat([ys_pad[i, :l] for i, l in enumerate(ys_lens)])

        loss = self.loss_fn(ys_hat, ys_true, hlens, ys_lens).to(
            device=hs_pad.device, dtype=hs_pad.dtype
        )

        return loss

    def softmax(self, hs_pad):
        return F.softmax(self.ctc_lo(hs_pad), dim=2)

    def log_softmax(self, hs_pad):
        return F.log_softmax(self.ctc_lo(hs_pad), dim=2)

    def argmax(self, hs_pad):
        return torch.argmax(self.ctc_lo(hs_pad), dim=2)


# torchaudio's ASR inference tutorial: the greedy decoder
class GreedyCTCDecoder(torch.nn.Module):
    def __init__(self, labels, blank=0):
        super().__init__()
        self.labels = labels
        self.blank = blank

    def forward(self, emission: torch.Tensor) -> List[str]:
        """Given a sequence emission over labels, get the best path
        Args:
          emission (Tensor): Logit tensors. Shape `[num_seq, num_label]`.

        Returns:
          List[str]: The resulting transcript
        """
        indices = torch.argmax(emission, dim=-1)  # [num_seq,]
        indices = torch.unique_consecutive(indices, dim=-1)
        indices = [i for i in indices if i != self.blank]
        joined = "".join([self.labels[i] for i in indices])
        return joined.replace("|", " ").strip().split()
'''

ESPNET_DRIVER = r"""
# the test's driver: SpecAug on padded features of three lengths, a BLSTM encoder and the CTC
# head trained three Adam steps (the third utterance too short for its transcript, so
# zero_infinity zeroes its loss), then greedy decoding
vocab = ["-", "a", "b", "c", "d", "|"]
specaug = SpecAug(time_warp_window=3, freq_mask_width_range=(0, 4), num_freq_mask=2, time_mask_width_range=(0, 5), num_time_mask=2)
variable_mask = MaskAlongAxisVariableMaxWidth(mask_width_ratio_range=(0.0, 0.2), num_mask=2, dim="time", replace_with_zero=False)
record.append(str(specaug).splitlines() + str(variable_mask).splitlines())
feat_lens = torch.tensor([20, 15, 3])
x = pad_list([torch.randn(int(n), 16) for n in feat_lens], 0.0)
ys_pad = pad_list([torch.tensor([1, 2, 3]), torch.tensor([2, 2, 4, 5, 1]), torch.tensor([1, 2, 3, 4])], -1)
ys_lens = torch.tensor([3, 5, 4])
encoder = torch.nn.LSTM(16, 12, batch_first=True, bidirectional=True)
ctc = CTC(odim=len(vocab), encoder_output_size=24)
initialize(encoder)
initialize(ctc)
optimizer = torch.optim.Adam(list(encoder.parameters()) + list(ctc.parameters()), lr=1e-2)
for step in range(3):
    xs, _ = specaug(x.clone(), feat_lens)
    xs, _ = variable_mask(xs, feat_lens)
    record.append(xs.numpy())
    hs, _ = encoder(xs)
    loss = ctc(hs, feat_lens, ys_pad, ys_lens)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    record.append(loss.item())
    record.append(params_of(encoder, ctc))

# the batched warp (equal lengths) of a tensor that requires grad: torch.cat of the two
# interpolations, masked_fill out of place; its gradient
same = torch.randn(2, 12, 6).requires_grad_()
warped, _ = specaug(same)
warped.pow(2).sum().backward()
record.append(warped.detach().numpy())
record.append(same.grad.numpy())

decoder = GreedyCTCDecoder(labels=vocab, blank=0)
with torch.no_grad():
    emissions = ctc.log_softmax(encoder(x)[0])
record.append([decoder(emissions[i, : feat_lens[i]]) for i in range(3)])
record.append(ctc.argmax(encoder(x)[0]).numpy())
"""

ESPNET_STEPS = [
    ("import torch\n", "import retrograd as torch\n"),
    ("import torch.nn.functional as F\n", "import retrograd.nn.functional as F\n"),
    ("    optimizer.zero_grad()\n", ""),
    (
        "    loss.backward()\n    optimizer.step()",
        "    grads = loss.backward()\n    optimizer.step(grads)",
    ),
    ("warped.pow(2).sum().backward()", "grads = warped.pow(2).sum().backward()"),
    ("same.grad.numpy()", "same.grad(grads).numpy()"),
]


def test_espnet_spec_augment_and_ctc_train_and_decode_as_torch(capsys):
    """The modules' reprs, the augmented features of each step, the CTC losses (one
    utterance infeasible) and weights after three steps, the batched warp and its gradient,
    and the greedy transcripts."""
    (theirs, ours), _ = runs_with_draws(
        ESPNET_SOURCE + ESPNET_DRIVER, ESPNET_STEPS, capsys, 33301,
        initialize=initializer(), params_of=params_of,
    )  # fmt: skip
    assert theirs[0][0] == "SpecAug("
    assert_records_agree(ours, theirs, rtol=2e-4, atol=2e-5)
