"""Round 73 of the zoo: language (and one audio) models as Hugging Face transformers writes
them, for either library.

Each ``make_*(torch, nn, F, ...)`` builds its model from the given library (``torch`` or
``retrograd``, with its ``nn`` and ``nn.functional``), in the style of transformers'
``modeling_{bert,gpt2,t5,mixtral,mamba,whisper}.py``: the same layers, the same ops
(``Conv1D`` through ``addmm``, the ``finfo.min`` masks, T5's relative position buckets,
Mixtral's top-k router with ``one_hot`` and ``index_add_``, Mamba's sequential scan), the same
initialization; the text is this file's own. Sizes are tiny so that
``tests/test_model_zoo_73.py`` runs each in float64 in well under a second. Every ``forward``
returns a tuple whose first entry is the model's own loss.
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


# -- Mixtral --------------------------------------------------------------------------------------
def make_mixtral(
    torch,
    nn,
    F,
    vocab_size=50,
    hidden_size=16,
    intermediate_size=24,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    num_local_experts=4,
    num_experts_per_tok=2,
    router_aux_loss_coef=0.02,
    max_position_embeddings=16,
    rms_norm_eps=1e-5,
    rope_theta=1e6,
    initializer_range=0.02,
    tie_word_embeddings=False,
):
    """``MixtralForCausalLM``, the eager path: RMS norms, rotary embeddings, grouped-query
    attention, and in place of the MLP the sparse mixture of experts (a float32 router softmax,
    ``topk``, the top-k weights renormalized, ``one_hot`` expert masks, ``torch.where`` of a
    mask, each expert on its tokens, ``index_add_`` back), with the router's load-balancing loss.
    ``forward(input_ids, labels)`` returns ``(loss, logits, aux_loss)``."""
    config = SimpleNamespace(**{k: v for k, v in locals().items() if k not in ("torch", "nn", "F")})

    class MixtralRMSNorm(nn.Module):
        def __init__(self, hidden_size, eps=1e-6):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(hidden_size))
            self.variance_epsilon = eps

        def forward(self, hidden_states):
            input_dtype = hidden_states.dtype
            hidden_states = hidden_states.to(torch.float32)
            variance = hidden_states.pow(2).mean(-1, keepdim=True)
            hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
            return self.weight * hidden_states.to(input_dtype)

    def rotate_half(x):
        x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2 :]
        return torch.cat((-x2, x1), dim=-1)

    class MixtralRotaryEmbedding(nn.Module):
        def __init__(self, dim, base):
            super().__init__()
            inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
            self.register_buffer("inv_freq", inv_freq, persistent=False)

        @torch.no_grad()
        def forward(self, x, position_ids):
            inv_freq_expanded = self.inv_freq[None, :, None].float()
            inv_freq_expanded = inv_freq_expanded.expand(position_ids.shape[0], -1, 1)
            position_ids_expanded = position_ids[:, None, :].float()
            freqs = (inv_freq_expanded @ position_ids_expanded).transpose(1, 2)
            emb = torch.cat((freqs, freqs), dim=-1)
            return emb.cos().to(dtype=x.dtype), emb.sin().to(dtype=x.dtype)

    class MixtralAttention(nn.Module):
        def __init__(self, config):
            super().__init__()
            self.num_heads = config.num_attention_heads
            self.head_dim = config.hidden_size // self.num_heads
            self.num_key_value_heads = config.num_key_value_heads
            self.num_key_value_groups = self.num_heads // self.num_key_value_heads
            self.scaling = self.head_dim**-0.5
            kv_size = self.num_key_value_heads * self.head_dim
            self.q_proj = nn.Linear(config.hidden_size, self.num_heads * self.head_dim, bias=False)
            self.k_proj = nn.Linear(config.hidden_size, kv_size, bias=False)
            self.v_proj = nn.Linear(config.hidden_size, kv_size, bias=False)
            self.o_proj = nn.Linear(self.num_heads * self.head_dim, config.hidden_size, bias=False)

        def forward(self, hidden_states, position_embeddings, attention_mask):
            input_shape = hidden_states.shape[:-1]
            hidden_shape = (*input_shape, -1, self.head_dim)
            query_states = self.q_proj(hidden_states).view(hidden_shape).transpose(1, 2)
            key_states = self.k_proj(hidden_states).view(hidden_shape).transpose(1, 2)
            value_states = self.v_proj(hidden_states).view(hidden_shape).transpose(1, 2)
            cos, sin = position_embeddings
            cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
            query_states = (query_states * cos) + (rotate_half(query_states) * sin)
            key_states = (key_states * cos) + (rotate_half(key_states) * sin)
            # repeat_kv via repeat_interleave on the head dimension
            key_states = torch.repeat_interleave(key_states, self.num_key_value_groups, dim=1)
            value_states = torch.repeat_interleave(value_states, self.num_key_value_groups, dim=1)
            attn_weights = torch.matmul(query_states, key_states.transpose(2, 3)) * self.scaling
            attn_weights = attn_weights + attention_mask
            attn_weights = nn.functional.softmax(attn_weights, dim=-1, dtype=torch.float32).to(
                query_states.dtype
            )
            attn_output = torch.matmul(attn_weights, value_states).transpose(1, 2).contiguous()
            return self.o_proj(attn_output.reshape(*input_shape, -1).contiguous())

    class MixtralBlockSparseTop2MLP(nn.Module):
        def __init__(self, config):
            super().__init__()
            self.w1 = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
            self.w2 = nn.Linear(config.intermediate_size, config.hidden_size, bias=False)
            self.w3 = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
            self.act_fn = nn.SiLU()

        def forward(self, hidden_states):
            current_hidden_states = self.act_fn(self.w1(hidden_states)) * self.w3(hidden_states)
            return self.w2(current_hidden_states)

    class MixtralSparseMoeBlock(nn.Module):
        def __init__(self, config):
            super().__init__()
            self.hidden_dim = config.hidden_size
            self.num_experts = config.num_local_experts
            self.top_k = config.num_experts_per_tok
            self.gate = nn.Linear(self.hidden_dim, self.num_experts, bias=False)
            self.experts = nn.ModuleList(
                [MixtralBlockSparseTop2MLP(config) for _ in range(self.num_experts)]
            )

        def forward(self, hidden_states):
            batch_size, sequence_length, hidden_dim = hidden_states.shape
            hidden_states = hidden_states.view(-1, hidden_dim)
            router_logits = self.gate(hidden_states)  # (tokens, experts)
            routing_weights = F.softmax(router_logits, dim=1, dtype=torch.float)
            routing_weights, selected_experts = torch.topk(routing_weights, self.top_k, dim=-1)
            routing_weights /= routing_weights.sum(dim=-1, keepdim=True)
            routing_weights = routing_weights.to(hidden_states.dtype)
            final_hidden_states = torch.zeros(
                (batch_size * sequence_length, hidden_dim),
                dtype=hidden_states.dtype,
                device=hidden_states.device,
            )
            # (experts, top_k, tokens): which tokens each expert serves, and in which slot
            expert_mask = F.one_hot(selected_experts, num_classes=self.num_experts).permute(2, 1, 0)
            expert_hit = torch.greater(expert_mask.sum(dim=(-1, -2)), 0).nonzero()
            for expert_idx in expert_hit:
                expert_layer = self.experts[expert_idx]
                idx, top_x = torch.where(expert_mask[expert_idx].squeeze(0))
                current_state = hidden_states[None, top_x].reshape(-1, hidden_dim)
                current_hidden_states = (
                    expert_layer(current_state) * routing_weights[top_x, idx, None]
                )
                final_hidden_states.index_add_(
                    0, top_x, current_hidden_states.to(hidden_states.dtype)
                )
            final_hidden_states = final_hidden_states.reshape(
                batch_size, sequence_length, hidden_dim
            )
            return final_hidden_states, router_logits

    class MixtralDecoderLayer(nn.Module):
        def __init__(self, config):
            super().__init__()
            self.self_attn = MixtralAttention(config)
            self.block_sparse_moe = MixtralSparseMoeBlock(config)
            self.input_layernorm = MixtralRMSNorm(config.hidden_size, eps=config.rms_norm_eps)
            self.post_attention_layernorm = MixtralRMSNorm(
                config.hidden_size, eps=config.rms_norm_eps
            )

        def forward(self, hidden_states, position_embeddings, attention_mask):
            residual = hidden_states
            hidden_states = self.self_attn(
                self.input_layernorm(hidden_states), position_embeddings, attention_mask
            )
            hidden_states = residual + hidden_states
            residual = hidden_states
            hidden_states, router_logits = self.block_sparse_moe(
                self.post_attention_layernorm(hidden_states)
            )
            return residual + hidden_states, router_logits

    def load_balancing_loss_func(gate_logits, num_experts, top_k):
        """Switch Transformer's auxiliary loss: the fraction of tokens sent to each expert times
        the router's mean probability for it, summed, times the number of experts."""
        concatenated_gate_logits = torch.cat(list(gate_logits), dim=0)
        routing_weights = torch.nn.functional.softmax(concatenated_gate_logits, dim=-1)
        _, selected_experts = torch.topk(routing_weights, top_k, dim=-1)
        expert_mask = torch.nn.functional.one_hot(selected_experts, num_experts)
        tokens_per_expert = torch.mean(expert_mask.float(), dim=0)
        router_prob_per_expert = torch.mean(routing_weights, dim=0)
        overall_loss = torch.sum(tokens_per_expert * router_prob_per_expert.unsqueeze(0))
        return overall_loss * num_experts

    class MixtralModel(nn.Module):
        def __init__(self, config):
            super().__init__()
            self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
            self.layers = nn.ModuleList(
                [MixtralDecoderLayer(config) for _ in range(config.num_hidden_layers)]
            )
            self.norm = MixtralRMSNorm(config.hidden_size, eps=config.rms_norm_eps)
            head_dim = config.hidden_size // config.num_attention_heads
            self.rotary_emb = MixtralRotaryEmbedding(head_dim, config.rope_theta)

        def forward(self, input_ids):
            inputs_embeds = self.embed_tokens(input_ids)
            batch, seq = input_ids.shape
            position_ids = torch.arange(seq).unsqueeze(0).expand(batch, -1)
            min_dtype = torch.finfo(inputs_embeds.dtype).min
            causal_mask = torch.full((seq, seq), fill_value=min_dtype, dtype=inputs_embeds.dtype)
            causal_mask = torch.triu(causal_mask, diagonal=1)[None, None, :, :]
            position_embeddings = self.rotary_emb(inputs_embeds, position_ids)
            hidden_states = inputs_embeds
            all_router_logits = ()
            for decoder_layer in self.layers:
                hidden_states, router_logits = decoder_layer(
                    hidden_states, position_embeddings, causal_mask
                )
                all_router_logits += (router_logits,)
            return self.norm(hidden_states), all_router_logits

    class MixtralForCausalLM(nn.Module):
        def __init__(self, config):
            super().__init__()
            self.config = config
            self.model = MixtralModel(config)
            self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
            self.apply(self._init_weights)
            if config.tie_word_embeddings:
                self.lm_head.weight = self.model.embed_tokens.weight

        def _init_weights(self, module):
            std = self.config.initializer_range
            if isinstance(module, (nn.Linear, nn.Embedding)):
                module.weight.data.normal_(mean=0.0, std=std)
            elif isinstance(module, MixtralRMSNorm):
                module.weight.data.fill_(1.0)

        def forward(self, input_ids, labels):
            hidden_states, router_logits = self.model(input_ids)
            logits = self.lm_head(hidden_states)
            shift_logits = logits[..., :-1, :].contiguous().view(-1, self.config.vocab_size)
            shift_labels = labels[..., 1:].contiguous().view(-1)
            loss = nn.functional.cross_entropy(shift_logits, shift_labels)
            aux_loss = load_balancing_loss_func(
                router_logits, self.config.num_local_experts, self.config.num_experts_per_tok
            )
            loss = loss + self.config.router_aux_loss_coef * aux_loss.to(loss.device)
            return loss, logits, aux_loss

    return MixtralForCausalLM(config)


