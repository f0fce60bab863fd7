"""Real ports, round 76 (the harness: ``tests/real_ports.py``): point-cloud reconstruction, a
program written here in the style of the PyTorch FoldingNet and point-cloud autoencoder
reimplementations (a PointNet encoder with an input T-Net and a feature T-Net whose
orthogonality is regularised, a max-pooled codeword, a decoder that folds a 2-D grid twice
into the surface, or a fully-connected decoder), trained by the chamfer distance on synthetic
shapes (spheres, cube surfaces, cylinders) and measured by the chamfer distance and the F-score
at a distance threshold; two configurations (``folding`` and ``fc``), each run under torch
and, ported, under retrograd from the same weights and draws, every record compared.

It reaches:

- the data: points drawn by ``torch.randn`` normalised by ``norm(dim=-1, keepdim=True)`` (a
  sphere), a cube surface by ``torch.randint`` faces written through ``scatter_`` of
  ``+-1`` into ``torch.rand`` coordinates, a cylinder from ``torch.cos``/``torch.sin`` of
  angles, each centred by its ``mean(dim=0)`` and scaled by ``amax`` of norms; a random
  rotation about the up axis built by ``torch.stack`` of ``cos``/``sin`` rows and applied by
  ``torch.bmm``, random anisotropic scaling ``* (0.8 + 0.4 * torch.rand(b, 1, 3))``;
- the encoder: a ``TNet`` (``nn.Conv1d`` of kernel 1, ``nn.BatchNorm1d`` over channels and
  over features, ``torch.max(x, 2, keepdim=True)[0]``, ``view(-1, 1024)``-style flattening,
  ``torch.eye(k).flatten().repeat(b, 1)`` added to the regressed matrix), ``transpose(2, 1)``
  and ``torch.bmm`` of points by the transform, ``F.relu`` of batch-normalised convolutions,
  the feature transform's regulariser ``torch.norm(I - A @ A.transpose(2, 1), dim=(1, 2))``;
- the decoders: a grid from ``torch.meshgrid(..., indexing="ij")`` of ``torch.linspace``,
  ``torch.stack(...).reshape(-1, 2)``, the codeword ``unsqueeze(1).expand(-1, m, -1)``
  concatenated with the grid by ``torch.cat(dim=2)``, two folding MLPs of ``nn.Conv1d``
  (``permute`` in and out), the second fold refining the first by ``fold + ...``; or an
  ``nn.Sequential`` of ``nn.Linear`` and ``nn.LeakyReLU(inplace=True)``, ``view(b, m, 3)``;
- the chamfer distance: pairwise squared distances by ``torch.cdist(x.double(), y.double()) **
  2`` (in float64, the loss back in float32 by ``.float()``) and by
  ``(x.unsqueeze(2) - y.unsqueeze(1)).pow(2).sum(-1)`` (compared), ``min(dim=2)`` values and
  indices both ways, ``torch.gather`` of nearest neighbours by an expanded index, the
  per-target coverage by ``scatter_add_`` of ones, the F-score by ``(d < tau).float().mean``;
- training: ``SGD(momentum=0.9, weight_decay=...)`` with ``CosineAnnealingLR`` (as DGCNN's
  script trains), ``clip_grad_norm_``; the checkpoint through
  ``torch.save`` of ``{"model", "optimizer"}``, ``torch.load``, ``load_state_dict`` of both,
  one more step of the restored pair compared with the original's; evaluation under
  ``torch.no_grad()`` in ``eval()`` (the batch norms' running statistics).

The lines changed for the port: the ``import`` lines and the gradient lines (``grads =
loss.backward()``, ``clip_grad_norm_(grads, ...)``, ``optimizer.step(grads)``).
"""

from __future__ import annotations

import pytest

from real_ports import (
    assert_records_agree,
    initializer,
    params_of,
    runs_with_draws,
    seeded_draws,  # noqa: F401 (an autouse fixture: every draw seeded)
)

