# ruff: noqa: E501  (the programs are kept as their authors wrote them)
"""Real PyTorch programs ported to retrograd, continued from ``tests/test_real_ports_72.py`` (the
harness: ``tests/real_ports.py``), exercising uint8 and int32 tensors as image code does:

- a hand-written image pipeline as torchvision-free training scripts write it: uint8 HWC
  images from NumPy by ``torch.from_numpy(img).permute(2, 0, 1).contiguous()``, random crops
  after ``F.pad(..., mode="reflect")`` of the uint8 image, ``torch.flip`` under a seeded
  ``torch.Generator``, a ``Dataset``/``DataLoader`` with ``default_collate`` giving uint8
  batches converted by ``.float().div(255)`` and normalized per channel by broadcasting, a small
  CNN trained on them, and the test set cached as a uint8 tensor by ``torch.save``/``torch.load``.
- PixelCNN++ as pclucas14/pixel-cnn-pp writes it (``utils.py``'s ``concat_elu``,
  ``log_sum_exp``, ``log_prob_from_logits``, ``discretized_mix_logistic_loss``, ``to_one_hot``,
  ``sample_from_discretized_mix_logistic``, ``down_shift``/``right_shift``; ``layers.py``'s
  ``nin``, ``down_shifted_conv2d``, ``down_right_shifted_conv2d`` and ``gated_resnet`` under
  ``weight_norm``; ``model.py``'s up pass, one layer; ``main.py``'s loop with ``StepLR`` and its
  pixel-by-pixel ``sample``), small: uint8 HWC images rescaled to [-1, 1], the mixture's
  parameters unpacked by ``view(xs + [nr_mix * 3])``, the edge cases selected by ``(x > 0.999)
  .float()`` masks, the mixture component drawn by the max of Gumbel noise from
  ``torch.FloatTensor(logit_probs.size()).uniform_(1e-5, 1. - 1e-5)`` and one-hot encoded by
  ``torch.FloatTensor(tensor.size() + (n,)).zero_().scatter_``, the samples turned back into
  bytes by ``.round().clamp(0, 255).to(torch.uint8)``.
"""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

import retrograd as rg
from real_ports import SharedDraws, assert_records_agree, initializer, port, run_source


@pytest.fixture(autouse=True)
def _seeded():
    torch.manual_seed(0)
    np.random.seed(0)
    random.seed(0)
    rg.seed(0)


