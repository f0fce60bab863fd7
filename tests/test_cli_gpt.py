"""``retrograd train --model gpt`` and ``retrograd sample`` end to end, on a tiny model and a
small fixed text: it learns (below the unigram baseline), resumes exactly, samples, and runs
with workers and checkpointing as the CNN does."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from retrograd.app.cli import main
from retrograd.app.gpt import GPTTrainConfig, train_gpt
from retrograd.app.text import TextCorpus, load_corpus, stdlib_text, unigram_entropy

pytestmark = pytest.mark.numpy_only(
    "the command line picks its inner backend by --backend (tested here with torch too); the "
    "suite's RETROGRAD_INNER does not reach it, so a torch-suite run would repeat this one"
)

TEXT = "".join(
    f"def f{i}(x):\n    return x * {i % 7} + {i % 5}\n\n" for i in range(300)
)  # ~10k characters of regular, Python-like text
TINY = [
    "--model", "gpt", "--n-layer", "1", "--n-head", "2", "--n-embd", "32",
    "--block-size", "16", "--batch-size", "8", "--lr", "1e-2", "--no-progress",
]  # fmt: skip


@pytest.fixture(scope="module")
def text_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("text") / "code.txt"
    path.write_text(TEXT)
    return str(path)


def quiet(text: str, **settings) -> dict:
    config = GPTTrainConfig(
        text=text, n_layer=1, n_head=2, n_embd=32, block_size=16, batch_size=8, lr=1e-2,
        progress=False, sample_tokens=0, eval_batches=2,
    )  # fmt: skip
    for name, value in settings.items():
        setattr(config, name, value)
    return train_gpt(config, echo=lambda *args: None)


def test_train_learns_below_the_unigram_baseline_and_writes_its_outputs(
    text_file, tmp_path, capsys
):
    out = tmp_path / "run"
    args = ["train", *TINY, "--text", text_file, "--steps", "80", "--eval-interval", "40"]
    assert main([*args, "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "step 40/80" in printed and "unigram baseline" in printed and "summary" in printed
    metrics = json.loads((out / "metrics.json").read_text())
    summary = metrics["summary"]
    # The baseline is the entropy of the training split's character frequencies, computed
    # here independently of the code under test.
    train_text = TEXT[: int(len(TEXT) * 0.9)]
    counts = np.array([train_text.count(ch) for ch in set(train_text)], dtype=float)
    p = counts / counts.sum()
    assert summary["unigram_baseline"] == pytest.approx(float(-(p * np.log(p)).sum()), rel=1e-9)
    assert summary["val_loss"] < summary["unigram_baseline"] - 0.3
    assert summary["train_loss"] < summary["unigram_baseline"] - 0.3
    assert summary["first_loss"] == pytest.approx(math.log(metrics["corpus"]["vocab_size"]), 0.1)
    assert len(metrics["step_losses"]) == 80 and [e["step"] for e in metrics["evals"]] == [40, 80]
    assert np.mean(metrics["step_losses"][-10:]) < np.mean(metrics["step_losses"][:10]) - 0.5
    for name in ("curves.png", "model.npz", "checkpoint.npz", "sample.txt"):
        assert (out / name).is_file(), name


def test_sample_prints_text_of_the_requested_length(text_file, tmp_path, capsys):
    out = str(tmp_path / "run")
    quiet(text_file, steps=2, out=out)  # a checkpoint to sample from: what it learned is not read
    capsys.readouterr()
    assert main(["sample", "--out", out, "--prompt", "def", "--tokens", "57", "--top-k", "5"]) == 0
    printed = capsys.readouterr().out
    assert printed.endswith("\n") and printed.startswith("def")
    assert len(printed) - 1 == 3 + 57
    assert set(printed[:-1]) <= set(TEXT)
    # The same seed gives the same text; another seed (almost surely) another.
    main(["sample", "--out", out, "--prompt", "def", "--tokens", "57", "--top-k", "5"])
    assert capsys.readouterr().out == printed
    main(["sample", "--out", out, "--tokens", "40", "--seed", "1"])
    assert len(capsys.readouterr().out) - 1 == 40


def test_resume_continues_the_step_count_and_matches_an_uninterrupted_run(text_file, tmp_path):
    settings = {"steps": 12, "eval_interval": 4, "dropout": 0.1}
    whole = quiet(text_file, out=str(tmp_path / "whole"), **settings)
    interrupted = str(tmp_path / "interrupted")
    first = quiet(text_file, out=interrupted, stop_at=8, **settings)
    assert len(first["step_losses"]) == 8 and first["summary"]["step"] == 8
    resumed = quiet(text_file, out=interrupted, resume=True, **settings)
    assert resumed["summary"]["step"] == 12
    assert [e["step"] for e in resumed["evals"]] == [4, 8, 12]
    assert resumed["step_losses"] == whole["step_losses"]  # bit for bit
    assert resumed["summary"]["val_loss"] == whole["summary"]["val_loss"]


def test_workers_and_checkpointing_take_the_same_steps(text_file):
    one = quiet(text_file, steps=6, eval_interval=6, out=None)
    two = quiet(text_file, steps=6, eval_interval=6, out=None, workers=2)
    balanced = quiet(text_file, steps=6, eval_interval=6, out=None, checkpointing="balanced")
    np.testing.assert_allclose(two["step_losses"], one["step_losses"], rtol=1e-5)
    assert balanced["step_losses"] == one["step_losses"]


def test_errors_are_one_line_usage_errors(text_file, tmp_path, capsys):
    missing = str(tmp_path / "nothing")
    assert main(["train", *TINY, "--text", text_file, "--resume", "--out", missing]) == 1
    assert "no checkpoint" in capsys.readouterr().err
    assert main(["sample", "--out", missing]) == 1
    assert "no GPT checkpoint" in capsys.readouterr().err
    out = str(tmp_path / "run")
    quiet(text_file, steps=2, out=out)
    assert main(["sample", "--out", out, "--prompt", "Zebra"]) == 1
    assert "never saw" in capsys.readouterr().err
    assert main(["train", *TINY, "--text", text_file, "--n-head", "3"]) == 2
    assert "multiple of n_head" in capsys.readouterr().err
    assert main(["train", *TINY, "--text", text_file, "--engine", "mpi"]) == 2
    assert "--workers" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["sample", "--tokens", "0"])


def test_the_default_corpus_is_the_standard_library_source_read_deterministically():
    text, files = stdlib_text(200_000)
    again, same_files = stdlib_text(200_000)
    assert text == again and files == same_files == sorted(files)
    assert len(text) == 200_000 and "def " in text and "import " in text
    corpus = load_corpus(None, limit=50_000)
    assert corpus.name.startswith("python-stdlib") and corpus.vocab_size > 60
    assert len(corpus.train) + len(corpus.val) == 50_000


def test_text_corpus_encoding_and_entropy():
    corpus = TextCorpus.from_text("aab" * 10)
    assert corpus.vocab == "ab" and corpus.decode(corpus.encode("ba")) == "ba"
    expected = -(2 / 3 * math.log(2 / 3) + 1 / 3 * math.log(1 / 3))
    assert unigram_entropy(np.array([0, 0, 1] * 9)) == pytest.approx(expected)


def test_cli_resume_without_steps_finishes_the_saved_run(text_file, tmp_path, capsys):
    out = str(tmp_path / "run")
    base = ["train", *TINY, "--text", text_file, "--out", out, "--eval-interval", "5"]
    assert main([*base, "--steps", "12", "--stop-at", "5"]) == 0
    assert main(["train", "--model", "gpt", "--out", out, "--resume", "--no-progress"]) == 0
    printed = capsys.readouterr().out
    assert "resumed at step 5" in printed and "step 12/12" in printed
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["summary"]["step"] == 12 and len(metrics["step_losses"]) == 12
    assert metrics["config"]["n_embd"] == 32  # the saved run's settings, not the defaults


def test_zero_takes_the_same_steps_and_resumes_from_a_consolidated_checkpoint(text_file, tmp_path):
    settings = {"steps": 8, "eval_interval": 4, "workers": 2}
    plain = quiet(text_file, out=None, **settings)
    whole = quiet(text_file, out=None, zero=True, **settings)
    np.testing.assert_allclose(whole["step_losses"], plain["step_losses"], rtol=1e-5)
    full = plain["summary"]["optimizer_state_bytes"]
    assert whole["summary"]["optimizer_state_bytes"] < 0.75 * full
    interrupted = str(tmp_path / "zero")
    quiet(text_file, out=interrupted, stop_at=4, zero=True, **settings)
    resumed = quiet(text_file, out=interrupted, resume=True, zero=True, **settings)
    np.testing.assert_allclose(resumed["step_losses"], whole["step_losses"], rtol=1e-6)
