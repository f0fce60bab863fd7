# ruff: noqa: E501  (the programs are kept as their authors wrote them)
"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):
optimizers their repositories write as ``torch.optim.Optimizer`` subclasses, each training a
small classifier against torch's run of the same code from the same weights, with the
optimizer's ``state_dict`` saved mid-training and loaded into a fresh one that carries on:

- AdaBelief as juntang-zhuang/Adabelief-Optimizer writes it (``adabelief_pytorch`` 0.2.0's
  ``AdaBelief``): ``version_higher = ( torch.__version__ >= "1.5.0" )``, ``torch.zeros_like(
  p.data, memory_format=torch.preserve_format)``, the RAdam-style rectification whose cache
  ``buffer`` (a list of ``[None, None, None]`` lists) lives in the param groups and so in the
  saved state dict, the SGD-like steps while ``N_sma < 5``, decoupled or L2 weight decay
  (``grad.add_(p.data, alpha=...)`` on the gradient), ``addcmul_(grad_residual, grad_residual,
  value=1 - beta2)``, ``addcdiv_(exp_avg, denom, value=-step_size)`` and AMSGrad's
  ``torch.max(max_exp_avg_var, exp_avg_var.add_(group['eps']), out=max_exp_avg_var)``.
- MADGRAD as facebookresearch/madgrad writes it (``madgrad/madgrad.py``): the step count kept
  under a key of its own, ``self.state['k'] = torch.tensor([0], dtype=torch.long)``, beside
  the parameters' states (so ``state_dict()['state']`` holds ``'k'`` and the parameters'
  indices) and stepped by ``self.state['k'] += 1``; the cube root ``grad_sum_sq.pow(1 / 3)``,
  ``x0`` kept (momentum) or recomputed by ``p.data.addcdiv(s, rms, value=1)`` (no momentum),
  ``rms[rms == 0] = float('inf')`` when ``eps == 0``, ``p.data.mul_(1 - ck).add_(z,
  alpha=ck)`` and the decoupled decay through ``p_old = p.data.clone()``.
