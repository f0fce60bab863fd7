"""Recurrent layers: ``RNN``, ``LSTM``, ``GRU`` and their cells, PyTorch's.

Constructor signatures, defaults, parameter names and layouts are PyTorch's, so a PyTorch
state dict loads unchanged: per layer ``k`` and direction (``_reverse`` for the second of a
bidirectional layer) ``weight_ih_l{k}`` ``[G*H, I]``, ``weight_hh_l{k}`` ``[G*H, H]``,
``bias_ih_l{k}``, ``bias_hh_l{k}`` ``[G*H]``, gates in PyTorch's order (LSTM ``i f g o``, GRU
``r z n``), every one initialised from U(-1/sqrt(H), 1/sqrt(H)). A cell's are
``weight_ih``, ``weight_hh``, ``bias_ih``, ``bias_hh``.

Each layer and direction runs as two nodes: the input projection of all time steps (one
matrix product) and the fused recurrence (see :mod:`retrograd.nn.functional.rnn`).

>>> from retrograd import nn
>>> lstm = nn.LSTM(3, 5, num_layers=2)
>>> output, (h_n, c_n) = lstm(rg.ones((7, 2, 3)))
>>> output.shape, h_n.shape, c_n.shape
(retrograd.Size([7, 2, 5]), retrograd.Size([2, 2, 5]), retrograd.Size([2, 2, 5]))
>>> sorted(lstm.state_dict())[:4]
['bias_hh_l0', 'bias_hh_l1', 'bias_ih_l0', 'bias_ih_l1']
"""

from __future__ import annotations

import math
import numbers
import warnings
from typing import Any

from ...errors import ArgumentTypeError, DTypeError, InvalidArgumentError
from ...tensor import Tensor
from ...tensor.dtypes import default_float_dtype
from ..functional.rnn import GATES, recurrent, recurrent_cell
from ..functional.rnn_packed import PackedSequence, recurrent_packed
from ..parameter import Parameter
from .module import Module, _uniform

__all__ = ["GRU", "LSTM", "RNN", "GRUCell", "LSTMCell", "RNNBase", "RNNCell", "RNNCellBase"]


def _positive_int(owner: str, name: str, value: Any, minimum: int = 1) -> int:
    """``value`` as an int of at least ``minimum``; a float, a str or None is torch's
    ``TypeError``. (A bool is refused too: torch takes it in some places and not others.)"""
    if not isinstance(value, numbers.Integral) or isinstance(value, bool):
        # a float, a str, None: torch's TypeError ("should be of type int")
        raise ArgumentTypeError(f"{owner}: {name} should be of type int, got {value!r}")
    if value < minimum:
        bound = "a positive" if minimum == 1 else "a non-negative"
        raise InvalidArgumentError(f"{owner}: {name} must be {bound} int, got {value!r}")
    return int(value)


def _nonlinearity_mode(owner: str, nonlinearity: str) -> str:
    modes = {"tanh": "RNN_TANH", "relu": "RNN_RELU"}
    if nonlinearity not in modes:
        raise InvalidArgumentError(
            f"{owner}: unknown nonlinearity {nonlinearity!r} (expected 'tanh' or 'relu')"
        )
    return modes[nonlinearity]


