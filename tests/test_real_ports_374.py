# ruff: noqa: E501, W291, W293  (the programs are kept as their authors wrote them)
"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):
an energy-based model trained by contrastive divergence with SGLD samples, as the UvA deep
learning course writes it (phlippe/uvadlc_notebooks, ``tutorial8/Deep_Energy_Models.ipynb``:
``Swish``, ``CNNModel``, the replay-buffer ``Sampler`` with its MCMC ``generate_samples``,
``DeepEnergyModel``'s ``configure_optimizers``/``training_step``/``validation_step``,
``GenerateCallback.generate_imgs`` and ``OutlierCallback``), a training step (60 MCMC steps) and a validation
pass, then 20 steps of generation, against torch's run of the same code from the same weights
and draws.

What it exercises: Langevin dynamics on the input (``p.requires_grad = False`` over the
model's parameters, ``inp_imgs.requires_grad = True`` on a buffer batch, ``noise.normal_(0,
0.005)`` into a buffer tensor, ``inp_imgs.data.add_(noise.data)``, ``inp_imgs.data.clamp_(min=
-1.0, max=1.0)``, the gradient of ``-model(inp_imgs)``'s sum with respect to the images clamped
in place through ``.data`` and applied by ``inp_imgs.data.add_(-step_size * ...)``), the replay
buffer (``torch.rand((1,)+img_shape)*2-1`` examples, ``np.random.binomial``,
``random.choices`` of tensors joined by ``torch.cat``, ``list(inp_imgs.to(torch.device("cpu"))
.chunk(self.sample_size, dim=0)) + self.examples``), ``torch.stack(imgs_per_step, dim=0)``;
the CNN (``Conv2d(..., padding=4)`` on 28x28 digits, ``nn.Flatten``, ``.squeeze(dim=-1)``); the
training step's ``real_imgs.add_(small_noise).clamp_(...)`` on a loaded batch, ``.chunk(2,
dim=0)`` of the energies, the regularised contrastive-divergence loss; Adam with ``betas=(beta1,
0.999)`` and ``beta1=0.0``, ``StepLR(optimizer, 1, gamma=0.97)``; the validation's
``torch.rand_like(real_imgs) * 2 - 1``; ``torch.no_grad()`` around the outlier score.

