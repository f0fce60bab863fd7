"""The summaries TensorBoard reads, built from NumPy arrays: pure functions, no files.

Each returns a ``Summary`` protocol buffer of TensorBoard's own schema (``tensorboard.compat``),
so that TensorBoard, or anything that reads its event files, sees what a PyTorch run writes.
"""

from __future__ import annotations

import io
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from tensorboard.compat.proto.summary_pb2 import HistogramProto, Summary, SummaryMetadata
from tensorboard.compat.proto.tensor_pb2 import TensorProto
from tensorboard.compat.proto.tensor_shape_pb2 import TensorShapeProto

from ...errors import DTypeError, InvalidArgumentError, ShapeError

__all__ = [
    "default_bins",
    "grid",
    "histogram",
    "histogram_raw",
    "hparams",
    "image",
    "pr_curve",
    "scalar",
    "text",
    "to_hwc",
]


def as_array(value: Any, op: str) -> np.ndarray:
    """``value`` (a retrograd or torch tensor, an array, a number) as a NumPy array, detached."""
    if hasattr(value, "detach") and hasattr(value, "numpy"):  # a tensor of either library
        value = value.detach()
        value = value.cpu() if hasattr(value, "cpu") else value
        if str(value.dtype) == "torch.bfloat16":  # NumPy has none: widened exactly, as
            value = value.float()  # torch's writer does ("unsupported ScalarType" before)
        return np.asarray(value.numpy())
    array = np.asarray(value)
    if array.dtype.kind not in "biuf":  # a str was NumPy's bare "could not convert" later
        raise DTypeError(
            f"{op}: expected a tensor, an array or numbers, got {type(value).__name__}"
            + (f" of {array.dtype}" if array.dtype != object else "")
        )
    return array


def scalar(
    tag: str, value: Any, new_style: bool = False, double_precision: bool = False
) -> Summary:
    """One number; ``new_style`` stores it as a tensor (float64 with ``double_precision``)."""
    array = as_array(value, "add_scalar")
    if array.size != 1:
        raise ShapeError(f"add_scalar: {tag!r} needs one value, got shape {tuple(array.shape)}")
    number = float(array.reshape(()))
    if not new_style:
        return Summary(value=[Summary.Value(tag=tag, simple_value=number)])
    if double_precision:
        proto = TensorProto(double_val=[number], dtype="DT_DOUBLE")
    else:
        proto = TensorProto(float_val=[number], dtype="DT_FLOAT")
    metadata = SummaryMetadata(plugin_data=SummaryMetadata.PluginData(plugin_name="scalars"))
    return Summary(value=[Summary.Value(tag=tag, tensor=proto, metadata=metadata)])


def default_bins() -> list[float]:
    """TensorFlow's histogram bucket edges (``bins="tensorflow"``): ``±1e-12 * 1.1**k`` up to
    1e20 and 0, so that values of any scale land in buckets about 10% wide.

    >>> edges = default_bins()
    >>> len(edges), edges[len(edges) // 2], edges[-1] < 1e20 <= edges[-1] * 1.1
    (1549, 0, True)
    """
    positive, edge = [], 1e-12
    while edge < 1e20:
        positive.append(edge)
        edge *= 1.1
    return [-e for e in reversed(positive)] + [0] + positive


