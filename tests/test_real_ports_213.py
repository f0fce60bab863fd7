# ruff: noqa: E501  (the programs are kept as their authors wrote them: long lines)
"""Real PyTorch programs ported to retrograd (the harness: ``tests/real_ports.py``): the
checkpoint and state-dict surgery of timm's training and fine-tuning scripts and of nanoGPT,
run against torch's run of the same code from the same weights and draws.

- timm's ``param_groups_weight_decay`` (``optim/_param_groups.py``: 1-d parameters, biases
  and ``no_weight_decay`` names without decay) for a Nesterov ``SGD``;
- a model under ``torch.compile`` (its state dict's keys start with ``_orig_mod.``; retrograd's
  ``compile`` returned the model itself, so those keys and ``model._orig_mod`` were missing)
  and timm's ``ModelEmaV2`` (keys start with ``module.``);
- timm's ``CheckpointSaver._save`` (``epoch``, ``arch``, ``state_dict`` of
  ``get_state_dict(model, unwrap_model)`` -- ``unwrap_model`` follows ``.module`` and
  ``._orig_mod`` --, ``optimizer``, ``version``, ``state_dict_ema``, ``metric``) and nanoGPT's
  ``checkpoint = {'model': raw_model.state_dict(), ...}`` of the compiled model;
- timm's ``resume_checkpoint`` with ``clean_state_dict`` (strips ``module.`` and
  ``_orig_mod.``) on a fresh model and optimizer: the resumed run continues the original's
  trajectory;
- fine-tuning with a new classifier as timm's ``load_pretrained`` does it (the classifier's
  keys popped, ``load_state_dict(strict=False)``, its ``missing_keys`` and
  ``unexpected_keys`` logged), and nanoGPT's ``unwanted_prefix = '_orig_mod.'`` loop loading
  with ``assign=True``; ``parameters_to_vector`` for the logged weight norm, then
  ``vector_to_parameters`` to restore a snapshot.

The lines changed: the ``import`` lines and the gradient lines.
"""

from __future__ import annotations

import os
import random

import numpy as np
import pytest
import torch

import retrograd as rg
from real_ports import assert_records_agree, params_of, runs_with_draws


@pytest.fixture(autouse=True)
def _seeded():
    torch.manual_seed(0)
    np.random.seed(0)
    random.seed(0)
    rg.seed(0)


