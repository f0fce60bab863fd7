"""Distributed data parallel over ``torch.distributed`` (the ``torch`` engine, gloo): scripts of
``tests/torch_scripts`` run under ``torchrun --standalone --nproc_per_node 2`` from pytest,
each launch with a subprocess timeout past which the whole job is killed; each rank writes a
JSON report. Plus the buffers the engines reduce, on torch tensors, and the engine's errors.

Skipped only where torch is not installed (it is a dev dependency: CI runs these).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch", reason='torch is not installed: pip install -e ".[dev]"')

import torch

import retrograd as rg
from backends import on_torch
from retrograd import distributed as dist
from retrograd.distributed import buffers, launch
from scripts_in_turn import folder_name
from zero_cases import check_reports

#: under pytest-xdist, one launch at a time: the timeouts below are sized for that
pytestmark = pytest.mark.xdist_group("torchrun")

SCRIPTS = Path(__file__).parent / "torch_scripts"
LAUNCH_SECONDS = 120.0


def run_ranks(script, *args, tmp_path, ranks=2, timeout=LAUNCH_SECONDS):
    """Run ``script args... OUT`` under torchrun; (completed process, {rank: report})."""
    env = dict(os.environ)
    source = str(Path(rg.__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [source, env.get("PYTHONPATH")]))
    env.update(OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    started = time.monotonic()
    completed = launch.run(
        ranks,
        [str(SCRIPTS / script), *map(str, args), str(tmp_path)],
        timeout=timeout,
        env=env,
        engine="torch",
    )
    completed.wall = time.monotonic() - started
    reports = {}
    for path in tmp_path.rglob("rank*.json"):
        report = json.loads(path.read_text())
        reports.setdefault(path.parent.name, {})[report["rank"]] = report
    return completed, reports


def output(completed) -> str:
    return f"exit {completed.returncode}\nstdout:\n{completed.stdout}\nstderr:\n{completed.stderr}"


class InTurn:
    """One launch of several scripts in turn (``tests/scripts_in_turn.py``): the launch, and
    each script's reports in its own folder."""

    def __init__(self, completed, out: Path):
        self.completed, self.out = completed, out

    def reports(self, entry: str) -> dict:
        """``{folder: {rank: report}}`` of ``entry``'s script, as ``run_ranks`` gives them."""
        reports: dict = {}
        for path in (self.out / folder_name(entry)).rglob("rank*.json"):
            report = json.loads(path.read_text())
            reports.setdefault(path.parent.name, {})[report["rank"]] = report
        return reports

    def output(self, entry: str) -> str:
        """The launch's output, and what the entry's script raised on each rank."""
        raised = sorted((self.out / folder_name(entry)).glob("rank*.error"))
        return output(self.completed) + "".join(
            f"\n{path.name}:\n{path.read_text()}" for path in raised
        )


def run_in_turn(entries, out: Path, ranks: int) -> InTurn:
    """The scripts ``entries`` (paths relative to tests/) in turn, in one torchrun launch."""
    completed, _ = run_ranks(
        Path("..") / "scripts_in_turn.py",
        *entries,
        tmp_path=out,
        ranks=ranks,
        timeout=LAUNCH_SECONDS + 30.0 * len(entries),
    )
    return InTurn(completed, out)