Stand-ins: PyTorch Lightning is a small trainer loop written for the test in Lightning's order
(``training_step``, ``zero_grad``, backward, ``gradient_clip_val=0.1`` as
``clip_grad_norm_``, ``step``; the scheduler stepped each epoch; ``self.log`` and
``save_hyperparameters`` of the module a minimal ``LightningModule``); MNIST is 8 random 28x28
images in ``[-1, 1]``; ``noise.normal_`` and ``torch.rand_like`` draw, as ``torch.rand`` and
``torch.randn`` do, from one seeded stream in both runs; NumPy's and Python's global streams are
seeded alike. The lines changed for the port: the ``import`` lines and the gradient lines
(``grads = out_imgs.sum().backward()`` and ``inp_imgs.grad(grads)`` where the notebook reads
``inp_imgs.grad`` (the notebook's ``detach_``/``zero_`` of the gradient dropped: retrograd's
backward returns fresh gradients), ``grads = loss.backward()``, ``clip_grad_norm_(grads, ...)``,
``optimizer.step(grads)``).
"""

from __future__ import annotations

import inspect
import random
import types

import numpy as np
import pytest
import torch

import retrograd as rg
from real_ports import SharedDraws, assert_records_agree, initializer, port, run_source

EBM_SOURCE = '''
## Standard libraries
import os
import json
import math
import numpy as np 
import random

## PyTorch
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.utils.data as data
import torch.optim as optim

device = torch.device("cuda:0") if torch.cuda.is_available() else torch.device("cpu")

class Swish(nn.Module):
    
    def forward(self, x):
        return x * torch.sigmoid(x)

class CNNModel(nn.Module):

    def __init__(self, hidden_features=32, out_dim=1, **kwargs):
        super().__init__()
        # We increase the hidden dimension over layers. Here pre-calculated for simplicity.
        c_hid1 = hidden_features//2
        c_hid2 = hidden_features
        c_hid3 = hidden_features*2
        
        # Series of convolutions and Swish activation functions
        self.cnn_layers = nn.Sequential(
                nn.Conv2d(1, c_hid1, kernel_size=5, stride=2, padding=4), # [16x16] - Larger padding to get 32x32 image
                Swish(),
                nn.Conv2d(c_hid1, c_hid2, kernel_size=3, stride=2, padding=1), #  [8x8]
                Swish(),
                nn.Conv2d(c_hid2, c_hid3, kernel_size=3, stride=2, padding=1), # [4x4]
                Swish(),
                nn.Conv2d(c_hid3, c_hid3, kernel_size=3, stride=2, padding=1), # [2x2]
                Swish(),
                nn.Flatten(),
                nn.Linear(c_hid3*4, c_hid3),
                Swish(),
                nn.Linear(c_hid3, out_dim)
        )


    def forward(self, x):
        x = self.cnn_layers(x).squeeze(dim=-1)
        return x

class Sampler:

    def __init__(self, model, img_shape, sample_size, max_len=8192):
        """
        Inputs:
            model - Neural network to use for modeling E_theta
            img_shape - Shape of the images to model
            sample_size - Batch size of the samples
            max_len - Maximum number of data points to keep in the buffer
        """
        super().__init__()
        self.model = model
        self.img_shape = img_shape
        self.sample_size = sample_size
        self.max_len = max_len
        self.examples = [(torch.rand((1,)+img_shape)*2-1) for _ in range(self.sample_size)]

    def sample_new_exmps(self, steps=60, step_size=10):
        """
        Function for getting a new batch of "fake" images.
        Inputs:
            steps - Number of iterations in the MCMC algorithm
            step_size - Learning rate nu in the algorithm above
        """
        # Choose 95% of the batch from the buffer, 5% generate from scratch
        n_new = np.random.binomial(self.sample_size, 0.05)
        rand_imgs = torch.rand((n_new,) + self.img_shape) * 2 - 1
        old_imgs = torch.cat(random.choices(self.examples, k=self.sample_size-n_new), dim=0)
        inp_imgs = torch.cat([rand_imgs, old_imgs], dim=0).detach().to(device)

        # Perform MCMC sampling
        inp_imgs = Sampler.generate_samples(self.model, inp_imgs, steps=steps, step_size=step_size)

        # Add new images to the buffer and remove old ones if needed
        self.examples = list(inp_imgs.to(torch.device("cpu")).chunk(self.sample_size, dim=0)) + self.examples
        self.examples = self.examples[:self.max_len]
        return inp_imgs

    @staticmethod
    def generate_samples(model, inp_imgs, steps=60, step_size=10, return_img_per_step=False):
        """
        Function for sampling images for a given model. 
        Inputs:
            model - Neural network to use for modeling E_theta
            inp_imgs - Images to start from for sampling. If you want to generate new images, enter noise between -1 and 1.
            steps - Number of iterations in the MCMC algorithm.
            step_size - Learning rate nu in the algorithm above
            return_img_per_step - If True, we return the sample at every iteration of the MCMC
        """
        # Before MCMC: set model parameters to "required_grad=False"
        # because we are only interested in the gradients of the input. 
        is_training = model.training
        model.eval()
        for p in model.parameters():
            p.requires_grad = False
        inp_imgs.requires_grad = True
        
        # We use a buffer tensor in which we generate noise each loop iteration.
        # More efficient than creating a new tensor every iteration.
        noise = torch.randn(inp_imgs.shape, device=inp_imgs.device)
        
        # List for storing generations at each step (for later analysis)
        imgs_per_step = []
        
        # Loop over K (steps)
        for _ in range(steps):
            # Part 1: Add noise to the input.
            noise.normal_(0, 0.005)
            inp_imgs.data.add_(noise.data)
            inp_imgs.data.clamp_(min=-1.0, max=1.0)
            
            # Part 2: calculate gradients for the current input.
            out_imgs = -model(inp_imgs)
            out_imgs.sum().backward()
            inp_imgs.grad.data.clamp_(-0.03, 0.03) # For stabilizing and preventing too high gradients

            # Apply gradients to our current samples
            inp_imgs.data.add_(-step_size * inp_imgs.grad.data)
            inp_imgs.grad.detach_()
            inp_imgs.grad.zero_()
            inp_imgs.data.clamp_(min=-1.0, max=1.0)
            
            if return_img_per_step:
                imgs_per_step.append(inp_imgs.clone().detach())
        
        # Reactivate gradients for parameters for training
        for p in model.parameters():
            p.requires_grad = True
        model.train(is_training)

        if return_img_per_step:
            return torch.stack(imgs_per_step, dim=0)
        else:
            return inp_imgs

class DeepEnergyModel(pl.LightningModule):
    
    def __init__(self, img_shape, batch_size, alpha=0.1, lr=1e-4, beta1=0.0, **CNN_args):
        super().__init__()
        self.save_hyperparameters()
        
        self.cnn = CNNModel(**CNN_args)
        self.sampler = Sampler(self.cnn, img_shape=img_shape, sample_size=batch_size)
        self.example_input_array = torch.zeros(1, *img_shape)
        
        
    def forward(self, x):
        z = self.cnn(x)
        return z
    
    
    def configure_optimizers(self):
        # Energy models can have issues with momentum as the loss surfaces changes with its parameters. 
        # Hence, we set it to 0 by default. 
        optimizer = optim.Adam(self.parameters(), lr=self.hparams.lr, betas=(self.hparams.beta1, 0.999))
        scheduler = optim.lr_scheduler.StepLR(optimizer, 1, gamma=0.97) # Exponential decay over epochs
        return [optimizer], [scheduler]
    
    
    def training_step(self, batch, batch_idx):
        # We add minimal noise to the original images to prevent the model from focusing on purely "clean" inputs
        real_imgs, _ = batch
        small_noise = torch.randn_like(real_imgs) * 0.005
        real_imgs.add_(small_noise).clamp_(min=-1.0, max=1.0)
        
        # Obtain samples
        fake_imgs = self.sampler.sample_new_exmps(steps=60, step_size=10)
        
        # Predict energy score for all images
        inp_imgs = torch.cat([real_imgs, fake_imgs], dim=0)
        real_out, fake_out = self.cnn(inp_imgs).chunk(2, dim=0)
        
        # Calculate losses
        reg_loss = self.hparams.alpha * (real_out ** 2 + fake_out ** 2).mean()
        cdiv_loss = fake_out.mean() - real_out.mean()
        loss = reg_loss + cdiv_loss
        
        # Logging
        self.log('loss', loss)
        self.log('loss_regularization', reg_loss)
        self.log('loss_contrastive_divergence', cdiv_loss)
        self.log('metrics_avg_real', real_out.mean())
        self.log('metrics_avg_fake', fake_out.mean())
        return loss
    
    
    def validation_step(self, batch, batch_idx):
        # For validating, we calculate the contrastive divergence between purely random images and unseen examples
        # Note that the validation/test step of energy-based models depends on what we are interested in the model
        real_imgs, _ = batch
        fake_imgs = torch.rand_like(real_imgs) * 2 - 1
        
        inp_imgs = torch.cat([real_imgs, fake_imgs], dim=0)
        real_out, fake_out = self.cnn(inp_imgs).chunk(2, dim=0)
        
        cdiv = fake_out.mean() - real_out.mean()
        self.log('val_contrastive_divergence', cdiv)
        self.log('val_fake_out', fake_out.mean())
        self.log('val_real_out', real_out.mean())

class GenerateCallback(pl.Callback):

    def __init__(self, batch_size=8, vis_steps=8, num_steps=256, every_n_epochs=5):
        super().__init__()
        self.batch_size = batch_size         # Number of images to generate
        self.vis_steps = vis_steps           # Number of steps within generation to visualize
        self.num_steps = num_steps           # Number of steps to take during generation
        self.every_n_epochs = every_n_epochs # Only save those images every N epochs (otherwise tensorboard gets quite large)
                
    def generate_imgs(self, pl_module):
        pl_module.eval()
        start_imgs = torch.rand((self.batch_size,) + pl_module.hparams["img_shape"]).to(pl_module.device)
        start_imgs = start_imgs * 2 - 1
        imgs_per_step = Sampler.generate_samples(pl_module.cnn, start_imgs, steps=self.num_steps, step_size=10, return_img_per_step=True)
        pl_module.train()
        return imgs_per_step

class OutlierCallback(pl.Callback):
    
    def __init__(self, batch_size=1024):
        super().__init__()
        self.batch_size = batch_size
    
    def on_epoch_end(self, trainer, pl_module):
        with torch.no_grad():
            pl_module.eval()
            rand_imgs = torch.rand((self.batch_size,) + pl_module.hparams["img_shape"]).to(pl_module.device)
            rand_imgs = rand_imgs * 2 - 1.0
            rand_out = pl_module.cnn(rand_imgs).mean()
            pl_module.train()
        
        trainer.logger.experiment.add_scalar("rand_out", rand_out, global_step=trainer.current_epoch)

# -- the test's stand-in for pl.Trainer(gradient_clip_val=0.1).fit, one epoch of one batch -------
model = DeepEnergyModel(img_shape=(1, 28, 28), batch_size=4, lr=1e-4, beta1=0.0, hidden_features=16)
initialize(model)
[optimizer], [scheduler] = model.configure_optimizers()
train_loader = data.DataLoader(mnist, batch_size=4, shuffle=False, drop_last=True)
trainer = types.SimpleNamespace(current_epoch=0, logger=types.SimpleNamespace(experiment=types.SimpleNamespace(add_scalar=lambda name, value, global_step: logged.append((name, value.item())))))
outliers = OutlierCallback(batch_size=8)
for epoch in range(1):
    trainer.current_epoch = epoch
    model.train()
    for batch_idx, batch in enumerate(train_loader):
        if batch_idx == 1:
            break
        loss = model.training_step(batch, batch_idx)
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.1)
        optimizer.step()
    scheduler.step()
    model.eval()
    with torch.no_grad():
        model.validation_step(next(iter(train_loader)), 0)
    outliers.on_epoch_end(trainer, model)
record.append([name for name, _ in logged])
record.append([value for _, value in logged])
record.append({k: v.detach().numpy() for k, v in model.state_dict().items()})
record.append(torch.cat(model.sampler.examples).detach().numpy())
callback = GenerateCallback(batch_size=4, vis_steps=4, num_steps=20)
imgs_per_step = callback.generate_imgs(model)
record.append(imgs_per_step.numpy())
record.append([p.requires_grad for p in model.parameters()] + [model.training])
'''

EBM_STEPS = [
    (
        "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\nimport torch.utils.data as data\nimport torch.optim as optim\n",
        "import retrograd as torch\nimport retrograd.nn as nn\nimport retrograd.nn.functional as F\nimport retrograd.utils.data as data\nimport retrograd.optim as optim\n",
    ),
    (
        "            out_imgs.sum().backward()\n            inp_imgs.grad.data.clamp_(-0.03, 0.03) # For stabilizing and preventing too high gradients\n\n            # Apply gradients to our current samples\n            inp_imgs.data.add_(-step_size * inp_imgs.grad.data)\n            inp_imgs.grad.detach_()\n            inp_imgs.grad.zero_()\n",
        "            grads = out_imgs.sum().backward()\n            inp_imgs.grad(grads).data.clamp_(-0.03, 0.03) # For stabilizing and preventing too high gradients\n\n            # Apply gradients to our current samples\n            inp_imgs.data.add_(-step_size * inp_imgs.grad(grads).data)\n",
    ),
    (
        "        loss.backward()\n        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.1)\n        optimizer.step()\n",
        "        grads = loss.backward()\n        torch.nn.utils.clip_grad_norm_(grads, model.parameters(), 0.1)\n        optimizer.step(grads)\n",
    ),
]


def lightning_stand_in(lib, logged):
    """The part of ``pytorch_lightning`` the notebook's module uses: ``save_hyperparameters``
    (the ``__init__`` arguments as ``hparams``, by attribute and by key), ``log`` (kept as
    numbers), ``device``; ``Callback`` a plain base."""

    class LightningModule(lib.nn.Module):
        def save_hyperparameters(self):
            caller = inspect.currentframe().f_back
            arguments = inspect.getargvalues(caller)
            values = {name: arguments.locals[name] for name in arguments.args[1:]}
            values.update(arguments.locals.get(arguments.keywords, {}))
            self.hparams = HParams(values)

        def log(self, name, value):
            logged.append((name, float(value.detach())))

        @property
        def device(self):
            return lib.device("cpu")

    class Callback:
        pass

    return types.SimpleNamespace(LightningModule=LightningModule, Callback=Callback)


class HParams(dict):
    """Lightning's ``AttributeDict``: keys read as attributes too."""

    def __getattr__(self, name):
        return self[name]


