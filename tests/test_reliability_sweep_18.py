"""Round 18 of the reliability sweep: concurrency, determinism and resources, which rounds 13 to
17 (bad input, damaged files, interrupts, saved state, distributed misuse, memory over loops)
did not cover.

* Concurrency: Python threads training models of their own at once (on backends of their own,
  and on one shared default backend, under each checkpointing strategy), threads taking
  gradients of one shared model, a backward running while another thread builds a graph, a
  ``no_grad`` evaluation beside training, gradient penalties (``create_graph``) on several
  threads, a capture inside a captured step: no error, no hang (every join has a deadline), and
  every loss, gradient and parameter equal bit for bit to the run on one thread. Which of
  ``no_grad``/``enable_grad``/``inference_mode``, the default dtype, ``manual_seed``, anomaly
  mode and deterministic algorithms hold per thread is asked of torch and checked the same.
* Determinism: one seeded program (retrograd's RNG for the parameters, dropout and data) gives
  the same bits in two fresh interpreters and in this one, under each checkpointing strategy,
  and when model, optimizer, scheduler and RNG state go through ``rg.save``/``rg.load``
  mid-run; ``retrograd train --resume`` (another strategy, another process) ends where the
  uninterrupted run ends.
* Resources: ``rg.save``/``rg.load``/``load_state_dict`` successes and failures leave no file
  descriptor open (counted in ``/proc/self/fd`` with the collector off) and no temporary file;
  ``DataLoader(num_workers=2)`` (read in this process) starts no thread and no process, on a
  break, an error or when dropped; ``rg.multiprocessing.spawn`` reaps every process, when one
  fails and when none does; the threads of a ``DistributedContext`` and of
  ``retrograd train --workers 2`` end with them.

Found (``tests/test_reliability_regressions_18.py``): overlapping captures on two threads
restored each other's recording wrappers (a backend left recording and refusing host reads,
steps trained wrong); threads compiling one fused kernel wrote its file under one temporary
name; ``load_state_dict`` of a damaged ``.npz`` and ``get_unsafe_globals_in_checkpoint`` left
their file open; a failed ``rg.multiprocessing.spawn`` kept its error queues' pipes open.
"""

from __future__ import annotations

import gc
import io
import json
import multiprocessing
import os
import subprocess
import sys
import threading
import warnings
from contextlib import redirect_stdout
from pathlib import Path

import numpy as np
import pytest
import torch

import retrograd as rg
import retrograd.nn.functional as F  # noqa: N812 (torch's name)
from concurrency_cases import (
    DEADLINE,
    STRATEGIES,
    assert_same_run,
    fresh_backend,
    mlp,
    open_files,
    other_threads,
    run_in_threads,
    seeded_net,
    train,
)
from retrograd import distributed as dist
from retrograd import nn
from retrograd.utils.data import DataLoader, TensorDataset

SRC = str(Path(rg.__file__).resolve().parents[1])


# -- concurrency ---------------------------------------------------------------------------------
def test_threads_training_models_on_backends_of_their_own_match_one_thread():
    # three threads, one per checkpointing strategy, each on its own autodiff backend
    backends = [fresh_backend(s) for s in STRATEGIES]
    alone = [train(i, backends[i], steps=3) for i in range(3)]
    together = run_in_threads(lambda i: train(i, backends[i], steps=3), [(i,) for i in range(3)])
    for i, strategy in enumerate(STRATEGIES):
        assert_same_run(together[i], alone[i], f"thread {i} ({strategy})")


@pytest.mark.parametrize("strategy", list(STRATEGIES))
def test_threads_training_on_one_shared_default_backend_match_one_thread(strategy):
    # the default backend every thread reaches without use_backend: one strategy instance
    # (its op timer, its budget tables) serves three training loops at once
    shared = fresh_backend(strategy)
    previous = rg.default_backend()
    rg.set_default_backend(shared)
    try:
        alone = [train(i, steps=2, make=mlp) for i in range(3)]
        together = run_in_threads(lambda i: train(i, steps=2, make=mlp), [(i,) for i in range(3)])
    finally:
        rg.set_default_backend(previous)
    for i in range(3):
        assert_same_run(together[i], alone[i], f"thread {i}")


def _gradients(model, x, y):
    loss = F.cross_entropy(model(x), y)
    grads = loss.backward()
    return [p.grad(grads).numpy().copy() for p in model.parameters()]


