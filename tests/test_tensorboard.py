"""rg.utils.tensorboard.SummaryWriter writes the events PyTorch's writer writes, read back by
TensorBoard's own loader."""

from __future__ import annotations

import glob
import os

import numpy as np
import pytest
import torch
from tensorboard.backend.event_processing.event_file_loader import RawEventFileLoader
from tensorboard.compat.proto.event_pb2 import Event
from torch.utils.tensorboard import SummaryWriter as TorchWriter

import retrograd as rg
from retrograd.errors import InvalidArgumentError, RetrogradError, ShapeError
from retrograd.utils.tensorboard import SummaryWriter


def events(run: str) -> list:
    """Every event of every event file under ``run`` (its own and its sub-runs'), by path,
    without the wall times and the file-version header."""
    found = []
    for path in sorted(glob.glob(os.path.join(run, "**", "events.out.tfevents.*"), recursive=True)):
        where = os.path.relpath(os.path.dirname(path), run)
        for record in RawEventFileLoader(path).Load():  # as written, not converted
            event = Event.FromString(record)
            if event.HasField("file_version"):
                continue
            event.wall_time = 0.0
            found.append((where, event))
    return found


def write_both(tmp_path, log):
    ours, theirs = str(tmp_path / "ours"), str(tmp_path / "torch")
    with SummaryWriter(ours) as writer:
        log(writer, rg)
    with TorchWriter(theirs) as writer:
        log(writer, torch)
    return events(ours), events(theirs)


def test_scalars_histograms_and_text_are_torchs_events(tmp_path):
    values = np.random.default_rng(0).standard_normal(500)

    def log(writer, lib):
        for step in range(3):
            writer.add_scalar("loss/train", lib.tensor(2.0 - step), step)
            writer.add_scalar("lr", 0.1 * step, global_step=np.int64(step))
            writer.add_scalar("exact", 1 / 3, step, new_style=True, double_precision=True)
        writer.add_histogram("weights", lib.tensor(values), 7)
        writer.add_histogram("auto", lib.tensor(values), 8, bins="auto")
        writer.add_histogram("merged", values, 9, bins=49, max_bins=7)
        writer.add_text("note", "**markdown** text", 1)

    ours, theirs = write_both(tmp_path, log)
    assert len(ours) == len(theirs) == 13
    assert ours == theirs


def test_max_bins_is_a_maximum(tmp_path):
    """50 buckets merged for at most 7: groups of 8 (torch's writer makes 8 groups of 7)."""
    values = np.random.default_rng(0).standard_normal(500)
    with SummaryWriter(str(tmp_path)) as writer:
        writer.add_histogram("few", values, 9, bins=50, max_bins=7)
    ((_, event),) = events(str(tmp_path))
    histogram = event.summary.value[0].histo
    counts, edges = np.histogram(values, bins=50)
    expected = np.add.reduceat(counts, range(0, 50, 8))  # every group filled here
    assert len(expected) <= 7
    assert list(histogram.bucket) == [0, *expected]  # an empty bucket left of the first
    # each bucket up to its right edge: the empty one ends at the data's minimum
    np.testing.assert_array_equal(histogram.bucket_limit, [*edges[0:50:8], edges[50]])


def test_add_scalars_writes_one_run_per_curve(tmp_path):
    def log(writer, lib):
        for step in range(2):
            writer.add_scalars(
                "run/loss", {"train": 1.0 / (step + 1), "val": lib.tensor(0.5)}, step
            )

    ours, theirs = write_both(tmp_path, log)
    assert {where for where, _ in ours} == {"run_loss_train", "run_loss_val"}
    assert sorted(ours, key=str) == sorted(theirs, key=str)


