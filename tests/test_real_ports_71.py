# ruff: noqa: E501  (the programs are kept as their authors wrote them)
"""Real PyTorch programs ported to retrograd, continued from ``tests/test_real_ports_68.py`` (the
harness: ``tests/real_ports.py``): custom optimizers written as ``torch.optim.Optimizer``
subclasses the way their repositories write them, each training a small classifier against
torch's run of the same code:

- Lion as lucidrains/lion-pytorch writes it (``lion_pytorch.py``'s ``exists``, ``update_fn`` and
  ``Lion``): ``@torch.no_grad()`` on ``step``, a closure evaluated ``with torch.enable_grad()``,
  ``filter(lambda p: exists(p.grad), group['params'])``, ``self.state[p]``,
  ``p.data.mul_(1. - lr * wd)``, ``exp_avg.clone().mul_(beta1).add(grad, alpha=1. - beta1)
  .sign_()`` and the momentum by ``exp_avg.lerp_(grad, 1. - beta2)`` (the form of its later
  versions); per-group learning rates and ``add_param_group`` for a head added after the first
  steps; and its multi-tensor form (``lion_pytorch/foreach.py``: ``torch._foreach_mul_``,
  ``_foreach_lerp_``, ``_foreach_sign_``, ``_foreach_add_(params, updates, alpha=-lr)``).
- Sophia-G as Liu et al. write it (``sophia.py``'s ``SophiaG`` and ``_single_tensor_sophiag``;
  ``train_sophiag.py``'s Hessian refresh): ``state['step']`` a 0-d tensor stepped by
  ``step_t += 1``, ``update_hessian`` from the gradients of a loss on labels sampled by
  ``torch.distributions.Categorical(logits=logits).sample()`` (Gauss-Newton-Bartlett),
  ``addcmul_(p.grad, p.grad, value=1 - beta2)``, the ratio ``(exp_avg.abs() / (rho * bs * hess +
  1e-15)).clamp(None, 1)`` and ``param.addcmul_(exp_avg.sign(), ratio, value=step_size_neg)``;
  ``optimizer.zero_grad(set_to_none=True)``; the optimizer's and the model's state dicts saved
  mid-training and loaded into a fresh model and optimizer that carry on.
- Adan as sail-sg/Adan writes it (``adan.py``'s ``Adan``, ``_single_tensor_adan`` and, its
  default, ``_multi_tensor_adan`` of ``torch._foreach_*`` ops): the
  global gradient norm clip through ``torch.clamp(max_grad_norm / (global_grad_norm +
  group['eps']), max=1.0).item()``, the step count kept in the group (``group['step'] += 1``),
  ``state['neg_pre_grad'] = p.grad.clone().mul_(-clip_global_grad_norm)``, the gradient scaled
  in place (``grad.mul_(clip_global_grad_norm)``) and the proximal weight decay
  ``param.div_(1 + lr * weight_decay)``.
- Adafactor as huggingface/transformers writes it (``optimization.py``'s ``Adafactor``): the
  relative step, ``_rms`` by ``tensor.norm(2) / (tensor.numel() ** 0.5)``, factored second
  moments ``exp_avg_sq_row``/``exp_avg_sq_col`` for matrices, ``_approx_sq_grad`` by
  ``rsqrt_``/``rsqrt`` (here by ``torch.outer`` for a matrix, as other ports write it), the
  update clipped by ``(self._rms(update) / group["clip_threshold"]).clamp_(min=1.0)``; and
  ``torch.optim.Adafactor`` itself.
- Schedule-Free AdamW as facebookresearch/schedule_free writes it (``adamw_schedulefree.py``):
  the optimizer's own ``train()``/``eval()`` moving the parameters between the two sequences
  by ``p.data.lerp_(end=state['z'], weight=1-1/beta1)``, bookkeeping kept in the groups
  (``k``, ``weight_sum``, ``lr_max``, ``train_mode``, ``scheduled_lr``), ``torch.clone(p,
  memory_format=torch.preserve_format)``, the gradient normalised in place
  (``grad.div_(denom)``), and its multi-tensor path (``zip(*[(p, p.grad, ...)])`` into
  ``torch._foreach_div``, ``_foreach_sqrt_``, ``_foreach_lerp_(y, z, weight=ckp1)``,
  ``_foreach_sub_(z, grad, alpha=lr)``).
"""

from __future__ import annotations

import copy
import random

import numpy as np
import pytest
import torch

import retrograd as rg
from real_ports import assert_records_agree, initializer, params_of, port, run_source


@pytest.fixture(autouse=True)
def _seeded():
    torch.manual_seed(0)
    np.random.seed(0)
    random.seed(0)
    rg.seed(0)


class SharedCategorical:
    """``torch.distributions.Categorical(...).sample()`` of a library drawing from one seeded
    stream (the inverse of the CDF of the distribution's own probabilities)."""

    def __init__(self, lib, seed):
        self.lib, self.rng = lib, np.random.default_rng(seed)

    def __enter__(self):
        lib, rng = self.lib, self.rng
        self.cls = lib.distributions.Categorical
        self.saved = self.cls.sample

        def sample(distribution, sample_shape=()):
            probs = np.asarray(distribution.probs.detach().numpy(), dtype=np.float64)
            cdf = np.cumsum(probs, axis=-1)
            u = rng.uniform(size=probs.shape[:-1] + (1,)) * cdf[..., -1:]
            return lib.tensor((cdf < u).sum(-1), dtype=lib.int64)

        self.cls.sample = sample
        return self

    def __exit__(self, *exc):
        self.cls.sample = self.saved
        return False


