"""Recurrent layers: ``nn.RNN``/``LSTM``/``GRU`` and their cells against PyTorch (values and
every gradient, float64 and float32, from PyTorch's own state dict), the fused recurrence ops
against finite differences (float64, every checkpointing strategy), second derivatives against
PyTorch's double backward, the backend kernels against the protocol's composed defaults,
inter-layer dropout, state-dict layout, initialisation, graph size and errors.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import retrograd as rg
from backends import inner_backend, on_torch
from nn_testing import (
    assert_second_derivatives_match_torch,
    check_finite_differences,
    compare_module_with_torch,
)
from retrograd import nn
from retrograd.nn.functional.rnn import recurrent

torch = pytest.importorskip("torch")

rng = np.random.default_rng(11)
KINDS = ["LSTM", "GRU", "RNN"]


def normal(*shape):
    return rng.standard_normal(shape)


def pair(kind, dtype, *args, **kwargs):
    """A PyTorch module and ours with PyTorch's state dict loaded unchanged."""
    theirs = getattr(torch.nn, kind)(*args, **kwargs).to(getattr(torch, dtype))
    ours = getattr(nn, kind)(*args, **kwargs, dtype=dtype)
    ours.load_state_dict({k: v.detach().numpy() for k, v in theirs.state_dict().items()})
    return theirs, ours


def compare_module(theirs, ours, x, hx, dtype, *, lstm):
    """Outputs and all gradients (input, initial states, parameters) against PyTorch; ``hx``
    a list of initial states (``[h, c]`` for an LSTM) or ``None``."""
    if hx is None:
        compare_module_with_torch(theirs, ours, [x], dtype)
        return

    def call(module, x, *states):
        return module(x, tuple(states) if lstm else states[0])

    compare_module_with_torch(theirs, ours, [x, *hx], dtype, call)


MODULE_CASES = {
    "one layer": dict(),
    "two layers": dict(num_layers=2),
    "bidirectional": dict(bidirectional=True),
    "deep bidirectional": dict(num_layers=3, bidirectional=True),
    "batch first": dict(num_layers=2, batch_first=True),
    "no bias": dict(num_layers=2, bias=False, bidirectional=True),
}


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("case", list(MODULE_CASES))
@pytest.mark.parametrize("kind", KINDS)
def test_module_matches_torch(kind, case, dtype):
    options = MODULE_CASES[case]
    theirs, ours = pair(kind, dtype, 3, 5, **options)
    directions = 2 if options.get("bidirectional") else 1
    layers = options.get("num_layers", 1) * directions
    x = normal(2, 6, 3) if options.get("batch_first") else normal(6, 2, 3)
    hx = [normal(layers, 2, 5) for _ in range(2 if kind == "LSTM" else 1)]
    compare_module(theirs, ours, x, hx, dtype, lstm=kind == "LSTM")


@pytest.mark.parametrize("kind", KINDS)
def test_module_without_initial_state_and_unbatched(kind):
    theirs, ours = pair(kind, "float64", 4, 3, num_layers=2, bidirectional=True)
    compare_module(theirs, ours, normal(5, 2, 4), None, "float64", lstm=kind == "LSTM")
    hx = [normal(4, 3) for _ in range(2 if kind == "LSTM" else 1)]
    compare_module(theirs, ours, normal(5, 4), hx, "float64", lstm=kind == "LSTM")
    compare_module(theirs, ours, normal(5, 4), None, "float64", lstm=kind == "LSTM")


