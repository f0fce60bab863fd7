# ruff: noqa: E501  (the programs are kept as their authors wrote them)
"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):

- the chatbot tutorial (pytorch/tutorials ``beginner_source/chatbot_tutorial.py``): one
  ``nn.Embedding`` shared by the encoder and the decoder, each with its own Adam (so the
  embedding is stepped by both), a bidirectional 2-layer GRU over
  ``pack_padded_sequence``/``pad_packed_sequence``, Luong attention (dot, general, concat
  with ``nn.Parameter(torch.FloatTensor(n))``), ``torch.LongTensor`` of zipped lists and of
  0-d tensors, ``torch.BoolTensor``, ``maskNLLLoss`` (``gather``, ``masked_select``),
  ``loss = 0; loss += ...``, two ``clip_grad_norm_`` calls and greedy decoding through
  ``torch.max(dim=1)`` and ``torch.cat`` onto ``torch.zeros([0])``;
- cleanrl's PPO (``ppo.py`` and ``ppo_continuous_action.py``): ``layer_init`` with
  ``orthogonal_`` of a ``np.sqrt(2)`` gain and ``constant_``, ``nn.Linear`` of a NumPy integer
  width, ``Categorical(logits=)`` and ``Normal``'s ``log_prob``/``entropy``, rollout buffers
  written row by row, GAE under ``no_grad`` with ``torch.zeros_like``, ``torch.Tensor`` of
  NumPy arrays, indexing by NumPy index arrays, ratio clipping, clipped value loss,
  ``param_groups[0]["lr"]`` annealing, ``clip_grad_norm_``;
- the DQN tutorial (``intermediate_source/reinforcement_q_learning.py``) and cleanrl's soft
  update: ``Transition(*zip(*transitions))``, a bool mask from ``tuple(map(...))``,
  ``next_state_values[non_final_mask] = target_net(...).max(1).values`` under ``no_grad``,
  ``gather``, ``nn.SmoothL1Loss``, AdamW with ``amsgrad``, ``clip_grad_value_``, the target
  network updated through ``state_dict()`` arithmetic and ``load_state_dict``, or by
  ``param.data.copy_(tau * q.data + (1 - tau) * t.data)``.

Random draws are the harness's: ``Categorical.sample``/``Normal.sample`` of both libraries
draw from one seeded NumPy stream, the environments are small deterministic stand-ins.

The defect found: an optimizer step made each parameter a fresh leaf, whose gradient the
``Gradients`` no longer held, so a second optimizer over the same parameter (the chatbot's
shared embedding) skipped it, and ``p.grad(grads)``/``clip_grad_norm_`` after the step saw
nothing. The step now keeps the gradient under the new leaf too, as torch keeps ``p.grad``.
"""

from __future__ import annotations

import random
import types

import numpy as np
import pytest
import torch

import retrograd as rg
from real_ports import assert_records_agree, both

# -- the chatbot tutorial --------------------------------------------------------------------------
CHATBOT_SOURCE = """
import itertools
import random
PAD_token = 0  # Used for padding short sentences
SOS_token = 1  # Start-of-sentence token
EOS_token = 2  # End-of-sentence token
MAX_LENGTH = 6
device = torch.device("cpu")

class Voc:
    def __init__(self, name):
        self.name = name
        self.trimmed = False
        self.word2index = {}
        self.word2count = {}
        self.index2word = {PAD_token: "PAD", SOS_token: "SOS", EOS_token: "EOS"}
        self.num_words = 3  # Count SOS, EOS, PAD
    def addSentence(self, sentence):
        for word in sentence.split(' '):
            self.addWord(word)
    def addWord(self, word):
        if word not in self.word2index:
            self.word2index[word] = self.num_words
            self.word2count[word] = 1
            self.index2word[self.num_words] = word
            self.num_words += 1
        else:
            self.word2count[word] += 1

def indexesFromSentence(voc, sentence):
    return [voc.word2index[word] for word in sentence.split(' ')] + [EOS_token]

def zeroPadding(l, fillvalue=PAD_token):
    return list(itertools.zip_longest(*l, fillvalue=fillvalue))

def binaryMatrix(l, value=PAD_token):
    m = []
    for i, seq in enumerate(l):
        m.append([])
        for token in seq:
            if token == PAD_token:
                m[i].append(0)
            else:
                m[i].append(1)
    return m

def inputVar(l, voc):
    indexes_batch = [indexesFromSentence(voc, sentence) for sentence in l]
    lengths = torch.tensor([len(indexes) for indexes in indexes_batch])
    padList = zeroPadding(indexes_batch)
    padVar = torch.LongTensor(padList)
    return padVar, lengths

def outputVar(l, voc):
    indexes_batch = [indexesFromSentence(voc, sentence) for sentence in l]
    max_target_len = max([len(indexes) for indexes in indexes_batch])
    padList = zeroPadding(indexes_batch)
    mask = binaryMatrix(padList)
    mask = torch.BoolTensor(mask)
    padVar = torch.LongTensor(padList)
    return padVar, mask, max_target_len

