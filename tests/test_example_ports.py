# ruff: noqa: E501  (the example scripts are kept as written, long lines included)
"""Ports of two official PyTorch examples (github.com/pytorch/examples, BSD-3-Clause): the VAE
(``vae/main.py``) and the DCGAN (``dcgan/main.py``).

Each script is kept below as torch runs it, from its model definitions to its training loop
(the argument parsing, the dataset download and the CUDA/MPS device selection are replaced by
a harness: small sizes, synthetic data, the CPU). The retrograd port is made from that text by
:func:`port`, which changes *only* the import lines and the gradient lines (``backward()``
returns the gradients as a value; ``optimizer.step`` takes them), each replacement applied
exactly once. Both run in float64 from the same weights (torch's, loaded into the port) and
the same random draws (the harness's stand-ins for ``randn``/``randn_like``, one seeded
stream for both), and must agree to 1e-9 at every step.
"""

from __future__ import annotations

import types

import numpy as np
import pytest
import torch

import retrograd as rg

TOLERANCE = {"rtol": 1e-9, "atol": 1e-9}


def port(source: str, replacements: list[tuple[str, str]]) -> str:
    """``source`` with each ``(torch line, retrograd line)`` replaced, each exactly once."""
    for old, new in replacements:
        count = source.count(old)
        assert count == 1, f"{old!r} occurs {count} times"
        source = source.replace(old, new)
    return source


class Stream:
    """One seeded stream of normal draws, handed out in float64, for both libraries: the
    stand-ins for ``torch.randn`` and ``torch.randn_like``."""

    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)

    def draws(self, shape):
        return self.rng.standard_normal(tuple(shape))

    def patch(self, monkeypatch, lib):
        def randn(*size, device=None, dtype=None, **_):
            shape = size[0] if len(size) == 1 and not isinstance(size[0], int) else size
            return lib.tensor(self.draws(shape), dtype=lib.float64)

        def randn_like(t, **_):
            return lib.tensor(self.draws(t.shape), dtype=t.dtype)

        monkeypatch.setattr(lib, "randn", randn)
        monkeypatch.setattr(lib, "randn_like", randn_like)


def state_of(model) -> dict[str, np.ndarray]:
    return {
        k: (v.detach().numpy() if hasattr(v, "detach") else np.asarray(v)).copy()
        for k, v in model.state_dict().items()
    }


def namespaces(**shared):
    ours = {"torch": rg, "nn": rg.nn, "optim": rg.optim, "F": rg.nn.functional, **shared}
    theirs = {"torch": torch, "nn": torch.nn, "optim": torch.optim,
              "F": torch.nn.functional, **shared}  # fmt: skip
    return ours, theirs