TIMM_CHECKPOINT_SOURCE = """
import torch
import torch.nn as nn
import torch.nn.functional as F
from copy import deepcopy
from torch.nn.utils import parameters_to_vector, vector_to_parameters


def param_groups_weight_decay(model, weight_decay=1e-5, no_weight_decay_list=()):
    no_weight_decay_list = set(no_weight_decay_list)
    decay = []
    no_decay = []
    for name, param in model.named_parameters():
        if not param.requires_grad:
            continue

        if param.ndim <= 1 or name.endswith(".bias") or name in no_weight_decay_list:
            no_decay.append(param)
        else:
            decay.append(param)

    return [
        {'params': no_decay, 'weight_decay': 0.},
        {'params': decay, 'weight_decay': weight_decay}]


class ModelEmaV2(nn.Module):
    def __init__(self, model, decay=0.9999, device=None):
        super().__init__()
        self.module = deepcopy(model)
        self.module.eval()
        self.decay = decay
        self.device = device

    def _update(self, model, update_fn):
        with torch.no_grad():
            for ema_v, model_v in zip(self.module.state_dict().values(), model.state_dict().values()):
                ema_v.copy_(update_fn(ema_v, model_v))

    def update(self, model):
        self._update(model, update_fn=lambda e, m: self.decay * e + (1. - self.decay) * m)


def unwrap_model(model):
    if isinstance(model, ModelEmaV2):
        return unwrap_model(model.module)
    else:
        if hasattr(model, 'module'):
            return unwrap_model(model.module)
        elif hasattr(model, '_orig_mod'):
            return unwrap_model(model._orig_mod)
        else:
            return model


def get_state_dict(model, unwrap_fn=unwrap_model):
    return unwrap_fn(model).state_dict()


def clean_state_dict(state_dict):
    # 'clean' checkpoint by removing .module prefix from state dict if it exists from parallel training
    cleaned_state_dict = {}
    to_remove = (
        'module.',  # DDP wrapper
        '_orig_mod.',  # torchcompile dynamo wrapper
    )
    for k, v in state_dict.items():
        for r in to_remove:
            k = k[len(r):] if k.startswith(r) else k
        cleaned_state_dict[k] = v
    return cleaned_state_dict


def resume_checkpoint(model, checkpoint_path, optimizer=None, loss_scaler=None, log_info=True):
    resume_epoch = None
    if os.path.isfile(checkpoint_path):
        checkpoint = torch.load(checkpoint_path, map_location='cpu', weights_only=False)
        if isinstance(checkpoint, dict) and 'state_dict' in checkpoint:
            if log_info:
                print('Restoring model state from checkpoint...')
            state_dict = clean_state_dict(checkpoint['state_dict'])
            model.load_state_dict(state_dict)

            if optimizer is not None and 'optimizer' in checkpoint:
                if log_info:
                    print('Restoring optimizer state from checkpoint...')
                optimizer.load_state_dict(checkpoint['optimizer'])

            if 'epoch' in checkpoint:
                resume_epoch = checkpoint['epoch']
                if 'version' in checkpoint and checkpoint['version'] > 1:
                    resume_epoch += 1  # start at the next epoch, old checkpoints incremented before save

            if log_info:
                print("Loaded checkpoint '{}' (epoch {})".format(checkpoint_path, checkpoint['epoch']))
        else:
            model.load_state_dict(checkpoint)
            if log_info:
                print("Loaded checkpoint '{}'".format(checkpoint_path))
        return resume_epoch
    else:
        raise FileNotFoundError()


class ConvNet(nn.Module):
    def __init__(self, num_classes=4):
        super().__init__()
        self.conv_stem = nn.Conv2d(3, 6, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(6)
        self.conv = nn.Conv2d(6, 8, 3, stride=2, padding=1)
        self.global_pool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Linear(8, num_classes)

    def forward(self, x):
        x = F.relu(self.bn1(self.conv_stem(x)))
        x = F.relu(self.conv(x))
        return self.classifier(self.global_pool(x).flatten(1))


def train_steps(model, optimizer, batches, model_ema=None):
    model.train()
    for x, y in batches:
        loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if model_ema is not None:
            model_ema.update(model)
        record.append(loss.item())
        record.append(params_of(unwrap_model(model)))


batches = [(torch.randn(4, 3, 6, 6), torch.randint(0, 4, (4,))) for _ in range(5)]
model = ConvNet()
initialize(model)
model_ema = ModelEmaV2(model, decay=0.5)
optimizer = torch.optim.SGD(param_groups_weight_decay(model, 1e-2), lr=0.05, momentum=0.9, nesterov=True)
model = torch.compile(model)
record.append(repr(list(model.state_dict())[:2]))
train_steps(model, optimizer, batches[:3], model_ema)

# timm's CheckpointSaver._save and nanoGPT's checkpoint of the compiled model
save_state = {
    'epoch': 0,
    'arch': type(unwrap_model(model)).__name__.lower(),
    'state_dict': get_state_dict(model, unwrap_model),
    'optimizer': optimizer.state_dict(),
    'version': 2,  # version < 2 increments epoch before save
    'state_dict_ema': get_state_dict(model_ema, lambda m: m),
    'metric': 0.5,
}
torch.save(save_state, os.path.join(out_dir, 'checkpoint-0.pth.tar'))
torch.save({'model': model.state_dict(), 'iter_num': 3, 'best_val_loss': 1e9}, os.path.join(out_dir, 'ckpt.pt'))
train_steps(model, optimizer, batches[3:])

# timm's --resume, on a fresh model and optimizer
resumed = ConvNet()
resumed_optimizer = torch.optim.SGD(param_groups_weight_decay(resumed, 1e-2), lr=0.05, momentum=0.9, nesterov=True)
resume_epoch = resume_checkpoint(resumed, os.path.join(out_dir, 'checkpoint-0.pth.tar'), optimizer=resumed_optimizer)
record.append(float(resume_epoch))
train_steps(resumed, resumed_optimizer, batches[3:])

# fine-tuning from the EMA weights with a new classifier, as timm's load_pretrained
finetuned = ConvNet(num_classes=3)
checkpoint = torch.load(os.path.join(out_dir, 'checkpoint-0.pth.tar'), map_location='cpu', weights_only=False)
state_dict = clean_state_dict(checkpoint['state_dict_ema'])
classifier_name = 'classifier'
state_dict.pop(classifier_name + '.weight')
state_dict.pop(classifier_name + '.bias')
state_dict['head_dist.weight'] = torch.zeros(3, 8)  # a distilled head this model has not
load_result = finetuned.load_state_dict(state_dict, strict=False)
if load_result.missing_keys:
    print(f'Missing keys ({", ".join(load_result.missing_keys)}) discovered while loading pretrained weights.')
if load_result.unexpected_keys:
    print(f'Unexpected keys ({", ".join(load_result.unexpected_keys)}) found while loading pretrained weights.')
record.append(repr((load_result.missing_keys, load_result.unexpected_keys)))
with torch.no_grad():
    finetuned.classifier.weight.copy_(torch.randn(3, 8) * 0.1)
    finetuned.classifier.bias.zero_()
snapshot = parameters_to_vector(finetuned.parameters()).detach().clone()
record.append(float(snapshot.norm()))
ft_optimizer = torch.optim.AdamW(finetuned.parameters(), lr=1e-2)
targets = [(x, y % 3) for x, y in batches]
train_steps(finetuned, ft_optimizer, targets[:2])
record.append(float(parameters_to_vector(finetuned.parameters()).norm()))
vector_to_parameters(snapshot, finetuned.parameters())
record.append(params_of(finetuned))

# nanoGPT's resume: the compiled model's checkpoint, its prefix stripped, loaded with assign
checkpoint = torch.load(os.path.join(out_dir, 'ckpt.pt'), map_location='cpu')
state_dict = checkpoint['model']
unwanted_prefix = '_orig_mod.'
for k,v in list(state_dict.items()):
    if k.startswith(unwanted_prefix):
        state_dict[k[len(unwanted_prefix):]] = state_dict.pop(k)
nano = ConvNet()
nano.load_state_dict(state_dict, assign=True)
iter_num = checkpoint['iter_num']
record.append(params_of(nano))
record.append(float(iter_num))
"""

