"""One inference object shared by the CLI, the web server, notebooks and the training probes
(one loader and one Translator for the CLI, the web server and notebooks).

>>> tr = Translator.from_run("runs/transformer")          # doctest: +SKIP
>>> tr.translate("i'm home .")                              # doctest: +SKIP
'je suis chez moi.'
>>> tr.translate(["i'm home .", "go ."])                    # doctest: +SKIP
['je suis chez moi.', 'va !']
>>> best = tr.translate_full(["i'm home ."], beam_size=4, nbest=2)[0][0]  # doctest: +SKIP
>>> best.text, best.tokens, best.finished                   # doctest: +SKIP
('je suis chez moi.', ['je', 'suis', 'chez', 'moi', '.'], True)
>>> tr.attention("i'm home .").plot("cross")                # doctest: +SKIP
<Figure size … with 2 Axes>

Sentences are preprocessed as in training (notes §4; D2L 9.5 zh / 10.5 en), sorted by length into batches (padding is
wasted work), decoded greedily or with beam search through the model protocol, detokenised, and
returned in the caller's order. An empty line gives an empty translation.

Attention is captured in one place: :func:`teacher_forced` runs the model once over a chosen
output with the weights on, and :meth:`Translator.attention` labels and trims those maps for the
figures (``attnlab attention``), the web page and the training probes.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from attnlab import fast, runs
from attnlab.config import AUTO_DECODE_ROWS, Config, DecodeConfig
from attnlab.data.batching import Batch, collate
from attnlab.data.corpus import Prepared, check_same_corpus, for_run, prepare
from attnlab.data.numbers import source_text
from attnlab.data.vocab import BOS, EOS, PAD
from attnlab.decoding import fill
from attnlab.decoding.beam import beam_search
from attnlab.decoding.greedy import greedy_search
from attnlab.decoding.hypothesis import length_cap, max_lengths
from attnlab.decoding.sampling import Sampler
from attnlab.device import idle_sampler, pick_device
from attnlab.errors import ArgumentError, ArgumentTypeError, AttnlabError
from attnlab.i18n import _
from attnlab.maps import AttentionResult
from attnlab.models import ModelOutput, traits
from attnlab.threads import PerThread, ThreadTuner


def decode_many(
    model: nn.Module,
    src_seqs: list[list[int]],
    dcfg: DecodeConfig,
    device: torch.device,
    beam_size: int | None = None,
    nbest: int = 1,
    need_weights: bool = False,
    batch_size: int | None = None,
    max_len: int | None = None,
    threads: ThreadTuner | None = None,
    sampler: Sampler | None = None,
) -> list[list[Any]]:
    """Translate id sequences (no ``<eos>``); returns, per input and in input order, a list of hypotheses.

    Every ``decode.*`` setting of ``dcfg`` applies (config.py's :class:`~attnlab.config.DecodeConfig`):
    the beam (``beam_size`` overrides it), GNMT's length penalty, the length limit ``a·S + b``,
    ``no_repeat_ngram_size``, and sampling (``nbest`` draws a sentence, ranked by normalised score,
    reproducible from ``decode.seed``). Inputs are sorted by length so each batch holds similar lengths
    (less padding), then restored; a batch holds ``batch_size`` (else ``decode.batch_size``, else auto)
    sentences and, with ``decode.max_tokens``, at most that many padded source tokens (one sentence at least).
    ``max_len`` caps the decoding steps per sentence (the final ``<eos>`` included) below what
    ``decode.max_len_a/b`` and the model's position table allow (the web server's output limit).
    ``threads``: times each batch per padded source token, so the thread count follows the load
    (attnlab/threads.py); the batches are then taken in a spread order (:func:`spread_order`; the same
    batches, so the same results), since the cost per token drifts along the sorted order and a window of
    short sentences must not be judged against one of long ones. ``sampler``: the draws to continue (a
    caller decoding batch by batch), else a new one seeded from ``decode.seed``. The model decodes in eval
    mode; its previous mode is restored, also when decoding raises.
    """
    beam = beam_size or dcfg.beam_size
    if dcfg.sampling and sampler is None:
        sampler = Sampler.seeded(dcfg.seed, device, dcfg.sampling_topk, dcfg.temperature)
    elif not dcfg.sampling:
        sampler = None
    draws = nbest if sampler is not None else 1  # each sample is one more row
    bs = batch_size or dcfg.batch_size or max(1, AUTO_DECODE_ROWS // (beam * draws))  # auto: a fixed number of rows
    order = sorted(range(len(src_seqs)), key=lambda i: len(src_seqs[i]))
    results: list[list[Any]] = [[] for _ in src_seqs]
    was_training = model.training
    model.eval()
    try:
        with torch.inference_mode():
            batches = decode_batches(order, src_seqs, bs, dcfg.max_tokens)
            if threads is not None and sampler is None:  # sampling draws in batch order: kept as it is
                batches = [batches[k] for k in spread_order(len(batches))]
            for idx in batches:
                rows = [i for i in idx for _ in range(draws)]  # sampling: `draws` rows a sentence
                batch = collate([src_seqs[i] for i in rows], [[] for _ in rows], rows)
                src = batch.src.to(device)
                valid = batch.src_valid_lens.to(device)
                cap = length_cap(model, src.shape[1])
                if max_len is not None:
                    cap = max(1, min(cap, int(max_len)))
                limit = max_lengths(valid, dcfg.max_len_a, dcfg.max_len_b, cap=cap)
                t0 = threads.begin() if threads is not None else 0.0
                if beam == 1 and (nbest == 1 or sampler is not None):
                    flat = greedy_search(model, src, valid, limit, need_weights=need_weights,
                                         length_penalty=dcfg.length_penalty,
                                         no_repeat_ngram_size=dcfg.no_repeat_ngram_size, sampler=sampler)
                    hyps = [_ranked(flat[k : k + draws], nbest) for k in range(0, len(flat), draws)]
                else:
                    hyps = beam_search(
                        model, src, valid, beam, limit, dcfg.length_penalty, nbest=nbest, need_weights=need_weights,
                        no_repeat_ngram_size=dcfg.no_repeat_ngram_size,
                    )
                if threads is not None:
                    threads.end(t0, src.numel() * beam)
                for i, h in zip(idx, hyps):
                    results[i] = h
    finally:
        model.train(was_training)
    return results


def spread_order(m: int) -> list[int]:
    """``0 … m-1`` by a golden-ratio stride coprime with ``m``: any run of consecutive positions samples the
    whole range about evenly (a low-discrepancy order), so length-sorted batches lose their trend."""
    if m < 3:
        return list(range(m))
    stride = max(1, round(m * 0.618))
    while math.gcd(stride, m) != 1:
        stride += 1
    return [(k * stride) % m for k in range(m)]


def decode_batches(order: list[int], src_seqs: list[list[int]], rows: int, max_tokens: int) -> list[list[int]]:
    """``order`` (sorted by length) cut into batches of at most ``rows`` sentences and, when ``max_tokens``
    is set, at most that many padded source tokens (its sentences × its longest, ``<eos>`` included)."""
    out: list[list[int]] = []
    cur: list[int] = []
    for i in order:
        longest = len(src_seqs[i]) + 1  # sorted by length: the newest is the longest (+ the source's <eos>)
        if cur and (len(cur) >= rows or (max_tokens and (len(cur) + 1) * longest > max_tokens)):
            out.append(cur)
            cur = []
        cur.append(i)
    if cur:
        out.append(cur)
    return out


def _ranked(hyps: list[Any], nbest: int) -> list[Any]:
    """A sentence's drawn hypotheses (or its one greedy one), best normalised score first."""
    if len(hyps) == 1:
        return hyps
    return sorted(hyps, key=lambda h: -h.normalized_score)[:nbest]


