# ruff: noqa: E501  (the programs are kept as their authors wrote them)
"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):
class activation maps as jacobgil/pytorch-grad-cam computes them (``activations_and_gradients.py``,
``base_cam.py``, ``grad_cam.py``, ``grad_cam_plusplus.py``, ``layer_cam.py``,
``utils/model_targets.py``, ``utils/image.py``'s ``scale_cam_image``), over two target layers
of a small conv net and a batch of two images, against torch's run of the same code from the same
weights and images.

What it exercises: ``ActivationsAndGradients``' forward hooks on the target layers, one saving
``output.cpu().detach()`` and one registering a tensor hook ``output.register_hook(_store_grad)``
on the layer's output (after ``if not hasattr(output, "requires_grad") or not
output.requires_grad``), the gradients arriving in reverse order (``[grad.cpu().detach()] +
self.gradients``) during ``loss.backward(retain_graph=True)`` of ``sum([target(output) for target,
output in zip(targets, outputs)])`` (Python's ``sum`` from 0 over 0-d tensors, each
``model_output[self.category]`` of one row, or ``torch.softmax(model_output, dim=-1)[
self.category]``); ``target_categories = np.argmax(outputs.cpu().data.numpy(), axis=-1)`` when no
targets are given; ``compute_input_gradient``'s ``torch.autograd.Variable(input_tensor,
requires_grad=True)``; ``input_tensor.size(-1)``; the CAM weights in NumPy (Grad-CAM's mean
gradient, Grad-CAM++'s ``aij`` of gradient powers, LayerCAM's ``np.maximum(grads, 0) *
activations``); the ``with GradCAM(...) as cam:`` form whose ``__exit__`` removes the hooks
(``handle.remove()``), and ``model.eval()`` in the constructor.

