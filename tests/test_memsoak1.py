"""Memory soaks of training loops the flat-loop test of test_memory.py does not reach: hooks,
retained and double backward, forward AD, checkpointing of graphs that alternate, capture,
optimizer and module state round trips, parametrizations, pruning, recurrent and attention
modules, errors and interrupts mid-forward and mid-backward, threads.

Each loop runs with the cyclic collector off, after a warm-up: no step may leave an object of
retrograd's (or torch's) behind, and no step may make garbage that only ``gc.collect`` frees
(a cycle pinning a graph keeps the previous step's activations alive until a collection runs,
which raises the peak). Counts, not bytes: NumPy's and CPython's free lists fill for a few
hundred steps, which a byte count cannot tell from a leak; a leaked object is always counted.
"""

from __future__ import annotations

import dis
import gc
import sys
import threading
import weakref
from collections.abc import Callable

import numpy as np
import pytest

import retrograd as rg
from backends import inner_backend
from cycle_probe import heap_set_aside, library_objects
from retrograd.backend.kernel_compile import compiler

nn = rg.nn
F = rg.nn.functional


class HookError(Exception):
    """Raised by a hook or a Function on purpose."""


def assert_flat(
    step: Callable[[], object],
    steps: int = 40,
    warm: int = 8,
    settle: Callable[[], object] | None = None,
) -> None:
    """Run ``step`` ``steps`` times with the collector off: nothing may be left behind.
    ``settle``, run before each count, brings state that a strategy keeps of the last step
    (a budget's plan) to the same point both times."""
    with heap_set_aside():
        for _ in range(warm):
            step()
        # A Numba kernel a step's op meets for the first time is loaded from the on-disk cache,
        # or its twin runs until the background compiler is done and the next call loads it:
        # either way, loading makes tens of thousands of objects in cycles (Numba's types), which
        # a fresh pytest worker met inside the counted steps (45,729 in the CI run of 5
        # December). So the compiler is waited for and one more step loads what it compiled.
        if compiler().wait(timeout=120):
            step()
        gc.collect()
        gc.disable()
        try:
            if settle is not None:
                settle()
            before = sum(library_objects().values())
            for _ in range(steps):
                step()
            if settle is not None:
                settle()
            cyclic = gc.collect()
            after = sum(library_objects().values())
        finally:
            gc.enable()
        assert after == before, f"{after - before} objects left behind over {steps} steps"
        assert cyclic == 0, f"{cyclic} objects over {steps} steps were freed only by gc.collect"


def _mlp() -> nn.Module:
    return nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 2))


@pytest.fixture
def data():
    rg.manual_seed(0)
    return rg.randn(16, 8), rg.randn(16, 2)


def test_the_soak_sees_a_leak_and_a_cycle(data):
    """The check itself: a list that keeps each step's loss, and a loss in a cycle, fail it."""
    x, y = data
    model = _mlp()
    kept = []

    def leaking():
        kept.append(F.mse_loss(model(x), y))

    with pytest.raises(AssertionError, match="left behind"):
        assert_flat(leaking, steps=5, warm=3)

    def cyclic():
        loss = F.mse_loss(model(x), y)
        box = [loss]
        box.append(box)

    with pytest.raises(AssertionError, match=r"only by gc\.collect"):
        assert_flat(cyclic, steps=5, warm=3)


def test_hooks_of_every_kind(data):
    x, y = data
    model = _mlp()
    opt = rg.optim.SGD(model.parameters(), lr=0.01)
    model[0].register_forward_hook(lambda module, args, out: None)
    model[0].register_forward_pre_hook(lambda module, args: None)
    model[2].register_full_backward_hook(lambda module, grad_in, grad_out: None)
    model[2].register_full_backward_pre_hook(lambda module, grad_out: None)
    for p in model.parameters():
        p.register_hook(lambda g: g * 1.0)

    def step():
        out = model(x)
        out.register_hook(lambda g: g)
        transient = model[0].register_forward_hook(lambda module, args, out: None)
        loss = F.mse_loss(out, y)
        opt.step(loss.backward())
        transient.remove()
        loss.item()

    assert_flat(step)