def teacher_forced(
    model: nn.Module, batch: Batch, device: torch.device, need_weights: bool = True, compute_logits: bool = True
) -> ModelOutput:
    """One teacher-forced pass (notes §3): the model reads ``batch.src`` and every decoder input
    ``batch.tgt_in = <bos> y…`` at once, in eval mode (its mode is restored) and without gradients.

    Returns the :class:`~attnlab.models.ModelOutput`: ``logits (B, T, V)`` and, with
    ``need_weights``, every attention map ``kind → (B, layers, heads, queries, keys)``. This is how
    attention is captured after decoding — by :meth:`Translator.attention` for one sentence, by
    ``attnlab explain`` under its module hooks and by ``attnlab heads`` over reference batches.
    """
    was_training = model.training
    model.eval()
    try:
        with torch.inference_mode():
            return model(
                batch.src.to(device),
                batch.src_valid_lens.to(device),
                batch.tgt_in.to(device),
                need_weights=need_weights,
                compute_logits=compute_logits,
            )
    finally:
        model.train(was_training)


def token_labels(tok, ids: Sequence[int], eos: bool = True) -> list[str]:
    """The tokens of ``ids`` as the labels of a map's axis, with a final ``<eos>`` when ``eos``
    (a source always ends with it; a translation only when its decoding finished)."""
    return [tok.id_to_token(i) for i in ids] + ([tok.id_to_token(EOS)] if eos else [])


