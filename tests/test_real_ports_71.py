"""Real PyTorch programs ported to retrograd, continued from ``tests/test_real_ports_68.py`` (the
harness: ``tests/real_ports.py``): custom optimizers written as ``torch.optim.Optimizer``
subclasses, each training a small classifier against torch's run of the same code. The
optimizers are written here in the style of their public implementations
(lucidrains/lion-pytorch, the Sophia authors' ``sophia.py``, sail-sg/Adan, transformers'
``Adafactor``, facebookresearch/schedule_free):

- Lion: ``@torch.no_grad()`` on ``step``, a closure evaluated ``with torch.enable_grad()`` (and
  passed by keyword), ``filter(lambda p: exists(p.grad), pg['params'])``, ``self.state[p]``,
  ``p.data.mul_(1. - lr * wd)``, ``momentum.clone().mul_(beta1).add(grad, alpha=1. - beta1)
  .sign_()`` and the momentum by ``momentum.lerp_(grad, 1. - beta2)``; per-group learning rates
  and betas, ``add_param_group`` for the output layer after the first steps; and a multi-tensor
  form (``torch._foreach_mul_``, ``_foreach_lerp_``, ``_foreach_sign_``,
  ``_foreach_add_(params, directions, alpha=-lr)``).
- Sophia-G: ``state['step']`` a 0-d tensor stepped by ``step_t += 1``, ``update_hessian`` from
  the gradients of a loss on labels sampled by ``torch.distributions.Categorical(logits=
  logits).sample()`` (Gauss-Newton-Bartlett), ``addcmul_(p.grad, p.grad, value=1 - beta2)``, the
  ratio ``(m.abs() / (rho * bs * h + 1e-15)).clamp(None, 1)`` and ``p.addcmul_(m.sign(), ratio,
  value=-lr)``; ``torch.zeros_like(p, memory_format=torch.preserve_format)``, a
  ``__setstate__`` that turns loaded steps into tensors; ``zero_grad(set_to_none=True)``; the
  optimizer's and the model's state dicts saved mid-training and loaded into a fresh model and
  optimizer that carry on.
- Adan: the global gradient norm clip through ``torch.clamp(limit / (torch.sqrt(total) +
  pg['eps']), max=1.0).item()``, the step count kept in the group, ``state['neg_pre_grad'] =
  p.grad.clone().mul_(-clip)``, the gradient scaled in place (``g.mul_(clip)``) and the
  proximal weight decay ``p.div_(1 + lr * wd)``, in a single-tensor loop and a multi-tensor
  form of ``torch._foreach_*`` ops (``_foreach_addcmul_``, ``_foreach_sqrt``,
  ``_foreach_addcdiv_``, ``_foreach_zero_``, ...); state dicts loaded mid-run.
- Adafactor: the relative step, ``rms`` by ``t.norm(2) / (t.numel() ** 0.5)``, factored second
  moments ``exp_avg_sq_row``/``exp_avg_sq_col`` for matrices (``torch.zeros(shape[:-1]).to(grad)``),
  the inverse root by ``rsqrt_``/``rsqrt`` and ``torch.outer``, the update clipped by
  ``(self.rms(update) / pg['clip_threshold']).clamp_(min=1.0)``, first moments, weight decay
  by ``p.add_(p, alpha=...)``; and ``torch.optim.Adafactor`` itself.
- Schedule-free AdamW: the optimizer's own ``train()``/``eval()`` moving the parameters between
  the two sequences by ``p.data.lerp_(end=state['z'], weight=...)``, bookkeeping kept in the
  groups (``k``, ``weight_sum``, ``lr_max``, ``train_mode``, ``scheduled_lr``),
  ``torch.clone(p, memory_format=torch.preserve_format)``, the gradient normalised in place
  (``g.div_(...)`` of ``p.grad.data``), and the multi-tensor path (``zip(*[(p, p.grad, ...)])``
  into ``torch._foreach_div``, ``_foreach_sqrt_``, ``_foreach_lerp_(y, z, weight=mix)``,
  ``_foreach_sub_(z, g, alpha=lr)``).

The regressions at the end: an optimizer of one's own taking ``lr=None`` and three betas,
loading a 0-d tensor step back as a tensor, the ``_foreach_`` ops, and ``copy.deepcopy`` of an
optimizer with a ``__setstate__``.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

import retrograd as rg
from real_ports import (
    assert_records_agree,
    initializer,
    params_of,
    port,
    run_source,
    seeded_draws,  # noqa: F401 (autouse: each test from fixed seeds)
)


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
from torch.nn import functional as F


def exists(x):
    return x is not None


# ---- Lion (sign of an interpolated momentum), in the style of lion-pytorch ----
def lion_update(p, grad, momentum, lr, wd, beta1, beta2):
    p.data.mul_(1.0 - lr * wd)  # decoupled weight decay first
    direction = momentum.clone().mul_(beta1).add(grad, alpha=1.0 - beta1).sign_()
    p.add_(direction, alpha=-lr)
    momentum.lerp_(grad, 1.0 - beta2)


class Lion(torch.optim.Optimizer):
    def __init__(self, params, lr=1e-4, betas=(0.9, 0.99), weight_decay=0.0):
        assert lr > 0.0 and all(0.0 <= b <= 1.0 for b in betas)
        super().__init__(params, dict(lr=lr, betas=betas, weight_decay=weight_decay))

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if exists(closure):
            with torch.enable_grad():
                loss = closure()
        for pg in self.param_groups:
            beta1, beta2 = pg["betas"]
            for p in filter(lambda p: exists(p.grad), pg["params"]):
                state = self.state[p]
                if len(state) == 0:
                    state["exp_avg"] = torch.zeros_like(p)
                lion_update(p, p.grad, state["exp_avg"], pg["lr"], pg["weight_decay"], beta1, beta2)
        return loss


class ForeachLion(torch.optim.Optimizer):
    """The same rule over each pg's tensors at once."""

    def __init__(self, params, lr=1e-4, betas=(0.9, 0.99), weight_decay=0.0):
        assert all(hasattr(torch, f"_foreach_{op}_") for op in ("mul", "add", "sign", "lerp"))
        super().__init__(params, dict(lr=lr, betas=betas, weight_decay=weight_decay))

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if exists(closure):
            with torch.enable_grad():
                loss = closure()
        for pg in self.param_groups:
            lr, wd, (beta1, beta2) = pg["lr"], pg["weight_decay"], pg["betas"]
            live = [p for p in filter(lambda p: exists(p.grad), pg["params"])]
            for p in live:
                if len(self.state[p]) == 0:
                    self.state[p]["exp_avg"] = torch.zeros_like(p)
            momenta = [self.state[p]["exp_avg"] for p in live]
            gradients = [p.grad for p in live]
            torch._foreach_mul_(live, 1.0 - lr * wd)
            directions = [m.clone() for m in momenta]
            torch._foreach_lerp_(directions, gradients, 1.0 - beta1)
            torch._foreach_sign_(directions)
            torch._foreach_add_(live, directions, alpha=-lr)
            torch._foreach_lerp_(momenta, gradients, 1.0 - beta2)
        return loss


