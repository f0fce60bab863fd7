"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):
programs written here in the style of pytorch/examples' DCGAN and facebookresearch/moco.

- A DCGAN on 32x32 images (a ``TensorDataset`` of random images standing in for an image
  folder): weights initialized by ``netG.apply`` choosing by ``classname.find('Conv') != -1``,
  ``nn.ConvTranspose2d(nz, ..., 4, 1, 0, bias=False)`` stacks in an ``nn.Sequential`` with
  ``nn.ReLU(True)`` and ``nn.LeakyReLU(0.2, inplace=True)``, ``forward`` testing ``input.is_cuda
  and self.ngpu > 1``, ``output.view(-1, 1).squeeze(1)``, ``nn.BCELoss``, ``torch.full((n,),
  1, dtype=x.dtype, device=device)`` with an int fill, ``label.fill_(0)`` after the real
  batch's backward, the discriminator's two backward calls before one ``step()``,
  ``netD(fake.detach())``, the generator's loss through the discriminator, ``print(netG)``,
  ``output.mean().item()`` and a ``'%.4f'`` log line.
- MoCo v1/v2 on one process of a gloo process group with a small conv encoder: the ``mlp``
  head replacing ``encoder.fc`` by an ``nn.Sequential`` around it, ``k.data.copy_(q.data)`` and
  ``k.requires_grad = False``, the queue registered as a buffer and then reassigned
  ``self.queue = nn.functional.normalize(self.queue, dim=0)``, the momentum update
  ``k.data = k.data * m + q.data * (1. - m)`` under ``@torch.no_grad()``, the queue update
  (``int(self.queue_ptr)``, ``self.queue[:, a:b] = keys.T``, ``self.queue_ptr[0] = ...``), the
  shuffling BN (``torch.distributed.all_gather(parts, t, async_op=False)``, ``torch.randperm``,
  ``torch.distributed.broadcast(order, src=0)``, ``torch.argsort``,
  ``torch.distributed.get_rank()``), ``torch.einsum('nc,nc->n', [q, k])`` (operands as a
  list), ``logits /= T`` in place, a cosine or stepwise learning rate set over
  ``optimizer.param_groups``, SGD with momentum and weight decay over all of
  ``model.parameters()`` (the key encoder's never get a gradient) and top-k accuracy
  (``output.topk(maxk, 1, True, True)``, ``pred.eq(target.view(1, -1).expand_as(pred))``,
  ``correct[:k].reshape(-1).float().sum(0, keepdim=True)``, ``mul_(100.0 / n)``).

Both run in float64 (BatchNorm statistics and Adam/momentum steps would otherwise follow float32
rounding apart). ``torch.randn`` and ``torch.randperm`` draw from one seeded stream in both runs.
The lines changed: the gradient lines; the discriminator's two gradients are summed
(``gradsD + lossD_fake.backward()``) where torch accumulates them into ``.grad``.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import retrograd as rg
from real_ports import assert_records_agree, port, run_source


@pytest.fixture
def float64():
    previous, our_previous = torch.get_default_dtype(), rg.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    rg.set_default_dtype(rg.float64)
    yield
    torch.set_default_dtype(previous)
    rg.set_default_dtype(our_previous)


def _draws(lib, seed):
    rng = np.random.default_rng(seed)

    def randn(*size, **kwargs):
        shape = size[0] if len(size) == 1 and not isinstance(size[0], int) else size
        return lib.tensor(rng.standard_normal(tuple(shape)), dtype=lib.float64)

    def randperm(n, **kwargs):
        return lib.tensor(rng.permutation(n), dtype=lib.int64)

    return randn, randperm


DCGAN_SOURCE = """
device = torch.device("cpu")
latent, gen_width, disc_width, channels = int(opt.nz), int(opt.ngf), int(opt.ndf), 3


def init_weights(module):
    kind = module.__class__.__name__
    if kind.find("Conv") != -1:
        nn.init.normal_(module.weight, 0.0, 0.02)
    elif kind.find("BatchNorm") != -1:
        nn.init.normal_(module.weight, 1.0, 0.02)
        nn.init.zeros_(module.bias)


def upsample(cin, cout, stride=2, pad=1):
    return [nn.ConvTranspose2d(cin, cout, 4, stride, pad, bias=False), nn.BatchNorm2d(cout),
            nn.ReLU(True)]


def downsample(cin, cout, norm=True):
    layers = [nn.Conv2d(cin, cout, 4, 2, 1, bias=False)]
    if norm:
        layers.append(nn.BatchNorm2d(cout))
    return layers + [nn.LeakyReLU(0.2, inplace=True)]


class Generator32(nn.Module):
    # a latent vector (as a 1x1 image) to a 32x32 image in [-1, 1]
    def __init__(self, ngpu):
        super().__init__()
        self.ngpu = ngpu
        self.net = nn.Sequential(
            *upsample(latent, gen_width * 4, stride=1, pad=0),  # 4x4
            *upsample(gen_width * 4, gen_width * 2),  # 8x8
            *upsample(gen_width * 2, gen_width),  # 16x16
            nn.ConvTranspose2d(gen_width, channels, 4, 2, 1, bias=False),
            nn.Tanh(),
        )

    def forward(self, z):
        if z.is_cuda and self.ngpu > 1:
            return nn.parallel.data_parallel(self.net, z, range(self.ngpu))
        return self.net(z)


class Discriminator32(nn.Module):
    def __init__(self, ngpu):
        super().__init__()
        self.ngpu = ngpu
        self.net = nn.Sequential(
            *downsample(channels, disc_width, norm=False),  # 16x16
            *downsample(disc_width, disc_width * 2),  # 8x8
            *downsample(disc_width * 2, disc_width * 4),  # 4x4
            nn.Conv2d(disc_width * 4, 1, 4, 1, 0, bias=False),
            nn.Sigmoid(),
        )

    def forward(self, images):
        if images.is_cuda and self.ngpu > 1:
            scores = nn.parallel.data_parallel(self.net, images, range(self.ngpu))
        else:
            scores = self.net(images)
        return scores.view(-1, 1).squeeze(1)


netG = Generator32(int(opt.ngpu)).to(device)
netG.apply(init_weights)
initialize(netG)  # the test gives both runs the same weights
print(netG)
netD = Discriminator32(int(opt.ngpu)).to(device)
netD.apply(init_weights)
initialize(netD)

bce = nn.BCELoss()
probe = torch.randn(opt.batchSize, latent, 1, 1, device=device)
REAL, FAKE = 1, 0
optD = optim.Adam(netD.parameters(), lr=opt.lr, betas=(opt.beta1, 0.999))
optG = optim.Adam(netG.parameters(), lr=opt.lr, betas=(opt.beta1, 0.999))
loader = torch.utils.data.DataLoader(dataset, batch_size=opt.batchSize, shuffle=False)
record = []
for epoch in range(int(opt.niter)):
    for step, batch in enumerate(loader, 0):
        # the discriminator: real images towards 1, generated ones towards 0
        netD.zero_grad()
        real = batch[0].to(device)
        n = real.size(0)
        target = torch.full((n,), REAL, dtype=real.dtype, device=device)
        judged = netD(real)
        lossD_real = bce(judged, target)
        lossD_real.backward()
        d_real = judged.mean().item()
        fake = netG(torch.randn(n, latent, 1, 1, device=device))
        target.fill_(FAKE)
        judged = netD(fake.detach())
        lossD_fake = bce(judged, target)
        lossD_fake.backward()
        d_fake = judged.mean().item()
        lossD = lossD_real + lossD_fake
        optD.step()
        # the generator: have the discriminator call its images real
        netG.zero_grad()
        target.fill_(REAL)
        judged = netD(fake)
        lossG = bce(judged, target)
        lossG.backward()
        optG.step()
        d_fooled = judged.mean().item()
        print("epoch %d/%d batch %d/%d loss_D %.4f loss_G %.4f D(x) %.4f D(G(z)) %.4f -> %.4f"
              % (epoch, opt.niter, step, len(loader), lossD.item(), lossG.item(), d_real,
                 d_fake, d_fooled))
        record.append([lossD.item(), lossG.item(), d_real, d_fake, d_fooled])
        if step % 100 == 0:
            record.append(netG(probe).detach().numpy())
"""

DCGAN_STEP = [
    ("        lossD_real.backward()", "        gradsD = lossD_real.backward()"),
    ("        lossD_fake.backward()", "        gradsD = gradsD + lossD_fake.backward()"),
    ("        optD.step()", "        optD.step(gradsD)"),
    ("        lossG.backward()", "        gradsG = lossG.backward()"),
    ("        optG.step()", "        optG.step(gradsG)"),
]


def test_dcgan_matches_torch(monkeypatch, capsys, float64):
    images = np.random.default_rng(36).uniform(-1, 1, (4, 3, 32, 32))
    opt = type(
        "Opt", (), dict(ngpu=1, nz=8, ngf=4, ndf=4, batchSize=2, lr=2e-4, beta1=0.5, niter=2)
    )
    state = []
    records, logs, models = [], [], []
    for lib in (torch, rg):

        def initialize(net, count=[0]):  # noqa: B006  (a counter of the calls)
            if len(state) < 2:
                state.append({k: v.detach().numpy().copy() for k, v in net.state_dict().items()})
            else:
                net.load_state_dict({k: rg.tensor(v) for k, v in state[count[0]].items()})
                count[0] += 1

        randn, _ = _draws(lib, 37)
        monkeypatch.setattr(lib, "randn", randn)
        dataset = lib.utils.data.TensorDataset(lib.tensor(images))
        source = DCGAN_SOURCE if lib is torch else port(DCGAN_SOURCE, DCGAN_STEP)
        names = run_source(source, lib, opt=opt, dataset=dataset, initialize=initialize)
        records.append(names["record"])
        models.append([names["netG"], names["netD"]])
        logs.append(capsys.readouterr().out)
        monkeypatch.undo()
    assert logs[0].count("loss_D") == 4 and "Sequential" in logs[0]
    assert [line for line in logs[1].splitlines() if "loss_D" in line] == [
        line for line in logs[0].splitlines() if "loss_D" in line
    ]
    for i in (0, 1):
        records[i].append({n: p.detach().numpy() for n, p in models[i][0].named_parameters()})
        records[i].append({n: p.detach().numpy() for n, p in models[i][1].state_dict().items()})
    assert_records_agree(records[1], records[0], rtol=1e-8, atol=1e-10)


MOCO_SOURCE = """
class MomentumContrast(nn.Module):
    # queries from one encoder, keys from a slowly following copy, negatives from a queue
    def __init__(self, make_encoder, dim=128, queue_len=4096, momentum=0.999, temperature=0.07,
                 mlp=False):
        super().__init__()
        self.queue_len, self.momentum, self.temperature = queue_len, momentum, temperature
        self.query_net = make_encoder(num_classes=dim)
        self.key_net = make_encoder(num_classes=dim)
        if mlp:  # a hidden layer in front of each encoder's last one
            hidden = self.query_net.fc.weight.shape[1]
            for net in (self.query_net, self.key_net):
                net.fc = nn.Sequential(nn.Linear(hidden, hidden), nn.ReLU(), net.fc)
        for q_param, k_param in zip(self.query_net.parameters(), self.key_net.parameters()):
            k_param.data.copy_(q_param.data)
            k_param.requires_grad = False  # moved by the momentum update only
        self.register_buffer("queue", torch.randn(dim, queue_len))
        self.queue = nn.functional.normalize(self.queue, dim=0)  # unit-length keys
        self.register_buffer("queue_ptr", torch.zeros(1, dtype=torch.long))  # next slot

    @torch.no_grad()
    def _follow_query_net(self):
        for q_param, k_param in zip(self.query_net.parameters(), self.key_net.parameters()):
            k_param.data = k_param.data * self.momentum + q_param.data * (1.0 - self.momentum)

    @torch.no_grad()
    def _push_keys(self, keys):
        keys = gather_from_all(keys)
        n = keys.shape[0]
        start = int(self.queue_ptr)
        assert self.queue_len % n == 0
        self.queue[:, start:start + n] = keys.T
        self.queue_ptr[0] = (start + n) % self.queue_len

    @torch.no_grad()
    def _shuffled(self, images):
        # BatchNorm sees a batch mixed across processes, so it cannot leak which key is whose
        everything = gather_from_all(images)
        n_ranks = everything.shape[0] // images.shape[0]
        order = torch.randperm(everything.shape[0])
        torch.distributed.broadcast(order, src=0)
        mine = order.view(n_ranks, -1)[torch.distributed.get_rank()]
        return everything[mine], torch.argsort(order)

    @torch.no_grad()
    def _unshuffled(self, keys, restore):
        everything = gather_from_all(keys)
        n_ranks = everything.shape[0] // keys.shape[0]
        return everything[restore.view(n_ranks, -1)[torch.distributed.get_rank()]]

    def forward(self, query_images, key_images):
        q = nn.functional.normalize(self.query_net(query_images), dim=1)
        with torch.no_grad():
            self._follow_query_net()
            shuffled, restore = self._shuffled(key_images)
            k = nn.functional.normalize(self.key_net(shuffled), dim=1)
            k = self._unshuffled(k, restore)
        positive = torch.einsum("nc,nc->n", [q, k]).unsqueeze(-1)
        negative = torch.einsum("nc,ck->nk", [q, self.queue.clone().detach()])
        logits = torch.cat([positive, negative], dim=1)
        logits /= self.temperature
        labels = torch.zeros(logits.shape[0], dtype=torch.long)  # the positive is column 0
        self._push_keys(k)
        return logits, labels


@torch.no_grad()
def gather_from_all(t):
    parts = [torch.ones_like(t) for _ in range(torch.distributed.get_world_size())]
    torch.distributed.all_gather(parts, t, async_op=False)
    return torch.cat(parts, dim=0)


def topk_accuracy(output, target, ks=(1,)):
    with torch.no_grad():
        _, pred = output.topk(max(ks), 1, True, True)
        pred = pred.t()
        hit = pred.eq(target.view(1, -1).expand_as(pred))
        n = target.size(0)
        return [hit[:k].reshape(-1).float().sum(0, keepdim=True).mul_(100.0 / n) for k in ks]


def set_learning_rate(optimizer, epoch, args):
    if args.cos:
        lr = args.lr * 0.5 * (1.0 + math.cos(math.pi * epoch / args.epochs))
    else:
        lr = args.lr * 0.1 ** sum(epoch >= m for m in args.schedule)
    for group in optimizer.param_groups:
        group["lr"] = lr


class TinyEncoder(nn.Module):  # stands in for a ResNet built with num_classes=dim
    def __init__(self, num_classes=10):
        super().__init__()
        self.conv = nn.Conv2d(3, 5, kernel_size=3, padding=1)
        self.bn = nn.BatchNorm2d(5)
        self.fc = nn.Linear(5 * 4, num_classes)

    def forward(self, images):
        h = F.max_pool2d(F.relu(self.bn(self.conv(images))), 4)
        return self.fc(torch.flatten(h, 1))


def pretrain(args, dataset):
    model = MomentumContrast(TinyEncoder, args.moco_dim, args.moco_k, args.moco_m, args.moco_t,
                             args.mlp)
    initialize(model)
    loss_fn = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), args.lr, weight_decay=args.weight_decay,
                                momentum=args.momentum)
    loader = torch.utils.data.DataLoader(dataset, batch_size=args.batch_size,
                                         shuffle=False, drop_last=True)
    for ep in range(args.start_epoch, args.epochs):
        set_learning_rate(optimizer, ep, args)
        model.train()
        for views, _ in loader:
            logits, labels = model(query_images=views[0], key_images=views[1])
            loss = loss_fn(logits, labels)
            top1, top5 = topk_accuracy(logits, labels, ks=(1, 5))
            record.append([loss.item(), top1[0], top5[0]])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    return model
"""

MOCO_STEP = [
    (
        "            loss.backward()\n            optimizer.step()",
        "            grads = loss.backward()\n            optimizer.step(grads)",
    )
]


class TwoCrops:
    """A fixed pair of views per image (a list of the query and key image) and a label, as an
    image folder with a two-crop transform gives."""

    def __init__(self, lib, views):
        self.lib, self.views = lib, views

    def __len__(self):
        return len(self.views[0])

    def __getitem__(self, i):
        return [self.lib.tensor(self.views[0][i]), self.lib.tensor(self.views[1][i])], 0


@pytest.mark.parametrize("mlp, cos", [(False, False), (True, True)])
def test_moco_matches_torch(monkeypatch, tmp_path, float64, mlp, cos):
    rng = np.random.default_rng(38)
    views = rng.standard_normal((2, 12, 3, 8, 8))
    args = type(
        "Args",
        (),
        dict(
            moco_dim=5,
            moco_k=8,
            moco_m=0.9,
            moco_t=0.2,
            mlp=mlp,
            lr=0.5,
            momentum=0.9,
            weight_decay=1e-2,
            batch_size=4,
            start_epoch=0,
            epochs=2,
            cos=cos,
            schedule=[1],
        ),
    )
    state, records = {}, []
    for lib in (torch, rg):

        def initialize(model):
            if not state:
                state.update({k: v.detach().numpy().copy() for k, v in model.state_dict().items()})
            else:
                model.load_state_dict({k: rg.tensor(v) for k, v in state.items()})

        randn, randperm = _draws(lib, 39)
        monkeypatch.setattr(lib, "randn", randn)
        monkeypatch.setattr(lib, "randperm", randperm)
        if lib is torch:
            torch.distributed.init_process_group(
                "gloo", init_method=f"file://{tmp_path}/pg", rank=0, world_size=1
            )
        else:
            rg.distributed.init_process_group("gloo")
        try:
            source = MOCO_SOURCE if lib is torch else port(MOCO_SOURCE, MOCO_STEP)
            record = []
            names = run_source(source, lib, initialize=initialize, record=record)
            model = names["pretrain"](args, TwoCrops(lib, views))
        finally:
            lib.distributed.destroy_process_group()
            monkeypatch.undo()
        assert not any(p.requires_grad for p in model.key_net.parameters())
        record.append({k: v.detach().numpy().copy() for k, v in model.state_dict().items()})
        records.append(record)
    assert records[0][-1]["queue_ptr"] == 0  # the queue went round (3 batches of 4 per epoch, K=8)
    assert_records_agree(records[1], records[0], rtol=1e-8, atol=1e-10)
