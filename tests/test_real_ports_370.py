# ruff: noqa: E501, W291, W293  (the programs are kept as their authors wrote them)
"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):
DDPM on 2-d toy data as tanelp/tiny-diffusion writes it (``ddpm.py`` whole, its
``positional_embeddings.py`` and ``datasets.py``), trained and sampled as the script's
``__main__`` does, small, against torch's run of the same code from the same weights and draws.

What it exercises: ``SinusoidalEmbedding`` (``scale: torch.float = 1.0`` evaluated as an
annotation, ``torch.log(torch.Tensor([10000.0]))``, a frequency table held as
``nn.Parameter(emb, requires_grad=False)``), ``LearnableEmbedding``'s ``x.unsqueeze(-1).float() /
self.size`` of integer time steps, ``IdentityEmbedding``/``LinearEmbedding``/``ZeroEmbedding``,
``len(self.time_mlp.layer)`` through a module's ``__len__``, the residual ``Block`` of GELUs;
``NoiseScheduler`` (linear and quadratic ``torch.linspace(..., dtype=torch.float32)`` schedules,
``torch.cumprod(self.alphas, axis=0)``, ``F.pad(..., (1, 0), value=1.)``, ``** 0.5`` and
``torch.sqrt(1 / ...)``, tables indexed by a batch of int64 steps and ``.reshape(-1, 1)``,
``get_variance``'s ``if t == 0`` of a 0-d tensor and ``variance.clip(1e-20)``, ``step``'s
``if t > 0`` and ``torch.randn_like``); the training loop's ``DataLoader(dataset,
batch_size=..., shuffle=True, drop_last=True)`` over a ``TensorDataset`` of
``torch.from_numpy(X.astype(np.float32))`` (one seeded permutation stream in both runs),
``batch = batch[0]``, ``torch.randint(0, n, (batch.shape[0],)).long()``, ``loss.backward(loss)``
(the loss seeding its own backward: the gradients scaled by the loss), ``clip_grad_norm_``,
``AdamW``, ``loss.detach().item()``; sampling by ``torch.from_numpy(np.repeat(t, n)).long()`` under
``torch.no_grad()``, ``.to("cpu")``, ``sample.numpy()``; ``torch.save(model.state_dict(), ...)``
and ``np.save`` of the losses and frames.

The script's ``argparse`` reads the test's argument list (``parser.parse_args(ARGV)``), its
plots (matplotlib) are left out, ``tqdm`` is a silent stand-in and ``datasets.py``'s default
size is 8000 points cut to 128 (its ``dino`` set reads a CSV and is left out). The lines changed
for the port: the ``import`` lines and the gradient lines (``grads = loss.backward(loss)``,
``clip_grad_norm_(grads, ...)``, ``optimizer.step(grads)``).
"""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch

import retrograd as rg
import retrograd.utils.data.sampler as rg_sampler
from real_ports import assert_records_agree, initializer, port, run_source

TINY_DIFFUSION_SOURCE = """
import argparse
import os

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader

import numpy as np

# -- positional_embeddings.py ----------------------------------------------------------------------
class SinusoidalEmbedding(nn.Module):
    def __init__(self, size: int, scale: torch.float = 1.0):
        super().__init__()
        self.size = size
        self.scale = scale
        half_size = self.size // 2
        emb = torch.log(torch.Tensor([10000.0])) / (half_size - 1)
        emb = torch.exp(-emb * torch.arange(half_size))
        self.emb = nn.Parameter(emb, requires_grad=False)

    def forward(self, x: torch.Tensor):
        x = x * self.scale
        emb = x.unsqueeze(-1) * self.emb.unsqueeze(0)
        emb = torch.cat((torch.sin(emb), torch.cos(emb)), dim=-1)
        return emb

    def __len__(self):
        return self.size


class LinearEmbedding(nn.Module):
    def __init__(self, size: int, scale: float = 1.0):
        super().__init__()
        self.size = size
        self.scale = scale

    def forward(self, x: torch.Tensor):
        x = x / self.size * self.scale
        return x.unsqueeze(-1)

    def __len__(self):
        return 1