# ---- Sophia-G (momentum clipped by a diagonal Gauss-Newton estimate), its authors' style ----
class SophiaG(torch.optim.Optimizer):
    def __init__(
        self, params, lr=1e-4, betas=(0.965, 0.99), rho=0.04, weight_decay=1e-1, *, maximize=False
    ):
        for name, value in (("lr", lr), ("rho", rho), ("weight_decay", weight_decay)):
            if value < 0.0:
                raise ValueError(f"invalid {name}: {value}")
        if not all(0.0 <= b < 1.0 for b in betas):
            raise ValueError(f"invalid betas: {betas}")
        super().__init__(
            params, dict(lr=lr, betas=betas, rho=rho, weight_decay=weight_decay, maximize=maximize)
        )

    def __setstate__(self, saved):
        super().__setstate__(saved)
        for pg in self.param_groups:
            pg.setdefault("maximize", False)
        values = list(self.state.values())
        if values and not torch.is_tensor(values[0]["step"]):
            for s in values:
                s["step"] = torch.tensor(float(s["step"]))

    def _state(self, p):
        state = self.state[p]
        if len(state) == 0:
            state["step"] = torch.tensor(0.0)
            state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
        if "hessian" not in state:
            state["hessian"] = torch.zeros_like(p, memory_format=torch.preserve_format)
        return state

    @torch.no_grad()
    def update_hessian(self):
        for pg in self.param_groups:
            beta2 = pg["betas"][1]
            for p in pg["params"]:
                if p.grad is not None:
                    self._state(p)["hessian"].mul_(beta2).addcmul_(p.grad, p.grad, value=1 - beta2)

    @torch.no_grad()
    def step(self, closure=None, *, bs=5120):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for pg in self.param_groups:
            beta1, _ = pg["betas"]
            lr, rho, wd = pg["lr"], pg["rho"], pg["weight_decay"]
            for p in pg["params"]:
                if p.grad is None:
                    continue
                if p.grad.is_sparse:
                    raise RuntimeError("sparse gradients are not supported")
                state = self._state(p)
                grad = -p.grad if pg["maximize"] else p.grad
                step_t, m, h = state["step"], state["exp_avg"], state["hessian"]
                step_t += 1
                p.mul_(1 - lr * wd)
                m.mul_(beta1).add_(grad, alpha=1 - beta1)
                ratio = (m.abs() / (rho * bs * h + 1e-15)).clamp(None, 1)
                p.addcmul_(m.sign(), ratio, value=-lr)
        return loss


