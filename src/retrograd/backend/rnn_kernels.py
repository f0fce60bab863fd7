"""The fused recurrent kernels (``lstm_layer``, ``gru_layer``, ``rnn_layer`` and their
backwards, see :mod:`.protocol_rnn`), written once for any array library with NumPy's calling
conventions: ``xp`` is a small adapter (:class:`~.numpy_rnn.NumpyArrays`,
:class:`~.torch_rnn.TorchArrays`) giving ``empty``, ``matmul``, ``add``, ``multiply``,
``subtract``, ``one_minus``, ``tanh``, ``sigmoid``, ``relu``, ``positive_mask``, ``copy``,
``row_sum`` and ``quiet``, each writing into ``out=``.

What a step costs is what is left of the recurrence once everything that does not depend on
it is taken out of the loop, and the loop's products are laid out the way BLAS is fastest.

- *The batch as the last dimension.* Each step's product with ``w_hh`` (``[G*H, H]``) is
  computed as ``w_hh @ h^T``, ``[G*H, N]``: for the small batches of recurrent models this runs
  about twice as fast as ``h @ w_hh^T`` on OpenBLAS (``N`` = 20, ``H`` = 200, float32), and
  likewise backward (``w_hh^T @ dgates^T``). States, gates and workspace are kept ``[.., K,
  N]``, every gate a contiguous block of rows.
- *Whole-sequence products.* The input projection of all steps is one product, ``w_ih @
  x^T``, ``[G*H, T*N]``, with both biases added once (GRU: all but ``b_hn``), already in the
  steps' layout; backward collects the pre-activation gradients in the same ``[G*H, T, N]``
  layout, from which ``dx``, ``dw_ih``, ``dw_hh`` and the biases' gradients are one product
  (or sum) each, with no transposed copy.
- *Out of the loop.* Backward, every factor that depends only on forward values (the
  activations' slopes, ``tanh(c_t)``, GRU's ``h_{t-1} - n_t``) is computed for all steps at
  once; a step multiplies by them and makes one product with ``w_hh``.

Workspace (the ``aux`` output): LSTM ``[T, 5H, N]``, the activated gates ``i, f, g, o`` and the
cell state ``c_t``; GRU ``[T, 4H, N]``, ``r, z, n`` and ``h W_hn^T + b_hn``; the Elman RNN none
(its output is all its backward reads). Kernels write only into arrays they create, never into
an argument.
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


def _has(bias: Any) -> bool:
    return bool(bias.shape[0])


def _projection(xp: Any, x: Any, w_ih: Any, *biases: Any) -> Any:
    """``w_ih @ x^T`` plus the non-empty ``biases`` ``[G*H]``, as ``[G*H, T, N]``."""
    length, batch, features = x.shape
    projected = xp.matmul(w_ih, x.reshape(length * batch, features).T)
    for bias in biases:
        if _has(bias):
            xp.add(projected, bias[:, None], out=projected)
    return projected.reshape(w_ih.shape[0], length, batch)


def _feature_major(xp: Any, x: Any) -> Any:
    """``[T, N, K]`` as a new ``[T, K, N]`` array."""
    out = xp.empty((x.shape[0], x.shape[2], x.shape[1]), x)
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


def _previous(length: int, reverse: bool) -> tuple[slice, slice, int]:
    """``(steps, rows, first)``: steps ``steps`` read the hidden states at ``rows`` of the
    output, step ``first`` reads ``h0``."""
    if reverse:
        return slice(0, length - 1), slice(1, length), length - 1
    return slice(1, length), slice(0, length - 1), 0


def _previous_states(xp: Any, out: Any, h0: Any, reverse: bool) -> Any:
    """Each step's previous hidden state, ``[T, N, H]``."""
    steps, rows, first = _previous(out.shape[0], reverse)
    states = xp.empty(out.shape, out)
    xp.copy(states[steps], out[rows])
    xp.copy(states[first], h0)
    return states


