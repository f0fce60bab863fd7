# ruff: noqa: E501  (the programs are kept as their authors wrote them)
"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):

- the transfer learning tutorial (pytorch/tutorials
  ``beginner_source/transfer_learning_tutorial.py``) on a small backbone loaded from a state
  dict: every parameter frozen by ``requires_grad = False``, ``model.fc`` replaced, SGD over
  ``model.fc.parameters()``, ``StepLR``, train/val phases under
  ``torch.set_grad_enabled(phase == 'train')``, ``torch.sum(preds == labels.data)``,
  ``running_corrects.double() / n``, the best weights kept by ``copy.deepcopy(model.state_dict())``
  and loaded back; then the last block unfrozen and given its own group by
  ``add_param_group``, BatchNorm kept in eval by ``model.apply(set_bn_eval)``
  (``m.__class__.__name__.find('BatchNorm')``), and SWA: ``AveragedModel``, ``SWALR``
  (``anneal_epochs``) and ``update_bn`` over a loader of images;
- WGAN-GP as PyTorch-GAN writes it (github.com/eriklindernoren/PyTorch-GAN
  ``implementations/wgan_gp``): ``*block(...)`` lists unpacked into ``nn.Sequential``,
  ``nn.BatchNorm1d(out_feat, 0.8)`` (0.8 is the eps, positionally), ``LeakyReLU(inplace=True)``,
  ``Tensor = torch.FloatTensor`` called on NumPy draws and as ``Tensor(n, 1).fill_(1.0)``,
  ``Variable(..., requires_grad=False)``, ``imgs.type(Tensor)``, the gradient penalty through
  ``autograd.grad(outputs=, inputs=, grad_outputs=, create_graph=True, retain_graph=True,
  only_inputs=True)``, ``gradients.norm(2, dim=1)``, and a generator step every ``n_critic``.

Both ran unchanged but for the gradient lines (and ``import torch.autograd as autograd``).
"""

from __future__ import annotations

import numpy as np
import torch

import retrograd as rg
from real_ports import assert_records_agree, both, state_of

# -- transfer learning -----------------------------------------------------------------------------
TRANSFER_SOURCE = """
import copy
import time
from torch.optim import lr_scheduler
from torch.optim.swa_utils import AveragedModel, SWALR

