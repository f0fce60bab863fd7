"""Render the benchmarks' results files into the docs: docs/benchmarks.md's tables and the
numbers the README quotes.

Every benchmark script ends by writing ``benchmarks/results/<name>.json``
(``common.write_results``: the command, the UTC date, the machine and library versions, its
tables). A document quotes those files between markers, and this script rewrites what stands
between them, so that no measured number is typed by hand:

``<!-- results: NAME -->`` ... ``<!-- /results -->`` (each on a line of its own)
    the whole of ``results/NAME.json``: where, when and how it was measured, then its tables;
    while there is no such file, a sentence saying so. ``NAME`` ``others`` stands for every
    results file that no other block of any document quotes.
``<!-- figure: NAME -->`` ... ``<!-- /figure -->`` (each on a line of its own)
    only the figure the benchmark drew beside ``results/NAME.json`` (``NAME.png``), with where
    and when it was measured: a page that explains a feature shows its plot, the tables stay
    in docs/benchmarks.md.
``<!-- value: KEY -->`` ... ``<!-- /value -->`` (inline)
    one quoted sentence (the README's numbers), made by ``VALUES[KEY]`` from the results files.

    python benchmarks/report.py            # rewrite README.md and docs/*.md
    python benchmarks/report.py --check    # list the documents that disagree; exit 1 if any

``tests/test_readme_and_docs.py`` runs the check: a results file and the docs cannot disagree.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"

BLOCK = re.compile(
    r"^<!-- results: (?P<name>[\w.-]+) -->\n(?P<body>.*?)^<!-- /results -->$", re.M | re.S
)
FIGURE = re.compile(
    r"^<!-- figure: (?P<name>[\w.-]+) -->\n(?P<body>.*?)^<!-- /figure -->$", re.M | re.S
)
VALUE = re.compile(r"<!-- value: (?P<key>[\w.-]+) -->(?P<body>.*?)<!-- /value -->", re.S)
RUN_ALL = "python benchmarks/run_all.py"


def documents(root: Path = ROOT) -> list[Path]:
    """The documents that may quote results: the README and every page under docs/."""
    return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


def load_results(folder: Path = RESULTS) -> dict[str, dict]:
    """Every results file of ``folder``, by name (the file name less ``.json``); a figure the
    benchmark drew beside it (``<name>.png``) is its ``"figure"``."""
    results = {}
    for path in sorted(folder.glob("*.json")):
        record = json.loads(path.read_text())
        figure = path.with_suffix(".png")
        if figure.exists():
            record["figure"] = figure
        results[path.stem] = record
    return results


# -- blocks ------------------------------------------------------------------------------------
def markdown_table(table: dict) -> str:
    """A results table (``{"header": [...], "rows": [[...], ...]}``) as markdown."""

    def cells(values) -> str:
        return "| " + " | ".join(str(v).replace("|", "\\|") for v in values) + " |"

    header = table["header"]
    lines = [cells(header), "|" + "---|" * len(header)]
    lines += [cells(row) for row in table["rows"]]
    return "\n".join(lines)


def machine_text(machine: dict) -> str:
    """``AMD EPYC, 2 cores, 23.5 GiB, one BLAS thread; Python 3.11.7, NumPy 2.4.6 (...)``."""
    parts = [str(machine.get("cpu", "unknown CPU")), f"{machine.get('cores', '?')} cores"]
    if "memory_gib" in machine:
        parts.append(f"{machine['memory_gib']} GiB")
    if machine.get("avx512"):
        parts.append("AVX-512")
    threads = machine.get("blas_threads")
    parts.append("one BLAS thread" if threads == 1 else f"BLAS threads: {threads}")
    versions = [f"Python {machine.get('python', '?')}"]
    numpy = f"NumPy {machine.get('numpy', '?')}"
    versions.append(f"{numpy} ({machine['blas']})" if "blas" in machine else numpy)
    known = {"cpu", "cores", "memory_gib", "blas_threads", "python", "numpy", "blas", "avx512"}
    versions += [f"{name} {version}" for name, version in machine.items() if name not in known]
    return ", ".join(parts) + "; " + ", ".join(versions)


def render_block(name: str, results: dict[str, dict], where: Path = ROOT / "docs") -> str:
    """What stands between ``<!-- results: name -->`` and ``<!-- /results -->`` in a document
    of folder ``where`` (figures are linked relative to it)."""
    record = results.get(name)
    if record is None:
        return (
            f"_No results file yet: `benchmarks/results/{name}.json` is written by the command "
            f"above; `{RUN_ALL}` runs every benchmark and regenerates this page._\n"
        )
    commit = f" at commit {record['commit']}" if record.get("commit") else ""
    lines = [
        f"Measured {record['date']}{commit} with `{record['command']}` on "
        f"{machine_text(record['machine'])}.",
        "",
    ]
    if record.get("notes"):
        lines += [record["notes"], ""]
    if "figure" in record:
        link = Path(os.path.relpath(record["figure"], where)).as_posix()
        lines += [f"![{name}: {record['command']}]({link})", ""]
    for title, table in record["tables"].items():
        lines += [f"**{title}**", "", markdown_table(table), ""]
        if table.get("note"):
            lines += [table["note"], ""]
    return "\n".join(lines)


def render_figure(name: str, results: dict[str, dict], where: Path = ROOT / "docs") -> str:
    """What stands between ``<!-- figure: name -->`` and ``<!-- /figure -->``."""
    record = results.get(name)
    if record is None or "figure" not in record:
        return (
            f"_No plot yet: `benchmarks/results/{name}.png` is drawn beside "
            f"`benchmarks/results/{name}.json` by the benchmark that writes it; `{RUN_ALL}` "
            "runs every benchmark and regenerates this page._\n"
        )
    link = Path(os.path.relpath(record["figure"], where)).as_posix()
    return (
        f"![{name}: {record['command']}]({link})\n\n"
        f"Measured {record['date']} with `{record['command']}` on "
        f"{machine_text(record['machine'])}.\n"
    )


def render_others(results: dict[str, dict], quoted: set[str], where: Path) -> str:
    """The ``others`` block: every results file no other block quotes, each under its name."""
    rest = [name for name in results if name not in quoted]
    if not rest:
        return "_Every results file is quoted above._\n"
    return "\n".join(f"**`{name}`**\n\n{render_block(name, results, where)}" for name in rest)


# -- inline values (the README's numbers) --------------------------------------------------------
class MissingResultError(Exception):
    """A value's results file, table or row is not there (yet)."""


