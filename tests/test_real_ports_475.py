# ruff: noqa: E501  (the programs are kept as their authors wrote them)
"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):
DeepDream as gordicaleksa/pytorch-deepdream writes it (``deepdream.py``'s ``gradient_ascent`` and
``deep_dream_static_image``; ``utils/utils.py``'s ``random_circular_spatial_shift``,
``CascadeGaussianSmoothing``, the image adapters and ``get_new_shape``; ``utils/constants.py``'s
bounds), dreaming a small image through a three-level pyramid with a small VGG-style model,
against torch's run of the same code from the same weights, image and shifts.

What it exercises: the jitter ``torch.roll(tensor, shifts=(h_shift, w_shift), dims=(2, 3))``
under ``torch.no_grad()`` and ``rolled.requires_grad = True`` on its result, undone after the
step by the negated shifts (from ``np.random.randint(-s, s + 1, 2)``: NumPy integers); the loss
``torch.mean(torch.stack(losses))`` of ``torch.nn.MSELoss(reduction='mean')(layer_activation,
torch.zeros_like(layer_activation))`` over the activations picked from a namedtuple by index
(``model.layer_names.index(...)``); the gradient smoothed by ``CascadeGaussianSmoothing``
(``torch.meshgrid`` of ``torch.arange(size, dtype=torch.float32)``, ``kernel *= ... *
torch.exp(-((grid - mean) / std_1d) ** 2 / 2)``, ``kernel.view(1, 1, *kernel.shape).repeat(3, 1,
1, 1)``, ``F.pad(..., mode='reflect')`` and depthwise ``F.conv2d(input, weight=...,
groups=num_in_channels)`` kept as ``self.conv = F.conv2d``), normalised by ``torch.std``/
``torch.mean``; the ascent ``input_tensor.data += config['lr'] * smooth_grad`` and the clamp
``input_tensor.data = torch.max(torch.min(input_tensor, UPPER_IMAGE_BOUND), LOWER_IMAGE_BOUND)``
against per-channel tensor bounds made by ``torch.tensor(np_array.reshape(1, -1, 1, 1))``; a model
frozen by ``param.requires_grad = False``; ``tensor.requires_grad = True`` in
``pytorch_input_adapter`` and ``np.moveaxis(tensor.to('cpu').detach().numpy()[0], 0, 2)``.

The image is a random 18x18 one; the model is a small VGG in the repository's ``vggs.py`` style
(conv/ReLU slices returning a namedtuple of the layers' outputs, ``layer_names``); OpenCV's
``cv.resize`` is a NumPy bilinear stand-in and torchvision's ``transforms.ToTensor`` its
array-to-tensor step (the same in both runs). Dropped: the file and video paths. The lines
changed for the port: the ``import`` lines and the gradient lines (``grads = loss.backward()``,
``input_tensor.grad(grads).data``; ``input_tensor.grad.data.zero_()`` goes: the gradients are a
value).
"""

from __future__ import annotations

import numpy as np
import torch

import retrograd as rg
from real_ports import assert_records_agree, initializer, port, run_source

DEEPDREAM_SOURCE = """
import math
import numbers
from collections import namedtuple

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn


# -- utils/constants.py ------------------------------------------------------------------------
DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")

IMAGENET_MEAN_1 = np.array([0.485, 0.456, 0.406], dtype=np.float32)
IMAGENET_STD_1 = np.array([0.229, 0.224, 0.225], dtype=np.float32)

LOWER_IMAGE_BOUND = torch.tensor((-IMAGENET_MEAN_1 / IMAGENET_STD_1).reshape(1, -1, 1, 1)).to(DEVICE)
UPPER_IMAGE_BOUND = torch.tensor(((1 - IMAGENET_MEAN_1) / IMAGENET_STD_1).reshape(1, -1, 1, 1)).to(DEVICE)


# -- models/definitions/vggs.py, small -------------------------------------------------------
class Vgg16Small(torch.nn.Module):
    def __init__(self, requires_grad=False):
        super().__init__()
        self.layer_names = ['relu1_2', 'relu2_2', 'relu3_1']
        self.slice1 = torch.nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(inplace=True),
                                          nn.Conv2d(4, 4, 3, padding=1), nn.ReLU(inplace=True))
        self.slice2 = torch.nn.Sequential(nn.MaxPool2d(kernel_size=2, stride=2),
                                          nn.Conv2d(4, 6, 3, padding=1), nn.ReLU(inplace=True),
                                          nn.Conv2d(6, 6, 3, padding=1), nn.ReLU(inplace=True))
        self.slice3 = torch.nn.Sequential(nn.MaxPool2d(kernel_size=2, stride=2),
                                          nn.Conv2d(6, 8, 3, padding=1), nn.ReLU(inplace=True))
        if not requires_grad:
            for param in self.parameters():
                param.requires_grad = False

    def forward(self, x):
        x = self.slice1(x)
        relu1_2 = x
        x = self.slice2(x)
        relu2_2 = x
        x = self.slice3(x)
        relu3_1 = x
        vgg_outputs = namedtuple("VggOutputs", self.layer_names)
        out = vgg_outputs(relu1_2, relu2_2, relu3_1)
        return out


