"""Round 40 of the fuzzer: the parts other rounds do not reach.

- **Capture**: random training steps (a module with a buffer, optionally batch norm and
  dropout, a ``no_grad`` section, a random chain of ops) captured with ``rg.capture`` and
  replayed under every checkpointing strategy, with random changes between steps (a buffer
  written, a parameter frozen or unfrozen, ``load_state_dict``, the learning rate, ``eval()``,
  another batch size): every replay equals the eager step bit for bit; a host read inside
  the step is refused with ``rg.CaptureError``.
- **Data parallel over threads**: random programs over 2-4 thread devices with a distributed
  parameter and the collectives of API.md sections 5 and 11; gradients against the sum over
  shards computed device by device without any context; mismatched shapes across devices give
  an error on every device within the timeout, and the next step works.
- **Higher order**: random compositions differentiated three times (``create_graph``) against
  torch's ``autograd.grad``.

Hypothesis, derandomized, with fixed example counts.
"""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import cycle_probe
import retrograd as rg
from backends import inner_backend
from retrograd import distributed as dist
from retrograd import nn, optim

torch = pytest.importorskip("torch")

FUZZ = settings(
    max_examples=12,
    derandomize=True,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    database=None,
)

# ---- capture ---------------------------------------------------------------------------------

STRATEGIES = {
    "none": lambda: rg.NoCheckpointing(),
    "balanced": lambda: rg.BalancedCheckpointing(),
    "budget": lambda: rg.BudgetCheckpointing(256),
}
CHAIN = {
    "tanh": lambda h: h.tanh(),
    "relu": lambda h: h.relu() + 0.1 * h,
    "square": lambda h: h * h,
    "softmax": lambda h: h.softmax(-1),
    "center": lambda h: h - h.mean(-1, keepdim=True),
    "sigmoid": lambda h: h.sigmoid(),
    "cumsum": lambda h: h.cumsum(-1) * 0.5,
    "clamp": lambda h: h.clamp(-0.5, 0.5),
}


def _change(kind, model, opt, i):
    """A change between two steps, done alike to the eager and the captured twin."""
    if kind == "buffer":
        model.scale.mul_(1.5)
    elif kind == "freeze":
        model[0].weight.requires_grad_(i % 2 == 1)
    elif kind == "load":
        model.load_state_dict({k: v * 0.75 for k, v in model.state_dict().items()})
    elif kind == "lr":
        for group in opt.param_groups:
            group["lr"] = 0.05 / (i + 2)
    elif kind == "eval":
        model.train(i % 2 == 1)
    elif kind == "mask":
        model.mask.mul_(-0.5)  # (closed over by the step, no buffer)
    elif kind == "param_no_grad":
        with rg.no_grad():
            model[-1].bias.add_(0.25)


def _make(spec):
    rg.seed(spec["seed"])
    width = 4
    layers = [nn.Linear(3, width)]
    if spec["norm"]:
        layers.append(nn.BatchNorm1d(width))
    if spec["dropout"]:
        layers.append(nn.Dropout(0.3))
    layers.append(nn.Linear(width, 2))
    model = nn.Sequential(*layers)
    model.register_buffer("scale", rg.tensor([1.0, -0.5]))
    mask = rg.tensor([0.5, 2.0])
    object.__setattr__(model, "mask", mask)  # (a plain attribute: the step closes over it)
    if spec["optimizer"] == "adam":
        opt = optim.Adam(model.parameters(), lr=0.02)
    else:
        opt = optim.SGD(model.parameters(), lr=0.05, momentum=0.9)

    def step(x):
        h = model(x) * model.scale * mask
        for name in spec["chain"]:
            h = CHAIN[name](h)
        with rg.no_grad():  # (a value the loss reads as a constant)
            target = h.detach() * 0.5
        loss = (h - target).square().mean()
        grads = loss.backward()
        opt.step(grads)
        return loss, h

    return model, opt, step