OPTIMIZERS_SOURCE = '''
import math
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.optim.optimizer import Optimizer


# -- lion-pytorch ----------------------------------------------------------------------------------
def exists(val):
    return val is not None


def update_fn(p, grad, exp_avg, lr, wd, beta1, beta2):
    # stepweight decay

    p.data.mul_(1. - lr * wd)

    # weight update

    update = exp_avg.clone().mul_(beta1).add(grad, alpha = 1. - beta1).sign_()
    p.add_(update, alpha = -lr)

    # decay the momentum running average coefficient

    exp_avg.lerp_(grad, 1. - beta2)


class Lion(Optimizer):
    def __init__(
        self,
        params,
        lr: float = 1e-4,
        betas = (0.9, 0.99),
        weight_decay: float = 0.0,
    ):
        assert lr > 0.
        assert all([0. <= beta <= 1. for beta in betas])

        defaults = dict(
            lr = lr,
            betas = betas,
            weight_decay = weight_decay
        )

        super().__init__(params, defaults)

        self.update_fn = update_fn

    @torch.no_grad()
    def step(
        self,
        closure = None
    ):

        loss = None
        if exists(closure):
            with torch.enable_grad():
                loss = closure()

        for group in self.param_groups:
            for p in filter(lambda p: exists(p.grad), group['params']):

                grad, lr, wd, beta1, beta2, state = p.grad, group['lr'], group['weight_decay'], *group['betas'], self.state[p]

                # init state - exponential moving average of gradient values

                if len(state) == 0:
                    state['exp_avg'] = torch.zeros_like(p)

                exp_avg = state['exp_avg']

                self.update_fn(
                    p,
                    grad,
                    exp_avg,
                    lr,
                    wd,
                    beta1,
                    beta2
                )

        return loss


# lion_pytorch/foreach.py's Lion (named ForeachLion here, beside the other)
class ForeachLion(Optimizer):
    def __init__(
        self,
        params,
        lr: float = 1e-4,
        betas = (0.9, 0.99),
        weight_decay: float = 0.0,
        decoupled_weight_decay: bool = False
    ):
        assert lr > 0.
        assert all([0. <= beta <= 1. for beta in betas])
        assert all([hasattr(torch, f'_foreach_{attr}_') for attr in ('mul', 'add', 'sign', 'lerp')]), 'this version of torch does not have the prerequisite foreach functions'

        self._init_lr = lr
        self.decoupled_wd = decoupled_weight_decay

        defaults = dict(
            lr = lr,
            betas = betas,
            weight_decay = weight_decay
        )

        super().__init__(params, defaults)

    @torch.no_grad()
    def step(
        self,
        closure = None
    ):

        loss = None
        if exists(closure):
            with torch.enable_grad():
                loss = closure()

        for group in self.param_groups:

            lr, wd, beta1, beta2, decoupled_wd, init_lr = group['lr'], group['weight_decay'], *group['betas'], self.decoupled_wd, self._init_lr

            # maybe decoupled weight decay

            if decoupled_wd:
                wd /= init_lr

            # accumulate List[Tensor] for foreach inplace updates

            params = []
            grads = []
            exp_avgs = []

            for p in filter(lambda p: exists(p.grad), group['params']):

                grad, state = p.grad, self.state[p]

                # init state - exponential moving average of gradient values

                if len(state) == 0:
                    state['exp_avg'] = torch.zeros_like(p)

                exp_avg = state['exp_avg']

                params.append(p)
                grads.append(grad)
                exp_avgs.append(exp_avg)

            # stepweight decay

            torch._foreach_mul_(params, 1. - lr * wd)

            # weight update

            updates = [t.clone() for t in exp_avgs]
            torch._foreach_lerp_(updates, grads, 1. - beta1)
            torch._foreach_sign_(updates)

            torch._foreach_add_(params, updates, alpha = -lr)

            # decay momentum running average

            torch._foreach_lerp_(exp_avgs, grads, 1. - beta2)

        return loss


# -- Sophia ----------------------------------------------------------------------------------------
class SophiaG(Optimizer):
    def __init__(self, params, lr=1e-4, betas=(0.965, 0.99), rho = 0.04,
         weight_decay=1e-1, *, maximize: bool = False,
         capturable: bool = False):
        if not 0.0 <= lr:
            raise ValueError("Invalid learning rate: {}".format(lr))
        if not 0.0 <= betas[0] < 1.0:
            raise ValueError("Invalid beta parameter at index 0: {}".format(betas[0]))
        if not 0.0 <= betas[1] < 1.0:
            raise ValueError("Invalid beta parameter at index 1: {}".format(betas[1]))
        if not 0.0 <= rho:
            raise ValueError("Invalid rho parameter at index 1: {}".format(rho))
        if not 0.0 <= weight_decay:
            raise ValueError("Invalid weight_decay value: {}".format(weight_decay))
        defaults = dict(lr=lr, betas=betas, rho=rho,
                        weight_decay=weight_decay,
                        maximize=maximize, capturable=capturable)
        super(SophiaG, self).__init__(params, defaults)

    def __setstate__(self, state):
        super().__setstate__(state)
        for group in self.param_groups:
            group.setdefault('maximize', False)
            group.setdefault('capturable', False)
        state_values = list(self.state.values())
        step_is_tensor = (len(state_values) != 0) and torch.is_tensor(state_values[0]['step'])
        if not step_is_tensor:
            for s in state_values:
                s['step'] = torch.tensor(float(s['step']))

    @torch.no_grad()
    def update_hessian(self):
        for group in self.param_groups:
            beta1, beta2 = group['betas']
            for p in group['params']:
                if p.grad is None:
                    continue
                state = self.state[p]

                if len(state) == 0:
                    state['step'] = torch.zeros((1,), dtype=torch.float, device=p.device) \\
                        if self.defaults['capturable'] else torch.tensor(0.)
                    state['exp_avg'] = torch.zeros_like(p, memory_format=torch.preserve_format)
                    state['hessian'] = torch.zeros_like(p, memory_format=torch.preserve_format)

                if 'hessian' not in state.keys():
                    state['hessian'] = torch.zeros_like(p, memory_format=torch.preserve_format)

                state['hessian'].mul_(beta2).addcmul_(p.grad, p.grad, value=1 - beta2)


    @torch.no_grad()
    def step(self, closure=None, bs=5120):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()

        for group in self.param_groups:
            params_with_grad = []
            grads = []
            exp_avgs = []
            state_steps = []
            hessian = []
            beta1, beta2 = group['betas']

            for p in group['params']:
                if p.grad is None:
                    continue
                params_with_grad.append(p)

                if p.grad.is_sparse:
                    raise RuntimeError('Hero does not support sparse gradients')
                grads.append(p.grad)
                state = self.state[p]
                # State initialization
                if len(state) == 0:
                    state['step'] = torch.zeros((1,), dtype=torch.float, device=p.device) \\
                        if self.defaults['capturable'] else torch.tensor(0.)
                    state['exp_avg'] = torch.zeros_like(p, memory_format=torch.preserve_format)
                    state['hessian'] = torch.zeros_like(p, memory_format=torch.preserve_format)

                if 'hessian' not in state.keys():
                    state['hessian'] = torch.zeros_like(p, memory_format=torch.preserve_format)

                exp_avgs.append(state['exp_avg'])
                state_steps.append(state['step'])
                hessian.append(state['hessian'])

                if self.defaults['capturable']:
                    bs = torch.ones((1,), dtype=torch.float, device=p.device) * bs

            sophiag(params_with_grad,
                  grads,
                  exp_avgs,
                  hessian,
                  state_steps,
                  bs=bs,
                  beta1=beta1,
                  beta2=beta2,
                  rho=group['rho'],
                  lr=group['lr'],
                  weight_decay=group['weight_decay'],
                  maximize=group['maximize'],
                  capturable=group['capturable'])

        return loss

def sophiag(params,
          grads,
          exp_avgs,
          hessian,
          state_steps,
          capturable: bool = False,
          *,
          bs: int,
          beta1: float,
          beta2: float,
          rho: float,
          lr: float,
          weight_decay: float,
          maximize: bool):

    if not all(isinstance(t, torch.Tensor) for t in state_steps):
        raise RuntimeError("API has changed, `state_steps` argument must contain a list of singleton tensors")


    func = _single_tensor_sophiag

    func(params,
         grads,
         exp_avgs,
         hessian,
         state_steps,
         bs=bs,
         beta1=beta1,
         beta2=beta2,
         rho=rho,
         lr=lr,
         weight_decay=weight_decay,
         maximize=maximize,
         capturable=capturable)

def _single_tensor_sophiag(params,
                         grads,
                         exp_avgs,
                         hessian,
                         state_steps,
                         *,
                         bs: int,
                         beta1: float,
                         beta2: float,
                         rho: float,
                         lr: float,
                         weight_decay: float,
                         maximize: bool,
                         capturable: bool):

    for i, param in enumerate(params):
        grad = grads[i] if not maximize else -grads[i]
        exp_avg = exp_avgs[i]
        hess = hessian[i]
        step_t = state_steps[i]

        if capturable:
            assert param.is_cuda and step_t.is_cuda and bs.is_cuda

        if torch.is_complex(param):
            grad = torch.view_as_real(grad)
            exp_avg = torch.view_as_real(exp_avg)
            hess = torch.view_as_real(hess)
            param = torch.view_as_real(param)

        # update step
        step_t += 1

        # Perform stepweight decay
        param.mul_(1 - lr * weight_decay)

        # Decay the first and second moment running average coefficient
        exp_avg.mul_(beta1).add_(grad, alpha=1 - beta1)

        if capturable:
            step_size = lr
            step_size_neg = step_size.neg()

            ratio = (exp_avg.abs() / (rho * bs * hess + 1e-15)).clamp(None,1)
            param.addcmul_(exp_avg.sign(), ratio, value=step_size_neg)
        else:
            step_size_neg = - lr

            ratio = (exp_avg.abs() / (rho * bs * hess + 1e-15)).clamp(None,1)
            param.addcmul_(exp_avg.sign(), ratio, value=step_size_neg)


# -- Adan ------------------------------------------------------------------------------------------
class Adan(Optimizer):
    """
    Implements a pytorch variant of Adan
    Adan was proposed in
    Adan: Adaptive Nesterov Momentum Algorithm for
        Faster Optimizing Deep Models[J].arXiv preprint arXiv:2208.06677, 2022.
    https://arxiv.org/abs/2208.06677
    """
    def __init__(self,
                 params,
                 lr=1e-3,
                 betas=(0.98, 0.92, 0.99),
                 eps=1e-8,
                 weight_decay=0.0,
                 max_grad_norm=0.0,
                 no_prox=False,
                 foreach: bool = True,
                 fused: bool = False):
        if not 0.0 <= max_grad_norm:
            raise ValueError('Invalid Max grad norm: {}'.format(max_grad_norm))
        if not 0.0 <= lr:
            raise ValueError('Invalid learning rate: {}'.format(lr))
        if not 0.0 <= eps:
            raise ValueError('Invalid epsilon value: {}'.format(eps))
        if not 0.0 <= betas[0] < 1.0:
            raise ValueError('Invalid beta parameter at index 0: {}'.format(
                betas[0]))
        if not 0.0 <= betas[1] < 1.0:
            raise ValueError('Invalid beta parameter at index 1: {}'.format(
                betas[1]))
        if not 0.0 <= betas[2] < 1.0:
            raise ValueError('Invalid beta parameter at index 2: {}'.format(
                betas[2]))
        defaults = dict(lr=lr,
                        betas=betas,
                        eps=eps,
                        weight_decay=weight_decay,
                        max_grad_norm=max_grad_norm,
                        no_prox=no_prox,
                        foreach=foreach,
                        fused=fused)
        super().__init__(params, defaults)

    def __setstate__(self, state):
        super(Adan, self).__setstate__(state)
        for group in self.param_groups:
            group.setdefault('no_prox', False)

    @torch.no_grad()
    def restart_opt(self):
        for group in self.param_groups:
            group['step'] = 0
            for p in group['params']:
                if p.requires_grad:
                    state = self.state[p]
                    # State initialization

                    # Exponential moving average of gradient values
                    state['exp_avg'] = torch.zeros_like(p)
                    # Exponential moving average of squared gradient values
                    state['exp_avg_sq'] = torch.zeros_like(p)
                    # Exponential moving average of gradient difference
                    state['exp_avg_diff'] = torch.zeros_like(p)

    @torch.no_grad()
    def step(self, closure=None):
        """Performs a single optimization step."""

        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()

        if self.defaults['max_grad_norm'] > 0:
            device = self.param_groups[0]['params'][0].device
            global_grad_norm = torch.zeros(1, device=device)

            max_grad_norm = torch.tensor(self.defaults['max_grad_norm'],
                                         device=device)
            for group in self.param_groups:

                for p in group['params']:
                    if p.grad is not None:
                        grad = p.grad
                        global_grad_norm.add_(grad.pow(2).sum())

            global_grad_norm = torch.sqrt(global_grad_norm)

            clip_global_grad_norm = torch.clamp(
                max_grad_norm / (global_grad_norm + group['eps']),
                max=1.0).item()
        else:
            clip_global_grad_norm = 1.0

        for group in self.param_groups:
            params_with_grad = []
            grads = []
            exp_avgs = []
            exp_avg_sqs = []
            exp_avg_diffs = []
            neg_pre_grads = []

            beta1, beta2, beta3 = group['betas']
            # assume same step across group now to simplify things
            # per parameter step can be easily support
            # by making it tensor, or pass list into kernel
            if 'step' in group:
                group['step'] += 1
            else:
                group['step'] = 1

            bias_correction1 = 1.0 - beta1**group['step']
            bias_correction2 = 1.0 - beta2**group['step']
            bias_correction3 = 1.0 - beta3**group['step']

            for p in group['params']:
                if p.grad is None:
                    continue
                params_with_grad.append(p)
                grads.append(p.grad)

                state = self.state[p]
                if len(state) == 0:
                    state['exp_avg'] = torch.zeros_like(p)
                    state['exp_avg_sq'] = torch.zeros_like(p)
                    state['exp_avg_diff'] = torch.zeros_like(p)

                if 'neg_pre_grad' not in state or group['step'] == 1:
                    state['neg_pre_grad'] = p.grad.clone().mul_(
                        -clip_global_grad_norm)

                exp_avgs.append(state['exp_avg'])
                exp_avg_sqs.append(state['exp_avg_sq'])
                exp_avg_diffs.append(state['exp_avg_diff'])
                neg_pre_grads.append(state['neg_pre_grad'])

            kwargs = dict(
                params=params_with_grad,
                grads=grads,
                exp_avgs=exp_avgs,
                exp_avg_sqs=exp_avg_sqs,
                exp_avg_diffs=exp_avg_diffs,
                neg_pre_grads=neg_pre_grads,
                beta1=beta1,
                beta2=beta2,
                beta3=beta3,
                bias_correction1=bias_correction1,
                bias_correction2=bias_correction2,
                bias_correction3_sqrt=math.sqrt(bias_correction3),
                lr=group['lr'],
                weight_decay=group['weight_decay'],
                eps=group['eps'],
                no_prox=group['no_prox'],
                clip_global_grad_norm=clip_global_grad_norm,
            )

            if group['foreach']:
                _multi_tensor_adan(**kwargs)
            else:
                _single_tensor_adan(**kwargs)

        return loss


def _single_tensor_adan(
    params,
    grads,
    exp_avgs,
    exp_avg_sqs,
    exp_avg_diffs,
    neg_pre_grads,
    *,
    beta1: float,
    beta2: float,
    beta3: float,
    bias_correction1: float,
    bias_correction2: float,
    bias_correction3_sqrt: float,
    lr: float,
    weight_decay: float,
    eps: float,
    no_prox: bool,
    clip_global_grad_norm,
):
    for i, param in enumerate(params):
        grad = grads[i]
        exp_avg = exp_avgs[i]
        exp_avg_sq = exp_avg_sqs[i]
        exp_avg_diff = exp_avg_diffs[i]
        neg_grad_or_diff = neg_pre_grads[i]

        grad.mul_(clip_global_grad_norm)

        # for memory saving, we use `neg_grad_or_diff`
        # to get some temp variable in a inplace way
        neg_grad_or_diff.add_(grad)

        exp_avg.mul_(beta1).add_(grad, alpha=1 - beta1)  # m_t
        exp_avg_diff.mul_(beta2).add_(neg_grad_or_diff,
                                      alpha=1 - beta2)  # diff_t

        neg_grad_or_diff.mul_(beta2).add_(grad)
        exp_avg_sq.mul_(beta3).addcmul_(neg_grad_or_diff,
                                        neg_grad_or_diff,
                                        value=1 - beta3)  # n_t

        denom = ((exp_avg_sq).sqrt() / bias_correction3_sqrt).add_(eps)
        step_size_diff = lr * beta2 / bias_correction2
        step_size = lr / bias_correction1

        if no_prox:
            param.mul_(1 - lr * weight_decay)
            param.addcdiv_(exp_avg, denom, value=-step_size)
            param.addcdiv_(exp_avg_diff, denom, value=-step_size_diff)
        else:
            param.addcdiv_(exp_avg, denom, value=-step_size)
            param.addcdiv_(exp_avg_diff, denom, value=-step_size_diff)
            param.div_(1 + lr * weight_decay)

        neg_grad_or_diff.zero_().add_(grad, alpha=-1.0)


def _multi_tensor_adan(
    params,
    grads,
    exp_avgs,
    exp_avg_sqs,
    exp_avg_diffs,
    neg_pre_grads,
    *,
    beta1: float,
    beta2: float,
    beta3: float,
    bias_correction1: float,
    bias_correction2: float,
    bias_correction3_sqrt: float,
    lr: float,
    weight_decay: float,
    eps: float,
    no_prox: bool,
    clip_global_grad_norm,
):
    if len(params) == 0:
        return

    torch._foreach_mul_(grads, clip_global_grad_norm)

    # for memory saving, we use `neg_pre_grads`
    # to get some temp variable in a inplace way
    torch._foreach_add_(neg_pre_grads, grads)

    torch._foreach_mul_(exp_avgs, beta1)
    torch._foreach_add_(exp_avgs, grads, alpha=1 - beta1)  # m_t

    torch._foreach_mul_(exp_avg_diffs, beta2)
    torch._foreach_add_(exp_avg_diffs, neg_pre_grads,
                        alpha=1 - beta2)  # diff_t

    torch._foreach_mul_(neg_pre_grads, beta2)
    torch._foreach_add_(neg_pre_grads, grads)
    torch._foreach_mul_(exp_avg_sqs, beta3)
    torch._foreach_addcmul_(exp_avg_sqs,
                            neg_pre_grads,
                            neg_pre_grads,
                            value=1 - beta3)  # n_t

    denom = torch._foreach_sqrt(exp_avg_sqs)
    torch._foreach_div_(denom, bias_correction3_sqrt)
    torch._foreach_add_(denom, eps)

    step_size_diff = lr * beta2 / bias_correction2
    step_size = lr / bias_correction1

    if no_prox:
        torch._foreach_mul_(params, 1 - lr * weight_decay)
        torch._foreach_addcdiv_(params, exp_avgs, denom, value=-step_size)
        torch._foreach_addcdiv_(params,
                                exp_avg_diffs,
                                denom,
                                value=-step_size_diff)
    else:
        torch._foreach_addcdiv_(params, exp_avgs, denom, value=-step_size)
        torch._foreach_addcdiv_(params,
                                exp_avg_diffs,
                                denom,
                                value=-step_size_diff)
        torch._foreach_div_(params, 1 + lr * weight_decay)
    torch._foreach_zero_(neg_pre_grads)
    torch._foreach_add_(neg_pre_grads, grads, alpha=-1.0)


# -- Adafactor (transformers) ------------------------------------------------------------------------
class Adafactor(Optimizer):
    def __init__(
        self,
        params,
        lr=None,
        eps=(1e-30, 1e-3),
        clip_threshold=1.0,
        decay_rate=-0.8,
        beta1=None,
        weight_decay=0.0,
        scale_parameter=True,
        relative_step=True,
        warmup_init=False,
    ):
        if lr is not None and relative_step:
            raise ValueError("Cannot combine manual `lr` and `relative_step=True` options")
        if warmup_init and not relative_step:
            raise ValueError("`warmup_init=True` requires `relative_step=True`")

        defaults = {
            "lr": lr,
            "eps": eps,
            "clip_threshold": clip_threshold,
            "decay_rate": decay_rate,
            "beta1": beta1,
            "weight_decay": weight_decay,
            "scale_parameter": scale_parameter,
            "relative_step": relative_step,
            "warmup_init": warmup_init,
        }
        super().__init__(params, defaults)

    @staticmethod
    def _get_lr(param_group, param_state):
        rel_step_sz = param_group["lr"]
        if param_group["relative_step"]:
            min_step = 1e-6 * param_state["step"] if param_group["warmup_init"] else 1e-2
            rel_step_sz = min(min_step, 1.0 / math.sqrt(param_state["step"]))
        param_scale = 1.0
        if param_group["scale_parameter"]:
            param_scale = max(param_group["eps"][1], param_state["RMS"])
        return param_scale * rel_step_sz

    @staticmethod
    def _get_options(param_group, param_shape):
        factored = len(param_shape) >= 2
        use_first_moment = param_group["beta1"] is not None
        return factored, use_first_moment

    @staticmethod
    def _rms(tensor):
        return tensor.norm(2) / (tensor.numel() ** 0.5)

    @staticmethod
    def _approx_sq_grad(exp_avg_sq_row, exp_avg_sq_col):
        r_factor = (exp_avg_sq_row / exp_avg_sq_row.mean(dim=-1, keepdim=True)).rsqrt_()
        c_factor = exp_avg_sq_col.rsqrt()
        if r_factor.dim() == 1:
            return torch.outer(r_factor, c_factor)
        return torch.mul(r_factor.unsqueeze(-1), c_factor.unsqueeze(-2))

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            loss = closure()

        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                grad = p.grad
                if grad.dtype in {torch.float16, torch.bfloat16}:
                    grad = grad.float()
                if grad.is_sparse:
                    raise RuntimeError("Adafactor does not support sparse gradients.")

                state = self.state[p]
                grad_shape = grad.shape

                factored, use_first_moment = self._get_options(group, grad_shape)
                # State Initialization
                if len(state) == 0:
                    state["step"] = 0

                    if use_first_moment:
                        # Exponential moving average of gradient values
                        state["exp_avg"] = torch.zeros_like(grad)
                    if factored:
                        state["exp_avg_sq_row"] = torch.zeros(grad_shape[:-1]).to(grad)
                        state["exp_avg_sq_col"] = torch.zeros(grad_shape[:-2] + grad_shape[-1:]).to(grad)
                    else:
                        state["exp_avg_sq"] = torch.zeros_like(grad)

                    state["RMS"] = 0
                else:
                    if use_first_moment:
                        state["exp_avg"] = state["exp_avg"].to(grad)
                    if factored:
                        state["exp_avg_sq_row"] = state["exp_avg_sq_row"].to(grad)
                        state["exp_avg_sq_col"] = state["exp_avg_sq_col"].to(grad)
                    else:
                        state["exp_avg_sq"] = state["exp_avg_sq"].to(grad)

                p_data_fp32 = p
                if p.dtype in {torch.float16, torch.bfloat16}:
                    p_data_fp32 = p_data_fp32.float()

                state["step"] += 1
                state["RMS"] = self._rms(p_data_fp32)
                lr = self._get_lr(group, state)

                beta2t = 1.0 - math.pow(state["step"], group["decay_rate"])
                update = (grad**2) + group["eps"][0]
                if factored:
                    exp_avg_sq_row = state["exp_avg_sq_row"]
                    exp_avg_sq_col = state["exp_avg_sq_col"]

                    exp_avg_sq_row.mul_(beta2t).add_(update.mean(dim=-1), alpha=(1.0 - beta2t))
                    exp_avg_sq_col.mul_(beta2t).add_(update.mean(dim=-2), alpha=(1.0 - beta2t))

                    # Approximation of exponential moving average of square of gradient
                    update = self._approx_sq_grad(exp_avg_sq_row, exp_avg_sq_col)
                    update.mul_(grad)
                else:
                    exp_avg_sq = state["exp_avg_sq"]

                    exp_avg_sq.mul_(beta2t).add_(update, alpha=(1.0 - beta2t))
                    update = exp_avg_sq.rsqrt().mul_(grad)

                update.div_((self._rms(update) / group["clip_threshold"]).clamp_(min=1.0))
                update.mul_(lr)

                if use_first_moment:
                    exp_avg = state["exp_avg"]
                    exp_avg.mul_(group["beta1"]).add_(update, alpha=(1 - group["beta1"]))
                    update = exp_avg

                if group["weight_decay"] != 0:
                    p_data_fp32.add_(p_data_fp32, alpha=(-group["weight_decay"] * lr))

                p_data_fp32.add_(-update)

                if p.dtype in {torch.float16, torch.bfloat16}:
                    p.copy_(p_data_fp32)

        return loss


# -- facebookresearch/schedule_free's adamw_schedulefree.py ---------------------------------------
class AdamWScheduleFree(torch.optim.Optimizer):
    def __init__(self,
                 params,
                 lr=0.0025,
                 betas=(0.9, 0.999),
                 eps=1e-8,
                 weight_decay=0,
                 warmup_steps=0,
                 r=0.0,
                 weight_lr_power=2.0,
                 foreach=hasattr(torch, "_foreach_mul_")
                 ):

        defaults = dict(lr=lr,
                        betas=betas,
                        eps=eps,
                        r=r,
                        k=0,
                        warmup_steps=warmup_steps,
                        train_mode = True,
                        weight_sum=0.0,
                        lr_max=-1.0,
                        weight_lr_power=weight_lr_power,
                        weight_decay=weight_decay,
                        foreach=foreach)
        super().__init__(params, defaults)

    @torch.no_grad()
    def eval(self):
        for group in self.param_groups:
            train_mode = group['train_mode']
            beta1, _ = group['betas']
            if train_mode:
                for p in group['params']:
                    state = self.state[p]
                    if 'z' in state:
                        # Set p.data to x
                        p.data.lerp_(end=state['z'], weight=1-1/beta1)
                group['train_mode'] = False

    @torch.no_grad()
    def train(self):
        for group in self.param_groups:
            train_mode = group['train_mode']
            beta1, _ = group['betas']
            if not train_mode:
                for p in group['params']:
                    state = self.state[p]
                    if 'z' in state:
                        # Set p.data to y
                        p.data.lerp_(end=state['z'], weight=1-beta1)
                group['train_mode'] = True

    @torch.no_grad()
    def step(self, closure=None):
        """Performs a single optimization step.

        Arguments:
            closure (callable, optional): A closure that reevaluates the model
                and returns the loss.
        """
        if not self.param_groups[0]['train_mode']:
            raise Exception("Optimizer was not in train mode when step is called. "
                            "Please insert .train() and .eval() calls on the "
                            "optimizer. See documentation for details.")


        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()

        for group in self.param_groups:
            eps = group['eps']
            beta1, beta2 = group['betas']
            decay = group['weight_decay']
            k = group['k']
            r = group['r']
            warmup_steps = group['warmup_steps']
            weight_lr_power = group['weight_lr_power']

            if k < warmup_steps:
              sched = (k+1) / warmup_steps
            else:
              sched = 1.0

            bias_correction2 = 1 - beta2 ** (k+1)
            lr = group['lr']*sched
            group['scheduled_lr'] = lr # For logging purposes

            lr_max = group['lr_max'] = max(lr, group['lr_max'])

            weight = ((k+1)**r) * (lr_max**weight_lr_power)
            weight_sum = group['weight_sum'] = group['weight_sum'] + weight

            try:
                ckp1 = weight/weight_sum
            except ZeroDivisionError:
                ckp1 = 0

            active_p = [p for p in group['params'] if p.grad is not None]

            for p in active_p:
                if 'z' not in self.state[p]:
                    self.state[p]['z'] = torch.clone(p, memory_format=torch.preserve_format)
                    self.state[p]['exp_avg_sq'] = torch.zeros_like(p, memory_format=torch.preserve_format)

            if group['foreach'] and len(active_p) > 0:
                y, grad, exp_avg_sq, z = zip(*[(p,
                                                p.grad,
                                                self.state[p]['exp_avg_sq'],
                                                self.state[p]['z'])
                                                for p in active_p])

                # Decay the first and second moment running average coefficient
                torch._foreach_mul_(exp_avg_sq, beta2)
                torch._foreach_addcmul_(exp_avg_sq, grad, grad, value=1-beta2)
                denom = torch._foreach_div(exp_avg_sq, bias_correction2)
                torch._foreach_sqrt_(denom)
                torch._foreach_add_(denom, eps)

                # Normalize grad in-place for memory efficiency
                torch._foreach_div_(grad, denom)

                # Weight decay calculated at y
                if decay != 0:
                    torch._foreach_add_(grad, y, alpha=decay)

                # These operations update y in-place,
                # without computing x explicitly.
                torch._foreach_lerp_(y, z, weight=ckp1)
                torch._foreach_add_(y, grad, alpha=lr*(beta1*(1-ckp1)-1))

                # z step
                torch._foreach_sub_(z, grad, alpha=lr)
            else:
                for p in active_p:
                    y = p.data # Notation to match theory
                    grad = p.grad.data

                    state = self.state[p]

                    z = state['z']
                    exp_avg_sq = state['exp_avg_sq']

                    exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1-beta2)
                    denom = exp_avg_sq.div(bias_correction2).sqrt_().add_(eps)

                    # Reuse grad buffer for memory efficiency
                    grad_normalized = grad.div_(denom)

                    # Weight decay calculated at y
                    if decay != 0:
                        grad_normalized.add_(y, alpha=decay)

                    # These operations update y in-place,
                    # without computing x explicitly.
                    y.lerp_(end=z, weight=ckp1)
                    y.add_(grad_normalized, alpha=lr*(beta1*(1-ckp1)-1))

                    # z step
                    z.sub_(grad_normalized, alpha=lr)

            group['k'] = k+1
        return loss


def train_schedule_free(foreach):
    model = Net()
    initialize(model)
    optimizer = AdamWScheduleFree(model.parameters(), lr=0.05, warmup_steps=2, weight_decay=0.01, foreach=foreach)
    for epoch in range(2):
        model.train()
        optimizer.train()
        for step in range(3):
            optimizer.zero_grad()
            loss = F.cross_entropy(model(inputs), labels)
            loss.backward()
            optimizer.step()
            record.append(loss.item())
        model.eval()
        optimizer.eval()
        with torch.no_grad():
            record.append(F.cross_entropy(model(inputs), labels).item())
        record.append(params_of(model))
    record.append([g['scheduled_lr'] for g in optimizer.param_groups])


# -- the training loops (the repositories' scripts train GPTs and ImageNet models) --------------
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(5, 8)
        self.fc2 = nn.Linear(8, 3)

    def forward(self, x):
        return self.fc2(torch.tanh(self.fc1(x)))


def snapshot(optimizer, model):
    record.append(params_of(model))
    states = []
    for p in model.parameters():
        state = optimizer.state[p]
        states.append({k: (v.detach().numpy().copy() if torch.is_tensor(v) else v) for k, v in state.items()})
    for i, state in enumerate(states):
        record.append({f'{i}.{k}': v for k, v in state.items() if k != 'step'})


def train_lion(Lion=Lion):
    model = Net()
    initialize(model)
    optimizer = Lion([{'params': model.fc1.parameters()}], lr=3e-2, weight_decay=0.1)
    for step in range(4):
        if step == 2:  # the head joins later, at its own rate
            optimizer.add_param_group({'params': model.fc2.parameters(), 'lr': 1e-2, 'betas': (0.95, 0.98)})

        def closure():
            optimizer.zero_grad(set_to_none=True)
            loss = F.cross_entropy(model(inputs), labels)
            loss.backward()
            return loss

        loss = optimizer.step(closure)
        record.append(loss.item())
    record.append([len(g['params']) for g in optimizer.param_groups])
    snapshot(optimizer, model)


def train_sophia(resume_at=None):
    model = Net()
    initialize(model)
    optimizer = SophiaG(model.parameters(), lr=2e-2, betas=(0.9, 0.95), rho=0.05, weight_decay=1e-1)
    hess_interval = 2
    bs = inputs.shape[0]
    for iter_num in range(6):
        if iter_num == resume_at:  # a checkpoint, loaded into a fresh model and optimizer
            checkpoint = {'model': model.state_dict(), 'optimizer': optimizer.state_dict()}
            model = Net()
            model.load_state_dict(checkpoint['model'])
            optimizer = SophiaG(model.parameters(), lr=2e-2, betas=(0.9, 0.95), rho=0.05, weight_decay=1e-1)
            optimizer.load_state_dict(checkpoint['optimizer'])
        logits = model(inputs)
        loss = F.cross_entropy(logits, labels)
        loss.backward()
        optimizer.step(bs=bs)
        optimizer.zero_grad(set_to_none=True)
        record.append(loss.item())
        if iter_num % hess_interval == hess_interval - 1:
            # update hessian EMA
            logits = model(inputs)
            samp_dist = torch.distributions.Categorical(logits=logits)
            y_sample = samp_dist.sample()
            loss_sampled = F.cross_entropy(logits.view(-1, logits.size(-1)), y_sample.view(-1), ignore_index=-1)
            loss_sampled.backward()
            optimizer.update_hessian()
            optimizer.zero_grad(set_to_none=True)
    record.append([float(optimizer.state[p]['step']) for p in model.parameters()])
    snapshot(optimizer, model)


def train_adan(resume_at=None, foreach=False, no_prox=False):
    model = Net()
    initialize(model)
    optimizer = Adan(model.parameters(), lr=2e-2, weight_decay=0.02, max_grad_norm=0.5, no_prox=no_prox, foreach=foreach)
    for step in range(5):
        if step == resume_at:
            saved = optimizer.state_dict()
            optimizer = Adan(model.parameters(), lr=2e-2, weight_decay=0.02, max_grad_norm=0.5, no_prox=no_prox, foreach=foreach)
            optimizer.load_state_dict(saved)
        optimizer.zero_grad()
        loss = F.cross_entropy(model(inputs), labels)
        loss.backward()
        optimizer.step()
        record.append(loss.item())
    record.append([g['step'] for g in optimizer.param_groups])
    snapshot(optimizer, model)


def train_adafactor(make_optimizer):
    model = Net()
    initialize(model)
    optimizer = make_optimizer(model.parameters())
    for step in range(4):
        optimizer.zero_grad()
        loss = F.cross_entropy(model(inputs), labels)
        loss.backward()
        optimizer.step()
        record.append(loss.item())
    record.append(params_of(model))
'''

