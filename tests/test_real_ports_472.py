# ruff: noqa: E501  (the programs are kept as their authors wrote them)
"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):
PGD adversarial training as MadryLab/robustness writes it (``attack_steps.py``'s ``LinfStep``,
``L2Step`` and ``UnconstrainedStep``; ``attacker.py``'s ``Attacker`` and ``AttackerModel``;
``tools/helpers.py``'s ``InputNormalize``, ``accuracy`` and ``calc_est_grad``;
``tools/custom_modules.py``'s ``FakeReLU``), a small CIFAR-shaped model trained a few steps with
L2 adversarial examples and attacked under L-inf, against torch's run of the same code from the
same weights and draws, in float64 (the L-inf steps are ``sign`` of input gradients).

What it exercises: ``AttackerModel.forward``'s ``make_adv`` (``self.eval()`` for the attack,
``self.train()`` back), ``InputNormalize``'s buffers from ``new_mean[..., None, None]`` and
``ch.clamp(x, 0, 1)``; the PGD loop: ``x.clone().detach().requires_grad_(True)``,
``ch.nn.CrossEntropyLoss(reduction='none')``, ``grad, = ch.autograd.grad(m * loss, [x])``,
``replace_best``'s ``bx[replace] = x[replace].clone().detach()`` and ``bloss[replace] =
loss[replace]`` by a boolean mask, the steps' ``ch.sign(g) * self.step_size``, ``ch.norm(g.view(
g.shape[0], -1), dim=1).view(-1, *([1]*l))``, the projections ``diff.renorm(p=2, dim=0,
maxnorm=self.eps)`` and ``ch.clamp(diff, -self.eps, self.eps)``, the random starts ``(ch.rand_like(x)
- 0.5).renorm(...)`` and ``2 * (ch.rand_like(x) - 0.5) * self.eps``; the gradient estimated by
``calc_est_grad`` (``x.repeat(Q, *extender)``, ``ch.randn_like``, ``noise.view(B*Q, -1).norm(
dim=-1)``, antithetic ``ch.cat([-noise, noise])``, ``y.repeat(2*Q, *y_shape)``) under
``ch.no_grad()``; a ``custom_loss`` through ``with_latent=True, fake_relu=True`` (``FakeReLU``, a
``ch.autograd.Function`` whose backward passes the gradient through); ``accuracy``'s
``output.topk(maxk, 1, True, True)``, ``pred.t()``, ``pred.eq(target.view(1, -1).expand_as(pred))``
and ``ck_sum.mul_(100.0 / batch_size)``.

The data is a stand-in for CIFAR-10 (random 8x8 images in [0, 1] with labels), the model a small
conv net with the robustness models' ``forward(x, with_latent, fake_relu, no_relu)``; the training
loop is ``train.py``'s ``_model_loop`` reduced to its step (the meters, tqdm and the store left
out). Dropped: every ``.cuda()`` and ``do_tqdm``. ``random_restarts`` is kept as written: its
``misclass = ~corr.byte()`` is a bitwise not of 0/1 bytes (254/255: every entry nonzero), which
torch's deprecated uint8 indexing ``to_ret[misclass] = adv[misclass]`` takes as an all-true mask,
and so does retrograd's. ``accuracy``'s ``correct[:k].view(-1)`` is the
repository's later ``reshape(-1)`` (torch 2 refuses the view of the transposed rows, and so does
retrograd, with torch's advice). The lines changed for the port: the ``import`` lines and the
gradient lines (``grads = loss.backward()``, ``opt.step(grads)``).
"""

from __future__ import annotations

import numpy as np
import torch

import retrograd as rg
from real_ports import SharedDraws, assert_records_agree, initializer, port, run_source

ROBUSTNESS_SOURCE = """
import torch as ch

# -- tools/custom_modules.py -------------------------------------------------------------------
class FakeReLU(ch.autograd.Function):
    @staticmethod
    def forward(ctx, input):
        return input.clamp(min=0)

    @staticmethod
    def backward(ctx, grad_output):
        return grad_output