def test_relu_rnn_matches_torch():
    theirs, ours = pair("RNN", "float64", 3, 4, num_layers=2, nonlinearity="relu")
    compare_module(theirs, ours, normal(7, 3, 3), [normal(2, 3, 4)], "float64", lstm=False)
    assert ours.nonlinearity == "relu" and repr(ours) == repr(theirs)  # torch's leaves it out


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("kind", ["LSTMCell", "GRUCell", "RNNCell"])
def test_cells_match_torch(kind, dtype):
    for bias in (True, False):
        theirs, ours = pair(kind, dtype, 3, 4, bias=bias)
        lstm = kind == "LSTMCell"
        hx = [normal(2, 4) for _ in range(2 if lstm else 1)]
        compare_module(theirs, ours, normal(2, 3), hx, dtype, lstm=lstm)
        compare_module(theirs, ours, normal(2, 3), None, dtype, lstm=lstm)
        compare_module(theirs, ours, normal(3), [h[0] for h in hx], dtype, lstm=lstm)
    theirs, ours = pair("RNNCell", "float64", 3, 4, nonlinearity="relu")
    compare_module(theirs, ours, normal(2, 3), [normal(2, 4)], "float64", lstm=False)


# -- layout, initialisation, repr --------------------------------------------------------------
@pytest.mark.parametrize("kind", [*KINDS, "LSTMCell", "GRUCell", "RNNCell"])
def test_state_dict_keys_shapes_and_order_are_torchs(kind):
    args = (3, 4) if kind.endswith("Cell") else (3, 4, 2)
    kwargs = {} if kind.endswith("Cell") else dict(bidirectional=True)
    theirs = getattr(torch.nn, kind)(*args, **kwargs)
    ours = getattr(nn, kind)(*args, **kwargs)
    assert list(ours.state_dict()) == list(theirs.state_dict())
    for (name, value), (t_name, t_value) in zip(ours.named_parameters(), theirs.named_parameters()):
        assert name == t_name and value.shape == tuple(t_value.shape)
    if not kind.endswith("Cell"):
        assert [[p.shape for p in layer] for layer in ours.all_weights] == [
            [tuple(p.shape) for p in layer] for layer in theirs.all_weights
        ]


@pytest.mark.parametrize("kind", ["LSTM", "GRUCell"])
def test_initialisation_is_uniform_within_one_over_sqrt_hidden(kind):
    rg.seed(3)
    module = getattr(nn, kind)(10, 64)
    bound = 1.0 / math.sqrt(64)
    values = np.concatenate([p.numpy().ravel() for p in module.parameters()])
    assert values.dtype == np.float32
    assert np.abs(values).max() <= bound
    assert abs(values.std() - bound / math.sqrt(3)) < 0.02 * bound
    module.reset_parameters()
    assert not np.array_equal(
        values, np.concatenate([p.numpy().ravel() for p in module.parameters()])
    )


def test_repr_and_flatten_parameters_as_torchs():
    module = nn.LSTM(3, 4, 2, batch_first=True, dropout=0.5, bidirectional=True)
    theirs = torch.nn.LSTM(3, 4, 2, batch_first=True, dropout=0.5, bidirectional=True)
    assert repr(module) == repr(theirs)
    module.flatten_parameters()
    assert repr(nn.GRUCell(3, 4, bias=False)) == repr(torch.nn.GRUCell(3, 4, bias=False))


# -- the fused ops: finite differences, strategies, higher order -------------------------------
def _weights(kind, input_size, hidden, layers, directions, bias=True):
    gates = {"LSTM": 4, "GRU": 3}.get(kind, 1)
    arrays = []
    for layer in range(layers):
        width = input_size if layer == 0 else hidden * directions
        for _ in range(directions):
            arrays += [normal(gates * hidden, width) * 0.5, normal(gates * hidden, hidden) * 0.5]
            if bias:
                arrays += [normal(gates * hidden) * 0.5, normal(gates * hidden) * 0.5]
    return arrays