capture_specs = st.fixed_dictionaries(
    {
        "seed": st.integers(0, 10_000),
        "norm": st.booleans(),
        "dropout": st.booleans(),
        "optimizer": st.sampled_from(["sgd", "adam"]),
        "chain": st.lists(st.sampled_from(sorted(CHAIN)), max_size=4),
        "changes": st.lists(
            st.sampled_from(
                ["none", "buffer", "mask", "freeze", "load", "lr", "eval", "param_no_grad"]
            ),
            min_size=3,
            max_size=3,
        ),
        "batches": st.lists(st.sampled_from([4, 4, 6]), min_size=4, max_size=4),
    }
)


def _steps(spec, strategy, captured):
    backend = rg.Autodiff(inner_backend(), checkpointing=STRATEGIES[strategy]())
    with rg.use_backend(backend):
        model, opt, step = _make(spec)
        rng = np.random.default_rng(spec["seed"])
        xs = [rg.tensor(rng.standard_normal((b, 3)), dtype="float32") for b in spec["batches"]]
        rg.seed(spec["seed"] + 1)
        if captured:
            step_fn = rg.capture(step, xs[0], state=[model, opt])
            outs = [step_fn.result]
        else:
            step_fn = step
            outs = [step(xs[0])]
        for i, (x, kind) in enumerate(zip(xs[1:], spec["changes"])):
            _change(kind, model, opt, i)
            outs.append(step_fn(x))
        values = [[t.numpy() for t in out] for out in outs]
        return values, {k: v.numpy() for k, v in model.state_dict().items()}


@pytest.fixture
def heap_set_aside():
    """The objects alive before the test set aside (``gc.freeze``, after a collection) while
    it runs. A capture whose step reads a closed-over tensor (the mask here) finds the tensors
    holding such constants by two walks of the heap (``gc.get_referrers``); in a worker that
    ran many tests before, those walks were most of this test's time (about 30 captures per
    strategy: 13 s of 16 s with 6 million objects alive), and its tensors are all made during
    the test, where the walks still see them (a mask the capture missed would replay its old
    value after ``mask``: the eager twin would differ). (:func:`cycle_probe.heap_set_aside`)"""
    with cycle_probe.heap_set_aside():
        yield


@pytest.mark.parametrize("strategy", sorted(STRATEGIES))
@FUZZ
@given(spec=capture_specs)
def test_captured_steps_equal_eager_steps_bit_for_bit(heap_set_aside, strategy, spec):
    (eager, eager_state), (replayed, state) = (
        _steps(spec, strategy, False),
        _steps(spec, strategy, True),
    )
    for call, (want, got) in enumerate(zip(eager, replayed)):
        for w, g in zip(want, got):
            assert w.dtype == g.dtype and np.array_equal(w, g, equal_nan=True), (call, spec)
    assert eager_state.keys() == state.keys()
    for key in eager_state:
        assert np.array_equal(eager_state[key], state[key]), (key, spec)


@FUZZ
@given(
    read=st.sampled_from(["item", "tolist", "float", "if", "nonzero"]),
    chain=st.lists(st.sampled_from(sorted(CHAIN)), max_size=3),
)
def test_a_host_read_inside_a_step_is_refused(read, chain):
    model, opt, _ = _make({"seed": 0, "norm": False, "dropout": False, "optimizer": "sgd"})
    before = [p.numpy().copy() for p in model.parameters()]

    def step(x):
        h = model(x)
        for name in chain:
            h = CHAIN[name](h)
        loss = h.square().mean()
        if read == "item":
            loss = loss * (2.0 if loss.item() > 0.1 else 1.0)
        elif read == "tolist":
            loss = loss + h.sum().tolist()
        elif read == "float":
            loss = loss * float(h.mean())
        elif read == "if":
            if (h > 0).any():
                loss = loss * 2.0
        else:
            loss = loss + h[h.nonzero()[:, 0]].sum()
        opt.step(loss.backward())
        return loss

    with pytest.raises(rg.CaptureError):
        rg.capture(step, rg.ones(4, 3), state=[model, opt])
    # (refused before the optimizer ran: the model is as it was)
    for p, q in zip(model.parameters(), before):
        assert np.array_equal(p.numpy(), q)


# ---- data parallel over threads ---------------------------------------------------------------