class Backbone(nn.Module):
    def __init__(self, num_classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, kernel_size=3, stride=1, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(8)
        self.relu = nn.ReLU(inplace=True)
        self.layer1 = nn.Sequential(nn.Conv2d(8, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU(inplace=True))
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(8, num_classes)
    def forward(self, x):
        x = self.relu(self.bn1(self.conv1(x)))
        x = self.layer1(x)
        x = self.avgpool(x)
        x = torch.flatten(x, 1)
        return self.fc(x)

def train_model(model, criterion, optimizer, scheduler, dataloaders, dataset_sizes, num_epochs=2):
    since = time.time()
    best_model_wts = copy.deepcopy(model.state_dict())
    best_acc = 0.0
    records = []
    for epoch in range(num_epochs):
        for phase in ['train', 'val']:
            if phase == 'train':
                model.train()
            else:
                model.eval()
            running_loss = 0.0
            running_corrects = 0
            for inputs, labels in dataloaders[phase]:
                optimizer.zero_grad()
                with torch.set_grad_enabled(phase == 'train'):
                    outputs = model(inputs)
                    _, preds = torch.max(outputs, 1)
                    loss = criterion(outputs, labels)
                    if phase == 'train':
                        loss.backward()
                        optimizer.step()
                running_loss += loss.item() * inputs.size(0)
                running_corrects += torch.sum(preds == labels.data)
            if phase == 'train':
                scheduler.step()
            epoch_loss = running_loss / dataset_sizes[phase]
            epoch_acc = running_corrects.double() / dataset_sizes[phase]
            records.append([epoch_loss, epoch_acc.item()])
            if phase == 'val' and epoch_acc > best_acc:
                best_acc = epoch_acc
                best_model_wts = copy.deepcopy(model.state_dict())
        records.append({n: p.detach().numpy().copy() for n, p in model.named_parameters()})
    model.load_state_dict(best_model_wts)
    return model, records

def set_bn_eval(m):
    classname = m.__class__.__name__
    if classname.find('BatchNorm') != -1:
        m.eval()

def main(pretrained, dataloaders, dataset_sizes):
    model_conv = Backbone()
    model_conv.load_state_dict(pretrained)
    for param in model_conv.parameters():
        param.requires_grad = False
    num_ftrs = model_conv.fc.in_features
    model_conv.fc = nn.Linear(num_ftrs, 2)
    with torch.no_grad():
        model_conv.fc.weight.copy_(torch.linspace(-0.3, 0.3, 2 * num_ftrs).view(2, num_ftrs))
        model_conv.fc.bias.zero_()
    criterion = nn.CrossEntropyLoss()
    optimizer_conv = optim.SGD(model_conv.fc.parameters(), lr=0.01, momentum=0.9)
    exp_lr_scheduler = lr_scheduler.StepLR(optimizer_conv, step_size=1, gamma=0.1)
    model_conv, records = train_model(model_conv, criterion, optimizer_conv, exp_lr_scheduler, dataloaders, dataset_sizes)
    # unfreeze the last block, a new group with its own learning rate, BatchNorm kept frozen
    for param in model_conv.layer1.parameters():
        param.requires_grad = True
    optimizer_conv.add_param_group({'params': model_conv.layer1.parameters(), 'lr': 1e-3})
    model_conv.apply(set_bn_eval)
    swa_model = AveragedModel(model_conv)
    swa_scheduler = SWALR(optimizer_conv, swa_lr=0.005, anneal_epochs=1)
    for epoch in range(2):
        for inputs, labels in dataloaders['train']:
            model_conv.train()
            model_conv.apply(set_bn_eval)
            optimizer_conv.zero_grad()
            loss = criterion(model_conv(inputs), labels)
            loss.backward()
            optimizer_conv.step()
            records.append(loss.item())
        swa_model.update_parameters(model_conv)
        swa_scheduler.step()
        records.append([g['lr'] for g in optimizer_conv.param_groups])
    torch.optim.swa_utils.update_bn(dataloaders['train_images'], swa_model)
    records.append({k: np.asarray(v.numpy() if hasattr(v, 'numpy') else v, dtype=np.float64).copy() for k, v in swa_model.state_dict().items()})
    return records
"""

TRANSFER_STEP = [
    (
        "                        loss.backward()\n                        optimizer.step()",
        "                        grads = loss.backward()\n                        optimizer.step(grads)",
    ),
    (
        "            loss.backward()\n            optimizer_conv.step()",
        "            grads = loss.backward()\n            optimizer_conv.step(grads)",
    ),
]


def test_transfer_learning_tutorial_with_unfreezing_and_swa_matches_torch():
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((12, 3, 8, 8)), rng.integers(0, 2, 12)
    x_val, y_val = rng.standard_normal((6, 3, 8, 8)), rng.integers(0, 2, 6)
    theirs, ours = both(TRANSFER_SOURCE, TRANSFER_STEP)
    torch.manual_seed(0)
    pretrained = state_of(theirs["Backbone"]())
    records = []
    for lib, names in ((torch, theirs), (rg, ours)):
        f32 = lib.float32
        loaders = {
            "train": [
                (lib.tensor(x[i : i + 4], dtype=f32), lib.tensor(y[i : i + 4]))
                for i in range(0, 12, 4)
            ],
            "val": [
                (lib.tensor(x_val[i : i + 3], dtype=f32), lib.tensor(y_val[i : i + 3]))
                for i in range(0, 6, 3)
            ],
            "train_images": [lib.tensor(x[i : i + 4], dtype=f32) for i in range(0, 12, 4)],
        }
        state = {k: lib.tensor(v) for k, v in pretrained.items()}
        records.append(names["main"](state, loaders, {"train": 12, "val": 6}))
    assert_records_agree(records[1], records[0], rtol=1e-5, atol=1e-6)


# -- WGAN-GP ---------------------------------------------------------------------------------------
WGAN_SOURCE = """
import torch.autograd as autograd
from torch.autograd import Variable

img_shape = (1, 6, 6)
latent_dim = 8
cuda = True if torch.cuda.is_available() else False

class Generator(nn.Module):
    def __init__(self):
        super(Generator, self).__init__()
        def block(in_feat, out_feat, normalize=True):
            layers = [nn.Linear(in_feat, out_feat)]
            if normalize:
                layers.append(nn.BatchNorm1d(out_feat, 0.8))
            layers.append(nn.LeakyReLU(0.2, inplace=True))
            return layers
        self.model = nn.Sequential(
            *block(latent_dim, 16, normalize=False),
            *block(16, 32),
            nn.Linear(32, int(np.prod(img_shape))),
            nn.Tanh()
        )
    def forward(self, z):
        img = self.model(z)
        img = img.view(img.shape[0], *img_shape)
        return img

class Discriminator(nn.Module):
    def __init__(self):
        super(Discriminator, self).__init__()
        self.model = nn.Sequential(
            nn.Linear(int(np.prod(img_shape)), 32),
            nn.LeakyReLU(0.2, inplace=True),
            nn.Linear(32, 16),
            nn.LeakyReLU(0.2, inplace=True),
            nn.Linear(16, 1),
        )
    def forward(self, img):
        img_flat = img.view(img.shape[0], -1)
        validity = self.model(img_flat)
        return validity

Tensor = torch.cuda.FloatTensor if cuda else torch.FloatTensor

def compute_gradient_penalty(D, real_samples, fake_samples, rng):
    alpha = Tensor(rng.random((real_samples.size(0), 1, 1, 1)))
    interpolates = (alpha * real_samples + ((1 - alpha) * fake_samples)).requires_grad_(True)
    d_interpolates = D(interpolates)
    fake = Variable(Tensor(real_samples.shape[0], 1).fill_(1.0), requires_grad=False)
    gradients = autograd.grad(
        outputs=d_interpolates,
        inputs=interpolates,
        grad_outputs=fake,
        create_graph=True,
        retain_graph=True,
        only_inputs=True,
    )[0]
    gradients = gradients.view(gradients.size(0), -1)
    gradient_penalty = ((gradients.norm(2, dim=1) - 1) ** 2).mean()
    return gradient_penalty

def train(generator, discriminator, dataloader, rng, n_epochs=2, n_critic=2, lambda_gp=10):
    optimizer_G = torch.optim.Adam(generator.parameters(), lr=2e-3, betas=(0.5, 0.999))
    optimizer_D = torch.optim.Adam(discriminator.parameters(), lr=2e-3, betas=(0.5, 0.999))
    batches_done = 0
    records = []
    for epoch in range(n_epochs):
        for i, (imgs, _) in enumerate(dataloader):
            real_imgs = Variable(imgs.type(Tensor))
            optimizer_D.zero_grad()
            z = Variable(Tensor(rng.normal(0, 1, (imgs.shape[0], latent_dim))))
            fake_imgs = generator(z)
            real_validity = discriminator(real_imgs)
            fake_validity = discriminator(fake_imgs)
            gradient_penalty = compute_gradient_penalty(discriminator, real_imgs.data, fake_imgs.data, rng)
            d_loss = -torch.mean(real_validity) + torch.mean(fake_validity) + lambda_gp * gradient_penalty
            d_loss.backward()
            optimizer_D.step()
            optimizer_G.zero_grad()
            if i % n_critic == 0:
                fake_imgs = generator(z)
                fake_validity = discriminator(fake_imgs)
                g_loss = -torch.mean(fake_validity)
                g_loss.backward()
                optimizer_G.step()
                records.append([d_loss.item(), g_loss.item(), gradient_penalty.item()])
                batches_done += n_critic
    records.append({n: p.detach().numpy().copy() for n, p in list(generator.named_parameters()) + list(discriminator.named_parameters())})
    return records
"""

WGAN_STEP = [
    (
        "            d_loss.backward()\n            optimizer_D.step()",
        "            d_grads = d_loss.backward()\n            optimizer_D.step(d_grads)",
    ),
    (
        "                g_loss.backward()\n                optimizer_G.step()",
        "                g_grads = g_loss.backward()\n                optimizer_G.step(g_grads)",
    ),
    ("import torch.autograd as autograd", "import retrograd.autograd as autograd"),
]


def test_wgan_gp_with_gradient_penalty_matches_torch():
    theirs, ours = both(WGAN_SOURCE, WGAN_STEP)
    torch.manual_seed(0)
    generator, discriminator = theirs["Generator"](), theirs["Discriminator"]()
    initial = (state_of(generator), state_of(discriminator))
    records = []
    for lib, names in ((torch, theirs), (rg, ours)):
        if lib is rg:
            generator, discriminator = names["Generator"](), names["Discriminator"]()
            generator.load_state_dict(initial[0])
            discriminator.load_state_dict(initial[1])
        images = np.random.default_rng(1).standard_normal((4, 1, 6, 6))
        data = [(lib.tensor(images, dtype=lib.float32), None) for _ in range(4)]
        records.append(names["train"](generator, discriminator, data, np.random.default_rng(2)))
    assert_records_agree(records[1], records[0], rtol=1e-4, atol=1e-5)