- AdaBound and AdaBoundW as Luolc/AdaBound writes them (``adabound/adabound.py``): the
  deprecated positional overloads ``exp_avg.mul_(beta1).add_(1 - beta1, grad)``,
  ``addcmul_(1 - beta2, grad, grad)`` and ``grad.add(group['weight_decay'], p.data)``, the
  bound ``torch.full_like(denom, step_size).div_(denom).clamp_(lower_bound, upper_bound)
  .mul_(exp_avg)``, ``final_lr`` scaled by ``group['lr'] / base_lr`` under a ``StepLR``
  schedule (the repository's demo decays the rate by a scheduler), and AMSBound.
- SGD with gradient centralisation as the AdaBelief repository's ImageNet experiments write it
  (``PyTorch_Experiments/imagenet/SGD_GC.py``, from Yonghongwei/Gradient-Centralization): the
  gradient of every convolution and linear weight centred by ``d_p.add_(-d_p.mean(dim =
  tuple(range(1,len(list(d_p.size())))), keepdim = True))``, ``required`` as the default rate,
  the deprecated ``d_p.add_(weight_decay, p.data)``, ``buf.mul_(momentum).add_(1 - dampening,
  d_p)``, ``d_p.add(momentum, buf)`` (Nesterov) and ``p.data.add_(-group['lr'], d_p)``.

The lines changed: the ``import`` lines (AdaBelief's ``tabulate`` and ``colorama`` imports,
used only by its change log, are left out of both runs: the change log is off) and the
gradient lines (``grads = loss.backward()``, each ``step`` taking them, ``p.grad(grads)``).
"""

from __future__ import annotations

import random
import warnings

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


ADABELIEF_SOURCE = '''
import math
import torch
from torch.optim.optimizer import Optimizer

version_higher = ( torch.__version__ >= "1.5.0" )

class AdaBelief(Optimizer):
    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-16,
                 weight_decay=0, amsgrad=False, weight_decouple=True, fixed_decay=False, rectify=True,
                 degenerated_to_sgd=True, print_change_log = True):

        # (the change log printed by tabulate and colorama when print_change_log is set)

        if not 0.0 <= lr:
            raise ValueError("Invalid learning rate: {}".format(lr))
        if not 0.0 <= eps:
            raise ValueError("Invalid epsilon value: {}".format(eps))
        if not 0.0 <= betas[0] < 1.0:
            raise ValueError("Invalid beta parameter at index 0: {}".format(betas[0]))
        if not 0.0 <= betas[1] < 1.0:
            raise ValueError("Invalid beta parameter at index 1: {}".format(betas[1]))

        self.degenerated_to_sgd = degenerated_to_sgd
        if isinstance(params, (list, tuple)) and len(params) > 0 and isinstance(params[0], dict):
            for param in params:
                if 'betas' in param and (param['betas'][0] != betas[0] or param['betas'][1] != betas[1]):
                    param['buffer'] = [[None, None, None] for _ in range(10)]

        defaults = dict(lr=lr, betas=betas, eps=eps,
                        weight_decay=weight_decay, amsgrad=amsgrad, buffer=[[None, None, None] for _ in range(10)])
        super(AdaBelief, self).__init__(params, defaults)

        self.degenerated_to_sgd = degenerated_to_sgd
        self.weight_decouple = weight_decouple
        self.rectify = rectify
        self.fixed_decay = fixed_decay
        if self.weight_decouple:
            print('Weight decoupling enabled in AdaBelief')
            if self.fixed_decay:
                print('Weight decay fixed')
        if self.rectify:
            print('Rectification enabled in AdaBelief')
        if amsgrad:
            print('AMSGrad enabled in AdaBelief')

    def __setstate__(self, state):
        super(AdaBelief, self).__setstate__(state)
        for group in self.param_groups:
            group.setdefault('amsgrad', False)

    def reset(self):
        for group in self.param_groups:
            for p in group['params']:
                state = self.state[p]
                amsgrad = group['amsgrad']

                # State initialization
                state['step'] = 0
                # Exponential moving average of gradient values
                state['exp_avg'] = torch.zeros_like(p.data,memory_format=torch.preserve_format) \\
                    if version_higher else torch.zeros_like(p.data)

                # Exponential moving average of squared gradient values
                state['exp_avg_var'] = torch.zeros_like(p.data,memory_format=torch.preserve_format) \\
                    if version_higher else torch.zeros_like(p.data)

                if amsgrad:
                    # Maintains max of all exp. moving avg. of sq. grad. values
                    state['max_exp_avg_var'] = torch.zeros_like(p.data,memory_format=torch.preserve_format) \\
                        if version_higher else torch.zeros_like(p.data)

    def step(self, closure=None):
        """Performs a single optimization step.
        Arguments:
            closure (callable, optional): A closure that reevaluates the model
                and returns the loss.
        """
        loss = None
        if closure is not None:
            loss = closure()

        for group in self.param_groups:
            for p in group['params']:
                if p.grad is None:
                    continue
                grad = p.grad.data
                if grad.is_sparse:
                    raise RuntimeError(
                        'AdaBelief does not support sparse gradients, please consider SparseAdam instead')
                amsgrad = group['amsgrad']

                state = self.state[p]

                beta1, beta2 = group['betas']

                # State initialization
                if len(state) == 0:
                    state['step'] = 0
                    # Exponential moving average of gradient values
                    state['exp_avg'] = torch.zeros_like(p.data,memory_format=torch.preserve_format) \\
                        if version_higher else torch.zeros_like(p.data)
                    # Exponential moving average of squared gradient values
                    state['exp_avg_var'] = torch.zeros_like(p.data,memory_format=torch.preserve_format) \\
                        if version_higher else torch.zeros_like(p.data)
                    if amsgrad:
                        # Maintains max of all exp. moving avg. of sq. grad. values
                        state['max_exp_avg_var'] = torch.zeros_like(p.data,memory_format=torch.preserve_format) \\
                            if version_higher else torch.zeros_like(p.data)

                # perform weight decay, check if decoupled weight decay
                if self.weight_decouple:
                    if not self.fixed_decay:
                        p.data.mul_(1.0 - group['lr'] * group['weight_decay'])
                    else:
                        p.data.mul_(1.0 - group['weight_decay'])
                else:
                    if group['weight_decay'] != 0:
                        grad.add_(p.data, alpha=group['weight_decay'])

                # get current state variable
                exp_avg, exp_avg_var = state['exp_avg'], state['exp_avg_var']

                state['step'] += 1
                bias_correction1 = 1 - beta1 ** state['step']
                bias_correction2 = 1 - beta2 ** state['step']

                # Update first and second moment running average
                exp_avg.mul_(beta1).add_(grad, alpha=1 - beta1)
                grad_residual = grad - exp_avg
                exp_avg_var.mul_(beta2).addcmul_( grad_residual, grad_residual, value=1 - beta2)

                if amsgrad:
                    max_exp_avg_var = state['max_exp_avg_var']
                    # Maintains the maximum of all 2nd moment running avg. till now
                    torch.max(max_exp_avg_var, exp_avg_var.add_(group['eps']), out=max_exp_avg_var)

                    # Use the max. for normalizing running avg. of gradient
                    denom = (max_exp_avg_var.sqrt() / math.sqrt(bias_correction2)).add_(group['eps'])
                else:
                    denom = (exp_avg_var.add_(group['eps']).sqrt() / math.sqrt(bias_correction2)).add_(group['eps'])

                # update
                if not self.rectify:
                    # Default update
                    step_size = group['lr'] / bias_correction1
                    p.data.addcdiv_( exp_avg, denom, value=-step_size)

                else:  # Rectified update, forked from RAdam
                    buffered = group['buffer'][int(state['step'] % 10)]
                    if state['step'] == buffered[0]:
                        N_sma, step_size = buffered[1], buffered[2]
                    else:
                        buffered[0] = state['step']
                        beta2_t = beta2 ** state['step']
                        N_sma_max = 2 / (1 - beta2) - 1
                        N_sma = N_sma_max - 2 * state['step'] * beta2_t / (1 - beta2_t)
                        buffered[1] = N_sma

                        # more conservative since it's an approximated value
                        if N_sma >= 5:
                            step_size = math.sqrt(
                                (1 - beta2_t) * (N_sma - 4) / (N_sma_max - 4) * (N_sma - 2) / N_sma * N_sma_max / (
                                        N_sma_max - 2)) / (1 - beta1 ** state['step'])
                        elif self.degenerated_to_sgd:
                            step_size = 1.0 / (1 - beta1 ** state['step'])
                        else:
                            step_size = -1
                        buffered[2] = step_size

                    if N_sma >= 5:
                        denom = exp_avg_var.sqrt().add_(group['eps'])
                        p.data.addcdiv_(exp_avg, denom, value=-step_size * group['lr'])
                    elif step_size > 0:
                        p.data.add_( exp_avg, alpha=-step_size * group['lr'])

        return loss
'''

MADGRAD_SOURCE = '''
import math
from typing import TYPE_CHECKING, Any, Callable, Optional

import torch
import torch.optim

if TYPE_CHECKING:
    from torch.optim.optimizer import _params_t
else:
    _params_t = Any


class MADGRAD(torch.optim.Optimizer):
    def __init__(
        self, params: _params_t, lr: float = 1e-2, momentum: float = 0.9,
        weight_decay: float = 0, eps: float = 1e-6, decouple_decay=False,
    ):
        if momentum < 0 or momentum >= 1:
            raise ValueError(f"Momentum {momentum} must be in the range [0,1)")
        if lr <= 0:
            raise ValueError(f"Learning rate {lr} must be positive")
        if weight_decay < 0:
            raise ValueError(f"Weight decay {weight_decay} must be non-negative")
        if eps < 0:
            raise ValueError(f"Eps must be non-negative")

        self.decouple_decay = decouple_decay

        defaults = dict(lr=lr, eps=eps, momentum=momentum, weight_decay=weight_decay)
        super().__init__(params, defaults)

    @property
    def supports_memory_efficient_fp16(self) -> bool:
        return False

    @property
    def supports_flat_params(self) -> bool:
        return True

    def step(self, closure: Optional[Callable[[], float]] = None) -> Optional[float]:
        """Performs a single optimization step.

        Arguments:
            closure (callable, optional): A closure that reevaluates the model
                and returns the loss.
        """
        loss = None
        if closure is not None:
            loss = closure()

        # step counter must be stored in state to ensure correct behavior under
        # optimizer sharding
        if 'k' not in self.state:
            self.state['k'] = torch.tensor([0], dtype=torch.long)
        k = self.state['k'].item()

        for group in self.param_groups:
            eps = group["eps"]
            lr = group["lr"] + eps
            decay = group["weight_decay"]
            momentum = group["momentum"]

            ck = 1 - momentum
            lamb = lr * math.pow(k + 1, 0.5)

            for p in group["params"]:
                if p.grad is None:
                    continue
                grad = p.grad.data
                state = self.state[p]

                if "grad_sum_sq" not in state:
                    state["grad_sum_sq"] = torch.zeros_like(p.data).detach()
                    state["s"] = torch.zeros_like(p.data).detach()
                    if momentum != 0:
                        state["x0"] = torch.clone(p.data).detach()

                if momentum != 0.0 and grad.is_sparse:
                    raise RuntimeError("momentum != 0 is not compatible with sparse gradients")

                grad_sum_sq = state["grad_sum_sq"]
                s = state["s"]

                # Apply weight decay
                if decay != 0 and not self.decouple_decay:
                    if grad.is_sparse:
                        raise RuntimeError("weight_decay option is not compatible with sparse gradients")

                    grad.add_(p.data, alpha=decay)

                if grad.is_sparse:
                    raise NotImplementedError  # (the sparse path: the models here have dense gradients)
                else:
                    if momentum == 0:
                        # Compute x_0 from other known quantities
                        rms = grad_sum_sq.pow(1 / 3).add_(eps)
                        x0 = p.data.addcdiv(s, rms, value=1)
                    else:
                        x0 = state["x0"]

                    # Accumulate second moments
                    grad_sum_sq.addcmul_(grad, grad, value=lamb)
                    rms = grad_sum_sq.pow(1 / 3).add_(eps)

                    if eps == 0:
                        rms[rms == 0] = float('inf')

                    # Update s
                    s.data.add_(grad, alpha=lamb)

                    if decay != 0 and self.decouple_decay:
                        p_old = p.data.clone()

                    # Step
                    if momentum == 0:
                        p.data.copy_(x0.addcdiv(s, rms, value=-1))
                    else:
                        z = x0.addcdiv(s, rms, value=-1)

                        # p is a moving average of z
                        p.data.mul_(1 - ck).add_(z, alpha=ck)

                    if decay != 0 and self.decouple_decay:
                        p.data.add_(p_old, alpha=-lr*decay)


        self.state['k'] += 1
        return loss
'''

ADABOUND_SOURCE = '''
import math
import torch
from torch.optim import Optimizer


class AdaBound(Optimizer):
    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), final_lr=0.1, gamma=1e-3,
                 eps=1e-8, weight_decay=0, amsbound=False):
        if not 0.0 <= lr:
            raise ValueError("Invalid learning rate: {}".format(lr))
        if not 0.0 <= eps:
            raise ValueError("Invalid epsilon value: {}".format(eps))
        if not 0.0 <= betas[0] < 1.0:
            raise ValueError("Invalid beta parameter at index 0: {}".format(betas[0]))
        if not 0.0 <= betas[1] < 1.0:
            raise ValueError("Invalid beta parameter at index 1: {}".format(betas[1]))
        if not 0.0 <= final_lr:
            raise ValueError("Invalid final learning rate: {}".format(final_lr))
        if not 0.0 <= gamma < 1.0:
            raise ValueError("Invalid gamma parameter: {}".format(gamma))
        defaults = dict(lr=lr, betas=betas, final_lr=final_lr, gamma=gamma, eps=eps,
                        weight_decay=weight_decay, amsbound=amsbound)
        super(AdaBound, self).__init__(params, defaults)

        self.base_lrs = list(map(lambda group: group['lr'], self.param_groups))

    def __setstate__(self, state):
        super(AdaBound, self).__setstate__(state)
        for group in self.param_groups:
            group.setdefault('amsbound', False)

    def step(self, closure=None):
        """Performs a single optimization step.
        Arguments:
            closure (callable, optional): A closure that reevaluates the model
                and returns the loss.
        """
        loss = None
        if closure is not None:
            loss = closure()

        for group, base_lr in zip(self.param_groups, self.base_lrs):
            for p in group['params']:
                if p.grad is None:
                    continue
                grad = p.grad.data
                if grad.is_sparse:
                    raise RuntimeError(
                        'Adam does not support sparse gradients, please consider SparseAdam instead')
                amsbound = group['amsbound']

                state = self.state[p]

                # State initialization
                if len(state) == 0:
                    state['step'] = 0
                    # Exponential moving average of gradient values
                    state['exp_avg'] = torch.zeros_like(p.data)
                    # Exponential moving average of squared gradient values
                    state['exp_avg_sq'] = torch.zeros_like(p.data)
                    if amsbound:
                        # Maintains max of all exp. moving avg. of sq. grad. values
                        state['max_exp_avg_sq'] = torch.zeros_like(p.data)

                exp_avg, exp_avg_sq = state['exp_avg'], state['exp_avg_sq']
                if amsbound:
                    max_exp_avg_sq = state['max_exp_avg_sq']
                beta1, beta2 = group['betas']

                state['step'] += 1

                if group['weight_decay'] != 0:
                    grad = grad.add(group['weight_decay'], p.data)

                # Decay the first and second moment running average coefficient
                exp_avg.mul_(beta1).add_(1 - beta1, grad)
                exp_avg_sq.mul_(beta2).addcmul_(1 - beta2, grad, grad)
                if amsbound:
                    # Maintains the maximum of all 2nd moment running avg. till now
                    torch.max(max_exp_avg_sq, exp_avg_sq, out=max_exp_avg_sq)
                    # Use the max. for normalizing running avg. of gradient
                    denom = max_exp_avg_sq.sqrt().add_(group['eps'])
                else:
                    denom = exp_avg_sq.sqrt().add_(group['eps'])

                bias_correction1 = 1 - beta1 ** state['step']
                bias_correction2 = 1 - beta2 ** state['step']
                step_size = group['lr'] * math.sqrt(bias_correction2) / bias_correction1

                # Applies bounds on actual learning rate
                # lr_scheduler cannot affect final_lr, this is a workaround to apply lr decay
                final_lr = group['final_lr'] * group['lr'] / base_lr
                lower_bound = final_lr * (1 - 1 / (group['gamma'] * state['step'] + 1))
                upper_bound = final_lr * (1 + 1 / (group['gamma'] * state['step']))
                step_size = torch.full_like(denom, step_size)
                step_size.div_(denom).clamp_(lower_bound, upper_bound).mul_(exp_avg)

                p.data.add_(-step_size)

        return loss

class AdaBoundW(Optimizer):
    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), final_lr=0.1, gamma=1e-3,
                 eps=1e-8, weight_decay=0, amsbound=False):
        if not 0.0 <= lr:
            raise ValueError("Invalid learning rate: {}".format(lr))
        if not 0.0 <= eps:
            raise ValueError("Invalid epsilon value: {}".format(eps))
        if not 0.0 <= betas[0] < 1.0:
            raise ValueError("Invalid beta parameter at index 0: {}".format(betas[0]))
        if not 0.0 <= betas[1] < 1.0:
            raise ValueError("Invalid beta parameter at index 1: {}".format(betas[1]))
        if not 0.0 <= final_lr:
            raise ValueError("Invalid final learning rate: {}".format(final_lr))
        if not 0.0 <= gamma < 1.0:
            raise ValueError("Invalid gamma parameter: {}".format(gamma))
        defaults = dict(lr=lr, betas=betas, final_lr=final_lr, gamma=gamma, eps=eps,
                        weight_decay=weight_decay, amsbound=amsbound)
        super(AdaBoundW, self).__init__(params, defaults)

        self.base_lrs = list(map(lambda group: group['lr'], self.param_groups))

    def __setstate__(self, state):
        super(AdaBoundW, self).__setstate__(state)
        for group in self.param_groups:
            group.setdefault('amsbound', False)

    def step(self, closure=None):
        """Performs a single optimization step.
        Arguments:
            closure (callable, optional): A closure that reevaluates the model
                and returns the loss.
        """
        loss = None
        if closure is not None:
            loss = closure()

        for group, base_lr in zip(self.param_groups, self.base_lrs):
            for p in group['params']:
                if p.grad is None:
                    continue
                grad = p.grad.data
                if grad.is_sparse:
                    raise RuntimeError(
                        'Adam does not support sparse gradients, please consider SparseAdam instead')
                amsbound = group['amsbound']

                state = self.state[p]

                # State initialization
                if len(state) == 0:
                    state['step'] = 0
                    # Exponential moving average of gradient values
                    state['exp_avg'] = torch.zeros_like(p.data)
                    # Exponential moving average of squared gradient values
                    state['exp_avg_sq'] = torch.zeros_like(p.data)
                    if amsbound:
                        # Maintains max of all exp. moving avg. of sq. grad. values
                        state['max_exp_avg_sq'] = torch.zeros_like(p.data)

                exp_avg, exp_avg_sq = state['exp_avg'], state['exp_avg_sq']
                if amsbound:
                    max_exp_avg_sq = state['max_exp_avg_sq']
                beta1, beta2 = group['betas']

                state['step'] += 1

                # Decay the first and second moment running average coefficient
                exp_avg.mul_(beta1).add_(1 - beta1, grad)
                exp_avg_sq.mul_(beta2).addcmul_(1 - beta2, grad, grad)
                if amsbound:
                    # Maintains the maximum of all 2nd moment running avg. till now
                    torch.max(max_exp_avg_sq, exp_avg_sq, out=max_exp_avg_sq)
                    # Use the max. for normalizing running avg. of gradient
                    denom = max_exp_avg_sq.sqrt().add_(group['eps'])
                else:
                    denom = exp_avg_sq.sqrt().add_(group['eps'])

                bias_correction1 = 1 - beta1 ** state['step']
                bias_correction2 = 1 - beta2 ** state['step']
                step_size = group['lr'] * math.sqrt(bias_correction2) / bias_correction1

                # Applies bounds on actual learning rate
                # lr_scheduler cannot affect final_lr, this is a workaround to apply lr decay
                final_lr = group['final_lr'] * group['lr'] / base_lr
                lower_bound = final_lr * (1 - 1 / (group['gamma'] * state['step'] + 1))
                upper_bound = final_lr * (1 + 1 / (group['gamma'] * state['step']))
                step_size = torch.full_like(denom, step_size)
                step_size.div_(denom).clamp_(lower_bound, upper_bound).mul_(exp_avg)

                if group['weight_decay'] != 0:
                    decayed_weights = torch.mul(p.data, group['weight_decay'])
                    p.data.add_(-step_size)
                    p.data.sub_(decayed_weights)
                else:
                    p.data.add_(-step_size)

        return loss
'''

SGD_GC_SOURCE = '''
import torch
from torch.optim.optimizer import Optimizer, required

class SGD_GC(Optimizer):

    def __init__(self, params, lr=required, momentum=0, dampening=0,
                 weight_decay=0, nesterov=False):
        if lr is not required and lr < 0.0:
            raise ValueError("Invalid learning rate: {}".format(lr))
        if momentum < 0.0:
            raise ValueError("Invalid momentum value: {}".format(momentum))
        if weight_decay < 0.0:
            raise ValueError("Invalid weight_decay value: {}".format(weight_decay))

        defaults = dict(lr=lr, momentum=momentum, dampening=dampening,
                        weight_decay=weight_decay, nesterov=nesterov)
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("Nesterov momentum requires a momentum and zero dampening")
        super(SGD_GC, self).__init__(params, defaults)

    def __setstate__(self, state):
        super(SGD_GC, self).__setstate__(state)
        for group in self.param_groups:
            group.setdefault('nesterov', False)

    def step(self, closure=None):
        """Performs a single optimization step.
        Arguments:
            closure (callable, optional): A closure that reevaluates the model
                and returns the loss.
        """
        loss = None
        if closure is not None:
            loss = closure()

        for group in self.param_groups:
            weight_decay = group['weight_decay']
            momentum = group['momentum']
            dampening = group['dampening']
            nesterov = group['nesterov']

            for p in group['params']:
                if p.grad is None:
                    continue
                d_p = p.grad.data

                if weight_decay != 0:
                    d_p.add_(weight_decay, p.data)

                #GC operation for Conv layers and FC layers
                if len(list(d_p.size()))>1:
                   d_p.add_(-d_p.mean(dim = tuple(range(1,len(list(d_p.size())))), keepdim = True))

                if momentum != 0:
                    param_state = self.state[p]
                    if 'momentum_buffer' not in param_state:
                        buf = param_state['momentum_buffer'] = torch.clone(d_p).detach()
                    else:
                        buf = param_state['momentum_buffer']
                        buf.mul_(momentum).add_(1 - dampening, d_p)
                    if nesterov:
                        d_p = d_p.add(momentum, buf)
                    else:
                        d_p = buf

                p.data.add_(-group['lr'], d_p)

        return loss
'''

# -- the training loops (the repositories train ResNets on CIFAR-10 and ImageNet) -------------
TRAINING_SOURCE = """
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(36, 8)
        self.fc2 = nn.Linear(8, 3)

    def forward(self, x):
        return self.fc2(torch.tanh(self.fc1(x)))


class ConvNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3)
        self.fc = nn.Linear(4 * 4 * 4, 3)

    def forward(self, x):
        x = torch.tanh(self.conv(x.view(-1, 1, 6, 6)))
        return self.fc(torch.flatten(x, 1))


