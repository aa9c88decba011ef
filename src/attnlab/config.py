"""Typed, frozen configuration: one dataclass per concern, loaded from TOML plus dotted overrides.

A run is fully described by a :class:`Config`. It is written to every run folder as
``config.toml`` and travels inside every checkpoint, so a model can always be rebuilt.

Overrides look like ``train.lr=3e-4`` or ``model.num_layers=3``; each value is parsed
according to the field's declared type. An unknown section or key is a :class:`ConfigError`
that lists the valid names — a typo never passes silently (docs/DESIGN.md, Conventions).
"""

from __future__ import annotations

import dataclasses
import decimal
import math
import tomllib
import types
import typing
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tomli_w

from attnlab.errors import AttnlabError
from attnlab.files import read_input
from attnlab.i18n import N_, _
from attnlab.notes import SENTENCES

MODEL_KINDS = ("seq2seq", "bahdanau", "transformer", "decoder-only", "encoder-only")
# The corpora attnlab knows by name, the default first; what each one is (its languages, files, text rules,
# sentences) is its record in data/pairs.py (CORPORA), which also checks that a direction fits it.
DATASETS = ("fra-eng", "cmn-eng", "numbers")
OWN_CORPUS = "file"  # data.dataset of a corpus of your own (`train --data FILE`, data/corpus.py)
# data.src_lang / data.tgt_lang: ISO 639-1 codes (two letters), the codes Moses' rules and num2words use.
LANGUAGES = tuple(
    "aa ab ae af ak am an ar as av ay az ba be bg bh bi bm bn bo br bs ca ce ch co cr cs cu cv cy da de dv dz ee "
    "el en eo es et eu fa ff fi fj fo fr fy ga gd gl gn gu gv ha he hi ho hr ht hu hy hz ia id ie ig ii ik io is it "
    "iu ja jv ka kg ki kj kk kl km kn ko kr ks ku kv kw ky la lb lg li ln lo lt lu lv mg mh mi mk ml mn mr ms mt my "
    "na nb nd ne ng nl nn no nr nv ny oc oj om or os pa pi pl ps pt qu rm rn ro ru rw sa sc sd se sg si sk sl sm sn "
    "so sq sr ss st su sv sw ta te tg th ti tk tl tn to tr ts tt tw ty ug uk ur uz ve vi vo wa wo xh yi yo za zh zu"
    .split())
# Scripts written without spaces between words: with no segmenter, their text is cut into characters.
UNSEGMENTED = frozenset({"ja", "zh", "th", "lo", "km", "my", "bo", "dz"})
NUMBERS_LANGS = ("fr", "de", "es", "ja")  # data.tgt_lang of the numbers task (num2words); the source is English
# data.preprocess: how text becomes tokens (data/languages.py). auto: the rule the corpus's record names for a
# language (data/pairs.py: D2L's for fra-eng, on which the notes rely), else the metaspace rule (lossless, and
# exactly what plain `tokenizers` does with an export) for a space-separated language, characters for an
# UNSEGMENTED one; Moses' rules (sacremoses) on request.
PREPROCESS = ("auto", "d2l", "moses", "chars", "metaspace")
TOKENIZERS = ("word", "bpe")
SCHEDULES = ("auto", "linear", "wsd", "inverse_sqrt", "constant", "cosine")
SIZES = ("auto", "base", "tiny", "small", "medium", "notes")  # tiers: training/sizing.py (notes: the notes' 32-wide sizes)
KERNELS = ("auto", "fast", "plain")  # train.kernels: attnlab/fast/
ATTENTION_QUERIES = ("previous", "current")  # model.attention_query: Bahdanau's query s(t'-1) or s(t')


class ConfigError(AttnlabError, ValueError):
    """A configuration value or key is wrong; the message says which and how to fix it."""


def _check(cond: bool, msg: str) -> None:
    if not cond:
        raise ConfigError(msg)


def _choice(name: str, value: str, choices: tuple[str, ...]) -> None:
    _check(value in choices, _("{name}={value!r} is not valid; choose one of: {choices}").format(name=name, value=value, choices=', '.join(choices)))


def _finite(section: str, obj: Any) -> None:
    """Refuse ``inf`` and ``nan`` in every float field of ``obj`` (tuples too), before any range check:
    ``nan`` fails every comparison and ``inf`` passes every lower bound, so either would slip through a
    range check written as one comparison and then fail silently (a 1-token limit, a run that stops
    at step 0, advice to lower the lr)."""
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        for x in value if isinstance(value, tuple) else (value,):
            if isinstance(x, float) and not math.isfinite(x):
                raise ConfigError(_("{section}.{name}={x} is not a finite number; give a finite value").format(section=section, name=f.name, x=x))


def _between(name: str, value: float, low: float, high: float) -> None:
    """``low <= value <= high``, or one line naming the field, the value and the range."""
    _check(low <= value <= high, _("{name}={value} must lie between {low:g} and {high:g}").format(name=name, value=value, low=low, high=high))