# -- the VAE ---------------------------------------------------------------------------------------
VAE_SOURCE = """
class VAE(nn.Module):
    def __init__(self):
        super(VAE, self).__init__()

        self.fc1 = nn.Linear(784, 400)
        self.fc21 = nn.Linear(400, 20)
        self.fc22 = nn.Linear(400, 20)
        self.fc3 = nn.Linear(20, 400)
        self.fc4 = nn.Linear(400, 784)

    def encode(self, x):
        h1 = F.relu(self.fc1(x))
        return self.fc21(h1), self.fc22(h1)

    def reparameterize(self, mu, logvar):
        std = torch.exp(0.5*logvar)
        eps = torch.randn_like(std)
        return mu + eps*std

    def decode(self, z):
        h3 = F.relu(self.fc3(z))
        # clamp to avoid numerical issues with the continuous Bernoulli log normalizing constant
        return torch.clamp(torch.sigmoid(self.fc4(h3)), min=1e-4, max=1.0 - 1e-4)

    def forward(self, x):
        mu, logvar = self.encode(x.view(-1, 784))
        z = self.reparameterize(mu, logvar)
        return self.decode(z), mu, logvar


model = VAE().to(device)
optimizer = optim.Adam(model.parameters(), lr=1e-3)

def atanh(x):
    return 0.5 * (torch.log(1.0 + x) - torch.log(1.0 - x))

def cont_bern_log_norm(lam, l_lim=0.49, u_lim=0.51):
    cut_lam = torch.where(torch.max(torch.le(lam, l_lim), torch.gt(lam, u_lim)), lam, l_lim * torch.ones_like(lam))
    log_norm = torch.log(torch.abs(2.0 * atanh(1 - 2.0 * cut_lam))) - torch.log(torch.abs(1 - 2.0 * cut_lam))
    taylor = torch.log(torch.tensor(2.0)) + 4.0 / 3.0 * torch.pow(lam - 0.5, 2) + 104.0 / 45.0 * torch.pow(lam - 0.5, 4)
    return torch.where(torch.max(torch.le(lam, l_lim), torch.gt(lam, u_lim)), log_norm, taylor)

# Reconstruction + KL divergence losses summed over all elements and batch
def loss_function(recon_x, x, mu, logvar):
    BCE = F.binary_cross_entropy(recon_x, x.view(-1, 784), reduction='sum')
    NLNC = -torch.sum(cont_bern_log_norm(recon_x)) # negative log normalizing constant
    KLD = -0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp())

    return BCE + NLNC + KLD


def train(epoch):
    model.train()
    train_loss = 0
    for batch_idx, (data, _) in enumerate(train_loader):
        data = data.to(device)
        optimizer.zero_grad()
        recon_batch, mu, logvar = model(data)
        loss = loss_function(recon_batch, data, mu, logvar)
        loss.backward()
        train_loss += loss.item()
        optimizer.step()
        record(loss.item(), model)
        if batch_idx % args.log_interval == 0:
            print('Train Epoch: {} [{}/{} ({:.0f}%)]\\tLoss: {:.6f}'.format(
                epoch, batch_idx * len(data), len(train_loader.dataset),
                       100. * batch_idx / len(train_loader),
                       loss.item() / len(data)))

    print('====> Epoch: {} Average loss: {:.4f}'.format(
          epoch, train_loss / len(train_loader.dataset)))


def test(epoch):
    model.eval()
    test_loss = 0
    with torch.no_grad():
        for i, (data, _) in enumerate(test_loader):
            data = data.to(device)
            recon_batch, mu, logvar = model(data)
            test_loss += loss_function(recon_batch, data, mu, logvar).item()
            if i == 0:
                n = min(data.size(0), 8)
                comparison = torch.cat([data[:n],
                                      recon_batch.view(args.batch_size, 1, 28, 28)[:n]])
                save_image(comparison.cpu(),
                         'results/reconstruction_' + str(epoch) + '.png', nrow=n)

    test_loss /= len(test_loader.dataset)
    record(test_loss, None)
    print('====> Test set loss: {:.4f}'.format(test_loss))

for epoch in range(1, args.epochs + 1):
    train(epoch)
    test(epoch)
    with torch.no_grad():
        sample = torch.randn(64, 20).to(device)
        sample = model.decode(sample).cpu()
        save_image(sample.view(64, 1, 28, 28),
                   'results/sample_' + str(epoch) + '.png')
        record(float(sample.sum()), None)
"""

VAE_PORT = [
    ("        loss.backward()\n", "        grads = loss.backward()\n"),
    ("        optimizer.step()\n", "        optimizer.step(grads)\n"),
]


def _run_vae(lib, source, stream, monkeypatch, torch_state=None):
    batch = 6
    images = np.random.default_rng(3).uniform(0.0, 1.0, (3 * batch, 1, 28, 28))
    labels = np.zeros(3 * batch, dtype=np.int64)
    data_module = lib.utils.data

    def loader(rows):
        dataset = data_module.TensorDataset(lib.tensor(images[rows]), lib.tensor(labels[rows]))
        return data_module.DataLoader(dataset, batch_size=batch, shuffle=False)

    records: list = []

    def record(value, model):
        records.append((value, None if model is None else state_of(model)))

    stream.patch(monkeypatch, lib)
    ours, theirs = namespaces(
        args=types.SimpleNamespace(batch_size=batch, epochs=2, log_interval=1),
        train_loader=loader(slice(0, 2 * batch)),
        test_loader=loader(slice(2 * batch, 3 * batch)),
        device=lib.device("cpu"),
        save_image=lambda *a, **k: None,
        record=record,
    )
    namespace = ours if lib is rg else theirs
    definitions, loop = source.split("for epoch in range(1, args.epochs + 1):")
    exec(compile(definitions, "vae_main.py", "exec"), namespace)
    namespace["model"].double()
    if torch_state is not None:
        namespace["model"].load_state_dict(torch_state)
    initial = state_of(namespace["model"])
    exec(
        compile("for epoch in range(1, args.epochs + 1):" + loop, "vae_main.py", "exec"), namespace
    )
    return initial, records


def test_the_vae_example_ports_changing_only_the_gradient_lines(monkeypatch):
    torch.manual_seed(0)
    initial, theirs = _run_vae(torch, VAE_SOURCE, Stream(7), monkeypatch)
    start, ours = _run_vae(rg, port(VAE_SOURCE, VAE_PORT), Stream(7), monkeypatch, initial)
    for name, value in initial.items():
        np.testing.assert_array_equal(start[name], value)
    assert len(ours) == len(theirs) == 2 * 2 + 2 + 2  # 2 steps, a test loss, a sample per epoch
    for (mine, mine_params), (reference, reference_params) in zip(ours, theirs):
        assert mine == pytest.approx(reference, rel=1e-9)
        if reference_params is not None:
            for name, value in reference_params.items():
                np.testing.assert_allclose(mine_params[name], value, **TOLERANCE)


