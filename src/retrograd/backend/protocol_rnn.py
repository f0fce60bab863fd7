"""The recurrent part of the backend protocol: one fused kernel per recurrent layer and
direction (LSTM, GRU, Elman RNN) over a whole sequence, forward and backward, with defaults
composed of the other primitives.

``*_layer(x, h0[, c0], w_ih, w_hh, b_ih, b_hh, ...)`` runs one layer over ``x`` ``[T, N, I]``:
the input projection of every step at once (``x @ w_ih^T + b_ih``, one matrix product), then
the ``T`` steps of the recurrence with the hidden-to-hidden ``w_hh`` ``[G*H, H]`` and ``b_hh``
(``G`` = 4 for LSTM, 3 for GRU, 1 for RNN; ``w_ih`` is ``[G*H, I]``; an absent bias is an empty
``[0]`` primitive, as for ``conv``). Its backward runs the steps in reverse once and returns
every input's gradient, each weight's as one matrix product over all steps (cuDNN's layout of
the work: one node per layer and direction instead of dozens per time step, and what backward
keeps is the layer's input, not its ``G`` times wider projection).

Gate orders are PyTorch's: LSTM ``i, f, g, o`` (``c' = f*c + i*g``, ``h' = o*tanh(c')``),
GRU ``r, z, n`` (``n = tanh(x_n + r * (h W_hn^T + b_hn))``, ``h' = (1-z)*n + z*h``).
``reverse`` runs the steps from ``T-1`` down to 0 (the second direction of a bidirectional
layer); outputs stay at their time positions.

Outputs: ``lstm_layer`` returns ``(out, aux)``, ``out`` ``[T+1, N, H]`` holding ``h_t`` at rows
``0..T-1`` and the final cell state at row ``T`` (one tracked output carries both states);
``gru_layer`` returns ``(out, aux)`` and ``rnn_layer`` ``out``, ``[T, N, H]``. ``aux`` is what
a backend's backward kernel reads besides the inputs (a fused kernel keeps the activated gates
and cell states, the workspace cuDNN calls its reserve): its layout is the backend's own, and
the defaults here neither need nor read it (they return an empty one).

The backward defaults recompute the steps from the inputs (so that, run on the autodiff
backend for ``backward(create_graph=True)``, they are recorded and differentiate again, in
every input and in ``grad``); a backend's kernels read ``out`` and ``aux`` instead.
"""

from __future__ import annotations

from typing import Any

__all__ = ["RecurrentProtocol"]


