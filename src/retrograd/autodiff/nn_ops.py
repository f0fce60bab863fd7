"""The neural-network ops (convolution, pooling, interpolation, the fused linear, normalization
and attention ops): declared like the ops of :mod:`.ops`, kept apart because their kernels are
backend primitives of their own.

The convolution, pooling and interpolation forwards are linear in each tensor input, and each
op's backward rules call the op's adjoint, itself an op of this table:

- ``conv``, ``conv_transpose`` (each with its bias, added in the kernel as PyTorch's
  ``convolution`` does) and ``conv_weight_grad`` are bilinear and close under
  differentiation (the input gradient of a convolution is a transposed convolution of the
  output gradient, its weight gradient a ``conv_weight_grad``, and so on round), so
  ``backward(create_graph=True)`` differentiates through convolutions to any order. A
  convolution's gradients come from one joint kernel (``conv_backward``, PyTorch's
  ``convolution_backward``), whose protocol default is those adjoints;
- each pooling/interpolation forward and its ``*_backward`` are adjoint linear maps, the
  backward rule of one being the other (max pooling: its indices are an untracked output).

All are compute-bound: under ``BalancedCheckpointing`` their outputs are kept, not recomputed.
Reshapes, linear layers and the losses are compositions of the ops of :mod:`.ops`.
"""

# ruff: noqa: N803  (backward rules name the backend ``B``, as in ops.py)

from __future__ import annotations

import math

from ..backend.sizes import conv_transpose_output_padding
from .ops import Op

__all__: list[str] = []


def _spatial(B, x):
    return B.shape(x)[2:]


def no_bias(B, like):
    """The empty bias primitive that tells ``conv``/``conv_transpose`` to add none."""
    return B.zeros((0,), B.dtype(like), B.device(like))


# torch computes these gradients in one backward kernel (``convolution_backward``,
# ``native_batch_norm_backward``, ``native_layer_norm_backward``; not group norm's), which
# takes the input and the weight (layer norm's the bias too): each of its outputs requires
# grad where one of them does, with no derivative in those it does not depend on (a bias's
# gradient in the input; a convolution's input gradient in the input). Under create_graph
# each gradient is linked to them (see ``Op.links``): it requires grad where torch's does,
# and a second derivative leaves them unset, as torch's
def _kernel_links(taken: int, outputs: int = 3) -> dict:
    return {i: tuple((j, "none") for j in range(taken)) for i in range(outputs)}


_READS_INPUT_AND_WEIGHT = _kernel_links(2)
_READS_INPUT_WEIGHT_AND_BIAS = _kernel_links(3)


# -- convolution -----------------------------------------------------------------------------------
# A convolution's three gradients come from one joint backward kernel (PyTorch's
# ``convolution_backward``), whose default in the protocol computes each from its adjoint.
def _conv_vjp(B, g, needs, x, weight, stride, padding, dilation, groups):
    return B.conv_backward(g, x, weight, stride, padding, dilation, groups, needs)


def _conv_transpose_vjp(B, g, needs, x, weight, stride, padding, output_padding, dilation, groups):
    return B.conv_transpose_backward(
        g, x, weight, stride, padding, output_padding, dilation, groups, needs
    )


def _conv_weight_grad_x_vjp(
    B, g, out_grad, x_shape, kernel_size, stride, padding, dilation, groups
):
    # <g, conv_weight_grad(x, out_grad)> = <out_grad, conv(x, g)>
    output_padding = conv_transpose_output_padding(
        x_shape[2:], _spatial(B, out_grad), kernel_size, stride, padding, dilation
    )
    return B.conv_transpose(
        out_grad, g, no_bias(B, g), stride, padding, output_padding, dilation, groups
    )


def _conv_weight_grad_out_grad_vjp(B, g, x, kernel_size, stride, padding, dilation, groups):
    return B.conv(x, g, no_bias(B, g), stride, padding, dilation, groups)


Op(
    "conv",
    ("x", "weight", "bias"),
    ("stride", "padding", "dilation", "groups"),
    (_conv_vjp,) * 3,
    memory_bound=False,
    joint=True,
    links=_READS_INPUT_AND_WEIGHT,
)
Op(
    "conv_transpose",
    ("x", "weight", "bias"),
    ("stride", "padding", "output_padding", "dilation", "groups"),
    (_conv_transpose_vjp,) * 3,
    memory_bound=False,
    joint=True,
    links=_READS_INPUT_AND_WEIGHT,
)
Op(
    "conv_weight_grad",
    ("x", "out_grad"),
    ("kernel_size", "stride", "padding", "dilation", "groups"),
    (_conv_weight_grad_x_vjp, _conv_weight_grad_out_grad_vjp),
    memory_bound=False,
)


