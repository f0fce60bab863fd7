# ruff: noqa: E501, W293  (the programs are kept as their authors wrote them)
"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):
neural fields, continued.

- Fourier feature networks (Tancik et al.) as ndahlquist/pytorch-fourier-feature-networks'
  demo writes them: ``GaussianFourierFeatureTransform`` (a plain-tensor ``_B = torch.randn(...)
  * scale``, ``x.permute(0, 2, 3, 1).reshape(batches * width * height, channels) @ self._B.to(
  x.device)``, ``view``/``permute`` back, ``torch.cat([torch.sin(x), torch.cos(x)], dim=1)``,
  the ``assert x.dim() == 4`` checks), ``get_model``'s stack of 1x1 ``nn.Conv2d``, ``nn.ReLU``
  and ``nn.BatchNorm2d(256)`` ending in ``nn.Sigmoid`` (``.to(device)``), the image-fitting loop
  (``torch.nn.functional.l1_loss``, Adam at ``1e-4``, ``'Epoch %d, loss = %.03f' % (epoch,
  float(loss))``) and ``tensor_to_numpy`` (``tensor[tensor > 255] = 255``, ``.type(torch.uint8)
  .permute(1, 2, 0).cpu().numpy()``), as the copy in a repository that runs it over a folder of
  images keeps them (``gen_image_Gauss_0``).

