# ruff: noqa: E501  (the programs are kept as their authors wrote them)
"""Real PyTorch programs ported to retrograd, continued from ``tests/test_real_ports_63.py`` (the
harness: ``tests/real_ports.py``):

- the spiking network of fzenke/spytorch (``notebooks/SpyTorchTutorial1.ipynb``), smaller (10
  inputs, 8 hidden units, 10 time steps): ``SurrGradSpike(torch.autograd.Function)`` with a
  class attribute ``scale``, ``out[input > 0] = 1.0`` on ``torch.zeros_like``, the fast-sigmoid
  surrogate in ``backward``, ``spike_fn = SurrGradSpike.apply``, weights made by ``torch.empty
  (..., requires_grad=True)`` and ``torch.nn.init.normal_`` (overwritten with shared values in
  both runs), ``torch.einsum("abc,cd->abd", (inputs, w1))`` with a tuple of operands, the
  detached reset, the leaky integrate-and-fire loops stacked by ``torch.stack(..., dim=1)``,
  ``torch.max(output, 1)`` over time, ``nn.LogSoftmax``/``nn.NLLLoss`` and the spike-count
  regularizers, Adam over a list of plain tensors; the input spikes from ``torch.rand`` (one
  seeded stream in both runs).
- AdaIN style transfer as naoto0804/pytorch-AdaIN writes it (``function.py``'s
  ``calc_mean_std``/``adaptive_instance_normalization``, ``net.py``'s ``decoder``, ``vgg`` and
  ``Net``, ``train.py``'s loop and ``adjust_learning_rate``, ``test.py``'s ``style_transfer``
  with ``interpolation_weights``), narrower and three encoder stages where it has four:
  ``nn.ReflectionPad2d((1, 1, 1, 1))``, ``nn.Upsample(scale_factor=2, mode='nearest')``,
  ``MaxPool2d(..., ceil_mode=True)``, ``nn.Sequential(*enc_layers[4:11])`` over
  ``list(encoder.children())``, the frozen encoder (``param.requires_grad = False``, and the
  ``assert (target.requires_grad is False)`` it checks), ``feat.view(N, C, -1).var(dim=2)``,
  ``.expand(size)`` of ``torch.Size`` values, ``torch.FloatTensor(1, C, H, W).zero_()``.
- the DeepSDF auto-decoder (facebookresearch/DeepSDF ``networks/deep_sdf_decoder.py``,
  ``deep_sdf/workspace.py``'s schedules and ``train_deep_sdf.py``'s loop), small: layers made by
  ``setattr(self, "lin" + str(layer), nn.utils.weight_norm(nn.Linear(...)))`` and found by
  ``getattr``, the latent code concatenated back at ``latent_in``, ``nn.Embedding(num_scenes,
  latent_size, max_norm=code_bound)`` (codes renormalized in place by the lookups),
  ``torch.nn.init.normal_(lat_vecs.weight.data, ...)``, two Adam parameter groups whose rates
  ``StepLearningRateSchedule`` writes, ``torch.chunk`` of the samples and of
  ``indices.unsqueeze(-1).repeat(1, n).view(-1)``, the gradients of the chunks accumulated
  (ported as a sum of ``Gradients``), ``torch.clamp`` of the SDF, ``L1Loss(reduction="sum")``
  and the code regularizer ``torch.sum(torch.norm(batch_vecs, dim=1))``,
  ``clip_grad_norm_`` of the decoder alone.
- the relation network of kimhc6028/relational-networks (``model.py``'s ``ConvInputModel``,
  ``FCOutputModel``, ``BasicModel``, ``RN`` binary and ternary; ``main.py``'s
  ``tensor_data``/``cvt_data_axis``/``train``/``test``), narrower on 20x20 images (2x2 objects
  where it has 5x5): ``torch.FloatTensor(bs, 4, 2)`` filled by ``.data.copy_(torch.from_numpy
  (...))`` of a float64 array, ``Variable``, every pair (and triple) of objects by
  ``torch.unsqueeze``/``repeat``/``torch.cat`` over 4-d and 5-d tensors, the inputs written by
  ``input_img.data.resize_(img.size()).copy_(img)``, ``output.data.max(1)[1]``,
  ``pred.eq(label.data).cpu().sum()`` and ``correct * 100. / len(label)``.
- DeepDream as eriklindernoren/PyTorch-Deep-Dream writes it (``deep_dream.py``, ``utils.py``),
  over a small VGG ``features``: ``Variable(torch.FloatTensor(image), requires_grad=True)``,
  ``out.norm()`` ascended with the step ``lr / np.abs(image.grad.data.numpy()).mean()``,
  ``image.data += ...`` and ``image.data = clip(image.data)`` with ``image_tensor[0, c] =
  torch.clamp(...)``, octaves by ``scipy.ndimage.zoom`` and ``print(network)``.
- likelihood fits from the distributions' boundary values: a REINFORCE update of a Bernoulli
  policy whose head starts at zero (``nn.init.zeros_``: every logit 0), a Dirichlet's
  concentration fitted from ``torch.ones`` (the flat prior), a Gamma fitted from concentration
  1 (the exponential distribution), and a binomial GLM from zero weights under LBFGS.

Defects found and fixed: at a zero logit, ``Bernoulli.log_prob``/``entropy``,
``ContinuousBernoulli.log_prob``, ``Binomial.log_prob`` and ``Geometric.entropy`` took the
one-sided gradients of their written-out ``clamp(min=0) + log1p(exp(-|x|))`` (the gradient of
``log_prob`` in the logit was ``-value``, not torch's ``sigmoid(0) - value``), so a policy or
classifier started from zero logits trained differently from torch from its first step; and
``Gamma``/``Chi2``/``Beta``/``Dirichlet.log_prob`` cut the gradient of ``xlogy(c - 1, x)`` at a
concentration of exactly 1, so a concentration fitted from ``torch.ones`` got a wrong first
gradient.
"""

from __future__ import annotations

import argparse
import random

import numpy as np
import pytest
import torch

import retrograd as rg
from real_ports import SharedDraws, assert_records_agree, initializer, port, run_source


@pytest.fixture(autouse=True)
def _seeded():
    """Torch's initial weights (which both runs start from) and the programs' draws from
    fixed seeds."""
    torch.manual_seed(0)
    np.random.seed(0)
    random.seed(0)
    rg.seed(0)


