"""The fused recurrent kernels (``lstm_scan``, ``gru_scan``, ``rnn_scan`` and their backwards,
see :mod:`.protocol_rnn`), written once for any array library with NumPy's calling
conventions: ``xp`` is a small adapter (:class:`~.numpy_rnn.NumpyArrays`,
:class:`~.torch_rnn.TorchArrays`) giving ``empty``, ``addmm``, ``matmul``, ``add``,
``multiply``, ``subtract``, ``one_minus``, ``tanh``, ``sigmoid``, ``copy`` and
``column_sum``, each writing into ``out=``.

What a step costs is what is left of the recurrence after everything that does not depend on
it is taken out of the loop. Forward, one ``addmm`` (``x_t + b + h @ W^T``) and a handful of
elementwise passes per step over ``[N, G*H]``. Backward, every factor that depends only on
forward values (the activations' slopes, ``tanh(c_t)``, GRU's ``h_{t-1} - n_t``) is computed
for all steps at once, in a few passes over ``[T, N, ...]``; each step then multiplies by them
and makes one product with ``W``; the weight's gradient is one product over all steps.

Workspace (the ``aux`` output): LSTM ``[T, N, 5H]`` holding the activated gates ``i, f, g, o``
and the cell state ``c_t``; GRU ``[T, N, 4H]`` holding ``r, z, n`` and ``h W_hn^T + b_hn``;
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


def _with_bias(xp: Any, x: Any, bias: Any) -> Any:
    """``x + bias`` for every step at once (``x`` itself without a bias)."""
    if not bias.shape[0]:
        return x
    out = xp.empty(x.shape, x)
    return xp.add(x, bias, out=out)


def _previous(out: Any, h0: Any, reverse: bool) -> tuple[Any, Any, slice, int]:
    """Where each step's previous hidden state lies: ``(rest, h0, steps, first)`` such that
    steps ``steps`` read the rows ``rest`` of ``out`` and step ``first`` reads ``h0``."""
    length = out.shape[0]
    if reverse:
        return out[1:length], h0, slice(0, length - 1), length - 1
    return out[0 : length - 1], h0, slice(1, length), 0


def _weight_grads(xp: Any, dhidden: Any, out: Any, h0: Any, reverse: bool) -> tuple[Any, Any]:
    """``(dweight, dbias)``: ``sum_t dhidden_t^T @ h_{t-1}`` (two products, no copy of the
    hidden states) and ``sum_t`` of ``dhidden_t`` over its rows."""
    length, batch, width = dhidden.shape
    size = h0.shape[1]
    rest, first_h, steps, first = _previous(out, h0, reverse)
    dweight = xp.empty((width, size), dhidden)
    xp.matmul(dhidden[first].T, first_h, out=dweight)
    if length > 1:
        rows = dhidden[steps].reshape(-1, width)
        dweight += xp.matmul(rows.T, rest.reshape(-1, size))
    return dweight, xp.column_sum(dhidden.reshape(length * batch, width))


# -- LSTM -----------------------------------------------------------------------------------------
def lstm_forward(xp, x, h0, c0, weight, bias, reverse):
    length, batch, width = x.shape
    size = width // 4
    xb = _with_bias(xp, x, bias)
    work = xp.empty((length, batch, 5 * size), x)
    out = xp.empty((length + 1, batch, size), x)
    pre = xp.empty((batch, width), x)
    product = xp.empty((batch, size), x)
    wt = weight.T
    h, c = h0, c0
    for t in _order(length, reverse):
        xp.addmm(xb[t], h, wt, out=pre)
        w = work[t]
        xp.sigmoid(pre[:, : 2 * size], out=w[:, : 2 * size])
        xp.tanh(pre[:, 2 * size : 3 * size], out=w[:, 2 * size : 3 * size])
        xp.sigmoid(pre[:, 3 * size :], out=w[:, 3 * size : 4 * size])
        cell = w[:, 4 * size :]
        xp.multiply(w[:, size : 2 * size], c, out=cell)
        xp.multiply(w[:, :size], w[:, 2 * size : 3 * size], out=product)
        xp.add(cell, product, out=cell)
        h = out[t]
        xp.tanh(cell, out=h)
        xp.multiply(h, w[:, 3 * size : 4 * size], out=h)
        c = cell
    xp.copy(out[length], c)
    return out, work


def lstm_backward(xp, grad, h0, c0, weight, out, work, reverse):
    length, batch, five = work.shape
    size = five // 5
    gates, cells = work[:, :, : 4 * size], work[:, :, 4 * size :]
    # Every factor that depends on forward values alone, for all steps at once.
    slope = xp.empty(gates.shape, work)  # the activations' derivatives, from their outputs
    xp.one_minus(gates, out=slope)
    xp.multiply(slope, gates, out=slope)
    tanh_gate = gates[:, :, 2 * size : 3 * size]
    g_slope = slope[:, :, 2 * size : 3 * size]
    xp.multiply(tanh_gate, tanh_gate, out=g_slope)
    xp.one_minus(g_slope, out=g_slope)
    tanh_cells = xp.empty(cells.shape, work)
    xp.tanh(cells, out=tanh_cells)
    cell_slope = xp.empty(cells.shape, work)  # d c_t / d h_t through h = o * tanh(c)
    xp.multiply(tanh_cells, tanh_cells, out=cell_slope)
    xp.one_minus(cell_slope, out=cell_slope)
    xp.multiply(cell_slope, gates[:, :, 3 * size :], out=cell_slope)

    dx = xp.empty((length, batch, 4 * size), work)
    dc = xp.empty((batch, size), work)
    xp.copy(dc, grad[length])
    dh = xp.empty((batch, size), work)
    product = xp.empty((batch, size), work)
    first = _order(length, reverse)[0]
    dh_next = None
    for t in reversed(_order(length, reverse)):
        if dh_next is None:
            xp.copy(dh, grad[t])
        else:
            xp.add(grad[t], dh_next, out=dh)
        xp.multiply(dh, cell_slope[t], out=product)
        xp.add(dc, product, out=dc)
        w, d = work[t], dx[t]
        c_prev = c0 if t == first else cells[t + 1 if reverse else t - 1]
        xp.multiply(dc, w[:, 2 * size : 3 * size], out=d[:, :size])
        xp.multiply(dc, c_prev, out=d[:, size : 2 * size])
        xp.multiply(dc, w[:, :size], out=d[:, 2 * size : 3 * size])
        xp.multiply(dh, tanh_cells[t], out=d[:, 3 * size :])
        xp.multiply(d, slope[t], out=d)
        xp.multiply(dc, w[:, size : 2 * size], out=dc)
        dh_next = xp.matmul(d, weight)
    dweight, dbias = _weight_grads(xp, dx, out[:length], h0, reverse)
    return dx, dh_next, dc, dweight, dbias


# -- GRU ------------------------------------------------------------------------------------------
def gru_forward(xp, x, h0, weight, bias, reverse):
    length, batch, width = x.shape
    size = width // 3
    work = xp.empty((length, batch, 4 * size), x)
    out = xp.empty((length, batch, size), x)
    hidden = xp.empty((batch, width), x)
    wt = weight.T
    h = h0
    for t in _order(length, reverse):
        if bias.shape[0]:
            xp.addmm(bias, h, wt, out=hidden)
        else:
            xp.matmul(h, wt, out=hidden)
        w, x_t = work[t], x[t]
        rz = w[:, : 2 * size]
        xp.add(x_t[:, : 2 * size], hidden[:, : 2 * size], out=rz)
        xp.sigmoid(rz, out=rz)
        xp.copy(w[:, 3 * size :], hidden[:, 2 * size :])
        n = w[:, 2 * size : 3 * size]
        xp.multiply(w[:, :size], hidden[:, 2 * size :], out=n)
        xp.add(n, x_t[:, 2 * size :], out=n)
        xp.tanh(n, out=n)
        new = out[t]
        xp.subtract(h, n, out=new)
        xp.multiply(new, w[:, size : 2 * size], out=new)
        xp.add(new, n, out=new)
        h = new
    return out, work


def gru_backward(xp, grad, h0, weight, out, work, reverse):
    length, batch, four = work.shape
    size = four // 4
    r, z = work[:, :, :size], work[:, :, size : 2 * size]
    n, hidden_n = work[:, :, 2 * size : 3 * size], work[:, :, 3 * size :]
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
    rest, first_h, steps, first = _previous(out, h0, reverse)
    xp.subtract(rest, n[steps], out=z_coef[steps])
    xp.subtract(first_h, n[first], out=z_coef[first])
    xp.one_minus(z, out=scratch)
    xp.multiply(scratch, z, out=scratch)
    xp.multiply(z_coef, scratch, out=z_coef)

    dx = xp.empty((length, batch, 3 * size), work)
    dhidden = xp.empty((length, batch, 3 * size), work)
    dh = xp.empty((batch, size), work)
    product = xp.empty((batch, size), work)
    dh_next = None
    for t in reversed(_order(length, reverse)):
        if dh_next is None:
            xp.copy(dh, grad[t])
        else:
            xp.add(grad[t], dh_next, out=dh)
        d, dhid = dx[t], dhidden[t]
        dn = d[:, 2 * size :]
        xp.multiply(dh, n_coef[t], out=dn)
        xp.multiply(dn, r_coef[t], out=dhid[:, :size])
        xp.multiply(dh, z_coef[t], out=dhid[:, size : 2 * size])
        xp.multiply(dn, r[t], out=dhid[:, 2 * size :])
        dh_next = xp.matmul(dhid, weight)
        xp.multiply(dh, z[t], out=product)
        xp.add(dh_next, product, out=dh_next)
    xp.copy(dx[:, :, : 2 * size], dhidden[:, :, : 2 * size])
    dweight, dbias = _weight_grads(xp, dhidden, out, h0, reverse)
    return dx, dh_next, dweight, dbias


# -- Elman RNN ------------------------------------------------------------------------------------
def rnn_forward(xp, x, h0, weight, bias, relu, reverse):
    xb = _with_bias(xp, x, bias)
    out = xp.empty(x.shape, x)
    activation = xp.relu if relu else xp.tanh
    wt = weight.T
    h = h0
    for t in _order(x.shape[0], reverse):
        new = out[t]
        xp.addmm(xb[t], h, wt, out=new)
        activation(new, out=new)
        h = new
    return out


def rnn_backward(xp, grad, h0, weight, out, relu, reverse):
    slope = xp.empty(out.shape, out)
    if relu:
        xp.positive_mask(out, out=slope)
    else:
        xp.multiply(out, out, out=slope)
        xp.one_minus(slope, out=slope)
    dx = xp.empty(out.shape, out)
    dh_next = None
    for t in reversed(_order(out.shape[0], reverse)):
        d = dx[t]
        if dh_next is None:
            xp.multiply(grad[t], slope[t], out=d)
        else:
            xp.add(grad[t], dh_next, out=d)
            xp.multiply(d, slope[t], out=d)
        dh_next = xp.matmul(d, weight)
    dweight, dbias = _weight_grads(xp, dx, out, h0, reverse)
    return dx, dh_next, dweight, dbias


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