``scale_cam_image``'s ``cv2.resize`` is a NumPy bilinear stand-in (the same in both runs: OpenCV
is not installed); ``ttach`` (augmentation smoothing) and ``eigen_smooth`` are not used. Dropped:
``use_cuda``. The lines changed for the port: the ``import`` lines and the gradient line
(``loss.backward(retain_graph=True)``: the tensor hooks see the gradients during the call, as
torch's).
"""

from __future__ import annotations

import numpy as np
import torch

import retrograd as rg
from real_ports import assert_records_agree, initializer, port, run_source

GRAD_CAM_SOURCE = """
import numpy as np
import torch
from typing import Callable, List, Tuple


# -- activations_and_gradients.py --------------------------------------------------------------
class ActivationsAndGradients:
    \"\"\" Class for extracting activations and
    registering gradients from targetted intermediate layers \"\"\"

    def __init__(self, model, target_layers, reshape_transform):
        self.model = model
        self.gradients = []
        self.activations = []
        self.reshape_transform = reshape_transform
        self.handles = []
        for target_layer in target_layers:
            self.handles.append(
                target_layer.register_forward_hook(self.save_activation))
            # Because of https://github.com/pytorch/pytorch/issues/61519,
            # we don't use backward hook to record gradients.
            self.handles.append(
                target_layer.register_forward_hook(self.save_gradient))

    def save_activation(self, module, input, output):
        activation = output

        if self.reshape_transform is not None:
            activation = self.reshape_transform(activation)
        self.activations.append(activation.cpu().detach())

    def save_gradient(self, module, input, output):
        if not hasattr(output, "requires_grad") or not output.requires_grad:
            # You can only register hooks on tensor requires grad.
            return

        # Gradients are computed in reverse order
        def _store_grad(grad):
            if self.reshape_transform is not None:
                grad = self.reshape_transform(grad)
            self.gradients = [grad.cpu().detach()] + self.gradients

        output.register_hook(_store_grad)

    def __call__(self, x):
        self.gradients = []
        self.activations = []
        return self.model(x)

    def release(self):
        for handle in self.handles:
            handle.remove()


# -- utils/model_targets.py --------------------------------------------------------------------
class ClassifierOutputTarget:
    def __init__(self, category):
        self.category = category

    def __call__(self, model_output):
        if len(model_output.shape) == 1:
            return model_output[self.category]
        return model_output[:, self.category]


class ClassifierOutputSoftmaxTarget:
    def __init__(self, category):
        self.category = category

    def __call__(self, model_output):
        if len(model_output.shape) == 1:
            return torch.softmax(model_output, dim=-1)[self.category]
        return torch.softmax(model_output, dim=-1)[:, self.category]


# -- utils/image.py ----------------------------------------------------------------------------
def scale_cam_image(cam, target_size=None):
    result = []
    for img in cam:
        img = img - np.min(img)
        img = img / (1e-7 + np.max(img))
        if target_size is not None:
            img = cv2.resize(img, target_size)
        result.append(img)
    result = np.float32(result)

    return result


# -- base_cam.py -------------------------------------------------------------------------------
class BaseCAM:
    def __init__(self,
                 model: torch.nn.Module,
                 target_layers: List[torch.nn.Module],
                 reshape_transform: Callable = None,
                 compute_input_gradient: bool = False,
                 uses_gradients: bool = True) -> None:
        self.model = model.eval()
        self.target_layers = target_layers
        self.reshape_transform = reshape_transform
        self.compute_input_gradient = compute_input_gradient
        self.uses_gradients = uses_gradients
        self.activations_and_grads = ActivationsAndGradients(
            self.model, target_layers, reshape_transform)

    \"\"\" Get a vector of weights for every channel in the target layer.
        Methods that return weights channels,
        will typically need to only implement this function. \"\"\"

    def get_cam_weights(self,
                        input_tensor: torch.Tensor,
                        target_layers: List[torch.nn.Module],
                        targets: List[torch.nn.Module],
                        activations: torch.Tensor,
                        grads: torch.Tensor) -> np.ndarray:
        raise Exception("Not Implemented")

    def get_cam_image(self,
                      input_tensor: torch.Tensor,
                      target_layer: torch.nn.Module,
                      targets: List[torch.nn.Module],
                      activations: torch.Tensor,
                      grads: torch.Tensor,
                      eigen_smooth: bool = False) -> np.ndarray:

        weights = self.get_cam_weights(input_tensor,
                                       target_layer,
                                       targets,
                                       activations,
                                       grads)
        weighted_activations = weights[:, :, None, None] * activations
        if eigen_smooth:
            cam = get_2d_projection(weighted_activations)
        else:
            cam = weighted_activations.sum(axis=1)
        return cam

    def forward(self,
                input_tensor: torch.Tensor,
                targets: List[torch.nn.Module],
                eigen_smooth: bool = False) -> np.ndarray:

        if self.compute_input_gradient:
            input_tensor = torch.autograd.Variable(input_tensor,
                                                   requires_grad=True)

        outputs = self.activations_and_grads(input_tensor)
        if targets is None:
            target_categories = np.argmax(outputs.cpu().data.numpy(), axis=-1)
            targets = [ClassifierOutputTarget(category) for category in target_categories]

        if self.uses_gradients:
            self.model.zero_grad()
            loss = sum([target(output) for target, output in zip(targets, outputs)])
            loss.backward(retain_graph=True)

        # In most of the saliency attribution papers, the saliency is
        # computed with a single target layer.
        # Commonly it is the last convolutional layer.
        # Here we support passing a list with multiple target layers.
        # It will compute the saliency image for every image,
        # and then aggregate them (with a default mean aggregation).
        # This gives you more flexibility in case you just want to
        # use all conv layers for example, all Batchnorm layers,
        # or something else.
        cam_per_layer = self.compute_cam_per_layer(input_tensor,
                                                   targets,
                                                   eigen_smooth)
        return self.aggregate_multi_layers(cam_per_layer)

    def get_target_width_height(self,
                                input_tensor: torch.Tensor) -> Tuple[int, int]:
        width, height = input_tensor.size(-1), input_tensor.size(-2)
        return width, height

    def compute_cam_per_layer(
            self,
            input_tensor: torch.Tensor,
            targets: List[torch.nn.Module],
            eigen_smooth: bool) -> np.ndarray:
        activations_list = [a.cpu().data.numpy()
                            for a in self.activations_and_grads.activations]
        grads_list = [g.cpu().data.numpy()
                      for g in self.activations_and_grads.gradients]
        target_size = self.get_target_width_height(input_tensor)

        cam_per_target_layer = []
        # Loop over the saliency image from every layer
        for i in range(len(self.target_layers)):
            target_layer = self.target_layers[i]
            layer_activations = None
            layer_grads = None
            if i < len(activations_list):
                layer_activations = activations_list[i]
            if i < len(grads_list):
                layer_grads = grads_list[i]

            cam = self.get_cam_image(input_tensor,
                                     target_layer,
                                     targets,
                                     layer_activations,
                                     layer_grads,
                                     eigen_smooth)
            cam = np.maximum(cam, 0)
            scaled = scale_cam_image(cam, target_size)
            cam_per_target_layer.append(scaled[:, None, :])

        return cam_per_target_layer

    def aggregate_multi_layers(self, cam_per_target_layer: np.ndarray) -> np.ndarray:
        cam_per_target_layer = np.concatenate(cam_per_target_layer, axis=1)
        cam_per_target_layer = np.maximum(cam_per_target_layer, 0)
        result = np.mean(cam_per_target_layer, axis=1)
        return scale_cam_image(result)

    def __call__(self,
                 input_tensor: torch.Tensor,
                 targets: List[torch.nn.Module] = None,
                 aug_smooth: bool = False,
                 eigen_smooth: bool = False) -> np.ndarray:

        return self.forward(input_tensor,
                            targets, eigen_smooth)

    def __del__(self):
        self.activations_and_grads.release()

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc_value, exc_tb):
        self.activations_and_grads.release()
        if isinstance(exc_value, IndexError):
            # Handle IndexError here...
            print(
                f"An exception occurred in CAM with block: {exc_type}. Message: {exc_value}")
            return True


