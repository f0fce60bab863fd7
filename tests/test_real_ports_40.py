"""Real ports, continued (the harness: ``tests/real_ports.py``): programs written here in the
style of pytorch/examples' fast neural style and sub-pixel super-resolution examples.

- fast neural style, small: a VGG-shaped feature stack built from a config list
  (``MaxPool2d(kernel_size=2, stride=2)``, ``Conv2d(kernel_size=3, padding=1)``,
  ``ReLU(inplace=True)``) cut into ``torch.nn.Sequential()`` slices grown by
  ``add_module(str(i), features[i])``, frozen by ``p.requires_grad = False``, returning a
  ``namedtuple`` read both by name (``taps.mid``) and by iteration; an image transformer of
  reflection-padded convolutions (``torch.nn.ReflectionPad2d(k // 2)``), residual blocks and
  nearest-neighbour upsampling (``torch.nn.functional.interpolate(x, mode='nearest',
  scale_factor=...)``) with ``InstanceNorm2d(..., affine=True)``; Gram matrices by
  ``f.bmm(f.transpose(1, 2)) / (c * h * w)``; ImageNet normalisation with
  ``batch.new_tensor([...]).view(-1, 1, 1)`` and ``batch.div_(255.0)`` (in place, on the
  transformer's output, a tensor of the graph, and on the batch it was fed); the style image
  ``.mul(255)`` ``.repeat(n, 1, 1, 1)``, ``grams[:n, :, :]``, a style loss started at ``0.`` and
  grown by ``+=`` and ``*=``, a formatted log line, and stylising under ``torch.no_grad()`` with
  ``.cpu()`` and ``clone().clamp(0, 255).numpy().transpose(1, 2, 0).astype("uint8")``;
- super-resolution by sub-pixel convolution: tuple kernel sizes, strides and paddings
  (``nn.Conv2d(1, 16, (5, 5), (1, 1), (2, 2))``), ``nn.PixelShuffle``,
  ``init.orthogonal_(w, init.calculate_gain('relu'))``, an epoch loop printing its losses, the
  PSNR by ``10 * log10(1 / mse.item())``, ``torch.save(model, path)`` of the whole model and
  ``torch.load(path, weights_only=False)``, ``.view(1, -1, size[1], size[0])`` of a PIL-style
  ``(width, height)`` and ``*= 255.0`` ``.clip(0, 255)`` in NumPy.

Both run in float64. Only the gradient lines differ.
"""

from __future__ import annotations

import math
import sys
import types
from collections import namedtuple

import numpy as np
import pytest
import torch

import retrograd as rg
from real_ports import assert_records_agree, port