SNN_SOURCE = """
import torch
import torch.nn as nn
import numpy as np

dtype = torch.float
device = torch.device("cpu")

nb_inputs  = 10
nb_hidden  = 8
nb_outputs = 2

time_step = 1e-3
nb_steps  = 10

batch_size = 6

freq = 60 # Hz
prob = freq*time_step
mask = torch.rand((batch_size,nb_steps,nb_inputs), device=device, dtype=dtype)
x_data = torch.zeros((batch_size,nb_steps,nb_inputs), device=device, dtype=dtype, requires_grad=False)
x_data[mask<prob] = 1.0

y_data = torch.tensor(1*(np.random.rand(batch_size)<0.5), device=device)

tau_mem = 10e-3
tau_syn = 5e-3

alpha   = float(np.exp(-time_step/tau_syn))
beta    = float(np.exp(-time_step/tau_mem))

weight_scale = 7*(1.0-beta) # this should give us some spikes to begin with

w1 = torch.empty((nb_inputs, nb_hidden),  device=device, dtype=dtype, requires_grad=True)
torch.nn.init.normal_(w1, mean=0.0, std=weight_scale/np.sqrt(nb_inputs))

w2 = torch.empty((nb_hidden, nb_outputs), device=device, dtype=dtype, requires_grad=True)
torch.nn.init.normal_(w2, mean=0.0, std=weight_scale/np.sqrt(nb_hidden))

print("init done")


class SurrGradSpike(torch.autograd.Function):
    \"\"\"
    Here we implement our spiking nonlinearity which also implements
    the surrogate gradient. By subclassing torch.autograd.Function,
    we will be able to use all of PyTorch's autograd functionality.
    Here we use the normalized negative part of a fast sigmoid
    as this was done in Zenke & Ganguli (2018).
    \"\"\"

    scale = 100.0 # controls steepness of surrogate gradient

    @staticmethod
    def forward(ctx, input):
        \"\"\"
        In the forward pass we compute a step function of the input Tensor
        and return it. ctx is a context object that we use to stash information which
        we need to later backpropagate our error signals. To achieve this we use the
        ctx.save_for_backward method.
        \"\"\"
        ctx.save_for_backward(input)
        out = torch.zeros_like(input)
        out[input > 0] = 1.0
        return out

    @staticmethod
    def backward(ctx, grad_output):
        \"\"\"
        In the backward pass we receive a Tensor we need to compute the
        surrogate gradient of the loss with respect to the input.
        Here we use the normalized negative part of a fast sigmoid
        as this was done in Zenke & Ganguli (2018).
        \"\"\"
        input, = ctx.saved_tensors
        grad_input = grad_output.clone()
        grad = grad_input/(SurrGradSpike.scale*torch.abs(input)+1.0)**2
        return grad

# here we overwrite our naive spike function by the "SurrGradSpike" nonlinearity which implements a surrogate gradient
spike_fn  = SurrGradSpike.apply


def run_snn(inputs):
    h1 = torch.einsum("abc,cd->abd", (inputs, w1))
    syn = torch.zeros((batch_size,nb_hidden), device=device, dtype=dtype)
    mem = torch.zeros((batch_size,nb_hidden), device=device, dtype=dtype)

    mem_rec = []
    spk_rec = []

    # Compute hidden layer activity
    for t in range(nb_steps):
        mthr = mem-1.0
        out = spike_fn(mthr)
        rst = out.detach() # We do not want to backprop through the reset

        new_syn = alpha*syn +h1[:,t]
        new_mem = (beta*mem +syn)*(1.0-rst)

        mem_rec.append(mem)
        spk_rec.append(out)

        mem = new_mem
        syn = new_syn

    mem_rec = torch.stack(mem_rec,dim=1)
    spk_rec = torch.stack(spk_rec,dim=1)

    # Readout layer
    h2= torch.einsum("abc,cd->abd", (spk_rec, w2))
    flt = torch.zeros((batch_size,nb_outputs), device=device, dtype=dtype)
    out = torch.zeros((batch_size,nb_outputs), device=device, dtype=dtype)
    out_rec = [out]
    for t in range(nb_steps):
        new_flt = alpha*flt +h2[:,t]
        new_out = beta*out +flt

        flt = new_flt
        out = new_out

        out_rec.append(out)

    out_rec = torch.stack(out_rec,dim=1)
    other_recs = [mem_rec, spk_rec]
    return out_rec, other_recs


def train(x_data, y_data, lr=1e-3, nb_epochs=10):
    params = [w1,w2]
    optimizer = torch.optim.Adam(params, lr=lr, betas=(0.9,0.999))

    log_softmax_fn = nn.LogSoftmax(dim=1)
    loss_fn = nn.NLLLoss()

    loss_hist = []
    for e in range(nb_epochs):
        output,recs = run_snn(x_data)
        _,spks=recs
        m,_=torch.max(output,1)
        log_p_y = log_softmax_fn(m)

        # Here we set up our regularizer loss
        # The strength paramters here are merely a guess and there should be ample room for improvement by
        # tuning these paramters.
        reg_loss = 1e-5*torch.sum(spks) # L1 loss on total number of spikes
        reg_loss += 1e-5*torch.mean(torch.sum(torch.sum(spks,dim=0),dim=0)**2) # L2 loss on spikes per neuron

        # Here we combine supervised loss and the regularizer
        loss_val = loss_fn(log_p_y, y_data) + reg_loss

        optimizer.zero_grad()
        loss_val.backward()
        optimizer.step()
        loss_hist.append(loss_val.item())
        record.append(float(spks.sum()))
    return loss_hist


def compute_classification_accuracy(x_data, y_data):
    \"\"\" Computes classification accuracy on supplied data in batches. \"\"\"
    output,_ = run_snn(x_data)
    m,_= torch.max(output,1) # max over time
    _,am=torch.max(m,1)      # argmax over output units
    tmp = np.mean((y_data==am).detach().cpu().numpy()) # compare to labels
    return tmp
"""

SNN_STEPS = [
    (
        "import torch\nimport torch.nn as nn\n",
        "import retrograd as torch\nimport retrograd.nn as nn\n",
    ),
    (
        "        loss_val.backward()\n        optimizer.step()\n",
        "        grads = loss_val.backward()\n        optimizer.step(grads)\n",
    ),
]


def test_surrogate_gradient_snn_trains_as_torch(capsys):
    rng = np.random.default_rng(6401)
    w1 = (rng.standard_normal((10, 8)) * 0.7).astype(np.float32)
    w2 = (rng.standard_normal((8, 2)) * 0.5).astype(np.float32)
    records, logs = [], []
    for lib in (torch, rg):
        record = []
        np.random.seed(6401)
        text = SNN_SOURCE if lib is torch else port(SNN_SOURCE, SNN_STEPS)
        with SharedDraws(lib, 6401):
            names = run_source(text, lib, record=record)
        # (torch's and retrograd's ``normal_`` draw different numbers: both start from these)
        with lib.no_grad():
            names["w1"].copy_(lib.tensor(w1))
            names["w2"].copy_(lib.tensor(w2))
        record.append(names["train"](names["x_data"], names["y_data"], lr=2e-2, nb_epochs=4))
        record.append(
            float(names["compute_classification_accuracy"](names["x_data"], names["y_data"]))
        )
        record.append(
            {"w1": names["w1"].detach().numpy().copy(), "w2": names["w2"].detach().numpy().copy()}
        )
        records.append(record)
        logs.append(capsys.readouterr().out)
    assert logs[1] == logs[0] == "init done\n"
    assert records[0][0] > 0  # the hidden layer spikes
    assert_records_agree(records[1], records[0], rtol=1e-4, atol=1e-5)