# -- utils/utils.py ----------------------------------------------------------------------------
def pre_process_numpy_img(img):
    assert isinstance(img, np.ndarray), f'Expected numpy image got {type(img)}'

    img = (img - IMAGENET_MEAN_1) / IMAGENET_STD_1  # normalize image
    return img


def post_process_numpy_img(img):
    assert isinstance(img, np.ndarray), f'Expected numpy image got {type(img)}'

    if img.shape[0] == 3:  # if channel-first format move to channel-last (CHW -> HWC)
        img = np.moveaxis(img, 0, 2)

    mean = IMAGENET_MEAN_1.reshape(1, 1, -1)
    std = IMAGENET_STD_1.reshape(1, 1, -1)
    img = (img * std) + mean  # de-normalize
    img = np.clip(img, 0., 1.)  # make sure it's in the [0, 1] range

    return img


def pytorch_input_adapter(img, device):
    # shape = (1, 3, H, W)
    tensor = transforms.ToTensor()(img).to(device).unsqueeze(0)
    tensor.requires_grad = True
    return tensor


def pytorch_output_adapter(tensor):
    # Push to CPU, detach from the computational graph, convert from (1, 3, H, W) into (H, W, 3)
    return np.moveaxis(tensor.to('cpu').detach().numpy()[0], 0, 2)


def get_new_shape(config, base_shape, pyramid_level):
    SHAPE_MARGIN = 10
    pyramid_ratio = config['pyramid_ratio']
    pyramid_size = config['pyramid_size']
    exponent = pyramid_level - pyramid_size + 1
    new_shape = np.round(np.float32(base_shape)*(pyramid_ratio**exponent)).astype(np.int32)

    if new_shape[0] < SHAPE_MARGIN or new_shape[1] < SHAPE_MARGIN:
        print(f'Pyramid size {config["pyramid_size"]} with pyramid ratio {config["pyramid_ratio"]} gives too small pyramid levels with size={new_shape}')
        print(f'Please change parameters.')
        exit(0)

    return new_shape


def random_circular_spatial_shift(tensor, h_shift, w_shift, should_undo=False):
    if should_undo:
        h_shift = -h_shift
        w_shift = -w_shift
    with torch.no_grad():
        rolled = torch.roll(tensor, shifts=(h_shift, w_shift), dims=(2, 3))
        rolled.requires_grad = True
        return rolled


class CascadeGaussianSmoothing(nn.Module):
    \"\"\"
    Apply gaussian smoothing separately for each channel (depthwise convolution).

    Arguments:
        kernel_size (int, sequence): Size of the gaussian kernel.
        sigma (float, sequence): Standard deviation of the gaussian kernel.

    \"\"\"
    def __init__(self, kernel_size, sigma):
        super().__init__()

        if isinstance(kernel_size, numbers.Number):
            kernel_size = [kernel_size, kernel_size]

        cascade_coefficients = [0.5, 1.0, 2.0]  # std multipliers
        sigmas = [[coeff * sigma, coeff * sigma] for coeff in cascade_coefficients]  # isotropic Gaussian

        self.pad = int(kernel_size[0] / 2)  # assure we have the same spatial resolution

        # The gaussian kernel is the product of the gaussian function of each dimension.
        kernels = []
        meshgrids = torch.meshgrid([torch.arange(size, dtype=torch.float32) for size in kernel_size])
        for sigma in sigmas:
            kernel = torch.ones_like(meshgrids[0])
            for size_1d, std_1d, grid in zip(kernel_size, sigma, meshgrids):
                mean = (size_1d - 1) / 2
                kernel *= 1 / (std_1d * math.sqrt(2 * math.pi)) * torch.exp(-((grid - mean) / std_1d) ** 2 / 2)
            kernels.append(kernel)

        gaussian_kernels = []
        for kernel in kernels:
            # Normalize - make sure sum of values in gaussian kernel equals 1.
            kernel = kernel / torch.sum(kernel)
            # Reshape to depthwise convolutional weight
            kernel = kernel.view(1, 1, *kernel.shape)
            kernel = kernel.repeat(3, 1, 1, 1)
            kernel = kernel.to(DEVICE)

            gaussian_kernels.append(kernel)

        self.weight1 = gaussian_kernels[0]
        self.weight2 = gaussian_kernels[1]
        self.weight3 = gaussian_kernels[2]
        self.conv = F.conv2d

    def forward(self, input):
        input = F.pad(input, [self.pad, self.pad, self.pad, self.pad], mode='reflect')

        # Apply Gaussian kernels depthwise over the input (hence groups equals the number of input channels)
        # shape = (1, 3, H, W) -> (1, 3, H, W)
        num_in_channels = input.shape[1]
        grad1 = self.conv(input, weight=self.weight1, groups=num_in_channels)
        grad2 = self.conv(input, weight=self.weight2, groups=num_in_channels)
        grad3 = self.conv(input, weight=self.weight3, groups=num_in_channels)

        return (grad1 + grad2 + grad3) / 3


