# ruff: noqa: E501  (the programs are kept as their authors wrote them: long lines)
"""Real PyTorch programs ported to retrograd (the harness: ``tests/real_ports.py``): the
checkpoint-and-resume machinery of Hugging Face's ``Trainer`` (transformers 4.3x
``trainer.py``), written out as a manual loop over a small model, run against torch's run of
the same code from the same weights and draws.

- ``get_parameter_names`` and the ``decay_parameters`` groups of ``create_optimizer`` (no
  weight decay for biases and LayerNorm weights), ``AdamW``;
- ``optimization.py``'s ``get_linear_schedule_with_warmup`` (a ``LambdaLR`` over a
  ``functools.partial``);
- the loop's AMP pieces with a CPU ``torch.amp.GradScaler``: ``scaler.scale(loss)``,
  ``unscale_`` then ``clip_grad_norm_``, ``scaler.step``, ``scaler.update``, and a random
  augmentation drawn from NumPy's and Python's global streams;
- ``_save_checkpoint``: ``torch.save`` of the model's, optimizer's, scheduler's and scaler's
  state dicts, and ``_save_rng_state``'s ``{"python": random.getstate(), "numpy":
  np.random.get_state(), "cpu": torch.random.get_rng_state()}`` (NumPy's state holds a uint32
  array, which ``rg.save`` refused before);
- ``_load_from_checkpoint``/``_load_optimizer_and_scheduler``/``_load_rng_state`` on fresh
  objects, and the resumed loop's skipping of the steps already trained: the resumed run gives
  the uninterrupted run's trajectory.

The lines changed: the ``import`` lines and the gradient lines.
"""

from __future__ import annotations

import functools
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


TRAINER_SOURCE = '''
import torch
from torch import nn
from torch.optim.lr_scheduler import LambdaLR

ALL_LAYERNORM_LAYERS = [nn.LayerNorm]


def get_parameter_names(model, forbidden_layer_types):
    """
    Returns the names of the model parameters that are not inside a forbidden layer.
    """
    result = []
    for name, child in model.named_children():
        result += [
            f"{name}.{n}"
            for n in get_parameter_names(child, forbidden_layer_types)
            if not isinstance(child, tuple(forbidden_layer_types))
        ]
    # Add model specific parameters (defined with nn.Parameter) since they are not in any child.
    result += list(model._parameters.keys())
    return result


def _get_linear_schedule_with_warmup_lr_lambda(current_step: int, *, num_warmup_steps: int, num_training_steps: int):
    if current_step < num_warmup_steps:
        return float(current_step) / float(max(1, num_warmup_steps))
    return max(0.0, float(num_training_steps - current_step) / float(max(1, num_training_steps - num_warmup_steps)))


def get_linear_schedule_with_warmup(optimizer, num_warmup_steps, num_training_steps, last_epoch=-1):
    lr_lambda = functools.partial(
        _get_linear_schedule_with_warmup_lr_lambda,
        num_warmup_steps=num_warmup_steps,
        num_training_steps=num_training_steps,
    )
    return LambdaLR(optimizer, lr_lambda, last_epoch)


class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Linear(6, 12)
        self.LayerNorm = nn.LayerNorm(12)
        self.dense = nn.Linear(12, 12)
        self.classifier = nn.Linear(12, 3)

    def forward(self, x, labels=None):
        h = self.LayerNorm(torch.tanh(self.embed(x)))
        logits = self.classifier(torch.relu(self.dense(h)) + h)
        loss = nn.functional.cross_entropy(logits, labels)
        return {"loss": loss, "logits": logits}


def create_optimizer(model, args):
    decay_parameters = get_parameter_names(model, ALL_LAYERNORM_LAYERS)
    decay_parameters = [name for name in decay_parameters if "bias" not in name]
    optimizer_grouped_parameters = [
        {
            "params": [p for n, p in model.named_parameters() if (n in decay_parameters and p.requires_grad)],
            "weight_decay": args["weight_decay"],
        },
        {
            "params": [p for n, p in model.named_parameters() if (n not in decay_parameters and p.requires_grad)],
            "weight_decay": 0.0,
        },
    ]
    return torch.optim.AdamW(optimizer_grouped_parameters, lr=args["learning_rate"], betas=(0.9, 0.999), eps=1e-8)


def augment(batch):
    # the data collator's noise: NumPy's and Python's global streams, which the checkpoint keeps
    noise = np.random.normal(0.0, 0.1, size=tuple(batch["x"].shape)).astype(np.float32)
    scale = random.uniform(0.9, 1.1)
    return {"x": batch["x"] * scale + torch.tensor(noise), "labels": batch["labels"]}


def _save_checkpoint(output_dir, model, optimizer, lr_scheduler, scaler, global_step):
    os.makedirs(output_dir, exist_ok=True)
    torch.save(model.state_dict(), os.path.join(output_dir, "pytorch_model.bin"))
    torch.save(optimizer.state_dict(), os.path.join(output_dir, "optimizer.pt"))
    torch.save(lr_scheduler.state_dict(), os.path.join(output_dir, "scheduler.pt"))
    torch.save(scaler.state_dict(), os.path.join(output_dir, "scaler.pt"))
    rng_states = {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "cpu": torch.random.get_rng_state(),
    }
    torch.save(rng_states, os.path.join(output_dir, "rng_state.pth"))
    torch.save({"global_step": global_step}, os.path.join(output_dir, "trainer_state.pt"))


def _load_rng_state(checkpoint):
    rng_file = os.path.join(checkpoint, "rng_state.pth")
    checkpoint_rng_state = torch.load(rng_file, weights_only=False)
    random.setstate(checkpoint_rng_state["python"])
    np.random.set_state(checkpoint_rng_state["numpy"])
    torch.random.set_rng_state(checkpoint_rng_state["cpu"])


def train(args, dataset, resume_from_checkpoint=None, stop_at=None, trace=None):
    model = Classifier()
    initialize(model)
    optimizer = create_optimizer(model, args)
    num_training_steps = args["num_train_epochs"] * len(dataset)
    lr_scheduler = get_linear_schedule_with_warmup(optimizer, args["warmup_steps"], num_training_steps)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 8, growth_interval=3)
    global_step = 0
    if resume_from_checkpoint is not None:
        state_dict = torch.load(os.path.join(resume_from_checkpoint, "pytorch_model.bin"), map_location="cpu", weights_only=True)
        load_result = model.load_state_dict(state_dict, False)
        assert not load_result.missing_keys and not load_result.unexpected_keys
        optimizer.load_state_dict(torch.load(os.path.join(resume_from_checkpoint, "optimizer.pt"), map_location="cpu", weights_only=True))
        lr_scheduler.load_state_dict(torch.load(os.path.join(resume_from_checkpoint, "scheduler.pt"), weights_only=True))
        scaler.load_state_dict(torch.load(os.path.join(resume_from_checkpoint, "scaler.pt")))
        global_step = torch.load(os.path.join(resume_from_checkpoint, "trainer_state.pt"))["global_step"]
        _load_rng_state(resume_from_checkpoint)
    epochs_trained = global_step // len(dataset)
    steps_trained_in_current_epoch = global_step % len(dataset)
    model.train()
    for epoch in range(epochs_trained, args["num_train_epochs"]):
        for step, inputs in enumerate(dataset):
            if steps_trained_in_current_epoch > 0:
                steps_trained_in_current_epoch -= 1
                continue
            inputs = augment(inputs)
            outputs = model(**inputs)
            loss = outputs["loss"]
            scaler.scale(loss).backward()
            scaler.unscale_(optimizer)
            grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), args["max_grad_norm"])
            scaler.step(optimizer)
            scaler.update()
            lr_scheduler.step()
            optimizer.zero_grad()
            global_step += 1
            trace.append((loss.item(), float(grad_norm), lr_scheduler.get_last_lr()[0], scaler.get_scale(), params_of(model)))
            if global_step == stop_at:
                _save_checkpoint(os.path.join(output_dir, f"checkpoint-{global_step}"), model, optimizer, lr_scheduler, scaler, global_step)
                return model
    return model


args = {"learning_rate": 5e-3, "weight_decay": 0.01, "num_train_epochs": 3, "warmup_steps": 2, "max_grad_norm": 0.5}
dataset = [{"x": torch.randn(5, 6), "labels": torch.randint(0, 3, (5,))} for _ in range(3)]
state = (random.getstate(), np.random.get_state())
uninterrupted = []
train(args, dataset, trace=uninterrupted)
random.setstate(state[0]); np.random.set_state(state[1])
first_part, resumed = [], []
train(args, dataset, stop_at=4, trace=first_part)
random.seed(1234); np.random.seed(1234)  # whatever ran in between: the checkpoint restores
train(args, dataset, resume_from_checkpoint=os.path.join(output_dir, "checkpoint-4"), trace=resumed)
for trace in (uninterrupted, first_part + resumed):
    for loss, grad_norm, lr, scale, params in trace:
        record.extend([loss, grad_norm, lr, scale, params])
'''

