"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):
a BERT sequence classifier in plain torch with its fine-tuning loop, written here in the style of
huggingface/transformers (its 4.3x eager ``modeling_bert.py``, ``optimization.py`` and
``run_glue_no_trainer.py``), kept small:

- the model: embeddings with ``register_buffer("position_ids", torch.arange(n).expand((1,
  -1)), persistent=False)`` and a ``token_type_ids`` buffer of ``torch.zeros(self.position_ids
  .size(), dtype=torch.long)`` sliced and ``expand``-ed, ``embeddings += ...``; self-attention
  splitting heads by ``x.size()[:-1] + (heads, head_size)`` viewed and ``permute(0, 2, 1, 3)``,
  the ``relative_key``/``relative_key_query`` position scores by ``torch.einsum(
  "bhld,lrd->bhlr")`` (and ``"bhrd,lrd->bhlr"``) over a ``distance_embedding`` of ``arange(...)
  .view(-1, 1) - arange(...).view(1, -1)``, ``head_mask``, ``output_attentions``; residual
  ``LayerNorm``s; a chunked feed-forward (``inspect.signature(fn).parameters``, ``chunk(n,
  dim=dim)``, ``zip(*pieces)``); gradient checkpointing through
  ``torch.utils.checkpoint.checkpoint(run_layer, ..., use_reentrant=False)``; the additive
  mask (``[:, None, None, :]``, ``(1.0 - mask) * torch.finfo(dtype).min``); the head mask
  unsqueezed and ``expand``-ed per layer; a pooler on ``hidden[:, 0]``; ``problem_type``
  decided from ``labels.dtype == torch.long`` (regression / single-label / multi-label
  losses); weights initialised through ``self.apply`` by ``weight.data.normal_``,
  ``weight.data[padding_idx].zero_()`` and ``fill_(1.0)``; the HF parameter names (``bert.``,
  ``LayerNorm``, ``attention.self.key``) kept;
- the fine-tuning loop: ``bias``/``LayerNorm.weight`` left out of weight decay in ``AdamW``
  groups, linear and cosine warmup schedules (``LambdaLR`` of a ``functools.partial`` with
  keyword-only arguments), gradient accumulation by ``loss / accumulate`` with the step taken
  on ``i % accumulate == 0 or i == len(loader) - 1``, a ``DataLoader`` over a list of dict
  samples with a ``collate_fn`` stacking them; and a checkpoint in the middle of the run
  (``torch.save({"model": ..., "optimizer": ..., "lr_scheduler": ..., "epoch": ...})`` into a
  buffer, a fresh model, optimizer and scheduler built and loaded with
  ``torch.load(map_location="cpu")``) that resumes to the same end as the uninterrupted run.