class LearnableEmbedding(nn.Module):
    def __init__(self, size: int):
        super().__init__()
        self.size = size
        self.linear = nn.Linear(1, size)

    def forward(self, x: torch.Tensor):
        return self.linear(x.unsqueeze(-1).float() / self.size)

    def __len__(self):
        return self.size


class IdentityEmbedding(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor):
        return x.unsqueeze(-1)

    def __len__(self):
        return 1


class ZeroEmbedding(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor):
        return x.unsqueeze(-1) * 0

    def __len__(self):
        return 1


class PositionalEmbedding(nn.Module):
    def __init__(self, size: int, type: str, **kwargs):
        super().__init__()

        if type == "sinusoidal":
            self.layer = SinusoidalEmbedding(size, **kwargs)
        elif type == "linear":
            self.layer = LinearEmbedding(size, **kwargs)
        elif type == "learnable":
            self.layer = LearnableEmbedding(size)
        elif type == "zero":
            self.layer = ZeroEmbedding()
        elif type == "identity":
            self.layer = IdentityEmbedding()
        else:
            raise ValueError(f"Unknown positional embedding type: {type}")

    def forward(self, x: torch.Tensor):
        return self.layer(x)

# -- datasets.py (less dino_dataset, which reads a CSV; n=8000 cut to 128) -------------------------
from sklearn.datasets import make_moons
from torch.utils.data import TensorDataset


def moons_dataset(n=128):
    X, _ = make_moons(n_samples=n, random_state=42, noise=0.03)
    X[:, 0] = (X[:, 0] + 0.3) * 2 - 1
    X[:, 1] = (X[:, 1] + 0.3) * 3 - 1
    return TensorDataset(torch.from_numpy(X.astype(np.float32)))


def line_dataset(n=128):
    rng = np.random.default_rng(42)
    x = rng.uniform(-0.5, 0.5, n)
    y = rng.uniform(-1, 1, n)
    X = np.stack((x, y), axis=1)
    X *= 4
    return TensorDataset(torch.from_numpy(X.astype(np.float32)))


def circle_dataset(n=128):
    rng = np.random.default_rng(42)
    x = np.round(rng.uniform(-0.5, 0.5, n)/2, 1)*2
    y = np.round(rng.uniform(-0.5, 0.5, n)/2, 1)*2
    norm = np.sqrt(x**2 + y**2) + 1e-10
    x /= norm
    y /= norm
    theta = 2 * np.pi * rng.uniform(0, 1, n)
    r = rng.uniform(0, 0.03, n)
    x += r * np.cos(theta)
    y += r * np.sin(theta)
    X = np.stack((x, y), axis=1)
    X *= 3
    return TensorDataset(torch.from_numpy(X.astype(np.float32)))


def get_dataset(name, n=128):
    if name == "moons":
        return moons_dataset(n)
    elif name == "line":
        return line_dataset(n)
    elif name == "circle":
        return circle_dataset(n)
    else:
        raise ValueError(f"Unknown dataset: {name}")

datasets = argparse.Namespace(get_dataset=get_dataset)

# -- ddpm.py ---------------------------------------------------------------------------------------
class Block(nn.Module):
    def __init__(self, size: int):
        super().__init__()

        self.ff = nn.Linear(size, size)
        self.act = nn.GELU()

    def forward(self, x: torch.Tensor):
        return x + self.act(self.ff(x))


class MLP(nn.Module):
    def __init__(self, hidden_size: int = 128, hidden_layers: int = 3, emb_size: int = 128,
                 time_emb: str = "sinusoidal", input_emb: str = "sinusoidal"):
        super().__init__()

        self.time_mlp = PositionalEmbedding(emb_size, time_emb)
        self.input_mlp1 = PositionalEmbedding(emb_size, input_emb, scale=25.0)
        self.input_mlp2 = PositionalEmbedding(emb_size, input_emb, scale=25.0)

        concat_size = len(self.time_mlp.layer) + \\
            len(self.input_mlp1.layer) + len(self.input_mlp2.layer)
        layers = [nn.Linear(concat_size, hidden_size), nn.GELU()]
        for _ in range(hidden_layers):
            layers.append(Block(hidden_size))
        layers.append(nn.Linear(hidden_size, 2))
        self.joint_mlp = nn.Sequential(*layers)

    def forward(self, x, t):
        x1_emb = self.input_mlp1(x[:, 0])
        x2_emb = self.input_mlp2(x[:, 1])
        t_emb = self.time_mlp(t)
        x = torch.cat((x1_emb, x2_emb, t_emb), dim=-1)
        x = self.joint_mlp(x)
        return x


