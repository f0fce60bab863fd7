"""Test-suite setup: every backward asserts that the checkpointer was drained (Burn's test
build does the same), and the inner backend is chosen (``tests/backends.py``):
``RETROGRAD_INNER=torch`` or ``--inner torch`` makes ``Autodiff(TorchBackend("cpu"))`` the
default backend, and ``RETROGRAD_CHECKPOINTING=budget:65536`` (or ``balanced``) its strategy.

Two markers say how a test relates to that choice:

- ``@pytest.mark.numpy_only(reason)``: a test about NumPy alone; skipped, with that reason, on
  another backend.
- ``@pytest.mark.backend_independent(reason)``: a test whose outcome cannot depend on the inner
  backend, so that running it on a second backend tests nothing new; skipped on a backend
  other than NumPy, as ``numpy_only`` tests are (``-rs`` lists both). The claim is checked on
  every pass at collection, and on the NumPy pass while the test runs
  (``tests/backend_independence.py``).

A third says how a test relates to the checkpointing strategy:

- ``@pytest.mark.own_checkpointing(reason)``: a test that builds every backend it uses with a
  strategy of its own, so that ``RETROGRAD_CHECKPOINTING`` cannot reach it; skipped on a pass
  with a strategy (CI's budget pass, which would repeat it as the first pass ran it). Checked
  as ``backend_independent`` is, on every pass without a strategy.
"""

import gc
import os
import sys
from pathlib import Path

import pytest

os.environ["RETROGRAD_CHECK_CHECKPOINTER"] = "1"


def fix_the_drawn_examples() -> None:
    """Hypothesis draws the same examples on every run (``derandomize``: a seed from each
    test's own name and code), so that a red run names a defect of the commit it ran on, not a
    new draw that the previous commit would have failed too (CI117's ``bce_logits`` program, a
    defect older than the suite's last forty commits, stopped a landing unrelated to it).
    ``HYPOTHESIS_PROFILE=explore`` draws fresh examples, to look for new failures on purpose.
    Loaded here, before any test module makes its ``settings``, whose unset fields come from it.
    """
    from hypothesis import settings

    settings.register_profile("fixed", derandomize=True, database=None)
    settings.register_profile("explore", derandomize=False)
    settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "fixed"))


fix_the_drawn_examples()


#: The markers whose tests a backend other than NumPy skips, and the skip reason's start.
SKIPPED_OFF_NUMPY = {
    "numpy_only": "NumPy backend only",
    "backend_independent": "backend independent, ran on the NumPy pass",
}

#: The marker whose tests a pass with a checkpointing strategy skips, and the skip reason's start.
SKIPPED_UNDER_A_STRATEGY = (
    "own_checkpointing",
    "picks its backends' checkpointing, ran on the pass without a strategy",
)


def pytest_addoption(parser):
    parser.addoption(
        "--inner",
        default=None,
        help="inner backend of the suite: numpy (default), torch, torch:cuda "
        "(overrides RETROGRAD_INNER)",
    )


