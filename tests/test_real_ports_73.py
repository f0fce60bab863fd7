"""Real ports, continued from ``tests/test_real_ports_72.py`` (the harness:
``tests/real_ports.py``), exercising uint8 and int32 tensors as image code does; both programs
written here.

- an image pipeline in the style of torchvision-free training scripts: uint8 HWC images from
  NumPy by ``torch.from_numpy(image).permute(2, 0, 1).contiguous()``, random crops after
  ``F.pad(..., mode="reflect")`` of the uint8 image, ``torch.flip`` under a seeded
  ``torch.Generator``, a ``Dataset``/``DataLoader`` with ``default_collate`` giving uint8
  batches converted by ``.float().div(255)`` and standardised per channel by broadcasting, a
  small CNN trained on them, and the held-out set cached as a uint8 tensor by
  ``torch.save``/``torch.load``.
- an autoregressive pixel model with a discretized logistic mixture likelihood, written in the
  style of pclucas14/pixel-cnn-pp (its ``utils.py`` losses and sampler, ``layers.py``'s shifted
  convolutions and gated residual blocks under ``weight_norm``, one layer of its up pass, and
  ``main.py``'s loop with ``StepLR`` and pixel-by-pixel sampling), small: uint8 HWC images
  rescaled to [-1, 1], ELU of both signs by ``torch.cat([x, -x], ...)``, log-sum-exp and log
  softmax with the maximum taken out, the mixture's parameters unpacked by ``view(shape[:-1] +
  [3, 3 * k])``, ``torch.autograd.Variable(..., requires_grad=False)``, the edge cases chosen by
  ``(x > 0.999).float()`` masks, the component drawn by the max of Gumbel noise from
  ``torch.FloatTensor(logits.size()).uniform_(1e-5, 1. - 1e-5)`` and one-hot encoded by
  ``torch.FloatTensor(index.size() + (n,)).zero_()`` and ``scatter_``, shifts by
  ``nn.ZeroPad2d``, ``h += ...`` in place in the graph, and the samples turned back into bytes
  by ``.round().clamp(0, 255).to(torch.uint8)``.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import retrograd as rg
from real_ports import (
    SharedDraws,
    assert_records_agree,
    initializer,
    port,
    run_source,
    seeded_draws,  # noqa: F401 (autouse: each test from fixed seeds)
)

IMAGE_PIPELINE_SOURCE = """
import numpy as np
import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, Dataset, default_collate

CHANNEL_MEAN = (0.4914, 0.4822, 0.4465)
CHANNEL_STD = (0.2470, 0.2435, 0.2616)


def chw(image):
    # an HWC uint8 array, as image readers return it, to a CHW uint8 tensor
    return torch.from_numpy(image).permute(2, 0, 1).contiguous()


class Standardize:
    def __init__(self, means, stds):
        # per channel, broadcast over the rows and columns
        self.shift = torch.tensor(means)[:, None, None]
        self.scale = torch.tensor(stds)[:, None, None]

    def __call__(self, x):
        return (x - self.shift) / self.scale


class PadAndCrop:
    # reflect-pad the uint8 image, then cut a size x size window at a random place
    def __init__(self, size, pad, gen):
        self.size, self.pad, self.gen = size, pad, gen

    def __call__(self, image):
        p = self.pad
        padded = F.pad(image.unsqueeze(0), (p, p, p, p), mode="reflect").squeeze(0)
        rows, cols = padded.shape[-2:]
        top = torch.randint(0, rows - self.size + 1, size=(1,), generator=self.gen).item()
        left = torch.randint(0, cols - self.size + 1, size=(1,), generator=self.gen).item()
        return padded[:, top : top + self.size, left : left + self.size]


class MaybeMirror:
    def __init__(self, chance, gen):
        self.chance, self.gen = chance, gen

    def __call__(self, image):
        flip = torch.rand(1, generator=self.gen) < self.chance
        return torch.flip(image, dims=[-1]) if flip else image


class Chain:
    def __init__(self, *steps):
        self.steps = steps

    def __call__(self, image):
        for step in self.steps:
            image = step(image)
        return image