@pytest.fixture
def shared_in_place_draws(monkeypatch):
    """``Tensor.normal_`` and ``rand_like`` of a library drawing from a seeded stream (each
    library's own generator otherwise)."""

    def for_lib(lib, seed):
        rng = np.random.default_rng(seed + 1)

        def normal_(self, mean=0.0, std=1.0, *, generator=None):
            drawn = lib.tensor(rng.normal(mean, std, tuple(self.shape)), dtype=self.dtype)
            with lib.no_grad():
                self.copy_(drawn)
            return self

        def rand_like(t, **_):
            return lib.tensor(rng.uniform(size=tuple(t.shape)), dtype=t.dtype)

        monkeypatch.setattr(lib.Tensor, "normal_", normal_)
        monkeypatch.setattr(lib, "rand_like", rand_like)

    return for_lib


def test_uvadlc_energy_model_trains_by_sgld_and_generates_as_torch(capsys, shared_in_place_draws):
    initialize, records = initializer(), []
    images = np.random.default_rng(374).uniform(-1, 1, (8, 1, 28, 28)).astype(np.float32)
    labels = np.arange(8) % 10
    torch.manual_seed(374)
    for lib in (torch, rg):
        record, logged = [], []
        np.random.seed(374)
        random.seed(374)
        text = EBM_SOURCE if lib is torch else port(EBM_SOURCE, EBM_STEPS)
        shared_in_place_draws(lib, 374)
        with SharedDraws(lib, 374):
            run_source(
                text,
                lib,
                record=record,
                logged=logged,
                initialize=initialize,
                types=types,
                pl=lightning_stand_in(lib, logged),
                mnist=lib.utils.data.TensorDataset(lib.tensor(images), lib.tensor(labels)),
            )
        records.append(record)
    theirs, ours = records
    assert capsys.readouterr().out == ""
    assert theirs[0][:6] == [
        "loss",
        "loss_regularization",
        "loss_contrastive_divergence",
        "metrics_avg_real",
        "metrics_avg_fake",
        "val_contrastive_divergence",
    ]
    assert len(theirs[0]) == 5 + 3 + 1 and theirs[0][-1] == "rand_out"
    assert theirs[-1] == [True] * 12 + [
        True
    ]  # requires_grad restored after MCMC, training mode too
    assert_records_agree(ours, theirs, rtol=2e-4, atol=2e-5)