def share_the_cores_among_workers() -> None:
    """Under pytest-xdist, give each worker's thread pools (BLAS, OpenMP, torch's intra-op
    pool) its share of the cores, at least one thread. Left alone, each of N workers runs pools
    as wide as the machine: N times more threads than cores, whose spinning waits cost CPU
    time and give nothing back (measured: a third more CPU time on two cores, two workers).
    Subprocesses the tests start are not affected: they choose their own threads."""
    workers = os.environ.get("PYTEST_XDIST_WORKER_COUNT")
    if not workers:
        return
    threads = max(1, (os.cpu_count() or 1) // int(workers))
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # pragma: no cover - a dev dependency
        pass
    else:
        threadpool_limits(limits=threads)
    try:
        import torch
    except ImportError:  # pragma: no cover - a dev dependency
        return
    torch.set_num_threads(threads)


def pytest_configure(config):
    import backends
    import retrograd as rg

    share_the_cores_among_workers()

    config.addinivalue_line(
        "markers", "numpy_only(reason): a test about the NumPy backend itself, not semantics"
    )
    config.addinivalue_line(
        "markers",
        "backend_independent(reason): never reaches the inner backend (checked on NumPy); "
        "skipped on another backend",
    )
    config.addinivalue_line(
        "markers",
        "own_checkpointing(reason): builds every backend it uses with a strategy of its own "
        "(checked without one); skipped under RETROGRAD_CHECKPOINTING",
    )
    choice = config.getoption("--inner")
    if choice:
        backends.select(choice)
        os.environ["RETROGRAD_INNER"] = choice  # subprocesses (CLI, mpiexec) follow
    if backends.on_torch() or backends.CHECKPOINTING != "none":
        rg.set_default_backend(
            rg.Autodiff(backends.inner_backend(), checkpointing=backends.checkpointing())
        )


#: The pytest session (set as it starts), and :func:`outside_the_initial_paths`'s answers for
#: it by folder: whether a folder is a command line path or under one.
_SESSION: list = []


def pytest_sessionstart(session):
    _SESSION[:] = [session, {}]


def outside_the_initial_paths(session, path: Path, folders: dict[Path, bool]) -> bool:
    """Whether ``path`` (a file or a folder) is neither a path given on ``session``'s command
    line, nor above one, nor under one: a path pytest would collect only to discard it
    (``folders``: the answers found so far for folders, by folder). Given files (CI's budget
    pass names 288), pytest collects the folder holding them again for each one (a file named
    twice is collected twice, for backward compatibility), making a node of each of its 800
    files and discarding all but the one named: 230,000 nodes, 28 s of CPU in each pytest
    worker before any test ran (importing the 288 modules took 0.7 s of it)."""
    if session.isinitpath(path, with_parents=True):
        return False
    folder = path.parent
    under = folders.get(folder)
    if under is None:
        under = folders[folder] = any(map(session.isinitpath, (folder, *folder.parents)))
    return not under


def pytest_ignore_collect(collection_path, config):
    """A file outside the command line's paths (:func:`outside_the_initial_paths`) is left out
    before pytest makes a node of it.

    On a backend other than NumPy, a test module whose every test is marked ``numpy_only``
    or ``backend_independent`` (by its ``pytestmark``) is not imported: each pytest worker of
    CI's torch pass imported and collected all 30 such modules to skip every test they hold
    (5.5 s of CPU a process). Their marker checks ran on the NumPy pass, on the same source;
    the run's summary says how many modules were left out."""
    path = collection_path if isinstance(collection_path, Path) else Path(collection_path)
    if _SESSION and outside_the_initial_paths(_SESSION[0], path, _SESSION[1]):
        return True
    import backends
    from backend_independence import skipped_whole_off_numpy

    if not backends.on_torch() or path.suffix != ".py" or not path.name.startswith("test_"):
        return None
    return True if skipped_whole_off_numpy(path) else None


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """On a backend other than NumPy, one line (under ``-q`` too) saying how many test modules
    :func:`pytest_ignore_collect` left out."""
    import backends
    from backend_independence import skipped_whole_off_numpy

    if not backends.on_torch():
        return
    tests = Path(__file__).parent
    whole = [path for path in sorted(tests.glob("test_*.py")) if skipped_whole_off_numpy(path)]
    terminalreporter.write_line(
        f"inner backend {backends.INNER}: {len(whole)} test modules whose every test is marked "
        f"{' or '.join(SKIPPED_OFF_NUMPY)} were not collected (tests/conftest.py)"
    )


def pytest_collection_modifyitems(config, items):
    import backends
    from backend_independence import module_problems, strategy_problems

    independent = [item for item in items if item.get_closest_marker("backend_independent")]
    modules = {Path(item.path): item.module for item in independent}
    for path in sorted(modules):
        problems = module_problems(path, modules[path])
        if problems:
            raise pytest.UsageError(
                f"{path.name} holds backend_independent tests but {'; '.join(problems)}"
            )
    marker, why = SKIPPED_UNDER_A_STRATEGY
    own = [item for item in items if item.get_closest_marker(marker)]
    for path in sorted({Path(item.path) for item in own}):
        problems = strategy_problems(path)
        if problems:
            raise pytest.UsageError(f"{path.name} holds {marker} tests but {'; '.join(problems)}")
    if backends.CHECKPOINTING != "none":
        for item in own:
            reason = item.get_closest_marker(marker).args
            item.add_marker(pytest.mark.skip(reason=f"{why}: {reason[0] if reason else ''}"))
    if not backends.on_torch():
        return
    for item in items:
        for name, why in SKIPPED_OFF_NUMPY.items():
            marker = item.get_closest_marker(name)
            if marker is not None:
                reason = marker.args[0] if marker.args else marker.kwargs.get("reason", "")
                item.add_marker(pytest.mark.skip(reason=f"{why}: {reason}"))
                break


def pytest_collection_finish(session):
    """Freeze what collection made (the test modules, torch, SciPy: some 300,000 objects) out
    of the collector's reach: they live as long as the worker. Every full collection after
    this, the suite's own ``gc.collect()`` calls (leak and cycle checks) and the interpreter's,
    then looks only at what the tests made: 0.4 s a collection before, a few milliseconds
    after. Cycle checks lose nothing by it: a cycle a test makes is made of new objects."""
    gc.collect()
    gc.freeze()


def _run_withheld(item):
    """A hook wrapper's body: the test phase within, with the default backend withheld where
    the test is marked ``backend_independent`` (on the NumPy pass: the others skip it) or
    ``own_checkpointing`` (on a pass without a strategy: the others skip it)."""
    import backends
    from backend_independence import default_backend_withheld

    if item.get_closest_marker("backend_independent") is not None and not backends.on_torch():
        claim = "backend_independent"
    elif (
        item.get_closest_marker(SKIPPED_UNDER_A_STRATEGY[0]) is not None
        and backends.CHECKPOINTING == "none"
    ):
        claim = SKIPPED_UNDER_A_STRATEGY[0]
    else:
        return (yield)
    with default_backend_withheld(item.nodeid, claim):
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item):
    return (yield from _run_withheld(item))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    return (yield from _run_withheld(item))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item):
    return (yield from _run_withheld(item))


