"""Every Python block of the README and of docs/*.md runs as written and does what its text says.

A block fenced ```python or ```py is code a reader will paste. The blocks of one document run in
order, in one namespace (a later block may continue an earlier one, as the text reads), on the
suite's default backend; a block that raises fails the test with the document and the line of
its opening fence.

Two markers, an HTML comment on the line right before a block's fence, say why a block is not
run here, in the document itself:

- ``<!-- not run: REASON -->``: the block needs what a test cannot have (several MPI ranks or
  torchrun processes, a GPU, the network, a long training run), or is a fragment of such a
  program. The reason is required.
- ``<!-- excerpt: PATH -->``: the block quotes source lines of the repository file PATH (an op
  table's declarations, which run when retrograd is imported); each of its lines must still be
  in that file, so the quote cannot go stale.
"""

from __future__ import annotations

import contextlib
import io
import re
import threading
from dataclasses import dataclass
from pathlib import Path

import pytest

import retrograd as rg
import retrograd.distributed as dist

ROOT = Path(__file__).resolve().parents[1]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

PYTHON_FENCE = re.compile(r"^```(?:python|py)\s*$")
MARKER = re.compile(r"^<!--\s*(not run|excerpt):(.*?)-->\s*$")


@dataclass
class Block:
    document: Path
    line: int  # 1-based line of the opening fence
    code: str
    marker: str | None  # "not run", "excerpt" or None
    argument: str  # the marker's reason or path

    @property
    def where(self) -> str:
        inside = self.document.is_relative_to(ROOT)
        return f"{self.document.relative_to(ROOT) if inside else self.document}:{self.line}"


def python_blocks(document: Path) -> list[Block]:
    """The ```python / ```py blocks of ``document``, each with the marker right before it."""
    lines = document.read_text().splitlines()
    blocks = []
    index = 0
    while index < len(lines):
        if PYTHON_FENCE.match(lines[index]):
            end = index + 1
            while not lines[end].startswith("```"):
                end += 1
            marker = MARKER.match(lines[index - 1]) if index else None
            blocks.append(
                Block(
                    document,
                    index + 1,
                    # blank lines up to the fence, so a traceback's line is the document's
                    "\n" * (index + 1) + "\n".join(lines[index + 1 : end]) + "\n",
                    marker.group(1) if marker else None,
                    marker.group(2).strip() if marker else "",
                )
            )
            index = end
        index += 1
    return blocks


@contextlib.contextmanager
def threads_report_to(raised: list[BaseException]):
    """Collects what the threads a block starts raise: an example's worker thread that fails
    only prints its traceback, and the block itself would return as if it had worked."""
    previous = threading.excepthook
    threading.excepthook = lambda arguments: raised.append(arguments.exc_value)
    try:
        yield
    finally:
        threading.excepthook = previous


def run_blocks(document: Path) -> list[tuple[Block, str]]:
    """Runs the document's runnable blocks in order in one namespace; each block's stdout."""
    namespace: dict = {"__name__": "__main__"}
    printed = []
    try:
        for block in python_blocks(document):
            if block.marker is not None:
                continue
            output = io.StringIO()
            in_threads: list[BaseException] = []
            try:
                with contextlib.redirect_stdout(output), threads_report_to(in_threads):
                    exec(compile(block.code, str(block.document), "exec"), namespace)
                if in_threads:
                    raise in_threads[0]
            except Exception as error:
                raise AssertionError(
                    f"the block at {block.where} raised {type(error).__name__}: {error}"
                ) from error
            printed.append((block, output.getvalue()))
    finally:
        # a block that failed between init_process_group and destroy_process_group must not
        # leave this process's default group to the tests after it
        if dist.is_initialized():
            dist.destroy_process_group()
    return printed


def readme_claims(printed: list[tuple[Block, str]]) -> None:
    (ten_lines, ten_lines_output), (lean, lean_output) = printed[:2]
    # "learn which feature is largest": the model learns the rule
    accuracy = float(ten_lines_output.split()[-1])
    assert accuracy > 0.9, f"{ten_lines.where} printed {ten_lines_output!r}"
    # "memory-bound outputs recomputed in backward": tanh's output is; the gradient is
    # x^T (1 - tanh(x @ w)^2) by hand, x @ w = [-0.5, -0.5]
    gradient, recomputed = lean_output.rsplit(" ", 1)
    assert int(recomputed) > 0, f"{lean.where} printed {lean_output!r}"
    slope = 1 - 0.46211715726000974**2
    (dw0,), (dw1,) = eval(gradient)
    assert [dw0, dw1] == pytest.approx([4.0 * slope, 6.0 * slope], rel=1e-6), lean_output


#: what the text around a document's blocks says they print, checked on their output
CLAIMS = {"README.md": readme_claims}


@pytest.mark.parametrize(
    "document",
    [document for document in DOCUMENTS if python_blocks(document)],
    ids=lambda document: str(document.relative_to(ROOT)),
)
def test_document_examples_run(document):
    rg.seed(0)  # the examples draw their data unseeded; the claims checked hold for any seed
    printed = run_blocks(document)
    check = CLAIMS.get(document.name)
    if check is not None:
        check(printed)


def test_every_marker_is_right_before_a_block_and_says_why():
    for document in DOCUMENTS:
        lines = document.read_text().splitlines()
        for number, line in enumerate(lines, 1):
            marker = MARKER.match(line)
            if marker is None:
                continue
            where = f"{document.relative_to(ROOT)}:{number}"
            assert number < len(lines) and PYTHON_FENCE.match(lines[number]), (
                f"{where}: a marker must be on the line right before a ```python block"
            )
            assert marker.group(2).strip(), f"{where}: the marker must say why"


def test_excerpts_quote_their_files_as_they_are():
    for document in DOCUMENTS:
        for block in python_blocks(document):
            if block.marker != "excerpt":
                continue
            source = (ROOT / block.argument).read_text()
            quoted = [line.strip() for line in block.code.splitlines() if line.strip()]
            stale = [line for line in quoted if line not in source]
            assert stale == [], f"{block.where} quotes lines {block.argument} no longer has"


def test_a_raising_block_is_named_by_its_document_and_line(tmp_path):
    document = tmp_path / "page.md"
    document.write_text(
        "# A page\n\n```python\nx = 1\n```\n\n<!-- not run: needs 2 MPI ranks -->\n"
        "```py\nraise SystemExit\n```\n\n```py\ny = x + 1\nz = y / 0\n```\n"
    )
    with pytest.raises(AssertionError, match=r"page\.md:12 raised ZeroDivisionError"):
        run_blocks(document)


def test_a_block_whose_thread_raises_is_named(tmp_path):
    document = tmp_path / "page.md"
    document.write_text(
        "```python\nimport threading\n\ndef work():\n    raise KeyError('w')\n\n"
        "thread = threading.Thread(target=work)\nthread.start()\nthread.join()\n```\n"
    )
    with pytest.raises(AssertionError, match=r"page\.md:1 raised KeyError"):
        run_blocks(document)