class ByteImages(Dataset):
    def __init__(self, images, labels, augment=None):
        self.images, self.labels, self.augment = images, labels, augment

    def __len__(self):
        return len(self.images)

    def __getitem__(self, i):
        image = chw(self.images[i])
        if self.augment is not None:
            image = self.augment(image)
        return image, int(self.labels[i])


class SmallConvNet(nn.Module):
    def __init__(self, classes=3):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(4, 8, 3, padding=1), nn.ReLU(),
        )
        self.head = nn.Linear(8, classes)

    def forward(self, x):
        return self.head(F.adaptive_avg_pool2d(self.features(x), 1).flatten(1))


def train(images, labels, held_out, path, epochs=2):
    gen = torch.Generator()
    gen.manual_seed(0)
    standardize = Standardize(CHANNEL_MEAN, CHANNEL_STD)
    augment = Chain(PadAndCrop(8, pad=2, gen=gen), MaybeMirror(0.5, gen=gen))
    loader = DataLoader(ByteImages(images, labels, augment), batch_size=4, shuffle=False,
                        collate_fn=default_collate)
    model = SmallConvNet()
    initialize(model)
    optimizer = torch.optim.SGD(model.parameters(), momentum=0.9, lr=0.1, weight_decay=5e-4)
    xent = nn.CrossEntropyLoss()
    for _ in range(epochs):
        model.train()
        for raw, target in loader:
            assert raw.dtype == torch.uint8  # augmented and batched as bytes
            record.append(raw.numpy().astype(np.int64))
            loss = xent(model(standardize(raw.float().div(255))), target)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            record.append(loss.item())
        record.append({name: t.detach().numpy().copy() for name, t in model.state_dict().items()})

    # cache the test images on disk as one uint8 tensor, then evaluate from the cache
    torch.save({"images": torch.stack([chw(im) for im in held_out]),
                "mean": torch.tensor(CHANNEL_MEAN)}, path)
    cache = torch.load(path)
    stored = cache["images"]
    assert stored.dtype == torch.uint8
    record.append(stored.numpy().astype(np.int64))
    model.eval()
    with torch.no_grad():
        logits = model(standardize(stored.float() / 255))
    scores = logits.numpy().copy()
    record.append(scores)
    record.append(logits.argmax(dim=1).numpy().astype(np.int64))
    record.append(stored.sum(dim=(1, 2, 3)).numpy())  # brightness, summed over the bytes
