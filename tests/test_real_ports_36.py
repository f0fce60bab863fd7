# ruff: noqa: E501  (the programs are kept as their authors wrote them)
"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):

- DCGAN as pytorch/examples writes it (``dcgan/main.py``), narrower (``ngf = ndf = 4``,
  ``nz = 8``) on 64x64 images, a ``TensorDataset`` of random images for the ``ImageFolder``:
  ``weights_init`` applied by ``netG.apply`` and choosing by ``classname.find('Conv') != -1``,
  ``nn.ConvTranspose2d(nz, ngf * 8, 4, 1, 0, bias=False)`` stacks in an ``nn.Sequential`` with
  ``nn.ReLU(True)`` and ``nn.LeakyReLU(0.2, inplace=True)``, ``forward`` checking
  ``input.is_cuda and self.ngpu > 1``, ``output.view(-1, 1).squeeze(1)``, ``nn.BCELoss``,
  ``torch.full((batch_size,), real_label, dtype=real_cpu.dtype, device=device)`` with an int
  fill, ``label.fill_(fake_label)`` after the real batch's backward, the discriminator's two
  backward calls before one ``optimizerD.step()``, ``netD(fake.detach())``, the generator's
  loss through the discriminator, ``output.mean().item()`` and the ``'%.4f'`` log line;
- MoCo v1/v2 (facebookresearch/moco ``moco/builder.py`` and ``train``/``accuracy`` of
  ``main_moco.py``) on one process of a gloo process group, a small conv encoder for the
  ResNet: the ``mlp`` hack replacing ``encoder_q.fc`` by an ``nn.Sequential`` around it,
  ``param_k.data.copy_(param_q.data)`` and ``param_k.requires_grad = False``, the queue
  registered as a buffer and then reassigned ``self.queue = nn.functional.normalize(self.queue,
  dim=0)``, the momentum update ``param_k.data = param_k.data * self.m + param_q.data * (1. -
  self.m)`` under ``@torch.no_grad()``, ``_dequeue_and_enqueue`` (``int(self.queue_ptr)``,
  ``self.queue[:, ptr:ptr + batch_size] = keys.T``, ``self.queue_ptr[0] = ptr``), the
  shuffling BN (``concat_all_gather`` by ``torch.distributed.all_gather(tensors_gather,
  tensor, async_op=False)``, ``torch.randperm``, ``torch.distributed.broadcast(idx_shuffle,
  src=0)``, ``torch.argsort``, ``torch.distributed.get_rank()``), ``torch.einsum('nc,nc->n',
  [q, k])`` (operands as a list), ``logits /= self.T`` in place, the cosine
  ``adjust_learning_rate`` over ``optimizer.param_groups``, SGD with momentum and weight decay
  over all of ``model.parameters()`` (the key encoder's never get a gradient) and
  ``accuracy`` (``output.topk(maxk, 1, True, True)``, ``pred.eq(target.view(1,
  -1).expand_as(pred))``, ``correct[:k].reshape(-1).float().sum(0, keepdim=True)``,
  ``correct_k.mul_(100.0 / batch_size)``).

Both run in float64 (BatchNorm statistics and Adam/momentum steps would otherwise follow float32
rounding apart). ``torch.randn`` and ``torch.randperm`` draw from one seeded stream in both runs.
The lines changed besides the gradient lines: MoCo's ``.cuda()`` calls are left out (CPU
here). The discriminator's two gradients are summed (``gradsD + errD_fake.backward()``) where
torch accumulates them into ``.grad``.
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
ngpu = int(opt.ngpu)
nz = int(opt.nz)
ngf = int(opt.ngf)
ndf = int(opt.ndf)
nc = 3


# custom weights initialization called on netG and netD
def weights_init(m):
    classname = m.__class__.__name__
    if classname.find('Conv') != -1:
        torch.nn.init.normal_(m.weight, 0.0, 0.02)
    elif classname.find('BatchNorm') != -1:
        torch.nn.init.normal_(m.weight, 1.0, 0.02)
        torch.nn.init.zeros_(m.bias)