class NoiseScheduler():
    def __init__(self,
                 num_timesteps=1000,
                 beta_start=0.0001,
                 beta_end=0.02,
                 beta_schedule="linear"):

        self.num_timesteps = num_timesteps
        if beta_schedule == "linear":
            self.betas = torch.linspace(
                beta_start, beta_end, num_timesteps, dtype=torch.float32)
        elif beta_schedule == "quadratic":
            self.betas = torch.linspace(
                beta_start ** 0.5, beta_end ** 0.5, num_timesteps, dtype=torch.float32) ** 2

        self.alphas = 1.0 - self.betas
        self.alphas_cumprod = torch.cumprod(self.alphas, axis=0)
        self.alphas_cumprod_prev = F.pad(
            self.alphas_cumprod[:-1], (1, 0), value=1.)

        # required for self.add_noise
        self.sqrt_alphas_cumprod = self.alphas_cumprod ** 0.5
        self.sqrt_one_minus_alphas_cumprod = (1 - self.alphas_cumprod) ** 0.5

        # required for reconstruct_x0
        self.sqrt_inv_alphas_cumprod = torch.sqrt(1 / self.alphas_cumprod)
        self.sqrt_inv_alphas_cumprod_minus_one = torch.sqrt(
            1 / self.alphas_cumprod - 1)

        # required for q_posterior
        self.posterior_mean_coef1 = self.betas * torch.sqrt(self.alphas_cumprod_prev) / (1. - self.alphas_cumprod)
        self.posterior_mean_coef2 = (1. - self.alphas_cumprod_prev) * torch.sqrt(self.alphas) / (1. - self.alphas_cumprod)

    def reconstruct_x0(self, x_t, t, noise):
        s1 = self.sqrt_inv_alphas_cumprod[t]
        s2 = self.sqrt_inv_alphas_cumprod_minus_one[t]
        s1 = s1.reshape(-1, 1)
        s2 = s2.reshape(-1, 1)
        return s1 * x_t - s2 * noise

    def q_posterior(self, x_0, x_t, t):
        s1 = self.posterior_mean_coef1[t]
        s2 = self.posterior_mean_coef2[t]
        s1 = s1.reshape(-1, 1)
        s2 = s2.reshape(-1, 1)
        mu = s1 * x_0 + s2 * x_t
        return mu

    def get_variance(self, t):
        if t == 0:
            return 0

        variance = self.betas[t] * (1. - self.alphas_cumprod_prev[t]) / (1. - self.alphas_cumprod[t])
        variance = variance.clip(1e-20)
        return variance

    def step(self, model_output, timestep, sample):
        t = timestep
        pred_original_sample = self.reconstruct_x0(sample, t, model_output)
        pred_prev_sample = self.q_posterior(pred_original_sample, sample, t)

        variance = 0
        if t > 0:
            noise = torch.randn_like(model_output)
            variance = (self.get_variance(t) ** 0.5) * noise

        pred_prev_sample = pred_prev_sample + variance

        return pred_prev_sample

    def add_noise(self, x_start, x_noise, timesteps):
        s1 = self.sqrt_alphas_cumprod[timesteps]
        s2 = self.sqrt_one_minus_alphas_cumprod[timesteps]

        s1 = s1.reshape(-1, 1)
        s2 = s2.reshape(-1, 1)

        return s1 * x_start + s2 * x_noise

    def __len__(self):
        return self.num_timesteps


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--experiment_name", type=str, default="base")
    parser.add_argument("--dataset", type=str, default="dino", choices=["circle", "dino", "line", "moons"])
    parser.add_argument("--train_batch_size", type=int, default=256)
    parser.add_argument("--eval_batch_size", type=int, default=1000)
    parser.add_argument("--num_epochs", type=int, default=150)
    parser.add_argument("--learning_rate", type=float, default=1e-3)
    parser.add_argument("--num_timesteps", type=int, default=50)
    parser.add_argument("--beta_schedule", type=str, default="linear", choices=["linear", "quadratic"])
    parser.add_argument("--embedding_size", type=int, default=128)
    parser.add_argument("--hidden_size", type=int, default=128)
    parser.add_argument("--hidden_layers", type=int, default=3)
    parser.add_argument("--time_embedding", type=str, default="sinusoidal", choices=["sinusoidal", "learnable", "linear", "zero"])
    parser.add_argument("--input_embedding", type=str, default="sinusoidal", choices=["sinusoidal", "learnable", "linear", "identity"])
    parser.add_argument("--save_images_step", type=int, default=1)
    parser.add_argument("--device", type=str, default="cpu")
    config = parser.parse_args(ARGV)
    
    if torch.cuda.is_available() and config.device[:4] =="cuda":
        print(f"INFO: '{config.device}' is available")
        device = config.device
    else:
        print(f"INFO: using cpu")
        device = config.device = "cpu"    

    dataset = datasets.get_dataset(config.dataset)
    dataloader = DataLoader(
        dataset, batch_size=config.train_batch_size, shuffle=True, drop_last=True)

    model = MLP(
        hidden_size=config.hidden_size,
        hidden_layers=config.hidden_layers,
        emb_size=config.embedding_size,
        time_emb=config.time_embedding,
        input_emb=config.input_embedding).to(device)
    initialize(model)

    noise_scheduler = NoiseScheduler(
        num_timesteps=config.num_timesteps,
        beta_schedule=config.beta_schedule)

    optimizer = torch.optim.AdamW(
        model.parameters(),
        lr=config.learning_rate,
    )

    global_step = 0
    frames = []
    losses = []
    print("Training model...")
    
    for epoch in range(config.num_epochs):
        model.train()
        progress_bar = tqdm(total=len(dataloader))
        progress_bar.set_description(f"Epoch {epoch}")
        for step, batch in enumerate(dataloader):
            batch = batch[0]
            noise = torch.randn(batch.shape)
            timesteps = torch.randint(
                0, noise_scheduler.num_timesteps, (batch.shape[0],)
            ).long()

            noisy = noise_scheduler.add_noise(batch, noise, timesteps)
            noise_pred = model(noisy.to(device), timesteps.to(device))
            loss = F.mse_loss(noise_pred, noise.to(device))
            loss.backward(loss)

            nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            optimizer.zero_grad()

            progress_bar.update(1)
            logs = {"loss": loss.detach().item(), "step": global_step}
            losses.append(loss.detach().item())
            progress_bar.set_postfix(**logs)
            global_step += 1
        progress_bar.close()
        

        if epoch % config.save_images_step == 0 or epoch == config.num_epochs - 1:
            # generate data with the model to later visualize the learning process
            model.eval()
            sample = torch.randn(config.eval_batch_size, 2)
            timesteps = list(range(len(noise_scheduler)))[::-1]
            for i, t in enumerate(tqdm(timesteps)):
                t = torch.from_numpy(np.repeat(t, config.eval_batch_size)).long()
                with torch.no_grad():
                    residual = model(sample.to(device), t.to(device)).to("cpu")
                sample = noise_scheduler.step(residual, t[0], sample)
            frames.append(sample.numpy())
    

    print("Saving model...")
    outdir = f"exps/{config.experiment_name}"
    os.makedirs(outdir, exist_ok=True)
    torch.save(model.state_dict(), f"{outdir}/model.pth")

    print("Saving loss as numpy array...")
    np.save(f"{outdir}/loss.npy", np.array(losses))

    print("Saving frames...")
    np.save(f"{outdir}/frames.npy", frames)