@pytest.fixture(autouse=True)
def _torch_distributions_validation_restored():
    """torch's first eager ``flex_attention`` call (``test_flex_attention.py``, the real ports
    of FlexAttention programs) turns its distributions' argument validation off for the rest of
    the process (``Distribution._validate_args`` True -> False, a side effect of its
    compilation set-up): a later test on the same worker comparing distributions with torch's
    then saw torch accept values outside a support. Which tests share a worker changes as files
    are added, so the flag is restored after every test, here."""
    distributions = sys.modules.get("torch.distributions")
    before = None if distributions is None else distributions.Distribution._validate_args
    yield
    distributions = sys.modules.get("torch.distributions")
    if distributions is None or before is None:
        return
    if distributions.Distribution._validate_args != before:
        distributions.Distribution.set_default_validate_args(before)


@pytest.fixture(autouse=True)
def _print_options_and_anomaly_mode_restored():
    """``rg.set_printoptions`` (and torch's) and anomaly detection are process-wide: a test
    that sets them, or a sweep that calls every public function (``set_anomaly_enabled(True)``
    among them), changes how every later test on the worker prints its tensors (and so the
    messages and logs it compares) and makes its NaN gradients errors. Restored after every
    test."""
    import retrograd as rg

    anomaly = (rg.is_anomaly_enabled(), rg.is_anomaly_check_nan_enabled())
    ours = rg.get_printoptions()
    torch = sys.modules.get("torch")
    theirs = None if torch is None else torch._tensor_str.get_printoptions()
    yield
    if (rg.is_anomaly_enabled(), rg.is_anomaly_check_nan_enabled()) != anomaly:
        rg.set_anomaly_enabled(*anomaly)
    if rg.get_printoptions() != ours:
        rg.set_printoptions(**ours)
    torch = sys.modules.get("torch")
    if torch is not None and theirs is not None and torch._tensor_str.get_printoptions() != theirs:
        torch.set_printoptions(**theirs)
