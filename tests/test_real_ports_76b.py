"""Real ports, round 76 (the harness: ``tests/real_ports.py``): time-series anomaly detection
with an LSTM autoencoder, a program written here in the style of the PyTorch LSTM-autoencoder
tutorials on ECG and sensor data and of EncDec-AD (Malhotra et al.: an encoder LSTM whose last
hidden state is repeated over the window and decoded by a second LSTM, the reconstruction
errors of normal windows fitted by a Gaussian, a threshold on the Mahalanobis score), on a
synthetic multivariate series with injected anomalous segments; two configurations (the
window's last hidden state repeated, ``repeat``, or fed back step by step, ``feedback``),
each run under torch and, ported, under retrograd from the same weights and draws, every
record compared.

It reaches:

- the data: a two-channel series from ``torch.sin``/``torch.cos`` of ``torch.arange`` plus
  ``torch.randn`` noise, anomalies injected by slice assignment ``series[a:b, 0] += 1.5`` and
  a labels tensor filled by ``labels[a:b] = 1``, standardisation by the training part's
  ``mean(dim=0)``/``std(dim=0, unbiased=True)``, sliding windows by ``Tensor.unfold(0, w,
  s)`` and ``permute``, window labels by ``amax(dim=1)``, normal training windows chosen by a
  boolean index ``windows[window_labels == 0]``;
- the model: an encoder of two stacked ``nn.LSTM(batch_first=True)``, its ``(hidden_n,
  cell_n)`` tuple unpacked and ``hidden_n.reshape``-d, the latent ``unsqueeze(1).repeat(1,
  seq_len, 1)`` or an ``nn.LSTMCell`` decoder looping over reversed time with its own output
  fed back (``torch.stack(..., dim=1).flip(1)``), an ``nn.Linear`` output layer;
- training: ``nn.L1Loss(reduction="sum")``, minibatches in the order of
  ``torch.argsort(torch.rand(n))``, ``Adam`` with ``StepLR``, ``clip_grad_norm_``, the best
  model kept by ``copy.deepcopy(state_dict())``;
- scoring under ``torch.no_grad()``: per-time-step absolute errors, their mean vector and
  covariance (``torch.cov`` of ``errors.T``, plus ``1e-3 * torch.eye``), the Mahalanobis score
  by ``torch.linalg.solve`` and ``torch.einsum("ntd,ntd->nt", ...)``, per-point scores from
  overlapping windows accumulated by ``index_add_`` and divided by a count from
  ``torch.bincount``, the threshold as ``torch.quantile(val_scores, 0.95)``, predictions
  ``(scores > threshold)``, point-adjusted predictions over anomaly segments found by
  ``torch.diff`` of a zero-padded label and ``torch.nonzero``, ``precision``/``recall``/``F1``
  from ``&`` and ``~`` of bool tensors, ``.sum().item()`` counts, and ``torch.topk`` of the
  scores;
- the checkpoint: ``torch.save`` of the model's ``state_dict`` with the fitted ``mu``/``sigma``
  to a buffer, ``torch.load``, ``load_state_dict`` into a fresh model, its scores again.

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

LSTM_AE_SOURCE = """import copy
import io

import torch
import torch.nn as nn


def make_series(n=160, anomalies=((70, 78), (120, 126))):
    t = torch.arange(n, dtype=torch.float32)
    series = torch.stack([torch.sin(2 * math.pi * t / 16), torch.cos(2 * math.pi * t / 24)], 1)
    series = series + 0.05 * torch.randn(n, 2)
    labels = torch.zeros(n, dtype=torch.long)
    for a, b in anomalies:
        series[a:b, 0] += 1.5
        series[a:b, 1] *= -1.0
        labels[a:b] = 1
    return series, labels


class Encoder(nn.Module):
    def __init__(self, seq_len, n_features, embedding_dim=8):
        super(Encoder, self).__init__()
        self.seq_len, self.n_features = seq_len, n_features
        self.embedding_dim, self.hidden_dim = embedding_dim, 2 * embedding_dim
        self.rnn1 = nn.LSTM(input_size=n_features, hidden_size=self.hidden_dim, num_layers=1,
                            batch_first=True)
        self.rnn2 = nn.LSTM(input_size=self.hidden_dim, hidden_size=embedding_dim,
                            num_layers=1, batch_first=True)

    def forward(self, x):
        x, (_, _) = self.rnn1(x)
        x, (hidden_n, cell_n) = self.rnn2(x)
        return hidden_n.reshape((-1, self.embedding_dim)), cell_n.squeeze(0)