ADAIN_SOURCE = """
import torch
import torch.nn as nn


def calc_mean_std(feat, eps=1e-5):
    # eps is a small value added to the variance to avoid divide-by-zero.
    size = feat.size()
    assert (len(size) == 4)
    N, C = size[:2]
    feat_var = feat.view(N, C, -1).var(dim=2) + eps
    feat_std = feat_var.sqrt().view(N, C, 1, 1)
    feat_mean = feat.view(N, C, -1).mean(dim=2).view(N, C, 1, 1)
    return feat_mean, feat_std


def adaptive_instance_normalization(content_feat, style_feat):
    assert (content_feat.size()[:2] == style_feat.size()[:2])
    size = content_feat.size()
    style_mean, style_std = calc_mean_std(style_feat)
    content_mean, content_std = calc_mean_std(content_feat)

    normalized_feat = (content_feat - content_mean.expand(
        size)) / content_std.expand(size)
    return normalized_feat * style_std.expand(size) + style_mean.expand(size)


decoder = nn.Sequential(
    nn.ReflectionPad2d((1, 1, 1, 1)),
    nn.Conv2d(16, 8, (3, 3)),
    nn.ReLU(),
    nn.Upsample(scale_factor=2, mode='nearest'),
    nn.ReflectionPad2d((1, 1, 1, 1)),
    nn.Conv2d(8, 8, (3, 3)),
    nn.ReLU(),
    nn.ReflectionPad2d((1, 1, 1, 1)),
    nn.Conv2d(8, 4, (3, 3)),
    nn.ReLU(),
    nn.Upsample(scale_factor=2, mode='nearest'),
    nn.ReflectionPad2d((1, 1, 1, 1)),
    nn.Conv2d(4, 4, (3, 3)),
    nn.ReLU(),
    nn.ReflectionPad2d((1, 1, 1, 1)),
    nn.Conv2d(4, 3, (3, 3)),
)

vgg = nn.Sequential(
    nn.Conv2d(3, 3, (1, 1)),
    nn.ReflectionPad2d((1, 1, 1, 1)),
    nn.Conv2d(3, 4, (3, 3)),
    nn.ReLU(),  # relu1-1
    nn.ReflectionPad2d((1, 1, 1, 1)),
    nn.Conv2d(4, 4, (3, 3)),
    nn.ReLU(),  # relu1-2
    nn.MaxPool2d((2, 2), (2, 2), (0, 0), ceil_mode=True),
    nn.ReflectionPad2d((1, 1, 1, 1)),
    nn.Conv2d(4, 8, (3, 3)),
    nn.ReLU(),  # relu2-1
    nn.ReflectionPad2d((1, 1, 1, 1)),
    nn.Conv2d(8, 8, (3, 3)),
    nn.ReLU(),  # relu2-2
    nn.MaxPool2d((2, 2), (2, 2), (0, 0), ceil_mode=True),
    nn.ReflectionPad2d((1, 1, 1, 1)),
    nn.Conv2d(8, 16, (3, 3)),
    nn.ReLU(),  # relu3-1
)


class Net(nn.Module):
    def __init__(self, encoder, decoder):
        super(Net, self).__init__()
        enc_layers = list(encoder.children())
        self.enc_1 = nn.Sequential(*enc_layers[:4])  # input -> relu1_1
        self.enc_2 = nn.Sequential(*enc_layers[4:11])  # relu1_1 -> relu2_1
        self.enc_3 = nn.Sequential(*enc_layers[11:18])  # relu2_1 -> relu3_1
        self.decoder = decoder
        self.mse_loss = nn.MSELoss()

        # fix the encoder
        for name in ['enc_1', 'enc_2', 'enc_3']:
            for param in getattr(self, name).parameters():
                param.requires_grad = False

    # extract relu1_1, relu2_1, relu3_1 from input image
    def encode_with_intermediate(self, input):
        results = [input]
        for i in range(3):
            func = getattr(self, 'enc_{:d}'.format(i + 1))
            results.append(func(results[-1]))
        return results[1:]

    # extract relu3_1 from input image
    def encode(self, input):
        for i in range(3):
            input = getattr(self, 'enc_{:d}'.format(i + 1))(input)
        return input

    def calc_content_loss(self, input, target):
        assert (input.size() == target.size())
        assert (target.requires_grad is False)
        return self.mse_loss(input, target)

    def calc_style_loss(self, input, target):
        assert (input.size() == target.size())
        assert (target.requires_grad is False)
        input_mean, input_std = calc_mean_std(input)
        target_mean, target_std = calc_mean_std(target)
        return self.mse_loss(input_mean, target_mean) + \\
               self.mse_loss(input_std, target_std)

    def forward(self, content, style, alpha=1.0):
        assert 0 <= alpha <= 1
        style_feats = self.encode_with_intermediate(style)
        content_feat = self.encode(content)
        t = adaptive_instance_normalization(content_feat, style_feats[-1])
        t = alpha * t + (1 - alpha) * content_feat

        g_t = self.decoder(t)
        g_t_feats = self.encode_with_intermediate(g_t)

        loss_c = self.calc_content_loss(g_t_feats[-1], t)
        loss_s = self.calc_style_loss(g_t_feats[0], style_feats[0])
        for i in range(1, 3):
            loss_s += self.calc_style_loss(g_t_feats[i], style_feats[i])
        return loss_c, loss_s


def adjust_learning_rate(optimizer, iteration_count):
    \"\"\"Imitating the original implementation\"\"\"
    lr = args.lr / (1.0 + args.lr_decay * iteration_count)
    for param_group in optimizer.param_groups:
        param_group['lr'] = lr


def style_transfer(vgg, decoder, content, style, alpha=1.0,
                   interpolation_weights=None):
    assert (0.0 <= alpha <= 1.0)
    content_f = vgg(content)
    style_f = vgg(style)
    if interpolation_weights:
        _, C, H, W = content_f.size()
        feat = torch.FloatTensor(1, C, H, W).zero_().to(device)
        base_feat = adaptive_instance_normalization(content_f, style_f)
        for i, w in enumerate(interpolation_weights):
            feat = feat + w * base_feat[i:i + 1]
        content_f = content_f[0:1]
    else:
        feat = adaptive_instance_normalization(content_f, style_f)
    feat = feat * alpha + content_f * (1 - alpha)
    return decoder(feat)


def main(content_iter, style_iter, test_content, test_style):
    device = torch.device('cpu')
    initialize(vgg)
    initialize(decoder)
    network = Net(vgg, decoder)
    network.train()
    network.to(device)
    optimizer = torch.optim.Adam(network.decoder.parameters(), lr=args.lr)

    for i in range(args.max_iter):
        adjust_learning_rate(optimizer, iteration_count=i)
        content_images = next(content_iter).to(device)
        style_images = next(style_iter).to(device)
        loss_c, loss_s = network(content_images, style_images)
        loss_c = args.content_weight * loss_c
        loss_s = args.style_weight * loss_s
        loss = loss_c + loss_s

        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

        print('loss_content', round(loss_c.item(), 3), 'loss_style', round(loss_s.item(), 3))
        record.append([loss_c.item(), loss_s.item()])

    decoder.eval()
    vgg.eval()
    with torch.no_grad():
        output = style_transfer(nn.Sequential(*list(vgg.children())[:18]), decoder, test_content, test_style, 0.6)
        record.append(output.numpy())
        interpolated = style_transfer(nn.Sequential(*list(vgg.children())[:18]), decoder, test_content.expand(2, -1, -1, -1), torch.cat([test_style, test_style.flip(3)]), 1.0, [0.3, 0.7])
        record.append(interpolated.numpy())
    record.append({k: v.numpy().copy() for k, v in decoder.state_dict().items()})
"""

ADAIN_STEPS = [
    (
        "import torch\nimport torch.nn as nn\n",
        "import retrograd as torch\nimport retrograd.nn as nn\n",
    ),
    (
        "        loss.backward()\n        optimizer.step()\n",
        "        grads = loss.backward()\n        optimizer.step(grads)\n",
    ),
]


def test_adain_style_transfer_trains_as_torch(capsys):
    rng = np.random.default_rng(6402)
    contents = rng.uniform(size=(3, 2, 3, 8, 8)).astype(np.float32)
    styles = rng.uniform(size=(3, 2, 3, 8, 8)).astype(np.float32)
    test_content = rng.uniform(size=(1, 3, 8, 8)).astype(np.float32)
    test_style = rng.uniform(size=(1, 3, 8, 8)).astype(np.float32)
    args = argparse.Namespace(
        lr=1e-3, lr_decay=5e-5, max_iter=2, style_weight=10.0, content_weight=1.0
    )
    records, logs = [], []
    initialize = initializer()
    for lib in (torch, rg):
        record = []
        text = ADAIN_SOURCE if lib is torch else port(ADAIN_SOURCE, ADAIN_STEPS)
        names = run_source(
            text, lib, record=record, initialize=initialize, args=args, device=lib.device("cpu")
        )
        names["main"](
            iter([lib.tensor(c) for c in contents]),
            iter([lib.tensor(s) for s in styles]),
            lib.tensor(test_content),
            lib.tensor(test_style),
        )
        records.append(record)
        logs.append(capsys.readouterr().out)
    assert logs[1] == logs[0]
    assert_records_agree(records[1], records[0], rtol=1e-4, atol=1e-5)


