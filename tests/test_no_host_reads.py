"""No host round trip in a training step's device work, forward and backward.

On an accelerator every host read (``.item()``, ``bool(t)``, ``.tolist()``, ``.cpu()``,
``.numpy()``, ``int(t)``, ``nonzero``, a 0-d integer or boolean-mask index) waits for the
device's whole queue, and so does a blocking copy of a host array onto the device
(``torch.from_numpy(a).to("cuda")``): each one stalls the pipeline at every step. The first
GPU run (an H200) measured it. These tests run each op, module, loss, optimizer and scheduler
over a :class:`rg.TorchBackend` on the CPU that defers its index checks (as CUDA does) and
draws its random numbers with torch's generator (as on a GPU), and record, with a torch
``TorchFunctionMode``, every host read and every ``torch.from_numpy`` of the second step (the
first one fills the caches of constants that depend on shapes alone).

The reads torch's CUDA kernels make too are not counted here: data-dependent shapes
(``nonzero``, ``masked_select``, boolean indexing, ``unique``, ``repeat_interleave`` of a
tensor, ``one_hot`` without ``num_classes``), ``ctc_loss``'s lengths, ``prod``/``cumprod``'s
backward (torch asks whether an input is zero), ``gaussian_nll_loss``'s variance check,
``Adafactor``'s norms, ``ReduceLROnPlateau``'s metric and ``clip_grad_norm_``'s
``error_if_nonfinite``; :class:`rg.amp.GradScaler` reads once per step, as torch's does.
"""

from __future__ import annotations

import collections
import contextlib
import traceback

import numpy as np
import pytest

import retrograd as rg
from retrograd import nn, optim

torch = pytest.importorskip("torch")
from torch.overrides import TorchFunctionMode  # noqa: E402 (torch is optional)

F = rg.nn.functional

pytestmark = pytest.mark.backend_independent(
    "builds its own TorchBackend (deferred checks, device generator), whatever the suite's"
)

_READS = {
    "item", "tolist", "numpy", "cpu", "__bool__", "__int__", "__float__", "__index__",
    "nonzero", "__array__", "equal", "masked_select", "unique", "argwhere",
}  # fmt: skip


def _reads_host(name: str, args: tuple) -> bool:
    if name in _READS:
        return True
    if name in ("__getitem__", "__setitem__") and len(args) > 1:
        index = args[1] if isinstance(args[1], tuple) else (args[1],)
        for i in index:
            if isinstance(i, torch.Tensor) and (
                i.dtype == torch.bool or (i.ndim == 0 and not i.is_floating_point())
            ):
                return True
    return False


def _where() -> str:
    frames = [f for f in traceback.extract_stack()[:-2] if "retrograd" in f.filename]
    return " < ".join(f"{f.filename.rsplit('retrograd', 1)[-1]}:{f.lineno}" for f in frames[-4:])


class _HostReads(TorchFunctionMode):
    def __init__(self) -> None:
        super().__init__()
        self.seen: collections.Counter = collections.Counter()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", str(func))
        if _reads_host(name, args):
            self.seen[f"{name} @ {_where()}"] += 1
        return func(*args, **(kwargs or {}))


@contextlib.contextmanager
def _recording():
    """The host reads and host arrays copied in, of the calls made inside."""
    mode = _HostReads()
    copy_in = torch.from_numpy

    def spy(array):
        mode.seen[f"from_numpy {array.shape} @ {_where()}"] += 1
        return copy_in(array)

    torch.from_numpy = spy
    try:
        with mode:
            yield mode.seen
    finally:
        torch.from_numpy = copy_in


BACKEND = rg.Autodiff(rg.TorchBackend("cpu", deferred_index_checks=True, generator="torch"))


def _reads_of_second_step(build):
    """``build()`` (on the backend) gives a step; the reads its second call makes."""
    with rg.use_backend(BACKEND):
        rg.manual_seed(0)
        step = build()
        step()
        with _recording() as seen:
            step()
        BACKEND.inner.synchronize()  # (a deferred index check failing would raise here)
    return dict(seen)


def _r(*shape):
    return rg.randn(*shape, requires_grad=True)


def _backward_of(f):
    """A step: ``f()``'s first output summed, and its backward."""

    def build():
        def step():
            out = f()
            while isinstance(out, tuple):
                out = out[0]
            out.float().sum().backward()

        return step

    return build


