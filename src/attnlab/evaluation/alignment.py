"""Has cross-attention formed? One measure behind every verdict: does it align as the notes say (§1, §25)?

The notes' table of §1 says which source token each French token of ``i'm home .`` should look at:
je, suis → i'm; chez, moi → home; . → .; <eos> → <eos>. The whole table is judged, against the accepted
translation (Tatoeba's, :data:`attnlab.notes.ACCEPTED`) closest to the output: a map has *formed* when the
argmax of each of its rows is the table's word; it has *not formed* when any row looks elsewhere; and when
the output lacks one of the table's words (``je suis .`` has no chez, moi), there is no row to hold against
it, so the answer is "can't judge", never "formed". That is the one test ``attnlab explain``, ``attnlab doctor``,
``attnlab attention``, the demo, the web page and the training timeline apply, with the same bar, to the same map:
:func:`verdict_map` (the last layer's heads averaged — what the decoder reads last before ``W_o``; a
Bahdanau model has that one map). Movement is not alignment (docs/explanations/alignment.md).

On other sentences there is no verdict: ``attnlab align`` scores every head against gold word alignments
with the Alignment Error Rate (:mod:`attnlab.analysis.align`, Och & Ney 2003), argmax links the same way.

Word-level: BPE pieces are joined into words first (a source word's weight is the sum of its pieces'
weights; a target word's row is the mean of its pieces' rows), so a word and a BPE run are judged alike.
A French → English run is held against the same table read the other way (i'm → je or suis; home → chez
or moi …), on the French sentences Tatoeba accepts for the example. The table is an English ↔ French one: a run
of another pair (its record, :func:`attnlab.data.pairs.pair_of`, has no ``notes_table``) gets no verdict, and its
summary says so plainly.

Dimension key: L layers, H heads, T target (query) positions, S source (key) positions, W words.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from attnlab.data.pairs import Pair
from attnlab.data.text import preprocess
from attnlab.i18n import _
from attnlab.maps import CONTINUES, WORD_START
from attnlab.notes import ACCEPTED, EXAMPLE, NOTES_ALIGNMENT

__all__ = ["AlignmentCheck", "RowCheck", "check_alignment", "check_probe", "check_result", "example_sentence",
           "expected_words", "table_text", "verdict_map"]

#: Labels that are never part of a word: the specials (``<eos>`` is a word of its own, the table's last row).
_SPECIALS = ("<unk>", "<pad>", "<bos>", "<eos>", "[MASK]")

#: The end of a sentence, a row and a column of the table like any word (§1: ``<eos>`` → ``<eos>``).
_EOS = "<eos>"


def table_text(table: Sequence[tuple[str, tuple[str, ...]]]) -> str:
    """The table as the notes write it, outputs that look at the same words together:
    ``je, suis → i'm; chez, moi → home; . → .; <eos> → <eos>`` (read the other way: ``i'm → je/suis``)."""
    groups: dict[tuple[str, ...], list[str]] = {}
    for out, src in table:
        groups.setdefault(tuple(src), []).append(out)
    return "; ".join(f"{', '.join(outs)} → {'/'.join(src)}" for src, outs in groups.items())


@dataclass(frozen=True)
class RowCheck:
    """One output word: the source word its row weights most, that weight (to 4 decimals), and the words it should look at
    (empty: the notes do not place this word, it is not judged)."""

    output: str
    looks_at: str
    weight: float
    expected: tuple[str, ...] = ()

    @property
    def judged(self) -> bool:
        return bool(self.expected)

    @property
    def ok(self) -> bool:
        return self.looks_at in self.expected


@dataclass(frozen=True)
class AlignmentCheck:
    """The verdict on one map: each output word's row, the table it is held against (``table``: output word →
    the source words it should look at; empty: the notes' table is not for this sentence), and whether every
    row of that table is present and looks where it says. ``formed``: True (every row present and right),
    False (a present row looks elsewhere), None (no table, or a row missing from the output: can't judge)."""

    sentence: str
    rows: tuple[RowCheck, ...]
    other_pair: str = ""  # the run's pair ("English → Chinese") when the notes' en-fr table is not for it
    table: tuple[tuple[str, tuple[str, ...]], ...] = ()

    @property
    def judged(self) -> int:
        return sum(r.judged for r in self.rows)

    @property
    def agree(self) -> int:
        return sum(r.judged and r.ok for r in self.rows)

    @property
    def missing(self) -> tuple[str, ...]:
        """The table's words the output lacks (their rows cannot be judged)."""
        present = {r.output for r in self.rows}
        return tuple(w for w, _src in self.table if w not in present)

    @property
    def formed(self) -> bool | None:
        if not self.table or self.judged == 0:
            return None
        if self.agree < self.judged:
            return False  # a row that is there looks elsewhere: evidence enough
        return None if self.missing else True

    @property
    def wrong(self) -> str:
        """The judged rows that look elsewhere, as ``output → looks at`` (empty when none)."""
        return ", ".join(f"{r.output} → {r.looks_at}" for r in self.rows if r.judged and not r.ok)

    def summary(self) -> str:
        """One line in the current language: formed or not, and on how many of the notes' words."""
        if self.other_pair:
            return _("no verdict: the notes' table of §1 ({table}) is not for a run that translates {pair}").format(
                table=table_text(tuple(expected_words(EXAMPLE[0]).items())), pair=self.other_pair)
        table, missing = table_text(self.table), "/".join(self.missing)
        if not self.table:
            return _("no verdict: the notes' table of §1 is for the notes' example, not this sentence")
        if self.formed is None:
            return _("can't judge: the translation has no {missing} (the notes' table of §1: {table})").format(
                missing=missing, table=table)
        if self.formed:
            return _("attention has formed: {agree} of {judged} words look where the notes' table of §1 says "
                     "({table})").format(agree=self.agree, judged=self.judged, table=table)
        line = _("attention has not formed: {agree} of {judged} words look where the notes' table of §1 says "
                 "({table}); {wrong}").format(agree=self.agree, judged=self.judged, table=table, wrong=self.wrong)
        return line + ("; " + _("the translation has no {missing}").format(missing=missing) if missing else "")

    def to_json(self) -> dict[str, Any]:
        """The verdict as data; ``summary`` in the current language (the web page rebuilds it in its own)."""
        return {"sentence": self.sentence, "formed": self.formed, "agree": self.agree, "judged": self.judged,
                "wrong": self.wrong, "table": table_text(self.table), "summary": self.summary(),
                "other_pair": self.other_pair, "missing": "/".join(self.missing),
                "table_rows": [[w, list(src)] for w, src in self.table],
                "rows": [{"output": r.output, "looks_at": r.looks_at, "weight": round(r.weight, 4),
                          "expected": list(r.expected)} for r in self.rows]}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> AlignmentCheck:
        """The verdict :meth:`to_json` wrote (a probe record's); raises ValueError on anything else (also on a
        verdict recorded before the whole table was judged: it has no ``table_rows``)."""
        try:
            rows = tuple(RowCheck(str(r["output"]), str(r["looks_at"]), float(r["weight"]),
                                  tuple(str(e) for e in r["expected"])) for r in data["rows"])
            table = tuple((str(w), tuple(str(x) for x in src)) for w, src in data["table_rows"])
            return cls(str(data["sentence"]), rows, str(data.get("other_pair", "")), table)
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"not an alignment verdict: {e}") from None


