# ruff: noqa: E501  (the programs are kept as their authors wrote them)
"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):
uncertainty estimation as its repositories write it, each trained a few steps against torch's
run of the same code from the same weights and draws.

- SWAG as wjmaddox/swa_gaussian writes it (``swag/posteriors/swag.py``: ``swag_parameters``
  popping each parameter out of ``module._parameters`` and registering ``%s_mean``,
  ``%s_sq_mean`` and ``%s_cov_mat_sqrt`` buffers from ``data.new(data.size()).zero_()`` and
  ``data.new_empty((0, data.numel())).zero_()``, ``SWAG`` applying it through
  ``self.base.apply``, ``collect_model`` reading and replacing the buffers by
  ``module.__getattr__``/``module.__setattr__``, ``torch.cat`` onto the empty deviation
  matrix and ``self.n_models.add_(1)`` of a long buffer, ``sample_fullrank`` by
  ``torch.randn_like(var, requires_grad=False)`` and ``sample_blockwise``, the sampled
  weights set as plain attributes of the modules; ``swag/utils.py``'s ``flatten``,
  ``unflatten_like``, ``adjust_learning_rate``, ``bn_update`` with ``check_bn``/``reset_bn``
  /``_get_momenta``/``_set_momenta`` through ``issubclass(module.__class__,
  torch.nn.modules.batchnorm._BatchNorm)`` and ``momentum = b / (n + b)``; ``run_swag.py``'s
  ``schedule`` and loop), small. Only the diagonal samples are drawn: the low-rank ones draw
  by ``new_empty(...).normal_()`` from torch's own generator, which the port cannot share;
  the deviation matrices are still collected and compared. ``.cuda()`` is left out.
- Concrete dropout as yaringal/ConcreteDropout writes it (``concrete-dropout-pytorch.ipynb``:
  ``ConcreteDropout`` with ``nn.Parameter(torch.empty(1).uniform_(init_min, init_max))``,
  the relaxed Bernoulli mask from ``torch.rand_like``, ``x /= retain_prob``, the regularizer
  summed over ``layer.parameters()`` onto ``0``; ``Model`` writing each regularizer into
  ``torch.empty(5)`` by ``x1, regularization[0] = ...``; ``heteroscedastic_loss``; the MC
  samples of the trained model and ``torch.sigmoid(module.p_logit).cpu().data.numpy()[0]``
  over ``model.modules()``). ``torch.rand_like`` draws from one seeded stream in both runs.
- DUQ as y0ast/deterministic-uncertainty-quantification writes it (``two_moons.ipynb``'s
  ``Model_bilinear``: ``nn.Parameter(torch.normal(torch.zeros(...), 1))``, the ``N`` and
  ``m`` buffers replaced by assignment (``self.m = self.m * self.N.unsqueeze(0)`` in
  ``__init__``, ``self.N = torch.max(...)`` in ``update_embeddings``),
  ``torch.einsum('ij,mnj->imn', ...)`` and ``torch.einsum('ijk,ik->jk', ...)``; ``
  calc_gradient_penalty`` by ``torch.autograd.grad(..., grad_outputs=torch.ones_like(y_pred),
  create_graph=True)`` of an input made ``requires_grad_(True)``; the ``step`` with
  ``F.binary_cross_entropy`` of ``F.one_hot(y, num_classes).float()``, ``loss +=`` the
  penalty, SGD with momentum and weight decay, the centroids updated under
  ``torch.no_grad()``).
- deep evidential regression as aamini/evidential-deep-learning writes it (``layers/dense.py``'s
  ``DenseNormalGamma`` and ``losses/continuous.py``'s ``NIG_NLL``, ``KL_NIG``, ``NIG_Reg``
  and ``EvidentialRegression``, in the form its PyTorch ports write them: ``torch.split``,
  ``F.softplus`` evidence, ``torch.lgamma``, ``torch.digamma``, ``torch.square``), both
  regularizers, then the aleatoric and epistemic variances of the predictions. ``NIG_Reg``
  makes ``omega`` a tensor before ``KL_NIG``: its ``torch.abs``/``torch.lgamma`` of a float
  (TensorFlow's ``tf.abs``/``tf.math.lgamma`` take one) is a ``TypeError`` in torch.
- temperature scaling as gpleiss/temperature_scaling writes it (``temperature_scaling.py``:
  ``ModelWithTemperature`` with ``self.temperature.unsqueeze(1).expand(...)``,
  ``set_temperature``'s logits gathered under ``torch.no_grad()`` and
  ``optim.LBFGS([self.temperature], lr=0.01, max_iter=50)`` with its ``eval`` closure;
  ``_ECELoss`` by ``torch.linspace`` bins, ``torch.max(softmaxes, 1)``, ``gt``/``le`` of
  ``.item()`` bounds multiplied as masks, ``accuracies[in_bin].float().mean()`` and ``ece +=``
  onto ``torch.zeros(1)``), on a small classifier trained first. ``.cuda()`` is left out.
- DUE's deterministic feature extractor as y0ast/DUE writes it (``due/layers/spectral_norm_fc.py``:
  ``SpectralNormFC`` subclassing ``torch.nn.utils.spectral_norm.SpectralNorm``, its
  ``compute_weight`` with the power iteration ``normalize(torch.mv(weight_mat.t(), u), dim=0,
  eps=self.eps, out=v)`` into the module's buffers, ``u.clone(memory_format=
  torch.contiguous_format)``, the soft normalization ``torch.max(torch.ones(1), sigma /
  self.coeff)`` and ``sigma_log.copy_(sigma.detach())``; its ``apply`` reading
  ``module._forward_pre_hooks``, ``delattr(module, fn.name)``, ``setattr(module, fn.name,
  weight.data)``, ``module._register_state_dict_hook(SpectralNormStateDictHook(fn))`` and
  ``module._register_load_state_dict_pre_hook(SpectralNormLoadStateDictPreHook(fn))``;
  ``due/fc_resnet.py``'s ``FCResNet``), trained on a toy regression as
  ``toy_regression.ipynb`` does without its GP. The hook class could not be imported, and the
  ``out=`` of ``normalize`` was ignored (the buffers never moved): both are checked on their
  own below.
- DUE's SNGP head (``due/sngp.py``: ``random_ortho`` by ``torch.linalg.qr``,
  ``RandomFourierFeatures`` with its ``feature_scale``/``W``/``b`` buffers, ``Laplace`` with
  ``torch.normal(0, 0.05, size)`` projections through ``nn.functional.linear``, the precision
  buffer grown by ``self.precision += k.t() @ k`` in training, ``self.seen_data +=
  x.shape[0]`` of a 0-d int64 buffer asserted against ``num_data``,
  ``reset_precision_matrix`` replacing the buffers, the covariance by
  ``torch.linalg.cholesky_ex`` and ``torch.cholesky_inverse(u, out=self.covariance)`` under
  ``torch.no_grad()``, the mean-field logits by ``torch.diag(pred_cov)``) over the
  spectral-normalized ``FCResNet``, for regression and for classification. The ``out=`` of
  ``cholesky_inverse`` was refused: checked on its own below.