def _module(make, *shapes, ints=None):
    """A step of the module ``make()`` on random inputs of ``shapes`` (or int64 ``ints``:
    ``(high, shape)``), its output summed and differentiated."""

    def build():
        module = make()
        inputs = [_r(*s) for s in shapes]
        if ints is not None:
            inputs = [rg.randint(0, ints[0], ints[1])]

        def step():
            out = module(*inputs)
            while isinstance(out, tuple):
                out = out[0]
            out.sum().backward()

        return step

    return build


MODULES = {
    "batch_norm2d": _module(lambda: nn.BatchNorm2d(4), (2, 4, 5, 5)),
    "batch_norm1d": _module(lambda: nn.BatchNorm1d(4), (3, 4, 6)),
    "group_norm": _module(lambda: nn.GroupNorm(2, 4), (2, 4, 5, 5)),
    "instance_norm2d": _module(
        lambda: nn.InstanceNorm2d(4, affine=True, track_running_stats=True), (2, 4, 5, 5)
    ),
    "layer_norm": _module(lambda: nn.LayerNorm(6), (2, 3, 6)),
    "rms_norm": _module(lambda: nn.RMSNorm(6), (2, 3, 6)),
    "local_response_norm": _module(lambda: nn.LocalResponseNorm(2), (2, 4, 5, 5)),
    "max_pool2d_indices": _module(lambda: nn.MaxPool2d(2, return_indices=True), (2, 3, 6, 6)),
    "max_pool1d": _module(lambda: nn.MaxPool1d(2), (2, 3, 8)),
    "max_pool3d": _module(lambda: nn.MaxPool3d(2), (1, 2, 4, 4, 4)),
    "avg_pool2d": _module(lambda: nn.AvgPool2d(3, 2, 1, count_include_pad=False), (2, 3, 6, 6)),
    "adaptive_avg_pool2d": _module(lambda: nn.AdaptiveAvgPool2d((4, 5)), (2, 3, 6, 7)),
    "adaptive_max_pool2d": _module(
        lambda: nn.AdaptiveMaxPool2d(4, return_indices=True), (2, 3, 6, 7)
    ),
    "adaptive_max_pool1d": _module(lambda: nn.AdaptiveMaxPool1d(3), (2, 3, 8)),
    "lp_pool2d": _module(lambda: nn.LPPool2d(2, 2), (2, 3, 6, 6)),
    "fractional_max_pool2d": _module(
        lambda: nn.FractionalMaxPool2d(2, output_size=3), (2, 3, 7, 7)
    ),
    "fractional_max_pool3d": _module(
        lambda: nn.FractionalMaxPool3d(2, output_ratio=0.5), (1, 2, 6, 6, 6)
    ),
    "upsample_nearest": _module(lambda: nn.Upsample(scale_factor=2), (2, 3, 4, 4)),
    "upsample_bilinear": _module(
        lambda: nn.Upsample(scale_factor=2, mode="bilinear"), (2, 3, 4, 4)
    ),
    "upsample_bicubic": _module(lambda: nn.Upsample(size=(7, 7), mode="bicubic"), (2, 3, 4, 4)),
    "upsample_trilinear": _module(
        lambda: nn.Upsample(scale_factor=2, mode="trilinear"), (1, 2, 3, 3, 3)
    ),
    "upsample_nearest_exact": _module(
        lambda: nn.Upsample(scale_factor=1.5, mode="nearest-exact"), (2, 3, 4, 4)
    ),
    "embedding": _module(lambda: nn.Embedding(10, 4), ints=(10, (3, 5))),
    "embedding_max_norm": _module(
        lambda: nn.Embedding(10, 4, padding_idx=0, max_norm=1.0), ints=(10, (3, 5))
    ),
    "embedding_bag_mean": _module(lambda: nn.EmbeddingBag(10, 4), ints=(10, (3, 5))),
    "embedding_bag_max": _module(lambda: nn.EmbeddingBag(10, 4, mode="max"), ints=(10, (3, 5))),
    "embedding_bag_padding": _module(
        lambda: nn.EmbeddingBag(10, 4, mode="sum", padding_idx=2, max_norm=2.0),
        ints=(10, (3, 5)),
    ),
    "multihead_attention": _module(
        lambda: nn.MultiheadAttention(8, 2, batch_first=True), (2, 5, 8), (2, 5, 8), (2, 5, 8)
    ),
    "rnn_cell": _module(lambda: nn.RNNCell(4, 6), (5, 4)),
    "gru_cell": _module(lambda: nn.GRUCell(4, 6), (5, 4)),
    "lstm_cell": _module(lambda: nn.LSTMCell(4, 6), (5, 4)),
    "rnn_bidirectional": _module(
        lambda: nn.RNN(4, 6, batch_first=True, bidirectional=True), (2, 3, 4)
    ),
    "gru_two_layers": _module(lambda: nn.GRU(4, 6, num_layers=2), (3, 2, 4)),
    "lstm_proj": _module(lambda: nn.LSTM(4, 6, proj_size=3), (3, 2, 4)),
    "conv1d_same": _module(lambda: nn.Conv1d(4, 3, 3, padding="same"), (2, 4, 8)),
    "conv2d_reflect": _module(
        lambda: nn.Conv2d(4, 4, 3, stride=2, groups=2, padding=1, padding_mode="reflect"),
        (2, 4, 6, 6),
    ),
    "conv3d_circular": _module(
        lambda: nn.Conv3d(2, 2, 3, padding=1, padding_mode="circular"), (1, 2, 4, 4, 4)
    ),
    "conv2d_replicate": _module(
        lambda: nn.Conv2d(3, 2, 3, padding=1, padding_mode="replicate"), (2, 3, 5, 5)
    ),
    "conv_transpose1d": _module(
        lambda: nn.ConvTranspose1d(4, 3, 3, stride=2, output_padding=1), (2, 4, 5)
    ),
    "conv_transpose2d": _module(lambda: nn.ConvTranspose2d(4, 2, 3, stride=2), (2, 4, 4, 4)),
    "conv_transpose3d": _module(lambda: nn.ConvTranspose3d(2, 2, 2, stride=2), (1, 2, 3, 3, 3)),
    "pixel_shuffle": _module(lambda: nn.PixelShuffle(2), (2, 8, 3, 3)),
    "pixel_unshuffle": _module(lambda: nn.PixelUnshuffle(2), (2, 2, 4, 4)),
    "unfold": _module(lambda: nn.Unfold(2, stride=2), (2, 3, 4, 4)),
    "fold": _module(lambda: nn.Fold((4, 4), 2, stride=2), (2, 8, 4)),
    "dropout": _module(lambda: nn.Dropout(0.3), (2, 3, 4)),
    "dropout2d": _module(lambda: nn.Dropout2d(0.3), (2, 3, 4, 4)),
    "alpha_dropout": _module(lambda: nn.AlphaDropout(0.3), (2, 3, 4)),
    "prelu": _module(lambda: nn.PReLU(3), (2, 3, 4)),
    "bilinear": _module(lambda: nn.Bilinear(4, 4, 3), (5, 4), (5, 4)),
    "reflection_pad2d": _module(lambda: nn.ReflectionPad2d(1), (2, 3, 4, 4)),
    "replication_pad3d": _module(lambda: nn.ReplicationPad3d(1), (1, 2, 3, 3, 3)),
    "circular_pad1d": _module(lambda: nn.CircularPad1d((1, 2)), (2, 3, 4)),
    "transformer": _module(
        lambda: nn.Transformer(8, 2, 1, 1, 16, batch_first=True), (2, 4, 8), (2, 3, 8)
    ),
}


