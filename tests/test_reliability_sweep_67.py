"""Reliability round 67: an interrupt (Ctrl-C) at any line of the update phase and of the
product paths leaves no lock held, nothing behind, and every object usable.

The technique is ``test_memsoak1.test_keyboard_interrupt_anywhere_in_backward``'s: a trace
function raises KeyboardInterrupt at the n-th line retrograd runs. Not at the lines where no
real interrupt lands. A signal's handler runs where the interpreter checks for it (a
function's start, a call's return, a loop's jump back), and what it raises is handled by the
handler that covers that instruction; a trace raises before a line's first instruction,
which another handler may cover. So a line is skipped where its first instruction lies under
another handler than the last instruction run where a signal could be handled (a ``finally``
block's copy on the normal way out of its ``try``, the line after a ``try`` whose body's last
call was under its ``except``), and where it is a ``NOP`` (the first line of ``with lock:
try: ...``, which no handler covers: raised there, the lock stayed held) or a ``with``
statement's call of ``__exit__`` on the way out (``LOAD_CONST None`` three times, after a
``SWAP`` where the block returns). The tracer follows each frame's instructions for that
(``f_trace_opcodes``).

Each path is swept at every line where it is short, at seeded samples where it is long, and
each interrupted call is followed by checks: (a) a second call from another thread finishes
(no lock held); (b) the interpreter-wide modes (grad mode, default dtype, backend, autocast,
inference mode) are as they were; (c) the next uninterrupted call runs and gives a
well-defined result: what the interrupted call would have made, or the state before it; (d)
a file being replaced is the old one or the new one, whole, and no temporary is left. Then a
loop of interrupted and uninterrupted calls leaves no object of retrograd's behind and makes
no cyclic garbage (``test_memsoak1.assert_flat``).

What an optimizer's interrupted step may leave is torch's: the parameters stepped in the
order of the group (those before the interrupt stepped, those after it not), as torch's
single-tensor loop leaves them; inside one parameter's update torch advances the step count
first, then the moments, then the value (AdamW's decay before the moments), and an interrupt
between its lines leaves a prefix of that sequence (measured with the same trace on torch
2.13's ``Adam`` and ``SGD(momentum=0.9)``: never a value or a moment stepped beside the old
count, which retrograd left until this round).
"""

from __future__ import annotations

import dis
import functools
import os
import sys
import threading

import numpy as np
import pytest

import retrograd as rg
from backends import INNER
from test_memsoak1 import assert_flat

nn = rg.nn
F = rg.nn.functional

_PACKAGE = os.path.dirname(os.path.abspath(rg.__file__)) + os.sep
_NOP = dis.opmap["NOP"]
_SWAP = dis.opmap["SWAP"]
_LOAD_CONST = dis.opmap["LOAD_CONST"]


