"""Random training loops of real layers against PyTorch (round 48).

A seeded generator draws a small model -- an ``Embedding`` (its weight maybe tied to the output
``Linear``'s) or a ``Linear`` input projection, a ``Conv1d``, a ``LayerNorm`` or a
``BatchNorm1d`` (running statistics in ``train()``, or the whole model in ``eval()``), a
``GRU`` (layers, directions), a ``Dropout`` in ``eval()``, a persistent and a non-persistent
buffer, parameters frozen by ``requires_grad_(False)`` -- an optimizer of ``rg.optim`` with
random hyper-parameters over two parameter groups of their own ``lr``/``weight_decay`` (one
module held back and joined by ``add_param_group`` mid-run), a chain of learning-rate schedules
stepped together (``SequentialLR``, ``ChainedScheduler``, ``ReduceLROnPlateau`` fed the loss,
...), gradient accumulation over micro-batches, ``clip_grad_norm_``/``clip_grad_value_``,
``zero_grad(set_to_none=...)`` both ways, and a mid-run save of the model's, the optimizer's
and the schedules' state dicts (``rg.save``/``rg.load``) loaded into fresh objects that must
carry on as torch's do. torch and retrograd run each program in lockstep; after every step
the losses, every entry of the model's state dict (parameters and buffers), the optimizer's
``param_groups`` (every setting) and state keys, and each schedule's ``get_last_lr()`` must
agree (float64 to 1e-9 relative, float32 to float rounding), and a step torch refuses must
raise an error of retrograd's hierarchy (API.md section 7).

The inner backend and the checkpointing strategy are the suite's (``RETROGRAD_INNER``,
``RETROGRAD_CHECKPOINTING``). ``RETROGRAD_FUZZ48_SEEDS=N`` runs N seeds by hand, from
``RETROGRAD_FUZZ48_FIRST`` (0).
"""

from __future__ import annotations

import math
import os
import warnings

import numpy as np
import pytest
import torch

import retrograd as rg

CORPUS = int(os.environ.get("RETROGRAD_FUZZ48_SEEDS", "24"))
FIRST_SEED = int(os.environ.get("RETROGRAD_FUZZ48_FIRST", "0"))

VOCAB, FEATURES, BATCH, LENGTH = 7, 3, 3, 4
MOMENTUM_OPTIMIZERS = ("SGD", "RMSprop")
BETAS_OPTIMIZERS = ("Adam", "AdamW", "Adamax", "NAdam", "RAdam")


# -- drawing programs -----------------------------------------------------------------------------
def _flag(rng: np.random.Generator, p: float = 0.5) -> bool:
    return bool(rng.random() < p)


def _pick(rng: np.random.Generator, options):
    return options[int(rng.integers(0, len(options)))]


def draw_model(rng: np.random.Generator) -> dict:
    embed = _flag(rng, 0.6)
    gru = _flag(rng, 0.5)
    return {
        "width": int(_pick(rng, [4, 6])),
        "embed": embed,
        "padding_idx": _pick(rng, [None, 0]) if embed else None,
        # rows renormed in place by the forward, outside the graph
        "max_norm": _pick(rng, [None, None, 1.0]) if embed else None,
        "conv": _flag(rng, 0.5),
        "conv_groups": int(_pick(rng, [1, 2])),
        "norm": _pick(rng, [None, "layer", "batch", "batch"]),
        "bn_momentum": _pick(rng, [0.1, 0.5, None]),
        "affine": _flag(rng, 0.8),  # the norm's weight and bias
        "running_stats": _flag(rng, 0.8),  # BatchNorm1d's track_running_stats
        "gru": gru,
        "gru_layers": int(_pick(rng, [1, 2])),
        "bidirectional": _flag(rng, 0.4),
        "head_bias": _flag(rng, 0.7),
        "tie": embed and _flag(rng, 0.6),
        "eval": _flag(rng, 0.2),
        "loss": _pick(rng, ["cross_entropy", "mse"]),
    }


def _betas(rng):
    return (float(_pick(rng, [0.0, 0.5, 0.9])), float(_pick(rng, [0.9, 0.99, 0.999])))


def draw_optimizer(rng: np.random.Generator) -> tuple[str, dict]:
    name, kwargs = _draw_algorithm(rng)
    # torch's implementation switch: the same numbers either way, but for ASGD's foreach
    # form (another arrangement of its update; tests/test_fuzz_training_30.py)
    if name != "ASGD" and "foreach" not in kwargs and _flag(rng, 0.3):
        kwargs["foreach"] = _flag(rng)
    return name, kwargs