@pytest.mark.parametrize("strategy", list(STRATEGIES))
def test_threads_differentiating_one_shared_model_get_their_own_gradients(strategy):
    with rg.use_backend(fresh_backend(strategy)):
        model = seeded_net(7)
        gen = np.random.default_rng(7)
        data = [
            (
                rg.tensor(gen.standard_normal((4, 2, 6, 6)).astype(np.float32)),
                rg.tensor(gen.integers(0, 3, 4)),
            )
            for _ in range(3)
        ]
        expected = [_gradients(model, x, y) for x, y in data]

        def repeatedly(x, y):
            return [_gradients(model, x, y) for _ in range(2)]

        got = run_in_threads(repeatedly, data)
    for i, runs in enumerate(got):
        for run in runs:
            for g, h in zip(run, expected[i], strict=True):
                np.testing.assert_array_equal(g, h, err_msg=f"thread {i}")


@pytest.mark.parametrize("strategy", list(STRATEGIES))
def test_threads_taking_gradient_penalties_of_one_model_match_one_thread(strategy):
    # a create_graph backward and a backward through it, on one backend, by several threads
    backend = fresh_backend(strategy)
    with rg.use_backend(backend):
        model = seeded_net(0, mlp)

    def penalty(seed):
        with rg.use_backend(backend):
            gen = np.random.default_rng(seed)
            x = rg.tensor(gen.standard_normal((4, 2, 6, 6)).astype(np.float32)).require_grad()
            (gx,) = rg.autograd.grad(model(x).pow(2).sum(), x, create_graph=True)
            grads = gx.pow(2).sum().backward()
            return [p.grad(grads).numpy() for p in model.parameters()]

    expected = [penalty(seed) for seed in range(3)]
    got = run_in_threads(penalty, [(seed,) for seed in range(3)])
    for seed in range(3):
        for g, h in zip(got[seed], expected[seed], strict=True):
            np.testing.assert_array_equal(g, h, err_msg=f"thread {seed}")


def test_a_backward_runs_while_another_thread_builds_and_drops_graphs():
    backend = fresh_backend("balanced")
    with rg.use_backend(backend):
        model = seeded_net(3)
        x = rg.tensor(np.random.default_rng(3).standard_normal((4, 2, 6, 6)).astype(np.float32))
        y = rg.tensor(np.array([0, 1, 2, 0]))
        expected = _gradients(model, x, y)
    done = threading.Event()

    def builder():
        with rg.use_backend(backend):
            built = 0
            while not done.is_set() or built < 2:
                out = model(x * 0.5).sum()  # a graph on the same parameters, never differentiated
                assert out.requires_grad
                del out
                built += 1
            return built

    def differentiator():
        try:
            with rg.use_backend(backend):
                return [_gradients(model, x, y) for _ in range(3)]
        finally:
            done.set()

    built, runs = run_in_threads(lambda f: f(), [(builder,), (differentiator,)])
    assert built >= 2
    for run in runs:
        for g, h in zip(run, expected, strict=True):
            np.testing.assert_array_equal(g, h)


def test_no_grad_evaluation_on_one_thread_does_not_untrack_training_on_another():
    backend = fresh_backend()
    training_started = threading.Event()

    def evaluate():
        with rg.use_backend(backend):
            model = seeded_net(5)
            x = rg.ones((2, 2, 6, 6))
            assert training_started.wait(DEADLINE)
            outputs = []
            for _ in range(4):
                with rg.no_grad():
                    outputs.append(model(x).requires_grad)
            return outputs

    def training():
        training_started.set()
        return train(1, backend, steps=3)

    evaluated, trained = run_in_threads(lambda f: f(), [(evaluate,), (training,)])
    assert evaluated == [False] * 4
    assert_same_run(trained, train(1, backend, steps=3), "training beside no_grad")


