"""Distributed data parallel across processes: ``mpiexec -n 2``, ``-n 3``, ``-n 8`` from pytest.

Each test runs a script of ``tests/mpi_scripts`` as several ranks (every launch has a
subprocess timeout and is killed whole past it) and reads the JSON each rank wrote.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip(
    "mpi4py",
    reason='mpi4py is not installed: pip install -e ".[distributed]" (CI installs it)',
)

import retrograd
from retrograd.distributed import launch
from retrograd.distributed.transport import shm
from scripts_in_turn import folder_name
from zero_cases import check_reports

pytestmark = [
    pytest.mark.numpy_only(
        "the rank scripts run on the NumPy backend whatever the suite's RETROGRAD_INNER (the "
        "torch engine's scripts follow it: test_distributed_torch.py), so a torch-suite run "
        "would repeat this one"
    ),
    # under pytest-xdist, one launch at a time: the timeouts below are sized for that
    pytest.mark.xdist_group("mpiexec"),
]

if launch.find_mpiexec() is None:
    pytest.skip(
        'mpiexec not found: pip install -e ".[distributed]" installs MPICH\'s',
        allow_module_level=True,
    )

SCRIPTS = Path(__file__).parent / "mpi_scripts"
LAUNCH_SECONDS = 120.0


def run_ranks(ranks, script, *args, tmp_path, rank_env=None, timeout=LAUNCH_SECONDS):
    """Run ``script args... OUT`` as ``ranks`` ranks; (completed process, {rank: report})."""
    env = dict(os.environ)
    source = str(Path(retrograd.__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [source, env.get("PYTHONPATH")]))
    env.update(OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    started = time.monotonic()
    completed = launch.run(
        ranks,
        [str(SCRIPTS / script), *map(str, args), str(tmp_path)],
        timeout=timeout,
        env=env,
        rank_env=rank_env,
    )
    completed.wall = time.monotonic() - started
    reports = {}
    for path in tmp_path.glob("rank*.json"):
        report = json.loads(path.read_text())
        reports[report["rank"]] = report
    return completed, reports


def output(completed) -> str:
    return f"exit {completed.returncode}\nstdout:\n{completed.stdout}\nstderr:\n{completed.stderr}"


class InTurn:
    """One launch of several scripts in turn (``tests/scripts_in_turn.py``): the launch, and
    each script's reports in its own folder."""

    def __init__(self, completed, out: Path):
        self.completed, self.out = completed, out

    def reports(self, entry: str) -> dict:
        """``{rank: report}`` of ``entry``'s script, as ``run_ranks`` gives them."""
        reports = {}
        for path in (self.out / folder_name(entry)).glob("rank*.json"):
            report = json.loads(path.read_text())
            reports[report["rank"]] = report
        return reports

    def output(self, entry: str) -> str:
        """The launch's output, and what the entry's script raised on each rank."""
        raised = sorted((self.out / folder_name(entry)).glob("rank*.error"))
        return output(self.completed) + "".join(
            f"\n{path.name}:\n{path.read_text()}" for path in raised
        )


#: The scripts that need nothing of their own launch, by rank count, each run by one launch
#: (``in_turn``) rather than one each: a launch costs Hydra and a process a rank importing
#: retrograd and mpi4py again. The donation runs patch the census each for itself, and undo
#: it; the DDP script, which starts and closes the default context itself, runs last; the
#: string-ids training wants a different hash seed on each rank, which the others do not read.
GRAD_CHECKS = "mpi_scripts/grad_checks.py"
TRANSPORT = "mpi_scripts/transport_checks.py"
COLLECTIVES = "mpi_scripts/collectives.py:checks"
ZERO = "mpi_scripts/zero.py"
TRAIN_MLP = "mpi_scripts/train_mlp.py"
TORCH_STYLE_DDP = "torch_scripts/torch_process_group.py:mpi"
DONATION = "mpi_scripts/donation.py:{spare}"
#: the idle half of the census test (its busy half needs other jobs started before its launch)
CENSUS = "mpi_scripts/census.py"
#: mismatched registrations fail every rank at once and leave MPI usable (the launch still
#: ends with status 0): they run after the others of the 3-rank launch, overlap on then off
FAULT_TIMEOUT = 2.0
MISMATCH = "mpi_scripts/faults.py:mismatch:{timeout}:{overlap}"
MISMATCHES = {
    overlap: MISMATCH.format(timeout=FAULT_TIMEOUT, overlap=overlap) for overlap in ("on", "off")
}
IN_TURN = {
    2: [GRAD_CHECKS, TRANSPORT, COLLECTIVES, ZERO, TRAIN_MLP]
    + [DONATION.format(spare=spare) for spare in (-1, 0, 1)]
    + [CENSUS, TORCH_STYLE_DDP],
    3: [GRAD_CHECKS, TRANSPORT, COLLECTIVES, ZERO]
    + [DONATION.format(spare=spare) for spare in (-1, 0, 1)]
    + list(MISMATCHES.values()),
    8: [GRAD_CHECKS, DONATION.format(spare=-1)],
}
HASH_SEEDS = [{"PYTHONHASHSEED": "1"}, {"PYTHONHASHSEED": "2"}]