class Decoder(nn.Module):
    def __init__(self, seq_len, input_dim=8, n_features=2):
        super(Decoder, self).__init__()
        self.seq_len, self.input_dim = seq_len, input_dim
        self.hidden_dim, self.n_features = 2 * input_dim, n_features
        self.rnn1 = nn.LSTM(input_size=input_dim, hidden_size=input_dim, num_layers=1,
                            batch_first=True)
        self.rnn2 = nn.LSTM(input_size=input_dim, hidden_size=self.hidden_dim, num_layers=1,
                            batch_first=True)
        self.output_layer = nn.Linear(self.hidden_dim, n_features)

    def forward(self, x, cell=None):
        x = x.unsqueeze(1).repeat(1, self.seq_len, 1)
        x, (hidden_n, cell_n) = self.rnn1(x)
        x, (hidden_n, cell_n) = self.rnn2(x)
        return self.output_layer(x)


class FeedbackDecoder(nn.Module):
    # EncDec-AD: the decoder starts from the encoder's state and reconstructs the window in
    # reverse order, each step fed its own previous output
    def __init__(self, seq_len, input_dim=8, n_features=2):
        super().__init__()
        self.seq_len = seq_len
        self.cell = nn.LSTMCell(n_features, input_dim)
        self.output_layer = nn.Linear(input_dim, n_features)

    def forward(self, h, cell):
        outputs = []
        x_hat = self.output_layer(h)
        for _ in range(self.seq_len):
            outputs.append(x_hat)
            h, cell = self.cell(x_hat, (h, cell))
            x_hat = self.output_layer(h)
        return torch.stack(outputs, dim=1).flip(1)


class RecurrentAutoencoder(nn.Module):
    def __init__(self, seq_len, n_features, embedding_dim=8):
        super(RecurrentAutoencoder, self).__init__()
        self.encoder = Encoder(seq_len, n_features, embedding_dim)
        if DECODER == "feedback":
            self.decoder = FeedbackDecoder(seq_len, embedding_dim, n_features)
        else:
            self.decoder = Decoder(seq_len, embedding_dim, n_features)

    def forward(self, x):
        h, c = self.encoder(x)
        return self.decoder(h, c)


WINDOW, STRIDE = 12, 4
series, labels = make_series()
train_end = 64
mean, std = series[:train_end].mean(dim=0), series[:train_end].std(dim=0, unbiased=True)
series = (series - mean) / std
windows = series.unfold(0, WINDOW, STRIDE).permute(0, 2, 1).contiguous()
window_labels = labels.unfold(0, WINDOW, STRIDE).amax(dim=1)
starts = torch.arange(windows.shape[0]) * STRIDE
train_windows = windows[(window_labels == 0) & (starts + WINDOW <= train_end)]
val_windows = windows[(window_labels == 0) & (starts >= train_end)][:6]
record.append([windows.shape[0], train_windows.shape[0], val_windows.shape[0],
               int(window_labels.sum())])

model = RecurrentAutoencoder(WINDOW, 2, 8)
initialize(model)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)
criterion = nn.L1Loss(reduction="sum")
best_loss, best_model_wts = 10000.0, None

for epoch in range(1, 5):
    model = model.train()
    train_losses = []
    order = torch.argsort(torch.rand(train_windows.shape[0]))
    for i in range(0, len(order), 6):
        seq_true = train_windows[order[i:i + 6]]
        optimizer.zero_grad()
        seq_pred = model(seq_true)
        loss = criterion(seq_pred, seq_true)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=20.0)
        optimizer.step()
        train_losses.append(loss.item())
    scheduler.step()
    model = model.eval()
    with torch.no_grad():
        val_loss = criterion(model(val_windows), val_windows).item() / len(val_windows)
    train_loss = sum(train_losses) / len(train_windows)
    if val_loss < best_loss:
        best_loss, best_model_wts = val_loss, copy.deepcopy(model.state_dict())
    record.append(train_losses + [val_loss, scheduler.get_last_lr()[0]])
    record.append(params_of(model))
    print(f"Epoch {epoch}: train loss {train_loss:.3f} val loss {val_loss:.3f}")

model.load_state_dict(best_model_wts)
model.eval()