# -- the DCGAN -------------------------------------------------------------------------------------
DCGAN_SOURCE = """
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
if opt.netG != '':
    netG.load_state_dict(torch.load(opt.netG))
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
if opt.netD != '':
    netD.load_state_dict(torch.load(opt.netD))
print(netD)
# -- (the harness: float64, torch's weights) --
criterion = nn.BCELoss()

fixed_noise = torch.randn(opt.batchSize, nz, 1, 1, device=device)
real_label = 1
fake_label = 0

# setup optimizer
optimizerD = optim.Adam(netD.parameters(), lr=opt.lr, betas=(opt.beta1, 0.999))
optimizerG = optim.Adam(netG.parameters(), lr=opt.lr, betas=(opt.beta1, 0.999))

if opt.dry_run:
    opt.niter = 1

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
        record([errD.item(), errG.item(), D_x, D_G_z1, D_G_z2], netG, netD)
        if i % 100 == 0:
            vutils.save_image(real_cpu,
                    '%s/real_samples.png' % opt.outf,
                    normalize=True)
            fake = netG(fixed_noise)
            vutils.save_image(fake.detach(),
                    '%s/fake_samples_epoch_%03d.png' % (opt.outf, epoch),
                    normalize=True)

        if opt.dry_run:
            break
    # do checkpointing
    torch.save(netG.state_dict(), '%s/netG_epoch_%d.pth' % (opt.outf, epoch))
    torch.save(netD.state_dict(), '%s/netD_epoch_%d.pth' % (opt.outf, epoch))
"""

DCGAN_PORT = [
    ("        errD_real.backward()\n", "        gradsD = errD_real.backward()\n"),
    ("        errD_fake.backward()\n", "        gradsD = gradsD + errD_fake.backward()\n"),
    ("        optimizerD.step()\n", "        optimizerD.step(gradsD)\n"),
    ("        errG.backward()\n", "        gradsG = errG.backward()\n"),
    ("        optimizerG.step()\n", "        optimizerG.step(gradsG)\n"),
]


def _run_dcgan(lib, source, stream, monkeypatch, tmp_path, torch_state=None):
    batch = 3
    images = np.random.default_rng(5).uniform(-1.0, 1.0, (2 * batch, 3, 64, 64))
    data_module = lib.utils.data
    dataset = data_module.TensorDataset(lib.tensor(images), lib.tensor(np.zeros(2 * batch)))
    records: list = []

    def record(values, generator, discriminator):
        records.append((values, state_of(generator), state_of(discriminator)))

    stream.patch(monkeypatch, lib)
    opt = types.SimpleNamespace(
        batchSize=batch, lr=0.0002, beta1=0.5, niter=2, netG="", netD="",
        outf=str(tmp_path / lib.__name__), dry_run=False,
    )  # fmt: skip
    (tmp_path / lib.__name__).mkdir()
    ours, theirs = namespaces(
        opt=opt,
        dataloader=data_module.DataLoader(dataset, batch_size=batch, shuffle=False),
        device=lib.device("cpu"),
        ngpu=1,
        nz=8,
        ngf=4,
        ndf=4,
        nc=3,
        vutils=types.SimpleNamespace(save_image=lambda *a, **k: None),
        record=record,
    )
    namespace = ours if lib is rg else theirs
    definitions, loop = source.split("# -- (the harness: float64, torch's weights) --")
    exec(compile(definitions, "dcgan_main.py", "exec"), namespace)
    for name in ("netG", "netD"):
        namespace[name].double()
        if torch_state is not None:
            namespace[name].load_state_dict(torch_state[name])
    initial = {name: state_of(namespace[name]) for name in ("netG", "netD")}
    exec(compile(loop, "dcgan_main.py", "exec"), namespace)
    saved = lib.load(f"{opt.outf}/netG_epoch_1.pth")
    return initial, records, saved


def test_the_dcgan_example_ports_changing_only_the_gradient_lines(monkeypatch, tmp_path):
    torch.manual_seed(0)
    initial, theirs, their_checkpoint = _run_dcgan(
        torch, DCGAN_SOURCE, Stream(11), monkeypatch, tmp_path
    )
    _, ours, our_checkpoint = _run_dcgan(
        rg, port(DCGAN_SOURCE, DCGAN_PORT), Stream(11), monkeypatch, tmp_path, initial
    )
    assert len(ours) == len(theirs) == 4  # 2 epochs of 2 steps
    for (mine, mine_g, mine_d), (reference, reference_g, reference_d) in zip(ours, theirs):
        np.testing.assert_allclose(mine, reference, **TOLERANCE)
        for own, expected in ((mine_g, reference_g), (mine_d, reference_d)):
            assert list(own) == list(expected)
            for name, value in expected.items():
                np.testing.assert_allclose(own[name], value, **TOLERANCE, err_msg=name)
    assert list(our_checkpoint) == list(their_checkpoint)
    for name, value in their_checkpoint.items():
        np.testing.assert_allclose(our_checkpoint[name], value.numpy(), **TOLERANCE)