def verdict_map(weights: Tensor) -> Tensor:
    """The one map every verdict reads, ``(T, S)``: the last layer's heads averaged.

    ``weights``: ``(L, H, T, S)`` as :class:`~attnlab.maps.AttentionResult` holds a kind, ``(L, T, S)``
    with the heads already averaged (as ``probes.jsonl`` records them), or ``(T, S)`` as it is."""
    w = weights.detach().float().cpu()
    if w.dim() == 4:
        return w[-1].mean(dim=0)  # (T, S)
    if w.dim() == 3:
        return w[-1]  # (T, S)
    if w.dim() == 2:
        return w
    raise ValueError(f"an attention map needs (layers, heads, queries, keys), (layers, queries, keys) or "
                     f"(queries, keys); got shape {tuple(w.shape)}")


def example_sentence(pair: Pair | None = None) -> str | None:
    """The sentence the verdict is read on in a run of ``pair`` (None: the notes' own English → French): the
    notes' ``i'm home .``, or its French, ``je suis chez moi .``, for a French → English run; None for a pair
    the notes' table is not for."""
    return EXAMPLE[0] if pair is None else pair.notes_example


def expected_words(sentence: str, reverse: bool = False, output: Sequence[str] = ()) -> dict[str, tuple[str, ...]]:
    """The rows of the notes' table for ``sentence``'s translation, in the translation's order: each target
    word, ``<eos>`` included, and the source words it should look at (empty: the table is not for this sentence).

    The table's rows are those of one accepted translation (Tatoeba's, :data:`attnlab.notes.ACCEPTED`): the one
    sharing most words with ``output`` (the words the model wrote; ties and no output: the notes' own,
    ``je suis chez moi .``). ``reverse``: ``sentence`` is the French side of a French → English run, one of the
    French sentences Tatoeba accepts for the example; the table is read the other way, over that sentence's
    words (``i'm`` → ``je``/``suis``).
    """
    key = preprocess(sentence)
    if not reverse:
        table = NOTES_ALIGNMENT.get(key, {})
        translations = list(dict.fromkeys(preprocess(a) for a in ACCEPTED.get(key, ())))
        if not table or not translations:
            return {}
        seen = set(output)
        words = max(translations, key=lambda t: len(seen & set(t.split()))).split() + [_EOS]  # first on ties
        return {w: (table[w],) for w in words if w in table}
    for source, table in NOTES_ALIGNMENT.items():
        if key in {preprocess(a) for a in ACCEPTED.get(source, ())}:
            words = [*key.split(), _EOS]
            back: dict[str, list[str]] = {en: [] for en in [*source.split(), _EOS]}
            for fr in words:
                if fr in table:
                    back[table[fr]].append(fr)
            return {en: tuple(fr) for en, fr in back.items() if fr}
    return {}