# ---- Adan (Nesterov momentum on gradient differences), in the style of sail-sg/Adan ----
def adan_single(
    params,
    gradients,
    m_list,
    v_list,
    n_list,
    prev_list,
    *,
    betas,
    corrections,
    lr,
    wd,
    epsilon,
    no_prox,
    clip,
):
    beta1, beta2, beta3 = betas
    c1, c2, c3_sqrt = corrections
    for p, g, m, v, n, prev in zip(params, gradients, m_list, v_list, n_list, prev_list):
        g.mul_(clip)
        prev.add_(g)  # prev held -g_{t-1}: now the difference g_t - g_{t-1}
        m.mul_(beta1).add_(g, alpha=1 - beta1)
        v.mul_(beta2).add_(prev, alpha=1 - beta2)
        prev.mul_(beta2).add_(g)  # g_t + beta2 * (g_t - g_{t-1})
        n.mul_(beta3).addcmul_(prev, prev, value=1 - beta3)
        denom = (n.sqrt() / c3_sqrt).add_(epsilon)
        if no_prox:
            p.mul_(1 - lr * wd)
        p.addcdiv_(m, denom, value=-lr / c1)
        p.addcdiv_(v, denom, value=-lr * beta2 / c2)
        if not no_prox:
            p.div_(1 + lr * wd)
        prev.zero_().add_(g, alpha=-1.0)


def adan_foreach(
    params,
    gradients,
    m_list,
    v_list,
    n_list,
    prev_list,
    *,
    betas,
    corrections,
    lr,
    wd,
    epsilon,
    no_prox,
    clip,
):
    if not params:
        return
    beta1, beta2, beta3 = betas
    c1, c2, c3_sqrt = corrections
    torch._foreach_mul_(gradients, clip)
    torch._foreach_add_(prev_list, gradients)
    torch._foreach_mul_(m_list, beta1)
    torch._foreach_add_(m_list, gradients, alpha=1 - beta1)
    torch._foreach_mul_(v_list, beta2)
    torch._foreach_add_(v_list, prev_list, alpha=1 - beta2)
    torch._foreach_mul_(prev_list, beta2)
    torch._foreach_add_(prev_list, gradients)
    torch._foreach_mul_(n_list, beta3)
    torch._foreach_addcmul_(n_list, prev_list, prev_list, value=1 - beta3)
    denom = torch._foreach_sqrt(n_list)
    torch._foreach_div_(denom, c3_sqrt)
    torch._foreach_add_(denom, epsilon)
    if no_prox:
        torch._foreach_mul_(params, 1 - lr * wd)
    torch._foreach_addcdiv_(params, m_list, denom, value=-lr / c1)
    torch._foreach_addcdiv_(params, v_list, denom, value=-lr * beta2 / c2)
    if not no_prox:
        torch._foreach_div_(params, 1 + lr * wd)
    torch._foreach_zero_(prev_list)
    torch._foreach_add_(prev_list, gradients, alpha=-1.0)