def test_retain_graph_then_a_second_backward_and_a_retained_graph_dropped(data):
    x, y = data
    model = _mlp()

    def step():
        loss = F.mse_loss(model(x), y)
        loss.backward(retain_graph=True)
        loss.backward()
        kept = F.mse_loss(model(x), y)
        kept.backward(retain_graph=True)  # then dropped without a consuming backward
        loss.item()

    assert_flat(step)


def test_gradient_penalty_and_grad_with_inputs(data):
    x, y = data
    model = _mlp()

    def step():
        xi = x.detach().requires_grad_()
        out = model(xi)
        (g,) = rg.autograd.grad(out.sum(), xi, create_graph=True)
        loss = (g.norm(2, dim=1) - 1).pow(2).mean() + out.mean()
        loss.backward()
        again = F.mse_loss(model(x), y)
        rg.autograd.grad(again, list(model.parameters()))
        F.mse_loss(model(x), y).backward(inputs=[model[0].weight])

    assert_flat(step)


def test_forward_ad_levels_also_left_by_an_error():
    fwd = rg.autograd.forward_ad
    primal, tangent = rg.randn(6), rg.randn(6)

    def step():
        try:
            with fwd.dual_level():
                dual = fwd.make_dual(primal, tangent)
                (dual * dual).sum()
                raise HookError
        except HookError:
            pass
        with fwd.dual_level():
            dual = fwd.make_dual(primal, tangent)
            fwd.unpack_dual((dual.sin() * dual).sum()).tangent.item()

    assert_flat(step)


@pytest.mark.parametrize(
    "strategy",
    [rg.NoCheckpointing, rg.BalancedCheckpointing, lambda: rg.BudgetCheckpointing(400)],
    ids=["none", "balanced", "budget"],
)
def test_graphs_that_alternate_under_every_strategy(strategy):
    with rg.use_backend(rg.Autodiff(inner_backend(), strategy())):
        rg.manual_seed(0)
        model = _mlp()
        wide, narrow, target = rg.randn(16, 8), rg.randn(7, 8), rg.randn(16, 2)
        turn = [0]

        def step():
            turn[0] ^= 1
            if turn[0]:
                loss = F.mse_loss(model(wide), target)
            else:
                h = model(narrow).sin().exp()
                loss = (h * h).sum() + h.mean()
            loss.backward()
            loss.item()

        assert_flat(step, steps=20)


def test_torch_utils_checkpoint(data):
    from retrograd.utils.checkpoint import checkpoint, checkpoint_sequential

    x, y = data
    model = _mlp()

    def step():
        h = checkpoint(model[0], x, use_reentrant=False)
        h = checkpoint(lambda t: model[2](model[1](t)), h, use_reentrant=False)
        F.mse_loss(h, y).backward()
        F.mse_loss(checkpoint_sequential(model, 2, x, use_reentrant=False), y).backward()

    assert_flat(step)


def test_capture_replay(data):
    x, y = data
    model = nn.Linear(8, 2)
    opt = rg.optim.SGD(model, lr=0.01)

    def train_step(batch):
        loss = F.mse_loss(model(batch), y)
        opt.step(loss.backward())
        return loss

    replay = rg.capture(train_step, x, state=[opt])
    assert_flat(lambda: replay(x).item())