@pytest.mark.parametrize(
    "shape, dataformats",
    [
        ((3, 8, 6), "CHW"),
        ((8, 6, 3), "HWC"),
        ((8, 6), "HW"),
        ((1, 8, 6), "CHW"),
        ((5, 3, 4, 4), "NCHW"),
        ((2, 4, 4, 1), "NHWC"),
    ],
)
def test_images_are_torchs_pixels(tmp_path, shape, dataformats):
    from io import BytesIO

    from PIL import Image

    image = np.random.default_rng(1).random(shape).astype(np.float32)

    def log(writer, lib):
        add = writer.add_images if dataformats.startswith("N") else writer.add_image
        add("picture", lib.tensor(image), 0, dataformats=dataformats)

    ours, theirs = write_both(tmp_path, log)
    (_, mine), (_, reference) = ours[0], theirs[0]
    a, b = mine.summary.value[0].image, reference.summary.value[0].image
    assert (a.height, a.width, a.colorspace) == (b.height, b.width, b.colorspace)
    pixels = [np.asarray(Image.open(BytesIO(x.encoded_image_string))) for x in (a, b)]
    np.testing.assert_array_equal(*pixels)


def test_pr_curve_and_hparams_are_torchs(tmp_path):
    rng = np.random.default_rng(2)
    labels, predictions = rng.integers(0, 2, 100), rng.random(100)

    def log(writer, lib):
        writer.add_pr_curve("pr", lib.tensor(labels), lib.tensor(predictions), 3, num_thresholds=11)
        writer.add_hparams(
            {"lr": 0.1, "optimizer": "adam", "layers": 3},
            {"hparam/accuracy": 0.9},
            hparam_domain_discrete={"optimizer": ["adam", "sgd"]},
            run_name="trial",
        )

    ours, theirs = write_both(tmp_path, log)
    assert len(ours) == 5
    assert ours == theirs


def test_purge_step_and_figures(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def log(writer, lib):
        figure = plt.figure(figsize=(2, 1), dpi=20)
        plt.plot([0, 1], [1, 0])
        writer.add_figure("curve", figure, 4)

    ours, theirs = write_both(tmp_path, log)
    (_, mine), (_, reference) = ours[0], theirs[0]
    assert mine.summary.value[0].image.width == reference.summary.value[0].image.width == 40
    run = str(tmp_path / "purged")
    with SummaryWriter(run, purge_step=5) as writer:
        writer.add_scalar("x", 1.0, 5)
    kinds = [event.WhichOneof("what") for _, event in events(run)]
    assert kinds == ["session_log", "summary"]


def test_default_run_folder_and_reopen_after_close(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    writer = SummaryWriter(comment="_trial")
    assert writer.get_logdir().startswith("runs" + os.sep) and writer.get_logdir().endswith(
        "_trial"
    )
    writer.close()
    writer.add_scalar("after", 1.0, 0)  # a closed writer opens a new file, as torch's does
    writer.close()
    assert [e.summary.value[0].tag for _, e in events(writer.get_logdir())] == ["after"]


def test_bad_input_is_a_clear_error(tmp_path):
    with SummaryWriter(str(tmp_path)) as writer:
        with pytest.raises(ShapeError, match="add_scalar: 'x' needs one value"):
            writer.add_scalar("x", rg.ones((2,)), 0)
        with pytest.raises(InvalidArgumentError, match="non-finite"):
            writer.add_histogram("h", np.array([1.0, np.nan]), 0)
        with pytest.raises(ShapeError, match="dataformats 'CHW' needs a 3-d image"):
            writer.add_image("i", np.zeros((4, 4)), 0)
        with pytest.raises(RetrogradError, match="add_embedding: not supported"):
            writer.add_embedding(np.zeros((3, 2)))
        with pytest.warns(UserWarning, match="add_graph"):
            writer.add_graph(rg.nn.Linear(2, 2), rg.ones((1, 2)))
        writer.add_scalar("still_fine", 1.0, 0)
    assert [e.summary.value[0].tag for _, e in events(str(tmp_path))] == ["still_fine"]