def run_in_turn_by_the_launch_cli(entries, out: Path) -> InTurn:
    """``run_in_turn(entries, out, 2)`` started by the launch CLI, ``python -m
    retrograd.distributed.launch -n 2 --engine torch``, as a user starts a program (the CLI
    starts torchrun), rather than by ``launch.run``; past the timeout the whole job is killed."""
    env = dict(os.environ)
    source = str(Path(rg.__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [source, env.get("PYTHONPATH")]))
    env.update(OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    command = [sys.executable, "-m", "retrograd.distributed.launch", "-n", "2"]
    command += ["--engine", "torch", str(Path(__file__).parent / "scripts_in_turn.py")]
    command += [*entries, str(out)]
    started = time.monotonic()
    process = subprocess.Popen(
        command,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group: a timeout takes torchrun and ranks
    )
    try:
        stdout, stderr = process.communicate(timeout=LAUNCH_SECONDS + 30.0 * len(entries))
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        raise
    completed = subprocess.CompletedProcess(command, process.returncode, stdout, stderr)
    completed.wall = time.monotonic() - started
    return InTurn(completed, out)


FAULT_TIMEOUT = 2.0
MISMATCH = f"torch_scripts/torch_faults.py:mismatch:{FAULT_TIMEOUT}"
#: the launch CLI's program: it starts torch's default group itself, and uses it after
OWN_GROUP = "torch_scripts/torch_own_group.py"

#: The scripts that need two ranks and nothing of their own, in one launch: each launch of its
#: own cost 7-8 s of CPU (three processes importing torch), on both of the suite's passes. The
#: mismatched registrations (a fault that leaves every rank running and the group usable) join
#: on the NumPy pass, the only one that runs their test; the tutorial-style script, which
#: starts torch's default group itself, runs after the others, and the launch CLI's program
#: (NumPy pass only too), which does as well, last: on that pass the launch CLI starts the
#: launch (a launch of its own for its test cost as much again).
TWO_RANKS = {
    "grad_checks": "torch_scripts/torch_grad_checks.py",
    "transport": "torch_scripts/torch_transport_checks.py",
    "collectives": "torch_scripts/torch_collectives.py",
    "zero": "torch_scripts/torch_zero.py",
    "train_mlp": "torch_scripts/torch_train_mlp.py",
    **({} if on_torch() else {"mismatch": MISMATCH}),
    "process_group": "torch_scripts/torch_process_group.py",
    **({} if on_torch() else {"own_group": OWN_GROUP}),
}


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory) -> InTurn:
    out = tmp_path_factory.mktemp("two_ranks")
    if on_torch():
        return run_in_turn(list(TWO_RANKS.values()), out, ranks=2)
    return run_in_turn_by_the_launch_cli(list(TWO_RANKS.values()), out)


def test_gradient_checks_over_gloo(two_ranks):
    entry = TWO_RANKS["grad_checks"]
    assert two_ranks.completed.returncode == 0, two_ranks.output(entry)
    reports = two_ranks.reports(entry).get(folder_name(entry), {})
    assert sorted(reports) == [0, 1], two_ranks.output(entry)
    for rank, report in reports.items():
        assert report["failures"] == [], f"rank {rank}: {report['failures']}"
        assert report["checks"] == 74
        assert report["devices"] == ["cpu", "cpu:1"]
        # SUM: every parameter on its own (+ the no-gradient checks' 2 x 2); MEAN: 200-byte
        # buckets fuse the MLP's 8 into 3
        assert report["buckets"] == {"SUM": 20, "MEAN": 11}


def test_the_transport_all_gathers_buffers_over_gloo(two_ranks):
    entry = TWO_RANKS["transport"]
    assert two_ranks.completed.returncode == 0, two_ranks.output(entry)
    reports = two_ranks.reports(entry).get(folder_name(entry), {})
    assert sorted(reports) == [0, 1], two_ranks.output(entry)
    for rank, report in reports.items():
        assert report["failures"] == [], f"rank {rank}: {report['failures']}"
        assert report["checks"] == 4


@pytest.mark.parametrize("ranks", [2, 3])
def test_differentiable_collectives_over_gloo(ranks, request, tmp_path):
    entry = TWO_RANKS["collectives"]
    if ranks == 2:
        launch = request.getfixturevalue("two_ranks")
    else:
        launch = run_in_turn([entry], tmp_path, ranks=ranks)
    assert launch.completed.returncode == 0, launch.output(entry)
    reports = launch.reports(entry).get(folder_name(entry), {})
    assert sorted(reports) == list(range(ranks)), launch.output(entry)
    for rank, report in reports.items():
        assert report["failures"] == [], f"rank {rank}: {report['failures']}"
        forward = 6 + (8 if ranks == 2 else 4) + 2 * ranks + 4
        assert report["checks"] == forward + 5 + 10


def test_zero_trains_as_the_wrapped_optimizer_over_gloo(two_ranks):
    entry = TWO_RANKS["zero"]
    assert two_ranks.completed.returncode == 0, two_ranks.output(entry)
    reports = two_ranks.reports(entry).get(folder_name(entry), {})
    assert sorted(reports) == [0, 1], two_ranks.output(entry)
    check_reports(reports)