@dataclass
class Translation:
    """One hypothesis. ``score``: the sum of its tokens' log-probabilities (``<eos>`` included);
    ``normalized_score``: that sum under GNMT's length penalty, what an n-best list is ranked by
    (:mod:`attnlab.decoding.hypothesis`). ``truncated``: the source was longer than
    :attr:`Translator.max_src_tokens` and only its first ``max_src_tokens`` tokens were translated
    (the caller should say so)."""

    text: str
    tokens: list[str]
    score: float
    finished: bool
    truncated: bool = False
    normalized_score: float = 0.0

    def record(self, rank: int) -> dict[str, Any]:
        """This hypothesis as ``translate --format jsonl`` writes it and the web API sends it (fairseq's
        ``H-`` line, CTranslate2's ``return_scores``): its ``rank`` in the n-best list (from 1), ``score``
        (ranked by), ``log_prob``, ``length`` in tokens (``<eos>`` not counted), ``finished``, ``text``, ``tokens``."""
        return {"rank": rank, "score": self.normalized_score, "log_prob": self.score, "length": len(self.tokens),
                "finished": self.finished, "text": self.text, "tokens": self.tokens}


def restore_case(source: str, translation: str) -> str:
    """``translation`` with a capital first character when ``source`` starts with one (after spaces), or
    with a letter of a script that has no case (Chinese, Japanese): such a source says nothing about case,
    and a sentence starts with a capital, as the corpus's references do.

    D2L's preprocessing lowercases every sentence (§4), so a model trained on it writes lowercase
    only; ``"I'm home."`` would come back as ``"je suis chez moi."``. Only the first character is
    restored: the rest of the casing is not in the model's output to restore.

    >>> restore_case("I'm home.", "je suis chez moi.")
    'Je suis chez moi.'
    >>> restore_case("i'm home .", "je suis chez moi.")
    'je suis chez moi.'
    >>> restore_case("我在家。", "i'm home.")
    "I'm home."
    """
    first = source.lstrip()[:1]
    if first.isupper() or (first.isalpha() and not first.islower()):
        return translation[:1].upper() + translation[1:]
    return translation