# Upper bounds of ModelConfig's sizes: far above any model attnlab trains (the presets use 256 wide, 2-4
# layers), low enough that no config.toml or config.json can make a loader allocate without end. A
# loader also checks the config's tensors against the weights file's shapes before building the model
# (runs.load_model), so a config never asks for more memory than its weights ship.
MAX_WIDTH = 16384  # model.num_hiddens, model.embed_size
MAX_FFN = 65536  # model.ffn_num_hiddens
MAX_LAYERS = 128  # model.num_layers
MAX_HEADS = 256  # model.num_heads
MAX_POSITIONS = 8192  # model.max_positions (data.num_steps is at most 1024 per side)

# Ranges of the floats that have no natural bound (every float must also be finite, see _finite).
MAX_LR = 10.0  # train.lr: far above any Adam/Muon learning rate that trains
MAX_MINUTES = 1e6  # train.max_minutes: about two years
MAX_LENGTH_PENALTY = 5.0  # decode.length_penalty: GNMT's alpha is 0.6-1 in practice
MIN_TEMPERATURE, MAX_TEMPERATURE = 0.01, 100.0  # decode.temperature: near-greedy to near-uniform
MAX_LEN_A = 10.0  # decode.max_len_a: outputs ten times the source's length
MAX_LEN_B = 10_000  # decode.max_len_b (the position table caps outputs further)


@dataclass(frozen=True)
class DataConfig:
    dataset: str = DATASETS[0]
    # "src-tgt" (ISO 639-1 codes): which way a named corpus is read, e.g. fr-en (French sources) or zh-en; "" = the
    # corpus's default. A run folder records it resolved (data.pairs.resolved), so it always names the pair.
    direction: str = ""
    # a named corpus: a zip, a fra.txt or a folder; else $ATTNLAB_DATA_DIR, then the cache. file: a TSV, two aligned
    # files "A,B" or a prefix P (P.<src_lang>, P.<tgt_lang>). Never written into a run folder
    # (runs.run_config): a run records its corpus by name and checksum and finds it again at use time.
    data_path: str | None = None
    # ISO 639-1 codes of the source and the target; "" = the dataset's own (data.direction, else its default;
    # numbers: English to French). Required for data.dataset=file: a TSV's first column (or the first file) is the source.
    src_lang: str = ""
    tgt_lang: str = ""
    preprocess: str = "auto"  # PREPROCESS: D2L's rules, Moses' (sacremoses), characters or metaspace, per language
    num_steps: int = 32  # max tokens per side including <eos> (the notes' num_steps); longer pairs are truncated and counted
    min_freq: int = 2  # word tokenizer: tokens seen fewer times become <unk>
    tokenizer: str = "word"  # "word" (D2L) or "bpe" (HF tokenizers, one subword model per language)
    bpe_vocab_size: int = 8000
    max_pairs: int = 0  # 0 = all; else keep the first N pairs (quick experiments)
    valid_frac: float = 0.02  # share of distinct sources in the validation split
    test_frac: float = 0.03  # share of distinct sources in the test split
    numbers_size: int = 20000  # pairs generated for the offline `numbers` task
    batch_tokens: int = 4096  # token budget per batch: batch_size * max(padded src, padded tgt)
    max_batch_size: int = 512

    def __post_init__(self) -> None:
        _finite("data", self)
        _choice("data.dataset", self.dataset, (*DATASETS, OWN_CORPUS))
        _choice("data.tokenizer", self.tokenizer, TOKENIZERS)
        src, _sep, tgt = self.direction.partition("-")
        _check(self.direction == "" or (src in LANGUAGES and tgt in LANGUAGES and src != tgt),
               _("data.direction={direction!r} is not a direction; give source-target as two ISO 639-1 codes, "
                 "e.g. en-fr, fr-en, en-zh or zh-en, or drop it for the corpus's default").format(
                   direction=self.direction))
        _choice("data.preprocess", self.preprocess, PREPROCESS)
        self._check_langs()
        _check(2 <= self.num_steps <= 1024, _("data.num_steps={num_steps} must be between 2 and 1024").format(num_steps=self.num_steps))
        _check(self.min_freq >= 1, _("data.min_freq={min_freq} must be >= 1").format(min_freq=self.min_freq))
        _check(self.bpe_vocab_size >= 100, _("data.bpe_vocab_size={bpe_vocab_size} must be >= 100").format(bpe_vocab_size=self.bpe_vocab_size))
        _check(self.max_pairs >= 0, _("data.max_pairs={max_pairs} must be >= 0 (0 means all)").format(max_pairs=self.max_pairs))
        _check(0 < self.valid_frac < 0.5 and 0 < self.test_frac < 0.5,
               _("data.valid_frac and data.test_frac must each lie in (0, 0.5)"))
        _check(self.numbers_size >= 100, _("data.numbers_size={numbers_size} must be >= 100").format(numbers_size=self.numbers_size))
        _check(self.batch_tokens >= self.num_steps,
               _("data.batch_tokens={batch_tokens} must be at least data.num_steps={num_steps}").format(batch_tokens=self.batch_tokens, num_steps=self.num_steps))
        _check(self.max_batch_size >= 1, _("data.max_batch_size must be >= 1"))

    def _check_langs(self) -> None:
        for key in ("src_lang", "tgt_lang"):
            code = getattr(self, key)
            _check(code == "" or code in LANGUAGES,
                   _("data.{key}={code!r} is not an ISO 639-1 language code; give two lowercase "
                     "letters, e.g. en, de, es, ja or zh").format(key=key, code=code))
        if self.dataset == OWN_CORPUS:
            _check(bool(self.src_lang and self.tgt_lang),
                   _("a corpus of your own (data.dataset=file, --data FILE) needs its "
                     "languages: add data.src_lang=.. data.tgt_lang=.. (ISO 639-1 codes, "
                     "e.g. data.src_lang=en data.tgt_lang=de); for Tatoeba's fra-eng give "
                     "--dataset fra-eng"))
        # Whether the languages fit a named corpus is its record's to say (data.pairs.pair_of).