DEEPSDF_SOURCE = """
import torch.nn as nn
import torch
import torch.nn.functional as F
import torch.utils.data as data_utils


class Decoder(nn.Module):
    def __init__(
        self,
        latent_size,
        dims,
        dropout=None,
        dropout_prob=0.0,
        norm_layers=(),
        latent_in=(),
        weight_norm=False,
        xyz_in_all=None,
        use_tanh=False,
        latent_dropout=False,
    ):
        super(Decoder, self).__init__()

        def make_sequence():
            return []

        dims = [latent_size + 3] + dims + [1]

        self.num_layers = len(dims)
        self.norm_layers = norm_layers
        self.latent_in = latent_in
        self.latent_dropout = latent_dropout
        if self.latent_dropout:
            self.lat_dp = nn.Dropout(0.2)

        self.xyz_in_all = xyz_in_all
        self.weight_norm = weight_norm

        for layer in range(0, self.num_layers - 1):
            if layer + 1 in latent_in:
                out_dim = dims[layer + 1] - dims[0]
            else:
                out_dim = dims[layer + 1]
                if self.xyz_in_all and layer != self.num_layers - 2:
                    out_dim -= 3

            if weight_norm and layer in self.norm_layers:
                setattr(
                    self,
                    "lin" + str(layer),
                    nn.utils.weight_norm(nn.Linear(dims[layer], out_dim)),
                )
            else:
                setattr(self, "lin" + str(layer), nn.Linear(dims[layer], out_dim))

            if (
                (not weight_norm)
                and self.norm_layers is not None
                and layer in self.norm_layers
            ):
                setattr(self, "bn" + str(layer), nn.LayerNorm(out_dim))

        self.use_tanh = use_tanh
        if use_tanh:
            self.tanh = nn.Tanh()
        self.relu = nn.ReLU()

        self.dropout_prob = dropout_prob
        self.dropout = dropout
        self.th = nn.Tanh()

    # input: N x (L+3)
    def forward(self, input):
        xyz = input[:, -3:]

        if input.shape[1] > 3 and self.latent_dropout:
            latent_vecs = input[:, :-3]
            latent_vecs = F.dropout(latent_vecs, p=0.2, training=self.training)
            x = torch.cat([latent_vecs, xyz], 1)
        else:
            x = input

        for layer in range(0, self.num_layers - 1):
            lin = getattr(self, "lin" + str(layer))
            if layer in self.latent_in:
                x = torch.cat([x, input], 1)
            elif layer != 0 and self.xyz_in_all:
                x = torch.cat([x, xyz], 1)
            x = lin(x)
            # last layer Tanh
            if layer == self.num_layers - 2 and self.use_tanh:
                x = self.tanh(x)
            if layer < self.num_layers - 2:
                if (
                    self.norm_layers is not None
                    and layer in self.norm_layers
                    and not self.weight_norm
                ):
                    bn = getattr(self, "bn" + str(layer))
                    x = bn(x)
                x = self.relu(x)
                if self.dropout is not None and layer in self.dropout:
                    x = F.dropout(x, p=self.dropout_prob, training=self.training)

        if hasattr(self, "th"):
            x = self.th(x)

        return x


class LearningRateSchedule:
    def get_learning_rate(self, epoch):
        pass


class StepLearningRateSchedule(LearningRateSchedule):
    def __init__(self, initial, interval, factor):
        self.initial = initial
        self.interval = interval
        self.factor = factor

    def get_learning_rate(self, epoch):

        return self.initial * (self.factor ** (epoch // self.interval))


def get_learning_rate_schedules(specs):

    schedule_specs = specs["LearningRateSchedule"]

    schedules = []

    for schedule_specs in schedule_specs:

        if schedule_specs["Type"] == "Step":
            schedules.append(
                StepLearningRateSchedule(
                    schedule_specs["Initial"],
                    schedule_specs["Interval"],
                    schedule_specs["Factor"],
                )
            )
        else:
            raise Exception(
                'no known learning rate schedule of type "{}"'.format(
                    schedule_specs["Type"]
                )
            )

    return schedules


def get_mean_latent_vector_magnitude(latent_vectors):
    return torch.mean(torch.norm(latent_vectors.weight.data.detach(), dim=1))


def adjust_learning_rate(lr_schedules, optimizer, epoch):

    for i, param_group in enumerate(optimizer.param_groups):
        param_group["lr"] = lr_schedules[i].get_learning_rate(epoch)


def get_spec_with_default(specs, key, default):
    try:
        return specs[key]
    except KeyError:
        return default


def main_function(specs, sdf_dataset, num_epochs):
    latent_size = specs["CodeLength"]
    lr_schedules = get_learning_rate_schedules(specs)

    grad_clip = get_spec_with_default(specs, "GradientClipNorm", None)

    num_samp_per_scene = specs["SamplesPerScene"]
    scene_per_batch = specs["ScenesPerBatch"]
    clamp_dist = specs["ClampingDistance"]
    minT = -clamp_dist
    maxT = clamp_dist
    enforce_minmax = True

    do_code_regularization = get_spec_with_default(specs, "CodeRegularization", True)
    code_reg_lambda = get_spec_with_default(specs, "CodeRegularizationLambda", 1e-4)

    code_bound = get_spec_with_default(specs, "CodeBound", None)

    decoder = Decoder(latent_size, **specs["NetworkSpecs"])
    initialize(decoder)

    batch_split = 2

    sdf_loader = data_utils.DataLoader(
        sdf_dataset,
        batch_size=scene_per_batch,
        shuffle=False,
        num_workers=0,
        drop_last=True,
    )

    num_scenes = len(sdf_dataset)

    lat_vecs = torch.nn.Embedding(num_scenes, latent_size, max_norm=code_bound)
    torch.nn.init.normal_(
        lat_vecs.weight.data,
        0.0,
        get_spec_with_default(specs, "CodeInitStdDev", 1.0) / math.sqrt(latent_size),
    )
    initialize(lat_vecs)

    print(
        "initialized with mean magnitude {}".format(
            round(get_mean_latent_vector_magnitude(lat_vecs).item(), 4)
        )
    )

    loss_l1 = torch.nn.L1Loss(reduction="sum")

    optimizer_all = torch.optim.Adam(
        [
            {
                "params": decoder.parameters(),
                "lr": lr_schedules[0].get_learning_rate(0),
            },
            {
                "params": lat_vecs.parameters(),
                "lr": lr_schedules[1].get_learning_rate(0),
            },
        ]
    )

    loss_log = []
    lr_log = []

    start_epoch = 1

    for epoch in range(start_epoch, num_epochs + 1):

        decoder.train()

        adjust_learning_rate(lr_schedules, optimizer_all, epoch)

        for sdf_data, indices in sdf_loader:

            # Process the input data
            sdf_data = sdf_data.reshape(-1, 4)

            num_sdf_samples = sdf_data.shape[0]

            sdf_data.requires_grad = False

            xyz = sdf_data[:, 0:3]
            sdf_gt = sdf_data[:, 3].unsqueeze(1)

            if enforce_minmax:
                sdf_gt = torch.clamp(sdf_gt, minT, maxT)

            xyz = torch.chunk(xyz, batch_split)
            indices = torch.chunk(
                indices.unsqueeze(-1).repeat(1, num_samp_per_scene).view(-1),
                batch_split,
            )

            sdf_gt = torch.chunk(sdf_gt, batch_split)

            batch_loss = 0.0

            optimizer_all.zero_grad()

            for i in range(batch_split):

                batch_vecs = lat_vecs(indices[i])

                input = torch.cat([batch_vecs, xyz[i]], dim=1)

                # NN optimization
                pred_sdf = decoder(input)

                if enforce_minmax:
                    pred_sdf = torch.clamp(pred_sdf, minT, maxT)

                chunk_loss = loss_l1(pred_sdf, sdf_gt[i]) / num_sdf_samples

                if do_code_regularization:
                    l2_size_loss = torch.sum(torch.norm(batch_vecs, dim=1))
                    reg_loss = (
                        code_reg_lambda * min(1, epoch / 100) * l2_size_loss
                    ) / num_sdf_samples

                    chunk_loss = chunk_loss + reg_loss

                chunk_loss.backward()

                batch_loss += chunk_loss.item()

            loss_log.append(batch_loss)

            if grad_clip is not None:

                torch.nn.utils.clip_grad_norm_(decoder.parameters(), grad_clip)

            optimizer_all.step()

        lr_log.append([schedule.get_learning_rate(epoch) for schedule in lr_schedules])
        print("epoch {}, loss {:.5f}".format(epoch, loss_log[-1]))

    record.append(loss_log)
    record.append(lr_log)
    record.append({k: v.detach().numpy().copy() for k, v in decoder.state_dict().items()})
    record.append(lat_vecs.weight.detach().numpy().copy())
    record.append(float(get_mean_latent_vector_magnitude(lat_vecs)))
"""