def _draw_algorithm(rng: np.random.Generator) -> tuple[str, dict]:
    name = _pick(
        rng,
        ["SGD", "Adam", "AdamW", "RMSprop", "Adagrad", "Adadelta", "Adamax", "NAdam", "RAdam",
         "ASGD", "Rprop"],
    )  # fmt: skip
    lr = float(_pick(rng, [1e-3, 0.01, 0.05]))
    wd = float(_pick(rng, [0.0, 0.0, 0.01, 0.1]))
    maximize = _flag(rng, 0.2)
    if name == "SGD":
        momentum = float(_pick(rng, [0.0, 0.5, 0.9]))
        nesterov = momentum > 0 and _flag(rng, 0.4)
        dampening = 0.0 if nesterov else float(_pick(rng, [0.0, 0.1]))
        return name, dict(
            lr=lr, momentum=momentum, dampening=dampening, weight_decay=wd, nesterov=nesterov,
            maximize=maximize,
        )  # fmt: skip
    if name in ("Adam", "AdamW"):
        kw = dict(
            lr=lr, betas=_betas(rng), eps=float(_pick(rng, [1e-8, 1e-3])), weight_decay=wd,
            amsgrad=_flag(rng, 0.4), maximize=maximize,
        )  # fmt: skip
        if _flag(rng, 0.5):
            kw["foreach"] = _flag(rng)
        return name, kw
    if name == "RMSprop":
        return name, dict(
            lr=lr, alpha=float(_pick(rng, [0.9, 0.99])), eps=float(_pick(rng, [1e-8, 1e-3])),
            weight_decay=wd, momentum=float(_pick(rng, [0.0, 0.9])), centered=_flag(rng),
            maximize=maximize,
        )  # fmt: skip
    if name == "Adagrad":
        return name, dict(
            lr=lr, lr_decay=float(_pick(rng, [0.0, 0.01])), weight_decay=wd,
            initial_accumulator_value=float(_pick(rng, [0.0, 0.1])), maximize=maximize,
        )  # fmt: skip
    if name == "Adadelta":
        return name, dict(
            lr=float(_pick(rng, [0.5, 1.0])), rho=float(_pick(rng, [0.9, 0.95])),
            weight_decay=wd, maximize=maximize,
        )  # fmt: skip
    if name == "Adamax":
        return name, dict(lr=lr, betas=_betas(rng), weight_decay=wd, maximize=maximize)
    if name == "NAdam":
        return name, dict(
            lr=lr, betas=_betas(rng), weight_decay=wd,
            momentum_decay=float(_pick(rng, [4e-3, 0.01])),
            decoupled_weight_decay=_flag(rng), maximize=maximize,
        )  # fmt: skip
    if name == "RAdam":
        return name, dict(
            lr=lr, betas=_betas(rng), weight_decay=wd, decoupled_weight_decay=_flag(rng),
            maximize=maximize,
        )  # fmt: skip
    if name == "ASGD":
        return name, dict(
            lr=lr, lambd=float(_pick(rng, [1e-4, 0.01])), t0=float(_pick(rng, [1.0, 3.0])),
            weight_decay=wd, maximize=maximize,
        )  # fmt: skip
    return name, dict(  # Rprop
        lr=lr, etas=(0.5, float(_pick(rng, [1.2, 1.5]))),
        step_sizes=(1e-6, float(_pick(rng, [0.05, 1.0]))), maximize=maximize,
    )  # fmt: skip