@pytest.fixture(scope="module")
def in_turn(tmp_path_factory):
    """``in_turn(ranks)``: the launch of ``IN_TURN[ranks]``, made at the first test asking."""
    launches: dict[int, InTurn] = {}

    def launch_of(ranks: int) -> InTurn:
        if ranks not in launches:
            out = tmp_path_factory.mktemp(f"in_turn_{ranks}")
            entries = IN_TURN[ranks]
            completed, _ = run_ranks(
                ranks,
                "../scripts_in_turn.py",
                *entries,
                tmp_path=out,
                rank_env=HASH_SEEDS if ranks == 2 else None,
                timeout=LAUNCH_SECONDS + 30.0 * len(entries),
            )
            launches[ranks] = InTurn(completed, out)
        return launches[ranks]

    return launch_of


def launched(ranks, entry, in_turn):
    """(launch, {rank: report}) of ``entry``, one of ``IN_TURN[ranks]``."""
    assert entry in IN_TURN[ranks], f"{entry} is not one of IN_TURN[{ranks}]"
    launch = in_turn(ranks)
    return launch, launch.reports(entry)


@pytest.mark.parametrize("ranks", [2, 3, 8])
def test_gradient_checks_across_processes(ranks, in_turn):
    launch, reports = launched(ranks, GRAD_CHECKS, in_turn)
    assert launch.completed.returncode == 0, launch.output(GRAD_CHECKS)
    assert sorted(reports) == list(range(ranks)), launch.output(GRAD_CHECKS)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    for rank, report in reports.items():
        assert report["failures"] == [], f"rank {rank}: {report['failures']}"
        assert report["checks"] == 81
        assert report["devices"] == ["cpu"] + [f"cpu:{r}" for r in range(1, ranks)]
        # SUM: every parameter on its own; MEAN: 200-byte buckets fuse the MLP's 8 into 3;
        # without the overlap, one all-reduce per backward. The registrations are agreed once
        # per graph shape: the 8 graph steps register the same 'w', then the MLP (and, under
        # SUM, the uneven-use check's smaller 'w') change it, so each of those steps first
        # runs the collectives of the plan agreed before (zeros, the flag raised), then its own
        # SUM: 8 + (1 + 8) + (8 + 1); MEAN: 8 + (1 + 3); no overlap: 8 + (1 + 1)
        assert report["buckets"] == {"SUM": 26, "MEAN": 12, "MEAN, no overlap": 10}
        assert report["steps"]["MEAN, no overlap"] == report["steps"]["MEAN"] == 9
        # registrations exchanged at the first step and where the graph's parameters changed
        assert report["exchanges"] == {"SUM": 3, "MEAN": 2, "MEAN, no overlap": 2}
        # overlap=None: the engine reduces during backward only with a core to spare
        if ranks >= cores:
            assert not report["overlap_pays"]


@pytest.mark.parametrize("ranks", [2, 3])
def test_the_transport_all_gathers_buffers_across_processes(ranks, in_turn):
    launch, reports = launched(ranks, TRANSPORT, in_turn)
    assert launch.completed.returncode == 0, launch.output(TRANSPORT)
    assert sorted(reports) == list(range(ranks)), launch.output(TRANSPORT)
    for rank, report in reports.items():
        assert report["failures"] == [], f"rank {rank}: {report['failures']}"
        assert report["checks"] == 4