DEEPSDF_STEPS = [
    (
        "import torch.nn as nn\nimport torch\nimport torch.nn.functional as F\n",
        "import retrograd.nn as nn\nimport retrograd as torch\nimport retrograd.nn.functional as F\n",
    ),
    (
        "            optimizer_all.zero_grad()\n",
        "            optimizer_all.zero_grad()\n            grads = None\n",
    ),
    (
        "                chunk_loss.backward()\n",
        "                chunk_grads = chunk_loss.backward()\n                grads = chunk_grads if grads is None else grads + chunk_grads\n",
    ),
    (
        "torch.nn.utils.clip_grad_norm_(decoder.parameters(), grad_clip)",
        "torch.nn.utils.clip_grad_norm_(grads, decoder.parameters(), grad_clip)",
    ),
    ("            optimizer_all.step()\n", "            optimizer_all.step(grads)\n"),
]


def test_deepsdf_auto_decoder_trains_as_torch(capsys):
    rng = np.random.default_rng(6403)
    num_scenes, samples = 4, 6
    xyz = rng.uniform(-1, 1, size=(num_scenes, samples, 3))
    radii = rng.uniform(0.3, 0.8, size=(num_scenes, 1))
    sdf = np.linalg.norm(xyz, axis=2) - radii  # spheres, some samples past the clamp
    sdf_samples = np.concatenate([xyz, sdf[..., None]], axis=2).astype(np.float32)
    specs = {
        "CodeLength": 4,
        "NetworkSpecs": {
            "dims": [8, 8, 8],
            "dropout": [0, 1, 2],
            "dropout_prob": 0.0,
            "norm_layers": [0, 1, 2],
            "latent_in": [2],
            "xyz_in_all": False,
            "use_tanh": False,
            "latent_dropout": False,
            "weight_norm": True,
        },
        "LearningRateSchedule": [
            {"Type": "Step", "Initial": 0.005, "Interval": 2, "Factor": 0.5},
            {"Type": "Step", "Initial": 0.01, "Interval": 2, "Factor": 0.5},
        ],
        "SamplesPerScene": samples,
        "ScenesPerBatch": 2,
        "ClampingDistance": 0.3,
        "CodeRegularization": True,
        "CodeRegularizationLambda": 1e-1,
        # (a small bound, so that max_norm renormalizes codes in the lookups)
        "CodeBound": 0.4,
        "GradientClipNorm": 0.5,
    }
    records, logs = [], []
    initialize = initializer()
    for lib in (torch, rg):
        record = []
        text = DEEPSDF_SOURCE if lib is torch else port(DEEPSDF_SOURCE, DEEPSDF_STEPS)
        text = (
            text
            if lib is torch
            else text.replace("import torch.utils.data", "import retrograd.utils.data")
        )
        names = run_source(text, lib, record=record, initialize=initialize)
        dataset = lib.utils.data.TensorDataset(lib.tensor(sdf_samples), lib.arange(num_scenes))
        names["main_function"](specs, dataset, 3)
        records.append(record)
        logs.append(capsys.readouterr().out)
    assert logs[1] == logs[0]
    assert_records_agree(records[1], records[0], rtol=1e-4, atol=1e-5)