"""

IMAGE_PIPELINE_STEPS = [
    (
        "import torch\nfrom torch import nn\nfrom torch.nn import functional as F\n",
        "import retrograd as torch\nfrom retrograd import nn\n"
        "from retrograd.nn import functional as F\n",
    ),
    (
        "            loss.backward()\n            optimizer.step()\n",
        "            grads = loss.backward()\n            optimizer.step(grads)\n",
    ),
]


def test_uint8_image_pipeline_feeds_a_cnn_as_torch(tmp_path):
    rng = np.random.default_rng(7301)
    images = rng.integers(0, 256, (8, 8, 8, 3), dtype=np.uint8)
    labels = rng.integers(0, 3, 8)
    test_images = rng.integers(0, 256, (3, 8, 8, 3), dtype=np.uint8)
    records = []
    initialize = initializer()
    for lib in (torch, rg):
        record = []
        text = (
            IMAGE_PIPELINE_SOURCE
            if lib is torch
            else port(IMAGE_PIPELINE_SOURCE, IMAGE_PIPELINE_STEPS).replace(
                "from torch.", "from retrograd."
            )
        )
        names = run_source(text, lib, record=record, initialize=initialize)
        with SharedDraws(lib, 7301):
            names["train"](images, labels, test_images, str(tmp_path / f"{lib.__name__}.pt"))
        records.append(record)
    assert_records_agree(records[1], records[0], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("mode", ["nearest", "nearest-exact"])
def test_interpolate_resizes_uint8_images_and_masks_by_nearest_as_torch(mode):
    # segmentation scripts resize uint8 label masks (and images) with mode="nearest"
    rng = np.random.default_rng(7302)
    cases = [
        ((1, 3, 5, 7), {"size": (8, 4)}),
        ((2, 1, 3, 4), {"scale_factor": 2}),
        ((1, 2, 5), {"scale_factor": 1.5}),
        ((1, 1, 2, 3, 3), {"size": (3, 5, 2)}),
    ]
    for shape, how in cases:
        image = rng.integers(0, 256, shape, dtype=np.uint8)
        expected = torch.nn.functional.interpolate(torch.from_numpy(image), mode=mode, **how)
        got = rg.nn.functional.interpolate(rg.from_numpy(image), mode=mode, **how)
        assert got.dtype == rg.uint8
        np.testing.assert_array_equal(got.numpy(), expected.numpy())
    # torch has no uint8 kernel for the linear modes of a 3-d input, nor int64 ones at all
    with pytest.raises(rg.errors.DTypeError, match="interpolate"):
        rg.nn.functional.interpolate(rg.zeros(1, 1, 3, dtype=rg.uint8), size=5, mode="linear")
    with pytest.raises(rg.errors.DTypeError, match="interpolate"):
        rg.nn.functional.interpolate(rg.zeros(1, 1, 3, dtype=rg.int64), size=5, mode=mode)


def test_a_size_joined_with_a_tuple_is_a_size_the_legacy_constructors_read_as_a_shape():
    # pixel-cnn-pp's ``to_one_hot``: ``torch.FloatTensor(tensor.size() + (n,)).zero_()``
    for lib in (torch, rg):
        size = lib.zeros(2, 3).size()
        assert isinstance(size + (4,), lib.Size)
        assert isinstance((1,) + size, lib.Size)
        assert isinstance(size * 2, lib.Size) and isinstance(size[1:], lib.Size)
        assert tuple(size + (lib.tensor(4), True)) == (2, 3, 4, 1)
        assert lib.FloatTensor(size + (4,)).zero_().shape == (2, 3, 4)
        assert lib.FloatTensor(size[:1]).shape == (2,)
        with pytest.raises(TypeError, match="Size"):
            size + (2.5,)


PIXELCNN_SOURCE = """
import time
import numpy as np
import torch
from torch import nn, optim
from torch.nn import functional as F
from torch.optim.lr_scheduler import StepLR
from torch.nn.utils import weight_norm


def elu_both_signs(x):
    # ELU of x and of -x, stacked on the channel axis (NCHW)
    return F.elu(torch.cat([x, -x], dim=len(x.size()) - 3))


def logsumexp_last(x):
    # over the last axis, the maximum taken out first
    last = len(x.size()) - 1
    top, _ = torch.max(x, dim=last)
    top_kept, _ = torch.max(x, dim=last, keepdim=True)
    return top + torch.log(torch.sum(torch.exp(x - top_kept), dim=last))


def log_softmax_last(x):
    last = len(x.size()) - 1
    top, _ = torch.max(x, dim=last, keepdim=True)
    return x - top - torch.log(torch.sum(torch.exp(x - top), dim=last, keepdim=True))


def unpack_mixture(params, k):
    # (N, 10k, H, W) -> mixture logits (N, H, W, k) and (N, H, W, 3, 3k): per colour channel
    # k means, k log scales and k coupling coefficients
    params = params.permute(0, 2, 3, 1)
    shape = [int(d) for d in params.size()]
    logits = params[:, :, :, :k]
    rest = params[:, :, :, k:].contiguous().view(shape[:-1] + [3, 3 * k])
    return logits, rest


