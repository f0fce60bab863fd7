"""rg.multiprocessing.spawn: the DDP tutorial's ``mp.spawn(main, args=(world_size,), nprocs=...)``
with ``init_process_group(rank=, world_size=)``, and failures raised in the parent."""

from __future__ import annotations

import json
import socket

import numpy as np
import pytest

import retrograd as rg
import retrograd.multiprocessing as mp
from spawn_cases import ddp_worker, exits, raises

#: one job of processes at a time under pytest-xdist (the torch engine's launches share it)
pytestmark = pytest.mark.xdist_group("torchrun")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.numpy_only(
    "the spawned ranks run on the default NumPy backend whatever the suite's inner backend "
    "(a spawned process runs no conftest, and ddp_worker names no backend), so a torch-suite "
    "run would repeat the NumPy pass's ranks at the cost of two fresh interpreters; the "
    "one-process reference it compares with is plain Linear and SGD, which the torch pass "
    "checks against torch elsewhere"
)
def test_spawned_ddp_ranks_train_as_one_process(tmp_path):
    mp.spawn(ddp_worker, args=(2, free_port(), str(tmp_path)), nprocs=2, join=True)
    reports = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    assert reports[0]["params"] == reports[1]["params"]
    # one process, batches of 8 (rank r's batch of 4 is every other sample of those 8)
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((16, 3)), rng.standard_normal((16, 1))
    rg.manual_seed(0)
    model = rg.nn.Linear(3, 1).double()
    optimizer = rg.optim.SGD(model.parameters(), lr=0.1)
    for start in range(0, 16, 8):
        loss = rg.nn.functional.mse_loss(
            model(rg.tensor(x[start : start + 8])), rg.tensor(y[start : start + 8])
        )
        optimizer.step(loss.backward())
    for ours, whole in zip(reports[0]["params"], model.parameters(), strict=True):
        np.testing.assert_allclose(ours, whole.detach().numpy(), rtol=0, atol=1e-12)


def test_a_raising_process_is_raised_in_the_parent_with_its_traceback():
    with pytest.raises(
        mp.ProcessRaisedException, match="ValueError: rank 1 fails on purpose"
    ) as caught:
        mp.start_processes(raises, nprocs=2, start_method="fork")  # (fork: quicker to start)
    assert caught.value.error_index == 1


def test_an_exiting_process_and_bad_arguments():
    with pytest.raises(mp.ProcessExitedException, match="exit code 3") as caught:
        mp.start_processes(exits, nprocs=2, start_method="fork")
    assert (caught.value.error_index, caught.value.exit_code) == (0, 3)
    context = mp.start_processes(raises, nprocs=1, join=False, start_method="fork")
    assert len(context.pids()) == 1
    while not context.join():
        pass
    with pytest.raises(rg.errors.InvalidArgumentError, match="nprocs must be a positive int"):
        mp.spawn(raises, nprocs=0)
    assert mp.cpu_count() >= 1 and mp.Queue is not None  # Python's multiprocessing, re-exported
