"""`attnlab align`: does cross-attention show the word alignment? Measured against gold (notes §25).

The gold set is WPT-2003's English–French Hansards test set (447 sentences, sure and possible links,
Mihalcea & Pedersen 2003), read from a folder the user names (``--gold DIR``, ``$ATTNLAB_GOLD_DIR``,
or ``$ATTNLAB_DATA_DIR/hansards-enfr``); nothing of it is ever copied into the repository.

For each gold pair the reference translation is force-decoded (teacher forcing, notes §3) through
the model by :func:`attnlab.translator.teacher_forced`, and the cross-attention of every layer × head
(and each layer's head average, the average of all, or Bahdanau's one additive map) becomes word
links: each target word is linked to the source word it attends to most (argmax), read either at
the decoder step that *predicts* the word (shift 0) or at the next step, where the word is the
decoder's *input* (shift 1, Chen et al. 2020, "Accurate word alignment induction from neural
machine translation"). Subword pieces are mapped back to the gold's words: a target word's
attention is the mean over its pieces' queries, a source word's share the sum over its pieces'
keys; the source ``<eos>`` key is never a link.

Alignment Error Rate (Och & Ney 2003), with A the predicted, S the sure and P the possible links
(S ⊆ P), summed over the corpus: ``AER = 1 − (|A∩S| + |A∩P|) / (|A| + |S|)``, precision
``|A∩P| / |A|``, recall ``|A∩S| / |S|``.

How a map becomes links beyond this argmax (both directions of one map symmetrised, a threshold,
``<eos>`` as NULL, the best heads averaged) lives in :mod:`attnlab.analysis.align.extract`.

Beside the heads, the same links read from gradients instead of attention: the saliency map of
:mod:`attnlab.analysis.align.saliency` (Ding et al. 2019). And a statistical aligner trained in the same run on the same sentences: NLTK's IBM
Model 2 (the ``align`` extra; :mod:`attnlab.analysis.align.ibm`), both directions symmetrised with
grow-diag-final-and by default, and the published figures of the README of the gold set.

Dimension key: N maps (heads and averages), L layers, H heads, Q queries (decoder inputs),
K keys (source tokens), Tt/Ss target/source pieces, Gt/Gs target/source words.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from attnlab.analysis.align.adapt import ADAPT_LR, TEACH_WEIGHT, Adaptation, Teaching, adapt, teach
from attnlab.analysis.align.aer import AERCounts, Link
from attnlab.analysis.align.aer import counts_json as _counts_json
from attnlab.analysis.align.both import BothWays, check_directions, one_way, pick_on_trial, score_pairs
from attnlab.analysis.align.extract import (  # noqa: F401  (re-exported: align's public names)
    METHODS,
    AlignError,
    Extraction,
    Side,
    argmax_links,
    directional_links,
    extract_links,
    head_keys,
    piece_labels,
    stack_heads,
    symmetrise,
    word_attention,
    word_matrix,
)
from attnlab.analysis.align.ibm import (  # noqa: F401
    ibm2_links,
    ibm_baseline,
    require_nltk,
    tatoeba_words,
)
from attnlab.analysis.align.saliency import SALIENCY_LABEL, saliency_maps
from attnlab.data.batching import collate
from attnlab.data.text import preprocess
from attnlab.data.vocab import UNK
from attnlab.models import traits
from attnlab.translator import Translator, teacher_forced

GOLD_ENV = "ATTNLAB_GOLD_DIR"
GOLD_FOLDER = "hansards-enfr"  # under $ATTNLAB_DATA_DIR
#: Published AER (%) on this test set, as the gold set's README quotes them (lower is better).
PUBLISHED = (("fast_align en→fr", 16.4), ("Mgiza (IBM-4) en→fr", 8.0))
PUBLISHED_SOURCE = "lilt/alignment-scripts results, quoted in the gold set's README.md"
DOMAIN_NOTE = (
    "the gold set is Canadian parliamentary debate (Hansards, long formal sentences) while the model "
    "learned from Tatoeba (short everyday sentences): many gold words are unknown to it, so these "
    "figures measure attention under a domain shift"
)


# ----------------------------------------------------------------------------------------- gold set


@dataclass(frozen=True)
class GoldSet:
    """Sentences as the gold's word lists and their links (0-based ``(en, fr)``; ``possible ⊇ sure``)."""

    folder: Path
    split: str
    en: list[list[str]]
    fr: list[list[str]]
    sure: list[frozenset[Link]]
    possible: list[frozenset[Link]]

    def __len__(self) -> int:
        return len(self.en)

    def first(self, n: int) -> GoldSet:
        """The first ``n`` sentences (all of them when ``n >= len(self)``), e.g. a web request's bounded share."""
        return GoldSet(self.folder, self.split, self.en[:n], self.fr[:n], self.sure[:n], self.possible[:n])


def gold_dir(path: str | os.PathLike[str] | None = None) -> Path:
    """The gold folder: ``path``, else ``$ATTNLAB_GOLD_DIR``, else ``$ATTNLAB_DATA_DIR/hansards-enfr``.

    Raises :class:`AlignError` (one line) when none of them is an existing folder.
    """
    if path:
        p = Path(path).expanduser()
        if not p.is_dir():
            raise AlignError(f"--gold {p} is not a folder; name the folder holding test.en-fr.en/.fr/.naacl")
        return p
    env = os.environ.get(GOLD_ENV)
    if env:
        p = Path(env).expanduser()
        if not p.is_dir():
            raise AlignError(f"${GOLD_ENV}={p} is not a folder; point it at the WPT-2003 en-fr gold folder")
        return p
    data = os.environ.get("ATTNLAB_DATA_DIR")
    if data and (Path(data).expanduser() / GOLD_FOLDER).is_dir():
        return Path(data).expanduser() / GOLD_FOLDER
    raise AlignError(
        f"no gold alignment folder: pass --gold DIR or set ${GOLD_ENV} (the WPT-2003 en-fr set: "
        f"test.en-fr.en, test.en-fr.fr, test.en-fr.naacl), or put it at $ATTNLAB_DATA_DIR/{GOLD_FOLDER}"
    )


