"""The numbers the README and the docs quote are those of the benchmarks' results files; no
heading under docs/ is tied to a date, a run or a change; the product modules' docstring
examples hold. The README's and the docs' Python blocks run in ``test_docs_examples.py``.
"""

from __future__ import annotations

import doctest
import importlib
import importlib.util
import json
import re
from pathlib import Path

import pytest

import retrograd as rg

#: Every test here but the docstring examples' (which run in this process, on the suite's
#: default backend): examples run in fresh interpreters, whose default backend is NumPy's
#: whatever the suite's, and the rest reads and writes files.
BACKEND_INDEPENDENT = pytest.mark.backend_independent("fresh interpreters and files")

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
#: the documents under docs/ whose ```python blocks are whole programs
DOCS_WITH_EXAMPLES = ["checkpointing.md", "capture.md", "distributed.md"]


def python_blocks(path: Path = README) -> list[str]:
    return re.findall(r"```python\n(.*?)```", path.read_text(), re.S)


@BACKEND_INDEPENDENT
def test_readme_has_the_two_commands():
    text = README.read_text()
    assert 'pip install -e ".[all]" && retrograd train' in text
    assert 'pip install -e ".[dev]" && python -m pytest' in text


@BACKEND_INDEPENDENT
def test_readme_shows_the_gpt_on_its_first_screen():
    first_screen = "\n".join(README.read_text().splitlines()[:40])
    assert "retrograd train --model gpt" in first_screen
    assert "retrograd sample" in first_screen and "unigram" in first_screen


@BACKEND_INDEPENDENT
def test_readme_ten_line_example_is_ten_lines_of_code():
    first = python_blocks()[0]
    code = [line for line in first.splitlines() if line.strip()]
    assert len(code) <= 11  # ten lines, imports included, give or take the print


def test_the_quickstart_example_fits_its_line(capsys):
    """``examples/quickstart.py`` runs as it stands, on the suite's default backend (in this
    process: nothing in it depends on a fresh interpreter), and finds its line, y = 3x + 0.5."""
    import runpy

    runpy.run_path(str(ROOT / "examples" / "quickstart.py"), run_name="__main__")
    words = capsys.readouterr().out.split()
    assert words[0] == "loss" and float(words[1]) < 1e-4, words
    assert abs(float(words[3]) - 3.0) < 1e-2 and abs(float(words[5]) - 0.5) < 1e-2, words


@BACKEND_INDEPENDENT
def test_every_doc_with_examples_has_one():
    for name in DOCS_WITH_EXAMPLES:
        assert python_blocks(DOCS / name), name


# -- headings: reference, not a lab notebook ------------------------------------------------------
MONTHS = "jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec"
#: what ties a heading to a moment: a date, a time, an issue or commit, a run or a session
DATED = re.compile(
    rf"\b\d{{4}}-\d{{2}}-\d{{2}}\b|\b\d{{1,2}} ({MONTHS})[a-z]*\b|\b({MONTHS})[a-z]* \d{{1,2}}\b"
    r"|\b\d{1,2}:\d{2}\b|\bUTC\b|\bissue \d+|\b(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}\b"
    r"|\b(session|sessions|earlier|later|latest|since|before|first run|quiet run|this run|"
    r"what changed|final run)\b",
    re.I,
)


def headings(text: str) -> list[str]:
    """The markdown headings of ``text``, fenced code left out."""
    prose = re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)
    return [line for line in prose.splitlines() if line.startswith("#")]


@BACKEND_INDEPENDENT
def test_no_heading_under_docs_names_a_date_a_run_or_a_change():
    found = [
        f"{path.name}: {heading}"
        for path in sorted(DOCS.glob("*.md"))
        for heading in headings(path.read_text())
        if DATED.search(heading)
    ]
    assert found == []


@BACKEND_INDEPENDENT
@pytest.mark.parametrize(
    "heading",
    [
        "### Later on 01 Dec (11:00 UTC): within 1.2x on both backends",
        "#### Since d6916e4: a step's gradients are freed",
        "### What changed (issue 14)",
        "### Earlier sessions' experiments (still valid)",
        "### Quiet run after registration agreed once",
        "## Results 2026-12-01",
    ],
)
def test_the_heading_check_finds_dated_headings(heading):
    assert DATED.search(heading)