# -- tools/helpers.py --------------------------------------------------------------------------
def calc_est_grad(func, x, y, rad, num_samples):
    B, *_ = x.shape
    Q = num_samples//2
    N = len(x.shape) - 1
    with ch.no_grad():
        # Q * B * C * H * W
        extender = [1]*N
        queries = x.repeat(Q, *extender)
        noise = ch.randn_like(queries)
        norm = noise.view(B*Q, -1).norm(dim=-1).view(B*Q, *extender)
        noise = noise / norm
        noise = ch.cat([-noise, noise])
        queries = ch.cat([queries, queries])
        y_shape = [1] * (len(y.shape) - 1)
        l = func(queries + rad * noise, y.repeat(2*Q, *y_shape)).view(-1, *extender)
        grad = (l.view(2*Q, B, *extender) * noise.view(2*Q, B, *noise.shape[1:])).mean(dim=0)
    return grad


def accuracy(output, target, topk=(1,), exact=False):
    \"\"\"
        Computes the top-k accuracy for the specified values of k

        Args:
            output (ch.tensor) : model output (N, classes) or (N, attributes)
                for sigmoid/multitask binary classification
            target (ch.tensor) : correct labels (N,) [multiclass] or (N,
                attributes) [multitask binary]
            topk (tuple) : for each item "k" in this tuple, this method
                will return the top-k accuracy
            exact (bool) : whether to return aggregate statistics (if
                False) or per-example correctness (if True)

        Returns:
            A list of top-k accuracies.
    \"\"\"
    with ch.no_grad():
        # Binary Classification
        if len(target.shape) > 1:
            assert output.shape == target.shape, \\
                "Detected binary classification but output shape != target shape"
            return [ch.round(ch.sigmoid(output)).eq(ch.round(target)).float().mean()], [-1.0]

        maxk = max(topk)
        batch_size = target.size(0)

        _, pred = output.topk(maxk, 1, True, True)
        pred = pred.t()
        correct = pred.eq(target.view(1, -1).expand_as(pred))

        res = []
        res_exact = []
        for k in topk:
            correct_k = correct[:k].reshape(-1).float()
            ck_sum = correct_k.sum(0, keepdim=True)
            res.append(ck_sum.mul_(100.0 / batch_size))
            res_exact.append(correct_k)

        if not exact:
            return res
        else:
            return res_exact


class InputNormalize(ch.nn.Module):
    '''
    A module (custom layer) for normalizing the input to have a fixed
    mean and standard deviation (user-specified).
    '''
    def __init__(self, new_mean, new_std):
        super(InputNormalize, self).__init__()
        new_std = new_std[..., None, None]
        new_mean = new_mean[..., None, None]

        self.register_buffer("new_mean", new_mean)
        self.register_buffer("new_std", new_std)

    def forward(self, x):
        x = ch.clamp(x, 0, 1)
        x_normalized = (x - self.new_mean)/self.new_std
        return x_normalized


class helpers:  # (the module's namespace)
    InputNormalize = InputNormalize
    accuracy = staticmethod(accuracy)
    calc_est_grad = staticmethod(calc_est_grad)


# -- attack_steps.py ---------------------------------------------------------------------------
class AttackerStep:
    '''
    Generic class for attacker steps, under perturbation constraints
    specified by an "origin input" and a perturbation magnitude.
    Must implement project, step, and random_perturb
    '''
    def __init__(self, orig_input, eps, step_size, use_grad=True):
        '''
        Initialize the attacker step with a given perturbation magnitude.

        Args:
            eps (float): the perturbation magnitude
            orig_input (ch.tensor): the original input
        '''
        self.orig_input = orig_input
        self.eps = eps
        self.step_size = step_size
        self.use_grad = use_grad

    def project(self, x):
        raise NotImplementedError

    def step(self, x, g):
        raise NotImplementedError

    def random_perturb(self, x):
        raise NotImplementedError

    def to_image(self, x):
        return x

### Instantiations of the AttackerStep class

# L-infinity threat model
class LinfStep(AttackerStep):
    def project(self, x):
        diff = x - self.orig_input
        diff = ch.clamp(diff, -self.eps, self.eps)
        return ch.clamp(diff + self.orig_input, 0, 1)

    def step(self, x, g):
        step = ch.sign(g) * self.step_size
        return x + step

    def random_perturb(self, x):
        new_x = x + 2 * (ch.rand_like(x) - 0.5) * self.eps
        return ch.clamp(new_x, 0, 1)

