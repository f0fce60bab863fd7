# ruff: noqa: E501  (the programs are kept as their authors wrote them)
"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):
gradient saliency as utkuozbulak/pytorch-cnn-visualizations writes it, against torch's run of the
same code from the same weights, image and noise:

- ``vanilla_backprop.py``'s ``VanillaBackprop``: the input's gradient read by the deprecated
  ``register_backward_hook`` on the first layer of ``model.features`` (``list(self.model.features.
  _modules.items())[0][1]``, its ``grad_in[0]``: the convolution's input gradient), seeded by a
  one-hot ``torch.FloatTensor(1, n).zero_()`` written by ``one_hot_output[0][target_class] = 1``
  and ``model_output.backward(gradient=one_hot_output)``, kept by ``.data.numpy()[0]``;
- ``guided_backprop.py``'s ``GuidedBackprop``: every ``ReLU`` of ``features`` hooked twice, a
  forward hook stacking its output and a backward hook that pops it, sets its positive entries to
  1 in place (``corresponding_forward_output[corresponding_forward_output > 0] = 1``) and
  returns ``(mask * torch.clamp(grad_in[0], min=0.0),)`` for the ReLU's input gradient, the
  gradient read through the first layer's hook as above; ``misc_functions``'
  ``convert_to_grayscale`` and ``get_positive_negative_saliency`` of the result;
- ``smooth_grad.py``'s ``generate_smooth_grad`` over both: noise by
  ``Variable(prep_img.data.new(prep_img.size()).normal_(mean, sigma**2))``, ``sigma`` from
  ``(torch.max(prep_img) - torch.min(prep_img)).item()``, NumPy sums of the gradients;
- ``integrated_gradients.py``'s ``IntegratedGradients``: ``model.to(self.device)``, the linear
  path ``[input_image*step for step in step_list]`` of NumPy float64 steps, each scaled image's
  gradient through the first layer's hook, averaged in NumPy.

- ``cnn_layer_visualization.py``'s ``CNNLayerVisualization``: a filter's mean activation
  optimised over the input image by ``SGD([self.processed_image], lr=5, weight_decay=1e-6)``
  (``misc_functions.preprocess_image``'s ``Variable(im_as_ten, requires_grad=True)`` after
  ``im_as_ten.unsqueeze_(0)``), the model run layer by layer by ``enumerate`` over a
  ``Sequential`` up to the selected layer, with and without a forward hook that keeps
  ``grad_out[0, self.selected_filter]``; ``recreate_image``'s ``copy.copy`` of
  ``.data.numpy()[0]`` clipped and rounded to uint8. As the repository's later version, the log
  line formats ``loss.data.numpy()`` (the first version's ``[0]`` of a 0-d array fails since
  torch 0.4); the random image is 24x24 (224x224 as written), PIL's ``Image`` a stand-in for
  arrays (no resizing), and the ``cv2.imwrite`` every fifth step keeps the image instead.

- neural style transfer as leongatys/PytorchNeuralStyleTransfer writes it
  (``NeuralStyleTransfer.py``'s ``prep``/``postp``, ``GramMatrix`` with ``G.div_(h*w)`` in place
  on a ``torch.bmm`` result, ``GramMSELoss``, ``compute_targets`` and ``style``):
  ``optim.LBFGS([content_image], lr=..., history_size=..., tolerance_grad=...,
  tolerance_change=..., max_iter=..., max_eval=...)`` stepped by a closure counting its calls
  in ``n_iter=[0]``, ``loss = sum(layer_losses)`` of weighted per-layer losses, the
  ``transforms.Lambda(lambda x: x[torch.LongTensor([2,1,0])])`` channel swap and ``x.mul_(255)``,
  ``t[t>1] = 1``. The closure's log line prints ``int(loss.item())`` (``loss.data[0]`` as
  written fails since torch 0.4), ``time`` is frozen, the model is a small VGG with the
  repository's ``forward(x, out_keys)``, torchvision's transforms are stand-ins, and the run is
  in float64 with the ``.float()`` casts (there for the fp16 path) as ``.double()``: LBFGS's
  second step amplifies float32 rounding from 1e-7 to 1e-3 in both libraries alike. The
  closure returns ``loss, grads`` for retrograd's LBFGS.

