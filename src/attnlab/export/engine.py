"""Inference with CTranslate2 behind attnlab's :class:`~attnlab.translator.Translator`.

:class:`CT2Translator` is a Translator whose search (greedy or beam) runs in CTranslate2 on the
exported model; preprocessing, batching order, detokenisation and the attention maps (one
teacher-forced pass of the exported PyTorch weights over the chosen output) stay attnlab's. So
``translate``, ``translate_full``, ``attention`` and therefore ``attnlab translate`` and the web
server work unchanged on it.

Decoding follows attnlab's rules (``decoding/hypothesis.py``): ``<pad> <bos> <unk>`` are never
emitted, each sentence stops at its own limit ``a·S + b`` (CTranslate2 decodes a batch up to the
longest row's limit; a longer output is cut where attnlab would have stopped, which is exact for
greedy search). Greedy float32 output equals attnlab's (tests/export/); int8 output (weights rounded by
``ct2.int8_weights``) nearly does, and is the same on every x86 processor. Two differences remain:
beam search ranks with CTranslate2's length penalty ``score / length^α`` rather than GNMT's, and a
score is CTranslate2's (log-probability after the banned tokens are removed).
``decode.no_repeat_ngram_size``, ``decode.max_tokens`` and sampling (``sampling_topk``, ``temperature``,
``seed``) are passed to CTranslate2's options of those meanings; its draws are its own, not attnlab's.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import torch

from attnlab import runs
from attnlab.config import AUTO_DECODE_ROWS, DecodeConfig
from attnlab.data.specials import BOS, EOS, PAD, SPECIALS
from attnlab.decoding import length_cap
from attnlab.decoding.hypothesis import Hypothesis, max_lengths
from attnlab.errors import AttnlabError, CheckpointError
from attnlab.export import ENGINES
from attnlab.export.ct2 import INT8_PAIR_BOUND, SOURCE_PREFIX, require_ctranslate2, vocabulary_files
from attnlab.i18n import _
from attnlab.models import traits
from attnlab.translator import Translator

_BANNED = [[SPECIALS[PAD]], [SPECIALS[BOS]]]  # <unk> is banned by disable_unk


def ct2_entry(folder: Path) -> dict[str, Any] | None:
    """The ``engines.ctranslate2`` entry of an exported folder's config.json (None without one).

    Its ``path`` must name a folder inside the export (:func:`attnlab.runs.member_path`): a path that
    leaves it is a :class:`~attnlab.errors.CheckpointError`, never a model read from elsewhere. That
    the manifest covers every file there is checked when the folder is read
    (:func:`attnlab.runs.export_engine_folder`)."""
    if not runs.is_export(folder):
        return None
    try:  # read before the folder is verified: size-capped, and any oddity means "no engine entry"
        spec = runs.read_json(folder / runs.EXPORT_CONFIG, runs.MAX_JSON_BYTES, "", "")
        entry = spec.get("engines", {})["ctranslate2"]
    except (CheckpointError, KeyError, TypeError, AttributeError):
        return None
    if not isinstance(entry, dict):
        return None
    runs.member_path(folder, entry.get("path"), folder / runs.EXPORT_CONFIG)
    return entry


class CT2Translator(Translator):
    """A :class:`Translator` whose search runs in CTranslate2 (see the module docstring)."""

    engine = "ctranslate2"

    @classmethod
    def from_export(cls, folder: str | Path, device: str = "auto", compute_type: str = "default",
                    threads: int = 0) -> CT2Translator:
        """Load an exported folder holding a CTranslate2 model (``attnlab export … --format ctranslate2``).

        ``compute_type``: ``default`` (as exported), or any CTranslate2 compute type (``int8``,
        ``float32``…); ``threads``: CTranslate2's intra-op threads (0: PyTorch's thread count).
        On the CPU, a compute type that makes CTranslate2 round the weights to integers itself
        (``int8…``, ``auto``, or ``int16``, which is int8 off Intel's MKL) on a float32 export is
        refused: that rounding saturates on x86 processors without VNNI (``ct2.int8_weights``);
        export with ``--quantization int8`` instead, whose weights CTranslate2 keeps as they are.
        Raises :class:`AttnlabError` when the folder has no such model or ctranslate2 is missing.
        """
        folder = Path(folder)
        entry = ct2_entry(folder)
        if entry is None:
            raise AttnlabError(_("{folder} holds no CTranslate2 model; make one with `attnlab export "
                                 "RUN {folder} --format ctranslate2`").format(folder=folder))
        ct2 = require_ctranslate2()
        tr = cls.from_run(folder, device=device)  # verifies every file, the CTranslate2 ones included
        where = "cuda" if tr.device.type == "cuda" else "cpu"
        if where == "cpu":
            _check_compute_type(compute_type, entry)
        one_sequence = _check_entry(folder, entry, tr)
        kind = ct2.Generator if one_sequence else ct2.Translator
        model_dir = runs.member_path(folder, entry["path"], folder / runs.EXPORT_CONFIG)  # inside, as verified
        _check_ct2_files(folder, model_dir, tr, one_sequence)
        try:
            tr.ct2 = kind(str(model_dir), device=where, compute_type=compute_type,
                          intra_threads=threads or torch.get_num_threads())
        except (RuntimeError, ValueError, OSError) as e:  # CTranslate2's own refusals (UnicodeDecodeError included)
            raise _engine_refused(folder, model_dir, compute_type, where, e) from None
        tr.ct2_info = {**entry, "compute_type": compute_type, "one_sequence": one_sequence}
        tr.ct2_module = ct2  # its set_random_seed: --sampling draws reproducibly
        tr._tgt_ids = {tr.tgt_tok.id_to_token(i): i for i in range(len(tr.tgt_tok))}
        return tr

    def _limits(self, src_seqs: list[list[int]], dcfg: DecodeConfig, max_len: int | None) -> list[int]:
        """Each sentence's decoding steps (``<eos>`` included), as :func:`~attnlab.translator.decode_many` sets them."""
        valid = torch.tensor([len(ids) + 1 for ids in src_seqs])  # + the source's <eos>
        base = max_lengths(valid, dcfg.max_len_a, dcfg.max_len_b).tolist()
        out = []
        for n, limit in zip(valid.tolist(), base):
            cap = length_cap(self.model, n)
            if max_len is not None:
                cap = max(1, min(cap, int(max_len)))
            out.append(min(limit, cap))
        return out

    def _search(self, src_seqs: list[list[int]], dcfg: DecodeConfig, beam_size: int, nbest: int = 1,
                max_len: int | None = None) -> list[list[Hypothesis]]:
        if not src_seqs:
            return []
        limits = self._limits(src_seqs, dcfg, max_len)
        beam = beam_size or dcfg.beam_size
        opts = dict(beam_size=beam, num_hypotheses=nbest, length_penalty=dcfg.length_penalty, disable_unk=True,
                    suppress_sequences=_BANNED, end_token=SPECIALS[EOS], return_end_token=True, return_scores=True,
                    max_batch_size=dcfg.max_tokens or dcfg.batch_size or max(1, AUTO_DECODE_ROWS // beam),
                    batch_type="tokens" if dcfg.max_tokens else "examples",
                    no_repeat_ngram_size=dcfg.no_repeat_ngram_size)
        if dcfg.sampling:  # CTranslate2's sampling: top-k 0 is the whole vocabulary, as decode.sampling_topk's
            self.ct2_module.set_random_seed(dcfg.seed)
            opts.update(sampling_topk=dcfg.sampling_topk, sampling_temperature=dcfg.temperature)
        tokens = [[self.src_tok.id_to_token(i) for i in ids] for ids in src_seqs]
        if self.ct2_info.get("one_sequence"):  # source <eos> <bos>, the source under its prefix
            prompts = [[SOURCE_PREFIX + t for t in ts] + [SOURCE_PREFIX + SPECIALS[EOS], SPECIALS[BOS]] for ts in tokens]
            results = self.ct2.generate_batch(prompts, max_length=max(limits), min_length=0,
                                              include_prompt_in_result=False, **opts)
            outputs = [r.sequences for r in results]
        else:
            results = self.ct2.translate_batch(tokens, max_decoding_length=max(limits), min_decoding_length=0,
                                               max_input_length=0, **opts)
            outputs = [r.hypotheses for r in results]
        return [[self._hypothesis(seq, score, limit) for seq, score in zip(seqs, r.scores)]
                for seqs, r, limit in zip(outputs, results, limits)]

    def _hypothesis(self, tokens: list[str], score: float, limit: int) -> Hypothesis:
        finished = bool(tokens) and tokens[-1] == SPECIALS[EOS]
        unknown = [t for t in tokens if t not in self._tgt_ids]
        if unknown:  # a source token (decoder-only) or one the vocabulary check let through: never a KeyError
            raise CheckpointError(_("CTranslate2 generated {token!r}, which is no target token of {folder}; its "
                                    "ctranslate2/ model was changed after export: {fix}").format(
                token=unknown[0], folder=self.run_dir, fix=_reexport(self.run_dir)))
        ids = [self._tgt_ids[t] for t in (tokens[:-1] if finished else tokens)]
        if len(ids) + finished > limit:  # decoded for a longer row's limit: stop where attnlab stops
            ids, finished = ids[:limit], False
        return Hypothesis(ids, float(score), float(score), finished)


def _reexport(folder) -> str:
    return _("export the run again (attnlab export RUN {folder} --format ctranslate2 --force)").format(folder=folder)


def _check_entry(folder: Path, entry: dict[str, Any], tr: Translator) -> bool:
    """Whether the CTranslate2 model reads one sequence (decoder-only: a ``Generator``) or two (a
    ``Translator``): the exported model's own kind says; an entry in config.json that says otherwise was
    edited, and is refused in one line rather than handed to CTranslate2."""
    one_sequence = traits(tr.cfg.model).one_sequence
    given = entry.get("one_sequence", False)
    if given is not one_sequence:
        raise CheckpointError(_("{path} says engines.ctranslate2.one_sequence = {given!r}, but the exported model is "
                                "model.kind={kind} (one_sequence = {want}); the file was edited: {fix}").format(
            path=folder / runs.EXPORT_CONFIG, given=given, kind=tr.cfg.model.kind, want=one_sequence,
            fix=_reexport(folder)))
    return one_sequence


def _check_ct2_files(folder: Path, model_dir: Path, tr: Translator, one_sequence: bool) -> None:
    """The JSON files of the CTranslate2 folder as :func:`attnlab.export.ct2.convert` writes them: ``config.json``
    an object, each vocabulary the export's tokens in their order. CTranslate2 reads them with no message
    that names a file (and a changed token would come back as a token attnlab cannot decode)."""
    config = model_dir / "config.json"
    damaged = _("{path} is damaged or was edited after export: {fix}")
    spec = runs.read_json(config, runs.MAX_JSON_BYTES, damaged.format(path=config, fix=_reexport(folder)),
                          damaged.format(path=config, fix=_reexport(folder)))
    if not isinstance(spec, dict):
        raise CheckpointError(damaged.format(path=config, fix=_reexport(folder)))
    for name, tokens in vocabulary_files(tr.src_tok, tr.tgt_tok, one_sequence).items():
        path = model_dir / name
        msg = damaged.format(path=path, fix=_reexport(folder))
        if runs.read_json(path, runs.MAX_JSON_BYTES, msg, msg) != tokens:
            raise CheckpointError(_("{path} does not hold the exported model's tokens in their order; it was edited "
                                    "after export: {fix}").format(path=path, fix=_reexport(folder)))


def _engine_refused(folder: Path, model_dir: Path, compute_type: str, where: str, err: Exception) -> AttnlabError:
    """One line for CTranslate2's refusal to load ``model_dir``: a compute type it does not know, a GPU it
    cannot use, or a damaged file: a value of the wrong type in ``config.json`` (CTranslate2's JSON reader
    says so), else ``model.bin`` (the JSON files passed :func:`_check_ct2_files`)."""
    detail = (str(err).strip().splitlines() or [type(err).__name__])[0][:200]
    if "compute type" in detail.lower():
        return AttnlabError(_("CTranslate2 refused compute type {compute_type!r} ({detail}); use default, float32 or "
                              "int8").format(compute_type=compute_type, detail=detail))
    if where == "cuda" and "cuda" in detail.lower():
        return AttnlabError(_("CTranslate2 cannot use the GPU here ({detail}); use --device cpu").format(detail=detail))
    name = "config.json" if "json" in detail.lower() else "model.bin"  # a value of the wrong type in config.json
    return CheckpointError(_("CTranslate2 cannot load {path} ({detail}); the file is damaged or was edited after "
                             "export: {fix}").format(path=model_dir / name, detail=detail, fix=_reexport(folder)))


def _check_compute_type(compute_type: str, entry: dict[str, Any]) -> None:
    """Refuse a CPU compute type for which CTranslate2 would round the weights itself (see ``from_export``)."""
    if entry.get("quantization") != "int8":
        if compute_type in ("auto", "int16") or compute_type.startswith("int8"):
            raise AttnlabError(_("compute type {compute_type} makes CTranslate2 round this float32 "
                                 "model's weights itself, which saturates on x86 processors without "
                                 "VNNI; export the run with --quantization int8 for int8").format(compute_type=compute_type))
    elif entry.get("int8_pair_bound") != INT8_PAIR_BOUND and compute_type != "float32":
        print("note: this int8 export was rounded by CTranslate2, which saturates on x86 processors without VNNI; "
              "export the run again with --quantization int8 for the same outputs on every processor", file=sys.stderr)


def load_translator(run: str | Path, which: str = "best", device: str = "auto", engine: str = "attnlab") -> Translator:
    """The translator of ``run`` (a run folder or an exported one) for ``engine``.

    ``attnlab``: :meth:`Translator.from_run`. ``ctranslate2``: :meth:`CT2Translator.from_export`
    (an exported folder with a CTranslate2 model; one-line errors otherwise). ``auto`` (the web
    server): CTranslate2 when the folder holds such a model and the engine is installed, else attnlab's
    own (with a note on stderr when only the engine is missing).
    """
    if engine not in (*ENGINES, "auto"):
        raise AttnlabError(_("--engine {engine} is unknown; choose one of: {choices}").format(engine=engine, choices=', '.join(ENGINES)))
    if engine == "ctranslate2" or (engine == "auto" and ct2_entry(Path(run)) is not None):
        if which not in ("best", "last"):
            raise AttnlabError(_("--engine ctranslate2 runs an exported folder's one model; drop "
                                 "--checkpoint {which}").format(which=which))
        if engine == "auto":
            try:
                require_ctranslate2()
            except AttnlabError as e:
                print(f"note: {run} holds a CTranslate2 model but {e}; serving it with attnlab's engine", file=sys.stderr)
                return Translator.from_run(run, which=which, device=device)
        return CT2Translator.from_export(run, device=device)
    return Translator.from_run(run, which=which, device=device)
