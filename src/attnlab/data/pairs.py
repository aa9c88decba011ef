"""One record per corpus and language pair: what every other module asks instead of testing a name.

A model kind is data (``models.traits``); so is a corpus. :data:`CORPORA` holds each named corpus (where its
file is found or fetched, its languages, each language's text rule, its probe and example sentences, how big
it is) and :func:`pair_of` turns a run's ``DataConfig`` into a :class:`Pair`: the source and the target, their
text rules (``data.preprocess``, :mod:`attnlab.data.languages`), the sentences the training probes, the web
page's example buttons and ``evaluate`` read, the notes' §1 table where it applies (English ↔ French only:
:data:`attnlab.notes.NOTES_ALIGNMENT`), sacreBLEU's tokenizer for the target and the unit of a sentence's
length. A corpus of your own (``data.dataset=file``) gets a record made from its languages.

Adding a named corpus is one :class:`Corpus` in :data:`CORPORA` (and its name in ``config.DATASETS``, which
the base layer validates against) plus a test that reads it (``tests/data/test_pairs.py``).

``pair_of`` also checks that ``data.direction``, ``data.src_lang`` and ``data.tgt_lang`` fit the corpus
(``config`` cannot: it sits below ``data/``), raising a one-line :class:`~attnlab.config.ConfigError`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field

from attnlab.config import NUMBERS_LANGS, UNSEGMENTED, ConfigError, DataConfig
from attnlab.data.download import FRA_ENG_HTTP_URL, FRA_ENG_SHA256, FRA_ENG_URL
from attnlab.data.numbers import numbers_reference
from attnlab.i18n import N_, _
from attnlab.notes import EXAMPLE, NOTES_ALIGNMENT, NUMBERS_EXAMPLES, REFERENCES, SENTENCES

__all__ = ["CORPORA", "GOLD_LANGS", "gold_files", "LANGUAGE_NAMES", "Corpus", "Pair", "corpus_named_by", "corpus_of", "language_name", "pair_of", "resolved", "UNIT_NAMES", "unit_name"]

#: Display names of the languages attnlab's records and examples use (translated where shown, ``_()``); any
#: other ISO 639-1 code is shown as it is.
LANGUAGE_NAMES: dict[str, str] = {
    "en": N_("English"), "fr": N_("French"), "zh": N_("Chinese"), "de": N_("German"), "es": N_("Spanish"),
    "ja": N_("Japanese"), "it": N_("Italian"), "pt": N_("Portuguese"), "ru": N_("Russian"), "ko": N_("Korean"),
    "nl": N_("Dutch"), "ar": N_("Arabic"),
}


#: The languages of the gold word alignments ``attnlab align`` scores against (the Hansards' English–French
#: sets of Mihalcea & Pedersen 2003, files ``<split>.en-fr.{en,fr,naacl}``), English first.
GOLD_LANGS: tuple[str, str] = ("en", "fr")


def gold_files(split: str) -> tuple[str, str, str]:
    """The gold split's three file names: its English side, its French side, its NAACL links."""
    a, b = GOLD_LANGS
    return f"{split}.{a}-{b}.{a}", f"{split}.{a}-{b}.{b}", f"{split}.{a}-{b}.naacl"


#: The units of a sentence's length (:meth:`Pair.length_unit`), as a learner reads them.
UNIT_NAMES: dict[str, str] = {"words": N_("words"), "characters": N_("characters")}


def unit_name(unit: str) -> str:
    """``words`` or ``characters`` (a :meth:`Pair.length_unit`) in the current language."""
    return _(UNIT_NAMES[unit]) if unit in UNIT_NAMES else unit


def language_name(code: str) -> str:
    """``code``'s name in the current language (``zh`` → Chinese / 中文), else the code itself."""
    return _(LANGUAGE_NAMES[code]) if code in LANGUAGE_NAMES else code