STYLE_SOURCE = """
def conv_stack(plan):
    layers, channels = [], 3
    for item in plan:
        if item == "pool":
            layers.append(nn.MaxPool2d(kernel_size=2, stride=2))
            continue
        layers += [nn.Conv2d(channels, item, kernel_size=3, padding=1), nn.ReLU(inplace=True)]
        channels = item
    return nn.Sequential(*layers)


Taps = namedtuple("Taps", ["low", "mid", "high"])


class LossNetwork(torch.nn.Module):
    # a frozen feature extractor tapped after three of its ReLUs
    def __init__(self, trainable=False):
        super().__init__()
        features = conv_stack([4, 4, "pool", 8, 8, "pool", 8, 8])
        self.cuts = [torch.nn.Sequential() for _ in range(3)]
        for cut, (start, stop) in zip(self.cuts, [(0, 4), (4, 9), (9, 13)]):
            for i in range(start, stop):
                cut.add_module(str(i), features[i])
        self.low, self.mid, self.high = self.cuts
        for p in self.parameters():
            p.requires_grad = trainable

    def forward(self, x):
        low = self.low(x)
        mid = self.mid(low)
        return Taps(low, mid, self.high(mid))


class ReflectConv(torch.nn.Module):
    def __init__(self, c_in, c_out, kernel, stride=1, upsample=None):
        super().__init__()
        self.upsample = upsample
        self.pad = torch.nn.ReflectionPad2d(kernel // 2)
        self.conv = torch.nn.Conv2d(c_in, c_out, kernel, stride)

    def forward(self, x):
        if self.upsample:
            x = torch.nn.functional.interpolate(x, mode='nearest', scale_factor=self.upsample)
        return self.conv(self.pad(x))


class Residual(torch.nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.body = torch.nn.Sequential(
            ReflectConv(channels, channels, 3), torch.nn.InstanceNorm2d(channels, affine=True),
            torch.nn.ReLU(),
            ReflectConv(channels, channels, 3), torch.nn.InstanceNorm2d(channels, affine=True),
        )

    def forward(self, x):
        return x + self.body(x)


def image_transformer():
    norm = lambda c: torch.nn.InstanceNorm2d(c, affine=True)
    return torch.nn.Sequential(
        ReflectConv(3, 4, 7), norm(4), torch.nn.ReLU(),
        ReflectConv(4, 8, 3, stride=2), norm(8), torch.nn.ReLU(),
        Residual(8), Residual(8),
        ReflectConv(8, 4, 3, upsample=2), norm(4), torch.nn.ReLU(),
        ReflectConv(4, 3, 7),
    )


def gram(features):
    b, c, h, w = features.size()
    flat = features.view(b, c, h * w)
    return flat.bmm(flat.transpose(1, 2)) / (c * h * w)


def imagenet_normalise(batch):
    stats = batch.new_tensor([[0.485, 0.456, 0.406], [0.229, 0.224, 0.225]]).view(2, -1, 1, 1)
    return (batch.div_(255.0) - stats[0]) / stats[1]


def to_uint8(image):
    return image.clone().clamp(0, 255).numpy().transpose(1, 2, 0).astype("uint8")


def train(args, loader, dataset, style):
    device = torch.device("cpu")
    net = image_transformer().to(device)
    initialize(net, "transformer")
    adam = Adam(net.parameters(), args.lr)
    mse = torch.nn.MSELoss()
    critic = LossNetwork().to(device)
    initialize(critic, "critic")
    style = style.mul(255).repeat(args.batch_size, 1, 1, 1).to(device)
    style_grams = [gram(f) for f in critic(imagenet_normalise(style))]

    for epoch in range(args.epochs):
        net.train()
        seen, content_sum, style_sum = 0, 0.0, 0.0
        for step, (x, _) in enumerate(loader):
            n = len(x)
            seen += n
            adam.zero_grad()
            y = imagenet_normalise(net(x.to(device)))
            taps_y, taps_x = critic(y), critic(imagenet_normalise(x))
            content = args.content_weight * mse(taps_y.mid, taps_x.mid)
            texture = 0.
            for f, target in zip(taps_y, style_grams):
                texture += mse(gram(f), target[:n, :, :])
            texture *= args.style_weight
            total = content + texture
            total.backward()
            adam.step()
            content_sum += content.item()
            style_sum += texture.item()
            record.append([content.item(), texture.item()])
            if (step + 1) % args.log_interval == 0:
                means = content_sum / (step + 1), style_sum / (step + 1)
                print("epoch {} [{}/{}] content {:.6f} style {:.6f}".format(
                    epoch + 1, seen, len(dataset), *means))
    return net


def stylize(net, content):
    with torch.no_grad():
        net.eval()
        out = net(content).cpu()
    return to_uint8(out[0])
"""

STYLE_STEP = [
    (
        "            total.backward()\n            adam.step()",
        "            grads = total.backward()\n            adam.step(grads)",
    )
]

SUPER_RESOLUTION_SOURCE = """
from math import log10


class SubPixelNet(nn.Module):
    # predicts factor**2 channels at low resolution, then shuffles them into pixels
    def __init__(self, factor):
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(1, 16, (5, 5), (1, 1), (2, 2)), nn.ReLU(),
            nn.Conv2d(16, 8, (3, 3), (1, 1), (1, 1)), nn.ReLU(),
        )
        self.to_pixels = nn.Conv2d(8, factor ** 2, (3, 3), (1, 1), (1, 1))
        self.shuffle = nn.PixelShuffle(factor)
        for layer in (self.body[0], self.body[2]):
            init.orthogonal_(layer.weight, init.calculate_gain('relu'))
        init.orthogonal_(self.to_pixels.weight)

    def forward(self, x):
        return self.shuffle(self.to_pixels(self.body(x)))


device = torch.device("cpu")
model = SubPixelNet(factor=opt.upscale_factor).to(device)
initialize(model)
criterion = nn.MSELoss()
optimizer = optim.Adam(params=model.parameters(), lr=opt.lr)


def run_epoch(epoch):
    total = 0
    for i, (low, high) in enumerate(training_data_loader, 1):
        optimizer.zero_grad()
        loss = criterion(model(low.to(device)), high.to(device))
        total += loss.item()
        loss.backward()
        optimizer.step()
        print(f"epoch {epoch} batch {i}/{len(training_data_loader)}: loss {loss.item():.4f}")
    return total


def mean_psnr():
    psnr = 0
    with torch.no_grad():
        for low, high in testing_data_loader:
            mse = criterion(model(low.to(device)), high.to(device))
            psnr += 10 * log10(1 / mse.item())
    print(f"psnr {psnr / len(testing_data_loader):.4f} dB")
    return psnr


record = []
for epoch in range(1, 1 + opt.nEpochs):
    record.append(run_epoch(epoch))
    record.append(mean_psnr())
    path = f"{opt.out}epoch{epoch}.pth"
    torch.save(model, path)  # the whole module, pickled
    print(f"saved {path}")

restored = torch.load(path, weights_only=False)
y_channel = types.SimpleNamespace(size=(6, 5))  # PIL reports (width, height)
upscaled = restored(low_res_y.view(1, -1, y_channel.size[1], y_channel.size[0]))
pixels = upscaled[0].detach().numpy()
pixels *= 255.0
record.append(pixels.clip(0, 255))
"""