POINT_AE_SOURCE = """import io

import torch
import torch.nn as nn
import torch.nn.functional as F

N_POINTS = 40


def sphere(n):
    p = torch.randn(n, 3)
    return p / p.norm(dim=-1, keepdim=True)


def cube(n):
    p = torch.rand(n, 3) * 2 - 1
    face = torch.randint(0, 3, (n, 1))
    sign = torch.where(torch.rand(n, 1) > 0.5, 1.0, -1.0)
    return p.scatter_(1, face, sign)


def cylinder(n):
    theta = torch.rand(n) * 2 * math.pi
    z = torch.rand(n) * 2 - 1
    return torch.stack([torch.cos(theta), torch.sin(theta), z], dim=1)


def normalize(pc):
    pc = pc - pc.mean(dim=0)
    return pc / pc.norm(dim=1).amax()


def make_batch(b):
    shapes = [sphere, cube, cylinder]
    clouds = torch.stack([normalize(shapes[i % 3](N_POINTS)) for i in range(b)])
    theta = torch.rand(b) * 2 * math.pi
    c, s = torch.cos(theta), torch.sin(theta)
    zero, one = torch.zeros(b), torch.ones(b)
    rotation = torch.stack([torch.stack([c, -s, zero], 1), torch.stack([s, c, zero], 1),
                            torch.stack([zero, zero, one], 1)], dim=1)
    clouds = torch.bmm(clouds, rotation.transpose(1, 2))
    return clouds * (0.8 + 0.4 * torch.rand(b, 1, 3))


class TNet(nn.Module):
    def __init__(self, k=3, width=32):
        super(TNet, self).__init__()
        self.k, self.width = k, width
        self.conv1 = torch.nn.Conv1d(k, 16, 1, bias=False)
        self.conv2 = torch.nn.Conv1d(16, width, 1, bias=False)
        self.fc1 = nn.Linear(width, 16)
        self.fc2 = nn.Linear(16, k * k)
        self.bn1 = nn.BatchNorm1d(16)
        self.bn2 = nn.BatchNorm1d(width)

    def forward(self, x):
        batchsize = x.size()[0]
        x = F.relu(self.bn1(self.conv1(x)))
        x = F.relu(self.bn2(self.conv2(x)))
        x = torch.max(x, 2, keepdim=True)[0]
        x = x.view(-1, self.width)
        x = F.relu(self.fc1(x))
        x = self.fc2(x)
        iden = torch.eye(self.k).flatten().view(1, self.k * self.k).repeat(batchsize, 1)
        x = x + iden
        return x.view(-1, self.k, self.k)


class PointNetEncoder(nn.Module):
    def __init__(self, code_dim=24):
        super(PointNetEncoder, self).__init__()
        self.stn = TNet(k=3)
        self.conv1 = torch.nn.Conv1d(3, 16, 1, bias=False)
        self.fstn = TNet(k=16)
        self.conv2 = torch.nn.Conv1d(16, 32, 1, bias=False)
        self.conv3 = torch.nn.Conv1d(32, code_dim, 1, bias=False)
        self.bn1, self.bn2 = nn.BatchNorm1d(16), nn.BatchNorm1d(32)
        self.bn3 = nn.BatchNorm1d(code_dim)

    def forward(self, x):
        x = x.transpose(2, 1)
        trans = self.stn(x)
        x = torch.bmm(x.transpose(2, 1), trans).transpose(2, 1)
        x = F.relu(self.bn1(self.conv1(x)))
        trans_feat = self.fstn(x)
        x = torch.bmm(x.transpose(2, 1), trans_feat).transpose(2, 1)
        x = F.relu(self.bn2(self.conv2(x)))
        x = self.bn3(self.conv3(x))
        x = torch.max(x, 2, keepdim=False)[0]
        return x, trans, trans_feat


def feature_transform_regularizer(trans):
    d = trans.size()[1]
    identity = torch.eye(d)[None, :, :]
    return torch.mean(torch.norm(identity - torch.bmm(trans, trans.transpose(2, 1)), dim=(1, 2)))


class FoldingDecoder(nn.Module):
    def __init__(self, code_dim=24, grid_size=6):
        super().__init__()
        xs = torch.linspace(-1.0, 1.0, grid_size)
        gx, gy = torch.meshgrid(xs, xs, indexing="ij")
        self.register_buffer("grid", torch.stack([gx, gy], dim=-1).reshape(-1, 2))
        self.fold1 = nn.Sequential(nn.Conv1d(code_dim + 2, 32, 1), nn.ReLU(),
                                   nn.Conv1d(32, 32, 1), nn.ReLU(), nn.Conv1d(32, 3, 1))
        self.fold2 = nn.Sequential(nn.Conv1d(code_dim + 3, 32, 1), nn.ReLU(),
                                   nn.Conv1d(32, 32, 1), nn.ReLU(), nn.Conv1d(32, 3, 1))

    def forward(self, code):
        b, m = code.shape[0], self.grid.shape[0]
        code = code.unsqueeze(1).expand(-1, m, -1)
        grid = self.grid.unsqueeze(0).expand(b, -1, -1)
        x = torch.cat([code, grid], dim=2).permute(0, 2, 1)
        fold = self.fold1(x).permute(0, 2, 1)
        x = torch.cat([code, fold], dim=2).permute(0, 2, 1)
        return fold + self.fold2(x).permute(0, 2, 1)


class FCDecoder(nn.Module):
    def __init__(self, code_dim=24, n_out=36):
        super().__init__()
        self.n_out = n_out
        self.mlp = nn.Sequential(nn.Linear(code_dim, 64), nn.LeakyReLU(0.2, inplace=True),
                                 nn.Linear(64, n_out * 3), nn.Tanh())

    def forward(self, code):
        return self.mlp(code).view(code.shape[0], self.n_out, 3)


class PointCloudAE(nn.Module):
    def __init__(self, decoder):
        super().__init__()
        self.encoder = PointNetEncoder()
        self.decoder = FoldingDecoder() if decoder == "folding" else FCDecoder()

    def forward(self, x):
        code, trans, trans_feat = self.encoder(x)
        return self.decoder(code), trans_feat


def chamfer_distance(x, y, return_idx=False):
    # in float64: the nearest neighbours of nearly equidistant points are not left to rounding
    d = torch.cdist(x.double(), y.double()) ** 2
    d_xy, idx_xy = d.min(dim=2)
    d_yx, idx_yx = d.min(dim=1)
    loss = (d_xy.mean(dim=1) + d_yx.mean(dim=1)).float()
    if return_idx:
        return loss, d_xy, d_yx, idx_xy, idx_yx
    return loss


def chamfer_naive(x, y):
    d = (x.unsqueeze(2) - y.unsqueeze(1)).pow(2).sum(-1)
    return torch.min(d, 2)[0].mean(1) + torch.min(d, 1)[0].mean(1)


def f_score(d_xy, d_yx, tau=0.05):
    precision = (d_xy < tau).float().mean(dim=1)
    recall = (d_yx < tau).float().mean(dim=1)
    return 2 * precision * recall / (precision + recall + 1e-8)


def train_step(model, optimizer, clouds):
    model.train()
    recon, trans_feat = model(clouds)
    cd = chamfer_distance(recon, clouds).mean()
    loss = cd + 0.001 * feature_transform_regularizer(trans_feat)
    optimizer.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    return loss.item(), cd.item()


model = PointCloudAE(DECODER)
initialize(model)
optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-4)
scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=6, eta_min=1e-3)
test_clouds = make_batch(6)

for step in range(5):
    clouds = make_batch(6)
    loss, cd = train_step(model, optimizer, clouds)
    scheduler.step()
    record.append([loss, cd, scheduler.get_last_lr()[0]])
    record.append(params_of(model))
    print("step %d loss %.4f chamfer %.4f" % (step, loss, cd))

model.eval()
with torch.no_grad():
    recon, _ = model(test_clouds)
    cd, d_xy, d_yx, idx_xy, idx_yx = chamfer_distance(recon, test_clouds, return_idx=True)
    naive = chamfer_naive(recon, test_clouds)
    nearest = torch.gather(test_clouds, 1, idx_xy.unsqueeze(-1).expand(-1, -1, 3))
    residual = (recon - nearest).pow(2).sum(-1)
    coverage = torch.zeros(test_clouds.shape[0], test_clouds.shape[1])
    coverage.scatter_add_(1, idx_xy, torch.ones(idx_xy.shape))
    record.append({"cd": cd.numpy().copy(), "naive": naive.numpy().copy(),
                   "residual": residual.numpy().copy(), "f": f_score(d_xy, d_yx).numpy().copy()})
    record.append([(coverage > 0).float().mean().item(), coverage.amax().item(),
                   int(idx_yx.unique().numel())])
    record.append(recon[0].numpy().copy())
    running = model.encoder.bn3.running_mean.clone()

buffer = io.BytesIO()
torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, buffer)
buffer.seek(0)
checkpoint = torch.load(buffer)
restored = PointCloudAE(DECODER)
restored.load_state_dict(checkpoint["model"])
restored_optimizer = torch.optim.SGD(restored.parameters(), lr=0.05, momentum=0.9)
restored_optimizer.load_state_dict(checkpoint["optimizer"])
clouds = make_batch(6)
record.append([train_step(model, optimizer, clouds),
               train_step(restored, restored_optimizer, clouds)])
record.append({"running": running.numpy().copy(), **params_of(restored)})
"""

POINT_AE_STEPS = [
    (
        "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n",
        "import retrograd as torch\nimport retrograd.nn as nn\n"
        "import retrograd.nn.functional as F\n",
    ),
    (
        "    loss.backward()\n"
        "    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\n"
        "    optimizer.step()\n",
        "    grads = loss.backward()\n"
        "    torch.nn.utils.clip_grad_norm_(grads, model.parameters(), 1.0)\n"
        "    optimizer.step(grads)\n",
    ),
]


@pytest.mark.parametrize("decoder", ["folding", "fc"])
def test_point_cloud_autoencoder_with_chamfer_as_torch(capsys, decoder):
    (theirs, ours), (their_log, our_log) = runs_with_draws(
        POINT_AE_SOURCE,
        POINT_AE_STEPS,
        capsys,
        7602,
        initialize=initializer(),
        params_of=params_of,
        DECODER=decoder,
    )
    assert len(theirs) == 2 * 5 + 5
    assert their_log == our_log and their_log.count("\n") == 5
    # the restored model and optimizer take the same step as the originals
    assert theirs[-2][0] == pytest.approx(theirs[-2][1], rel=1e-6)
    assert_records_agree(ours, theirs, rtol=2e-4, atol=2e-5)
