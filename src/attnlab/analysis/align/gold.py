"""The gold word alignments ``attnlab align`` is scored against, and its sentences as a run reads them
(notes §25).

The gold set is WPT-2003's English–French Hansards test set (447 sentences, sure and possible links,
Mihalcea & Pedersen 2003), read from a folder the user names (``--gold DIR``, ``$ATTNLAB_GOLD_DIR``,
or ``$ATTNLAB_DATA_DIR/hansards-enfr``); nothing of it is ever copied into the repository. Its folder
may also hold a ``trial`` split, on which a head is picked before it is scored on ``test``.

The gold writes whitespace-tokenised words; a run reads word-level or BPE pieces of preprocessed text.
:func:`gold_sides` turns each gold pair into the run's two :class:`~attnlab.analysis.align.extract.Side`\\ s
(pieces grouped by the gold word they came from), re-joining the French contractions the gold undoes
(:func:`contract_french`), and refuses a run the English–French gold cannot measure.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from attnlab.analysis.align.aer import Link
from attnlab.analysis.align.extract import AlignError, Side
from attnlab.data.pairs import GOLD_LANGS, gold_files, pair_of
from attnlab.data.text import preprocess
from attnlab.data.vocab import UNK
from attnlab.files import read_input
from attnlab.i18n import _

if TYPE_CHECKING:
    from attnlab.translator import Translator

__all__ = [
    "GOLD_ENV",
    "GOLD_FOLDER",
    "LANG_NAMES",
    "NUMBERS_UNKNOWN_MAX",
    "GoldSet",
    "contract_french",
    "gold_dir",
    "gold_for_heads",
    "gold_sides",
    "has_split",
    "map_side",
    "oov_rates",
    "read_gold",
    "run_name",
    "sides_oov",
]

GOLD_ENV = "ATTNLAB_GOLD_DIR"
GOLD_FOLDER = "hansards-enfr"  # under $ATTNLAB_DATA_DIR
LANG_NAMES = {"en": "English", "fr": "French"}
#: A run trained on the numbers task is refused when more than this share of the gold's words, on either
#: side, is not one entry of its vocabulary: its "languages" are number words, the Hansards' sentences are
#: nearly all unknown to it, so its AER would measure nothing. A numbers gold (number words, as the tests
#: write) it knows is measured as any other.
NUMBERS_UNKNOWN_MAX = 0.5


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
            raise AlignError(_("--gold {p} is not a folder; name the folder holding "
                               "test.en-fr.en/.fr/.naacl").format(p=p))
        return p
    env = os.environ.get(GOLD_ENV)
    if env:
        p = Path(env).expanduser()
        if not p.is_dir():
            raise AlignError(_("${GOLD_ENV}={p} is not a folder; point it at the WPT-2003 en-fr gold "
                               "folder").format(GOLD_ENV=GOLD_ENV, p=p))
        return p
    data = os.environ.get("ATTNLAB_DATA_DIR")
    if data and (Path(data).expanduser() / GOLD_FOLDER).is_dir():
        return Path(data).expanduser() / GOLD_FOLDER
    raise AlignError(
        _("no gold alignment folder: pass --gold DIR or set ${GOLD_ENV} (the WPT-2003 en-fr set: "
          "test.en-fr.en, test.en-fr.fr, test.en-fr.naacl), or put it at "
          "$ATTNLAB_DATA_DIR/{GOLD_FOLDER}").format(GOLD_ENV=GOLD_ENV, GOLD_FOLDER=GOLD_FOLDER)
    )


def gold_for_heads(path: str | os.PathLike[str] | None = None) -> Path | None:
    """The gold folder ``attnlab heads`` scores alignment against: ``path`` or ``$ATTNLAB_GOLD_DIR`` as
    :func:`gold_dir` reads them, else None (no AER column). Not the ``$ATTNLAB_DATA_DIR`` fallback:
    ``heads`` runs on every corpus, and only an en–fr run asked for it should pay the force-decoding."""
    if path or os.environ.get(GOLD_ENV):
        return gold_dir(path)
    return None


def has_split(folder: Path, split: str) -> bool:
    """Whether ``folder`` holds the three files of ``split`` (``trial``, ``test``)."""
    return all((folder / name).is_file() for name in gold_files(split))


def _read_lines(path: Path) -> list[list[str]]:
    if not path.is_file():
        raise AlignError(
            _("{path} is missing; the gold folder needs {name} (one tokenised sentence a line)").format(path=path, name=path.name)
        )
    text = _read_capped(path).decode("utf-8", errors="replace")
    return [line.split() for line in text.splitlines()]


def _read_capped(path: Path) -> bytes:
    """A gold file's bytes, under the cap of every input (:func:`attnlab.files.read_input`)."""
    try:
        return read_input(path, fix=_("the WPT-2003 files are under 1 MB: check --gold names that set"), error=AlignError)
    except OSError as e:
        raise AlignError(_("{path} cannot be read: {why}").format(path=path, why=e.strerror or e)) from None


