"""Text for ``retrograd train --model gpt``: a character corpus every install has offline.

By default the corpus is the Python standard library's own ``.py`` files, read as text: the
top-level modules of ``sysconfig.get_path("stdlib")`` in sorted name order, whole files, until
:data:`DEFAULT_CHARS` characters are reached (a deterministic selection, about 1 MB; the exact
text follows the installed Python version). ``--text PATH`` reads any text file instead, in
UTF-8 or the ``--encoding`` given; a file that does not decode is refused, never mangled.

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

import codecs
import sysconfig
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ._usage import CommandError, UsageError

__all__ = ["DEFAULT_CHARS", "TextCorpus", "known_encoding", "load_corpus", "stdlib_text"]

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
        raise CommandError(f"no .py files in the standard library folder {root} — pass --text FILE")
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
            raise CommandError(
                f"the text {name!r} has fewer than 2 characters — pass a longer --text"
            )
        vocab = "".join(sorted(set(text)))
        lookup = {ch: i for i, ch in enumerate(vocab)}
        ids = np.fromiter((lookup[ch] for ch in text), dtype=np.int64, count=len(text))
        split = max(1, int(len(ids) * (1.0 - VALIDATION_FRACTION)))
        return cls(name, vocab, ids[:split], ids[split:])

    @property
    def vocab_size(self) -> int:
        return len(self.vocab)

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text``; a character outside the vocabulary is a ``CommandError``."""
        lookup = {ch: i for i, ch in enumerate(self.vocab)}
        unknown = sorted({ch for ch in text if ch not in lookup})
        if unknown:
            raise CommandError(
                f"the prompt has characters the model never saw: {''.join(unknown)!r} — use "
                "characters of its training text"
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


def known_encoding(name: str) -> bool:
    """Whether Python has a codec called ``name``."""
    try:
        codecs.lookup(name)
    except LookupError:
        return False
    return True


def load_corpus(
    path: str | None = None, limit: int = DEFAULT_CHARS, encoding: str = "utf-8"
) -> TextCorpus:
    """``path``'s text in ``encoding``, or the standard library's source when ``path`` is
    ``None``. A file that is not text in that encoding is a one-line :class:`CommandError`
    naming the first byte that does not decode."""
    if path is None:
        text, files = stdlib_text(limit)
        return TextCorpus.from_text(
            text, f"python-stdlib ({len(files)} files, {len(text):,} chars)"
        )
    file = Path(path)
    if not file.is_file():
        raise FileNotFoundError(f"no text file at {path}")
    data = file.read_bytes()
    try:
        text = data.decode(encoding)
    except UnicodeDecodeError as error:
        raise CommandError(
            f"--text {path} is not {encoding} text (byte 0x{data[error.start]:02x} at offset "
            f"{error.start} does not decode) — pass --encoding with the file's encoding "
            "(latin-1, cp1252, utf-16 ...)"
        ) from None
    except LookupError:
        raise UsageError(f"train: --encoding {encoding}: no such encoding") from None
    return TextCorpus.from_text(text, f"{file.name} ({len(text):,} chars)")
