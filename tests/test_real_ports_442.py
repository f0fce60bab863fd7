# ruff: noqa: E501, W291, W293  (the programs are kept as their authors wrote them)
"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):
tjddus9597/Proxy-Anchor-CVPR2020, the Proxy-Anchor loss for deep metric learning.

``code/losses.py``'s ``binarize`` (``T.cpu().numpy()`` through sklearn's ``label_binarize`` and
back by ``torch.FloatTensor(T)``), ``l2_norm`` (``torch.pow``, ``torch.sum(buffer, 1).add_(1e-12)``
in place on a tracked value, ``torch.div`` by ``norm.view(-1, 1).expand_as(input)``) and
``Proxy_Anchor`` (proxies as ``nn.Parameter(torch.randn(...))`` re-drawn by
``nn.init.kaiming_normal_(..., mode='fan_out')``, ``F.linear`` of normalized embeddings and
proxies, ``torch.nonzero(...).squeeze(dim = 1)`` and its ``len``, ``torch.where`` against
``torch.zeros_like``), trained as ``code/train.py``'s loop does: param groups built from
``set(model.parameters()).difference(set(model.model.embedding.parameters()))`` with the proxies
at ``lr * 100``, AdamW, ``StepLR``, the warm-up that sets ``param.requires_grad = False`` on the
trunk for the first epochs and back to ``True``, BatchNorms frozen by ``m.eval()`` over
``model.model.modules()``, ``x.squeeze()``/``y.squeeze()``, ``clip_grad_value_`` of the model's
and the criterion's parameters, ``loss.data.cpu().numpy()`` and ``np.mean`` of those.

The script's module-level loop is wrapped in a ``train`` function; the backbone (a torchvision
ResNet with an ``embedding`` head in ``code/net/resnet.py``) is a small stand-in keeping its
``model.model.embedding`` layout and ``l2_norm`` output; CUB-200 is a synthetic loader of the same
shapes; ``.cuda()`` is dropped in both runs. The lines changed for the port: the ``import`` lines
and the gradient lines.
"""

from __future__ import annotations

import argparse

import numpy as np
import pytest
import torch

import retrograd as rg
from real_ports import assert_records_agree, initializer, port, run_source


@pytest.fixture(autouse=True)
def _seeded():
    torch.manual_seed(0)
    np.random.seed(0)
    rg.seed(0)


PROXY_ANCHOR_SOURCE = """
import torch
import torch.nn as nn
import torch.nn.functional as F
import math
import random
import numpy as np

# -- code/losses.py --
def binarize(T, nb_classes):
    T = T.cpu().numpy()
    import sklearn.preprocessing
    T = sklearn.preprocessing.label_binarize(
        T, classes = range(0, nb_classes)
    )
    T = torch.FloatTensor(T).cuda()
    return T

def l2_norm(input):
    input_size = input.size()
    buffer = torch.pow(input, 2)
    normp = torch.sum(buffer, 1).add_(1e-12)
    norm = torch.sqrt(normp)
    _output = torch.div(input, norm.view(-1, 1).expand_as(input))
    output = _output.view(input_size)
    return output

class Proxy_Anchor(torch.nn.Module):
    def __init__(self, nb_classes, sz_embed, mrg = 0.1, alpha = 32):
        torch.nn.Module.__init__(self)
        # Proxy Anchor Initialization
        self.proxies = torch.nn.Parameter(torch.randn(nb_classes, sz_embed).cuda())
        nn.init.kaiming_normal_(self.proxies, mode='fan_out')

        self.nb_classes = nb_classes
        self.sz_embed = sz_embed
        self.mrg = mrg
        self.alpha = alpha
        
    def forward(self, X, T):
        P = self.proxies

        cos = F.linear(l2_norm(X), l2_norm(P))  # Calcluate cosine similarity
        P_one_hot = binarize(T = T, nb_classes = self.nb_classes)
        N_one_hot = 1 - P_one_hot
    
        pos_exp = torch.exp(-self.alpha * (cos - self.mrg))
        neg_exp = torch.exp(self.alpha * (cos + self.mrg))

        with_pos_proxies = torch.nonzero(P_one_hot.sum(dim = 0) != 0).squeeze(dim = 1)   # The set of positive proxies of data in the batch
        num_valid_proxies = len(with_pos_proxies)   # The number of positive proxies
        
        P_sim_sum = torch.where(P_one_hot == 1, pos_exp, torch.zeros_like(pos_exp)).sum(dim=0) 
        N_sim_sum = torch.where(N_one_hot == 1, neg_exp, torch.zeros_like(neg_exp)).sum(dim=0)
        
        pos_term = torch.log(1 + P_sim_sum).sum() / num_valid_proxies
        neg_term = torch.log(1 + N_sim_sum).sum() / self.nb_classes
        loss = pos_term + neg_term     
        
        return loss