#: spare cores the donation script pretends every machine has: -1 packs every gradient into
#: one collective through shared memory, 0 reduces large ones in place after backward, 1 in
#: place during backward
@pytest.mark.parametrize(
    ("ranks", "spare"), [(2, -1), (2, 0), (2, 1), (3, -1), (3, 0), (3, 1), (8, -1)]
)
def test_large_gradients_reduced_in_place_or_through_shared_memory_are_the_mean(
    ranks, spare, in_turn
):
    """Gradients of 1 MiB and more, donated to the engine where nothing else holds them, or
    through shared memory where ranks outnumber cores: the result is the mean of every rank's
    own gradients at each step, including the steps one rank registers differently (redone),
    and for two parameters given one gradient array (reduced in place, either would change
    the other's)."""
    entry = DONATION.format(spare=spare)
    launch, reports = launched(ranks, entry, in_turn)
    assert launch.completed.returncode == 0, launch.output(entry)
    assert sorted(reports) == list(range(ranks)), launch.output(entry)
    for rank, report in reports.items():
        assert report["failures"] == [], f"rank {rank}: {report['failures']}"
        assert report["checks"] == 4 * 4 * 2  # steps x parameters x (finite, close)
        assert report["overlapping"] == (spare > 0)
        # registrations exchanged at the first step, then at the step rank 1 changed its
        # order and the one after (it changed back): each redone
        assert report["exchanges"] == 3
        # 'w1' is reduced in place at least at the steps whose registrations were exchanged
        # (no fast attempt keeps its gradient); 'b' only once 'a' was copied into its bucket
        assert report["shared_memory"] == (spare < 0 and shm.available())
        if spare < 0:
            assert report["reduced_in_place"] == 0
        else:
            assert report["reduced_in_place"] >= 3


def test_data_parallel_sgd_equals_full_batch_training_with_string_ids(in_turn):
    # the launch gives the ranks PYTHONHASHSEED 1 and 2 (HASH_SEEDS)
    launch, reports = launched(2, TRAIN_MLP, in_turn)
    assert launch.completed.returncode == 0, launch.output(TRAIN_MLP)
    assert sorted(reports) == [0, 1], launch.output(TRAIN_MLP)
    for report in reports.values():
        assert report["steps_synced"] == 20
        assert report["moved"] > 0.05  # training did change the weights...
        assert report["max_difference"] < 1e-12  # ...exactly as full-batch training did
        assert report["gradient_buffers_outliving_their_step"] == 0
    # Python's hash of the names differs between the ranks, the parameter ids do not
    assert reports[0]["python_hashes"] != reports[1]["python_hashes"]
    assert reports[0]["param_ids"] == reports[1]["param_ids"]


def slack(ranks: int) -> float:
    """How late past the timeout a survivor may raise: scheduling on a busy machine (8 ranks
    share 2 cores here)."""
    return 1.5 if ranks <= 3 else 3.0


def run_fault(mode, tmp_path, ranks=3, overlap="on"):
    completed, reports = run_ranks(
        ranks, "faults.py", mode, FAULT_TIMEOUT, overlap, tmp_path=tmp_path
    )
    for rank in survivors(ranks):
        assert rank in reports, output(completed)
        assert reports[rank]["first_step"] is not None
    return completed, reports


def survivors(ranks: int) -> list[int]:
    return [rank for rank in range(ranks) if rank != 1]


#: (ranks, DistributedConfig.overlap): the overlap on and off. On 2 cores, 3 ranks reduce
#: through shared memory; 2 ranks through MPI, with the step's header in a collective of its
#: own, which, without the overlap, the survivor waits for before its one all-reduce. 8 ranks
#: as the engine decides (on 2 cores: off) fail as 3 do, through the same shared memory:
#: one fault test runs them (a rank that never calls backward), not each (9 s of CPU each)
FAULT_RUNS = [(2, "off"), (3, "on"), (3, "off")]


@pytest.mark.parametrize(("ranks", "overlap"), [(2, "on"), *FAULT_RUNS])
def test_a_rank_that_exits_fails_the_others_within_the_timeout(ranks, overlap, tmp_path):
    completed, reports = run_fault("exit", tmp_path, ranks, overlap)
    assert completed.returncode != 0  # the job reports the dead rank
    assert 1 not in reports
    for rank in survivors(ranks):
        error = reports[rank]["error"]
        assert "rank 1 never registered" in error, error
        assert "rank 1 has sent no heartbeat" in error, error
        assert reports[rank]["elapsed"] < FAULT_TIMEOUT + slack(ranks)
    assert completed.wall < 30.0


