"""``POST /api/translate``: a translation and its attention maps, built in a model thread; or, for a
list of sentences, their translations alone (:func:`translate_batch`), decoded together.

The route checks what it can before admission (the run has the asked kind, the decode settings:
:func:`~attnlab.web.schemas.request_decode`), then hands a :class:`TranslateJob` to :func:`translate_job`
in a model thread; that thread runs the model (or reuses the cached result of the same sentence and
settings), builds the JSON with :func:`~attnlab.web.payloads.attention_payload` and gzips it, so a large
answer never holds up the event loop. An n-best list (``nbest`` > 1) comes as ``hypotheses``, each
scored as ``translate --format jsonl`` writes it (:meth:`~attnlab.translator.Translation.record`). The
text a learner reads (the verdict's ``summary``, ``warnings``) is in the request's language
(``lang``, else :class:`~attnlab.web.guards.RequestLanguage`'s choice).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from pydantic import BaseModel

from attnlab.config import DecodeConfig
from attnlab.data.pairs import pair_of
from attnlab.data.text import preprocess
from attnlab.errors import AttnlabError
from attnlab.evaluation.alignment import check_result
from attnlab.i18n import _, speaking
from attnlab.maps import continues_word, display_labels
from attnlab.web.deadline import DeadlinePassed, check
from attnlab.web.payloads import SelectionError, attention_payload
from attnlab.web.registry import LoadedRun, ResultCache
from attnlab.web.responses import (
    GZIP_MIN,
    accepts_gzip,
    busy,
    encoded,
    error,
    gzip_bytes,
    json_bytes,
    too_slow,
)
from attnlab.web.schemas import (
    MAP_OPTIONS,
    SERVER_DECODE_KEYS,
    DecodeRefused,
    ErrorBody,
    check_lang,
    request_decode,
)
from attnlab.web.state import Busy, ServerState

#: ``?lang=zh``: the answer's language, as the body's ``lang`` (which wins when both are given)
LangQuery = Annotated[str | None, Query(max_length=16, description="the answer's language, as the body's lang")]


def router(state: ServerState, body_model: type[BaseModel]) -> APIRouter:
    """The translate route over ``state``'s runs; ``body_model``: :func:`~attnlab.web.schemas.make_request_model`."""
    api = APIRouter()
    limits = state.limits

    async def translate(req, request: Request, lang: LangQuery = None):
        name = req.run or state.default_run
        r = state.runs[name]
        if (refused := _kind_refused(req, name, r)) is not None:
            return refused
        dcfg = _settings(req, lang, r)
        if not isinstance(dcfg, DecodeConfig):
            return dcfg  # the 422 naming the setting
        with speaking(req.lang or lang):  # the answer's language: `lang`, else the middleware's choice
            if isinstance(req.text, list):
                return await _batch(req, r, dcfg, request)
            return await _single(req, r, dcfg, request)

    async def _single(req, r: LoadedRun, dcfg: DecodeConfig, request: Request):
        job = TranslateJob(r, req.text, dcfg, req.max_len or limits.max_output_tokens, req.kind, req.layer, req.head,
                           req.encoding, req.overview, limits.max_response_bytes, accepts_gzip(request), req.pad)
        try:
            body, gz = await state.run_admitted(translate_job, job, state.results, time.perf_counter())
        except Busy:
            return busy(limits)
        except (TimeoutError, DeadlinePassed):  # the model stops between output tokens at the deadline
            return too_slow(limits)
        except SelectionError as e:
            return error(422, ["body", e.field_name], str(e), "value_error")
        except AttnlabError as e:
            return error(422, ["body", "text"], str(e), "value_error")
        return encoded(body, gz)

    async def _batch(req, r: LoadedRun, dcfg: DecodeConfig, request: Request):
        maps = [f for f, default in MAP_OPTIONS.items() if getattr(req, f) != default]
        if maps:
            return error(422, ["body", maps[0]], f"{maps[0]} shapes attention maps, which come with one sentence; "
                         "send text as a string for its maps, or leave the option out", "value_error")
        job = BatchJob(r, tuple(req.text), dcfg, req.max_len or limits.max_output_tokens, accepts_gzip(request))
        try:
            body, gz = await state.run_admitted(translate_batch, job, time.perf_counter())
        except Busy:
            return busy(limits)
        except (TimeoutError, DeadlinePassed):
            return too_slow(limits)
        except AttnlabError as e:
            return error(422, ["body", "text"], str(e), "value_error")
        return encoded(body, gz)

    # The body model is built at run time (it carries the limits), so annotate after the fact:
    # with `from __future__ import annotations` a local name would not resolve.
    translate.__annotations__["req"] = body_model
    translate.__annotations__["request"] = Request
    translate.__annotations__["lang"] = LangQuery
    api.post(
        "/api/translate",
        summary="translate and return every attention map",
        responses={
            413: {"model": ErrorBody},
            422: {"model": ErrorBody},
            429: {"model": ErrorBody},
            504: {"model": ErrorBody},
        },
    )(translate)
    return api