class RNNBase(Module):
    """The common part of ``RNN``, ``LSTM`` and ``GRU``: parameters, their names and
    initialisation, argument checks and ``forward``. ``mode`` is ``"RNN_TANH"``,
    ``"RNN_RELU"``, ``"LSTM"`` or ``"GRU"``.

    ``proj_size`` (an LSTM's projections, torch's): each direction's ``h`` is ``W_hr (o *
    tanh(c))`` of ``proj_size`` (``weight_hr_l{k}``), ``W_hh`` reads it, and the outputs and
    ``h_n`` have that size (``c_n`` keeps ``hidden_size``). ``flatten_parameters()`` (cuDNN's weight
    packing in PyTorch) is accepted and does nothing.
    """

    def __init__(
        self,
        mode: str,
        input_size: int,
        hidden_size: int,
        num_layers: int = 1,
        bias: bool = True,
        batch_first: bool = False,
        dropout: float = 0.0,
        bidirectional: bool = False,
        proj_size: int = 0,
        device: Any = None,
        dtype: str | None = None,
        *,
        backend: Any = None,
    ):
        super().__init__()
        owner = type(self).__name__
        if mode not in GATES:
            raise InvalidArgumentError(f"{owner}: unknown mode {mode!r}")
        self.mode = mode
        # (torch's layers refuse no inputs, its cells take it)
        self.input_size = _positive_int(owner, "input_size", input_size)
        self.hidden_size = _positive_int(owner, "hidden_size", hidden_size)
        self.num_layers = _positive_int(owner, "num_layers", num_layers)
        if not isinstance(bidirectional, bool):  # (torch's kernels refuse it when called)
            raise DTypeError(
                f"{owner}: bidirectional should be of type bool, got {bidirectional!r}"
            )
        for name, flag in (("bias", bias), ("batch_first", batch_first)):
            if not isinstance(flag, bool):  # torch's "bias should be of type bool"
                raise DTypeError(f"{owner}: {name} should be of type bool, got {flag!r}")
        if not isinstance(dropout, numbers.Real):  # (torch's float(dropout) fails)
            raise DTypeError(f"{owner}: dropout must be a number, got {dropout!r}")
        if isinstance(dropout, bool) or not 0.0 <= dropout <= 1.0:
            raise InvalidArgumentError(
                f"{owner}: dropout should be a number in range [0, 1] representing the "
                f"probability of an element being zeroed, got {dropout!r}"
            )
        if dropout > 0.0 and num_layers == 1:
            warnings.warn(
                f"{owner}: dropout option adds dropout after all but last recurrent layer, so "
                f"non-zero dropout expects num_layers greater than 1, but got dropout={dropout} "
                f"and num_layers={num_layers}",
                UserWarning,
                stacklevel=2,
            )
        if isinstance(proj_size, bool) or not isinstance(proj_size, numbers.Integral):
            raise ArgumentTypeError(f"{owner}: proj_size should be of type int, got {proj_size!r}")
        if proj_size < 0:
            raise InvalidArgumentError(
                f"{owner}: proj_size should be a positive integer or zero to disable "
                f"projections, got {proj_size!r}"
            )
        if proj_size and mode != "LSTM":
            raise InvalidArgumentError(
                f"{owner}: proj_size argument is only supported for LSTM, not RNN or GRU"
            )
        if proj_size >= self.hidden_size:
            raise InvalidArgumentError(
                f"{owner}: proj_size has to be smaller than hidden_size, got proj_size="
                f"{proj_size} and hidden_size={self.hidden_size}"
            )
        self.bias, self.batch_first = bool(bias), bool(batch_first)
        self.dropout, self.bidirectional = float(dropout), bool(bidirectional)
        self.proj_size = int(proj_size)
        # the size of h (and of each direction's output): the projection's, when there is one
        real_hidden = self.proj_size or self.hidden_size
        dtype = dtype or default_float_dtype()
        rows = GATES[mode] * self.hidden_size
        directions = 2 if bidirectional else 1
        bound = 1.0 / math.sqrt(self.hidden_size)
        self._flat_weights_names: list[str] = []
        self._all_weights: list[list[str]] = []
        for layer in range(self.num_layers):
            layer_input = self.input_size if layer == 0 else real_hidden * directions
            for direction in range(directions):
                suffix = f"_l{layer}" + ("_reverse" if direction else "")
                shapes = {
                    f"weight_ih{suffix}": (rows, layer_input),
                    f"weight_hh{suffix}": (rows, real_hidden),
                }
                if self.bias:
                    shapes[f"bias_ih{suffix}"] = (rows,)
                    shapes[f"bias_hh{suffix}"] = (rows,)
                if self.proj_size:  # torch's LSTM with projections: h = W_hr (o * tanh(c))
                    shapes[f"weight_hr{suffix}"] = (self.proj_size, self.hidden_size)
                for name, shape in shapes.items():
                    values = _uniform(shape, bound, backend, device, dtype)
                    setattr(self, name, Parameter(values))
                self._flat_weights_names.extend(shapes)
                self._all_weights.append(list(shapes))

    def reset_parameters(self) -> None:
        """Every weight and bias from U(-1/sqrt(hidden_size), 1/sqrt(hidden_size))."""
        from .. import init

        bound = 1.0 / math.sqrt(self.hidden_size) if self.hidden_size else 0.0
        for weight in self.parameters():
            init.uniform_(weight, -bound, bound)

    def flatten_parameters(self) -> None:
        """Nothing to do: PyTorch packs the weights for cuDNN here."""

    @property
    def all_weights(self) -> list[list[Parameter]]:
        """The parameters of each layer and direction, ``[W_ih, W_hh, b_ih, b_hh]``."""
        return [[getattr(self, name) for name in names] for names in self._all_weights]

    def _layer_weights(self) -> list[tuple[Any, ...]]:
        """``(W_ih, W_hh, b_ih, b_hh)`` per layer and direction (biases ``None`` without
        them), and ``W_hr`` fifth with projections."""
        layers = []
        for names in self._all_weights:
            w_ih, w_hh = getattr(self, names[0]), getattr(self, names[1])
            biases = (
                (getattr(self, names[2]), getattr(self, names[3])) if self.bias else (None, None)
            )
            projection = (getattr(self, names[-1]),) if self.proj_size else ()
            layers.append((w_ih, w_hh, *biases, *projection))
        return layers

    def forward(self, input: Tensor, hx: Any = None) -> tuple[Tensor, Any]:
        """``(output, h_n)`` (``(output, (h_n, c_n))`` for an LSTM): ``output`` ``[T, N,
        directions * H]`` (``[N, T, ...]`` with ``batch_first``; ``[T, ...]`` for an
        unbatched ``[T, I]`` input), ``h_n`` ``[num_layers * directions, N, H]``. A
        :class:`~retrograd.nn.utils.rnn.PackedSequence` input gives a packed output and each
        sequence's final state at its own last step, as torch's."""
        if isinstance(input, PackedSequence):
            weights = self._layer_weights()

            def run(x: Tensor, state: Any) -> tuple[Tensor, Any]:
                return recurrent(self.mode, x, state, weights, self.num_layers, self.dropout,
                                 self.training, self.bidirectional, False)  # fmt: skip

            name = "LSTM" if self.mode == "LSTM" else "GRU" if self.mode == "GRU" else "RNN"
            return recurrent_packed(run, input, hx, self.mode == "LSTM", name)
        return recurrent(
            self.mode,
            input,
            hx,
            self._layer_weights(),
            self.num_layers,
            self.dropout,
            self.training,
            self.bidirectional,
            self.batch_first,
        )

    def extra_repr(self) -> str:
        text = f"{self.input_size}, {self.hidden_size}"
        if self.proj_size:  # (torch's leaves an RNN's nonlinearity out; its cells print it)
            text += f", proj_size={self.proj_size}"
        if self.num_layers != 1:
            text += f", num_layers={self.num_layers}"
        if not self.bias:
            text += ", bias=False"
        if self.batch_first:
            text += ", batch_first=True"
        if self.dropout:
            text += f", dropout={self.dropout}"
        if self.bidirectional:
            text += ", bidirectional=True"
        return text


