"""The notes' §4 walk-through: one sentence → tokens → ids, then ``<eos>`` and ``<pad>`` up to ``num_steps``.

    w = walk_through(tokenizer, "i'm home .", num_steps=32)   # a trained run's own tokenizer
    print(format_walkthrough(w, source="runs/t"))

Given a trained run's tokenizer (``attnlab data --run RUN``), the ids shown are the rows of that
run's embedding table; without one, ``attnlab data`` builds a fresh tokenizer from the corpus'
training split, as ``attnlab train`` would. Word vocabularies and BPE are both handled: for BPE the
pieces carry ``▁``, the word-start marker, and the walk-through says so.

Every sentence printed is one of the templates in :data:`TEXT`, filled with ``str.format``: a
translation of the walk-through (``--lang``) replaces those templates one for one and touches no logic.
"""

from __future__ import annotations

from dataclasses import dataclass

from attnlab.data.specials import EOS, PAD, SPECIALS, UNK
from attnlab.i18n import N_, Templates, ljust, width

__all__ = ["TEXT", "Walkthrough", "format_walkthrough", "walk_through", "word_pieces"]

METASPACE = "▁"  # the BPE word-start marker (SentencePiece's metaspace, attnlab.data.subword)


#: Every line the walk-through prints, as a format string (field names say what fills them), looked up
#: in the current language (``--lang``: :class:`attnlab.i18n.Templates`).
TEXT: dict[str, str] = Templates({
    "header": N_("the notes' §4 walk-through for {sentence!r}, with {source}'s {kind} tokenizer "
                "({size:,} entries), padded to data.num_steps={num_steps}:"),
    "source_run": N_("the run {run}"),
    "source_fresh": N_("this corpus' training split (built afresh; give --run RUN for a trained run's own)"),
    "kind_word": N_("word"),
    "kind_bpe": N_("BPE subword"),
    "preprocessed": N_("  preprocessed : {text}"),
    "table_row": N_("  {label:<12} : {cells}"),
    "label_position": N_("position"),
    "label_token": N_("token"),
    "label_id": N_("id"),
    "label_ids": N_("ids"),  # the whole padded sequence, not one id: its own word in every language
    "pad_run": N_("<pad> ×{count}"),
    "valid_len": N_("  valid_len    : {valid_len}  (tokens before the padding, <eos> included; attention masks the rest, §23)"),
    "vocabulary": N_("  vocabulary   : {pairs}"),
    "pad": N_("  <pad> = {pad} fills the row up to num_steps = {num_steps} (D2L's truncate_pad). In training, attnlab "
             "pads each batch only to its longest row (data/batching.py); valid_len says which positions are real."),
    "truncated": N_("  the sentence has {total} tokens: only the first num_steps − 1 = {kept} are kept, so that <eos> "
                   "fits (data.num_steps={num_steps})"),
    "unk": N_("  <unk> = {unk}: {count} token(s) the vocabulary does not hold ({why})"),
    "unk_word": N_("words seen fewer than data.min_freq times in the training split"),
    "unk_bpe": N_("characters never seen in the training split"),
    "word_kind": N_("  each word (after preprocessing: lower case, a space before , . ! ?) is one token"),
    "word_kind_moses": N_("  each word (after preprocessing: Moses' tokenizer for {lang}, case kept, punctuation split "
                         "off) is one token"),
    "word_kind_metaspace": N_("  each run of letters or digits and each other mark is one token (after preprocessing: case "
                             "kept); ▁ marks a token that followed a space, so the tokens join back to the text"),
    "word_kind_chars": N_("  each character of a script written without spaces is one token (after preprocessing: "
                         "case kept; a run of other letters or digits stays one token, each other mark is one)"),
    "bpe_kind": N_("  ▁ marks the start of a word (SentencePiece's metaspace); a piece without ▁ continues the word "
                  "before it: {words}"),
    "bpe_word": N_("{word} = {pieces}"),
    "bpe_whole": N_(" (each of these words is one piece; a rarer word splits into several)"),
    "magnitude": N_("  {big} has a larger id ({big_id}) than {small} ({small_id}); that does not make it bigger or more "
                   "important: an id is only a row number of the {size:,}-entry vocabulary, the row of the "
                   "embedding table that holds its vector (§4, §5)"),
})


@dataclass(frozen=True)
class Walkthrough:
    """One sentence through a tokenizer. ``tokens[i]`` is ``id_to_token(ids[i])``; both are padded to
    ``num_steps``. ``valid_len`` counts the real tokens with ``<eos>``; ``total`` the tokens before truncation."""

    sentence: str
    preprocessed: str
    kind: str  # the tokenizer's kind: "word" or "bpe"
    tokens: list[str]
    ids: list[int]
    valid_len: int
    num_steps: int
    size: int  # entries in the vocabulary (specials included)
    total: int
    text: str = "d2l"  # the tokenizer's text rule (attnlab.data.languages.RULES)
    lang: str = ""  # its language (ISO 639-1)

    @property
    def truncated(self) -> bool:
        return self.total > self.num_steps - 1