def _attention_masks():
    pad = rg.tensor([[False] * 4 + [True], [False] * 5])
    causal = rg.tensor(np.triu(np.ones((5, 5), bool), 1))
    return pad, causal


def _mha_masked():
    attention = nn.MultiheadAttention(8, 2, batch_first=True)
    x = _r(2, 5, 8)
    pad, causal = _attention_masks()

    def step():
        out, _ = attention(x, x, x, key_padding_mask=pad, attn_mask=causal)
        out.sum().backward()

    return step


def _encoder_masked():
    layer = nn.TransformerEncoderLayer(8, 2, 16, batch_first=True)
    x = _r(2, 5, 8)
    pad, _ = _attention_masks()

    def step():
        layer(x, src_key_padding_mask=pad).sum().backward()

    return step


MODULES["multihead_attention_masks"] = _mha_masked
MODULES["encoder_key_padding_mask"] = _encoder_masked


def _functional():
    x4, x2, t2 = _r(2, 3, 5, 5), _r(6, 5), rg.randn(6, 5)
    q = _r(2, 5, 8)
    _, causal = _attention_masks()
    return {
        "interpolate_area": lambda: F.interpolate(x4, size=(3, 4), mode="area"),
        "interpolate_nearest_exact": lambda: F.interpolate(x4, size=(7, 3), mode="nearest-exact"),
        "interpolate_bilinear": lambda: F.interpolate(x4, scale_factor=1.5, mode="bilinear"),
        "pad_reflect": lambda: F.pad(x4, (1, 2, 2, 1), mode="reflect"),
        "pad_replicate_crop": lambda: F.pad(x4, (-1, 2, 0, 1), mode="replicate"),
        "pad_circular": lambda: F.pad(x4, (1, 1, 2, 0), mode="circular"),
        "grid_sample": lambda: F.grid_sample(x4, rg.rand(2, 3, 3, 2) * 2 - 1, align_corners=False),
        "affine_grid": lambda: F.affine_grid(_r(2, 2, 3), (2, 3, 4, 5), align_corners=False),
        "max_unpool2d": lambda: F.max_unpool2d(
            *F.max_pool2d(x4, 2, return_indices=True), 2, output_size=(5, 5)
        ),
        "sdpa_causal": lambda: F.scaled_dot_product_attention(q, q, q, is_causal=True),
        "sdpa_bool_mask": lambda: F.scaled_dot_product_attention(q, q, q, attn_mask=causal),
        "one_hot_classes": lambda: F.one_hot(rg.randint(0, 5, (6,)), 5).float() * x2,
        "normalize": lambda: F.normalize(x2),
        "gumbel_softmax_hard": lambda: F.gumbel_softmax(x2, hard=True),
        "cosine_similarity": lambda: F.cosine_similarity(x2, t2),
        "pairwise_distance": lambda: F.pairwise_distance(x2, t2),
    }


