"""Real ports, round 67 (the harness: ``tests/real_ports.py``): optical flow, a program written
here in the style of princeton-vl/RAFT (a recurrent all-pairs field-transform estimator and its
training script), on synthetic image pairs whose true flow is known, against torch's run of
the same program from the same weights and draws.

- the model: a feature encoder run on both frames at once (``torch.cat`` of a list, split back
  by ``torch.split(x, [batch_dim, batch_dim], dim=0)``), residual blocks with
  ``InstanceNorm2d``/``BatchNorm2d``/``GroupNorm`` chosen by a string, a context encoder whose
  output is split by ``torch.split(cnet, [hdim, cdim], dim=1)`` into ``tanh``/``relu`` halves;
- the correlation volume: all pairs by ``torch.matmul(fmap1.transpose(1, 2), fmap2)`` over
  flattened maps, scaled by ``torch.sqrt(torch.tensor(dim).float())``, a pyramid by
  ``F.avg_pool2d``, looked up around the current coordinates by ``F.grid_sample(...,
  align_corners=True)`` on a window built by ``torch.linspace`` and ``torch.meshgrid(...,
  indexing="ij")`` stacked with ``axis=-1``, coordinates split by ``coords.split([1, 1],
  dim=-1)`` and normalised to [-1, 1];
- the update operator: a motion encoder, a convolutional GRU (``torch.sigmoid``/``tanh`` gates
  over ``torch.cat([r * h, x], dim=1)``), a flow head and the mask head scaled by ``.25``;
  ``coords1 = coords1.detach()`` each iteration, coordinates from ``torch.stack(coords[::-1])``
  of a meshgrid, ``.repeat(batch, 1, 1, 1)``;
- convex upsampling: ``mask.view(N, 1, 9, 2, 2, H, W)``, ``torch.softmax(mask, dim=2)``,
  ``F.unfold(2 * flow, [3, 3], padding=1)``, a seven-dimensional broadcast product summed over
  its third axis, ``permute(0, 1, 4, 2, 5, 3)`` and ``reshape``; the bilinear ``upflow``
  by ``F.interpolate(..., align_corners=True)`` for a warm start;
- the sequence loss: exponentially weighted L1 (``gamma ** (n - i - 1)``, ``flow_loss +=``
  from a float), a validity mask of ``(valid >= 0.5) & (mag < max_flow)`` broadcast by
  ``valid[:, None]``, the end-point error selected by ``epe.view(-1)[valid.view(-1)]`` and the
  1/3/5-pixel rates by ``(epe < 1).float().mean().item()``;
- the training script: photometric noise by ``np.random.uniform`` and ``torch.randn(*shape)``
  with ``.clamp(0.0, 255.0)``, ``AdamW`` with ``OneCycleLR(..., pct_start=0.05,
  cycle_momentum=False, anneal_strategy="linear")``, a disabled ``GradScaler`` from
  ``torch.cuda.amp`` (``scale(loss).backward()``, ``unscale_`` before ``clip_grad_norm_``,
  ``scaler.step(optimizer)``, ``update()``), a running-metrics
  logger, ``state_dict`` saved to a buffer by ``torch.save`` and loaded into a fresh model,
  then evaluation under ``torch.no_grad()`` in ``test_mode`` with a warm start (``flow_init``).

The lines changed for the port: the ``import`` lines and the gradient lines.
"""

from __future__ import annotations

from real_ports import (
    assert_records_agree,
    initializer,
    params_of,
    runs_with_draws,
    seeded_draws,  # noqa: F401 (an autouse fixture: every draw seeded)
)