def _functional(mode, layers, directions, bias):
    """``recurrent`` as a function of arrays (x, h0[, c0], weights...) with every output in
    one tensor."""
    per = 4 if bias else 2
    parts = 2 if mode == "LSTM" else 1

    def fn(x, *rest):
        hx, flat = rest[:parts], rest[parts:]
        weights = [
            tuple(flat[k * per : (k + 1) * per]) if bias else (*flat[k * 2 : k * 2 + 2], None, None)
            for k in range(layers * directions)
        ]
        output, hidden = recurrent(
            mode,
            x,
            hx if mode == "LSTM" else hx[0],
            weights,
            layers,
            0.0,
            False,
            directions == 2,
            False,
        )
        states = hidden if mode == "LSTM" else (hidden,)
        return rg.cat([output.reshape((-1,)), *(s.reshape((-1,)) for s in states)], 0)

    return fn


FD_CASES = [
    ("LSTM", 1, 1, True, 3),
    ("LSTM", 2, 2, True, 2),
    ("GRU", 1, 1, True, 3),
    ("GRU", 2, 2, False, 2),
    ("RNN_TANH", 2, 1, True, 3),
    ("RNN_RELU", 1, 2, True, 3),
]


@pytest.mark.parametrize(("mode", "layers", "directions", "bias", "hidden"), FD_CASES)
def test_recurrences_match_finite_differences(mode, layers, directions, bias, hidden):
    parts = 2 if mode == "LSTM" else 1
    arrays = [normal(4, 2, 3)] + [normal(layers * directions, 2, hidden) for _ in range(parts)]
    arrays += _weights(mode.split("_")[0], 3, hidden, layers, directions, bias)
    check_finite_differences(_functional(mode, layers, directions, bias), arrays)


@pytest.mark.parametrize("mode", ["LSTM", "GRU", "RNN_TANH"])
def test_every_checkpointing_strategy_gives_the_same_gradients(mode):
    fn = _functional(mode, 2, 1, True)
    parts = 2 if mode == "LSTM" else 1
    arrays = [normal(5, 2, 3)] + [normal(2, 2, 3) for _ in range(parts)]
    arrays += _weights(mode.split("_")[0], 3, 3, 2, 1)
    seed = None
    results = {}
    strategies = {
        "none": rg.NoCheckpointing(),
        "balanced": rg.BalancedCheckpointing(),
        "budget": rg.BudgetCheckpointing(2000),
    }
    for name, strategy in strategies.items():
        with rg.use_backend(rg.Autodiff(inner_backend(), checkpointing=strategy)):
            tensors = [rg.tensor(a).require_grad() for a in arrays]
            out = fn(*tensors)
            seed = normal(*out.shape) if seed is None else seed
            grads = (out * rg.tensor(seed)).sum().backward()
            results[name] = [t.grad(grads).numpy() for t in tensors]
    for name in ("balanced", "budget"):
        for ours, plain in zip(results[name], results["none"]):
            np.testing.assert_array_equal(ours, plain, err_msg=name)


@pytest.mark.parametrize("kind", ["LSTM", "GRU", "RNN"])
def test_second_derivatives_match_torch(kind):
    torch_fn = {"LSTM": torch.lstm_cell, "GRU": torch.gru_cell, "RNN": torch.rnn_tanh_cell}[kind]
    gates = {"LSTM": 4, "GRU": 3}.get(kind, 1)
    lstm = kind == "LSTM"
    hidden = 3
    arrays = [normal(2, 2, 4), normal(2, hidden)] + ([normal(2, hidden)] if lstm else [])
    arrays += [normal(gates * hidden, 4) * 0.5, normal(gates * hidden, hidden) * 0.5]
    arrays += [normal(gates * hidden) * 0.5, normal(gates * hidden) * 0.5]

    def theirs(x, *rest):
        state = tuple(rest[:2]) if lstm else rest[0]
        weights = rest[2:] if lstm else rest[1:]
        outputs = []
        for t in range(x.shape[0]):
            state = torch_fn(x[t], state, *weights)
            outputs.append(state[0] if lstm else state)
        extra = [state[1]] if lstm else []
        return torch.cat([o.reshape(-1) for o in outputs + extra])

    def ours(x, *rest):
        hx = tuple(r.unsqueeze_dim(0) for r in rest[:2]) if lstm else rest[0].unsqueeze_dim(0)
        weights = [tuple(rest[2:] if lstm else rest[1:])]
        mode = kind if kind != "RNN" else "RNN_TANH"
        output, hidden = recurrent(mode, x, hx, weights, 1, 0.0, False, False, False)
        extra = [hidden[1].reshape((-1,))] if lstm else []
        return rg.cat([output.reshape((-1,)), *extra], 0)

    assert_second_derivatives_match_torch(ours, theirs, arrays)