# -- quoted numbers: generated from benchmarks/results/ -------------------------------------------
def load_report():
    """``benchmarks/report.py``, which renders the results files into the docs."""
    spec = importlib.util.spec_from_file_location("report", ROOT / "benchmarks" / "report.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@BACKEND_INDEPENDENT
def test_the_docs_quote_the_results_files():
    """docs/benchmarks.md's tables and the README's numbers are what report.py renders from
    benchmarks/results/*.json now: a results file rerun without regenerating the docs, or a
    number edited by hand between the markers, fails here."""
    report = load_report()
    stale = [str(path.relative_to(ROOT)) for path in report.stale()]
    assert stale == [], (
        f"{stale} disagree with benchmarks/results/: run python benchmarks/report.py"
    )


@BACKEND_INDEPENDENT
def test_every_benchmark_results_file_has_a_block_in_benchmarks_md():
    report = load_report()
    quoted = report.quoted_names([(DOCS / "benchmarks.md").read_text()])
    assert {"overhead", "mlp", "cnn", "capture", "gpt", "checkpointing", "train"} <= quoted
    assert {"ddp", "ddp-scaling", "ddp-predict", "ddp-overhead", "gpu"} <= quoted
    assert {"gpt-torch", "lm", "convnets", "convs", "ddp_checkouts"} <= quoted


@BACKEND_INDEPENDENT
def test_every_results_name_a_script_writes_has_a_block_in_benchmarks_md():
    """A benchmark added to benchmarks/ gets its section: every name a script passes to
    ``write_results`` as a string literal is quoted by docs/benchmarks.md."""
    written = {
        match.group(1)
        for path in sorted((ROOT / "benchmarks").glob("bench_*.py"))
        for match in re.finditer(r"write_results\(\s*\"([\w.-]+)\"", path.read_text())
    }
    assert {"overhead", "lm", "convs"} <= written  # the pattern finds them
    quoted = load_report().quoted_names([(DOCS / "benchmarks.md").read_text()])
    assert sorted(written - quoted) == []


def results_file(folder: Path, name: str, tables: dict, **machine) -> None:
    record = {
        "benchmark": name,
        "command": f"python benchmarks/bench_{name}.py",
        "commit": "abc1234",
        "date": "2030-01-02 03:04 UTC",
        "machine": {
            "cpu": "Test CPU",
            "cores": 4,
            "blas_threads": 1,
            "python": "3.11.7",
            "numpy": "2.4.6",
            **machine,
        },
        "notes": "",
        "tables": tables,
    }
    (folder / f"{name}.json").write_text(json.dumps(record))


def one_table(rows: list[list[str]], header=("implementation", "time", "ratio")) -> dict:
    return {"title": {"header": list(header), "rows": rows}}


@pytest.fixture
def checkout(tmp_path):
    """A README and a docs/ page quoting results, and an empty results folder."""
    (tmp_path / "docs").mkdir()
    (tmp_path / "results").mkdir()
    (tmp_path / "README.md").write_text(
        "| speed | <!-- value: readme-speed-retrograd -->old<!-- /value --> |\n"
        "torch: <!-- value: readme-speed-torch -->old<!-- /value -->\n"
    )
    (tmp_path / "docs" / "benchmarks.md").write_text(
        "## MLP\n\n<!-- results: mlp -->\nold\n<!-- /results -->\n\n"
        "## Others\n\n<!-- results: others -->\n<!-- /results -->\n"
    )
    return tmp_path


@BACKEND_INDEPENDENT
def test_without_results_files_the_docs_say_so(checkout):
    report = load_report()
    rendered = report.rendered(checkout, checkout / "results")
    page = rendered[checkout / "docs" / "benchmarks.md"][1]
    assert "_No results file yet: `benchmarks/results/mlp.json`" in page
    assert "_Every results file is quoted above._" in page
    readme = rendered[checkout / "README.md"][1]
    assert readme.count("no results file yet (`benchmarks/results/overhead.json`") == 2


@BACKEND_INDEPENDENT
def test_results_files_become_tables_and_the_readme_numbers(checkout):
    folder = checkout / "results"
    results_file(
        folder,
        "overhead",
        one_table([["retrograd", "6.00", "1.00"], ["PyTorch eager", "12.00", "2.00"]]),
    )
    results_file(
        folder,
        "mlp",
        one_table(
            [
                ["NumPy: the 8 matmuls alone", "20.00", "1.50"],
                ["retrograd", "30.00", "1.00"],
                ["PyTorch eager", "24.00", "1.25"],
            ]
        ),
    )
    results_file(
        folder,
        "cnn",
        one_table(
            [["training step, NoCheckpointing", "90", "60", "1.50"]],
            header=("timed", "ours", "torch", "ratio"),
        ),
    )
    results_file(folder, "rnn", one_table([["retrograd", "1.00", "1.00"]]))
    report = load_report()
    rendered = report.rendered(checkout, folder)
    readme = rendered[checkout / "README.md"][1]
    # 30 / 24 = 1.25 torch's MLP step, 30 / 20 = 1.50 its matmuls; the CNN's ratio as measured
    assert (
        "<!-- value: readme-speed-retrograd -->per recorded op 6.00 µs forward + backward; an "
        "MLP step 1.25x and a CNN step 1.50x PyTorch eager's time; an MLP step 1.50x the time "
        "of its matmuls alone<!-- /value -->"
    ) in readme
    assert "per op 12.00 µs (eager), same run" in readme
    page = rendered[checkout / "docs" / "benchmarks.md"][1]
    mlp_block = page.split("<!-- results: mlp -->")[1].split("<!-- /results -->")[0]
    assert (
        "Measured 2030-01-02 03:04 UTC at commit abc1234 with `python benchmarks/bench_mlp.py`"
        in mlp_block
    )
    assert "Test CPU, 4 cores, one BLAS thread; Python 3.11.7, NumPy 2.4.6" in mlp_block
    assert "| retrograd | 30.00 | 1.00 |" in mlp_block and "old" not in mlp_block
    others = page.split("<!-- results: others -->")[1]
    assert "**`rnn`**" in others and "**`mlp`**" not in others  # quoted above: not repeated
    assert report.stale(checkout, folder) == [
        checkout / "README.md",
        checkout / "docs" / "benchmarks.md",
    ]
    for path, (_, wanted) in rendered.items():
        path.write_text(wanted)
    assert report.stale(checkout, folder) == []
    results_file(folder, "mlp", one_table([["retrograd", "31.00", "1.00"]]))  # a rerun
    assert report.stale(checkout, folder) == [
        checkout / "README.md",
        checkout / "docs" / "benchmarks.md",
    ]


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
    "retrograd.tensor.norms",
    "retrograd.linalg",
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


@BACKEND_INDEPENDENT
def test_a_figure_block_shows_only_the_plot_drawn_beside_a_results_file(checkout):
    # a page explaining a feature shows its benchmark's plot, and says so while there is none
    page = checkout / "docs" / "checkpointing.md"
    page.write_text("## Plot\n\n<!-- figure: budget_loops -->\nold\n<!-- /figure -->\n")
    report = load_report()
    before = report.rendered(checkout, checkout / "results")[page][1]
    assert "_No plot yet: `benchmarks/results/budget_loops.png`" in before
    results_file(checkout / "results", "budget_loops", one_table([["mlp", "1.00", "1.00"]]))
    (checkout / "results" / "budget_loops.png").write_bytes(b"\x89PNG")
    after = report.rendered(checkout, checkout / "results")[page][1]
    assert (
        "![budget_loops: python benchmarks/bench_budget_loops.py](../results/budget_loops.png)"
        in after
    )
    assert "Measured 2030-01-02 03:04 UTC" in after and "| mlp |" not in after


@BACKEND_INDEPENDENT
def test_the_budget_plot_is_drawn_from_the_results_file(tmp_path):
    pytest.importorskip("matplotlib")
    path = ROOT / "benchmarks" / "plot_budget_loops.py"
    spec = importlib.util.spec_from_file_location("plot_budget_loops", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    header = ["workload", "budget", "peak / NoCkpt", "time / NoCkpt"]
    rows = [["mlp", "0.5x", "0.54", "1.10"], ["mlp", "0.25x", "0.30", "1.90"]]
    results_file(tmp_path, "budget_loops", {"loops": {"header": header, "rows": rows}})
    assert module.points(json.loads((tmp_path / "budget_loops.json").read_text())) == {
        "mlp": [(0.5, 1.10, 0.54), (0.25, 1.90, 0.30)]
    }
    drawn = module.plot(tmp_path / "budget_loops.json")
    assert drawn == str(tmp_path / "budget_loops.png")
    assert (tmp_path / "budget_loops.png").read_bytes()[:4] == b"\x89PNG"