class RecurrentProtocol:
    """The recurrent kernels of :class:`~retrograd.backend.protocol.Backend` (a mixin it
    includes), with defaults composed of its primitives."""

    #: Every method here has a correct default: a backend may keep any of them.
    OPTIONAL_RECURRENT = frozenset(
        {
            "lstm_layer",
            "lstm_layer_backward",
            "gru_layer",
            "gru_layer_backward",
            "rnn_layer",
            "rnn_layer_backward",
        }
    )

    # -- kernels ------------------------------------------------------------------------------
    def lstm_layer(
        self,
        x: Any,
        h0: Any,
        c0: Any,
        w_ih: Any,
        w_hh: Any,
        b_ih: Any,
        b_hh: Any,
        reverse: bool,
    ) -> tuple[Any, Any]:
        """One LSTM layer over ``x`` ``[T, N, I]`` from ``h0``, ``c0`` ``[N, H]``: ``(out,
        aux)``, ``out`` ``[T+1, N, H]`` (every ``h_t``, then the last cell state)."""
        steps = self._lstm_steps(self._projection(x, w_ih, b_ih), h0, c0, w_hh, b_hh, reverse)
        last_cell = self._row(steps[-1][2][5])
        return self.cat([self._stacked(steps), last_cell], 0), self._no_aux(x)

    def lstm_layer_backward(
        self,
        grad: Any,
        x: Any,
        h0: Any,
        c0: Any,
        w_ih: Any,
        w_hh: Any,
        b_ih: Any,
        b_hh: Any,
        out: Any,
        aux: Any,
        reverse: bool,
    ) -> tuple[Any, ...]:
        """The gradients of ``sum(grad * lstm_layer(...)[0])``: ``(dx, dh0, dc0, dw_ih, dw_hh,
        db_ih, db_hh)`` (the biases' ``[4H]`` even for empty biases)."""
        steps = self._lstm_steps(self._projection(x, w_ih, b_ih), h0, c0, w_hh, b_hh, reverse)
        length = self.shape(x)[0]
        dh, dc = None, self._at(grad, length)
        dgates: list[Any] = [None] * length
        for t, _h_prev, (i, f, g, o, c_prev, c), _h in reversed(steps):
            dh = self._at(grad, t) if dh is None else self.add(self._at(grad, t), dh)
            tanh_c = self.tanh(c)
            dc = self.add(dc, self.mul(self.mul(dh, o), self._tanh_slope(tanh_c)))
            gate_grads = [
                self.mul(self.mul(dc, g), self._sigmoid_slope(i)),
                self.mul(self.mul(dc, c_prev), self._sigmoid_slope(f)),
                self.mul(self.mul(dc, i), self._tanh_slope(g)),
                self.mul(self.mul(dh, tanh_c), self._sigmoid_slope(o)),
            ]
            dgates[t] = self.cat(gate_grads, 1)
            dc = self.mul(dc, f)
            dh = self.matmul(dgates[t], w_hh)
        dx, dw_ih, db_ih = self._input_grads(x, w_ih, dgates)
        dw_hh, db_hh = self._hidden_grads(steps, dgates)
        return dx, dh, dc, dw_ih, dw_hh, db_ih, db_hh

    def gru_layer(
        self, x: Any, h0: Any, w_ih: Any, w_hh: Any, b_ih: Any, b_hh: Any, reverse: bool
    ) -> tuple[Any, Any]:
        """One GRU layer over ``x`` ``[T, N, I]`` from ``h0`` ``[N, H]``: ``(out, aux)``,
        ``out`` ``[T, N, H]`` (every ``h_t``)."""
        steps = self._gru_steps(self._projection(x, w_ih, b_ih), h0, w_hh, b_hh, reverse)
        return self._stacked(steps), self._no_aux(x)

    def gru_layer_backward(
        self,
        grad: Any,
        x: Any,
        h0: Any,
        w_ih: Any,
        w_hh: Any,
        b_ih: Any,
        b_hh: Any,
        out: Any,
        aux: Any,
        reverse: bool,
    ) -> tuple[Any, ...]:
        """The gradients of ``sum(grad * gru_layer(...)[0])``: ``(dx, dh0, dw_ih, dw_hh,
        db_ih, db_hh)``."""
        steps = self._gru_steps(self._projection(x, w_ih, b_ih), h0, w_hh, b_hh, reverse)
        length = self.shape(x)[0]
        dh = None
        dx_rows: list[Any] = [None] * length
        dhidden_rows: list[Any] = [None] * length
        for t, h_prev, (r, z, n, hidden_n), _h in reversed(steps):
            dh = self._at(grad, t) if dh is None else self.add(self._at(grad, t), dh)
            dn = self.mul(self.mul(dh, self.rsub_scalar(z, 1.0)), self._tanh_slope(n))
            dr = self.mul(self.mul(dn, hidden_n), self._sigmoid_slope(r))
            dz = self.mul(self.mul(dh, self.sub(h_prev, n)), self._sigmoid_slope(z))
            dx_rows[t] = self.cat([dr, dz, dn], 1)
            dhidden_rows[t] = self.cat([dr, dz, self.mul(dn, r)], 1)
            dh = self.add(self.mul(dh, z), self.matmul(dhidden_rows[t], w_hh))
        dx, dw_ih, db_ih = self._input_grads(x, w_ih, dx_rows)
        dw_hh, db_hh = self._hidden_grads(steps, dhidden_rows)
        return dx, dh, dw_ih, dw_hh, db_ih, db_hh

    def rnn_layer(
        self,
        x: Any,
        h0: Any,
        w_ih: Any,
        w_hh: Any,
        b_ih: Any,
        b_hh: Any,
        relu: bool,
        reverse: bool,
    ) -> Any:
        """One Elman layer ``h' = act(x_t @ w_ih^T + b_ih + h @ w_hh^T + b_hh)`` over ``x``
        ``[T, N, I]`` from ``h0`` ``[N, H]``, ``act`` ReLU if ``relu`` else tanh: ``out``
        ``[T, N, H]``."""
        projected = self._projection(x, w_ih, b_ih)
        return self._stacked(self._rnn_steps(projected, h0, w_hh, b_hh, relu, reverse))

    def rnn_layer_backward(
        self,
        grad: Any,
        x: Any,
        h0: Any,
        w_ih: Any,
        w_hh: Any,
        b_ih: Any,
        b_hh: Any,
        out: Any,
        relu: bool,
        reverse: bool,
    ) -> tuple[Any, ...]:
        """The gradients of ``sum(grad * rnn_layer(...))``: ``(dx, dh0, dw_ih, dw_hh, db_ih,
        db_hh)``."""
        projected = self._projection(x, w_ih, b_ih)
        steps = self._rnn_steps(projected, h0, w_hh, b_hh, relu, reverse)
        dh = None
        rows: list[Any] = [None] * self.shape(x)[0]
        for t, _h_prev, _gates, h in reversed(steps):
            dh = self._at(grad, t) if dh is None else self.add(self._at(grad, t), dh)
            slope = self.cast(self.greater_elem(h, 0.0), self.dtype(h)) if relu else None
            rows[t] = self.mul(dh, slope if relu else self._tanh_slope(h))
            dh = self.matmul(rows[t], w_hh)
        dx, dw_ih, db_ih = self._input_grads(x, w_ih, rows)
        dw_hh, db_hh = self._hidden_grads(steps, rows)
        return dx, dh, dw_ih, dw_hh, db_ih, db_hh

    # -- the steps, composed ------------------------------------------------------------------
    # Each ``*_steps`` runs the recurrence over the input projections ``x`` ``[T, N, G*H]`` and
    # lists its steps in the order run, each as ``(t, h_prev, gates, h)``: what the backward
    # defaults read.
    def _lstm_steps(self, x, h0, c0, weight, bias, reverse):
        size = self.shape(h0)[1]
        h, c, steps = h0, c0, []
        for t in self._order(self.shape(x)[0], reverse):
            pre = self._pre_activation(x, t, h, weight, bias)
            i, f, g, o = (self._columns(pre, k * size, (k + 1) * size) for k in range(4))
            i, f, g, o = self.sigmoid(i), self.sigmoid(f), self.tanh(g), self.sigmoid(o)
            c_prev, h_prev = c, h
            c = self.add(self.mul(f, c), self.mul(i, g))
            h = self.mul(o, self.tanh(c))
            steps.append((t, h_prev, (i, f, g, o, c_prev, c), h))
        return steps

    def _gru_steps(self, x, h0, weight, bias, reverse):
        size = self.shape(h0)[1]
        h, steps = h0, []
        for t in self._order(self.shape(x)[0], reverse):
            hidden = self.matmul(h, self.swap_dims(weight, 0, 1))
            if self.shape(bias)[0]:
                hidden = self.add(hidden, bias)
            x_t = self._at(x, t)
            r, z = (
                self.sigmoid(
                    self.add(
                        self._columns(x_t, k * size, (k + 1) * size),
                        self._columns(hidden, k * size, (k + 1) * size),
                    )
                )
                for k in range(2)
            )
            hidden_n = self._columns(hidden, 2 * size, 3 * size)
            n = self.tanh(self.add(self._columns(x_t, 2 * size, 3 * size), self.mul(r, hidden_n)))
            h_prev = h
            h = self.add(n, self.mul(z, self.sub(h, n)))
            steps.append((t, h_prev, (r, z, n, hidden_n), h))
        return steps

    def _rnn_steps(self, x, h0, weight, bias, relu, reverse):
        h, steps = h0, []
        for t in self._order(self.shape(x)[0], reverse):
            pre = self._pre_activation(x, t, h, weight, bias)
            h_prev = h
            h = self.relu(pre) if relu else self.tanh(pre)
            steps.append((t, h_prev, (), h))
        return steps

    # -- helpers ------------------------------------------------------------------------------
    def _projection(self, x: Any, w_ih: Any, b_ih: Any) -> Any:
        """``x @ w_ih^T + b_ih`` for every step: ``[T, N, G*H]``."""
        length, batch, features = self.shape(x)
        flat = self.reshape(x, (length * batch, features))
        projected = self.matmul(flat, self.swap_dims(w_ih, 0, 1))
        if self.shape(b_ih)[0]:
            projected = self.add(projected, b_ih)
        return self.reshape(projected, (length, batch, self.shape(w_ih)[0]))

    def _input_grads(self, x, w_ih, rows):
        """``(dx, dw_ih, db_ih)`` from each step's gradient of its input projection
        (``rows[t]``, ``[N, G*H]``)."""
        length, batch, features = self.shape(x)
        dprojected = self.cat(rows, 0)  # [T*N, G*H]
        dx = self.reshape(self.matmul(dprojected, w_ih), (length, batch, features))
        flat = self.reshape(x, (length * batch, features))
        dw_ih = self.matmul(self.swap_dims(dprojected, 0, 1), flat)
        return dx, dw_ih, self._column_total(dprojected)

    def _hidden_grads(self, steps, rows):
        """``(dw_hh, db_hh)`` from each step's gradient of its hidden pre-activation:
        ``sum_t rows[t]^T @ h_prev_t``, one product over every step."""
        dhidden = self.cat(rows, 0)  # [T*N, G*H], in time order
        h_prev = self.cat([step[1] for step in sorted(steps, key=lambda s: s[0])], 0)
        dw_hh = self.matmul(self.swap_dims(dhidden, 0, 1), h_prev)
        return dw_hh, self._column_total(dhidden)

    def _column_total(self, x: Any) -> Any:
        return self.reshape(self.sum_dim(x, (0,)), (self.shape(x)[1],))

    def _stacked(self, steps):
        """Every step's ``h``, ``[T, N, H]`` in time order."""
        return self.cat([self._row(step[3]) for step in sorted(steps, key=lambda s: s[0])], 0)

    def _no_aux(self, like: Any) -> Any:
        return self.zeros((0,), self.dtype(like), self.device(like))

    def _row(self, x: Any) -> Any:
        """``[N, K]`` as ``[1, N, K]``."""
        return self.reshape(x, (1, *self.shape(x)))

    def _at(self, x: Any, t: int) -> Any:
        """Row ``t`` of ``x`` ``[T, N, K]`` as ``[N, K]``."""
        return self.reshape(self.slice(x, (slice(t, t + 1, 1),)), self.shape(x)[1:])

    def _columns(self, x: Any, start: int, end: int) -> Any:
        return self.slice(x, (slice(0, self.shape(x)[0], 1), slice(start, end, 1)))

    def _pre_activation(self, x: Any, t: int, h: Any, weight: Any, bias: Any) -> Any:
        """``x[t] + h @ weight^T + bias``."""
        pre = self.add(self._at(x, t), self.matmul(h, self.swap_dims(weight, 0, 1)))
        return self.add(pre, bias) if self.shape(bias)[0] else pre

    def _sigmoid_slope(self, s: Any) -> Any:
        """``s * (1 - s)``: the sigmoid's derivative from its output."""
        return self.mul(s, self.rsub_scalar(s, 1.0))

    def _tanh_slope(self, t: Any) -> Any:
        """``1 - t^2``: tanh's derivative from its output."""
        return self.rsub_scalar(self.square(t), 1.0)

    @staticmethod
    def _order(length: int, reverse: bool) -> range:
        return range(length - 1, -1, -1) if reverse else range(length)