SUM, MEAN = dist.ReduceOperation.SUM, dist.ReduceOperation.MEAN
JOIN = 30.0


def _on_devices(devices, work):
    results: list = [None] * len(devices)

    def run(index, device):
        try:
            results[index] = work(index, device)
        except BaseException as error:  # handed back to the test
            results[index] = error

    threads = [
        threading.Thread(target=run, args=(i, d), daemon=True) for i, d in enumerate(devices)
    ]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + JOIN
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
        assert not thread.is_alive(), "a device thread hung"
    return results


def _raise_any(results):
    for result in results:
        if isinstance(result, BaseException):
            raise result
    return results


COLLECTIVES = [
    "none",
    "all_reduce_sum",
    "all_reduce_mean",
    "all_gather",
    "reduce_scatter",
    "broadcast",
]


def _dp_loss(x, w, v, collective, devices, op_chain):
    """The device's loss: a small MLP over its shard, a collective on the hidden values."""
    h = (x @ w).tanh()
    if collective == "all_reduce_sum":
        h = dist.all_reduce(h, SUM, devices).resolve() * 0.5
    elif collective == "all_reduce_mean":
        h = dist.all_reduce(h, MEAN, devices).resolve()
    elif collective == "all_gather":
        h = dist.all_gather(h, devices, dim=0).resolve()
    elif collective == "reduce_scatter":
        h = dist.reduce_scatter(h, SUM, devices, dim=0).resolve()
    elif collective == "broadcast":
        h = dist.broadcast(h, 0, devices).resolve() + h
    for name in op_chain:
        h = CHAIN[name](h)
    return (h @ v).square().sum()


def _torch_dp_reference(xs, w, v, collective, op_chain, n):
    """Every device's loss summed, in torch on one device: the gradient of that sum with
    respect to the shared ``w`` is the sum of the devices' gradients (what SUM all-reduce of
    a distributed parameter gives); ``v`` is each device's own."""
    tw = torch.tensor(w, dtype=torch.float64, requires_grad=True)
    tvs = [torch.tensor(v, dtype=torch.float64, requires_grad=True) for _ in range(n)]
    hs = [(torch.tensor(x, dtype=torch.float64) @ tw).tanh() for x in xs]
    if collective == "all_reduce_sum":
        hs = [sum(hs) * 0.5 for _ in range(n)]
    elif collective == "all_reduce_mean":
        hs = [sum(hs) / n for _ in range(n)]
    elif collective == "all_gather":
        hs = [torch.cat(hs, 0) for _ in range(n)]
    elif collective == "reduce_scatter":
        hs = list(torch.chunk(sum(hs), n, 0))
    elif collective == "broadcast":
        hs = [hs[0] + h for h in hs]
    total = 0
    for h, tv in zip(hs, tvs):
        for name in op_chain:
            h = TORCH_CHAIN[name](h)
        total = total + (h @ tv).square().sum()
    total.backward()
    return tw.grad.numpy(), [tv.grad.numpy() for tv in tvs]


TORCH_CHAIN = {
    "tanh": lambda h: h.tanh(),
    "relu": lambda h: h.relu() + 0.1 * h,
    "square": lambda h: h * h,
    "softmax": lambda h: h.softmax(-1),
    "center": lambda h: h - h.mean(-1, keepdim=True),
    "sigmoid": lambda h: h.sigmoid(),
    "cumsum": lambda h: h.cumsum(-1) * 0.5,
    "clamp": lambda h: h.clamp(-0.5, 0.5),
}