def _input_and_weight_grads(xp, dgates, x, w_ih, w_hh, out, h0, reverse, dhidden=None):
    """``(dx, dw_ih, dw_hh, db_ih, db_hh)`` from the pre-activation gradients ``dgates``
    ``[G*H, T, N]`` (of the input projection; ``dhidden`` those of the hidden one where they
    differ, GRU's): one product or sum over every step each."""
    length, batch, features = x.shape
    width = dgates.shape[0]
    flat = dgates.reshape(width, length * batch)
    hidden = flat if dhidden is None else dhidden.reshape(width, length * batch)
    dx = xp.matmul(flat.T, w_ih).reshape(length, batch, features)
    dw_ih = xp.matmul(flat, x.reshape(length * batch, features))
    states = _previous_states(xp, out, h0, reverse)
    dw_hh = xp.matmul(hidden, states.reshape(length * batch, h0.shape[1]))
    db_ih = xp.row_sum(flat)
    db_hh = xp.row_sum(hidden) if dhidden is not None else xp.row_sum(flat)
    return dx, dw_ih, dw_hh, db_ih, db_hh


# -- LSTM -----------------------------------------------------------------------------------------
# Inside, the gates run in the order i, f, o, g with the pre-activations of i, f and o negated
# (their rows of w_ih, w_hh and the biases, reordered and negated once per call): the three
# sigmoids are then one block, ``1 / (1 + exp(z))``, with no pass to negate. Negation is
# exact, so the values are PyTorch's formula's. The workspace keeps that order; backward
# turns its gradients back to PyTorch's ``i, f, g, o``.
def _lstm_rows(xp: Any, w: Any, size: int) -> Any:
    """The rows (or entries) of ``w`` as ``-i, -f, -o, g``."""
    out = xp.empty(w.shape, w)
    if not w.shape[0]:
        return out
    xp.negative(w[: 2 * size], out=out[: 2 * size])
    xp.negative(w[3 * size :], out=out[2 * size : 3 * size])
    xp.copy(out[3 * size :], w[2 * size : 3 * size])
    return out


def lstm_forward(xp, x, h0, c0, w_ih, w_hh, b_ih, b_hh, reverse):
    length, batch, _ = x.shape
    size = w_hh.shape[1]
    rows = (_lstm_rows(xp, w, size) for w in (w_ih, w_hh, b_ih, b_hh))
    w_ih, w_hh, b_ih, b_hh = rows
    projected = _projection(xp, x, w_ih, b_ih, b_hh)
    work = xp.empty((length, 5 * size, batch), x)  # i, f, o, g, then c_t
    states = xp.empty((length + 1, size, batch), x)  # every h_t, then the last c
    product = xp.empty((size, batch), x)
    h, c = h0.T, c0.T
    with xp.quiet():
        for t in _order(length, reverse):
            w = work[t]
            gates = w[: 4 * size]
            xp.matmul(w_hh, h, out=gates)
            xp.add(gates, projected[:, t], out=gates)
            xp.sigmoid_of_negated(gates[: 3 * size], out=gates[: 3 * size])
            xp.tanh(gates[3 * size :], out=gates[3 * size :])
            cell = w[4 * size :]
            xp.multiply(w[size : 2 * size], c, out=cell)
            xp.multiply(w[:size], w[3 * size : 4 * size], out=product)
            xp.add(cell, product, out=cell)
            h = states[t]
            xp.tanh(cell, out=h)
            xp.multiply(h, w[2 * size : 3 * size], out=h)
            c = cell
    xp.copy(states[length], c)
    return _batch_major(xp, states), work