class utils:  # (the module's namespace)
    pre_process_numpy_img = staticmethod(pre_process_numpy_img)
    post_process_numpy_img = staticmethod(post_process_numpy_img)
    pytorch_input_adapter = staticmethod(pytorch_input_adapter)
    pytorch_output_adapter = staticmethod(pytorch_output_adapter)
    get_new_shape = staticmethod(get_new_shape)
    random_circular_spatial_shift = staticmethod(random_circular_spatial_shift)
    CascadeGaussianSmoothing = CascadeGaussianSmoothing


# -- deepdream.py ------------------------------------------------------------------------------
# loss.backward(layer) <- original implementation did it like this it's equivalent to MSE(reduction='sum')/2
def gradient_ascent(config, model, input_tensor, layer_ids_to_use, iteration):
    # Step 0: Feed forward pass
    out = model(input_tensor)

    # Step 1: Grab activations/feature maps of interest
    activations = [out[layer_id_to_use] for layer_id_to_use in layer_ids_to_use]

    # Step 2: Calculate loss over activations
    losses = []
    for layer_activation in activations:
        # Use torch.norm(torch.flatten(layer_activation), p) with p=2 for L2 loss and p=1 for L1 loss.
        # But I'll use the MSE as it works really good, I didn't notice any serious change when going to L1/L2.
        # using torch.zeros_like as if we wanted to make activations as small as possible but we'll do gradient ascent
        # and that will cause it to actually amplify whatever the network "sees" thus yielding the famous DeepDream look
        loss_component = torch.nn.MSELoss(reduction='mean')(layer_activation, torch.zeros_like(layer_activation))
        losses.append(loss_component)

    loss = torch.mean(torch.stack(losses))
    loss.backward()

    # Step 3: Process image gradients (smoothing + normalization)
    grad = input_tensor.grad.data

    # Applies 3 Gaussian kernels and thus "blurs" or smoothens the gradients and gives visually more pleasing results
    # sigma is calculated using an arbitrary heuristic feel free to experiment
    sigma = ((iteration + 1) / config['num_gradient_ascent_iterations']) * 2.0 + config['smoothing_coefficient']
    smooth_grad = utils.CascadeGaussianSmoothing(kernel_size=9, sigma=sigma)(grad)  # "magic number" 9 just works well

    # Normalize the gradients (make them have mean = 0 and std = 1)
    # I didn't notice any big difference normalizing the mean as well - feel free to experiment
    g_std = torch.std(smooth_grad)
    g_mean = torch.mean(smooth_grad)
    smooth_grad = smooth_grad - g_mean
    smooth_grad = smooth_grad / g_std

    # Step 4: Update image using the calculated gradients (gradient ascent step)
    input_tensor.data += config['lr'] * smooth_grad

    # Step 5: Clear gradients and clamp the data (otherwise values would explode to +- "infinity")
    input_tensor.grad.data.zero_()
    input_tensor.data = torch.max(torch.min(input_tensor, UPPER_IMAGE_BOUND), LOWER_IMAGE_BOUND)
    record.append(loss.item())


