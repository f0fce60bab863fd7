"""Text for ``retrograd train --model gpt``: a character corpus every install has offline.

By default the corpus is the Python standard library's own ``.py`` files, read as text: the
top-level modules of ``sysconfig.get_path("stdlib")`` in sorted name order, whole files, until
:data:`DEFAULT_CHARS` characters are reached (a deterministic selection, about 1 MB; the exact
text follows the installed Python version). ``--text PATH`` reads any UTF-8 file instead.

The characters are the tokens: the vocabulary is the sorted set of characters of the text.
The first 90% is the training split, the rest validation.

>>> corpus = TextCorpus.from_text("abracadabra" * 20)
>>> corpus.vocab
'abcdr'
>>> corpus.decode(corpus.encode("cab"))
'cab'
>>> round(corpus.unigram_entropy, 3)  # nats per character
1.414
"""

from __future__ import annotations

import sysconfig
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ._usage import UsageError

__all__ = ["DEFAULT_CHARS", "TextCorpus", "load_corpus", "stdlib_text"]

#: characters of standard-library source the default corpus takes
DEFAULT_CHARS = 1_000_000
#: files larger than this are skipped (generated tables, not code a person wrote)
MAX_FILE_BYTES = 200_000
VALIDATION_FRACTION = 0.1


def stdlib_text(limit: int = DEFAULT_CHARS) -> tuple[str, list[str]]:
    """The standard library's top-level ``.py`` files, sorted by name, joined until ``limit``
    characters; returns the text and the file names used."""
    root = Path(sysconfig.get_path("stdlib"))
    parts, names, total = [], [], 0
    for path in sorted(root.glob("*.py")):
        if path.stat().st_size > MAX_FILE_BYTES:
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        parts.append(text)
        names.append(path.name)
        total += len(text)
        if total >= limit:
            break
    if not parts:
        raise UsageError(f"train: no .py files in the standard library folder {root}")
    return "".join(parts)[:limit], names


@dataclass(frozen=True)
class TextCorpus:
    """A text, its character vocabulary and its train/validation token arrays."""

    name: str
    vocab: str
    train: np.ndarray  # int64 token ids
    val: np.ndarray

    @classmethod
    def from_text(cls, text: str, name: str = "text") -> TextCorpus:
        if len(text) < 2:
            raise UsageError(f"train: the text {name!r} has fewer than 2 characters")
        vocab = "".join(sorted(set(text)))
        lookup = {ch: i for i, ch in enumerate(vocab)}
        ids = np.fromiter((lookup[ch] for ch in text), dtype=np.int64, count=len(text))
        split = max(1, int(len(ids) * (1.0 - VALIDATION_FRACTION)))
        return cls(name, vocab, ids[:split], ids[split:])

    @property
    def vocab_size(self) -> int:
        return len(self.vocab)

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text``; a character outside the vocabulary is a ``UsageError``."""
        lookup = {ch: i for i, ch in enumerate(self.vocab)}
        unknown = sorted({ch for ch in text if ch not in lookup})
        if unknown:
            raise UsageError(
                f"sample: the prompt has characters the model never saw: {''.join(unknown)!r}"
            )
        return [lookup[ch] for ch in text]

    def decode(self, ids: list[int] | np.ndarray) -> str:
        return "".join(self.vocab[int(i)] for i in ids)

    @property
    def unigram_entropy(self) -> float:
        """Entropy (nats per character) of the training split's character frequencies: the
        loss of a model that predicts every character from its frequency alone, the baseline
        a language model must beat to have learnt anything about context."""
        return unigram_entropy(self.train)


def unigram_entropy(ids: np.ndarray) -> float:
    counts = np.array(list(Counter(ids.tolist()).values()), dtype=np.float64)
    p = counts / counts.sum()
    return float(-(p * np.log(p)).sum())


def load_corpus(path: str | None = None, limit: int = DEFAULT_CHARS) -> TextCorpus:
    """``path``'s text (UTF-8), or the standard library's source when ``path`` is ``None``."""
    if path is None:
        text, files = stdlib_text(limit)
        return TextCorpus.from_text(
            text, f"python-stdlib ({len(files)} files, {len(text):,} chars)"
        )
    file = Path(path)
    if not file.is_file():
        raise FileNotFoundError(f"no text file at {path}")
    text = file.read_text(encoding="utf-8", errors="replace")
    return TextCorpus.from_text(text, f"{file.name} ({len(text):,} chars)")