The lines changed: the ``import`` lines and the gradient lines (``loss.backward()`` returns
the gradients, ``step`` takes them; the LBFGS closure returns the loss and its gradients).
"""

from __future__ import annotations

import pickle
import random

import numpy as np
import pytest
import torch

import retrograd as rg
from real_ports import assert_records_agree, initializer, params_of, runs_with_draws, state_of


@pytest.fixture(autouse=True)
def _seeded():
    torch.manual_seed(0)
    np.random.seed(0)
    random.seed(0)
    rg.seed(0)


IMPORTS = (
    "\nimport torch\nimport torch.nn as nn\nimport torch.nn.functional as F\nimport torch.optim as optim\n",
    "\nimport retrograd as torch\nimport retrograd.nn as nn\nimport retrograd.nn.functional as F\nimport retrograd.optim as optim\n",
)


# -- swa_gaussian -----------------------------------------------------------------------------------
SWAG_SOURCE = '''
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim


# -- swag/utils.py --
def flatten(lst):
    tmp = [i.contiguous().view(-1, 1) for i in lst]
    return torch.cat(tmp).view(-1)


def unflatten_like(vector, likeTensorList):
    # Takes a flat torch.tensor and unflattens it to a list of torch.tensors
    #    shaped like likeTensorList
    outList = []
    i = 0
    for tensor in likeTensorList:
        # n = module._parameters[name].numel()
        n = tensor.numel()
        outList.append(vector[:, i : i + n].view(tensor.shape))
        i += n
    return outList


def adjust_learning_rate(optimizer, lr):
    for param_group in optimizer.param_groups:
        param_group["lr"] = lr
    return lr


def _check_bn(module, flag):
    if issubclass(module.__class__, torch.nn.modules.batchnorm._BatchNorm):
        flag[0] = True


def check_bn(model):
    flag = [False]
    model.apply(lambda module: _check_bn(module, flag))
    return flag[0]


def reset_bn(module):
    if issubclass(module.__class__, torch.nn.modules.batchnorm._BatchNorm):
        module.running_mean = torch.zeros_like(module.running_mean)
        module.running_var = torch.ones_like(module.running_var)


def _get_momenta(module, momenta):
    if issubclass(module.__class__, torch.nn.modules.batchnorm._BatchNorm):
        momenta[module] = module.momentum


def _set_momenta(module, momenta):
    if issubclass(module.__class__, torch.nn.modules.batchnorm._BatchNorm):
        module.momentum = momenta[module]


def bn_update(loader, model, verbose=False, subset=None, **kwargs):
    """
        BatchNorm buffers update (if any).
        Performs 1 epochs to estimate buffers average using train dataset.

        :param loader: train dataset loader for buffers average estimation.
        :param model: model being update
        :return: None
    """
    if not check_bn(model):
        return
    model.train()
    momenta = {}
    model.apply(reset_bn)
    model.apply(lambda module: _get_momenta(module, momenta))
    n = 0
    num_batches = len(loader)

    with torch.no_grad():
        if subset is not None:
            num_batches = int(num_batches * subset)
            loader = itertools.islice(loader, num_batches)

        for input, _ in loader:
            input_var = torch.autograd.Variable(input)
            b = input_var.data.size(0)

            momentum = b / (n + b)
            for module in momenta.keys():
                module.momentum = momentum

            model(input_var, **kwargs)
            n += b

    model.apply(lambda module: _set_momenta(module, momenta))


# -- swag/posteriors/swag.py --
def swag_parameters(module, params, no_cov_mat=True):
    for name in list(module._parameters.keys()):
        if module._parameters[name] is None:
            continue
        data = module._parameters[name].data
        module._parameters.pop(name)
        module.register_buffer("%s_mean" % name, data.new(data.size()).zero_())
        module.register_buffer("%s_sq_mean" % name, data.new(data.size()).zero_())

        if no_cov_mat is False:
            module.register_buffer(
                "%s_cov_mat_sqrt" % name, data.new_empty((0, data.numel())).zero_()
            )

        params.append((module, name))


class SWAG(torch.nn.Module):
    def __init__(
        self, base, no_cov_mat=True, max_num_models=0, var_clamp=1e-30, *args, **kwargs
    ):
        super(SWAG, self).__init__()

        self.register_buffer("n_models", torch.zeros([1], dtype=torch.long))
        self.params = list()

        self.no_cov_mat = no_cov_mat
        self.max_num_models = max_num_models

        self.var_clamp = var_clamp

        self.base = base(*args, **kwargs)
        self.base.apply(
            lambda module: swag_parameters(
                module=module, params=self.params, no_cov_mat=self.no_cov_mat
            )
        )

    def forward(self, *args, **kwargs):
        return self.base(*args, **kwargs)

    def sample(self, scale=1.0, cov=False, seed=None, block=False, fullrank=True):
        if seed is not None:
            torch.manual_seed(seed)

        if not block:
            self.sample_fullrank(scale, cov, fullrank)
        else:
            self.sample_blockwise(scale, cov, fullrank)

    def sample_blockwise(self, scale, cov, fullrank):
        for module, name in self.params:
            mean = module.__getattr__("%s_mean" % name)

            sq_mean = module.__getattr__("%s_sq_mean" % name)
            eps = torch.randn_like(mean)

            var = torch.clamp(sq_mean - mean ** 2, self.var_clamp)

            scaled_diag_sample = scale * torch.sqrt(var) * eps

            if cov is True:
                cov_mat_sqrt = module.__getattr__("%s_cov_mat_sqrt" % name)
                eps = cov_mat_sqrt.new_empty((cov_mat_sqrt.size(0), 1)).normal_()
                cov_sample = (
                    scale / ((self.max_num_models - 1) ** 0.5)
                ) * cov_mat_sqrt.t().matmul(eps).view_as(mean)

                if fullrank:
                    w = mean + scaled_diag_sample + cov_sample
                else:
                    w = mean + scaled_diag_sample

            else:
                w = mean + scaled_diag_sample

            module.__setattr__(name, w)

    def sample_fullrank(self, scale, cov, fullrank):
        scale_sqrt = scale ** 0.5

        mean_list = []
        sq_mean_list = []

        if cov:
            cov_mat_sqrt_list = []

        for (module, name) in self.params:
            mean = module.__getattr__("%s_mean" % name).cpu()
            sq_mean = module.__getattr__("%s_sq_mean" % name).cpu()

            if cov:
                cov_mat_sqrt = module.__getattr__("%s_cov_mat_sqrt" % name).cpu()
                cov_mat_sqrt_list.append(cov_mat_sqrt)

            mean_list.append(mean)
            sq_mean_list.append(sq_mean)

        mean = flatten(mean_list)
        sq_mean = flatten(sq_mean_list)

        # draw diagonal variance sample
        var = torch.clamp(sq_mean - mean ** 2, self.var_clamp)
        var_sample = var.sqrt() * torch.randn_like(var, requires_grad=False)

        # if covariance draw low rank sample
        if cov:
            cov_mat_sqrt = torch.cat(cov_mat_sqrt_list, dim=1)

            cov_sample = cov_mat_sqrt.t().matmul(
                cov_mat_sqrt.new_empty(
                    (cov_mat_sqrt.size(0),), requires_grad=False
                ).normal_()
            )
            cov_sample /= (self.max_num_models - 1) ** 0.5

            rand_sample = var_sample + cov_sample
        else:
            rand_sample = var_sample

        # update sample with mean and scale
        sample = mean + scale_sqrt * rand_sample
        sample = sample.unsqueeze(0)

        # unflatten new sample like the mean sample
        samples_list = unflatten_like(sample, mean_list)

        for (module, name), sample in zip(self.params, samples_list):
            module.__setattr__(name, sample)

    def collect_model(self, base_model):
        for (module, name), base_param in zip(self.params, base_model.parameters()):
            mean = module.__getattr__("%s_mean" % name)
            sq_mean = module.__getattr__("%s_sq_mean" % name)

            # first moment
            mean = mean * self.n_models.item() / (
                self.n_models.item() + 1.0
            ) + base_param.data / (self.n_models.item() + 1.0)

            # second moment
            sq_mean = sq_mean * self.n_models.item() / (
                self.n_models.item() + 1.0
            ) + base_param.data ** 2 / (self.n_models.item() + 1.0)

            # square root of covariance matrix
            if self.no_cov_mat is False:
                cov_mat_sqrt = module.__getattr__("%s_cov_mat_sqrt" % name)

                # block covariance matrices, store deviation from current mean
                dev = (base_param.data - mean).view(-1, 1)
                cov_mat_sqrt = torch.cat((cov_mat_sqrt, dev.view(-1, 1).t()), dim=0)

                # remove first column if we have stored too many models
                if (self.n_models.item() + 1) > self.max_num_models:
                    cov_mat_sqrt = cov_mat_sqrt[1:, :]
                module.__setattr__("%s_cov_mat_sqrt" % name, cov_mat_sqrt)

            module.__setattr__("%s_mean" % name, mean)
            module.__setattr__("%s_sq_mean" % name, sq_mean)
        self.n_models.add_(1)


# -- a small base in the manner of swag/models --
class MLPBN(nn.Module):
    def __init__(self, num_classes=3, in_dim=4, hidden=8):
        super(MLPBN, self).__init__()
        self.layers = nn.Sequential(
            nn.Linear(in_dim, hidden),
            nn.BatchNorm1d(hidden),
            nn.ReLU(inplace=True),
            nn.Linear(hidden, num_classes),
        )

    def forward(self, x):
        return self.layers(x)


# -- run_swag.py, made small --
lr_init, swa_lr, swa_start, epochs = 0.1, 0.05, 2, 4


def schedule(epoch):
    t = (epoch) / (swa_start)
    lr_ratio = swa_lr / lr_init
    if t <= 0.5:
        factor = 1.0
    elif t <= 0.9:
        factor = 1.0 - (1.0 - lr_ratio) * (t - 0.5) / 0.4
    else:
        factor = lr_ratio
    return lr_init * factor


loader = [(torch.tensor(x), torch.tensor(y)) for x, y in batches]
model = MLPBN(num_classes=3)
initialize(model)
swag_model = SWAG(MLPBN, no_cov_mat=False, max_num_models=2, num_classes=3)
criterion = F.cross_entropy
optimizer = torch.optim.SGD(model.parameters(), lr=lr_init, momentum=0.9, weight_decay=1e-4)

for epoch in range(epochs):
    lr = schedule(epoch)
    adjust_learning_rate(optimizer, lr)
    model.train()
    for input, target in loader:
        output = model(input)
        loss = criterion(output, target)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        record.append(loss.item())
    if (epoch + 1) > swa_start:
        swag_model.collect_model(model)
        record.append(state_of(swag_model))
record.append(params_of(model))

x_eval = loader[0][0]
for scale, block in [(0.0, False), (1.0, False), (0.5, True)]:
    swag_model.sample(scale, cov=False, block=block)
    bn_update(loader, swag_model)
    swag_model.eval()
    record.append(F.softmax(swag_model(x_eval), dim=1).detach().numpy())
    record.append(state_of(swag_model))
    record.append(swag_model.base.layers[0].weight.numpy())
'''

SWAG_STEPS = [
    IMPORTS,
    (
        "        loss.backward()\n        optimizer.step()\n",
        "        grads = loss.backward()\n        optimizer.step(grads)\n",
    ),
]


def test_swa_gaussian_swag_collects_and_samples_as_torch(capsys):
    rng = np.random.default_rng(9601)
    batches = [
        (rng.standard_normal((6, 4)).astype(np.float32), rng.integers(0, 3, 6)) for _ in range(2)
    ]
    (theirs, ours), _ = runs_with_draws(
        SWAG_SOURCE,
        SWAG_STEPS,
        capsys,
        9601,
        batches=batches,
        initialize=initializer(),
        params_of=params_of,
        state_of=state_of,
    )
    assert len(theirs) == 8 + 2 + 1 + 9
    assert_records_agree(ours, theirs, rtol=1e-4, atol=1e-5)


# -- ConcreteDropout -------------------------------------------------------------------------------
CONCRETE_SOURCE = """
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim


