# ruff: noqa: E501, W291, W293  (the programs are kept as their authors wrote them: long lines, trailing blanks)
"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):
the character-aware parts of CS224N 2018-19 assignment 5 as haroldmei/cs224n wrote them
(``nmt_cnn/vocab.py``'s character additions, ``utils.py``'s ``pad_sents_char``/``pad_sents``,
``cnn.py``, ``highway.py``, ``model_embeddings.py``, ``char_decoder.py``), trained a few steps
against torch's run of the same code from the same weights and sentences.

What it exercises: ``torch.LongTensor`` of nested lists of character ids and
``torch.transpose(sents, 0, 1)``, ``nn.Embedding(..., padding_idx=...)`` over a 3-d index tensor,
``.view(view_shape).transpose(1, 2)`` into ``nn.Sequential(nn.Conv1d, nn.ReLU, nn.MaxPool1d(17))``
and ``.squeeze(2)``, the highway layer (``xproj * xgate + (1 - xgate) * input``) inside a
``Sequential`` with ``nn.Dropout``, the character decoder's ``h, c = self.charDecoder(...)``
(which binds ``h`` to the LSTM's output and ``c`` to its ``(h_n, c_n)`` pair, so ``c[-1]`` is
``c_n``), ``nn.CrossEntropyLoss(ignore_index=0)`` over ``view((l*b))``, and greedy decoding
through ``torch.LongTensor([[start_index] * b])``, ``s.argmax(dim=2)`` and ``.item()`` (with the
author's conditional expression, which empties a word whenever a special character is chosen).

The driver is the test's: a ``VocabEntry`` filled by ``add``, ``ModelEmbeddings`` embedding
each batch of sentences and ``CharDecoder.train_forward`` spelling every word from its own
embedding (the assignment's NMT model feeds it the word decoder's state instead), under
``optim.Adam``; the embeddings run in ``eval()`` mode because the dropout masks are each
library's own draws. ``vocab.py``'s ``docopt`` entry point, ``from_corpus`` and the JSON
``Vocab`` are left out. ``initialize(...)`` gives the port torch's initial weights. The lines
changed: the ``import`` lines and the gradient lines (``grads = loss.backward()``,
``optimizer.step(grads)``).
"""

from __future__ import annotations

import numpy as np
import torch

import retrograd as rg
from real_ports import assert_records_agree, initializer, port, run_source

CHARACTER_AWARE_SOURCE = '''
import math
from typing import List

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

# -- utils.py --------------------------------------------------------------------------------
def pad_sents_char(sents, char_pad_token):
    """ Pad list of sentences according to the longest sentence in the batch and max_word_length.
    """
    # Words longer than 21 characters should be truncated
    max_word_length = 21

    def pad_word(w, max_len):
        return w + [char_pad_token] * (max_len - len(w))

    padded_word = [char_pad_token] * max_word_length
    sentence_len = np.max([len(s) for s in sents])
    for j in range(len(sents)):
        for i in range(len(sents[j])):
            sents[j][i] = pad_word(sents[j][i], max_word_length)
        sents[j] = sents[j] + [padded_word] * (sentence_len - len(sents[j]))
    
    ### END YOUR CODE

    return sents


def pad_sents(sents, pad_token):
    """ Pad list of sentences according to the longest sentence in the batch.
    """
    sents_padded = []

    ### COPY OVER YOUR CODE FROM ASSIGNMENT 4

    length = 0
    for l in sents:
        length = max(length, len(l))

    for l in sents:
        padded = l + [pad_token] * (length - len(l))
        sents_padded.append(padded)

    ### END YOUR CODE FROM ASSIGNMENT 4

    return sents_padded

# -- vocab.py --------------------------------------------------------------------------------
class VocabEntry(object):
    """ Vocabulary Entry, i.e. structure containing either
    src or tgt language terms.
    """
    def __init__(self, word2id=None):
        if word2id:
            self.word2id = word2id
        else:
            self.word2id = dict()
            self.word2id['<pad>'] = 0   # Pad Token
            self.word2id['<s>'] = 1 # Start Token
            self.word2id['</s>'] = 2    # End Token
            self.word2id['<unk>'] = 3   # Unknown Token
        self.unk_id = self.word2id['<unk>']
        self.id2word = {v: k for k, v in self.word2id.items()}
        
        ## Additions to the A4 code:
        self.char_list = list("""ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789,;.!?:'\\"/\\\\|_@#$%^&*~`+-=<>()[]""")

        self.char2id = dict() # Converts characters to integers
        self.char2id['<pad>'] = 0
        self.char2id['{'] = 1
        self.char2id['}'] = 2
        self.char2id['<unk>'] = 3
        for i, c in enumerate(self.char_list):
            self.char2id[c] = len(self.char2id)
        self.char_unk = self.char2id['<unk>']
        self.start_of_word = self.char2id["{"]
        self.end_of_word = self.char2id["}"]
        assert self.start_of_word+1 == self.end_of_word

        self.id2char = {v: k for k, v in self.char2id.items()} # Converts integers to characters
        ## End additions to the A4 code

    def __getitem__(self, word):
        return self.word2id.get(word, self.unk_id)

    def __contains__(self, word):
        return word in self.word2id

    def __setitem__(self, key, value):
        raise ValueError('vocabulary is readonly')

    def __len__(self):
        return len(self.word2id)

    def add(self, word):
        if word not in self:
            wid = self.word2id[word] = len(self)
            self.id2word[wid] = word
            return wid
        else:
            return self[word]

    def words2charindices(self, sents):
        lsents = []
        for s in sents:
            ls = []
            for w in s:
                lw = [self.start_of_word] + [self.char2id[i] for i in w] + [self.end_of_word]
                ls.append(lw)
            lsents.append(ls)

        return lsents
        ### END YOUR CODE

    def words2indices(self, sents):
        return [[self[w] for w in s] for s in sents]

    def to_input_tensor_char(self, sents: List[List[str]], device: torch.device) -> torch.Tensor:
        sents = self.words2charindices(sents)
        sents = pad_sents_char(sents, self.char2id['<pad>'])
        sents = torch.LongTensor(sents)
        # (sent_len, batch, embedding)
        sents = torch.transpose(sents, 0, 1)
        return sents

    def to_input_tensor(self, sents: List[List[str]], device: torch.device) -> torch.Tensor:
        word_ids = self.words2indices(sents)
        sents_t = pad_sents(word_ids, self['<pad>'])
        sents_var = torch.tensor(sents_t, dtype=torch.long, device=device)
        return torch.t(sents_var)

# -- cnn.py ----------------------------------------------------------------------------------
class CNN(nn.Module): 
    """
    Class that converts input words to their CNN-based embeddings.
    """

    def __init__(self, emb_char = 50, kernel=5, emb_word=100):
        ### the final word embedding size
        super(CNN, self).__init__()
        self.kernel = kernel
        self.emb_word = emb_word
        self.emb_char = emb_char
        self.max_words = 21
        ### input output size are both embed_size
        self.Conv1d = \\
            nn.Sequential(
                # input: batch * emb_char * max_words
                # output: batch * emb_word * (max_words - kernel + 1)
                nn.Conv1d(self.emb_char, self.emb_word, self.kernel, bias=True),
                nn.ReLU(),
                nn.MaxPool1d(self.max_words - self.kernel + 1)
            )

    def forward(self, input):
        word_emb = self.Conv1d(input).squeeze(2)
        return word_emb

# -- highway.py ------------------------------------------------------------------------------
class Highway(nn.Module): 
    """
    Class that converts input words to their CNN-based embeddings.
    """

    def __init__(self, embed_size, dropout_rate=0.2):
        ### the final word embedding size
        super(Highway, self).__init__()
        self.embed_size = embed_size
        self.dropout_rate = dropout_rate
        ### input output size are both embed_size
        self.ReLU_W_proj = nn.Sequential(
            nn.Linear(self.embed_size, self.embed_size, bias=True),
            nn.ReLU()
        )
        self.Sigmoid_W_gate = nn.Sequential(
            nn.Linear(self.embed_size, self.embed_size, bias=True),
            nn.Sigmoid()
        )
        self.Dropout = nn.Dropout(self.dropout_rate)

    def forward(self, input):
        xproj = self.ReLU_W_proj(input)
        xgate = self.Sigmoid_W_gate(input)
        x_highway = xproj * xgate +(1 - xgate) * input
        
        return x_highway

# -- model_embeddings.py ---------------------------------------------------------------------
class ModelEmbeddings(nn.Module): 
    """
    Class that converts input words to their CNN-based embeddings.
    """
    def __init__(self, embed_size, vocab):
        super(ModelEmbeddings, self).__init__()

        self.dropout_rate = 0.3
        self.emb_char = 50
        self.embed_size = embed_size
        pad_token_idx = vocab.char2id['<pad>']
        self.embeddings = nn.Embedding(len(vocab.char2id), self.emb_char, padding_idx=pad_token_idx)
        # Conv1d + Pooling1d
        cnn = CNN(emb_char=self.emb_char, emb_word = self.embed_size) 
        # with dropout rate? 
        highway = Highway(embed_size = self.embed_size, dropout_rate=self.dropout_rate)
        # with a dropout layer?
        dropout = nn.Dropout(self.dropout_rate)
        # chain all toghether
        self.construct_emb = nn.Sequential(cnn, highway, dropout)

    def forward(self, input):
        print(input.shape)
        char_embeddings = self.embeddings(input) # sentence_length, batch_size, max_word_length,
        sent_len, batch_size, max_word, _ = char_embeddings.shape
        view_shape = (sent_len * batch_size, max_word, self.emb_char)
        char_embeddings = char_embeddings.view(view_shape).transpose(1, 2)
        emb_output = self.construct_emb(char_embeddings)
        emb_output = emb_output.view(sent_len, batch_size, self.embed_size)
        #print(view_shape)
        return emb_output

# -- char_decoder.py -------------------------------------------------------------------------
class CharDecoder(nn.Module):
    def __init__(self, hidden_size, char_embedding_size=50, target_vocab=None):
        super(CharDecoder,self).__init__()
        self.target_vocab = target_vocab
        self.charDecoder = nn.LSTM(char_embedding_size, hidden_size)
        self.char_output_projection = nn.Linear(hidden_size, len(self.target_vocab.char2id))
        self.decoderCharEmb = nn.Embedding(len(self.target_vocab.char2id), char_embedding_size,
                                           padding_idx=0)

    def forward(self, input, dec_hidden=None):
        input = self.decoderCharEmb(input)
        h,c = self.charDecoder(input, dec_hidden)
        
        s = self.char_output_projection(h)  
        
        return s, (torch.unsqueeze(h[-1],0), c[-1]) 

    def train_forward(self, char_sequence, dec_hidden=None):
        s,(h,c) = self.forward(char_sequence[:-1,:], dec_hidden)
        l,b,d = s.shape
        ground_truth = char_sequence[1:,:]
        s = s.view((l*b,d))
        ground_truth = ground_truth.view((l*b))
        loss=nn.CrossEntropyLoss(ignore_index=0)
        l = loss(s,ground_truth)
        return l

    def decode_greedy(self, initialStates, device, max_length=21):
        _,b,h = initialStates[0].shape
        start_index = self.target_vocab.start_of_word
        end_index   = self.target_vocab.end_of_word
        h,c = initialStates[0],initialStates[1]
        curr = torch.LongTensor([[start_index] * b])
        words = ['']*b
        for i in range(max_length):
            s,(h,c) = self.forward(curr, (h,c)) 
            curr = s.argmax(dim=2)
            for idx in range(b):
                words[idx] = words[idx] + self.target_vocab.id2char[curr[0][idx].item()] if curr[0][idx].item() > 3 else ''
           

        return words

# -- the test's driver -----------------------------------------------------------------------
vocab = VocabEntry()
for sent in corpus:
    for word in sent:
        vocab.add(word)
embed_size = 12
embeddings = ModelEmbeddings(embed_size, vocab)
initialize(embeddings)
char_decoder = CharDecoder(embed_size, target_vocab=vocab)
initialize(char_decoder)
embeddings.eval()  # the dropout masks are each library's own draws
optimizer = torch.optim.Adam(list(embeddings.parameters()) + list(char_decoder.parameters()), lr=0.01)

for step in range(4):
    sents = corpus[2 * (step % 3): 2 * (step % 3) + 3]
    sents = sorted(sents, key=lambda e: len(e), reverse=True)
    chars = vocab.to_input_tensor_char(sents, device='cpu')  # sent_len, batch, 21
    word_ids = vocab.to_input_tensor(sents, device='cpu')
    word_emb = embeddings(chars)
    sent_len, batch_size, max_word = chars.shape
    char_sequence = chars.reshape(sent_len * batch_size, max_word).t().contiguous()
    dec_hidden = (word_emb.view(1, sent_len * batch_size, embed_size), torch.zeros(1, sent_len * batch_size, embed_size))
    loss = char_decoder.train_forward(char_sequence, dec_hidden)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    record.append(loss.item())
    record.append(word_ids.numpy())

record.append({k: v.detach().numpy() for k, v in embeddings.state_dict().items()})
record.append({k: v.detach().numpy() for k, v in char_decoder.state_dict().items()})
with torch.no_grad():
    chars = vocab.to_input_tensor_char(corpus[:2], device='cpu')
    word_emb = embeddings(chars)[0]
    record.append(word_emb.numpy())
    states = (word_emb.unsqueeze(0), torch.zeros_like(word_emb).unsqueeze(0))
    record.append(char_decoder.decode_greedy(states, device='cpu', max_length=8))
'''

CHARACTER_AWARE_STEPS = [
    (
        "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n",
        "import retrograd as torch\nimport retrograd.nn as nn\nimport retrograd.nn.functional as F\n",
    ),
    (
        "    loss.backward()\n    optimizer.step()\n",
        "    grads = loss.backward()\n    optimizer.step(grads)\n",
    ),
]

CORPUS = [
    ["the", "cat", "sat", "on", "the", "mat"],
    ["a", "dog", "ran"],
    ["Colourless", "green", "ideas", "sleep", "furiously", "!"],
    ["time", "flies", "like", "an", "arrow"],
    ["fruit", "flies", "like", "a", "banana"],
    ["we", "saw", "her", "duck"],
    ["buffalo", "buffalo", "Buffalo"],
]


def test_cs224n_character_aware_embeddings_and_decoder_train_as_torch(capsys):
    initialize, records, logs = initializer(), [], []
    torch.manual_seed(351)  # torch's initial weights, which the port loads
    for lib in (torch, rg):
        record = []
        text = (
            CHARACTER_AWARE_SOURCE
            if lib is torch
            else port(CHARACTER_AWARE_SOURCE, CHARACTER_AWARE_STEPS)
        )
        corpus = [list(sent) for sent in CORPUS]
        run_source(text, lib, record=record, initialize=initialize, corpus=corpus)
        records.append(record)
        logs.append(capsys.readouterr().out)
    theirs, ours = records
    assert len(logs[1].splitlines()) == len(logs[0].splitlines()) == 5
    assert [tuple(np.shape(r)) for r in ours[1:8:2]] == [tuple(np.shape(r)) for r in theirs[1:8:2]]
    assert all(isinstance(word, str) for word in theirs[-1])
    # output channel 1 of the convolution has a weight whose first gradient is rounding noise
    # (-5.9e-9 against a largest of 3.4e-3), which Adam's first step divides by its own size
    assert_records_agree(
        ours, theirs, rtol=1e-4, atol=1e-5, noise={"construct_emb.0.Conv1d.0.weight": slice(1, 2)}
    )