def draw_schedule(rng: np.random.Generator, name: str, total: int, depth: int = 0):
    kinds = [
        "StepLR", "MultiStepLR", "ExponentialLR", "CosineAnnealingLR", "LinearLR",
        "ConstantLR", "PolynomialLR", "LambdaLR", "MultiplicativeLR",
        "CosineAnnealingWarmRestarts",
    ]  # fmt: skip
    if depth == 0:
        kinds += ["CyclicLR", "OneCycleLR", "ReduceLROnPlateau", "SequentialLR",
                  "ChainedScheduler"]  # fmt: skip
    kind = _pick(rng, kinds)
    momentum = name in MOMENTUM_OPTIMIZERS + BETAS_OPTIMIZERS
    if kind == "StepLR":
        return kind, dict(step_size=int(rng.integers(1, 4)), gamma=float(_pick(rng, [0.5, 0.9])))
    if kind == "MultiStepLR":
        return kind, dict(milestones=sorted({int(m) for m in rng.integers(1, 6, 2)}), gamma=0.5)
    if kind == "ExponentialLR":
        return kind, dict(gamma=float(_pick(rng, [0.8, 0.95])))
    if kind == "CosineAnnealingLR":
        return kind, dict(T_max=int(rng.integers(2, 6)), eta_min=float(_pick(rng, [0.0, 1e-4])))
    if kind == "LinearLR":
        return kind, dict(
            start_factor=float(_pick(rng, [0.25, 0.5])),
            end_factor=float(_pick(rng, [1.0, 0.5])),
            total_iters=int(rng.integers(1, 5)),
        )
    if kind == "ConstantLR":
        return kind, dict(factor=float(_pick(rng, [0.1, 0.5])), total_iters=int(rng.integers(1, 5)))
    if kind == "PolynomialLR":
        return kind, dict(total_iters=int(rng.integers(2, 6)), power=float(_pick(rng, [1.0, 2.0])))
    if kind == "LambdaLR":
        return kind, dict(lr_lambda=_pick(rng, ["inverse", "warm"]))
    if kind == "MultiplicativeLR":
        return kind, dict(lr_lambda=_pick(rng, ["decay", "alternate"]))
    if kind == "CosineAnnealingWarmRestarts":
        return kind, dict(
            T_0=int(rng.integers(1, 4)),
            T_mult=int(rng.integers(1, 3)),
            eta_min=float(_pick(rng, [0.0, 1e-4])),
        )
    if kind == "CyclicLR":
        return kind, dict(
            base_lr=0.001,
            max_lr=float(_pick(rng, [0.01, 0.05])),
            step_size_up=int(rng.integers(1, 4)),
            step_size_down=_pick(rng, [None, 2]),
            mode=_pick(rng, ["triangular", "triangular2", "exp_range"]),
            gamma=0.9,
            cycle_momentum=momentum,
            base_momentum=0.8,
            max_momentum=0.9,
        )
    if kind == "OneCycleLR":
        return kind, dict(
            max_lr=float(_pick(rng, [0.01, 0.05])),
            total_steps=total + int(rng.integers(-1, 4)),  # (past its end: refused)
            pct_start=float(_pick(rng, [0.25, 0.5])),
            anneal_strategy=_pick(rng, ["cos", "linear"]),
            cycle_momentum=momentum,
            three_phase=_flag(rng, 0.3),
        )
    if kind == "ReduceLROnPlateau":
        return kind, dict(
            mode=_pick(rng, ["min", "max"]),
            factor=float(_pick(rng, [0.5, 0.1])),
            patience=int(rng.integers(0, 2)),
            threshold=float(_pick(rng, [1e-4, 0.1])),
            threshold_mode=_pick(rng, ["rel", "abs"]),
            cooldown=int(rng.integers(0, 2)),
            min_lr=float(_pick(rng, [0.0, 1e-4])),
        )
    parts = [draw_schedule(rng, name, total, depth + 1) for _ in range(2)]
    if kind == "SequentialLR":
        return kind, dict(schedulers=parts, milestones=[int(rng.integers(1, 4))])
    return kind, dict(schedulers=parts)