SUPER_RESOLUTION_STEP = [
    (
        "        loss.backward()\n        optimizer.step()",
        "        grads = loss.backward()\n        optimizer.step(grads)",
    )
]


@pytest.fixture
def float64():
    previous, our_previous = torch.get_default_dtype(), rg.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    rg.set_default_dtype(rg.float64)
    yield
    torch.set_default_dtype(previous)
    rg.set_default_dtype(our_previous)


def _namespace(lib, **shared):
    return {
        "torch": lib,
        "nn": lib.nn,
        "optim": lib.optim,
        "init": lib.nn.init,
        "math": math,
        "np": np,
        **shared,
    }


def test_fast_neural_style_matches_torch(capsys, float64):
    rng = np.random.default_rng(45)
    images = rng.uniform(0, 255, (4, 3, 16, 16))
    style_image = rng.uniform(0, 1, (3, 16, 16))
    args = types.SimpleNamespace(
        lr=1e-2, epochs=2, batch_size=2, content_weight=1e2, style_weight=1e6, log_interval=1
    )
    state, records, logs = {}, [], []
    for lib in (torch, rg):

        def initialize(net, name):
            if name not in state:
                state[name] = {k: v.detach().numpy().copy() for k, v in net.state_dict().items()}
            else:
                net.load_state_dict({k: rg.tensor(v) for k, v in state[name].items()})

        torch.manual_seed(0)
        record = []
        names = _namespace(
            lib, namedtuple=namedtuple, Adam=lib.optim.Adam, initialize=initialize, record=record
        )
        source = STYLE_SOURCE if lib is torch else port(STYLE_SOURCE, STYLE_STEP)
        exec(compile(source, f"<{lib.__name__} style>", "exec"), names)
        dataset = lib.utils.data.TensorDataset(lib.tensor(images), lib.zeros(4))
        loader = lib.utils.data.DataLoader(dataset, batch_size=args.batch_size)
        transformer = names["train"](args, loader, dataset, lib.tensor(style_image))
        record.append(names["stylize"](transformer, lib.tensor(images[:1])))
        record.append({k: v.detach().numpy().copy() for k, v in transformer.state_dict().items()})
        records.append(record)
        logs.append(capsys.readouterr().out)
    assert logs[0].count("epoch") == 4
    assert logs[1] == logs[0]
    assert records[0][-2].dtype == np.uint8 and records[0][-2].shape == (16, 16, 3)
    assert_records_agree(records[1], records[0], rtol=1e-7, atol=1e-9)


def test_super_resolution_matches_torch(tmp_path, monkeypatch, capsys, float64):
    rng = np.random.default_rng(46)
    low, high = rng.uniform(0, 1, (6, 1, 5, 6)), rng.uniform(0, 1, (6, 1, 15, 18))
    records, logs, state = [], [], {}
    for lib in (torch, rg):

        def initialize(model):
            if not state:
                state.update({k: v.detach().numpy().copy() for k, v in model.state_dict().items()})
            else:
                model.load_state_dict({k: rg.tensor(v) for k, v in state.items()})

        torch.manual_seed(0)
        data = lib.utils.data.TensorDataset(lib.tensor(low), lib.tensor(high))
        opt = types.SimpleNamespace(
            upscale_factor=3, lr=1e-3, nEpochs=2, out=str(tmp_path / f"{lib.__name__}_")
        )
        # torch.save(model) pickles the module's class by its module's name
        module = types.ModuleType(f"super_resolution_{lib.__name__}")
        module.__dict__.update(
            _namespace(
                lib,
                types=types,
                opt=opt,
                initialize=initialize,
                low_res_y=lib.tensor(low[0, 0]),
                training_data_loader=lib.utils.data.DataLoader(data, batch_size=4),
                testing_data_loader=lib.utils.data.DataLoader(data, batch_size=3),
            )
        )
        monkeypatch.setitem(sys.modules, module.__name__, module)
        source = (
            SUPER_RESOLUTION_SOURCE
            if lib is torch
            else port(SUPER_RESOLUTION_SOURCE, SUPER_RESOLUTION_STEP)
        )
        exec(compile(source, f"<{module.__name__}>", "exec"), module.__dict__)
        record = module.record
        record.append({k: v.detach().numpy().copy() for k, v in module.model.state_dict().items()})
        records.append(record)
        logs.append(capsys.readouterr().out)
    assert logs[0].count("batch") == 4 and logs[0].count("saved") == 2
    assert logs[1].replace("retrograd_", "torch_") == logs[0]
    assert records[0][-2].shape == (1, 15, 18)
    assert_records_agree(records[1], records[0], rtol=1e-8, atol=1e-10)