"""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch

import retrograd as rg
from real_ports import assert_records_agree, both

BERT_SOURCE = '''
import inspect
from functools import partial
from types import SimpleNamespace as Namespace

ACTIVATIONS = {"gelu": nn.GELU(), "relu": nn.ReLU(), "tanh": nn.Tanh()}


def chunked_forward(fn, chunk_size, dim, *tensors):
    """fn over slices of the inputs along dim (a memory saving for the feed-forward block)."""
    n_args = len(inspect.signature(fn).parameters)
    if n_args != len(tensors):
        raise ValueError(f"{fn} takes {n_args} tensors, {len(tensors)} given")
    if chunk_size <= 0:
        return fn(*tensors)
    length = tensors[0].shape[dim]
    if any(t.shape[dim] != length for t in tensors) or length % chunk_size:
        raise ValueError(
            f"inputs of length {length} along {dim} cannot be cut in chunks of {chunk_size}"
        )
    pieces = tuple(t.chunk(length // chunk_size, dim=dim) for t in tensors)
    return torch.cat(tuple(fn(*group) for group in zip(*pieces)), dim=dim)


class Embeddings(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.word_embeddings = nn.Embedding(
            cfg.vocab_size, cfg.hidden_size, padding_idx=cfg.pad_token_id
        )
        self.position_embeddings = nn.Embedding(cfg.max_position_embeddings, cfg.hidden_size)
        self.token_type_embeddings = nn.Embedding(cfg.type_vocab_size, cfg.hidden_size)
        self.LayerNorm = nn.LayerNorm(
            cfg.hidden_size, eps=cfg.layer_norm_eps
        )  # the checkpoints' name
        self.dropout = nn.Dropout(cfg.hidden_dropout_prob)
        self.kind = getattr(cfg, "position_embedding_type", "absolute")
        # neither buffer is saved: both are rebuilt from the config
        positions = torch.arange(cfg.max_position_embeddings).expand((1, -1))
        self.register_buffer("position_ids", positions, persistent=False)
        self.register_buffer(
            "token_type_ids",
            torch.zeros(self.position_ids.size(), dtype=torch.long),
            persistent=False,
        )

    def forward(self, input_ids, token_type_ids=None, position_ids=None, past_length=0):
        batch, length = input_ids.size()
        if position_ids is None:
            position_ids = self.position_ids[:, past_length : past_length + length]
        if token_type_ids is None:  # all zeros, from the buffer
            token_type_ids = self.token_type_ids[:, :length].expand(batch, length)
        embeddings = self.word_embeddings(input_ids) + self.token_type_embeddings(token_type_ids)
        if self.kind == "absolute":
            embeddings += self.position_embeddings(position_ids)
        return self.dropout(self.LayerNorm(embeddings))


class SelfAttention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        if cfg.hidden_size % cfg.num_attention_heads:
            raise ValueError(
                f"{cfg.hidden_size} hidden units do not split into {cfg.num_attention_heads} heads"
            )
        self.heads = cfg.num_attention_heads
        self.head_size = cfg.hidden_size // cfg.num_attention_heads
        self.query = nn.Linear(cfg.hidden_size, self.heads * self.head_size)
        self.key = nn.Linear(cfg.hidden_size, self.heads * self.head_size)
        self.value = nn.Linear(cfg.hidden_size, self.heads * self.head_size)
        self.dropout = nn.Dropout(cfg.attention_probs_dropout_prob)
        self.kind = getattr(cfg, "position_embedding_type", "absolute")
        if self.kind in ("relative_key", "relative_key_query"):
            self.max_positions = cfg.max_position_embeddings
            self.distance_embedding = nn.Embedding(
                2 * cfg.max_position_embeddings - 1, self.head_size
            )

    def split_heads(self, x):  # [b, l, h * d] -> [b, h, l, d]
        return x.view(x.size()[:-1] + (self.heads, self.head_size)).permute(0, 2, 1, 3)

    def forward(self, hidden, mask=None, head_mask=None, output_attentions=False):
        q = self.split_heads(self.query(hidden))
        k = self.split_heads(self.key(hidden))
        v = self.split_heads(self.value(hidden))
        scores = torch.matmul(q, k.transpose(-1, -2))
        if self.kind in ("relative_key", "relative_key_query"):
            left = torch.arange(q.shape[2], dtype=torch.long, device=hidden.device).view(-1, 1)
            right = torch.arange(k.shape[2], dtype=torch.long, device=hidden.device).view(1, -1)
            table = self.distance_embedding(left - right + self.max_positions - 1).to(dtype=q.dtype)
            scores = scores + torch.einsum("bhld,lrd->bhlr", q, table)
            if self.kind == "relative_key_query":
                scores = scores + torch.einsum("bhrd,lrd->bhlr", k, table)
        scores = scores / math.sqrt(self.head_size)
        if mask is not None:  # additive: 0 where allowed, very negative where masked
            scores = scores + mask
        probs = self.dropout(nn.functional.softmax(scores, dim=-1))
        if head_mask is not None:
            probs = probs * head_mask
        context = torch.matmul(probs, v).permute(0, 2, 1, 3).contiguous()
        context = context.view(context.size()[:-2] + (self.heads * self.head_size,))
        return (context, probs) if output_attentions else (context,)


class ResidualNorm(nn.Module):
    """dense, dropout, then LayerNorm of the sum with the block's input."""

    def __init__(self, cfg, width_in):
        super().__init__()
        self.dense = nn.Linear(width_in, cfg.hidden_size)
        self.LayerNorm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)
        self.dropout = nn.Dropout(cfg.hidden_dropout_prob)

    def forward(self, x, residual):
        return self.LayerNorm(self.dropout(self.dense(x)) + residual)