@functools.cache
def _handlers(code) -> tuple[int, ...]:
    """The exception-table entry (its index, -1 for none) that covers each instruction of
    ``code``, by instruction."""
    covering = [-1] * (len(code.co_code) // 2)
    for index, entry in enumerate(dis._parse_exception_table(code)):
        for at in range(entry.start, entry.end + 1, 2):
            covering[at // 2] = index
    return tuple(covering)


#: The instructions after which a signal's handler may run (CPython 3.11's eval-breaker
#: checks: a function's start, a call's return, a loop's jump back) or which call Python code
#: that may be interrupted (``__enter__``): an exception raised there is handled by the
#: handler that covers them.
_CHECKS = frozenset(
    dis.opmap[name]
    for name in ("RESUME", "CALL", "CALL_FUNCTION_EX", "JUMP_BACKWARD", "BEFORE_WITH")
)


def _no_interrupt_lands(frame, check: int) -> bool:
    """Whether the line event of ``frame`` comes where no real interrupt lands (module
    docstring): a ``NOP``; a ``with`` statement's call of ``__exit__`` on its way out; a line
    another handler covers than the last instruction where a signal's handler could run
    (``check``): a ``finally`` block's copy on the normal way out, the line after a ``try``
    statement whose body's last call was under its handler."""
    code, at = frame.f_code, frame.f_lasti
    raw = code.co_code
    if raw[at] == _NOP:
        return True
    handlers = _handlers(code)
    if handlers[at // 2] != handlers[check // 2]:
        return True
    if raw[at] == _SWAP:
        at += 2
    return at + 6 <= len(raw) and all(
        raw[at + 2 * k] == _LOAD_CONST and code.co_consts[raw[at + 2 * k + 1]] is None
        for k in range(3)
    )


class _Lines:
    """A trace function counting the lines of retrograd's code run (``seen``) where a real
    interrupt may land, raising KeyboardInterrupt at the ``at``-th (never when ``at`` is
    None). Not in a finalizer (``__del__``): the interpreter reports and drops what one
    raises."""

    def __init__(self, at: int | None = None, record: str | None = None):
        self.at, self.seen = at, 0
        self.record, self.recorded = record, []  # the lines run in files named ``record``

    def __call__(self, frame, event, arg):
        code = frame.f_code
        if event != "call" or not code.co_filename.startswith(_PACKAGE):
            return None
        if code.co_name == "__del__":
            return None
        frame.f_trace_opcodes = True
        return _InFrame(self)


class _InFrame:
    """One frame's trace: the last instruction run where a signal's handler could run."""

    def __init__(self, lines: _Lines):
        self.lines, self.check = lines, 0

    def __call__(self, frame, event, arg):
        if event == "opcode":
            if frame.f_code.co_code[frame.f_lasti] in _CHECKS:
                self.check = frame.f_lasti
        elif event == "line" and not _no_interrupt_lands(frame, self.check):
            lines = self.lines
            lines.seen += 1
            if lines.record and frame.f_code.co_filename.endswith(lines.record):
                lines.recorded.append(lines.seen)
            if lines.seen == lines.at:
                raise KeyboardInterrupt
        return self


def _traced(call, at: int | None = None) -> tuple[int, bool]:
    """``call()`` under :class:`_Lines`: the lines it ran, and whether it was interrupted."""
    lines, previous = _Lines(at), sys.gettrace()
    sys.settrace(lines)
    try:
        call()
        return lines.seen, False
    except KeyboardInterrupt:
        return lines.seen, True
    finally:
        sys.settrace(previous)


def _modes() -> tuple:
    return (
        rg.is_grad_enabled(),
        str(rg.get_default_dtype()),
        rg.current_backend(),
        rg.is_autocast_enabled(),
        rg.is_inference_mode_enabled(),
    )


def _finishes_in_a_thread(call, timeout: float = 20.0) -> None:
    """(a): ``call`` run by another thread returns within ``timeout`` seconds."""
    errors: list[BaseException] = []

    def run() -> None:
        try:
            call()
        except BaseException as error:  # (reported below)
            errors.append(error)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(timeout)
    assert not thread.is_alive(), "a second call waited: a lock is still held"
    assert not errors, f"the second call failed: {errors[0]!r}"


def _picks(total: int, count: int, seed: int, tail: int = 5) -> list[int]:
    """Every line of a path of at most ``count`` lines; otherwise the first five and the last
    ``tail`` and a seeded sample of the rest."""
    if total <= count + tail:
        return list(range(1, total + 1))
    ends = [*range(1, 6), *range(total - tail + 1, total + 1)]
    middle = np.random.default_rng(seed).choice(np.arange(6, total - tail + 1), count - 5, False)
    return sorted({*ends, *middle.tolist()})


def _sweep(call, total: int, count: int, seed: int, after, tail: int = 5, also=()) -> int:
    """``call`` interrupted at each of :func:`_picks`'s lines, ``after(interrupted)`` run
    after each (the path's checks), with the modes checked; how many calls were interrupted."""
    modes, interrupted = _modes(), 0
    for line in sorted({*_picks(total, count, seed, tail), *also}):
        _, hit = _traced(call, line)
        interrupted += hit
        assert _modes() == modes, f"an interrupt at line {line} left the modes changed"
        after(hit)
    return interrupted


def _flat_under_interrupts(call, total: int, seed: int) -> None:
    """(b): interrupted and uninterrupted calls in turn leave nothing behind."""
    lines = iter(np.random.default_rng(seed).integers(1, total + 1, size=1000).tolist())

    def step() -> None:
        _traced(call, next(lines))
        call()

    assert_flat(step, steps=12, warm=3)


def _values(tensors) -> list[np.ndarray]:
    return [np.array(t.detach().numpy(), copy=True) for t in tensors]


# -- optimizers ------------------------------------------------------------------------------
OPTIMIZERS = {
    "sgd-momentum": lambda p: rg.optim.SGD(p, lr=0.1, momentum=0.9),
    "sgd-nesterov": lambda p: rg.optim.SGD(
        p, lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01
    ),
    "adam": lambda p: rg.optim.Adam(p, lr=0.1),
    "adam-amsgrad": lambda p: rg.optim.Adam(p, lr=0.1, amsgrad=True),
    "adam-fused": lambda p: rg.optim.Adam(p, lr=0.1, fused=True),
    "adamw-foreach": lambda p: rg.optim.AdamW(p, lr=0.1, foreach=True),
    "rmsprop": lambda p: rg.optim.RMSprop(p, lr=0.1, momentum=0.5),
    "adagrad": lambda p: rg.optim.Adagrad(p, lr=0.1),
}

_X = np.random.default_rng(3).standard_normal((5, 4)).astype(np.float32)
_Y = np.random.default_rng(4).standard_normal((5, 2)).astype(np.float32)


def _model() -> nn.Module:
    rg.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 3), nn.Tanh(), nn.Linear(3, 2))


def _grads(model: nn.Module):
    return F.mse_loss(model(rg.tensor(_X)), rg.tensor(_Y)).backward()


def _state_of(optimizer, parameter) -> dict[str, np.ndarray]:
    return {
        key: np.array(value.numpy() if hasattr(value, "numpy") else value, copy=True)
        for key, value in optimizer.state.get(parameter, {}).items()
    }


def _same_state(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)


def _progress(value, state, before, after) -> tuple[str, dict[str, str]]:
    """How far a parameter's update got: its value's and each state entry's "old", "new" or
    "other" (neither)."""

    def which(now, old, new):
        return "old" if np.array_equal(now, old) else "new" if np.array_equal(now, new) else "other"

    keys = {key: which(state.get(key), before[1].get(key), after[1][key]) for key in after[1]}
    return which(value, before[0], after[0]), keys


@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_an_interrupted_optimizer_step_leaves_torchs_order_of_updates(name):
    """Each parameter's update as far as torch's sequence goes -- count, moments, value --
    and the parameters stepped in the group's order; then the optimizer steps on."""
    make = OPTIMIZERS[name]

    def stepped_once():
        model = _model()
        optimizer = make(model.parameters())
        optimizer.step(_grads(model))  # the state exists: the next step updates it
        return model, optimizer, _grads(model)

    model, optimizer, grads = stepped_once()
    params = list(model.parameters())
    before = [(v, _state_of(optimizer, p)) for v, p in zip(_values(params), params)]
    total, _ = _traced(lambda: optimizer.step(grads))
    after = [(v, _state_of(optimizer, p)) for v, p in zip(_values(params), params)]

    modes, interrupted, seen = _modes(), 0, set()
    for line in _picks(total, 25, seed=67):
        model, optimizer, grads = stepped_once()
        params = list(model.parameters())
        _, hit = _traced(functools.partial(optimizer.step, grads), line)
        interrupted += hit
        assert _modes() == modes
        touched = []
        for i, p in enumerate(params):
            value, keys = _progress(_values([p])[0], _state_of(optimizer, p), before[i], after[i])
            where = f"{name}: parameter {i}, interrupted at line {line}: value {value}, {keys}"
            if value == "other":  # AdamW's decay, torch's second write, after the count
                assert name.startswith("adamw") and keys["step"] == "new", where
            if value == "new":  # torch writes the value last
                assert set(keys.values()) <= {"new"}, where
            if keys.get("step") == "old":  # and the count first
                assert value == "old" and set(keys.values()) == {"old"}, where
            done = value == "new"
            touched.append(
                "done" if done else "untouched" if {value, *keys.values()} == {"old"} else "begun"
            )
        seen.add(" ".join(touched))
        # in the group's order: those before the one begun done, those after it untouched
        order = [{"done": 0, "begun": 1, "untouched": 2}[t] for t in touched]
        assert order == sorted(order) and order.count(1) <= 1, (line, touched)
        assert all(p.is_leaf and p.requires_grad for p in params)
        _finishes_in_a_thread(functools.partial(optimizer.step, _grads(model)))
        assert all(np.isfinite(v).all() for v in _values(params))
    assert interrupted > 0 and len(seen) > 3, seen

    model, optimizer, _ = stepped_once()
    _flat_under_interrupts(lambda: optimizer.step(_grads(model)), total, seed=67)


def _old_or_new(now: list[np.ndarray], old: list[np.ndarray], new: list[np.ndarray]) -> list:
    """Per array: "old", "new" (both when they are equal), or a failure."""
    kinds = []
    for i, (a, b, c) in enumerate(zip(now, old, new)):
        is_old = a.dtype == b.dtype and np.array_equal(a, b)
        is_new = a.dtype == c.dtype and np.array_equal(a, c)
        assert is_old or is_new, f"array {i} is neither as it was nor as the call makes it"
        kinds.append("new" if is_new and not is_old else "old")
    return kinds


# -- the rest of the update phase ------------------------------------------------------------
def test_an_interrupted_clip_leaves_each_gradient_whole_or_clipped():
    model = _model()
    params = list(model.parameters())
    grads = _grads(model)
    raw = _values([p.grad(grads) for p in params])
    assert float(rg.nn.utils.clip_grad_norm_(grads, params, 0.05)) > 0.05  # it scales them
    clipped = _values([p.grad(grads) for p in params])
    total, _ = _traced(lambda: rg.nn.utils.clip_grad_norm_(_grads(model), params, 0.05))
    box = {}

    def clip():
        rg.nn.utils.clip_grad_norm_(box["grads"], params, 0.05)

    def after(hit):
        _old_or_new(_values([p.grad(box["grads"]) for p in params]), raw, clipped)
        box["grads"] = _grads(model)
        _finishes_in_a_thread(clip)
        assert np.allclose(_values([p.grad(box["grads"]) for p in params])[0], clipped[0])
        box["grads"] = _grads(model)

    box["grads"] = _grads(model)
    assert _sweep(clip, total, 40, seed=1, after=after) > 0
    _flat_under_interrupts(
        lambda: rg.nn.utils.clip_grad_norm_(_grads(model), params, 0.05), total, seed=1
    )


def test_an_interrupted_zero_grad_leaves_the_next_zero_grad_in_charge():
    """``zero_grad(set_to_none=False)`` marks the parameters to step with a zero gradient,
    ``zero_grad()`` drops the marks: interrupted anywhere, the next ``zero_grad()`` leaves a
    step that moves only the parameters with a gradient."""
    model = _model()
    optimizer = rg.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    optimizer.step(_grads(model))  # momentum buffers: a marked parameter would move

    def marks():
        optimizer.zero_grad(set_to_none=False)
        optimizer.zero_grad()

    def after(hit):
        optimizer.zero_grad()
        second = list(model[2].parameters())
        before = _values(second)
        optimizer.step(model[0](rg.tensor(_X)).sum().backward())  # no gradient for model[2]
        assert all(np.array_equal(a, b) for a, b in zip(_values(second), before))

    total, _ = _traced(marks)
    assert _sweep(marks, total, 60, seed=2, after=after) > 0
    _flat_under_interrupts(marks, total, seed=2)


SCHEDULERS = {
    "step": lambda o: rg.optim.lr_scheduler.StepLR(o, step_size=1, gamma=0.5),
    "cosine": lambda o: rg.optim.lr_scheduler.CosineAnnealingLR(o, T_max=10),
    "one-cycle": lambda o: rg.optim.lr_scheduler.OneCycleLR(o, max_lr=1.0, total_steps=50),
    "plateau": lambda o: rg.optim.lr_scheduler.ReduceLROnPlateau(o, patience=0),
}


@pytest.mark.parametrize("name", list(SCHEDULERS))
def test_an_interrupted_schedule_step_leaves_the_epoch_and_the_rate_in_torchs_order(name):
    """torch's ``step`` counts the epoch first, then sets the groups' rates: an interrupted
    step leaves the rate as it was or as the step sets it, never a new rate beside the old
    count; the next step goes on from there."""
    model = _model()

    def made():
        optimizer = rg.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        schedule = SCHEDULERS[name](optimizer)
        return optimizer, schedule

    def step(schedule):
        return schedule.step(1.0) if name == "plateau" else schedule.step()

    optimizer, schedule = made()
    step(schedule)
    old = (schedule.last_epoch, optimizer.param_groups[0]["lr"])
    total, _ = _traced(lambda: step(schedule))
    new = (schedule.last_epoch, optimizer.param_groups[0]["lr"])
    assert old != new
    box = {}

    def after(hit):
        optimizer, schedule = box["made"]
        now = (schedule.last_epoch, optimizer.param_groups[0]["lr"])
        assert now[1] in (old[1], new[1]) and now[0] in (old[0], new[0]), (now, old, new)
        if now[1] != old[1]:
            assert now[0] == new[0], "a new rate beside the old epoch"
        _finishes_in_a_thread(lambda: step(schedule))
        assert schedule.last_epoch == now[0] + 1 and np.isfinite(optimizer.param_groups[0]["lr"])

    modes, interrupted = _modes(), 0
    for line in _picks(total, 40, seed=3):
        box["made"] = made()
        step(box["made"][1])
        interrupted += _traced(lambda: step(box["made"][1]), line)[1]
        assert _modes() == modes
        after(True)
    assert interrupted > 10, (interrupted, total)
    optimizer, schedule = made()
    _flat_under_interrupts(lambda: step(schedule), total, seed=3)


def test_an_interrupted_grad_scaler_call_leaves_the_next_iteration_running():
    """Each of ``scale``, ``unscale_``, ``step`` and ``update`` interrupted anywhere: the
    scaler's ``update()`` that ends the iteration, then a whole iteration, run, and the
    scale is the old one or the one the interrupted iteration would have made."""
    model = _model()
    params = list(model.parameters())
    optimizer = rg.optim.SGD(params, lr=0.1, momentum=0.9)
    scaler = rg.amp.GradScaler("cpu", init_scale=2.0**8, growth_interval=1)
    x, y = rg.tensor(_X), rg.tensor(_Y)
    box = {}

    def iteration(skip: str | None = None, line: int | None = None) -> int:
        """One iteration; the part named ``skip`` interrupted at ``line``: its line count."""
        counts = {}

        def part(name, call):
            if name == skip:
                counts[name], hit = _traced(call, line)
                if hit:
                    raise KeyboardInterrupt
            else:
                call()

        part("scale", lambda: box.__setitem__("loss", scaler.scale(F.mse_loss(model(x), y))))
        grads = box.pop("loss").backward()
        part("unscale_", lambda: scaler.unscale_(optimizer, grads))
        part("step", lambda: scaler.step(optimizer, grads))
        part("update", lambda: scaler.update())
        return counts.get(skip, 0)

    modes, interrupted = _modes(), 0
    for skip in ("scale", "unscale_", "step", "update"):
        total = iteration(skip)
        for line in _picks(total, 25, seed=4):
            scale = float(scaler.get_scale())
            try:
                iteration(skip, line)
            except KeyboardInterrupt:
                interrupted += 1
                try:  # the iteration ended as torch's loop ends it: its update, if due
                    scaler.update()
                except rg.errors.ScalerOrderError as error:  # no step recorded: none due
                    assert "no inf checks were recorded" in str(error)
            box.clear()
            assert _modes() == modes
            assert float(scaler.get_scale()) in (scale, scale * 2.0, scale / 2.0)
            _finishes_in_a_thread(iteration)
            assert all(np.isfinite(v).all() for v in _values(params))
    assert interrupted > 20
    _flat_under_interrupts(lambda: iteration(), 200, seed=4)


# -- the product paths -----------------------------------------------------------------------
def test_an_interrupted_load_state_dict_or_cast_leaves_each_tensor_old_or_new():
    """Each parameter as it was or as the call makes it (torch copies them one by one too);
    the next uninterrupted call makes them all new; an optimizer's state loaded again steps
    as the uninterrupted load does."""
    model = _model()
    params = list(model.parameters())
    old = _values(params)
    other = _model()
    with rg.no_grad():
        for p in other.parameters():
            p.mul_(2.0)
    saved = other.state_dict()
    new = _values(other.parameters())

    def load():
        model.load_state_dict(saved)

    def after(hit):
        _old_or_new(_values(params), old, new)
        _finishes_in_a_thread(load)
        assert all(np.array_equal(a, b) for a, b in zip(_values(params), new))
        assert all(p.is_leaf and p.requires_grad for p in model.parameters())
        with rg.no_grad():
            for p, value in zip(model.parameters(), old):
                p.copy_(rg.tensor(value))

    total, _ = _traced(load)
    after(False)
    assert _sweep(load, total, 25, seed=5, after=after) > 0
    _flat_under_interrupts(load, total, seed=5)

    # an optimizer's state dict
    optimizer = rg.optim.Adam(model.parameters(), lr=0.1)
    optimizer.step(_grads(model))
    state = optimizer.state_dict()
    grads = _grads(model)

    def load_optimizer():
        optimizer.load_state_dict(state)

    def stepped() -> list[np.ndarray]:
        start = _values(model.parameters())
        optimizer.step(grads)
        out = _values(model.parameters())
        with rg.no_grad():
            for p, value in zip(model.parameters(), start):
                p.copy_(rg.tensor(value))
        return out

    load_optimizer()
    expected = stepped()

    def after_optimizer(hit):
        _finishes_in_a_thread(load_optimizer)
        assert all(np.array_equal(a, b) for a, b in zip(stepped(), expected))

    total, _ = _traced(load_optimizer)
    assert _sweep(load_optimizer, total, 25, seed=6, after=after_optimizer) > 0
    _flat_under_interrupts(load_optimizer, total, seed=6)


@pytest.mark.parametrize("cast", ["to-float64", "half"])
def test_an_interrupted_cast_leaves_each_parameter_old_or_cast(cast):
    if cast == "half" and INNER == "numpy":
        pytest.skip("float16 is the torch inner backend's (NumpyBackend refuses it)")

    def made():
        model = _model()
        return model, list(model.parameters())

    def call(model):
        return model.to(rg.float64) if cast == "to-float64" else model.half()

    model, params = made()
    old = _values(params)
    total, _ = _traced(lambda: call(model))
    new = _values(params)
    assert new[0].dtype != old[0].dtype
    modes, interrupted = _modes(), 0
    for line in _picks(total, 40, seed=7):
        model, params = made()
        interrupted += _traced(functools.partial(call, model), line)[1]
        assert _modes() == modes
        _old_or_new(_values(model.parameters()), old, new)
        _finishes_in_a_thread(functools.partial(call, model))
        assert all(np.array_equal(a, b) for a, b in zip(_values(model.parameters()), new))
        x = rg.tensor(_X).to(params[0].dtype)
        grads = model(x).sum().backward()
        assert all(p.grad(grads) is not None for p in model.parameters())
    assert interrupted > 10
    model, params = made()
    _flat_under_interrupts(lambda: (call(model), model.float()), total, seed=7)


def _folder_state(folder) -> tuple[list[str], int]:
    return sorted(os.listdir(folder)), len(os.listdir("/proc/self/fd"))


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts descriptors in /proc")
def test_an_interrupted_save_leaves_the_old_file_or_the_new_one_and_nothing_else(tmp_path):
    model = _model()
    old_state = {k: v.clone() for k, v in model.state_dict().items()}
    new_state = {k: v + 1 for k, v in old_state.items()}
    path = tmp_path / "model.pt"
    rg.save(new_state, path)
    new_bytes = path.read_bytes()
    rg.save(old_state, path)
    old_bytes = path.read_bytes()
    counted = _Lines(record=os.path.join("retrograd", "files.py"))
    previous = sys.gettrace()
    sys.settrace(counted)
    try:
        rg.save(new_state, path)
    finally:
        sys.settrace(previous)
    total = counted.seen
    assert 30 < len(counted.recorded) < 300, len(counted.recorded)
    rg.save(old_state, path)
    clean = _folder_state(tmp_path)
    kinds = set()

    def after(hit):
        data = path.read_bytes()
        assert data in (old_bytes, new_bytes), "the file is neither the old one nor the new"
        kinds.add("old" if data == old_bytes else "new")
        assert _folder_state(tmp_path) == clean, "an interrupted save left a file or a descriptor"
        loaded = rg.load(path)
        expected = old_state if data == old_bytes else new_state
        assert all(np.array_equal(loaded[k].numpy(), expected[k].numpy()) for k in expected)
        # the old file put back by a second save from another thread (a load where it is)
        again = (lambda: rg.load(path)) if data == old_bytes else lambda: rg.save(old_state, path)
        _finishes_in_a_thread(again)

    # every line of the file's replacing (files.atomic_write), a sample of the rest
    save = lambda: rg.save(new_state, path)  # noqa: E731
    assert _sweep(save, total, 20, seed=8, after=after, also=counted.recorded) > 0
    assert kinds == {"old", "new"}  # interrupts before the rename and after it

    total, _ = _traced(lambda: rg.load(path))

    def after_load(hit):
        assert _folder_state(tmp_path) == clean
        loaded = rg.load(path)
        assert all(np.array_equal(loaded[k].numpy(), old_state[k].numpy()) for k in old_state)

    assert _sweep(lambda: rg.load(path), total, 60, seed=9, after=after_load) > 0
    _flat_under_interrupts(lambda: rg.save(old_state, path), total, seed=8)
    assert _folder_state(tmp_path) == clean


@pytest.mark.parametrize("workers", [0, 2])
def test_an_interrupted_data_loader_iteration_leaves_the_next_one_whole(workers):
    """Iterating a DataLoader, breaking out after two batches: interrupted anywhere, the next
    iteration yields the same batches, and no worker is left running."""
    data = rg.utils.data.TensorDataset(rg.tensor(np.arange(40.0).reshape(20, 2)))
    loader = rg.utils.data.DataLoader(data, batch_size=4, num_workers=workers)
    expected = [np.arange(8.0 * k, 8.0 * k + 8).reshape(4, 2) for k in range(2)]
    threads = threading.active_count()

    def two_batches() -> list[np.ndarray]:
        out = []
        for (batch,) in loader:
            out.append(np.array(batch.numpy(), copy=True))
            if len(out) == 2:
                break
        return out

    def after(hit):
        got = []
        _finishes_in_a_thread(lambda: got.extend(two_batches()))
        assert all(np.array_equal(a, b) for a, b in zip(got, expected)) and len(got) == 2

    total, _ = _traced(two_batches)
    assert _sweep(two_batches, total, 40 if workers == 0 else 12, seed=10, after=after) > 0
    if workers == 0:
        _flat_under_interrupts(two_batches, total, seed=10)
    else:
        import multiprocessing

        for child in multiprocessing.active_children():
            child.join(timeout=10)
        assert not multiprocessing.active_children(), "a worker was left running"
    assert threading.active_count() <= threads + 1  # (a finished checker thread may linger)


@pytest.mark.parametrize("name", ["sgd-momentum", "adam"])
def test_an_interrupted_replay_of_a_captured_step_leaves_the_next_replay_right(name):
    """A captured training step interrupted while replaying: no lock is held, and the replay
    after it steps from whatever state the interrupt left as an eager step from that state
    does, bit for bit."""
    model = _model()
    optimizer = OPTIMIZERS[name](model.parameters())
    x, y = rg.tensor(_X), rg.tensor(_Y)

    def train_step(x, y):
        loss = F.mse_loss(model(x), y)
        optimizer.step(loss.backward())
        return loss

    step = rg.capture(train_step, x, y, state=[optimizer])
    step(x, y)
    params = list(model.parameters())
    total, _ = _traced(lambda: step(x, y))

    def eager_from_here() -> list[np.ndarray]:
        """The parameters after one eager step from the present state, the state put back."""
        twin = _model()
        twin_optimizer = OPTIMIZERS[name](twin.parameters())
        twin.load_state_dict(model.state_dict())
        twin_optimizer.load_state_dict(optimizer.state_dict())
        twin_optimizer.step(F.mse_loss(twin(x), y).backward())
        return _values(twin.parameters())

    def after(hit):
        before = _values(params)
        expected = eager_from_here()
        _finishes_in_a_thread(lambda: step(x, y))
        got = _values(params)
        # a replay is the eager step's arithmetic, bit for bit (docs/capture.md)
        assert all(np.array_equal(a, b) for a, b in zip(got, expected))
        assert not all(np.array_equal(a, b) for a, b in zip(got, before))

    assert _sweep(lambda: step(x, y), total, 40, seed=11, after=after) > 0
    _flat_under_interrupts(lambda: step(x, y), total, seed=11)
