"""torch's ``torch.utils.tensorboard``: :class:`SummaryWriter` writes TensorBoard event files.

Like PyTorch's, it needs the ``tensorboard`` package (``pip install "retrograd[tensorboard]"``):
its protocol buffers and its event-file writer are used as they are, so that ``tensorboard
--logdir runs`` shows a retrograd run exactly as a PyTorch one. Values may be retrograd
tensors, torch tensors, arrays or numbers.

Not written: ``add_graph`` (TensorBoard's graph is a TorchScript trace; ``retrograd graph`` draws
retrograd's), ``add_embedding``, ``add_video``, ``add_audio``, ``add_mesh``: each warns or
raises saying so instead of failing on a missing attribute.
"""

from __future__ import annotations

try:
    from tensorboard.compat.proto.event_pb2 import Event, SessionLog
    from tensorboard.summary.writer.event_file_writer import EventFileWriter
except ImportError as error:  # torch's writer needs the package too
    raise ImportError(
        "retrograd.utils.tensorboard needs the tensorboard package: "
        'pip install "retrograd[tensorboard]" (or pip install tensorboard)'
    ) from error

import errno
import os
import socket
import time
import warnings
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from ...errors import InvalidArgumentError
from . import summary as summaries

__all__ = ["FileWriter", "SummaryWriter"]


class FileWriter:
    """One event file in ``log_dir``: events are queued and written by a background thread
    every ``flush_secs`` or when ``max_queue`` are waiting (TensorBoard's own writer)."""

    def __init__(
        self, log_dir: str, max_queue: int = 10, flush_secs: float = 120, suffix: str = ""
    ):
        if os.path.exists(log_dir) and not os.path.isdir(log_dir):  # makedirs: "File exists"
            raise NotADirectoryError(
                errno.ENOTDIR, "SummaryWriter: log_dir is a file, not a folder", str(log_dir)
            )
        self.event_writer = EventFileWriter(str(log_dir), max_queue, flush_secs, suffix)

    def get_logdir(self) -> str:
        return self.event_writer.get_logdir()

    def add_event(self, event: Event, step: Any = None, walltime: float | None = None) -> None:
        event.wall_time = time.time() if walltime is None else float(walltime)
        if step is not None:
            event.step = _step(step)
        self.event_writer.add_event(event)

    def add_summary(
        self, summary: Any, global_step: Any = None, walltime: float | None = None
    ) -> None:
        self.add_event(Event(summary=summary), global_step, walltime)

    def flush(self) -> None:
        self.event_writer.flush()

    def close(self) -> None:
        self.event_writer.close()


def _step(step: Any) -> int:
    """A global step given as an int, a NumPy integer or a one-element tensor."""
    try:
        return int(summaries.as_array(step, "global_step").reshape(()))
    except (TypeError, ValueError) as error:
        raise InvalidArgumentError(f"global_step must be one integer, got {step!r}") from error