def _nested_capture_run(replay: bool) -> list:
    """Two steps of a step that itself captures another model's step (whose capture trains it
    once, eagerly): both eagerly, or captured and replayed once."""
    with rg.use_backend(fresh_backend()):
        first, second = seeded_net(1, mlp), seeded_net(2, mlp)
        opt1 = rg.optim.SGD(first.parameters(), lr=0.1)
        opt2 = rg.optim.SGD(second.parameters(), lr=0.1)
        x = rg.tensor(np.random.default_rng(0).standard_normal((4, 2, 6, 6)).astype(np.float32))

        def inner(x):
            loss = second(x).pow(2).mean()
            opt2.step(loss.backward())
            return loss

        def outer(x):
            rg.capture(inner, x, state=[opt2])
            loss = first(x).pow(2).mean()
            opt1.step(loss.backward())
            return loss

        step = rg.capture(outer, x, state=[opt1, opt2]) if replay else outer
        losses = [outer(x).item() if not replay else None, step(x).item()]
        if replay:
            losses[0] = step.result.item()
        return losses + [p.detach().numpy() for m in (first, second) for p in m.parameters()]


def test_a_capture_inside_a_captured_step_is_recorded_by_both():
    # the inner capture's own run is part of the outer step: its replay trains both models
    eager, replayed = _nested_capture_run(False), _nested_capture_run(True)
    assert eager[:2] == replayed[:2]
    for p, q in zip(eager[2:], replayed[2:], strict=True):
        np.testing.assert_array_equal(p, q)


def _in_another_thread(query):
    out = []
    thread = threading.Thread(target=lambda: out.append(query()), daemon=True)
    thread.start()
    thread.join(DEADLINE)
    assert not thread.is_alive()
    return out[0]


def _draws_after_seeding_elsewhere(seed_fn, draw):
    seed_fn(11)
    theirs = _in_another_thread(draw)
    seed_fn(11)
    return theirs == draw()


#: (what, torch's (context or setter, undo, query), retrograd's): whether another thread sees
#: the setting is asked of torch and compared with retrograd's answer
_SETTINGS = {
    "no_grad": (
        (torch.no_grad, None, torch.is_grad_enabled),
        (rg.no_grad, None, rg.is_grad_enabled),
    ),
    "set_grad_enabled(False) called": (
        (
            lambda: torch.set_grad_enabled(False),
            lambda: torch.set_grad_enabled(True),
            torch.is_grad_enabled,
        ),
        (lambda: rg.set_grad_enabled(False), lambda: rg.set_grad_enabled(True), rg.is_grad_enabled),
    ),
    "enable_grad inside no_grad": (
        (torch.enable_grad, None, torch.is_grad_enabled),
        (rg.enable_grad, None, rg.is_grad_enabled),
    ),
    "inference_mode": (
        (torch.inference_mode, None, torch.is_grad_enabled),
        (rg.inference_mode, None, rg.is_grad_enabled),
    ),
    "detect_anomaly": (
        (torch.autograd.detect_anomaly, None, torch.is_anomaly_enabled),
        (rg.autograd.detect_anomaly, None, rg.autograd.is_anomaly_enabled),
    ),
    "set_default_dtype(float64)": (
        (
            lambda: torch.set_default_dtype(torch.float64),
            lambda: torch.set_default_dtype(torch.float32),
            lambda: str(torch.get_default_dtype()),
        ),
        (
            lambda: rg.set_default_dtype(rg.float64),
            lambda: rg.set_default_dtype(rg.float32),
            lambda: "torch." + str(rg.get_default_dtype()),
        ),
    ),
    "use_deterministic_algorithms(True)": (
        (
            lambda: torch.use_deterministic_algorithms(True),
            lambda: torch.use_deterministic_algorithms(False),
            torch.are_deterministic_algorithms_enabled,
        ),
        (
            lambda: rg.use_deterministic_algorithms(True),
            lambda: rg.use_deterministic_algorithms(False),
            rg.are_deterministic_algorithms_enabled,
        ),
    ),
}


def _seen_elsewhere(setting, undo, query, outer):
    """The value ``query`` gives on a new thread while ``setting`` holds here (inside
    ``outer``'s block, which may be ``None``)."""
    with outer() if outer is not None else _nothing():
        if undo is None:
            with setting():
                return query(), _in_another_thread(query)
        setting()
        try:
            return query(), _in_another_thread(query)
        finally:
            undo()


class _nothing:  # noqa: N801 (a context manager)
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


@pytest.mark.parametrize("what", list(_SETTINGS))
def test_which_settings_hold_per_thread_is_torchs(what):
    (t_set, t_undo, t_query), (r_set, r_undo, r_query) = _SETTINGS[what]
    t_outer = torch.no_grad if what == "enable_grad inside no_grad" else None
    r_outer = rg.no_grad if what == "enable_grad inside no_grad" else None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # anomaly mode's "will increase the runtime"
        expected = _seen_elsewhere(t_set, t_undo, t_query, t_outer)
        got = _seen_elsewhere(r_set, r_undo, r_query, r_outer)
    assert got == expected, f"{what}: (here, on another thread) {got}, torch's {expected}"