OPTIMIZERS_STEPS = [
    (
        "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n",
        "import retrograd as torch\nimport retrograd.nn as nn\nimport retrograd.nn.functional as F\n",
    ),
    # the gradients are a value: each step takes them, and a closure returns them with its loss
    (
        "    def step(\n        self,\n        closure = None\n    ):",
        "    def step(\n        self,\n        closure = None,\n        grads = None\n    ):",
    ),
    (
        "        if exists(closure):\n            with torch.enable_grad():\n                loss = closure()",
        "        if exists(closure):\n            with torch.enable_grad():\n                loss, grads = closure()",
    ),
    (
        "            loss.backward()\n            return loss\n",
        "            grads = loss.backward()\n            return loss, grads\n",
    ),
    (
        "            grads = []\n            exp_avgs = []\n\n            for p in filter",
        "            grad_list = []\n            exp_avgs = []\n\n            for p in filter",
    ),
    ("                grads.append(grad)\n", "                grad_list.append(grad)\n"),
    (
        "            torch._foreach_lerp_(updates, grads, 1. - beta1)",
        "            torch._foreach_lerp_(updates, grad_list, 1. - beta1)",
    ),
    (
        "            torch._foreach_lerp_(exp_avgs, grads, 1. - beta2)",
        "            torch._foreach_lerp_(exp_avgs, grad_list, 1. - beta2)",
    ),
    (
        '    def step(self, closure=None):\n        """Performs a single optimization step.\n\n        Arguments:',
        '    def step(self, grads, closure=None):\n        """Performs a single optimization step.\n\n        Arguments:',
    ),
    (
        "            loss.backward()\n            optimizer.step()\n",
        "            grads = loss.backward()\n            optimizer.step(grads)\n",
    ),
    ("    def update_hessian(self):", "    def update_hessian(self, grads):"),
    (
        "    def step(self, closure=None, bs=5120):",
        "    def step(self, grads, closure=None, bs=5120):",
    ),
    (
        "            grads = []\n            exp_avgs = []\n            state_steps",
        "            grad_list = []\n            exp_avgs = []\n            state_steps",
    ),
    (
        "                grads.append(p.grad)\n                state = self.state[p]\n                # State",
        "                grad_list.append(p.grad)\n                state = self.state[p]\n                # State",
    ),
    (
        "            sophiag(params_with_grad,\n                  grads,",
        "            sophiag(params_with_grad,\n                  grad_list,",
    ),
    (
        '    def step(self, closure=None):\n        """Performs',
        '    def step(self, grads, closure=None):\n        """Performs',
    ),
    (
        "            grads = []\n            exp_avgs = []\n            exp_avg_sqs",
        "            grad_list = []\n            exp_avgs = []\n            exp_avg_sqs",
    ),
    (
        "                grads.append(p.grad)\n\n                state = self.state[p]",
        "                grad_list.append(p.grad)\n\n                state = self.state[p]",
    ),
    ("                grads=grads,", "                grads=grad_list,"),
    (
        "    def step(self, closure=None):\n        loss = None",
        "    def step(self, grads, closure=None):\n        loss = None",
    ),
    ("p.grad", "p.grad(grads)"),
    (
        "        loss.backward()\n        optimizer.step(bs=bs)\n",
        "        grads = loss.backward()\n        optimizer.step(grads, bs=bs)\n",
    ),
    (
        "            loss_sampled.backward()\n            optimizer.update_hessian()\n",
        "            grads = loss_sampled.backward()\n            optimizer.update_hessian(grads)\n",
    ),
    (
        "        loss.backward()\n        optimizer.step()\n",
        "        grads = loss.backward()\n        optimizer.step(grads)\n",
    ),
]