# L2 threat model
class L2Step(AttackerStep):
    def project(self, x):
        diff = x - self.orig_input
        diff = diff.renorm(p=2, dim=0, maxnorm=self.eps)
        return ch.clamp(self.orig_input + diff, 0, 1)

    def step(self, x, g):
        # Scale g so that each element of the batch is at least norm 1
        l = len(x.shape) - 1
        g_norm = ch.norm(g.view(g.shape[0], -1), dim=1).view(-1, *([1]*l))
        scaled_g = g / (g_norm + 1e-10)
        return x + scaled_g * self.step_size

    def random_perturb(self, x):
        new_x = x + (ch.rand_like(x) - 0.5).renorm(p=2, dim=0, maxnorm=self.eps)
        return ch.clamp(new_x, 0, 1)

# Unconstrained threat model
class UnconstrainedStep(AttackerStep):
    def project(self, x):
        return ch.clamp(x, 0, 1)

    def step(self, x, g):
        return x + g * self.step_size


class attack_steps:  # (the module's namespace)
    LinfStep = LinfStep
    L2Step = L2Step
    UnconstrainedStep = UnconstrainedStep


# -- attacker.py -------------------------------------------------------------------------------
STEPS = {
    'inf': attack_steps.LinfStep,
    '2': attack_steps.L2Step,
    'unconstrained': attack_steps.UnconstrainedStep,
}

class Attacker(ch.nn.Module):
    def __init__(self, model, dataset):
        super(Attacker, self).__init__()
        self.normalize = helpers.InputNormalize(dataset.mean, dataset.std)
        self.model = model

    def forward(self, x, target, *_, constraint, eps, step_size, iterations,
                random_start=False, random_restarts=False, do_tqdm=False,
                targeted=False, custom_loss=None, should_normalize=True,
                orig_input=None, use_best=True, return_image=True, est_grad=None):
        # Can provide a different input to make the feasible set around
        # instead of the initial point
        if orig_input is None: orig_input = x.detach()

        # Multiplier for gradient ascent [untargeted] or descent [targeted]
        m = -1 if targeted else 1

        # Initialize step class and attacker criterion
        criterion = ch.nn.CrossEntropyLoss(reduction='none')
        step_class = STEPS[constraint] if isinstance(constraint, str) else constraint
        step = step_class(eps=eps, orig_input=orig_input, step_size=step_size)

        def calc_loss(inp, target):
            '''
            Calculates the loss of an input with respect to target labels
            Uses custom loss (if provided) otherwise the criterion
            '''
            if should_normalize:
                inp = self.normalize(inp)
            output = self.model(inp)
            if custom_loss:
                return custom_loss(self.model, inp, target)

            return criterion(output, target), output

        # Main function for making adversarial examples
        def get_adv_examples(x):
            # Random start (to escape certain types of gradient masking)
            if random_start:
                x = step.random_perturb(x)

            iterator = range(iterations)

            # Keep track of the "best" (worst-case) loss and its
            # corresponding input
            best_loss = None
            best_x = None

            # A function that updates the best loss and best input
            def replace_best(loss, bloss, x, bx):
                if bloss is None:
                    bx = x.clone().detach()
                    bloss = loss.clone().detach()
                else:
                    replace = m * bloss < m * loss
                    bx[replace] = x[replace].clone().detach()
                    bloss[replace] = loss[replace]

                return bloss, bx

            # PGD iterates
            for _ in iterator:
                x = x.clone().detach().requires_grad_(True)
                losses, out = calc_loss(step.to_image(x), target)
                assert losses.shape[0] == x.shape[0], \\
                        'Shape of losses must match input!'

                loss = ch.mean(losses)

                if step.use_grad:
                    if est_grad is None:
                        grad, = ch.autograd.grad(m * loss, [x])
                    else:
                        f = lambda _x, _y: m * calc_loss(step.to_image(_x), _y)[0]
                        grad = helpers.calc_est_grad(f, x, target, *est_grad)
                else:
                    grad = None

                with ch.no_grad():
                    args = [losses, best_loss, x, best_x]
                    best_loss, best_x = replace_best(*args) if use_best else (losses, x)

                    x = step.step(x, grad)
                    x = step.project(x)

            # Save computation (don't compute last loss) if not use_best
            if not use_best:
                ret = x.clone().detach()
                return step.to_image(ret) if return_image else ret

            losses, _ = calc_loss(step.to_image(x), target)
            args = [losses, best_loss, x, best_x]
            best_loss, best_x = replace_best(*args)
            return step.to_image(best_x) if return_image else best_x

        # Random restarts: repeat the attack and find the worst-case
        # example for each input in the batch
        if random_restarts:
            to_ret = None

            orig_cpy = x.clone().detach()
            for _ in range(random_restarts):
                adv = get_adv_examples(orig_cpy)

                if to_ret is None:
                    to_ret = adv.detach()

                _, output = calc_loss(adv, target)
                corr, = helpers.accuracy(output, target, topk=(1,), exact=True)
                corr = corr.byte()
                misclass = ~corr
                to_ret[misclass] = adv[misclass]

            adv_ret = to_ret
        else:
            adv_ret = get_adv_examples(x)

        return adv_ret