def _read_lines(path: Path) -> list[list[str]]:
    if not path.is_file():
        raise AlignError(
            f"{path} is missing; the gold folder needs {path.name} (one tokenised sentence a line)"
        )
    text = path.read_text(encoding="utf-8", errors="replace")
    return [line.split() for line in text.splitlines()]


def read_gold(folder: str | os.PathLike[str], split: str = "test") -> GoldSet:
    """Read ``{split}.en-fr.en``, ``.fr`` (one whitespace-tokenised sentence a line) and ``.naacl``
    (``SENTENCE EN FR [S|P]``, 1-based, ``S`` when the label is absent; position 0, NULL, is skipped).

    Raises :class:`AlignError` naming the file and line for a malformed or out-of-range link.
    """
    folder = Path(folder)
    stem = f"{split}.en-fr"
    en, fr = _read_lines(folder / f"{stem}.en"), _read_lines(folder / f"{stem}.fr")
    if len(en) != len(fr):
        raise AlignError(f"{folder / stem}.en has {len(en)} lines but .fr has {len(fr)}; they must pair up")
    if not en or not all(en) or not all(fr):
        n = next((i for i, (e, f) in enumerate(zip(en, fr), 1) if not e or not f), 0)
        where = f"line {n} is empty" if n else "it is empty"
        raise AlignError(f"{folder / stem}.en/.fr: {where}; each line must hold one tokenised sentence")
    naacl = folder / f"{stem}.naacl"
    if not naacl.is_file():
        raise AlignError(f"{naacl} is missing; the gold folder needs the links file {naacl.name}")
    sure: list[set[Link]] = [set() for _ in en]
    possible: list[set[Link]] = [set() for _ in en]
    for n, line in enumerate(naacl.read_text(encoding="utf-8").splitlines(), 1):
        parts = line.split()
        if not parts:
            continue
        try:
            s, e, f = (int(x) for x in parts[:3])
            label = parts[3] if len(parts) > 3 else "S"
        except ValueError:
            s = e = f = -1
            label = ""
        if len(parts) not in (3, 4) or label not in ("S", "P") or not 1 <= s <= len(en):
            raise AlignError(
                f"{naacl}:{n}: {line.strip()!r} is not `SENTENCE EN FR S|P` for {len(en)} sentences"
            )
        if e == 0 or f == 0:
            continue  # a NULL link: not a word pair
        if not (1 <= e <= len(en[s - 1]) and 1 <= f <= len(fr[s - 1])):
            raise AlignError(
                f"{naacl}:{n}: word {e} or {f} is outside sentence {s} "
                f"({len(en[s - 1])} English, {len(fr[s - 1])} French words)"
            )
        link = (e - 1, f - 1)
        possible[s - 1].add(link)  # S ⊆ P (Och & Ney 2003)
        if label == "S":
            sure[s - 1].add(link)
    return GoldSet(folder, split, en, fr, [frozenset(x) for x in sure], [frozenset(x) for x in possible])


def score_links(pred: Sequence[set[Link]], gold: GoldSet) -> AERCounts:
    """AER counts of one predicted link set per gold sentence."""
    if len(pred) != len(gold):
        raise ValueError(f"{len(pred)} predicted link sets for {len(gold)} gold sentences")
    counts = AERCounts()
    for p, s, q in zip(pred, gold.sure, gold.possible):
        counts.add(set(p), s, q)
    return counts


# ------------------------------------------------------------------------------ words ↔ model tokens

# The Hansards gold writes French with contractions undone ("de le droit", "le ordre", "je en ai");
# Tatoeba, which the models read, writes "du droit", "l'ordre", "j'en ai". Re-joining them gives the
# model the text it knows; each joined word keeps the gold indices of the words it came from.
_FR_FUSED = {("de", "le"): "du", ("de", "les"): "des", ("à", "le"): "au", ("à", "les"): "aux"}
_FR_ELIDED = {
    w: w[:-1] + "'"
    for w in ("le", "la", "de", "je", "me", "te", "se", "ne", "que", "ce", "jusque", "lorsque", "puisque")
}
_VOWEL_START = frozenset("aeiouyhàâäéèêëîïôöùûüœæ")


def _starts_vowel(word: str) -> bool:
    return bool(word) and word[0].lower() in _VOWEL_START


def contract_french(words: Sequence[str]) -> list[tuple[str, list[int]]]:
    """Re-join the gold's undone French contractions: ``de le`` → ``du`` (``à les`` → ``aux``…) and
    elisions before a vowel or h (``le ordre`` → ``l'ordre``, ``si il`` → ``s'il``).

    Returns ``(model word, gold word indices)`` in order; every gold index appears exactly once.
    """
    out: list[tuple[str, list[int]]] = []
    low = [w.lower() for w in words]
    i = 0
    while i < len(words):
        nxt = low[i + 1] if i + 1 < len(words) else ""
        after = words[i + 2] if i + 2 < len(words) else ""
        if (low[i], nxt) in _FR_FUSED and not (
            nxt == "le" and _starts_vowel(after)
        ):  # de le égard: d'… l'égard
            out.append((_FR_FUSED[low[i], nxt], [i, i + 1]))
            i += 2
        elif (low[i] in _FR_ELIDED and _starts_vowel(nxt)) or (low[i] == "si" and nxt in ("il", "ils")):
            head = "s'" if low[i] == "si" else _FR_ELIDED[low[i]]
            out.append((head + words[i + 1], [i, i + 1]))
            i += 2
        else:
            out.append((words[i], [i]))
            i += 1
    return out


def map_side(tok, words: Sequence[str], contract: bool = False) -> Side:
    """Encode gold ``words`` group by group with the run's tokenizer (word-level or BPE).

    Preprocessing may split a gold word (``Mr.`` → ``mr .``): all its pieces belong to its group.
    Encoding word by word gives the ids of encoding the whole sentence, because both tokenizers cut
    at whitespace first (a test checks it). ``contract``: French groups from :func:`contract_french`.
    """
    grouped = contract_french(words) if contract else [(w, [i]) for i, w in enumerate(words)]
    ids: list[int] = []
    owner: list[int] = []
    for g, (word, _) in enumerate(grouped):
        pieces = tok.encode(word)
        ids += pieces
        owner += [g] * len(pieces)
    return Side(ids, owner, [idx for _, idx in grouped], [w for w, _ in grouped])


