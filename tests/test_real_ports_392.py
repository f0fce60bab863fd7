"""A program written here in the style of ndahlquist/pytorch-fourier-feature-networks' demo (as
a repository that runs it over a folder of images uses it), run under torch and, ported, under
retrograd from the same weights and draws (the harness: ``tests/real_ports.py``): neural
fields, continued.

- a Gaussian Fourier feature map (Tancik et al.) kept as a plain tensor ``torch.randn((2, m))
  * scale``, applied by ``x.permute(0, 2, 3, 1).reshape(n * h * w, c) @ self.B.to(x.device)``
  and ``view``/``permute`` back, ``2 * np.pi * x`` and ``torch.cat([torch.sin(x),
  torch.cos(x)], dim=1)``, with ``assert x.dim() == 4, "...".format(...)`` checks; a stack of
  1x1 ``nn.Conv2d``, ``nn.ReLU`` and ``nn.BatchNorm2d`` ending in ``nn.Sigmoid`` moved by
  ``.to(device)`` (``torch.device(... torch.cuda.is_available() ...)``); the
  coordinate grid from ``np.meshgrid`` as ``torch.tensor(...).unsqueeze(0).permute(0, 3, 1,
  2).float().contiguous()``; each image of a folder (``os.listdir``, ``os.fsdecode``,
  ``imageio.imread(...)[..., :3] / 255.``, a centre crop) fitted by
  ``torch.nn.functional.l1_loss`` under ``torch.optim.Adam(list(model.parameters()), lr=...)``
  with ``"%d ... %.03f" % (epoch, float(loss))`` logs; snapshots turned to images by
  ``out[out > 255] = 255``, ``out[out < 0] = 0`` and ``.type(torch.uint8).permute(1, 2,
  0).cpu().numpy()`` and saved by ``plt.imsave``.

The images are two small ones the test makes (``imageio``/``plt`` stand-ins read them and keep
the snapshots). The feature matrix draws from one seeded stream in both runs and
``initialize(model)`` gives the port torch's initial weights. The port changes the import
lines and the gradient lines (``grads = loss.backward()``, ``adam.step(grads)``).
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from real_ports import (
    assert_records_agree,
    global_streams_restored,  # noqa: F401 (a fixture: the runs seed NumPy and torch)
    initializer,
    runs_with_draws,
)

FOURIER_SOURCE = r"""
import os

import numpy as np
import torch
import torch.nn as nn
from torch import nn as layers

device = torch.device("cpu" if not torch.cuda.is_available() else "cuda")
WIDTH = 32


class FourierFeatures(nn.Module):
    # random Fourier features: a fixed projection, not a parameter
    def __init__(self, in_channels, features=16, scale=8.0):
        super().__init__()
        self.in_channels, self.features = in_channels, features
        self.B = torch.randn((in_channels, features)) * scale

    def forward(self, x):
        assert x.dim() == 4, "want a 4-d grid, got {} dims".format(x.dim())
        n, c, h, w = x.shape
        assert c == self.in_channels, "want {} channels, got {}".format(self.in_channels, c)
        flat = x.permute(0, 2, 3, 1).reshape(n * h * w, c) @ self.B.to(x.device)
        x = flat.view(n, h, w, self.features).permute(0, 3, 1, 2)
        x = 2 * np.pi * x
        waves = [torch.sin(x), torch.cos(x)]
        return torch.cat(waves, dim=1)


def pixel_block(c_in, c_out):
    conv = layers.Conv2d(c_in, c_out, kernel_size=1, padding=0)
    return [conv, layers.ReLU(), layers.BatchNorm2d(c_out)]


def field_model(c_in):
    blocks = pixel_block(c_in, WIDTH) + pixel_block(WIDTH, WIDTH)
    return nn.Sequential(*blocks, nn.Conv2d(WIDTH, 3, kernel_size=1), nn.Sigmoid()).to(device)


def as_picture(chw):
    out = chw * 256
    out[out > 255] = 255
    out[out < 0] = 0
    return out.type(torch.uint8).permute(1, 2, 0).cpu().numpy()