@pytest.mark.parametrize(("ranks", "overlap"), FAULT_RUNS)
def test_a_rank_that_dies_inside_backward_is_named_with_the_stalled_parameter(
    ranks, overlap, tmp_path
):
    completed, reports = run_fault("die_in_backward", tmp_path, ranks, overlap)
    assert completed.returncode != 0
    for rank in survivors(ranks):
        error = reports[rank]["error"]
        if reports[rank]["overlapping"]:  # w's own all-reduce (bucket_bytes=0) never ends
            assert "the all-reduce of parameter 'w'" in error, error
        else:  # one all-reduce of every gradient, after backward
            assert "the all-reduce of parameters 'b', 'w'" in error, error
        assert "rank 1 has sent no heartbeat" in error, error
        assert reports[rank]["elapsed"] < FAULT_TIMEOUT + slack(ranks)
    assert completed.wall < 30.0


@pytest.mark.parametrize(("ranks", "overlap"), [(3, "on"), (8, "auto")])
def test_a_rank_that_never_calls_backward_fails_the_others_and_the_run_ends(
    ranks, overlap, tmp_path
):
    completed, reports = run_fault("no_backward", tmp_path, ranks, overlap)
    for rank in survivors(ranks):
        error = reports[rank]["error"]
        assert "rank 1 never registered" in error, error
        assert "rank 1 is alive" in error and "not in a backward" in error, error
        assert reports[rank]["elapsed"] < FAULT_TIMEOUT + slack(ranks)
    assert reports[1]["closing"]
    # survivors cannot finalize MPI after a fault: they exit with status 1, and so does the
    # late rank, whose close() waits a timeout for peers that are gone
    assert completed.returncode != 0
    assert completed.wall < 30.0


@pytest.mark.parametrize("overlap", ["on", "off"])
def test_mismatched_parameter_sets_fail_every_rank_and_the_next_step_works(overlap, in_turn):
    entry = MISMATCHES[overlap]
    launch, reports = launched(3, entry, in_turn)
    for rank in survivors(3):  # run_fault's checks
        assert rank in reports, launch.output(entry)
        assert reports[rank]["first_step"] is not None
    # MPI stays usable: no collective ran (every rank went on to the next script, and
    # finalized: a broken rank exits with status 1)
    assert launch.completed.returncode == 0, launch.output(entry)
    for rank in range(3):
        report = reports[rank]
        assert (
            "parameter 'extra' is registered on rank 1 but not on rank 0, rank 2"
            in (report["error"])
        )
        assert report["elapsed"] < 1.0  # found from the metadata, not by waiting
        assert report["next_step"] == [[60.0] * 3] * 3


@pytest.mark.parametrize("overlap", ["on", "off"])
def test_ranks_at_different_step_numbers_fail_every_rank(overlap, tmp_path):
    # the registrations agree (the plan of step 1 holds): the first bucket's header says the
    # steps differ, once its all-reduce completes, and the engine is broken afterwards
    completed, reports = run_fault("skew", tmp_path, 3, overlap)
    assert completed.returncode != 0
    for rank in range(3):
        report = reports[rank]
        assert (
            "the ranks ran different numbers of distributed backward steps" in (report["error"])
        ), report["error"]
        assert report["elapsed"] < 1.0


def test_launch_cli_runs_a_script(tmp_path):
    script = tmp_path / "hello.py"
    script.write_text(
        "from retrograd import distributed as dist\n"
        "with dist.DistributedContext.from_launcher(dist.DistributedConfig(timeout=20)) as c:\n"
        "    print(f'rank {c.rank} of {c.world_size} {c.device}', flush=True)\n"
    )
    env = dict(os.environ)
    env["PYTHONPATH"] = str(Path(retrograd.__file__).resolve().parents[1])
    completed = subprocess.run(
        [sys.executable, "-m", "retrograd.distributed.launch", "-n", "2", str(script)],
        capture_output=True,
        text=True,
        timeout=LAUNCH_SECONDS,
        env=env,
    )
    assert completed.returncode == 0, completed.stderr
    # one write per rank, but Hydra forwards the ranks' output as it comes: find the lines
    found = sorted(re.findall(r"rank \d+ of \d+ cpu(?::\d+)?", completed.stdout))
    assert found == ["rank 0 of 2 cpu", "rank 1 of 2 cpu:1"], completed.stdout