def _losses():
    x, t = _r(6, 5), rg.randn(6, 5)
    y = rg.randint(0, 5, (6,))
    y_ignored = rg.tensor([0, 1, -100, 3, 4, 2])
    probs, weight = rg.rand(6, 5), rg.rand(5) + 0.5
    sign = rg.sign(rg.randn(6))
    multilabel = rg.tensor([[1, 3, -1, 0, 0]] * 6)
    return {
        "cross_entropy": lambda: F.cross_entropy(x, y),
        "cross_entropy_smoothing_weight_ignore": lambda: F.cross_entropy(
            x, y_ignored, weight=weight, label_smoothing=0.1, ignore_index=-100
        ),
        "cross_entropy_probabilities": lambda: F.cross_entropy(x, probs.softmax(-1)),
        "nll_weight_ignore": lambda: F.nll_loss(F.log_softmax(x, -1), y_ignored, weight=weight),
        "kl_div_batchmean": lambda: F.kl_div(
            F.log_softmax(x, -1), probs.softmax(-1), reduction="batchmean"
        ),
        "kl_div_log_target": lambda: F.kl_div(
            F.log_softmax(x, -1), F.log_softmax(t, -1), log_target=True
        ),
        "binary_cross_entropy": lambda: F.binary_cross_entropy(x.sigmoid(), probs, weight=weight),
        "bce_with_logits_pos_weight": lambda: F.binary_cross_entropy_with_logits(
            x, probs, pos_weight=weight
        ),
        "mse_l1_smooth_huber": lambda: (
            F.mse_loss(x, t)
            + F.l1_loss(x, t)
            + F.smooth_l1_loss(x, t, beta=0.5)
            + F.huber_loss(x, t, delta=0.7)
        ),
        "margin_ranking": lambda: F.margin_ranking_loss(x[:, 0], x[:, 1], sign, margin=0.1),
        "hinge_embedding": lambda: F.hinge_embedding_loss(x, rg.sign(t)),
        "multi_margin": lambda: F.multi_margin_loss(x, y, p=2, margin=0.5, weight=weight),
        "multilabel_margin": lambda: F.multilabel_margin_loss(x, multilabel),
        "multilabel_soft_margin": lambda: F.multilabel_soft_margin_loss(x, (probs > 0.5).float()),
        "soft_margin": lambda: F.soft_margin_loss(x, rg.sign(t)),
        "cosine_embedding": lambda: F.cosine_embedding_loss(x, t, sign, margin=0.1),
        "triplet_swap": lambda: F.triplet_margin_loss(x, t, probs, swap=True),
        "triplet_with_distance": lambda: F.triplet_margin_with_distance_loss(
            x, t, probs, distance_function=lambda a, b: (a - b).abs().sum(-1), margin=0.5
        ),
        "poisson_nll": lambda: F.poisson_nll_loss(x, probs * 3, log_input=True, full=True),
    }


