"""What "a printed line made only of English words" means, for the tests that run everything in Chinese.

A line passes when it holds a CJK character, or when every word in it is something a Chinese page also
shows as it is: a token of the run's vocabularies (the sentences and translations), a number, code (an
option, a path, a dotted or snake_case name, an example line's sentence and translation, a CamelCase class, a `backticked` span, a ``key = value`` config line, a shell command line), a model or method name from
:data:`ALLOWED` (GRU, Transformer, BLEU, …), or a single letter. A line with two or more other English
words is English prose that was not translated.
"""

from __future__ import annotations

import re

#: Names a Chinese text keeps in English (the notes themselves write them so), and units.
ALLOWED = frozenset("""
attnlab gru transformer bahdanau seq2seq decoder-only encoder-only bleu chrf sacrebleu ffn relu tanh softmax
layernorm embedding query key value qkv bpe ter aer ibm gpt bert adam adamw muon lr dropout teacher forcing
mask causal pad bos eos unk cpu cuda gpu json png svg toml safetensors ctranslate2 captum int8 float32 fp32
num_steps num_hiddens embed_size num_layers num_heads batch_size valid_lens d2l mfu kv cache nltk wpt hansards
linear train valid test notes tatoeba fra-eng numbers fast_align sinusoidal http api url html
ms gflop gflops tflop flop flops min kib mib gib
""".split())

_CJK = re.compile(r"[\u3000-\u303f\u3400-\u4dbf\u4e00-\u9fff\uff00-\uffef]")
# code: a `span`, a word holding a path/operator character, an option (not the -only of decoder-only),
# a dotted name (train.lr, model.pt), a CamelCase class name (GRUEncoder, AdditiveAttention)
_CODE = re.compile(r"`[^`]*`|\S*[/\\=_@#$%^&*<>{}\[\]|~]\S*|(?<![\w-])--?\w[\w-]*|\b\w+\.\w+(\.\w+)*\b"
                   r"|\b[A-Za-z]+[a-z][A-Z]\w*|\b[A-Z]{2,}[a-z]\w*")
_ASSIGNMENT = re.compile(r"\s*[\w.-]+\s*=\s")  # a config line, `direction = "en-fr"`: code
_SHELL = re.compile(r"\s*(\$ )?(attnlab|echo|python3?|pip|git|cd|curl)\s")  # a command line: code
_WORD = re.compile(r"[A-Za-z][A-Za-z'’-]*")
# an example line, `  SOURCE => TRANSLATION   …`: the sentence and the model's output are data, whatever a
# barely trained model writes (joined BPE pieces are in no vocabulary)
_EXAMPLE = re.compile(r"^\s*\S.*?\s=>\s.*?(?=\s{2,}|$)")


#: Words that begin a line the learner reads and are English prose on their own: "wrote PATH" after every
#: figure and file a command saves, "interrupted by SIGTERM".
LEADING = re.compile(r"\s*(wrote|interrupted)\b")


def english_words(line: str, vocab: frozenset[str] = frozenset()) -> list[str]:
    """The words of ``line`` that are English prose (see the module docstring); [] for a CJK line."""
    if _CJK.search(line) or _ASSIGNMENT.match(line) or _SHELL.match(line):
        return []
    stripped = _CODE.sub(" ", _EXAMPLE.sub(" ", line))
    words = [w for w in _WORD.findall(stripped) if len(w) > 1]
    return [w for w in words if w.lower() not in ALLOWED and w.lower() not in vocab and w not in vocab]


def is_untranslated(line: str, vocab: frozenset[str] = frozenset()) -> bool:
    """``line`` holds two or more English prose words and no CJK character, or begins with one of
    :data:`LEADING`."""
    words = english_words(line, vocab)
    return len(words) >= 2 or bool(words and LEADING.match(line))


def english_lines(text: str, vocab: frozenset[str] = frozenset()) -> list[str]:
    """The lines of ``text`` that are untranslated English prose."""
    return [line for line in text.splitlines() if is_untranslated(line, vocab)]