# -- the stand-in for code/net/resnet.py's Resnet18 (model.model.embedding, l2-normed output) --
class Resnet18(nn.Module):
    def __init__(self, embedding_size, is_norm=True, bn_freeze=True):
        super(Resnet18, self).__init__()
        self.model = nn.Module()
        self.model.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.model.bn1 = nn.BatchNorm2d(8)
        self.model.gap = nn.AdaptiveAvgPool2d(1)
        self.is_norm = is_norm
        self.embedding_size = embedding_size
        self.model.embedding = nn.Linear(8, self.embedding_size)

    def l2_norm(self, input):
        input_size = input.size()
        buffer = torch.pow(input, 2)
        normp = torch.sum(buffer, 1).add_(1e-12)
        norm = torch.sqrt(normp)
        _output = torch.div(input, norm.view(-1, 1).expand_as(input))
        output = _output.view(input_size)
        return output

    def forward(self, x):
        x = F.relu(self.model.bn1(self.model.conv1(x)))
        x = self.model.gap(x)
        x = x.view(x.size(0), -1)
        x = self.model.embedding(x)
        if self.is_norm:
            x = self.l2_norm(x)
        return x


# -- code/train.py's training loop --
def train(args, dl_tr, nb_classes, record, initialize):
    model = Resnet18(embedding_size=args.sz_embedding, is_norm=args.l2_norm, bn_freeze = args.bn_freeze)
    criterion = Proxy_Anchor(nb_classes = nb_classes, sz_embed = args.sz_embedding, mrg = args.mrg, alpha = args.alpha).cuda()
    initialize(model)
    initialize(criterion)

    # Train Parameters
    param_groups = [
        {'params': list(set(model.parameters()).difference(set(model.model.embedding.parameters()))) if args.gpu_id != -1 else 
                     list(set(model.module.parameters()).difference(set(model.module.model.embedding.parameters())))},
        {'params': model.model.embedding.parameters() if args.gpu_id != -1 else model.module.model.embedding.parameters(), 'lr':float(args.lr) * 1},
    ]
    if args.loss == 'Proxy_Anchor':
        param_groups.append({'params': criterion.proxies, 'lr':float(args.lr) * 100})

    # Optimizer Setting
    if args.optimizer == 'sgd': 
        opt = torch.optim.SGD(param_groups, lr=float(args.lr), weight_decay = args.weight_decay, momentum = 0.9, nesterov=True)
    elif args.optimizer == 'adam': 
        opt = torch.optim.Adam(param_groups, lr=float(args.lr), weight_decay = args.weight_decay)
    elif args.optimizer == 'rmsprop':
        opt = torch.optim.RMSprop(param_groups, lr=float(args.lr), alpha=0.9, weight_decay = args.weight_decay, momentum = 0.9)
    elif args.optimizer == 'adamw':
        opt = torch.optim.AdamW(param_groups, lr=float(args.lr), weight_decay = args.weight_decay)
        
    scheduler = torch.optim.lr_scheduler.StepLR(opt, step_size=args.lr_decay_step, gamma = args.lr_decay_gamma)

    print("Training for {} epochs.".format(args.nb_epochs))
    losses_list = []

    for epoch in range(0, args.nb_epochs):
        model.train()
        bn_freeze = args.bn_freeze
        if bn_freeze:
            modules = model.model.modules() if args.gpu_id != -1 else model.module.model.modules()
            for m in modules: 
                if isinstance(m, nn.BatchNorm2d):
                    m.eval()

        losses_per_epoch = []
        
        # Warmup: Train only new params, helps stabilize learning.
        if args.warm > 0:
            if args.gpu_id != -1:
                unfreeze_model_param = list(model.model.embedding.parameters()) + list(criterion.parameters())
            else:
                unfreeze_model_param = list(model.module.model.embedding.parameters()) + list(criterion.parameters())

            if epoch == 0:
                for param in list(set(model.parameters()).difference(set(unfreeze_model_param))):
                    param.requires_grad = False
            if epoch == args.warm:
                for param in list(set(model.parameters()).difference(set(unfreeze_model_param))):
                    param.requires_grad = True

        pbar = enumerate(dl_tr)

        for batch_idx, (x, y) in pbar:                         
            m = model(x.squeeze().cuda())
            loss = criterion(m, y.squeeze().cuda())
            
            opt.zero_grad()
            loss.backward()
            
            torch.nn.utils.clip_grad_value_(model.parameters(), 10)
            if args.loss == 'Proxy_Anchor':
                torch.nn.utils.clip_grad_value_(criterion.parameters(), 10)

            losses_per_epoch.append(loss.data.cpu().numpy())
            opt.step()

            record.append(loss.item())
            
        losses_list.append(np.mean(losses_per_epoch))
        scheduler.step()
        record.append({name: p.detach().numpy().copy() for name, p in list(model.named_parameters()) + list(criterion.named_parameters())})
    record.append(losses_list)