# -- grad_cam.py -------------------------------------------------------------------------------
class GradCAM(BaseCAM):
    def __init__(self, model, target_layers,
                 reshape_transform=None):
        super(
            GradCAM,
            self).__init__(
            model,
            target_layers,
            reshape_transform)

    def get_cam_weights(self,
                        input_tensor,
                        target_layer,
                        target_category,
                        activations,
                        grads):
        return np.mean(grads, axis=(2, 3))


# -- grad_cam_plusplus.py ----------------------------------------------------------------------
class GradCAMPlusPlus(BaseCAM):
    def __init__(self, model, target_layers,
                 reshape_transform=None):
        super(GradCAMPlusPlus, self).__init__(model, target_layers,
                                              reshape_transform)

    def get_cam_weights(self,
                        input_tensor,
                        target_layers,
                        target_category,
                        activations,
                        grads):
        grads_power_2 = grads**2
        grads_power_3 = grads_power_2 * grads
        # Equation 19 in https://arxiv.org/abs/1710.11063
        sum_activations = np.sum(activations, axis=(2, 3))
        eps = 0.000001
        aij = grads_power_2 / (2 * grads_power_2 +
                               sum_activations[:, :, None, None] * grads_power_3 + eps)
        # Now bring back the ReLU from eq.7 in the paper,
        # And zero out aijs where the activations are 0
        aij = np.where(grads != 0, aij, 0)

        weights = np.maximum(grads, 0) * aij
        weights = np.sum(weights, axis=(2, 3))
        return weights


# -- layer_cam.py ------------------------------------------------------------------------------
class LayerCAM(BaseCAM):
    def __init__(
            self,
            model,
            target_layers,
            reshape_transform=None):
        super(
            LayerCAM,
            self).__init__(
            model,
            target_layers,
            reshape_transform)

    def get_cam_image(self,
                      input_tensor,
                      target_layer,
                      target_category,
                      activations,
                      grads,
                      eigen_smooth):
        spatial_weighted_activations = np.maximum(grads, 0) * activations

        if eigen_smooth:
            cam = get_2d_projection(spatial_weighted_activations)
        else:
            cam = spatial_weighted_activations.sum(axis=1)
        return cam


