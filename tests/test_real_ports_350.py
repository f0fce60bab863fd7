# ruff: noqa: E501  (the programs are kept as their authors wrote them: long lines)
"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):
the pointer-generator network of atulkum/pointer_summarizer (``training_ptr_gen/model.py`` as
written at commit 0f8d06a, and ``train.py``'s ``train_one_batch`` of that time), trained a few
batches against torch's run of the same code from the same weights and batches.

What it exercises: a bidirectional ``nn.LSTM`` over ``pack_padded_sequence(embedded, seq_lens,
batch_first=True)`` with NumPy lengths, ``pad_packed_sequence`` of the packed encoder output at
every decoder step, ``lstm._all_weights`` walked by name in ``init_lstm_wt`` (``.data.uniform_``,
``.data[start:end].fill_``), the decoder's embedding tied to the encoder's by assigning the
``Parameter`` (so the optimizer's list names it twice and ``load_state_dict`` must keep the tie),
Bahdanau attention renormalised by the padding mask, ``F.tanh``/``F.sigmoid``, the copy gate
``p_gen`` mixing the vocabulary distribution with the attention one through
``torch.cat([vocab_dist_, extra_zeros], 1).scatter_add(1, enc_batch_extend_vocab, attn_dist_)``
into the extended vocabulary, teacher forcing, ``torch.gather(...).squeeze()`` of the gold
probabilities, the masked per-step losses stacked and divided by the decoder lengths, the
deprecated ``clip_grad_norm`` per module and Adagrad with ``initial_accumulator_value`` (its
``setup_train`` as the repository's later ``train.py`` writes it, ``optim.Adagrad`` for its
``from torch.optim import Adagrad``; the first one used ``custom_adagrad.AdagradCustom``).

``data_util.config`` is a small namespace here; the ``Batcher`` over CNN/DailyMail is a seeded
NumPy batch with the fields ``train_one_batch`` reads (article OOVs numbered past the
vocabulary, as ``data.article2ids`` numbers them); ``use_cuda = False`` (so the
``torch.cuda.manual_seed_all`` branch is left out); the TensorBoard writer
and checkpoint saving are left out; ``loss.data[0]``, which modern torch refuses (``invalid index
of a 0-dim tensor``), reads ``loss.item()``. ``initialize(...)`` gives the port torch's initial
weights. The lines changed: the ``import`` lines and the gradient lines (``grads =
loss.backward()``, ``clip_grad_norm(grads, ...)``, ``self.optimizer.step(grads)``).
"""

from __future__ import annotations

import types

import numpy as np
import torch

import retrograd as rg
from real_ports import assert_records_agree, initializer, port, run_source

config = types.SimpleNamespace(
    vocab_size=17,
    emb_dim=8,
    hidden_dim=6,
    max_dec_steps=5,
    pointer_gen=True,
    is_coverage=False,
    eps=1e-12,
    max_grad_norm=2.0,
    lr=0.15,
    adagrad_init_acc=0.1,
    rand_unif_init_mag=0.02,
    trunc_norm_init_std=1e-4,
    batch_size=3,
)


def make_batch(rng: np.random.Generator) -> types.SimpleNamespace:
    """One batch as ``data_util.batcher.Batch`` lays it out: padded id arrays, lengths, masks;
    article words outside the vocabulary get ids ``vocab_size + i`` in the extended ids."""
    batch_size, max_enc, max_dec = config.batch_size, 7, 5
    enc_lens = rng.integers(3, max_enc + 1, batch_size).astype(np.int32)
    dec_lens = rng.integers(2, max_dec + 1, batch_size).astype(np.int32)
    enc_batch = np.zeros((batch_size, max_enc), dtype=np.int32)
    enc_extend = np.zeros((batch_size, max_enc), dtype=np.int32)
    enc_mask = np.zeros((batch_size, max_enc), dtype=np.float32)
    dec_batch = np.zeros((batch_size, max_dec), dtype=np.int32)
    target_batch = np.zeros((batch_size, max_dec), dtype=np.int32)
    dec_mask = np.zeros((batch_size, max_dec), dtype=np.float32)
    max_art_oovs = 2
    for i in range(batch_size):
        ids = rng.integers(4, config.vocab_size, enc_lens[i])
        extended = ids.copy()
        oov = rng.random(enc_lens[i]) < 0.3  # UNK (id 0) in the vocabulary ids
        extended[oov] = config.vocab_size + rng.integers(0, max_art_oovs, oov.sum())
        ids[oov] = 0
        enc_batch[i, : enc_lens[i]] = ids
        enc_extend[i, : enc_lens[i]] = extended
        enc_mask[i, : enc_lens[i]] = 1
        # the summary copies words of the article (OOVs included) after START (id 2)
        summary = extended[rng.integers(0, enc_lens[i], dec_lens[i])]
        dec_batch[i, 0] = 2
        dec_batch[i, 1 : dec_lens[i]] = np.where(summary[:-1] >= config.vocab_size, 0, summary[:-1])
        target_batch[i, : dec_lens[i]] = summary
        dec_mask[i, : dec_lens[i]] = 1
    return types.SimpleNamespace(
        enc_batch=enc_batch,
        enc_lens=enc_lens,
        enc_padding_mask=enc_mask,
        enc_batch_extend_vocab=enc_extend,
        max_art_oovs=max_art_oovs,
        dec_batch=dec_batch,
        dec_padding_mask=dec_mask,
        dec_lens=dec_lens,
        target_batch=target_batch,
    )


POINTER_GENERATOR_SOURCE = """
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence
from numpy import random
use_cuda = False

random.seed(123)
torch.manual_seed(123)

def init_lstm_wt(lstm):
    for names in lstm._all_weights:
        for name in names:
            if name.startswith('weight_'):
                wt = getattr(lstm, name)
                wt.data.uniform_(-config.rand_unif_init_mag, config.rand_unif_init_mag)
            elif name.startswith('bias_'):
                # set forget bias to 1
                bias = getattr(lstm, name)
                n = bias.size(0)
                start, end = n // 4, n // 2
                bias.data.fill_(0.)
                bias.data[start:end].fill_(1.)

def init_linear_wt(linear):
    linear.weight.data.normal_(std=config.trunc_norm_init_std)
    if linear.bias is not None:
        linear.bias.data.normal_(std=config.trunc_norm_init_std)

def init_wt_normal(wt):
    wt.data.normal_(std=config.trunc_norm_init_std)

def init_wt_unif(wt):
    wt.data.uniform_(-config.rand_unif_init_mag, config.rand_unif_init_mag)

class Encoder(nn.Module):
    def __init__(self):
        super(Encoder, self).__init__()
        self.embedding = nn.Embedding(config.vocab_size, config.emb_dim)
        init_wt_normal(self.embedding.weight)

        self.lstm = nn.LSTM(config.emb_dim, config.hidden_dim, num_layers=1, batch_first=True, bidirectional=True)
        init_lstm_wt(self.lstm)

    #seq_lens should be in descending order
    def forward(self, input, seq_lens):
        embedded = self.embedding(input)

        packed = pack_padded_sequence(embedded, seq_lens, batch_first=True)
        output, hidden = self.lstm(packed)

        return output, hidden

class ReduceState(nn.Module):
    def __init__(self):
        super(ReduceState, self).__init__()

        self.reduce_h = nn.Linear(config.hidden_dim * 2, config.hidden_dim)
        init_linear_wt(self.reduce_h)
        self.reduce_c = nn.Linear(config.hidden_dim * 2, config.hidden_dim)
        init_linear_wt(self.reduce_c)

    def forward(self, hidden):
        h, c = hidden # h, c dim = 2 x b x hidden_dim
        hidden_reduced_h = F.relu(self.reduce_h(h.view(-1, config.hidden_dim * 2)))
        hidden_reduced_c = F.relu(self.reduce_c(c.view(-1, config.hidden_dim * 2)))

        return (hidden_reduced_h.unsqueeze(0), hidden_reduced_c.unsqueeze(0)) # h, c dim = 1 x b x hidden_dim

class Attention(nn.Module):
    def __init__(self):
        super(Attention, self).__init__()
        # attention
        self.W_h = nn.Linear(config.hidden_dim * 2, config.hidden_dim*2, bias=False)
        self.decode_proj = nn.Linear(config.hidden_dim * 2, config.hidden_dim * 2)
        self.v = nn.Linear(config.hidden_dim * 2, 1, bias=False)

    def forward(self, s_t_hat, encoder_outputs, enc_padding_mask):
        h, seq_lens = pad_packed_sequence(encoder_outputs, batch_first=True)  # h dim = B x t_k x n
        h = h.contiguous()
        b, t_k, n = list(h.size())
        h = h.view(-1, n)  # B * t_k x 2*hidden_dim
        encoder_feature = self.W_h(h)

        dec_fea = self.decode_proj(s_t_hat) # B x 2*hidden_dim
        dec_fea_expanded = dec_fea.unsqueeze(1).expand(b, t_k, n).contiguous() # B x t_k x 2*hidden_dim
        dec_fea_expanded = dec_fea_expanded.view(-1, n)  # B * t_k x 2*hidden_dim

        e = F.tanh(encoder_feature + dec_fea_expanded) # B * t_k x 2*hidden_dim
        scores = self.v(e)  # B * t_k x 1
        scores = scores.view(-1, t_k)  # B x t_k

        attn_dist_ = F.softmax(scores, dim=1)*enc_padding_mask # B x t_k
        normalization_factor = attn_dist_.sum(1, keepdim=True)
        attn_dist = attn_dist_ / normalization_factor

        attn_dist = attn_dist.unsqueeze(1)  # B x 1 x t_k
        h = h.view(-1, t_k, n)  # B x t_k x 2*hidden_dim
        c_t = torch.bmm(attn_dist, h)  # B x 1 x n
        c_t = c_t.view(-1, config.hidden_dim * 2)  # B x 2*hidden_dim

        attn_dist = attn_dist.view(-1, t_k)  # B x t_k

        return c_t, attn_dist

class Decoder(nn.Module):
    def __init__(self):
        super(Decoder, self).__init__()
        self.attention_network = Attention()
        # decoder
        self.embedding = nn.Embedding(config.vocab_size, config.emb_dim)
        init_wt_normal(self.embedding.weight)

        self.x_context = nn.Linear(config.hidden_dim * 2 + config.emb_dim, config.emb_dim)

        self.lstm = nn.LSTM(config.emb_dim, config.hidden_dim, num_layers=1, batch_first=True, bidirectional=False)
        init_lstm_wt(self.lstm)

        if config.pointer_gen:
            self.p_gen_linear = nn.Linear(config.hidden_dim * 4 + config.emb_dim, 1)

        #p_vocab
        self.out1 = nn.Linear(config.hidden_dim * 3, config.hidden_dim)
        self.out2 = nn.Linear(config.hidden_dim, config.vocab_size)
        init_linear_wt(self.out2)

    def forward(self, y_t_1, s_t_1, encoder_outputs, enc_padding_mask, c_t_1, extra_zeros, enc_batch_extend_vocab):
        y_t_1_embd = self.embedding(y_t_1)

        x = self.x_context(torch.cat((c_t_1, y_t_1_embd), 1))
        lstm_out, s_t = self.lstm(x.unsqueeze(1), s_t_1)

        h_decoder, c_decoder = s_t
        s_t_hat = torch.cat((h_decoder.view(-1, config.hidden_dim),
                             c_decoder.view(-1, config.hidden_dim)), 1)  # B x 2*hidden_dim
        c_t, attn_dist = self.attention_network(s_t_hat, encoder_outputs, enc_padding_mask)

        p_gen = None
        if config.pointer_gen:
            p_gen_input = torch.cat((c_t, s_t_hat, x), 1)  # B x (2*2*hidden_dim + emb_dim)
            p_gen = self.p_gen_linear(p_gen_input)
            p_gen = F.sigmoid(p_gen)

        output = torch.cat((lstm_out.view(-1, config.hidden_dim), c_t), 1) # B x hidden_dim * 3
        output = self.out1(output) # B x hidden_dim

        output = F.relu(output)

        output = self.out2(output) # B x vocab_size
        vocab_dist = F.softmax(output, dim=1)

        if config.pointer_gen:
            vocab_dist_ = p_gen * vocab_dist
            attn_dist_ = (1 - p_gen) * attn_dist

            if extra_zeros is not None:
                vocab_dist_ = torch.cat([vocab_dist_, extra_zeros], 1)

            final_dist = vocab_dist_.scatter_add(1, enc_batch_extend_vocab, attn_dist_)
        else:
            final_dist = vocab_dist

        return final_dist, s_t, c_t

class Model(object):
    def __init__(self, model_file_path=None):
        encoder = Encoder()
        decoder = Decoder()
        reduce_state = ReduceState()

        # shared the embedding between encoder and decoder
        decoder.embedding.weight = encoder.embedding.weight

        if use_cuda:
            encoder = encoder.cuda()
            decoder = decoder.cuda()
            reduce_state = reduce_state.cuda()

        self.encoder = encoder
        self.decoder = decoder
        self.reduce_state = reduce_state
        if model_file_path is not None:
            state = torch.load(model_file_path, map_location= lambda storage, location: storage)
            self.encoder.load_state_dict(state['encoder_state_dict'])
            self.decoder.load_state_dict(state['decoder_state_dict'])
            self.reduce_state.load_state_dict(state['reduce_state_dict'])

# -- train.py ---------------------------------------------------------------------------------
import numpy as np
from torch import optim
from torch.autograd import Variable
from torch.nn.utils import clip_grad_norm

class Train(object):
    def __init__(self):
        self.batch_size = config.batch_size

    def setup_train(self, model_file_path=None):
        self.model = Model(model_file_path)

        params = list(self.model.encoder.parameters()) + list(self.model.decoder.parameters()) + \\
                 list(self.model.reduce_state.parameters())
        initial_lr = config.lr_coverage if config.is_coverage else config.lr
        self.optimizer = optim.Adagrad(params, lr=initial_lr, initial_accumulator_value=config.adagrad_init_acc)

        start_iter, start_loss = 0, 0

        return start_iter, start_loss

    def train_one_batch(self, batch):
        enc_lens_idx = np.argsort(batch.enc_lens)[::-1]

        enc_batch = Variable(torch.from_numpy(batch.enc_batch[enc_lens_idx]).long())
        enc_padding_mask = Variable(torch.from_numpy(batch.enc_padding_mask[enc_lens_idx])).float()
        enc_lens = batch.enc_lens[enc_lens_idx]
        extra_zeros = None
        enc_batch_extend_vocab = None

        if config.pointer_gen:
            enc_batch_extend_vocab = Variable(torch.from_numpy(batch.enc_batch_extend_vocab[enc_lens_idx]).long())
            #max_art_oovs is the max over all the article oov list in the batch
            if batch.max_art_oovs > 0:
                extra_zeros = Variable(torch.zeros((self.batch_size, batch.max_art_oovs)))

        dec_batch = Variable(torch.from_numpy(batch.dec_batch[enc_lens_idx]).long())
        dec_padding_mask = Variable(torch.from_numpy(batch.dec_padding_mask[enc_lens_idx])).float()
        dec_lens = batch.dec_lens[enc_lens_idx]
        max_dec_len = np.max(dec_lens)
        dec_lens_var = Variable(torch.from_numpy(dec_lens)).float()

        target_batch = Variable(torch.from_numpy(batch.target_batch[enc_lens_idx])).long()

        c_t_1 = Variable(torch.zeros((self.batch_size, 2 * config.hidden_dim)))

        self.optimizer.zero_grad()

        encoder_outputs, encoder_hidden = self.model.encoder(enc_batch, enc_lens)
        s_t_1 = self.model.reduce_state(encoder_hidden)

        step_losses = []
        for di in range(min(max_dec_len, config.max_dec_steps)):
            y_t_1 = dec_batch[:, di]  # Teacher forcing
            final_dist, s_t_1,  c_t_1 = self.model.decoder(y_t_1, s_t_1,
                                                        encoder_outputs, enc_padding_mask, c_t_1,
                                                        extra_zeros, enc_batch_extend_vocab)
            target = target_batch[:, di]
            gold_probs = torch.gather(final_dist, 1, target.unsqueeze(1)).squeeze()
            step_loss = -torch.log(gold_probs + config.eps)
            step_mask = dec_padding_mask[:, di]
            step_loss = step_loss*step_mask
            step_losses.append(step_loss)

        sum_step_losses = torch.sum(torch.stack(step_losses, 1), 1)
        batch_avg_loss = sum_step_losses/dec_lens_var
        loss = torch.mean(batch_avg_loss)
        loss.backward()

        clip_grad_norm(self.model.encoder.parameters(), config.max_grad_norm)
        clip_grad_norm(self.model.decoder.parameters(), config.max_grad_norm)
        clip_grad_norm(self.model.reduce_state.parameters(), config.max_grad_norm)

        self.optimizer.step()

        return loss.item()

train_processor = Train()
train_processor.setup_train()
model = train_processor.model
initialize(model.encoder)
initialize(model.decoder)
initialize(model.reduce_state)
losses = []
for batch in batches:
    losses.append(train_processor.train_one_batch(batch))
record.append(losses)
for module in (model.encoder, model.decoder, model.reduce_state):
    record.append({k: v.detach().numpy() for k, v in module.state_dict().items()})
record.append(bool(model.decoder.embedding.weight is model.encoder.embedding.weight))
"""

POINTER_GENERATOR_STEPS = [
    (
        "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n",
        "import retrograd as torch\nimport retrograd.nn as nn\nimport retrograd.nn.functional as F\n",
    ),
    ("from torch import optim\n", "from retrograd import optim\n"),
    (
        "        loss.backward()\n\n"
        "        clip_grad_norm(self.model.encoder.parameters(), config.max_grad_norm)\n"
        "        clip_grad_norm(self.model.decoder.parameters(), config.max_grad_norm)\n"
        "        clip_grad_norm(self.model.reduce_state.parameters(), config.max_grad_norm)\n\n"
        "        self.optimizer.step()\n",
        "        grads = loss.backward()\n\n"
        "        clip_grad_norm(grads, self.model.encoder.parameters(), config.max_grad_norm)\n"
        "        clip_grad_norm(grads, self.model.decoder.parameters(), config.max_grad_norm)\n"
        "        clip_grad_norm(grads, self.model.reduce_state.parameters(), config.max_grad_norm)\n\n"
        "        self.optimizer.step(grads)\n",
    ),
]


def test_pointer_generator_trains_with_copy_attention_as_torch():
    initialize, records = initializer(), []
    rng = np.random.default_rng(350)
    batches = [make_batch(rng) for _ in range(4)]
    for lib in (torch, rg):
        record = []
        text = (
            POINTER_GENERATOR_SOURCE
            if lib is torch
            else port(POINTER_GENERATOR_SOURCE, POINTER_GENERATOR_STEPS).replace(
                "from torch.", "from retrograd."
            )
        )
        run_source(text, lib, record=record, initialize=initialize, config=config, batches=batches)
        records.append(record)
    theirs, ours = records
    assert theirs[-1] is True
    assert_records_agree(ours, theirs, rtol=1e-4, atol=1e-6)