def batch2TrainData(voc, pair_batch):
    pair_batch.sort(key=lambda x: len(x[0].split(" ")), reverse=True)
    input_batch, output_batch = [], []
    for pair in pair_batch:
        input_batch.append(pair[0])
        output_batch.append(pair[1])
    inp, lengths = inputVar(input_batch, voc)
    output, mask, max_target_len = outputVar(output_batch, voc)
    return inp, lengths, output, mask, max_target_len

class EncoderRNN(nn.Module):
    def __init__(self, hidden_size, embedding, n_layers=1, dropout=0):
        super(EncoderRNN, self).__init__()
        self.n_layers = n_layers
        self.hidden_size = hidden_size
        self.embedding = embedding
        self.gru = nn.GRU(hidden_size, hidden_size, n_layers,
                          dropout=(0 if n_layers == 1 else dropout), bidirectional=True)
    def forward(self, input_seq, input_lengths, hidden=None):
        embedded = self.embedding(input_seq)
        packed = nn.utils.rnn.pack_padded_sequence(embedded, input_lengths)
        outputs, hidden = self.gru(packed, hidden)
        outputs, _ = nn.utils.rnn.pad_packed_sequence(outputs)
        outputs = outputs[:, :, :self.hidden_size] + outputs[:, : ,self.hidden_size:]
        return outputs, hidden

class Attn(nn.Module):
    def __init__(self, method, hidden_size):
        super(Attn, self).__init__()
        self.method = method
        if self.method not in ['dot', 'general', 'concat']:
            raise ValueError(self.method, "is not an appropriate attention method.")
        self.hidden_size = hidden_size
        if self.method == 'general':
            self.attn = nn.Linear(self.hidden_size, hidden_size)
        elif self.method == 'concat':
            self.attn = nn.Linear(self.hidden_size * 2, hidden_size)
            self.v = nn.Parameter(torch.FloatTensor(hidden_size))
    def dot_score(self, hidden, encoder_output):
        return torch.sum(hidden * encoder_output, dim=2)
    def general_score(self, hidden, encoder_output):
        energy = self.attn(encoder_output)
        return torch.sum(hidden * energy, dim=2)
    def concat_score(self, hidden, encoder_output):
        energy = self.attn(torch.cat((hidden.expand(encoder_output.size(0), -1, -1), encoder_output), 2)).tanh()
        return torch.sum(self.v * energy, dim=2)
    def forward(self, hidden, encoder_outputs):
        if self.method == 'general':
            attn_energies = self.general_score(hidden, encoder_outputs)
        elif self.method == 'concat':
            attn_energies = self.concat_score(hidden, encoder_outputs)
        elif self.method == 'dot':
            attn_energies = self.dot_score(hidden, encoder_outputs)
        attn_energies = attn_energies.t()
        return F.softmax(attn_energies, dim=1).unsqueeze(1)

class LuongAttnDecoderRNN(nn.Module):
    def __init__(self, attn_model, embedding, hidden_size, output_size, n_layers=1, dropout=0.1):
        super(LuongAttnDecoderRNN, self).__init__()
        self.attn_model = attn_model
        self.hidden_size = hidden_size
        self.output_size = output_size
        self.n_layers = n_layers
        self.dropout = dropout
        self.embedding = embedding
        self.embedding_dropout = nn.Dropout(dropout)
        self.gru = nn.GRU(hidden_size, hidden_size, n_layers, dropout=(0 if n_layers == 1 else dropout))
        self.concat = nn.Linear(hidden_size * 2, hidden_size)
        self.out = nn.Linear(hidden_size, output_size)
        self.attn = Attn(attn_model, hidden_size)
    def forward(self, input_step, last_hidden, encoder_outputs):
        embedded = self.embedding(input_step)
        embedded = self.embedding_dropout(embedded)
        rnn_output, hidden = self.gru(embedded, last_hidden)
        attn_weights = self.attn(rnn_output, encoder_outputs)
        context = attn_weights.bmm(encoder_outputs.transpose(0, 1))
        rnn_output = rnn_output.squeeze(0)
        context = context.squeeze(1)
        concat_input = torch.cat((rnn_output, context), 1)
        concat_output = torch.tanh(self.concat(concat_input))
        output = self.out(concat_output)
        output = F.softmax(output, dim=1)
        return output, hidden

def maskNLLLoss(inp, target, mask):
    nTotal = mask.sum()
    crossEntropy = -torch.log(torch.gather(inp, 1, target.view(-1, 1)).squeeze(1))
    loss = crossEntropy.masked_select(mask).mean()
    loss = loss.to(device)
    return loss, nTotal.item()

