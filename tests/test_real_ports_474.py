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

Also Harry24k/adversarial-attacks-pytorch's ``CW`` and ``PGD`` (``torchattacks/attacks/cw.py``,
``pgd.py``), untargeted and targeted (``set_mode_targeted_by_function``), in float64: Adam over
the input's tanh parameterisation ``w = self.inverse_tanh_space(images).detach()`` with
``w.requires_grad = True`` and ``optim.Adam([w], lr=self.lr)``; ``nn.MSELoss(reduction="none")``
of ``nn.Flatten()`` outputs summed by ``dim=1``; ``torch.full((batch_size, ), 1e10)``;
``torch.eye(outputs.shape[1]).to(self.device)[labels]`` one-hots, ``torch.max(..., dim=1)[0]`` and
``torch.clamp(..., min=-self.kappa)``; ``torch.logical_and`` masks writing ``best_Lx[mask] =
current_Lx[mask]`` and ``best_adv_images[mask] = adv_images[mask]`` (values that carry a graph);
the early stop ``if cost > prev_cost * 0.9999`` on 0-d tensors; PGD's random start
``torch.empty_like(adv_images).uniform_(-self.eps, self.eps)`` (drawn by the harness's
``SharedFills``), ``torch.autograd.grad(cost, adv_images, retain_graph=False,
create_graph=False)[0]`` and ``grad.sign()``. The ``Attack`` base class is a stand-in with the
parts they use (``get_logits``, ``device``, the targeted mode, ``__call__`` in eval mode). The
images are drawn from the values whose tanh round trip is exact in both libraries (see
``_round_trip_exact``).