class RNN(RNNBase):
    """An Elman RNN, ``h_t = tanh(x_t W_ih^T + b_ih + h_{t-1} W_hh^T + b_hh)`` (``relu``
    with ``nonlinearity="relu"``), PyTorch's ``nn.RNN``.

    >>> RNN(4, 6, nonlinearity="relu")(rg.ones((5, 4)))[0].shape
    retrograd.Size([5, 6])
    """

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        num_layers: int = 1,
        nonlinearity: str = "tanh",
        bias: bool = True,
        batch_first: bool = False,
        dropout: float = 0.0,
        bidirectional: bool = False,
        **kwargs: Any,
    ):
        mode = _nonlinearity_mode("RNN", nonlinearity)
        super().__init__(
            mode,
            input_size,
            hidden_size,
            num_layers,
            bias,
            batch_first,
            dropout,
            bidirectional,
            **kwargs,
        )
        self.nonlinearity = nonlinearity


class LSTM(RNNBase):
    """A long short-term memory layer stack, PyTorch's ``nn.LSTM`` (gates ``i f g o``):
    ``forward(input, (h_0, c_0))`` returns ``(output, (h_n, c_n))``."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__("LSTM", *args, **kwargs)


class GRU(RNNBase):
    """A gated recurrent unit layer stack, PyTorch's ``nn.GRU`` (gates ``r z n``,
    ``n = tanh(W_in x + b_in + r * (W_hn h + b_hn))``)."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__("GRU", *args, **kwargs)