IMAGE_PIPELINE_SOURCE = """
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import Dataset, DataLoader
from torch.utils.data.dataloader import default_collate

MEAN = (0.4914, 0.4822, 0.4465)
STD = (0.2470, 0.2435, 0.2616)


def to_tensor(img):
    # HWC uint8 (as PIL/cv2 give it) to CHW uint8
    return torch.from_numpy(img).permute(2, 0, 1).contiguous()


class Normalize:
    def __init__(self, mean, std):
        self.mean = torch.tensor(mean).view(-1, 1, 1)
        self.std = torch.tensor(std).view(-1, 1, 1)

    def __call__(self, x):
        return (x - self.mean) / self.std


class RandomCrop:
    def __init__(self, size, padding, generator):
        self.size = size
        self.padding = padding
        self.generator = generator

    def __call__(self, img):
        p = self.padding
        img = F.pad(img.unsqueeze(0), (p, p, p, p), mode="reflect").squeeze(0)
        h, w = img.shape[-2:]
        i = torch.randint(0, h - self.size + 1, size=(1,), generator=self.generator).item()
        j = torch.randint(0, w - self.size + 1, size=(1,), generator=self.generator).item()
        return img[:, i : i + self.size, j : j + self.size]


class RandomHorizontalFlip:
    def __init__(self, p, generator):
        self.p = p
        self.generator = generator

    def __call__(self, img):
        if torch.rand(1, generator=self.generator) < self.p:
            return torch.flip(img, dims=[-1])
        return img


class Compose:
    def __init__(self, transforms):
        self.transforms = transforms

    def __call__(self, x):
        for t in self.transforms:
            x = t(x)
        return x


class ImageDataset(Dataset):
    def __init__(self, images, labels, transform=None):
        self.images = images
        self.labels = labels
        self.transform = transform

    def __len__(self):
        return len(self.images)

    def __getitem__(self, idx):
        img = to_tensor(self.images[idx])
        if self.transform is not None:
            img = self.transform(img)
        return img, int(self.labels[idx])


class Net(nn.Module):
    def __init__(self, num_classes=3):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 4, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(4)
        self.conv2 = nn.Conv2d(4, 8, 3, padding=1)
        self.fc = nn.Linear(8, num_classes)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)
        x = F.relu(self.conv2(x))
        x = F.adaptive_avg_pool2d(x, 1).flatten(1)
        return self.fc(x)


def train(images, labels, test_images, path, epochs=2):
    g = torch.Generator()
    g.manual_seed(0)
    normalize = Normalize(MEAN, STD)
    transform = Compose([RandomCrop(8, padding=2, generator=g), RandomHorizontalFlip(0.5, generator=g)])
    train_set = ImageDataset(images, labels, transform=transform)
    loader = DataLoader(train_set, batch_size=4, shuffle=False, collate_fn=default_collate)

    model = Net()
    initialize(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4)
    criterion = nn.CrossEntropyLoss()

    for epoch in range(epochs):
        model.train()
        for batch, (x, y) in enumerate(loader):
            assert x.dtype == torch.uint8
            record.append(x.numpy().astype(np.int64))
            x = normalize(x.float().div(255))
            optimizer.zero_grad()
            out = model(x)
            loss = criterion(out, y)
            loss.backward()
            optimizer.step()
            record.append(loss.item())
        record.append({k: v.detach().numpy().copy() for k, v in model.state_dict().items()})

    # the test set goes to disk as one uint8 tensor, as a preprocessing script caches it
    cached = torch.stack([to_tensor(img) for img in test_images])
    torch.save({"images": cached, "mean": torch.tensor(MEAN)}, path)
    loaded = torch.load(path)
    assert loaded["images"].dtype == torch.uint8
    record.append(loaded["images"].numpy().astype(np.int64))
    model.eval()
    with torch.no_grad():
        x = normalize(loaded["images"].float() / 255)
        logits = model(x)
        record.append(logits.numpy().copy())
        pred = logits.argmax(dim=1)
        record.append(pred.numpy().astype(np.int64))
        # per-image brightness statistic straight from the bytes
        record.append(loaded["images"].sum(dim=(1, 2, 3)).numpy())
"""