def test_manual_seed_is_the_whole_process_s_as_torch_s():
    torch_shared = _draws_after_seeding_elsewhere(torch.manual_seed, lambda: torch.rand(3).tolist())
    assert torch_shared  # torch: one default generator for every thread
    assert _draws_after_seeding_elsewhere(rg.manual_seed, lambda: rg.rand(3).tolist())


def test_sdpa_kernel_selection_is_per_thread_on_purpose():
    # Deliberately not torch's (whose selection is process-wide flags): retrograd's selection
    # computes nothing differently, and a block on one thread must not be ended, or seen, by
    # another thread's block ending (torch's flags are restored by whichever block exits last)
    from retrograd.nn.attention import SDPBackend, enabled_backends, sdpa_kernel

    everything = enabled_backends()
    with sdpa_kernel(SDPBackend.MATH):
        assert enabled_backends() == [SDPBackend.MATH]
        assert _in_another_thread(enabled_backends) == everything


# -- determinism --------------------------------------------------------------------------------
_PROGRAM = """
import hashlib, io
import retrograd as rg
from retrograd import nn
import retrograd.nn.functional as F

def run(strategy, split=None, inner=rg.NumpyBackend):
    backend = rg.Autodiff(inner(), checkpointing=strategy)
    with rg.use_backend(backend):
        rg.manual_seed(1234)
        def build():
            return nn.Sequential(nn.Linear(6, 16), nn.GELU(), nn.Dropout(0.3), nn.LayerNorm(16),
                                 nn.Linear(16, 16), nn.Tanh(), nn.Dropout(0.2), nn.Linear(16, 3))
        def optimizer(model):
            opt = rg.optim.AdamW(model.parameters(), lr=0.01)
            return opt, rg.optim.lr_scheduler.StepLR(opt, 2, gamma=0.5)
        model = build()
        opt, sched = optimizer(model)
        digest = hashlib.sha256()
        for step in range(5):
            if step == split:
                file = io.BytesIO()
                rg.save({"model": model.state_dict(), "opt": opt.state_dict(),
                         "sched": sched.state_dict(), "rng": rg.get_rng_state()}, file)
                rg.manual_seed(99)
                rg.rand(7)  # the generator moves on, as a real resume finds it
                model = build()
                opt, sched = optimizer(model)
                file.seek(0)
                state = rg.load(file)
                model.load_state_dict(state["model"])
                opt.load_state_dict(state["opt"])
                sched.load_state_dict(state["sched"])
                rg.set_rng_state(state["rng"])
            x = rg.randn(10, 6)
            y = rg.randint(0, 3, (10,))
            loss = F.cross_entropy(model(x), y)
            grads = loss.backward()
            digest.update(loss.numpy().tobytes())
            for p in model.parameters():
                digest.update(p.grad(grads).numpy().tobytes())
            opt.step(grads)
            sched.step()
        for p in model.parameters():
            digest.update(p.detach().numpy().tobytes())
        return digest.hexdigest()
"""
_namespace: dict = {}
exec(compile(_PROGRAM, "<seeded program>", "exec"), _namespace)
_run_program = _namespace["run"]


def _inner_kind():
    return type(rg.default_backend().inner)


def test_a_seeded_program_gives_the_same_bits_in_two_fresh_processes():
    inner = _inner_kind()
    here = _run_program(rg.NoCheckpointing(), inner=inner)
    script = f"{_PROGRAM}\nprint(run(rg.NoCheckpointing(), inner=rg.{inner.__name__}))\n"
    count = 2
    if inner is not rg.NumpyBackend:
        # torch's CPU layer norm backward sums its weight's gradient per thread: its bits
        # depend on torch's thread count (torch's own autograd's too), so the process gets
        # this one's; one fresh process only (each imports torch: seconds of CPU)
        script = f"import torch\ntorch.set_num_threads({torch.get_num_threads()})\n{script}"
        count = 1
    environment = {**os.environ, "PYTHONPATH": SRC, "OPENBLAS_NUM_THREADS": "1"}
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", script],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=environment,
        )
        for _ in range(count)
    ]
    digests = []
    for process in processes:
        out, err = process.communicate(timeout=120)
        assert process.returncode == 0, err[-2000:]
        digests.append(out.strip())
    assert digests == [here] * count