class RNNCellBase(Module):
    """The common part of the cells, with torch's signature (a custom cell subclasses it):
    ``weight_ih`` ``[G*H, I]``, ``weight_hh`` ``[G*H, H]``, ``bias_ih``, ``bias_hh`` ``[G*H]``,
    from U(-1/sqrt(H), 1/sqrt(H)), ``G`` the ``num_chunks`` (gates). The cells here name
    their ``mode`` (the recurrence their forward computes)."""

    #: the recurrence of this library's cells (``GATES``'s keys); a custom cell has its own
    #: forward
    mode: str = ""

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        bias: bool,
        num_chunks: int,
        device: Any = None,
        dtype: str | None = None,
        *,
        backend: Any = None,
    ):
        super().__init__()
        owner = type(self).__name__
        self.input_size = _positive_int(owner, "input_size", input_size, 0)
        # (no hidden units is torch's too: an empty state, no weights to draw)
        self.hidden_size = _positive_int(owner, "hidden_size", hidden_size, 0)
        self.bias = bool(bias)
        dtype = dtype or default_float_dtype()
        rows = _positive_int(owner, "num_chunks", num_chunks) * self.hidden_size
        bound = 1.0 / math.sqrt(self.hidden_size) if self.hidden_size else 0.0
        self.weight_ih = Parameter(_uniform((rows, input_size), bound, backend, device, dtype))
        self.weight_hh = Parameter(_uniform((rows, hidden_size), bound, backend, device, dtype))
        if self.bias:
            self.bias_ih = Parameter(_uniform((rows,), bound, backend, device, dtype))
            self.bias_hh = Parameter(_uniform((rows,), bound, backend, device, dtype))
        else:
            self.register_parameter("bias_ih", None)
            self.register_parameter("bias_hh", None)

    def reset_parameters(self) -> None:
        """Every weight and bias from U(-1/sqrt(hidden_size), 1/sqrt(hidden_size))."""
        from .. import init

        bound = 1.0 / math.sqrt(self.hidden_size) if self.hidden_size else 0.0
        for weight in self.parameters():
            init.uniform_(weight, -bound, bound)

    def forward(self, input: Tensor, hx: Any = None) -> Any:
        return recurrent_cell(
            self.mode, input, hx, self.weight_ih, self.weight_hh, self.bias_ih, self.bias_hh
        )

    def extra_repr(self) -> str:
        text = f"{self.input_size}, {self.hidden_size}"
        if not self.bias:
            text += ", bias=False"
        if self.mode == "RNN_RELU":
            text += ", nonlinearity=relu"
        return text


class RNNCell(RNNCellBase):
    """One step of an Elman RNN: ``h' = tanh(x W_ih^T + b_ih + h W_hh^T + b_hh)`` (or relu).

    >>> RNNCell(3, 4)(rg.ones((2, 3))).shape
    retrograd.Size([2, 4])
    """

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        bias: bool = True,
        nonlinearity: str = "tanh",
        device: Any = None,
        dtype: str | None = None,
        **kwargs: Any,
    ):
        mode = _nonlinearity_mode("RNNCell", nonlinearity)
        super().__init__(input_size, hidden_size, bias, GATES[mode], device, dtype, **kwargs)
        self.mode, self.nonlinearity = mode, nonlinearity


class LSTMCell(RNNCellBase):
    """One LSTM step: ``forward(input, (h, c))`` returns ``(h', c')``."""

    mode = "LSTM"

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, device: Any = None,
                 dtype: str | None = None, **kwargs: Any):  # fmt: skip
        super().__init__(input_size, hidden_size, bias, GATES["LSTM"], device, dtype, **kwargs)


class GRUCell(RNNCellBase):
    """One GRU step: ``forward(input, h)`` returns ``h'``."""

    mode = "GRU"

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, device: Any = None,
                 dtype: str | None = None, **kwargs: Any):  # fmt: skip
        super().__init__(input_size, hidden_size, bias, GATES["GRU"], device, dtype, **kwargs)
