"""The ``backend_independent`` marker's checks (``tests/backend_independence.py``) catch a test
that reaches the inner backend: by the default backend, even where the error is caught, and
by the text and the import-time values of its module. The ``own_checkpointing`` marker's catch
a test that reaches the suite's checkpointing strategy, the same ways."""

from __future__ import annotations

import contextlib
import types
from pathlib import Path

import numpy as np
import pytest

import retrograd as rg
from backend_independence import (
    DefaultBackendWithheldError,
    default_backend_withheld,
    imports_backends,
    module_problems,
    skipped_whole_off_numpy,
    strategy_problems,
)


def test_a_tensor_made_on_the_default_backend_fails_the_test():
    with pytest.raises(DefaultBackendWithheldError, match="1 time"):  # noqa: SIM117
        with default_backend_withheld("t") as asked:
            with pytest.raises(DefaultBackendWithheldError):
                rg.tensor([1.0, 2.0])
            assert asked == ["t"]
    assert rg.tensor([1.0]).backend is rg.default_backend()  # given back


def test_the_default_backend_asked_for_and_the_error_caught_still_fails_the_test():
    with pytest.raises(DefaultBackendWithheldError, match="2 time"):  # noqa: SIM117
        with default_backend_withheld("t"):
            for _ in range(2):
                with contextlib.suppress(Exception):  # as library code might
                    rg.zeros((2,))


def test_tensors_of_a_named_backend_and_plain_arrays_pass():
    named = rg.Autodiff(rg.NumpyBackend())
    with default_backend_withheld("t") as asked:
        with rg.use_backend(named):
            x = rg.tensor([1.0, 2.0]).require_grad()
            (x * x).sum().backward()
        np.add(np.ones(2), 1.0)
    assert asked == []


@pytest.mark.parametrize(
    "source",
    ["import backends", "from backends import inner_backend", "import os, backends"],
)
def test_an_import_of_the_backends_module_is_seen(source):
    assert imports_backends(source)


def test_other_imports_and_mentions_are_not_imports_of_backends():
    assert not imports_backends("import retrograd as rg\nfrom retrograd import backend\n")
    assert not imports_backends("'''import backends'''\nfrom .backends import x\n")


def test_a_module_that_follows_the_inner_backend_is_refused(tmp_path: Path):
    path = tmp_path / "test_x.py"
    path.write_text("import backends\nENV = 'RETROGRAD_INNER'\n")
    module = types.ModuleType("test_x")
    module.X = rg.tensor([1.0])
    problems = module_problems(path, module)
    assert problems == [
        "makes X on the default backend at import",
        "imports tests/backends.py",
        "names RETROGRAD_INNER",
    ]
    path.write_text("import numpy as np\n")
    assert module_problems(path, types.ModuleType("test_x")) == []


def test_the_withheld_default_names_the_marker_it_checks():
    with pytest.raises(DefaultBackendWithheldError, match="is marked own_checkpointing"):  # noqa: SIM117
        with default_backend_withheld("t", "own_checkpointing"):
            with contextlib.suppress(Exception):
                rg.ones((1,))


def test_a_module_that_follows_the_suites_strategy_is_refused_own_checkpointing(tmp_path: Path):
    path = tmp_path / "test_x.py"
    path.write_text("from backends import checkpointing\nB = rg.Autodiff(None, checkpointing())\n")
    assert strategy_problems(path) == ["names checkpointing()"]
    path.write_text("import backends\nS = backends.CHECKPOINTING\n")
    assert strategy_problems(path) == ["names CHECKPOINTING"]
    path.write_text("import os\nS = os.environ['RETROGRAD_CHECKPOINTING']\n")
    assert strategy_problems(path) == ["names RETROGRAD_CHECKPOINTING", "names CHECKPOINTING"]
    # a strategy of its own, on the suite's inner backend: allowed
    path.write_text("from backends import inner_backend\nB = (inner_backend(), 'balanced')\n")
    assert strategy_problems(path) == []


@pytest.mark.parametrize(
    ("pytestmark", "whole"),
    [
        ('pytest.mark.numpy_only("why")', "numpy_only"),
        ("pytest.mark.numpy_only", "numpy_only"),
        (
            '[pytest.mark.xdist_group("g"), pytest.mark.backend_independent("why")]',
            "backend_independent",
        ),
        ('(pytest.mark.backend_independent(reason="why"),)', "backend_independent"),
        ('pytest.mark.own_checkpointing("why")', None),
        ('pytest.mark.numpy_only("why") if ON else []', None),  # not every test, read so
        ('[pytest.mark.xdist_group("numpy_only")]', None),
    ],
)
def test_a_module_marked_as_a_whole_is_read_from_its_source(tmp_path: Path, pytestmark, whole):
    """What the torch pass leaves uncollected (tests/conftest.py): only a module whose every
    test its one ``pytestmark`` marks numpy_only or backend_independent."""
    path = tmp_path / "test_m.py"
    path.write_text(f"import pytest\n\npytestmark = {pytestmark}\n\n\ndef test_x():\n    pass\n")
    assert skipped_whole_off_numpy(path) == whole


def test_a_module_marking_single_tests_or_assigning_pytestmark_twice_is_collected(tmp_path: Path):
    single = tmp_path / "test_single.py"
    single.write_text(
        'import pytest\n\n\n@pytest.mark.numpy_only("why")\ndef test_x():\n    pass\n'
    )
    twice = tmp_path / "test_twice.py"
    twice.write_text(
        'import pytest\n\npytestmark = pytest.mark.numpy_only("why")\npytestmark = []\n'
    )
    assert skipped_whole_off_numpy(single) is None
    assert skipped_whole_off_numpy(twice) is None
    assert skipped_whole_off_numpy(Path(__file__)) is None  # this module: collected everywhere


class _Session:
    """What ``tests/conftest.py``'s ``outside_the_initial_paths`` asks of a pytest session:
    ``isinitpath``, as pytest answers it for these command line paths."""

    def __init__(self, *paths: Path):
        self.paths = set(paths)
        self.with_parents = self.paths.union(*(path.parents for path in paths))

    def isinitpath(self, path: Path, *, with_parents: bool = False) -> bool:
        return path in (self.with_parents if with_parents else self.paths)


def test_collection_leaves_out_only_what_no_command_line_path_holds(request, tmp_path: Path):
    conftest = request.config.pluginmanager.get_plugin(str(Path(__file__).with_name("conftest.py")))
    outside = conftest.outside_the_initial_paths
    named, beside, deeper = (
        tmp_path / "t" / "test_a.py",
        tmp_path / "t" / "test_b.py",
        tmp_path / "t" / "d",
    )
    files = _Session(named, tmp_path / "u" / "test_c.py")  # files named: their folders' others out
    assert outside(files, beside, {}) and outside(files, deeper, {})
    assert outside(files, deeper / "test_d.py", {})
    assert not outside(files, named, {}) and not outside(files, tmp_path / "t", {})
    assert not outside(files, tmp_path / "u" / "test_c.py", {})
    folder = _Session(tmp_path / "t")  # a folder named: everything under it in
    for path in (named, beside, deeper, deeper / "test_d.py"):
        assert not outside(folder, path, {}), path
    assert outside(folder, tmp_path / "u" / "test_c.py", {})
    # the answers by folder are kept: a second session asks with its own
    folders: dict = {}
    assert outside(files, beside, folders) and folders == {tmp_path / "t": False}