def lstm_backward(xp, grad, x, h0, c0, w_ih, w_hh, out, work, reverse):
    length, five, batch = work.shape
    size = five // 5
    i, f, o, g = (work[:, k * size : (k + 1) * size] for k in range(4))
    cells = work[:, 4 * size :]
    # Every factor that depends on forward values alone, for all steps at once: the pre-
    # activation gradients are d_i, d_f, d_g = dc * coef[:3H] and d_o = dh * coef[3H:]
    # (PyTorch's order), and dc gains dh * cell_slope.
    coef = xp.empty((length, 4 * size, batch), work)
    coef_i, coef_f, coef_g, coef_o = (coef[:, k * size : (k + 1) * size] for k in range(4))
    for gate, target in ((i, coef_i), (f, coef_f), (o, coef_o)):  # sigmoid slopes
        xp.one_minus(gate, out=target)
        xp.multiply(target, gate, out=target)
    xp.multiply(g, g, out=coef_g)  # tanh's
    xp.one_minus(coef_g, out=coef_g)
    xp.multiply(coef_i, g, out=coef_i)
    xp.multiply(coef_g, i, out=coef_g)
    steps, rows, first = _previous(length, reverse)
    xp.multiply(coef_f[steps], cells[rows], out=coef_f[steps])
    xp.multiply(coef_f[first], c0.T, out=coef_f[first])
    tanh_cells = xp.empty(cells.shape, work)
    xp.tanh(cells, out=tanh_cells)
    xp.multiply(coef_o, tanh_cells, out=coef_o)
    cell_slope = tanh_cells  # d c_t / d h_t through h = o * tanh(c), in place
    xp.multiply(cell_slope, cell_slope, out=cell_slope)
    xp.one_minus(cell_slope, out=cell_slope)
    xp.multiply(cell_slope, o, out=cell_slope)

    dh_all = _feature_major(xp, grad)  # this kernel's own: each step adds into its row
    dgates = xp.empty((4 * size, length, batch), work)
    dc = dh_all[length]
    product = xp.empty((size, batch), work)
    dh_next = None
    for t in reversed(_order(length, reverse)):
        dh = dh_all[t]
        if dh_next is not None:
            xp.add(dh, dh_next, out=dh)
        xp.multiply(dh, cell_slope[t], out=product)
        xp.add(dc, product, out=dc)
        d = dgates[:, t]
        three = (3, size, batch)
        xp.multiply(dc[None], coef[t, : 3 * size].reshape(three), out=d[: 3 * size].reshape(three))
        xp.multiply(dh, coef_o[t], out=d[3 * size :])
        xp.multiply(dc, f[t], out=dc)
        dh_next = xp.matmul(w_hh.T, d)
    grads = _input_and_weight_grads(xp, dgates, x, w_ih, w_hh, out[:length], h0, reverse)
    dx, dw_ih, dw_hh, db_ih, db_hh = grads
    return dx, _rows(xp, dh_next), _rows(xp, dc), dw_ih, dw_hh, db_ih, db_hh


# -- GRU ------------------------------------------------------------------------------------------
def gru_forward(xp, x, h0, w_ih, w_hh, b_ih, b_hh, reverse):
    length, batch, _ = x.shape
    size = w_hh.shape[1]
    # b_hh's r and z parts join the projection; its n part is inside r * (W_hn h + b_hn)
    if _has(b_hh):
        projected = _projection(xp, x, w_ih, b_ih)
        xp.add(projected[: 2 * size], b_hh[: 2 * size, None, None], out=projected[: 2 * size])
        b_hn = b_hh[2 * size :, None]
    else:
        projected, b_hn = _projection(xp, x, w_ih, b_ih), None
    work = xp.empty((length, 4 * size, batch), x)
    states = xp.empty((length, size, batch), x)
    hidden = xp.empty((3 * size, batch), x)
    h = h0.T
    with xp.quiet():
        for t in _order(length, reverse):
            xp.matmul(w_hh, h, out=hidden)
            w, x_t = work[t], projected[:, t]
            rz = w[: 2 * size]
            xp.add(x_t[: 2 * size], hidden[: 2 * size], out=rz)
            xp.sigmoid(rz, out=rz)
            hidden_n = w[3 * size :]
            if b_hn is None:
                xp.copy(hidden_n, hidden[2 * size :])
            else:
                xp.add(hidden[2 * size :], b_hn, out=hidden_n)
            n = w[2 * size : 3 * size]
            xp.multiply(w[:size], hidden_n, out=n)
            xp.add(n, x_t[2 * size :], out=n)
            xp.tanh(n, out=n)
            new = states[t]
            xp.subtract(h, n, out=new)
            xp.multiply(new, w[size : 2 * size], out=new)
            xp.add(new, n, out=new)
            h = new
    return _batch_major(xp, states), work


