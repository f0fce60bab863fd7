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

The image is a small random one made as ``misc_functions.preprocess_image`` makes it (a leaf that
requires grad: the first layer's ``grad_in[0]`` exists only then); the model is a small
AlexNet-shaped ``features``/``classifier`` pair. ``Tensor.normal_`` draws from one seeded stream
in both runs (the harness's ``SharedFills``). The lines changed for the port: the ``import``
lines and the gradient lines (``grads = model_output.backward(...)``; the hooks see the
gradients during the call, as torch's).
"""

from __future__ import annotations

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