def draw_program(seed: int) -> dict:
    rng = np.random.default_rng([48, seed])
    model = draw_model(rng)
    name, kwargs = draw_optimizer(rng)
    steps = int(rng.integers(4, int(os.environ.get("RETROGRAD_FUZZ48_STEPS", "7"))))
    schedules = []
    for _ in range(int(_pick(rng, [0, 1, 1, 2]))):
        spec = draw_schedule(rng, name, steps)
        # (two stacked schedules of which one sets the rate outright -- cyclic, one-cycle --
        # are a contradiction torch resolves by order alone; keep such a one alone)
        if schedules and spec[0] in ("CyclicLR", "OneCycleLR", "ReduceLROnPlateau"):
            continue
        schedules.append(spec)
    events = []
    for step in range(steps):
        events.append(
            {
                "micro": int(_pick(rng, [1, 1, 2, 3])),
                "set_to_none": _flag(rng, 0.6),
                "model_zero_grad": _flag(rng, 0.3),  # model.zero_grad, not the optimizer's
                "clip": _pick(
                    rng,
                    [None, None, ("norm", 2.0), ("norm", math.inf), ("norm", 1.0), ("value", None)],
                ),
                "max_norm": float(_pick(rng, [0.1, 1.0, 10.0])),
                "roundtrip": _flag(rng, 0.3),
                # a round trip before this step's forward too (before the first: a state of
                # no step, Adagrad's made by its constructor)
                "roundtrip_before": _flag(rng, 0.1),
                "join": step > 0 and _flag(rng, 0.3),
                # requires_grad_(False) on the head's bias for this step only: with
                # zero_grad(set_to_none=False) torch still steps it on its zero gradient
                "freeze_head_bias": _flag(rng, 0.15),
                "mode": _pick(rng, [None, None, None, "eval", "train"]),
            }
        )
    return {
        "seed": seed,
        # (Rprop in float64 only: it steps by the sign of each gradient entry, and in float32
        # an entry of rounding noise's size has either sign, in torch as here)
        "dtype": "float64" if name == "Rprop" else _pick(rng, ["float64", "float64", "float32"]),
        "model": model,
        "optimizer": name,
        "kwargs": kwargs,
        # each group's lr and weight_decay overrides
        "groups": [
            {k: v for k, v in (("lr", float(_pick(rng, [0.002, 0.02]))),) if _flag(rng, 0.6)},
            {"weight_decay": 0.0} if name != "Rprop" and _flag(rng, 0.6) else {},
        ],
        "held_back": _flag(rng, 0.5),  # the head joins mid-run with add_param_group
        "named": _flag(rng, 0.3),  # groups of (name, parameter) pairs: torch's param_names
        "torch_file": _flag(rng, 0.3),  # retrograd resumes from torch's saved file
        "resume_by_epoch": _flag(rng, 0.4),  # schedules made with last_epoch, not loaded
        "join_overrides": {"lr": 0.03} if _flag(rng) else {},
        "frozen": [k for k in ("norm", "conv_bias", "input") if _flag(rng, 0.2)],
        "schedules": schedules,
        "events": events,
    }


# -- the model, in either library -----------------------------------------------------------------
def build_model(lib, spec: dict, dtype: str):
    nn = lib.nn
    width = spec["width"]

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            if spec["embed"]:
                self.embed = nn.Embedding(
                    VOCAB, width, padding_idx=spec["padding_idx"], max_norm=spec["max_norm"]
                )
            else:
                # (no bias before a BatchNorm, which takes out its mean: its gradient would be
                # rounding noise, which Adam-like steps scale to the learning rate's size)
                self.proj = nn.Linear(FEATURES, width, bias=spec["norm"] != "batch")
            self.register_buffer("scale", lib.linspace(0.5, 1.5, width))
            self.register_buffer("offset", lib.full((VOCAB,), 0.25), persistent=False)
            if spec["conv"]:
                self.conv = nn.Conv1d(
                    width,
                    width,
                    3,
                    padding=1,
                    groups=spec["conv_groups"],
                    bias=spec["norm"] != "batch",
                )
            if spec["norm"] == "layer":
                self.norm = nn.LayerNorm(width, elementwise_affine=spec["affine"])
            elif spec["norm"] == "batch":
                self.norm = nn.BatchNorm1d(
                    width,
                    momentum=spec["bn_momentum"],
                    affine=spec["affine"],
                    track_running_stats=spec["running_stats"],
                )
            self.drop = nn.Dropout(0.5)
            if spec["gru"]:
                self.gru = nn.GRU(
                    width,
                    width,
                    num_layers=spec["gru_layers"],
                    batch_first=True,
                    bidirectional=spec["bidirectional"],
                )
                self.mix = nn.Linear(width * (2 if spec["bidirectional"] else 1), width)
            self.head = nn.Linear(width, VOCAB, bias=spec["head_bias"])
            if spec["tie"]:
                self.head.weight = self.embed.weight

        def forward(self, x):
            h = self.embed(x) if spec["embed"] else self.proj(x)
            h = h * self.scale
            if spec["conv"]:
                h = self.conv(h.transpose(1, 2)).transpose(1, 2)
            if spec["norm"] == "layer":
                h = self.norm(h)
            elif spec["norm"] == "batch":
                h = self.norm(h.transpose(1, 2)).transpose(1, 2)
            h = self.drop(h).tanh()
            if spec["gru"]:
                h, _ = self.gru(h)
                h = self.mix(h)
            return self.head(h) + self.offset

    model = Net().to(getattr(lib, dtype))
    model.train(not spec["eval"])
    model.drop.eval()
    return model