def deep_dream_static_image(config, img):
    model = fetch_and_prepare_model(config['model_name'], config['pretrained_weights'], DEVICE)
    try:
        layer_ids_to_use = [model.layer_names.index(layer_name) for layer_name in config['layers_to_use']]
    except Exception as e:  # making sure you set the correct layer name for this specific model
        print(f'Invalid layer names {[layer_name for layer_name in config["layers_to_use"]]}.')
        print(f'Available layers for model {config["model_name"]} are {model.layer_names}.')
        return

    img = utils.pre_process_numpy_img(img)
    base_shape = img.shape[:-1]  # save initial height and width

    # Note: simply rescaling the whole result (and not only details, see original implementation) gave me better results
    # Going from smaller to bigger resolution (from pyramid top to bottom)
    for pyramid_level in range(config['pyramid_size']):
        new_shape = utils.get_new_shape(config, base_shape, pyramid_level)
        img = cv.resize(img, (new_shape[1], new_shape[0]))
        input_tensor = utils.pytorch_input_adapter(img, DEVICE)

        for iteration in range(config['num_gradient_ascent_iterations']):
            h_shift, w_shift = np.random.randint(-config['spatial_shift_size'], config['spatial_shift_size'] + 1, 2)
            input_tensor = utils.random_circular_spatial_shift(input_tensor, h_shift, w_shift)

            gradient_ascent(config, model, input_tensor, layer_ids_to_use, iteration)

            input_tensor = utils.random_circular_spatial_shift(input_tensor, h_shift, w_shift, should_undo=True)

        img = utils.pytorch_output_adapter(input_tensor)
        record.append(img)

    return utils.post_process_numpy_img(img)
"""

DEEPDREAM_STEPS = [
    ("import torch\n", "import retrograd as torch\n"),
    ("import torch.nn.functional as F\n", "import retrograd.nn.functional as F\n"),
    (
        "    loss.backward()\n\n    # Step 3: Process image gradients (smoothing + normalization)\n    grad = input_tensor.grad.data\n",
        "    grads = loss.backward()\n\n    # Step 3: Process image gradients (smoothing + normalization)\n    grad = input_tensor.grad(grads).data\n",
    ),
    ("    input_tensor.grad.data.zero_()\n", ""),
]


class Cv:
    """OpenCV's ``resize(src, (width, height))`` (bilinear, half-pixel centres) of a float
    ``H x W x C`` image, in NumPy (the same in both runs)."""

    @staticmethod
    def resize(image, size):
        width, height = size

        def taps(out, inp):
            centre = np.clip((np.arange(out) + 0.5) * inp / out - 0.5, 0, inp - 1)
            low = np.floor(centre).astype(int)
            return low, np.minimum(low + 1, inp - 1), (centre - low).astype(image.dtype)

        (top, bottom, dy), (left, right, dx) = (
            taps(height, image.shape[0]),
            taps(width, image.shape[1]),
        )
        rows = image[top] * (1 - dy)[:, None, None] + image[bottom] * dy[:, None, None]
        return rows[:, left] * (1 - dx)[None, :, None] + rows[:, right] * dx[None, :, None]


def _transforms(lib):
    class ToTensor:  # torchvision's for a float H x W x C array: C x H x W, as it is
        def __call__(self, image):
            return lib.from_numpy(np.ascontiguousarray(image.transpose(2, 0, 1)))

    class Transforms:
        pass

    Transforms.ToTensor = ToTensor
    return Transforms


def test_deep_dream_with_rolled_jitter_as_torch(capsys):
    image = np.random.default_rng(4750).uniform(size=(18, 18, 3)).astype(np.float32)
    config = {
        "model_name": "VGG16_SMALL",
        "pretrained_weights": "IMAGENET",
        "layers_to_use": ["relu2_2", "relu3_1"],
        "pyramid_size": 3,
        "pyramid_ratio": 1.3,
        "num_gradient_ascent_iterations": 2,
        "lr": 0.09,
        "spatial_shift_size": 4,
        "smoothing_coefficient": 0.5,
    }
    records = []
    initialize = initializer()
    for lib in (torch, rg):
        record = []

        holder = {}

        def fetch_and_prepare_model(model_type, pretrained_weights, device, lib=lib, holder=holder):
            lib.manual_seed(0)
            model = holder["names"]["Vgg16Small"](requires_grad=False).to(device)
            initialize(model)
            for param in model.parameters():  # (load_state_dict keeps them frozen)
                assert not param.requires_grad
            return model

        text = DEEPDREAM_SOURCE if lib is torch else port(DEEPDREAM_SOURCE, DEEPDREAM_STEPS)
        text = (
            text
            if lib is torch
            else text.replace("from torch import nn", "from retrograd import nn")
        )
        np.random.seed(4751)
        holder["names"] = names = run_source(
            text,
            lib,
            record=record,
            cv=Cv,
            transforms=_transforms(lib),
            fetch_and_prepare_model=fetch_and_prepare_model,
        )
        record.append(names["deep_dream_static_image"](config, image))
        records.append(record)
    assert capsys.readouterr().out == ""
    assert len(records[0]) == 3 * 2 + 3 + 1
    assert_records_agree(records[1], records[0], rtol=1e-4, atol=2e-5)