@dataclass(frozen=True)
class ModelConfig:
    kind: str = "transformer"
    num_hiddens: int = 256  # d_model for Transformers; GRU hidden size for seq2seq/bahdanau
    embed_size: int = 256  # GRU models' embedding size (Transformers use num_hiddens)
    num_layers: int = 2  # layers per stack (encoder and decoder each)
    num_heads: int = 4
    ffn_num_hiddens: int = 1024
    dropout: float = 0.1
    # Dropout on attention weights; None = `dropout`. 0 lets CPU training use SDPA's fused kernel
    # (attention dropout forces PyTorch's unfused math path).
    attention_dropout: float | None = None
    positional: str = "sinusoidal"  # or "learned"
    max_positions: int = 1024
    norm_first: bool = True  # pre-norm (Add&Norm after the residual when False, as in the notes' §17)
    tie_embeddings: bool = True  # share the target embedding with the output layer W_o
    scratch_gru: bool = False  # use the from-scratch GRU cell (exposes z, r, h~) instead of nn.GRU
    # GRU models: read the source both ways (Bahdanau et al. 2014; D2L's encoder reads it forwards only).
    # Keys/values become [h→; h←] (2D); the decoder starts from tanh(W [h→_last; h←_first]).
    bidirectional: bool = False
    # Bahdanau: the score function of its attention, a name of attnlab.models.BAHDANAU_SCORES; "additive" is
    # the notes' additive vᵀ tanh(W_q q + W_k k) (§1–3, D2L 10.3.2 zh / 11.3.4 en). Checked when the model is built.
    attention_score: str = "additive"
    # Bahdanau: the query is the decoder state before its step, s(t'-1) ("previous", D2L §10.4), or after it,
    # s(t') ("current", Luong et al. 2015), when the output layer reads tanh(W_c [s(t'); c(t')]) instead of s(t').
    # The Bahdanau preset sets "current"; "previous" stays the default here, so a run saved before the key
    # existed loads as it was trained.
    attention_query: str = "previous"

    @property
    def attention_dropout_rate(self) -> float:
        return self.dropout if self.attention_dropout is None else self.attention_dropout

    def __post_init__(self) -> None:
        _choice("model.kind", self.kind, MODEL_KINDS)
        _choice("model.positional", self.positional, ("sinusoidal", "learned"))
        _finite("model", self)
        _between("model.num_hiddens", self.num_hiddens, 2, MAX_WIDTH)
        _between("model.embed_size", self.embed_size, 1, MAX_WIDTH)
        _between("model.num_layers", self.num_layers, 1, MAX_LAYERS)
        _between("model.num_heads", self.num_heads, 1, MAX_HEADS)
        _check(self.num_hiddens % self.num_heads == 0,
               _("model.num_hiddens={num_hiddens} must be divisible by model.num_heads={num_heads}").format(num_hiddens=self.num_hiddens, num_heads=self.num_heads))
        _between("model.ffn_num_hiddens", self.ffn_num_hiddens, 1, MAX_FFN)
        _check(0.0 <= self.dropout < 1.0, _("model.dropout={dropout} must lie in [0, 1)").format(dropout=self.dropout))
        _check(self.attention_dropout is None or 0.0 <= self.attention_dropout < 1.0,
               _("model.attention_dropout={attention_dropout} must lie in [0, 1) (or be unset)").format(attention_dropout=self.attention_dropout))
        _between("model.max_positions", self.max_positions, 2, MAX_POSITIONS)
        _check(self.attention_score.isidentifier(),
               _("model.attention_score={attention_score!r} must be the name of a score function, e.g. "
                 "additive").format(attention_score=self.attention_score))
        _check(not self.bidirectional or self.kind in ("seq2seq", "bahdanau"),
               _("model.bidirectional=true is for the GRU models (seq2seq, bahdanau), not {kind}; drop "
                 "it").format(kind=self.kind))
        _choice("model.attention_query", self.attention_query, ATTENTION_QUERIES)


