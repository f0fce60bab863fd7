# ruff: noqa: E501  (the programs are kept as their authors wrote them)
"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):
huggingface/transformers' BERT in plain torch, with its training utilities:

- ``models/bert/modeling_bert.py`` (the 4.3x eager code, small): ``BertEmbeddings`` with
  ``register_buffer("position_ids", torch.arange(n).expand((1, -1)), persistent=False)`` and a
  ``token_type_ids`` buffer of ``torch.zeros(self.position_ids.size(), dtype=torch.long)``
  sliced and ``expand``-ed, ``embeddings += position_embeddings``; ``BertSelfAttention``'s
  ``transpose_for_scores`` (``x.size()[:-1] + (heads, head_size)`` viewed, ``permute(0, 2, 1,
  3)``), the ``relative_key``/``relative_key_query`` position scores by ``torch.einsum(
  "bhld,lrd->bhlr")`` over a ``distance_embedding`` of ``arange(...).view(-1, 1) - arange(...)
  .view(1, -1)``, ``head_mask``, ``output_attentions``; ``BertSelfOutput``/``BertOutput``
  residual ``LayerNorm``s; ``apply_chunking_to_forward`` (``inspect.signature(forward_fn)
  .parameters``, ``chunk(num_chunks, dim=chunk_dim)``, ``zip(*input_tensors_chunks)``);
  ``BertEncoder`` with gradient checkpointing through ``torch.utils.checkpoint.checkpoint(
  create_custom_forward(layer_module), ...)``; ``get_extended_attention_mask`` (``[:, None,
  None, :]``, ``(1.0 - mask) * torch.finfo(dtype).min``); ``BertPooler`` on ``hidden_states[:,
  0]``; ``BertForSequenceClassification`` deciding ``problem_type`` from ``labels.dtype ==
  torch.long`` (regression / single-label / multi-label losses); ``_init_weights`` by
  ``module.weight.data.normal_``, ``module.weight.data[module.padding_idx].zero_()`` and
  ``fill_(1.0)``;