The image is a small random one made as ``misc_functions.preprocess_image`` makes it (a leaf that
requires grad: the first layer's ``grad_in[0]`` exists only then); the model is a small
AlexNet-shaped ``features``/``classifier`` pair. ``Tensor.normal_`` draws from one seeded stream
in both runs (the harness's ``SharedFills``). The lines changed for the port: the ``import``
lines and the gradient lines (``grads = model_output.backward(...)``; the hooks see the
gradients during the call, as torch's).
"""

from __future__ import annotations

import argparse

import numpy as np
import torch

import retrograd as rg
from real_ports import SharedFills, assert_records_agree, initializer, port, run_source

SALIENCY_SOURCE = """
# -- misc_functions.py (the array helpers) -----------------------------------------------------
import numpy as np
import torch
from torch.autograd import Variable
from torch.nn import ReLU


def convert_to_grayscale(im_as_arr):
    \"\"\"
        Converts 3d image to grayscale

    Args:
        im_as_arr (numpy arr): RGB image with shape (D,W,H)

    returns:
        grayscale_im (numpy_arr): Grayscale image with shape (1,W,D)
    \"\"\"
    grayscale_im = np.sum(np.abs(im_as_arr), axis=0)
    im_max = np.percentile(grayscale_im, 99)
    im_min = np.min(grayscale_im)
    grayscale_im = (np.clip((grayscale_im - im_min) / (im_max - im_min), 0, 1))
    grayscale_im = np.expand_dims(grayscale_im, axis=0)
    return grayscale_im


def get_positive_negative_saliency(gradient):
    \"\"\"
        Generates positive and negative saliency maps based on the gradient
    Args:
        gradient (numpy arr): Gradient of the operation to visualize

    returns:
        pos_saliency ( )
    \"\"\"
    pos_saliency = (np.maximum(0, gradient) / gradient.max())
    neg_saliency = (np.maximum(0, -gradient) / -gradient.min())
    return pos_saliency, neg_saliency


# -- vanilla_backprop.py -----------------------------------------------------------------------
class VanillaBackprop():
    \"\"\"
        Produces gradients generated with vanilla back propagation from the image
    \"\"\"
    def __init__(self, model):
        self.model = model
        self.gradients = None
        # Put model in evaluation mode
        self.model.eval()
        # Hook the first layer to get the gradient
        self.hook_layers()

    def hook_layers(self):
        def hook_function(module, grad_in, grad_out):
            self.gradients = grad_in[0]

        # Register hook to the first layer
        first_layer = list(self.model.features._modules.items())[0][1]
        first_layer.register_backward_hook(hook_function)

    def generate_gradients(self, input_image, target_class):
        # Forward
        model_output = self.model(input_image)
        # Zero grads
        self.model.zero_grad()
        # Target for backprop
        one_hot_output = torch.FloatTensor(1, model_output.size()[-1]).zero_()
        one_hot_output[0][target_class] = 1
        # Backward pass
        model_output.backward(gradient=one_hot_output)
        # Convert Pytorch variable to numpy array
        # [0] to get rid of the first channel (1,3,224,224)
        gradients_as_arr = self.gradients.data.numpy()[0]
        return gradients_as_arr


# -- guided_backprop.py ------------------------------------------------------------------------
class GuidedBackprop():
    \"\"\"
       Produces gradients generated with guided back propagation from the given image
    \"\"\"
    def __init__(self, model):
        self.model = model
        self.gradients = None
        self.forward_relu_outputs = []
        # Put model in evaluation mode
        self.model.eval()
        self.update_relus()
        self.hook_layers()

    def hook_layers(self):
        def hook_function(module, grad_in, grad_out):
            self.gradients = grad_in[0]
        # Register hook to the first layer
        first_layer = list(self.model.features._modules.items())[0][1]
        first_layer.register_backward_hook(hook_function)

    def update_relus(self):
        \"\"\"
            Updates relu activation functions so that
                1- stores output in forward pass
                2- imputes zero for gradient values that are less than zero
        \"\"\"
        def relu_backward_hook_function(module, grad_in, grad_out):
            \"\"\"
            If there is a negative gradient, change it to zero
            \"\"\"
            # Get last forward output
            corresponding_forward_output = self.forward_relu_outputs[-1]
            corresponding_forward_output[corresponding_forward_output > 0] = 1
            modified_grad_out = corresponding_forward_output * torch.clamp(grad_in[0], min=0.0)
            del self.forward_relu_outputs[-1]  # Remove last forward output
            return (modified_grad_out,)

        def relu_forward_hook_function(module, ten_in, ten_out):
            \"\"\"
            Store results of forward pass
            \"\"\"
            self.forward_relu_outputs.append(ten_out)

        # Loop through layers, hook up ReLUs
        for pos, module in self.model.features._modules.items():
            if isinstance(module, ReLU):
                module.register_backward_hook(relu_backward_hook_function)
                module.register_forward_hook(relu_forward_hook_function)

    def generate_gradients(self, input_image, target_class):
        # Forward pass
        model_output = self.model(input_image)
        # Zero gradients
        self.model.zero_grad()
        # Target for backprop
        one_hot_output = torch.FloatTensor(1, model_output.size()[-1]).zero_()
        one_hot_output[0][target_class] = 1
        # Backward pass
        model_output.backward(gradient=one_hot_output)
        # Convert Pytorch variable to numpy array
        # [0] to get rid of the first channel (1,3,224,224)
        gradients_as_arr = self.gradients.data.numpy()[0]
        return gradients_as_arr


# -- smooth_grad.py ----------------------------------------------------------------------------
def generate_smooth_grad(Backprop, prep_img, target_class, param_n, param_sigma_multiplier):
    \"\"\"
        Generates smooth gradients of given Backprop type. You can use this with both vanilla
        and guided backprop
    Args:
        Backprop (class): Backprop type
        prep_img (torch Variable): preprocessed image
        target_class (int): target class of imagenet
        param_n (int): Amount of images used to smooth gradient
        param_sigma_multiplier (int): Sigma multiplier when calculating std of noise
    \"\"\"
    # Generate an empty image/matrix
    smooth_grad = np.zeros(prep_img.size()[1:])

    mean = 0
    sigma = param_sigma_multiplier / (torch.max(prep_img) - torch.min(prep_img)).item()
    for x in range(param_n):
        # Generate noise
        noise = Variable(prep_img.data.new(prep_img.size()).normal_(mean, sigma**2))
        # Add noise to the image
        noisy_img = prep_img + noise
        # Calculate gradients
        vanilla_grads = Backprop.generate_gradients(noisy_img, target_class)
        # Add gradients to smooth_grad
        smooth_grad = smooth_grad + vanilla_grads
    # Average it out
    smooth_grad = smooth_grad / param_n
    return smooth_grad


# -- integrated_gradients.py -------------------------------------------------------------------
class IntegratedGradients():
    \"\"\"
        Produces gradients generated with integrated gradients from the image
    \"\"\"
    def __init__(self, model, device_id='cpu'):
        self.device = device_id
        self.model = model.to(self.device)
        self.gradients = None
        # Put model in evaluation mode
        self.model.eval()
        # Hook the first layer to get the gradient
        self.hook_layers()

    def hook_layers(self):
        def hook_function(module, grad_in, grad_out):
            self.gradients = grad_in[0]

        # Register hook to the first layer
        first_layer = list(self.model.features._modules.items())[0][1]
        first_layer.register_backward_hook(hook_function)

    def generate_images_on_linear_path(self, input_image, steps):
        # Generate uniform numbers between 0 and steps
        step_list = np.arange(steps+1)/steps
        # Generate scaled xbar images
        xbar_list = [input_image*step for step in step_list]
        return xbar_list

    def generate_gradients(self, input_image, target_class):
        # Forward
        model_output = self.model(input_image.to(self.device))
        # Zero grads
        self.model.zero_grad()
        # Target for backprop
        one_hot_output = torch.FloatTensor(1, model_output.size()[-1]).zero_()
        one_hot_output[0][target_class] = 1
        # Backward pass
        model_output.backward(gradient=one_hot_output.to(self.device))
        # Convert Pytorch variable to numpy array
        # [0] to get rid of the first channel (1,3,224,224)
        gradients_as_arr = self.gradients.data.cpu().numpy()[0]
        return gradients_as_arr

    def generate_integrated_gradients(self, input_image, target_class, steps):
        # Generate xbar images
        xbar_list = self.generate_images_on_linear_path(input_image, steps)
        # Initialize an iamge composed of zeros
        integrated_grads = np.zeros(input_image.size())
        for xbar_image in xbar_list:
            # Generate gradients from xbar images
            single_integrated_grad = self.generate_gradients(xbar_image, target_class)
            # Add rescaled grads from xbar images
            integrated_grads = integrated_grads + single_integrated_grad/steps
        # [0] to get rid of the first channel (1,3,224,224)
        return integrated_grads[0]


# -- the examples' ``__main__`` blocks, on the test's model and image --------------------------
def main(pretrained_model, prep_img, target_class):
    VBP = VanillaBackprop(pretrained_model)
    vanilla_grads = VBP.generate_gradients(prep_img, target_class)
    record.append(vanilla_grads)
    record.append(convert_to_grayscale(vanilla_grads))

    smooth_grad = generate_smooth_grad(VBP, prep_img, target_class, 3, 4)
    record.append(smooth_grad)

    IG = IntegratedGradients(pretrained_model)
    integrated_grads = IG.generate_integrated_gradients(prep_img, target_class, 4)
    record.append(integrated_grads)
    record.append(convert_to_grayscale(integrated_grads))

    GBP = GuidedBackprop(pretrained_model)
    guided_grads = GBP.generate_gradients(prep_img, target_class)
    record.append(guided_grads)
    record.append(convert_to_grayscale(guided_grads))
    pos_sal, neg_sal = get_positive_negative_saliency(guided_grads)
    record.append(pos_sal)
    record.append(neg_sal)
    record.append(len(GBP.forward_relu_outputs))

    guided_smooth = generate_smooth_grad(GBP, prep_img, target_class, 2, 4)
    record.append(guided_smooth)
"""

SALIENCY_STEPS = [
    ("import torch\n", "import retrograd as torch\n"),
    (
        "        model_output.backward(gradient=one_hot_output)\n",
        "        grads = model_output.backward(gradient=one_hot_output)\n",
    ),
    (
        "        model_output.backward(gradient=one_hot_output.to(self.device))\n",
        "        grads = model_output.backward(gradient=one_hot_output.to(self.device))\n",
    ),
]


def _model(lib, initialize):
    nn = lib.nn

    class SmallAlexNet(nn.Module):  # torchvision's ``alexnet`` layout, small
        def __init__(self):
            super().__init__()
            self.features = nn.Sequential(
                nn.Conv2d(3, 6, kernel_size=3, padding=1),
                nn.ReLU(inplace=True),
                nn.MaxPool2d(kernel_size=2, stride=2),
                nn.Conv2d(6, 8, kernel_size=3, padding=1),
                nn.ReLU(inplace=True),
                nn.MaxPool2d(kernel_size=2, stride=2),
            )
            self.classifier = nn.Sequential(
                nn.Linear(8 * 2 * 2, 16), nn.ReLU(inplace=True), nn.Linear(16, 5)
            )

        def forward(self, x):
            x = self.features(x)
            x = lib.flatten(x, 1)
            return self.classifier(x)

    lib.manual_seed(0)
    model = SmallAlexNet()
    initialize(model)
    return model


def test_vanilla_guided_smooth_and_integrated_gradients_as_torch():
    np.random.seed(4700)
    image = np.random.default_rng(4700).uniform(size=(3, 8, 8))
    mean = np.array([0.485, 0.456, 0.406])[:, None, None]
    std = np.array([0.229, 0.224, 0.225])[:, None, None]
    normalized = ((image - mean) / std).astype(np.float32)
    records = []
    initialize = initializer()
    for lib in (torch, rg):
        record = []
        text = SALIENCY_SOURCE if lib is torch else port(SALIENCY_SOURCE, SALIENCY_STEPS)
        text = text if lib is torch else text.replace("from torch.", "from retrograd.")
        names = run_source(text, lib, record=record)
        model = _model(lib, initialize)
        # ``preprocess_image``: a float tensor of the normalised image, unsqueezed, requiring grad
        prep_img = lib.from_numpy(normalized.copy()).float()
        prep_img.unsqueeze_(0)
        prep_img = names["Variable"](prep_img, requires_grad=True)
        with SharedFills(lib, 4701):
            names["main"](model, prep_img, 3)
        records.append(record)
    assert records[0][9] == 0  # every forward ReLU output popped by its backward hook
    assert_records_agree(records[1], records[0], rtol=1e-4, atol=1e-6)


LAYER_VISUALIZATION_SOURCE = """
# -- misc_functions.py (the image helpers) -----------------------------------------------------
import copy
import numpy as np

import torch
from torch.autograd import Variable
from torch.optim import SGD


def preprocess_image(pil_im, resize_im=True):
    \"\"\"
        Processes image for CNNs

    Args:
        PIL_img (PIL_img): PIL Image or numpy array to process
        resize_im (bool): Resize to 224 or not
    returns:
        im_as_var (torch variable): Variable that contains processed float tensor
    \"\"\"
    # Mean and std list for channels (Imagenet)
    mean = [0.485, 0.456, 0.406]
    std = [0.229, 0.224, 0.225]

    #ensure or transform incoming image to PIL image
    if type(pil_im) != Image.Image:
        try:
            pil_im = Image.fromarray(pil_im)
        except Exception as e:
            print("could not transform PIL_img to a PIL Image object. Please check input.")

    # Resize image
    if resize_im:
        pil_im = pil_im.resize((224, 224), Image.ANTIALIAS)

    im_as_arr = np.float32(pil_im)
    im_as_arr = im_as_arr.transpose(2, 0, 1)  # Convert array to D,W,H
    # Normalize the channels
    for channel, _ in enumerate(im_as_arr):
        im_as_arr[channel] /= 255
        im_as_arr[channel] -= mean[channel]
        im_as_arr[channel] /= std[channel]
    # Convert to float tensor
    im_as_ten = torch.from_numpy(im_as_arr).float()
    # Add one more channel to the beginning. Tensor shape = 1,3,224,224
    im_as_ten.unsqueeze_(0)
    # Convert to Pytorch variable
    im_as_var = Variable(im_as_ten, requires_grad=True)
    return im_as_var


def recreate_image(im_as_var):
    \"\"\"
        Recreates images from a torch variable, sort of reverse preprocessing
    Args:
        im_as_var (torch variable): Image to recreate
    returns:
        recreated_im (numpy arr): Recreated image in array
    \"\"\"
    reverse_mean = [-0.485, -0.456, -0.406]
    reverse_std = [1/0.229, 1/0.224, 1/0.225]
    recreated_im = copy.copy(im_as_var.data.numpy()[0])
    for c in range(3):
        recreated_im[c] /= reverse_std[c]
        recreated_im[c] -= reverse_mean[c]
    recreated_im[recreated_im > 1] = 1
    recreated_im[recreated_im < 0] = 0
    recreated_im = np.round(recreated_im * 255)

    recreated_im = np.uint8(recreated_im).transpose(1, 2, 0)
    return recreated_im


# -- cnn_layer_visualization.py ----------------------------------------------------------------
class CNNLayerVisualization():
    \"\"\"
        Produces an image that minimizes the loss of a convolution
        operation for a specific layer and filter
    \"\"\"
    def __init__(self, model, selected_layer, selected_filter):
        self.model = model
        self.model.eval()
        self.selected_layer = selected_layer
        self.selected_filter = selected_filter
        self.conv_output = 0
        # Generate a random image
        self.created_image = np.uint8(np.random.uniform(150, 180, (24, 24, 3)))

    def hook_layer(self):
        def hook_function(module, grad_in, grad_out):
            # Gets the conv output of the selected filter (from selected layer)
            self.conv_output = grad_out[0, self.selected_filter]

        # Hook the selected layer
        self.model[self.selected_layer].register_forward_hook(hook_function)

    def visualise_layer_with_hooks(self):
        # Hook the selected layer
        self.hook_layer()
        # Process image and return variable
        self.processed_image = preprocess_image(self.created_image, False)
        # Define optimizer for the image
        # Earlier layers need higher learning rates to visualize whereas later layers need less
        optimizer = SGD([self.processed_image], lr=5, weight_decay=1e-6)
        for i in range(1, 51):
            optimizer.zero_grad()
            # Assign create image to a variable to move forward in the model
            x = self.processed_image
            for index, layer in enumerate(self.model):
                # Forward pass layer by layer
                # x is not used after this point because it is only needed to trigger
                # the forward hook function
                x = layer(x)
                # Only need to forward until the selected layer is reached
                if index == self.selected_layer:
                    # (forward hook function triggered)
                    break
            # Loss function is the mean of the output of the selected layer/filter
            # We try to minimize the mean of the output of that specific filter
            loss = torch.mean(self.conv_output)
            print('Iteration:', str(i), 'Loss:', "{0:.2f}".format(loss.data.numpy()))
            # Backward
            loss.backward()
            # Update image
            optimizer.step()
            # Recreate image
            self.created_image = recreate_image(self.processed_image)
            # Save image
            if i % 5 == 0:
                record.append(self.created_image)

    def visualise_layer_without_hooks(self):
        # Process image and return variable
        self.processed_image = preprocess_image(self.created_image, False)
        # Define optimizer for the image
        # Earlier layers need higher learning rates to visualize whereas later layers need less
        optimizer = SGD([self.processed_image], lr=5, weight_decay=1e-6)
        for i in range(1, 51):
            optimizer.zero_grad()
            # Assign create image to a variable to move forward in the model
            x = self.processed_image
            for index, layer in enumerate(self.model):
                # Forward pass layer by layer
                x = layer(x)
                if index == self.selected_layer:
                    # Only need to forward until the selected layer is reached
                    # Now, x is the output of the selected layer
                    break
            # Here, we get the specific filter from the output of the convolution operation
            # x is a tensor of shape 1x512x28x28.(For layer 17)
            # So there are 512 unique filter outputs
            # Following line selects a filter from 512 filters so self.conv_output will become
            # a tensor of shape 28x28
            self.conv_output = x[0, self.selected_filter]
            # Loss function is the mean of the output of the selected layer/filter
            # We try to minimize the mean of the output of that specific filter
            loss = torch.mean(self.conv_output)
            print('Iteration:', str(i), 'Loss:', "{0:.2f}".format(loss.data.numpy()))
            # Backward
            loss.backward()
            # Update image
            optimizer.step()
            # Recreate image
            self.created_image = recreate_image(self.processed_image)
            # Save image
            if i % 5 == 0:
                record.append(self.created_image)
"""

LAYER_VISUALIZATION_STEPS = [
    ("import torch\n", "import retrograd as torch\n"),
    (
        "            loss.backward()\n            # Update image\n            optimizer.step()\n",
        "            grads = loss.backward()\n            # Update image\n            optimizer.step(grads)\n",
    ),
]


class Image:
    """PIL's ``Image`` as ``preprocess_image`` uses it without resizing (PIL is not a test
    dependency): a uint8 ``H x W x 3`` array is its own image."""

    Image = np.ndarray

    @staticmethod
    def fromarray(array):
        return array


def test_cnn_layer_visualization_with_and_without_hooks_as_torch(capsys):
    records, logs = [], []
    initialize = initializer()
    for lib in (torch, rg):
        record = []
        text = (
            LAYER_VISUALIZATION_SOURCE
            if lib is torch
            else port(LAYER_VISUALIZATION_SOURCE, LAYER_VISUALIZATION_STEPS)
        )
        text = text if lib is torch else text.replace("from torch.", "from retrograd.")
        names = run_source(text, lib, record=record, Image=Image)
        features = _model(lib, initialize).features  # (torchvision's ``vgg16().features``)
        for method in ("visualise_layer_without_hooks", "visualise_layer_with_hooks"):
            np.random.seed(4702)
            layer_vis = names["CNNLayerVisualization"](features, 3, 5)
            getattr(layer_vis, method)()
            record.append(layer_vis.processed_image.detach().numpy())
        records.append(record)
        logs.append(capsys.readouterr().out)
    assert logs[1] == logs[0] and len(logs[0].splitlines()) == 100
    assert not np.array_equal(records[0][0], records[0][9])  # the image changed
    # (the recreated uint8 images round float32 values: allowed one step apart)
    for mine, reference in zip(records[1], records[0]):
        atol = 1 if reference.dtype == np.uint8 else 1e-4
        np.testing.assert_allclose(
            mine.astype(float), reference.astype(float), atol=atol, rtol=1e-5
        )


STYLE_SOURCE = """
import torch
from torch.autograd import Variable
import torch.nn as nn
import torch.nn.functional as F
from torch import optim


#pre and post processing for images

def prep(img, grad=True):

    prep_image_fn = transforms.Compose([
        transforms.ToTensor(),
        transforms.Lambda(lambda x: x[torch.LongTensor([2,1,0])]), #turn to BGR
        transforms.Normalize(mean=[0.40760392, 0.45795686, 0.48501961], #subtract imagenet mean
                             std=[1,1,1]),
        transforms.Lambda(lambda x: x.mul_(255)),
    ])


    img = prep_image_fn(img).unsqueeze(0)
    if args.cuda > 0 and torch.cuda.is_available():
        img = img.cuda()
        if args.half:
            img = img.half()
    return Variable(img, requires_grad=grad)

def postp(tensor): # to clip results in the range [0,1]
    postpa = transforms.Compose([transforms.Lambda(lambda x: x.mul_(1./255)),
                                 transforms.Normalize(mean=[-0.40760392, -0.45795686, -0.48501961], #add imagenet mean
                                                      std=[1,1,1]),
                                 transforms.Lambda(lambda x: x[torch.LongTensor([2,1,0])]), #turn to RGB
    ])
    postpb = transforms.Compose([transforms.ToPILImage()])

    t = postpa(tensor)
    t[t>1] = 1
    t[t<0] = 0
    return  postpb(t)

# gram matrix and loss
class GramMatrix(nn.Module):
    def forward(self, input):
        b,c,h,w = input.size()
        F = input.view(b, c, h*w)
        G = torch.bmm(F, F.transpose(1,2))
        G.div_(h*w)
        return G

class GramMSELoss(nn.Module):
    def forward(self, input, target):
        out = nn.MSELoss()(GramMatrix()(input), target)
        return(out * style_weight)

def compute_targets(vgg, style_image, content_image):
    #compute optimization targets
    style_targets = [GramMatrix()(A.double()).detach() for A in vgg(style_image, vgg.style_layers)]
    content_targets = [A.double().detach() for A in vgg(content_image, vgg.content_layers)]
    return style_targets + content_targets

# Run style transfer, complete with pre- and post- processing
def style(model, style_image, content_image, iterations):
    n_iter=[0]
    t0 = time.time()
    style_image = prep(style_image, False)
    content_image = prep(content_image)
    targets = compute_targets(model, style_image,  content_image)

    loss_layers = model.style_layers + model.content_layers

    if  args.optimizer.lower() == 'adam':
        optimizer = optim.Adam([content_image], lr=args.lr, eps=args.eps, betas=(args.beta1, 0.999))
    elif args.optimizer .lower()== 'sgd':
        optimizer = torch.optim.SGD([content_image], lr=args.lr, momentum=0.99999)
    else:
        optimizer = optim.LBFGS([content_image], lr=args.lr, history_size=args.history_size,
                                tolerance_grad=args.tolerance_grad, tolerance_change=args.tolerance_change,
                                max_iter=args.max_iter, max_eval=args.max_eval)

    def closure():
        optimizer.zero_grad()
        out = model(content_image, loss_layers)
        layer_losses = [weights[a] * loss_fns[a](A.double(), targets[a]) for a,A in enumerate(out)]
        loss = sum(layer_losses)

        loss.backward()

        n_iter[0]+=1
        if n_iter[0]%args.log_interval == 1:
            print('Iteration: %d, loss: %d time : %s'%(n_iter[0], int(loss.item()), time.time()-t0))
        record.append(loss.item())
        return loss

    while n_iter[0] <= iterations:
        optimizer.step(closure)

    return postp(content_image.data[0].double().cpu().squeeze())


# -- a small VGG with the repository's ``forward(x, out_keys)`` -------------------------------
class Vgg(nn.Module):
    def __init__(self, pad=1):
        super(Vgg, self).__init__()
        self.conv1_1 = nn.Conv2d(3, 4, kernel_size=3, padding=pad)
        self.conv2_1 = nn.Conv2d(4, 6, kernel_size=3, padding=pad)
        self.conv3_1 = nn.Conv2d(6, 8, kernel_size=3, padding=pad)
        self.style_layers = ['r11', 'r21', 'r31']
        self.content_layers = ['r21']
        self.style_weights = [1e3/n**2 for n in [4, 6, 8]]
        self.content_weights = [1e0]

    def forward(self, x, out_keys):
        out = {}
        out['r11'] = F.relu(self.conv1_1(x))
        out['p1'] = F.avg_pool2d(out['r11'], kernel_size=2, stride=2)
        out['r21'] = F.relu(self.conv2_1(out['p1']))
        out['p2'] = F.avg_pool2d(out['r21'], kernel_size=2, stride=2)
        out['r31'] = F.relu(self.conv3_1(out['p2']))
        return [out[key] for key in out_keys]


def main(style_array, content_array):
    global loss_fns, weights, style_weight
    model = Vgg(pad=args.pad).double()
    initialize(model)
    for param in model.parameters():
        param.requires_grad = False
    style_weight = args.style_weight
    loss_fns = [GramMSELoss()] * len(model.style_layers) + [nn.MSELoss()] * len(model.content_layers)
    weights = model.style_weights + model.content_weights
    return style(model, style_array, content_array, args.iterations)
"""

STYLE_STEPS = [
    ("import torch\n", "import retrograd as torch\n"),
    ("import torch.nn as nn\n", "import retrograd.nn as nn\n"),
    ("import torch.nn.functional as F\n", "import retrograd.nn.functional as F\n"),
    ("from torch import optim\n", "from retrograd import optim\n"),
    (
        "        loss.backward()\n\n        n_iter[0]+=1",
        "        grads = loss.backward()\n\n        n_iter[0]+=1",
    ),
    ("        return loss\n\n    while", "        return loss, grads\n\n    while"),
]


def _vision_transforms(lib):
    """torchvision's ``transforms`` as ``prep``/``postp`` use them: ``Compose``, ``Lambda``,
    ``ToTensor`` (an ``H x W x 3`` float array in [0, 1] to ``3 x H x W``), ``Normalize`` (in
    place, as torchvision's tensor form) and ``ToPILImage`` (the array, PIL being no test
    dependency)."""

    class Compose:
        def __init__(self, steps):
            self.steps = steps

        def __call__(self, x):
            for step in self.steps:
                x = step(x)
            return x

    class Lambda:
        def __init__(self, fn):
            self.fn = fn

        def __call__(self, x):
            return self.fn(x)

    class ToTensor:
        def __call__(self, image):
            return lib.tensor(np.ascontiguousarray(image.transpose(2, 0, 1)))

    class Normalize:
        def __init__(self, mean, std):
            self.mean, self.std = mean, std

        def __call__(self, x):
            mean = lib.tensor(self.mean, dtype=x.dtype).view(-1, 1, 1)
            std = lib.tensor(self.std, dtype=x.dtype).view(-1, 1, 1)
            return x.sub_(mean).div_(std)

    class ToPILImage:
        def __call__(self, x):
            return x.detach().numpy().transpose(1, 2, 0).copy()

    class Transforms:
        pass

    for cls in (Compose, Lambda, ToTensor, Normalize, ToPILImage):
        setattr(Transforms, cls.__name__, cls)
    return Transforms


class FrozenClock:
    """``time`` whose ``time()`` is 0: the log lines print the time taken."""

    @staticmethod
    def time():
        return 0.0


def test_gatys_style_transfer_with_lbfgs_as_torch(capsys):
    rng = np.random.default_rng(4703)
    style_array, content_array = rng.uniform(size=(2, 12, 12, 3))
    records, logs = [], []
    initialize = initializer()
    for lib in (torch, rg):
        record = []
        args = argparse.Namespace(
            cuda=0, half=False, optimizer="LBFGS", lr=1.0, history_size=10,
            tolerance_grad=1e-2, tolerance_change=1e-3, max_iter=10, max_eval=25,
            eps=1e-4, beta1=0.9, log_interval=5, iterations=8, pad=1, style_weight=1.0,
        )  # fmt: skip
        text = STYLE_SOURCE if lib is torch else port(STYLE_SOURCE, STYLE_STEPS)
        text = text if lib is torch else text.replace("from torch.", "from retrograd.")
        lib.manual_seed(0)
        names = run_source(
            text,
            lib,
            record=record,
            args=args,
            initialize=initialize,
            transforms=_vision_transforms(lib),
            time=FrozenClock,
        )
        record.append(names["main"](style_array, content_array))
        records.append(record)
        logs.append(capsys.readouterr().out)
    assert logs[1] == logs[0] and len(logs[0].splitlines()) == 2
    assert len(records[0]) == 11 and records[0][9] < records[0][0] / 10
    assert_records_agree(records[1], records[0], rtol=1e-9, atol=1e-9)