def _kind_refused(req: Any, name: str, r: LoadedRun) -> Any:
    """The 422 for an attention kind the run does not have, else None."""
    kinds = r.info.get("kinds")
    if req.kind is None or not isinstance(kinds, list) or req.kind in kinds:
        return None
    have = ", ".join(kinds) if kinds else "none (a fixed context)"
    return error(422, ["body", "kind"], f"run {name!r} has no {req.kind} attention; its kinds: {have}", "value_error")


def _settings(req: Any, lang: str | None, r: LoadedRun) -> DecodeConfig | Any:
    """The request's decode settings over the server's (:func:`~attnlab.web.schemas.request_decode`), or the
    422 that names what was refused (a setting, or a ``lang`` query parameter with no catalogue)."""
    try:
        check_lang(lang)
    except ValueError as e:
        return error(422, ["query", "lang"], str(e), "value_error")
    try:
        return request_decode(r.translator.cfg.decode, req)
    except DecodeRefused as e:
        return error(422, ["body", e.key] if e.key else ["body"], str(e), "value_error")


@dataclass(frozen=True)
class TranslateJob:
    """One admitted translation request, as the worker thread needs it."""

    run: LoadedRun
    text: str
    decode: DecodeConfig  # the server's settings with the request's (schemas.request_decode)
    max_len: int
    kind: str | None
    layer: int | None
    head: int | str | None
    encoding: str
    overview: bool
    max_bytes: int
    gzip: bool
    pad: int = 0  # <pad> positions after the source's <eos> (Translator.attention's extra_pad)


def translate_job(job: TranslateJob, cache: ResultCache, t0: float) -> tuple[bytes, bool]:
    """Runs in a model thread, inside the admission slot: the translation with its attention (or
    the cached one of the same request), the JSON encoding and the gzip compression, so that
    neither a large payload nor its compression ever holds up the event loop (and /health).
    Returns the body and whether it is gzipped."""
    r, dcfg = job.run, job.decode
    key = (r.name, job.text, dcfg, job.max_len, job.pad)
    found = cache.get(key)
    if found is None:
        found = r.translator.attention_full(job.text, beam_size=dcfg.beam_size, nbest=dcfg.nbest, max_len=job.max_len,
                                            extra_pad=job.pad, decode=dcfg)
        cache.put(key, found)
    res, hyps = found
    check()  # past the deadline nobody reads the answer: stop before encoding it
    attention = attention_payload(
        res,
        kind=job.kind,
        layer=job.layer,
        head=job.head,
        encoding=job.encoding,
        overview=job.overview,
        max_bytes=job.max_bytes,
    )
    tgt = list(res.tgt_tokens)
    warnings = [f"{k}: {a['omitted']}" for k, a in attention.items() if a.get("omitted")]
    finished = bool(tgt) and tgt[-1] == "<eos>"
    if not finished and len(tgt) >= job.max_len:
        warnings.append(output_limit_warning(job.max_len))
    payload = {
        "run": r.name,
        "model_kind": r.info.get("model_kind"),
        "beam_size": dcfg.beam_size,
        "max_len": job.max_len,
        "decode": decode_settings(dcfg),
        "source": res.source,
        "translation": res.translation,
        "src_tokens": list(res.src_tokens),
        "tgt_tokens": tgt,
        "tgt_inputs": list(res.tgt_inputs),
        "finished": finished,
        "truncated": bool(res.truncated),
        "unknown_words": unknown_words(r.translator, job.text, res.src_tokens),
        "pad": job.pad,
        **display_fields(res),
        "kinds": list(res.attention),
        "attention": attention,
        "alignment": alignment_verdict(r.translator, res),
        "warnings": warnings,
        **nbest_list(dcfg, hyps),
    }
    payload["elapsed_ms"] = round(1000 * (time.perf_counter() - t0), 1)
    body = json_bytes(payload)
    if job.gzip and len(body) >= GZIP_MIN:
        check()
        return gzip_bytes(body), True
    return body, False


def decode_settings(dcfg: DecodeConfig) -> dict[str, Any]:
    """The decode settings a request may give, as this answer used them (the server's where it gave none)."""
    return {k: v for k, v in dataclasses.asdict(dcfg).items() if k not in SERVER_DECODE_KEYS}


def nbest_list(dcfg: DecodeConfig, hyps: Sequence[Any]) -> dict[str, Any]:
    """``{"hypotheses": […]}`` for an n-best request (``nbest`` > 1), each as ``translate --nbest K --format
    jsonl`` writes it (:meth:`~attnlab.translator.Translation.record`), best first; nothing for ``nbest`` 1."""
    return {"hypotheses": [h.record(rank) for rank, h in enumerate(hyps, 1)]} if dcfg.nbest > 1 else {}