def record_of(results: dict[str, dict], name: str) -> dict:
    if name not in results:
        raise MissingResultError(
            f"no results file yet (`benchmarks/results/{name}.json`, written by `{RUN_ALL}`)"
        )
    return results[name]


def cell(record: dict, row_label: str, column: int, table: int = 0) -> str:
    """The cell in ``column`` of the row whose first cell is ``row_label``, in the record's
    ``table``-th table."""
    tables = list(record["tables"].values())
    for row in tables[table]["rows"] if table < len(tables) else ():
        if row[0] == row_label:
            return str(row[column])
    raise MissingResultError(
        f"no row {row_label!r} in `benchmarks/results/{record['benchmark']}.json`"
    )


def number(text: str) -> float:
    """The first number in a cell (``"1.03x"``, ``"135.8 (131.2-140.0)"``, ``"98.61%"``)."""
    found = re.search(r"[-+]?\d[\d,]*(?:\.\d+)?(?:[eE][-+]?\d+)?", text)
    if found is None:
        raise MissingResultError(f"no number in {text!r}")
    return float(found.group().replace(",", ""))


def where(record: dict) -> str:
    machine = record["machine"]
    return f"{machine.get('cpu', 'unknown CPU')}, {machine.get('cores', '?')} cores"


def speed_retrograd(results: dict[str, dict]) -> str:
    overhead, mlp, cnn = (record_of(results, name) for name in ("overhead", "mlp", "cnn"))
    per_op = number(cell(overhead, "retrograd", 1))
    ours = number(cell(mlp, "retrograd", 1))
    mlp_torch = ours / number(cell(mlp, "PyTorch eager", 1))
    floor = ours / number(cell(mlp, "NumPy: the 8 matmuls alone", 1))
    cnn_torch = number(cell(cnn, "training step, NoCheckpointing", 3))
    return (
        f"per recorded op {per_op:.2f} µs forward + backward; an MLP step {mlp_torch:.2f}x and "
        f"a CNN step {cnn_torch:.2f}x PyTorch eager's time; an MLP step {floor:.2f}x the time "
        "of its matmuls alone"
    )


def speed_torch(results: dict[str, dict]) -> str:
    overhead = record_of(results, "overhead")
    try:
        return f"per op {number(cell(overhead, 'PyTorch eager', 1)):.2f} µs (eager), same run"
    except MissingResultError:
        return "not installed where the benchmarks ran"


def speed_jax(results: dict[str, dict]) -> str:
    overhead = record_of(results, "overhead")
    try:
        jitted = number(cell(overhead, "JAX jit (whole chain compiled)", 1))
        eager = number(cell(overhead, "JAX eager", 1))
    except MissingResultError:
        return "not installed where the benchmarks ran"
    return f"per op {jitted:.2f} µs jitted, {eager:.0f} µs eager, same run"