def _words(tokens: Sequence[str]) -> tuple[list[str], list[int]]:
    """The words of a row of token labels and, for each token, the index of its word.

    BPE pieces are joined: a raw piece continues a word unless it starts with ``▁`` (SentencePiece's mark),
    and a displayed one (:func:`attnlab.maps.display_tokens`) continues it when it starts with ``·``.
    Specials are words of their own."""
    words: list[str] = []
    owner: list[int] = []
    raw_bpe = any(t.startswith(WORD_START) for t in tokens)
    for t in tokens:
        if t in _SPECIALS or not words or words[-1] in _SPECIALS:
            cont = False
        elif raw_bpe:
            cont = not t.startswith(WORD_START)
        else:
            cont = t.startswith(CONTINUES) and len(t) > len(CONTINUES)
        if cont:
            words[-1] += t.removeprefix(CONTINUES) if not raw_bpe else t
        else:
            words.append(t.removeprefix(WORD_START) if raw_bpe else t)
        owner.append(len(words) - 1)
    return words, owner


def check_alignment(sentence: str, src_tokens: Sequence[str], out_tokens: Sequence[str], weights: Tensor,
                    reverse: bool = False, other_pair: str = "") -> AlignmentCheck:
    """Hold a map against the notes' whole table for ``sentence`` (:func:`expected_words`: the rows of the
    accepted translation closest to the output); ``other_pair``: the run's pair when the table is not for it
    (every row is shown, none judged).

    ``weights``: any shape :func:`verdict_map` takes; its rows are the output tokens ``out_tokens`` (the
    token each query produced), its columns the source tokens ``src_tokens``. A masked ``<pad>`` column
    has weight 0 and never wins a row. Returns an :class:`AlignmentCheck` with one row per output word;
    raises ValueError when the map has no row or no column to judge.
    """
    w = verdict_map(weights)
    T, S = min(w.shape[0], len(out_tokens)), min(w.shape[1], len(src_tokens))
    if T == 0 or S == 0:
        raise ValueError(f"a map of shape {tuple(w.shape)} for {len(out_tokens)} outputs and {len(src_tokens)} "
                         "sources has nothing to judge")
    w = w[:T, :S]
    src_words, src_owner = _words(list(src_tokens[:S]))
    out_words, out_owner = _words(list(out_tokens[:T]))
    to_word = torch.zeros(S, len(src_words))
    to_word[torch.arange(S), torch.tensor(src_owner)] = 1.0
    by_src_word = w @ to_word  # (T, W_src): a source word's weight is its pieces' sum
    expected = {} if other_pair else expected_words(sentence, reverse, out_words)
    rows = []
    for j, word in enumerate(out_words):
        row = by_src_word[[i for i, o in enumerate(out_owner) if o == j]].mean(dim=0)  # (W_src,) its pieces' mean
        best = int(row.argmax())
        rows.append(RowCheck(word, src_words[best], round(float(row[best]), 4), expected.get(word, ())))
    return AlignmentCheck(preprocess(sentence), tuple(rows), other_pair, tuple(expected.items()))