@dataclass(frozen=True)
class TrainConfig:
    lr: float = 1e-3  # (0, MAX_LR]
    warmup_steps: int = 400  # open-ended schedules: warm-up updates; budgeted ones: the most warm-up may take
    # "auto": a budgeted run (max_minutes / max_steps / max_epochs) plans on its horizon: warm-up, flat, then
    # linear decay to 0 over its last decay_frac, ending when the budget does ("wsd", training/budget.py);
    # a run with no budget warms up then decays as 1/sqrt(t).
    # Or force one: "wsd", "linear" (decay from the warm-up on), "inverse_sqrt", "constant", "cosine" (needs max_steps).
    schedule: str = "auto"
    warmup_frac: float = 0.05  # budgeted schedules: warm-up as a share of the horizon
    decay_frac: float = 0.2  # "wsd" (budgeted default): the final share of the horizon over which the lr decays to 0
    min_lr_ratio: float = 0.05  # cosine floor as a share of lr, in [0, 1]
    optimizer: str = "adamw"  # "adam", "adamw", or "muon" (Muon for hidden matrices, AdamW for the rest)
    betas: tuple[float, float] = (0.9, 0.98)
    weight_decay: float = 0.01  # decoupled (AdamW) decay per unit of lr, in [0, 1]
    label_smoothing: float = 0.1
    clip_grad_norm: float = 1.0  # 0 disables clipping; any finite value >= 0
    max_steps: int = 0  # 0 = no step limit
    max_minutes: float = 0.0  # 0 = no time limit; at most MAX_MINUTES
    max_epochs: int = 0  # 0 = no epoch limit
    eval_every: int = 500  # steps between validations (runs with no budget)
    eval_frac: float = 0.25  # budgeted runs: validate at these shares of the horizon (0 = by eval_every instead)
    eval_max_pairs: int = 1000  # validation loss on at most this many pairs of the split (0 = all)
    eval_max_sentences: int = 500  # validation BLEU sample size (loss uses the whole split)
    save_every: int = 500
    keep_checkpoints: int = 2  # step checkpoints kept besides `best`, `last` and those of the decay phase
    # budgeted runs: N checkpoints spread evenly over the lr's decay phase, the last one being the final
    # checkpoint, kept for `attnlab average RUN --from-decay` (0 = off; then the decay phase is not kept either)
    average_last: int = 5
    log_every: int = 20
    seed: int = 42
    # "auto": a run with a minute budget measures this machine (a 1 s matmul probe) and sizes the model,
    # vocabulary and batches for it (training/sizing.py); keys you set yourself always win.
    # "base" = the preset as it is; or one of the sizing tiers by name.
    size: str = "auto"
    # torch intra-op threads: 0 = auto, the count measured fastest now, up to one per CPU this process may use
    # (re-measured as other programs come and go: attnlab/threads.py); N = exactly N, never changed
    threads: int = 0
    device: str = "auto"  # "auto", "cpu", "cuda", "cuda:N"
    amp: bool = True  # bf16 autocast on CUDA (ignored on CPU)
    # "auto": the measured CPU kernels of attnlab/fast/ (W_o + loss in chunks, cheaper dropout masks, block
    # top-k) on the CPU, the notes' plain code elsewhere; "fast" or "plain" forces one. Speed, not the maths.
    kernels: str = "auto"
    max_nonfinite: int = 5  # consecutive non-finite losses tolerated (steps skipped) before stopping
    probe_sentences: tuple[str, ...] = SENTENCES  # the notes' four (attnlab.notes)
    # also log to RUN/tensorboard/ (training/tensorboard.py); needs the `tensorboard` extra
    tensorboard: bool = False

    def __post_init__(self) -> None:
        _finite("train", self)
        _check(0 < self.lr <= MAX_LR, _("train.lr={lr} must be > 0 and at most {MAX_LR:g}").format(lr=self.lr, MAX_LR=MAX_LR))
        _between("train.min_lr_ratio", self.min_lr_ratio, 0.0, 1.0)
        _between("train.weight_decay", self.weight_decay, 0.0, 1.0)
        _between("train.max_minutes", self.max_minutes, 0.0, MAX_MINUTES)
        _check(isinstance(self.tensorboard, bool), _("train.tensorboard={tensorboard!r} must be true "
                                                     "or false").format(tensorboard=self.tensorboard))
        _check(self.warmup_steps >= 0, _("train.warmup_steps must be >= 0"))
        _choice("train.schedule", self.schedule, SCHEDULES)
        _choice("train.size", self.size, SIZES)
        _choice("train.kernels", self.kernels, KERNELS)
        _check(0.0 <= self.warmup_frac < 1.0, _("train.warmup_frac={warmup_frac} must lie in [0, 1)").format(warmup_frac=self.warmup_frac))
        _check(0.0 < self.decay_frac <= 1.0, _("train.decay_frac={decay_frac} must lie in (0, 1]").format(decay_frac=self.decay_frac))
        _check(0.0 <= self.eval_frac < 1.0, _("train.eval_frac={eval_frac} must lie in [0, 1) (0 = "
                                              "only at the end)").format(eval_frac=self.eval_frac))
        _choice("train.optimizer", self.optimizer, ("adam", "adamw", "muon"))
        _check(0.0 <= self.label_smoothing < 1.0, _("train.label_smoothing must lie in [0, 1)"))
        _check(self.clip_grad_norm >= 0, _("train.clip_grad_norm={clip_grad_norm} must be >= 0 (0 "
                                           "disables)").format(clip_grad_norm=self.clip_grad_norm))
        for name in ("max_steps", "max_epochs", "eval_every", "eval_max_pairs", "save_every", "keep_checkpoints", "average_last",
                     "log_every", "threads", "max_nonfinite", "eval_max_sentences"):
            _check(getattr(self, name) >= 0, _("train.{name} must be >= 0").format(name=name))
        _check(-(2**63) <= self.seed < 2**64,
               _("train.seed={seed} must fit in 64 bits (0 to 2**64 - 1), the range torch.manual_seed "
                 "takes").format(seed=self.seed))
        _check(len(self.betas) == 2 and all(0 <= b < 1 for b in self.betas), _("train.betas must be "
                                                                               "two numbers in [0, 1)"))
        _check(self.schedule != "cosine" or self.max_steps > 0, _("train.schedule='cosine' needs "
                                                                  "train.max_steps > 0"))