The DeepFool images are random 1x10x10 ones; the model is a small conv net returning logits. The lines
changed for the ports: the ``import`` lines and the gradient lines (``cost.backward()`` and
``optimizer.step()`` become ``grads = cost.backward()`` and ``optimizer.step(grads)``; ``grads = fs[0,
I[...]].backward(retain_graph=True)`` read by ``x.grad(grads)``; ``zero_gradients(x)`` goes:
each backward returns its own gradients, which torch's accumulate into ``x.grad``).
"""

from __future__ import annotations

import numpy as np
import torch

import retrograd as rg
from real_ports import SharedFills, assert_records_agree, initializer, port, run_source

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


TORCHATTACKS_SOURCE = """
import torch
import torch.nn as nn
import torch.optim as optim


# -- attacks/cw.py -----------------------------------------------------------------------------
class CW(Attack):
    def __init__(self, model, c=1, kappa=0, steps=50, lr=0.01, abort_early=True, loss='L2'):
        super().__init__("CW", model)
        self.c = c
        self.kappa = kappa
        self.steps = steps
        self.lr = lr
        self.abort_early = abort_early
        self.loss = loss
        self.supported_mode = ["default", "targeted"]

    def forward(self, images, labels):
        r\"\"\"
        Overridden.
        \"\"\"

        images = images.clone().detach().to(self.device)
        labels = labels.clone().detach().to(self.device)

        if self.targeted:
            target_labels = self.get_target_label(images, labels)
        else:
            target_labels = labels

        # w = torch.zeros_like(images).detach() # Requires 2x times
        w = self.inverse_tanh_space(images).detach()
        w.requires_grad = True

        best_adv_images = images.clone().detach()
        batch_size = len(images)
        best_Lx = torch.full((batch_size, ), 1e10).to(self.device)
        prev_cost = 1e10

        MSELoss = nn.MSELoss(reduction="none")
        Flatten = nn.Flatten()

        optimizer = optim.Adam([w], lr=self.lr)

        for step in range(self.steps):
            # Get adversarial images
            adv_images = self.tanh_space(w)

            # Calculate loss
            if self.loss == "L2":
                current_Lx = MSELoss(Flatten(adv_images),
                                     Flatten(images)).sum(dim=1)
            elif self.loss == "L0":
                threshold = 1e-6
                l0_norm = Flatten(adv_images) - Flatten(images)
                l0_norm = torch.abs(l0_norm).sum(dim=1)
                l0_condition = (l0_norm <= threshold)
                current_Lx = torch.zeros((batch_size, )).to(self.device)
                current_Lx[l0_condition] = (1.0 / batch_size) * torch.sum(l0_condition)
            elif self.loss == "Linf":
                linf_norm = torch.abs(adv_images - images)
                linf_max = (1.0 / batch_size) * torch.max(linf_norm).item()
                current_Lx = torch.full(
                    (batch_size, ), linf_max).to(self.device)
            else:
                raise ValueError(f"Unsupported loss: {self.loss}.")

            Lx_loss = current_Lx.sum()

            outputs = self.get_logits(adv_images)
            if self.targeted:
                f_loss = self.f(outputs, target_labels)
            else:
                f_loss = self.f(outputs, labels)

            cost = Lx_loss + torch.sum(self.c * f_loss)

            optimizer.zero_grad()
            cost.backward()
            optimizer.step()

            # Update adversarial images
            pre = torch.argmax(outputs.detach(), 1)
            condition_1 = self.compare(pre, labels, target_labels)
            condition_2 = (current_Lx < best_Lx)

            # Filter out images that get either correct predictions or non-decreasing loss,
            # i.e., only images that are both misclassified and loss-decreasing are left
            mask = torch.logical_and(condition_1, condition_2)
            best_Lx[mask] = current_Lx[mask]
            best_adv_images[mask] = adv_images[mask]

            # Early stop when loss does not converge
            if self.abort_early and step % (self.steps // 10) == 0:
                if cost > prev_cost * 0.9999:
                    break
                else:
                    prev_cost = cost
            record.append(cost.item())

        # print(best_Lx)
        return best_adv_images

    def compare(self, predition, labels, target_labels):
        if self.targeted:
            # We want to let pre == target_labels in a targeted attack
            ret = (predition == target_labels)
        else:
            # If the attack is not targeted we simply make these two values unequal
            ret = (predition != labels)
        return ret

    def tanh_space(self, x):
        return 1 / 2 * (torch.tanh(x) + 1)

    def inverse_tanh_space(self, x):
        # torch.atanh is only for torch >= 1.7.0
        # atanh is defined in the range -1 to 1
        return self.atanh(torch.clamp(x * 2 - 1, min=-1, max=1))

    def atanh(self, x):
        return 0.5 * torch.log((1 + x) / (1 - x))

    # f-function in the paper
    def f(self, outputs, labels):
        one_hot_labels = torch.eye(outputs.shape[1]).to(self.device)[labels]

        # get the target class's logit
        real = torch.sum(one_hot_labels * outputs, dim=1)
        # find the max logit other than the target class
        other = torch.max((1 - one_hot_labels) * outputs, dim=1)[0]

        if self.targeted:
            return torch.clamp((other - real), min=-self.kappa)
        else:
            return torch.clamp((real - other), min=-self.kappa)


# -- attacks/pgd.py ----------------------------------------------------------------------------
class PGD(Attack):
    def __init__(self, model, eps=8/255, alpha=2/255, steps=10, random_start=True):
        super().__init__("PGD", model)
        self.eps = eps
        self.alpha = alpha
        self.steps = steps
        self.random_start = random_start
        self.supported_mode = ['default', 'targeted']

    def forward(self, images, labels):
        r\"\"\"
        Overridden.
        \"\"\"

        images = images.clone().detach().to(self.device)
        labels = labels.clone().detach().to(self.device)

        if self.targeted:
            target_labels = self.get_target_label(images, labels)

        loss = nn.CrossEntropyLoss()
        adv_images = images.clone().detach()

        if self.random_start:
            # Starting at a uniformly random point
            adv_images = adv_images + torch.empty_like(adv_images).uniform_(-self.eps, self.eps)
            adv_images = torch.clamp(adv_images, min=0, max=1).detach()

        for _ in range(self.steps):
            adv_images.requires_grad = True
            outputs = self.get_logits(adv_images)

            # Calculate loss
            if self.targeted:
                cost = -loss(outputs, target_labels)
            else:
                cost = loss(outputs, labels)

            # Update adversarial images
            grad = torch.autograd.grad(cost, adv_images,
                                       retain_graph=False, create_graph=False)[0]

            adv_images = adv_images.detach() + self.alpha*grad.sign()
            delta = torch.clamp(adv_images - images, min=-self.eps, max=self.eps)
            adv_images = torch.clamp(images + delta, min=0, max=1).detach()

        return adv_images
"""

TORCHATTACKS_STEPS = [
    ("import torch\n", "import retrograd as torch\n"),
    ("import torch.nn as nn\n", "import retrograd.nn as nn\n"),
    ("import torch.optim as optim\n", "import retrograd.optim as optim\n"),
    (
        "            cost.backward()\n            optimizer.step()\n",
        "            grads = cost.backward()\n            optimizer.step(grads)\n",
    ),
]


def _attack_base(lib):
    """The part of torchattacks' ``Attack`` base class that ``CW`` and ``PGD`` use: the model,
    its device, ``get_logits``, the targeted mode by a function of the labels, and ``__call__``
    running ``forward`` with the model in eval mode (restored after)."""

    class Attack:
        def __init__(self, name, model):
            self.attack = name
            self.model = model
            self.device = next(model.parameters()).device
            self.targeted = False
            self._target_map_function = None

        def get_logits(self, inputs):
            return self.model(inputs)

        def set_mode_targeted_by_function(self, target_map_function):
            self.targeted = True
            self._target_map_function = target_map_function

        def get_target_label(self, inputs, labels):
            return self._target_map_function(inputs, labels).long().to(self.device)

        def __call__(self, images, labels):
            given_training = self.model.training
            self.model.eval()
            adv_images = self.forward(images, labels)
            if given_training:
                self.model.train()
            return adv_images

    return Attack


def _round_trip_exact(values):
    """The ``values`` that CW's ``tanh_space(inverse_tanh_space(x))`` gives back exactly in
    float64 under both libraries. (CW starts its ``w`` there: elsewhere the L2 term's first
    gradient is the round trip's rounding, which Adam's first step scales to ``lr`` whatever
    its size, so the pixels the logits do not see would follow each library's rounding.)"""
    exact = np.ones(len(values), dtype=bool)
    for lib in (torch, rg):
        y = lib.clamp(lib.tensor(values) * 2 - 1, min=-1, max=1)
        back = 1 / 2 * (lib.tanh(0.5 * lib.log((1 + y) / (1 - y))) + 1)
        exact &= back.numpy() == values
    return values[exact]


def test_torchattacks_cw_and_pgd_as_torch():
    rng = np.random.default_rng(4741)
    images = rng.choice(_round_trip_exact(np.arange(1, 64) / 64), size=(4, 1, 10, 10))
    records = []
    initialize = initializer()
    for lib in (torch, rg):
        record = []
        previous = lib.get_default_dtype()
        lib.set_default_dtype(lib.float64)  # (PGD's steps are signs of input gradients)
        try:
            text = (
                TORCHATTACKS_SOURCE
                if lib is torch
                else port(TORCHATTACKS_SOURCE, TORCHATTACKS_STEPS)
            )
            names = run_source(text, lib, record=record, Attack=_attack_base(lib))
            net = _model(lib, initialize).train()
            x = lib.tensor(images)
            with lib.no_grad():
                y = net(x).argmax(1)  # (the predictions: the untargeted attack has work to do)
            record.append(names["CW"](net, c=10, steps=20, lr=0.05)(x, y).detach().numpy())
            targeted = names["CW"](net, c=20, kappa=0.1, steps=10, lr=0.1, abort_early=False)
            targeted.set_mode_targeted_by_function(lambda inputs, labels: (labels + 1) % 10)
            record.append(targeted(x, y).detach().numpy())
            assert net.training
            with SharedFills(lib, 4742):
                record.append(names["PGD"](net, eps=0.1, alpha=0.03, steps=4)(x, y).numpy())
        finally:
            lib.set_default_dtype(previous)
        records.append(record)
    assert len(records[0]) > 10
    assert not np.allclose(records[0][-1], images)
    assert_records_agree(records[1], records[0], rtol=1e-7, atol=1e-9)
