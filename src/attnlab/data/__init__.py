"""Data: D2L preprocessing, vocabularies (word and BPE), the fra-eng and numbers corpora, batching.

See docs/DESIGN.md § data/. The layers point one way: ``specials`` (the reserved ids) ← ``subword``
(BPE) ← ``vocab`` (words, the tokenizer protocol and :func:`load_tokenizer` for either kind).
"""

from attnlab.data.batching import Batch, TokenBatchSampler, collate
from attnlab.data.corpus import Prepared, Split, prepare, read_pairs, split_by_source
from attnlab.data.download import locate_fra_eng
from attnlab.data.numbers import numbers_pairs
from attnlab.data.text import detokenize, preprocess, tokenize
from attnlab.data.vocab import BOS, EOS, PAD, SPECIALS, UNK, Tokenizer, Vocab, load_tokenizer
from attnlab.errors import CorpusError

__all__ = [
    "BOS",
    "EOS",
    "PAD",
    "SPECIALS",
    "UNK",
    "Batch",
    "CorpusError",
    "Prepared",
    "Split",
    "Tokenizer",
    "TokenBatchSampler",
    "Vocab",
    "collate",
    "detokenize",
    "load_tokenizer",
    "locate_fra_eng",
    "numbers_pairs",
    "prepare",
    "preprocess",
    "read_pairs",
    "split_by_source",
    "tokenize",
]