AUTO_DECODE_ROWS = 256  # decoder rows per batch when decode.batch_size = 0


@dataclass(frozen=True)
class DecodeConfig:
    """How a trained model decodes (notes §22); every key is also an option of every decoding command
    (:data:`DECODE_OPTIONS`). Names follow fairseq's generate options where they exist."""

    beam_size: int = 1  # 1 = greedy
    # GNMT's length penalty (Wu et al. 2016, eq. 14), not fairseq's --lenpen (score / len ** lenpen):
    # hypotheses are ranked by score / ((5 + len) / 6) ** alpha; alpha in [0, MAX_LENGTH_PENALTY]
    length_penalty: float = 1.0
    nbest: int = 1
    max_len_a: float = 1.5  # output at most a * source_len + b tokens; a in [0, MAX_LEN_A], b in [1, MAX_LEN_B]
    max_len_b: int = 10
    # Sentences decoded together; 0 = auto: AUTO_DECODE_ROWS decoder rows (sentences × beam), chosen by
    # measurement (bench/RESULTS.md, "Figures moved out of the source").
    batch_size: int = 0
    max_tokens: int = 0  # or batches of at most this many padded source tokens (fairseq's --max-tokens); 0 = off
    no_repeat_ngram_size: int = 0  # never repeat an n-gram of this size in an output (fairseq's); 0 = off
    # Sampling instead of search (fairseq's --sampling): each token drawn from the model's distribution at
    # `temperature`, from the `sampling_topk` most likely tokens (0 = all), reproducibly from `seed`.
    sampling: bool = False
    sampling_topk: int = 0
    temperature: float = 1.0
    seed: int = 0

    def __post_init__(self) -> None:
        _finite("decode", self)
        _check(self.beam_size >= 1, _("decode.beam_size={beam_size} must be >= 1").format(beam_size=self.beam_size))
        _check(self.sampling or 1 <= self.nbest <= self.beam_size,
               _("decode.nbest={nbest} must lie between 1 and decode.beam_size={beam_size}").format(nbest=self.nbest, beam_size=self.beam_size))
        _check(self.nbest >= 1, _("decode.nbest={nbest} must be >= 1").format(nbest=self.nbest))
        _between("decode.length_penalty", self.length_penalty, 0.0, MAX_LENGTH_PENALTY)
        _between("decode.max_len_a", self.max_len_a, 0.0, MAX_LEN_A)
        _between("decode.max_len_b", self.max_len_b, 1, MAX_LEN_B)
        _check(self.batch_size >= 0, _("decode.batch_size must be >= 0 (0 = auto)"))
        _check(self.max_tokens >= 0, _("decode.max_tokens must be >= 0 (0 = batches by decode.batch_size)"))
        _check(self.no_repeat_ngram_size >= 0, _("decode.no_repeat_ngram_size must be >= 0 (0 = off)"))
        _check(isinstance(self.sampling, bool), _("decode.sampling={sampling!r} must be true or false")
               .format(sampling=self.sampling))
        _check(self.sampling_topk >= 0, _("decode.sampling_topk must be >= 0 (0 = the whole vocabulary)"))
        _between("decode.temperature", self.temperature, MIN_TEMPERATURE, MAX_TEMPERATURE)
        _check(-(2**63) <= self.seed < 2**64,
               _("decode.seed={seed} must fit in 64 bits (0 to 2**64 - 1), the range torch.manual_seed "
                 "takes").format(seed=self.seed))
        _check(self.sampling or (self.sampling_topk == 0 and self.temperature == 1.0),
               _("decode.sampling_topk and decode.temperature shape sampling only; add --sampling "
                 "(decode.sampling=true) or drop them"))
        _check(not self.sampling or self.beam_size == 1,
               _("decode.sampling=true draws each token instead of searching; it needs decode.beam_size=1 "
                 "(use --nbest K for K samples a sentence)"))