def oov_rates(tok, sides: Sequence[Side]) -> dict[str, float]:
    """Shares of the model's (preprocessed) words that are ``<unk>`` and that are not one vocabulary entry
    (for a word vocabulary the same; for BPE, words cut into pieces are not in its vocabulary as words)."""
    n = unk = whole = 0
    for side in sides:
        for word in side.words:
            for w in preprocess(word).split():
                ids = tok.encode(w)
                n += 1
                unk += UNK in ids
                whole += len(ids) == 1 and ids[0] != UNK
    return {"words": n, "unk": unk / n if n else 0.0, "not_in_vocab": 1 - whole / n if n else 0.0}


# ------------------------------------------------------------------------------ attention → links


def aligned_kind(model_cfg: Any) -> str:
    """The attention kind alignment reads from a model of ``model_cfg``: ``cross`` (an encoder–decoder
    model), or ``self`` (a one-sequence decoder-only model: its target queries over the source keys).

    Raises :class:`AlignError` (one line) for a model with no attention from target to source words
    (the fixed-context seq2seq, the encoder-only masked LM).
    """
    t = traits(model_cfg)
    if "cross" in t.attention:
        return "cross"
    if t.one_sequence and "self" in t.attention:
        return "self"
    raise AlignError(
        f"model.kind={model_cfg.kind} has no attention from target to source words; "
        "align a run with attention (bahdanau, transformer, decoder-only)"
    )


def cross_maps(
    tr: Translator, pairs: Sequence[tuple[Side, Side]], batch_size: int = 16
) -> Iterator[tuple[int, Tensor]]:
    """Force-decode each ``(source, target)`` pair; yields ``(index, maps (L, H, n+1, m+1))``: the
    cross-attention of its ``n + 1`` decoder inputs over its ``m`` source pieces and ``<eos>``.

    Encoder–decoder models give their ``cross`` maps; a one-sequence (decoder-only) model's ``self``
    maps are cut to the target queries over the source keys. Raises :class:`AlignError` otherwise.
    """
    aligned_kind(tr.model.config)  # a model with no target → source attention fails here, in one line
    order = sorted(range(len(pairs)), key=lambda i: (len(pairs[i][0].ids), len(pairs[i][1].ids)))
    for start in range(0, len(order), batch_size):
        idx = order[start : start + batch_size]
        batch = collate([pairs[i][0].ids for i in idx], [pairs[i][1].ids for i in idx], idx)
        att = teacher_forced(tr.model, batch, tr.device, compute_logits=False).attention
        if "cross" in att:
            maps = att["cross"]  # (B, L, H, T, S)
        else:
            S = batch.src.shape[1]
            maps = att["self"][:, :, :, S:, :S]  # (B, L, H, T, S): target queries over source keys
        for b, i in enumerate(idx):
            ns, nt = len(pairs[i][0].ids), len(pairs[i][1].ids)
            yield i, maps[b, :, :, : nt + 1, : ns + 1].float().cpu()  # (L, H, n+1, m+1)


# ------------------------------------------------------------------------------------------- report


@dataclass
class HeadScore:
    """AER of one map: ``layer``/``head`` ``None`` = an average (over heads, or over everything)."""

    layer: int | None
    head: int | None
    shift: int
    counts: AERCounts
    members: tuple[tuple[int, int], ...] = ()  # (layer, head) averaged, for the best-k combination

    @property
    def name(self) -> str:
        if self.members:
            return f"best {len(self.members)} heads averaged (" + ", ".join(
                f"L{li + 1}H{h + 1}" for li, h in self.members
            ) + ")"
        if self.layer is None:
            return "average of all"
        # counted from 1, as every figure and table (the JSON keeps 0-based indices)
        return f"layer {self.layer + 1} " + ("head average" if self.head is None else f"head {self.head + 1}")

    def to_json(self) -> dict[str, Any]:
        return {
            "layer": self.layer,
            "head": self.head,
            "shift": self.shift,
            **_counts_json(self.counts),
            **({"members": [list(m) for m in self.members]} if self.members else {}),
        }