def snapshot(optimizer, model):
    record.append(params_of(model))
    for i, p in enumerate(model.parameters()):
        state = optimizer.state[p]
        record.append({f'{i}.{k}': v.detach().numpy().copy() for k, v in state.items() if torch.is_tensor(v)})


def train(model, make_optimizer, steps, resume_at, make_scheduler=None):
    initialize(model)
    optimizer = make_optimizer(model.parameters())
    scheduler = make_scheduler(optimizer) if make_scheduler else None
    for step in range(steps):
        if step == resume_at:  # a checkpoint, loaded into a fresh optimizer (and scheduler)
            checkpoint = {'optimizer': optimizer.state_dict()}
            if scheduler:
                checkpoint['scheduler'] = scheduler.state_dict()
            optimizer = make_optimizer(model.parameters())
            optimizer.load_state_dict(checkpoint['optimizer'])
            if scheduler:
                scheduler = make_scheduler(optimizer)
                scheduler.load_state_dict(checkpoint['scheduler'])
        optimizer.zero_grad()
        loss = F.cross_entropy(model(inputs), labels)
        loss.backward()
        optimizer.step()
        if scheduler:
            scheduler.step()
        record.append(loss.item())
    record.append([str(k) for k in optimizer.state_dict()['state']])
    snapshot(optimizer, model)
    return optimizer