class Adan(torch.optim.Optimizer):
    def __init__(
        self,
        params,
        lr=1e-3,
        betas=(0.98, 0.92, 0.99),
        eps=1e-8,
        weight_decay=0.0,
        max_grad_norm=0.0,
        no_prox=False,
        foreach=True,
    ):
        if max_grad_norm < 0.0 or lr < 0.0 or eps < 0.0:
            raise ValueError("max_grad_norm, lr and eps must be non-negative")
        if not all(0.0 <= b < 1.0 for b in betas):
            raise ValueError(f"invalid betas: {betas}")
        super().__init__(
            params,
            dict(
                lr=lr,
                betas=betas,
                eps=eps,
                weight_decay=weight_decay,
                max_grad_norm=max_grad_norm,
                no_prox=no_prox,
                foreach=foreach,
            ),
        )

    def __setstate__(self, saved):
        super().__setstate__(saved)
        for pg in self.param_groups:
            pg.setdefault("no_prox", False)

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        clip = 1.0
        if (
            self.defaults["max_grad_norm"] > 0
        ):  # one factor for every gradient: the global norm's clip
            total = torch.zeros(1)
            for pg in self.param_groups:
                for p in pg["params"]:
                    if p.grad is not None:
                        total.add_(p.grad.pow(2).sum())
            limit = torch.tensor(self.defaults["max_grad_norm"])
            clip = torch.clamp(limit / (torch.sqrt(total) + pg["eps"]), max=1.0).item()
        for pg in self.param_groups:
            pg["step"] = pg["step"] + 1 if "step" in pg else 1
            beta1, beta2, beta3 = pg["betas"]
            live = [p for p in pg["params"] if p.grad is not None]
            for p in live:
                state = self.state[p]
                if len(state) == 0:
                    for key in ("exp_avg", "exp_avg_sq", "exp_avg_diff"):
                        state[key] = torch.zeros_like(p)
                if "neg_pre_grad" not in state or pg["step"] == 1:
                    state["neg_pre_grad"] = p.grad.clone().mul_(-clip)
            update = adan_foreach if pg["foreach"] else adan_single
            update(
                [p for p in live],
                [p.grad for p in live],
                *[
                    [self.state[p][k] for p in live]
                    for k in ("exp_avg", "exp_avg_diff", "exp_avg_sq", "neg_pre_grad")
                ],
                betas=pg["betas"],
                corrections=(
                    1.0 - beta1 ** pg["step"],
                    1.0 - beta2 ** pg["step"],
                    math.sqrt(1.0 - beta3 ** pg["step"]),
                ),
                lr=pg["lr"],
                wd=pg["weight_decay"],
                epsilon=pg["eps"],
                no_prox=pg["no_prox"],
                clip=clip,
            )
        return loss


# ---- Adafactor (factored second moments, relative step sizes), in the style of transformers ----
class Adafactor(torch.optim.Optimizer):
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
        if relative_step and lr is not None:
            raise ValueError("a manual lr needs relative_step=False")
        if not relative_step and warmup_init:
            raise ValueError("warmup_init needs relative_step=True")
        super().__init__(
            params,
            dict(
                lr=lr,
                eps=eps,
                clip_threshold=clip_threshold,
                decay_rate=decay_rate,
                beta1=beta1,
                weight_decay=weight_decay,
                scale_parameter=scale_parameter,
                relative_step=relative_step,
                warmup_init=warmup_init,
            ),
        )

    @staticmethod
    def rms(t):
        return t.norm(2) / (t.numel() ** 0.5)

    @staticmethod
    def step_size(pg, state):
        size = pg["lr"]
        if pg["relative_step"]:
            ceiling = 1e-6 * state["step"] if pg["warmup_init"] else 1e-2
            size = min(ceiling, 1.0 / math.sqrt(state["step"]))
        if pg["scale_parameter"]:
            size = max(pg["eps"][1], state["RMS"]) * size
        return size

    @staticmethod
    def inverse_root(row, col):
        r = (row / row.mean(dim=-1, keepdim=True)).rsqrt_()
        c = col.rsqrt()
        if r.dim() == 1:
            return torch.outer(r, c)
        return torch.mul(r.unsqueeze(-1), c.unsqueeze(-2))

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            loss = closure()
        for pg in self.param_groups:
            for p in pg["params"]:
                if p.grad is None:
                    continue
                grad = p.grad
                if grad.dtype in (torch.float16, torch.bfloat16):
                    grad = grad.float()
                state, shape = self.state[p], grad.shape
                factored, momentum = len(shape) >= 2, pg["beta1"] is not None
                if len(state) == 0:
                    state["step"], state["RMS"] = 0, 0
                    if momentum:
                        state["exp_avg"] = torch.zeros_like(p)
                    if factored:
                        state["exp_avg_sq_row"] = torch.zeros(shape[:-1]).to(grad)
                        state["exp_avg_sq_col"] = torch.zeros(shape[:-2] + shape[-1:]).to(grad)
                    else:
                        state["exp_avg_sq"] = torch.zeros_like(p)
                else:
                    for key in ("exp_avg", "exp_avg_sq_row", "exp_avg_sq_col", "exp_avg_sq"):
                        if key in state:
                            state[key] = state[key].to(grad)
                state["step"] += 1
                state["RMS"] = self.rms(p)
                lr = self.step_size(pg, state)
                decay = 1.0 - math.pow(state["step"], pg["decay_rate"])
                squared = grad**2 + pg["eps"][0]
                if factored:
                    state["exp_avg_sq_row"].mul_(decay).add_(
                        squared.mean(dim=-1), alpha=1.0 - decay
                    )
                    state["exp_avg_sq_col"].mul_(decay).add_(
                        squared.mean(dim=-2), alpha=1.0 - decay
                    )
                    update = self.inverse_root(
                        state["exp_avg_sq_row"], state["exp_avg_sq_col"]
                    ).mul_(grad)
                else:
                    state["exp_avg_sq"].mul_(decay).add_(squared, alpha=1.0 - decay)
                    update = state["exp_avg_sq"].rsqrt().mul_(grad)
                update.div_((self.rms(update) / pg["clip_threshold"]).clamp_(min=1.0))
                update.mul_(lr)
                if momentum:
                    update = state["exp_avg"].mul_(pg["beta1"]).add_(update, alpha=1 - pg["beta1"])
                if pg["weight_decay"] != 0:
                    p.add_(p, alpha=-pg["weight_decay"] * lr)
                p.add_(-update)
        return loss