def test_two_process_training_equals_full_batch_training(two_ranks):
    entry = TWO_RANKS["train_mlp"]
    assert two_ranks.completed.returncode == 0, two_ranks.output(entry)
    reports = two_ranks.reports(entry)
    assert sorted(reports) == ["buckets0", f"buckets{1 << 20}"], two_ranks.output(entry)
    for name, by_rank in reports.items():
        assert sorted(by_rank) == [0, 1], two_ranks.output(entry)
        for report in by_rank.values():
            assert report["world_size"] == 2
            assert report["steps_synced"] == 20
            # the mean of the halves' gradients: one all-reduce per parameter, or one per step
            assert report["buckets"] == (120 if name == "buckets0" else 20)
            assert report["moved"] > 0.05  # training did change the weights...
            assert report["max_difference"] < 1e-12  # ...exactly as full-batch training did
            assert report["gradient_buffers_outliving_their_step"] == 0


#: A launch whose outcome the suite's inner backend cannot change runs on the NumPy pass only:
#: a torch-suite run would repeat it (each launch imports torch in three processes, 7-8 s of
#: CPU). The failures below are found and reported by the reducer and the transport, above the
#: backend, from registrations, timeouts and closed connections; the launch CLI's script makes
#: no retrograd tensor, and ``retrograd train`` picks its backend by ``--backend``.
same_on_every_backend = pytest.mark.numpy_only(
    "the outcome does not depend on the suite's inner backend (see same_on_every_backend)"
)
#: a survivor must raise within the timeout, plus this much for scheduling on a busy machine
SLACK = 1.5


def run_fault(mode, tmp_path):
    completed, reports = run_ranks("torch_faults.py", mode, FAULT_TIMEOUT, tmp_path=tmp_path)
    reports = reports.get(tmp_path.name, {})
    assert 0 in reports, output(completed)
    report = reports[0]
    assert report["elapsed"] < FAULT_TIMEOUT + SLACK, report
    assert completed.wall < 60.0
    return completed, report, reports


@same_on_every_backend
def test_a_rank_that_dies_fails_the_survivor_before_torchrun_stops_it(tmp_path):
    # torchrun stops the survivor with SIGTERM 0.1 s after rank 1 died: waiting on rank 1's
    # registration, it raises DistributedError instead of vanishing
    completed, report, _ = run_fault("exit", tmp_path)
    assert completed.returncode != 0  # the job reports the dead rank
    error = report["error"]
    assert "rank 1 never registered" in error, error
    assert "rank 1 has exited" in error, error


@same_on_every_backend
def test_a_rank_that_dies_inside_backward_fails_the_survivor(tmp_path):
    completed, report, _ = run_fault("die_in_backward", tmp_path)
    assert completed.returncode != 0
    error = report["error"]
    assert "rank 1 has exited" in error, error
    # gloo sees the connection close (or, if the timeout comes first, the stalled parameter;
    # if torchrun stops rank 0 first, its error names the bucket it was waiting on)
    assert "gradient bucket 2 of backward step 2" in error or "parameter 'w'" in error, error


@same_on_every_backend
def test_a_rank_that_never_calls_backward_fails_the_survivor_within_the_timeout(tmp_path):
    completed, report, _ = run_fault("no_backward", tmp_path)
    assert completed.returncode != 0
    error = report["error"]
    assert "rank 1 never registered its distributed parameters" in error, error
    assert "rank 1 is alive" in error and "not in a backward" in error, error
    assert report["elapsed"] > FAULT_TIMEOUT - 0.1  # it did wait for rank 1, the timeout


@same_on_every_backend
def test_a_rank_that_never_creates_its_context_fails_the_others_within_the_timeout(tmp_path):
    _, report, _ = run_fault("no_context", tmp_path)
    assert "rank 1 did not create its DistributedContext within 2 s" in report["error"]


@same_on_every_backend
def test_mismatched_parameter_sets_fail_every_rank_at_once_and_the_next_step_works(two_ranks):
    # run_fault's checks, on the launch of TWO_RANKS (the scripts after this one ran too)
    entry, completed = TWO_RANKS["mismatch"], two_ranks.completed
    reports = two_ranks.reports(entry).get(folder_name(entry), {})
    assert 0 in reports, two_ranks.output(entry)
    assert reports[0]["elapsed"] < FAULT_TIMEOUT + SLACK, reports[0]
    assert completed.wall < 60.0
    assert completed.returncode == 0, two_ranks.output(entry)  # no collective ran: usable
    for rank in (0, 1):
        report = reports[rank]
        assert "parameter 'extra' is registered on rank 1 but not on rank 0" in report["error"]
        assert report["elapsed"] < 1.0  # found from the registrations, not by waiting
        assert report["next_step"] == [[40.0] * 3] * 3


