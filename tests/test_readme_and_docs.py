"""The README's examples run as written; the product modules' docstring examples hold."""

from __future__ import annotations

import doctest
import importlib
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import retrograd as rg

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(), re.S)


def test_readme_has_the_two_commands():
    text = README.read_text()
    assert 'pip install -e ".[all]" && retrograd train' in text
    assert 'pip install -e ".[dev]" && python -m pytest' in text


def test_readme_shows_the_gpt_on_its_first_screen():
    first_screen = "\n".join(README.read_text().splitlines()[:40])
    assert "retrograd train --model gpt" in first_screen
    assert "retrograd sample" in first_screen and "unigram" in first_screen


def test_readme_ten_line_example_is_ten_lines_of_code():
    first = python_blocks()[0]
    code = [line for line in first.splitlines() if line.strip()]
    assert len(code) <= 11  # ten lines, imports included, give or take the print


@pytest.mark.parametrize("index", range(2))
def test_readme_examples_run(index):
    """Each example runs in a fresh interpreter, as a reader would paste it."""
    block = python_blocks()[index]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT / "src"), env.get("PYTHONPATH")]))
    completed = subprocess.run(
        [sys.executable, "-c", block], capture_output=True, text=True, env=env, timeout=120
    )
    assert completed.returncode == 0, completed.stderr
    if index == 0:  # the model learns the rule
        accuracy = float(completed.stdout.split()[-1])
        assert accuracy > 0.9, completed.stdout


MODULES = [
    "retrograd.nn",
    "retrograd.nn.modules",
    "retrograd.nn.modules.module",
    "retrograd.nn.modules.linear",
    "retrograd.nn.modules.conv",
    "retrograd.nn.modules.norm",
    "retrograd.nn.modules.container",
    "retrograd.nn.modules.pooling",
    "retrograd.nn.modules.loss",
    "retrograd.nn.modules.activation",
    "retrograd.nn.parameter",
    "retrograd.nn.init",
    "retrograd.nn.utils",
    "retrograd.optim.optimizers",
    "retrograd.optim.schedules",
    "retrograd.app.data",
    "retrograd.app.models",
    "retrograd.memory",
    "retrograd.app.graphview",
    "retrograd.app.trainer",
    "retrograd.app.text",
    "retrograd.autodiff.grad_mode",
    "retrograd.autodiff.gradients",
    "retrograd.tensor.creation",
    "retrograd.nn.functional.conv",
    "retrograd.nn.functional.linear",
    "retrograd.nn.functional.loss",
    "retrograd.nn.functional.normalization",
    "retrograd.nn.functional.pooling",
    "retrograd.nn.functional.sampling",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    if name in ("retrograd.app.trainer",):
        pytest.importorskip("sklearn", reason="trains on the digits data set")
    module = importlib.import_module(name)
    result = doctest.testmod(module, extraglobs={"rg": rg}, optionflags=doctest.ELLIPSIS)
    assert result.failed == 0
    assert result.attempted > 0