class ConcreteDropout(nn.Module):
    def __init__(self, weight_regularizer=1e-6,
                 dropout_regularizer=1e-5, init_min=0.1, init_max=0.1):
        super(ConcreteDropout, self).__init__()


        self.weight_regularizer = weight_regularizer
        self.dropout_regularizer = dropout_regularizer

        init_min = np.log(init_min) - np.log(1. - init_min)
        init_max = np.log(init_max) - np.log(1. - init_max)

        self.p_logit = nn.Parameter(torch.empty(1).uniform_(init_min, init_max))

    def forward(self, x, layer):
        p = torch.sigmoid(self.p_logit)

        out = layer(self._concrete_dropout(x, p))

        sum_of_square = 0
        for param in layer.parameters():
            sum_of_square += torch.sum(torch.pow(param, 2))

        weights_regularizer = self.weight_regularizer * sum_of_square / (1 - p)

        dropout_regularizer = p * torch.log(p)
        dropout_regularizer += (1. - p) * torch.log(1. - p)

        input_dimensionality = x[0].numel() # Number of elements of first item in batch
        dropout_regularizer *= self.dropout_regularizer * input_dimensionality

        regularization = weights_regularizer + dropout_regularizer
        return out, regularization

    def _concrete_dropout(self, x, p):
        eps = 1e-7
        temp = 0.1

        unif_noise = torch.rand_like(x)

        drop_prob = (torch.log(p + eps)
                    - torch.log(1 - p + eps)
                    + torch.log(unif_noise + eps)
                    - torch.log(1 - unif_noise + eps))

        drop_prob = torch.sigmoid(drop_prob / temp)
        random_tensor = 1 - drop_prob
        retain_prob = 1 - p

        x  = torch.mul(x, random_tensor)
        x /= retain_prob

        return x


class Model(nn.Module):
    def __init__(self, weight_regularizer, dropout_regularizer):
        super(Model, self).__init__()
        self.linear1 = nn.Linear(Q, nb_features)
        self.linear2 = nn.Linear(nb_features, nb_features)
        self.linear3 = nn.Linear(nb_features, nb_features)

        self.linear4_mu = nn.Linear(nb_features, D)
        self.linear4_logvar = nn.Linear(nb_features, D)

        self.conc_drop1 = ConcreteDropout(weight_regularizer=weight_regularizer,
                                          dropout_regularizer=dropout_regularizer)
        self.conc_drop2 = ConcreteDropout(weight_regularizer=weight_regularizer,
                                          dropout_regularizer=dropout_regularizer)
        self.conc_drop3 = ConcreteDropout(weight_regularizer=weight_regularizer,
                                          dropout_regularizer=dropout_regularizer)
        self.conc_drop_mu = ConcreteDropout(weight_regularizer=weight_regularizer,
                                             dropout_regularizer=dropout_regularizer)
        self.conc_drop_logvar = ConcreteDropout(weight_regularizer=weight_regularizer,
                                                 dropout_regularizer=dropout_regularizer)

        self.relu = nn.ReLU()

    def forward(self, x):
        regularization = torch.empty(5, device=x.device)

        x1, regularization[0] = self.conc_drop1(x, nn.Sequential(self.linear1, self.relu))
        x2, regularization[1] = self.conc_drop2(x1, nn.Sequential(self.linear2, self.relu))
        x3, regularization[2] = self.conc_drop3(x2, nn.Sequential(self.linear3, self.relu))
        mean, regularization[3] = self.conc_drop_mu(x3, self.linear4_mu)
        log_var, regularization[4] = self.conc_drop_logvar(x3, self.linear4_logvar)
        return mean, log_var, regularization.sum()


def heteroscedastic_loss(true, mean, log_var):
    precision = torch.exp(-log_var)
    return torch.mean(torch.sum(precision * (true - mean)**2 + log_var, 1), 0)


Ns = [10, 25, 50, 100, 1000, 10000]
Ns = np.array(Ns)
nb_epochs = [2000, 1000, 500, 200, 20, 2]
nb_val_size = 1000
nb_features = 16
Q = 1
D = 1
K_test = 4
batch_size = 4
l = 1e-4

X, Y = torch.tensor(data_x), torch.tensor(data_y)
N = X.shape[0]
wr = l**2. / N
dr = 2. / N
model = Model(wr, dr)
initialize(model)
optimizer = optim.Adam(model.parameters())

