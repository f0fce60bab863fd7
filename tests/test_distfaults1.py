"""The fault contract of user collectives (API.md sections 5 and 11) on every engine, 2 ranks:
a rank that raised before a collective, mismatched shapes and dtypes, a rank that exits.

Threads recover (their transport can drop a collective a member never joined); across
processes (``mpi``, ``torch``) a timed-out collective cannot be taken back, so the group
breaks and says so on every rank, the one that raised included, instead of matching its next
call with the abandoned one.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import retrograd as rg
from retrograd import distributed as dist
from retrograd.distributed import launch

#: on the process engines' tests (the threads' run on the suite's inner backend)
across_processes = pytest.mark.numpy_only(
    "the rank scripts run on the NumPy backend whatever the suite's RETROGRAD_INNER; the "
    "faults are the transports', not the inner backend's"
)

SCRIPT = Path(__file__).parent / "distfault_scripts" / "collective_faults.py"
TIMEOUT = 2.0
#: how late past the timeout a rank may raise (2 cores shared by several jobs)
SLACK = 1.5
#: a mismatch is found from the headers: no rank waits for a timeout
PROMPT = 1.0
SUM = dist.ReduceOperation.SUM
COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "broadcast")


def engines():
    found = []
    if launch.find_mpiexec() is not None:
        found.append(pytest.param("mpi", marks=pytest.mark.xdist_group("mpiexec")))
    found.append(pytest.param("torch", marks=pytest.mark.xdist_group("torchrun")))
    return found


def run_ranks(engine: str, modes: str, tmp_path: Path) -> tuple[int, dict]:
    """``collective_faults.py`` as 2 ranks of ``engine``, ``modes`` (one, or several joined by
    ``+``) in turn: (exit status, {mode: {rank: report}})."""
    if engine == "torch":
        pytest.importorskip("torch")
    env = dict(os.environ)
    source = str(Path(rg.__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [source, env.get("PYTHONPATH")]))
    env.update(OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    env.pop("RETROGRAD_INNER", None)
    completed = launch.run(
        2,
        [str(SCRIPT), engine, modes, str(TIMEOUT), str(tmp_path)],
        timeout=60.0,
        env=env,
        engine=engine,
    )
    reports: dict = {mode: {} for mode in modes.split("+")}
    for path in tmp_path.glob("*/rank*.json"):
        report = json.loads(path.read_text())
        reports[path.parent.name][report["rank"]] = report
    assert completed.returncode == 0 or any(reports.values()), completed.stderr[-3000:]
    return completed.returncode, reports


#: the faults each engine's one launch runs in turn, each on a context of its own: ``mismatch``
#: leaves the group usable, ``raised_before`` breaks it (a new context still starts: the ranks
#: report what its exit status would say), ``exit`` ends the launch
MODES = "mismatch+raised_before+exit"


@pytest.fixture(scope="module")
def faults_in_turn(tmp_path_factory):
    """``launch(engine)``: (exit status, {mode: {rank: report}}) of the launch of ``MODES`` on
    ``engine``, made at the first test asking: a torchrun launch costs 4-5 s of CPU (three
    processes importing torch), one a fault would cost as much."""
    launches: dict[str, tuple[int, dict]] = {}

    def launch_of(engine: str) -> tuple[int, dict]:
        if engine not in launches:
            out = tmp_path_factory.mktemp(f"faults_in_turn_{engine}")
            launches[engine] = run_ranks(engine, MODES, out)
        return launches[engine]

    return launch_of


def in_threads(work, n=2, timeout=TIMEOUT):
    """``work(rank, device, devices)`` on one thread per device of a threads context; the
    results (or errors) in rank order."""
    devices = [rg.Device("cpu", i) for i in range(n)]
    results: list = [None] * n

    def run(rank, device):
        try:
            results[rank] = work(rank, device, devices)
        except Exception as error:  # handed back to the test
            results[rank] = error

    with dist.DistributedContext(devices, dist.DistributedConfig(SUM, timeout=timeout)):
        threads = [threading.Thread(target=run, args=(i, d)) for i, d in enumerate(devices)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30.0)
            assert not thread.is_alive()
    return results


def timed(call):
    started = time.monotonic()
    try:
        return call().resolve().numpy(), time.monotonic() - started
    except rg.RetrogradError as error:
        return error, time.monotonic() - started


# -- threads ---------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["shape", "dtype"])
def test_threads_mismatch_fails_every_device_at_once_and_the_next_call_works(mode):
    def work(rank, device, devices):
        values = [1.0, 2.0, 3.0, 4.0][: 4 - 2 * rank] if mode == "shape" else [1.0, 2.0]
        dtype = (rg.float32 if rank == 0 else rg.float64) if mode == "dtype" else None

        def t():
            return rg.tensor(values, device=device, dtype=dtype)

        calls = [
            lambda: dist.all_reduce(t(), SUM, devices),
            lambda: dist.all_gather(t(), devices),
            lambda: dist.reduce_scatter(t(), SUM, devices),
            lambda: dist.broadcast(t(), 0, devices),
        ]
        outcomes = [timed(call) for call in calls]
        after = dist.all_reduce(rg.tensor([1.0 + rank], device=device), SUM, devices)
        return outcomes, after.resolve().numpy()

    for rank, result in enumerate(in_threads(work)):
        assert not isinstance(result, Exception), result
        outcomes, after = result
        for name, (error, elapsed) in zip(COLLECTIVES, outcomes):
            assert isinstance(error, rg.DistributedError | rg.ShapeError), (rank, name, error)
            assert f"differ in {mode}" in str(error), error
            assert elapsed < PROMPT, (rank, name, elapsed)
        np.testing.assert_array_equal(after, [3.0])


def test_threads_a_device_that_never_calls_fails_the_other_within_the_timeout():
    def work(rank, device, devices):
        if rank == 1:
            return None  # this device's thread ends without calling (as if it died)
        return timed(lambda: dist.all_reduce(rg.tensor([1.0], device=device), SUM, devices))

    (error, elapsed), _ = in_threads(work)
    assert isinstance(error, rg.DistributedError) and "cpu:1" in str(error), error
    assert TIMEOUT - 0.1 < elapsed < TIMEOUT + SLACK


# -- across processes ------------------------------------------------------------------------
@across_processes
@pytest.mark.parametrize("engine", engines())
def test_mismatch_fails_every_rank_at_once_and_the_next_call_works(engine, faults_in_turn):
    _, launched = faults_in_turn(engine)
    reports = launched["mismatch"]
    assert sorted(reports) == [0, 1], launched
    # the group stayed usable: neither rank's broke (its process would exit with status 1),
    # and both went on to the next mode's context (raised_before: its test checks it)
    assert [report["broken"] for report in reports.values()] == [None, None], reports
    assert sorted(launched["raised_before"]) == [0, 1], launched
    for rank, report in reports.items():
        for mode in ("shape", "dtype"):
            for name in COLLECTIVES:
                outcome = report[f"{mode} {name}"]
                assert outcome.get("error") in ("DistributedError", "ShapeError"), outcome
                assert f"differ in {mode}" in outcome["message"], outcome
                assert outcome["elapsed"] < PROMPT, (rank, mode, name, outcome)
            assert report[f"{mode} after"]["value"] == [3.0], report


@across_processes
@pytest.mark.parametrize("engine", engines())
def test_a_rank_that_exits_fails_the_other_within_the_timeout(engine, faults_in_turn):
    status, launched = faults_in_turn(engine)
    reports = launched["exit"]  # (after the launch's other faults, on a context of its own)
    assert status != 0 and sorted(reports) == [0], reports
    assert reports[0]["good"]["value"] == [2.0], reports[0]
    first = reports[0]["first"]
    assert first.get("error") == "DistributedError" and "rank 1" in first["message"], first
    # (torchrun may stop the survivor before its timeout: it then says so at once)
    assert first["elapsed"] < TIMEOUT + SLACK, first


@across_processes
@pytest.mark.parametrize("engine", engines())
def test_after_a_rank_raised_before_a_collective_every_rank_says_the_group_broke(
    engine, faults_in_turn
):
    """Before: rank 1's next call was matched with the call rank 0 had abandoned, failing
    with a shape mismatch between two different calls (or, with equal shapes, waiting out
    the timeout) while rank 0 said the group was broken. (Its launch ran ``mismatch`` before,
    and ``exit`` after, each on a context of its own.)"""
    status, launched = faults_in_turn(engine)
    reports = launched["raised_before"]
    assert status != 0
    assert sorted(reports) == [0, 1], reports
    # a broken rank cannot finalize: at exit it ends with status 1 (alone, the launch's status;
    # here the exit fault after it ends the launch)
    for rank, report in reports.items():
        assert report["broken"] is not None, (rank, report)
    first = reports[0]["first"]
    assert first.get("error") == "DistributedError" and "rank 1" in first["message"], first
    assert TIMEOUT - 0.1 < first["elapsed"] < TIMEOUT + SLACK, first
    for rank, report in reports.items():
        for name in ("second", "third"):
            outcome = report[name]
            assert outcome.get("error") == "DistributedError", (rank, name, outcome)
            assert "unusable after an earlier fault" in outcome["message"], outcome
            assert outcome["elapsed"] < PROMPT, (rank, name, outcome)
    assert "rank 0 broke" in reports[1]["second"]["message"], reports[1]
