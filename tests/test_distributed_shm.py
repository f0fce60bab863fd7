"""The shared-memory all-reduce (``retrograd.distributed.transport.shm``), its ranks as
threads of one process: results, reuse of a collective across steps, several collectives in
flight, and the files it leaves (none once every rank has used a collective)."""

from __future__ import annotations

import os
import threading
import time

import numpy as np
import pytest

from retrograd.distributed.transport import shm

pytestmark = [
    pytest.mark.skipif(not shm.available(), reason="needs x86-64 and /dev/shm"),
    pytest.mark.backend_independent("the transport moves NumPy arrays, no tensor"),
]


def run_ranks(ranks: int, body) -> list:
    """``body(rank, reducer)`` on a thread per rank; their return values, in rank order."""
    token = int.from_bytes(os.urandom(8), "little") >> 1
    reducers = [shm.SharedReduce(token, rank, ranks) for rank in range(ranks)]
    results: list = [None] * ranks
    errors: list = []

    def main(rank: int) -> None:
        try:
            results[rank] = body(rank, reducers[rank])
        except Exception as error:  # reported by the test's thread
            errors.append(error)

    threads = [threading.Thread(target=main, args=(rank,)) for rank in range(ranks)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert not errors, errors
    assert not any(thread.is_alive() for thread in threads)
    for reducer in reducers:
        reducer.close()
    assert not [name for name in os.listdir("/dev/shm") if f"{token:016x}" in name]
    return results


def start(reducer: shm.SharedReduce, key, arrays, scale, result: np.ndarray) -> shm.Job:
    """Contribute ``arrays`` (divided by ``scale`` if given) to the collective ``key``."""
    job = reducer.begin(key, result)
    flat = np.concatenate([np.reshape(a, -1) for a in arrays])
    job.contribution[...] = flat if scale is None else flat / scale
    job.arrive()
    return job


def finish(job: shm.Job, seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not job.advance():
        assert time.monotonic() < deadline, "the shared-memory all-reduce never completed"
        time.sleep(0.0001)


@pytest.mark.parametrize("ranks", [1, 2, 3, 5])
def test_the_mean_of_every_rank_identical_everywhere_step_after_step(ranks):
    rng = np.random.default_rng(0)
    steps = [
        [
            [rng.standard_normal((7, 3)).astype(np.float32), rng.standard_normal(4, np.float32)]
            for _ in range(ranks)
        ]
        for _ in range(4)
    ]

    def body(rank, reducer):
        out = []
        for contributions in steps:
            mine = contributions[rank]
            result = np.empty(25, np.float32)
            finish(start(reducer, "bucket", mine, ranks, result))
            out.append(result.copy())
        return out

    results = run_ranks(ranks, body)
    for step, contributions in enumerate(steps):
        flat = [np.concatenate([a.reshape(-1) for a in c]) for c in contributions]
        expected = np.mean(np.float64(flat), axis=0)
        for rank in range(ranks):
            np.testing.assert_allclose(results[rank][step], expected, rtol=1e-6, atol=1e-7)
            # every slice is summed once, by one rank: all ranks hold the same bits
            assert np.array_equal(results[rank][step], results[0][step])


def test_collectives_in_flight_together_and_sizes_that_do_not_divide():
    ranks = 3

    def body(rank, reducer):
        first, second = np.empty(2, np.float64), np.empty(1000, np.float64)
        a = start(reducer, 0, [np.full(2, rank + 1.0)], None, first)
        b = start(reducer, 1, [np.arange(1000.0) * (rank + 1)], None, second)
        finish(b)
        finish(a)
        return first, second

    for first, second in run_ranks(ranks, body):
        assert first.tolist() == [6.0, 6.0]  # 1 + 2 + 3, SUM
        assert np.array_equal(second, np.arange(1000.0) * 6)


def test_a_rank_that_never_arrives_leaves_the_others_waiting_not_wrong():
    token = int.from_bytes(os.urandom(8), "little") >> 1
    present = shm.SharedReduce(token, 0, 2)
    try:
        result = np.full(4, -1.0)
        job = start(present, "bucket", [np.ones(4)], None, result)
        for _ in range(100):
            assert not job.advance()
        assert result.tolist() == [-1.0] * 4
    finally:
        present.close()
    assert not [name for name in os.listdir("/dev/shm") if f"{token:016x}" in name]


def test_after_a_fault_a_survivor_removes_every_rank_s_files():
    """A rank that dies before a collective's first use completes cannot unlink its file; a
    survivor closing after the fault removes it."""
    token = int.from_bytes(os.urandom(8), "little") >> 1
    survivor, dead = shm.SharedReduce(token, 0, 3), shm.SharedReduce(token, 1, 3)
    start(survivor, "bucket", [np.ones(8)], None, np.empty(8))
    start(dead, "bucket", [np.ones(8)], None, np.empty(8))  # then never heard of again
    assert len([name for name in os.listdir("/dev/shm") if f"{token:016x}" in name]) == 2
    survivor.close(everyone=True)
    assert not [name for name in os.listdir("/dev/shm") if f"{token:016x}" in name]