def _ops():
    m, t = _r(6, 5), rg.randn(6, 5)
    mask = rg.rand(6, 5) > 0.5
    rows, columns = rg.randint(0, 6, (4,)), rg.randint(0, 5, (6, 3))
    return {
        "where": lambda: rg.where(mask, m, t),
        "masked_fill": lambda: m.masked_fill(mask, 1.5),
        "scatter": lambda: t.scatter(1, columns, m[:, :3]),
        "scatter_add": lambda: t.scatter_add(1, columns, m[:, :3]),
        "gather": lambda: m.gather(1, columns),
        "index_select": lambda: m.index_select(0, rows),
        "index_add": lambda: t.index_add(0, rows, m[:4]),
        "index_fill": lambda: m.index_fill(0, rows, 0.5),
        "index_fill_tensor_value": lambda: t.index_fill(1, columns[0], m[0, 0]),
        "index_put_accumulate": lambda: t.index_put((rows,), m[:4], accumulate=True),
        "getitem_tensor": lambda: m[rows, 1:],
        "topk": lambda: m.topk(2, dim=1)[0],
        "sort": lambda: m.sort(dim=0)[0],
        "argsort_index": lambda: m[m[:, 0].argsort()],
        "max_dim": lambda: m.max(dim=1)[0],
        "amax": lambda: m.amax(0),
        "amin_all": lambda: m.amin(),
        "median": lambda: m.median(dim=1)[0],
        "cumsum_cummax": lambda: m.cumsum(1) + m.cummax(1)[0],
        "logcumsumexp": lambda: m.logcumsumexp(1),
        "norm": lambda: m.norm() + m.norm(p=3, dim=1).sum(),
        "vector_norm_inf": lambda: rg.linalg.vector_norm(m, float("inf"), dim=1),
        "clamp_tensor_bounds": lambda: m.clamp(min=t, max=t + 1),
        "lerp_tensor_weight": lambda: m.lerp(t, rg.rand(6, 5)),
        "einsum": lambda: rg.einsum("ij,kj->ik", m, t),
        "var_mean": lambda: rg.var_mean(m, 1)[0],
        "logsumexp": lambda: m.logsumexp(1),
        "diagonal_trace": lambda: m[:5].diagonal() + m[:5].trace(),
        "cdist": lambda: rg.cdist(m, t),
        "take_along_dim": lambda: rg.take_along_dim(m, columns, 1),
        "roll_flip_tril": lambda: m.roll(2, 1) + m.flip(0) + m.tril(),
        "renorm": lambda: m.renorm(2, 0, 1.0),
    }


def _optimizer_step(make, schedule=None, extra=None):
    def build():
        model = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2))
        opt = make(model.parameters())
        scheduler = schedule(opt) if schedule is not None else None
        x, y = rg.randn(4, 3), rg.randn(4, 2)

        def step():
            grads = F.mse_loss(model(x), y).backward()
            if extra is not None:
                extra(grads, model)
            opt.step(grads)
            if scheduler is not None:
                scheduler.step()

        return step

    return build