def test_overlap_follows_the_cores_other_jobs_leave_now_not_the_load_average(tmp_path, in_turn):
    """overlap=None: 2 ranks overlap while the machine has a core to spare besides theirs and
    what other jobs run, reduce large gradients in place while it has a core for each, and
    stop both once other jobs take the cores, as counted when the context starts (the
    1-minute load average, used before, still counted a job that had just ended, and would
    not yet count processes started half a second before)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    if cores < 2:
        pytest.skip("needs 2 cores")
    # idle: in the 2-rank launch of the scripts in turn (no other job of this test's running)
    launch, reports = launched(2, CENSUS, in_turn)
    assert launch.completed.returncode == 0, launch.output(CENSUS)
    assert sorted(reports) == [0, 1], launch.output(CENSUS)
    # (on a machine busy with other jobs, they count as others: no assumption that it is idle)
    for report in reports.values():
        assert report["local_ranks"] == 2 and report["cores"] == cores
        assert report["overlap_pays"] == (2 + report["others"] < cores)
        assert report["donates"] == (2 + report["others"] <= cores)
        assert report["overlapping"] == report["overlap_pays"]
    busy = tmp_path / "busy"
    busy.mkdir()
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(cores)]
    try:
        time.sleep(0.5)  # running before the context counts
        completed, reports = run_ranks(2, "census.py", tmp_path=busy)
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()
    assert completed.returncode == 0, output(completed)
    for report in reports.values():
        # the spinners count; not "more others than the idle run saw": other jobs come and go
        # between the runs (ci28 saw 7 others idle and 6 with the spinners, on a loaded machine)
        assert report["others"] >= cores - 1
        assert not report["overlap_pays"] and not report["overlapping"]
        assert not report["donates"]


@pytest.mark.parametrize("ranks", [2, 3])
def test_differentiable_collectives_across_processes(ranks, in_turn):
    """tests/collective_cases.py across processes: values, gradients equal to the duals by
    hand, composition, and bad calls (mismatched shapes, all_reduce's too) failing every rank
    at once with the context still usable."""
    launch, reports = launched(ranks, COLLECTIVES, in_turn)
    assert launch.completed.returncode == 0, launch.output(COLLECTIVES)
    assert sorted(reports) == list(range(ranks)), launch.output(COLLECTIVES)
    for rank, report in reports.items():
        assert report["failures"] == [], f"rank {rank}: {report['failures']}"
        forward = 6 + (8 if ranks == 2 else 4) + 2 * ranks + 4
        assert report["checks"] == forward + 5 + 10


def test_a_rank_that_never_joins_a_gather_fails_the_others_within_the_timeout(tmp_path):
    completed, reports = run_ranks(3, "collectives.py", "missing", tmp_path=tmp_path)
    assert sorted(reports) == [0, 1, 2], output(completed)
    for rank in (0, 2):
        error = reports[rank]["error"]
        assert error is not None and "all_gather" in error and "rank 1" in error, error
        assert reports[rank]["elapsed"] < 3.0 + 2.0


@pytest.mark.parametrize("ranks", [2, 3])
def test_zero_trains_as_the_wrapped_optimizer_across_processes(ranks, in_turn):
    """tests/zero_cases.py across processes: AdamW and SGD with momentum under ZeRO (clipping
    active) equal to the wrapped optimizer on the full batch; the shares add up to the whole
    state; consolidated, reloaded and continued equal to uninterrupted."""
    launch, reports = launched(ranks, ZERO, in_turn)
    assert launch.completed.returncode == 0, launch.output(ZERO)
    assert sorted(reports) == list(range(ranks)), launch.output(ZERO)
    check_reports(reports)


def test_a_torch_style_ddp_script_runs_under_mpiexec(in_turn):
    """``init_process_group("mpi")``: the torch engine's DDP script
    (``tests/torch_scripts/torch_process_group.py``) on the mpi engine."""
    launch, reports = launched(2, TORCH_STYLE_DDP, in_turn)
    assert launch.completed.returncode == 0, launch.output(TORCH_STYLE_DDP)
    assert sorted(reports) == [0, 1], launch.output(TORCH_STYLE_DDP)
    for report in reports.values():
        assert report["world_size"] == 2
        assert report["max_difference"] < 1e-12, report
        assert report["all_reduce"] == [3.0]
        assert report["all_gather"] == [[0, 0], [1, 10]]
        assert report["broadcast"] == [1.0, 1.0, 1.0]