TIMM_CHECKPOINT_STEPS = [
    (
        "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n",
        "import retrograd as torch\nimport retrograd.nn as nn\nimport retrograd.nn.functional as F\n",
    ),
    (
        "        loss.backward()\n        optimizer.step()\n",
        "        grads = loss.backward()\n        optimizer.step(grads)\n",
    ),
]


def test_timm_checkpoint_resume_and_finetune_state_dict_surgery_as_torch(capsys, tmp_path):
    states = []

    def initialize(module):
        if isinstance(module, torch.nn.Module):
            states.append({k: v.detach().numpy().copy() for k, v in module.state_dict().items()})
        else:
            module.load_state_dict(states[0])

    def out_dir(lib):
        (tmp_path / lib.__name__).mkdir()
        return str(tmp_path / lib.__name__)

    (theirs, ours), logs = runs_with_draws(
        TIMM_CHECKPOINT_SOURCE, TIMM_CHECKPOINT_STEPS, capsys, 21301, initialize=initialize,
        params_of=params_of, os=os, make_out_dir=out_dir,
    )  # fmt: skip
    assert theirs[0] == "['_orig_mod.conv_stem.weight', '_orig_mod.bn1.weight']"
    assert_records_agree(ours, theirs, rtol=1e-4, atol=1e-6)
    # the resumed run continues the original's trajectory (records 7-10 and 12-15)
    assert_records_agree(ours[12:16], ours[7:11], rtol=0, atol=0)
    assert logs[1].replace("retrograd", "torch") == logs[0]
    assert "Missing keys (classifier.weight, classifier.bias)" in logs[1]