def read_gold(folder: str | os.PathLike[str], split: str = "test") -> GoldSet:
    """Read ``{split}.en-fr.en``, ``.fr`` (one whitespace-tokenised sentence a line) and ``.naacl``
    (``SENTENCE EN FR [S|P]``, 1-based, ``S`` when the label is absent; position 0, NULL, is skipped).

    Raises :class:`AlignError` naming the file and line for a malformed or out-of-range link.
    """
    folder = Path(folder)
    stem = f"{split}.en-fr"
    en, fr = _read_lines(folder / f"{stem}.en"), _read_lines(folder / f"{stem}.fr")
    if len(en) != len(fr):
        raise AlignError(_("{value}.en has {n_en} lines but .fr has {n_fr}; they must pair up").format(value=folder / stem, n_en=len(en), n_fr=len(fr)))
    if not en or not all(en) or not all(fr):
        n = next((i for i, (e, f) in enumerate(zip(en, fr), 1) if not e or not f), 0)
        where = f"line {n} is empty" if n else "it is empty"
        raise AlignError(_("{value}.en/.fr: {where}; each line must hold one tokenised sentence").format(value=folder / stem, where=where))
    naacl = folder / f"{stem}.naacl"
    if not naacl.is_file():
        raise AlignError(_("{naacl} is missing; the gold folder needs the links file {name}").format(naacl=naacl, name=naacl.name))
    sure, possible = _read_links(naacl, en, fr)
    return GoldSet(folder, split, en, fr, sure, possible)


def _read_links(naacl: Path, en: list[list[str]], fr: list[list[str]]
                ) -> tuple[list[frozenset[Link]], list[frozenset[Link]]]:
    """The sure and the possible links of each sentence, from the ``.naacl`` file (see :func:`read_gold`)."""
    sure: list[set[Link]] = [set() for _ in en]
    possible: list[set[Link]] = [set() for _ in en]
    for n, line in enumerate(_read_capped(naacl).decode("utf-8", errors="replace").splitlines(), 1):
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
                _("{naacl}:{n}: {value!r} is not `SENTENCE EN FR S|P` for {n_en} sentences").format(naacl=naacl, n=n, value=line.strip(), n_en=len(en))
            )
        if e == 0 or f == 0:
            continue  # a NULL link: not a word pair
        if not (1 <= e <= len(en[s - 1]) and 1 <= f <= len(fr[s - 1])):
            raise AlignError(
                _("{naacl}:{n}: word {e} or {f} is outside sentence {s} ({n_en} English, {n_fr} French "
                  "words)").format(naacl=naacl, n=n, e=e, f=f, s=s, n_en=len(en[s - 1]), n_fr=len(fr[s - 1]))
            )
        link = (e - 1, f - 1)
        possible[s - 1].add(link)  # S ⊆ P (Och & Ney 2003)
        if label == "S":
            sure[s - 1].add(link)
    return [frozenset(x) for x in sure], [frozenset(x) for x in possible]


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
    for g, (word, _span) in enumerate(grouped):
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


def run_name(tr: Translator) -> str:
    """The run's folder name (not its path: the web server's errors quote it too)."""
    return tr.run_dir.name if tr.run_dir is not None else "the model"


def gold_sides(tr: Translator, gold: GoldSet, contract: bool = True) -> tuple[list[tuple[Side, Side]], bool]:
    """Each gold pair as ``tr`` reads it, ``(source side, target side)`` in the run's direction, and whether
    the run's source is the gold's English side. ``contract``: French contractions re-joined.

    Raises :class:`AlignError` (one line) for a run the English–French gold cannot measure: one whose
    languages are not English and French (either direction: a French → English run is read the other
    way round), or a numbers-task run that does not know the gold's words (:data:`NUMBERS_UNKNOWN_MAX`)."""
    langs = (getattr(tr.src_tok, "lang", GOLD_LANGS[0]), getattr(tr.tgt_tok, "lang", GOLD_LANGS[1]))
    if langs not in (GOLD_LANGS, GOLD_LANGS[::-1]):
        raise AlignError(_("{run_name} translates {langs}→{langs2}; the gold is English–French word "
                           "alignments: align a run of data.direction=en-fr or fr-en").format(run_name=run_name(tr), langs=langs[0], langs2=langs[1]))
    en_first = langs == GOLD_LANGS
    pairs = []
    for en, fr in zip(gold.en, gold.fr):
        e, f = (
            map_side(tr.src_tok if en_first else tr.tgt_tok, en),
            map_side(tr.tgt_tok if en_first else tr.src_tok, fr, contract),
        )
        pairs.append((e, f) if en_first else (f, e))
    if pair_of(tr.cfg.data).generated:
        for lang, rates in sides_oov(tr, pairs, en_first).items():
            if rates["not_in_vocab"] > NUMBERS_UNKNOWN_MAX:
                raise AlignError(
                    _("{run_name} was trained on the numbers task (number words, not English–French "
                      "sentences): {share} of the gold's {language} words are not in its "
                      "vocabulary, so its AER would measure nothing; align a run trained on "
                      "data.dataset=fra-eng").format(run_name=run_name(tr), share=f"{100 * rates['not_in_vocab']:.0f} %", language=LANG_NAMES[lang]))
    return pairs, en_first


def sides_oov(tr: Translator, pairs: Sequence[tuple[Side, Side]], en_first: bool) -> dict[str, dict[str, float]]:
    """:func:`oov_rates` of the gold's English and French sides for ``tr``'s tokenizers."""
    en_sides = [p[0] if en_first else p[1] for p in pairs]
    fr_sides = [p[1] if en_first else p[0] for p in pairs]
    return {"en": oov_rates(tr.src_tok if en_first else tr.tgt_tok, en_sides),
            "fr": oov_rates(tr.tgt_tok if en_first else tr.src_tok, fr_sides)}