#: The decoding options every decoding command shares (translate, evaluate, serve, export's decode settings),
#: each the shortcut of one ``decode.*`` key of :class:`DecodeConfig`: (option, key, type, help). ``cli/common.py``
#: makes them options, the web server's request body makes them fields (named by key). The names are fairseq
#: generate's where it has one (--beam, --nbest, --max-len-a/b, --batch-size, --max-tokens,
#: --no-repeat-ngram-size, --sampling, --sampling-topk, --temperature, --seed); the length penalty is GNMT's,
#: so it is not fairseq's --lenpen.
DECODE_OPTIONS: tuple[tuple[str, str, type, str], ...] = (
    ("--beam", "beam_size", int, N_("beam size, 1 = greedy")),
    ("--nbest", "nbest", int, N_("the n best translations of each sentence (with --sampling: n samples)")),
    ("--length-penalty", "length_penalty", float,
     N_("GNMT's length penalty alpha (Wu et al. 2016; not fairseq's --lenpen): beam hypotheses are ranked by "
        "log-probability / ((5 + length) / 6) ** alpha; 0 ranks by log-probability, larger favours longer outputs")),
    ("--max-len-a", "max_len_a", float, N_("output length limit a·S + b (S: source tokens): its slope a")),
    ("--max-len-b", "max_len_b", int, N_("output length limit a·S + b: its offset b (<eos> included)")),
    ("--batch-size", "batch_size", int, N_("sentences decoded together (0 = auto)")),
    ("--max-tokens", "max_tokens", int, N_("also at most this many padded source tokens a batch (0 = off)")),
    ("--no-repeat-ngram-size", "no_repeat_ngram_size", int,
     N_("never repeat an n-gram of this size within an output (0 = off)")),
    ("--sampling", "sampling", bool, N_("draw each token from the model's distribution instead of searching "
                                        "(needs beam 1)")),
    ("--sampling-topk", "sampling_topk", int, N_("with --sampling: draw from the k most likely tokens (0 = all)")),
    ("--temperature", "temperature", float, N_("with --sampling: divide the log-probabilities by this "
                                               "(below 1: sharper, above 1: flatter)")),
    ("--seed", "seed", int, N_("with --sampling: the seed of the draws (same seed, same samples)")),
)


def _refuse_control_chars(text: str, where: str) -> None:
    """Control characters (newline, tab, DEL, C1) and lone surrogates have no place in a config string."""
    bad = next((c for c in text if unicodedata.category(c) in ("Cc", "Cs")), None)
    if bad is not None:
        what = "an undecodable byte" if unicodedata.category(bad) == "Cs" else "the control character"
        raise ConfigError(_("{where}={text!r} contains {what} {bad!r}; remove it").format(where=where, text=text, what=what, bad=bad))


@dataclass(frozen=True)
class Config:
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    decode: DecodeConfig = field(default_factory=DecodeConfig)

    def __post_init__(self) -> None:
        # Every string of every section (probe sentences, data_path, …): a Config that exists can be
        # written to config.toml and read back, whether it came from overrides, a file or code.
        for name in SECTIONS:
            section = getattr(self, name)
            for f in dataclasses.fields(section):
                value = getattr(section, f.name)
                for item in value if isinstance(value, tuple) else (value,):
                    if isinstance(item, str):
                        _refuse_control_chars(item, f"{name}.{f.name}")


SECTIONS: dict[str, type] = {"data": DataConfig, "model": ModelConfig, "train": TrainConfig, "decode": DecodeConfig}


# ----------------------------------------------------------------------------------------------
# Typed parsing of values


def _field_types(cls: type) -> dict[str, Any]:
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls)}


def _parse_int(text: str, where: str) -> int:
    """Digits go through int() (exact at any size); "1e3" is accepted when integral (via Decimal, not float)."""
    try:
        return int(text)
    except ValueError:
        pass
    try:
        d = decimal.Decimal(text.strip())
        # adjusted(): the exponent of the leading digit, so 1e999999999 is refused before int() builds it
        if d.is_finite() and d.adjusted() < 100 and d == d.to_integral_value():
            return int(d)
    except (decimal.InvalidOperation, ValueError):
        pass
    raise ConfigError(_("{where} expects an integer, got {text!r}").format(where=where, text=text))