- the training loop of ``examples/pytorch/text-classification/run_glue_no_trainer.py``, one
  process: ``no_decay = ["bias", "LayerNorm.weight"]`` parameter groups for ``AdamW``,
  ``get_linear_schedule_with_warmup``/``get_cosine_schedule_with_warmup`` (``optimization.py``:
  ``LambdaLR`` of a ``functools.partial`` with keyword-only arguments), gradient accumulation
  by ``loss / gradient_accumulation_steps`` with the step taken on ``step %
  gradient_accumulation_steps == 0 or step == len(train_dataloader) - 1``, a ``DataLoader``
  over a list of dict samples with a ``collate_fn`` stacking them; and a checkpoint in the
  middle of the run (``torch.save({"model": ..., "optimizer": ..., "lr_scheduler": ...,
  "step": ...})`` into a buffer, a fresh model, optimizer and scheduler built and loaded with
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
from types import SimpleNamespace

ACT2FN = {"gelu": nn.GELU(), "relu": nn.ReLU(), "tanh": nn.Tanh()}


def apply_chunking_to_forward(forward_fn, chunk_size, chunk_dim, *input_tensors):
    assert len(input_tensors) > 0, f"{input_tensors} has to be a tuple/list of tensors"

    # inspect.signature exist since python 3.5 and is a python method -> no problem with backward compatibility
    num_args_in_forward_chunk_fn = len(inspect.signature(forward_fn).parameters)
    if num_args_in_forward_chunk_fn != len(input_tensors):
        raise ValueError(
            f"forward_chunk_fn expects {num_args_in_forward_chunk_fn} arguments, but only {len(input_tensors)} input "
            "tensors are given"
        )

    if chunk_size > 0:
        tensor_shape = input_tensors[0].shape[chunk_dim]
        for input_tensor in input_tensors:
            if input_tensor.shape[chunk_dim] != tensor_shape:
                raise ValueError(
                    f"All input tenors have to be of the same shape: {tensor_shape}, "
                    f"found shape {input_tensor.shape[chunk_dim]}"
                )

        if input_tensors[0].shape[chunk_dim] % chunk_size != 0:
            raise ValueError(
                f"The dimension to be chunked {input_tensors[0].shape[chunk_dim]} has to be a multiple of the chunk "
                f"size {chunk_size}"
            )

        num_chunks = input_tensors[0].shape[chunk_dim] // chunk_size

        # chunk input tensor into tuples
        input_tensors_chunks = tuple(input_tensor.chunk(num_chunks, dim=chunk_dim) for input_tensor in input_tensors)
        # apply forward fn to every tuple
        output_chunks = tuple(forward_fn(*input_tensors_chunk) for input_tensors_chunk in zip(*input_tensors_chunks))
        # concatenate output at same dimension
        return torch.cat(output_chunks, dim=chunk_dim)

    return forward_fn(*input_tensors)


class BertEmbeddings(nn.Module):
    """Construct the embeddings from word, position and token_type embeddings."""

    def __init__(self, config):
        super().__init__()
        self.word_embeddings = nn.Embedding(config.vocab_size, config.hidden_size, padding_idx=config.pad_token_id)
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, config.hidden_size)
        self.token_type_embeddings = nn.Embedding(config.type_vocab_size, config.hidden_size)

        # self.LayerNorm is not snake-cased to stick with TensorFlow model variable name and be able to load
        # any TensorFlow checkpoint file
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        # position_ids (1, len position emb) is contiguous in memory and exported when serialized
        self.position_embedding_type = getattr(config, "position_embedding_type", "absolute")
        self.register_buffer(
            "position_ids", torch.arange(config.max_position_embeddings).expand((1, -1)), persistent=False
        )
        self.register_buffer(
            "token_type_ids", torch.zeros(self.position_ids.size(), dtype=torch.long), persistent=False
        )

    def forward(
        self, input_ids=None, token_type_ids=None, position_ids=None, inputs_embeds=None, past_key_values_length=0
    ):
        if input_ids is not None:
            input_shape = input_ids.size()
        else:
            input_shape = inputs_embeds.size()[:-1]

        seq_length = input_shape[1]

        if position_ids is None:
            position_ids = self.position_ids[:, past_key_values_length : seq_length + past_key_values_length]

        # Setting the token_type_ids to the registered buffer in constructor where it is all zeros, which usually occurs
        # when its auto-generated, registered buffer helps users when tracing the model without passing token_type_ids, solves
        # issue #5664
        if token_type_ids is None:
            if hasattr(self, "token_type_ids"):
                buffered_token_type_ids = self.token_type_ids[:, :seq_length]
                buffered_token_type_ids_expanded = buffered_token_type_ids.expand(input_shape[0], seq_length)
                token_type_ids = buffered_token_type_ids_expanded
            else:
                token_type_ids = torch.zeros(input_shape, dtype=torch.long, device=self.position_ids.device)

        if inputs_embeds is None:
            inputs_embeds = self.word_embeddings(input_ids)
        token_type_embeddings = self.token_type_embeddings(token_type_ids)

        embeddings = inputs_embeds + token_type_embeddings
        if self.position_embedding_type == "absolute":
            position_embeddings = self.position_embeddings(position_ids)
            embeddings += position_embeddings
        embeddings = self.LayerNorm(embeddings)
        embeddings = self.dropout(embeddings)
        return embeddings