@pytest.mark.parametrize("strategy", ["balanced", "budget"])
def test_a_seeded_program_with_dropout_gives_the_same_bits_under_each_strategy(strategy):
    inner = _inner_kind()
    expected = _run_program(rg.NoCheckpointing(), inner=inner)
    assert _run_program(STRATEGIES[strategy](), inner=inner) == expected


@pytest.mark.parametrize("split", [1, 3])
def test_saving_and_loading_everything_mid_run_changes_no_bit(split):
    # model, optimizer, scheduler and generator through rg.save/rg.load at step ``split``
    inner = _inner_kind()
    expected = _run_program(rg.NoCheckpointing(), inner=inner)
    assert _run_program(rg.NoCheckpointing(), split, inner) == expected


_TEXT = "".join(f"def f{i}(x):\n    return x * {i % 7} + {i % 5}\n\n" for i in range(200))


def _gpt_run(text: Path, out: Path, **settings) -> dict:
    from retrograd.app.gpt import GPTTrainConfig, train_gpt

    config = GPTTrainConfig(
        text=str(text), out=str(out), n_layer=1, n_head=2, n_embd=16, block_size=8, batch_size=4,
        lr=1e-2, dropout=0.1, steps=9, eval_interval=3, eval_batches=1, sample_tokens=0,
        progress=False,
    )  # fmt: skip
    for name, value in settings.items():
        setattr(config, name, value)
    return train_gpt(config, echo=lambda *args: None)