# torch's pooling backward kernels take the input (``max_pool2d_with_indices_backward(grad,
# self, ...)``, ``avg_pool2d_backward``, ``_adaptive_avg_pool2d_backward``), with a zero
# derivative in it: under create_graph the gradient is linked to the input (zeros), not a
# constant, so a second derivative in the input is zeros where it raised "not used in the
# graph" (see ``Op.links``)
_READS_INPUT = {0: ((0, "zeros"),)}

# -- pooling ---------------------------------------------------------------------------------------
_AVG_POOL = (
    "kernel_size",
    "stride",
    "padding",
    "ceil_mode",
    "count_include_pad",
    "divisor_override",
)


def _avg_pool_vjp(
    B, g, x_shape, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override
):
    """The rule's parameter names say what it reads, as a lambda's would (too long for one)."""
    pooling = (kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override)
    return B.avg_pool_backward(g, x_shape[2:], *pooling)


Op(
    "avg_pool",
    ("x",),
    _AVG_POOL,
    (_avg_pool_vjp,),
    memory_bound=False,
    links=_READS_INPUT,
)
Op(
    "avg_pool_backward",
    ("grad",),
    ("input_size", *_AVG_POOL),
    (
        lambda B, g, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override: (
            B.avg_pool(
                g, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override
            )
        ),
    ),
    memory_bound=False,
)


def _gather_pooled(B, g, indices):
    """The adjoint of ``max_pool_backward``: each pooled cell reads its winner's gradient."""
    shape, index_shape = B.shape(g), B.shape(indices)
    flat = B.reshape(g, (*shape[:2], math.prod(shape[2:])))
    flat_indices = B.reshape(indices, (*index_shape[:2], math.prod(index_shape[2:])))
    return B.reshape(B.gather(flat, flat_indices, 2), index_shape)


_MAX_POOL = ("kernel_size", "stride", "padding", "dilation", "ceil_mode")


def _max_pool_vjp(B, g, x_shape, aux, kernel_size, stride, padding, dilation, ceil_mode):
    # the window goes along so that a backend can run its own pooling backward kernel
    window = (kernel_size, stride, padding, dilation, ceil_mode)
    return B.max_pool_backward(g, aux, x_shape[2:], *window)


Op(
    "max_pool",
    ("x",),
    _MAX_POOL,
    (_max_pool_vjp,),
    memory_bound=False,
    aux=True,
    links=_READS_INPUT,
)
Op(
    "max_pool_backward",
    ("grad", "indices"),
    ("input_size", *_MAX_POOL),
    (lambda B, g, indices: _gather_pooled(B, g, indices), None),
    memory_bound=False,
)

Op(
    "adaptive_avg_pool",
    ("x",),
    ("output_size",),
    (lambda B, g, x_shape: B.adaptive_avg_pool_backward(g, x_shape[2:]),),
    memory_bound=False,
    links=_READS_INPUT,
)
Op(
    "adaptive_avg_pool_backward",
    ("grad",),
    ("input_size",),
    (lambda B, g, grad_shape: B.adaptive_avg_pool(g, grad_shape[2:]),),
    memory_bound=False,
)

# -- interpolation ---------------------------------------------------------------------------------
Op(
    "interpolate",
    ("x",),
    ("output_size", "mode", "align_corners", "scales"),
    (
        lambda B, g, x_shape, mode, align_corners, scales: B.interpolate_backward(
            g, x_shape[2:], mode, align_corners, scales
        ),
    ),
    memory_bound=False,
)
Op(
    "interpolate_backward",
    ("grad",),
    ("input_size", "mode", "align_corners", "scales"),
    (
        lambda B, g, grad_shape, mode, align_corners, scales: B.interpolate(
            g, grad_shape[2:], mode, align_corners, scales
        ),
    ),
    memory_bound=False,
)


# -- fused linear, normalization and transformer ops -----------------------------------------------
# Each but linear (three rules of plain products) has one joint rule (see ops.py) computing every
# input's gradient at once, in the backend's fused backward kernels. Run on the autodiff
# backend (``create_graph=True``), those kernels are the protocol's defaults, compositions of
# recorded primitives, so these ops differentiate again. All are compute-bound: their inputs
# are kept, never recomputed, and the statistics they need (``aux``: layer and batch norm's
# means and 1/std, attention's log-sum-exp) are small.
# linear's three rules are apart (not one joint rule), each naming what it reads: the input's
# gradient the weight, the weight's the input, the bias's neither; so that a frozen weight (a
# fine-tuned model's, an adapter's base) holds no input for it, as torch's addmm saves none
def _linear_dx(B, g, weight):
    return B.matmul(g, weight)