class AttackerModel(ch.nn.Module):
    def __init__(self, model, dataset):
        super(AttackerModel, self).__init__()
        self.normalizer = helpers.InputNormalize(dataset.mean, dataset.std)
        self.model = model
        self.attacker = Attacker(model, dataset)

    def forward(self, inp, target=None, make_adv=False, with_latent=False,
                fake_relu=False, no_relu=False, with_image=True, **attacker_kwargs):
        if make_adv:
            assert target is not None
            prev_training = bool(self.training)
            self.eval()
            adv = self.attacker(inp, target, **attacker_kwargs)
            if prev_training:
                self.train()

            inp = adv

        if with_image:
            normalized_inp = self.normalizer(inp)

            if no_relu and (not with_latent):
                print("WARNING: 'no_relu' has no visible effect if 'with_latent is False.")
            if no_relu and fake_relu:
                raise ValueError("Options 'no_relu' and 'fake_relu' are exclusive")

            output = self.model(normalized_inp, with_latent=with_latent,
                                    fake_relu=fake_relu, no_relu=no_relu)
        else:
            output = None

        return (output, inp)


# -- a small model with the robustness models' forward -------------------------------------------
class SmallNet(ch.nn.Module):
    def __init__(self, num_classes=10):
        super(SmallNet, self).__init__()
        self.conv1 = ch.nn.Conv2d(3, 6, kernel_size=3, padding=1, bias=False)
        self.bn1 = ch.nn.BatchNorm2d(6)
        self.conv2 = ch.nn.Conv2d(6, 8, kernel_size=3, stride=2, padding=1, bias=False)
        self.bn2 = ch.nn.BatchNorm2d(8)
        self.linear = ch.nn.Linear(8, num_classes)

    def forward(self, x, with_latent=False, fake_relu=False, no_relu=False):
        assert (not no_relu), "no_relu not yet supported for this architecture"
        out = ch.nn.functional.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        if fake_relu:
            out = FakeReLU.apply(out)
        else:
            out = ch.nn.functional.relu(out)
        out = ch.nn.functional.avg_pool2d(out, 4)
        pre_out = out.view(out.size(0), -1)
        final = self.linear(pre_out)
        if with_latent:
            return final, pre_out
        return final


# -- train.py's _model_loop, reduced to its step ----------------------------------------------
def model_loop(loop_type, loader, model, opt, adv, attack_kwargs):
    is_train = (loop_type == 'train')
    model = model.train() if is_train else model.eval()
    train_criterion = ch.nn.CrossEntropyLoss()
    for i, (inp, target) in enumerate(loader):
        output, final_inp = model(inp, target=target, make_adv=adv,
                                  **attack_kwargs)
        loss = train_criterion(output, target)

        if len(loss.shape) > 0: loss = loss.mean()

        model_logits = output[0] if (type(output) is tuple) else output

        maxk = min(5, model_logits.shape[-1])
        prec1, prec5 = helpers.accuracy(model_logits, target, topk=(1, maxk))
        prec1, prec5 = prec1[0], prec5[0]
        record.append([loss.item(), prec1.item(), prec5.item()])
        record.append(final_inp.detach().numpy().copy())

        # compute gradient and do SGD step
        if is_train:
            opt.zero_grad()
            loss.backward()
            opt.step()
            record.append(state_of(model))