# -- in this process ------------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_one_rank_without_torchrun_hosts_its_store_and_trains(monkeypatch):
    """``RANK``/``WORLD_SIZE``/``MASTER_*`` set by hand (no torchelastic agent): rank 0 hosts
    the store, as ``init_method="env://"`` does."""
    for name in ("TORCHELASTIC_USE_AGENT_STORE", "TORCHELASTIC_RUN_ID", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "1")
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(free_port()))
    config = dist.DistributedConfig(dist.ReduceOperation.MEAN, timeout=20.0)
    with dist.DistributedContext.from_launcher(config, engine="torch") as ctx:
        assert (ctx.rank, ctx.world_size, ctx.devices) == (0, 1, (rg.Device("cpu", 0),))
        w = rg.tensor([[1.0, -2.0]], device=ctx.device).set_distributed("w")
        grads = (w * w).sum().backward()
        np.testing.assert_allclose(w.grad(grads).numpy(), [[2.0, -4.0]])
        y = dist.all_reduce(w, dist.ReduceOperation.SUM, ctx.devices).resolve()
        np.testing.assert_allclose(y.numpy(), [[1.0, -2.0]])
        assert ctx.stats.steps == 1
    assert not torch.distributed.is_initialized()  # it made the default group, and freed it


def test_from_launcher_outside_torchrun_says_how_to_launch(monkeypatch):
    for name in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(rg.DistributedError, match="under torchrun"):
        dist.DistributedContext.from_launcher(engine="torch")
    with pytest.raises(rg.InvalidArgumentError, match="device must be 'cpu' or 'cuda'"):
        monkeypatch.setenv("RANK", "0")
        monkeypatch.setenv("WORLD_SIZE", "1")
        monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
        monkeypatch.setenv("MASTER_PORT", "1")
        dist.DistributedContext.from_launcher(engine="torch", device="tpu")
    with pytest.raises(rg.InvalidArgumentError, match="mpi engine reduces host memory"):
        dist.DistributedContext.from_launcher(engine="mpi", device="cuda")


def test_torchrun_command_runs_this_python_on_one_machine():
    command = launch.torchrun_command(2, ["train.py", "--epochs", "1"], python="py")
    assert command == [
        "py",
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node",
        "2",
        "train.py",
        "--epochs",
        "1",
    ]
    with pytest.raises(rg.InvalidArgumentError):
        launch.torchrun_command(0, ["train.py"])
    with pytest.raises(rg.InvalidArgumentError, match="same environment"):
        launch.run(2, ["train.py"], timeout=1.0, engine="torch", rank_env=[{}, {}])


# -- buffers on torch tensors ---------------------------------------------------------------
class TorchPrimitives:
    """The two methods of a backend whose primitives are torch tensors that ``from_buffer``
    calls (a stand-in: the tests of the torch backend itself live with it)."""

    def zeros(self, shape, dtype, device):
        return torch.zeros(shape, dtype=getattr(torch, dtype))

    def from_data(self, data, dtype, device):
        return torch.tensor(
            np.asarray(data), dtype=None if dtype is None else getattr(torch, dtype)
        )


def test_a_cpu_tensor_is_handed_over_as_a_numpy_view_of_its_memory():
    t = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    array = buffers.to_buffer(None, t)
    assert isinstance(array, np.ndarray) and array.dtype == np.float32
    array[0, 0] = 7.0  # the same memory
    assert t[0, 0].item() == 7.0


def test_a_tensor_numpy_cannot_hold_is_handed_over_as_it_is():
    t = torch.ones(3, dtype=torch.bfloat16)
    assert buffers.to_buffer(None, t) is t