def output_limit_warning(max_len: int) -> str:
    return _("the translation stopped at the output limit of {max_len} tokens before <eos>").format(max_len=max_len)


def alignment_verdict(tr: Any, res: Any) -> dict[str, Any] | None:
    """The one alignment verdict (:func:`attnlab.evaluation.alignment.check_result`, what ``explain``,
    ``doctor``, ``attention`` and the demo say) on the notes' example; None for any other sentence."""
    check = check_result(res, pair_of(tr.cfg.data))
    return check.to_json() if check is not None and check.table else None  # can't judge is a verdict too
@dataclass(frozen=True)
class BatchJob:
    """An admitted list of sentences: one admission slot, one decoding of them all, batched."""

    run: LoadedRun
    texts: tuple[str, ...]
    decode: DecodeConfig
    max_len: int
    gzip: bool


def translate_batch(job: BatchJob, t0: float) -> tuple[bytes, bool]:
    """Runs in a model thread: every sentence of the list decoded together (``Translator.translate_full``,
    the batching of the CLI), answered as ``translations``, one per sentence, in order, each with the
    flags a single answer carries (``finished``, ``truncated``, ``unknown_words``, ``warnings``)."""
    tr, dcfg = job.run.translator, job.decode
    results = tr.translate_full(list(job.texts), beam_size=dcfg.beam_size, nbest=dcfg.nbest, max_len=job.max_len,
                                decode=dcfg)
    check()
    items = []
    for text, hyps in zip(job.texts, results):
        best = hyps[0]
        ids, truncated = tr.encode_source(text)
        warnings = []
        if not best.finished and len(best.tokens) >= job.max_len:
            warnings.append(output_limit_warning(job.max_len))
        items.append({"source": text, "translation": best.text, "finished": bool(best.finished),
                      "truncated": bool(truncated),
                      "unknown_words": unknown_words(tr, text, [tr.src_tok.id_to_token(i) for i in ids]),
                      "warnings": warnings, **nbest_list(dcfg, hyps)})
    payload = {"run": job.run.name, "model_kind": job.run.info.get("model_kind"), "beam_size": dcfg.beam_size,
               "max_len": job.max_len, "decode": decode_settings(dcfg), "translations": items,
               "elapsed_ms": round(1000 * (time.perf_counter() - t0), 1)}
    body = json_bytes(payload)
    if job.gzip and len(body) >= GZIP_MIN:
        return gzip_bytes(body), True
    return body, False


def display_fields(res: Any) -> dict[str, Any]:
    """What the page shows instead of raw tokens: ``token_labels`` maps each token of the response
    whose label differs to that label (BPE's ``▁je`` → ``je``, a piece continuing a word ``son`` →
    ``·son``; empty for a word vocabulary), and ``tgt_continues[i]`` says whether ``tgt_tokens[i]``
    joins the word before it (no space) when the translation is built up token by token."""
    labels = display_labels((res.src_tokens, res.tgt_tokens, res.tgt_inputs))
    return {"token_labels": labels, "tgt_continues": continues_word(res.tgt_tokens)}


def unknown_words(tr: Any, text: str, src_tokens: Sequence[str]) -> list[str]:
    """The words of ``text`` the model saw as ``<unk>``, as typed (preprocessed), never ``"<unk>"`` itself.

    A word vocabulary maps a whole word to ``<unk>``: the word is listed. A subword (BPE) vocabulary
    maps only the characters it never saw in training (§4): the word is listed with those characters,
    ``"日本 (日, 本)"``, found by tokenizing each word and each of its characters alone (``<unk>`` comes
    from a character outside the vocabulary, whatever its neighbours). ``src_tokens`` is what the model
    was given (a word vocabulary's tokens follow the words one for one; the cut-off rest is not listed).
    """
    tok = getattr(tr, "src_tok", None)
    # cut as the model's tokenizer cuts (characters for Chinese, Moses' words ...), so words and tokens pair up
    words = (tok.preprocess(text) if tok is not None else preprocess(text)).split()
    unk = "<unk>"
    if hasattr(tok, "token_to_idx"):  # word vocabulary: one token per word
        shown = [t for t in src_tokens if t != "<eos>"]
        return [w for w, t in zip(words, shown) if t == unk]
    if tok is None or unk not in src_tokens:
        return []
    out = []
    for word in dict.fromkeys(words):  # each word once, in order
        if unk in tok.tokens(word):
            chars = [c for c in dict.fromkeys(word) if unk in tok.tokens(c)]
            out.append(f"{word} ({', '.join(chars)})" if chars and chars != [word] else word)
    return out