def frozen_names(model, program) -> list[str]:
    names = []
    for what in program["frozen"]:
        if what == "norm" and program["model"]["norm"] is not None:
            names += ["norm.weight", "norm.bias"]
        elif what == "conv_bias" and program["model"]["conv"]:
            names.append("conv.bias")
        elif what == "input":
            names.append("embed.weight" if program["model"]["embed"] else "proj.weight")
    return [n for n in names if n in dict(model.named_parameters())]


#: the schedules a script resumes by making them with ``last_epoch``
RESUMABLE = (
    "StepLR", "MultiStepLR", "ExponentialLR", "CosineAnnealingLR", "LinearLR", "ConstantLR",
    "PolynomialLR", "LambdaLR", "MultiplicativeLR",
)  # fmt: skip

LAMBDAS = {
    "inverse": lambda epoch: 1.0 / (epoch + 1),
    "warm": lambda epoch: min(1.0, (epoch + 1) / 3),
    "decay": lambda epoch: 0.9,
    "alternate": lambda epoch: 0.5 if epoch % 2 else 1.5,
}


class Side:
    """One library's run of a program; torch's and retrograd's differ only where their APIs do."""

    lib: object

    def __init__(self, program: dict, start: dict, tmp_path):
        self.program, self.dtype, self.tmp_path = program, program["dtype"], tmp_path
        self.model = self.fresh_model(start)
        self.joined = not program["held_back"]
        self.optimizer = self.build_optimizer()
        self.schedules = [self.build_schedule(spec) for spec in program["schedules"]]
        self.losses: list[float] = []

    # building
    def fresh_model(self, start):
        model = build_model(self.lib, self.program["model"], self.dtype)
        model.load_state_dict(self.from_numpy_dict(start))
        for name in frozen_names(model, self.program):
            model.get_parameter(name).requires_grad_(False)
        return model

    def group_names(self) -> list[list[str]]:
        """The parameter names of each group: matrices, the rest, the head (when joined)."""
        named = list(self.model.named_parameters())
        body = [n for n, _ in named if not n.startswith("head.") or not self.program["held_back"]]
        head = [n for n, _ in named if n.startswith("head.") and self.program["held_back"]]
        groups = [[n for n in body if n.endswith("weight") and "norm" not in n]]
        groups.append([n for n in body if n not in groups[0]])
        if self.joined and head:
            groups.append(head)
        return groups

    def build_optimizer(self, scale: float = 1.0):
        """The program's optimizer; ``scale`` multiplies its default ``lr`` (a fresh one made
        to load a state dict, whose saved settings must win)."""
        params = dict(self.model.named_parameters())
        groups = []
        names = self.group_names()
        for k, group in enumerate(names):
            overrides = self.program["groups"][k] if k < 2 else self.program["join_overrides"]
            members = [(n, params[n]) if self.program["named"] else params[n] for n in group]
            groups.append({"params": members, **overrides})
        kind = getattr(self.lib.optim, self.program["optimizer"])
        kwargs = dict(self.program["kwargs"])
        kwargs["lr"] *= scale
        return kind([g for g in groups if g["params"]], **kwargs)

    def build_schedule(self, spec, last_epoch: int = -1):
        kind, kwargs = spec
        kwargs = dict(kwargs)
        if last_epoch != -1:
            kwargs["last_epoch"] = last_epoch
        schedules = self.lib.optim.lr_scheduler
        if kind in ("SequentialLR", "ChainedScheduler"):
            parts = [self.build_schedule(part) for part in kwargs.pop("schedulers")]
            if kind == "ChainedScheduler":
                return schedules.ChainedScheduler(parts, optimizer=self.optimizer)
            return schedules.SequentialLR(self.optimizer, parts, **kwargs)
        if kind in ("LambdaLR", "MultiplicativeLR"):
            kwargs["lr_lambda"] = LAMBDAS[kwargs["lr_lambda"]]
        return getattr(schedules, kind)(self.optimizer, **kwargs)

    # a step
    def run_event(self, index: int, event: dict) -> None:
        if event["roundtrip_before"]:
            self.roundtrip(index + 1000)
        if event["join"] and not self.joined:
            self.joined = True
            head = [
                (n, p) if self.program["named"] else p
                for n, p in self.model.named_parameters()
                if n.startswith("head.")
            ]
            self.optimizer.add_param_group({"params": head, **self.program["join_overrides"]})
        if event["mode"] is not None:
            self.model.train(event["mode"] == "train")
            self.model.drop.eval()
        frozen = event["freeze_head_bias"] and self.model.head.bias is not None
        if frozen:
            self.model.head.bias.requires_grad_(False)
        self.zero_grad(event["set_to_none"], event["model_zero_grad"])
        total = 0.0
        for micro in range(event["micro"]):
            loss = self.loss(index, micro) / event["micro"]
            self.backward(loss)
            total += float(loss.item())
        self.losses.append(total)
        if event["clip"] is not None:
            kind, norm_type = event["clip"]
            if kind == "norm":
                norm = self.clip_norm(event["max_norm"], norm_type)
                self.losses.append(float(norm))
            else:
                self.clip_value(event["max_norm"] / 10)
        self.step()
        if frozen:
            self.model.head.bias.requires_grad_(True)
        for spec, schedule in zip(self.program["schedules"], self.schedules):
            if spec[0] == "ReduceLROnPlateau":
                schedule.step(total)
            else:
                schedule.step()
        if event["roundtrip"]:
            self.roundtrip(index)

    def loss(self, index: int, micro: int):
        rng = np.random.default_rng([self.program["seed"], index, micro])
        if self.program["model"]["embed"]:
            x = self.tensor(rng.integers(0, VOCAB, (BATCH, LENGTH)))
        else:
            x = self.tensor(rng.standard_normal((BATCH, LENGTH, FEATURES)).astype(self.dtype))
        out = self.model(x)
        functional = self.lib.nn.functional
        if self.program["model"]["loss"] == "cross_entropy":
            target = self.tensor(rng.integers(0, VOCAB, BATCH * LENGTH))
            return functional.cross_entropy(out.reshape(-1, VOCAB), target)
        target = self.tensor(rng.uniform(-1, 1, (BATCH, LENGTH, VOCAB)).astype(self.dtype))
        return functional.mse_loss(out, target)

    def roundtrip(self, index: int) -> None:
        """Save the three state dicts, load them into a model, optimizer and schedules made
        afresh (from other initial values: the load must bring every value back)."""
        path = str(self.tmp_path / f"{type(self).__name__}_{index}.pt")
        self.save(
            {
                "model": self.model.state_dict(),
                "optimizer": self.optimizer.state_dict(),
                "schedules": [s.state_dict() for s in self.schedules],
            },
            path,
        )
        if self.program["torch_file"] and isinstance(self, RetrogradSide):
            # resuming from torch's checkpoint: rg.load reads the file torch.save wrote
            path = str(self.tmp_path / f"TorchSide_{index}.pt")
        saved = self.load(path)
        elsewhere = {k: v * 0.5 - 0.25 for k, v in self.start.items()}
        training = self.model.training
        self.model = self.fresh_model(elsewhere)
        self.model.load_state_dict(saved["model"])
        self.model.train(training)
        self.model.drop.eval()
        self.optimizer = self.build_optimizer(scale=3.0)
        if self.program["resume_by_epoch"] and all(
            spec[0] in RESUMABLE for spec in self.program["schedules"]
        ):
            # a script's resume: the optimizer's state first, then each schedule made with
            # last_epoch (its constructor's step is torch's get_lr at the next epoch)
            self.optimizer.load_state_dict(saved["optimizer"])
            self.schedules = [
                self.build_schedule(spec, last_epoch=state["last_epoch"])
                for spec, state in zip(self.program["schedules"], saved["schedules"])
            ]
        else:
            self.schedules = [self.build_schedule(spec) for spec in self.program["schedules"]]
            self.optimizer.load_state_dict(saved["optimizer"])
            for schedule, state in zip(self.schedules, saved["schedules"]):
                schedule.load_state_dict(state)
        if self.program["model"]["tie"]:
            assert self.model.head.weight is self.model.embed.weight

    # what is compared
    def snapshot(self) -> dict:
        state = self.optimizer.state_dict()
        return {
            "model": {k: self.value(v) for k, v in self.model.state_dict().items()},
            "groups": [
                {k: v for k, v in g.items() if k != "params"} for g in self.optimizer.param_groups
            ],
            "params": [g["params"] for g in state["param_groups"]],
            "state": {
                k: {key: self.value(v) for key, v in entry.items()}
                for k, entry in state["state"].items()
            },
            "last_lr": [[float(r) for r in s.get_last_lr()] for s in self.schedules],
            "schedules": [_plain(s.state_dict()) for s in self.schedules],
            "losses": list(self.losses),
        }