def histogram(tag: str, values: Any, bins: Any, max_bins: int | None = None) -> Summary:
    """The distribution of ``values``: ``bins`` as NumPy's ``histogram`` takes it (a count,
    edges, or a rule such as ``"auto"``), merged down to ``max_bins``; TensorBoard draws each
    bucket up to its right edge, so one empty bucket is kept left of the first filled one."""
    data = as_array(values, "add_histogram").astype(np.float64).reshape(-1)
    if data.size == 0:
        raise ShapeError(f"add_histogram: {tag!r} has no values")
    if not np.isfinite(data).all():
        raise InvalidArgumentError(f"add_histogram: {tag!r} has non-finite values")
    counts, limits = np.histogram(data, bins=bins)
    if max_bins is not None and counts.size > max_bins:
        group = math.ceil(counts.size / max_bins)
        padded = np.pad(counts, (0, -counts.size % group))
        counts = padded.reshape(-1, group).sum(axis=1)
        limits = np.append(limits[:-1:group], limits[-1])
    filled = np.flatnonzero(counts)
    first, last = int(filled[0]), int(filled[-1])
    if first > 0:
        counts, limits = counts[first - 1 : last + 1], limits[first : last + 2]
    else:
        counts, limits = np.concatenate([[0], counts[: last + 1]]), limits[: last + 2]
    return Summary(
        value=[
            Summary.Value(
                tag=tag,
                histo=HistogramProto(
                    min=float(data.min()),
                    max=float(data.max()),
                    num=data.size,
                    sum=float(data.sum()),
                    sum_squares=float(data @ data),
                    bucket_limit=limits.tolist(),
                    bucket=counts.astype(np.float64).tolist(),
                ),
            )
        ]
    )


def histogram_raw(
    tag: str,
    low: float,
    high: float,
    num: int,
    total: float,
    sum_squares: float,
    bucket_limits: Any,
    bucket_counts: Any,
) -> Summary:
    """A distribution already bucketed: each bucket's right edge and count."""
    limits, counts = list(bucket_limits), list(bucket_counts)
    if len(limits) != len(counts):
        raise InvalidArgumentError(
            f"add_histogram_raw: {len(limits)} bucket_limits but {len(counts)} bucket_counts"
        )
    histo = HistogramProto(
        min=low, max=high, num=num, sum=total, sum_squares=sum_squares,
        bucket_limit=limits, bucket=counts,
    )  # fmt: skip
    return Summary(value=[Summary.Value(tag=tag, histo=histo)])


_LAYOUTS = {"CHW", "HWC", "HW", "NCHW", "NHWC"}


def grid(images: np.ndarray, columns: int = 8) -> np.ndarray:
    """``[N, C, H, W]`` images tiled ``columns`` to a row into one ``[C, H', W']`` image (gray
    made RGB), as PyTorch's writer shows a batch."""
    if images.shape[1] == 1:
        images = np.concatenate([images] * 3, axis=1)
    count, channels, height, width = images.shape
    columns = min(count, columns)
    rows = math.ceil(count / columns)
    canvas = np.zeros((channels, height * rows, width * columns), dtype=images.dtype)
    for index in range(count):
        row, column = divmod(index, columns)
        canvas[:, row * height : (row + 1) * height, column * width : (column + 1) * width] = (
            images[index]
        )
    return canvas


def to_hwc(array: np.ndarray, dataformats: str) -> np.ndarray:
    """An image in ``dataformats`` layout (``CHW``, ``HWC``, ``HW``; ``NCHW``, ``NHWC`` for a
    batch, tiled by :func:`grid`) as ``[H, W, C]``."""
    layout = dataformats.upper()
    if layout not in _LAYOUTS:
        raise InvalidArgumentError(
            f"add_image: dataformats must be one of {sorted(_LAYOUTS)}, got {dataformats!r}"
        )
    if array.ndim != len(layout):
        raise ShapeError(
            f"add_image: dataformats {layout!r} needs a {len(layout)}-d image, "
            f"got shape {tuple(array.shape)}"
        )
    if layout in ("NCHW", "NHWC"):
        batch = array if layout == "NCHW" else array.transpose(0, 3, 1, 2)
        return grid(batch).transpose(1, 2, 0)
    if layout == "HW":
        return np.stack([array] * 3, axis=-1)
    hwc = array.transpose(1, 2, 0) if layout == "CHW" else array
    if hwc.shape[-1] == 1:
        hwc = np.concatenate([hwc] * 3, axis=-1)
    return hwc