def default_rule(lang: str) -> str:
    """The text rule ``data.preprocess=auto`` gives a language no corpus names a rule for: characters for a
    script written without spaces (:data:`attnlab.config.UNSEGMENTED`), the metaspace rule otherwise (lossless,
    and what an export's tokenizer files do exactly; Moses' rules cannot be written into them)."""
    return "chars" if lang in UNSEGMENTED else "metaspace"


# The notes' four sentences, with D2L's French references (§22): fra-eng's examples both ways.
_NOTES_EN_FR: tuple[tuple[str, str], ...] = tuple((s, REFERENCES[s]) for s in SENTENCES)

# cmn-eng's examples: short sentences as Tatoeba's cmn.txt writes them (cased English, full-width Chinese
# punctuation), each a pair of the file, the first the notes' example in Mandarin.
_CMN_EN_ZH: tuple[tuple[str, str], ...] = (
    ("I'm home.", "我在家里。"), ("He ran.", "他跑了。"), ("I'm tired.", "我很累。"), ("Thank you.", "谢谢。"),
)


@dataclass(frozen=True)
class Corpus:
    """A named corpus: where its file is, which languages it holds and what a run of it reads.

    ``directions``: the (source, target) pairs a run may read it in, the default first. ``columns``: the
    languages of a line's first and second column (a run of the other direction swaps them). ``zip_name``,
    ``member``, ``sha256``, ``urls``: the archive looked for under ``--data``, ``$ATTNLAB_DATA_DIR`` and the
    cache, the file inside it, the zip's digest and where it may be downloaded from (none: found only).
    ``rules``: a language's text rule under ``data.preprocess=auto`` where the corpus names one (else
    :func:`default_rule`). ``examples``: per direction ``"src-tgt"``, ``(source, reference)`` pairs, the first
    sources being the training probes. ``pairs``: about how many lines it holds (budget sizing caps
    ``data.max_pairs`` by it); 0 = generated. ``sized``: ``train.size=auto`` picks a tier for it (the tiers
    were measured on sorted Tatoeba files).
    """

    name: str
    directions: tuple[tuple[str, str], ...]
    columns: tuple[str, str] = ("", "")
    zip_name: str = ""
    member: str = ""
    sha256: str = ""
    urls: tuple[str, ...] = ()
    rules: Mapping[str, str] = field(default_factory=dict)
    examples: Mapping[str, tuple[tuple[str, str], ...]] = field(default_factory=dict)
    probes: tuple[str, ...] = ()
    examples_of_task: tuple[str, ...] = ()
    generated: bool = False
    notes_table: bool = False
    pairs: int = 0
    sized: bool = False
    about: str = ""

    @property
    def file_name(self) -> str:
        """The member's own name (``fra.txt``): a plain file of it is read as the zip is."""
        return self.member.rsplit("/", 1)[-1]

    @property
    def candidates(self) -> tuple[str, ...]:
        """What is looked for inside a folder, in this order: the zip, the member's file, the member's path."""
        return (self.zip_name, self.file_name, self.member) if self.zip_name else ()