TRAINER_STEPS = [
    (
        "import torch\nfrom torch import nn\n",
        "import retrograd as torch\nfrom retrograd import nn\n",
    ),
    (
        "            scaler.scale(loss).backward()\n            scaler.unscale_(optimizer)\n",
        "            grads = scaler.scale(loss).backward()\n            scaler.unscale_(optimizer, grads)\n",
    ),
    ("clip_grad_norm_(model.parameters(),", "clip_grad_norm_(grads, model.parameters(),"),
    ("scaler.step(optimizer)", "scaler.step(optimizer, grads)"),
]


def test_trainer_checkpoint_resume_gives_the_uninterrupted_trajectory_as_torch(capsys, tmp_path):
    made = []

    def output_dir(lib):
        made.append(tmp_path / lib.__name__)
        return str(made[-1])

    # each run of the program builds three models (uninterrupted, interrupted, resumed), all
    # from the same weights: torch's first model's
    states = []

    def initialize(module):
        if isinstance(module, torch.nn.Module):
            if not states:
                states.append(
                    {k: v.detach().numpy().copy() for k, v in module.state_dict().items()}
                )
            module.load_state_dict({k: torch.tensor(v) for k, v in states[0].items()})
        else:
            module.load_state_dict(states[0])

    (theirs, ours), _ = runs_with_draws(
        TRAINER_SOURCE, TRAINER_STEPS, capsys, 21201, initialize=initialize, params_of=params_of,
        functools=functools, os=os, random=random, make_output_dir=output_dir,
    )  # fmt: skip
    assert_records_agree(ours, theirs, rtol=1e-4, atol=1e-6)
    half = len(ours) // 2
    # the resumed run is the uninterrupted one, step for step (the same ops in the same order)
    assert_records_agree(ours[half:], ours[:half], rtol=0, atol=0)
    checkpoint = made[1] / "checkpoint-4"
    assert sorted(os.listdir(checkpoint)) == [
        "optimizer.pt", "pytorch_model.bin", "rng_state.pth", "scaler.pt", "scheduler.pt", "trainer_state.pt",
    ]  # fmt: skip
    # torch reads the RNG states retrograd saved (NumPy's uint32 key as NumPy pickles it)
    states = torch.load(checkpoint / "rng_state.pth", weights_only=False)
    assert states["numpy"][1].dtype == np.uint32 and states["numpy"][0] == "MT19937"