def image(tag: str, value: Any, dataformats: str = "CHW") -> Summary:
    """A PNG of the image: floats are read as 0..1 and integers as 0..255, clipped."""
    from PIL import Image as PilImage  # pillow: a dependency of matplotlib

    array = to_hwc(as_array(value, "add_image"), dataformats)
    if array.size == 0:  # PIL's bare "cannot write empty image" otherwise
        raise ShapeError(f"add_image: {tag!r} has no pixels (shape {tuple(array.shape)} as HWC)")
    if array.shape[-1] not in (3, 4):
        raise ShapeError(
            f"add_image: {tag!r} needs 1, 3 or 4 channels, got {array.shape[-1]} "
            f"(shape {tuple(array.shape)} as HWC)"
        )
    scale = 1.0 if array.dtype == np.uint8 else 255.0
    pixels = (array.astype(np.float32) * scale).clip(0, 255).astype(np.uint8)
    height, width, channels = pixels.shape
    buffer = io.BytesIO()
    PilImage.fromarray(pixels).save(buffer, format="PNG")
    encoded = Summary.Image(
        height=height, width=width, colorspace=channels, encoded_image_string=buffer.getvalue()
    )
    return Summary(value=[Summary.Value(tag=tag, image=encoded)])


def figure_pixels(figure: Any, close: bool) -> np.ndarray:
    """A matplotlib figure rendered to ``[H, W, 4]`` uint8."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = FigureCanvasAgg(figure)
    canvas.draw()
    pixels = np.asarray(canvas.buffer_rgba()).copy()
    if close:
        import matplotlib.pyplot as plt

        plt.close(figure)
    return pixels


def text(tag: str, value: str) -> Summary:
    """Markdown text, shown by TensorBoard's text plugin."""
    from tensorboard.plugins.text.plugin_data_pb2 import TextPluginData

    if not isinstance(value, str):
        raise DTypeError(f"add_text: {tag!r} needs a str, got {type(value).__name__}")
    metadata = SummaryMetadata(
        plugin_data=SummaryMetadata.PluginData(
            plugin_name="text", content=TextPluginData(version=0).SerializeToString()
        )
    )
    proto = TensorProto(
        dtype="DT_STRING",
        string_val=[value.encode("utf-8")],
        tensor_shape=TensorShapeProto(dim=[TensorShapeProto.Dim(size=1)]),
    )
    return Summary(
        value=[Summary.Value(tag=tag + "/text_summary", metadata=metadata, tensor=proto)]
    )


def pr_curve(
    tag: str, labels: Any, predictions: Any, num_thresholds: int, weights: Any = None
) -> Summary:
    """Precision and recall at ``num_thresholds`` evenly spaced thresholds of ``predictions``
    (in 0..1) against ``labels`` (1 positive, 0 negative): TensorBoard's PR-curve plugin data."""
    from tensorboard.plugins.pr_curve.plugin_data_pb2 import PrCurvePluginData

    truth = as_array(labels, "add_pr_curve").astype(np.float64).reshape(-1)
    scores = as_array(predictions, "add_pr_curve").astype(np.float64).reshape(-1)
    if truth.size != scores.size:
        raise ShapeError(
            f"add_pr_curve: labels ({truth.size} values) and predictions ({scores.size}) differ"
        )
    if num_thresholds < 2:
        raise InvalidArgumentError(
            f"add_pr_curve: num_thresholds must be >= 2, got {num_thresholds}"
        )
    weight = 1.0 if weights is None else as_array(weights, "add_pr_curve").reshape(-1)
    bucket = np.floor(scores.clip(0, 1) * (num_thresholds - 1)).astype(np.int64)
    positives = np.bincount(bucket, weights=truth * weight, minlength=num_thresholds)
    negatives = np.bincount(bucket, weights=(1.0 - truth) * weight, minlength=num_thresholds)
    tp = np.cumsum(positives[::-1])[::-1]
    fp = np.cumsum(negatives[::-1])[::-1]
    tn, fn = fp[0] - fp, tp[0] - tp
    precision = tp / np.maximum(1e-7, tp + fp)
    recall = tp / np.maximum(1e-7, tp + fn)
    data = np.stack([tp, fp, tn, fn, precision, recall]).astype(np.float32)
    metadata = SummaryMetadata(
        plugin_data=SummaryMetadata.PluginData(
            plugin_name="pr_curves",
            content=PrCurvePluginData(version=0, num_thresholds=num_thresholds).SerializeToString(),
        )
    )
    proto = TensorProto(
        dtype="DT_FLOAT",
        float_val=data.reshape(-1).tolist(),
        tensor_shape=TensorShapeProto(
            dim=[TensorShapeProto.Dim(size=6), TensorShapeProto.Dim(size=num_thresholds)]
        ),
    )
    return Summary(value=[Summary.Value(tag=tag, metadata=metadata, tensor=proto)])