def mixture_nll(x, params):
    \"\"\"Negative log-likelihood of images in [-1, 1] under a mixture of discretized logistics
    (256 bins) per pixel; green depends linearly on red, blue on red and green.\"\"\"
    k = int(params.size(1) / 10)
    x = x.permute(0, 2, 3, 1).contiguous()
    shape = [int(d) for d in x.size()]
    logits, rest = unpack_mixture(params, k)
    means = rest[:, :, :, :, :k]
    log_scales = torch.clamp(rest[:, :, :, :, k : 2 * k], min=-7.0)
    coupling = F.tanh(rest[:, :, :, :, 2 * k : 3 * k])
    x = x.unsqueeze(-1) + torch.autograd.Variable(torch.zeros(shape + [k]), requires_grad=False)
    red, green = x[:, :, :, 0, :], x[:, :, :, 1, :]
    green_mean = means[:, :, :, 1, :] + coupling[:, :, :, 0, :] * red
    blue_mean = (
        means[:, :, :, 2, :] + coupling[:, :, :, 1, :] * red + coupling[:, :, :, 2, :] * green
    )
    n, h, w = shape[:3]
    means = torch.cat(
        (
            means[:, :, :, 0, :].unsqueeze(3),
            green_mean.view(n, h, w, 1, k),
            blue_mean.view(n, h, w, 1, k),
        ),
        dim=3,
    )
    offset = x - means
    precision = torch.exp(-log_scales)
    upper = precision * (offset + 1.0 / 255.0)
    lower = precision * (offset - 1.0 / 255.0)
    in_bin = F.sigmoid(upper) - F.sigmoid(lower)
    log_below_upper = upper - F.softplus(upper)  # the bin of 0 reaches down to -inf
    log_above_lower = -F.softplus(lower)  # the bin of 255 reaches up to +inf
    centre = precision * offset
    log_density = centre - log_scales - 2.0 * F.softplus(centre)
    # choose by masks (no branch in the graph): tiny bins by the density at their centre
    tiny = (in_bin > 1e-5).float()
    interior = tiny * torch.log(torch.clamp(in_bin, min=1e-12))
    interior = interior + (1.0 - tiny) * (log_density - np.log(127.5))
    top = (x > 0.999).float()
    bottom = (x < -0.999).float()
    not_bottom = top * log_above_lower + (1.0 - top) * interior
    per_channel = bottom * log_below_upper + (1.0 - bottom) * not_bottom
    log_probs = torch.sum(per_channel, dim=3) + log_softmax_last(logits)
    return -torch.sum(logsumexp_last(log_probs))


def one_hot_last(index, n, value=1.0):
    out = torch.FloatTensor(index.size() + (n,)).zero_()
    out.scatter_(len(index.size()), index.unsqueeze(-1), value)
    return torch.autograd.Variable(out)


def sample_mixture(params, k):
    logits, rest = unpack_mixture(params, k)
    shape = [int(d) for d in logits.size()][:-1]
    # the component by the largest Gumbel-perturbed logit
    gumbel = torch.FloatTensor(logits.size())
    gumbel.uniform_(1e-5, 1.0 - 1e-5)
    _, component = (logits.data - torch.log(-torch.log(gumbel))).max(dim=3)
    chosen = one_hot_last(component, k).view(shape + [1, k])
    means = torch.sum(rest[:, :, :, :, :k] * chosen, dim=4)
    log_scales = torch.clamp(torch.sum(rest[:, :, :, :, k : 2 * k] * chosen, dim=4), min=-7.0)
    coupling = torch.sum(F.tanh(rest[:, :, :, :, 2 * k : 3 * k]) * chosen, dim=4)
    noise = torch.FloatTensor(means.size())
    noise.uniform_(1e-5, 1.0 - 1e-5)
    noise = torch.autograd.Variable(noise)
    draw = means + torch.exp(log_scales) * (torch.log(noise) - torch.log(1.0 - noise))
    red = torch.clamp(torch.clamp(draw[:, :, :, 0], min=-1.0), max=1.0)
    green = draw[:, :, :, 1] + coupling[:, :, :, 0] * red
    green = torch.clamp(torch.clamp(green, min=-1.0), max=1.0)
    blue = torch.clamp(
        torch.clamp(
            draw[:, :, :, 2] + coupling[:, :, :, 1] * red + coupling[:, :, :, 2] * green, min=-1.0
        ),
        max=1.0,
    )
    return torch.stack([red, green, blue], dim=1)


def shift_down(x):
    # drop the last row, pad a zero row on top: each pixel sees only the rows above
    return nn.ZeroPad2d((0, 0, 1, 0))(x[:, :, : int(x.size(2)) - 1, :])


def shift_right(x):
    return nn.ZeroPad2d((1, 0, 0, 0))(x[:, :, :, : int(x.size(3)) - 1])