def train_adabelief(resume_at=None, **options):
    optimizer = train(Net(), lambda params: AdaBelief(params, lr=1e-2, eps=1e-16, betas=(0.9, 0.99), print_change_log=False, **options), 8, resume_at)
    record.append([[None if v is None else float(v) for v in b] for b in optimizer.param_groups[0]['buffer']])
    record.append([optimizer.state[p]['step'] for p in optimizer.param_groups[0]['params']])
    optimizer.reset()
    record.append([float(v.abs().sum()) for p in optimizer.param_groups[0]['params'] for v in optimizer.state[p].values() if torch.is_tensor(v)])


def train_madgrad(resume_at=None, **options):
    optimizer = train(Net(), lambda params: MADGRAD(params, lr=5e-2, **options), 6, resume_at)
    record.append([str(optimizer.state['k'].tolist()), str(optimizer.state['k'].dtype == torch.long)])


def train_adabound(variant, resume_at=None, **options):
    make_scheduler = lambda optimizer: torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)
    optimizer = train(Net(), lambda params: variant(params, lr=1e-2, final_lr=0.05, gamma=0.05, **options), 6, resume_at, make_scheduler)
    record.append([optimizer.base_lrs, [g['lr'] for g in optimizer.param_groups]])


def train_sgd_gc(resume_at=None):
    optimizer = train(ConvNet(), lambda params: SGD_GC(params, lr=0.1, momentum=0.9, weight_decay=1e-3, nesterov=True), 5, resume_at)
    record.append([p.grad.mean(dim=tuple(range(1, p.dim()))).abs().max().item() < 1e-6 for p in optimizer.param_groups[0]['params'] if p.dim() > 1])