"""

TINY_DIFFUSION_STEPS = [
    (
        "import torch\nfrom torch import nn\nfrom torch.nn import functional as F\n",
        "import retrograd as torch\nfrom retrograd import nn\nfrom retrograd.nn import functional as F\n",
    ),
    (
        "            loss.backward(loss)\n\n            nn.utils.clip_grad_norm_(model.parameters(), 1.0)\n            optimizer.step()\n",
        "            grads = loss.backward(loss)\n\n            nn.utils.clip_grad_norm_(grads, model.parameters(), 1.0)\n            optimizer.step(grads)\n",
    ),
]


class SilentTqdm:
    """``tqdm``'s surface that the script uses, printing nothing."""

    def __init__(self, iterable=(), total=None, **_):
        self.iterable = iterable

    def __iter__(self):
        return iter(self.iterable)

    def update(self, n=1):
        pass

    def set_description(self, text):
        pass

    def set_postfix(self, **logs):
        pass

    def close(self):
        pass


@pytest.fixture
def shared_permutations(monkeypatch):
    """``DataLoader(shuffle=True)`` of both libraries permuting by one seeded stream (each
    library's ``randperm`` draws from its own generator otherwise)."""

    def for_lib(lib, seed):
        rng = np.random.default_rng(seed)

        def randperm(n, generator=None, **_):
            return lib.tensor(rng.permutation(n), dtype=lib.int64)

        monkeypatch.setattr(torch if lib is torch else rg_sampler, "randperm", randperm)

    return for_lib