def train(input_variable, lengths, target_variable, mask, max_target_len, encoder, decoder, embedding,
          encoder_optimizer, decoder_optimizer, batch_size, clip, teacher_forcing_ratio, max_length=MAX_LENGTH):
    encoder_optimizer.zero_grad()
    decoder_optimizer.zero_grad()
    input_variable = input_variable.to(device)
    target_variable = target_variable.to(device)
    mask = mask.to(device)
    lengths = lengths.to("cpu")
    loss = 0
    print_losses = []
    n_totals = 0
    encoder_outputs, encoder_hidden = encoder(input_variable, lengths)
    decoder_input = torch.LongTensor([[SOS_token for _ in range(batch_size)]])
    decoder_input = decoder_input.to(device)
    decoder_hidden = encoder_hidden[:decoder.n_layers]
    use_teacher_forcing = True if random.random() < teacher_forcing_ratio else False
    if use_teacher_forcing:
        for t in range(max_target_len):
            decoder_output, decoder_hidden = decoder(
                decoder_input, decoder_hidden, encoder_outputs
            )
            decoder_input = target_variable[t].view(1, -1)
            mask_loss, nTotal = maskNLLLoss(decoder_output, target_variable[t], mask[t])
            loss += mask_loss
            print_losses.append(mask_loss.item() * nTotal)
            n_totals += nTotal
    else:
        for t in range(max_target_len):
            decoder_output, decoder_hidden = decoder(
                decoder_input, decoder_hidden, encoder_outputs
            )
            _, topi = decoder_output.topk(1)
            decoder_input = torch.LongTensor([[topi[i][0] for i in range(batch_size)]])
            decoder_input = decoder_input.to(device)
            mask_loss, nTotal = maskNLLLoss(decoder_output, target_variable[t], mask[t])
            loss += mask_loss
            print_losses.append(mask_loss.item() * nTotal)
            n_totals += nTotal
    loss.backward()
    _ = nn.utils.clip_grad_norm_(encoder.parameters(), clip)
    _ = nn.utils.clip_grad_norm_(decoder.parameters(), clip)
    encoder_optimizer.step()
    decoder_optimizer.step()
    return sum(print_losses) / n_totals

class GreedySearchDecoder(nn.Module):
    def __init__(self, encoder, decoder):
        super(GreedySearchDecoder, self).__init__()
        self.encoder = encoder
        self.decoder = decoder
    def forward(self, input_seq, input_length, max_length):
        encoder_outputs, encoder_hidden = self.encoder(input_seq, input_length)
        decoder_hidden = encoder_hidden[:self.decoder.n_layers]
        decoder_input = torch.ones(1, 1, device=device, dtype=torch.long) * SOS_token
        all_tokens = torch.zeros([0], device=device, dtype=torch.long)
        all_scores = torch.zeros([0], device=device)
        for _ in range(max_length):
            decoder_output, decoder_hidden = self.decoder(decoder_input, decoder_hidden, encoder_outputs)
            decoder_scores, decoder_input = torch.max(decoder_output, dim=1)
            all_tokens = torch.cat((all_tokens, decoder_input), dim=0)
            all_scores = torch.cat((all_scores, decoder_scores), dim=0)
            decoder_input = torch.unsqueeze(decoder_input, 0)
        return all_tokens, all_scores

def evaluate(encoder, decoder, searcher, voc, sentence, max_length=MAX_LENGTH):
    indexes_batch = [indexesFromSentence(voc, sentence)]
    lengths = torch.tensor([len(indexes) for indexes in indexes_batch])
    input_batch = torch.LongTensor(indexes_batch).transpose(0, 1)
    input_batch = input_batch.to(device)
    lengths = lengths.to("cpu")
    tokens, scores = searcher(input_batch, lengths, max_length)
    decoded_words = [voc.index2word[token.item()] for token in tokens]
    return decoded_words, scores

def trainIters(voc, pairs, encoder, decoder, encoder_optimizer, decoder_optimizer, embedding, n_iteration, batch_size, clip, teacher_forcing_ratio):
    training_batches = [batch2TrainData(voc, [random.choice(pairs) for _ in range(batch_size)])
                      for _ in range(n_iteration)]
    records = []
    for iteration in range(1, n_iteration + 1):
        training_batch = training_batches[iteration - 1]
        input_variable, lengths, target_variable, mask, max_target_len = training_batch
        loss = train(input_variable, lengths, target_variable, mask, max_target_len, encoder,
                     decoder, embedding, encoder_optimizer, decoder_optimizer, batch_size, clip, teacher_forcing_ratio)
        records.append(loss)
        records.append({n: p.detach().numpy().copy() for n, p in itertools.chain(encoder.named_parameters(), decoder.named_parameters())})
    return records