RELATION_NETWORK_SOURCE = """
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.autograd import Variable


class ConvInputModel(nn.Module):
    def __init__(self):
        super(ConvInputModel, self).__init__()

        self.conv1 = nn.Conv2d(3, 6, 3, stride=2, padding=1)
        self.batchNorm1 = nn.BatchNorm2d(6)
        self.conv2 = nn.Conv2d(6, 6, 3, stride=2, padding=1)
        self.batchNorm2 = nn.BatchNorm2d(6)
        self.conv3 = nn.Conv2d(6, 6, 3, stride=2, padding=1)
        self.batchNorm3 = nn.BatchNorm2d(6)
        self.conv4 = nn.Conv2d(6, 6, 3, stride=2, padding=1)
        self.batchNorm4 = nn.BatchNorm2d(6)


    def forward(self, img):
        \"\"\"convolution\"\"\"
        x = self.conv1(img)
        x = F.relu(x)
        x = self.batchNorm1(x)
        x = self.conv2(x)
        x = F.relu(x)
        x = self.batchNorm2(x)
        x = self.conv3(x)
        x = F.relu(x)
        x = self.batchNorm3(x)
        x = self.conv4(x)
        x = F.relu(x)
        x = self.batchNorm4(x)
        return x


class FCOutputModel(nn.Module):
    def __init__(self):
        super(FCOutputModel, self).__init__()

        self.fc2 = nn.Linear(16, 16)
        self.fc3 = nn.Linear(16, 10)

    def forward(self, x):
        x = self.fc2(x)
        x = F.relu(x)
        x = F.dropout(x)
        x = self.fc3(x)
        return F.log_softmax(x, dim=1)

class BasicModel(nn.Module):
    def __init__(self, args, name):
        super(BasicModel, self).__init__()
        self.name=name

    def train_(self, input_img, input_qst, label):
        self.optimizer.zero_grad()
        output = self(input_img, input_qst)
        loss = F.nll_loss(output, label)
        loss.backward()
        self.optimizer.step()
        pred = output.data.max(1)[1]
        correct = pred.eq(label.data).cpu().sum()
        accuracy = correct * 100. / len(label)
        return accuracy, loss

    def test_(self, input_img, input_qst, label):
        output = self(input_img, input_qst)
        loss = F.nll_loss(output, label)
        pred = output.data.max(1)[1]
        correct = pred.eq(label.data).cpu().sum()
        accuracy = correct * 100. / len(label)
        return accuracy, loss

    def save_model(self, epoch):
        torch.save(self.state_dict(), 'model/epoch_{}_{:02d}.pth'.format(self.name, epoch))


class RN(BasicModel):
    def __init__(self, args):
        super(RN, self).__init__(args, 'RN')

        self.conv = ConvInputModel()

        self.relation_type = args.relation_type

        if self.relation_type == 'ternary':
            ##(number of filters per object+coordinate of object)*3+question vector
            self.g_fc1 = nn.Linear((6+2)*3+5, 16)
        else:
            ##(number of filters per object+coordinate of object)*2+question vector
            self.g_fc1 = nn.Linear((6+2)*2+5, 16)

        self.g_fc2 = nn.Linear(16, 16)
        self.g_fc3 = nn.Linear(16, 16)
        self.g_fc4 = nn.Linear(16, 16)

        self.f_fc1 = nn.Linear(16, 16)

        self.coord_oi = torch.FloatTensor(args.batch_size, 2)
        self.coord_oj = torch.FloatTensor(args.batch_size, 2)
        if args.cuda:
            self.coord_oi = self.coord_oi.cuda()
            self.coord_oj = self.coord_oj.cuda()
        self.coord_oi = Variable(self.coord_oi)
        self.coord_oj = Variable(self.coord_oj)

        # prepare coord tensor
        def cvt_coord(i):
            return [(i/2-2)/2., (i%2-2)/2.]

        self.coord_tensor = torch.FloatTensor(args.batch_size, 4, 2)
        if args.cuda:
            self.coord_tensor = self.coord_tensor.cuda()
        self.coord_tensor = Variable(self.coord_tensor)
        np_coord_tensor = np.zeros((args.batch_size, 4, 2))
        for i in range(4):
            np_coord_tensor[:,i,:] = np.array( cvt_coord(i) )
        self.coord_tensor.data.copy_(torch.from_numpy(np_coord_tensor))


        self.fcout = FCOutputModel()

        self.optimizer = optim.Adam(self.parameters(), lr=args.lr)


    def forward(self, img, qst):
        x = self.conv(img) ## x = (64 x 24 x 5 x 5)

        \"\"\"g\"\"\"
        mb = x.size()[0]
        n_channels = x.size()[1]
        d = x.size()[2]
        # x_flat = (64 x 25 x 24)
        x_flat = x.view(mb,n_channels,d*d).permute(0,2,1)

        # add coordinates
        x_flat = torch.cat([x_flat, self.coord_tensor],2)


        if self.relation_type == 'ternary':
            # add question everywhere
            qst = torch.unsqueeze(qst, 1) # (64x1x18)
            qst = qst.repeat(1, 4, 1) # (64x25x18)
            qst = torch.unsqueeze(qst, 1)  # (64x1x25x18)
            qst = torch.unsqueeze(qst, 1)  # (64x1x1x25x18)

            # cast all triples against each other
            x_i = torch.unsqueeze(x_flat, 1)  # (64x1x25x26)
            x_i = torch.unsqueeze(x_i, 3)  # (64x1x25x1x26)
            x_i = x_i.repeat(1, 4, 1, 4, 1)  # (64x25x25x25x26)

            x_j = torch.unsqueeze(x_flat, 2)  # (64x25x1x26)
            x_j = torch.unsqueeze(x_j, 2)  # (64x25x1x1x26)
            x_j = x_j.repeat(1, 1, 4, 4, 1)  # (64x25x25x25x26)

            x_k = torch.unsqueeze(x_flat, 1)  # (64x1x25x26)
            x_k = torch.unsqueeze(x_k, 1)  # (64x1x1x25x26)
            x_k = torch.cat([x_k, qst], 4)  # (64x1x1x25x26+18)
            x_k = x_k.repeat(1, 4, 4, 1, 1)  # (64x25x25x25x26+18)

            # concatenate all together
            x_full = torch.cat([x_i, x_j, x_k], 4)  # (64x25x25x25x3*26+18)

            # reshape for passing through network
            x_ = x_full.view(mb * (d * d) * (d * d) * (d * d), 29)  # (64*25*25*25x3*26+18) = (1.000.000, 96)
        else:
            # add question everywhere
            qst = torch.unsqueeze(qst, 1)
            qst = qst.repeat(1, 4, 1)
            qst = torch.unsqueeze(qst, 2)

            # cast all pairs against each other
            x_i = torch.unsqueeze(x_flat, 1)  # (64x1x25x26+18)
            x_i = x_i.repeat(1, 4, 1, 1)  # (64x25x25x26+18)
            x_j = torch.unsqueeze(x_flat, 2)  # (64x25x1x26+18)
            x_j = torch.cat([x_j, qst], 3)
            x_j = x_j.repeat(1, 1, 4, 1)  # (64x25x25x26+18)

            # concatenate all together
            x_full = torch.cat([x_i,x_j],3) # (64x25x25x2*26+18)

            # reshape for passing through network
            x_ = x_full.view(mb * (d * d) * (d * d), 21)  # (64*25*25x2*26*18) = (40.000, 70)

        x_ = self.g_fc1(x_)
        x_ = F.relu(x_)
        x_ = self.g_fc2(x_)
        x_ = F.relu(x_)
        x_ = self.g_fc3(x_)
        x_ = F.relu(x_)
        x_ = self.g_fc4(x_)
        x_ = F.relu(x_)

        # reshape again and sum
        if self.relation_type == 'ternary':
            x_g = x_.view(mb, (d * d) * (d * d) * (d * d), 16)
        else:
            x_g = x_.view(mb, (d * d) * (d * d), 16)

        x_g = x_g.sum(1).squeeze()

        \"\"\"f\"\"\"
        x_f = self.f_fc1(x_g)
        x_f = F.relu(x_f)

        return self.fcout(x_f)


def tensor_data(data, i):
    img = torch.from_numpy(np.asarray(data[0][bs*i:bs*(i+1)]))
    qst = torch.from_numpy(np.asarray(data[1][bs*i:bs*(i+1)]))
    ans = torch.from_numpy(np.asarray(data[2][bs*i:bs*(i+1)]))

    input_img.data.resize_(img.size()).copy_(img)
    input_qst.data.resize_(qst.size()).copy_(qst)
    label.data.resize_(ans.size()).copy_(ans)


def cvt_data_axis(data):
    img = [e[0] for e in data]
    qst = [e[1] for e in data]
    ans = [e[2] for e in data]
    return (img,qst,ans)


def train(epoch, rel, norel):
    model.train()

    random.shuffle(rel)
    random.shuffle(norel)

    rel = cvt_data_axis(rel)
    norel = cvt_data_axis(norel)

    acc_rels = []
    acc_norels = []

    l_binary = []
    l_unary = []

    for batch_idx in range(len(rel[0]) // bs):
        tensor_data(rel, batch_idx)
        accuracy_rel, loss_binary = model.train_(input_img, input_qst, label)
        acc_rels.append(accuracy_rel.item())
        l_binary.append(loss_binary.item())

        tensor_data(norel, batch_idx)
        accuracy_norel, loss_unary = model.train_(input_img, input_qst, label)
        acc_norels.append(accuracy_norel.item())
        l_unary.append(loss_unary.item())

        if batch_idx % args.log_interval == 0:
            print('Train Epoch: {} [{}/{} ({:.0f}%)] '
                  'Relations accuracy: {:.0f}% | Non-relations accuracy: {:.0f}%'.format(
                   epoch,
                   batch_idx * bs * 2,
                   len(rel[0]) * 2,
                   100. * batch_idx * bs / len(rel[0]),
                   accuracy_rel,
                   accuracy_norel))

    avg_acc_binary = sum(acc_rels) / len(acc_rels)
    avg_acc_unary = sum(acc_norels) / len(acc_norels)
    record.append(l_binary)
    record.append(l_unary)
    record.append([avg_acc_binary, avg_acc_unary])


def test(epoch, rel, norel):
    model.eval()
    rel = cvt_data_axis(rel)
    norel = cvt_data_axis(norel)

    accuracy_rels = []
    accuracy_norels = []

    loss_binary = []
    loss_unary = []

    for batch_idx in range(len(rel[0]) // bs):
        tensor_data(rel, batch_idx)
        acc_bin, l_bin = model.test_(input_img, input_qst, label)
        accuracy_rels.append(acc_bin.item())
        loss_binary.append(l_bin.item())

        tensor_data(norel, batch_idx)
        acc_un, l_un = model.test_(input_img, input_qst, label)
        accuracy_norels.append(acc_un.item())
        loss_unary.append(l_un.item())

    accuracy_rel = sum(accuracy_rels) / len(accuracy_rels)
    accuracy_norel = sum(accuracy_norels) / len(accuracy_norels)
    print('\\n Test set: Binary accuracy: {:.0f}% | Unary accuracy: {:.0f}%\\n'.format(
        accuracy_rel, accuracy_norel))
    loss_binary = sum(loss_binary) / len(loss_binary)
    loss_unary = sum(loss_unary) / len(loss_unary)
    record.append([loss_binary, loss_unary])


def main(rel_train, norel_train, rel_test, norel_test):
    global model, input_img, input_qst, label, bs
    model = RN(args)
    initialize(model)
    bs = args.batch_size
    input_img = torch.FloatTensor(bs, 3, 20, 20)
    input_qst = torch.FloatTensor(bs, 5)
    label = torch.LongTensor(bs)

    input_img = Variable(input_img)
    input_qst = Variable(input_qst)
    label = Variable(label)
    for epoch in range(1, args.epochs + 1):
        train(epoch, rel_train, norel_train)
        test(epoch, rel_test, norel_test)
    record.append({k: v.detach().numpy().copy() for k, v in model.state_dict().items()})
"""