def gru_backward(xp, grad, x, h0, w_ih, w_hh, out, work, reverse):
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
    z_coef = _feature_major(xp, _previous_states(xp, out, h0, reverse))
    xp.subtract(z_coef, n, out=z_coef)
    xp.one_minus(z, out=scratch)
    xp.multiply(scratch, z, out=scratch)
    xp.multiply(z_coef, scratch, out=z_coef)

    dh_all = _feature_major(xp, grad)
    dx = xp.empty((3 * size, length, batch), work)  # of the input projection
    dhidden = xp.empty((3 * size, length, batch), work)  # of the hidden one
    product = xp.empty((size, batch), work)
    dh_next = None
    for t in reversed(_order(length, reverse)):
        dh = dh_all[t]
        if dh_next is not None:
            xp.add(dh, dh_next, out=dh)
        dn, dhid = dx[2 * size :, t], dhidden[:, t]
        xp.multiply(dh, n_coef[t], out=dn)
        xp.multiply(dn, r_coef[t], out=dhid[:size])
        xp.multiply(dh, z_coef[t], out=dhid[size : 2 * size])
        xp.multiply(dn, r[t], out=dhid[2 * size :])
        dh_next = xp.matmul(w_hh.T, dhid)
        xp.multiply(dh, z[t], out=product)
        xp.add(dh_next, product, out=dh_next)
    xp.copy(dx[: 2 * size], dhidden[: 2 * size])
    grads = _input_and_weight_grads(xp, dx, x, w_ih, w_hh, out, h0, reverse, dhidden)
    dx, dw_ih, dw_hh, db_ih, db_hh = grads
    return dx, _rows(xp, dh_next), dw_ih, dw_hh, db_ih, db_hh


# -- Elman RNN ------------------------------------------------------------------------------------
def rnn_forward(xp, x, h0, w_ih, w_hh, b_ih, b_hh, relu, reverse):
    length, batch, _ = x.shape
    size = w_hh.shape[1]
    projected = _projection(xp, x, w_ih, b_ih, b_hh)
    states = xp.empty((length, size, batch), x)
    activation = xp.relu if relu else xp.tanh
    h = h0.T
    for t in _order(length, reverse):
        new = states[t]
        xp.matmul(w_hh, h, out=new)
        xp.add(new, projected[:, t], out=new)
        activation(new, out=new)
        h = new
    return _batch_major(xp, states)


def rnn_backward(xp, grad, x, h0, w_ih, w_hh, out, relu, reverse):
    length, batch, _ = x.shape
    size = w_hh.shape[1]
    slope = _feature_major(xp, out)
    if relu:
        xp.positive_mask(slope, out=slope)
    else:
        xp.multiply(slope, slope, out=slope)
        xp.one_minus(slope, out=slope)
    dh_all = _feature_major(xp, grad)
    dpre = xp.empty((size, length, batch), out)
    dh_next = None
    for t in reversed(_order(length, reverse)):
        dh, d = dh_all[t], dpre[:, t]
        if dh_next is not None:
            xp.add(dh, dh_next, out=dh)
        xp.multiply(dh, slope[t], out=d)
        dh_next = xp.matmul(w_hh.T, d)
    dx, dw_ih, dw_hh, db_ih, db_hh = _input_and_weight_grads(
        xp, dpre, x, w_ih, w_hh, out, h0, reverse
    )
    return dx, _rows(xp, dh_next), dw_ih, dw_hh, db_ih, db_hh


class RecurrentKernels:
    """The recurrent primitives of a backend, on the array library of its ``arrays`` adapter
    (a mixin of the backend class)."""

    arrays: Any

    def lstm_layer(self, x, h0, c0, w_ih, w_hh, b_ih, b_hh, reverse):
        return lstm_forward(self.arrays, x, h0, c0, w_ih, w_hh, b_ih, b_hh, reverse)

    def lstm_layer_backward(self, grad, x, h0, c0, w_ih, w_hh, b_ih, b_hh, out, aux, reverse):
        return lstm_backward(self.arrays, grad, x, h0, c0, w_ih, w_hh, out, aux, reverse)

    def gru_layer(self, x, h0, w_ih, w_hh, b_ih, b_hh, reverse):
        return gru_forward(self.arrays, x, h0, w_ih, w_hh, b_ih, b_hh, reverse)

    def gru_layer_backward(self, grad, x, h0, w_ih, w_hh, b_ih, b_hh, out, aux, reverse):
        return gru_backward(self.arrays, grad, x, h0, w_ih, w_hh, out, aux, reverse)

    def rnn_layer(self, x, h0, w_ih, w_hh, b_ih, b_hh, relu, reverse):
        return rnn_forward(self.arrays, x, h0, w_ih, w_hh, b_ih, b_hh, relu, reverse)

    def rnn_layer_backward(self, grad, x, h0, w_ih, w_hh, b_ih, b_hh, out, relu, reverse):
        return rnn_backward(self.arrays, grad, x, h0, w_ih, w_hh, out, relu, reverse)