def run_tiny_diffusion(argv, seed, tmp_path, monkeypatch, capsys, shared_permutations):
    from real_ports import SharedDraws

    initialize, records, logs = initializer(), [], []
    torch.manual_seed(seed)
    for lib in (torch, rg):
        text = TINY_DIFFUSION_SOURCE
        if lib is rg:
            text = port(text, TINY_DIFFUSION_STEPS).replace("from torch.", "from retrograd.")
        shared_permutations(lib, seed)
        monkeypatch.chdir(tmp_path / lib.__name__)
        with SharedDraws(lib, seed):
            names = run_source(
                text, lib, __name__="__main__", ARGV=argv, tqdm=SilentTqdm, initialize=initialize
            )
        saved = lib.load("exps/base/model.pth")
        records.append(
            [
                *names["losses"],
                *names["frames"],
                {k: v.detach().numpy() for k, v in names["model"].state_dict().items()},
                {k: v.numpy() for k, v in saved.items()},
                np.load("exps/base/loss.npy"),
                np.load("exps/base/frames.npy"),
            ]
        )
        logs.append(capsys.readouterr().out)
    assert logs[1] == logs[0] and "INFO: using cpu" in logs[0]
    return records


@pytest.fixture
def workdirs(tmp_path):
    for name in ("torch", "retrograd"):
        os.makedirs(tmp_path / name)
    return tmp_path


def test_tiny_diffusion_on_moons_trains_and_samples_as_torch(
    workdirs, monkeypatch, capsys, shared_permutations
):
    argv = "--dataset moons --train_batch_size 32 --eval_batch_size 16 --num_epochs 2 --num_timesteps 12 --embedding_size 16 --hidden_size 32 --hidden_layers 2"
    theirs, ours = run_tiny_diffusion(
        argv.split(), 370, workdirs, monkeypatch, capsys, shared_permutations
    )
    assert len(theirs) == 2 * 4 + 2 + 4
    assert_records_agree(ours, theirs, rtol=2e-4, atol=2e-5)


def test_tiny_diffusion_learnable_time_identity_input_quadratic_schedule_as_torch(
    workdirs, monkeypatch, capsys, shared_permutations
):
    argv = "--dataset circle --train_batch_size 32 --eval_batch_size 16 --num_epochs 1 --num_timesteps 12 --beta_schedule quadratic --embedding_size 16 --hidden_size 32 --hidden_layers 1 --time_embedding learnable --input_embedding identity --save_images_step 2"
    theirs, ours = run_tiny_diffusion(
        argv.split(), 371, workdirs, monkeypatch, capsys, shared_permutations
    )
    assert len(theirs) == 4 + 1 + 4
    assert_records_agree(ours, theirs, rtol=2e-4, atol=2e-5)
