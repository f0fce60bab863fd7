"""Round 73 of the zoo: language models as Hugging Face transformers writes them, for either
library.

Each ``make_*(torch, nn, F, ...)`` builds its model from the given library (``torch`` or
``retrograd``, with its ``nn`` and ``nn.functional``), in the style of transformers'
``modeling_bert.py``, ``modeling_gpt2.py``, ``modeling_t5.py`` and ``modeling_mixtral.py``: the
same layers, the same ops (``Conv1D`` through ``addmm``, the ``finfo.min`` masks, T5's
relative position buckets, Mixtral's top-k router with ``one_hot`` and ``index_add_``), the same
initialization. Sizes are tiny so that ``tests/test_model_zoo_73.py`` runs each in float64 in
well under a second. Every ``forward`` returns a tuple whose first entry is the model's own loss.
"""

# The originals' names (``F``, ``ACT2FN``, ``_tied_weights_keys``), as in zoo_models.py:
# ruff: noqa: N803, N806, RUF012
from __future__ import annotations

import math
from types import SimpleNamespace


def _activations(torch, nn, F):
    """transformers.activations: ``gelu`` (erf), ``gelu_new`` (the tanh form), ``relu``."""

    class NewGELUActivation(nn.Module):
        # the tanh approximation of GELU, as Google's BERT and OpenAI's GPT write it
        def forward(self, input):  # noqa: A002
            inner = math.sqrt(2.0 / math.pi) * (input + 0.044715 * torch.pow(input, 3.0))
            return 0.5 * input * (1.0 + torch.tanh(inner))

    class GELUActivation(nn.Module):
        def forward(self, input):  # noqa: A002
            return nn.functional.gelu(input)

    return {"gelu": GELUActivation(), "gelu_new": NewGELUActivation(), "relu": nn.ReLU()}