RAFT_SOURCE = """
import io

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.cuda.amp import GradScaler


def coords_grid(batch, ht, wd):
    coords = torch.meshgrid(torch.arange(ht), torch.arange(wd), indexing="ij")
    coords = torch.stack(coords[::-1], dim=0).float()
    return coords[None].repeat(batch, 1, 1, 1)


def bilinear_sampler(img, coords):
    # grid_sample on pixel coordinates
    H, W = img.shape[-2:]
    xgrid, ygrid = coords.split([1, 1], dim=-1)
    xgrid = 2 * xgrid / (W - 1) - 1
    ygrid = 2 * ygrid / (H - 1) - 1
    grid = torch.cat([xgrid, ygrid], dim=-1)
    return F.grid_sample(img, grid, align_corners=True)


def upflow2(flow, mode="bilinear"):
    new_size = (2 * flow.shape[2], 2 * flow.shape[3])
    return 2 * F.interpolate(flow, size=new_size, mode=mode, align_corners=True)


class CorrBlock:
    def __init__(self, fmap1, fmap2, num_levels=2, radius=1):
        self.num_levels = num_levels
        self.radius = radius
        self.corr_pyramid = []

        corr = CorrBlock.corr(fmap1, fmap2)
        batch, h1, w1, dim, h2, w2 = corr.shape
        corr = corr.reshape(batch * h1 * w1, dim, h2, w2)
        self.corr_pyramid.append(corr)
        for i in range(self.num_levels - 1):
            corr = F.avg_pool2d(corr, 2, stride=2)
            self.corr_pyramid.append(corr)

    def __call__(self, coords):
        r = self.radius
        coords = coords.permute(0, 2, 3, 1)
        batch, h1, w1, _ = coords.shape

        out_pyramid = []
        for i in range(self.num_levels):
            corr = self.corr_pyramid[i]
            dx = torch.linspace(-r, r, 2 * r + 1)
            dy = torch.linspace(-r, r, 2 * r + 1)
            delta = torch.stack(torch.meshgrid(dy, dx, indexing="ij"), axis=-1)

            centroid_lvl = coords.reshape(batch * h1 * w1, 1, 1, 2) / 2**i
            delta_lvl = delta.view(1, 2 * r + 1, 2 * r + 1, 2)
            coords_lvl = centroid_lvl + delta_lvl

            corr = bilinear_sampler(corr, coords_lvl)
            corr = corr.view(batch, h1, w1, -1)
            out_pyramid.append(corr)

        out = torch.cat(out_pyramid, dim=-1)
        return out.permute(0, 3, 1, 2).contiguous().float()

    @staticmethod
    def corr(fmap1, fmap2):
        batch, dim, ht, wd = fmap1.shape
        fmap1 = fmap1.view(batch, dim, ht * wd)
        fmap2 = fmap2.view(batch, dim, ht * wd)
        corr = torch.matmul(fmap1.transpose(1, 2), fmap2)
        corr = corr.view(batch, ht, wd, 1, ht, wd)
        return corr / torch.sqrt(torch.tensor(dim).float())


def make_norm(norm_fn, planes):
    if norm_fn == "group":
        return nn.GroupNorm(num_groups=planes // 4, num_channels=planes)
    elif norm_fn == "batch":
        return nn.BatchNorm2d(planes)
    elif norm_fn == "instance":
        return nn.InstanceNorm2d(planes)
    elif norm_fn == "none":
        return nn.Sequential()
    raise ValueError(norm_fn)


class ResidualBlock(nn.Module):
    def __init__(self, in_planes, planes, norm_fn="group", stride=1):
        super(ResidualBlock, self).__init__()
        self.conv1 = nn.Conv2d(in_planes, planes, kernel_size=3, padding=1, stride=stride)
        self.conv2 = nn.Conv2d(planes, planes, kernel_size=3, padding=1)
        self.relu = nn.ReLU(inplace=True)
        self.norm1 = make_norm(norm_fn, planes)
        self.norm2 = make_norm(norm_fn, planes)
        if stride == 1 and in_planes == planes:
            self.downsample = None
        else:
            self.downsample = nn.Sequential(
                nn.Conv2d(in_planes, planes, kernel_size=1, stride=stride),
                make_norm(norm_fn, planes),
            )

    def forward(self, x):
        y = x
        y = self.relu(self.norm1(self.conv1(y)))
        y = self.relu(self.norm2(self.conv2(y)))
        if self.downsample is not None:
            x = self.downsample(x)
        return self.relu(x + y)


class BasicEncoder(nn.Module):
    def __init__(self, output_dim=16, norm_fn="batch", dropout=0.0):
        super(BasicEncoder, self).__init__()
        self.norm_fn = norm_fn
        self.conv1 = nn.Conv2d(3, 8, kernel_size=7, stride=2, padding=3)
        self.norm1 = make_norm(norm_fn, 8)
        self.relu1 = nn.ReLU(inplace=True)
        self.layer1 = ResidualBlock(8, 8, norm_fn, stride=1)
        self.layer2 = ResidualBlock(8, 12, norm_fn, stride=1)
        self.conv2 = nn.Conv2d(12, output_dim, kernel_size=1)
        self.dropout = nn.Dropout2d(p=dropout) if dropout > 0 else None
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, (nn.BatchNorm2d, nn.InstanceNorm2d, nn.GroupNorm)):
                if m.weight is not None:
                    nn.init.constant_(m.weight, 1)
                if m.bias is not None:
                    nn.init.constant_(m.bias, 0)

    def forward(self, x):
        is_list = isinstance(x, tuple) or isinstance(x, list)
        if is_list:
            batch_dim = x[0].shape[0]
            x = torch.cat(x, dim=0)
        x = self.relu1(self.norm1(self.conv1(x)))
        x = self.layer2(self.layer1(x))
        x = self.conv2(x)
        if self.training and self.dropout is not None:
            x = self.dropout(x)
        if is_list:
            x = torch.split(x, [batch_dim, batch_dim], dim=0)
        return x


class ConvGRU(nn.Module):
    def __init__(self, hidden_dim=16, input_dim=24):
        super(ConvGRU, self).__init__()
        self.convz = nn.Conv2d(hidden_dim + input_dim, hidden_dim, 3, padding=1)
        self.convr = nn.Conv2d(hidden_dim + input_dim, hidden_dim, 3, padding=1)
        self.convq = nn.Conv2d(hidden_dim + input_dim, hidden_dim, 3, padding=1)

    def forward(self, h, x):
        hx = torch.cat([h, x], dim=1)
        z = torch.sigmoid(self.convz(hx))
        r = torch.sigmoid(self.convr(hx))
        q = torch.tanh(self.convq(torch.cat([r * h, x], dim=1)))
        h = (1 - z) * h + z * q
        return h


class MotionEncoder(nn.Module):
    def __init__(self, cor_planes):
        super(MotionEncoder, self).__init__()
        self.convc1 = nn.Conv2d(cor_planes, 16, 1, padding=0)
        self.convf1 = nn.Conv2d(2, 8, 7, padding=3)
        self.convf2 = nn.Conv2d(8, 6, 3, padding=1)
        self.conv = nn.Conv2d(16 + 6, 16 - 2, 3, padding=1)

    def forward(self, flow, corr):
        cor = F.relu(self.convc1(corr))
        flo = F.relu(self.convf1(flow))
        flo = F.relu(self.convf2(flo))
        cor_flo = torch.cat([cor, flo], dim=1)
        out = F.relu(self.conv(cor_flo))
        return torch.cat([out, flow], dim=1)


class FlowHead(nn.Module):
    def __init__(self, input_dim=16, hidden_dim=16):
        super(FlowHead, self).__init__()
        self.conv1 = nn.Conv2d(input_dim, hidden_dim, 3, padding=1)
        self.conv2 = nn.Conv2d(hidden_dim, 2, 3, padding=1)
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x):
        return self.conv2(self.relu(self.conv1(x)))


class UpdateBlock(nn.Module):
    def __init__(self, args, hidden_dim=16, input_dim=8):
        super(UpdateBlock, self).__init__()
        cor_planes = args.corr_levels * (2 * args.corr_radius + 1) ** 2
        self.encoder = MotionEncoder(cor_planes)
        self.gru = ConvGRU(hidden_dim=hidden_dim, input_dim=16 + input_dim)
        self.flow_head = FlowHead(hidden_dim, hidden_dim=16)
        self.mask = nn.Sequential(
            nn.Conv2d(hidden_dim, 16, 3, padding=1),
            nn.ReLU(inplace=True),
            nn.Conv2d(16, 4 * 9, 1, padding=0),
        )

    def forward(self, net, inp, corr, flow):
        motion_features = self.encoder(flow, corr)
        inp = torch.cat([inp, motion_features], dim=1)
        net = self.gru(net, inp)
        delta_flow = self.flow_head(net)
        # scale mask to balence gradients
        mask = 0.25 * self.mask(net)
        return net, mask, delta_flow


class RAFT(nn.Module):
    def __init__(self, args):
        super(RAFT, self).__init__()
        self.args = args
        self.hidden_dim = hdim = 16
        self.context_dim = cdim = 8
        self.fnet = BasicEncoder(output_dim=16, norm_fn="instance", dropout=args.dropout)
        self.cnet = BasicEncoder(output_dim=hdim + cdim, norm_fn=args.cnet_norm)
        self.update_block = UpdateBlock(self.args, hidden_dim=hdim, input_dim=cdim)

    def freeze_bn(self):
        for m in self.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.eval()

    def initialize_flow(self, img):
        # flow is the difference of two coordinate grids, at half resolution
        N, C, H, W = img.shape
        coords0 = coords_grid(N, H // 2, W // 2)
        coords1 = coords_grid(N, H // 2, W // 2)
        return coords0, coords1

    def upsample_flow(self, flow, mask):
        # convex combination of a 3x3 neighbourhood, per output pixel
        N, _, H, W = flow.shape
        mask = mask.view(N, 1, 9, 2, 2, H, W)
        mask = torch.softmax(mask, dim=2)
        up_flow = F.unfold(2 * flow, [3, 3], padding=1)
        up_flow = up_flow.view(N, 2, 9, 1, 1, H, W)
        up_flow = torch.sum(mask * up_flow, dim=2)
        up_flow = up_flow.permute(0, 1, 4, 2, 5, 3)
        return up_flow.reshape(N, 2, 2 * H, 2 * W)

    def forward(self, image1, image2, iters=3, flow_init=None, test_mode=False):
        image1 = 2 * (image1 / 255.0) - 1.0
        image2 = 2 * (image2 / 255.0) - 1.0
        image1 = image1.contiguous()
        image2 = image2.contiguous()
        hdim, cdim = self.hidden_dim, self.context_dim

        fmap1, fmap2 = self.fnet([image1, image2])
        fmap1 = fmap1.float()
        fmap2 = fmap2.float()
        corr_fn = CorrBlock(fmap1, fmap2, num_levels=self.args.corr_levels,
                            radius=self.args.corr_radius)

        cnet = self.cnet(image1)
        net, inp = torch.split(cnet, [hdim, cdim], dim=1)
        net = torch.tanh(net)
        inp = torch.relu(inp)

        coords0, coords1 = self.initialize_flow(image1)
        if flow_init is not None:
            coords1 = coords1 + flow_init

        flow_predictions = []
        for itr in range(iters):
            coords1 = coords1.detach()
            corr = corr_fn(coords1)  # index correlation volume
            flow = coords1 - coords0
            net, up_mask, delta_flow = self.update_block(net, inp, corr, flow)
            coords1 = coords1 + delta_flow
            flow_up = self.upsample_flow(coords1 - coords0, up_mask)
            flow_predictions.append(flow_up)

        if test_mode:
            return coords1 - coords0, flow_up
        return flow_predictions


MAX_FLOW = 3.5


def sequence_loss(flow_preds, flow_gt, valid, gamma=0.8, max_flow=MAX_FLOW):
    n_predictions = len(flow_preds)
    flow_loss = 0.0
    # exlude invalid pixels and extremely large diplacements
    mag = torch.sum(flow_gt**2, dim=1).sqrt()
    valid = (valid >= 0.5) & (mag < max_flow)
    for i in range(n_predictions):
        i_weight = gamma ** (n_predictions - i - 1)
        i_loss = (flow_preds[i] - flow_gt).abs()
        flow_loss += i_weight * (valid[:, None] * i_loss).mean()
    epe = torch.sum((flow_preds[-1] - flow_gt) ** 2, dim=1).sqrt()
    epe = epe.view(-1)[valid.view(-1)]
    metrics = {
        "epe": epe.mean().item(),
        "1px": (epe < 1).float().mean().item(),
        "3px": (epe < 3).float().mean().item(),
        "5px": (epe < 5).float().mean().item(),
    }
    return flow_loss, metrics


class Logger:
    def __init__(self, model, scheduler, sum_freq):
        self.model, self.scheduler, self.sum_freq = model, scheduler, sum_freq
        self.total_steps = 0
        self.running_loss = {}

    def _print_training_status(self):
        metrics_data = [self.running_loss[k] / self.sum_freq for k in sorted(self.running_loss)]
        lr = self.scheduler.get_last_lr()[0]
        training_str = "[{:6d}, {:10.7f}] ".format(self.total_steps + 1, lr)
        metrics_str = ("{:10.4f}, " * len(metrics_data)).format(*metrics_data)
        print(training_str + metrics_str)
        record.append(metrics_data)
        for k in self.running_loss:
            self.running_loss[k] = 0.0

    def push(self, metrics):
        self.total_steps += 1
        for key in metrics:
            if key not in self.running_loss:
                self.running_loss[key] = 0.0
            self.running_loss[key] += metrics[key]
        if self.total_steps % self.sum_freq == self.sum_freq - 1:
            self._print_training_status()


def make_pair(batch, size, flow_xy):
    # the second frame is the first moved by a whole-pixel flow; the true flow is known
    image1 = torch.rand(batch, 3, size, size) * 255.0
    image2 = torch.roll(image1, shifts=(flow_xy[1], flow_xy[0]), dims=(2, 3))
    flow = torch.zeros(batch, 2, size, size)
    flow[:, 0] = float(flow_xy[0])
    flow[:, 1] = float(flow_xy[1])
    valid = torch.ones(batch, size, size)
    valid[:, :, : abs(flow_xy[0])] = 0.0  # the wrapped-around columns
    return image1, image2, flow, valid


class Args:
    corr_levels = 2
    corr_radius = 1
    dropout = 0.0
    cnet_norm = "batch"
    lr = 4e-4
    wdecay = 1e-4
    epsilon = 1e-8
    num_steps = 6
    iters = 3
    clip = 1.0
    gamma = 0.8
    add_noise = True
    mixed_precision = False


args = Args()
model = RAFT(args)
initialize(model)
model.train()
model.freeze_bn()

optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=args.wdecay,
                              eps=args.epsilon)
scheduler = torch.optim.lr_scheduler.OneCycleLR(
    optimizer, args.lr, args.num_steps + 100, pct_start=0.05, cycle_momentum=False,
    anneal_strategy="linear")
logger = Logger(model, scheduler, sum_freq=3)
scaler = GradScaler(enabled=args.mixed_precision)

shifts = [(1, 0), (2, 1), (-1, 2), (0, -1), (3, 0), (1, 1)]
for total_steps in range(args.num_steps):
    optimizer.zero_grad()
    image1, image2, flow, valid = make_pair(2, 16, shifts[total_steps])
    if args.add_noise:
        stdv = np.random.uniform(0.0, 5.0)
        image1 = (image1 + stdv * torch.randn(*image1.shape)).clamp(0.0, 255.0)
        image2 = (image2 + stdv * torch.randn(*image2.shape)).clamp(0.0, 255.0)

    flow_predictions = model(image1, image2, iters=args.iters)
    loss, metrics = sequence_loss(flow_predictions, flow, valid, args.gamma)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
    scaler.step(optimizer)
    scheduler.step()
    scaler.update()
    logger.push(metrics)
    record.append(loss.item())
    record.append(metrics)

record.append(params_of(model))

buffer = io.BytesIO()
torch.save(model.state_dict(), buffer)
buffer.seek(0)
restored = RAFT(args)
restored.load_state_dict(torch.load(buffer))
restored.eval()

with torch.no_grad():
    image1, image2, flow, valid = make_pair(1, 16, (1, 0))
    flow_low, flow_pr = restored(image1, image2, iters=2, test_mode=True)
    record.append(flow_pr.numpy().copy())
    warm, flow_pr = restored(image1, image2, iters=2, flow_init=flow_low, test_mode=True)
    record.append(flow_pr.numpy().copy())
    up = upflow2(flow_low)
    epe = torch.sum((flow_pr[0] - flow[0]) ** 2, dim=0).sqrt()
    record.append([epe.mean().item(), (up - flow_pr).abs().max().item()])
"""

