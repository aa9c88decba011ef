"""What a tool outside attnlab needs to use an exported folder as attnlab does.

- :func:`tokenizer_json`: the Hugging Face ``tokenizers`` file of one side, complete on its own:
  the normalizer and model of :func:`attnlab.data.tokenizer_files.to_hf` (raw text to attnlab's ids),
  plus a post-processor that appends ``<eos>`` (``$A <eos>``: the source's end, as attnlab's batching
  appends it), a decoder that detokenizes as attnlab does for the side's language, and the four
  specials marked special (so ``decode`` leaves them out). ``Tokenizer.from_file(…).encode("I'm home.")``
  gives attnlab's ids followed by ``<eos>``, and ``decode`` of them gives ``i'm home.``. A special typed
  in the text is that special wherever it stands between non-word characters (attnlab takes it only
  as a whole word); ``encode(…, add_special_tokens=False)`` gives the ids without ``<eos>``.
  A side whose text rule is not D2L's (:mod:`attnlab.data.languages`) gets its own: the metaspace rule as the
  very ``tokenizers`` pieces attnlab cuts and joins with (``languages.metaspace_pieces``); the chars rule exactly
  (cleaning without lowercasing, a pre-tokenizer that isolates each character of an unspaced script and each
  run of other letters or digits, a decoder that spaces only between two such runs); Moses' approximately
  (punctuation split off), with :func:`text_rule_record` in ``config.json`` and ``decode.json`` saying how to
  apply sacremoses for the exact cut.
- :func:`decode_settings`: ``ctranslate2/decode.json``, the settings attnlab passes to CTranslate2
  (``export/engine.py``) that the CTranslate2 model folder cannot hold: the tokens never generated,
  ``<unk>`` suppressed, each sentence's length limit ``min(floor(a·(S + 1) + b), cap)``, the longest
  source, the beam and length penalty, the detokenizer and the casing rule (:func:`attnlab.translator.restore_case`).
  The README's plain-``ctranslate2`` example reads it; ``tests/export/`` runs that example.
"""

from __future__ import annotations

from typing import Any

from tokenizers import AddedToken, Regex, decoders, pre_tokenizers, processors

from attnlab.data.languages import UNSPACED, metaspace_pieces
from attnlab.data.specials import BOS, EOS, PAD, SPECIALS, UNK
from attnlab.data.text import PUNCTUATION, detokenize
from attnlab.data.tokenizer_files import clean_normalizer, to_hf

DECODE_SETTINGS = "decode.json"
_METASPACE = "▁"


def attached_marks(lang: str) -> list[str]:
    """The marks attnlab's detokenizer joins to the word before them for ``lang`` (none for a
    language it has no rule for)."""
    try:
        return sorted(m for m in PUNCTUATION if detokenize(["a", m], lang) == "a" + m)
    except ValueError:
        return []


# The chars rule's tokens (attnlab.data.languages): one character of an unspaced script, a run of other letters
# or digits, or one other mark; and the letters or digits between which its detokenizer keeps a space.
_CHAR_TOKEN = rf"[{UNSPACED}]|[^\W{UNSPACED}]+|[^\w\s{UNSPACED}]"
_RUN = rf"[^\W{UNSPACED}]"


def _decoder(kind: str, lang: str, rule: str = "d2l"):
    """Tokens → text as attnlab detokenizes: words joined by spaces (a word vocabulary) or pieces joined at
    ``▁`` (BPE), then each attached mark pulled onto the word before it; under the chars rule, a space is
    kept only between two runs of letters or digits (``我有iPhone 12手机。``)."""
    # WordPiece with a prefix no word token can start with (a space) joins every token with one space.
    if rule == "metaspace":  # the rule's own decoder: its tokens (or BPE pieces) keep every space as ▁
        return metaspace_pieces()[2]
    join = (decoders.Metaspace(replacement=_METASPACE, prepend_scheme="always") if kind == "bpe"
            else decoders.WordPiece(prefix=" ", cleanup=False))
    if rule == "chars":
        # Fuse first: a Replace sees one token at a time, and the space depends on the token before it.
        return decoders.Sequence([join, decoders.Fuse(), decoders.Replace(Regex(rf"(?<!{_RUN}) | (?!{_RUN})"), "")])
    return decoders.Sequence([join, *(decoders.Replace(" " + m, m) for m in attached_marks(lang))])