IMAGE_PIPELINE_STEPS = [
    (
        "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n",
        "import retrograd as torch\nimport retrograd.nn as nn\nimport retrograd.nn.functional as F\n",
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
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.optim import lr_scheduler
from torch.autograd import Variable
from torch.nn.utils import weight_norm as wn


# -- utils.py ------------------------------------------------------------------------------------
def concat_elu(x):
    \"\"\" like concatenated ReLU (http://arxiv.org/abs/1603.05201), but then with ELU \"\"\"
    # Pytorch ordering
    axis = len(x.size()) - 3
    return F.elu(torch.cat([x, -x], dim=axis))


def log_sum_exp(x):
    \"\"\" numerically stable log_sum_exp implementation that prevents overflow \"\"\"
    # TF ordering
    axis  = len(x.size()) - 1
    m, _  = torch.max(x, dim=axis)
    m2, _ = torch.max(x, dim=axis, keepdim=True)
    return m + torch.log(torch.sum(torch.exp(x - m2), dim=axis))


def log_prob_from_logits(x):
    \"\"\" numerically stable log_softmax implementation that prevents overflow \"\"\"
    # TF ordering
    axis = len(x.size()) - 1
    m, _ = torch.max(x, dim=axis, keepdim=True)
    return x - m - torch.log(torch.sum(torch.exp(x - m), dim=axis, keepdim=True))


def discretized_mix_logistic_loss(x, l):
    \"\"\" log-likelihood for mixture of discretized logistics, assumes the data has been rescaled to [-1,1] interval \"\"\"
    # Pytorch ordering
    x = x.permute(0, 2, 3, 1)
    l = l.permute(0, 2, 3, 1)
    xs = [int(y) for y in x.size()]
    ls = [int(y) for y in l.size()]

    # here and below: unpacking the params of the mixture of logistics
    nr_mix = int(ls[-1] / 10)
    logit_probs = l[:, :, :, :nr_mix]
    l = l[:, :, :, nr_mix:].contiguous().view(xs + [nr_mix * 3]) # 3 for mean, scale, coef
    means = l[:, :, :, :, :nr_mix]
    # log_scales = torch.max(l[:, :, :, :, nr_mix:2 * nr_mix], -7.)
    log_scales = torch.clamp(l[:, :, :, :, nr_mix:2 * nr_mix], min=-7.)

    coeffs = F.tanh(l[:, :, :, :, 2 * nr_mix:3 * nr_mix])
    # here and below: getting the means and adjusting them based on preceding
    # sub-pixels
    x = x.contiguous()
    x = x.unsqueeze(-1) + Variable(torch.zeros(xs + [nr_mix]), requires_grad=False)
    m2 = (means[:, :, :, 1, :] + coeffs[:, :, :, 0, :]
                * x[:, :, :, 0, :]).view(xs[0], xs[1], xs[2], 1, nr_mix)

    m3 = (means[:, :, :, 2, :] + coeffs[:, :, :, 1, :] * x[:, :, :, 0, :] +
                coeffs[:, :, :, 2, :] * x[:, :, :, 1, :]).view(xs[0], xs[1], xs[2], 1, nr_mix)

    means = torch.cat((means[:, :, :, 0, :].unsqueeze(3), m2, m3), dim=3)
    centered_x = x - means
    inv_stdv = torch.exp(-log_scales)
    plus_in = inv_stdv * (centered_x + 1. / 255.)
    cdf_plus = F.sigmoid(plus_in)
    min_in = inv_stdv * (centered_x - 1. / 255.)
    cdf_min = F.sigmoid(min_in)
    # log probability for edge case of 0 (before scaling)
    log_cdf_plus = plus_in - F.softplus(plus_in)
    # log probability for edge case of 255 (before scaling)
    log_one_minus_cdf_min = -F.softplus(min_in)
    cdf_delta = cdf_plus - cdf_min  # probability for all other cases
    mid_in = inv_stdv * centered_x
    # log probability in the center of the bin, to be used in extreme cases
    # (not actually used in our code)
    log_pdf_mid = mid_in - log_scales - 2. * F.softplus(mid_in)

    # now select the right output: left edge case, right edge case, normal
    # case, extremely low prob case (doesn't actually happen for us)

    # this is what we are really doing, but using the robust version below for extreme cases in other applications and to avoid NaN issue with tf.select()
    # log_probs = tf.select(x < -0.999, log_cdf_plus, tf.select(x > 0.999, log_one_minus_cdf_min, tf.log(cdf_delta)))

    # robust version, that still works if probabilities are below 1e-5 (which never happens in our code)
    # tensorflow backpropagates through tf.select() by multiplying with zero instead of selecting: this requires use to use some ugly tricks to avoid potential NaNs
    # the 1e-12 in tf.maximum(cdf_delta, 1e-12) is never actually used as output, it's solely there to get around the tf.select() gradient issue
    # if the probability on a sub-pixel is below 1e-5, we use an approximation
    # based on the assumption that the log-density is constant in the bin of
    # the observed sub-pixel value

    inner_inner_cond = (cdf_delta > 1e-5).float()
    inner_inner_out  = inner_inner_cond * torch.log(torch.clamp(cdf_delta, min=1e-12)) + (1. - inner_inner_cond) * (log_pdf_mid - np.log(127.5))
    inner_cond       = (x > 0.999).float()
    inner_out        = inner_cond * log_one_minus_cdf_min + (1. - inner_cond) * inner_inner_out
    cond             = (x < -0.999).float()
    log_probs        = cond * log_cdf_plus + (1. - cond) * inner_out
    log_probs        = torch.sum(log_probs, dim=3) + log_prob_from_logits(logit_probs)

    return -torch.sum(log_sum_exp(log_probs))


def to_one_hot(tensor, n, fill_with=1.):
    # we perform one hot encore with respect to the last axis
    one_hot = torch.FloatTensor(tensor.size() + (n,)).zero_()
    if tensor.is_cuda : one_hot = one_hot.cuda()
    one_hot.scatter_(len(tensor.size()), tensor.unsqueeze(-1), fill_with)
    return Variable(one_hot)


def sample_from_discretized_mix_logistic(l, nr_mix):
    # Pytorch ordering
    l = l.permute(0, 2, 3, 1)
    ls = [int(y) for y in l.size()]
    xs = ls[:-1] + [3]

    # unpack parameters
    logit_probs = l[:, :, :, :nr_mix]
    l = l[:, :, :, nr_mix:].contiguous().view(xs + [nr_mix * 3])
    # sample mixture indicator from softmax
    temp = torch.FloatTensor(logit_probs.size())
    if l.is_cuda : temp = temp.cuda()
    temp.uniform_(1e-5, 1. - 1e-5)
    temp = logit_probs.data - torch.log(- torch.log(temp))
    _, argmax = temp.max(dim=3)

    one_hot = to_one_hot(argmax, nr_mix)
    sel = one_hot.view(xs[:-1] + [1, nr_mix])
    # select logistic parameters
    means = torch.sum(l[:, :, :, :, :nr_mix] * sel, dim=4)
    log_scales = torch.clamp(torch.sum(
        l[:, :, :, :, nr_mix:2 * nr_mix] * sel, dim=4), min=-7.)
    coeffs = torch.sum(F.tanh(
        l[:, :, :, :, 2 * nr_mix:3 * nr_mix]) * sel, dim=4)
    # sample from logistic & clip to interval
    # we don't actually round to the nearest 8bit value when sampling
    u = torch.FloatTensor(means.size())
    if l.is_cuda : u = u.cuda()
    u.uniform_(1e-5, 1. - 1e-5)
    u = Variable(u)
    x = means + torch.exp(log_scales) * (torch.log(u) - torch.log(1. - u))
    x0 = torch.clamp(torch.clamp(x[:, :, :, 0], min=-1.), max=1.)
    x1 = torch.clamp(torch.clamp(
       x[:, :, :, 1] + coeffs[:, :, :, 0] * x0, min=-1.), max=1.)
    x2 = torch.clamp(torch.clamp(
       x[:, :, :, 2] + coeffs[:, :, :, 1] * x0 + coeffs[:, :, :, 2] * x1, min=-1.), max=1.)

    out = torch.cat([x0.view(xs[:-1] + [1]), x1.view(xs[:-1] + [1]), x2.view(xs[:-1] + [1])], dim=3)
    # put back in Pytorch ordering
    out = out.permute(0, 3, 1, 2)
    return out


''' utilities for shifting the image around, efficient alternative to masking convolutions '''
def down_shift(x, pad=None):
    # Pytorch ordering
    xs = [int(y) for y in x.size()]
    # when downshifting, the last row is removed
    x = x[:, :, :xs[2] - 1, :]
    # padding left, padding right, padding top, padding bottom
    pad = nn.ZeroPad2d((0, 0, 1, 0)) if pad is None else pad
    return pad(x)


def right_shift(x, pad=None):
    # Pytorch ordering
    xs = [int(y) for y in x.size()]
    # when righshifting, the last column is removed
    x = x[:, :, :, :xs[3] - 1]
    # padding left, padding right, padding top, padding bottom
    pad = nn.ZeroPad2d((1, 0, 0, 0)) if pad is None else pad
    return pad(x)


# -- layers.py -----------------------------------------------------------------------------------
class nin(nn.Module):
    def __init__(self, dim_in, dim_out):
        super(nin, self).__init__()
        self.lin_a = wn(nn.Linear(dim_in, dim_out))
        self.dim_out = dim_out

    def forward(self, x):
        og_x = x
        # assumes pytorch ordering
        \"\"\" a network in network layer (1x1 CONV) \"\"\"
        # TODO : try with original ordering
        x = x.permute(0, 2, 3, 1)
        shp = [int(y) for y in x.size()]
        out = self.lin_a(x.contiguous().view(shp[0]*shp[1]*shp[2], shp[3]))
        shp[-1] = self.dim_out
        out = out.view(shp)
        return out.permute(0, 3, 1, 2)


class down_shifted_conv2d(nn.Module):
    def __init__(self, num_filters_in, num_filters_out, filter_size=(2,3), stride=(1,1),
                    shift_output_down=False, norm='weight_norm'):
        super(down_shifted_conv2d, self).__init__()

        assert norm in [None, 'batch_norm', 'weight_norm']
        self.conv = nn.Conv2d(num_filters_in, num_filters_out, filter_size, stride)
        self.shift_output_down = shift_output_down
        self.norm = norm
        self.pad  = nn.ZeroPad2d((int((filter_size[1] - 1) / 2), # pad left
                                  int((filter_size[1] - 1) / 2), # pad right
                                  filter_size[0] - 1,            # pad top
                                  0) )                           # pad down

        if norm == 'weight_norm':
            self.conv = wn(self.conv)
        elif norm == 'batch_norm':
            self.bn = nn.BatchNorm2d(num_filters_out)

        if shift_output_down :
            self.down_shift = lambda x : down_shift(x, pad=nn.ZeroPad2d((0, 0, 1, 0)))

    def forward(self, x):
        x = self.pad(x)
        x = self.conv(x)
        x = self.bn(x) if self.norm == 'batch_norm' else x
        return self.down_shift(x) if self.shift_output_down else x


class down_right_shifted_conv2d(nn.Module):
    def __init__(self, num_filters_in, num_filters_out, filter_size=(2,2), stride=(1,1),
                    shift_output_right=False, norm='weight_norm'):
        super(down_right_shifted_conv2d, self).__init__()

        assert norm in [None, 'batch_norm', 'weight_norm']
        self.pad = nn.ZeroPad2d((filter_size[1] - 1, 0, filter_size[0] - 1, 0))
        self.conv = nn.Conv2d(num_filters_in, num_filters_out, filter_size, stride=stride)
        self.shift_output_right = shift_output_right
        self.norm = norm

        if norm == 'weight_norm':
            self.conv = wn(self.conv)
        elif norm == 'batch_norm':
            self.bn = nn.BatchNorm2d(num_filters_out)

        if shift_output_right :
            self.right_shift = lambda x : right_shift(x, pad=nn.ZeroPad2d((1, 0, 0, 0)))

    def forward(self, x):
        x = self.pad(x)
        x = self.conv(x)
        x = self.bn(x) if self.norm == 'batch_norm' else x
        return self.right_shift(x) if self.shift_output_right else x


class gated_resnet(nn.Module):
    def __init__(self, num_filters, conv_op, nonlinearity=concat_elu, skip_connection=0):
        super(gated_resnet, self).__init__()
        self.skip_connection = skip_connection
        self.nonlinearity = nonlinearity
        self.conv_input = conv_op(2 * num_filters, num_filters) # cuz of concat elu

        if skip_connection != 0 :
            self.nin_skip = nin(2 * skip_connection * num_filters, num_filters)

        self.dropout = nn.Dropout2d(0.5)
        self.conv_out = conv_op(2 * num_filters, 2 * num_filters)


    def forward(self, og_x, a=None):
        x = self.conv_input(self.nonlinearity(og_x))
        if a is not None :
            x += self.nin_skip(self.nonlinearity(a))
        x = self.nonlinearity(x)
        x = self.dropout(x)
        x = self.conv_out(x)
        a, b = torch.chunk(x, 2, dim=1)
        c3 = a * F.sigmoid(b)
        return og_x + c3


# -- model.py (one up layer: the u and ul streams, then the mixture's parameters) ------------------
class PixelCNNLayer_up(nn.Module):
    def __init__(self, nr_resnet, nr_filters, resnet_nonlinearity):
        super(PixelCNNLayer_up, self).__init__()
        self.nr_resnet = nr_resnet
        # stream from pixels above
        self.u_stream = nn.ModuleList([gated_resnet(nr_filters, down_shifted_conv2d,
                                        resnet_nonlinearity, skip_connection=0)
                                            for _ in range(nr_resnet)])

        # stream from pixels above and to thes left
        self.ul_stream = nn.ModuleList([gated_resnet(nr_filters, down_right_shifted_conv2d,
                                        resnet_nonlinearity, skip_connection=1)
                                            for _ in range(nr_resnet)])

    def forward(self, u, ul):
        u_list, ul_list = [], []

        for i in range(self.nr_resnet):
            u  = self.u_stream[i](u)
            ul = self.ul_stream[i](ul, a=u)
            u_list  += [u]
            ul_list += [ul]

        return u_list, ul_list


class PixelCNN(nn.Module):
    def __init__(self, nr_resnet=5, nr_filters=80, nr_logistic_mix=10,
                    resnet_nonlinearity='concat_elu', input_channels=3):
        super(PixelCNN, self).__init__()
        if resnet_nonlinearity == 'concat_elu' :
            self.resnet_nonlinearity = lambda x : concat_elu(x)
        else :
            raise Exception('right now only concat elu is supported as resnet nonlinearity.')

        self.nr_filters = nr_filters
        self.input_channels = input_channels
        self.nr_logistic_mix = nr_logistic_mix
        self.up_layer = PixelCNNLayer_up(nr_resnet, nr_filters, self.resnet_nonlinearity)

        self.u_init = down_shifted_conv2d(input_channels + 1, nr_filters, filter_size=(2,3),
                        shift_output_down=True)

        self.ul_init = nn.ModuleList([down_shifted_conv2d(input_channels + 1, nr_filters,
                                            filter_size=(1,3), shift_output_down=True),
                                       down_right_shifted_conv2d(input_channels + 1, nr_filters,
                                            filter_size=(2,1), shift_output_right=True)])

        num_mix = 3 if self.input_channels == 1 else 10
        self.nin_out = nin(nr_filters, num_mix * nr_logistic_mix)
        self.init_padding = None


    def forward(self, x, sample=False):
        # similar as done in the tf repo :
        if self.init_padding is not sample:
            xs = [int(y) for y in x.size()]
            padding = Variable(torch.ones(xs[0], 1, xs[2], xs[3]), requires_grad=False)
            self.init_padding = padding.cuda() if x.is_cuda else padding

        if sample :
            xs = [int(y) for y in x.size()]
            padding = Variable(torch.ones(xs[0], 1, xs[2], xs[3]), requires_grad=False)
            padding = padding.cuda() if x.is_cuda else padding
            x = torch.cat((x, padding), 1)

        ###      UP PASS    ###
        x = x if sample else torch.cat((x, self.init_padding), 1)
        u  = self.u_init(x)
        ul = self.ul_init[0](x) + self.ul_init[1](x)
        u_list, ul_list = self.up_layer(u, ul)

        x_out = self.nin_out(F.elu(ul_list[-1]))
        return x_out


# -- main.py ---------------------------------------------------------------------------------------
def main(train_images, sample_batch_size=1, nr_logistic_mix=2, max_epochs=2, batch_size=2, lr=2e-3, lr_decay=0.9, print_every=1):
    obs = (3, 3, 3)
    rescaling     = lambda x : (x - .5) * 2.
    to_tensor     = lambda img : torch.from_numpy(img).permute(2, 0, 1).float().div(255)
    loss_op   = lambda real, fake : discretized_mix_logistic_loss(real, fake)
    sample_op = lambda x : sample_from_discretized_mix_logistic(x, nr_logistic_mix)

    model = PixelCNN(nr_resnet=1, nr_filters=4, input_channels=obs[0], nr_logistic_mix=nr_logistic_mix)
    for m in model.modules():  # (dropout's masks are each library's own draws)
        if isinstance(m, nn.Dropout2d):
            m.p = 0.0
    initialize(model)
    optimizer = optim.Adam(model.parameters(), lr=lr)
    scheduler = lr_scheduler.StepLR(optimizer, step_size=1, gamma=lr_decay)

    def sample(model):
        model.train(False)
        data = torch.zeros(sample_batch_size, obs[0], obs[1], obs[2])
        for i in range(obs[1]):
            for j in range(obs[2]):
                with torch.no_grad():
                    data_v = Variable(data)
                    out   = model(data_v, sample=True)
                    out_sample = sample_op(out)
                    data[:, :, i, j] = out_sample.data[:, :, i, j]
        return data

    batches = [train_images[k : k + batch_size] for k in range(0, len(train_images), batch_size)]
    for epoch in range(max_epochs):
        model.train(True)
        train_loss = 0.
        time_ = time.time()
        model.train()
        for batch_idx, images in enumerate(batches):
            input = torch.stack([rescaling(to_tensor(img)) for img in images])
            input = Variable(input)
            output = model(input)
            loss = loss_op(input, output)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            train_loss += loss.data.item()
            record.append(loss.item())
            if (batch_idx +1) % print_every == 0 :
                deno = print_every * batch_size * np.prod(obs) * np.log(2.)
                print('loss : {:.4f}, time : {:.4f}'.format(
                    (train_loss / deno),
                    0.0))
                train_loss = 0.
                time_ = time.time()

        # decrease learning rate
        scheduler.step()
        record.append({k: v.detach().numpy().copy() for k, v in model.state_dict().items()})

    return model, sample


def generate(model, sample):
    sample_t = sample(model)
    record.append(sample_t.numpy().copy())
    # back to bytes, as the samples are saved as images
    as_bytes = ((sample_t.permute(0, 2, 3, 1) + 1.) * 127.5).round().clamp(0, 255).to(torch.uint8)
    record.append(as_bytes.numpy().astype(np.int64))
"""

PIXELCNN_STEPS = [
    (
        "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\nimport torch.optim as optim\n",
        "import retrograd as torch\nimport retrograd.nn as nn\nimport retrograd.nn.functional as F\nimport retrograd.optim as optim\n",
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


def test_pixelcnn_pp_discretized_logistic_mixture_trains_and_samples_as_torch(capsys):
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
    assert logs[1] == logs[0]
    assert_records_agree(records[1], records[0], rtol=1e-4, atol=1e-5)