def fit_errors(model, windows):
    errors = torch.abs(model(windows) - windows)
    flat = errors.reshape(-1, errors.shape[-1])
    mu = flat.mean(dim=0)
    sigma = torch.cov(flat.T) + 1e-3 * torch.eye(flat.shape[1])
    return mu, sigma


def window_scores(model, windows, mu, sigma):
    centred = torch.abs(model(windows) - windows) - mu
    solved = torch.linalg.solve(sigma, centred.reshape(-1, centred.shape[-1]).T).T
    return torch.einsum("ntd,ntd->nt", centred, solved.reshape(centred.shape))


def point_scores(scores, n):
    index = (starts.unsqueeze(1) + torch.arange(WINDOW)).reshape(-1)
    total = torch.zeros(n).index_add_(0, index, scores.reshape(-1))
    count = torch.bincount(index, minlength=n).clamp(min=1)
    return total / count


def point_adjust(pred, gt):
    padded = torch.cat([torch.zeros(1, dtype=torch.long), gt, torch.zeros(1, dtype=torch.long)])
    edges = torch.diff(padded)
    begins = torch.nonzero(edges == 1).squeeze(1)
    ends = torch.nonzero(edges == -1).squeeze(1)
    adjusted = pred.clone()
    for a, b in zip(begins.tolist(), ends.tolist()):
        if adjusted[a:b].any():
            adjusted[a:b] = True
    return adjusted


def prf(pred, gt):
    gt = gt.bool()
    tp = (pred & gt).sum().item()
    fp = (pred & ~gt).sum().item()
    fn = (~pred & gt).sum().item()
    precision = tp / max(tp + fp, 1)
    recall = tp / max(tp + fn, 1)
    f1 = 2 * precision * recall / max(precision + recall, 1e-8)
    return [tp, fp, fn, precision, recall, f1]


with torch.no_grad():
    mu, sigma = fit_errors(model, train_windows)
    val_scores = window_scores(model, val_windows, mu, sigma)
    threshold = torch.quantile(val_scores.reshape(-1), 0.95)
    scores = point_scores(window_scores(model, windows, mu, sigma), series.shape[0])
    gt = labels[:scores.shape[0]]
    pred = scores > threshold
    record.append({"mu": mu.numpy().copy(), "sigma": sigma.numpy().copy()})
    record.append(scores.numpy().copy())
    record.append(prf(pred, gt) + prf(point_adjust(pred, gt), gt) + [threshold.item()])
    top = torch.topk(scores, 5)
    record.append({"values": top.values.numpy().copy(), "indices": sorted(top.indices.tolist())})
print("threshold {:.3f}".format(threshold.item()))

buffer = io.BytesIO()
torch.save({"state_dict": model.state_dict(), "mu": mu, "sigma": sigma}, buffer)
buffer.seek(0)
checkpoint = torch.load(buffer)
restored = RecurrentAutoencoder(WINDOW, 2, 8)
restored.load_state_dict(checkpoint["state_dict"])
restored.eval()
with torch.no_grad():
    again = window_scores(restored, windows[:4], checkpoint["mu"], checkpoint["sigma"])
    record.append(again.numpy().copy())
"""

LSTM_AE_STEPS = [
    (
        "import torch\nimport torch.nn as nn\n",
        "import retrograd as torch\nimport retrograd.nn as nn\n",
    ),
    (
        "        loss.backward()\n"
        "        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=20.0)\n"
        "        optimizer.step()\n",
        "        grads = loss.backward()\n"
        "        torch.nn.utils.clip_grad_norm_(grads, model.parameters(), max_norm=20.0)\n"
        "        optimizer.step(grads)\n",
    ),
]


@pytest.mark.parametrize("decoder", ["repeat", "feedback"])
def test_lstm_autoencoder_anomaly_detection_as_torch(capsys, decoder):
    (theirs, ours), (their_log, our_log) = runs_with_draws(
        LSTM_AE_SOURCE,
        LSTM_AE_STEPS,
        capsys,
        7601,
        initialize=initializer(),
        params_of=params_of,
        DECODER=decoder,
    )
    assert len(theirs) == 1 + 2 * 4 + 5
    assert theirs[0][1] >= 6 and theirs[0][3] > 0
    assert their_log == our_log and their_log.count("\n") == 5
    assert_records_agree(ours, theirs, rtol=2e-4, atol=2e-5)
