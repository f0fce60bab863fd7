"""Real ports, round 69 (the harness: ``tests/real_ports.py``): liquid time-constant networks, a
program written here in the style of mlech26l/ncps (a closed-form continuous-time ``CfC``
cell and a liquid time-constant ``LTC`` cell solved by fused semi-implicit ODE unfolds, both
wired by a sparse random wiring's masks and run over irregularly sampled sequences of
varying lengths), trained on a sequence regression task, against torch's run of the same
program from the same weights and draws.

- the wiring: an adjacency of ``+1``/``-1`` synapse polarities drawn by ``np.random``, kept by
  ``register_buffer`` as ``torch.from_numpy(np.abs(adj))`` masks (sensory and recurrent), and
  the reversal potentials ``erev`` a parameter initialised from it;
- the CfC cell: a backbone of ``nn.Linear`` and a LeCun tanh (``1.7159 * torch.tanh(0.666 *
  x)``) over ``torch.cat([input, hx], 1)``; its ``ff1`` head by ``F.linear(x, self.ff1.weight
  * self.sparsity_mask, self.ff1.bias)``; the time gate ``torch.sigmoid(t_a * ts + t_b)``
  interpolating two heads; weights by ``nn.init.xavier_uniform_`` over ``parameters()`` with
  ``w.dim() == 2``;
- the LTC cell: parameters by ``nn.Parameter(torch.rand(...) * (hi - lo) + lo)`` from a dict
  of ranges in ``self._params``, ``nn.Softplus()`` making them positive (implicit
  constraints), the synapse activations ``torch.sigmoid(sigma * (torch.unsqueeze(v, -1) -
  mu))`` masked and reduced by ``torch.sum(..., dim=1)``, a loop of ``ode_unfolds`` updates
  of the potential with ``elapsed_time / ode_unfolds``, the input map ``x * input_w +
  input_b`` and the output map on the motor neurons ``v[:, :motor_size]``;
  ``apply_weight_constraints`` clamping ``.data`` by ``F.relu`` (explicit constraints);
- the sequence wrapper: ``batch_first`` inputs, ``timespans[:, t].unsqueeze(-1)``, the state
  ``torch.zeros((batch, state_size))``, ``torch.stack(outputs, dim=1)``; the loss a masked
  MSE by ``torch.arange(T)[None, :] < lengths[:, None]`` and ``mask.unsqueeze(-1)``;
- training: ``optim.Adam``, ``lr_scheduler.LambdaLR`` with a warm-up lambda,
  ``clip_grad_norm_``; evaluation under ``torch.no_grad()`` of the restored models after a
  ``state_dict`` round trip through ``torch.save``/``torch.load``.

The lines changed for the port: the ``import`` lines and the gradient lines (``backward()``
returns the gradients, ``clip_grad_norm_`` and ``step`` take them).
"""

from __future__ import annotations

from real_ports import (
    assert_records_agree,
    initializer,
    runs_with_draws,
    seeded_draws,  # noqa: F401 (an autouse fixture: every draw seeded)
)