# -- Mamba ----------------------------------------------------------------------------------------
def make_mamba(
    torch,
    nn,
    F,
    vocab_size=50,
    hidden_size=16,
    state_size=4,
    num_hidden_layers=2,
    expand=2,
    conv_kernel=4,
    use_bias=False,
    use_conv_bias=True,
    layer_norm_epsilon=1e-5,
    initializer_range=0.1,
    residual_in_fp32=False,
    time_step_rank="auto",
    time_step_scale=1.0,
    time_step_min=0.001,
    time_step_max=0.1,
    time_step_init_scheme="random",
    time_step_floor=1e-4,
    rescale_prenorm_residual=False,
):
    """``MambaForCausalLM`` on the sequential path (``MambaMixer.slow_forward``): the input
    projection chunked into states and gate, the depthwise causal ``Conv1d`` cut to the
    sequence, ``split`` into the step, B and C, a softplus step size, ``A = -exp(A_log)``, the
    discretized scan one position at a time, the skip ``D``, the SiLU gate; RMS norms, the head
    tied to the embeddings, the step-size bias from ``expm1`` and the rescaled ``kaiming_uniform_``
    output projections. The original's ``.float()`` of the logits is left out, so that float64
    logits stay float64. ``forward(input_ids, labels)`` returns ``(loss, logits)``."""
    config = SimpleNamespace(**{k: v for k, v in locals().items() if k not in ("torch", "nn", "F")})
    config.intermediate_size = int(expand * hidden_size)
    if time_step_rank == "auto":
        config.time_step_rank = math.ceil(hidden_size / 16)

    class MambaRMSNorm(nn.Module):
        def __init__(self, hidden_size, eps=1e-6):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(hidden_size))
            self.variance_epsilon = eps

        def forward(self, hidden_states):
            input_dtype = hidden_states.dtype
            hidden_states = hidden_states.to(torch.float32)
            variance = hidden_states.pow(2).mean(-1, keepdim=True)
            hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
            return self.weight * hidden_states.to(input_dtype)

    class MambaMixer(nn.Module):
        def __init__(self, config):
            super().__init__()
            self.hidden_size = config.hidden_size
            self.ssm_state_size = config.state_size
            self.conv_kernel_size = config.conv_kernel
            self.intermediate_size = config.intermediate_size
            self.time_step_rank = int(config.time_step_rank)
            self.conv1d = nn.Conv1d(
                in_channels=self.intermediate_size,
                out_channels=self.intermediate_size,
                bias=config.use_conv_bias,
                kernel_size=config.conv_kernel,
                groups=self.intermediate_size,
                padding=config.conv_kernel - 1,
            )
            self.act = nn.SiLU()
            self.in_proj = nn.Linear(
                self.hidden_size, self.intermediate_size * 2, bias=config.use_bias
            )
            self.x_proj = nn.Linear(
                self.intermediate_size, self.time_step_rank + self.ssm_state_size * 2, bias=False
            )
            self.dt_proj = nn.Linear(self.time_step_rank, self.intermediate_size, bias=True)
            # S4D real initialization: A = -(1, 2, ..., N) for every channel
            A = torch.arange(1, self.ssm_state_size + 1, dtype=torch.float32)[None, :]
            A = A.expand(self.intermediate_size, -1).contiguous()
            self.A_log = nn.Parameter(torch.log(A))
            self.D = nn.Parameter(torch.ones(self.intermediate_size))
            self.out_proj = nn.Linear(
                self.intermediate_size, self.hidden_size, bias=config.use_bias
            )

        def forward(self, input_states):
            batch_size, seq_len, _ = input_states.shape
            dtype = input_states.dtype
            # 1. the gated projection: (batch, 2 * intermediate, seq)
            projected_states = self.in_proj(input_states).transpose(1, 2)
            hidden_states, gate = projected_states.chunk(2, dim=1)
            # 2. the causal depthwise convolution
            hidden_states = self.act(self.conv1d(hidden_states)[..., :seq_len])
            ssm_state = torch.zeros(
                (batch_size, self.intermediate_size, self.ssm_state_size), dtype=dtype
            )
            # 3. the input-dependent step, B and C
            ssm_parameters = self.x_proj(hidden_states.transpose(1, 2))
            time_step, B, C = torch.split(
                ssm_parameters,
                [self.time_step_rank, self.ssm_state_size, self.ssm_state_size],
                dim=-1,
            )
            discrete_time_step = self.dt_proj(time_step)  # (batch, seq, intermediate)
            discrete_time_step = nn.functional.softplus(discrete_time_step).transpose(1, 2)
            # 3.b discretization: (batch, intermediate, seq, state)
            A = -torch.exp(self.A_log.float())
            discrete_A = torch.exp(A[None, :, None, :] * discrete_time_step[:, :, :, None])
            discrete_B = discrete_time_step[:, :, :, None] * B[:, None, :, :].float()
            deltaB_u = discrete_B * hidden_states[:, :, :, None].float()
            # 3.c the recurrence, one position at a time
            scan_outputs = []
            for i in range(seq_len):
                ssm_state = discrete_A[:, :, i, :] * ssm_state + deltaB_u[:, :, i, :]
                scan_output = torch.matmul(ssm_state.to(dtype), C[:, i, :].unsqueeze(-1))
                scan_outputs.append(scan_output[:, :, 0])
            scan_output = torch.stack(scan_outputs, dim=-1)  # (batch, intermediate, seq)
            scan_output = scan_output + (hidden_states * self.D[None, :, None])
            scan_output = scan_output * self.act(gate)
            # 4. back to the model's width
            return self.out_proj(scan_output.transpose(1, 2))

    class MambaBlock(nn.Module):
        def __init__(self, config):
            super().__init__()
            self.residual_in_fp32 = config.residual_in_fp32
            self.norm = MambaRMSNorm(config.hidden_size, eps=config.layer_norm_epsilon)
            self.mixer = MambaMixer(config)

        def forward(self, hidden_states):
            residual = hidden_states
            hidden_states = self.norm(hidden_states.to(dtype=self.norm.weight.dtype))
            if self.residual_in_fp32:
                residual = residual.to(torch.float32)
            return residual + self.mixer(hidden_states)

    class MambaModel(nn.Module):
        def __init__(self, config):
            super().__init__()
            self.embeddings = nn.Embedding(config.vocab_size, config.hidden_size)
            self.layers = nn.ModuleList(
                [MambaBlock(config) for _ in range(config.num_hidden_layers)]
            )
            self.norm_f = MambaRMSNorm(config.hidden_size, eps=config.layer_norm_epsilon)

        def forward(self, input_ids):
            hidden_states = self.embeddings(input_ids)
            for mixer_block in self.layers:
                hidden_states = mixer_block(hidden_states)
            return self.norm_f(hidden_states)

    class MambaForCausalLM(nn.Module):
        _tied_weights_keys = ["lm_head.weight"]

        def __init__(self, config):
            super().__init__()
            self.config = config
            self.backbone = MambaModel(config)
            self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
            self.apply(self._init_weights)
            self.lm_head.weight = self.backbone.embeddings.weight

        def _init_weights(self, module):
            config = self.config
            if isinstance(module, MambaMixer):
                module.A_log._no_weight_decay = True
                module.D._no_weight_decay = True
                dt_init_std = config.time_step_rank**-0.5 * config.time_step_scale
                if config.time_step_init_scheme == "constant":
                    nn.init.constant_(module.dt_proj.weight, dt_init_std)
                elif config.time_step_init_scheme == "random":
                    nn.init.uniform_(module.dt_proj.weight, -dt_init_std, dt_init_std)
                # step sizes log-uniform in [min, max]; the bias is softplus's inverse of them
                dt = torch.exp(
                    torch.rand(config.intermediate_size)
                    * (math.log(config.time_step_max) - math.log(config.time_step_min))
                    + math.log(config.time_step_min)
                ).clamp(min=config.time_step_floor)
                inv_dt = dt + torch.log(-torch.expm1(-dt))
                with torch.no_grad():
                    module.dt_proj.bias.copy_(inv_dt)
                module.dt_proj.bias._no_reinit = True
            if isinstance(module, nn.Linear):
                if module.bias is not None and not getattr(module.bias, "_no_reinit", False):
                    nn.init.zeros_(module.bias)
            elif isinstance(module, nn.Embedding):
                nn.init.normal_(module.weight, std=config.initializer_range)
            if config.rescale_prenorm_residual:
                for name, p in module.named_parameters():
                    if name in ["out_proj.weight"]:
                        nn.init.kaiming_uniform_(p, a=math.sqrt(5))
                        with torch.no_grad():
                            p /= math.sqrt(config.num_hidden_layers)

        def forward(self, input_ids, labels):
            hidden_states = self.backbone(input_ids)
            logits = self.lm_head(hidden_states.to(self.lm_head.weight.dtype))
            shift_logits = logits[..., :-1, :].contiguous()
            shift_labels = labels[..., 1:].contiguous()
            loss_fct = nn.CrossEntropyLoss()
            loss = loss_fct(shift_logits.view(-1, shift_logits.size(-1)), shift_labels.view(-1))
            return loss, logits

    return MambaForCausalLM(config)