class Generator(nn.Module):
    def __init__(self, ngpu):
        super(Generator, self).__init__()
        self.ngpu = ngpu
        self.main = nn.Sequential(
            # input is Z, going into a convolution
            nn.ConvTranspose2d(     nz, ngf * 8, 4, 1, 0, bias=False),
            nn.BatchNorm2d(ngf * 8),
            nn.ReLU(True),
            # state size. (ngf*8) x 4 x 4
            nn.ConvTranspose2d(ngf * 8, ngf * 4, 4, 2, 1, bias=False),
            nn.BatchNorm2d(ngf * 4),
            nn.ReLU(True),
            # state size. (ngf*4) x 8 x 8
            nn.ConvTranspose2d(ngf * 4, ngf * 2, 4, 2, 1, bias=False),
            nn.BatchNorm2d(ngf * 2),
            nn.ReLU(True),
            # state size. (ngf*2) x 16 x 16
            nn.ConvTranspose2d(ngf * 2,     ngf, 4, 2, 1, bias=False),
            nn.BatchNorm2d(ngf),
            nn.ReLU(True),
            # state size. (ngf) x 32 x 32
            nn.ConvTranspose2d(    ngf,      nc, 4, 2, 1, bias=False),
            nn.Tanh()
            # state size. (nc) x 64 x 64
        )

    def forward(self, input):
        if input.is_cuda and self.ngpu > 1:
            output = nn.parallel.data_parallel(self.main, input, range(self.ngpu))
        else:
            output = self.main(input)
        return output


netG = Generator(ngpu).to(device)
netG.apply(weights_init)
initialize(netG)  # the test's: the same weights in both runs
print(netG)


class Discriminator(nn.Module):
    def __init__(self, ngpu):
        super(Discriminator, self).__init__()
        self.ngpu = ngpu
        self.main = nn.Sequential(
            # input is (nc) x 64 x 64
            nn.Conv2d(nc, ndf, 4, 2, 1, bias=False),
            nn.LeakyReLU(0.2, inplace=True),
            # state size. (ndf) x 32 x 32
            nn.Conv2d(ndf, ndf * 2, 4, 2, 1, bias=False),
            nn.BatchNorm2d(ndf * 2),
            nn.LeakyReLU(0.2, inplace=True),
            # state size. (ndf*2) x 16 x 16
            nn.Conv2d(ndf * 2, ndf * 4, 4, 2, 1, bias=False),
            nn.BatchNorm2d(ndf * 4),
            nn.LeakyReLU(0.2, inplace=True),
            # state size. (ndf*4) x 8 x 8
            nn.Conv2d(ndf * 4, ndf * 8, 4, 2, 1, bias=False),
            nn.BatchNorm2d(ndf * 8),
            nn.LeakyReLU(0.2, inplace=True),
            # state size. (ndf*8) x 4 x 4
            nn.Conv2d(ndf * 8, 1, 4, 1, 0, bias=False),
            nn.Sigmoid()
        )

    def forward(self, input):
        if input.is_cuda and self.ngpu > 1:
            output = nn.parallel.data_parallel(self.main, input, range(self.ngpu))
        else:
            output = self.main(input)

        return output.view(-1, 1).squeeze(1)


netD = Discriminator(ngpu).to(device)
netD.apply(weights_init)
initialize(netD)

criterion = nn.BCELoss()

fixed_noise = torch.randn(opt.batchSize, nz, 1, 1, device=device)
real_label = 1
fake_label = 0

# setup optimizer
optimizerD = optim.Adam(netD.parameters(), lr=opt.lr, betas=(opt.beta1, 0.999))
optimizerG = optim.Adam(netG.parameters(), lr=opt.lr, betas=(opt.beta1, 0.999))

dataloader = torch.utils.data.DataLoader(dataset, batch_size=opt.batchSize, shuffle=False)
record = []

