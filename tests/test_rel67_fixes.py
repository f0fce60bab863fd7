"""The defects reliability round 67 found, each interrupted (KeyboardInterrupt, as Ctrl-C
raises it) at the line that showed it; ``test_reliability_sweep_67`` sweeps the paths.

- An optimizer step interrupted inside one parameter's update, after the fused kernel wrote
  the moments (and the value) in place but before the step count was kept, left them beside
  the previous step's count: the next step's bias correction read one step fewer. torch's
  loop advances ``state_steps[i]`` first; now so does ``Optimizer.step_parameter`` (and a
  replay's ``BoundStep``).
- ``rg.save`` to a path (``files.atomic_write``) interrupted after the temporary file was
  made but before it was guarded, as the commit began, or among the removals of the replaced
  file's hard link, left the hidden ``.NAME.*.tmp`` or ``.NAME.*.old`` file behind (and the
  temporary's open descriptor).
- ``GradScaler.update`` interrupted between its clearing of the unscaled and the stepped
  optimizers left them marked stepped with no inf check recorded: every later ``unscale_``
  and ``step`` refused, and ``update`` too; now both marks are dropped at once, as torch
  replaces its per-optimizer states.
"""

from __future__ import annotations

import linecache
import os
import sys

import numpy as np
import pytest

import retrograd as rg

nn = rg.nn
F = rg.nn.functional


class _InterruptAt:
    """A trace raising KeyboardInterrupt at the first line event of a frame of function
    ``name`` whose source line contains ``text`` (any line when ``text`` is empty)."""

    def __init__(self, name: str, text: str = ""):
        self.name, self.text, self.fired = name, text, False

    def __call__(self, frame, event, arg):
        if self.fired:
            return None
        if event == "call":
            return self if frame.f_code.co_name == self.name else None
        if event == "line":
            line = linecache.getline(frame.f_code.co_filename, frame.f_lineno)
            if self.text in line:
                self.fired = True
                raise KeyboardInterrupt
        return self


def _interrupted(call, name: str, text: str = "") -> bool:
    trace, previous = _InterruptAt(name, text), sys.gettrace()
    sys.settrace(trace)
    try:
        call()
    except KeyboardInterrupt:
        pass
    finally:
        sys.settrace(previous)
    return trace.fired


def _model() -> nn.Module:
    rg.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 3), nn.Tanh(), nn.Linear(3, 2))


_X = np.random.default_rng(3).standard_normal((5, 4)).astype(np.float32)
_Y = np.random.default_rng(4).standard_normal((5, 2)).astype(np.float32)


def _loss(model):
    return F.mse_loss(model(rg.tensor(_X)), rg.tensor(_Y))


def _first_state(optimizer, model) -> dict:
    parameter = next(iter(model.parameters()))
    return {k: np.array(v.numpy(), copy=True) for k, v in optimizer.state[parameter].items()}


@pytest.mark.parametrize("replayed", [False, True], ids=["eager", "replay"])
def test_a_step_interrupted_as_its_state_is_kept_has_counted_the_step(replayed):
    """Interrupted where the first parameter's new state is kept (``keep_state``'s first
    line): the moments the update wrote in place stand beside the new count, as torch's
    ``step_t += 1`` comes before them, or the state is the old one whole."""
    model = _model()
    optimizer = rg.optim.Adam(model.parameters(), lr=0.1)

    def train_step(x, y):
        loss = F.mse_loss(model(x), y)
        optimizer.step(loss.backward())
        return loss

    x, y = rg.tensor(_X), rg.tensor(_Y)
    if replayed:
        step = rg.capture(train_step, x, y, state=[optimizer])
        step(x, y)
        call = lambda: step(x, y)  # noqa: E731
    else:
        train_step(x, y)
        train_step(x, y)
        call = lambda: train_step(x, y)  # noqa: E731
    before = _first_state(optimizer, model)
    assert _interrupted(call, "keep_state")
    now = _first_state(optimizer, model)
    moments_moved = not np.array_equal(now["exp_avg"], before["exp_avg"])
    assert moments_moved, "the moments were not written in place: nothing to check here"
    assert now["step"] == before["step"] + 1, "the moments moved beside the old step count"
    # and the optimizer steps on from there
    call()
    assert _first_state(optimizer, model)["step"] == before["step"] + 2


def _left(folder) -> list[str]:
    return sorted(os.listdir(folder))


def _descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts descriptors in /proc")
@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("_temporary", "fchmod("),  # the temporary made, not yet guarded
        ("commit", ""),  # the commit begun, its renames not yet guarded
        ("_keep_old", "return kept"),  # the replaced file's link made, not yet returned
        ("_unlink", ""),  # all renamed, the replaced file's link being removed
    ],
)
def test_a_save_interrupted_leaves_no_hidden_file_and_no_descriptor(tmp_path, name, text):
    path = tmp_path / "model.pt"
    old = {"w": rg.ones(3)}
    rg.save(old, path)
    old_bytes = path.read_bytes()
    descriptors = _descriptors()
    assert _interrupted(lambda: rg.save({"w": rg.zeros(3)}, path), name, text)
    assert _left(tmp_path) == ["model.pt"], "an interrupted save left a hidden file"
    assert _descriptors() == descriptors, "an interrupted save left a descriptor open"
    data = path.read_bytes()
    saved = rg.load(path)["w"].numpy()
    # the old file whole, or the new one (the interrupt came after the rename)
    assert (data == old_bytes and np.array_equal(saved, np.ones(3))) or np.array_equal(
        saved, np.zeros(3)
    )


class _InterruptInUpdate:
    """A trace raising KeyboardInterrupt at the ``line``-th line run by ``GradScaler.update``."""

    def __init__(self, line: int):
        self.left = line

    def __call__(self, frame, event, arg):
        if event == "call":
            code = frame.f_code
            inside = code.co_name == "update" and code.co_filename.endswith("amp.py")
            return self if inside else None
        if event == "line":
            self.left -= 1
            if self.left == 0:
                raise KeyboardInterrupt
        return self


def test_a_grad_scaler_update_interrupted_anywhere_leaves_the_next_iteration_running():
    model = _model()
    optimizer = rg.optim.SGD(model.parameters(), lr=0.1)
    scaler = rg.amp.GradScaler("cpu", init_scale=2.0**8)

    def up_to_step():
        grads = scaler.scale(_loss(model)).backward()
        scaler.unscale_(optimizer, grads)
        scaler.step(optimizer, grads)

    interrupted = 0
    for line in range(1, 30):
        up_to_step()
        trace, previous = _InterruptInUpdate(line), sys.gettrace()
        sys.settrace(trace)
        try:
            scaler.update()
        except KeyboardInterrupt:
            interrupted += 1
        finally:
            sys.settrace(previous)
        try:  # the loop goes on as torch's: the update again, where one is due
            scaler.update()
        except rg.errors.ScalerOrderError as error:
            assert "no inf checks were recorded" in str(error)
        up_to_step()  # the next iteration runs
        scaler.update()
    assert interrupted > 3