def main(pairs, attn_model, state=None, teacher_forcing_ratio=1.0):
    voc = Voc("toy")
    for a, b in pairs:
        voc.addSentence(a); voc.addSentence(b)
    hidden_size = 8
    encoder_n_layers = 2
    decoder_n_layers = 2
    dropout = 0.0
    embedding = nn.Embedding(voc.num_words, hidden_size)
    encoder = EncoderRNN(hidden_size, embedding, encoder_n_layers, dropout)
    decoder = LuongAttnDecoderRNN(attn_model, embedding, hidden_size, voc.num_words, decoder_n_layers, dropout)
    if attn_model == 'concat':
        with torch.no_grad():
            decoder.attn.v.copy_(torch.linspace(-0.5, 0.5, hidden_size))
    if state is not None:
        encoder.load_state_dict(state[0]); decoder.load_state_dict(state[1])
    init = tuple({k: np.array(v.numpy() if hasattr(v, 'numpy') else v, copy=True) for k, v in m.state_dict().items()} for m in (encoder, decoder))
    encoder = encoder.to(device)
    decoder = decoder.to(device)
    encoder.train()
    decoder.train()
    encoder_optimizer = optim.Adam(encoder.parameters(), lr=0.01)
    decoder_optimizer = optim.Adam(decoder.parameters(), lr=0.01 * 5.0)
    records = trainIters(voc, pairs, encoder, decoder, encoder_optimizer, decoder_optimizer, embedding, 3, 4, 50.0, teacher_forcing_ratio)
    encoder.eval()
    decoder.eval()
    searcher = GreedySearchDecoder(encoder, decoder)
    words, scores = evaluate(encoder, decoder, searcher, voc, "hi there")
    records.append(words)
    records.append(scores.detach().numpy())
    return init, records
"""

CHATBOT_STEP = [
    (
        "    loss.backward()\n    _ = nn.utils.clip_grad_norm_(encoder.parameters(), clip)\n    _ = nn.utils.clip_grad_norm_(decoder.parameters(), clip)\n    encoder_optimizer.step()\n    decoder_optimizer.step()",
        "    grads = loss.backward()\n    _ = nn.utils.clip_grad_norm_(grads, encoder.parameters(), clip)\n    _ = nn.utils.clip_grad_norm_(grads, decoder.parameters(), clip)\n    encoder_optimizer.step(grads)\n    decoder_optimizer.step(grads)",
    )
]

PAIRS = [("hi there", "hello you"), ("how are you", "fine thanks"),
         ("what is your name", "my name is bot"), ("bye", "see you later friend"),
         ("good morning to you", "morning")]  # fmt: skip


@pytest.mark.parametrize("teacher_forcing", [1.0, 0.0])
@pytest.mark.parametrize("attn", ["dot", "general", "concat"])
def test_chatbot_tutorial_matches_torch(attn, teacher_forcing):
    # In float64: Adam divides each step by the root of the second moment, so in float32 the
    # two libraries' rounding of a small gradient (the concat attention's weight, with greedy
    # decoding) grew to 1.9e-4 of a parameter after 12 steps, past the tolerance, in some
    # process states and not others (torch's thread count, what ran before).
    theirs, ours = both(CHATBOT_SOURCE, CHATBOT_STEP)
    previous, our_previous = torch.get_default_dtype(), rg.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    rg.set_default_dtype(rg.float64)
    try:
        random.seed(0)
        torch.manual_seed(0)
        initial, expected = theirs["main"](PAIRS, attn, None, teacher_forcing)
        random.seed(0)
        _, got = ours["main"](PAIRS, attn, initial, teacher_forcing)
    finally:
        torch.set_default_dtype(previous)
        rg.set_default_dtype(our_previous)
    # "general" scores add hidden . bias, the same for every source position: the softmax
    # cancels it, the bias's true gradient is zero and Adam's steps follow float32 rounding
    skip = {"attn.attn.bias"} if attn == "general" else ()
    assert_records_agree(got, expected, rtol=1e-4, atol=1e-5, skip=skip)


# -- cleanrl PPO -----------------------------------------------------------------------------------
PPO_SOURCE = """
from torch.distributions.categorical import Categorical
from torch.distributions.normal import Normal

def layer_init(layer, std=np.sqrt(2), bias_const=0.0):
    torch.nn.init.orthogonal_(layer.weight, std)
    torch.nn.init.constant_(layer.bias, bias_const)
    return layer

class Agent(nn.Module):
    def __init__(self, envs):
        super().__init__()
        self.critic = nn.Sequential(
            layer_init(nn.Linear(np.array(envs.single_observation_space.shape).prod(), 64)),
            nn.Tanh(),
            layer_init(nn.Linear(64, 64)),
            nn.Tanh(),
            layer_init(nn.Linear(64, 1), std=1.0),
        )
        self.actor = nn.Sequential(
            layer_init(nn.Linear(np.array(envs.single_observation_space.shape).prod(), 64)),
            nn.Tanh(),
            layer_init(nn.Linear(64, 64)),
            nn.Tanh(),
            layer_init(nn.Linear(64, envs.single_action_space.n), std=0.01),
        )

    def get_value(self, x):
        return self.critic(x)

    def get_action_and_value(self, x, action=None):
        logits = self.actor(x)
        probs = Categorical(logits=logits)
        if action is None:
            action = probs.sample()
        return action, probs.log_prob(action), probs.entropy(), self.critic(x)