class Translator:
    """A trained model with its tokenizers and config: :meth:`translate` and :meth:`attention`.

    ``max_src_tokens``: the longest source accepted (longer ones are cut and flagged); by default
    what the position table and the output bound leave, at most 512. ``restore_case`` (default
    True): a source that starts with a capital, or with a caseless script's letter, gets a translation
    that does (:func:`restore_case`).
    """

    restore_case: bool = True
    threads: PerThread | None = None  # see adapt_threads

    def __init__(
        self,
        model: nn.Module,
        src_tok,
        tgt_tok,
        cfg: Config,
        device: torch.device | None = None,
        run_dir: Path | None = None,
        checkpoint: Path | None = None,
        max_src_tokens: int | None = None,
    ) -> None:
        self.model = model.eval()
        self.src_tok, self.tgt_tok, self.cfg = src_tok, tgt_tok, cfg
        self.device = device or next(model.parameters()).device
        fast.apply(model, cfg.train.kernels, self.device)  # decoding's top-k: attnlab/fast/ or plain topk/argmax
        self.run_dir, self.checkpoint = run_dir, checkpoint
        self.max_src_tokens = _longest_source(cfg) if max_src_tokens is None else max_src_tokens
        self._max_src_given = max_src_tokens is not None
        self.trained_on: dict[str, Any] | None = None  # the corpus's name and sha256, as the run recorded them
        self.threads: PerThread | None = None  # set by adapt_threads: each decoding thread tunes its count

    def adapt_threads(self, most: int, say=None) -> None:
        """Let each thread that decodes with this translator pick its intra-op thread count, between 1 and
        ``most``, by timing its batches (attnlab/threads.py); ``say`` gets one line per change. On a GPU
        the CPU threads do not set the pace, and nothing changes."""
        if self.device.type == "cpu":
            self.threads = PerThread(lambda: ThreadTuner(most, window=6, warmup=1, recheck_every=200, unit="batch",
                                                         say=say, sense=idle_sampler))

    def set_decode(self, decode: DecodeConfig) -> None:
        """Decode with ``decode`` from now on (``translate RUN decode.beam_size=4``, ``--beam 4``): the
        run's ``decode`` section is only its default. The longest source accepted follows the new length
        limit unless it was given."""
        self.cfg = dataclasses.replace(self.cfg, decode=decode)
        if not self._max_src_given:
            self.max_src_tokens = _longest_source(self.cfg)

    @property
    def name(self) -> str:
        """``run-folder (kind)``, or the kind alone when they coincide: how figures and reports title a run."""
        kind = self.cfg.model.kind
        name = Path(self.run_dir).resolve().name if self.run_dir is not None else kind
        return name if name == kind else f"{name} ({kind})"

    @classmethod
    def from_run(cls, run_dir: str | Path, which: str = "best", device: str = "auto") -> Translator:
        """The model of a run folder at checkpoint ``which`` (``best``, ``last`` or ``step-N``).

        ``device``: ``auto`` (the default) takes the GPU when one is visible, else the CPU; or
        ``cpu``, ``cuda``, ``cuda:N``. Every file is verified before the model is built
        (:func:`attnlab.runs.load_model`). Raises :class:`AttnlabError` for an unreadable, corrupt or
        tampered run folder, a missing checkpoint or an unavailable device.
        """
        if not isinstance(run_dir, str | os.PathLike):
            raise ArgumentTypeError(_("the run must be a run folder (a str or a Path), not {given}; e.g. "
                                      "attnlab.load(\"runs/transformer\")").format(given=type(run_dir).__name__))
        for name, value in (("which", which), ("device", device)):
            if not isinstance(value, str):
                raise ArgumentTypeError(_("{name}={value} must be a str ({rule})").format(
                    name=name, value=shown(value),
                    rule=_("best, last or step-N") if name == "which" else _("auto, cpu, cuda or cuda:N")))
        run_dir = Path(run_dir)
        dev = pick_device(device)
        loaded = runs.load_model(run_dir, which)  # a run folder or an `attnlab export` folder
        tr = cls(loaded.model.to(dev), loaded.src_tok, loaded.tgt_tok, loaded.files.config, dev, run_dir,
                 loaded.checkpoint)
        tr.trained_on = runs.recorded_corpus(loaded.files.meta)
        return tr

    def prepare_corpus(self, data: str | Path | None = None) -> Prepared:
        """The run's corpus, split and encoded with the run's own tokenizers: what ``evaluate``, ``heads``,
        ``compare`` and ``selfcheck`` read.

        Located now, not where the run was trained (:func:`attnlab.data.corpus.for_run`): ``data``
        (``--data``), else ``$ATTNLAB_DATA_DIR``, else the cache, so a run folder can move. A corpus
        whose sha256 is not the one the run recorded is used with a warning on stderr. Raises
        :class:`~attnlab.data.corpus.CorpusError` when the corpus cannot be found or read.
        """
        prepared = prepare(for_run(self.cfg.data, data), tokenizers=(self.src_tok, self.tgt_tok))
        check_same_corpus(prepared, self.trained_on, self.run_dir or "this run")
        return prepared

    def __repr__(self) -> str:
        """``Translator(RUN, kind=…, en→fr, checkpoint=…, params=…, device=…)``: what a notebook cell shows."""
        engine = getattr(self, "engine", "attnlab")
        where = f"{self.run_dir}" if self.run_dir is not None else "(in memory)"
        ckpt = self.checkpoint is not None and self.run_dir is not None and Path(self.checkpoint) != Path(self.run_dir)
        return (f"{type(self).__name__}({where}, kind={self.cfg.model.kind}, {self.src_tok.lang}→{self.tgt_tok.lang}"
                + (f", checkpoint={Path(self.checkpoint).name}" if ckpt else "")
                + f", params={sum(p.numel() for p in self.model.parameters()):,}, device={self.device}"
                + (f", engine={engine}" if engine != "attnlab" else "") + ")")

    def _cased(self, source: str, translation: str) -> str:
        return restore_case(source, translation) if self.restore_case else translation

    def thread_tuner(self) -> ThreadTuner | None:
        """This thread's tuner when :meth:`adapt_threads` was called, for :func:`decode_many`; else None."""
        return self.threads.get() if self.threads is not None else None

    def _search(self, src_seqs: list[list[int]], dcfg: DecodeConfig, beam_size: int, nbest: int = 1,
                max_len: int | None = None) -> list[list[Any]]:
        """Decode id sequences with :func:`decode_many`: the seam another engine replaces (attnlab/export/)."""
        return decode_many(self.model, src_seqs, dcfg, self.device, beam_size=beam_size, nbest=nbest, max_len=max_len,
                           threads=self.thread_tuner())

    def encode_source(self, sentence: str) -> tuple[list[int], bool]:
        """The source ids (cut to :attr:`max_src_tokens`) and whether they were cut. The sentence is first
        spelled as the run's training sources are (:func:`attnlab.data.numbers.source_text`): on the
        numbers task ``twenty-one`` reads as the ``twenty one`` the model learned."""
        ids = self.src_tok.encode(source_text(self.cfg.data, sentence, self.src_tok))
        truncated = len(ids) > self.max_src_tokens
        return ids[: self.max_src_tokens], truncated

    def translate(
        self,
        sentences: str | Sequence[str],
        beam_size: int | None = None,
        length_penalty: float | None = None,
    ) -> str | list[str]:
        """The best translation of each sentence: a ``str`` for a ``str``, a ``list[str]`` for a list.

        Scores, n-best lists, tokens and the truncation flag are :meth:`translate_full`'s; this is
        its best text (same decoding, same batching).
        """
        if isinstance(sentences, str):
            return self.translate_full([sentences], beam_size=beam_size, length_penalty=length_penalty)[0][0].text
        return [t[0].text for t in self.translate_full(sentences, beam_size=beam_size, length_penalty=length_penalty)]

    def check_translates(self) -> None:
        """Raise :class:`AttnlabError` for a fill model (encoder-only): it cannot generate a translation."""
        if traits(self.cfg.model).task == "fill":
            raise AttnlabError(_("model.kind={kind} fills masked words and cannot translate (it reads the whole "
                                 "sentence at once, notes §28.2); use `attnlab fill RUN \"i'm [MASK] .\"`").format(
                kind=self.cfg.model.kind))

    def translate_full(
        self,
        sentences: str | Sequence[str],
        beam_size: int | None = None,
        nbest: int = 1,
        length_penalty: float | None = None,
        max_len: int | None = None,
        decode: DecodeConfig | None = None,
    ) -> list[Translation] | list[list[Translation]]:
        """Translate each sentence; returns ``nbest`` :class:`Translation` s per sentence, best first
        (one sentence given as a ``str``: its list alone). ``max_len``: at most this many output
        tokens (the final ``<eos>`` included), see :func:`decode_many`. ``decode``: these settings for this
        call alone (the web server's per-request ones) instead of the run's; ``beam_size`` None is its beam.

        Never raises on text: any ``str`` (emoji, CJK, control characters, lone surrogates) is
        preprocessed (unknown words become ``<unk>``); a sentence with no tokens left gets one empty
        translation; a source over :attr:`max_src_tokens` is cut and flagged ``truncated``.
        Raises :class:`AttnlabError` when ``sentences`` is neither a ``str`` nor a sequence of them, and
        :class:`~attnlab.errors.ArgumentError` (a ``ValueError``; ``ArgumentTypeError`` also a ``TypeError``) for a
        ``beam_size``, ``nbest`` or ``max_len`` that is not a whole number from 1 (a beam at most the target
        vocabulary's size) or a ``length_penalty`` that is not a finite number.
        """
        self.check_translates()
        if isinstance(sentences, str):
            return self.translate_full([sentences], beam_size, nbest, length_penalty, max_len, decode)[0]
        sentences = _sentence_list(sentences)
        dcfg = self.cfg.decode if decode is None else decode
        if length_penalty is not None:
            real = not isinstance(length_penalty, bool) and isinstance(length_penalty, numbers.Real)
            if not real or not math.isfinite(length_penalty):
                raise (ArgumentError if real else ArgumentTypeError)(_(
                    "length_penalty={value} must be a finite number (GNMT's alpha; 0 = none; None = the run's "
                    "decode.length_penalty)").format(value=shown(length_penalty)))
            dcfg = DecodeConfig(**{**dcfg.__dict__, "length_penalty": float(length_penalty)})
        beam = self.check_beam(beam_size, dcfg)
        nbest = whole_number("nbest", nbest, 1, _("1 = the best translation alone"))
        nbest = nbest if dcfg.sampling else min(nbest, beam)  # sampling: nbest draws a sentence
        max_len = self._max_len(max_len)
        out: list[list[Translation]] = [[] for _ in sentences]
        encoded = [self.encode_source(s) for s in sentences]
        todo = [(i, ids) for i, (ids, _) in enumerate(encoded) if ids]
        hyps = self._search([ids for _, ids in todo], dcfg, beam, nbest, max_len=max_len)
        for (i, _ids), hs in zip(todo, hyps):
            out[i] = self._translations(sentences[i], hs, encoded[i][1])
        for i, _s in enumerate(sentences):
            if not out[i]:
                out[i] = [Translation("", [], 0.0, True)]
        return out

    def _translations(self, sentence: str, hyps: list[Any], truncated: bool) -> list[Translation]:
        """The search's hypotheses of ``sentence`` as :class:`Translation` s, in their order."""
        return [Translation(self._cased(sentence, self.tgt_tok.decode(h.tokens)),
                            token_labels(self.tgt_tok, h.tokens, eos=False), float(h.score), bool(h.finished),
                            truncated, float(h.normalized_score)) for h in hyps]

    def attention(
        self, sentence: str, beam_size: int = 1, max_len: int | None = None, extra_pad: int = 0
    ) -> AttentionResult:
        """Translate one sentence and return every attention map along the way (:meth:`attention_full`'s maps)."""
        return self.attention_full(sentence, beam_size, max_len=max_len, extra_pad=extra_pad)[0]

    def attention_full(
        self, sentence: str, beam_size: int | None = 1, nbest: int = 1, max_len: int | None = None,
        extra_pad: int = 0, decode: DecodeConfig | None = None,
    ) -> tuple[AttentionResult, list[Translation]]:
        """Translate one sentence and return every attention map along the way, with the ``nbest``
        hypotheses of the same search (:meth:`translate_full`'s, best first; the maps are the best's; none
        for a fill model). ``decode``: these settings for this call alone, as in :meth:`translate_full`.

        The maps are recomputed by one teacher-forced pass (:func:`teacher_forced`) over the chosen
        output, so each kind comes with all its layers and heads, shaped (layers, heads, queries, keys)
        and cut to the labels of the result: one query per generated token (a translation that
        stopped without ``<eos>`` drops the decoder input that predicted nothing kept).
        ``max_len``: at most this many output tokens (the final ``<eos>`` included), see :func:`decode_many`.
        ``extra_pad``: ``<pad>`` positions added after the source's ``<eos>`` (its valid length is
        unchanged), as in a batch beside a longer sentence; ``src_tokens`` then ends with their labels.
        Raises :class:`~attnlab.errors.ArgumentError` for a ``sentence`` that is not a ``str``, an ``extra_pad``
        outside 0 … :attr:`max_src_tokens`, and a ``beam_size`` or ``max_len`` as :meth:`translate_full` does.
        """
        if not isinstance(sentence, str):
            raise ArgumentTypeError(_("attention() takes one sentence (a str), not {given}; e.g. "
                                      "tr.attention(\"i'm home .\")").format(given=type(sentence).__name__))
        extra_pad = whole_number("extra_pad", extra_pad, 0, _("<pad> positions added after the source's <eos>"))
        if extra_pad > self.max_src_tokens:
            raise ArgumentError(_("extra_pad={value} is more than the longest source this model reads ({most} "
                                  "tokens); a batch pads a sentence at most to that: use extra_pad={most} or less")
                                .format(value=extra_pad, most=self.max_src_tokens))
        if traits(self.cfg.model).task == "fill":
            return self._fill_attention(sentence, extra_pad), []
        dcfg = self.cfg.decode if decode is None else decode
        beam_size, max_len = self.check_beam(beam_size, dcfg), self._max_len(max_len)
        nbest = whole_number("nbest", nbest, 1, _("1 = the best translation alone"))
        nbest = nbest if dcfg.sampling else min(nbest, beam_size)  # sampling: nbest draws a sentence
        ids, truncated = self.encode_source(sentence)
        hyps = self._search([ids], dcfg, beam_size, nbest, max_len=max_len)[0] if ids else []
        hyp = hyps[0] if hyps else None
        out_ids = list(hyp.tokens) if hyp is not None else []
        finished = bool(hyp.finished) if hyp is not None else True
        batch = collate([ids], [out_ids], [0])
        pads = torch.full((1, extra_pad), PAD, dtype=batch.src.dtype)
        batch = dataclasses.replace(batch, src=torch.cat([batch.src, pads], dim=1))  # (1, S + extra_pad)
        out = teacher_forced(self.model, batch, self.device)
        maps = {k: v[0].float().cpu() for k, v in (out.attention or {}).items()}  # (layers, heads, Q, K)
        src_tokens = token_labels(self.src_tok, ids) + [self.src_tok.id_to_token(PAD)] * extra_pad
        tgt_tokens = token_labels(self.tgt_tok, out_ids, eos=finished)
        tgt_inputs = token_labels(self.tgt_tok, [BOS, *out_ids], eos=False)[: len(tgt_tokens)]
        result = AttentionResult(
            sentence,
            self._cased(sentence, self.tgt_tok.decode(out_ids)),
            src_tokens,
            tgt_tokens,
            tgt_inputs,
            _keep_output_queries(maps, len(src_tokens), len(tgt_tokens)),
            truncated,
        )
        return result, (self._translations(sentence, hyps, truncated) or [Translation("", [], 0.0, True)])

    def check_beam(self, beam_size: Any, decode: DecodeConfig | None = None) -> int:
        """``beam_size`` checked (a whole number from 1 to the target vocabulary's size; a beam holds at most one
        hypothesis per token), or for None ``decode``'s beam (default: the run's ``decode.beam_size``).
        Raises :class:`ArgumentError`."""
        if beam_size is None:
            beam_size = (self.cfg.decode if decode is None else decode).beam_size
        beam = whole_number("beam_size", beam_size, 1, _("1 = greedy; None = the run's decode.beam_size"))
        vocab = len(self.tgt_tok)
        if beam > vocab:
            raise ArgumentError(_("beam_size={beam} is larger than the target vocabulary ({vocab} tokens); a beam holds "
                                  "at most one hypothesis per token: use beam_size={vocab} or less").format(
                beam=beam, vocab=vocab))
        return beam

    @staticmethod
    def _max_len(max_len: Any) -> int | None:
        if max_len is None:
            return None
        return whole_number("max_len", max_len, 1, _("the most output tokens, the final <eos> included; None = what "
                                                     "decode.max_len_a and max_len_b allow"))

    def _fill_attention(self, sentence: str, extra_pad: int) -> AttentionResult:
        """A fill model's maps (it generates nothing): its self-attention over the sentence as written,
        ``[MASK]`` included, with ``translation`` the sentence with its masks filled (:mod:`attnlab.decoding.fill`)."""
        ids = fill.encode_masked(self.src_tok, sentence, self.max_src_tokens, require_mask=False)
        batch = collate([ids], [[]], [0])
        pads = torch.full((1, extra_pad), PAD, dtype=batch.src.dtype)
        batch = dataclasses.replace(batch, src=torch.cat([batch.src, pads], dim=1))  # (1, S + extra_pad)
        out = teacher_forced(self.model, batch, self.device)
        maps = {k: v[0].float().cpu() for k, v in out.attention.items()}  # enc_self (layers, heads, S, S)
        filled = fill.rank_fillers(self.src_tok, ids, out.logits[0], top_k=1)[1]
        src_tokens = fill.mask_labels(self.src_tok, ids) + token_labels(self.src_tok, [], eos=True)
        return AttentionResult(sentence, filled, src_tokens + [self.src_tok.id_to_token(PAD)] * extra_pad, [], [], maps)