# ---- Schedule-free AdamW (gradients at y, steps on z, evaluation at x): schedule_free's style ----
class ScheduleFreeAdamW(torch.optim.Optimizer):
    def __init__(
        self,
        params,
        lr=0.0025,
        betas=(0.9, 0.999),
        eps=1e-8,
        weight_decay=0,
        warmup_steps=0,
        r=0.0,
        lr_power=2.0,
        foreach=hasattr(torch, "_foreach_mul_"),
    ):
        super().__init__(
            params,
            dict(
                lr=lr,
                betas=betas,
                eps=eps,
                r=r,
                k=0,
                warmup_steps=warmup_steps,
                train_mode=True,
                weight_sum=0.0,
                lr_max=-1.0,
                weight_lr_power=lr_power,
                weight_decay=weight_decay,
                foreach=foreach,
            ),
        )

    def _move(self, to_train):
        for pg in self.param_groups:
            if pg["train_mode"] == to_train:
                continue
            beta1 = pg["betas"][0]
            for p in pg["params"]:
                if "z" in self.state[p]:
                    p.data.lerp_(
                        end=self.state[p]["z"], weight=1 - beta1 if to_train else 1 - 1 / beta1
                    )
            pg["train_mode"] = to_train

    @torch.no_grad()
    def eval(self):
        self._move(False)

    @torch.no_grad()
    def train(self):
        self._move(True)

    @torch.no_grad()
    def step(self, closure=None):
        if not self.param_groups[0]["train_mode"]:
            raise RuntimeError("call opt.train() before stepping")
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for pg in self.param_groups:
            beta1, beta2 = pg["betas"]
            k, decay = pg["k"], pg["weight_decay"]
            lr = pg["lr"] * ((k + 1) / pg["warmup_steps"] if k < pg["warmup_steps"] else 1.0)
            pg["scheduled_lr"] = lr
            pg["lr_max"] = lr_max = max(lr, pg["lr_max"])
            weight = ((k + 1) ** pg["r"]) * (lr_max ** pg["weight_lr_power"])
            pg["weight_sum"] = pg["weight_sum"] + weight
            mix = weight / pg["weight_sum"] if pg["weight_sum"] else 0
            correction = 1 - beta2 ** (k + 1)
            live = [p for p in pg["params"] if p.grad is not None]
            for p in live:
                if "z" not in self.state[p]:
                    self.state[p]["z"] = torch.clone(p, memory_format=torch.preserve_format)
                    self.state[p]["exp_avg_sq"] = torch.zeros_like(
                        p, memory_format=torch.preserve_format
                    )
            if pg["foreach"] and live:
                y, g, v, z = zip(
                    *[(p, p.grad, self.state[p]["exp_avg_sq"], self.state[p]["z"]) for p in live]
                )
                torch._foreach_mul_(v, beta2)
                torch._foreach_addcmul_(v, g, g, value=1 - beta2)
                denom = torch._foreach_div(v, correction)
                torch._foreach_sqrt_(denom)
                torch._foreach_add_(denom, pg["eps"])
                torch._foreach_div_(g, denom)  # the gradients normalised in place
                if decay != 0:
                    torch._foreach_add_(g, y, alpha=decay)
                torch._foreach_lerp_(y, z, weight=mix)
                torch._foreach_add_(y, g, alpha=lr * (beta1 * (1 - mix) - 1))
                torch._foreach_sub_(z, g, alpha=lr)
            else:
                for p in live:
                    y, g = p.data, p.grad.data
                    z, v = self.state[p]["z"], self.state[p]["exp_avg_sq"]
                    v.mul_(beta2).addcmul_(g, g, value=1 - beta2)
                    g = g.div_(v.div(correction).sqrt_().add_(pg["eps"]))
                    if decay != 0:
                        g.add_(y, alpha=decay)
                    y.lerp_(end=z, weight=mix)
                    y.add_(g, alpha=lr * (beta1 * (1 - mix) - 1))
                    z.sub_(g, alpha=lr)
            pg["k"] = k + 1
        return loss


