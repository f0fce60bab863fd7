"""``retrograd bench``: finds the repository's scripts, runs them, collects their tables."""

from __future__ import annotations

from pathlib import Path

import pytest

import retrograd
from retrograd.app import bench
from retrograd.app.cli import main

pytestmark = pytest.mark.numpy_only(
    "the command line picks its inner backend by --backend (tested here with torch too); the "
    "suite's RETROGRAD_INNER does not reach it, so a torch-suite run would repeat this one"
)

REPOSITORY_BENCHMARKS = Path(retrograd.__file__).resolve().parents[2] / "benchmarks"


def test_lists_the_repository_scripts(capsys):
    if not REPOSITORY_BENCHMARKS.is_dir():
        pytest.skip("not a source checkout")
    assert main(["bench", "--list"]) == 0
    listed = capsys.readouterr().out.split()
    assert listed[:2] == ["bench_overhead.py", "bench_mlp.py"]
    assert {"bench_checkpointing.py", "bench_cnn.py"} <= set(listed)
    # a script that needs arguments no default can give is left to be run by hand
    assert "bench_ddp_checkouts.py" not in listed
    assert main(["bench", "ddp_checkouts"]) == 1
    assert "needs arguments" in capsys.readouterr().err


def test_clear_error_without_the_repository(tmp_path, monkeypatch, capsys):
    installed = tmp_path / "site-packages" / "retrograd" / "bench.py"
    monkeypatch.setattr(bench, "__file__", str(installed))
    assert main(["bench"]) == 1
    error = capsys.readouterr().err
    assert "benchmarks/" in error and "pip install -e" in error and "--dir" in error
    assert main(["bench", "--dir", str(tmp_path)]) == 1


def test_runs_scripts_and_collects_their_tables(tmp_path, capsys):
    folder = tmp_path / "benchmarks"
    folder.mkdir()
    (folder / "bench_fast.py").write_text(
        "import retrograd\nprint('| impl | ms |')\nprint('|---|---|')\nprint('| retrograd | 1 |')\n"
    )
    (folder / "bench_broken.py").write_text("import sys\nprint('partial')\nsys.exit(3)\n")
    out = tmp_path / "tables.md"
    assert main(["bench", "--dir", str(folder), "--out", str(out)]) == 1  # one failed
    captured = capsys.readouterr()
    assert "## bench_fast.py" in captured.out and "| retrograd | 1 |" in captured.out
    assert "failed: bench_broken.py" in captured.err
    markdown = out.read_text()
    assert "    python benchmarks/bench_fast.py" in markdown
    assert "## bench_broken.py (failed: exit 3)" in markdown
    assert main(["bench", "--dir", str(folder), "fast"]) == 0
    assert main(["bench", "--dir", str(folder), "nope"]) == 1
    assert "unknown benchmark(s) nope" in capsys.readouterr().err