def _how(pair: Pair | None) -> dict[str, Any]:
    """How a run of ``pair`` (None: the notes' own English → French) reads the table: reversed, or not at all."""
    if pair is None:
        return {"reverse": False}
    if pair.notes_table is None:
        return {"other_pair": pair.title()}
    return {"reverse": pair.notes_reversed}


def _target_to_source(kind: str, w: Tensor, n_src: int, n_out: int) -> Tensor:
    """The rows of map ``kind`` for the output tokens, over the source columns: cross-attention as it is;
    the decoder-only model's ``self`` map (over ``source <bos> target``) cut to its target queries and its
    source keys."""
    if kind == "cross":
        return w[..., :n_out, :n_src]
    start = w.shape[-2] - n_out  # the last n_out queries produced the outputs
    return w[..., start:, :n_src]


def check_result(result: Any, pair: Pair | None = None) -> AlignmentCheck | None:
    """The verdict on an :class:`~attnlab.maps.AttentionResult` (what ``Translator.attention`` returns)
    of a run of ``pair`` (its record; None: the notes' English → French): its cross-attention (a decoder-only model: its target rows' self-attention
    on the source) through :func:`check_alignment`. None when the model has no such map (seq2seq's fixed
    context, the encoder-only model) or the result has no output."""
    kind = "cross" if "cross" in result.attention else "self" if "self" in result.attention else None
    n_src, n_out = len(result.src_tokens), len(result.tgt_tokens)
    if kind is None or n_out == 0 or n_src == 0:
        return None
    w = _target_to_source(kind, result.attention[kind], n_src, n_out)
    return check_alignment(result.source, result.src_tokens, result.tgt_tokens, w, **_how(pair))


def check_probe(record: Mapping[str, Any], pair: Pair | None = None, sentence: str | None = None
                ) -> AlignmentCheck | None:
    """The verdict on one ``probes.jsonl`` record (``sentence``, ``src_tokens``, ``tgt_tokens`` and
    ``attention``: ``kind → (layers, T_out, keys)``, heads averaged; ``sentence`` given apart for a record
    :func:`~attnlab.runs.probes.read_probes` returned, which groups them by it), as :func:`check_result` gives it:
    the verdict training stored with the record when there is one, else computed from the recorded map.
    None when the record holds no map from target to source."""
    stored = record.get("alignment")
    if isinstance(stored, Mapping):
        try:
            return AlignmentCheck.from_json(stored)
        except ValueError:
            pass
    att = record.get("attention") or {}
    kind = "cross" if att.get("cross") else "self" if att.get("self") else None
    src, out = list(record.get("src_tokens") or []), list(record.get("tgt_tokens") or [])
    if kind is None or not src or not out:
        return None
    try:
        w = torch.tensor(att[kind], dtype=torch.float32)  # (L, T_out, keys)
    except (TypeError, ValueError):  # ragged: not a map record_probes writes
        return None
    if w.dim() != 3:
        return None
    w = _target_to_source(kind, w, len(src), len(out))
    sentence = sentence if sentence is not None else str(record.get("sentence", ""))
    return check_alignment(sentence, src, out, w, **_how(pair))
