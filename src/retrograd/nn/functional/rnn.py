"""Recurrent layers as functions: what ``nn.RNN``/``nn.LSTM``/``nn.GRU`` and their cells run
(PyTorch's ``_VF.lstm``, ``torch.lstm_cell``... with its shapes, gate orders and errors).

A layer (one direction) is one fused backend op (``lstm_layer``, ``gru_layer``,
``rnn_layer``; see :mod:`retrograd.backend.protocol_rnn`): the input projection of every time
step at once, then the recurrence over the steps; its backward runs the steps in reverse once.
A cell is the same with one step. Layers stack with dropout between them in training, the
reverse direction of a bidirectional layer runs on the same input, and the final states come
out stacked ``[num_layers * directions, N, H]``, layer by layer, forward direction first.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ...errors import InvalidArgumentError, RecurrentDTypeError, ShapeError, SizeMismatchError
from ...tensor import Tensor, cat, stack
from ...tensor.autocasting import autocast_op
from ...tensor.internal import TensorOp, apply, lift, shape_text, wrap
from ._common import _float_input
from .normalization import dropout as _dropout

__all__ = ["GATES", "recurrent", "recurrent_cell"]

#: Gates per recurrence: the rows of ``W_ih``/``W_hh`` are ``GATES[mode] * hidden_size``.
GATES = {"LSTM": 4, "GRU": 3, "RNN_TANH": 1, "RNN_RELU": 1}
_LAYERS = {
    "LSTM": TensorOp("LSTM", kernel="lstm_layer"),
    "GRU": TensorOp("GRU", kernel="gru_layer"),
    "RNN_TANH": TensorOp("RNN", kernel="rnn_layer"),
    "RNN_RELU": TensorOp("RNN", kernel="rnn_layer"),
}
#: ``(weight_ih, weight_hh, bias_ih, bias_hh)`` of one layer and direction (biases may be None).
LayerWeights = Sequence[Any]


def _row(x: Tensor, t: int) -> Tensor:
    """``x[t]`` of a ``[T, ...]`` tensor."""
    return x.narrow(0, t, 1).reshape(x.shape[1:])


def _projected_lstm_layer(
    x: Tensor, state: tuple[Tensor, ...], weights: LayerWeights, reverse: bool
) -> tuple[Tensor, tuple[Tensor, Tensor]]:
    """An LSTM layer with projections (torch's ``proj_size``), step by step in tensor ops:
    ``h_t = W_hr (o_t * tanh(c_t))`` of the projection's size, read by ``W_hh`` at the next
    step (the fused kernels keep ``h`` and ``c`` of one size)."""
    w_ih, w_hh, b_ih, b_hh, w_hr = weights
    h, c = state
    projected = x.matmul(w_ih.transpose(0, 1))
    if b_ih is not None:
        projected = projected + b_ih + b_hh
    steps = range(x.shape[0] - 1, -1, -1) if reverse else range(x.shape[0])
    outputs = [None] * x.shape[0]
    for t in steps:
        i, f, g, o = (_row(projected, t) + h.matmul(w_hh.transpose(0, 1))).chunk(4, 1)
        c = f.sigmoid() * c + i.sigmoid() * g.tanh()
        h = (o.sigmoid() * c.tanh()).matmul(w_hr.transpose(0, 1))
        outputs[t] = h
    return stack(outputs, 0), (h, c)


def _layer(mode: str, x: Tensor, state: tuple[Tensor, ...], weights: LayerWeights, reverse: bool):
    """One layer, one direction, over ``x`` ``[T, N, I]``: ``(output [T, N, H], final
    state)``, the state ``(h,)`` or, for an LSTM, ``(h, c)``."""
    if len(weights) == 5:
        return _projected_lstm_layer(x, state, weights, reverse)
    w_ih, w_hh, b_ih, b_hh = weights
    length = x.shape[0]
    empty = wrap(x, x.backend.zeros((0,), x.dtype, x.device))
    # the fused kernel takes primitives as given: an input on another backend than the
    # weights is refused here by name, not by the kernel's library
    inputs = tuple(
        lift(w_ih, t, _LAYERS[mode].name)
        for t in (
            x,
            *state,
            w_ih,
            w_hh,
            empty if b_ih is None else b_ih,
            empty if b_hh is None else b_hh,
        )
    )
    last = 0 if reverse else length - 1
    if mode == "LSTM":
        packed, _ = apply(_LAYERS[mode], inputs, (reverse,))
        out = packed.narrow(0, 0, length)
        return out, (_row(packed, last), _row(packed, length))
    if mode == "GRU":
        out, _ = apply(_LAYERS[mode], inputs, (reverse,))
    else:
        out = apply(_LAYERS[mode], inputs, (mode == "RNN_RELU", reverse))
    return out, (_row(out, last),)


def _check_same_dtype(name: str, x: Tensor, others: Sequence[tuple[str, Any]]) -> None:
    for what, t in others:
        if t is not None and t.dtype != x.dtype:
            raise RecurrentDTypeError(
                f"{name}: input is {x.dtype} but {what} is {t.dtype}; convert one (the module's "
                f"dtype is its parameters')"
            )


def _named_weights(weights: Sequence[Any], directions: int) -> list[tuple[str, Any]]:
    """``(torch's parameter name, tensor)`` of every layer's and direction's weights."""
    named = []
    for i, layer in enumerate(weights):
        suffix = f"_l{i // directions}" + ("_reverse" if i % directions else "")
        for kind, t in zip(("weight_ih", "weight_hh", "bias_ih", "bias_hh", "weight_hr"), layer):
            named.append((kind + suffix, t))
    return named


def _recurrent_kernel(mode: Any, *args: Any, **kwargs: Any) -> str:
    """torch's kernel of a recurrence or a cell by ``mode`` (``"lstm"``, ``"gru_cell"``...),
    by which autocast casts its arguments."""
    return str(mode).lower()


@autocast_op(_recurrent_kernel)
def recurrent(
    mode: str,
    input: Tensor,  # noqa: A002  (PyTorch's name)
    hx: Tensor | tuple[Tensor, Tensor] | None,
    weights: Sequence[LayerWeights],
    num_layers: int,
    dropout: float,
    training: bool,
    bidirectional: bool,
    batch_first: bool,
) -> tuple[Tensor, Any]:
    """A multi-layer recurrence, PyTorch's ``_VF.rnn_tanh/rnn_relu/lstm/gru`` for ``mode``
    ``"RNN_TANH" "RNN_RELU" "LSTM" "GRU"``: ``(output, h_n)``, or ``(output, (h_n, c_n))``.

    ``input`` is ``[T, N, I]`` (``[N, T, I]`` with ``batch_first``) or unbatched ``[T, I]``;
    ``hx`` the initial states ``[num_layers * directions, N, H]`` (a pair for an LSTM; zeros
    when ``None``); ``weights`` one ``(W_ih, W_hh, b_ih, b_hh)`` per layer and direction,
    layer by layer, forward direction first. ``dropout`` applies to every layer's output but
    the last, in ``training``.
    """
    name = "RNN" if mode.startswith("RNN") else mode
    w_ih0, w_hh0 = weights[0][0], weights[0][1]
    if isinstance(input, Tensor) and input.dtype != w_ih0.dtype:
        # torch's ValueError (RNNBase.check_input), an int input's too, before any other check
        raise RecurrentDTypeError(
            f"{name}: input dtype ({input.dtype}) does not match weight dtype ({w_ih0.dtype}) "
            f"(input {shape_text(input.shape)}); convert the input (input.to({w_ih0.dtype})) "
            f"or the model (model.to({input.dtype}))"
        )
    x = _float_input(name, input)
    directions = 2 if bidirectional else 1
    # h's size is W_hh's columns (the projection's, with one); c's is W_hh's rows / 4
    input_size, hidden_size = w_ih0.shape[1], w_hh0.shape[1]
    cell_size = w_hh0.shape[0] // GATES[mode]
    unbatched = x.ndim == 2
    if x.ndim not in (2, 3):
        raise ShapeError(
            f"{name}: expected input to be 2-d (unbatched [T, {input_size}]) or 3-d, got "
            f"{shape_text(x.shape)}"
        )
    if x.shape[-1] != input_size:
        raise SizeMismatchError(  # (torch's RuntimeError)
            f"{name}: input.size(-1) must be equal to input_size. Expected {input_size}, got "
            f"{x.shape[-1]} (input {shape_text(x.shape)})"
        )
    if unbatched:
        x = x.unsqueeze_dim(1)
    elif batch_first:
        x = x.swap_dims(0, 1)
    if x.shape[0] == 0:
        raise SizeMismatchError(  # (torch's RuntimeError)
            f"{name}: expected a sequence length larger than 0, got input {shape_text(input.shape)}"
        )
    expected = (num_layers * directions, x.shape[1], hidden_size)
    states = _initial_states(name, mode, x, hx, unbatched, expected, 1, cell_size)
    _check_same_dtype(name, x, [("hx", s) for s in states])
    # every weight too (torch's kernels refuse a mix: "mat1 and mat2 must have the same
    # dtype"; ours would promote); their names are spelled only for the message
    if any(t is not None and t.dtype != x.dtype for layer in weights for t in layer):
        _check_same_dtype(name, x, _named_weights(weights, directions))
    finals: list[tuple[Tensor, ...]] = []
    layer_input = x
    for layer in range(num_layers):
        outputs = []
        for direction in range(directions):
            index = layer * directions + direction
            state = tuple(_row(s, index) for s in states)
            out, final = _layer(mode, layer_input, state, weights[index], direction == 1)
            outputs.append(out)
            finals.append(final)
        layer_input = outputs[0] if directions == 1 else cat(outputs, 2)
        if dropout > 0.0 and training and layer < num_layers - 1:
            layer_input = _dropout(layer_input, dropout, True)
    output = layer_input
    hidden = tuple(stack([final[k] for final in finals], 0) for k in range(len(states)))
    if unbatched:
        output = output.squeeze_dim(1)
        hidden = tuple(h.squeeze_dim(1) for h in hidden)
    elif batch_first:
        output = output.swap_dims(0, 1)
    return output, (hidden if mode == "LSTM" else hidden[0])


def _initial_states(
    name, mode, x, hx, unbatched, expected, batch_dim, cell_size=None
) -> list[Tensor]:
    """``hx`` as the list of initial states (``[h]``, or ``[h, c]`` for an LSTM) of shape
    ``expected`` (``c``'s last dimension ``cell_size`` when given: an LSTM with projections),
    zeros for ``None``, checked; an unbatched state gets its batch dimension at
    ``batch_dim``."""
    parts = 2 if mode == "LSTM" else 1
    shapes = [expected]
    if parts == 2:
        shapes.append(expected if cell_size is None else (*expected[:-1], cell_size))
    if hx is None:
        return [wrap(x, x.backend.zeros(shape, x.dtype, x.device)) for shape in shapes]
    if mode == "LSTM":
        if not isinstance(hx, (tuple, list)) or len(hx) != 2:
            raise InvalidArgumentError(
                f"{name}: hx must be a tuple (h_0, c_0) for an LSTM, got {type(hx).__name__}"
            )
        states = list(hx)
    else:
        if not isinstance(hx, Tensor):
            raise InvalidArgumentError(
                f"{name}: hx must be a tensor {shape_text(expected)}, got {type(hx).__name__}"
            )
        states = [hx]
    checked = []
    for what, state, expected in zip(("h_0", "c_0") if parts == 2 else ("hx",), states, shapes):
        state = _float_input(name, state)
        if unbatched:
            if state.ndim != len(expected) - 1:
                raise SizeMismatchError(  # (torch's RuntimeError)
                    f"{name}: for an unbatched input, {what} should have {len(expected) - 1} "
                    f"dims but got {state.ndim}-d tensor {shape_text(state.shape)}"
                )
            state = state.unsqueeze_dim(batch_dim)
        if state.shape != expected:  # (torch's RuntimeError "Expected hidden size")
            raise SizeMismatchError(
                f"{name}: expected hidden size {shape_text(expected)}, got {what} "
                f"{shape_text(state.shape)}"
            )
        checked.append(state)
    return checked


@autocast_op(lambda mode, *args, **kwargs: f"{str(mode).lower()}_cell")
def recurrent_cell(
    mode: str,
    input: Tensor,  # noqa: A002  (PyTorch's name)
    hx: Any,
    w_ih: Tensor,
    w_hh: Tensor,
    b_ih: Tensor | None,
    b_hh: Tensor | None,
) -> Any:
    """One step, PyTorch's ``torch.lstm_cell``/``gru_cell``/``rnn_tanh_cell``/
    ``rnn_relu_cell``: ``h'``, or ``(h', c')`` for an LSTM. ``input`` is ``[N, I]`` or
    unbatched ``[I]``; ``hx`` ``[N, H]`` (``[H]`` unbatched; a pair for an LSTM), zeros when
    ``None``."""
    name = {"LSTM": "LSTMCell", "GRU": "GRUCell"}.get(mode, "RNNCell")
    x = _float_input(name, input)
    input_size, hidden_size = w_ih.shape[1], w_hh.shape[1]
    if x.ndim not in (1, 2) or x.shape[-1] != input_size:
        raise ShapeError(
            f"{name}: expected input [N, {input_size}] or unbatched [{input_size}], got "
            f"{shape_text(x.shape)}"
        )
    unbatched = x.ndim == 1
    if unbatched:
        x = x.unsqueeze_dim(0)
    states = _initial_states(name, mode, x, hx, unbatched, (x.shape[0], hidden_size), 0)
    _check_same_dtype(name, x, [("weight_ih", w_ih), *(("hx", s) for s in states)])
    weights = (w_ih, w_hh, b_ih, b_hh)
    _, final = _layer(mode, x.unsqueeze_dim(0), tuple(states), weights, False)
    if unbatched:
        final = tuple(f.squeeze_dim(0) for f in final)
    return final if mode == "LSTM" else final[0]