OPTIMIZERS = {
    "sgd": lambda p: optim.SGD(p, lr=0.01, momentum=0.9, dampening=0.1, weight_decay=1e-3),
    "adam_amsgrad": lambda p: optim.Adam(p, lr=1e-3, amsgrad=True, weight_decay=1e-2),
    "adamw": lambda p: optim.AdamW(p, lr=1e-3),
    "nadam": lambda p: optim.NAdam(p, lr=1e-3, decoupled_weight_decay=True, weight_decay=0.01),
    "radam": lambda p: optim.RAdam(p, lr=1e-3),
    "adamax": lambda p: optim.Adamax(p, lr=1e-3, weight_decay=0.1),
    "asgd": lambda p: optim.ASGD(p, lr=1e-2, t0=1),
    "rprop": lambda p: optim.Rprop(p, lr=1e-2),
    "adagrad": lambda p: optim.Adagrad(p, lr=1e-2, lr_decay=0.1),
    "adadelta": lambda p: optim.Adadelta(p, weight_decay=0.1),
    "rmsprop_centered": lambda p: optim.RMSprop(p, centered=True, momentum=0.3),
}
_S = optim.lr_scheduler
SCHEDULERS = {
    "step": lambda o: _S.StepLR(o, 2),
    "multistep": lambda o: _S.MultiStepLR(o, [1, 3]),
    "one_cycle": lambda o: _S.OneCycleLR(o, 0.1, total_steps=100),
    "cosine_warm_restarts": lambda o: _S.CosineAnnealingWarmRestarts(o, 3),
    "cyclic": lambda o: _S.CyclicLR(o, 0.01, 0.1, cycle_momentum=False),
    "sequential": lambda o: _S.SequentialLR(
        o, [_S.LinearLR(o), _S.ExponentialLR(o, 0.9)], milestones=[2]
    ),
}
UTILS = {
    "clip_grad_value": lambda g, m: nn.utils.clip_grad_value_(g, m.parameters(), 0.1),
    "clip_grad_norm_inf": lambda g, m: nn.utils.clip_grad_norm_(
        g, m.parameters(), 0.1, norm_type="inf"
    ),
    "parameters_to_vector": lambda g, m: nn.utils.vector_to_parameters(
        nn.utils.parameters_to_vector(m.parameters()) * 1.0, m.parameters()
    ),
}


def _captured():
    model = nn.Sequential(nn.Linear(3, 4), nn.LayerNorm(4), nn.GELU(), nn.Linear(4, 2))
    opt = optim.AdamW(model.parameters(), lr=1e-3)
    x, y = rg.randn(4, 3), rg.randn(4, 2)

    def train(a, b):
        loss = F.mse_loss(model(a), b)
        grads = loss.backward()
        nn.utils.clip_grad_norm_(grads, model.parameters(), 1.0)
        opt.step(grads)
        return loss

    captured = rg.capture(train, x, y, state=[opt])
    return lambda: captured(x, y)


def _all_cases():
    cases = {f"module-{k}": v for k, v in MODULES.items()}
    for group, table in (("functional", _functional), ("loss", _losses), ("op", _ops)):
        for name in _names(table):
            cases[f"{group}-{name}"] = _backward_of_entry(table, name)
    cases.update({f"optimizer-{k}": _optimizer_step(v) for k, v in OPTIMIZERS.items()})
    cases.update(
        {f"scheduler-{k}": _optimizer_step(OPTIMIZERS["sgd"], v) for k, v in SCHEDULERS.items()}
    )
    cases.update(
        {f"utils-{k}": _optimizer_step(OPTIMIZERS["adamw"], extra=v) for k, v in UTILS.items()}
    )
    cases["capture-step"] = _captured
    return cases


def _names(table):
    with rg.use_backend(BACKEND):
        return list(table())


def _backward_of_entry(table, name):
    def build():
        return _backward_of(table()[name])()

    return build


CASES = _all_cases()


@pytest.mark.parametrize("name", list(CASES))
def test_a_step_makes_no_host_read(name):
    assert _reads_of_second_step(CASES[name]) == {}


def test_grad_scaler_reads_once_per_step_as_torch():
    """torch's ``GradScaler.step`` reads its found-inf flag once (per device); the gradients'
    checks stay on the device, however many parameters."""

    def build():
        model = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2))  # 4 parameters
        opt = optim.Adam(model.parameters(), lr=1e-3)
        scaler = rg.amp.GradScaler("cpu")
        x, y = rg.randn(4, 3), rg.randn(4, 2)

        def step():
            grads = scaler.scale(F.mse_loss(model(x), y)).backward()
            scaler.unscale_(opt, grads)
            nn.utils.clip_grad_norm_(grads, model.parameters(), 1.0)
            scaler.step(opt, grads)
            scaler.update()

        return step

    reads = _reads_of_second_step(build)
    # the one read: the flag copied to the host (.cpu() then .numpy(), as .item() does)
    assert sum(n for key, n in reads.items() if key.startswith("cpu")) == 1, reads
    assert all("amp.py" in key for key in reads), reads