# ---- the training loops: a small classifier on a fixed batch ----
class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.hidden = nn.Linear(5, 8)
        self.out = nn.Linear(8, 3)

    def forward(self, x):
        return self.out(torch.tanh(self.hidden(x)))


def batch_loss(net):
    return F.cross_entropy(net(inputs), labels)


def record_state(opt, net):
    record.append(params_of(net))
    for i, p in enumerate(net.parameters()):
        kept = {}
        for key, value in opt.state[p].items():
            if key != "step":
                kept[f"{i}.{key}"] = (
                    value.detach().numpy().copy() if torch.is_tensor(value) else value
                )
        record.append(kept)


def lion_run(optimizer_class):
    net = Classifier()
    initialize(net)
    opt = optimizer_class([{"params": net.hidden.parameters()}], lr=3e-2, weight_decay=0.1)

    def closure():
        opt.zero_grad(set_to_none=True)
        loss = batch_loss(net)
        loss.backward()
        return loss

    for step in range(4):
        if step == 2:  # the output layer joins late, with its own lr and betas
            opt.add_param_group({"params": net.out.parameters(), "lr": 1e-2, "betas": (0.95, 0.98)})
        record.append(opt.step(closure=closure).item())
    record.append([len(pg["params"]) for pg in opt.param_groups])
    record_state(opt, net)


def sophia_run(resume_at=None):
    net = Classifier()
    initialize(net)
    make = lambda params: SophiaG(params, lr=2e-2, betas=(0.9, 0.95), rho=0.05, weight_decay=1e-1)
    opt = make(net.parameters())
    for it in range(6):
        if it == resume_at:  # a checkpoint, read back into a fresh net and opt
            saved = {"net": net.state_dict(), "opt": opt.state_dict()}
            net = Classifier()
            net.load_state_dict(saved["net"])
            opt = make(net.parameters())
            opt.load_state_dict(saved["opt"])
        loss = batch_loss(net)
        loss.backward()
        opt.step(bs=inputs.shape[0])
        opt.zero_grad(set_to_none=True)
        record.append(loss.item())
        if it % 2 == 1:  # refresh the curvature estimate from labels sampled from the net
            logits = net(inputs)
            sampled = torch.distributions.Categorical(logits=logits).sample()
            sampled_loss = F.cross_entropy(logits, sampled)
            sampled_loss.backward()
            opt.update_hessian()
            opt.zero_grad(set_to_none=True)
    record.append([float(opt.state[p]["step"]) for p in net.parameters()])
    record_state(opt, net)