def main(dataset, train_loader, val_loader):
    model = AttackerModel(SmallNet(), dataset)
    initialize(model)
    opt = ch.optim.SGD(model.parameters(), 0.1, momentum=0.9, weight_decay=5e-4)
    train_kwargs = {
        'constraint': '2',
        'eps': 0.5,
        'step_size': 0.2,
        'iterations': 3,
        'random_start': True,
        'custom_loss': None,
        'use_best': True,
    }
    for epoch in range(2):
        model_loop('train', train_loader, model, opt, True, train_kwargs)

    val_kwargs = {'constraint': 'inf', 'eps': 8 / 255, 'step_size': 2 / 255, 'iterations': 3,
                  'random_start': True, 'random_restarts': 2, 'use_best': True}
    model_loop('val', val_loader, model, None, True, val_kwargs)
    est_kwargs = {'constraint': 'inf', 'eps': 8 / 255, 'step_size': 2 / 255, 'iterations': 2,
                  'est_grad': (0.5, 4), 'use_best': False}
    model_loop('val', val_loader, model, None, True, est_kwargs)

    # activation maximisation of a latent unit through FakeReLU (an unconstrained, targeted attack)
    def custom_loss(model, inp, targ):
        _, rep = model(inp, with_latent=True, fake_relu=True)
        loss = -rep[:, 0]
        return loss, None
    inp, target = val_loader[0]
    _, im = model(inp, target, make_adv=True, constraint='unconstrained', eps=1000,
                  step_size=0.5, iterations=3, custom_loss=custom_loss, targeted=True,
                  use_best=False)
    record.append(im.detach().numpy().copy())
"""

ROBUSTNESS_STEPS = [
    ("import torch as ch\n", "import retrograd as ch\n"),
    (
        "            loss.backward()\n            opt.step()\n",
        "            grads = loss.backward()\n            opt.step(grads)\n",
    ),
]


class SharedRandLike:
    """``rand_like`` of a library drawing from one seeded stream (the same numbers in both
    runs, in the tensor's dtype)."""

    def __init__(self, lib, seed):
        self.lib, self.rng = lib, np.random.default_rng(seed)

    def __enter__(self):
        lib, rng = self.lib, self.rng

        def rand_like(tensor, **_):
            return lib.tensor(rng.uniform(size=tuple(tensor.shape)), dtype=tensor.dtype)

        self.saved = lib.rand_like
        lib.rand_like = rand_like
        return self

    def __exit__(self, *exc):
        self.lib.rand_like = self.saved
        return False


class Dataset:
    def __init__(self, lib):
        self.mean = lib.tensor([0.4914, 0.4822, 0.4465])
        self.std = lib.tensor([0.2023, 0.1994, 0.2010])


def test_madry_pgd_adversarial_training_and_attacks_as_torch(capsys):
    rng = np.random.default_rng(4720)
    images = rng.uniform(size=(3, 4, 3, 8, 8))
    labels = rng.integers(0, 10, (3, 4))
    records = []
    initialize = initializer()
    for lib in (torch, rg):
        record = []
        previous = lib.get_default_dtype()
        lib.set_default_dtype(lib.float64)
        try:
            text = ROBUSTNESS_SOURCE if lib is torch else port(ROBUSTNESS_SOURCE, ROBUSTNESS_STEPS)
            loaders = [(lib.tensor(x), lib.tensor(y)) for x, y in zip(images, labels)]
            with SharedDraws(lib, 4721), SharedRandLike(lib, 4722):
                lib.manual_seed(0)
                names = run_source(
                    text,
                    lib,
                    record=record,
                    initialize=initialize,
                    state_of=lambda m: {
                        k: v.detach().numpy().copy() for k, v in m.state_dict().items()
                    },
                )
                names["main"](Dataset(lib), loaders[:2], loaders[2:])
        finally:
            lib.set_default_dtype(previous)
        records.append(record)
    assert capsys.readouterr().out == ""
    assert len(records[0]) == 2 * 2 * 3 + 2 + 2 + 1
    assert_records_agree(records[1], records[0], rtol=1e-7, atol=1e-9)