RELATION_NETWORK_STEPS = [
    (
        "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\nimport torch.optim as optim\n",
        "import retrograd as torch\nimport retrograd.nn as nn\nimport retrograd.nn.functional as F\nimport retrograd.optim as optim\n",
    ),
    (
        "        loss.backward()\n        self.optimizer.step()\n",
        "        grads = loss.backward()\n        self.optimizer.step(grads)\n",
    ),
]


def test_relation_network_trains_as_torch(capsys):
    rng = np.random.default_rng(6404)

    def dataset(n):
        return [
            (
                rng.uniform(size=(3, 20, 20)).astype(np.float32),
                rng.integers(0, 2, 5).astype(np.float32),
                int(rng.integers(0, 10)),
            )
            for _ in range(n)
        ]

    rel_train, norel_train, rel_test, norel_test = dataset(4), dataset(4), dataset(4), dataset(4)
    # (its ``F.dropout(x)`` is dropout with p=0.5 in training and evaluation alike: p=0 here,
    # so that neither run draws)
    source = RELATION_NETWORK_SOURCE.replace("F.dropout(x)", "F.dropout(x, p=0.0)")
    records, logs = [], []
    initialize = initializer()
    for relation_type in ("binary", "ternary"):
        args = argparse.Namespace(
            batch_size=4,
            lr=1e-3,
            epochs=2 if relation_type == "binary" else 1,  # (a ternary pass is 4x the pairs)
            log_interval=1,
            cuda=False,
            relation_type=relation_type,
        )
        for lib in (torch, rg):
            record = []
            random.seed(6404)
            text = source if lib is torch else port(source, RELATION_NETWORK_STEPS)
            text = text if lib is torch else text.replace("from torch.", "from retrograd.")
            names = run_source(
                text, lib, record=record, initialize=initialize, args=args, random=random
            )
            names["main"](list(rel_train), list(norel_train), rel_test, norel_test)
            records.append(record)
            logs.append(capsys.readouterr().out)
    assert logs[1] == logs[0] and logs[3] == logs[2]
    assert_records_agree(records[1], records[0], rtol=1e-4, atol=1e-5)
    assert_records_agree(records[3], records[2], rtol=1e-4, atol=1e-5)


DEEP_DREAM_SOURCE = """
import torch
from torch.autograd import Variable
import numpy as np
import scipy.ndimage as nd
import torch.nn as nn

mean = np.array([0.485, 0.456, 0.406])
std = np.array([0.229, 0.224, 0.225])


def deprocess(image_np):
    image_np = image_np.squeeze().transpose(1, 2, 0)
    image_np = image_np * std.reshape((1, 1, 3)) + mean.reshape((1, 1, 3))
    image_np = np.clip(image_np, 0.0, 255.0)
    return image_np


def clip(image_tensor):
    for c in range(3):
        m, s = mean[c], std[c]
        image_tensor[0, c] = torch.clamp(image_tensor[0, c], -m / s, (1 - m) / s)
    return image_tensor


def dream(image, model, iterations, lr):
    \"\"\" Updates the image to maximize outputs for n iterations \"\"\"
    Tensor = torch.cuda.FloatTensor if torch.cuda.is_available else torch.FloatTensor
    image = Variable(Tensor(image), requires_grad=True)
    for i in range(iterations):
        model.zero_grad()
        out = model(image)
        loss = out.norm()
        loss.backward()
        avg_grad = np.abs(image.grad.data.cpu().numpy()).mean()
        norm_lr = lr / avg_grad
        image.data += norm_lr * image.grad.data
        image.data = clip(image.data)
        image.grad.data.zero_()
        record.append(loss.item())
    return image.cpu().data.numpy()


def deep_dream(image, model, iterations, lr, octave_scale, num_octaves):
    \"\"\" Main deep dream method \"\"\"
    image = preprocess(image).unsqueeze(0).cpu().data.numpy()

    # Extract image representations for each octave
    octaves = [image]
    for _ in range(num_octaves - 1):
        octaves.append(nd.zoom(octaves[-1], (1, 1, 1 / octave_scale, 1 / octave_scale), order=1))

    detail = np.zeros_like(octaves[-1])
    for octave, octave_base in enumerate(octaves[::-1]):
        if octave > 0:
            # Upsample detail to new octave dimension
            detail = nd.zoom(detail, np.array(octave_base.shape) / np.array(detail.shape), order=1)
        # Add deep dream detail from previous octave to new base
        input_image = octave_base + detail
        # Get new deep dream image
        dreamed_image = dream(input_image, model, iterations, lr)
        # Extract deep dream details
        detail = dreamed_image - octave_base

    return deprocess(dreamed_image)


def main(image, args):
    # Define the model
    network = Features()
    initialize(network)
    layers = list(network.features.children())
    model = nn.Sequential(*layers[: (args.at_layer + 1)])
    if torch.cuda.is_available():
        model = model.cuda()
    print(network)

    # Extract deep dream image
    dreamed_image = deep_dream(
        image,
        model,
        iterations=args.iterations,
        lr=args.lr,
        octave_scale=args.octave_scale,
        num_octaves=args.num_octaves,
    )
    record.append(dreamed_image)
"""

DEEP_DREAM_STEPS = [
    ("import torch\n", "import retrograd as torch\n"),
    ("import torch.nn as nn\n", "import retrograd.nn as nn\n"),
    (
        "        loss.backward()\n        avg_grad = np.abs(image.grad.data.cpu().numpy()).mean()\n",
        "        grads = loss.backward()\n        avg_grad = np.abs(image.grad(grads).data.cpu().numpy()).mean()\n",
    ),
    ("image.data += norm_lr * image.grad.data", "image.data += norm_lr * image.grad(grads).data"),
    ("        image.grad.data.zero_()\n", ""),
]


def test_deep_dream_as_torch(capsys):
    rng = np.random.default_rng(6405)
    image = rng.uniform(size=(12, 12, 3)).astype(np.float32)
    args = argparse.Namespace(iterations=2, at_layer=4, lr=0.01, octave_scale=1.4, num_octaves=3)
    records, logs = [], []
    initialize = initializer()
    for lib in (torch, rg):
        record = []

        class Features(lib.nn.Module):  # a small VGG's ``features`` for torchvision's
            def __init__(self, nn=lib.nn):
                super().__init__()
                self.features = nn.Sequential(
                    nn.Conv2d(3, 4, 3, padding=1),
                    nn.ReLU(inplace=True),
                    nn.Conv2d(4, 4, 3, padding=1),
                    nn.ReLU(inplace=True),
                    nn.MaxPool2d(kernel_size=2, stride=2),
                    nn.Conv2d(4, 6, 3, padding=1),
                    nn.ReLU(inplace=True),
                )

        def preprocess(image, lib=lib):  # the ``transforms.Compose`` of ToTensor and Normalize
            tensor = lib.tensor(image.transpose(2, 0, 1).copy())
            mean = lib.tensor(np.array([0.485, 0.456, 0.406], dtype=np.float32)).view(3, 1, 1)
            std = lib.tensor(np.array([0.229, 0.224, 0.225], dtype=np.float32)).view(3, 1, 1)
            return (tensor - mean) / std

        # (a CPU run: its ``torch.cuda.is_available`` without the call is true, which picks
        # ``torch.cuda.FloatTensor``)
        source = DEEP_DREAM_SOURCE.replace(
            "if torch.cuda.is_available else", "if torch.cuda.is_available() else"
        )
        text = source if lib is torch else port(source, DEEP_DREAM_STEPS)
        text = text if lib is torch else text.replace("from torch.", "from retrograd.")
        names = run_source(
            text,
            lib,
            record=record,
            initialize=initialize,
            Features=Features,
            preprocess=preprocess,
        )
        names["main"](image, args)
        records.append(record)
        logs.append(capsys.readouterr().out)
    assert logs[1] == logs[0] and len(records[0]) == 7
    assert_records_agree(records[1], records[0], rtol=1e-4, atol=1e-5)


