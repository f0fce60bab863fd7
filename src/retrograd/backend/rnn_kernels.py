"""The fused recurrent kernels (``lstm_scan``, ``gru_scan``, ``rnn_scan`` and their backwards,
see :mod:`.protocol_rnn`), written once for any array library with NumPy's calling
conventions: ``xp`` is a small adapter (:class:`~.numpy_rnn.NumpyArrays`,
:class:`~.torch_rnn.TorchArrays`) giving ``empty``, ``matmul``, ``addmm``, ``add``,
``multiply``, ``subtract``, ``one_minus``, ``tanh``, ``sigmoid``, ``relu``,
``positive_mask``, ``copy``, ``column_sum`` and ``quiet``, each writing into ``out=``.

What a step costs is what is left of the recurrence once everything that does not depend on
it is taken out of the loop, and the loop's products are laid out the way BLAS is fastest.

- *Feature-major inside.* Each step's product with ``W_hh`` (``[G*H, H]``) is computed as
  ``W_hh @ h^T``, ``[G*H, N]``, the batch as the short last dimension: for the small batches of
  recurrent models this runs about twice as fast as ``h @ W_hh^T`` on OpenBLAS (``N`` = 20,
  ``H`` = 200, float32), forward and backward (``W_hh^T @ dgates^T``). So the kernels turn
  the input projections and the output gradients to ``[T, K, N]`` once (one pass), keep
  states, gates and workspace in that layout, in which every gate is a contiguous block of
  rows, and turn their results back to the protocol's ``[T, N, K]`` once.
- *Out of the loop.* Forward: the biases are added to every step's input at once; a step is
  one product and a few elementwise passes. Backward: every factor that depends only on
  forward values (the activations' slopes, ``tanh(c_t)``, GRU's ``h_{t-1} - n_t``) is
  computed for all steps at once; a step multiplies by them and makes one product with ``W``;
  the weight's gradient is one product over all steps.

Workspace (the ``aux`` output), feature-major: LSTM ``[T, 5H, N]``, the activated gates ``i,
f, g, o`` and the cell state ``c_t``; GRU ``[T, 4H, N]``, ``r, z, n`` and ``W_hn h + b_hn``;
the Elman RNN none (its output is all its backward reads). Kernels write only into arrays they
create, never into an argument.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "RecurrentKernels",
    "gru_backward",
    "gru_forward",
    "lstm_backward",
    "lstm_forward",
    "rnn_backward",
    "rnn_forward",
]


def _order(length: int, reverse: bool) -> range:
    return range(length - 1, -1, -1) if reverse else range(length)


def _feature_major(xp: Any, x: Any, bias: Any = None) -> Any:
    """``[T, N, K]`` as a new ``[T, K, N]`` array, plus ``bias`` ``[K]`` when non-empty."""
    out = xp.empty((x.shape[0], x.shape[2], x.shape[1]), x)
    if bias is not None and bias.shape[0]:
        return xp.add(x.swapaxes(1, 2), bias[:, None], out=out)
    xp.copy(out, x.swapaxes(1, 2))
    return out


def _batch_major(xp: Any, x: Any) -> Any:
    """``[T, K, N]`` as a new ``[T, N, K]`` array."""
    out = xp.empty((x.shape[0], x.shape[2], x.shape[1]), x)
    xp.copy(out, x.swapaxes(1, 2))
    return out


def _rows(xp: Any, x: Any) -> Any:
    """A ``[K, N]`` matrix as a new ``[N, K]`` one."""
    out = xp.empty((x.shape[1], x.shape[0]), x)
    xp.copy(out, x.T)
    return out


def _previous(out: Any, h0: Any, reverse: bool) -> tuple[Any, Any, slice, int]:
    """Where each step's previous hidden state lies: ``(rest, h0, steps, first)`` such that
    steps ``steps`` read the rows ``rest`` of ``out`` and step ``first`` reads ``h0``."""
    length = out.shape[0]
    if reverse:
        return out[1:length], h0, slice(0, length - 1), length - 1
    return out[0 : length - 1], h0, slice(1, length), 0


def _weight_grads(xp: Any, dhidden: Any, out: Any, h0: Any, reverse: bool) -> tuple[Any, Any]:
    """``(dweight, dbias)`` from ``dhidden`` ``[T, N, G*H]`` and the hidden states ``out``
    ``[T, N, H]``: ``sum_t dhidden_t^T @ h_{t-1}`` (two products, no copy of the states) and
    the sum of ``dhidden`` over steps and batch.

    The products are made as ``h^T @ dhidden`` and turned: OpenBLAS runs ``dhidden^T @ h``
    at half speed when ``dhidden`` starts one step into its array (an offset view)."""
    length, batch, width = dhidden.shape
    size = h0.shape[1]
    rest, first_h, steps, first = _previous(out, h0, reverse)
    turned = xp.matmul(first_h.T, dhidden[first])
    if length > 1:
        turned += xp.matmul(rest.reshape(-1, size).T, dhidden[steps].reshape(-1, width))
    return _rows(xp, turned), xp.column_sum(dhidden.reshape(length * batch, width))


# -- LSTM -----------------------------------------------------------------------------------------
def lstm_forward(xp, x, h0, c0, weight, bias, reverse):
    length, batch, width = x.shape
    size = width // 4
    xb = _feature_major(xp, x, bias)
    work = xp.empty((length, 5 * size, batch), x)
    states = xp.empty((length + 1, size, batch), x)  # every h_t, then the last c
    product = xp.empty((size, batch), x)
    h, c = h0.T, c0.T
    with xp.quiet():
        for t in _order(length, reverse):
            w = work[t]
            gates = w[: 4 * size]
            xp.matmul(weight, h, out=gates)
            xp.add(gates, xb[t], out=gates)
            xp.sigmoid(gates[: 2 * size], out=gates[: 2 * size])
            xp.tanh(gates[2 * size : 3 * size], out=gates[2 * size : 3 * size])
            xp.sigmoid(gates[3 * size :], out=gates[3 * size :])
            cell = w[4 * size :]
            xp.multiply(w[size : 2 * size], c, out=cell)
            xp.multiply(w[:size], w[2 * size : 3 * size], out=product)
            xp.add(cell, product, out=cell)
            h = states[t]
            xp.tanh(cell, out=h)
            xp.multiply(h, w[3 * size : 4 * size], out=h)
            c = cell
    xp.copy(states[length], c)
    return _batch_major(xp, states), work


def lstm_backward(xp, grad, h0, c0, weight, out, work, reverse):
    length, five, batch = work.shape
    size = five // 5
    gates, cells = work[:, : 4 * size], work[:, 4 * size :]
    # Every factor that depends on forward values alone, for all steps at once.
    slope = xp.empty(gates.shape, work)  # the activations' derivatives, from their outputs
    xp.one_minus(gates, out=slope)
    xp.multiply(slope, gates, out=slope)
    tanh_gate = gates[:, 2 * size : 3 * size]
    g_slope = slope[:, 2 * size : 3 * size]
    xp.multiply(tanh_gate, tanh_gate, out=g_slope)
    xp.one_minus(g_slope, out=g_slope)
    tanh_cells = xp.empty(cells.shape, work)
    xp.tanh(cells, out=tanh_cells)
    cell_slope = xp.empty(cells.shape, work)  # d c_t / d h_t through h = o * tanh(c)
    xp.multiply(tanh_cells, tanh_cells, out=cell_slope)
    xp.one_minus(cell_slope, out=cell_slope)
    xp.multiply(cell_slope, gates[:, 3 * size :], out=cell_slope)

    dh_all = _feature_major(xp, grad)  # this kernel's own: each step adds into its row
    dgates = xp.empty((length, 4 * size, batch), work)
    dc = dh_all[length]
    product = xp.empty((size, batch), work)
    first = _order(length, reverse)[0]
    dh_next = None
    for t in reversed(_order(length, reverse)):
        dh = dh_all[t]
        if dh_next is not None:
            xp.add(dh, dh_next, out=dh)
        xp.multiply(dh, cell_slope[t], out=product)
        xp.add(dc, product, out=dc)
        w, d = work[t], dgates[t]
        c_prev = c0.T if t == first else cells[t + 1 if reverse else t - 1]
        xp.multiply(dc, w[2 * size : 3 * size], out=d[:size])
        xp.multiply(dc, c_prev, out=d[size : 2 * size])
        xp.multiply(dc, w[:size], out=d[2 * size : 3 * size])
        xp.multiply(dh, tanh_cells[t], out=d[3 * size :])
        xp.multiply(d, slope[t], out=d)
        xp.multiply(dc, w[size : 2 * size], out=dc)
        dh_next = xp.matmul(weight.T, d)
    dx = _batch_major(xp, dgates)
    dweight, dbias = _weight_grads(xp, dx, out[:length], h0, reverse)
    return dx, _rows(xp, dh_next), _rows(xp, dc), dweight, dbias


# -- GRU ------------------------------------------------------------------------------------------
def gru_forward(xp, x, h0, weight, bias, reverse):
    length, batch, width = x.shape
    size = width // 3
    xt = _feature_major(xp, x)
    work = xp.empty((length, 4 * size, batch), x)
    states = xp.empty((length, size, batch), x)
    hidden = xp.empty((width, batch), x)
    column = bias[:, None] if bias.shape[0] else None
    h = h0.T
    with xp.quiet():
        for t in _order(length, reverse):
            if column is None:
                xp.matmul(weight, h, out=hidden)
            else:
                xp.addmm(column, weight, h, out=hidden)
            w, x_t = work[t], xt[t]
            rz = w[: 2 * size]
            xp.add(x_t[: 2 * size], hidden[: 2 * size], out=rz)
            xp.sigmoid(rz, out=rz)
            xp.copy(w[3 * size :], hidden[2 * size :])
            n = w[2 * size : 3 * size]
            xp.multiply(w[:size], hidden[2 * size :], out=n)
            xp.add(n, x_t[2 * size :], out=n)
            xp.tanh(n, out=n)
            new = states[t]
            xp.subtract(h, n, out=new)
            xp.multiply(new, w[size : 2 * size], out=new)
            xp.add(new, n, out=new)
            h = new
    return _batch_major(xp, states), work


def gru_backward(xp, grad, h0, weight, out, work, reverse):
    length, four, batch = work.shape
    size = four // 4
    r, z = work[:, :size], work[:, size : 2 * size]
    n, hidden_n = work[:, 2 * size : 3 * size], work[:, 3 * size :]
    # Factors of forward values alone, for all steps: dn = dh * n_coef, dz = dh * z_coef,
    # dr = dn * r_coef.
    n_coef = xp.empty(n.shape, work)
    xp.multiply(n, n, out=n_coef)
    xp.one_minus(n_coef, out=n_coef)
    scratch = xp.empty(n.shape, work)
    xp.one_minus(z, out=scratch)
    xp.multiply(n_coef, scratch, out=n_coef)
    r_coef = xp.empty(r.shape, work)
    xp.one_minus(r, out=r_coef)
    xp.multiply(r_coef, r, out=r_coef)
    xp.multiply(r_coef, hidden_n, out=r_coef)
    z_coef = xp.empty(z.shape, work)
    rest, first_h, steps, first = _previous(_feature_major(xp, out), h0.T, reverse)
    xp.subtract(rest, n[steps], out=z_coef[steps])
    xp.subtract(first_h, n[first], out=z_coef[first])
    xp.one_minus(z, out=scratch)
    xp.multiply(scratch, z, out=scratch)
    xp.multiply(z_coef, scratch, out=z_coef)

    dh_all = _feature_major(xp, grad)
    dx = xp.empty((length, 3 * size, batch), work)
    dhidden = xp.empty((length, 3 * size, batch), work)
    product = xp.empty((size, batch), work)
    dh_next = None
    for t in reversed(_order(length, reverse)):
        dh = dh_all[t]
        if dh_next is not None:
            xp.add(dh, dh_next, out=dh)
        d, dhid = dx[t], dhidden[t]
        dn = d[2 * size :]
        xp.multiply(dh, n_coef[t], out=dn)
        xp.multiply(dn, r_coef[t], out=dhid[:size])
        xp.multiply(dh, z_coef[t], out=dhid[size : 2 * size])
        xp.multiply(dn, r[t], out=dhid[2 * size :])
        dh_next = xp.matmul(weight.T, dhid)
        xp.multiply(dh, z[t], out=product)
        xp.add(dh_next, product, out=dh_next)
    xp.copy(dx[:, : 2 * size], dhidden[:, : 2 * size])
    dweight, dbias = _weight_grads(xp, _batch_major(xp, dhidden), out, h0, reverse)
    return _batch_major(xp, dx), _rows(xp, dh_next), dweight, dbias


# -- Elman RNN ------------------------------------------------------------------------------------
def rnn_forward(xp, x, h0, weight, bias, relu, reverse):
    xb = _feature_major(xp, x, bias)
    states = xp.empty(xb.shape, x)
    activation = xp.relu if relu else xp.tanh
    h = h0.T
    for t in _order(x.shape[0], reverse):
        new = states[t]
        xp.matmul(weight, h, out=new)
        xp.add(new, xb[t], out=new)
        activation(new, out=new)
        h = new
    return _batch_major(xp, states)


def rnn_backward(xp, grad, h0, weight, out, relu, reverse):
    slope = _feature_major(xp, out)
    if relu:
        xp.positive_mask(slope, out=slope)
    else:
        xp.multiply(slope, slope, out=slope)
        xp.one_minus(slope, out=slope)
    dpre = _feature_major(xp, grad)  # each step's gradient, then in place its pre-activation's
    dh_next = None
    for t in reversed(_order(out.shape[0], reverse)):
        d = dpre[t]
        if dh_next is not None:
            xp.add(d, dh_next, out=d)
        xp.multiply(d, slope[t], out=d)
        dh_next = xp.matmul(weight.T, d)
    dx = _batch_major(xp, dpre)
    dweight, dbias = _weight_grads(xp, dx, out, h0, reverse)
    return dx, _rows(xp, dh_next), dweight, dbias


class RecurrentKernels:
    """The recurrent primitives of a backend, on the array library of its ``arrays`` adapter
    (a mixin of the backend class)."""

    arrays: Any

    def lstm_scan(self, x, h0, c0, weight, bias, reverse):
        return lstm_forward(self.arrays, x, h0, c0, weight, bias, reverse)

    def lstm_scan_backward(self, grad, x, h0, c0, weight, bias, out, aux, reverse):
        return lstm_backward(self.arrays, grad, h0, c0, weight, out, aux, reverse)

    def gru_scan(self, x, h0, weight, bias, reverse):
        return gru_forward(self.arrays, x, h0, weight, bias, reverse)

    def gru_scan_backward(self, grad, x, h0, weight, bias, out, aux, reverse):
        return gru_backward(self.arrays, grad, h0, weight, out, aux, reverse)

    def rnn_scan(self, x, h0, weight, bias, relu, reverse):
        return rnn_forward(self.arrays, x, h0, weight, bias, relu, reverse)

    def rnn_scan_backward(self, grad, x, h0, weight, bias, out, relu, reverse):
        return rnn_backward(self.arrays, grad, h0, weight, out, relu, reverse)