def test_state_dict_round_trips_schedulers_scaler_and_ema(data, tmp_path):
    from retrograd.optim import swa_utils

    x, y = data
    model = _mlp()
    opt = rg.optim.AdamW(model.parameters(), lr=1e-3)
    step_lr = rg.optim.lr_scheduler.StepLR(opt, 5)
    plateau = rg.optim.lr_scheduler.ReduceLROnPlateau(opt)
    scaler = rg.amp.GradScaler()
    ema = swa_utils.AveragedModel(model, multi_avg_fn=swa_utils.get_ema_multi_avg_fn(0.99))
    path = tmp_path / "checkpoint.pt"

    def step():
        loss = F.mse_loss(model(x), y)
        scaler.step(opt, scaler.scale(loss).backward())
        scaler.update()
        step_lr.step()
        plateau.step(loss.item())
        ema.update_parameters(model)
        rg.save({"model": model.state_dict(), "opt": opt.state_dict()}, path)
        loaded = rg.load(path)
        model.load_state_dict(loaded["model"])
        opt.load_state_dict(loaded["opt"])

    assert_flat(step, steps=25)


def test_parametrizations_and_pruning():
    import retrograd.nn.utils.prune as prune
    from retrograd.nn.utils import parametrizations

    rg.manual_seed(0)
    layers = [
        parametrizations.weight_norm(nn.Linear(8, 8)),
        parametrizations.spectral_norm(nn.Linear(8, 8)),
        parametrizations.orthogonal(nn.Linear(8, 8)),
        nn.utils.spectral_norm(nn.Linear(8, 8)),
    ]
    pruned = nn.Linear(8, 8)
    prune.l1_unstructured(pruned, "weight", amount=0.3)
    model = nn.Sequential(*layers, pruned)
    opt = rg.optim.SGD(model.parameters(), lr=0.01)
    x = rg.randn(4, 8)

    def step():
        loss = model(x).square().mean()
        opt.step(loss.backward())
        loss.item()

    assert_flat(step, steps=25)


def test_packed_recurrent_layers_and_masked_attention():
    from retrograd.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

    rg.manual_seed(0)
    lstm = nn.LSTM(4, 5, num_layers=2, bidirectional=True, batch_first=True)
    gru = nn.GRU(4, 5, batch_first=True)
    attention = nn.MultiheadAttention(8, 2, batch_first=True)
    sequences, lengths = rg.randn(3, 6, 4), [6, 4, 2]
    q = rg.randn(2, 5, 8)
    causal = nn.Transformer.generate_square_subsequent_mask(5)
    padding = rg.tensor([[False] * 5, [False, False, False, True, True]])

    def step():
        total = 0.0
        for rnn in (lstm, gru):
            packed = pack_padded_sequence(sequences, lengths, batch_first=True)
            out, _ = pad_packed_sequence(rnn(packed)[0], batch_first=True)
            total = total + out.sum()
        out, weights = attention(q, q, q, attn_mask=causal, key_padding_mask=padding)
        (total + out.sum() + weights.sum()).backward()

    assert_flat(step, steps=15, warm=4)


def test_errors_mid_forward_and_mid_backward_release_the_graph(data):
    x, _ = data
    w = rg.randn(8, 2).require_grad()
    model = _mlp()

    class FailsBackward(rg.autograd.Function):
        @staticmethod
        def forward(ctx, a):
            ctx.save_for_backward(a)
            return a * 2

        @staticmethod
        def backward(ctx, g):
            raise HookError

    def fail(*args):
        raise HookError

    def step():
        handle = model[0].register_forward_hook(fail)
        with pytest.raises(HookError):
            model(x)
        handle.remove()
        with pytest.raises(rg.ShapeError):
            model(x) @ rg.randn(3, 3)
        out = x @ w
        out.register_hook(fail)
        with pytest.raises(HookError):
            out.tanh().sum().backward()
        with pytest.raises(HookError):
            FailsBackward.apply(x @ w).sum().backward()

    assert_flat(step)


def _exits_a_with(frame) -> bool:
    """Whether the line event of ``frame`` comes where a ``with`` statement is about to call
    ``__exit__`` on its way out of the block (CPython 3.11 fires the statement's line again
    there: ``LOAD_CONST None`` three times, then the call)."""
    code, at = frame.f_code, frame.f_lasti
    raw = code.co_code
    if at + 6 > len(raw):
        return False
    load_const = dis.opmap["LOAD_CONST"]
    return all(raw[at + 2 * k] == load_const for k in range(3)) and all(
        code.co_consts[raw[at + 2 * k + 1]] is None for k in range(3)
    )


