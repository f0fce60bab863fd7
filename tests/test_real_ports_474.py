# ruff: noqa: E501  (the programs are kept as their authors wrote them)
"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):
DeepFool as LTS4/DeepFool writes it (``Python/deepfool.py``, with the two lines torch 1.x changed:
``backward(retain_graph=True)`` for the removed ``retain_variables``, and ``zero_gradients`` as the
removed ``torch.autograd.gradcheck`` helper was written), run on a small classifier for a few
images, against torch's run of the same code from the same weights and images.

What it exercises: ``net.forward(Variable(image[None, :, :, :], requires_grad=True)).data.cpu()
.numpy().flatten()`` ranked by ``argsort()[::-1]``; ``copy.deepcopy`` of an image tensor;
``fs_list = [fs[0,I[k]] for k in range(num_classes)]`` (0-d views of one output, indexed by
NumPy integers); the gradient of one logit after another through ``fs[0, I[k]].backward(
retain_graph=True)`` over one graph, each read by ``x.grad.data.cpu().numpy().copy()``; ``f_k``
from ``(fs[0, I[k]] - fs[0, I[0]]).data.cpu().numpy()`` and ``abs`` of it; ``r_tot =
np.float32(r_tot + r_i)`` added back by ``image + (1+overshoot)*torch.from_numpy(r_tot)``;
``Variable(pert_image, requires_grad=True)`` of a non-leaf sum; ``np.argmax`` of the new logits;
the script's ``print("Using CPU")`` under ``torch.cuda.is_available()``.

The images are random 1x10x10 ones; the model is a small conv net returning logits. The lines
changed for the port: the ``import`` lines and the gradient lines (``grads = fs[0,
I[...]].backward(retain_graph=True)`` read by ``x.grad(grads)``; ``zero_gradients(x)`` goes:
each backward returns its own gradients, which torch's accumulate into ``x.grad``).
"""

from __future__ import annotations

import numpy as np
import torch

import retrograd as rg
from real_ports import assert_records_agree, initializer, port, run_source

DEEPFOOL_SOURCE = """
import numpy as np
from torch.autograd import Variable
import torch as torch
import copy
import collections.abc


def zero_gradients(x):
    if isinstance(x, torch.Tensor):
        if x.grad is not None:
            x.grad.detach_()
            x.grad.zero_()
    elif isinstance(x, collections.abc.Iterable):
        for elem in x:
            zero_gradients(elem)


def deepfool(image, net, num_classes=10, overshoot=0.02, max_iter=50):

    \"\"\"
       :param image: Image of size HxWx3
       :param net: network (input: images, output: values of activation **BEFORE** softmax).
       :param num_classes: num_classes (limits the number of classes to test against, by default = 10)
       :param overshoot: used as a termination criterion to prevent vanishing updates (default = 0.02).
       :param max_iter: maximum number of iterations for deepfool (default = 10)
       :return: minimal perturbation that fools the classifier, number of iterations that it required, new estimated_label and perturbed image
    \"\"\"
    is_cuda = torch.cuda.is_available()

    if is_cuda:
        print("Using GPU")
        image = image.cuda()
        net = net.cuda()
    else:
        print("Using CPU")


    f_image = net.forward(Variable(image[None, :, :, :], requires_grad=True)).data.cpu().numpy().flatten()
    I = (np.array(f_image)).flatten().argsort()[::-1]

    I = I[0:num_classes]
    label = I[0]

    input_shape = image.cpu().numpy().shape
    pert_image = copy.deepcopy(image)
    w = np.zeros(input_shape)
    r_tot = np.zeros(input_shape)

    loop_i = 0

    x = Variable(pert_image[None, :], requires_grad=True)
    fs = net.forward(x)
    fs_list = [fs[0,I[k]] for k in range(num_classes)]
    k_i = label

    while k_i == label and loop_i < max_iter:

        pert = np.inf
        fs[0, I[0]].backward(retain_graph=True)
        grad_orig = x.grad.data.cpu().numpy().copy()

        for k in range(1, num_classes):
            zero_gradients(x)

            fs[0, I[k]].backward(retain_graph=True)
            cur_grad = x.grad.data.cpu().numpy().copy()

            # set new w_k and new f_k
            w_k = cur_grad - grad_orig
            f_k = (fs[0, I[k]] - fs[0, I[0]]).data.cpu().numpy()

            pert_k = abs(f_k)/np.linalg.norm(w_k.flatten())

            # determine which w_k to use
            if pert_k < pert:
                pert = pert_k
                w = w_k

        # compute r_i and r_tot
        # Added 1e-4 for numerical stability
        r_i =  (pert+1e-4) * w / np.linalg.norm(w)
        r_tot = np.float32(r_tot + r_i)

        if is_cuda:
            pert_image = image + (1+overshoot)*torch.from_numpy(r_tot).cuda()
        else:
            pert_image = image + (1+overshoot)*torch.from_numpy(r_tot)

        x = Variable(pert_image, requires_grad=True)
        fs = net.forward(x)
        k_i = np.argmax(fs.data.cpu().numpy().flatten())

        loop_i += 1

    r_tot = (1+overshoot)*r_tot

    return r_tot, loop_i, label, k_i, pert_image
"""

DEEPFOOL_STEPS = [
    ("import torch as torch\n", "import retrograd as torch\n"),
    (
        "        fs[0, I[0]].backward(retain_graph=True)\n        grad_orig = x.grad.data",
        "        grads = fs[0, I[0]].backward(retain_graph=True)\n        grad_orig = x.grad(grads).data",
    ),
    (
        "            zero_gradients(x)\n\n            fs[0, I[k]].backward(retain_graph=True)\n            cur_grad = x.grad.data",
        "            grads = fs[0, I[k]].backward(retain_graph=True)\n            cur_grad = x.grad(grads).data",
    ),
]


def _model(lib, initialize):
    nn = lib.nn

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(1, 4, 3)
            self.conv2 = nn.Conv2d(4, 6, 3, stride=2)
            self.fc = nn.Linear(6 * 3 * 3, 10)

        def forward(self, x):
            x = lib.tanh(self.conv1(x))
            x = lib.relu(self.conv2(x))
            return self.fc(x.flatten(1))

    lib.manual_seed(0)
    net = Net()
    initialize(net)
    return net.eval()


def test_deepfool_as_torch(capsys):
    images = np.random.default_rng(4740).uniform(size=(3, 1, 10, 10)).astype(np.float32)
    records, logs = [], []
    initialize = initializer()
    for lib in (torch, rg):
        record = []
        text = DEEPFOOL_SOURCE if lib is torch else port(DEEPFOOL_SOURCE, DEEPFOOL_STEPS)
        text = text if lib is torch else text.replace("from torch.", "from retrograd.")
        names = run_source(text, lib)
        net = _model(lib, initialize)
        for image in images:
            r_tot, loop_i, label, k_i, pert_image = names["deepfool"](
                lib.tensor(image), net, num_classes=6
            )
            record += [r_tot, [int(loop_i), int(label), int(k_i)], pert_image.detach().numpy()]
        records.append(record)
        logs.append(capsys.readouterr().out)
    assert logs[1] == logs[0] == "Using CPU\n" * 3
    assert all(label != k_i for _, label, k_i in records[0][1::3])  # each image fooled
    assert_records_agree(records[1], records[0], rtol=1e-4, atol=1e-6)