# -- Whisper's encoder ----------------------------------------------------------------------------
def make_whisper_encoder(
    torch,
    nn,
    F,
    num_mel_bins=6,
    d_model=16,
    encoder_layers=2,
    encoder_attention_heads=4,
    encoder_ffn_dim=32,
    max_source_positions=4,
    dropout=0.1,
    attention_dropout=0.1,
    activation_dropout=0.1,
    activation_function="gelu",
    scale_embedding=False,
    init_std=0.02,
    classifier_proj_size=8,
    num_labels=3,
):
    """``WhisperForAudioClassification`` (Whisper's encoder and a mean-pooled head): two
    ``Conv1d`` stems with GELU (the second of stride 2), frozen sinusoidal positions written
    by ``copy_`` under ``no_grad``, pre-LN blocks with the query scaled before the product and
    no bias on the keys. ``forward(input_features, labels)`` returns ``(loss, logits)``."""
    config = SimpleNamespace(**{k: v for k, v in locals().items() if k not in ("torch", "nn", "F")})
    ACT2FN = _activations(torch, nn, F)

    def sinusoids(length, channels, max_timescale=10000):
        """The transformer's sine and cosine positions, as OpenAI's Whisper writes them."""
        log_timescale_increment = math.log(max_timescale) / (channels // 2 - 1)
        inv_timescales = torch.exp(-log_timescale_increment * torch.arange(channels // 2))
        scaled_time = torch.arange(length).view(-1, 1) * inv_timescales.view(1, -1)
        return torch.cat([scaled_time.sin(), scaled_time.cos()], dim=1)

    class WhisperAttention(nn.Module):
        def __init__(self, embed_dim, num_heads, dropout=0.0):
            super().__init__()
            self.embed_dim = embed_dim
            self.num_heads = num_heads
            self.dropout = dropout
            self.head_dim = embed_dim // num_heads
            self.scaling = self.head_dim**-0.5
            self.k_proj = nn.Linear(embed_dim, embed_dim, bias=False)
            self.v_proj = nn.Linear(embed_dim, embed_dim, bias=True)
            self.q_proj = nn.Linear(embed_dim, embed_dim, bias=True)
            self.out_proj = nn.Linear(embed_dim, embed_dim, bias=True)

        def _shape(self, tensor, seq_len, bsz):
            return tensor.view(bsz, seq_len, self.num_heads, self.head_dim).transpose(1, 2)

        def forward(self, hidden_states):
            bsz, tgt_len, _ = hidden_states.size()
            query_states = self._shape(self.q_proj(hidden_states) * self.scaling, tgt_len, bsz)
            key_states = self._shape(self.k_proj(hidden_states), -1, bsz)
            value_states = self._shape(self.v_proj(hidden_states), -1, bsz)
            attn_weights = torch.matmul(query_states, key_states.transpose(2, 3))
            attn_weights = nn.functional.softmax(attn_weights, dim=-1)
            attn_probs = nn.functional.dropout(attn_weights, p=self.dropout, training=self.training)
            attn_output = torch.matmul(attn_probs, value_states)
            attn_output = attn_output.transpose(1, 2).reshape(bsz, tgt_len, self.embed_dim)
            return self.out_proj(attn_output)

    class WhisperEncoderLayer(nn.Module):
        def __init__(self, config):
            super().__init__()
            self.embed_dim = config.d_model
            self.self_attn = WhisperAttention(
                self.embed_dim, config.encoder_attention_heads, config.attention_dropout
            )
            self.self_attn_layer_norm = nn.LayerNorm(self.embed_dim)
            self.dropout = config.dropout
            self.activation_fn = ACT2FN[config.activation_function]
            self.activation_dropout = config.activation_dropout
            self.fc1 = nn.Linear(self.embed_dim, config.encoder_ffn_dim)
            self.fc2 = nn.Linear(config.encoder_ffn_dim, self.embed_dim)
            self.final_layer_norm = nn.LayerNorm(self.embed_dim)

        def forward(self, hidden_states):
            residual = hidden_states
            hidden_states = self.self_attn(self.self_attn_layer_norm(hidden_states))
            hidden_states = nn.functional.dropout(
                hidden_states, p=self.dropout, training=self.training
            )
            hidden_states = residual + hidden_states
            residual = hidden_states
            hidden_states = self.activation_fn(self.fc1(self.final_layer_norm(hidden_states)))
            hidden_states = nn.functional.dropout(
                hidden_states, p=self.activation_dropout, training=self.training
            )
            hidden_states = self.fc2(hidden_states)
            hidden_states = nn.functional.dropout(
                hidden_states, p=self.dropout, training=self.training
            )
            return residual + hidden_states

    class WhisperEncoder(nn.Module):
        def __init__(self, config):
            super().__init__()
            self.dropout = config.dropout
            embed_dim = config.d_model
            self.max_source_positions = config.max_source_positions
            self.embed_scale = math.sqrt(embed_dim) if config.scale_embedding else 1.0
            self.conv1 = nn.Conv1d(config.num_mel_bins, embed_dim, kernel_size=3, padding=1)
            self.conv2 = nn.Conv1d(embed_dim, embed_dim, kernel_size=3, stride=2, padding=1)
            self.embed_positions = nn.Embedding(self.max_source_positions, embed_dim)
            self.embed_positions.requires_grad_(False)
            self.layers = nn.ModuleList(
                [WhisperEncoderLayer(config) for _ in range(config.encoder_layers)]
            )
            self.layer_norm = nn.LayerNorm(config.d_model)

        def forward(self, input_features):
            expected_seq_length = (
                self.max_source_positions * self.conv1.stride[0] * self.conv2.stride[0]
            )
            if input_features.shape[-1] != expected_seq_length:
                raise ValueError(
                    f"Whisper expects the mel input features to be of length "
                    f"{expected_seq_length}, got {input_features.shape[-1]}"
                )
            inputs_embeds = nn.functional.gelu(self.conv1(input_features))
            inputs_embeds = nn.functional.gelu(self.conv2(inputs_embeds))
            inputs_embeds = inputs_embeds.permute(0, 2, 1)
            hidden_states = inputs_embeds + self.embed_positions.weight
            hidden_states = nn.functional.dropout(
                hidden_states, p=self.dropout, training=self.training
            )
            for encoder_layer in self.layers:
                hidden_states = encoder_layer(hidden_states)
            return self.layer_norm(hidden_states)

    class WhisperForAudioClassification(nn.Module):
        def __init__(self, config):
            super().__init__()
            self.config = config
            self.encoder = WhisperEncoder(config)
            self.projector = nn.Linear(config.d_model, config.classifier_proj_size)
            self.classifier = nn.Linear(config.classifier_proj_size, config.num_labels)
            self.apply(self._init_weights)

        def _init_weights(self, module):
            std = self.config.init_std
            if isinstance(module, (nn.Linear, nn.Conv1d)):
                module.weight.data.normal_(mean=0.0, std=std)
                if module.bias is not None:
                    module.bias.data.zero_()
            elif isinstance(module, nn.Embedding):
                module.weight.data.normal_(mean=0.0, std=std)
            elif isinstance(module, nn.LayerNorm):
                module.weight.data.fill_(1.0)
                module.bias.data.zero_()
            elif isinstance(module, WhisperEncoder):
                with torch.no_grad():
                    embed_positions = module.embed_positions.weight
                    embed_positions.copy_(sinusoids(*embed_positions.shape))

        def forward(self, input_features, labels):
            hidden_states = self.projector(self.encoder(input_features))
            pooled_output = hidden_states.mean(dim=1)
            logits = self.classifier(pooled_output)
            loss_fct = nn.CrossEntropyLoss()
            loss = loss_fct(logits.view(-1, self.config.num_labels), labels.view(-1))
            return loss, logits

    return WhisperForAudioClassification(config)