class BertSelfAttention(nn.Module):
    def __init__(self, config, position_embedding_type=None):
        super().__init__()
        if config.hidden_size % config.num_attention_heads != 0 and not hasattr(config, "embedding_size"):
            raise ValueError(
                f"The hidden size ({config.hidden_size}) is not a multiple of the number of attention "
                f"heads ({config.num_attention_heads})"
            )

        self.num_attention_heads = config.num_attention_heads
        self.attention_head_size = int(config.hidden_size / config.num_attention_heads)
        self.all_head_size = self.num_attention_heads * self.attention_head_size

        self.query = nn.Linear(config.hidden_size, self.all_head_size)
        self.key = nn.Linear(config.hidden_size, self.all_head_size)
        self.value = nn.Linear(config.hidden_size, self.all_head_size)

        self.dropout = nn.Dropout(config.attention_probs_dropout_prob)
        self.position_embedding_type = position_embedding_type or getattr(
            config, "position_embedding_type", "absolute"
        )
        if self.position_embedding_type == "relative_key" or self.position_embedding_type == "relative_key_query":
            self.max_position_embeddings = config.max_position_embeddings
            self.distance_embedding = nn.Embedding(2 * config.max_position_embeddings - 1, self.attention_head_size)

    def transpose_for_scores(self, x: torch.Tensor) -> torch.Tensor:
        new_x_shape = x.size()[:-1] + (self.num_attention_heads, self.attention_head_size)
        x = x.view(new_x_shape)
        return x.permute(0, 2, 1, 3)

    def forward(self, hidden_states, attention_mask=None, head_mask=None, output_attentions=False):
        mixed_query_layer = self.query(hidden_states)

        key_layer = self.transpose_for_scores(self.key(hidden_states))
        value_layer = self.transpose_for_scores(self.value(hidden_states))

        query_layer = self.transpose_for_scores(mixed_query_layer)

        # Take the dot product between "query" and "key" to get the raw attention scores.
        attention_scores = torch.matmul(query_layer, key_layer.transpose(-1, -2))

        if self.position_embedding_type == "relative_key" or self.position_embedding_type == "relative_key_query":
            query_length, key_length = query_layer.shape[2], key_layer.shape[2]
            position_ids_l = torch.arange(query_length, dtype=torch.long, device=hidden_states.device).view(-1, 1)
            position_ids_r = torch.arange(key_length, dtype=torch.long, device=hidden_states.device).view(1, -1)
            distance = position_ids_l - position_ids_r

            positional_embedding = self.distance_embedding(distance + self.max_position_embeddings - 1)
            positional_embedding = positional_embedding.to(dtype=query_layer.dtype)  # fp16 compatibility

            if self.position_embedding_type == "relative_key":
                relative_position_scores = torch.einsum("bhld,lrd->bhlr", query_layer, positional_embedding)
                attention_scores = attention_scores + relative_position_scores
            elif self.position_embedding_type == "relative_key_query":
                relative_position_scores_query = torch.einsum("bhld,lrd->bhlr", query_layer, positional_embedding)
                relative_position_scores_key = torch.einsum("bhrd,lrd->bhlr", key_layer, positional_embedding)
                attention_scores = attention_scores + relative_position_scores_query + relative_position_scores_key

        attention_scores = attention_scores / math.sqrt(self.attention_head_size)
        if attention_mask is not None:
            # Apply the attention mask is (precomputed for all layers in BertModel forward() function)
            attention_scores = attention_scores + attention_mask

        # Normalize the attention scores to probabilities.
        attention_probs = nn.functional.softmax(attention_scores, dim=-1)

        # This is actually dropping out entire tokens to attend to, which might
        # seem a bit unusual, but is taken from the original Transformer paper.
        attention_probs = self.dropout(attention_probs)

        # Mask heads if we want to
        if head_mask is not None:
            attention_probs = attention_probs * head_mask

        context_layer = torch.matmul(attention_probs, value_layer)

        context_layer = context_layer.permute(0, 2, 1, 3).contiguous()
        new_context_layer_shape = context_layer.size()[:-2] + (self.all_head_size,)
        context_layer = context_layer.view(new_context_layer_shape)

        outputs = (context_layer, attention_probs) if output_attentions else (context_layer,)
        return outputs


class BertSelfOutput(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, hidden_states: torch.Tensor, input_tensor: torch.Tensor) -> torch.Tensor:
        hidden_states = self.dense(hidden_states)
        hidden_states = self.dropout(hidden_states)
        hidden_states = self.LayerNorm(hidden_states + input_tensor)
        return hidden_states