for i in range(3):
    old_batch = 0
    for batch in range(int(np.ceil(X.shape[0]/batch_size))):
        batch = (batch + 1)
        _x = X[old_batch: batch_size*batch]
        _y = Y[old_batch: batch_size*batch]

        x = torch.autograd.Variable(_x)
        y = torch.autograd.Variable(_y)

        mean, log_var, regularization = model(x)

        loss = heteroscedastic_loss(y, mean, log_var) + regularization
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        record.append(loss.item())
record.append(params_of(model))

MC_samples = [model(X) for _ in range(K_test)]
means = torch.stack([tup[0] for tup in MC_samples]).view(K_test, X.shape[0]).cpu().data.numpy()
logvar = torch.stack([tup[1] for tup in MC_samples]).view(K_test, X.shape[0]).cpu().data.numpy()
record.append(means)
record.append(logvar)
ps = np.array([torch.sigmoid(module.p_logit).cpu().data.numpy()[0] for module in model.modules() if hasattr(module, 'p_logit')])
record.append(ps)
"""

CONCRETE_STEPS = [
    IMPORTS,
    (
        "        loss.backward()\n        optimizer.step()\n",
        "        grads = loss.backward()\n        optimizer.step(grads)\n",
    ),
]


def _rand_like_from(seed):
    """``make_rand_like``: each library's ``rand_like`` drawing from one stream seeded by
    ``seed`` (the same numbers in both runs)."""

    def make(lib):
        rng = np.random.default_rng(seed)

        def rand_like(t, **_):
            return lib.tensor(rng.uniform(size=tuple(t.shape)), dtype=t.dtype)

        lib.rand_like = rand_like
        return rand_like

    return make


def test_concrete_dropout_trains_and_samples_as_torch(capsys):
    rng = np.random.default_rng(9602)
    data_x = rng.standard_normal((8, 1)).astype(np.float32)
    data_y = (2 * data_x + 0.3 * rng.standard_normal((8, 1))).astype(np.float32)
    saved = torch.rand_like, rg.rand_like
    try:
        (theirs, ours), _ = runs_with_draws(
            CONCRETE_SOURCE,
            CONCRETE_STEPS,
            capsys,
            9602,
            data_x=data_x,
            data_y=data_y,
            initialize=initializer(),
            params_of=params_of,
            make_rand_like=_rand_like_from(9602),
        )
    finally:
        torch.rand_like, rg.rand_like = saved
    assert len(theirs) == 6 + 1 + 3
    assert_records_agree(ours, theirs, rtol=1e-4, atol=1e-5)


# -- deterministic-uncertainty-quantification ------------------------------------------------------
DUQ_SOURCE = """
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim


class Model_bilinear(nn.Module):
    def __init__(self, features, num_embeddings):
        super().__init__()

        self.gamma = 0.99
        self.sigma = 0.3

        embedding_size = 10

        self.fc1 = nn.Linear(2, features)
        self.fc2 = nn.Linear(features, features)
        self.fc3 = nn.Linear(features, features)

        self.W = nn.Parameter(torch.normal(torch.zeros(embedding_size, num_embeddings, features), 1))

        self.register_buffer('N', torch.ones(num_embeddings) * 20)
        self.register_buffer('m', torch.normal(torch.zeros(embedding_size, num_embeddings), 1))

        self.m = self.m * self.N.unsqueeze(0)

    def embed(self, x):
        x = F.relu(self.fc1(x))
        x = F.relu(self.fc2(x))
        x = F.relu(self.fc3(x))

        # i is batch, m is embedding_size, n is num_embeddings (classes)
        x = torch.einsum('ij,mnj->imn', x, self.W)

        return x

    def bilinear(self, z):
        embeddings = self.m / self.N.unsqueeze(0)

        diff = z - embeddings.unsqueeze(0)
        y_pred = (- diff**2).mean(1).div(2 * self.sigma**2).exp()

        return y_pred

    def forward(self, x):
        z = self.embed(x)
        y_pred = self.bilinear(z)

        return z, y_pred

    def update_embeddings(self, x, y):
        z = self.embed(x)

        # normalizing value per class, assumes y is one_hot encoded
        self.N = torch.max(self.gamma * self.N + (1 - self.gamma) * y.sum(0), torch.ones_like(self.N))

        # compute sum of embeddings on class by class basis
        features_sum = torch.einsum('ijk,ik->jk', z, y)

        self.m = self.gamma * self.m + (1 - self.gamma) * features_sum


np.random.seed(0)
torch.manual_seed(0)

l_gradient_penalty = 1.0

num_classes = 2
model = Model_bilinear(20, num_classes)
initialize(model)

optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4)


def calc_gradient_penalty(x, y_pred):
    gradients = torch.autograd.grad(
            outputs=y_pred,
            inputs=x,
            grad_outputs=torch.ones_like(y_pred),
            create_graph=True,
        )[0]

    gradients = gradients.flatten(start_dim=1)

    # L2 norm
    grad_norm = gradients.norm(2, dim=1)

    # Two sided penalty
    gradient_penalty = ((grad_norm - 1) ** 2).mean()

    # One sided penalty - down
#     gradient_penalty = F.relu(grad_norm - 1).mean()

    return gradient_penalty


def output_transform_bce(output):
    y_pred, y, x = output

    y = F.one_hot(y, num_classes).float()

    return y_pred, y


def step(engine, batch):
    model.train()
    optimizer.zero_grad()

    x, y = batch
    x.requires_grad_(True)

    z, y_pred = model(x)

    y = F.one_hot(y, num_classes).float()

    loss = F.binary_cross_entropy(y_pred, y)
    loss += l_gradient_penalty * calc_gradient_penalty(x, y_pred)

    x.requires_grad_(False)

    loss.backward()
    optimizer.step()

    with torch.no_grad():
        model.update_embeddings(x, y)

    return loss.item()


def eval_step(engine, batch):
    model.eval()

    x, y = batch

    x.requires_grad_(True)

    z, y_pred = model(x)

    return y_pred, y, x


for xb, yb in batches:
    record.append(step(None, (torch.tensor(xb), torch.tensor(yb))))
    record.append(state_of(model))
y_pred, y, x = eval_step(None, (torch.tensor(batches[0][0]), torch.tensor(batches[0][1])))
y_pred, y = output_transform_bce((y_pred, y, x))
record.append(y_pred.detach().numpy())
record.append(F.binary_cross_entropy(y_pred, y).item())
record.append(calc_gradient_penalty(x, y_pred).item())
"""

DUQ_STEPS = [
    IMPORTS,
    (
        "    loss.backward()\n    optimizer.step()\n",
        "    grads = loss.backward()\n    optimizer.step(grads)\n",
    ),
]


def test_duq_trains_with_its_gradient_penalty_as_torch(capsys):
    rng = np.random.default_rng(9603)
    batches = [
        (rng.standard_normal((6, 2)).astype(np.float32), rng.integers(0, 2, 6)) for _ in range(3)
    ]
    (theirs, ours), _ = runs_with_draws(
        DUQ_SOURCE,
        DUQ_STEPS,
        capsys,
        9603,
        batches=batches,
        initialize=initializer(),
        state_of=state_of,
    )
    assert len(theirs) == 6 + 3
    assert_records_agree(ours, theirs, rtol=1e-4, atol=1e-5)


# -- evidential-deep-learning ----------------------------------------------------------------------
EVIDENTIAL_SOURCE = """
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim


# -- layers/dense.py --
class DenseNormalGamma(nn.Module):
    def __init__(self, in_features, units):
        super(DenseNormalGamma, self).__init__()
        self.units = int(units)
        self.dense = nn.Linear(in_features, 4 * self.units)

    def evidence(self, x):
        # return tf.exp(x)
        return F.softplus(x)

    def forward(self, x):
        output = self.dense(x)
        mu, logv, logalpha, logbeta = torch.split(output, self.units, dim=-1)
        v = self.evidence(logv)
        alpha = self.evidence(logalpha) + 1
        beta = self.evidence(logbeta)
        return torch.cat([mu, v, alpha, beta], dim=-1)