@dataclass
class AlignReport:
    run: str
    kind: str  # the attention kind read: cross, or self (one-sequence model)
    shape: tuple[int, int]  # (layers, heads)
    tokenizer: str
    gold: GoldSet
    contractions: bool
    scores: list[HeadScore]
    oov: dict[str, dict[str, float]]  # lang -> oov_rates
    ibm: dict[str, Any] | None = None  # ibm_baseline's dict with "counts": AERCounts instead of "links"
    seconds: float = 0.0
    extraction: Extraction = Extraction()
    top_k: HeadScore | None = None  # the best k heads' average (k ≥ 2), when asked for
    picked: HeadScore | None = None  # the trial split's best head, scored here (picked beforehand)
    saliency: AERCounts | None = None  # the gradient saliency map's links (align_gradient), when asked for
    saliency_seconds: float = 0.0
    adaptation: Adaptation | None = None  # the maps are a copy's adapted to the gold text (align_adapt)
    as_trained: list[HeadScore] | None = None  # then: the original's best head and average of all, shift 0
    both: BothWays | None = None  # with a run of the other direction: the two symmetrised (align_both)
    teaching: Teaching | None = None  # one head trained toward the average's links (align_adapt.teach)
    untaught: list[HeadScore] | None = None  # then: that head and the average of all before it was taught

    def best(self, shift: int | None = None, single: bool = True) -> HeadScore:
        """The lowest-AER map (``single``: a real head, not an average), at ``shift`` or either."""
        pool = [
            s
            for s in self.scores
            if (shift is None or s.shift == shift) and (not single or s.head is not None)
        ]
        return min(pool, key=lambda s: (s.counts.aer, s.shift, s.layer or 0, s.head or 0))

    def overall(self, shift: int = 0) -> HeadScore | None:
        """The average of every head at ``shift``: of all layers, or of the one layer's heads (``None``
        for a model with a single map)."""
        pool = [s for s in self.scores if s.shift == shift and s.head is None and not s.members]
        return min(pool, key=lambda s: s.layer is not None, default=None)  # the all-layer average first

    def grid(self, shift: int) -> Tensor:
        """AER ``(L, H + 1)``: each head, then the layer's head average (NaN when H = 1)."""
        L, H = self.shape
        g = torch.full((L, H + 1), float("nan"))
        for s in self.scores:
            if s.shift == shift and s.layer is not None:
                g[s.layer, H if s.head is None else s.head] = s.counts.aer
        return g

    def to_json(self) -> dict[str, Any]:
        gold = self.gold
        out = {
            "run": self.run,
            "attention": self.kind,
            "layers": self.shape[0],
            "heads": self.shape[1],
            "tokenizer": self.tokenizer,
            "gold": str(gold.folder),
            "split": gold.split,
            "sentences": len(gold),
            "sure": sum(map(len, gold.sure)),
            "possible": sum(map(len, gold.possible)),
            "french_contractions_joined": self.contractions,
            "oov": self.oov,
            "domain_note": DOMAIN_NOTE,
            "links": {"method": self.extraction.method, "threshold": self.extraction.threshold,
                      "null": self.extraction.null},
            "scores": [s.to_json() for s in self.scores],
            "best": {str(k): self.best(k).to_json() for k in (0, 1)},
            **({"top_k": self.top_k.to_json()} if self.top_k is not None else {}),
            **({"picked_on_trial": self.picked.to_json()} if self.picked is not None else {}),
            **({"saliency": _counts_json(self.saliency, seconds=round(self.saliency_seconds, 2))}
               if self.saliency is not None else {}),
            **({"adapted": {**self.adaptation.to_json(), "as_trained": [s.to_json() for s in self.as_trained or []]}}
               if self.adaptation is not None else {}),
            **({"both_ways": self.both.to_json()} if self.both is not None else {}),
            **({"taught": {**self.teaching.to_json(), "before": [x.to_json() for x in self.untaught or []]}}
               if self.teaching is not None else {}),
            "published": {"source": PUBLISHED_SOURCE, **{n: v / 100 for n, v in PUBLISHED}},
            "seconds": round(self.seconds, 2),
        }
        if self.ibm is not None:
            out["ibm2"] = {**{k: v for k, v in self.ibm.items() if k != "counts"}, **_counts_json(self.ibm["counts"])}
        return out


#: A run trained on the numbers task is refused when more than this share of the gold's words, on either
#: side, is not one entry of its vocabulary: its "languages" are number words, the Hansards' sentences are
#: nearly all unknown to it, so its AER would measure nothing. A numbers gold (number words, as the tests
#: write) it knows is measured as any other.
NUMBERS_UNKNOWN_MAX = 0.5
#: Above this share of ``<unk>`` on either side of the gold, ``align`` warns: the AER then says more about
#: the run's vocabulary than about its attention.
UNK_WARN = 0.5


def _gold_sides(tr: Translator, gold: GoldSet, contract: bool) -> tuple[list[tuple[Side, Side]], bool]:
    """Model sides per sentence and whether the model's source is the gold's English side.

    Raises :class:`AlignError` (one line) for a run the English–French gold cannot measure: one whose
    languages are not English and French (either direction: a French → English run is read the other
    way round), or a numbers-task run that does not know the gold's words (:data:`NUMBERS_UNKNOWN_MAX`)."""
    langs = (getattr(tr.src_tok, "lang", "en"), getattr(tr.tgt_tok, "lang", "fr"))
    if langs not in (("en", "fr"), ("fr", "en")):
        raise AlignError(f"{_run_name(tr)} translates {langs[0]}→{langs[1]}; the gold is English–French word "
                         "alignments: align a run of data.direction=en-fr or fr-en")
    en_first = langs[0] == "en"
    pairs = []
    for en, fr in zip(gold.en, gold.fr):
        e, f = (
            map_side(tr.src_tok if en_first else tr.tgt_tok, en),
            map_side(tr.tgt_tok if en_first else tr.src_tok, fr, contract),
        )
        pairs.append((e, f) if en_first else (f, e))
    if getattr(tr.cfg.data, "dataset", "fra-eng") == "numbers":
        for lang, rates in _oov(tr, pairs, en_first).items():
            if rates["not_in_vocab"] > NUMBERS_UNKNOWN_MAX:
                raise AlignError(
                    f"{_run_name(tr)} was trained on the numbers task (number words, not English–French "
                    f"sentences): {100 * rates['not_in_vocab']:.0f} % of the gold's {LANG_NAMES[lang]} words are not "
                    "in its vocabulary, so its AER would measure nothing; align a run trained on data.dataset=fra-eng")
    return pairs, en_first


LANG_NAMES = {"en": "English", "fr": "French"}


def _run_name(tr: Translator) -> str:
    """The run's folder name (not its path: the web server's errors quote it too)."""
    return tr.run_dir.name if tr.run_dir is not None else "the model"


def _oov(tr: Translator, pairs: Sequence[tuple[Side, Side]], en_first: bool) -> dict[str, dict[str, float]]:
    """:func:`oov_rates` of the gold's English and French sides for ``tr``'s tokenizers."""
    en_sides = [p[0] if en_first else p[1] for p in pairs]
    fr_sides = [p[1] if en_first else p[0] for p in pairs]
    return {"en": oov_rates(tr.src_tok if en_first else tr.tgt_tok, en_sides),
            "fr": oov_rates(tr.tgt_tok if en_first else tr.src_tok, fr_sides)}


def vocabulary_warnings(report: AlignReport) -> list[str]:
    """One line per side of the gold of which more than :data:`UNK_WARN` is ``<unk>`` to the run."""
    return [f"{100 * o['unk']:.0f} % of the gold's {LANG_NAMES.get(lang, lang)} words are <unk> to {report.run}: "
            "its AER says more about its vocabulary than about its attention (a longer fra-eng run knows more words)"
            for lang, o in report.oov.items() if o.get("unk", 0.0) > UNK_WARN]