class SummaryWriter:
    """torch's ``SummaryWriter(log_dir=None, comment="", purge_step=None, max_queue=10,
    flush_secs=120, filename_suffix="")``: by default the run goes to
    ``runs/<Mon DD_HH-MM-SS>_<host><comment>``, as PyTorch names it."""

    def __init__(
        self,
        log_dir: str | os.PathLike | None = None,
        comment: str = "",
        purge_step: int | None = None,
        max_queue: int = 10,
        flush_secs: float = 120,
        filename_suffix: str = "",
    ):
        if not log_dir:
            stamp = datetime.now().strftime("%b%d_%H-%M-%S")
            log_dir = os.path.join("runs", f"{stamp}_{socket.gethostname()}{comment}")
        self.log_dir = str(log_dir)
        self.purge_step = purge_step
        self.max_queue, self.flush_secs, self.filename_suffix = (
            max_queue,
            flush_secs,
            filename_suffix,
        )
        self.file_writer: FileWriter | None = None
        self.all_writers: dict[str, FileWriter] = {}
        self._get_file_writer()

    def _get_file_writer(self) -> FileWriter:
        """The run's writer, (re)opened on first use and after :meth:`close`."""
        if self.file_writer is None:
            self.file_writer = FileWriter(
                self.log_dir, self.max_queue, self.flush_secs, self.filename_suffix
            )
            self.all_writers = {self.file_writer.get_logdir(): self.file_writer}
            if self.purge_step is not None:
                # TensorBoard drops the events of a crashed run from this step on
                step, self.purge_step = self.purge_step, None
                self.file_writer.add_event(Event(step=step, file_version="brain.Event:2"))
                self.file_writer.add_event(
                    Event(step=step, session_log=SessionLog(status=SessionLog.START))
                )
        return self.file_writer

    def get_logdir(self) -> str:
        return self.log_dir

    def _write(self, summary: Any, global_step: Any, walltime: float | None) -> None:
        self._get_file_writer().add_summary(summary, global_step, walltime)

    # -- what a run logs ------------------------------------------------------------------------
    def add_scalar(
        self,
        tag: str,
        scalar_value: Any,
        global_step: Any = None,
        walltime: float | None = None,
        new_style: bool = False,
        double_precision: bool = False,
    ) -> None:
        self._write(
            summaries.scalar(tag, scalar_value, new_style, double_precision), global_step, walltime
        )

    def add_scalars(
        self,
        main_tag: str,
        tag_scalar_dict: Mapping[str, Any],
        global_step: Any = None,
        walltime: float | None = None,
    ) -> None:
        """Several curves on one chart: each in its own run ``<log_dir>/<main_tag>_<tag>``
        (PyTorch's layout, which TensorBoard overlays)."""
        walltime = time.time() if walltime is None else walltime
        root = self._get_file_writer().get_logdir()
        for tag, value in tag_scalar_dict.items():
            path = root + "/" + main_tag.replace("/", "_") + "_" + tag
            writer = self.all_writers.get(path)
            if writer is None:
                writer = FileWriter(path, self.max_queue, self.flush_secs, self.filename_suffix)
                self.all_writers[path] = writer
            writer.add_summary(summaries.scalar(main_tag, value), global_step, walltime)

    def add_histogram(
        self,
        tag: str,
        values: Any,
        global_step: Any = None,
        bins: Any = "tensorflow",
        walltime: float | None = None,
        max_bins: int | None = None,
    ) -> None:
        if isinstance(bins, str) and bins == "tensorflow":
            bins = summaries.default_bins()
        self._write(summaries.histogram(tag, values, bins, max_bins), global_step, walltime)

    def add_histogram_raw(
        self,
        tag: str,
        min: float,  # noqa: A002  (torch's keywords)
        max: float,  # noqa: A002
        num: int,
        sum: float,  # noqa: A002
        sum_squares: float,
        bucket_limits: Any,
        bucket_counts: Any,
        global_step: Any = None,
        walltime: float | None = None,
    ) -> None:
        summary = summaries.histogram_raw(
            tag, min, max, num, sum, sum_squares, bucket_limits, bucket_counts
        )
        self._write(summary, global_step, walltime)

    def add_image(
        self,
        tag: str,
        img_tensor: Any,
        global_step: Any = None,
        walltime: float | None = None,
        dataformats: str = "CHW",
    ) -> None:
        self._write(summaries.image(tag, img_tensor, dataformats), global_step, walltime)

    def add_images(
        self,
        tag: str,
        img_tensor: Any,
        global_step: Any = None,
        walltime: float | None = None,
        dataformats: str = "NCHW",
    ) -> None:
        self._write(summaries.image(tag, img_tensor, dataformats), global_step, walltime)

    def add_figure(
        self,
        tag: str,
        figure: Any,
        global_step: Any = None,
        close: bool = True,
        walltime: float | None = None,
    ) -> None:
        """A matplotlib figure (or a list of them, shown as a batch) as an image."""
        if isinstance(figure, list | tuple):
            import numpy as np

            pixels = np.stack([summaries.figure_pixels(f, close) for f in figure])
            self.add_images(tag, pixels, global_step, walltime, dataformats="NHWC")
        else:
            pixels = summaries.figure_pixels(figure, close)
            self.add_image(tag, pixels, global_step, walltime, dataformats="HWC")

    def add_text(
        self, tag: str, text_string: str, global_step: Any = None, walltime: float | None = None
    ) -> None:
        self._write(summaries.text(tag, text_string), global_step, walltime)

    def add_pr_curve(
        self,
        tag: str,
        labels: Any,
        predictions: Any,
        global_step: Any = None,
        num_thresholds: int = 127,
        weights: Any = None,
        walltime: float | None = None,
    ) -> None:
        curve = summaries.pr_curve(tag, labels, predictions, num_thresholds, weights)
        self._write(curve, global_step, walltime)

    def add_hparams(
        self,
        hparam_dict: Mapping[str, Any],
        metric_dict: Mapping[str, Any],
        hparam_domain_discrete: Mapping[str, Any] | None = None,
        run_name: str | None = None,
        global_step: Any = None,
    ) -> None:
        """One session of TensorBoard's HParams table, in the run ``<log_dir>/<run_name>``
        (by default the time), with each metric as a scalar there."""
        experiment, start, end = summaries.hparams(hparam_dict, metric_dict, hparam_domain_discrete)
        # every metric checked before the run is made: a bad one left a session without them
        metrics = []
        for name, value in metric_dict.items():
            summaries.as_array(value, f"add_hparams: metric {name!r}")
            metrics.append(summaries.scalar(name, value))
        path = os.path.join(self._get_file_writer().get_logdir(), run_name or str(time.time()))
        with SummaryWriter(log_dir=path) as writer:
            for part in (experiment, start, end, *metrics):
                writer._write(part, global_step, None)

    def add_graph(
        self, model: Any, input_to_model: Any = None, verbose: bool = False, **_: Any
    ) -> None:
        """Not written: TensorBoard's graph is a TorchScript trace, which retrograd has not;
        ``retrograd graph`` draws a step's graph. Warns, so that a script runs on."""
        warnings.warn(
            "SummaryWriter.add_graph: retrograd writes no TensorBoard graph (it would be a "
            "TorchScript trace); `retrograd graph` draws a step's graph",
            stacklevel=2,
        )

    def _not_written(self, name: str) -> None:
        raise InvalidArgumentError(
            f"SummaryWriter.{name}: not supported by retrograd's writer (scalars, histograms, "
            "images, figures, text, PR curves and hparams are)"
        )

    def add_embedding(self, *args: Any, **kwargs: Any) -> None:
        self._not_written("add_embedding")

    def add_video(self, *args: Any, **kwargs: Any) -> None:
        self._not_written("add_video")

    def add_audio(self, *args: Any, **kwargs: Any) -> None:
        self._not_written("add_audio")

    def add_mesh(self, *args: Any, **kwargs: Any) -> None:
        self._not_written("add_mesh")

    # -- lifecycle ------------------------------------------------------------------------------
    def flush(self) -> None:
        for writer in self.all_writers.values():
            writer.flush()

    def close(self) -> None:
        """Write what is queued and close every file; a later ``add_*`` opens a new one."""
        for writer in self.all_writers.values():
            writer.flush()
            writer.close()
        self.file_writer, self.all_writers = None, {}

    def __enter__(self) -> SummaryWriter:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