def hparams(
    hparam_dict: Mapping[str, Any],
    metric_dict: Mapping[str, Any],
    hparam_domain_discrete: Mapping[str, Sequence[Any]] | None = None,
) -> tuple[Summary, Summary, Summary]:
    """The three summaries of TensorBoard's HParams plugin: the experiment (names of the
    hyperparameters and metrics), the session's start (the values) and its end."""
    from google.protobuf import struct_pb2
    from tensorboard.plugins.hparams import metadata as hp_metadata
    from tensorboard.plugins.hparams.api_pb2 import (
        DataType,
        Experiment,
        HParamInfo,
        MetricInfo,
        MetricName,
        Status,
    )
    from tensorboard.plugins.hparams.plugin_data_pb2 import (
        HParamsPluginData,
        SessionEndInfo,
        SessionStartInfo,
    )

    if not isinstance(hparam_dict, Mapping) or not isinstance(metric_dict, Mapping):
        raise DTypeError("add_hparams: hparam_dict and metric_dict must be dicts")
    domains = dict(hparam_domain_discrete or {})
    start = SessionStartInfo()
    infos = []
    for name, value in hparam_dict.items():
        if value is None:
            continue
        if hasattr(value, "detach") or isinstance(value, np.ndarray | np.generic):
            value = float(as_array(value, "add_hparams").reshape(-1)[0])
        # bool before int: True is an int to Python, but TensorBoard shows a bool as a bool
        if isinstance(value, bool):
            kind, field = "DATA_TYPE_BOOL", "bool_value"
        elif isinstance(value, int | float):
            kind, field = "DATA_TYPE_FLOAT64", "number_value"
        elif isinstance(value, str):
            kind, field = "DATA_TYPE_STRING", "string_value"
        else:
            raise DTypeError(
                f"add_hparams: {name!r} must be a number, str, bool or one-element tensor, "
                f"got {type(value).__name__}"
            )
        setattr(start.hparams[name], field, value)
        domain = None
        if name in domains:
            choices = domains[name]
            if not isinstance(choices, list | tuple) or not all(
                isinstance(choice, type(value)) for choice in choices
            ):
                raise DTypeError(
                    f"add_hparams: hparam_domain_discrete[{name!r}] must be a list of "
                    f"{type(value).__name__}, as hparam_dict[{name!r}]"
                )
            domain = struct_pb2.ListValue(
                values=[struct_pb2.Value(**{field: choice}) for choice in choices]
            )
        infos.append(HParamInfo(name=name, type=DataType.Value(kind), domain_discrete=domain))
    unknown = set(domains) - set(hparam_dict)
    if unknown:
        raise InvalidArgumentError(
            f"add_hparams: hparam_domain_discrete names {sorted(unknown)}, not in hparam_dict"
        )

    def summary(tag: str, **content: Any) -> Summary:
        data = HParamsPluginData(version=hp_metadata.PLUGIN_DATA_VERSION, **content)
        metadata = SummaryMetadata(
            plugin_data=SummaryMetadata.PluginData(
                plugin_name=hp_metadata.PLUGIN_NAME, content=data.SerializeToString()
            )
        )
        return Summary(value=[Summary.Value(tag=tag, metadata=metadata)])

    experiment = Experiment(
        hparam_infos=infos, metric_infos=[MetricInfo(name=MetricName(tag=k)) for k in metric_dict]
    )
    end = SessionEndInfo(status=Status.Value("STATUS_SUCCESS"))
    return (
        summary(hp_metadata.EXPERIMENT_TAG, experiment=experiment),
        summary(hp_metadata.SESSION_START_INFO_TAG, session_start_info=start),
        summary(hp_metadata.SESSION_END_INFO_TAG, session_end_info=end),
    )