def _data():
    rng = np.random.default_rng(7101)
    inputs = rng.standard_normal((12, 5)).astype(np.float32)
    labels = rng.integers(0, 3, 12)
    return inputs, labels


def _run(call, seed=7101):
    """``call(namespace)`` run on torch's namespace of the optimizers and then on the port's,
    both with the same data, initial weights and sampled labels; the two records."""
    inputs, labels = _data()
    initialize = initializer()
    records = []
    for lib in (torch, rg):
        record = []
        text = (
            OPTIMIZERS_SOURCE
            if lib is torch
            else port(OPTIMIZERS_SOURCE, OPTIMIZERS_STEPS).replace("from torch.", "from retrograd.")
        )
        names = run_source(
            text,
            lib,
            record=record,
            initialize=initialize,
            params_of=params_of,
            inputs=lib.tensor(inputs),
            labels=lib.tensor(labels, dtype=lib.int64),
        )
        with SharedCategorical(lib, seed):
            call(names)
        records.append(record)
    return records


@pytest.mark.parametrize("variant", ["Lion", "ForeachLion"])
def test_lion_with_a_group_added_mid_training_trains_as_torch(variant):
    theirs, ours = _run(lambda names: names["train_lion"](names[variant]))
    assert theirs[4] == [2, 2]
    assert theirs[3] < theirs[0]
    assert_records_agree(ours, theirs, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("resume_at", [None, 3])
def test_sophia_g_with_hessian_refreshes_trains_as_torch(resume_at):
    theirs, ours = _run(lambda names: names["train_sophia"](resume_at))
    assert theirs[6] == [6.0] * 4
    assert_records_agree(ours, theirs, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    "resume_at, foreach, no_prox", [(None, False, False), (2, False, True), (2, True, False)]
)
def test_adan_trains_as_torch(resume_at, foreach, no_prox):
    theirs, ours = _run(lambda names: names["train_adan"](resume_at, foreach, no_prox))
    assert theirs[5] == [5]
    assert_records_agree(ours, theirs, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("foreach", [False, True])
def test_schedule_free_adamw_trains_and_evaluates_as_torch(foreach):
    theirs, ours = _run(lambda names: names["train_schedule_free"](foreach))
    assert len(theirs) == 2 * 5 + 1
    assert_records_agree(ours, theirs, rtol=1e-5, atol=1e-6)


def test_adafactors_train_as_torch():
    def call(names):
        train = names["train_adafactor"]
        train(lambda params: names["Adafactor"](params))
        train(
            lambda params: names["Adafactor"](
                params, lr=3e-2, relative_step=False, beta1=0.9, weight_decay=0.01
            )
        )
        train(
            lambda params: names["Adafactor"](
                params, scale_parameter=False, relative_step=True, warmup_init=True, lr=None
            )
        )
        train(lambda params: names["torch"].optim.Adafactor(params, lr=3e-2, weight_decay=0.01))
        train(
            lambda params: names["torch"].optim.Adafactor(
                params, lr=3e-2, beta2_decay=-0.5, maximize=True
            )
        )

    theirs, ours = _run(call)
    assert len(theirs) == 5 * 5
    assert_records_agree(ours, theirs, rtol=1e-5, atol=1e-6)


# -- regressions ---------------------------------------------------------------------------------
class _OwnStep(rg.optim.Optimizer):
    """An optimizer whose step is its own code, as the ports above write theirs."""

    def __init__(self, params, lr=None, betas=(0.9, 0.8, 0.7)):
        super().__init__(params, dict(lr=lr, betas=betas))

    @rg.no_grad()
    def step(self, grads):
        for group in self.param_groups:
            for p in group["params"]:
                state = self.state[p]
                if len(state) == 0:
                    state["step"] = rg.tensor(0.0)
                    state["exp_avg"] = rg.zeros_like(p)
                state["step"] += 1
                state["exp_avg"].lerp_(p.grad(grads), 1 - group["betas"][0])
                p.add_(state["exp_avg"], alpha=-(group["lr"] or 0.1))


def test_an_optimizer_of_ones_own_takes_lr_none_and_three_betas_as_torch_base_does():
    w = rg.tensor([1.0, 2.0]).require_grad()
    optimizer = _OwnStep([w])  # was: DTypeError "lr must be a number, got None"
    assert optimizer.param_groups[0]["lr"] is None
    assert optimizer.param_groups[0]["betas"] == (0.9, 0.8, 0.7)  # was: "must be a pair"
    with pytest.raises(rg.DTypeError, match="lr must be a number"):
        rg.optim.Adam([w], lr=None)  # retrograd's own algorithms still check
    with pytest.raises(rg.DTypeError, match="betas must be a tuple of numbers"):
        _OwnStep([w], betas=(0.9, "0.8"))


def test_an_optimizer_of_ones_own_loads_its_state_back_as_saved():
    w = rg.tensor([1.0, 2.0]).require_grad()
    optimizer = _OwnStep([w], lr=0.1)
    optimizer.step((w * w).sum().backward())
    fresh = _OwnStep([w], lr=0.1)
    fresh.load_state_dict(optimizer.state_dict())
    state = fresh.state[w]
    # was: the step loaded as an int (Sophia's `step_t += 1` then updated a copy, and its
    # check that every step is a tensor failed)
    assert rg.is_tensor(state["step"]) and state["step"].dtype == rg.float32
    assert state["step"].item() == 1.0
    np.testing.assert_allclose(state["exp_avg"].numpy(), [0.2, 0.4], rtol=1e-6)
    fresh.step((w * w).sum().backward())
    assert fresh.state[w]["step"].item() == 2.0


def test_foreach_ops_update_lists_of_tensors_as_torch():
    rng = np.random.default_rng(7102)
    shapes = [(2, 3), (4,)]
    arrays = {k: [rng.uniform(0.5, 2.0, s).astype(np.float32) for s in shapes] for k in "abc"}
    results = []
    for lib in (torch, rg):
        a, b, c = ([lib.tensor(x) for x in arrays[k]] for k in "abc")
        # was: AttributeError, retrograd had no _foreach_ ops (Adan's default multi-tensor path)
        lib._foreach_mul_(a, 0.9)
        lib._foreach_add_(a, b, alpha=0.1)
        lib._foreach_addcmul_(a, b, c, value=0.5)
        lib._foreach_addcdiv_(a, b, lib._foreach_sqrt(c), value=-0.2)
        lib._foreach_addcmul_(a, b, c, lib.tensor([1.0, 2.0]))  # one value per tensor
        lib._foreach_lerp_(a, c, 0.25)
        lib._foreach_div_(b, [2.0, 4.0])
        lib._foreach_maximum_(b, c)
        norms = lib._foreach_norm(a)
        results.append([x.numpy().copy() for x in (*a, *b, *norms)])
    for ours, theirs in zip(results[1], results[0]):
        np.testing.assert_allclose(ours, theirs, rtol=1e-6)
    with pytest.raises(rg.InvalidArgumentError, match="_foreach_add_: tensor lists must have"):
        rg._foreach_add_([rg.ones(2), rg.ones(3)], [rg.ones(2)])
    with pytest.raises(rg.DTypeError, match="_foreach_mul_: self must be a list of tensors"):
        rg._foreach_mul_(rg.ones(2), 2.0)


def test_an_optimizer_of_ones_own_with_a_setstate_deep_copies_as_torch():
    copies = []
    for lib in (torch, rg):

        class Own(lib.optim.Optimizer):
            def __init__(self, params, lr=0.1):
                super().__init__(params, dict(lr=lr))

            def __setstate__(self, state):  # as RAdam, Sophia-G and Adan write theirs
                super().__setstate__(state)
                for group in self.param_groups:
                    group.setdefault("maximize", False)

        w = lib.tensor([1.0, 2.0])
        optimizer = Own([w.requires_grad_() if lib is torch else w.require_grad()])
        optimizer.state[w]["exp_avg"] = lib.ones(2)
        # was: AttributeError "'super' object has no attribute '__setstate__'"
        twin = copy.deepcopy(optimizer)
        twin.state[twin.param_groups[0]["params"][0]]["exp_avg"].add_(1.0)
        copies.append(
            (
                twin.param_groups[0]["maximize"],
                optimizer.state[w]["exp_avg"].tolist(),
                len(twin.state),
            )
        )
    assert copies[1] == copies[0] == (False, [1.0, 1.0], 1)
