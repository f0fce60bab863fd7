# ruff: noqa: E501  (the programs are kept as their authors wrote them)
"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):
the latent ODE of rtqichen/torchdiffeq (``examples/latent_ode.py``: the spiral data, the
``RecognitionRNN`` run backwards in time, the reparameterised ``z0``, the ``LatentODEfunc``
integrated forward and decoded, the ELBO by ``log_normal_pdf`` and ``normal_kl``; then the
``--visualize`` branch's extrapolation forwards and backwards in time under
``torch.no_grad()``; and the ``--train_dir`` checkpoint saved by ``torch.save`` and loaded
back), small, against torch's run of the same code from the same weights and draws.

What it exercises: ``nn.ELU(inplace=True)`` and ``nn.ReLU(inplace=True)`` modules between
linear layers, ``torch.from_numpy(np.array([2. * np.pi])).float().to(x.device)``,
``torch.zeros(pred_x.size()).to(device) + noise_std``, ``pz0_mean = pz0_logvar =
torch.zeros(z0.size())`` (one tensor under two names), ``odeint(func, z0,
samp_ts).permute(1, 0, 2)`` differentiated through every solver step, a decreasing time grid
(torchdiffeq's ``_ReverseFunc``), ``torch.flip(..., dims=[0])``, a checkpoint dict of state
dicts, an optimizer state, tensors and NumPy arrays through ``torch.save``/``torch.load``, and
``'{:.4f}'.format`` of the running average.

torchdiffeq's ``odeint`` is its fixed-grid solver code as ``tests/test_real_ports_75.py``
ports it (the script's default ``dopri5`` is adaptive; here ``method='rk4'`` with a step
size), bound by ``functools.partial`` where the script imports it. The checkpoint holds NumPy
arrays, which torch's ``torch.load`` refuses since torch 2.6 made ``weights_only=True`` its
default, so the resume reads it with ``weights_only=False`` in both runs. The argument parser is a
namespace; ``nspiral``, ``ntotal``, ``nsample`` and ``niters`` are small; plotting is left
out. The lines changed: the ``import`` lines and the gradient lines (``grads =
loss.backward()``, ``optimizer.step(grads)``).
"""

from __future__ import annotations

import random
import types

import numpy as np
import torch

import retrograd as rg
from real_ports import SharedDraws, assert_records_agree, params_of, port, run_source
from test_real_ports_75 import CNF_SOURCE

TORCHDIFFEQ_SOURCE = (
    "import abc\nimport torch\nimport torch.nn as nn\n\n"
    + CNF_SOURCE[
        CNF_SOURCE.index("# -- torchdiffeq/_impl") : CNF_SOURCE.index("# -- examples/cnf.py")
    ]
)

LATENT_ODE_SOURCE = """
import os
import argparse
import logging
import time
import numpy as np
import numpy.random as npr
import torch
import torch.nn as nn
import torch.optim as optim
import torch.nn.functional as F
from functools import partial

if args.adjoint:
    from torchdiffeq import odeint_adjoint as odeint
else:
    odeint = partial(torchdiffeq_odeint, method='rk4', options=dict(step_size=0.25))


def generate_spiral2d(nspiral=1000,
                      ntotal=500,
                      nsample=100,
                      start=0.,
                      stop=1,  # approximately equal to 6pi
                      noise_std=.1,
                      a=0.,
                      b=1.,
                      savefig=True):
    # add 1 all timestamps to avoid division by 0
    orig_ts = np.linspace(start, stop, num=ntotal)
    samp_ts = orig_ts[:nsample]

    # generate clock-wise and counter clock-wise spirals in observation space
    # with two sets of time-invariant latent dynamics
    zs_cw = stop + 1. - orig_ts
    rs_cw = a + b * 50. / zs_cw
    xs, ys = rs_cw * np.cos(zs_cw) - 5., rs_cw * np.sin(zs_cw)
    orig_traj_cw = np.stack((xs, ys), axis=1)

    zs_cc = orig_ts
    rw_cc = a + b * zs_cc
    xs, ys = rw_cc * np.cos(zs_cc) + 5., rw_cc * np.sin(zs_cc)
    orig_traj_cc = np.stack((xs, ys), axis=1)

    # sample starting timestamps
    orig_trajs = []
    samp_trajs = []
    for _ in range(nspiral):
        # don't sample t0 very near the start or the end
        t0_idx = npr.multinomial(
            1, [1. / (ntotal - 2. * nsample)] * (ntotal - int(2 * nsample)))
        t0_idx = np.argmax(t0_idx) + nsample

        cc = bool(npr.rand() > .5)  # uniformly select rotation
        orig_traj = orig_traj_cc if cc else orig_traj_cw
        orig_trajs.append(orig_traj)

        samp_traj = orig_traj[t0_idx:t0_idx + nsample, :].copy()
        samp_traj += npr.randn(*samp_traj.shape) * noise_std
        samp_trajs.append(samp_traj)

    # batching for sample trajectories is good for RNN; batching for original
    # trajectories only for ease of indexing
    orig_trajs = np.stack(orig_trajs, axis=0)
    samp_trajs = np.stack(samp_trajs, axis=0)

    return orig_trajs, samp_trajs, orig_ts, samp_ts


class LatentODEfunc(nn.Module):

    def __init__(self, latent_dim=4, nhidden=20):
        super(LatentODEfunc, self).__init__()
        self.elu = nn.ELU(inplace=True)
        self.fc1 = nn.Linear(latent_dim, nhidden)
        self.fc2 = nn.Linear(nhidden, nhidden)
        self.fc3 = nn.Linear(nhidden, latent_dim)
        self.nfe = 0

    def forward(self, t, x):
        self.nfe += 1
        out = self.fc1(x)
        out = self.elu(out)
        out = self.fc2(out)
        out = self.elu(out)
        out = self.fc3(out)
        return out


class RecognitionRNN(nn.Module):

    def __init__(self, latent_dim=4, obs_dim=2, nhidden=25, nbatch=1):
        super(RecognitionRNN, self).__init__()
        self.nhidden = nhidden
        self.nbatch = nbatch
        self.i2h = nn.Linear(obs_dim + nhidden, nhidden)
        self.h2o = nn.Linear(nhidden, latent_dim * 2)

    def forward(self, x, h):
        combined = torch.cat((x, h), dim=1)
        h = torch.tanh(self.i2h(combined))
        out = self.h2o(h)
        return out, h

    def initHidden(self):
        return torch.zeros(self.nbatch, self.nhidden)


class Decoder(nn.Module):

    def __init__(self, latent_dim=4, obs_dim=2, nhidden=20):
        super(Decoder, self).__init__()
        self.relu = nn.ReLU(inplace=True)
        self.fc1 = nn.Linear(latent_dim, nhidden)
        self.fc2 = nn.Linear(nhidden, obs_dim)

    def forward(self, z):
        out = self.fc1(z)
        out = self.relu(out)
        out = self.fc2(out)
        return out


class RunningAverageMeter(object):
    \"\"\"Computes and stores the average and current value\"\"\"

    def __init__(self, momentum=0.99):
        self.momentum = momentum
        self.reset()

    def reset(self):
        self.val = None
        self.avg = 0

    def update(self, val):
        if self.val is None:
            self.avg = val
        else:
            self.avg = self.avg * self.momentum + val * (1 - self.momentum)
        self.val = val


def log_normal_pdf(x, mean, logvar):
    const = torch.from_numpy(np.array([2. * np.pi])).float().to(x.device)
    const = torch.log(const)
    return -.5 * (const + logvar + (x - mean) ** 2. / torch.exp(logvar))


def normal_kl(mu1, lv1, mu2, lv2):
    v1 = torch.exp(lv1)
    v2 = torch.exp(lv2)
    lstd1 = lv1 / 2.
    lstd2 = lv2 / 2.

    kl = lstd2 - lstd1 + ((v1 + (mu1 - mu2) ** 2.) / (2. * v2)) - .5
    return kl


if __name__ == '__main__':
    latent_dim = 4
    nhidden = 20
    rnn_nhidden = 25
    obs_dim = 2
    nspiral = 6
    start = 0.
    stop = 6 * np.pi
    noise_std = .3
    a = 0.
    b = .3
    ntotal = 40
    nsample = 8
    device = torch.device('cuda:' + str(args.gpu)
                          if torch.cuda.is_available() else 'cpu')

    # generate toy spiral data
    orig_trajs, samp_trajs, orig_ts, samp_ts = generate_spiral2d(
        nspiral=nspiral,
        start=start,
        stop=stop,
        noise_std=noise_std,
        a=a, b=b
    )
    orig_trajs = torch.from_numpy(orig_trajs).float().to(device)
    samp_trajs = torch.from_numpy(samp_trajs).float().to(device)
    samp_ts = torch.from_numpy(samp_ts).float().to(device)

    # model
    func = LatentODEfunc(latent_dim, nhidden).to(device)
    rec = RecognitionRNN(latent_dim, obs_dim, rnn_nhidden, nspiral).to(device)
    dec = Decoder(latent_dim, obs_dim, nhidden).to(device)
    initialize(func), initialize(rec), initialize(dec)
    params = (list(func.parameters()) + list(dec.parameters()) + list(rec.parameters()))
    optimizer = optim.Adam(params, lr=args.lr)
    loss_meter = RunningAverageMeter()

    if args.train_dir is not None:
        if not os.path.exists(args.train_dir):
            os.makedirs(args.train_dir)
        ckpt_path = os.path.join(args.train_dir, 'ckpt.pth')
        if os.path.exists(ckpt_path):
            checkpoint = torch.load(ckpt_path, weights_only=False)  # (torch >= 2.6 refuses its NumPy arrays otherwise)
            func.load_state_dict(checkpoint['func_state_dict'])
            rec.load_state_dict(checkpoint['rec_state_dict'])
            dec.load_state_dict(checkpoint['dec_state_dict'])
            optimizer.load_state_dict(checkpoint['optimizer_state_dict'])
            orig_trajs = checkpoint['orig_trajs']
            samp_trajs = checkpoint['samp_trajs']
            orig_ts = checkpoint['orig_ts']
            samp_ts = checkpoint['samp_ts']
            print('Loaded ckpt from {}'.format(ckpt_path))

    try:
        for itr in range(1, args.niters + 1):
            optimizer.zero_grad()
            # backward in time to infer q(z_0)
            h = rec.initHidden().to(device)
            for t in reversed(range(samp_trajs.size(1))):
                obs = samp_trajs[:, t, :]
                out, h = rec.forward(obs, h)
            qz0_mean, qz0_logvar = out[:, :latent_dim], out[:, latent_dim:]
            epsilon = torch.randn(qz0_mean.size()).to(device)
            z0 = epsilon * torch.exp(.5 * qz0_logvar) + qz0_mean

            # forward in time and solve ode for reconstructions
            pred_z = odeint(func, z0, samp_ts).permute(1, 0, 2)
            pred_x = dec(pred_z)

            # compute loss
            noise_std_ = torch.zeros(pred_x.size()).to(device) + noise_std
            noise_logvar = 2. * torch.log(noise_std_).to(device)
            logpx = log_normal_pdf(
                samp_trajs, pred_x, noise_logvar).sum(-1).sum(-1)
            pz0_mean = pz0_logvar = torch.zeros(z0.size()).to(device)
            analytic_kl = normal_kl(qz0_mean, qz0_logvar,
                                    pz0_mean, pz0_logvar).sum(-1)
            loss = torch.mean(-logpx + analytic_kl, dim=0)
            loss.backward()
            optimizer.step()
            loss_meter.update(loss.item())
            record.append(params_of(func, rec, dec))

            print('Iter: {}, running avg elbo: {:.4f}'.format(itr, -loss_meter.avg))
        raise KeyboardInterrupt  # (the test stops the run here, as a user would)

    except KeyboardInterrupt:
        if args.train_dir is not None:
            ckpt_path = os.path.join(args.train_dir, 'ckpt.pth')
            torch.save({
                'func_state_dict': func.state_dict(),
                'rec_state_dict': rec.state_dict(),
                'dec_state_dict': dec.state_dict(),
                'optimizer_state_dict': optimizer.state_dict(),
                'orig_trajs': orig_trajs,
                'samp_trajs': samp_trajs,
                'orig_ts': orig_ts,
                'samp_ts': samp_ts,
            }, ckpt_path)
            print('Stored ckpt at {}'.format(ckpt_path))
    print('Training complete after {} iters.'.format(itr))

    if args.visualize:
        with torch.no_grad():
            # sample from trajectorys' approx. posterior
            h = rec.initHidden().to(device)
            for t in reversed(range(samp_trajs.size(1))):
                obs = samp_trajs[:, t, :]
                out, h = rec.forward(obs, h)
            qz0_mean, qz0_logvar = out[:, :latent_dim], out[:, latent_dim:]
            epsilon = torch.randn(qz0_mean.size()).to(device)
            z0 = epsilon * torch.exp(.5 * qz0_logvar) + qz0_mean
            orig_ts = torch.from_numpy(orig_ts).float().to(device)

            # take first trajectory for visualization
            z0 = z0[0]

            ts_pos = np.linspace(0., 2. * np.pi, num=9)
            ts_neg = np.linspace(-np.pi, 0., num=9)[::-1].copy()
            ts_pos = torch.from_numpy(ts_pos).float().to(device)
            ts_neg = torch.from_numpy(ts_neg).float().to(device)

            zs_pos = odeint(func, z0, ts_pos)
            zs_neg = odeint(func, z0, ts_neg)

            xs_pos = dec(zs_pos)
            xs_neg = torch.flip(dec(zs_neg), dims=[0])

        xs_pos = xs_pos.cpu().numpy()
        xs_neg = xs_neg.cpu().numpy()
        orig_traj = orig_trajs[0].cpu().numpy()
        samp_traj = samp_trajs[0].cpu().numpy()
        record.append(xs_pos)
        record.append(xs_neg)
        record.append(samp_traj)
"""

LATENT_ODE_STEPS = [
    (
        "import torch\nimport torch.nn as nn\nimport torch.optim as optim\nimport torch.nn.functional as F\n",
        "import retrograd as torch\nimport retrograd.nn as nn\nimport retrograd.optim as optim\nimport retrograd.nn.functional as F\n",
    ),
    (
        "            loss.backward()\n            optimizer.step()\n",
        "            grads = loss.backward()\n            optimizer.step(grads)\n",
    ),
]

_DIFFEQ_STEPS = [
    (
        "import torch\nimport torch.nn as nn\n",
        "import retrograd as torch\nimport retrograd.nn as nn\n",
    )
]


def _odeint(lib):
    """torchdiffeq's ``odeint`` (its fixed-grid solvers) made over ``lib``."""
    text = TORCHDIFFEQ_SOURCE if lib is torch else port(TORCHDIFFEQ_SOURCE, _DIFFEQ_STEPS)
    return run_source(text, lib)["odeint"]


def test_torchdiffeq_latent_ode_trains_checkpoints_resumes_and_extrapolates_as_torch(
    capsys, tmp_path
):
    """Each library runs the script twice in its own ``--train_dir``: three iterations that
    store a checkpoint, then one more that loads it (the states, the optimizer's state and the
    data) and stores it again."""
    records, logs = [[], []], [[], []]
    for niters in (3, 1):
        for run, lib in enumerate((torch, rg)):
            args = types.SimpleNamespace(
                adjoint=False, visualize=True, niters=niters, lr=0.01, gpu=0,
                train_dir=str(tmp_path / f"run{run}"),
            )  # fmt: skip
            record, log = _single_run(lib, args, capsys)
            records[run] += record
            logs[run].append(log.replace(f"run{run}", "run"))
    theirs, ours = records
    # the printed ELBOs (sums over every point, thousands) differ in their last digits
    assert [log.splitlines()[-2:] for log in logs[1]] == [log.splitlines()[-2:] for log in logs[0]]
    assert logs[1][1].startswith("Loaded ckpt from") and logs[0][1].startswith("Loaded ckpt from")
    assert_records_agree(ours, theirs, rtol=1e-4, atol=1e-6)
    # each library reads the other's checkpoint: the same states and arrays
    torch_file = rg.load(tmp_path / "run0" / "ckpt.pth", weights_only=False)
    retrograd_file = torch.load(tmp_path / "run1" / "ckpt.pth", weights_only=False)
    assert sorted(torch_file) == sorted(retrograd_file)
    for name in ("func_state_dict", "rec_state_dict", "dec_state_dict"):
        for key, value in retrograd_file[name].items():
            np.testing.assert_allclose(
                torch_file[name][key].numpy(), value.numpy(), rtol=1e-4, atol=1e-6
            )
    np.testing.assert_array_equal(torch_file["orig_ts"], retrograd_file["orig_ts"])


def _single_run(lib, args, capsys):
    """One library's run of the script with its own ``args``: the records and the log."""
    record = []
    np.random.seed(345)
    random.seed(345)
    text = LATENT_ODE_SOURCE if lib is torch else port(LATENT_ODE_SOURCE, LATENT_ODE_STEPS)
    with SharedDraws(lib, 345):
        run_source(
            text, lib, record=record, initialize=_INITIALIZE, params_of=params_of, args=args,
            torchdiffeq_odeint=_odeint(lib), __name__="__main__",
        )  # fmt: skip
    return record, capsys.readouterr().out


def _initialize(module):
    """torch's initial weights for the port's modules, in the order made, in each of the
    two phases (both runs of a phase make func, rec and dec afresh)."""
    states = _INITIAL_STATES
    if isinstance(module, torch.nn.Module):
        states.append({k: v.detach().numpy().copy() for k, v in module.state_dict().items()})
    else:
        module.load_state_dict(states.pop(0))


_INITIAL_STATES: list = []
_INITIALIZE = _initialize