class BertAttention(nn.Module):
    def __init__(self, config, position_embedding_type=None):
        super().__init__()
        self.self = BertSelfAttention(config, position_embedding_type=position_embedding_type)
        self.output = BertSelfOutput(config)
        self.pruned_heads = set()

    def forward(self, hidden_states, attention_mask=None, head_mask=None, output_attentions=False):
        self_outputs = self.self(hidden_states, attention_mask, head_mask, output_attentions=output_attentions)
        attention_output = self.output(self_outputs[0], hidden_states)
        outputs = (attention_output,) + self_outputs[1:]  # add attentions if we output them
        return outputs


class BertIntermediate(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.intermediate_size)
        if isinstance(config.hidden_act, str):
            self.intermediate_act_fn = ACT2FN[config.hidden_act]
        else:
            self.intermediate_act_fn = config.hidden_act

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        hidden_states = self.dense(hidden_states)
        hidden_states = self.intermediate_act_fn(hidden_states)
        return hidden_states


class BertOutput(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.dense = nn.Linear(config.intermediate_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, hidden_states: torch.Tensor, input_tensor: torch.Tensor) -> torch.Tensor:
        hidden_states = self.dense(hidden_states)
        hidden_states = self.dropout(hidden_states)
        hidden_states = self.LayerNorm(hidden_states + input_tensor)
        return hidden_states


class BertLayer(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.chunk_size_feed_forward = config.chunk_size_feed_forward
        self.seq_len_dim = 1
        self.attention = BertAttention(config)
        self.intermediate = BertIntermediate(config)
        self.output = BertOutput(config)

    def forward(self, hidden_states, attention_mask=None, head_mask=None, output_attentions=False):
        self_attention_outputs = self.attention(
            hidden_states,
            attention_mask,
            head_mask,
            output_attentions=output_attentions,
        )
        attention_output = self_attention_outputs[0]
        outputs = self_attention_outputs[1:]  # add self attentions if we output attention weights

        layer_output = apply_chunking_to_forward(
            self.feed_forward_chunk, self.chunk_size_feed_forward, self.seq_len_dim, attention_output
        )
        outputs = (layer_output,) + outputs
        return outputs

    def feed_forward_chunk(self, attention_output):
        intermediate_output = self.intermediate(attention_output)
        layer_output = self.output(intermediate_output, attention_output)
        return layer_output


class BertEncoder(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.layer = nn.ModuleList([BertLayer(config) for _ in range(config.num_hidden_layers)])
        self.gradient_checkpointing = False

    def forward(self, hidden_states, attention_mask=None, head_mask=None, output_attentions=False, output_hidden_states=False):
        all_hidden_states = () if output_hidden_states else None
        all_self_attentions = () if output_attentions else None

        for i, layer_module in enumerate(self.layer):
            if output_hidden_states:
                all_hidden_states = all_hidden_states + (hidden_states,)

            layer_head_mask = head_mask[i] if head_mask is not None else None

            if self.gradient_checkpointing and self.training:

                def create_custom_forward(module):
                    def custom_forward(*inputs):
                        return module(*inputs, output_attentions)

                    return custom_forward

                layer_outputs = torch.utils.checkpoint.checkpoint(
                    create_custom_forward(layer_module),
                    hidden_states,
                    attention_mask,
                    layer_head_mask,
                    use_reentrant=False,
                )
            else:
                layer_outputs = layer_module(hidden_states, attention_mask, layer_head_mask, output_attentions)

            hidden_states = layer_outputs[0]
            if output_attentions:
                all_self_attentions = all_self_attentions + (layer_outputs[1],)

        if output_hidden_states:
            all_hidden_states = all_hidden_states + (hidden_states,)

        return tuple(v for v in [hidden_states, all_hidden_states, all_self_attentions] if v is not None)


class BertPooler(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.activation = nn.Tanh()

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        # We "pool" the model by simply taking the hidden state corresponding
        # to the first token.
        first_token_tensor = hidden_states[:, 0]
        pooled_output = self.dense(first_token_tensor)
        pooled_output = self.activation(pooled_output)
        return pooled_output


class BertPreTrainedModel(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config

    def post_init(self):
        self.apply(self._init_weights)

    def _init_weights(self, module):
        """Initialize the weights"""
        if isinstance(module, nn.Linear):
            # Slightly different from the TF version which uses truncated_normal for initialization
            # cf https://github.com/pytorch/pytorch/pull/5617
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

    def gradient_checkpointing_enable(self):
        for module in self.modules():
            if isinstance(module, BertEncoder):
                module.gradient_checkpointing = True

    def get_extended_attention_mask(self, attention_mask, input_shape, dtype=None):
        if dtype is None:
            dtype = torch.float32
        if attention_mask.dim() == 3:
            extended_attention_mask = attention_mask[:, None, :, :]
        elif attention_mask.dim() == 2:
            extended_attention_mask = attention_mask[:, None, None, :]
        else:
            raise ValueError(
                f"Wrong shape for input_ids (shape {input_shape}) or attention_mask (shape {attention_mask.shape})"
            )
        extended_attention_mask = extended_attention_mask.to(dtype=dtype)  # fp16 compatibility
        extended_attention_mask = (1.0 - extended_attention_mask) * torch.finfo(dtype).min
        return extended_attention_mask

    def get_head_mask(self, head_mask, num_hidden_layers):
        if head_mask is not None:
            if head_mask.dim() == 1:
                head_mask = head_mask.unsqueeze(0).unsqueeze(0).unsqueeze(-1).unsqueeze(-1)
                head_mask = head_mask.expand(num_hidden_layers, -1, -1, -1, -1)
            elif head_mask.dim() == 2:
                head_mask = head_mask.unsqueeze(1).unsqueeze(-1).unsqueeze(-1)  # We can specify head_mask for each layer
            assert head_mask.dim() == 5, f"head_mask.dim != 5, instead {head_mask.dim()}"
            head_mask = head_mask.to(dtype=torch.float32)  # switch to float if need + fp16 compatibility
        else:
            head_mask = [None] * num_hidden_layers
        return head_mask


class BertModel(BertPreTrainedModel):
    def __init__(self, config, add_pooling_layer=True):
        super().__init__(config)
        self.config = config

        self.embeddings = BertEmbeddings(config)
        self.encoder = BertEncoder(config)

        self.pooler = BertPooler(config) if add_pooling_layer else None

        # Initialize weights and apply final processing
        self.post_init()

    def forward(self, input_ids=None, attention_mask=None, token_type_ids=None, position_ids=None, head_mask=None,
                output_attentions=False, output_hidden_states=False):
        input_shape = input_ids.size()
        batch_size, seq_length = input_shape
        device = input_ids.device

        if attention_mask is None:
            attention_mask = torch.ones(((batch_size, seq_length)), device=device)

        # We can provide a self-attention mask of dimensions [batch_size, from_seq_length, to_seq_length]
        # ourselves in which case we just need to make it broadcastable to all heads.
        extended_attention_mask = self.get_extended_attention_mask(attention_mask, input_shape)

        # Prepare head mask if needed
        # 1.0 in head_mask indicate we keep the head
        head_mask = self.get_head_mask(head_mask, self.config.num_hidden_layers)

        embedding_output = self.embeddings(
            input_ids=input_ids,
            position_ids=position_ids,
            token_type_ids=token_type_ids,
        )
        encoder_outputs = self.encoder(
            embedding_output,
            attention_mask=extended_attention_mask,
            head_mask=head_mask,
            output_attentions=output_attentions,
            output_hidden_states=output_hidden_states,
        )
        sequence_output = encoder_outputs[0]
        pooled_output = self.pooler(sequence_output) if self.pooler is not None else None

        return (sequence_output, pooled_output) + encoder_outputs[1:]


class BertForSequenceClassification(BertPreTrainedModel):
    def __init__(self, config):
        super().__init__(config)
        self.num_labels = config.num_labels
        self.config = config

        self.bert = BertModel(config)
        classifier_dropout = (
            config.classifier_dropout if config.classifier_dropout is not None else config.hidden_dropout_prob
        )
        self.dropout = nn.Dropout(classifier_dropout)
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)

        # Initialize weights and apply final processing
        self.post_init()

    def forward(self, input_ids=None, attention_mask=None, token_type_ids=None, position_ids=None, head_mask=None,
                labels=None, output_attentions=False, output_hidden_states=False):
        outputs = self.bert(
            input_ids,
            attention_mask=attention_mask,
            token_type_ids=token_type_ids,
            position_ids=position_ids,
            head_mask=head_mask,
            output_attentions=output_attentions,
            output_hidden_states=output_hidden_states,
        )

        pooled_output = outputs[1]

        pooled_output = self.dropout(pooled_output)
        logits = self.classifier(pooled_output)

        loss = None
        if labels is not None:
            if self.config.problem_type is None:
                if self.num_labels == 1:
                    self.config.problem_type = "regression"
                elif self.num_labels > 1 and (labels.dtype == torch.long or labels.dtype == torch.int):
                    self.config.problem_type = "single_label_classification"
                else:
                    self.config.problem_type = "multi_label_classification"

            if self.config.problem_type == "regression":
                loss_fct = nn.MSELoss()
                if self.num_labels == 1:
                    loss = loss_fct(logits.squeeze(), labels.squeeze())
                else:
                    loss = loss_fct(logits, labels)
            elif self.config.problem_type == "single_label_classification":
                loss_fct = nn.CrossEntropyLoss()
                loss = loss_fct(logits.view(-1, self.num_labels), labels.view(-1))
            elif self.config.problem_type == "multi_label_classification":
                loss_fct = nn.BCEWithLogitsLoss()
                loss = loss_fct(logits, labels)
        output = (logits,) + outputs[2:]
        return SimpleNamespace(loss=loss, logits=logits, hidden_states=outputs[2:])


# optimization.py
def _get_linear_schedule_with_warmup_lr_lambda(current_step: int, *, num_warmup_steps: int, num_training_steps: int):
    if current_step < num_warmup_steps:
        return float(current_step) / float(max(1, num_warmup_steps))
    return max(0.0, float(num_training_steps - current_step) / float(max(1, num_training_steps - num_warmup_steps)))


def get_linear_schedule_with_warmup(optimizer, num_warmup_steps, num_training_steps, last_epoch=-1):
    lr_lambda = partial(
        _get_linear_schedule_with_warmup_lr_lambda,
        num_warmup_steps=num_warmup_steps,
        num_training_steps=num_training_steps,
    )
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda, last_epoch)


def _get_cosine_schedule_with_warmup_lr_lambda(
    current_step: int, *, num_warmup_steps: int, num_training_steps: int, num_cycles: float
):
    if current_step < num_warmup_steps:
        return float(current_step) / float(max(1, num_warmup_steps))
    progress = float(current_step - num_warmup_steps) / float(max(1, num_training_steps - num_warmup_steps))
    return max(0.0, 0.5 * (1.0 + math.cos(math.pi * float(num_cycles) * 2.0 * progress)))


def get_cosine_schedule_with_warmup(optimizer, num_warmup_steps, num_training_steps, num_cycles=0.5, last_epoch=-1):
    lr_lambda = partial(
        _get_cosine_schedule_with_warmup_lr_lambda,
        num_warmup_steps=num_warmup_steps,
        num_training_steps=num_training_steps,
        num_cycles=num_cycles,
    )
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda, last_epoch)


# run_glue_no_trainer.py, one process
def collate(features):
    return {k: torch.stack([f[k] for f in features]) for k in features[0]}


def make_optimizer(model, args):
    no_decay = ["bias", "LayerNorm.weight"]
    optimizer_grouped_parameters = [
        {
            "params": [p for n, p in model.named_parameters() if not any(nd in n for nd in no_decay)],
            "weight_decay": args.weight_decay,
        },
        {
            "params": [p for n, p in model.named_parameters() if any(nd in n for nd in no_decay)],
            "weight_decay": 0.0,
        },
    ]
    optimizer = torch.optim.AdamW(optimizer_grouped_parameters, lr=args.learning_rate)
    schedule = get_linear_schedule_with_warmup if args.lr_scheduler_type == "linear" else get_cosine_schedule_with_warmup
    lr_scheduler = schedule(optimizer, args.num_warmup_steps, args.max_train_steps)
    return optimizer, lr_scheduler


def train(model, train_dataloader, args, optimizer, lr_scheduler, epochs, records, save_at=None):
    completed_steps = 0
    for epoch in range(epochs):
        model.train()
        for step, batch in enumerate(train_dataloader):
            outputs = model(**batch)
            loss = outputs.loss
            loss = loss / args.gradient_accumulation_steps
            loss.backward()
            if step % args.gradient_accumulation_steps == 0 or step == len(train_dataloader) - 1:
                optimizer.step()
                lr_scheduler.step()
                optimizer.zero_grad()
                completed_steps += 1
                records.append([loss.item(), lr_scheduler.get_last_lr()[0]])
        if save_at is not None and epoch == save_at[0]:
            torch.save(
                {"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                 "lr_scheduler": lr_scheduler.state_dict(), "epoch": epoch},
                save_at[1],
            )
    model.eval()
    with torch.no_grad():
        outputs = model(**next(iter(train_dataloader)), output_hidden_states=True)
        predictions = outputs.logits.argmax(dim=-1)
    records.append(outputs.logits.numpy())
    records.append(predictions.tolist())
    records.append({n: p.detach().numpy().copy() for n, p in model.named_parameters()})
    return records
'''

BERT_STEP = [
    (
        "            loss.backward()\n            if step % args.gradient_accumulation_steps == 0 or step == len(train_dataloader) - 1:\n                optimizer.step()",
        "            g = loss.backward()\n            grads = g if grads is None else grads + g\n            if step % args.gradient_accumulation_steps == 0 or step == len(train_dataloader) - 1:\n                optimizer.step(grads)\n                grads = None",
    ),
    ("    completed_steps = 0\n", "    completed_steps = 0\n    grads = None\n"),
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
    return names["SimpleNamespace"](**config)


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
        model = names["BertForSequenceClassification"](config)
        if checkpointing:
            model.gradient_checkpointing_enable()
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
        args = names["SimpleNamespace"](**dict(ARGS, lr_scheduler_type=schedule))
        optimizer, lr_scheduler = names["make_optimizer"](model, args)
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
        model = names["BertForSequenceClassification"](config)
        if initial is None:
            initial = {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}
        else:
            model.load_state_dict({k: rg.tensor(v) for k, v in initial.items()})
        samples = _samples(lib, np.random.default_rng(31), 6, 3, "single")
        loader = lib.utils.data.DataLoader(samples, batch_size=2, collate_fn=names["collate"])
        args = names["SimpleNamespace"](**ARGS)
        optimizer, lr_scheduler = names["make_optimizer"](model, args)
        buffer = io.BytesIO()
        whole = names["train"](
            model, loader, args, optimizer, lr_scheduler, 3, [], save_at=(0, buffer)
        )

        # a new process: a fresh model, optimizer and scheduler, loaded from the checkpoint
        buffer.seek(0)
        checkpoint = lib.load(buffer, map_location="cpu")
        torch.manual_seed(1)
        resumed_model = names["BertForSequenceClassification"](_config(names))
        resumed_model.load_state_dict(checkpoint["model"])
        optimizer, lr_scheduler = names["make_optimizer"](resumed_model, args)
        optimizer.load_state_dict(checkpoint["optimizer"])
        lr_scheduler.load_state_dict(checkpoint["lr_scheduler"])
        assert checkpoint["epoch"] == 0
        resumed = names["train"](resumed_model, loader, args, optimizer, lr_scheduler, 2, [])
        # the last two epochs' steps and the end state equal the uninterrupted run's
        assert_records_agree(resumed, whole[-len(resumed) :], rtol=1e-5, atol=1e-6, skip=KEY_BIASES)
        records.append(whole)
    assert_records_agree(records[1], records[0], rtol=2e-4, atol=2e-5, skip=KEY_BIASES)