@pytest.mark.parametrize("reverse", [False, True])
def test_backend_kernels_agree_with_the_protocols_composed_defaults(reverse):
    """The fused kernels (what NumpyBackend and TorchBackend run) and the Backend base
    class's compositions (what a new backend inherits, and what create_graph records)."""
    from retrograd.backend.protocol import Backend

    fused = inner_backend()

    class Composed(type(fused)):
        pass

    for name in Backend.OPTIONAL_RECURRENT:
        setattr(Composed, name, getattr(Backend, name))
    composed = Composed("cpu") if on_torch() else Composed()
    length, batch, size = 5, 3, 4
    h0, c0 = normal(batch, size), normal(batch, size)

    def run(backend, name, x, *state_and_weights, extra=()):
        def array(values):
            return backend.from_data(values, "float64", backend.default_device)

        args = [array(a) for a in (x, *state_and_weights)]
        forward = getattr(backend, name)(*args, *extra, reverse)
        out, aux = forward if isinstance(forward, tuple) else (forward, None)
        grad = array(normal(*backend.shape(out)))
        if aux is None:
            grads = getattr(backend, name + "_backward")(grad, *args, out, *extra, reverse)
        else:
            grads = getattr(backend, name + "_backward")(grad, *args, out, aux, reverse)
        return [backend.to_numpy(v) for v in (out, *grads)]

    features = 3
    for name, gates, extra in (
        ("lstm_layer", 4, ()),
        ("gru_layer", 3, ()),
        ("rnn_layer", 1, (False,)),
        ("rnn_layer", 1, (True,)),
    ):
        for with_bias in (True, False):
            rows = gates * size
            biases = [normal(rows), normal(rows)] if with_bias else [np.zeros(0)] * 2
            x = normal(length, batch, features)
            weights = [normal(rows, features) * 0.5, normal(rows, size) * 0.5]
            state = (h0, c0) if name == "lstm_layer" else (h0,)
            state_rng = rng.bit_generator.state
            ours = run(fused, name, x, *state, *weights, *biases, extra=extra)
            rng.bit_generator.state = state_rng  # the same output gradient for both
            reference = run(composed, name, x, *state, *weights, *biases, extra=extra)
            assert len(ours) == len(reference) == 1 + 1 + len(state) + 4
            for k, (a, b) in enumerate(zip(ours, reference)):
                if not with_bias and k >= len(ours) - 2:
                    continue  # the gradients of absent biases
                np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-13, err_msg=f"{name} {k}")


# -- dropout between layers ----------------------------------------------------------------------
def test_dropout_one_zeroes_every_layer_input_but_the_first_as_torch_does():
    theirs, ours = pair("GRU", "float64", 3, 4, num_layers=3, dropout=1.0)
    compare_module(theirs, ours, normal(5, 2, 3), [normal(3, 2, 4)], "float64", lstm=False)


def test_dropout_draws_from_the_seed_and_its_gradients_match_finite_differences():
    def fn(x, h0, c0, *flat):
        rg.seed(5)  # the same mask at every call
        weights = [tuple(flat[:4]), tuple(flat[4:])]
        output, (_, c_n) = recurrent("LSTM", x, (h0, c0), weights, 2, 0.5, True, False, False)
        return rg.cat([output.reshape((-1,)), c_n.reshape((-1,))], 0)

    arrays = [normal(4, 2, 3), normal(2, 2, 3), normal(2, 2, 3), *_weights("LSTM", 3, 3, 2, 1)]
    check_finite_differences(fn, arrays)
    lstm = nn.LSTM(3, 4, num_layers=2, dropout=0.5)
    x = rg.tensor(normal(6, 2, 3).astype(np.float32))
    rg.seed(1)
    first = lstm(x)[0].numpy()
    rg.seed(1)
    assert np.array_equal(lstm(x)[0].numpy(), first)
    evaluated = lstm.eval()(x)[0].numpy()
    assert not np.allclose(first, evaluated)
    lstm.train()