def _plain(value):
    """A schedule's state dict with its nested members' states in (SequentialLR's,
    ChainedScheduler's _schedulers), numbers as floats."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    return value


class TorchSide(Side):
    lib = torch

    def __init__(self, program, start, tmp_path):
        self.start = start
        super().__init__(program, start, tmp_path)

    def from_numpy_dict(self, arrays):
        return {k: torch.from_numpy(np.array(v)) for k, v in arrays.items()}

    def tensor(self, array):
        return torch.from_numpy(np.asarray(array))

    def value(self, t):
        return t.detach().numpy().copy() if isinstance(t, torch.Tensor) else t

    def zero_grad(self, set_to_none, of_model):
        if of_model:  # every parameter's, a held-back one's too
            self.model.zero_grad(set_to_none=set_to_none)
            return
        self.optimizer.zero_grad(set_to_none=set_to_none)
        # a held-back parameter keeps no gradient of earlier steps: retrograd's optimizer
        # knows a gradient from this step's backward only
        members = {id(p) for g in self.optimizer.param_groups for p in g["params"]}
        for p in self.model.parameters():
            if id(p) not in members:
                p.grad = None

    def backward(self, loss):
        loss.backward()

    def clip_norm(self, max_norm, norm_type):
        return torch.nn.utils.clip_grad_norm_(self.model.parameters(), max_norm, norm_type)

    def clip_value(self, bound):
        torch.nn.utils.clip_grad_value_(self.model.parameters(), bound)

    def step(self):
        self.optimizer.step()

    def save(self, obj, path):
        torch.save(obj, path)

    def load(self, path):
        return torch.load(path, weights_only=False)


class RetrogradSide(Side):
    lib = rg

    def __init__(self, program, start, tmp_path):
        self.start = start
        self.grads = None
        super().__init__(program, start, tmp_path)

    def from_numpy_dict(self, arrays):
        return {k: np.array(v) for k, v in arrays.items()}

    def tensor(self, array):
        return rg.tensor(np.asarray(array))

    def value(self, t):
        if isinstance(t, rg.Tensor):
            return np.array(t.numpy(), copy=True)
        return np.array(t, copy=True) if isinstance(t, np.ndarray) else t

    def zero_grad(self, set_to_none, of_model):
        (self.model if of_model else self.optimizer).zero_grad(set_to_none=set_to_none)
        self.grads = None

    def backward(self, loss):
        grads = loss.backward()
        self.grads = grads if self.grads is None else self.grads + grads

    def clip_norm(self, max_norm, norm_type):
        return rg.nn.utils.clip_grad_norm_(self.grads, self.model.parameters(), max_norm, norm_type)

    def clip_value(self, bound):
        rg.nn.utils.clip_grad_value_(self.grads, self.model.parameters(), bound)

    def step(self):
        self.optimizer.step(self.grads)

    def save(self, obj, path):
        rg.save(obj, path)

    def load(self, path):
        return rg.load(path)


# -- comparing ------------------------------------------------------------------------------------
def _close(expected, actual, dtype: str, what: str) -> None:
    # float32: a few steps of division by small moments amplify rounding (Adam's
    # m / sqrt(v) of a near-zero gradient); float64 runs are the strict check. The absolute
    # part scales with the array's largest entry: a small entry of a large gradient (kept
    # by Rprop as "prev") carries the rounding of the large ones
    rtol, atol = (1e-9, 1e-11) if dtype == "float64" else (2e-3, 2e-4)
    expected, actual = np.asarray(expected), np.asarray(actual)
    assert expected.shape == actual.shape, f"{what}: shape {actual.shape} != {expected.shape}"
    assert expected.dtype == actual.dtype, f"{what}: dtype {actual.dtype} != {expected.dtype}"
    finite = np.abs(expected[np.isfinite(expected)]) if expected.dtype.kind in "fc" else []
    atol *= max(1.0, float(np.max(finite))) if len(finite) else 1.0
    np.testing.assert_allclose(
        actual.astype(np.float64),
        expected.astype(np.float64),
        rtol=rtol,
        atol=atol,
        equal_nan=True,
        err_msg=what,
    )


def _same_setting(expected, actual, what: str, dtype: str = "float64") -> None:
    if isinstance(expected, dict):
        assert isinstance(actual, dict) and sorted(actual) == sorted(expected), (
            f"{what}: keys {sorted(actual)} != torch's {sorted(expected)}"
        )
        for key in expected:
            _same_setting(expected[key], actual[key], f"{what} {key}", dtype)
    elif isinstance(expected, (tuple, list)):
        assert isinstance(actual, (tuple, list)) and len(actual) == len(expected), what
        for e, a in zip(expected, actual):
            _same_setting(e, a, what, dtype)
    elif isinstance(expected, (float, int)) and not isinstance(expected, bool):
        assert isinstance(actual, (float, int)) and not isinstance(actual, bool), (
            f"{what}: {actual!r} is not a number as {expected!r}"
        )
        _close(float(expected), float(actual), dtype, what)
    else:
        assert expected == actual, f"{what}: {actual!r} != torch's {expected!r}"


def _compare(reference: TorchSide, ours: RetrogradSide, where: str) -> None:
    expected, actual = reference.snapshot(), ours.snapshot()
    dtype = reference.dtype
    assert list(expected["model"]) == list(actual["model"]), f"{where}: state-dict keys"
    for key, value in expected["model"].items():
        _close(value, actual["model"][key], dtype, f"{where}: model {key}")
    assert len(expected["groups"]) == len(actual["groups"]), f"{where}: group count"
    for k, (theirs, mine) in enumerate(zip(expected["groups"], actual["groups"])):
        assert sorted(theirs) == sorted(mine), f"{where}: group {k} keys"
        for key in theirs:
            _same_setting(theirs[key], mine[key], f"{where}: group {k} {key}")
    assert expected["params"] == actual["params"], f"{where}: state-dict params"
    assert list(expected["state"]) == list(actual["state"]), f"{where}: state numbers"
    for number, theirs in expected["state"].items():
        mine = actual["state"][number]
        assert sorted(theirs) == sorted(mine), f"{where}: state {number} keys"
        for key, value in theirs.items():
            if isinstance(mine[key], float) and value.shape == ():
                value = value.astype(np.float64)  # a 0-d tensor of torch's, a number here
            _close(value, mine[key], dtype, f"{where}: state {number} {key}")
    _close(expected["last_lr"], actual["last_lr"], "float64", f"{where}: get_last_lr")
    for k, (theirs, mine) in enumerate(zip(expected["schedules"], actual["schedules"])):
        # (ReduceLROnPlateau's best is a loss of the run's dtype)
        _same_setting(theirs, mine, f"{where}: schedule {k} state_dict", dtype)
    _close(expected["losses"], actual["losses"], dtype, f"{where}: losses and norms")


def _attempt(action):
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return action(), None
    except Exception as error:  # (each side's error is compared below)
        return None, error


def _agree_on_error(where: str, torch_error, our_error) -> bool:
    """Whether both raised (ours from the hierarchy) -- then the program ends -- or neither."""
    if torch_error is None and our_error is not None:
        raise AssertionError(f"{where}: torch succeeded, retrograd raised {our_error!r}")
    if torch_error is not None:
        assert our_error is not None, f"{where}: torch raised {torch_error!r}, retrograd did not"
        assert isinstance(our_error, rg.RetrogradError), (
            f"{where}: torch raised {torch_error!r}; retrograd's {our_error!r} is outside the "
            "hierarchy"
        )
        return True
    return False


def run_program(program: dict, tmp_path) -> None:
    torch.manual_seed(program["seed"])
    initial = build_model(torch, program["model"], program["dtype"])
    start = {k: v.detach().numpy().copy() for k, v in initial.state_dict().items()}
    reference, torch_error = _attempt(lambda: TorchSide(program, start, tmp_path))
    ours, our_error = _attempt(lambda: RetrogradSide(program, start, tmp_path))
    if _agree_on_error(f"seed {program['seed']} setup", torch_error, our_error):
        return
    _compare(reference, ours, f"seed {program['seed']} setup")
    for index, event in enumerate(program["events"]):
        where = f"seed {program['seed']} step {index} {event}"
        _, torch_error = _attempt(lambda i=index, e=event: reference.run_event(i, e))
        _, our_error = _attempt(lambda i=index, e=event: ours.run_event(i, e))
        if _agree_on_error(where, torch_error, our_error):
            return
        _compare(reference, ours, where)


@pytest.mark.parametrize("seed", range(FIRST_SEED, FIRST_SEED + CORPUS))
def test_random_training_loop(seed, tmp_path):
    np.random.seed(seed)
    run_program(draw_program(seed), tmp_path)