for epoch in range(opt.niter):
    for i, data in enumerate(dataloader, 0):
        ############################
        # (1) Update D network: maximize log(D(x)) + log(1 - D(G(z)))
        ###########################
        # train with real
        netD.zero_grad()
        real_cpu = data[0].to(device)
        batch_size = real_cpu.size(0)
        label = torch.full((batch_size,), real_label,
                           dtype=real_cpu.dtype, device=device)

        output = netD(real_cpu)
        errD_real = criterion(output, label)
        errD_real.backward()
        D_x = output.mean().item()

        # train with fake
        noise = torch.randn(batch_size, nz, 1, 1, device=device)
        fake = netG(noise)
        label.fill_(fake_label)
        output = netD(fake.detach())
        errD_fake = criterion(output, label)
        errD_fake.backward()
        D_G_z1 = output.mean().item()
        errD = errD_real + errD_fake
        optimizerD.step()

        ############################
        # (2) Update G network: maximize log(D(G(z)))
        ###########################
        netG.zero_grad()
        label.fill_(real_label)  # fake labels are real for generator cost
        output = netD(fake)
        errG = criterion(output, label)
        errG.backward()
        D_G_z2 = output.mean().item()
        optimizerG.step()

        print('[%d/%d][%d/%d] Loss_D: %.4f Loss_G: %.4f D(x): %.4f D(G(z)): %.4f / %.4f'
              % (epoch, opt.niter, i, len(dataloader),
                 errD.item(), errG.item(), D_x, D_G_z1, D_G_z2))
        record.append([errD.item(), errG.item(), D_x, D_G_z1, D_G_z2])
        if i % 100 == 0:
            fake = netG(fixed_noise)
            record.append(fake.detach().numpy())