def _score_maps(
    words: Sequence[Sequence[Tensor]],
    pairs: Sequence[tuple[Side, Side]],
    gold: GoldSet,
    en_first: bool,
    ex: Extraction,
) -> list[AERCounts]:
    """AER counts per map of ``words[i] (N, Gt, Gs + 1)``, sentence ``i`` by sentence."""
    counts: list[AERCounts] = []
    for i, w in enumerate(words):
        links = extract_links(w, *pairs[i], ex)
        counts = counts or [AERCounts() for _ in links]
        for c, x in zip(counts, links):
            c.add(x if en_first else {(j, s) for s, j in x}, gold.sure[i], gold.possible[i])
    return counts


def attention_scores(
    tr: Translator,
    gold: GoldSet,
    contract: bool = True,
    batch_size: int = 16,
    ex: Extraction = Extraction(),
    top_k: int = 0,
) -> AlignReport:
    """Force-decode every gold pair and score every map at shift 0 and 1 with links read as ``ex``
    says (no IBM baseline). ``top_k ≥ 2``: also the average of the ``top_k`` best real heads (chosen
    by their AER on this same gold set, at the best head's shift)."""
    t0 = time.perf_counter()
    kind = aligned_kind(tr.model.config)  # a model with no attention to read: its own line first
    pairs, en_first = _gold_sides(tr, gold, contract)
    t = traits(tr.model.config)
    shape = (t.attention.get(kind, 1), t.heads)
    keys = head_keys(*shape)
    words: dict[int, list[Tensor]] = {0: [None] * len(pairs), 1: [None] * len(pairs)}  # type: ignore[list-item]
    for i, maps in cross_maps(tr, pairs, batch_size):
        stacked = stack_heads(maps)  # (N, n+1, m+1)
        for shift in (0, 1):
            words[shift][i] = word_matrix(stacked, *pairs[i], shift)  # (N, Gt, Gs + 1)
    scores = [
        HeadScore(*keys[k], shift, c)
        for shift in (0, 1)
        for k, c in enumerate(_score_maps(words[shift], pairs, gold, en_first, ex))
    ]
    scores.sort(key=lambda s: (s.shift, s.layer is None, s.layer or 0, s.head is None, s.head or 0))
    oov = _oov(tr, pairs, en_first)
    run = str(tr.run_dir) if tr.run_dir is not None else "(in memory)"
    tok_kind = getattr(tr.src_tok, "kind", "word")
    report = AlignReport(run, kind, shape, tok_kind, gold, contract, scores, oov, extraction=ex)
    if top_k >= 2 and shape[0] * shape[1] >= 2:
        report.top_k = _top_k_score(report, words, pairs, en_first, top_k, keys)
    report.seconds = time.perf_counter() - t0
    return report


def _top_k_score(
    report: AlignReport,
    words: dict[int, list[Tensor]],
    pairs: Sequence[tuple[Side, Side]],
    en_first: bool,
    k: int,
    keys: list[tuple[int | None, int | None]],
) -> HeadScore:
    """Score the mean word matrix of the ``k`` best real heads at the best head's shift."""
    shift = report.best().shift
    members = [s for s in report.scores if s.shift == shift and s.head is not None]
    members = sorted(members, key=lambda s: (s.counts.aer, s.layer or 0, s.head or 0))[:k]
    rows = [keys.index((m.layer, m.head)) for m in members]
    mean = [w[rows].mean(0, keepdim=True) for w in words[shift]]  # (1, Gt, Gs + 1) each
    (c,) = _score_maps(mean, pairs, report.gold, en_first, report.extraction)
    return HeadScore(None, None, shift, c, tuple((m.layer, m.head) for m in members))  # type: ignore[misc]


def saliency_scores(
    tr: Translator, gold: GoldSet, contract: bool = True, ex: Extraction = Extraction()
) -> AERCounts:
    """AER of the gradient saliency map (:mod:`attnlab.analysis.align.saliency`) of every gold pair,
    its links read as ``ex`` says (shift 0: a row is already the gradient of the word it predicts)."""
    aligned_kind(tr.model.config)  # the same models as the heads: one line for one with no attention
    pairs, en_first = _gold_sides(tr, gold, contract)
    words = [word_matrix(m, *pairs[i], 0) for i, m in saliency_maps(tr, pairs)]  # (1, Gt, Gs + 1) each
    (counts,) = _score_maps(words, pairs, gold, en_first, ex)
    return counts


def _corpus_path(tr: Translator, data_path: str | os.PathLike[str] | None) -> str | os.PathLike[str] | None:
    """``data_path``, else None: then ``$ATTNLAB_DATA_DIR`` and the cache (a run from an older attnlab
    that recorded a ``data.data_path``: that path last, while it exists), see :func:`attnlab.data.corpus.for_run`."""
    from attnlab.data.corpus import for_run

    return for_run(tr.cfg.data, data_path).data_path