@pytest.mark.numpy_only(
    "the command picks its inner backend by --backend, not the suite's RETROGRAD_INNER"
)
def test_train_resumed_twice_under_other_strategies_and_in_another_process_ends_as_one_run(
    tmp_path,
):
    text = tmp_path / "code.txt"
    text.write_text(_TEXT)
    whole, parts = tmp_path / "whole", tmp_path / "parts"
    expected = _gpt_run(text, whole)
    _gpt_run(text, parts, stop_at=3)
    _gpt_run(text, parts, stop_at=6, resume=True, checkpointing="balanced")
    environment = {**os.environ, "PYTHONPATH": SRC, "OPENBLAS_NUM_THREADS": "1"}
    resume = ["train", "--model", "gpt", "--resume", "--out", str(parts), "--no-progress"]
    done = subprocess.run(
        [sys.executable, "-m", "retrograd", *resume, "--checkpointing", "budget:16KB"],
        capture_output=True, text=True, env=environment, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert "resumed at step 6" in done.stdout
    got = json.loads((parts / "metrics.json").read_text())
    assert got["step_losses"] == expected["step_losses"]  # bit for bit
    assert got["evals"][-1]["val_loss"] == expected["evals"][-1]["val_loss"]
    assert [e["step"] for e in got["evals"]] == [3, 6, 9]


# -- resources -----------------------------------------------------------------------------------
class _Unpicklable:
    def __reduce__(self):
        raise RuntimeError("refuses to be pickled")


def _save_and_load_attempts(folder: Path) -> list:
    model = nn.Linear(3, 2)
    good = folder / "good.pt"
    attempts = [
        lambda: rg.save({"model": model.state_dict()}, good),
        lambda: rg.load(good),
        lambda: rg.load(good, weights_only=True),
        lambda: model.save(folder / "model.npz") if hasattr(model, "save") else None,
        lambda: rg.save({"a": _Unpicklable()}, folder / "unpicklable.pt"),
        lambda: rg.save({"a": 1}, folder),  # a folder
        lambda: rg.save({"a": 1}, folder / "missing" / "x.pt"),
        lambda: rg.save({"f": lambda: 1}, folder / "function.pt"),
    ]
    data = good.read_bytes() if good.exists() else b""
    for name, content in {
        "truncated.pt": data[: len(data) // 2],
        "empty.pt": b"",
        "text.pt": b"not an archive at all\n" * 4,
    }.items():
        path = folder / name
        path.write_bytes(content)
        attempts += [
            lambda p=path: rg.load(p),
            lambda p=path: model.load_state_dict(str(p)),
            lambda p=path: rg.serialization.get_unsafe_globals_in_checkpoint(str(p)),
        ]
    return attempts


def test_saving_and_loading_leave_no_descriptor_and_no_temporary_file(tmp_path):
    rg.save({"warm": rg.ones(1)}, tmp_path / "warm.pt")  # first-use imports open their files
    rg.load(tmp_path / "warm.pt")
    _save_and_load_attempts(tmp_path)  # writes good.pt
    attempts = _save_and_load_attempts(tmp_path)
    kept = []
    gc.disable()
    try:
        before = open_files()
        for attempt in attempts:
            try:
                attempt()
            except Exception as error:  # kept, as a notebook keeps its last error
                kept.append(error)
        assert open_files() == before
    finally:
        gc.enable()
    assert len(kept) >= 12  # the failures did fail
    left = sorted(p.name for p in tmp_path.rglob("*") if p.name.startswith("."))
    assert left == []  # no staged temporary file (".name.xxxx.tmp") left behind


def _loader(workers: int, **options) -> DataLoader:
    data = TensorDataset(rg.arange(0, 40).float().reshape(20, 2), rg.arange(0, 20))
    return DataLoader(data, batch_size=3, num_workers=workers, shuffle=True, **options)


@pytest.mark.parametrize("persistent", [False, True])
def test_a_data_loader_with_workers_leaves_no_thread_process_or_descriptor(persistent):
    threads, files = other_threads(), open_files()
    children = multiprocessing.active_children()  # (an earlier test's torch workers, if any)
    loader = _loader(2, persistent_workers=persistent)
    for index, _ in enumerate(loader):  # a break
        if index == 1:
            break
    with pytest.raises(RuntimeError, match="in the loop"):
        for _ in loader:  # an error in the loop's body
            raise RuntimeError("in the loop")
    iterator = iter(loader)  # an iterator dropped half-way
    next(iterator)
    del iterator, loader
    gc.collect()
    assert other_threads() == threads
    assert multiprocessing.active_children() == children
    assert open_files() == files


def _rank_body(rank, failing):
    if rank == failing:
        raise ValueError(f"rank {rank} fails")
    if failing >= 0:
        threading.Event().wait(30)  # stopped by the parent when the failing rank fails


@pytest.mark.parametrize("failing", [-1, 0, 2])
def test_spawned_processes_are_all_reaped_when_one_fails_or_none(failing):
    import retrograd.multiprocessing as rmp

    children = multiprocessing.active_children()  # (an earlier test's torch workers, if any)
    context = rmp.spawn(_rank_body, args=(failing,), nprocs=3, join=False, start_method="fork")
    pids = context.pids()
    if failing < 0:
        while not context.join(DEADLINE):
            pass
    else:
        with pytest.raises(rmp.ProcessRaisedException, match=f"rank {failing} fails"):
            while not context.join(DEADLINE):
                pass
    assert multiprocessing.active_children() == children
    for pid in pids:  # reaped: no zombie left under this process
        assert not Path(f"/proc/{pid}").exists() or "Z" not in _state_of(pid)


def _state_of(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except OSError:  # gone between the check and the read
        return ""


def test_a_distributed_context_s_threads_end_with_it():
    threads = other_threads()
    devices = [rg.Device("cpu", i) for i in range(2)]
    with dist.DistributedContext(devices, dist.DistributedConfig(timeout=10.0)):
        assert len(other_threads()) > len(threads)  # its sync server
    with (
        pytest.raises(RuntimeError, match="inside"),
        dist.DistributedContext(devices, dist.DistributedConfig(timeout=10.0)),
    ):
        raise RuntimeError("inside")
    context = dist.DistributedContext(devices, dist.DistributedConfig(timeout=10.0)).start()
    context.close()
    assert other_threads() == threads


@pytest.mark.numpy_only(
    "the command picks its inner backend by --backend, not the suite's RETROGRAD_INNER"
)
def test_train_with_two_workers_leaves_no_thread(tmp_path):
    from retrograd.app.cli import main

    threads = other_threads()
    args = ["train", "--model", "mlp", "--epochs", "1", "--workers", "2", "--no-progress"]
    args += ["--max-train-samples", "16", "--max-test-samples", "8", "--batch-size", "8"]
    args += ["--out", str(tmp_path)]
    with redirect_stdout(io.StringIO()):
        assert main([*args, "--overwrite"]) == 0
    assert other_threads() == threads