# -- BERT -----------------------------------------------------------------------------------------
def make_bert(
    torch,
    nn,
    F,
    vocab_size=50,
    hidden_size=16,
    num_hidden_layers=2,
    num_attention_heads=4,
    intermediate_size=32,
    hidden_act="gelu",
    hidden_dropout_prob=0.1,
    attention_probs_dropout_prob=0.1,
    max_position_embeddings=16,
    type_vocab_size=2,
    initializer_range=0.02,
    layer_norm_eps=1e-12,
    pad_token_id=0,
):
    """``BertForPreTraining``: embeddings (word, absolute position, token type), the extended
    attention mask, post-LN encoder layers, the tanh pooler, the masked-LM head whose decoder
    shares the word embeddings and the head's bias, the next-sentence head.
    ``forward(input_ids, token_type_ids, attention_mask, labels, next_sentence_label)``
    returns ``(loss, prediction_scores, seq_relationship_score)``."""
    config = SimpleNamespace(**{k: v for k, v in locals().items() if k not in ("torch", "nn", "F")})
    ACT2FN = _activations(torch, nn, F)

    class BertEmbeddings(nn.Module):
        def __init__(self, config):
            super().__init__()
            self.word_embeddings = nn.Embedding(
                config.vocab_size, config.hidden_size, padding_idx=config.pad_token_id
            )
            self.position_embeddings = nn.Embedding(
                config.max_position_embeddings, config.hidden_size
            )
            self.token_type_embeddings = nn.Embedding(config.type_vocab_size, config.hidden_size)
            self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
            self.dropout = nn.Dropout(config.hidden_dropout_prob)
            self.register_buffer(
                "position_ids",
                torch.arange(config.max_position_embeddings).expand((1, -1)),
                persistent=False,
            )
            self.register_buffer(
                "token_type_ids",
                torch.zeros(self.position_ids.size(), dtype=torch.long),
                persistent=False,
            )

        def forward(self, input_ids, token_type_ids=None):
            seq_length = input_ids.size()[1]
            position_ids = self.position_ids[:, 0:seq_length]
            if token_type_ids is None:
                buffered = self.token_type_ids[:, :seq_length]
                token_type_ids = buffered.expand(input_ids.size()[0], seq_length)
            embeddings = self.word_embeddings(input_ids) + self.token_type_embeddings(
                token_type_ids
            )
            embeddings += self.position_embeddings(position_ids)
            embeddings = self.LayerNorm(embeddings)
            return self.dropout(embeddings)

    class BertSelfAttention(nn.Module):
        def __init__(self, config):
            super().__init__()
            self.num_attention_heads = config.num_attention_heads
            self.attention_head_size = config.hidden_size // config.num_attention_heads
            self.all_head_size = self.num_attention_heads * self.attention_head_size
            self.query = nn.Linear(config.hidden_size, self.all_head_size)
            self.key = nn.Linear(config.hidden_size, self.all_head_size)
            self.value = nn.Linear(config.hidden_size, self.all_head_size)
            self.dropout = nn.Dropout(config.attention_probs_dropout_prob)

        def transpose_for_scores(self, x):
            new_x_shape = x.size()[:-1] + (self.num_attention_heads, self.attention_head_size)
            return x.view(new_x_shape).permute(0, 2, 1, 3)

        def forward(self, hidden_states, attention_mask=None):
            query_layer = self.transpose_for_scores(self.query(hidden_states))
            key_layer = self.transpose_for_scores(self.key(hidden_states))
            value_layer = self.transpose_for_scores(self.value(hidden_states))
            attention_scores = torch.matmul(query_layer, key_layer.transpose(-1, -2))
            attention_scores = attention_scores / math.sqrt(self.attention_head_size)
            if attention_mask is not None:
                attention_scores = attention_scores + attention_mask
            attention_probs = nn.functional.softmax(attention_scores, dim=-1)
            attention_probs = self.dropout(attention_probs)
            context_layer = torch.matmul(attention_probs, value_layer)
            context_layer = context_layer.permute(0, 2, 1, 3).contiguous()
            new_context_layer_shape = context_layer.size()[:-2] + (self.all_head_size,)
            return context_layer.view(new_context_layer_shape)

    class BertSelfOutput(nn.Module):
        def __init__(self, config):
            super().__init__()
            self.dense = nn.Linear(config.hidden_size, config.hidden_size)
            self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
            self.dropout = nn.Dropout(config.hidden_dropout_prob)

        def forward(self, hidden_states, input_tensor):
            hidden_states = self.dropout(self.dense(hidden_states))
            return self.LayerNorm(hidden_states + input_tensor)

    class BertAttention(nn.Module):
        def __init__(self, config):
            super().__init__()
            self.self = BertSelfAttention(config)
            self.output = BertSelfOutput(config)

        def forward(self, hidden_states, attention_mask=None):
            return self.output(self.self(hidden_states, attention_mask), hidden_states)

    class BertIntermediate(nn.Module):
        def __init__(self, config):
            super().__init__()
            self.dense = nn.Linear(config.hidden_size, config.intermediate_size)
            self.intermediate_act_fn = ACT2FN[config.hidden_act]

        def forward(self, hidden_states):
            return self.intermediate_act_fn(self.dense(hidden_states))

    class BertOutput(nn.Module):
        def __init__(self, config):
            super().__init__()
            self.dense = nn.Linear(config.intermediate_size, config.hidden_size)
            self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
            self.dropout = nn.Dropout(config.hidden_dropout_prob)

        def forward(self, hidden_states, input_tensor):
            hidden_states = self.dropout(self.dense(hidden_states))
            return self.LayerNorm(hidden_states + input_tensor)

    class BertLayer(nn.Module):
        def __init__(self, config):
            super().__init__()
            self.attention = BertAttention(config)
            self.intermediate = BertIntermediate(config)
            self.output = BertOutput(config)

        def forward(self, hidden_states, attention_mask=None):
            attention_output = self.attention(hidden_states, attention_mask)
            return self.output(self.intermediate(attention_output), attention_output)

    class BertEncoder(nn.Module):
        def __init__(self, config):
            super().__init__()
            self.layer = nn.ModuleList([BertLayer(config) for _ in range(config.num_hidden_layers)])

        def forward(self, hidden_states, attention_mask=None):
            for layer_module in self.layer:
                hidden_states = layer_module(hidden_states, attention_mask)
            return hidden_states

    class BertPooler(nn.Module):
        def __init__(self, config):
            super().__init__()
            self.dense = nn.Linear(config.hidden_size, config.hidden_size)
            self.activation = nn.Tanh()

        def forward(self, hidden_states):
            first_token_tensor = hidden_states[:, 0]  # the [CLS] token
            return self.activation(self.dense(first_token_tensor))

    class BertPredictionHeadTransform(nn.Module):
        def __init__(self, config):
            super().__init__()
            self.dense = nn.Linear(config.hidden_size, config.hidden_size)
            self.transform_act_fn = ACT2FN[config.hidden_act]
            self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)

        def forward(self, hidden_states):
            return self.LayerNorm(self.transform_act_fn(self.dense(hidden_states)))

    class BertLMPredictionHead(nn.Module):
        def __init__(self, config):
            super().__init__()
            self.transform = BertPredictionHeadTransform(config)
            # the output weights are the input embeddings; only the bias is the head's own
            self.decoder = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
            self.bias = nn.Parameter(torch.zeros(config.vocab_size))
            self.decoder.bias = self.bias  # resized with the embeddings in the original

        def forward(self, hidden_states):
            return self.decoder(self.transform(hidden_states))

    class BertPreTrainingHeads(nn.Module):
        def __init__(self, config):
            super().__init__()
            self.predictions = BertLMPredictionHead(config)
            self.seq_relationship = nn.Linear(config.hidden_size, 2)

        def forward(self, sequence_output, pooled_output):
            return self.predictions(sequence_output), self.seq_relationship(pooled_output)

    class BertModel(nn.Module):
        def __init__(self, config):
            super().__init__()
            self.config = config
            self.embeddings = BertEmbeddings(config)
            self.encoder = BertEncoder(config)
            self.pooler = BertPooler(config)

        def get_extended_attention_mask(self, attention_mask, dtype):
            # [batch, seq] -> [batch, 1, 1, seq], 0 where attended, the dtype's lowest elsewhere
            extended_attention_mask = attention_mask[:, None, None, :]
            extended_attention_mask = extended_attention_mask.to(dtype=dtype)
            return (1.0 - extended_attention_mask) * torch.finfo(dtype).min

        def forward(self, input_ids, token_type_ids=None, attention_mask=None):
            batch_size, seq_length = input_ids.size()
            if attention_mask is None:
                attention_mask = torch.ones((batch_size, seq_length))
            embedding_output = self.embeddings(input_ids, token_type_ids)
            extended = self.get_extended_attention_mask(attention_mask, embedding_output.dtype)
            sequence_output = self.encoder(embedding_output, extended)
            return sequence_output, self.pooler(sequence_output)

    class BertForPreTraining(nn.Module):
        _tied_weights_keys = ["predictions.decoder.bias", "cls.predictions.decoder.weight"]

        def __init__(self, config):
            super().__init__()
            self.config = config
            self.bert = BertModel(config)
            self.cls = BertPreTrainingHeads(config)
            self.apply(self._init_weights)
            self.cls.predictions.decoder.weight = self.bert.embeddings.word_embeddings.weight

        def _init_weights(self, module):
            if isinstance(module, nn.Linear):
                module.weight.data.normal_(mean=0.0, std=self.config.initializer_range)
                if module.bias is not None:
                    module.bias.data.zero_()
            elif isinstance(module, nn.Embedding):
                module.weight.data.normal_(mean=0.0, std=self.config.initializer_range)
                if module.padding_idx is not None:
                    module.weight.data[module.padding_idx].zero_()
            elif isinstance(module, nn.LayerNorm):
                module.bias.data.zero_()
                module.weight.data.fill_(1.0)

        def forward(
            self,
            input_ids,
            token_type_ids=None,
            attention_mask=None,
            labels=None,
            next_sentence_label=None,
        ):
            sequence_output, pooled_output = self.bert(input_ids, token_type_ids, attention_mask)
            prediction_scores, seq_relationship_score = self.cls(sequence_output, pooled_output)
            total_loss = None
            if labels is not None and next_sentence_label is not None:
                loss_fct = nn.CrossEntropyLoss()  # -100 marks the tokens not masked
                masked_lm_loss = loss_fct(
                    prediction_scores.view(-1, self.config.vocab_size), labels.view(-1)
                )
                next_sentence_loss = loss_fct(
                    seq_relationship_score.view(-1, 2), next_sentence_label.view(-1)
                )
                total_loss = masked_lm_loss + next_sentence_loss
            return total_loss, prediction_scores, seq_relationship_score

    return BertForPreTraining(config)