RAFT_STEPS = [
    (
        "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n",
        "import retrograd as torch\nimport retrograd.nn as nn\n"
        "import retrograd.nn.functional as F\n",
    ),
    (
        "    scaler.scale(loss).backward()\n"
        "    scaler.unscale_(optimizer)\n"
        "    torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)\n"
        "    scaler.step(optimizer)\n",
        "    grads = scaler.scale(loss).backward()\n"
        "    scaler.unscale_(optimizer, grads)\n"
        "    torch.nn.utils.clip_grad_norm_(grads, model.parameters(), args.clip)\n"
        "    scaler.step(optimizer, grads)\n",
    ),
]


def test_raft_style_flow_estimator_trains_and_evaluates_as_torch(capsys):
    (theirs, ours), (their_log, our_log) = runs_with_draws(
        RAFT_SOURCE, RAFT_STEPS, capsys, 6701, initialize=initializer(), params_of=params_of
    )
    assert len(theirs) == 2 + 2 * 6 + 4  # two logged summaries, 6 steps, params, evaluation
    assert their_log.count("\n") == 2 and their_log.split()[0] == our_log.split()[0]
    # The biases of the frame encoder's convolutions feed an InstanceNorm2d, which takes the
    # mean of each channel out: their true gradient is zero, and AdamW follows the rounding
    # noise there (measured: a 3e-5 difference after 6 steps on the torch inner backend).
    assert_records_agree(ours, theirs, rtol=2e-4, atol=2e-5, skip=_BIASES_BEFORE_INSTANCE_NORM)


_BIASES_BEFORE_INSTANCE_NORM = {
    "0.fnet.conv1.bias",
    *(f"0.fnet.layer{i}.conv{j}.bias" for i in (1, 2) for j in (1, 2)),
    "0.fnet.layer2.downsample.0.bias",
}