"""

DCGAN_STEP = [
    ("        errD_real.backward()", "        gradsD = errD_real.backward()"),
    ("        errD_fake.backward()", "        gradsD = gradsD + errD_fake.backward()"),
    ("        optimizerD.step()", "        optimizerD.step(gradsD)"),
    ("        errG.backward()", "        gradsG = errG.backward()"),
    ("        optimizerG.step()", "        optimizerG.step(gradsG)"),
]


def test_dcgan_matches_torch(monkeypatch, capsys, float64):
    images = np.random.default_rng(36).uniform(-1, 1, (4, 3, 64, 64))
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
    assert logs[0].count("Loss_D") == 4 and "Sequential" in logs[0]
    assert [line for line in logs[1].splitlines() if "Loss_D" in line] == [
        line for line in logs[0].splitlines() if "Loss_D" in line
    ]
    for i in (0, 1):
        records[i].append({n: p.detach().numpy() for n, p in models[i][0].named_parameters()})
        records[i].append({n: p.detach().numpy() for n, p in models[i][1].state_dict().items()})
    assert_records_agree(records[1], records[0], rtol=1e-8, atol=1e-10)


MOCO_SOURCE = """
# moco/builder.py
class MoCo(nn.Module):
    \"\"\"
    Build a MoCo model with: a query encoder, a key encoder, and a queue
    https://arxiv.org/abs/1911.05722
    \"\"\"
    def __init__(self, base_encoder, dim=128, K=65536, m=0.999, T=0.07, mlp=False):
        \"\"\"
        dim: feature dimension (default: 128)
        K: queue size; number of negative keys (default: 65536)
        m: moco momentum of updating key encoder (default: 0.999)
        T: softmax temperature (default: 0.07)
        \"\"\"
        super(MoCo, self).__init__()

        self.K = K
        self.m = m
        self.T = T

        # create the encoders
        # num_classes is the output fc dimension
        self.encoder_q = base_encoder(num_classes=dim)
        self.encoder_k = base_encoder(num_classes=dim)

        if mlp:  # hack: brute-force replacement
            dim_mlp = self.encoder_q.fc.weight.shape[1]
            self.encoder_q.fc = nn.Sequential(nn.Linear(dim_mlp, dim_mlp), nn.ReLU(), self.encoder_q.fc)
            self.encoder_k.fc = nn.Sequential(nn.Linear(dim_mlp, dim_mlp), nn.ReLU(), self.encoder_k.fc)

        for param_q, param_k in zip(self.encoder_q.parameters(), self.encoder_k.parameters()):
            param_k.data.copy_(param_q.data)  # initialize
            param_k.requires_grad = False  # not update by gradient

        # create the queue
        self.register_buffer("queue", torch.randn(dim, K))
        self.queue = nn.functional.normalize(self.queue, dim=0)

        self.register_buffer("queue_ptr", torch.zeros(1, dtype=torch.long))

    @torch.no_grad()
    def _momentum_update_key_encoder(self):
        \"\"\"
        Momentum update of the key encoder
        \"\"\"
        for param_q, param_k in zip(self.encoder_q.parameters(), self.encoder_k.parameters()):
            param_k.data = param_k.data * self.m + param_q.data * (1. - self.m)

    @torch.no_grad()
    def _dequeue_and_enqueue(self, keys):
        # gather keys before updating queue
        keys = concat_all_gather(keys)

        batch_size = keys.shape[0]

        ptr = int(self.queue_ptr)
        assert self.K % batch_size == 0  # for simplicity

        # replace the keys at ptr (dequeue and enqueue)
        self.queue[:, ptr:ptr + batch_size] = keys.T
        ptr = (ptr + batch_size) % self.K  # move pointer

        self.queue_ptr[0] = ptr

    @torch.no_grad()
    def _batch_shuffle_ddp(self, x):
        \"\"\"
        Batch shuffle, for making use of BatchNorm.
        *** Only support DistributedDataParallel (DDP) model. ***
        \"\"\"
        # gather from all gpus
        batch_size_this = x.shape[0]
        x_gather = concat_all_gather(x)
        batch_size_all = x_gather.shape[0]

        num_gpus = batch_size_all // batch_size_this

        # random shuffle index
        idx_shuffle = torch.randperm(batch_size_all)

        # broadcast to all gpus
        torch.distributed.broadcast(idx_shuffle, src=0)

        # index for restoring
        idx_unshuffle = torch.argsort(idx_shuffle)

        # shuffled index for this gpu
        gpu_idx = torch.distributed.get_rank()
        idx_this = idx_shuffle.view(num_gpus, -1)[gpu_idx]

        return x_gather[idx_this], idx_unshuffle

    @torch.no_grad()
    def _batch_unshuffle_ddp(self, x, idx_unshuffle):
        \"\"\"
        Undo batch shuffle.
        *** Only support DistributedDataParallel (DDP) model. ***
        \"\"\"
        # gather from all gpus
        batch_size_this = x.shape[0]
        x_gather = concat_all_gather(x)
        batch_size_all = x_gather.shape[0]

        num_gpus = batch_size_all // batch_size_this

        # restored index for this gpu
        gpu_idx = torch.distributed.get_rank()
        idx_this = idx_unshuffle.view(num_gpus, -1)[gpu_idx]

        return x_gather[idx_this]

    def forward(self, im_q, im_k):
        \"\"\"
        Input:
            im_q: a batch of query images
            im_k: a batch of key images
        Output:
            logits, targets
        \"\"\"

        # compute query features
        q = self.encoder_q(im_q)  # queries: NxC
        q = nn.functional.normalize(q, dim=1)

        # compute key features
        with torch.no_grad():  # no gradient to keys
            self._momentum_update_key_encoder()  # update the key encoder

            # shuffle for making use of BN
            im_k, idx_unshuffle = self._batch_shuffle_ddp(im_k)

            k = self.encoder_k(im_k)  # keys: NxC
            k = nn.functional.normalize(k, dim=1)

            # undo shuffle
            k = self._batch_unshuffle_ddp(k, idx_unshuffle)

        # compute logits
        # Einstein sum is more intuitive
        # positive logits: Nx1
        l_pos = torch.einsum('nc,nc->n', [q, k]).unsqueeze(-1)
        # negative logits: NxK
        l_neg = torch.einsum('nc,ck->nk', [q, self.queue.clone().detach()])

        # logits: Nx(1+K)
        logits = torch.cat([l_pos, l_neg], dim=1)

        # apply temperature
        logits /= self.T

        # labels: positive key indicators
        labels = torch.zeros(logits.shape[0], dtype=torch.long)

        # dequeue and enqueue
        self._dequeue_and_enqueue(k)

        return logits, labels