# -- GPT-2 ----------------------------------------------------------------------------------------
def make_gpt2(
    torch,
    nn,
    F,
    vocab_size=50,
    n_positions=16,
    n_embd=16,
    n_layer=2,
    n_head=4,
    activation_function="gelu_new",
    resid_pdrop=0.1,
    embd_pdrop=0.1,
    attn_pdrop=0.1,
    layer_norm_epsilon=1e-5,
    initializer_range=0.02,
    scale_attn_weights=True,
    scale_attn_by_inverse_layer_idx=False,
):
    """``GPT2LMHeadModel``: ``Conv1D`` (a transposed linear layer through ``addmm``), the
    causal ``bias`` buffer with ``torch.where(mask, w, finfo.min)``, ``past_key_values``,
    ``split(self.split_size, dim=2)``, pre-LN blocks, the scaled init of ``c_proj``, the LM head
    tied to ``wte``. ``forward(input_ids, labels=None, past_key_values=None, use_cache=False)``
    returns ``(loss, logits, presents)``; ``generate`` is greedy decoding with the cache."""
    config = SimpleNamespace(**{k: v for k, v in locals().items() if k not in ("torch", "nn", "F")})
    ACT2FN = _activations(torch, nn, F)

    class Conv1D(nn.Module):
        def __init__(self, nf, nx):
            super().__init__()
            self.nf = nf
            self.weight = nn.Parameter(torch.empty(nx, nf))
            self.bias = nn.Parameter(torch.zeros(nf))
            nn.init.normal_(self.weight, std=0.02)

        def forward(self, x):
            size_out = x.size()[:-1] + (self.nf,)
            x = torch.addmm(self.bias, x.view(-1, x.size(-1)), self.weight)
            return x.view(size_out)

    class GPT2Attention(nn.Module):
        def __init__(self, config, layer_idx=None):
            super().__init__()
            max_positions = config.n_positions
            self.register_buffer(
                "bias",
                torch.tril(torch.ones((max_positions, max_positions), dtype=torch.bool)).view(
                    1, 1, max_positions, max_positions
                ),
                persistent=False,
            )
            self.register_buffer("masked_bias", torch.tensor(-1e4), persistent=False)
            self.embed_dim = config.n_embd
            self.num_heads = config.n_head
            self.head_dim = self.embed_dim // self.num_heads
            self.split_size = self.embed_dim
            self.scale_attn_weights = config.scale_attn_weights
            self.scale_attn_by_inverse_layer_idx = config.scale_attn_by_inverse_layer_idx
            self.layer_idx = layer_idx
            self.c_attn = Conv1D(3 * self.embed_dim, self.embed_dim)
            self.c_proj = Conv1D(self.embed_dim, self.embed_dim)
            self.attn_dropout = nn.Dropout(config.attn_pdrop)
            self.resid_dropout = nn.Dropout(config.resid_pdrop)

        def _attn(self, query, key, value, attention_mask=None):
            attn_weights = torch.matmul(query, key.transpose(-1, -2))
            if self.scale_attn_weights:
                attn_weights = attn_weights / torch.full(
                    [], value.size(-1) ** 0.5, dtype=attn_weights.dtype, device=attn_weights.device
                )
            if self.scale_attn_by_inverse_layer_idx:
                attn_weights = attn_weights / float(self.layer_idx + 1)
            query_length, key_length = query.size(-2), key.size(-2)
            causal_mask = self.bias[:, :, key_length - query_length : key_length, :key_length]
            mask_value = torch.finfo(attn_weights.dtype).min
            # a tensor, not a Python float: torch.where wants both on one device
            mask_value = torch.full([], mask_value, dtype=attn_weights.dtype)
            attn_weights = torch.where(causal_mask, attn_weights.to(attn_weights.dtype), mask_value)
            if attention_mask is not None:
                attn_weights = attn_weights + attention_mask
            attn_weights = nn.functional.softmax(attn_weights, dim=-1)
            attn_weights = attn_weights.type(value.dtype)
            attn_weights = self.attn_dropout(attn_weights)
            return torch.matmul(attn_weights, value), attn_weights

        def _split_heads(self, tensor, num_heads, attn_head_size):
            new_shape = tensor.size()[:-1] + (num_heads, attn_head_size)
            return tensor.view(new_shape).permute(0, 2, 1, 3)  # (batch, head, seq, features)

        def _merge_heads(self, tensor, num_heads, attn_head_size):
            tensor = tensor.permute(0, 2, 1, 3).contiguous()
            new_shape = tensor.size()[:-2] + (num_heads * attn_head_size,)
            return tensor.view(new_shape)

        def forward(self, hidden_states, layer_past=None, use_cache=False):
            query, key, value = self.c_attn(hidden_states).split(self.split_size, dim=2)
            query = self._split_heads(query, self.num_heads, self.head_dim)
            key = self._split_heads(key, self.num_heads, self.head_dim)
            value = self._split_heads(value, self.num_heads, self.head_dim)
            if layer_past is not None:
                past_key, past_value = layer_past
                key = torch.cat((past_key, key), dim=-2)
                value = torch.cat((past_value, value), dim=-2)
            present = (key, value) if use_cache is True else None
            attn_output, _ = self._attn(query, key, value)
            attn_output = self._merge_heads(attn_output, self.num_heads, self.head_dim)
            attn_output = self.resid_dropout(self.c_proj(attn_output))
            return attn_output, present

    class GPT2MLP(nn.Module):
        def __init__(self, intermediate_size, config):
            super().__init__()
            self.c_fc = Conv1D(intermediate_size, config.n_embd)
            self.c_proj = Conv1D(config.n_embd, intermediate_size)
            self.act = ACT2FN[config.activation_function]
            self.dropout = nn.Dropout(config.resid_pdrop)

        def forward(self, hidden_states):
            return self.dropout(self.c_proj(self.act(self.c_fc(hidden_states))))

    class GPT2Block(nn.Module):
        def __init__(self, config, layer_idx=None):
            super().__init__()
            self.ln_1 = nn.LayerNorm(config.n_embd, eps=config.layer_norm_epsilon)
            self.attn = GPT2Attention(config, layer_idx=layer_idx)
            self.ln_2 = nn.LayerNorm(config.n_embd, eps=config.layer_norm_epsilon)
            self.mlp = GPT2MLP(4 * config.n_embd, config)

        def forward(self, hidden_states, layer_past=None, use_cache=False):
            residual = hidden_states
            attn_output, present = self.attn(
                self.ln_1(hidden_states), layer_past=layer_past, use_cache=use_cache
            )
            hidden_states = attn_output + residual
            residual = hidden_states
            hidden_states = residual + self.mlp(self.ln_2(hidden_states))
            return hidden_states, present

    class GPT2Model(nn.Module):
        def __init__(self, config):
            super().__init__()
            self.embed_dim = config.n_embd
            self.wte = nn.Embedding(config.vocab_size, self.embed_dim)
            self.wpe = nn.Embedding(config.n_positions, self.embed_dim)
            self.drop = nn.Dropout(config.embd_pdrop)
            self.h = nn.ModuleList([GPT2Block(config, layer_idx=i) for i in range(config.n_layer)])
            self.ln_f = nn.LayerNorm(self.embed_dim, eps=config.layer_norm_epsilon)

        def forward(self, input_ids, past_key_values=None, use_cache=False):
            input_shape = input_ids.size()
            input_ids = input_ids.view(-1, input_shape[-1])
            if past_key_values is None:
                past_length = 0
                past_key_values = tuple([None] * len(self.h))
            else:
                past_length = past_key_values[0][0].size(-2)
            position_ids = torch.arange(
                past_length, input_shape[-1] + past_length, dtype=torch.long
            ).unsqueeze(0)
            hidden_states = self.wte(input_ids) + self.wpe(position_ids)
            hidden_states = self.drop(hidden_states)
            output_shape = (-1,) + input_shape[1:] + (hidden_states.size(-1),)
            presents = () if use_cache else None
            for block, layer_past in zip(self.h, past_key_values):
                hidden_states, present = block(hidden_states, layer_past, use_cache)
                if use_cache is True:
                    presents = presents + (present,)
            hidden_states = self.ln_f(hidden_states)
            return hidden_states.view(output_shape), presents

    class GPT2LMHeadModel(nn.Module):
        _tied_weights_keys = ["lm_head.weight"]

        def __init__(self, config):
            super().__init__()
            self.config = config
            self.transformer = GPT2Model(config)
            self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
            self.apply(self._init_weights)
            self.lm_head.weight = self.transformer.wte.weight

        def _init_weights(self, module):
            if isinstance(module, (nn.Linear, Conv1D)):
                module.weight.data.normal_(mean=0.0, std=self.config.initializer_range)
                if module.bias is not None:
                    module.bias.data.zero_()
            elif isinstance(module, nn.Embedding):
                module.weight.data.normal_(mean=0.0, std=self.config.initializer_range)
            elif isinstance(module, nn.LayerNorm):
                module.bias.data.zero_()
                module.weight.data.fill_(1.0)
            # GPT-2's residual projections start at 1/sqrt(N) of the rest, N the residual layers
            for name, p in module.named_parameters():
                if name == "c_proj.weight":
                    p.data.normal_(
                        mean=0.0,
                        std=(self.config.initializer_range / math.sqrt(2 * self.config.n_layer)),
                    )

        def forward(self, input_ids, labels=None, past_key_values=None, use_cache=False):
            hidden_states, presents = self.transformer(input_ids, past_key_values, use_cache)
            lm_logits = self.lm_head(hidden_states)
            loss = None
            if labels is not None:
                shift_logits = lm_logits[..., :-1, :].contiguous()
                shift_labels = labels[..., 1:].contiguous()
                loss_fct = nn.CrossEntropyLoss()
                loss = loss_fct(shift_logits.view(-1, shift_logits.size(-1)), shift_labels.view(-1))
            return loss, lm_logits, presents

        def generate(self, input_ids, max_new_tokens):
            """Greedy decoding: the whole prompt once, then one token at a time on the cache."""
            past = None
            with torch.no_grad():
                for _ in range(max_new_tokens):
                    step_ids = input_ids if past is None else input_ids[:, -1:]
                    _, logits, past = self(step_ids, past_key_values=past, use_cache=True)
                    next_tokens = torch.argmax(logits[:, -1, :], dim=-1)
                    input_ids = torch.cat([input_ids, next_tokens[:, None]], dim=-1)
            return input_ids

    return GPT2LMHeadModel(config)