class ContinuousAgent(nn.Module):
    def __init__(self, envs):
        super().__init__()
        self.critic = nn.Sequential(
            layer_init(nn.Linear(np.array(envs.single_observation_space.shape).prod(), 64)),
            nn.Tanh(),
            layer_init(nn.Linear(64, 64)),
            nn.Tanh(),
            layer_init(nn.Linear(64, 1), std=1.0),
        )
        self.actor_mean = nn.Sequential(
            layer_init(nn.Linear(np.array(envs.single_observation_space.shape).prod(), 64)),
            nn.Tanh(),
            layer_init(nn.Linear(64, 64)),
            nn.Tanh(),
            layer_init(nn.Linear(64, np.prod(envs.single_action_space.shape)), std=0.01),
        )
        self.actor_logstd = nn.Parameter(torch.zeros(1, np.prod(envs.single_action_space.shape)))

    def get_value(self, x):
        return self.critic(x)

    def get_action_and_value(self, x, action=None):
        action_mean = self.actor_mean(x)
        action_logstd = self.actor_logstd.expand_as(action_mean)
        action_std = torch.exp(action_logstd)
        probs = Normal(action_mean, action_std)
        if action is None:
            action = probs.sample()
        return action, probs.log_prob(action).sum(1), probs.entropy().sum(1), self.critic(x)

def train(args, envs, agent, device="cpu"):
    optimizer = optim.Adam(agent.parameters(), lr=args.learning_rate, eps=1e-5)
    obs = torch.zeros((args.num_steps, args.num_envs) + envs.single_observation_space.shape).to(device)
    actions = torch.zeros((args.num_steps, args.num_envs) + envs.single_action_space.shape).to(device)
    logprobs = torch.zeros((args.num_steps, args.num_envs)).to(device)
    rewards = torch.zeros((args.num_steps, args.num_envs)).to(device)
    dones = torch.zeros((args.num_steps, args.num_envs)).to(device)
    values = torch.zeros((args.num_steps, args.num_envs)).to(device)
    records = []
    global_step = 0
    next_obs, _ = envs.reset(seed=args.seed)
    next_obs = torch.Tensor(next_obs).to(device)
    next_done = torch.zeros(args.num_envs).to(device)
    for iteration in range(1, args.num_iterations + 1):
        if args.anneal_lr:
            frac = 1.0 - (iteration - 1.0) / args.num_iterations
            lrnow = frac * args.learning_rate
            optimizer.param_groups[0]["lr"] = lrnow
        for step in range(0, args.num_steps):
            global_step += args.num_envs
            obs[step] = next_obs
            dones[step] = next_done
            with torch.no_grad():
                action, logprob, _, value = agent.get_action_and_value(next_obs)
                values[step] = value.flatten()
            actions[step] = action
            logprobs[step] = logprob
            next_obs, reward, terminations, truncations, infos = envs.step(action.cpu().numpy())
            next_done = np.logical_or(terminations, truncations)
            rewards[step] = torch.tensor(reward).to(device).view(-1)
            next_obs, next_done = torch.Tensor(next_obs).to(device), torch.Tensor(next_done).to(device)
        with torch.no_grad():
            next_value = agent.get_value(next_obs).reshape(1, -1)
            advantages = torch.zeros_like(rewards).to(device)
            lastgaelam = 0
            for t in reversed(range(args.num_steps)):
                if t == args.num_steps - 1:
                    nextnonterminal = 1.0 - next_done
                    nextvalues = next_value
                else:
                    nextnonterminal = 1.0 - dones[t + 1]
                    nextvalues = values[t + 1]
                delta = rewards[t] + args.gamma * nextvalues * nextnonterminal - values[t]
                advantages[t] = lastgaelam = delta + args.gamma * args.gae_lambda * nextnonterminal * lastgaelam
            returns = advantages + values
        b_obs = obs.reshape((-1,) + envs.single_observation_space.shape)
        b_logprobs = logprobs.reshape(-1)
        b_actions = actions.reshape((-1,) + envs.single_action_space.shape)
        b_advantages = advantages.reshape(-1)
        b_returns = returns.reshape(-1)
        b_values = values.reshape(-1)
        b_inds = np.arange(args.batch_size)
        clipfracs = []
        for epoch in range(args.update_epochs):
            args.rng.shuffle(b_inds)
            for start in range(0, args.batch_size, args.minibatch_size):
                end = start + args.minibatch_size
                mb_inds = b_inds[start:end]
                if args.continuous:
                    _, newlogprob, entropy, newvalue = agent.get_action_and_value(b_obs[mb_inds], b_actions[mb_inds])
                else:
                    _, newlogprob, entropy, newvalue = agent.get_action_and_value(b_obs[mb_inds], b_actions.long()[mb_inds])
                logratio = newlogprob - b_logprobs[mb_inds]
                ratio = logratio.exp()
                with torch.no_grad():
                    old_approx_kl = (-logratio).mean()
                    approx_kl = ((ratio - 1) - logratio).mean()
                    clipfracs += [((ratio - 1.0).abs() > args.clip_coef).float().mean().item()]
                mb_advantages = b_advantages[mb_inds]
                if args.norm_adv:
                    mb_advantages = (mb_advantages - mb_advantages.mean()) / (mb_advantages.std() + 1e-8)
                pg_loss1 = -mb_advantages * ratio
                pg_loss2 = -mb_advantages * torch.clamp(ratio, 1 - args.clip_coef, 1 + args.clip_coef)
                pg_loss = torch.max(pg_loss1, pg_loss2).mean()
                newvalue = newvalue.view(-1)
                if args.clip_vloss:
                    v_loss_unclipped = (newvalue - b_returns[mb_inds]) ** 2
                    v_clipped = b_values[mb_inds] + torch.clamp(
                        newvalue - b_values[mb_inds],
                        -args.clip_coef,
                        args.clip_coef,
                    )
                    v_loss_clipped = (v_clipped - b_returns[mb_inds]) ** 2
                    v_loss_max = torch.max(v_loss_unclipped, v_loss_clipped)
                    v_loss = 0.5 * v_loss_max.mean()
                else:
                    v_loss = 0.5 * ((newvalue - b_returns[mb_inds]) ** 2).mean()
                entropy_loss = entropy.mean()
                loss = pg_loss - args.ent_coef * entropy_loss + v_loss * args.vf_coef
                optimizer.zero_grad()
                loss.backward()
                nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm)
                optimizer.step()
                records.append([loss.item(), pg_loss.item(), v_loss.item(), entropy_loss.item(), old_approx_kl.item(), approx_kl.item()])
            if args.target_kl is not None and approx_kl > args.target_kl:
                break
        y_pred, y_true = b_values.cpu().numpy(), b_returns.cpu().numpy()
        var_y = np.var(y_true)
        explained_var = np.nan if var_y == 0 else 1 - np.var(y_true - y_pred) / var_y
        records.append([optimizer.param_groups[0]["lr"], float(explained_var), np.mean(clipfracs), global_step])
        records.append({n: p.detach().numpy().copy() for n, p in agent.named_parameters()})
    return records