@settings(FUZZ, max_examples=10)
@given(
    n=st.integers(2, 4),
    collective=st.sampled_from(COLLECTIVES),
    op_chain=st.lists(st.sampled_from(sorted(CHAIN)), max_size=2),
    seed=st.integers(0, 1000),
    strategy=st.sampled_from(["none", "balanced"]),
)
def test_data_parallel_gradients_equal_the_sum_over_shards(n, collective, op_chain, seed, strategy):
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((3, 4)) * 0.6
    v = rng.standard_normal((4, 2))
    xs = [rng.standard_normal((4, 3)) for _ in range(n)]  # (4 rows: reduce_scatter splits them)
    if collective == "reduce_scatter" and 4 % n:
        xs = [rng.standard_normal((n * 2, 3)) for _ in range(n)]
    devices = [rg.Device("cpu", i) for i in range(n)]
    backend = rg.Autodiff(inner_backend(), checkpointing=STRATEGIES[strategy]())

    def work(i, device):
        tw = rg.tensor(w, backend=backend, device=device).set_distributed("w")
        tv = rg.tensor(v, backend=backend, device=device).require_grad()
        x = rg.tensor(xs[i], backend=backend, device=device)
        grads = _dp_loss(x, tw, tv, collective, devices, op_chain).backward()
        return tw.grad(grads).numpy(), tv.grad(grads).numpy()

    config = dist.DistributedConfig(all_reduce_op=SUM, timeout=10.0)
    with dist.DistributedContext(devices, config):
        results = _raise_any(_on_devices(devices, work))
    want_w, want_vs = _torch_dp_reference(xs, w, v, collective, op_chain, n)
    for i, (gw, gv) in enumerate(results):
        np.testing.assert_allclose(gw, want_w, rtol=1e-6, atol=1e-9, err_msg=f"w, device {i}")
        np.testing.assert_allclose(gv, want_vs[i], rtol=1e-6, atol=1e-9, err_msg=f"v, device {i}")


@settings(FUZZ, max_examples=8)
@given(
    n=st.integers(2, 4),
    collective=st.sampled_from(["all_reduce", "all_gather", "reduce_scatter", "broadcast"]),
    fault=st.sampled_from(["shape", "dtype", "raises"]),
    bad=st.integers(0, 3),
)
def test_bad_input_on_one_device_fails_every_device_and_the_next_step_works(
    n, collective, fault, bad
):
    bad %= n
    devices = [rg.Device("cpu", i) for i in range(n)]

    def run(x, devices):
        if collective == "all_reduce":
            return dist.all_reduce(x, SUM, devices).resolve()
        if collective == "all_gather":
            return dist.all_gather(x, devices, dim=0).resolve()
        if collective == "reduce_scatter":
            return dist.reduce_scatter(x, SUM, devices, dim=0).resolve()
        return dist.broadcast(x, 0, devices).resolve()

    def faulty(i, device):
        shape = (n * 2, 3)
        dtype = "float64"
        if i == bad and fault == "shape":
            shape = (n * 2, 4)
        if i == bad and fault == "dtype":
            dtype = "float32"
        if i == bad and fault == "raises":
            raise ValueError("a device's step failed")
        x = rg.ones(*shape, dtype=dtype, device=device).require_grad()
        return run(x, devices).sum().backward()

    def healthy(i, device):
        x = (rg.ones(n * 2, 3, dtype="float64", device=device) * (i + 1)).require_grad()
        out = run(x, devices)
        return out.numpy(), x.grad(out.sum().backward()).numpy()

    # (1 s: the devices that wait for a peer that raised before the collective wait it out,
    # idle; the healthy steps' devices meet within milliseconds of one another)
    config = dist.DistributedConfig(timeout=1.0)
    with dist.DistributedContext(devices, config):
        start = time.monotonic()
        results = _on_devices(devices, faulty)
        assert time.monotonic() - start < 20.0
        for i, result in enumerate(results):
            assert isinstance(result, BaseException), (i, result)
            if i != bad or fault != "raises":
                assert isinstance(result, (rg.DistributedError, rg.ShapeError, rg.DTypeError)), (
                    i,
                    repr(result),
                )
        # (the same context: a device that never joined the failed call is not a call behind)
        results = _raise_any(_on_devices(devices, healthy))
    ones = np.ones((n * 2, 3))
    for i, (value, grad) in enumerate(results):
        if collective == "all_reduce":
            np.testing.assert_allclose(value, ones * sum(range(1, n + 1)))
            np.testing.assert_allclose(grad, ones * n)
        elif collective == "broadcast":
            np.testing.assert_allclose(value, ones)
            np.testing.assert_allclose(grad, ones * (n if i == 0 else 0))
        elif collective == "all_gather":
            assert value.shape == (n * n * 2, 3)
            np.testing.assert_allclose(grad, ones * n)
        else:
            np.testing.assert_allclose(value, np.ones((2, 3)) * sum(range(1, n + 1)))
            np.testing.assert_allclose(grad, ones)