"""

SOURCE = ADABELIEF_SOURCE + MADGRAD_SOURCE + ADABOUND_SOURCE + SGD_GC_SOURCE + TRAINING_SOURCE

STEPS = [
    ("import torch\n", "import retrograd as torch\n"),
    ("import torch.optim\n", "import retrograd.optim\n"),
    # the gradients are a value: each step takes them
    ("    def step(self, closure=None):", "    def step(self, grads, closure=None):"),
    (
        "    def step(self, closure: Optional[Callable[[], float]] = None) -> Optional[float]:",
        "    def step(self, grads, closure: Optional[Callable[[], float]] = None) -> Optional[float]:",
    ),
    ("p.grad", "p.grad(grads)"),
    (
        "        loss.backward()\n        optimizer.step()\n",
        "        grads = loss.backward()\n        optimizer.step(grads)\n",
    ),
    # (the centred gradients are checked from the last step's)
    ("    return optimizer\n", "    return optimizer, grads\n"),
    ("    optimizer = train(ConvNet()", "    optimizer, grads = train(ConvNet()"),
    (
        "    optimizer = train(Net(), lambda params: AdaBelief",
        "    optimizer, _ = train(Net(), lambda params: AdaBelief",
    ),
    (
        "    optimizer = train(Net(), lambda params: MADGRAD",
        "    optimizer, _ = train(Net(), lambda params: MADGRAD",
    ),
    (
        "    optimizer = train(Net(), lambda params: variant",
        "    optimizer, _ = train(Net(), lambda params: variant",
    ),
]


def _data():
    rng = np.random.default_rng(5001)
    inputs = rng.standard_normal((12, 36)).astype(np.float32)
    labels = rng.integers(0, 3, 12)
    return inputs, labels


def _run(call):
    """``call(namespace)`` on torch's run of the programs and then on the port's, from the same
    data and initial weights; the two records."""
    inputs, labels = _data()
    initialize = initializer()
    records = []
    for lib in (torch, rg):
        record = []
        text = (
            SOURCE
            if lib is torch
            else port(SOURCE, STEPS).replace("from torch.", "from retrograd.")
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
        with warnings.catch_warnings():  # (AdaBound's and SGD_GC's deprecated overloads)
            warnings.simplefilter("ignore", UserWarning)
            call(names)
        records.append(record)
    return records


@pytest.mark.parametrize(
    ("options", "resume_at"),
    [
        ({"weight_decay": 1e-2}, 4),  # rectified, decoupled decay (the defaults)
        ({"weight_decay": 1e-2, "weight_decouple": False, "rectify": False, "amsgrad": True}, None),
    ],
    ids=["rectified-resumed", "amsgrad-l2"],
)
def test_adabelief_trains_and_resumes_as_torch(options, resume_at):
    theirs, ours = _run(lambda names: names["train_adabelief"](resume_at, **options))
    assert theirs[7] < theirs[0]
    assert_records_agree(ours, theirs, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    "options",
    [
        {"momentum": 0.9, "eps": 0.0, "weight_decay": 1e-2, "decouple_decay": True},
        {"momentum": 0.0, "weight_decay": 1e-2},
    ],
    ids=["momentum-eps0-decoupled", "dual-averaging-l2"],
)
def test_madgrad_keeps_its_step_count_in_the_state_and_resumes_as_torch(options):
    theirs, ours = _run(lambda names: names["train_madgrad"](3, **options))
    assert theirs[6] == ["k", "0", "1", "2", "3"]
    assert theirs[-1] == ["[6]", "True"]
    assert theirs[5] < theirs[0]
    assert_records_agree(ours, theirs, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    ("variant", "options"),
    [("AdaBound", {"weight_decay": 1e-2}), ("AdaBoundW", {"weight_decay": 1e-2, "amsbound": True})],
)
def test_adabound_under_a_step_schedule_resumes_as_torch(variant, options):
    theirs, ours = _run(lambda names: names["train_adabound"](names[variant], 3, **options))
    assert theirs[-1] == [[1e-2], [1e-2 / 8]]
    assert_records_agree(ours, theirs, rtol=1e-5, atol=1e-6)


def test_sgd_with_gradient_centralisation_trains_a_convnet_as_torch():
    theirs, ours = _run(lambda names: names["train_sgd_gc"](2))
    assert theirs[-1] == [True, True]
    assert theirs[4] < theirs[0]
    assert_records_agree(ours, theirs, rtol=1e-5, atol=1e-6)