def train_gpt(results: dict[str, dict]) -> str:
    train = record_of(results, "train")
    run = "GPT, the standard library's source"

    def measure(label: str) -> str:
        return cell(train, label, 1, table=1)

    vocabulary = int(number(measure("vocabulary, characters")))
    baseline = number(measure("unigram baseline, nats/char"))
    validation = number(measure("validation loss at the end, nats/char"))
    side = "under" if validation < baseline else "above"
    return (
        f"over {measure('steps')} steps the loss fell from "
        f"{number(measure('loss at the first step, nats/char')):.2f} "
        f"nats/char at the first step (a uniform guess over the {vocabulary} characters is "
        f"{math.log(vocabulary):.2f}) to {number(measure('train loss at the end, nats/char')):.2f}"
        f" on training and {validation:.2f} on validation text, {side} the {baseline:.2f} of "
        f"the unigram baseline, which it crossed at step "
        f"{measure('first step below the unigram baseline')}; the run took "
        f"{number(cell(train, run, 2)):.1f} s of wall time ({number(cell(train, run, 3)):.1f} s "
        f"of training, {cell(train, run, 4)}) on {where(train)}, {train['date'][:10]}"
    )


def train_cnn(results: dict[str, dict]) -> str:
    train = record_of(results, "train")
    run = "CNN, digits"
    command = cell(train, run, 1)
    settings = "the defaults" if command == "retrograd train" else f"`{command}`"
    return (
        f"{cell(train, run, 5)} with {settings}, {number(cell(train, run, 3)):.1f} s of "
        f"training ({number(cell(train, run, 2)):.1f} s in all) on {where(train)}, "
        f"{train['date'][:10]}"
    )


#: the inline quotes, by key
VALUES: dict[str, Callable[[dict[str, dict]], str]] = {
    "readme-speed-retrograd": speed_retrograd,
    "readme-speed-torch": speed_torch,
    "readme-speed-jax": speed_jax,
    "readme-train-gpt": train_gpt,
    "readme-train-cnn": train_cnn,
}


def render_value(key: str, results: dict[str, dict]) -> str:
    if key not in VALUES:
        raise KeyError(f"<!-- value: {key} -->: no such value (benchmarks/report.py, VALUES)")
    try:
        return VALUES[key](results)
    except MissingResultError as missing:
        return str(missing)


# -- documents -----------------------------------------------------------------------------------
def quoted_names(texts: list[str]) -> set[str]:
    """The results files the documents' blocks quote by name."""
    return {m.group("name") for text in texts for m in BLOCK.finditer(text)} - {"others"}


def render(text: str, results: dict[str, dict], quoted: set[str], where: Path) -> str:
    """``text``, a document of folder ``where``, with every block and value rendered from
    ``results``."""

    def block(match: re.Match) -> str:
        name = match.group("name")
        if name == "others":
            body = render_others(results, quoted, where)
        else:
            body = render_block(name, results, where)
        return f"<!-- results: {name} -->\n\n{body.strip()}\n\n<!-- /results -->"

    text = BLOCK.sub(block, text)
    text = FIGURE.sub(
        lambda m: (
            f"<!-- figure: {m['name']} -->\n\n"
            f"{render_figure(m['name'], results, where).strip()}\n\n<!-- /figure -->"
        ),
        text,
    )
    return VALUE.sub(
        lambda m: f"<!-- value: {m['key']} -->{render_value(m['key'], results)}<!-- /value -->",
        text,
    )


def rendered(root: Path = ROOT, folder: Path = RESULTS) -> dict[Path, tuple[str, str]]:
    """Each document: (its text now, its text rendered from the results files)."""
    results = load_results(folder)
    texts = {path: path.read_text() for path in documents(root) if path.exists()}
    quoted = quoted_names(list(texts.values()))
    return {
        path: (text, render(text, results, quoted, path.parent)) for path, text in texts.items()
    }


def stale(root: Path = ROOT, folder: Path = RESULTS) -> list[Path]:
    """The documents whose quoted numbers disagree with the results files."""
    return [path for path, (now, wanted) in rendered(root, folder).items() if now != wanted]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--check", action="store_true", help="only list the documents that disagree (exit 1)"
    )
    options = parser.parse_args(argv)
    if options.check:
        behind = stale()
        for path in behind:
            print(f"{path.relative_to(ROOT)} disagrees with benchmarks/results/", file=sys.stderr)
        if behind:
            print("run: python benchmarks/report.py", file=sys.stderr)
        return 1 if behind else 0
    for path, (now, wanted) in rendered().items():
        if now != wanted:
            path.write_text(wanted)
            print(f"rewrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