def load_crop(path, half=6):
    pixels = imageio.imread(path)[..., :3] / 255.
    mid_r, mid_c = pixels.shape[0] // 2, pixels.shape[1] // 2
    return pixels[mid_r - half:mid_r + half, mid_c - half:mid_c + half]


def fit_folder(folder, out_dir, epochs=4):
    names = sorted(os.fsdecode(entry) for entry in os.listdir(folder))
    side = load_crop(os.path.join(folder, names[0])).shape[0]
    ticks = np.linspace(0, 1, side, endpoint=False)
    grid = np.stack(np.meshgrid(ticks, ticks), -1)
    grid = torch.tensor(grid).unsqueeze(0).permute(0, 3, 1, 2).float().contiguous().to(device)
    features = FourierFeatures(2)(grid)
    model = field_model(features.shape[1])
    initialize(model)
    adam = torch.optim.Adam(list(model.parameters()), lr=2e-3)
    for name in names:
        target = torch.tensor(load_crop(os.path.join(folder, name)))
        target = target.unsqueeze(0).permute(0, 3, 1, 2).to(device)
        for epoch in range(1, epochs + 1):
            adam.zero_grad()
            guess = model(features)
            loss = torch.nn.functional.l1_loss(target, guess)
            loss.backward()
            adam.step()
            if epoch % 2 == 0:
                print("%s epoch %d: l1 %.03f" % (name, epoch, float(loss)))
                snapshot = os.path.join(out_dir, "%s_%d.png" % (name[:-4], epoch))
                plt.imsave(snapshot, as_picture(guess[0]))
        weights = {key: w.detach().numpy().copy() for key, w in model.state_dict().items()}
        record.append({"loss": float(loss), "guess": guess.detach().numpy(), **weights})


fit_folder(train_dir, output)
"""

FOURIER_STEPS = [
    ("import torch\n", "import retrograd as torch\n"),
    ("import torch.nn as nn\n", "import retrograd.nn as nn\n"),
    ("from torch import nn as layers\n", "from retrograd import nn as layers\n"),
    ("            loss.backward()\n", "            grads = loss.backward()\n"),
    ("            adam.step()\n", "            adam.step(grads)\n"),
]


class _Files:
    """``imageio.imread`` of the test's images by file name; ``plt.imsave`` keeps each
    snapshot."""

    def __init__(self, images: dict[str, np.ndarray]):
        self.images, self.saved = images, {}

    def imread(self, path: str) -> np.ndarray:
        return self.images[os.path.basename(path)]

    def imsave(self, path: str, array: np.ndarray) -> None:
        self.saved[path] = np.array(array, copy=True)


@pytest.mark.usefixtures("global_streams_restored")
def test_fourier_feature_network_fits_images_as_torch(capsys, tmp_path):
    rng = np.random.default_rng(392)
    rows, cols = np.mgrid[0:20, 0:20] / 20.0
    images = {
        "a.jpg": (255 * np.stack([np.sin(9 * rows) ** 2, cols, rows * cols], -1)).astype(np.uint8),
        "b.jpg": rng.integers(0, 256, (20, 20, 4)).astype(np.uint8),
    }
    for name in images:
        (tmp_path / name).touch()
    files = []

    def imageio(lib):
        files.append(_Files(images))
        return files[-1]

    (theirs, ours), (their_log, our_log) = runs_with_draws(
        FOURIER_SOURCE,
        FOURIER_STEPS,
        capsys,
        392,
        initialize=initializer(),
        make_imageio=imageio,
        make_plt=lambda lib: files[-1],
        train_dir=str(tmp_path),
        output="out",
    )
    assert our_log == their_log and their_log.count(" epoch ") == 4
    theirs_saved, ours_saved = files[0].saved, files[1].saved
    assert list(ours_saved) == list(theirs_saved) and len(theirs_saved) == 4
    for name, snapshot in theirs_saved.items():
        assert ours_saved[name].dtype == np.uint8 and ours_saved[name].shape == (12, 12, 3)
        assert np.abs(ours_saved[name].astype(int) - snapshot.astype(int)).max() <= 1, name
    assert_records_agree(ours, theirs, rtol=1e-3, atol=1e-4)  # BatchNorm amplifies rounding