# utils
@torch.no_grad()
def concat_all_gather(tensor):
    \"\"\"
    Performs all_gather operation on the provided tensors.
    *** Warning ***: torch.distributed.all_gather has no gradient.
    \"\"\"
    tensors_gather = [torch.ones_like(tensor)
        for _ in range(torch.distributed.get_world_size())]
    torch.distributed.all_gather(tensors_gather, tensor, async_op=False)

    output = torch.cat(tensors_gather, dim=0)
    return output


# main_moco.py
def train(train_loader, model, criterion, optimizer, epoch, args):
    # switch to train mode
    model.train()

    for i, (images, _) in enumerate(train_loader):
        # compute output
        output, target = model(im_q=images[0], im_k=images[1])
        loss = criterion(output, target)

        # acc1/acc5 are (K+1)-way contrast classifier accuracy
        # measure accuracy and record loss
        acc1, acc5 = accuracy(output, target, topk=(1, 5))
        record.append([loss.item(), acc1[0], acc5[0]])

        # compute gradient and do SGD step
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


def adjust_learning_rate(optimizer, epoch, args):
    \"\"\"Decay the learning rate based on schedule\"\"\"
    lr = args.lr
    if args.cos:  # cosine lr schedule
        lr *= 0.5 * (1. + math.cos(math.pi * epoch / args.epochs))
    else:  # stepwise lr schedule
        for milestone in args.schedule:
            lr *= 0.1 if epoch >= milestone else 1.
    for param_group in optimizer.param_groups:
        param_group['lr'] = lr


def accuracy(output, target, topk=(1,)):
    \"\"\"Computes the accuracy over the k top predictions for the specified values of k\"\"\"
    with torch.no_grad():
        maxk = max(topk)
        batch_size = target.size(0)

        _, pred = output.topk(maxk, 1, True, True)
        pred = pred.t()
        correct = pred.eq(target.view(1, -1).expand_as(pred))

        res = []
        for k in topk:
            correct_k = correct[:k].reshape(-1).float().sum(0, keepdim=True)
            res.append(correct_k.mul_(100.0 / batch_size))
        return res


class SmallEncoder(nn.Module):  # the test's, for torchvision's resnet50(num_classes=dim)
    def __init__(self, num_classes=1000):
        super().__init__()
        self.conv = nn.Conv2d(3, 6, 3, padding=1)
        self.bn = nn.BatchNorm2d(6)
        self.fc = nn.Linear(6 * 4, num_classes)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn(self.conv(x))), 4)
        return self.fc(torch.flatten(x, 1))


def main_worker(args, train_dataset):
    model = MoCo(SmallEncoder, args.moco_dim, args.moco_k, args.moco_m, args.moco_t, args.mlp)
    initialize(model)
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), args.lr,
                                momentum=args.momentum,
                                weight_decay=args.weight_decay)
    train_loader = torch.utils.data.DataLoader(
        train_dataset, batch_size=args.batch_size, shuffle=False, drop_last=True)
    for epoch in range(args.start_epoch, args.epochs):
        adjust_learning_rate(optimizer, epoch, args)

        # train for one epoch
        train(train_loader, model, criterion, optimizer, epoch, args)
    return model
"""

MOCO_STEP = [
    (
        "        loss.backward()\n        optimizer.step()",
        "        grads = loss.backward()\n        optimizer.step(grads)",
    )
]


class TwoCrops:
    """moco/loader.py's ``TwoCropsTransform`` over a fixed pair of views (a list of the query
    and key image), with a label, as ``ImageFolder`` gives."""

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
            model = names["main_worker"](args, TwoCrops(lib, views))
        finally:
            lib.distributed.destroy_process_group()
            monkeypatch.undo()
        assert not any(p.requires_grad for p in model.encoder_k.parameters())
        record.append({k: v.detach().numpy().copy() for k, v in model.state_dict().items()})
        records.append(record)
    assert records[0][-1]["queue_ptr"] == 0  # the queue went round (3 batches of 4 per epoch, K=8)
    assert_records_agree(records[1], records[0], rtol=1e-8, atol=1e-10)