def align_run(
    tr: Translator,
    gold: GoldSet,
    contract: bool = True,
    ibm_pairs: int = 0,
    ibm_iterations: int = 5,
    ibm: bool = True,
    data_path: str | os.PathLike[str] | None = None,
    ex: Extraction = Extraction(),
    top_k: int = 0,
    ibm_method: str = "grow-diag-final-and",
    ibm_null: bool = True,
    saliency: bool = False,
    adapt_epochs: int = 0,
    adapt_lr: float = ADAPT_LR,
    reverse: Translator | None = None,
    teach_epochs: int = 0,
    teach_weight: float = TEACH_WEIGHT,
    seed: int = 0,
) -> AlignReport:
    """:func:`attention_scores` and, with ``ibm``, the IBM Model 2 baseline trained in the same run on the
    gold sentences plus ``ibm_pairs`` Tatoeba pairs (found through ``data_path`` or the run's config),
    both directions symmetrised by ``ibm_method`` (``argmax``: the run's direction only); with
    ``saliency``, the gradient saliency map's links read as the heads' (:func:`saliency_scores`).

    ``adapt_epochs ≥ 1``: every map is read from a copy of the model first trained that many epochs on
    the gold pairs' text (:func:`attnlab.analysis.align.adapt.adapt`, the data IBM Model 2 gets; the
    run is not changed), and ``as_trained`` keeps the original's best head and average of all.

    ``reverse``: a run of the other direction (French → English for an English → French ``tr``); every map
    of the one is symmetrised with every map of the other by ``ibm_method``, as IBM Model 2's two
    directions are (:func:`both_ways`; adapted too, with ``adapt_epochs``).

    ``teach_epochs ≥ 1``: then one head (the one picked on the trial split, else the best) of a copy is
    trained that many epochs toward the links of the model's own average of all heads, read as ``ex``
    says (:func:`teach_head`, Garg et al. 2019 unsupervised; no gold links), and the copy is read.
    ``seed`` fixes the adapting and teaching batches' order and dropout (one repeat is one other seed)."""
    extra: list[tuple[list[str], list[str]]] = []
    if reverse is not None:  # a run of the wrong direction, or no method to join two, fails first
        check_directions(tr, reverse)
        if ibm_method == "argmax":
            raise AlignError("a reverse run is symmetrised with the other: give it a method that joins two "
                             "directions (--ibm-links grow-diag-final-and, grow-diag, intersect or union)")
    for t in (tr,) if reverse is None else (tr, reverse):
        _gold_sides(t, gold, contract)  # a run the gold cannot measure fails first (one line)
    if ibm:  # a missing extra or corpus fails before the model work, not after it
        require_nltk()
        extra = tatoeba_words(ibm_pairs, _corpus_path(tr, data_path))
    adaptation = as_trained = None
    if adapt_epochs:
        before = attention_scores(tr, gold, contract, ex=ex)
        as_trained = [before.best(0)] + [s for s in (before.overall(0),) if s is not None]
        tr, adaptation = adapt(tr, _gold_sides(tr, gold, contract)[0], adapt_epochs, adapt_lr, seed=seed)
        if reverse is not None:
            reverse, _ = adapt(reverse, _gold_sides(reverse, gold, contract)[0], adapt_epochs, adapt_lr,
                                 seed=seed)
    teaching = untaught = None
    if teach_epochs:
        tr, teaching, untaught = teach_head(tr, gold, teach_epochs, teach_weight, contract, ex, adapt_lr, seed)
        if reverse is not None:  # the other direction's run gets its own taught head
            reverse, reverse_teaching, _ = teach_head(reverse, gold, teach_epochs, teach_weight, contract, ex,
                                                         adapt_lr, seed)
    report = attention_scores(tr, gold, contract, ex=ex, top_k=top_k)
    report.adaptation, report.as_trained = adaptation, as_trained
    report.teaching, report.untaught = teaching, untaught
    report.picked = picked_on_trial(tr, report, contract, ex)
    if reverse is not None:
        report.both = both_ways(tr, reverse, gold, ibm_method, contract, ex)
        if teaching is not None:  # the pair of taught heads: chosen (on the trial split) before teaching
            heads = [(t.layer, t.head) for t in (teaching, reverse_teaching)]
            if getattr(tr.src_tok, "lang", "en") == "fr":  # RUN read French → English: it is the reverse
                heads.reverse()
            report.both.taught = report.both.pair(*heads)
    if saliency:
        t0 = time.perf_counter()
        report.saliency = saliency_scores(tr, gold, contract, ex)
        report.saliency_seconds = time.perf_counter() - t0
    if ibm:
        en_first = getattr(tr.src_tok, "lang", "en") != "fr"
        base = ibm_baseline(gold.en, gold.fr, extra, en_first, ibm_iterations, ibm_method, ibm_null)
        base["counts"] = score_links(base.pop("links"), gold)
        report.ibm = base
    return report


def teaching_labels(tr: Translator, pairs: Sequence[tuple[Side, Side]], ex: Extraction) -> list[Tensor]:
    """Per pair, the links of ``tr``'s average of all heads (shift 0, read as ``ex`` says) as piece-level
    0/1 matrices (:func:`~attnlab.analysis.align.extract.piece_labels`): what :func:`teach_head` teaches."""
    labels: list[Tensor] = [None] * len(pairs)  # type: ignore[list-item]
    for i, maps in cross_maps(tr, pairs):
        src, tgt = pairs[i]
        words = word_matrix(stack_heads(maps)[-1:], src, tgt, 0)  # (1, Gt, Gs + 1): the average of all
        ((t2s, s2t),) = directional_links(words, src, tgt, ex)
        labels[i] = piece_labels(symmetrise(t2s, s2t, ex.method), src, tgt)
    return labels


def teach_head(tr: Translator, gold: GoldSet, epochs: int, weight: float = TEACH_WEIGHT, contract: bool = True,
               ex: Extraction = Extraction(), lr: float = ADAPT_LR,
               seed: int = 0) -> tuple[Translator, Teaching, list[HeadScore]]:
    """Garg et al. (2019), unsupervised: one cross-attention head of a copy of ``tr`` trained ``epochs`` epochs
    on the gold pairs' text toward the links of ``tr``'s own average of all heads (no gold links). The head
    is the one picked on the trial split (else the best on ``gold``). Returns the copy, what was done,
    and that head's and the average's scores before (shift 0)."""
    if aligned_kind(tr.model.config) != "cross":
        raise AlignError(f"model.kind={tr.model.config.kind} has no cross-attention head to teach; drop --teach")
    before = attention_scores(tr, gold, contract, ex=ex)
    chosen = picked_on_trial(tr, before, contract, ex) or before.best()
    head = next(s for s in before.scores if (s.layer, s.head, s.shift) == (chosen.layer, chosen.head, 0))
    pairs, _ = _gold_sides(tr, gold, contract)
    labels = teaching_labels(tr, pairs, ex)
    taught, done = teach(tr, pairs, labels, head.layer or 0, head.head or 0, epochs, weight, lr, seed=seed)
    return taught, done, [head] + [s for s in (before.overall(0),) if s is not None]


def read_one_way(tr: Translator, gold: GoldSet, contract: bool = True, shift: int = 0,
                 ex: Extraction = Extraction()):
    """Every map's one-way (target → source argmax) links of ``gold``, read from ``tr``
    (:func:`attnlab.analysis.align.both.one_way`)."""
    t = traits(tr.model.config)
    keys = head_keys(t.attention.get(aligned_kind(tr.model.config), 1), t.heads)
    pairs, en_first = _gold_sides(tr, gold, contract)
    run = str(tr.run_dir) if tr.run_dir is not None else "(in memory)"
    return one_way(run, keys, cross_maps(tr, pairs), pairs, en_first, shift, ex)