class _InterruptAtLine:
    """A trace function raising KeyboardInterrupt at the n-th line retrograd runs, not
    counting the line events where a ``with`` statement is about to call ``__exit__``: those
    lie outside the statement's protection, so an exception a trace raises there skips the
    ``__exit__`` (a lock stays held and the next backward of another thread waits for ever),
    where a real interrupt (a signal's, delivered at an eval-breaker check: a call's return,
    a loop's jump) never lands."""

    def __init__(self, line: int):
        self.left = line

    def __call__(self, frame, event, arg):
        if event == "line" and "retrograd" in frame.f_code.co_filename and not _exits_a_with(frame):
            self.left -= 1
            if self.left == 0:
                raise KeyboardInterrupt
        return self


@pytest.mark.parametrize(
    "strategy",
    [rg.NoCheckpointing, rg.BalancedCheckpointing, lambda: rg.BudgetCheckpointing(2000)],
    ids=["none", "balanced", "budget"],
)
def test_keyboard_interrupt_anywhere_in_backward(strategy):
    """An interrupt at any line of a backward leaves nothing behind, and training goes on."""
    with rg.use_backend(rg.Autodiff(inner_backend(), strategy())):
        rg.manual_seed(0)
        model = _mlp()
        opt = rg.optim.SGD(model.parameters(), lr=0.01)
        x, y = rg.randn(16, 8), rg.randn(16, 2)
        lines = iter(np.random.default_rng(0).integers(1, 300, size=1000).tolist())
        interrupted = [0]

        def train():
            opt.step(F.mse_loss(model(x).sin(), y).backward())

        def step():
            loss = F.mse_loss(model(x).sin(), y)
            previous = sys.gettrace()
            sys.settrace(_InterruptAtLine(next(lines)))
            try:
                opt.step(loss.backward())
            except KeyboardInterrupt:
                interrupted[0] += 1
            finally:
                sys.settrace(previous)
            train()  # the model still trains

        # a budget keeps the plan of the last step it saw whole: two whole steps before each
        # count leave the same plan
        assert_flat(step, steps=30, settle=lambda: (train(), train()))
        assert interrupted[0] > 0


def test_threads_training_their_own_models_and_sharing_a_retained_graph(data):
    x, y = data

    def train_own(steps: int) -> None:
        model = _mlp()
        opt = rg.optim.SGD(model.parameters(), lr=0.01)
        for _ in range(steps):
            loss = F.mse_loss(model(x), y)
            opt.step(loss.backward())

    w = rg.randn(8, 2).require_grad()

    def step():
        threads = [threading.Thread(target=train_own, args=(3,)) for _ in range(3)]
        loss = (x @ w).tanh().sum()
        grads = []
        threads += [
            threading.Thread(target=lambda: grads.append(w.grad(loss.backward(retain_graph=True))))
            for _ in range(2)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert len(grads) == 2 and all(g is not None for g in grads)

    assert_flat(step, steps=10, warm=3)


def test_the_previous_steps_graph_is_gone_when_only_the_loss_value_is_kept(data):
    """With the collector off, a step's graph is freed as its last reference goes."""
    x, y = data
    model = nn.Sequential(nn.Linear(8, 8), nn.BatchNorm1d(8), nn.Linear(8, 2))
    opt = rg.optim.SGD(model.parameters(), lr=0.01)
    gc.collect()
    gc.disable()
    try:
        previous = None
        for _ in range(5):
            loss = F.mse_loss(model(x), y)
            if previous is not None:
                assert previous() is None, "the previous step's graph is still alive"
            previous = weakref.ref(loss.primitive.node)
            opt.step(loss.backward())
            loss = loss.item()
    finally:
        gc.enable()
    assert isinstance(loss, float)