# -- the README's usage ------------------------------------------------------------------------
def main(model, input_tensor):
    target_layers = [model.layer3, model.layer4]
    targets = [ClassifierOutputTarget(2), ClassifierOutputTarget(4)]
    with GradCAM(model=model, target_layers=target_layers) as cam:
        grayscale_cam = cam(input_tensor=input_tensor, targets=targets)
        record.append(grayscale_cam)
        record.append(len(cam.activations_and_grads.gradients))
        record.append({str(i): g.numpy() for i, g in enumerate(cam.activations_and_grads.gradients)})
    record.append(len(model.layer3._forward_hooks))
    with GradCAMPlusPlus(model=model, target_layers=target_layers) as cam:
        record.append(cam(input_tensor=input_tensor, targets=None))
    with LayerCAM(model=model, target_layers=[model.layer3]) as cam:
        cam.compute_input_gradient = True
        softmax_targets = [ClassifierOutputSoftmaxTarget(1), ClassifierOutputSoftmaxTarget(3)]
        record.append(cam(input_tensor=input_tensor, targets=softmax_targets))
"""

GRAD_CAM_STEPS = [
    ("import torch\n", "import retrograd as torch\n"),
    (
        "            loss.backward(retain_graph=True)\n",
        "            grads = loss.backward(retain_graph=True)\n",
    ),
]


class Cv2:
    """OpenCV's ``resize(src, (width, height))`` for a 2-d float image, bilinear with its half
    pixel centres (the same NumPy in both runs)."""

    @staticmethod
    def resize(image, size):
        width, height = size

        def taps(out, inp):
            centre = np.clip((np.arange(out) + 0.5) * inp / out - 0.5, 0, inp - 1)
            low = np.floor(centre).astype(int)
            high = np.minimum(low + 1, inp - 1)
            return low, high, centre - low

        rows, columns = taps(height, image.shape[0]), taps(width, image.shape[1])
        top = image[rows[0]] * (1 - rows[2])[:, None] + image[rows[1]] * rows[2][:, None]
        return top[:, columns[0]] * (1 - columns[2]) + top[:, columns[1]] * columns[2]


def _model(lib, initialize):
    nn = lib.nn

    class SmallNet(nn.Module):  # a ResNet's stages as attributes, small
        def __init__(self):
            super().__init__()
            self.layer3 = nn.Sequential(nn.Conv2d(3, 6, 3, padding=1), nn.ReLU())
            self.layer4 = nn.Sequential(nn.Conv2d(6, 8, 3, stride=2, padding=1), nn.BatchNorm2d(8))
            self.fc = nn.Linear(8, 5)

        def forward(self, x):
            x = self.layer4(self.layer3(x))
            return self.fc(lib.relu(x).mean(dim=(2, 3)))

    lib.manual_seed(0)
    model = SmallNet()
    initialize(model)
    return model


def test_grad_cam_grad_cam_plus_plus_and_layer_cam_as_torch():
    images = np.random.default_rng(4730).normal(size=(2, 3, 8, 8)).astype(np.float32)
    records = []
    initialize = initializer()
    for lib in (torch, rg):
        record = []
        text = GRAD_CAM_SOURCE if lib is torch else port(GRAD_CAM_SOURCE, GRAD_CAM_STEPS)
        names = run_source(text, lib, record=record, cv2=Cv2)
        model = _model(lib, initialize)
        model.train()  # (BaseCAM's constructor puts it in eval mode)
        names["main"](model, lib.tensor(images))
        assert not model.training
        records.append(record)
    assert records[0][1] == 2 and records[0][3] == 0
    assert_records_agree(records[1], records[0], rtol=2e-4, atol=1e-5)