class PixelwiseLinear(nn.Module):
    # a 1x1 convolution written as a weight-normalised Linear over NHWC rows
    def __init__(self, c_in, c_out):
        super().__init__()
        self.linear = weight_norm(nn.Linear(c_in, c_out))
        self.c_out = c_out

    def forward(self, x):
        x = x.permute(0, 2, 3, 1)
        shape = [int(d) for d in x.size()]
        out = self.linear(x.contiguous().view(-1, shape[3]))
        return out.view(shape[:3] + [self.c_out]).permute(0, 3, 1, 2)


class AboveConv(nn.Module):
    \"\"\"A convolution that sees the rows above (and its own row, centred), by padding;
    optionally shifted down so that it sees strictly above.\"\"\"

    def __init__(self, c_in, c_out, kernel=(2, 3), shift=False):
        super().__init__()
        half = (kernel[1] - 1) // 2
        self.pad = nn.ZeroPad2d((half, half, kernel[0] - 1, 0))
        self.conv = weight_norm(nn.Conv2d(c_in, c_out, kernel))
        self.shift = shift

    def forward(self, x):
        x = self.conv(self.pad(x))
        return shift_down(x) if self.shift else x


class AboveLeftConv(nn.Module):
    def __init__(self, c_in, c_out, kernel=(2, 2), shift=False):
        super().__init__()
        self.pad = nn.ZeroPad2d((kernel[1] - 1, 0, kernel[0] - 1, 0))
        self.conv = weight_norm(nn.Conv2d(c_in, c_out, kernel))
        self.shift = shift

    def forward(self, x):
        x = self.conv(self.pad(x))
        return shift_right(x) if self.shift else x


class GatedResidual(nn.Module):
    def __init__(self, filters, conv, skip_streams=0, dropout=0.0):
        super().__init__()
        self.first = conv(2 * filters, filters)
        self.skip = PixelwiseLinear(2 * skip_streams * filters, filters) if skip_streams else None
        self.drop = nn.Dropout2d(dropout)
        self.second = conv(2 * filters, 2 * filters)

    def forward(self, x, aux=None):
        h = self.first(elu_both_signs(x))
        if aux is not None:
            h += self.skip(elu_both_signs(aux))
        h = self.second(self.drop(elu_both_signs(h)))
        value, gate = torch.chunk(h, 2, dim=1)
        return x + value * F.sigmoid(gate)


class PixelModel(nn.Module):
    \"\"\"Two causal streams (above; above and left) of gated residual blocks, then the
    mixture's parameters per pixel.\"\"\"

    def __init__(self, blocks=5, filters=80, mixtures=10, channels=3):
        super().__init__()
        self.above = nn.ModuleList([GatedResidual(filters, AboveConv) for _ in range(blocks)])
        self.above_left = nn.ModuleList(
            [GatedResidual(filters, AboveLeftConv, skip_streams=1) for _ in range(blocks)]
        )
        self.start_above = AboveConv(channels + 1, filters, kernel=(2, 3), shift=True)
        self.start_row = AboveConv(channels + 1, filters, kernel=(1, 3), shift=True)
        self.start_left = AboveLeftConv(channels + 1, filters, kernel=(2, 1), shift=True)
        self.out = PixelwiseLinear(filters, 10 * mixtures)

    def forward(self, x):
        # a constant channel of ones lets the padded borders be told apart from zeros
        n, _, h, w = [int(d) for d in x.size()]
        x = torch.cat((x, torch.autograd.Variable(torch.ones(n, 1, h, w), requires_grad=False)), 1)
        u = self.start_above(x)
        ul = self.start_row(x) + self.start_left(x)
        for above, above_left in zip(self.above, self.above_left):
            u = above(u)
            ul = above_left(ul, aux=u)
        return self.out(F.elu(ul))