def shown(value: Any, most: int = 40) -> str:
    """``repr(value)`` for a message, cut to about ``most`` characters (a megabyte string is not echoed back)."""
    text = repr(value)
    return text if len(text) <= most else _("{start}… ({n} characters)").format(start=text[:most], n=len(text))


def whole_number(name: str, value: Any, least: int, rule: str) -> int:
    """``value`` as an ``int`` when it is a whole number (not a bool) of at least ``least``. Raises
    :class:`ArgumentTypeError` or :class:`ArgumentError` naming the argument ``name``, the value and ``rule``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ArgumentTypeError(_("{name}={value} must be a whole number ({rule})").format(
            name=name, value=shown(value), rule=rule))
    if value < least:
        raise ArgumentError(_("{name}={value} must be at least {least} ({rule})").format(
            name=name, value=int(value), least=least, rule=rule))
    return int(value)


def _sentence_list(sentences: Any) -> list[str]:
    """``sentences`` as a list of ``str``; anything else is an :class:`AttnlabError` saying what to pass."""
    try:
        items = list(sentences)
    except TypeError:
        items = None
    if items is None or not all(isinstance(s, str) for s in items):
        raise AttnlabError(
            _("translate() takes a sentence (str) or a list of sentences, not {given}; "
              "e.g. tr.translate(\"i'm home .\") or tr.translate([\"go .\", \"i'm home .\"])").format(
                given=type(sentences).__name__ if items is None else
                _("{kind} holding {kinds}").format(kind=type(sentences).__name__,
                                                   kinds=", ".join(sorted({type(s).__name__ for s in items}))))
        )
    return items


def _longest_source(cfg: Config) -> int:
    """Longest source the position table and the output bound leave room for (at most 512)."""
    t = traits(cfg.model)
    cap = t.max_target_len(int(cfg.model.max_positions))
    a, b = cfg.decode.max_len_a, cfg.decode.max_len_b
    # One sequence (decoder-only): source, <eos>, <bos> and an output of up to a·S + b tokens share the table.
    longest = int((cap - b - 2) / (1 + a)) if t.one_sequence else cap - 2
    return max(1, min(512, longest))


def _keep_output_queries(maps: dict[str, Tensor], n_src: int, n_out: int) -> dict[str, Tensor]:
    """Cut the decoder's queries (and the decoder-only keys) to the ``n_out`` that produced an output.

    The teacher-forced pass reads ``<bos> y1 … yn``; when decoding stopped without ``<eos>`` the last
    input predicted nothing that was kept, so ``n_out = n`` and its query goes. A no-op otherwise.
    """
    cut = dict(maps)
    if "cross" in cut:
        cut["cross"] = cut["cross"][..., :n_out, :]  # (L, H, T, S)
    if "dec_self" in cut:
        cut["dec_self"] = cut["dec_self"][..., :n_out, :n_out]  # (L, H, T, T)
    if "self" in cut:
        m = n_src + n_out  # decoder-only: source (with its pads), then the decoder inputs
        cut["self"] = cut["self"][..., :m, :m]  # (L, H, S + T, S + T)
    return cut