The image files (``imageio.imread`` of each file in ``train_dir``, cropped by ``get_image``) are
two small synthetic images made by the test and cropped by the author's ``get_image`` with
``r = 8``; ``plt.imsave`` of each snapshot is replaced by recording it; ``tqdm`` is ``range``'s
iterator; 4 epochs instead of 200. The Fourier matrix draws from one seeded stream in both runs
and ``initialize(model)`` gives the port torch's initial weights. The lines changed: the import
lines and the gradient lines (``grads = loss.backward()``, ``optimizer.step(grads)``).
"""

from __future__ import annotations

import numpy as np

from real_ports import assert_records_agree, initializer, runs_with_draws

FOURIER_SOURCE = r'''
import os
import numpy as np
import torch
device = torch.device('cuda' if torch.cuda.is_available() else 'cpu')
device
import torch
import torch.nn as nn
import numpy as np
import torch
import numpy as np
from torch import nn
import re
def tensor_to_numpy(tensor: torch.Tensor) -> np.ndarray:
    tensor = tensor * 256
    tensor[tensor > 255] = 255
    tensor[tensor < 0] = 0
    tensor = tensor.type(torch.uint8).permute(1, 2, 0).cpu().numpy()

    return tensor

def get_image(url):
    image_url = url
    img = imageio.imread(image_url)[..., :3] / 255.
    c = [img.shape[0] // 2, img.shape[1] // 2]
    r = 8
    img = img[c[0] - r:c[0] + r, c[1] - r:c[1] + r]

    return img
   
    
class GaussianFourierFeatureTransform(torch.nn.Module):
    """
    An implementation of Gaussian Fourier feature mapping.

    "Fourier Features Let Networks Learn High Frequency Functions in Low Dimensional Domains":
       https://arxiv.org/abs/2006.10739
       https://people.eecs.berkeley.edu/~bmild/fourfeat/index.html

    Given an input of size [batches, num_input_channels, width, height],
     returns a tensor of size [batches, mapping_size*2, width, height].
    """

    def __init__(self, num_input_channels, mapping_size=256, scale=32):
        super().__init__()

        self._num_input_channels = num_input_channels
        self._mapping_size = mapping_size
        self._B = torch.randn((num_input_channels, mapping_size)) * scale

    def forward(self, x):
        assert x.dim() == 4, 'Expected 4D input (got {}D input)'.format(x.dim())

        batches, channels, width, height = x.shape

        assert channels == self._num_input_channels,\
            "Expected input to have {} channels (got {} channels)".format(self._num_input_channels, channels)

        # Make shape compatible for matmul with _B.
        # From [B, C, W, H] to [(B*W*H), C].
        x = x.permute(0, 2, 3, 1).reshape(batches * width * height, channels)

        x = x @ self._B.to(x.device)

        # From [(B*W*H), C] to [B, W, H, C]
        x = x.view(batches, width, height, self._mapping_size)
        # From [B, W, H, C] to [B, C, W, H]
        x = x.permute(0, 3, 1, 2)

        x = 2 * np.pi * x
        return torch.cat([torch.sin(x), torch.cos(x)], dim=1)


def get_model():

    model = nn.Sequential(
            nn.Conv2d(
                256,
                256,
                kernel_size=1,
                padding=0),
            nn.ReLU(),
            nn.BatchNorm2d(256),

            nn.Conv2d(
                256,
                256,
                kernel_size=1,
                padding=0),
            nn.ReLU(),
            nn.BatchNorm2d(256),

            nn.Conv2d(
                256,
                256,
                kernel_size=1,
                padding=0),
            nn.ReLU(),
            nn.BatchNorm2d(256),
        
            nn.Conv2d(
                256,
                256,
                kernel_size=1,
                padding=0),
            nn.ReLU(),
            nn.BatchNorm2d(256),

            nn.Conv2d(
                256,
                3,
                kernel_size=1,
                padding=0),
            nn.Sigmoid(),
        ).to(device)
    return model
def gen_image_Gauss_0(train_dir,output):
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    index=0;
    image_temp=[]

    for image in os.listdir(train_dir):
        # if os.path.exists(output+ "\\"+ re.sub(".jpg","",image)  ) == False:
            # os.mkdir(output+ "\\"+ re.sub(".jpg","",image) )
        image_temp.append(image)

    target = torch.tensor(get_image(train_dir + "\\"+os.fsdecode(image_temp[0]))).unsqueeze(0).permute(0, 3, 1, 2).to(device)
    # print(target.shape)

    coords = np.linspace(0, 1, target.shape[2], endpoint=False)
    xy_grid = np.stack(np.meshgrid(coords, coords), -1)
    xy_grid1 = torch.tensor(xy_grid).unsqueeze(0).permute(0, 3, 1, 2).float().contiguous().to(device)
    x = GaussianFourierFeatureTransform(2, 128, scale = 10)(xy_grid1)
    model = get_model()
    initialize(model)
    optimizer = torch.optim.Adam(list(model.parameters()), lr=1e-4)

    for image in image_temp:
        target = torch.tensor(get_image(train_dir + "\\"+os.fsdecode(image))).unsqueeze(0).permute(0, 3, 1, 2).to(device)
        
        for epoch in tqdm(range(1,5)):
            optimizer.zero_grad()
            generated = model(x)
            loss = torch.nn.functional.l1_loss(target, generated)
            loss.backward()
            optimizer.step()
            if epoch % 2 == 0:
                print('Epoch %d, loss = %.03f' % (epoch, float(loss)))
                plt.imsave(output + "\\" +  re.sub(".jpg","",image)+"_"+str(epoch)+".jpg"  , tensor_to_numpy(generated[0]))
        record.append({'loss': float(loss), 'generated': generated.detach().numpy(),
                       **{k: v.detach().numpy().copy() for k, v in model.state_dict().items()}})

gen_image_Gauss_0(train_dir, output)
'''

FOURIER_STEPS = [
    ("import torch\n", "import retrograd as torch\n"),
    ("import torch.nn as nn\n", "import retrograd.nn as nn\n"),
    ("from torch import nn\n", "from retrograd import nn\n"),
    ("            loss.backward()\n", "            grads = loss.backward()\n"),
    ("            optimizer.step()\n", "            optimizer.step(grads)\n"),
]


class _Files:
    """``imageio.imread`` of the test's images by file name; ``plt.imsave`` keeps each
    snapshot."""

    def __init__(self, images: dict[str, np.ndarray]):
        self.images, self.saved = images, {}

    def imread(self, path: str) -> np.ndarray:
        return self.images[path.rsplit("\\", 1)[-1]]

    def imsave(self, path: str, array: np.ndarray) -> None:
        self.saved[path] = np.array(array, copy=True)


def test_fourier_feature_network_fits_images_as_torch(capsys, tmp_path):
    np.random.seed(392)
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
        tqdm=iter,
        train_dir=str(tmp_path),
        output="out",
    )
    assert our_log == their_log and their_log.count("Epoch") == 4
    theirs_saved, ours_saved = files[0].saved, files[1].saved
    assert list(ours_saved) == list(theirs_saved) and len(theirs_saved) == 4
    for name, snapshot in theirs_saved.items():
        assert ours_saved[name].dtype == np.uint8 and ours_saved[name].shape == (16, 16, 3)
        assert np.abs(ours_saved[name].astype(int) - snapshot.astype(int)).max() <= 1, name
    assert_records_agree(ours, theirs, rtol=1e-3, atol=1e-4)  # BatchNorm amplifies rounding