# -- losses/continuous.py --
def NIG_NLL(y, gamma, v, alpha, beta, reduce=True):
    twoBlambda = 2*beta*(1+v)

    nll = 0.5*torch.log(np.pi/v)  \\
        - alpha*torch.log(twoBlambda)  \\
        + (alpha+0.5) * torch.log(v*(y-gamma)**2 + twoBlambda)  \\
        + torch.lgamma(alpha)  \\
        - torch.lgamma(alpha+0.5)

    return torch.mean(nll) if reduce else nll


def KL_NIG(mu1, v1, a1, b1, mu2, v2, a2, b2):
    KL = 0.5*(a1-1)/b1 * (v2*torch.square(mu2-mu1))  \\
        + 0.5*v2/v1  \\
        - 0.5*torch.log(torch.abs(v2)/torch.abs(v1))  \\
        - 0.5 + a2*torch.log(b1/b2)  \\
        - (torch.lgamma(a1) - torch.lgamma(a2))  \\
        + (a1 - a2)*torch.digamma(a1)  \\
        - (b1 - b2)*a1/b1
    return KL


def NIG_Reg(y, gamma, v, alpha, beta, omega=0.01, reduce=True, kl=False):
    # error = tf.stop_gradient(tf.abs(y-gamma))
    error = torch.abs(y-gamma)

    if kl:
        omega = torch.tensor(omega)
        kl = KL_NIG(gamma, v, alpha, beta, gamma, omega, 1+omega, beta)
        reg = error*kl
    else:
        evi = 2*v+(alpha)
        reg = error*evi

    return torch.mean(reg) if reduce else reg


def EvidentialRegression(y_true, evidential_output, coeff=1.0, kl=False):
    gamma, v, alpha, beta = torch.split(evidential_output, 1, dim=-1)
    loss_nll = NIG_NLL(y_true, gamma, v, alpha, beta)
    loss_reg = NIG_Reg(y_true, gamma, v, alpha, beta, kl=kl)
    return loss_nll + coeff * loss_reg


for kl in (False, True):
    model = nn.Sequential(
        nn.Linear(1, 16),
        nn.ReLU(),
        nn.Linear(16, 16),
        nn.ReLU(),
        DenseNormalGamma(16, 1),
    )
    initialize(model)
    optimizer = optim.Adam(model.parameters(), 5e-3)
    x_train, y_train = torch.tensor(data_x), torch.tensor(data_y)
    for step in range(3):
        y_pred = model(x_train)
        loss = EvidentialRegression(y_train, y_pred, coeff=1e-2, kl=kl)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        record.append(loss.item())
    record.append(params_of(model))
    with torch.no_grad():
        y_pred = model(x_train)
        mu, v, alpha, beta = torch.split(y_pred, 1, dim=-1)
        mu = mu[:, 0]
        var = torch.sqrt((beta / (v * (alpha - 1))))
        var = torch.minimum(var, torch.tensor(1e3))[:, 0]  # for visualization
        record.append(mu.numpy())
        record.append(var.numpy())
        record.append((beta / (alpha - 1))[:, 0].numpy())
"""

EVIDENTIAL_STEPS = [
    IMPORTS,
    (
        "        loss.backward()\n        optimizer.step()\n",
        "        grads = loss.backward()\n        optimizer.step(grads)\n",
    ),
]


def test_deep_evidential_regression_trains_as_torch(capsys):
    rng = np.random.default_rng(9604)
    data_x = rng.uniform(-2, 2, (10, 1)).astype(np.float32)
    data_y = (data_x**3 / 4 + 0.2 * rng.standard_normal((10, 1))).astype(np.float32)
    (theirs, ours), _ = runs_with_draws(
        EVIDENTIAL_SOURCE,
        EVIDENTIAL_STEPS,
        capsys,
        9604,
        data_x=data_x,
        data_y=data_y,
        initialize=initializer(),
        params_of=params_of,
    )
    assert len(theirs) == 2 * (3 + 1 + 3)
    assert_records_agree(ours, theirs, rtol=1e-4, atol=1e-5)


# -- temperature_scaling ---------------------------------------------------------------------------
TEMPERATURE_SOURCE = """
import torch
from torch import nn, optim
from torch.nn import functional as F


class ModelWithTemperature(nn.Module):
    \"\"\"
    A thin decorator, which wraps a model with temperature scaling
    model (nn.Module):
        A classification neural network
        NB: Output of the neural network should be the classification logits,
            NOT the softmax (or log softmax)!
    \"\"\"
    def __init__(self, model):
        super(ModelWithTemperature, self).__init__()
        self.model = model
        self.temperature = nn.Parameter(torch.ones(1) * 1.5)

    def forward(self, input):
        logits = self.model(input)
        return self.temperature_scale(logits)

    def temperature_scale(self, logits):
        \"\"\"
        Perform temperature scaling on logits
        \"\"\"
        # Expand temperature to match the size of logits
        temperature = self.temperature.unsqueeze(1).expand(logits.size(0), logits.size(1))
        return logits / temperature

    # This function probably should live outside of this class, but whatever
    def set_temperature(self, valid_loader):
        \"\"\"
        Tune the tempearature of the model (using the validation set).
        We're going to set it to optimize NLL.
        valid_loader (DataLoader): validation set loader
        \"\"\"
        nll_criterion = nn.CrossEntropyLoss()
        ece_criterion = _ECELoss()

        # First: collect all the logits and labels for the validation set
        logits_list = []
        labels_list = []
        with torch.no_grad():
            for input, label in valid_loader:
                logits = self.model(input)
                logits_list.append(logits)
                labels_list.append(label)
            logits = torch.cat(logits_list)
            labels = torch.cat(labels_list)

        # Calculate NLL and ECE before temperature scaling
        before_temperature_nll = nll_criterion(logits, labels).item()
        before_temperature_ece = ece_criterion(logits, labels).item()
        print('Before temperature - NLL: %.3f, ECE: %.3f' % (before_temperature_nll, before_temperature_ece))
        record.append((before_temperature_nll, before_temperature_ece))

        # Next: optimize the temperature w.r.t. NLL
        optimizer = optim.LBFGS([self.temperature], lr=0.01, max_iter=50)

        def eval():
            optimizer.zero_grad()
            loss = nll_criterion(self.temperature_scale(logits), labels)
            loss.backward()
            return loss
        optimizer.step(eval)

        # Calculate NLL and ECE after temperature scaling
        after_temperature_nll = nll_criterion(self.temperature_scale(logits), labels).item()
        after_temperature_ece = ece_criterion(self.temperature_scale(logits), labels).item()
        print('Optimal temperature: %.3f' % self.temperature.item())
        print('After temperature - NLL: %.3f, ECE: %.3f' % (after_temperature_nll, after_temperature_ece))
        record.append((self.temperature.item(), after_temperature_nll, after_temperature_ece))

        return self


class _ECELoss(nn.Module):
    \"\"\"
    Calculates the Expected Calibration Error of a model.
    \"\"\"
    def __init__(self, n_bins=15):
        \"\"\"
        n_bins (int): number of confidence interval bins
        \"\"\"
        super(_ECELoss, self).__init__()
        bin_boundaries = torch.linspace(0, 1, n_bins + 1)
        self.bin_lowers = bin_boundaries[:-1]
        self.bin_uppers = bin_boundaries[1:]

    def forward(self, logits, labels):
        softmaxes = F.softmax(logits, dim=1)
        confidences, predictions = torch.max(softmaxes, 1)
        accuracies = predictions.eq(labels)

        ece = torch.zeros(1, device=logits.device)
        for bin_lower, bin_upper in zip(self.bin_lowers, self.bin_uppers):
            # Calculated |confidence - accuracy| in each bin
            in_bin = confidences.gt(bin_lower.item()) * confidences.le(bin_upper.item())
            prop_in_bin = in_bin.float().mean()
            if prop_in_bin.item() > 0:
                accuracy_in_bin = accuracies[in_bin].float().mean()
                avg_confidence_in_bin = confidences[in_bin].mean()
                ece += torch.abs(avg_confidence_in_bin - accuracy_in_bin) * prop_in_bin

        return ece