def adan_run(resume_at=None, foreach=False, no_prox=False):
    net = Classifier()
    initialize(net)
    settings = dict(lr=2e-2, weight_decay=0.02, max_grad_norm=0.5, no_prox=no_prox, foreach=foreach)
    opt = Adan(net.parameters(), **settings)
    for step in range(5):
        if step == resume_at:
            saved = opt.state_dict()
            opt = Adan(net.parameters(), **settings)
            opt.load_state_dict(saved)
        opt.zero_grad()
        loss = batch_loss(net)
        loss.backward()
        opt.step()
        record.append(loss.item())
    record.append([pg["step"] for pg in opt.param_groups])
    record_state(opt, net)


def adafactor_run(make_optimizer):
    net = Classifier()
    initialize(net)
    opt = make_optimizer(net.parameters())
    for step in range(4):
        opt.zero_grad()
        loss = batch_loss(net)
        loss.backward()
        opt.step()
        record.append(loss.item())
    record.append(params_of(net))


def schedule_free_run(foreach):
    net = Classifier()
    initialize(net)
    opt = ScheduleFreeAdamW(
        net.parameters(), lr=0.05, warmup_steps=2, weight_decay=0.01, foreach=foreach
    )
    for epoch in range(2):
        net.train()
        opt.train()
        for step in range(3):
            opt.zero_grad()
            loss = batch_loss(net)
            loss.backward()
            opt.step()
            record.append(loss.item())
        net.eval()
        opt.eval()  # evaluate at x, the average the steps imply
        with torch.no_grad():
            record.append(batch_loss(net).item())
        record.append(params_of(net))
    record.append([pg["scheduled_lr"] for pg in opt.param_groups])
'''

OPTIMIZERS_STEPS = [
    (
        "\nimport torch\nimport torch.nn as nn\n",
        "\nimport retrograd as torch\nimport retrograd.nn as nn\n",
    ),
    # the gradients are a value: each step takes them, and a closure returns them with its loss
    ("def step(self, closure=None", "def step(self, grads=None, closure=None"),
    ("loss = closure()", "loss, grads = closure()"),
    (
        "        loss.backward()\n        return loss\n",
        "        grads = loss.backward()\n        return loss, grads\n",
    ),
    ("def update_hessian(self):", "def update_hessian(self, grads):"),
    ("p.grad", "p.grad(grads)"),
    (
        "        loss.backward()\n        opt.step(",
        "        grads = loss.backward()\n        opt.step(grads, ",
    ),
    (
        "            loss.backward()\n            opt.step()",
        "            grads = loss.backward()\n            opt.step(grads)",
    ),
    (
        "            sampled_loss.backward()\n            opt.update_hessian()",
        "            opt.update_hessian(sampled_loss.backward())",
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
    theirs, ours = _run(lambda names: names["lion_run"](names[variant]))
    assert theirs[4] == [2, 2]
    assert theirs[3] < theirs[0]
    assert_records_agree(ours, theirs, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("resume_at", [None, 3])
def test_sophia_g_with_hessian_refreshes_trains_as_torch(resume_at):
    theirs, ours = _run(lambda names: names["sophia_run"](resume_at))
    assert theirs[6] == [6.0] * 4
    assert_records_agree(ours, theirs, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    "resume_at, foreach, no_prox", [(None, False, False), (2, False, True), (2, True, False)]
)
def test_adan_trains_as_torch(resume_at, foreach, no_prox):
    theirs, ours = _run(lambda names: names["adan_run"](resume_at, foreach, no_prox))
    assert theirs[5] == [5]
    assert_records_agree(ours, theirs, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("foreach", [False, True])
def test_schedule_free_adamw_trains_and_evaluates_as_torch(foreach):
    theirs, ours = _run(lambda names: names["schedule_free_run"](foreach))
    assert len(theirs) == 2 * 5 + 1
    assert_records_agree(ours, theirs, rtol=1e-5, atol=1e-6)


def test_adafactors_train_as_torch():
    def call(names):
        train = names["adafactor_run"]
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
        for pg in self.param_groups:
            for p in pg["params"]:
                state = self.state[p]
                if len(state) == 0:
                    state["step"] = rg.tensor(0.0)
                    state["exp_avg"] = rg.zeros_like(p)
                state["step"] += 1
                state["exp_avg"].lerp_(p.grad(grads), 1 - pg["betas"][0])
                p.add_(state["exp_avg"], alpha=-(pg["lr"] or 0.1))


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
                for pg in self.param_groups:
                    pg.setdefault("maximize", False)

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