def both_ways(forward: Translator, reverse: Translator, gold: GoldSet, method: str, contract: bool = True,
              ex: Extraction = Extraction()) -> BothWays:
    """An English → French and a French → English run (either order) read over ``gold``: every map of
    one symmetrised by ``method`` with every map of the other (:mod:`attnlab.analysis.align.both`),
    and the pair of single heads best on the trial split (when the folder has one)."""
    t0 = time.perf_counter()
    forward, reverse = check_directions(forward, reverse)
    fwd, rev = (read_one_way(t, gold, contract, ex=ex) for t in (forward, reverse))
    report = BothWays(fwd, rev, method, score_pairs(fwd, rev, gold, method))
    if gold.split != "trial" and _has_split(Path(gold.folder), "trial"):
        trial = read_gold(gold.folder, "trial")
        report.picked = pick_on_trial(*(read_one_way(t, trial, contract, ex=ex) for t in (forward, reverse)),
                                      trial, method, report.pairs)
    report.seconds = time.perf_counter() - t0
    return report


def _has_split(folder: Path, split: str) -> bool:
    return all((folder / f"{split}.en-fr.{ext}").is_file() for ext in ("en", "fr", "naacl"))


def picked_on_trial(tr: Translator, report: AlignReport, contract: bool = True,
                    ex: Extraction = Extraction()) -> HeadScore | None:
    """The real head (and shift) with the lowest AER on the gold folder's ``trial`` split, as ``report``
    scores it: a head chosen without looking at the sentences it is scored on. ``None`` when ``report``
    is of the trial split itself, or the folder has no trial split (a malformed one is an error)."""
    folder = Path(report.gold.folder)
    if report.gold.split == "trial" or not _has_split(folder, "trial"):
        return None
    b = attention_scores(tr, read_gold(folder, "trial"), contract, ex=ex).best()
    return next(s for s in report.scores if (s.layer, s.head, s.shift) == (b.layer, b.head, b.shift))


def best_alignment_heads(report: AlignReport, top: int = 3) -> list[HeadScore]:
    """The ``top`` real heads (not averages) with the lowest AER, each at its better shift, best first.

    For ``attnlab heads`` to name alignment heads: ``best_alignment_heads(attention_scores(tr,
    read_gold(gold_dir(path))))``; a head's ``name`` and ``counts.aer`` say which and how well.
    """
    best: dict[tuple[int | None, int | None], HeadScore] = {}
    for s in report.scores:
        if s.head is None:
            continue
        key = (s.layer, s.head)
        if key not in best or s.counts.aer < best[key].counts.aer:
            best[key] = s
    return sorted(best.values(), key=lambda s: (s.counts.aer, s.layer or 0, s.head or 0))[:top]


def gold_for_heads(path: str | os.PathLike[str] | None = None) -> Path | None:
    """The gold folder ``attnlab heads`` scores alignment against: ``path`` or ``$ATTNLAB_GOLD_DIR`` as
    :func:`gold_dir` reads them, else None (no AER column). Not the ``$ATTNLAB_DATA_DIR`` fallback:
    ``heads`` runs on every corpus, and only an en–fr run asked for it should pay the force-decoding."""
    if path or os.environ.get(GOLD_ENV):
        return gold_dir(path)
    return None


def annotate_heads(heads_report, report: AlignReport) -> list[HeadScore]:
    """Write each head's AER at its better shift into ``heads_report`` (a
    :class:`~attnlab.analysis.heads.HeadsReport`): ``values["align_aer"]`` and ``values["align_shift"]``
    of the heads of the attention kind ``report`` read. Returns :func:`best_alignment_heads` (all heads)."""
    best = best_alignment_heads(report, top=report.shape[0] * report.shape[1])
    by = {(b.layer, b.head): b for b in best}
    for h in heads_report.heads:
        b = by.get((h.layer, h.head)) if h.kind == report.kind else None
        if b is not None:
            h.values["align_aer"] = b.counts.aer
            h.values["align_shift"] = float(b.shift)
    return best


def _n(k: int, noun: str) -> str:
    return f"{k} {noun}" + ("s" if k != 1 else "")


def _pct(x: float) -> str:
    return f"{100 * x:5.1f}" if math.isfinite(x) else "    -"


def _prf(c: AERCounts) -> str:
    return (
        f"AER {100 * c.aer:.1f} % (precision {100 * c.precision:.1f} %, recall {100 * c.recall:.1f} %)"
    )


def _adapted_note(r: AlignReport) -> list[str]:
    """The header line of a report read from an adapted copy (none otherwise)."""
    a = r.adaptation
    if a is None:
        return []
    return [
        f"adapted: every map below is a copy's, trained {_n(a.epochs, 'epoch')} ({a.updates:,} updates, "
        f"lr {a.lr:g}, seed {a.seed}, {a.seconds:.0f} s) on these {len(r.gold)} sentence pairs' text, no links: the data IBM "
        f"Model 2 gets. Its loss per piece went {a.nll_first:.2f} → {a.nll_last:.2f}; the run is unchanged."
    ]


def _both_lines(r: AlignReport) -> list[str]:
    """The report's lines for two runs read both ways (none without a reverse run)."""
    b = r.both
    if b is None:
        return []
    best, avg = b.best(), b.averages()
    lines = [
        f"both directions ({b.forward.direction} {b.forward.run} with {b.reverse.direction} {b.reverse.run}): each "
        f"map's one-way argmax, shift 0, the two runs' symmetrised by {b.method} as IBM Model 2's two directions "
        f"are ({b.seconds:.0f} s):",
        f"  average of all × average of all: {_prf(avg.counts)}",
        f"  best pair of single heads, {b.name(best)}: {_prf(best.counts)} (chosen on these sentences)",
    ]
    if b.picked is not None:
        lines.append(f"  pair picked beforehand on the trial split, {b.name(b.picked)}: {_prf(b.picked.counts)}")
    if b.taught is not None:
        lines.append(f"  the two taught heads, {b.name(b.taught)} (each picked on the trial split before teaching): "
                     f"{_prf(b.taught.counts)}")
    return lines