#: The corpora attnlab knows by name (``config.DATASETS`` lists the same names).
CORPORA: dict[str, Corpus] = {
    "fra-eng": Corpus(
        "fra-eng", (("en", "fr"), ("fr", "en")), ("en", "fr"), "fra-eng.zip", "fra-eng/fra.txt", FRA_ENG_SHA256,
        (FRA_ENG_URL, FRA_ENG_HTTP_URL),
        rules={"en": "d2l", "fr": "d2l"},  # the notes' own rules: §4's ids and §1's table rely on them
        examples={"en-fr": _NOTES_EN_FR, "fr-en": tuple((fr, en) for en, fr in _NOTES_EN_FR)},
        notes_table=True, pairs=167_130, sized=True,
        about="Tatoeba English-French (D2L's copy), CC-BY 2.0 FR"),
    "cmn-eng": Corpus(
        "cmn-eng", (("en", "zh"), ("zh", "en")), ("en", "zh"), "cmn-eng.zip", "cmn-eng/cmn.txt",
        "56bf990fa439f410ab0fbe97497ec235dd3a729d599eb0af2d3ee8683adf8ab4", (),
        # English as D2L reads it: lowercased, the vocabulary of a 29k-pair corpus is not split by case, and a
        # learner's `i'm home .` reads as in the notes; Chinese by characters (no segmenter is installed).
        rules={"en": "d2l", "zh": "chars"},
        examples={"en-zh": _CMN_EN_ZH, "zh-en": tuple((zh, en) for en, zh in _CMN_EN_ZH)},
        pairs=29_156, sized=True,
        about="Tatoeba English-Mandarin, CC-BY 2.0 FR (attribution in each line's third column)"),
    "numbers": Corpus(
        "numbers", tuple(("en", t) for t in NUMBERS_LANGS),
        rules={"en": "d2l", "fr": "d2l"},  # the task as it always was: D2L's rules where they apply
        # Its vocabulary holds no other words: the notes' sentences would be all <unk>.
        probes=("twenty-one", "three hundred and five", "one thousand two hundred and thirty-four"),
        examples_of_task=NUMBERS_EXAMPLES, generated=True),
}


def corpus_of(dataset: str) -> Corpus | None:
    """The record of the named corpus ``dataset`` (None for a corpus of your own)."""
    return CORPORA.get(dataset)


def corpus_named_by(file_name: str) -> str | None:
    """The named corpus whose archive or file is called ``file_name`` (``cmn-eng.zip`` or ``cmn.txt`` →
    ``cmn-eng``), else None: a ``--data`` file that says which corpus it is needs no ``--dataset``."""
    return next((c.name for c in CORPORA.values() if file_name and file_name in (c.zip_name, c.file_name)), None)


@dataclass(frozen=True)
class Pair:
    """What a run of one corpus in one direction reads: see the module docstring.

    ``probes``: source sentences the training probes translate (and the web page offers); ``examples``:
    ``(source, reference)`` pairs ``evaluate`` and the demo score; ``notes_table``: the notes' §1 table when
    the pair is English ↔ French (``notes_reversed``: read the other way, French sources), else None.
    """

    corpus: str
    src: str
    tgt: str
    src_rules: str
    tgt_rules: str
    probes: tuple[str, ...] = ()
    examples: tuple[tuple[str, str], ...] = ()
    notes_table: Mapping[str, Mapping[str, str]] | None = None
    notes_reversed: bool = False
    bleu_tokenize: str = "13a"
    generated: bool = False  # the numbers task: made by num2words, not read

    @property
    def langs(self) -> tuple[str, str]:
        return self.src, self.tgt

    @property
    def rules(self) -> tuple[str, str]:
        return self.src_rules, self.tgt_rules

    @property
    def direction(self) -> str:
        """``src-tgt``, what ``data.direction`` says of this pair (``en-zh``)."""
        return f"{self.src}-{self.tgt}"

    @property
    def notes_example(self) -> str | None:
        """The sentence the §1 verdict is read on (``i'm home .``, or its French for a French source), or None."""
        if self.notes_table is None:
            return None
        return EXAMPLE[1] if self.notes_reversed else EXAMPLE[0]

    def length_unit(self, side: str = "src") -> str:
        """How a sentence's length is counted on ``side`` (``src`` or ``tgt``): ``words`` or ``characters``."""
        rule = self.src_rules if side == "src" else self.tgt_rules
        return "characters" if rule == "chars" else "words"

    def title(self) -> str:
        """``English → Chinese`` in the current language."""
        return f"{language_name(self.src)} → {language_name(self.tgt)}"


def _bleu_tokenize(lang: str) -> str:
    """sacreBLEU's tokenizer for a target in ``lang``: ``zh`` for Chinese (sacreBLEU's own), ``char`` for the
    other scripts written without spaces (``ja-mecab`` needs MeCab, not installed), ``13a`` otherwise."""
    if lang == "zh":
        return "zh"
    return "char" if lang in UNSEGMENTED else "13a"


_OLD_DEFAULT = "en-fr"  # what attnlab wrote as data.direction of every run before the key described every pair