def test_a_reduced_buffer_comes_back_as_the_backends_kind_of_primitive():
    backend = TorchPrimitives()
    like = torch.zeros(3, dtype=torch.float32)
    result = np.array([1.0, 2.0, 3.0], np.float32)
    for old in (like, None):  # None: the parameter had no gradient on this device
        value = buffers.from_buffer(backend, result, old, None, "float32")
        assert isinstance(value, torch.Tensor) and value.dtype == torch.float32
        assert value.tolist() == [1.0, 2.0, 3.0]
    reduced = torch.tensor([4.0, 5.0, 6.0])  # already a tensor where ``like`` lives: as it is
    assert buffers.from_buffer(backend, reduced, like, None, "float32") is reduced
    assert buffers.from_buffer(backend, reduced, None, None, "float32") is reduced
    # and a tensor result for a NumPy backend is a NumPy array
    host = buffers.from_buffer(rg.NumpyBackend(), reduced, None, None, "float32")
    assert isinstance(host, np.ndarray) and host.tolist() == [4.0, 5.0, 6.0]


@same_on_every_backend
def test_the_launch_cli_starts_torchrun_beside_the_programs_own_process_group(two_ranks):
    """On this pass the launch CLI starts the launch of TWO_RANKS; its last script, the
    program's (``tests/torch_scripts/torch_own_group.py``), starts torch's default group
    before the context, and all-reduces over it once the context closed."""
    entry = TWO_RANKS["own_group"]
    assert two_ranks.completed.returncode == 0, two_ranks.output(entry)
    folder = two_ranks.out / folder_name(entry)
    written = [folder / f"rank{rank}" for rank in (0, 1)]
    assert all(path.is_file() for path in written), two_ranks.output(entry)
    lines = sorted(line for path in written for line in path.read_text().splitlines())
    assert lines == ["rank 0 of 2 cpu", "rank 1 of 2 cpu:1", "sum 2", "sum 2"]


@same_on_every_backend
def test_train_with_workers_and_the_torch_engine_runs_torchrun_and_matches_threads(
    tmp_path, monkeypatch
):
    from retrograd.app.cli import main
    from retrograd.app.data import MNIST_FILES, write_idx

    source = str(Path(rg.__file__).resolve().parents[1])
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join(filter(None, [source, os.environ.get("PYTHONPATH")]))
    )
    monkeypatch.delenv("RANK", raising=False)
    # a small MNIST-format data set of its own: the digits set would import scikit-learn in
    # this process and both ranks (about 1 s of CPU each) for data the test does not look at
    rng = np.random.default_rng(5)
    mnist = tmp_path / "mnist"
    mnist.mkdir()
    for key, count in (("train", 48), ("test", 16)):
        images = rng.integers(0, 256, (count, 28, 28), dtype=np.uint8)
        write_idx(mnist / MNIST_FILES[f"{key}_images"], images)
        write_idx(mnist / MNIST_FILES[f"{key}_labels"], rng.integers(0, 10, count, np.uint8))
    common = ["--epochs", "1", "--max-train-samples", "48", "--max-test-samples", "16"]
    common += ["--model", "mlp", "--seed", "3", "--dataset", "mnist", "--data-dir", str(mnist)]
    assert (
        main(
            ["train", "--workers", "2", "--engine", "torch", *common, "--out", str(tmp_path / "t")]
        )
        == 0
    )
    assert main(["train", "--workers=2", *common, "--out", str(tmp_path / "l")]) == 0
    ranks = json.loads((tmp_path / "t" / "metrics.json").read_text())
    threads = json.loads((tmp_path / "l" / "metrics.json").read_text())
    assert ranks["config"]["engine"] == "torch" and ranks["config"]["world_size"] == 2
    # the same shards summed in the same order: the thread run's losses
    np.testing.assert_allclose(ranks["step_losses"], threads["step_losses"], rtol=1e-5)


def test_a_torch_style_ddp_script_runs_as_written(two_ranks):
    """init_process_group, DDP and DistributedSampler without a group or rank, torch's in-place
    all_reduce / all_gather / broadcast, barrier, destroy_process_group."""
    entry = TWO_RANKS["process_group"]
    assert two_ranks.completed.returncode == 0, two_ranks.output(entry)
    reports = two_ranks.reports(entry).get(folder_name(entry), {})
    assert sorted(reports) == [0, 1], two_ranks.output(entry)
    for report in reports.values():
        assert report["world_size"] == 2
        assert report["max_difference"] < 1e-12, report
        assert report["all_reduce"] == [3.0]
        assert report["all_gather"] == [[0, 0], [1, 10]]
        assert report["broadcast"] == [1.0, 1.0, 1.0]
        assert report["initialized_after_destroy"] is False