def _coerce(value: Any, tp: Any, where: str) -> Any:
    """Convert a TOML value or a command-line string to the declared type ``tp``."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if value is None or (isinstance(value, str) and value.lower() in ("none", "null", "")):
            return None
        return _coerce(value, args[0], where)
    if origin is tuple:
        args = typing.get_args(tp)
        if isinstance(value, str):
            value = [v.strip() for v in value.split(",")] if value.strip() else []
        if not isinstance(value, list | tuple):
            raise ConfigError(_("{where} expects a list, got {value!r}").format(where=where, value=value))
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_coerce(v, args[0], where) for v in value)
        if len(value) != len(args):
            raise ConfigError(_("{where} expects {n_args} values, got {n_value}: {value!r}").format(where=where, n_args=len(args), n_value=len(value), value=value))
        return tuple(_coerce(v, a, where) for v, a in zip(value, args))
    if tp is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "1", "yes", "on"):
            return True
        if isinstance(value, str) and value.lower() in ("false", "0", "no", "off"):
            return False
        raise ConfigError(_("{where} expects true or false, got {value!r}").format(where=where, value=value))
    if tp is int:
        if isinstance(value, bool):
            raise ConfigError(_("{where} expects an integer, got {value!r}").format(where=where, value=value))
        if isinstance(value, int):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, str):
            return _parse_int(value, where)
        raise ConfigError(_("{where} expects an integer, got {value!r}").format(where=where, value=value))
    if tp is float:
        if isinstance(value, bool):
            raise ConfigError(_("{where} expects a number, got {value!r}").format(where=where, value=value))
        if isinstance(value, int | float):
            return float(value)
        if isinstance(value, str):
            try:
                return float(value)
            except ValueError:
                pass
        raise ConfigError(_("{where} expects a number, got {value!r}").format(where=where, value=value))
    if tp is str:
        if isinstance(value, str):
            return value
        raise ConfigError(_("{where} expects a string, got {value!r}").format(where=where, value=value))
    raise ConfigError(_("{where}: unsupported type {tp}").format(where=where, tp=tp))  # pragma: no cover


def _build_section(name: str, values: dict[str, Any], base: Any) -> Any:
    cls = SECTIONS[name]
    types_ = _field_types(cls)
    kwargs = {}
    for key, value in values.items():
        if key not in types_:
            raise ConfigError(_("unknown key {name}.{key}; valid keys in [{name}]: {choices}").format(name=name, key=key, choices=', '.join(sorted(types_))))
        kwargs[key] = _coerce(value, types_[key], f"{name}.{key}")
    try:
        return dataclasses.replace(base, **kwargs)
    except TypeError as e:  # pragma: no cover - replace only fails on unknown names, handled above
        raise ConfigError(str(e)) from None


def from_dict(raw: dict[str, Any], base: Config | None = None) -> Config:
    """Build a Config from nested dicts (as read from TOML); unknown sections/keys are errors."""
    base = base or Config()
    sections = {}
    for name, values in raw.items():
        if name not in SECTIONS:
            raise ConfigError(_("unknown config section [{name}]; valid sections: {choices}").format(name=name, choices=', '.join(SECTIONS)))
        if not isinstance(values, dict):
            raise ConfigError(_("config section [{name}] must be a table of key = value pairs").format(name=name))
        sections[name] = _build_section(name, values, getattr(base, name))
    return dataclasses.replace(base, **sections)


def to_dict(cfg: Config) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for name in SECTIONS:
        sec = dataclasses.asdict(getattr(cfg, name))
        out[name] = {k: (list(v) if isinstance(v, tuple) else v) for k, v in sec.items()}
    return out


def load_toml(path: str | Path, base: Config | None = None) -> Config:
    path = Path(path)
    try:  # capped as every input is: --config /dev/zero is refused, not read until memory runs out
        text = read_input(path, _("config file {path}").format(path=path), fix=_("a config is a few lines of TOML"),
                          error=ConfigError).decode("utf-8")
    except FileNotFoundError:
        raise ConfigError(_("config file {path} does not exist; check the path given to --config").format(path=path)) from None
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(_("config file {path} cannot be read: {e}").format(path=path, e=e)) from None
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(_("config file {path} is not valid TOML: {e}").format(path=path, e=e)) from None
    try:
        return from_dict(raw, base)
    except ConfigError as e:
        raise ConfigError(f"{path}: {e}") from None


def apply_overrides(cfg: Config, overrides: list[str] | tuple[str, ...]) -> Config:
    """Apply ``section.key=value`` strings, each parsed according to the field's type."""
    grouped: dict[str, dict[str, Any]] = {}
    for item in overrides:
        if "=" not in item:
            raise ConfigError(_("override {item!r} must look like section.key=value, e.g. train.lr=3e-4").format(item=item))
        dotted, value = item.split("=", 1)
        if "." not in dotted:
            raise ConfigError(
                _("override {item!r} must name a section, e.g. train.{dotted}=...; sections: {choices}").format(item=item, dotted=dotted, choices=', '.join(SECTIONS)))
        section, key = dotted.strip().split(".", 1)
        grouped.setdefault(section, {})[key.strip()] = value.strip()
    return from_dict(grouped, cfg)