# -- graph size, capture ---------------------------------------------------------------------------
def test_a_long_two_layer_lstm_records_a_few_nodes_per_layer():
    """A layer is one node however long the sequence (no node per step): a 35-step LSTM
    records as many nodes as a 2-step one."""
    counts = {}

    class Counting(rg.Autodiff):
        def _on_record(self, node, out):
            names.append(node.op.name)

    for length in (2, 35):
        names = []
        with rg.use_backend(Counting(inner_backend())):
            lstm = nn.LSTM(8, 8, num_layers=2)
            output, (h_n, c_n) = lstm(rg.tensor(normal(length, 4, 8).astype(np.float32)))
            (output.sum() + h_n.sum() + c_n.sum()).backward()
        counts[length] = list(names)
    assert counts[35] == counts[2]
    assert counts[35].count("lstm_layer") == 2
    from retrograd.autodiff.ops import op_kind

    for name in ("lstm_layer", "gru_layer", "rnn_layer"):  # kept, never recomputed
        assert op_kind(name) == "compute-bound"
    assert len(counts[35]) < 30, counts[35]


@pytest.mark.numpy_only("capture replays NumPy calls in these tests")
def test_a_captured_lstm_step_replays_the_eager_steps_bit_for_bit():
    from retrograd import optim
    from retrograd.nn import functional as F  # noqa: N812

    def model_and_optimizer():
        rg.seed(0)
        model = nn.ModuleDict({"rnn": nn.LSTM(4, 5, 2), "head": nn.Linear(5, 3)})
        return model, optim.SGD(model, lr=0.1)

    def step_for(model, optimizer):
        def step(x, target):
            output, _ = model["rnn"](x)
            loss = F.cross_entropy(model["head"](output).reshape((-1, 3)), target)
            optimizer.step(loss.backward())
            return loss

        return step

    data_rng = np.random.default_rng(4)
    data = [
        (
            rg.tensor(data_rng.standard_normal((6, 2, 4)).astype(np.float32)),
            rg.tensor(data_rng.integers(0, 3, size=12)),
        )
        for _ in range(3)
    ]
    eager, eager_opt = model_and_optimizer()
    expected = [step_for(eager, eager_opt)(x, t).numpy() for x, t in data]
    twin, twin_opt = model_and_optimizer()
    captured = rg.capture(step_for(twin, twin_opt), *data[0], state=[twin_opt])
    losses = [captured.result.numpy()] + [captured(x, t).numpy() for x, t in data[1:]]
    for a, b in zip(expected, losses):
        assert np.array_equal(a, b)
    for (name, p), (_, q) in zip(eager.named_parameters(), twin.named_parameters()):
        assert np.array_equal(p.numpy(), q.numpy()), name