def walk_through(tok, sentence: str, num_steps: int) -> Walkthrough:
    """Follow ``sentence`` through ``tok`` (any :class:`attnlab.data.vocab.Tokenizer`) as the corpus does:
    ``encode``, keep the first ``num_steps - 1`` ids (``corpus.prepare``'s truncation), append ``<eos>``,
    pad with ``<pad>`` to ``num_steps``. Raises ``ValueError`` for ``num_steps < 2``."""
    if num_steps < 2:
        raise ValueError(f"num_steps={num_steps} must be >= 2 (one token and <eos>)")
    ids = list(tok.encode(sentence))
    seq = ids[: num_steps - 1] + [EOS]
    padded = seq + [PAD] * (num_steps - len(seq))
    return Walkthrough(sentence=sentence, preprocessed=tok.preprocess(sentence), kind=tok.kind,
                       tokens=[tok.id_to_token(i) for i in padded], ids=padded, valid_len=len(seq),
                       num_steps=num_steps, size=len(tok), total=len(ids), text=getattr(tok, "text", "d2l"),
                       lang=getattr(tok, "lang", ""))


def word_pieces(tokens: list[str]) -> list[list[str]]:
    """BPE pieces grouped into words: a piece starting with ``▁`` (or a special token) starts a new word."""
    words: list[list[str]] = []
    for t in tokens:
        if t in SPECIALS:
            break
        if t.startswith(METASPACE) or not words:
            words.append([t])
        else:
            words[-1].append(t)
    return words


def _magnitude_pair(w: Walkthrough) -> tuple[tuple[str, int], tuple[str, int]]:
    """The first two shown tokens with different ids, content tokens before specials (``i'm`` and ``home``)."""
    seen: dict[int, str] = {}
    for t, i in zip(w.tokens[: w.valid_len], w.ids[: w.valid_len]):
        seen.setdefault(i, t)
    content = [(t, i) for i, t in seen.items() if i not in (UNK, PAD, EOS)]
    specials = [(t, i) for i, t in seen.items() if i in (UNK, EOS)] + [(SPECIALS[PAD], PAD)]
    first, second = (content + specials)[:2]
    return (first, second) if first[1] > second[1] else (second, first)


def _table(w: Walkthrough) -> list[str]:
    """Position / token / id in aligned columns, up to the first ``<pad>``, the rest as one ``<pad> ×N`` column."""
    shown = min(w.num_steps, w.valid_len + 1)
    cols = [(str(p), t, str(i)) for p, (t, i) in enumerate(zip(w.tokens[:shown], w.ids[:shown]))]
    if w.num_steps > shown:
        cols.append((f"{shown}…{w.num_steps - 1}", TEXT["pad_run"].format(count=w.num_steps - shown), str(PAD)))
    widths = [max(width(c) for c in col) for col in cols]  # terminal cells: a Chinese character takes two
    rows = []
    for row, label in enumerate(("label_position", "label_token", "label_id")):
        cells = "  ".join(ljust(col[row], cells) for col, cells in zip(cols, widths)).rstrip()
        rows.append(TEXT["table_row"].format(label=TEXT[label], cells=cells))
    return rows


def format_walkthrough(w: Walkthrough, run: str | None = None) -> str:
    """The walk-through as text; ``run``: the run folder whose tokenizer it used (None: a fresh one)."""
    source = TEXT["source_run"].format(run=run) if run else TEXT["source_fresh"]
    kind = TEXT["kind_bpe"] if w.kind == "bpe" else TEXT["kind_word"]
    lines = [TEXT["header"].format(sentence=w.sentence, source=source, kind=kind, size=w.size, num_steps=w.num_steps),
             TEXT["preprocessed"].format(text=w.preprocessed),
             *_table(w),
             TEXT["table_row"].format(label=TEXT["label_ids"], cells=w.ids),
             TEXT["valid_len"].format(valid_len=w.valid_len)]
    pairs = dict(zip(w.tokens, w.ids))
    lines.append(TEXT["vocabulary"].format(pairs=", ".join(f"{t} = {i}" for t, i in pairs.items())))
    if w.kind == "bpe":
        groups = word_pieces(w.tokens[: w.valid_len])
        words = [TEXT["bpe_word"].format(word="".join(p).lstrip(METASPACE), pieces=" + ".join(p)) for p in groups]
        whole = TEXT["bpe_whole"] if all(len(p) == 1 for p in groups) else ""
        lines.append(TEXT["bpe_kind"].format(words="; ".join(words)) + whole)
    elif w.text == "moses":  # the line says what the run's own text rule does (case is kept)
        lines.append(TEXT["word_kind_moses"].format(lang=w.lang))
    elif w.text == "metaspace":
        lines.append(TEXT["word_kind_metaspace"])
    elif w.text == "chars":
        lines.append(TEXT["word_kind_chars"])
    else:
        lines.append(TEXT["word_kind"])
    unk = w.ids[: w.valid_len].count(UNK)
    if unk:
        why = TEXT["unk_bpe"] if w.kind == "bpe" else TEXT["unk_word"]
        lines.append(TEXT["unk"].format(unk=UNK, count=unk, why=why))
    if w.truncated:
        lines.append(TEXT["truncated"].format(total=w.total, kept=w.num_steps - 1, num_steps=w.num_steps))
    if w.num_steps > w.valid_len:
        lines.append(TEXT["pad"].format(pad=PAD, num_steps=w.num_steps))
    (big, big_id), (small, small_id) = _magnitude_pair(w)
    lines.append(TEXT["magnitude"].format(big=big, big_id=big_id, small=small, small_id=small_id, size=w.size))
    return "\n".join(lines)
