# ruff: noqa: E501  (the programs are kept as their authors wrote them)
"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):

- fast neural style as pytorch/examples writes it (``fast_neural_style/neural_style/
  transformer_net.py``, ``vgg.py``, ``utils.py`` and ``train``/``stylize`` of
  ``neural_style.py``), narrower (the widths the nets hard-code divided by 8 and 16), a
  VGG-16-shaped ``features`` made by torchvision's ``make_layers`` for the pretrained one:
  ``ConvLayer`` (``torch.nn.ReflectionPad2d(kernel_size // 2)`` before the convolution),
  ``ResidualBlock``, ``UpsampleConvLayer`` (``torch.nn.functional.interpolate(x_in,
  mode='nearest', scale_factor=self.upsample)``), ``torch.nn.InstanceNorm2d(..., affine=True)``;
  ``Vgg16`` sliced into four ``torch.nn.Sequential()``s grown by ``add_module(str(x),
  vgg_pretrained_features[x])``, frozen by ``param.requires_grad = False``, returning a
  ``namedtuple("VggOutputs", [...])`` read both by name (``features_y.relu2_2``) and by
  iteration; ``gram_matrix`` by ``features.bmm(features_t) / (ch * h * w)``;
  ``normalize_batch`` with ``batch.new_tensor([...]).view(-1, 1, 1)`` and ``batch.div_(255.0)``
  (in place, on the transformer's output, a tensor of the graph, and on the batch it was fed);
  the style image ``x.mul(255)`` ``.repeat(args.batch_size, 1, 1, 1)``, ``gm_s[:n_batch, :,
  :]``, ``style_loss = 0.`` grown by ``+=`` and ``*=``, the log line, and ``stylize`` with
  ``output = style_model(content_image).cpu()`` and ``save_image``'s
  ``data.clone().clamp(0, 255).numpy()`` ``.transpose(1, 2, 0).astype("uint8")``;
- super-resolution by sub-pixel convolution (pytorch/examples ``super_resolution/model.py``,
  ``main.py``, ``super_resolve.py``), as written: tuple kernel sizes, strides and paddings
  (``nn.Conv2d(1, 64, (5, 5), (1, 1), (2, 2))``), ``nn.PixelShuffle``, ``init.orthogonal_(
  self.conv1.weight, init.calculate_gain('relu'))``, the epoch loop with its ``"===> Epoch[{}]({}/{}):
  Loss: {:.4f}"`` lines, the test's PSNR by ``10 * log10(1 / mse.item())``, ``torch.save(model,
  model_out_path)`` of the whole model and ``super_resolve.py``'s ``torch.load`` (with
  ``weights_only=False``), ``.view(1, -1, y.size[1], y.size[0])`` and ``out_img_y *= 255.0``
  ``.clip(0, 255)`` in NumPy.

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
# torchvision/models/vgg.py
def make_layers(cfg, batch_norm=False):
    layers = []
    in_channels = 3
    for v in cfg:
        if v == "M":
            layers += [nn.MaxPool2d(kernel_size=2, stride=2)]
        else:
            conv2d = nn.Conv2d(in_channels, v, kernel_size=3, padding=1)
            if batch_norm:
                layers += [conv2d, nn.BatchNorm2d(v), nn.ReLU(inplace=True)]
            else:
                layers += [conv2d, nn.ReLU(inplace=True)]
            in_channels = v
    return nn.Sequential(*layers)


# vgg.py
class Vgg16(torch.nn.Module):
    def __init__(self, requires_grad=False):
        super(Vgg16, self).__init__()
        vgg_pretrained_features = make_layers([4, 4, "M", 8, 8, "M", 16, 16, 16, "M", 32, 32, 32, "M"])
        self.slice1 = torch.nn.Sequential()
        self.slice2 = torch.nn.Sequential()
        self.slice3 = torch.nn.Sequential()
        self.slice4 = torch.nn.Sequential()
        for x in range(4):
            self.slice1.add_module(str(x), vgg_pretrained_features[x])
        for x in range(4, 9):
            self.slice2.add_module(str(x), vgg_pretrained_features[x])
        for x in range(9, 16):
            self.slice3.add_module(str(x), vgg_pretrained_features[x])
        for x in range(16, 23):
            self.slice4.add_module(str(x), vgg_pretrained_features[x])
        if not requires_grad:
            for param in self.parameters():
                param.requires_grad = False

    def forward(self, X):
        h = self.slice1(X)
        h_relu1_2 = h
        h = self.slice2(h)
        h_relu2_2 = h
        h = self.slice3(h)
        h_relu3_3 = h
        h = self.slice4(h)
        h_relu4_3 = h
        vgg_outputs = namedtuple("VggOutputs", ['relu1_2', 'relu2_2', 'relu3_3', 'relu4_3'])
        out = vgg_outputs(h_relu1_2, h_relu2_2, h_relu3_3, h_relu4_3)
        return out


# transformer_net.py
class TransformerNet(torch.nn.Module):
    def __init__(self):
        super(TransformerNet, self).__init__()
        # Initial convolution layers
        self.conv1 = ConvLayer(3, 4, kernel_size=9, stride=1)
        self.in1 = torch.nn.InstanceNorm2d(4, affine=True)
        self.conv2 = ConvLayer(4, 8, kernel_size=3, stride=2)
        self.in2 = torch.nn.InstanceNorm2d(8, affine=True)
        self.conv3 = ConvLayer(8, 8, kernel_size=3, stride=2)
        self.in3 = torch.nn.InstanceNorm2d(8, affine=True)
        # Residual layers
        self.res1 = ResidualBlock(8)
        self.res2 = ResidualBlock(8)
        # Upsampling Layers
        self.deconv1 = UpsampleConvLayer(8, 8, kernel_size=3, stride=1, upsample=2)
        self.in4 = torch.nn.InstanceNorm2d(8, affine=True)
        self.deconv2 = UpsampleConvLayer(8, 4, kernel_size=3, stride=1, upsample=2)
        self.in5 = torch.nn.InstanceNorm2d(4, affine=True)
        self.deconv3 = ConvLayer(4, 3, kernel_size=9, stride=1)
        # Non-linearities
        self.relu = torch.nn.ReLU()

    def forward(self, X):
        y = self.relu(self.in1(self.conv1(X)))
        y = self.relu(self.in2(self.conv2(y)))
        y = self.relu(self.in3(self.conv3(y)))
        y = self.res1(y)
        y = self.res2(y)
        y = self.relu(self.in4(self.deconv1(y)))
        y = self.relu(self.in5(self.deconv2(y)))
        y = self.deconv3(y)
        return y


class ConvLayer(torch.nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, stride):
        super(ConvLayer, self).__init__()
        reflection_padding = kernel_size // 2
        self.reflection_pad = torch.nn.ReflectionPad2d(reflection_padding)
        self.conv2d = torch.nn.Conv2d(in_channels, out_channels, kernel_size, stride)

    def forward(self, x):
        out = self.reflection_pad(x)
        out = self.conv2d(out)
        return out


class ResidualBlock(torch.nn.Module):
    def __init__(self, channels):
        super(ResidualBlock, self).__init__()
        self.conv1 = ConvLayer(channels, channels, kernel_size=3, stride=1)
        self.in1 = torch.nn.InstanceNorm2d(channels, affine=True)
        self.conv2 = ConvLayer(channels, channels, kernel_size=3, stride=1)
        self.in2 = torch.nn.InstanceNorm2d(channels, affine=True)
        self.relu = torch.nn.ReLU()

    def forward(self, x):
        residual = x
        out = self.relu(self.in1(self.conv1(x)))
        out = self.in2(self.conv2(out))
        out = out + residual
        return out


class UpsampleConvLayer(torch.nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, stride, upsample=None):
        super(UpsampleConvLayer, self).__init__()
        self.upsample = upsample
        reflection_padding = kernel_size // 2
        self.reflection_pad = torch.nn.ReflectionPad2d(reflection_padding)
        self.conv2d = torch.nn.Conv2d(in_channels, out_channels, kernel_size, stride)

    def forward(self, x):
        x_in = x
        if self.upsample:
            x_in = torch.nn.functional.interpolate(x_in, mode='nearest', scale_factor=self.upsample)
        out = self.reflection_pad(x_in)
        out = self.conv2d(out)
        return out


# utils.py
def gram_matrix(y):
    (b, ch, h, w) = y.size()
    features = y.view(b, ch, w * h)
    features_t = features.transpose(1, 2)
    gram = features.bmm(features_t) / (ch * h * w)
    return gram


def normalize_batch(batch):
    # normalize using imagenet mean and std
    mean = batch.new_tensor([0.485, 0.456, 0.406]).view(-1, 1, 1)
    std = batch.new_tensor([0.229, 0.224, 0.225]).view(-1, 1, 1)
    batch = batch.div_(255.0)
    return (batch - mean) / std


def save_image(filename, data):
    img = data.clone().clamp(0, 255).numpy()
    img = img.transpose(1, 2, 0).astype("uint8")
    return img


# neural_style.py
def train(args, train_loader, train_dataset, style):
    device = torch.device("cpu")
    transformer = TransformerNet().to(device)
    initialize(transformer, "transformer")
    optimizer = Adam(transformer.parameters(), args.lr)
    mse_loss = torch.nn.MSELoss()

    vgg = Vgg16(requires_grad=False).to(device)
    initialize(vgg, "vgg")
    style = style.mul(255)
    style = style.repeat(args.batch_size, 1, 1, 1).to(device)

    features_style = vgg(normalize_batch(style))
    gram_style = [gram_matrix(y) for y in features_style]

    for e in range(args.epochs):
        transformer.train()
        agg_content_loss = 0.
        agg_style_loss = 0.
        count = 0
        for batch_id, (x, _) in enumerate(train_loader):
            n_batch = len(x)
            count += n_batch
            optimizer.zero_grad()

            x = x.to(device)
            y = transformer(x)

            y = normalize_batch(y)
            x = normalize_batch(x)

            features_y = vgg(y)
            features_x = vgg(x)

            content_loss = args.content_weight * mse_loss(features_y.relu2_2, features_x.relu2_2)

            style_loss = 0.
            for ft_y, gm_s in zip(features_y, gram_style):
                gm_y = gram_matrix(ft_y)
                style_loss += mse_loss(gm_y, gm_s[:n_batch, :, :])
            style_loss *= args.style_weight

            total_loss = content_loss + style_loss
            total_loss.backward()
            optimizer.step()

            agg_content_loss += content_loss.item()
            agg_style_loss += style_loss.item()
            record.append([content_loss.item(), style_loss.item()])

            if (batch_id + 1) % args.log_interval == 0:
                mesg = "{}\\tEpoch {}:\\t[{}/{}]\\tcontent: {:.6f}\\tstyle: {:.6f}\\ttotal: {:.6f}".format(
                    "(time)", e + 1, count, len(train_dataset),
                                  agg_content_loss / (batch_id + 1),
                                  agg_style_loss / (batch_id + 1),
                                  (agg_content_loss + agg_style_loss) / (batch_id + 1)
                )
                print(mesg)
    return transformer


def stylize(style_model, content_image):
    with torch.no_grad():
        style_model.eval()
        output = style_model(content_image).cpu()
    return save_image("out.jpg", output[0])
"""

STYLE_STEP = [
    (
        "            total_loss.backward()\n            optimizer.step()",
        "            grads = total_loss.backward()\n            optimizer.step(grads)",
    )
]

SUPER_RESOLUTION_SOURCE = """
from math import log10


# model.py
class Net(nn.Module):
    def __init__(self, upscale_factor):
        super(Net, self).__init__()

        self.relu = nn.ReLU()
        self.conv1 = nn.Conv2d(1, 64, (5, 5), (1, 1), (2, 2))
        self.conv2 = nn.Conv2d(64, 64, (3, 3), (1, 1), (1, 1))
        self.conv3 = nn.Conv2d(64, 32, (3, 3), (1, 1), (1, 1))
        self.conv4 = nn.Conv2d(32, upscale_factor ** 2, (3, 3), (1, 1), (1, 1))
        self.pixel_shuffle = nn.PixelShuffle(upscale_factor)

        self._initialize_weights()

    def forward(self, x):
        x = self.relu(self.conv1(x))
        x = self.relu(self.conv2(x))
        x = self.relu(self.conv3(x))
        x = self.pixel_shuffle(self.conv4(x))
        return x

    def _initialize_weights(self):
        init.orthogonal_(self.conv1.weight, init.calculate_gain('relu'))
        init.orthogonal_(self.conv2.weight, init.calculate_gain('relu'))
        init.orthogonal_(self.conv3.weight, init.calculate_gain('relu'))
        init.orthogonal_(self.conv4.weight)


# main.py
device = torch.device("cpu")
model = Net(upscale_factor=opt.upscale_factor).to(device)
initialize(model)
criterion = nn.MSELoss()

optimizer = optim.Adam(model.parameters(), lr=opt.lr)


def train(epoch):
    epoch_loss = 0
    for iteration, batch in enumerate(training_data_loader, 1):
        input, target = batch[0].to(device), batch[1].to(device)

        optimizer.zero_grad()
        loss = criterion(model(input), target)
        epoch_loss += loss.item()
        loss.backward()
        optimizer.step()

        print("===> Epoch[{}]({}/{}): Loss: {:.4f}".format(epoch, iteration, len(training_data_loader), loss.item()))

    print("===> Epoch {} Complete: Avg. Loss: {:.4f}".format(epoch, epoch_loss / len(training_data_loader)))
    return epoch_loss


def test():
    avg_psnr = 0
    with torch.no_grad():
        for batch in testing_data_loader:
            input, target = batch[0].to(device), batch[1].to(device)

            prediction = model(input)
            mse = criterion(prediction, target)
            psnr = 10 * log10(1 / mse.item())
            avg_psnr += psnr
    print("===> Avg. PSNR: {:.4f} dB".format(avg_psnr / len(testing_data_loader)))
    return avg_psnr


def checkpoint(epoch):
    model_out_path = opt.out + "model_epoch_{}.pth".format(epoch)
    torch.save(model, model_out_path)
    print("Checkpoint saved to {}".format(model_out_path))
    return model_out_path


record = []
for epoch in range(1, opt.nEpochs + 1):
    record.append(train(epoch))
    record.append(test())
    path = checkpoint(epoch)

# super_resolve.py
model = torch.load(path, weights_only=False)
y = types.SimpleNamespace(size=(6, 5))  # PIL's (width, height) of the Y channel
input = low_res_y.view(1, -1, y.size[1], y.size[0])
out = model(input)
out_img_y = out[0].detach().numpy()
out_img_y *= 255.0
out_img_y = out_img_y.clip(0, 255)
record.append(out_img_y)
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
    assert logs[0].count("Epoch") == 4
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
    assert logs[0].count("===> Epoch[") == 4 and logs[0].count("Checkpoint saved") == 2
    assert logs[1].replace("retrograd_", "torch_") == logs[0]
    assert records[0][-2].shape == (1, 15, 18)
    assert_records_agree(records[1], records[0], rtol=1e-8, atol=1e-10)
