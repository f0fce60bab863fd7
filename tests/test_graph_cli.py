"""``retrograd graph``: the DOT names ops and shapes, colours kinds, marks recomputed nodes."""

from __future__ import annotations

import re
import shutil

import numpy as np
import pytest

import retrograd as rg
from retrograd.app.cli import main
from retrograd.app.graphview import FILL, RECOMPUTED, SAVED, RecordingAutodiff, trace_step

pytestmark = pytest.mark.backend_independent(
    "`retrograd graph` picks its backend by --backend (NumPy unless told), and the tests "
    "build theirs on NumPy"
)


def node_lines(dot: str) -> list[str]:
    """The graph's node statements, legend excluded."""
    return [line for line in dot.splitlines() if re.match(r"\s*n\d+ \[", line)]


def test_graph_command_writes_dot_with_ops_shapes_and_marks(tmp_path, capsys):
    assert main(["graph", "--checkpointing", "balanced", "--out", str(tmp_path)]) == 0
    printed = capsys.readouterr().out
    assert "recomputed" in printed and "graph.dot" in printed
    dot = (tmp_path / "graph.dot").read_text()
    assert dot.startswith("digraph") and dot.rstrip().endswith("}")
    nodes = node_lines(dot)
    for op in ("conv", "relu", "max_pool", "reshape", "linear", "log_softmax", "nll_loss"):
        assert any(f'label="{op}\\n' in line for line in nodes), op
    # shapes: the first convolution's output for a batch of 4 8x8 images, parameter names
    assert any('label="conv\\n[4, 64, 8, 8]' in line for line in nodes)
    assert any('label="0.weight\\n[64, 1, 3, 3]' in line for line in nodes)
    # compute- vs memory-bound colours
    conv = next(line for line in nodes if 'label="conv' in line)
    relu = next(line for line in nodes if 'label="relu' in line)
    assert FILL["compute"] in conv and "compute-bound" in conv
    assert FILL["memory"] in relu and "memory-bound" in relu
    # under BalancedCheckpointing the ReLU outputs are recomputed, drawn dashed
    recomputed = [line for line in nodes if 'class="memory-bound recomputed' in line]
    assert len(recomputed) == 2 and all("relu" in line for line in recomputed)
    assert all("dashed" in line for line in recomputed)
    # and its edges connect existing nodes
    names = {re.match(r"\s*(n\d+)", line).group(1) for line in nodes}
    for source, target in re.findall(r"(n\d+) -> (n\d+)", dot):
        assert source in names and target in names


def test_no_checkpointing_recomputes_nothing(tmp_path):
    assert main(["graph", "--checkpointing", "none", "--out", str(tmp_path)]) == 0
    nodes = node_lines((tmp_path / "graph.dot").read_text())
    assert not [line for line in nodes if " recomputed" in line]
    assert [line for line in nodes if 'label="relu' in line and " saved" in line]


@pytest.mark.parametrize("model", ["cnn", "mlp"])
def test_marks_are_the_engines_plan(model):
    """The recomputed nodes are what backward then recomputes, each once (the bytes agree
    exactly). The CNN recomputes its ReLUs; the MLP nothing: its layer norm is one
    compute-bound op, and the GELU's output is kept by the linear layer that reads it."""
    step = trace_step(model, (1, 8, 8), batch_size=3, checkpointing="balanced")
    planned = step.bytes_by_status()[RECOMPUTED]
    assert planned > 0 if model == "cnn" else planned == 0
    assert step.recomputed_bytes == planned
    none = trace_step(model, (1, 8, 8), batch_size=3, checkpointing="none")
    assert none.recomputed_bytes == 0 and none.bytes_by_status()[RECOMPUTED] == 0
    assert none.bytes_by_status()[SAVED] > 0


def test_mnist_sized_graph(tmp_path):
    assert (
        main(
            [
                "graph",
                "--dataset",
                "mnist",
                "--model",
                "mlp",
                "--batch-size",
                "2",
                "--out",
                str(tmp_path),
            ]
        )
        == 0
    )
    dot = (tmp_path / "graph.dot").read_text()
    assert "[2, 1, 28, 28]" in dot or "[2, 784]" in dot
    assert 'label="layer_norm' in dot or 'label="mean_dim' in dot


@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz's dot is not installed")
def test_svg_when_graphviz_is_installed(tmp_path):
    assert main(["graph", "--out", str(tmp_path)]) == 0
    svg = (tmp_path / "graph.svg").read_text()
    assert "<svg" in svg and "memory&#45;bound recomputed" in svg


def test_recording_backend_changes_nothing():
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((3, 4)), rng.standard_normal((4, 2))
    results = []
    for backend in (rg.Autodiff(), RecordingAutodiff()):
        with rg.use_backend(backend):
            weight = rg.tensor(w).require_grad()
            loss = (rg.tensor(x) @ weight).tanh().sum()
            results.append(weight.grad(loss.backward()).numpy())
    np.testing.assert_array_equal(*results)


def test_a_budget_graph_shows_what_the_plan_evicts_and_where_it_is_recomputed(tmp_path, capsys):
    arguments = ["graph", "--model", "mlp", "--checkpointing", "budget:2KB"]
    assert main([*arguments, "--out", str(tmp_path)]) == 0
    printed = capsys.readouterr().out
    nodes = node_lines((tmp_path / "graph.dot").read_text())
    evicted = [line for line in nodes if "evicted" in line]
    assert evicted and "evicted" in printed
    # each evicted value names the backward step that recomputes it
    assert all(re.search(r"recomputed at backward step \d+ \(\w+\)", line) for line in evicted)