# -- a small classifier, overfit first so that it is overconfident --
net = nn.Sequential(nn.Linear(5, 32), nn.ReLU(), nn.Linear(32, 4))
initialize(net)
optimizer = optim.SGD(net.parameters(), lr=0.5, momentum=0.9)
train_x, train_y = torch.tensor(train_data[0]), torch.tensor(train_data[1])
for step in range(4):
    loss = F.cross_entropy(net(train_x), train_y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    record.append(loss.item())

valid_loader = [(torch.tensor(x), torch.tensor(y)) for x, y in valid_batches]
scaled_model = ModelWithTemperature(net)
scaled_model.set_temperature(valid_loader)
record.append(scaled_model(valid_loader[0][0]).detach().numpy())
"""

TEMPERATURE_STEPS = [
    (
        "\nimport torch\nfrom torch import nn, optim\nfrom torch.nn import functional as F\n",
        "\nimport retrograd as torch\nfrom retrograd import nn, optim\nfrom retrograd.nn import functional as F\n",
    ),
    (
        "    loss.backward()\n    optimizer.step()\n",
        "    grads = loss.backward()\n    optimizer.step(grads)\n",
    ),
    (
        "            loss.backward()\n            return loss\n",
        "            grads = loss.backward()\n            return loss, grads\n",
    ),
]


def test_temperature_scaling_calibrates_as_torch(capsys):
    rng = np.random.default_rng(9605)
    train_data = (rng.standard_normal((16, 5)).astype(np.float32), rng.integers(0, 4, 16))
    valid_batches = [
        (rng.standard_normal((8, 5)).astype(np.float32), rng.integers(0, 4, 8)) for _ in range(2)
    ]
    (theirs, ours), logs = runs_with_draws(
        TEMPERATURE_SOURCE,
        TEMPERATURE_STEPS,
        capsys,
        9605,
        train_data=train_data,
        valid_batches=valid_batches,
        initialize=initializer(),
    )
    assert len(theirs) == 4 + 2 + 1
    assert_records_agree(ours, theirs, rtol=1e-4, atol=1e-5)
    assert logs[0] == logs[1]


# -- DUE --------------------------------------------------------------------------------------------
DUE_SOURCE = '''
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.nn.functional import normalize
from torch.nn.utils.spectral_norm import (
    SpectralNorm,
    SpectralNormLoadStateDictPreHook,
    SpectralNormStateDictHook,
)


# -- due/layers/spectral_norm_fc.py --
class SpectralNormFC(SpectralNorm):
    def compute_weight(self, module, do_power_iteration: bool) -> torch.Tensor:
        weight = getattr(module, self.name + "_orig")
        u = getattr(module, self.name + "_u")
        v = getattr(module, self.name + "_v")
        weight_mat = self.reshape_weight_to_matrix(weight)

        if do_power_iteration:
            with torch.no_grad():
                for _ in range(self.n_power_iterations):
                    # Spectral norm of weight equals to `u^T W v`, where `u` and `v`
                    # are the first left and right singular vectors.
                    # This power iteration produces approximations of `u` and `v`.
                    v = normalize(
                        torch.mv(weight_mat.t(), u), dim=0, eps=self.eps, out=v
                    )
                    u = normalize(torch.mv(weight_mat, v), dim=0, eps=self.eps, out=u)
                if self.n_power_iterations > 0:
                    # See above on why we need to clone
                    u = u.clone(memory_format=torch.contiguous_format)
                    v = v.clone(memory_format=torch.contiguous_format)

        sigma = torch.dot(u, torch.mv(weight_mat, v))
        # soft normalization: only when sigma larger than coeff
        factor = torch.max(torch.ones(1).to(weight.device), sigma / self.coeff)
        weight = weight / factor

        # for logging
        sigma_log = getattr(module, self.name + "_sigma")
        sigma_log.copy_(sigma.detach())

        return weight

    @staticmethod
    def apply(
        module: torch.nn.Module,
        coeff: float,
        name: str,
        n_power_iterations: int,
        dim: int,
        eps: float,
    ) -> "SpectralNormFC":
        for k, hook in module._forward_pre_hooks.items():
            if isinstance(hook, SpectralNorm) and hook.name == name:
                raise RuntimeError(
                    "Cannot register two spectral_norm hooks on "
                    "the same parameter {}".format(name)
                )

        fn = SpectralNormFC(name, n_power_iterations, dim, eps)
        fn.coeff = coeff

        weight = module._parameters[name]

        with torch.no_grad():
            weight_mat = fn.reshape_weight_to_matrix(weight)
            h, w = weight_mat.size()
            # randomly initialize `u` and `v`
            u = normalize(weight.new_empty(h).normal_(0, 1), dim=0, eps=fn.eps)
            v = normalize(weight.new_empty(w).normal_(0, 1), dim=0, eps=fn.eps)

        delattr(module, fn.name)
        module.register_parameter(fn.name + "_orig", weight)
        # We still need to assign weight back as fn.name because all sorts of
        # things may assume that it exists, e.g., when initializing weights.
        # However, we can't directly assign as it could be an nn.Parameter and
        # gets added as a parameter. Instead, we register weight.data as a plain
        # attribute.
        setattr(module, fn.name, weight.data)
        module.register_buffer(fn.name + "_u", u)
        module.register_buffer(fn.name + "_v", v)
        sigma = torch.ones(1).to(weight.device)
        module.register_buffer(fn.name + "_sigma", sigma)

        module.register_forward_pre_hook(fn)

        module._register_state_dict_hook(SpectralNormStateDictHook(fn))
        module._register_load_state_dict_pre_hook(SpectralNormLoadStateDictPreHook(fn))
        return fn


def spectral_norm_fc(
    module,
    coeff: float,
    n_power_iterations: int = 1,
    name: str = "weight",
    eps: float = 1e-12,
    dim: int = None,
):
    """
    Args:
        module (nn.Module): containing module
        coeff (float, optional): coefficient to normalize to
        n_power_iterations (int, optional): number of power iterations to
            calculate spectral norm
        name (str, optional): name of weight parameter
        eps (float, optional): epsilon for numerical stability in
            calculating norms
        dim (int, optional): dimension corresponding to number of outputs,
            the default is ``0``, except for modules that are instances of
            ConvTranspose{1,2,3}d, when it is ``1``
    Returns:
        The original module with the spectral norm hook
    Example::
        >>> m = spectral_norm(nn.Linear(20, 40), 2.0)
        >>> m
        Linear(in_features=20, out_features=40, bias=True)
        >>> m.weight_u.size()
        torch.Size([40])
    """
    if dim is None:
        if isinstance(
            module,
            (
                torch.nn.ConvTranspose1d,
                torch.nn.ConvTranspose2d,
                torch.nn.ConvTranspose3d,
            ),
        ):
            dim = 1
        else:
            dim = 0
    SpectralNormFC.apply(module, coeff, name, n_power_iterations, dim, eps)
    return module


# -- due/fc_resnet.py --
class FCResNet(nn.Module):
    def __init__(
        self,
        input_dim,
        features,
        depth,
        spectral_normalization,
        coeff=0.95,
        n_power_iterations=1,
        dropout_rate=0.01,
        num_outputs=None,
        activation="relu",
    ):
        super().__init__()
        """
        ResFNN architecture

        Introduced in SNGP: https://arxiv.org/abs/2006.10108
        """
        self.first = nn.Linear(input_dim, features)
        self.residuals = nn.ModuleList(
            [nn.Linear(features, features) for i in range(depth)]
        )
        self.dropout = nn.Dropout(dropout_rate)

        if spectral_normalization:
            self.first = spectral_norm_fc(
                self.first, coeff=coeff, n_power_iterations=n_power_iterations
            )

            for i in range(len(self.residuals)):
                self.residuals[i] = spectral_norm_fc(
                    self.residuals[i],
                    coeff=coeff,
                    n_power_iterations=n_power_iterations,
                )

        self.num_outputs = num_outputs
        if num_outputs is not None:
            self.last = nn.Linear(features, num_outputs)

        if activation == "relu":
            self.activation = F.relu
        elif activation == "elu":
            self.activation = F.elu
        else:
            raise ValueError("That acivation is unknown")

    def forward(self, x):
        x = self.first(x)

        for residual in self.residuals:
            x = x + self.dropout(self.activation(residual(x)))

        if self.num_outputs is not None:
            x = self.last(x)

        return x


# -- toy_regression.ipynb's deterministic model (DUE = False), made small --
model = FCResNet(
    input_dim=1, features=16, depth=2, spectral_normalization=True, coeff=0.95,
    n_power_iterations=1, dropout_rate=0.0, num_outputs=1,
)
initialize(model)
record.append(list(model.state_dict()))
optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
X_train, y_train = torch.tensor(data_x), torch.tensor(data_y)
for step in range(4):
    model.train()
    optimizer.zero_grad()
    y_pred = model(X_train)
    loss = F.mse_loss(y_pred, y_train)
    loss.backward()
    optimizer.step()
    record.append(loss.item())
    record.append({name: buf.numpy().copy() for name, buf in model.named_buffers()})
record.append(params_of(model))
model.eval()
with torch.no_grad():
    record.append(model(X_train).numpy())
record.append({name: buf.numpy().copy() for name, buf in model.named_buffers()})
'''

DUE_STEPS = [
    IMPORTS,
    (
        "    loss.backward()\n    optimizer.step()\n",
        "    grads = loss.backward()\n    optimizer.step(grads)\n",
    ),
]


def test_due_spectral_norm_fc_resnet_trains_as_torch(capsys):
    rng = np.random.default_rng(9606)
    data_x = rng.uniform(-3, 3, (12, 1)).astype(np.float32)
    data_y = (np.sin(data_x) + 0.1 * rng.standard_normal((12, 1))).astype(np.float32)
    (theirs, ours), _ = runs_with_draws(
        DUE_SOURCE,
        DUE_STEPS,
        capsys,
        9606,
        data_x=data_x,
        data_y=data_y,
        initialize=initializer(),
        params_of=params_of,
    )
    assert len(theirs) == 1 + 4 * 2 + 1 + 2
    assert_records_agree(ours, theirs, rtol=1e-4, atol=1e-5)


# -- the defects the DUE port met -------------------------------------------------------------------
def test_normalize_writes_its_out_argument_as_torch():
    # DUE's power iteration keeps its vectors by ``normalize(..., out=v)`` into the module's
    # buffers; the out= argument was accepted and ignored, so the buffers never moved
    rng = np.random.default_rng(9607)
    matrix = rng.standard_normal((3, 4)).astype(np.float32)
    results = []
    for lib in (torch, rg):
        layer = lib.nn.Linear(4, 3)
        layer.register_buffer("weight_u", lib.ones(3))
        layer.register_buffer("weight_v", lib.ones(2))  # resized, as torch resizes out
        with lib.no_grad():
            u = layer.weight_u
            v = lib.nn.functional.normalize(lib.tensor(matrix).t().mv(u), dim=0, out=layer.weight_v)
            assert v is layer.weight_v
        results.append(np.array(layer.weight_v.numpy(), copy=True))
    np.testing.assert_allclose(results[1], results[0], rtol=1e-6, atol=1e-7)
    # as torch's, not where the result would need a graph; the out tensor is left as it was
    x = rg.tensor(matrix[0], requires_grad=True)
    out = rg.zeros(4)
    with pytest.raises(rg.AutodiffError, match=r"normalize: .*out="):
        rg.nn.functional.normalize(x, dim=0, out=out)
    assert out.tolist() == [0.0] * 4
    with pytest.raises(RuntimeError, match=r"out=\.\.\. arguments don't support automatic"):
        torch.nn.functional.normalize(
            torch.tensor(matrix[0], requires_grad=True), dim=0, out=torch.zeros(4)
        )
    with pytest.raises(rg.DTypeError, match="normalize: out must be a tensor"):
        rg.nn.functional.normalize(x.detach(), dim=0, out=np.zeros(4))


def test_spectral_norm_hook_class_loads_a_version_0_state_dict_as_torch():
    # ``torch.nn.utils.spectral_norm.SpectralNorm`` and its state-dict hooks (registered by
    # ``_register_load_state_dict_pre_hook``) could not be imported: a state dict of
    # version 0 (``weight`` and ``weight_u`` saved, no ``weight_v``) gets its ``v`` solved
    from torch.nn.utils.spectral_norm import SpectralNorm as TorchSpectralNorm

    from retrograd.nn.utils.spectral_norm import SpectralNorm as RgSpectralNorm

    rng = np.random.default_rng(9608)
    weight = rng.standard_normal((4, 1, 2)).astype(np.float32)  # (a 4x2 matrix: full rank)
    u = rng.standard_normal(4).astype(np.float32)
    u /= np.linalg.norm(u)
    sigma = 1.7
    legacy = {"weight_orig": weight, "weight": weight / sigma, "weight_u": u, "bias": np.zeros(4)}
    loaded = []
    for lib, spectral in ((torch, TorchSpectralNorm), (rg, RgSpectralNorm)):
        conv = lib.nn.Conv1d(1, 4, 2)
        spectral.apply(conv, "weight", 1, 0, 1e-12)
        conv.load_state_dict({k: lib.tensor(v, dtype=lib.float32) for k, v in legacy.items()})
        conv.eval()
        out = conv(lib.tensor(np.ones((1, 1, 3), np.float32)))
        loaded.append((conv.weight_v.numpy().copy(), conv.weight.detach().numpy().copy()))
        # the module still pickles whole (torch.save of a model), its hooks with it
        clone = pickle.loads(pickle.dumps(conv))
        np.testing.assert_array_equal(
            clone(lib.ones(1, 1, 3)).detach().numpy(), conv(lib.ones(1, 1, 3)).detach().numpy()
        )
        assert sorted(conv.state_dict()) == ["bias", "weight_orig", "weight_u", "weight_v"]
        assert conv.state_dict()._metadata[""]["spectral_norm"] == {"weight.version": 1}
        assert tuple(out.shape) == (1, 4, 2)
    for mine, reference in zip(loaded[1], loaded[0]):
        np.testing.assert_allclose(mine, reference, rtol=1e-4, atol=1e-5)
    with pytest.raises(rg.InvalidArgumentError, match="Cannot register two spectral_norm"):
        layer = rg.nn.Linear(2, 2)
        RgSpectralNorm.apply(layer, "weight", 1, 0, 1e-12)
        RgSpectralNorm.apply(layer, "weight", 1, 0, 1e-12)


# -- DUE's SNGP ------------------------------------------------------------------------------------
SNGP_SOURCE = (
    DUE_SOURCE.split("# -- toy_regression.ipynb")[0]
    + """
import math


# -- due/sngp.py --
def random_ortho(n, m):
    q, _ = torch.linalg.qr(torch.randn(n, m))
    return q


class RandomFourierFeatures(nn.Module):
    def __init__(self, in_dim, num_random_features, feature_scale=None):
        super().__init__()
        if feature_scale is None:
            feature_scale = math.sqrt(num_random_features / 2)

        self.register_buffer("feature_scale", torch.tensor(feature_scale))

        if num_random_features <= in_dim:
            W = random_ortho(in_dim, num_random_features)
        else:
            # generate blocks of orthonormal rows which are not neccesarily orthonormal
            # to each other.
            dim_left = num_random_features
            ws = []
            while dim_left > in_dim:
                ws.append(random_ortho(in_dim, in_dim))
                dim_left -= in_dim
            ws.append(random_ortho(in_dim, dim_left))
            W = torch.cat(ws, 1)

        # From: https://github.com/google/edward2/blob/d672c93b179bfcc99dd52228492c53d38cf074ba/edward2/tensorflow/initializers.py#L807-L817
        feature_norm = torch.randn(W.shape) ** 2
        W = W * feature_norm.sum(0).sqrt()
        self.register_buffer("W", W)

        b = torch.empty(num_random_features).uniform_(0, 2 * math.pi)
        self.register_buffer("b", b)

    def forward(self, x):
        k = torch.cos(x @ self.W + self.b)
        k = k / self.feature_scale

        return k


class Laplace(nn.Module):
    def __init__(
        self,
        feature_extractor,
        num_deep_features,
        num_gp_features,
        normalize_gp_features,
        num_random_features,
        num_outputs,
        num_data,
        train_batch_size,
        ridge_penalty=1.0,
        feature_scale=None,
        mean_field_factor=None,  # required for classification problems
    ):
        super().__init__()
        self.feature_extractor = feature_extractor
        self.mean_field_factor = mean_field_factor
        self.ridge_penalty = ridge_penalty
        self.train_batch_size = train_batch_size

        if num_gp_features > 0:
            self.num_gp_features = num_gp_features
            self.register_buffer(
                "random_matrix",
                torch.normal(0, 0.05, (num_gp_features, num_deep_features)),
            )
            self.jl = lambda x: nn.functional.linear(x, self.random_matrix)
        else:
            self.num_gp_features = num_deep_features
            self.jl = nn.Identity()

        self.normalize_gp_features = normalize_gp_features
        if normalize_gp_features:
            self.normalize = nn.LayerNorm(num_gp_features)

        self.rff = RandomFourierFeatures(
            num_gp_features, num_random_features, feature_scale
        )
        self.beta = nn.Linear(num_random_features, num_outputs)

        self.num_data = num_data
        self.register_buffer("seen_data", torch.tensor(0))

        precision = torch.eye(num_random_features) * self.ridge_penalty
        self.register_buffer("precision", precision)

        self.recompute_covariance = True
        self.register_buffer("covariance", torch.eye(num_random_features))

    def reset_precision_matrix(self):
        identity = torch.eye(self.precision.shape[0], device=self.precision.device)
        self.precision = identity * self.ridge_penalty
        self.seen_data = torch.tensor(0)
        self.recompute_covariance = True

    def mean_field_logits(self, logits, pred_cov):
        # Mean-Field approximation as alternative to MC integration of Gaussian-Softmax
        # Based on: https://arxiv.org/abs/2006.07584

        logits_scale = torch.sqrt(1.0 + torch.diag(pred_cov) * self.mean_field_factor)
        if self.mean_field_factor > 0:
            logits = logits / logits_scale.unsqueeze(-1)

        return logits

    def forward(self, x):
        f = self.feature_extractor(x)
        f_reduc = self.jl(f)
        if self.normalize_gp_features:
            f_reduc = self.normalize(f_reduc)

        k = self.rff(f_reduc)

        pred = self.beta(k)

        if self.training:
            precision_minibatch = k.t() @ k
            self.precision += precision_minibatch
            self.seen_data += x.shape[0]

            assert (
                self.seen_data <= self.num_data
            ), "Did not reset precision matrix at start of epoch"
        else:
            assert self.seen_data > (
                self.num_data - self.train_batch_size
            ), "Not seen sufficient data for precision matrix"

            if self.recompute_covariance:
                with torch.no_grad():
                    eps = 1e-7
                    jitter = eps * torch.eye(
                        self.precision.shape[1],
                        device=self.precision.device,
                    )
                    u, info = torch.linalg.cholesky_ex(self.precision + jitter)
                    assert (info == 0).all(), "Precision matrix inversion failed!"
                    torch.cholesky_inverse(u, out=self.covariance)

                self.recompute_covariance = False

            with torch.no_grad():
                pred_cov = k @ ((self.covariance @ k.t()) * self.ridge_penalty)

            if self.mean_field_factor is None:
                return pred, pred_cov
            else:
                return self.mean_field_logits(pred, pred_cov)

        return pred


# -- train_sngp's step, its precision reset at each epoch's start, then the evaluation --
for num_outputs, mean_field_factor in ((1, None), (3, math.pi / 8)):
    feature_extractor = FCResNet(
        input_dim=2, features=8, depth=1, spectral_normalization=True, coeff=0.95,
        n_power_iterations=1, dropout_rate=0.0,
    )
    model = Laplace(
        feature_extractor, num_deep_features=8, num_gp_features=4, normalize_gp_features=True,
        num_random_features=12, num_outputs=num_outputs, num_data=12, train_batch_size=6,
        mean_field_factor=mean_field_factor,
    )
    initialize(model)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2, weight_decay=5e-4)
    if mean_field_factor is None:
        loss_fn = lambda y_pred, y: F.mse_loss(y_pred[:, 0], y)
        targets = [torch.tensor(y) for y in values]
    else:
        loss_fn = F.cross_entropy
        targets = [torch.tensor(y) for y in labels]
    for epoch in range(2):
        model.reset_precision_matrix()
        for x, y in zip(inputs, targets):
            model.train()
            optimizer.zero_grad()
            y_pred = model(torch.tensor(x))
            loss = loss_fn(y_pred, y)
            loss.backward()
            optimizer.step()
            record.append(loss.item())
        record.append(state_of(model))
    model.eval()
    with torch.no_grad():
        out = model(torch.tensor(inputs[0]))
    if mean_field_factor is None:
        record.append(out[0].numpy())
        record.append(out[1].numpy())
    else:
        record.append(F.softmax(out, dim=1).numpy())
    record.append(state_of(model))