"""

PROXY_ANCHOR_STEPS = [
    (
        "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n",
        "import retrograd as torch\nimport retrograd.nn as nn\nimport retrograd.nn.functional as F\n",
    ),
    (
        "            loss.backward()\n            \n"
        "            torch.nn.utils.clip_grad_value_(model.parameters(), 10)\n"
        "            if args.loss == 'Proxy_Anchor':\n"
        "                torch.nn.utils.clip_grad_value_(criterion.parameters(), 10)\n",
        "            grads = loss.backward()\n            \n"
        "            torch.nn.utils.clip_grad_value_(grads, model.parameters(), 10)\n"
        "            if args.loss == 'Proxy_Anchor':\n"
        "                torch.nn.utils.clip_grad_value_(grads, criterion.parameters(), 10)\n",
    ),
    ("            opt.step()\n", "            opt.step(grads)\n"),
]


def _cub_like(lib, rng, n, batch_size):
    """CUB-200's training loader in shape: images ``(B, 1, 3, H, W)``-squeezable and labels
    ``(B, 1)`` (the script squeezes both)."""
    labels = rng.integers(0, 4, n)
    images = rng.standard_normal((n, 1, 3, 6, 6)).astype(np.float32)
    images += labels[:, None, None, None, None].astype(np.float32) * 0.5
    dataset = lib.utils.data.TensorDataset(lib.tensor(images), lib.tensor(labels[:, None]))
    return lib.utils.data.DataLoader(dataset, batch_size=batch_size, shuffle=False)


@pytest.mark.parametrize(
    "optimizer,bn_freeze,warm", [("adamw", 1, 1), ("sgd", 0, 0)], ids=["adamw-warm", "sgd"]
)
def test_proxy_anchor_trains_with_warmup_and_frozen_norms_as_torch(optimizer, bn_freeze, warm):
    records = []
    initialize = initializer()
    for lib in (torch, rg):
        record = []
        source = PROXY_ANCHOR_SOURCE.replace(".cuda()", "")  # both, on the CPU
        text = source if lib is torch else port(source, PROXY_ANCHOR_STEPS)
        names = run_source(text, lib)
        args = argparse.Namespace(
            sz_embedding=6,
            l2_norm=1,
            bn_freeze=bn_freeze,
            mrg=0.1,
            alpha=32,
            gpu_id=0,
            loss="Proxy_Anchor",
            lr=1e-3,
            optimizer=optimizer,
            weight_decay=1e-4,
            lr_decay_step=2,
            lr_decay_gamma=0.5,
            nb_epochs=3,
            warm=warm,
        )
        names["train"](args, _cub_like(lib, np.random.default_rng(0), 24, 8), 4, record, initialize)
        records.append(record)
    assert len(records[0]) == 3 * (3 + 1) + 1
    assert_records_agree(records[1], records[0], rtol=1e-4, atol=1e-5)