# -- errors ----------------------------------------------------------------------------------------
def test_errors_name_the_layer_and_the_shapes():
    lstm = nn.LSTM(3, 4, num_layers=2)
    with pytest.raises(rg.ShapeError, match=r"LSTM: input.size\(-1\) must be equal to input_size"):
        lstm(rg.ones((5, 2, 2)))
    with pytest.raises(rg.ShapeError, match=r"LSTM: expected hidden size \[2, 2, 4\]"):
        lstm(rg.ones((5, 2, 3)), (rg.zeros((1, 2, 4)), rg.zeros((2, 2, 4))))
    with pytest.raises(rg.InvalidArgumentError, match="tuple"):
        lstm(rg.ones((5, 2, 3)), rg.zeros((2, 2, 4)))
    with pytest.raises(rg.ShapeError, match="unbatched"):
        lstm(rg.ones((5, 3)), (rg.zeros((2, 2, 4)), rg.zeros((2, 2, 4))))
    with pytest.raises(rg.ShapeError, match="3-d"):
        lstm(rg.ones((5, 2, 2, 3)))
    with pytest.raises(rg.ShapeError, match="sequence length"):
        lstm(rg.ones((0, 2, 3)))
    with pytest.raises(rg.DTypeError, match="float64"):
        lstm(rg.ones((5, 2, 3), dtype="float64"))
    with pytest.raises(rg.DTypeError, match="float"):
        lstm(rg.ones((5, 2, 3), dtype="int64"))
    with pytest.raises(rg.InvalidArgumentError, match="proj_size"):
        nn.LSTM(3, 4, proj_size=4)  # (projections are smaller than hidden_size, as torch's)
    with pytest.raises(rg.InvalidArgumentError, match="nonlinearity"):
        nn.RNN(3, 4, nonlinearity="sigmoid")
    with pytest.raises(rg.InvalidArgumentError, match="dropout"):
        nn.GRU(3, 4, 2, dropout=1.5)
    with pytest.raises(rg.InvalidArgumentError, match="hidden_size"):
        nn.GRU(3, 0)
    with pytest.warns(UserWarning, match="num_layers greater than 1"):
        nn.GRU(3, 4, dropout=0.2)
    cell = nn.LSTMCell(3, 4)
    with pytest.raises(rg.ShapeError, match="LSTMCell"):
        cell(rg.ones((2, 5)))
    with pytest.raises(rg.ShapeError, match=r"LSTMCell: expected hidden size \[2, 4\]"):
        cell(rg.ones((2, 3)), (rg.zeros((3, 4)), rg.zeros((2, 4))))
    with pytest.raises(rg.InvalidArgumentError, match="tuple"):
        cell(rg.ones((2, 3)), rg.zeros((2, 4)))
    # the module is still usable
    assert lstm(rg.ones((5, 2, 3)))[0].shape == (5, 2, 4)


# -- memory ----------------------------------------------------------------------------------------
@pytest.mark.numpy_only("tracemalloc sees NumPy's allocations, not torch's CPU allocator")
def test_lstm_training_loop_memory_is_flat_and_backward_keeps_input_output_and_workspace():
    import gc
    import tracemalloc

    from retrograd.memory import measure_step_memory

    rg.seed(0)
    lstm, head = nn.LSTM(16, 32, num_layers=2), nn.Linear(32, 16)
    x = rg.tensor(normal(20, 4, 16).astype(np.float32))
    hidden = None

    def step(hidden):
        output, hidden = lstm(x, hidden)
        loss = (head(output) ** 2).mean()
        grads = loss.backward()
        for name, p in list(lstm.named_parameters()):
            lstm.set_parameter(name, p - 0.01 * p.grad(grads))
        return tuple(h.detach() for h in hidden)

    tracemalloc.start()
    try:
        for index in range(60):
            hidden = step(hidden)
            if index == 9:
                gc.collect()
                early = tracemalloc.get_traced_memory()[0]
        gc.collect()
        late = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert late - early < 16 * 1024, f"memory grew by {late - early} bytes over 50 steps"
    # What one layer keeps for backward: its input, its output and the workspace ([T, 5H, N]
    # gates and cells), nothing per time step.
    single = nn.LSTM(16, 32)
    memory = measure_step_memory(lambda: single(x)[0].sum(), single.parameters())
    length, batch, hidden_size = 20, 4, 32
    kept = 4 * (length * batch * 16 + (length + 1) * batch * hidden_size)
    kept += 4 * length * 5 * hidden_size * batch
    assert memory.after_forward_bytes <= kept * 1.1, (memory.after_forward_bytes, kept)