# ---- third derivatives against torch ---------------------------------------------------------

#: ``(3, 3) -> (3, 3)`` functions written once against ``lib`` (``torch`` or ``retrograd``).
#: Left out: ``layer_norm`` and ``batch_norm``, whose third derivatives in torch 2.13 differ
#: from those of torch's own composition of the same formula (retrograd's equal the
#: composition's).
UNARY = {
    "sin": lambda lib, t: t.sin(),
    "tanh": lambda lib, t: t.tanh(),
    "exp_half": lambda lib, t: (t * 0.5).exp(),
    "square": lambda lib, t: t * t,
    "sigmoid": lambda lib, t: t.sigmoid(),
    "softplus": lambda lib, t: lib.nn.functional.softplus(t, beta=2.0),
    "log1p_sq": lambda lib, t: (t * t).log1p(),
    "cube": lambda lib, t: t.pow(3),
    "softmax": lambda lib, t: t.softmax(-1),
    "cumprod": lambda lib, t: (t * 0.5 + 1.0).cumprod(-1),
    "normalize": lambda lib, t: lib.nn.functional.normalize(t, dim=-1),
    "matmul": lambda lib, t: t @ t.t(),
    "erf": lambda lib, t: t.erf(),
    "atan": lambda lib, t: t.atan(),
    "logsumexp": lambda lib, t: t.logsumexp(-1, keepdim=True) * t,
    "div": lambda lib, t: t / (t * t + 1.0),
    "rsqrt": lambda lib, t: (t * t + 0.5).rsqrt(),
    "pow_t": lambda lib, t: (t * t + 0.5).pow(t),
    "atan2": lambda lib, t: lib.atan2(t, t * t + 1.0),
    "gelu": lambda lib, t: lib.nn.functional.gelu(t),
    "gelu_tanh": lambda lib, t: lib.nn.functional.gelu(t, approximate="tanh"),
    "silu": lambda lib, t: lib.nn.functional.silu(t),
    "elu": lambda lib, t: lib.nn.functional.elu(t),
    "mish": lambda lib, t: lib.nn.functional.mish(t),
    "log_softmax": lambda lib, t: t.log_softmax(-1),
    "std": lambda lib, t: t.std(-1, keepdim=True) * t,
    "prod": lambda lib, t: t.prod(-1, keepdim=True) + t,
    "asinh": lambda lib, t: t.asinh(),
    "lgamma": lambda lib, t: (t * t + 1.0).lgamma(),
    "digamma": lambda lib, t: (t * t + 1.0).digamma(),
    "inverse": lambda lib, t: lib.linalg.inv(t @ t.T + lib.eye(3, dtype=t.dtype)),
    "det": lambda lib, t: lib.linalg.det(t + 2 * lib.eye(3, dtype=t.dtype)).unsqueeze(-1) * t,
    "cross_entropy": lambda lib, t: lib.nn.functional.cross_entropy(t, lib.tensor([0, 2, 1])) * t,
    "hypot": lambda lib, t: lib.hypot(t, t * 0.5 + 1.0),
    "logaddexp": lambda lib, t: lib.logaddexp(t, t * t),
    "xlogy": lambda lib, t: lib.xlogy(t, t * t + 1.0),
    "cosine": lambda lib, t: (
        lib.nn.functional.cosine_similarity(t, t.flip(0) + 0.5, dim=-1).unsqueeze(-1) * t
    ),
    "group_norm": lambda lib, t: lib.nn.functional.group_norm(t.unsqueeze(-1), 1).squeeze(-1),
    "bce_logits": lambda lib, t: (
        lib.nn.functional.binary_cross_entropy_with_logits(t, t.flip(0).sigmoid()) * t
    ),
    "attention": lambda lib, t: lib.nn.functional.scaled_dot_product_attention(
        t.unsqueeze(0), t.unsqueeze(0), t.unsqueeze(0)
    )[0],
}