def _languages(cfg: DataConfig, corpus: Corpus | None) -> tuple[str, str]:
    """The source and target of ``cfg``, checked against ``corpus``'s directions (ConfigError on a misfit)."""
    given = tuple(cfg.direction.split("-")) if cfg.direction else ("", "")
    if corpus is None:
        src, tgt = cfg.src_lang, cfg.tgt_lang
        if cfg.direction and cfg.direction != f"{src}-{tgt}" and cfg.direction != _OLD_DEFAULT:
            raise ConfigError(_("data.direction={direction} does not fit data.src_lang={src} data.tgt_lang={tgt}; "
                                "drop data.direction or give data.direction={src}-{tgt}").format(
                direction=cfg.direction, src=src, tgt=tgt))
        return src, tgt
    if cfg.direction == _OLD_DEFAULT and (cfg.src_lang, cfg.tgt_lang) != ("", "") and len(corpus.directions) > 2:
        given = ("", "")  # an old run of a task with several targets: its data.tgt_lang says which
    for src, tgt in corpus.directions:
        if (given[0] in ("", src) and given[1] in ("", tgt) and cfg.src_lang in ("", src)
                and cfg.tgt_lang in ("", tgt)):
            return src, tgt
    choices = ", ".join(f"{s}-{t}" for s, t in corpus.directions)
    asked = " ".join(f"data.{key}={value}" for key, value in (("direction", cfg.direction), ("src_lang", cfg.src_lang),
                                                              ("tgt_lang", cfg.tgt_lang)) if value)
    raise ConfigError(_("{asked} does not fit data.dataset={dataset}, which reads {choices}; "
                        "choose one of those (data.direction, or data.src_lang and data.tgt_lang), or "
                        "data.dataset=file (--data FILE) for a corpus of your own").format(
        asked=asked, dataset=corpus.name, choices=choices))


def pair_of(cfg: DataConfig) -> Pair:
    """The record of ``cfg``'s corpus in ``cfg``'s direction (ConfigError when they do not fit)."""
    corpus = corpus_of(cfg.dataset)
    src, tgt = _languages(cfg, corpus)
    if cfg.preprocess != "auto":
        src_rules = tgt_rules = cfg.preprocess
    else:
        rules = corpus.rules if corpus is not None else {}
        src_rules, tgt_rules = (rules.get(lang) or default_rule(lang) for lang in (src, tgt))
    direction = f"{src}-{tgt}"
    if corpus is None:  # the notes' English sentences, without a reference, for an English source
        examples = tuple((s, "") for s in SENTENCES) if src == "en" else ()
    elif corpus.generated:
        examples = tuple((s, numbers_reference(s, tgt) or "") for s in corpus.examples_of_task)
    else:
        examples = corpus.examples.get(direction, ())
    generated = corpus is not None and corpus.generated
    # The notes' table is about English and French words (§1), so it holds for every run between those two
    # languages (the numbers task and a corpus of your own too: a sentence other than the notes' example simply
    # gets no verdict), read backwards for French sources; never for another pair.
    notes = next(c.columns for c in CORPORA.values() if c.notes_table)
    table = {src, tgt} == set(notes)
    probes = corpus.probes if corpus is not None and corpus.probes else tuple(s for s, _ in examples)
    return Pair(corpus=cfg.dataset, src=src, tgt=tgt, src_rules=src_rules, tgt_rules=tgt_rules,
                probes=probes, examples=examples,
                notes_table=NOTES_ALIGNMENT if table else None,
                notes_reversed=table and (src, tgt) != notes,
                bleu_tokenize=_bleu_tokenize(tgt), generated=generated)


def resolved(cfg: DataConfig) -> DataConfig:
    """``cfg`` with ``data.direction`` saying its pair (``en-zh``), as a run folder's config.toml records it."""
    pair = pair_of(cfg)
    return cfg if cfg.direction == pair.direction else dataclasses.replace(cfg, direction=pair.direction)