FIT_BY_LIKELIHOOD_SOURCE = """
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.distributions import Bernoulli, Binomial, Dirichlet, Gamma

eps = np.finfo(np.float32).eps.item()


class Policy(nn.Module):
    def __init__(self):
        super(Policy, self).__init__()
        self.affine1 = nn.Linear(4, 8)
        self.affine2 = nn.Linear(8, 1)
        # start from the uniform policy
        nn.init.zeros_(self.affine2.weight)
        nn.init.zeros_(self.affine2.bias)

    def forward(self, x):
        x = F.relu(self.affine1(x))
        return self.affine2(x).squeeze(-1)


def reinforce(batches):
    policy = Policy()
    initialize(policy)
    optimizer = optim.Adam(policy.parameters(), lr=1e-2)
    for states, actions, rewards in batches:
        m = Bernoulli(logits=policy(states))
        returns = torch.tensor(rewards)
        returns = (returns - returns.mean()) / (returns.std() + eps)
        policy_loss = (-m.log_prob(actions) * returns).sum() - 0.01 * m.entropy().sum()
        optimizer.zero_grad()
        policy_loss.backward()
        optimizer.step()
        record.append(policy_loss.item())
    record.append({k: v.detach().numpy().copy() for k, v in policy.state_dict().items()})


def fit_dirichlet(proportions, steps):
    # the maximum-likelihood concentration, from the flat prior
    alpha = nn.Parameter(torch.ones(proportions.shape[1]))
    optimizer = optim.Adam([alpha], lr=0.05)
    for step in range(steps):
        loss = -Dirichlet(alpha).log_prob(proportions).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        with torch.no_grad():
            alpha.clamp_(min=1e-3)
        record.append(loss.item())
    record.append(alpha.detach().numpy().copy())


def fit_gamma(waits, steps):
    log_rate = nn.Parameter(torch.zeros(()))
    concentration = nn.Parameter(torch.ones(()))  # the exponential distribution to start
    optimizer = optim.SGD([log_rate, concentration], lr=0.05, momentum=0.9)
    for step in range(steps):
        loss = -Gamma(concentration, log_rate.exp()).log_prob(waits).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        record.append(loss.item())
    record.append([concentration.item(), log_rate.item()])


def fit_binomial(x, successes, trials, steps):
    # a binomial GLM from zero weights (every probability 1/2)
    w = torch.zeros(x.shape[1], requires_grad=True)
    optimizer = optim.LBFGS([w], lr=0.5, max_iter=4)

    def closure():
        optimizer.zero_grad()
        loss = -Binomial(trials, logits=x @ w).log_prob(successes).sum()
        loss.backward()
        return loss

    for step in range(steps):
        record.append(optimizer.step(closure).item())
    record.append(w.detach().numpy().copy())
"""

FIT_BY_LIKELIHOOD_STEPS = [
    (
        "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\nimport torch.optim as optim\n",
        "import retrograd as torch\nimport retrograd.nn as nn\nimport retrograd.nn.functional as F\nimport retrograd.optim as optim\n",
    ),
    (
        "        policy_loss.backward()\n        optimizer.step()\n",
        "        grads = policy_loss.backward()\n        optimizer.step(grads)\n",
    ),
    (
        "        loss.backward()\n        optimizer.step()\n",
        "        grads = loss.backward()\n        optimizer.step(grads)\n",
    ),
    ("        loss.backward()\n        return loss\n", "        return loss\n"),
]


def test_distributions_fitted_from_their_boundaries_as_torch():
    rng = np.random.default_rng(6406)
    batches = [
        (
            rng.standard_normal((6, 4)).astype(np.float32),
            rng.integers(0, 2, 6).astype(np.float32),
            list(rng.standard_normal(6)),
        )
        for _ in range(3)
    ]
    proportions = rng.dirichlet([2.0, 1.0, 0.5], size=8).astype(np.float32)
    waits = rng.gamma(2.0, 0.5, size=10).astype(np.float32)
    x = rng.standard_normal((8, 3)).astype(np.float32)
    trials = 5.0
    successes = rng.binomial(5, 0.3, size=8).astype(np.float32)
    records = []
    initialize = initializer()
    for lib in (torch, rg):
        record = []
        source = FIT_BY_LIKELIHOOD_SOURCE
        text = source if lib is torch else port(source, FIT_BY_LIKELIHOOD_STEPS)
        text = text if lib is torch else text.replace("from torch.", "from retrograd.")
        names = run_source(text, lib, record=record, initialize=initialize)
        names["reinforce"]([(lib.tensor(s), lib.tensor(a), r) for s, a, r in batches])
        names["fit_dirichlet"](lib.tensor(proportions), 4)
        names["fit_gamma"](lib.tensor(waits), 4)
        names["fit_binomial"](lib.tensor(x), lib.tensor(successes), trials, 2)
        records.append(record)
    assert_records_agree(records[1], records[0], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(
    "make",
    [
        lambda lib, p: lib.distributions.Bernoulli(logits=p).log_prob(lib.tensor([0.0, 1.0, 1.0])),
        lambda lib, p: lib.distributions.Bernoulli(logits=p).entropy(),
        lambda lib, p: lib.distributions.Bernoulli(probs=p.sigmoid()).log_prob(
            lib.tensor([0.0, 1.0, 0.0])
        ),
        lambda lib, p: lib.distributions.ContinuousBernoulli(logits=p).log_prob(
            lib.tensor([0.1, 0.5, 0.9])
        ),
        lambda lib, p: lib.distributions.Binomial(4, logits=p).log_prob(
            lib.tensor([0.0, 1.0, 3.0])
        ),
        lambda lib, p: lib.distributions.Geometric(logits=p).entropy(),
        lambda lib, p: lib.distributions.Gamma(p + 1, p + 2).log_prob(lib.tensor([0.5, 1.0, 2.0])),
        lambda lib, p: lib.distributions.Chi2(2 * p + 1).log_prob(lib.tensor([0.5, 1.0, 2.0])),
        lambda lib, p: lib.distributions.Beta(p + 1, p + 1).log_prob(lib.tensor([0.2, 0.5, 0.7])),
        lambda lib, p: lib.distributions.Dirichlet(p + 1).log_prob(lib.tensor([0.2, 0.3, 0.5])),
    ],
    ids=[
        "bernoulli",
        "bernoulli_entropy",
        "bernoulli_probs",
        "continuous_bernoulli",
        "binomial",
        "geometric_entropy",
        "gamma",
        "chi2",
        "beta",
        "dirichlet",
    ],
)
def test_regression_log_densities_have_torchs_gradients_at_zero_logits_and_unit_concentrations(
    make,
):
    """A zero logit (``Bernoulli``, ``Binomial``, ``Geometric``: the written-out ``clamp(min=0)
    + log1p(exp(-|x|))`` took the kinks' one-sided gradients, so ``d log_prob / d logit`` was
    ``-value`` or ``k - n`` where torch's is ``sigmoid(logit) - value``) and a concentration of
    exactly 1 (``Gamma``, ``Beta``, ``Dirichlet``: ``xlogy(c - 1, x)`` was a ``where`` that cut
    the gradient ``log(x)`` at ``c = 1``) give torch's gradients."""
    theirs_p = torch.tensor([0.0, 0.0, 0.5], requires_grad=True)
    make(torch, theirs_p).sum().backward()
    ours_p = rg.tensor([0.0, 0.0, 0.5]).require_grad()
    grads = make(rg, ours_p).sum().backward()
    np.testing.assert_allclose(
        ours_p.grad(grads).numpy(), theirs_p.grad.numpy(), rtol=1e-5, atol=1e-6
    )