def main(images, samples=1, mixtures=2, epochs=2, batch=2, lr=2e-3, decay=0.9):
    shape = (3, 3, 3)
    model = PixelModel(blocks=1, filters=4, mixtures=mixtures, channels=shape[0])
    initialize(model)
    optimizer = optim.Adam(list(model.parameters()), lr=lr)
    scheduler = StepLR(optimizer, step_size=1, gamma=decay)

    def to_unit_range(image):
        # HWC bytes to CHW in [-1, 1]
        return torch.from_numpy(image).permute(2, 0, 1).float().div(255) * 2.0 - 1.0

    def sample():
        model.train(False)
        canvas = torch.zeros(samples, *shape)
        for i in range(shape[1]):
            for j in range(shape[2]):  # one pixel at a time, each from everything before it
                with torch.no_grad():
                    drawn = sample_mixture(model(torch.autograd.Variable(canvas)), mixtures)
                    canvas[:, :, i, j] = drawn.data[:, :, i, j]
        return canvas

    bits = batch * np.prod(shape) * np.log(2.0)
    for epoch in range(epochs):
        model.train()
        started = time.time()
        for start in range(0, len(images), batch):
            chunk = images[start : start + batch]
            x = torch.autograd.Variable(torch.stack([to_unit_range(im) for im in chunk]))
            loss = mixture_nll(x, model(x))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            record.append(loss.item())
            seconds = 0 * (time.time() - started)  # (zeroed: the log is compared)
            per_dim = loss.data.item() / bits
            print("epoch {} bits/dim {:.4f} ({:.0f}s)".format(epoch, per_dim, seconds))
        scheduler.step()
        record.append({name: t.detach().numpy().copy() for name, t in model.state_dict().items()})
    return model, sample


def generate(model, sample):
    drawn = sample()
    record.append(drawn.numpy().copy())
    # back to bytes, as an image file would hold them
    pixels = ((drawn.permute(0, 2, 3, 1) + 1.0) * 127.5).round().clamp(0, 255).to(torch.uint8)
    record.append(pixels.numpy().astype(np.int64))
"""

PIXELCNN_STEPS = [
    (
        "import torch\nfrom torch import nn, optim\nfrom torch.nn import functional as F\n",
        "import retrograd as torch\nfrom retrograd import nn, optim\n"
        "from retrograd.nn import functional as F\n",
    ),
    (
        "            loss.backward()\n            optimizer.step()\n",
        "            grads = loss.backward()\n            optimizer.step(grads)\n",
    ),
]


class SharedUniform:
    """``Tensor.uniform_`` of a library drawing from one seeded NumPy stream (pixel-cnn-pp's
    Gumbel and logistic noise come from ``temp.uniform_(1e-5, 1. - 1e-5)``)."""

    def __init__(self, lib, seed):
        self.lib, self.rng = lib, np.random.default_rng(seed)

    def __enter__(self):
        lib, rng = self.lib, self.rng

        def uniform_(tensor, low=0.0, high=1.0, **_):
            drawn = lib.tensor(rng.uniform(low, high, tuple(tensor.shape)), dtype=tensor.dtype)
            return tensor.copy_(drawn)

        self.saved = lib.Tensor.uniform_
        lib.Tensor.uniform_ = uniform_
        return self

    def __exit__(self, *exc):
        self.lib.Tensor.uniform_ = self.saved
        return False


def test_pixel_mixture_model_trains_and_samples_as_torch(capsys):
    rng = np.random.default_rng(7303)
    images = rng.integers(0, 256, (4, 3, 3, 3), dtype=np.uint8)
    images[0, 0, 0] = (0, 255, 128)  # both edge cases of the likelihood
    records, logs = [], []
    initialize = initializer()
    for lib in (torch, rg):
        record = []
        text = (
            PIXELCNN_SOURCE
            if lib is torch
            else port(PIXELCNN_SOURCE, PIXELCNN_STEPS).replace("from torch.", "from retrograd.")
        )
        names = run_source(text, lib, record=record, initialize=initialize)
        model, sample = names["main"](images)
        with SharedUniform(lib, 7304):  # (after the weights' initialisation, which draws too)
            names["generate"](model, sample)
        records.append(record)
        logs.append(capsys.readouterr().out)
    assert logs[1] == logs[0] and logs[0].count("bits/dim") == 4
    # the bytes of the samples are the rescaled draws, rounded
    drawn, pixels = records[0][-2], records[0][-1]
    np.testing.assert_array_equal(pixels, np.round((drawn.transpose(0, 2, 3, 1) + 1) * 127.5))
    assert_records_agree(records[1], records[0], rtol=1e-4, atol=1e-5)