def _linear_dweight(B, g, x):
    return B.matmul(B.swap_dims(g, 0, 1), x)


def _linear_dbias(B, g):
    return B.reshape(B.sum_dim(g, (0,)), B.shape(g)[1:])


def _layer_norm_vjp(B, g, needs, x, weight, aux, eps):
    return B.layer_norm_backward(g, x, weight, aux, eps)


def _group_norm_vjp(B, g, needs, x, weight, aux, groups, eps):
    return B.group_norm_backward(g, x, weight, aux, groups, eps)


def _batch_norm_vjp(B, g, needs, x, weight, aux, eps):
    return B.batch_norm_backward(g, x, weight, aux, eps)


def _attention_vjp(B, g, needs, q, k, v, out, aux, mask, drop, scale, causal):
    return (*B.attention_backward(g, q, k, v, out, aux, mask, drop, scale, causal), None, None)


Op(
    "linear",
    ("x", "weight", "bias"),
    (),
    (_linear_dx, _linear_dweight, _linear_dbias),
    memory_bound=False,
)
Op(
    "layer_norm",
    ("x", "weight", "bias"),
    ("eps",),
    (_layer_norm_vjp,) * 3,
    memory_bound=False,
    aux=True,
    joint=True,
    links=_READS_INPUT_WEIGHT_AND_BIAS,
)
Op(
    "batch_norm",
    ("x", "weight", "bias"),
    ("eps",),
    (_batch_norm_vjp,) * 3,
    memory_bound=False,
    aux=True,
    joint=True,
    links=_READS_INPUT_AND_WEIGHT,
)
# F.group_norm (float32/float64): the statistics, the normalization and the affine map, one
# op whose rule reads x, the weight and the statistics, as torch's native_group_norm saves
# them: as a composite it held the centered values and the normalized output, twice torch's
# bytes (7 December)
Op(
    "group_norm",
    ("x", "weight", "bias"),
    ("groups", "eps"),
    (_group_norm_vjp,) * 3,
    memory_bound=False,
    aux=True,
    joint=True,
)
Op(
    "attention",
    ("q", "k", "v", "mask", "drop"),
    ("scale", "causal"),
    (_attention_vjp,) * 3 + (None, None),
    memory_bound=False,
    aux=True,
    joint=True,
)


# -- recurrent layers -----------------------------------------------------------------------------
# One node per layer and direction: its input projection and its recurrence over every time
# step (see backend/protocol_rnn.py). Each has one joint rule, the backend's backward kernel,
# which reads the forward's ``aux`` workspace; on the autodiff backend (``create_graph=True``)
# that kernel is the protocol's default, which recomputes the steps from ``x`` with recorded
# primitives, so these ops differentiate again. Compute-bound: their inputs are kept, never
# recomputed.
_RECURRENT_INPUTS = ("x", "h0", "w_ih", "w_hh", "b_ih", "b_hh")


def _lstm_layer_vjp(B, g, needs, x, h0, c0, w_ih, w_hh, b_ih, b_hh, out, aux, reverse):
    return B.lstm_layer_backward(g, x, h0, c0, w_ih, w_hh, b_ih, b_hh, out, aux, reverse)


def _gru_layer_vjp(B, g, needs, x, h0, w_ih, w_hh, b_ih, b_hh, out, aux, reverse):
    return B.gru_layer_backward(g, x, h0, w_ih, w_hh, b_ih, b_hh, out, aux, reverse)


def _rnn_layer_vjp(B, g, needs, x, h0, w_ih, w_hh, b_ih, b_hh, out, relu, reverse):
    return B.rnn_layer_backward(g, x, h0, w_ih, w_hh, b_ih, b_hh, out, relu, reverse)


Op(
    "lstm_layer",
    ("x", "h0", "c0", "w_ih", "w_hh", "b_ih", "b_hh"),
    ("reverse",),
    (_lstm_layer_vjp,) * 7,
    memory_bound=False,
    aux=True,
    joint=True,
)
Op(
    "gru_layer",
    _RECURRENT_INPUTS,
    ("reverse",),
    (_gru_layer_vjp,) * 6,
    memory_bound=False,
    aux=True,
    joint=True,
)
Op(
    "rnn_layer",
    _RECURRENT_INPUTS,
    ("relu", "reverse"),
    (_rnn_layer_vjp,) * 6,
    memory_bound=False,
    joint=True,
)