"""

PPO_STEP = [
    (
        "                loss.backward()\n                nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm)\n                optimizer.step()",
        "                grads = loss.backward()\n                nn.utils.clip_grad_norm_(grads, agent.parameters(), args.max_grad_norm)\n                optimizer.step(grads)",
    )
]


class _Space:
    pass


class Envs:
    """A vector of small deterministic environments (observations of 4, rewards the distance
    from 0, random terminations from their own seeded stream)."""

    def __init__(self, n, continuous):
        self.n, self.continuous = n, continuous
        self.single_observation_space = _Space()
        self.single_observation_space.shape = (4,)
        self.single_action_space = _Space()
        if continuous:
            self.single_action_space.shape = (2,)
        else:
            self.single_action_space.shape = ()
            self.single_action_space.n = 3

    def reset(self, seed=None):
        self.rng = np.random.default_rng(seed)
        self.state = self.rng.standard_normal((self.n, 4)).astype(np.float32)
        return self.state, {}

    def step(self, action):
        a = np.asarray(action, dtype=np.float64)
        if not self.continuous:
            a = np.stack([a - 1, (a == 2) * 1.0], 1)
        self.state = (0.9 * self.state + 0.1 * np.concatenate([a, a], 1)).astype(np.float32)
        reward = -np.abs(self.state).sum(1).astype(np.float32)
        terminated = self.rng.random(self.n) < 0.15
        return self.state, reward, terminated, np.zeros(self.n, bool), {}


class SharedSamples:
    """``Categorical.sample`` and ``Normal.sample`` of a library drawing from one seeded
    stream (inverse CDF and ``loc + scale * eps``), the same draws for both libraries."""

    def __init__(self, seed):
        self.seed = seed

    def patch(self, monkeypatch, lib):
        rng = np.random.default_rng(self.seed)

        def categorical(self, sample_shape=()):
            p = self.probs.detach().numpy().astype(np.float64)
            u = rng.random(p.shape[:-1] + (1,))
            index = (np.cumsum(p, -1) < u).sum(-1).clip(0, p.shape[-1] - 1)
            return lib.tensor(index, dtype=lib.int64)

        def normal(self, sample_shape=()):
            eps = lib.tensor(rng.standard_normal(tuple(self.loc.shape)), dtype=self.loc.dtype)
            return (self.loc + self.scale * eps).detach()

        monkeypatch.setattr(lib.distributions.Categorical, "sample", categorical)
        monkeypatch.setattr(lib.distributions.Normal, "sample", normal)


@pytest.mark.parametrize("continuous", [False, True])
def test_cleanrl_ppo_matches_torch(monkeypatch, continuous):
    args = types.SimpleNamespace(
        num_steps=8, num_envs=2, seed=1, learning_rate=2.5e-4, anneal_lr=True,
        num_iterations=2, gamma=0.99, gae_lambda=0.95, update_epochs=2, minibatch_size=4,
        norm_adv=True, clip_coef=0.2, clip_vloss=True, ent_coef=0.01, vf_coef=0.5,
        max_grad_norm=0.5, target_kl=None, continuous=continuous, batch_size=16,
    )  # fmt: skip
    theirs, ours = both(PPO_SOURCE, PPO_STEP)
    agent_class = "ContinuousAgent" if continuous else "Agent"
    records, initial = [], None
    for lib, names in ((torch, theirs), (rg, ours)):
        SharedSamples(9).patch(monkeypatch, lib)
        torch.manual_seed(0)
        agent = names[agent_class](Envs(2, continuous))
        if initial is None:
            initial = {k: v.detach().numpy().copy() for k, v in agent.state_dict().items()}
        else:
            agent.load_state_dict(initial)
        args.rng = np.random.default_rng(3)
        records.append(names["train"](args, Envs(2, continuous), agent))
    assert_records_agree(records[1], records[0], rtol=1e-4, atol=1e-5)


# -- DQN -------------------------------------------------------------------------------------------
DQN_SOURCE = '''
import random
from collections import namedtuple, deque
from itertools import count

device = torch.device(
    "cuda" if torch.cuda.is_available() else
    "mps" if torch.backends.mps.is_available() else
    "cpu"
)

Transition = namedtuple('Transition',
                        ('state', 'action', 'next_state', 'reward'))

class ReplayMemory(object):
    def __init__(self, capacity):
        self.memory = deque([], maxlen=capacity)
    def push(self, *args):
        """Save a transition"""
        self.memory.append(Transition(*args))
    def sample(self, batch_size):
        return random.sample(self.memory, batch_size)
    def __len__(self):
        return len(self.memory)

class DQN(nn.Module):
    def __init__(self, n_observations, n_actions):
        super(DQN, self).__init__()
        self.layer1 = nn.Linear(n_observations, 32)
        self.layer2 = nn.Linear(32, 32)
        self.layer3 = nn.Linear(32, n_actions)
    def forward(self, x):
        x = F.relu(self.layer1(x))
        x = F.relu(self.layer2(x))
        return self.layer3(x)

BATCH_SIZE = 8
GAMMA = 0.99
EPS_START = 0.9
EPS_END = 0.05
EPS_DECAY = 1000
TAU = 0.005
LR = 1e-3

def run(env, policy_net, target_net, num_episodes, cleanrl_soft_update=False):
    target_net.load_state_dict(policy_net.state_dict())
    optimizer = optim.AdamW(policy_net.parameters(), lr=LR, amsgrad=True)
    memory = ReplayMemory(10000)
    steps_done = 0
    records = []

    def select_action(state):
        nonlocal steps_done
        sample = random.random()
        eps_threshold = EPS_END + (EPS_START - EPS_END) * \\
            math.exp(-1. * steps_done / EPS_DECAY)
        steps_done += 1
        if sample > eps_threshold:
            with torch.no_grad():
                return policy_net(state).max(1).indices.view(1, 1)
        else:
            return torch.tensor([[env.action_space.sample()]], device=device, dtype=torch.long)

    def optimize_model():
        if len(memory) < BATCH_SIZE:
            return
        transitions = memory.sample(BATCH_SIZE)
        batch = Transition(*zip(*transitions))
        non_final_mask = torch.tensor(tuple(map(lambda s: s is not None,
                                              batch.next_state)), device=device, dtype=torch.bool)
        non_final_next_states = torch.cat([s for s in batch.next_state
                                                    if s is not None])
        state_batch = torch.cat(batch.state)
        action_batch = torch.cat(batch.action)
        reward_batch = torch.cat(batch.reward)
        state_action_values = policy_net(state_batch).gather(1, action_batch)
        next_state_values = torch.zeros(BATCH_SIZE, device=device)
        with torch.no_grad():
            next_state_values[non_final_mask] = target_net(non_final_next_states).max(1).values
        expected_state_action_values = (next_state_values * GAMMA) + reward_batch
        criterion = nn.SmoothL1Loss()
        loss = criterion(state_action_values, expected_state_action_values.unsqueeze(1))
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_value_(policy_net.parameters(), 100)
        optimizer.step()
        records.append(loss.item())

    for i_episode in range(num_episodes):
        state, info = env.reset()
        state = torch.tensor(state, dtype=torch.float32, device=device).unsqueeze(0)
        for t in count():
            action = select_action(state)
            observation, reward, terminated, truncated, _ = env.step(action.item())
            reward = torch.tensor([reward], device=device)
            done = terminated or truncated
            if terminated:
                next_state = None
            else:
                next_state = torch.tensor(observation, dtype=torch.float32, device=device).unsqueeze(0)
            memory.push(state, action, next_state, reward)
            state = next_state
            optimize_model()
            if cleanrl_soft_update:
                for target_network_param, q_network_param in zip(target_net.parameters(), policy_net.parameters()):
                    target_network_param.data.copy_(
                        TAU * q_network_param.data + (1.0 - TAU) * target_network_param.data
                    )
            else:
                target_net_state_dict = target_net.state_dict()
                policy_net_state_dict = policy_net.state_dict()
                for key in policy_net_state_dict:
                    target_net_state_dict[key] = policy_net_state_dict[key]*TAU + target_net_state_dict[key]*(1-TAU)
                target_net.load_state_dict(target_net_state_dict)
            if done:
                records.append(t + 1)
                break
        records.append({n: p.detach().numpy().copy() for n, p in target_net.named_parameters()})
    return records
'''

DQN_STEP = [
    (
        "        loss.backward()\n        torch.nn.utils.clip_grad_value_(policy_net.parameters(), 100)\n        optimizer.step()",
        "        grads = loss.backward()\n        torch.nn.utils.clip_grad_value_(grads, policy_net.parameters(), 100)\n        optimizer.step(grads)",
    )
]


class Walk:
    """A deterministic stand-in for CartPole: four numbers drifting with the action."""

    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)
        self.action_space = types.SimpleNamespace(sample=lambda: int(self.rng.integers(0, 2)))

    def reset(self):
        self.t = 0
        self.s = self.rng.standard_normal(4)
        return self.s, {}

    def step(self, a):
        self.t += 1
        self.s = 0.95 * self.s + (0.1 if a else -0.1)
        reward = 1.0 if abs(self.s[0]) < 1.5 else 0.0
        return self.s, reward, bool(self.rng.random() < 0.1), self.t >= 20, {}


@pytest.mark.parametrize("soft_update", ["state_dict", "data_copy"])
def test_dqn_tutorial_matches_torch(soft_update):
    theirs, ours = both(DQN_SOURCE, DQN_STEP)
    records, initial = [], None
    for names in (theirs, ours):
        random.seed(0)
        torch.manual_seed(0)
        policy, target = names["DQN"](4, 2), names["DQN"](4, 2)
        if initial is None:
            initial = {k: v.detach().numpy().copy() for k, v in policy.state_dict().items()}
        else:
            policy.load_state_dict(initial)
        records.append(names["run"](Walk(0), policy, target, 4, soft_update == "data_copy"))
    assert_records_agree(records[1], records[0], rtol=1e-5, atol=1e-6)


# -- the defect found ------------------------------------------------------------------------------
def _shared_embedding_steps(lib):
    embedding = lib.nn.Embedding(3, 2)
    with lib.no_grad():
        embedding.weight.copy_(lib.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]))
    first = lib.optim.Adam(embedding.parameters(), lr=0.01)
    second = lib.optim.SGD(embedding.parameters(), lr=0.5)
    loss = (embedding(lib.tensor([1, 1, 2])) ** 2).sum()
    if lib is torch:
        loss.backward()
        first.step()
        grad = embedding.weight.grad.clone()
        norm = torch.nn.utils.clip_grad_norm_(embedding.parameters(), 1.0)
        second.step()
    else:
        grads = loss.backward()
        first.step(grads)
        grad = embedding.weight.grad(grads)
        norm = rg.nn.utils.clip_grad_norm_(grads, embedding.parameters(), 1.0)
        second.step(grads)
    return embedding.weight.detach().numpy(), grad.numpy(), float(norm)


def test_two_optimizers_over_one_parameter_both_step_it_as_in_torch():
    weight, grad, norm = _shared_embedding_steps(rg)
    expected_weight, expected_grad, expected_norm = _shared_embedding_steps(torch)
    np.testing.assert_allclose(grad, expected_grad, rtol=1e-6)  # read after the first step
    assert norm == pytest.approx(expected_norm, rel=1e-6)  # clipped after it
    np.testing.assert_allclose(weight, expected_weight, rtol=1e-6)  # stepped by both


def test_the_same_gradients_stepped_twice_step_twice_as_in_torch():
    results = []
    for lib in (torch, rg):
        p = lib.nn.Parameter(lib.tensor([1.0, -2.0]))
        sgd = lib.optim.SGD([p], lr=0.25)
        loss = (p * p).sum()
        if lib is torch:
            loss.backward()
            sgd.step()
            sgd.step()
        else:
            grads = loss.backward()
            sgd.step(grads)
            sgd.step(grads)
        results.append(p.detach().numpy().tolist())
    assert results[1] == results[0] == [0.0, 0.0]