# -- T5 -------------------------------------------------------------------------------------------
def make_t5(
    torch,
    nn,
    F,
    vocab_size=50,
    d_model=16,
    d_kv=4,
    d_ff=32,
    num_layers=2,
    num_decoder_layers=2,
    num_heads=4,
    relative_attention_num_buckets=8,
    relative_attention_max_distance=16,
    dropout_rate=0.1,
    layer_norm_epsilon=1e-6,
    initializer_factor=1.0,
    feed_forward_proj="gated-gelu",
    tie_word_embeddings=False,
    pad_token_id=0,
    decoder_start_token_id=0,
):
    """``T5ForConditionalGeneration``: the float32 RMS ``T5LayerNorm``, bucketed relative
    position biases (computed by each stack's first layer, reused by the others), attention
    without scaling or biases, the encoder-decoder with cross attention, the gated-GELU (v1.1)
    or ReLU (v1.0) feed-forward, ``_shift_right`` of the labels, and for tied embeddings the
    ``d_model ** -0.5`` rescaling before the head. ``forward(input_ids, attention_mask,
    labels)`` returns ``(loss, lm_logits, encoder_last_hidden_state)``."""
    config = SimpleNamespace(**{k: v for k, v in locals().items() if k not in ("torch", "nn", "F")})
    ACT2FN = _activations(torch, nn, F)

    class T5LayerNorm(nn.Module):
        def __init__(self, hidden_size, eps=1e-6):
            """Scales only: no bias, no mean subtracted (root mean square layer norm)."""
            super().__init__()
            self.weight = nn.Parameter(torch.ones(hidden_size))
            self.variance_epsilon = eps

        def forward(self, hidden_states):
            # the variance in float32 whatever the input's dtype
            variance = hidden_states.to(torch.float32).pow(2).mean(-1, keepdim=True)
            hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
            if self.weight.dtype in [torch.float16, torch.bfloat16]:
                hidden_states = hidden_states.to(self.weight.dtype)
            return self.weight * hidden_states

    class T5DenseActDense(nn.Module):
        def __init__(self, config):
            super().__init__()
            self.wi = nn.Linear(config.d_model, config.d_ff, bias=False)
            self.wo = nn.Linear(config.d_ff, config.d_model, bias=False)
            self.dropout = nn.Dropout(config.dropout_rate)
            self.act = ACT2FN["relu"]

        def forward(self, hidden_states):
            hidden_states = self.dropout(self.act(self.wi(hidden_states)))
            hidden_states = hidden_states.to(self.wo.weight.dtype)
            return self.wo(hidden_states)

    class T5DenseGatedActDense(nn.Module):
        def __init__(self, config):
            super().__init__()
            self.wi_0 = nn.Linear(config.d_model, config.d_ff, bias=False)
            self.wi_1 = nn.Linear(config.d_model, config.d_ff, bias=False)
            self.wo = nn.Linear(config.d_ff, config.d_model, bias=False)
            self.dropout = nn.Dropout(config.dropout_rate)
            self.act = ACT2FN["gelu_new"]

        def forward(self, hidden_states):
            hidden_gelu = self.act(self.wi_0(hidden_states))
            hidden_linear = self.wi_1(hidden_states)
            hidden_states = self.dropout(hidden_gelu * hidden_linear)
            if (
                isinstance(self.wo.weight, torch.Tensor)
                and hidden_states.dtype != self.wo.weight.dtype
                and self.wo.weight.dtype != torch.int8
            ):
                hidden_states = hidden_states.to(self.wo.weight.dtype)
            return self.wo(hidden_states)

    class T5LayerFF(nn.Module):
        def __init__(self, config):
            super().__init__()
            if config.feed_forward_proj == "gated-gelu":
                self.DenseReluDense = T5DenseGatedActDense(config)
            else:
                self.DenseReluDense = T5DenseActDense(config)
            self.layer_norm = T5LayerNorm(config.d_model, eps=config.layer_norm_epsilon)
            self.dropout = nn.Dropout(config.dropout_rate)

        def forward(self, hidden_states):
            forwarded_states = self.DenseReluDense(self.layer_norm(hidden_states))
            return hidden_states + self.dropout(forwarded_states)

    class T5Attention(nn.Module):
        def __init__(self, config, has_relative_attention_bias=False, is_decoder=False):
            super().__init__()
            self.is_decoder = is_decoder
            self.has_relative_attention_bias = has_relative_attention_bias
            self.relative_attention_num_buckets = config.relative_attention_num_buckets
            self.relative_attention_max_distance = config.relative_attention_max_distance
            self.d_model = config.d_model
            self.key_value_proj_dim = config.d_kv
            self.n_heads = config.num_heads
            self.dropout = config.dropout_rate
            self.inner_dim = self.n_heads * self.key_value_proj_dim
            self.q = nn.Linear(self.d_model, self.inner_dim, bias=False)
            self.k = nn.Linear(self.d_model, self.inner_dim, bias=False)
            self.v = nn.Linear(self.d_model, self.inner_dim, bias=False)
            self.o = nn.Linear(self.inner_dim, self.d_model, bias=False)
            if self.has_relative_attention_bias:
                self.relative_attention_bias = nn.Embedding(
                    self.relative_attention_num_buckets, self.n_heads
                )

        @staticmethod
        def _relative_position_bucket(
            relative_position, bidirectional=True, num_buckets=32, max_distance=128
        ):
            # Mesh TensorFlow's buckets: exact for small distances, logarithmic up to
            # max_distance, everything farther in the last bucket
            relative_buckets = 0
            if bidirectional:
                num_buckets //= 2
                relative_buckets += (relative_position > 0).to(torch.long) * num_buckets
                relative_position = torch.abs(relative_position)
            else:
                relative_position = -torch.min(
                    relative_position, torch.zeros_like(relative_position)
                )
            max_exact = num_buckets // 2
            is_small = relative_position < max_exact
            relative_position_if_large = max_exact + (
                torch.log(relative_position.float() / max_exact)
                / math.log(max_distance / max_exact)
                * (num_buckets - max_exact)
            ).to(torch.long)
            relative_position_if_large = torch.min(
                relative_position_if_large,
                torch.full_like(relative_position_if_large, num_buckets - 1),
            )
            relative_buckets += torch.where(is_small, relative_position, relative_position_if_large)
            return relative_buckets

        def compute_bias(self, query_length, key_length):
            context_position = torch.arange(query_length, dtype=torch.long)[:, None]
            memory_position = torch.arange(key_length, dtype=torch.long)[None, :]
            relative_position = memory_position - context_position  # (query, key)
            relative_position_bucket = self._relative_position_bucket(
                relative_position,
                bidirectional=(not self.is_decoder),
                num_buckets=self.relative_attention_num_buckets,
                max_distance=self.relative_attention_max_distance,
            )
            values = self.relative_attention_bias(relative_position_bucket)  # (q, k, heads)
            return values.permute([2, 0, 1]).unsqueeze(0)  # (1, heads, q, k)

        def forward(self, hidden_states, mask=None, key_value_states=None, position_bias=None):
            batch_size, seq_length = hidden_states.shape[:2]
            key_length = seq_length if key_value_states is None else key_value_states.shape[1]

            def shape(states):
                return states.view(batch_size, -1, self.n_heads, self.key_value_proj_dim).transpose(
                    1, 2
                )

            def unshape(states):
                return states.transpose(1, 2).contiguous().view(batch_size, -1, self.inner_dim)

            source = hidden_states if key_value_states is None else key_value_states
            query_states = shape(self.q(hidden_states))
            key_states = shape(self.k(source))
            value_states = shape(self.v(source))
            scores = torch.matmul(query_states, key_states.transpose(3, 2))  # no 1/sqrt(d)
            if position_bias is None:
                if not self.has_relative_attention_bias:
                    position_bias = torch.zeros(
                        (1, self.n_heads, seq_length, key_length), dtype=scores.dtype
                    )
                else:
                    position_bias = self.compute_bias(seq_length, key_length)
                if mask is not None:
                    position_bias = position_bias + mask  # (batch, heads, q, k)
            scores += position_bias
            attn_weights = nn.functional.softmax(scores.float(), dim=-1).type_as(scores)
            attn_weights = nn.functional.dropout(
                attn_weights, p=self.dropout, training=self.training
            )
            attn_output = unshape(torch.matmul(attn_weights, value_states))
            return self.o(attn_output), position_bias

    class T5LayerSelfAttention(nn.Module):
        def __init__(self, config, has_relative_attention_bias=False, is_decoder=False):
            super().__init__()
            self.SelfAttention = T5Attention(config, has_relative_attention_bias, is_decoder)
            self.layer_norm = T5LayerNorm(config.d_model, eps=config.layer_norm_epsilon)
            self.dropout = nn.Dropout(config.dropout_rate)

        def forward(self, hidden_states, attention_mask=None, position_bias=None):
            normed_hidden_states = self.layer_norm(hidden_states)
            attention_output, position_bias = self.SelfAttention(
                normed_hidden_states, mask=attention_mask, position_bias=position_bias
            )
            return hidden_states + self.dropout(attention_output), position_bias

    class T5LayerCrossAttention(nn.Module):
        def __init__(self, config):
            super().__init__()
            self.EncDecAttention = T5Attention(config, has_relative_attention_bias=False)
            self.layer_norm = T5LayerNorm(config.d_model, eps=config.layer_norm_epsilon)
            self.dropout = nn.Dropout(config.dropout_rate)

        def forward(self, hidden_states, key_value_states, attention_mask=None, position_bias=None):
            normed_hidden_states = self.layer_norm(hidden_states)
            attention_output, position_bias = self.EncDecAttention(
                normed_hidden_states,
                mask=attention_mask,
                key_value_states=key_value_states,
                position_bias=position_bias,
            )
            return hidden_states + self.dropout(attention_output), position_bias

    class T5Block(nn.Module):
        def __init__(self, config, has_relative_attention_bias=False, is_decoder=False):
            super().__init__()
            self.is_decoder = is_decoder
            self.layer = nn.ModuleList()
            self.layer.append(T5LayerSelfAttention(config, has_relative_attention_bias, is_decoder))
            if self.is_decoder:
                self.layer.append(T5LayerCrossAttention(config))
            self.layer.append(T5LayerFF(config))

        def forward(
            self,
            hidden_states,
            attention_mask=None,
            position_bias=None,
            encoder_hidden_states=None,
            encoder_attention_mask=None,
            encoder_decoder_position_bias=None,
        ):
            hidden_states, position_bias = self.layer[0](
                hidden_states, attention_mask, position_bias
            )
            if self.is_decoder and encoder_hidden_states is not None:
                hidden_states, encoder_decoder_position_bias = self.layer[1](
                    hidden_states,
                    encoder_hidden_states,
                    encoder_attention_mask,
                    encoder_decoder_position_bias,
                )
            hidden_states = self.layer[-1](hidden_states)
            return hidden_states, position_bias, encoder_decoder_position_bias

    class T5Stack(nn.Module):
        def __init__(self, config, embed_tokens, is_decoder, num_layers):
            super().__init__()
            self.embed_tokens = embed_tokens
            self.is_decoder = is_decoder
            self.block = nn.ModuleList(
                [T5Block(config, bool(i == 0), is_decoder) for i in range(num_layers)]
            )
            self.final_layer_norm = T5LayerNorm(config.d_model, eps=config.layer_norm_epsilon)
            self.dropout = nn.Dropout(config.dropout_rate)

        def forward(
            self,
            input_ids,
            attention_mask=None,
            encoder_hidden_states=None,
            encoder_attention_mask=None,
        ):
            batch_size, seq_length = input_ids.size()
            inputs_embeds = self.embed_tokens(input_ids)
            dtype = inputs_embeds.dtype
            if attention_mask is None:
                attention_mask = torch.ones(batch_size, seq_length)
            if self.is_decoder:
                seq_ids = torch.arange(seq_length)
                causal_mask = (
                    seq_ids[None, None, :].repeat(batch_size, seq_length, 1)
                    <= seq_ids[None, :, None]
                )
                causal_mask = causal_mask.to(attention_mask.dtype)
                extended = causal_mask[:, None, :, :] * attention_mask[:, None, None, :]
            else:
                extended = attention_mask[:, None, None, :]
            extended = (1.0 - extended.to(dtype=dtype)) * torch.finfo(dtype).min
            encoder_extended = None
            if encoder_hidden_states is not None:
                if encoder_attention_mask is None:
                    encoder_attention_mask = torch.ones(encoder_hidden_states.size()[:2])
                encoder_extended = encoder_attention_mask[:, None, None, :].to(dtype=dtype)
                encoder_extended = (1.0 - encoder_extended) * torch.finfo(dtype).min
            position_bias = None
            encoder_decoder_position_bias = None
            hidden_states = self.dropout(inputs_embeds)
            for layer_module in self.block:
                hidden_states, position_bias, encoder_decoder_position_bias = layer_module(
                    hidden_states,
                    attention_mask=extended,
                    position_bias=position_bias,
                    encoder_hidden_states=encoder_hidden_states,
                    encoder_attention_mask=encoder_extended,
                    encoder_decoder_position_bias=encoder_decoder_position_bias,
                )
            hidden_states = self.final_layer_norm(hidden_states)
            return self.dropout(hidden_states)

    class T5ForConditionalGeneration(nn.Module):
        def __init__(self, config):
            super().__init__()
            self.config = config
            self.model_dim = config.d_model
            self.shared = nn.Embedding(config.vocab_size, config.d_model)
            self.encoder = T5Stack(config, self.shared, False, config.num_layers)
            self.decoder = T5Stack(config, self.shared, True, config.num_decoder_layers)
            self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False)
            self.apply(self._init_weights)
            if config.tie_word_embeddings:
                self.lm_head.weight = self.shared.weight

        def _init_weights(self, module):
            factor = self.config.initializer_factor
            d_model, d_kv, d_ff = self.config.d_model, self.config.d_kv, self.config.d_ff
            if isinstance(module, T5LayerNorm):
                module.weight.data.fill_(factor * 1.0)
            elif isinstance(module, T5ForConditionalGeneration):
                module.shared.weight.data.normal_(mean=0.0, std=factor * 1.0)
                if not self.config.tie_word_embeddings:
                    module.lm_head.weight.data.normal_(mean=0.0, std=factor * 1.0)
            elif isinstance(module, T5DenseActDense):
                module.wi.weight.data.normal_(mean=0.0, std=factor * (d_model**-0.5))
                module.wo.weight.data.normal_(mean=0.0, std=factor * (d_ff**-0.5))
            elif isinstance(module, T5DenseGatedActDense):
                module.wi_0.weight.data.normal_(mean=0.0, std=factor * (d_model**-0.5))
                module.wi_1.weight.data.normal_(mean=0.0, std=factor * (d_model**-0.5))
                module.wo.weight.data.normal_(mean=0.0, std=factor * (d_ff**-0.5))
            elif isinstance(module, T5Attention):
                n_heads = self.config.num_heads
                module.q.weight.data.normal_(mean=0.0, std=factor * ((d_model * d_kv) ** -0.5))
                module.k.weight.data.normal_(mean=0.0, std=factor * (d_model**-0.5))
                module.v.weight.data.normal_(mean=0.0, std=factor * (d_model**-0.5))
                module.o.weight.data.normal_(mean=0.0, std=factor * ((n_heads * d_kv) ** -0.5))
                if module.has_relative_attention_bias:
                    module.relative_attention_bias.weight.data.normal_(
                        mean=0.0, std=factor * (d_model**-0.5)
                    )

        def _shift_right(self, input_ids):
            shifted_input_ids = input_ids.new_zeros(input_ids.shape)
            shifted_input_ids[..., 1:] = input_ids[..., :-1].clone()
            shifted_input_ids[..., 0] = self.config.decoder_start_token_id
            # the labels' -100 (ignored by the loss) become padding as decoder inputs
            shifted_input_ids.masked_fill_(shifted_input_ids == -100, self.config.pad_token_id)
            return shifted_input_ids

        def forward(self, input_ids, attention_mask=None, labels=None):
            hidden_states = self.encoder(input_ids, attention_mask=attention_mask)
            decoder_input_ids = self._shift_right(labels)
            sequence_output = self.decoder(
                decoder_input_ids,
                encoder_hidden_states=hidden_states,
                encoder_attention_mask=attention_mask,
            )
            if self.config.tie_word_embeddings:
                sequence_output = sequence_output * (self.model_dim**-0.5)
            lm_logits = self.lm_head(sequence_output)
            loss_fct = nn.CrossEntropyLoss(ignore_index=-100)
            loss = loss_fct(lm_logits.view(-1, lm_logits.size(-1)), labels.view(-1))
            return loss, lm_logits, hidden_states

    return T5ForConditionalGeneration(config)