@settings(FUZZ, max_examples=60)
@given(
    ops=st.lists(st.sampled_from(sorted(UNARY)), min_size=1, max_size=3),
    seed=st.integers(0, 1000),
    square=st.booleans(),
)
def test_third_derivatives_match_torch(ops, seed, square):
    a = np.random.default_rng(seed).standard_normal((3, 3)) * 0.8
    probe = np.random.default_rng(seed + 1).standard_normal((3, 3))

    def derivatives(lib, grad_of, x):
        h = x
        for name in ops:
            h = UNARY[name](lib, h)
        if h.shape != x.shape:
            h = h.sum(-1, keepdim=True) * x
        loss = (h * lib.tensor(probe)).sum()
        out = [loss]
        for _ in range(3):
            (g,) = grad_of(out[-1], x)
            out.append((g.tanh() * lib.tensor(probe)).sum() if not square else (g * g).sum())
        return out

    tx = torch.tensor(a, requires_grad=True)
    want = derivatives(torch, lambda y, x: torch.autograd.grad(y, x, create_graph=True), tx)
    x = rg.tensor(a, dtype="float64").require_grad()

    def rg_grad(y, x):
        grads = y.backward(create_graph=True)
        return (x.grad(grads),)

    got = derivatives(rg, rg_grad, x)
    # (1e-7: digamma's derivatives are SciPy's polygamma here, torch's own series there)
    for order, (w, g) in enumerate(zip(want, got)):
        np.testing.assert_allclose(
            g.numpy(), w.detach().numpy(), rtol=1e-7, atol=1e-9, err_msg=f"order {order}: {ops}"
        )


@settings(FUZZ, max_examples=8)
@given(
    n=st.integers(2, 4),
    fault=st.sampled_from(["shape", "dtype", "id", "missing", "detached", "raises"]),
    bad=st.integers(0, 3),
)
def test_mismatched_distributed_parameters_fail_every_device_and_the_next_step_works(n, fault, bad):
    bad %= n
    devices = [rg.Device("cpu", i) for i in range(n)]

    def step(fault):
        def work(i, device):
            faulty = i == bad and fault is not None
            shape = (2, 3) if faulty and fault == "shape" else (2, 2)
            dtype = "float32" if faulty and fault == "dtype" else "float64"
            w = rg.ones(*shape, dtype=dtype, device=device)
            w = w.set_distributed("other" if faulty and fault == "id" else "w")
            u = rg.ones(2, 2, dtype="float64", device=device).set_distributed("u")
            x = rg.ones(2, 2, dtype="float64", device=device) * (i + 1)
            if faulty and fault == "raises":
                raise ValueError("this device's step failed")
            if faulty and fault == "missing":
                loss = (u * x).sum()
            elif faulty and fault == "detached":
                loss = (u * x).sum() + w.detach().sum()
            else:
                loss = (w[:2, :2] * x).sum() + (u * x * x).sum()
            grads = loss.backward()
            return w.grad(grads).numpy(), u.grad(grads).numpy()

        return work

    # (1 s: the devices that wait for a peer that raised before the collective wait it out,
    # idle; the next step's devices meet within milliseconds of one another)
    config = dist.DistributedConfig(all_reduce_op=SUM, timeout=1.0)
    with dist.DistributedContext(devices, config):
        start = time.monotonic()
        results = _on_devices(devices, step(fault))
        assert time.monotonic() - start < 20.0
        for i, result in enumerate(results):
            if i == bad and fault == "raises":
                assert isinstance(result, ValueError)
            else:
                assert isinstance(result, rg.DistributedError), (i, repr(result))
        results = _raise_any(_on_devices(devices, step(None)))
    total = n * (n + 1) / 2  # the sum over devices of x = i + 1
    squares = sum((i + 1) ** 2 for i in range(n))
    for gw, gu in results:
        np.testing.assert_array_equal(gw, np.full((2, 2), total))
        np.testing.assert_array_equal(gu, np.full((2, 2), squares))