def _grad_scaler_run(lib, backend=None):
    """Three steps with a scaled loss that overflows at the second: the scale, the skipped
    step and the parameters after each."""
    made = {} if lib is torch else {"backend": backend}
    weight = lib.tensor([[0.5, -1.0], [2.0, 0.25]], requires_grad=True, **made)
    bias = lib.tensor([0.1, -0.2], requires_grad=True, **made)
    opt = lib.optim.SGD([weight, bias], lr=0.1)
    scaler = lib.amp.GradScaler("cpu", init_scale=4.0, growth_interval=1)
    x = lib.tensor([[1.0, 2.0], [3.0, -1.0]], **made)
    history = []
    for factor in (1.0, float("inf"), 1.0):
        loss = ((x @ weight + bias) * factor).square().sum()
        if lib is torch:
            opt.zero_grad()
            scaler.scale(loss).backward()
            scaler.unscale_(opt)
            scaler.step(opt)
        else:
            grads = scaler.scale(loss).backward()
            scaler.unscale_(opt, grads)
            scaler.step(opt, grads)
        scaler.update()
        history.append(
            (scaler.get_scale(), weight.detach().numpy().copy(), bias.detach().numpy().copy())
        )
    return history


def test_grad_scaler_skips_and_backs_off_as_torch():
    ours = _grad_scaler_run(rg, BACKEND)
    theirs = _grad_scaler_run(torch)
    for (scale, weight, bias), (t_scale, t_weight, t_bias) in zip(ours, theirs):
        assert scale == t_scale
        np.testing.assert_array_equal(weight, t_weight)
        np.testing.assert_array_equal(bias, t_bias)


def test_index_fill_repeated_indices_as_torch():
    """A repeated index fills its position once: a tensor value's gradient counts it once."""
    base = np.arange(12.0).reshape(3, 4)
    index = [2, 0, 2, 3]
    ours_x = rg.tensor(base, requires_grad=True, backend=BACKEND)
    ours_v = rg.tensor(7.5, requires_grad=True, backend=BACKEND)
    ours = ours_x.index_fill(1, rg.tensor(index, backend=BACKEND), ours_v)
    grads = (ours * rg.tensor(base + 1.0, backend=BACKEND)).sum().backward()
    theirs_x = torch.tensor(base, requires_grad=True)
    theirs_v = torch.tensor(7.5, dtype=torch.float64, requires_grad=True)
    theirs = theirs_x.index_fill(1, torch.tensor(index), theirs_v)
    (theirs * torch.tensor(base + 1.0)).sum().backward()
    np.testing.assert_array_equal(ours.numpy(), theirs.detach().numpy())
    np.testing.assert_array_equal(ours_x.grad(grads).numpy(), theirs_x.grad.numpy())
    np.testing.assert_array_equal(ours_v.grad(grads).numpy(), theirs_v.grad.numpy())


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_embedding_bag_of_a_matrix_as_torch(mode):
    rng = np.random.default_rng(3)
    weight = rng.standard_normal((6, 3))
    bags = np.array([[1, 2, 2, 5], [2, 2, 2, 2], [0, 4, 3, 2]])
    ours_w = rg.tensor(weight, requires_grad=True, backend=BACKEND)
    ours = F.embedding_bag(rg.tensor(bags, backend=BACKEND), ours_w, mode=mode, padding_idx=2)
    grads = (ours * ours).sum().backward()
    theirs_w = torch.tensor(weight, requires_grad=True)
    theirs = torch.nn.functional.embedding_bag(
        torch.tensor(bags), theirs_w, mode=mode, padding_idx=2
    )
    (theirs * theirs).sum().backward()
    np.testing.assert_allclose(ours.numpy(), theirs.detach().numpy(), rtol=1e-12, atol=0)
    np.testing.assert_allclose(ours_w.grad(grads).numpy(), theirs_w.grad.numpy(), rtol=1e-12)