def format_report(r: AlignReport) -> str:
    """The table: AER, precision and recall (%) of every map at shift 0 and 1, the best head, the
    IBM Model 2 baseline and the published figures, with the domain note and OOV rates."""
    g = r.gold
    lines = [
        f"alignment of {r.run} ({r.kind} attention, {_n(r.shape[0], 'layer')} × {_n(r.shape[1], 'head')}, "
        f"{r.tokenizer} "
        f"tokens) against {g.folder} ({g.split}: {len(g)} sentences, {sum(map(len, g.sure)):,} sure, "
        f"{sum(map(len, g.possible)):,} sure+possible links)",
        f"note: {DOMAIN_NOTE}.",
        *_adapted_note(r),
        "OOV (model's words): "
        + "; ".join(
            f"{lang} {100 * o['unk']:.1f} % <unk>, {100 * o['not_in_vocab']:.1f} % not one vocabulary entry "
            f"({o['words']:,} words)"
            for lang, o in r.oov.items()
        ),
        f"links ({r.extraction.label}): "
        + (
            "each target word → its most-attended source word"
            if r.extraction.method == "argmax"
            else "target→source and source→target argmax over the same map, symmetrised"
        )
        + "; shift 1 reads the step where the word is the decoder's input (Chen et al. 2020)"
        + (
            "; French contractions re-joined for the model (de le → du, le ordre → l'ordre)"
            if r.contractions
            else ""
        ),
        "",
        f"{'map':<22}{'shift 0: AER  P     R':>24}{'shift 1: AER  P     R':>26}",
    ]
    by = {(s.layer, s.head, s.shift): s.counts for s in r.scores}
    for s in [x for x in r.scores if x.shift == 0]:
        c0, c1 = by[s.layer, s.head, 0], by[s.layer, s.head, 1]
        lines.append(
            f"{s.name:<22}"
            + "".join(f"{'':>7}{_pct(c.aer)} {_pct(c.precision)} {_pct(c.recall)}" for c in (c0, c1))
        )
    b = r.best()
    lines += ["", f"best head: {b.name}, shift {b.shift}: {_prf(b.counts)}"]
    if r.top_k is not None:
        lines.append(f"{r.top_k.name}, shift {r.top_k.shift}: {_prf(r.top_k.counts)}")
    lines.append(
        "(the best head and the best-k set are chosen on these same gold sentences: an upper bound for "
        "a head picked beforehand)"
    )
    if r.picked is not None:
        lines.append(f"picked beforehand on the trial split: {r.picked.name}, shift {r.picked.shift}: {_prf(r.picked.counts)}")
    if r.saliency is not None:
        lines.append(f"{SALIENCY_LABEL}, shift 0: {_prf(r.saliency)}; no head chosen, {r.saliency_seconds:.1f} s")
    if r.as_trained:
        lines.append(
            "as trained (before adapting), shift 0: " + "; ".join(f"{s.name} {_prf(s.counts)}" for s in r.as_trained)
        )
    if r.teaching is not None:
        t = r.teaching
        lines.append(
            f"taught: {t.name} trained {_n(t.epochs, 'epoch')} ({t.updates:,} updates, weight {t.weight:g}, seed {t.seed}, {t.seconds:.0f} s) "
            f"toward the links of the model's own average of all heads ({r.extraction.label}; Garg et al. 2019, "
            f"unsupervised: no gold links); its cross-entropy to them went {t.align_first:.2f} → {t.align_last:.2f}. "
            "Before: " + "; ".join(f"{s.name} {_prf(s.counts)}" for s in r.untaught or [])
        )
    lines += _both_lines(r)
    if r.ibm is not None:
        i = r.ibm
        how = (
            "one direction"
            if i["method"] == "argmax"
            else f"both directions, {i['method']}"
        ) + (", NULL allowed" if i["null"] else ", no NULL")
        lines.append(
            f"IBM Model 2 (NLTK {i['nltk']}, {i['iterations']} EM iterations after Model 1, {how}; "
            f"trained here on the {len(g)} gold pairs + {i['tatoeba_pairs']:,} Tatoeba pairs in "
            f"{i['seconds']:.1f} s): {_prf(i['counts'])}"
        )
    lines.append(
        "published on this test set: "
        + ", ".join(f"{n} {v:.1f} %" for n, v in PUBLISHED)
        + f" ({PUBLISHED_SOURCE})"
    )
    return "\n".join(lines)


def heatmap_figure(r: AlignReport):
    """A matplotlib Figure: AER (%) per layer × head (and each layer's head average), shift 0 and 1."""
    from attnlab.viz.figure import new_figure

    L, H = r.shape
    cols = H + 1 if H > 1 else H
    fig = new_figure((2.2 + 1.1 * cols * 2, 1.6 + 0.7 * L))
    axes = fig.subplots(1, 2, squeeze=False)[0]
    for ax, shift in zip(axes, (0, 1)):
        grid = 100 * r.grid(shift)[:, :cols]  # (L, cols)
        im = ax.imshow(grid.numpy(), cmap="viridis_r", vmin=0, vmax=100, aspect="auto")
        for li in range(L):
            for h in range(cols):
                v = float(grid[li, h])
                ax.text(
                    h,
                    li,
                    f"{v:.1f}",
                    ha="center",
                    va="center",
                    fontsize=8,
                    color="white" if v > 50 else "black",
                )
        ax.set_xticks(range(cols), [f"h{h + 1}" for h in range(H)] + (["avg"] if cols > H else []))
        ax.set_yticks(range(L), [f"layer {li + 1}" for li in range(L)])
        ax.set_title(f"shift {shift}" + (" (Chen et al. 2020)" if shift else " (predicting step)"))
    fig.colorbar(im, ax=axes, label="AER % (lower is better)")
    title = f"AER of {r.kind} attention vs WPT-2003 gold, {Path(r.run).name}"
    if r.ibm is not None:
        title += f"; IBM Model 2: {100 * r.ibm['counts'].aer:.1f} %"
    fig.suptitle(title + f"; fast_align {PUBLISHED[0][1]} %", fontsize=9)
    return fig