class AttentionBlock(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.self = SelfAttention(cfg)
        self.output = ResidualNorm(cfg, cfg.hidden_size)

    def forward(self, hidden, mask=None, head_mask=None, output_attentions=False):
        found = self.self(hidden, mask, head_mask, output_attentions=output_attentions)
        return (self.output(found[0], hidden),) + found[1:]


class Expand(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.dense = nn.Linear(cfg.hidden_size, cfg.intermediate_size)
        act = cfg.hidden_act
        self.act = ACTIVATIONS[act] if isinstance(act, str) else act

    def forward(self, x):
        return self.act(self.dense(x))


class Layer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.chunk_size = cfg.chunk_size_feed_forward
        self.attention = AttentionBlock(cfg)
        self.intermediate = Expand(cfg)
        self.output = ResidualNorm(cfg, cfg.intermediate_size)

    def feed_forward(self, x):
        return self.output(self.intermediate(x), x)

    def forward(self, hidden, mask=None, head_mask=None, output_attentions=False):
        attended = self.attention(hidden, mask, head_mask, output_attentions=output_attentions)
        out = chunked_forward(
            self.feed_forward, self.chunk_size, 1, attended[0]
        )  # chunks along the sequence
        return (out,) + attended[1:]


class LayerStack(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.layer = nn.ModuleList([Layer(cfg) for _ in range(cfg.num_hidden_layers)])
        self.checkpointing = False

    def forward(
        self, hidden, mask=None, head_mask=None, output_attentions=False, output_hidden_states=False
    ):
        states = (hidden,) if output_hidden_states else None
        attentions = () if output_attentions else None
        for i, layer in enumerate(self.layer):
            if self.checkpointing and self.training:
                # recompute the layer in the backward pass instead of keeping its activations
                def run_layer(*inputs, layer=layer):
                    return layer(*inputs, output_attentions)

                out = torch.utils.checkpoint.checkpoint(
                    run_layer, hidden, mask, head_mask[i], use_reentrant=False
                )
            else:
                out = layer(hidden, mask, head_mask[i], output_attentions)
            hidden = out[0]
            if output_attentions:
                attentions = attentions + (out[1],)
            if output_hidden_states:
                states = states + (hidden,)
        return tuple(x for x in (hidden, states, attentions) if x is not None)


class Pooler(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.dense = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.activation = nn.Tanh()

    def forward(self, hidden):
        return self.activation(self.dense(hidden[:, 0]))  # the [CLS] token's state


class Pretrained(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.config = cfg

    def init_weights(self, m):
        if isinstance(m, (nn.Linear, nn.Embedding)):
            m.weight.data.normal_(mean=0.0, std=self.config.initializer_range)
        if isinstance(m, nn.Linear) and m.bias is not None:
            m.bias.data.zero_()
        if isinstance(m, nn.Embedding) and m.padding_idx is not None:
            m.weight.data[m.padding_idx].zero_()  # the padding row stays zero
        if isinstance(m, nn.LayerNorm):
            m.weight.data.fill_(1.0)
            m.bias.data.zero_()

    def enable_checkpointing(self):
        for m in self.modules():
            if isinstance(m, LayerStack):
                m.checkpointing = True

    @staticmethod
    def additive_mask(mask, dtype=torch.float32):
        if mask.dim() == 2:  # [b, l]: the same keys for every query
            mask = mask[:, None, None, :]
        elif mask.dim() == 3:  # [b, l, l]: a mask per query
            mask = mask[:, None, :, :]
        else:
            raise ValueError(f"an attention mask of shape {tuple(mask.shape)}")
        return (1.0 - mask.to(dtype=dtype)) * torch.finfo(dtype).min

    @staticmethod
    def per_layer_head_mask(head_mask, layers):
        if head_mask is None:
            return [None] * layers
        if head_mask.dim() == 1:  # one mask for every layer: [layers, 1, heads, 1, 1]
            hm = head_mask.unsqueeze(0).unsqueeze(0).unsqueeze(-1).unsqueeze(-1)
            head_mask = hm.expand(layers, -1, -1, -1, -1)
        elif head_mask.dim() == 2:  # [layers, heads]
            head_mask = head_mask.unsqueeze(1).unsqueeze(-1).unsqueeze(-1)
        return head_mask.to(dtype=torch.float32)


class Encoder(Pretrained):
    def __init__(self, cfg, add_pooling_layer=True):
        super().__init__(cfg)
        self.embeddings = Embeddings(cfg)
        self.encoder = LayerStack(cfg)
        self.pooler = Pooler(cfg) if add_pooling_layer else None
        self.apply(self.init_weights)

    def forward(
        self,
        input_ids,
        attention_mask=None,
        token_type_ids=None,
        position_ids=None,
        head_mask=None,
        output_attentions=False,
        output_hidden_states=False,
    ):
        if attention_mask is None:
            attention_mask = torch.ones((tuple(input_ids.size())), device=input_ids.device)
        hidden = self.embeddings(
            input_ids, token_type_ids=token_type_ids, position_ids=position_ids
        )
        encoded = self.encoder(
            hidden,
            self.additive_mask(attention_mask),
            self.per_layer_head_mask(head_mask, self.config.num_hidden_layers),
            output_attentions,
            output_hidden_states,
        )
        pooled = None if self.pooler is None else self.pooler(encoded[0])
        return (encoded[0], pooled) + encoded[1:]


class SequenceClassifier(Pretrained):
    def __init__(self, cfg):
        super().__init__(cfg)
        self.num_labels = cfg.num_labels
        self.bert = Encoder(cfg)
        p = cfg.hidden_dropout_prob if cfg.classifier_dropout is None else cfg.classifier_dropout
        self.dropout = nn.Dropout(p)
        self.classifier = nn.Linear(cfg.hidden_size, cfg.num_labels)
        self.apply(self.init_weights)

    def forward(
        self,
        input_ids,
        attention_mask=None,
        token_type_ids=None,
        position_ids=None,
        head_mask=None,
        labels=None,
        output_attentions=False,
        output_hidden_states=False,
    ):
        options = (output_attentions, output_hidden_states)
        out = self.bert(
            input_ids, attention_mask, token_type_ids, position_ids, head_mask, *options
        )
        logits = self.classifier(self.dropout(out[1]))
        loss = None
        if labels is not None:
            cfg = self.config
            if cfg.problem_type is None:  # decided once, from the first labels seen
                if self.num_labels == 1:
                    cfg.problem_type = "regression"
                elif labels.dtype == torch.long or labels.dtype == torch.int:
                    cfg.problem_type = "single_label_classification"
                else:
                    cfg.problem_type = "multi_label_classification"
            if cfg.problem_type == "regression":
                squeeze = self.num_labels == 1
                loss = nn.MSELoss()(
                    logits.squeeze() if squeeze else logits, labels.squeeze() if squeeze else labels
                )
            elif cfg.problem_type == "single_label_classification":
                loss = nn.CrossEntropyLoss()(logits.view(-1, self.num_labels), labels.view(-1))
            else:
                loss = nn.BCEWithLogitsLoss()(logits, labels)
        return Namespace(loss=loss, logits=logits, hidden_states=out[2:])


# -- learning-rate schedules: a LambdaLR of a partial with keyword-only arguments --
def warmup_then_linear(step, *, warmup, total):
    if step < warmup:
        return float(step) / float(max(1, warmup))
    return max(0.0, float(total - step) / float(max(1, total - warmup)))


def warmup_then_cosine(step, *, warmup, total, cycles):
    if step < warmup:
        return float(step) / float(max(1, warmup))
    progress = float(step - warmup) / float(max(1, total - warmup))
    return max(0.0, 0.5 * (1.0 + math.cos(math.pi * float(cycles) * 2.0 * progress)))


def linear_schedule(optimizer, warmup, total, last_epoch=-1):
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer, partial(warmup_then_linear, warmup=warmup, total=total), last_epoch
    )


def cosine_schedule(optimizer, warmup, total, cycles=0.5, last_epoch=-1):
    rule = partial(warmup_then_cosine, warmup=warmup, total=total, cycles=cycles)
    return torch.optim.lr_scheduler.LambdaLR(optimizer, rule, last_epoch)


# -- fine-tuning, one process, without a Trainer --
def collate(samples):
    return {key: torch.stack([s[key] for s in samples]) for key in samples[0]}


def build_optimizer(net, args):
    exempt = ("bias", "LayerNorm.weight")  # no weight decay for biases and norms
    decayed, plain = [], []
    for name, p in net.named_parameters():
        (plain if any(e in name for e in exempt) else decayed).append(p)
    optimizer = torch.optim.AdamW(
        [
            {"params": decayed, "weight_decay": args.weight_decay},
            {"params": plain, "weight_decay": 0.0},
        ],
        lr=args.learning_rate,
    )
    schedule = linear_schedule if args.lr_scheduler_type == "linear" else cosine_schedule
    return optimizer, schedule(optimizer, args.num_warmup_steps, args.max_train_steps)


def train(model, loader, args, optimizer, scheduler, epochs, records, save_at=None):
    accumulate = args.gradient_accumulation_steps
    for epoch in range(epochs):
        model.train()
        for i, batch in enumerate(loader):
            loss = model(**batch).loss / accumulate
            loss.backward()
            if i % accumulate == 0 or i == len(loader) - 1:
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad()
                records.append([loss.item(), scheduler.get_last_lr()[0]])
        if save_at and epoch == save_at[0]:
            state = {
                "model": model.state_dict(),
                "optimizer": optimizer.state_dict(),
                "lr_scheduler": scheduler.state_dict(),
                "epoch": epoch,
            }
            torch.save(state, save_at[1])
    model.eval()
    with torch.no_grad():
        logits = model(**next(iter(loader)), output_hidden_states=True).logits
    records.append(logits.numpy())
    records.append(logits.argmax(dim=-1).tolist())
    records.append({name: p.detach().numpy().copy() for name, p in model.named_parameters()})
    return records
'''

BERT_STEP = [
    (
        "            loss.backward()\n            if i % accumulate == 0 or i == len(loader) - 1:\n"
        "                optimizer.step()",
        "            g = loss.backward()\n            grads = g if grads is None else grads + g\n"
        "            if i % accumulate == 0 or i == len(loader) - 1:\n"
        "                optimizer.step(grads)\n                grads = None",
    ),
    (
        "    accumulate = args.gradient_accumulation_steps\n",
        "    accumulate = args.gradient_accumulation_steps\n    grads = None\n",
    ),
]


def _config(names, **changes):
    config = dict(
        vocab_size=20,
        hidden_size=16,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=24,
        hidden_act="gelu",
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
        max_position_embeddings=12,
        type_vocab_size=2,
        initializer_range=0.2,
        layer_norm_eps=1e-12,
        pad_token_id=0,
        position_embedding_type="absolute",
        chunk_size_feed_forward=0,
        classifier_dropout=None,
        num_labels=3,
        problem_type=None,
    )
    config.update(changes)
    return names["Namespace"](**config)


def _samples(lib, rng, n, num_labels, problem):
    samples = []
    for _ in range(n):
        length = int(rng.integers(3, 8))
        ids = np.zeros(8, dtype=np.int64)
        ids[:length] = rng.integers(1, 20, length)
        mask = (ids != 0).astype(np.int64)
        types = np.zeros(8, dtype=np.int64)
        types[length // 2 : length] = 1
        if problem == "multi":
            labels = lib.tensor(rng.integers(0, 2, num_labels), dtype=lib.float32)
        elif num_labels == 1:
            labels = lib.tensor(rng.standard_normal(), dtype=lib.float32)
        else:
            labels = lib.tensor(int(rng.integers(0, num_labels)), dtype=lib.int64)
        samples.append(
            {
                "input_ids": lib.tensor(ids),
                "attention_mask": lib.tensor(mask),
                "token_type_ids": lib.tensor(types),
                "labels": labels,
            }
        )
    return samples


ARGS = dict(
    weight_decay=0.01,
    learning_rate=5e-3,
    lr_scheduler_type="linear",
    num_warmup_steps=2,
    max_train_steps=8,
    gradient_accumulation_steps=2,
)


@pytest.mark.parametrize(
    ("position", "chunk", "checkpointing", "num_labels", "problem", "schedule"),
    [
        ("absolute", 0, False, 3, "single", "linear"),
        ("relative_key", 4, True, 3, "single", "cosine"),
        ("relative_key_query", 0, True, 1, "regression", "linear"),
        ("absolute", 2, False, 4, "multi", "cosine"),
    ],
)
def test_bert_sequence_classification_training_matches_torch(
    position, chunk, checkpointing, num_labels, problem, schedule
):
    theirs, ours = both(BERT_SOURCE, BERT_STEP)
    records, initial = [], None
    for lib, names in ((torch, theirs), (rg, ours)):
        torch.manual_seed(0)
        config = _config(
            names,
            position_embedding_type=position,
            chunk_size_feed_forward=chunk,
            num_labels=num_labels,
        )
        model = names["SequenceClassifier"](config)
        if checkpointing:
            model.enable_checkpointing()
        state = model.state_dict()
        assert "bert.embeddings.position_ids" not in state  # persistent=False
        if initial is None:
            initial = {k: v.detach().numpy().copy() for k, v in state.items()}
            pad_row = model.bert.embeddings.word_embeddings.weight[0]
            assert not pad_row.detach().numpy().any()  # weight.data[padding_idx].zero_()
        else:
            model.load_state_dict({k: rg.tensor(v) for k, v in initial.items()})
        rng = np.random.default_rng(30)
        samples = _samples(lib, rng, 6, num_labels, problem)
        loader = lib.utils.data.DataLoader(samples, batch_size=2, collate_fn=names["collate"])
        args = names["Namespace"](**dict(ARGS, lr_scheduler_type=schedule))
        optimizer, lr_scheduler = names["build_optimizer"](model, args)
        record = names["train"](model, loader, args, optimizer, lr_scheduler, 2, [])
        record.append(model.config.problem_type)
        # the attentions and hidden states of the encoder, with a head mask
        with lib.no_grad():
            batch = names["collate"](samples[:2])
            out = model.bert(
                batch["input_ids"],
                attention_mask=batch["attention_mask"],
                head_mask=lib.tensor([1.0, 0.0, 1.0, 0.5]),
                output_attentions=True,
                output_hidden_states=True,
            )
        record.extend(
            [
                out[0].numpy(),
                out[1].numpy(),
                *[a.numpy() for a in out[2]],
                *[a.numpy() for a in out[3]],
            ]
        )
        records.append(record)
    # the keys' bias has a zero gradient unless the relative key-query scores read the keys
    # (a constant added to every key leaves the softmax as it is): AdamW's steps there follow
    # the rounding noise
    skip = () if position == "relative_key_query" else KEY_BIASES
    assert_records_agree(records[1], records[0], rtol=2e-4, atol=2e-5, skip=skip)


KEY_BIASES = [f"bert.encoder.layer.{i}.attention.self.key.bias" for i in range(2)]


def test_bert_training_resumed_from_a_checkpoint_matches_the_uninterrupted_run_and_torch():
    theirs, ours = both(BERT_SOURCE, BERT_STEP)
    records, initial = [], None
    for lib, names in ((torch, theirs), (rg, ours)):
        torch.manual_seed(0)
        config = _config(names)
        model = names["SequenceClassifier"](config)
        if initial is None:
            initial = {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}
        else:
            model.load_state_dict({k: rg.tensor(v) for k, v in initial.items()})
        samples = _samples(lib, np.random.default_rng(31), 6, 3, "single")
        loader = lib.utils.data.DataLoader(samples, batch_size=2, collate_fn=names["collate"])
        args = names["Namespace"](**ARGS)
        optimizer, lr_scheduler = names["build_optimizer"](model, args)
        buffer = io.BytesIO()
        whole = names["train"](
            model, loader, args, optimizer, lr_scheduler, 3, [], save_at=(0, buffer)
        )

        # a new process: a fresh model, optimizer and scheduler, loaded from the checkpoint
        buffer.seek(0)
        checkpoint = lib.load(buffer, map_location="cpu")
        torch.manual_seed(1)
        resumed_model = names["SequenceClassifier"](_config(names))
        resumed_model.load_state_dict(checkpoint["model"])
        optimizer, lr_scheduler = names["build_optimizer"](resumed_model, args)
        optimizer.load_state_dict(checkpoint["optimizer"])
        lr_scheduler.load_state_dict(checkpoint["lr_scheduler"])
        assert checkpoint["epoch"] == 0
        resumed = names["train"](resumed_model, loader, args, optimizer, lr_scheduler, 2, [])
        # the last two epochs' steps and the end state equal the uninterrupted run's
        assert_records_agree(resumed, whole[-len(resumed) :], rtol=1e-5, atol=1e-6, skip=KEY_BIASES)
        records.append(whole)
    assert_records_agree(records[1], records[0], rtol=2e-4, atol=2e-5, skip=KEY_BIASES)