"""
)


SNGP_STEPS = [
    IMPORTS,
    (
        "            loss.backward()\n            optimizer.step()\n",
        "            grads = loss.backward()\n            optimizer.step(grads)\n",
    ),
]


def test_due_sngp_laplace_head_trains_and_predicts_as_torch(capsys):
    rng = np.random.default_rng(9609)
    inputs = [rng.standard_normal((6, 2)).astype(np.float32) for _ in range(2)]
    values = [np.sin(x.sum(1)).astype(np.float32) for x in inputs]
    labels = [rng.integers(0, 3, 6) for _ in range(2)]
    (theirs, ours), _ = runs_with_draws(
        SNGP_SOURCE,
        SNGP_STEPS,
        capsys,
        9609,
        inputs=inputs,
        values=values,
        labels=labels,
        initialize=initializer(),
        state_of=state_of,
    )
    assert len(theirs) == 2 * 2 * 3 + 3 + 2
    assert_records_agree(ours, theirs, rtol=1e-4, atol=1e-5)


def test_cholesky_inverse_writes_its_out_argument_as_torch():
    # SNGP's ``torch.cholesky_inverse(u, out=self.covariance)`` was refused ("out= is not
    # supported"); it now writes the buffer, as torch's
    rng = np.random.default_rng(9610)
    a = rng.standard_normal((4, 3)).astype(np.float32)
    precision = a.T @ a + np.eye(3, dtype=np.float32)
    results = []
    for lib in (torch, rg):
        head = lib.nn.Module()
        head.register_buffer("covariance", lib.eye(3))
        u, info = lib.linalg.cholesky_ex(lib.tensor(precision))
        assert (info == 0).all()
        assert lib.cholesky_inverse(u, out=head.covariance) is head.covariance
        results.append(head.covariance.numpy().copy())
    np.testing.assert_allclose(results[1], results[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(results[1], np.linalg.inv(precision), rtol=1e-4, atol=1e-5)
    # the functions torch gives no out= still refuse it, by name
    with pytest.raises(rg.InvalidArgumentError, match="flip: out= is not supported"):
        rg.flip(rg.ones(2), [0], out=rg.zeros(2))