def apply_decode_overrides(cfg: Config, overrides: list[str] | tuple[str, ...]) -> Config:
    """:func:`apply_overrides` for a trained run (translate, evaluate, export): only ``decode.*`` keys may
    change; the model, its data and its training are fixed by the weights, so any other section is a
    :class:`ConfigError` naming the setting."""
    for item in overrides:
        section = item.split(".", 1)[0].strip()
        if section != "decode":
            raise ConfigError(
                _("{item}: a trained run's {section}.* settings are fixed by its weights; only decode.* settings "
                  "apply here (e.g. decode.beam_size=4 decode.length_penalty=0.6)").format(item=item, section=section))
    return apply_overrides(cfg, overrides)


def dumps_toml(cfg: Config) -> str:
    """``cfg`` as TOML that :func:`load_toml` reads back to the same Config (tomli-w escapes every string)."""
    # TOML has no null: an absent optional key means None
    return tomli_w.dumps({name: {k: v for k, v in sec.items() if v is not None} for name, sec in to_dict(cfg).items()})


# ----------------------------------------------------------------------------------------------
# Presets: sensible starting points per model kind (measured choices are recorded in bench/RESULTS.md)

_BPE = {"tokenizer": "bpe", "bpe_vocab_size": 8000}  # no <unk>, and W_o half the size of the 17k-word French vocabulary
_EVAL = {"eval_every": 250, "eval_max_sentences": 200, "log_every": 25}
PRESETS: dict[str, dict[str, dict[str, Any]]] = {
    "seq2seq": {"data": {**_BPE, "batch_tokens": 4000},
                "model": {"num_hiddens": 256, "embed_size": 256, "num_layers": 2, "dropout": 0.2},
                "train": {"lr": 2e-3, "warmup_steps": 100, "label_smoothing": 0.1,
                          **_EVAL}},
    # Bahdanau: lr 3e-3 / warm-up 200 / dropout 0.1 beat 2e-3 / 100 / 0.2 at the same budget
    # (bench/RESULTS.md, "Figures moved out of the source"): with the shorter warm-up the inverse-sqrt decay starved the GRU of step size.
    # Its decoder queries with the state after its step (attention_query "current", Luong et al. 2015): at
    # every budget measured it translated better and its map of i'm home . put je, suis → i'm and chez → home
    # where D2L's order (s(t'-1), "previous") put none there (docs/experiments/bahdanau-alignment.md).
    "bahdanau": {"data": {**_BPE, "batch_tokens": 4000},
                 "model": {"num_hiddens": 256, "embed_size": 256, "num_layers": 2, "dropout": 0.1,
                           "attention_query": "current"},
                 "train": {"lr": 3e-3, "warmup_steps": 200, "label_smoothing": 0.1,
                           **_EVAL}},
    "transformer": {"data": {**_BPE, "batch_tokens": 2500},
                    "model": {"num_hiddens": 256, "num_layers": 2, "num_heads": 4, "ffn_num_hiddens": 1024,
                              "dropout": 0.1, "attention_dropout": 0.0},
                    "train": {"lr": 1e-3, "warmup_steps": 200, **_EVAL}},
    "decoder-only": {"data": {**_BPE, "batch_tokens": 2500},
                     "model": {"num_hiddens": 256, "num_layers": 4, "num_heads": 4, "ffn_num_hiddens": 1024,
                               "dropout": 0.1, "attention_dropout": 0.0},
                     "train": {"lr": 1e-3, "warmup_steps": 200, **_EVAL}},
    # BERT-style masked LM on the English side (models/encoder_only.py): the Transformer's encoder
    # settings; no label smoothing (the fill probabilities are read as probabilities).
    "encoder-only": {"data": {**_BPE, "batch_tokens": 2500},
                     "model": {"num_hiddens": 256, "num_layers": 4, "num_heads": 4, "ffn_num_hiddens": 1024,
                               "dropout": 0.1, "attention_dropout": 0.0},
                     "train": {"lr": 1e-3, "warmup_steps": 200, "label_smoothing": 0.0, **_EVAL,
                               "probe_sentences": ("i'm [MASK] .", "he's [MASK] .", "i [MASK] home .")}},
}


def preset(kind: str) -> Config:
    """The default Config for ``kind`` (an unknown kind is a ConfigError listing the valid ones)."""
    _choice("model.kind", kind, MODEL_KINDS)
    return from_dict({**PRESETS[kind], "model": {**PRESETS[kind].get("model", {}), "kind": kind}})