def text_rule_record(tok) -> dict[str, Any]:
    """How the side's text is cut (``config.json``'s tokenizer entry, ``decode.json``): the rule, the language,
    and whether the tokenizer file applies it exactly. D2L's, the metaspace and the chars rules are spelled as HF
    normalizers, pre-tokenizers and decoders; Moses' (sacremoses) has no HF equivalent, so the file approximates it and
    the record says how to apply it exactly."""
    rule = getattr(tok, "text", "d2l")
    record: dict[str, Any] = {"rule": rule, "lang": tok.lang, "exact_in_tokenizer_file": rule != "moses"}
    if rule == "moses":
        pre = ("Metaspace(replacement='▁', prepend_scheme='always')" if tok.kind == "bpe"
               else "WhitespaceSplit()")
        record["exact"] = (f"sacremoses.MosesTokenizer(lang={tok.lang!r}).tokenize(text, escape=False), joined by "
                           f"spaces, then this tokenizer with pre_tokenizer = {pre}; the file alone splits "
                           "punctuation from words (Punctuation, Whitespace), which differs from Moses on "
                           "apostrophes, hyphens and abbreviations")
        record["detokenize"] = f"sacremoses.MosesDetokenizer(lang={tok.lang!r}).detokenize(tokens)"
    return record


def _text_rule(hf, tok) -> None:
    """Give ``hf`` the side's own text rule when it is not D2L's (which :func:`to_hf` already spells): the
    metaspace rule's own pieces, the chars rule as a pre-tokenizer that isolates each of its tokens, Moses' approximated (:func:`text_rule_record`)."""
    rule = getattr(tok, "text", "d2l")
    if rule == "d2l":
        return
    if rule == "metaspace":  # the rule itself: no BPE marker to add, its words carry their ▁
        hf.normalizer, hf.pre_tokenizer, _ = metaspace_pieces()
        return
    hf.normalizer = clean_normalizer()
    if rule == "chars":
        cut = [pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Split(Regex(_CHAR_TOKEN), behavior="isolated")]
    else:
        cut = [pre_tokenizers.Punctuation(behavior="isolated"), pre_tokenizers.WhitespaceSplit()]
    if tok.kind == "bpe":  # then the word-start marker, as the BPE tokenizer marks each word
        cut.append(pre_tokenizers.Metaspace(replacement=_METASPACE, prepend_scheme="always"))
    hf.pre_tokenizer = pre_tokenizers.Sequence(cut)


def tokenizer_json(tok) -> str:
    """The standalone HF tokenizer file of ``tok`` (see the module docstring), as pretty JSON."""
    hf = to_hf(tok)
    _text_rule(hf, tok)
    marked = {t.content for t in hf.get_added_tokens_decoder().values() if t.special}
    hf.add_special_tokens([AddedToken(s, special=True, normalized=True, single_word=True)
                           for s in SPECIALS if s not in marked])
    eos = SPECIALS[EOS]
    hf.post_processor = processors.TemplateProcessing(single=f"$A:0 {eos}:0", pair=f"$A:0 {eos}:0 $B:1 {eos}:1",
                                                      special_tokens=[(eos, EOS)])
    hf.decoder = _decoder(tok.kind, tok.lang, getattr(tok, "text", "d2l"))
    return hf.to_str(pretty=True)


def decode_settings(model, cfg, src_tok, tgt_tok, tokenizer_files: dict[str, str], max_src_tokens: int,
                    one_sequence: bool, source_prefix: str) -> dict[str, Any]:
    """``ctranslate2/decode.json`` (see the module docstring); ``tokenizer_files``: side → file name in
    the export, written relative to the CTranslate2 folder."""
    from attnlab.decoding import length_cap

    d = cfg.decode
    settings: dict[str, Any] = {
        "source_tokenizer": f"../{tokenizer_files['src']}",
        "target_tokenizer": f"../{tokenizer_files['tgt']}",
        "max_source_tokens": max_src_tokens,  # attnlab cuts a longer source (and says so)
        "max_length": {"a": d.max_len_a, "b": d.max_len_b, "cap": length_cap(model, 0),
                       "rule": "min(floor(a * (S + 1) + b), cap) decoding steps, <eos> included; S = source tokens"},
        "options": {"beam_size": d.beam_size, "length_penalty": d.length_penalty, "disable_unk": True,
                    "suppress_sequences": [[SPECIALS[PAD]], [SPECIALS[BOS]]], "end_token": SPECIALS[EOS],
                    "min_decoding_length": 0, "max_input_length": 0},
        "unk": {"token": SPECIALS[UNK], "generated": False,
                "source": "a word the vocabulary lacks is encoded as <unk> by the tokenizer"},
        "detokenizer": {"kind": "the target tokenizer's decoder", "lang": tgt_tok.lang,
                        "attach": attached_marks(tgt_tok.lang)},
        "case": "when the source's first letter is a capital, so is the translation's",
        "text_rules": {"source": text_rule_record(src_tok), "target": text_rule_record(tgt_tok)},
    }
    if one_sequence:  # a decoder-only model: one vocabulary, the source under a prefix, then <eos> <bos>
        settings["generator_prompt"] = {"source_prefix": source_prefix,
                                        "end": [source_prefix + SPECIALS[EOS], SPECIALS[BOS]]}
        settings["max_length"].update(cap=int(cfg.model.max_positions),  # one table: the source uses part of it
                                      rule="min(floor(a * (S + 1) + b), max(1, cap - (S + 1) - 1)) decoding steps, "
                                           "<eos> included; S = source tokens")
    return settings