NCPS_SOURCE = """
import io

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class Wiring:
    # a random sparse wiring: inter/command/motor neurons, synapse polarities +1/-1
    def __init__(self, units, motor, sensory, density):
        self.units, self.output_dim, self.input_dim = units, motor, sensory
        polarity = np.random.choice([-1, 1, 1], size=(units, units))
        self.adjacency_matrix = polarity * (np.random.uniform(size=(units, units)) < density)
        for dest in range(units):  # every neuron receives a synapse
            if not self.adjacency_matrix[:, dest].any():
                self.adjacency_matrix[np.random.randint(units), dest] = 1
        polarity = np.random.choice([-1, 1, 1], size=(sensory, units))
        self.sensory_adjacency_matrix = polarity * (
            np.random.uniform(size=(sensory, units)) < density
        )

    def erev_initializer(self):
        return np.copy(self.adjacency_matrix)

    def sensory_erev_initializer(self):
        return np.copy(self.sensory_adjacency_matrix)


class LeCun(nn.Module):
    def __init__(self):
        super(LeCun, self).__init__()
        self.tanh = nn.Tanh()

    def forward(self, x):
        return 1.7159 * self.tanh(0.666 * x)


class CfCCell(nn.Module):
    def __init__(self, input_size, hidden_size, backbone_units=16, backbone_layers=1,
                 sparsity_mask=None):
        super(CfCCell, self).__init__()
        self.input_size, self.hidden_size = input_size, hidden_size
        layer_list = [nn.Linear(input_size + hidden_size, backbone_units), LeCun()]
        for _ in range(1, backbone_layers):
            layer_list.append(nn.Linear(backbone_units, backbone_units))
            layer_list.append(LeCun())
        self.backbone = nn.Sequential(*layer_list)
        self.tanh = nn.Tanh()
        self.sigmoid = nn.Sigmoid()
        self.ff1 = nn.Linear(backbone_units, hidden_size)
        self.ff2 = nn.Linear(backbone_units, hidden_size)
        self.time_a = nn.Linear(backbone_units, hidden_size)
        self.time_b = nn.Linear(backbone_units, hidden_size)
        if sparsity_mask is None:
            self.sparsity_mask = None
        else:
            mask = torch.from_numpy(np.abs(sparsity_mask.T).astype(np.float32))
            self.register_buffer("sparsity_mask", mask)
        self.init_weights()

    def init_weights(self):
        for w in self.parameters():
            if w.dim() == 2 and w.requires_grad:
                torch.nn.init.xavier_uniform_(w)

    def forward(self, input, hx, ts):
        x = torch.cat([input, hx], 1)
        x = self.backbone(x)
        if self.sparsity_mask is not None:
            ff1 = F.linear(x, self.ff1.weight * self.sparsity_mask, self.ff1.bias)
        else:
            ff1 = self.ff1(x)
        ff2 = self.ff2(x)
        ff1 = self.tanh(ff1)
        ff2 = self.tanh(ff2)
        t_a = self.time_a(x)
        t_b = self.time_b(x)
        t_interp = self.sigmoid(t_a * ts + t_b)
        new_hidden = ff1 * (1.0 - t_interp) + t_interp * ff2
        return new_hidden, new_hidden


class LTCCell(nn.Module):
    def __init__(self, wiring, ode_unfolds=3, epsilon=1e-8, implicit_param_constraints=True):
        super(LTCCell, self).__init__()
        self._init_ranges = {
            "gleak": (0.001, 1.0), "vleak": (-0.2, 0.2), "cm": (0.4, 0.6),
            "w": (0.001, 1.0), "sigma": (3, 8), "mu": (0.3, 0.8),
            "sensory_w": (0.001, 1.0), "sensory_sigma": (3, 8), "sensory_mu": (0.3, 0.8),
        }
        self._wiring = wiring
        self._ode_unfolds = ode_unfolds
        self._epsilon = epsilon
        self.make_positive_fn = nn.Softplus() if implicit_param_constraints else nn.Identity()
        self._implicit_param_constraints = implicit_param_constraints
        self._clip = nn.ReLU()
        self._allocate_parameters()

    @property
    def state_size(self):
        return self._wiring.units

    @property
    def sensory_size(self):
        return self._wiring.input_dim

    @property
    def motor_size(self):
        return self._wiring.output_dim

    def add_weight(self, name, init_value, requires_grad=True):
        param = nn.Parameter(init_value, requires_grad=requires_grad)
        self.register_parameter(name, param)
        return param

    def _get_init_value(self, shape, param_name):
        lo, hi = self._init_ranges[param_name]
        if lo == hi:
            return torch.ones(shape) * lo
        return torch.rand(*shape) * (hi - lo) + lo

    def _allocate_parameters(self):
        n, s = self.state_size, self.sensory_size
        self._params = {}
        for name, shape in [("gleak", (n,)), ("vleak", (n,)), ("cm", (n,)),
                            ("sigma", (n, n)), ("mu", (n, n)), ("w", (n, n)),
                            ("sensory_sigma", (s, n)), ("sensory_mu", (s, n)),
                            ("sensory_w", (s, n))]:
            self._params[name] = self.add_weight(name, self._get_init_value(shape, name))
        self._params["erev"] = self.add_weight(
            "erev", torch.Tensor(self._wiring.erev_initializer()))
        self._params["sensory_erev"] = self.add_weight(
            "sensory_erev", torch.Tensor(self._wiring.sensory_erev_initializer()))
        self.register_buffer(
            "sparsity_mask", torch.Tensor(np.abs(self._wiring.adjacency_matrix)))
        self.register_buffer(
            "sensory_sparsity_mask", torch.Tensor(np.abs(self._wiring.sensory_adjacency_matrix)))
        self._params["input_w"] = self.add_weight("input_w", torch.ones((s,)))
        self._params["input_b"] = self.add_weight("input_b", torch.zeros((s,)))
        self._params["output_w"] = self.add_weight("output_w", torch.ones((self.motor_size,)))
        self._params["output_b"] = self.add_weight("output_b", torch.zeros((self.motor_size,)))

    def _sigmoid(self, v_pre, mu, sigma):
        v_pre = torch.unsqueeze(v_pre, -1)  # for broadcasting
        mues = v_pre - mu
        x = sigma * mues
        return torch.sigmoid(x)

    def _ode_solver(self, inputs, state, elapsed_time):
        v_pre = state
        p = self._params
        sensory_w_activation = self.make_positive_fn(p["sensory_w"]) * self._sigmoid(
            inputs, p["sensory_mu"], p["sensory_sigma"])
        sensory_w_activation = sensory_w_activation * self.sensory_sparsity_mask
        sensory_rev_activation = sensory_w_activation * p["sensory_erev"]
        w_numerator_sensory = torch.sum(sensory_rev_activation, dim=1)
        w_denominator_sensory = torch.sum(sensory_w_activation, dim=1)
        cm_t = self.make_positive_fn(p["cm"]) / (elapsed_time / self._ode_unfolds)
        w_param = self.make_positive_fn(p["w"])
        for _ in range(self._ode_unfolds):
            w_activation = w_param * self._sigmoid(v_pre, p["mu"], p["sigma"])
            w_activation = w_activation * self.sparsity_mask
            rev_activation = w_activation * p["erev"]
            w_numerator = torch.sum(rev_activation, dim=1) + w_numerator_sensory
            w_denominator = torch.sum(w_activation, dim=1) + w_denominator_sensory
            gleak = self.make_positive_fn(p["gleak"])
            numerator = cm_t * v_pre + gleak * p["vleak"] + w_numerator
            denominator = cm_t + gleak + w_denominator
            v_pre = numerator / (denominator + self._epsilon)
        return v_pre

    def _map_inputs(self, inputs):
        return inputs * self._params["input_w"] + self._params["input_b"]

    def _map_outputs(self, state):
        output = state
        if self.motor_size < self.state_size:
            output = output[:, 0:self.motor_size]
        return output * self._params["output_w"] + self._params["output_b"]

    def apply_weight_constraints(self):
        if not self._implicit_param_constraints:
            self.w.data = self._clip(self.w.data)
            self.sensory_w.data = self._clip(self.sensory_w.data)
            self.cm.data = self._clip(self.cm.data)
            self.gleak.data = self._clip(self.gleak.data)

    def forward(self, inputs, states, elapsed_time=1.0):
        inputs = self._map_inputs(inputs)
        next_state = self._ode_solver(inputs, states, elapsed_time)
        outputs = self._map_outputs(next_state)
        return outputs, next_state


class Sequence(nn.Module):
    def __init__(self, cell, state_size, motor_size, batch_first=True):
        super(Sequence, self).__init__()
        self.rnn_cell = cell
        self.state_size, self.motor_size = state_size, motor_size
        self.batch_first = batch_first

    def forward(self, input, hx=None, timespans=None):
        batch_dim, seq_dim = (0, 1) if self.batch_first else (1, 0)
        batch_size, seq_len = input.size(batch_dim), input.size(seq_dim)
        if hx is None:
            hx = torch.zeros((batch_size, self.state_size))
        outputs = []
        for t in range(seq_len):
            inputs = input[:, t] if self.batch_first else input[t]
            ts = 1.0 if timespans is None else timespans[:, t].unsqueeze(-1)
            h_out, hx = self.rnn_cell(inputs, hx, ts)
            outputs.append(h_out[:, : self.motor_size])
        return torch.stack(outputs, dim=seq_dim), hx


def masked_mse(pred, target, lengths):
    mask = torch.arange(pred.size(1))[None, :] < lengths[:, None]
    err = (pred - target) ** 2 * mask.unsqueeze(-1)
    return err.sum() / (mask.sum() * pred.size(-1))


def make_data(batch, T, n_in):
    dt = np.random.uniform(0.3, 1.2, size=(batch, T))
    t = np.cumsum(dt, axis=1)
    phase = np.random.uniform(0, 2 * np.pi, size=(batch, 1))
    x = np.stack([np.sin(t + phase), np.cos(0.5 * t + phase), dt][:n_in], axis=-1)
    y = np.stack([np.sin(t + phase + 0.7)], axis=-1)
    lengths = np.random.randint(T // 2, T + 1, size=batch)
    to = lambda a: torch.tensor(a, dtype=torch.float32)
    return to(x), to(y), to(dt), torch.from_numpy(lengths).long()


n_in, units, motor, T = 3, 8, 1, 7
x, y, dt, lengths = make_data(12, T, n_in)
wiring = Wiring(units, motor, n_in, density=0.5)
record.append([int(np.abs(wiring.adjacency_matrix).sum()),
               int(np.abs(wiring.sensory_adjacency_matrix).sum())])

cfc_mask = (np.random.uniform(size=(10, units)) < 0.6).astype(np.int64)  # backbone -> units
cfc = Sequence(CfCCell(n_in, units, backbone_units=10, backbone_layers=2,
                       sparsity_mask=cfc_mask), units, motor)
ltc = Sequence(LTCCell(wiring, ode_unfolds=3), units, motor)
ltc_explicit = Sequence(LTCCell(wiring, ode_unfolds=2, implicit_param_constraints=False),
                        units, motor)

results = {}
for name, model in [("cfc", cfc), ("ltc", ltc), ("ltc_explicit", ltc_explicit)]:
    initialize(model)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.02)
    warmup = lambda epoch: min(1.0, (epoch + 1) / 2) * 0.9**epoch
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda=warmup)
    losses = []
    for epoch in range(4):
        for start in range(0, x.size(0), 6):
            sl = slice(start, start + 6)
            model.train()
            optimizer.zero_grad()
            pred, _ = model(x[sl], timespans=dt[sl])
            loss = masked_mse(pred, y[sl], lengths[sl])
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            model.rnn_cell.apply_weight_constraints() if name != "cfc" else None
            losses.append(loss.item())
        scheduler.step()
    record.append(losses)
    record.append({k: v.detach().numpy().copy() for k, v in model.state_dict().items()})
    print("{} final loss {:.5f} lr {:.5f}".format(name, losses[-1], scheduler.get_last_lr()[0]))

    buffer = io.BytesIO()
    torch.save(model.state_dict(), buffer)
    buffer.seek(0)
    restored = {"cfc": lambda: Sequence(CfCCell(n_in, units, 10, 2, cfc_mask),
                                        units, motor),
                "ltc": lambda: Sequence(LTCCell(wiring, 3), units, motor),
                "ltc_explicit": lambda: Sequence(
                    LTCCell(wiring, 2, implicit_param_constraints=False), units, motor)}[name]()
    restored.load_state_dict(torch.load(buffer))
    restored.eval()
    with torch.no_grad():
        pred, h = restored(x, timespans=dt)
        results[name] = masked_mse(pred, y, lengths).item()
        record.append([results[name], h.abs().max().item()])
        record.append(list(pred.shape))
    if name == "ltc_explicit":
        record.append(bool((restored.rnn_cell.w >= 0).all()))
"""

NCPS_STEPS = [
    (
        "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n",
        "import retrograd as torch\nimport retrograd.nn as nn\n"
        "import retrograd.nn.functional as F\n",
    ),
    (
        "            loss.backward()\n"
        "            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\n"
        "            optimizer.step()\n",
        "            grads = loss.backward()\n"
        "            torch.nn.utils.clip_grad_norm_(grads, model.parameters(), 1.0)\n"
        "            optimizer.step(grads)\n",
    ),
]


def test_cfc_and_ltc_cells_train_as_torch(capsys):
    (theirs, ours), (their_log, our_log) = runs_with_draws(
        NCPS_SOURCE, NCPS_STEPS, capsys, 6903, initialize=initializer()
    )
    assert len(theirs) == 1 + 3 * 4 + 1
    assert theirs[-1] is True  # the explicit constraints kept w non-negative
    assert [theirs[4], theirs[8], theirs[12]] == [[12, 7, 1]] * 3
    assert their_log == our_log and their_log.count("\n") == 3
    assert_records_agree(ours, theirs, rtol=2e-4, atol=2e-5)
