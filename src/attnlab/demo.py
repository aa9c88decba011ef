"""`attnlab demo`: the README's main job — train a Bahdanau model and a Transformer briefly,
translate the notes' example sentences, score them, and show their attention maps.

The demo is sized for the machine it runs on (``train.size=auto``, training/sizing.py): a 1-second
matmul probe measures the machine, and the budget of minutes buys a model, vocabulary and batches
that learn something in that time; the schedule is planned on the updates the budget allows
(training/budget.py). On a machine too slow for a usable model in the time given, it says so and
says how many minutes would do. Uses fra-eng when it can be found or fetched, otherwise the offline
`numbers` task (and says so).
"""

from __future__ import annotations

import math
import shutil
import signal
import sys
import time
from pathlib import Path

import torch

from attnlab import config as config_mod
from attnlab import device
from attnlab.data import corpus, download
from attnlab.data.pairs import CORPORA, corpus_named_by, pair_of
from attnlab.device import set_threads
from attnlab.errors import AttnlabError
from attnlab.evaluation.alignment import verdict_map
from attnlab.evaluation.evaluate import is_right, notes_examples
from attnlab.i18n import _, ljust, rjust, width
from attnlab.interrupts import Interrupted
from attnlab.models import traits
from attnlab.training import sizing
from attnlab.training.loop import train
from attnlab.translator import Translator

MARKER = ".attnlab-demo"

#: The notes' two attention models, trained one after the other: Bahdanau's (§1–3), the Transformer (§17–25).
DEMO_MODELS = ("bahdanau", "transformer")

#: Two validations, halfway and at the end, on a small sample: the fewest that let `attnlab doctor` compare
#: the validation loss with itself and see overfitting (§10: "training loss low, test results poor"), while
#: nearly every second of a short budget still goes to updates. The budget plan reserves their time
#: (training/budget.py), so a slow machine's run validates twice as well.
DEMO_OVERRIDES = ("train.eval_frac=0.5", "train.eval_every=0", "train.save_every=0", "train.log_every=10",
                  "train.eval_max_sentences=100", "train.eval_max_pairs=500")

#: Compute (GFLOP/s x minutes per model) below which the demo warns that a model will not translate yet:
#: the smallest budget measured to get the notes' sentences right (docs/experiments/demo-sizing.md).
USABLE_COMPUTE = 60.0

#: Below this compute the demo's Transformer learns from the :data:`SHORTEST_PAIRS` shortest pairs: a few
#: hundred updates learn the one- to three-word sentences, the notes' four among them, better than all
#: lengths at once (only the demo trades test BLEU for them; docs/experiments/demo-sizing.md).
SHORT_DEMO_COMPUTE = 150.0
SHORTEST_PAIRS = 10_000
#: Under the same compute the demo's GRU + Bahdanau model is this wide instead of its tier's: a narrower
#: encoder's last state holds less of the sentence, so the decoder gains by reading the others (§1; measured
#: in docs/experiments/bahdanau-movement.md).
SLOW_DEMO_GRU_WIDTH = 128
#: The demo's Transformer has two layers where its tier has one (the tiny and small tiers translate better per
#: minute with one): over seeds, two layers' last cross-attention put je, suis on `i'm` and chez, moi on `home`
#: in every demo measured, where one layer's left a word elsewhere (moi on `i'm`, mostly) in half of them
#: (bench/RESULTS.md, "Depth under the quota").
DEMO_TRANSFORMER_LAYERS = 2

#: A quiet machine's matmul on n threads runs at well over this share of n times one thread's (memory and
#: clocks take the rest); below it, other programs hold some of the cores.
QUIET_SCALING = 0.7


def machine_speed(threads: int) -> tuple[float, str]:
    """The GFLOP/s the demo sizes for, and a line saying why when other programs share the cores.

    The probe's best batch is the machine's quietest moment. So the demo also measures one thread: when
    ``n`` threads reach less than :data:`QUIET_SCALING` of ``n`` times its speed, the cores are shared, and
    it sizes for the median batch of the faster of the two counts and starts training on that count (the
    training then re-measures: attnlab/threads.py). ``threads``: the user's ``--threads``, never changed.
    The line blames other programs only when the load sample over the probes (:func:`device.idle_sampler`)
    saw them; a quiet machine's poor scaling is said as such. The load average is not read: inside a
    container it counts the host's programs, not this one's cores."""
    sample = device.idle_sampler()
    peak, n = device.measure_peak_gflops(), torch.get_num_threads()
    if threads > 0 or n == 1:
        return peak, ""
    torch.set_num_threads(1)
    one = device.measure_peak_gflops(seconds=0.5)
    torch.set_num_threads(n)
    if peak >= QUIET_SCALING * n * one:
        return peak, ""
    start = 1 if one >= peak else n
    torch.set_num_threads(start)
    typical = device.measure_peak_gflops(seconds=0.5, typical=True)
    free = sample() if sample is not None else None
    if free is not None and free >= n:  # nobody else on the cores: the probe's own noise, or slow memory
        line = _("note: {n} threads ran only {ratio:.1f}× one thread's speed though no other program was seen on "
                 "the cores (a quiet machine's about {n}×): the demo sizes for {typical:.0f} GFLOP/s, the typical "
                 "speed on {start} thread(s), not the best moment's {peak:.0f}, and starts training there")
    else:
        line = _("note: other programs are using this machine's cores ({n} threads ran {ratio:.1f}× one thread's "
                 "speed, a quiet machine's about {n}×): the demo sizes for {typical:.0f} GFLOP/s, the typical speed "
                 "on {start} thread(s), not the best moment's {peak:.0f}, and starts training there")
    return typical, line.format(n=n, ratio=peak / one, typical=typical, start=start, peak=max(peak, one))


def _dataset(data: str | None, name: str) -> tuple[str, str | None]:
    """The named corpus ``name`` where it can be found (``data``, else $ATTNLAB_DATA_DIR, the cache or a
    download), else the offline generated task (numbers). A ``data`` the user named that cannot be read is their
    mistake, not a fallback."""
    c = CORPORA[name]
    try:
        path = download.locate(c.name, c.candidates, c.urls, c.sha256, data)
        return name, str(path)
    except AttnlabError as e:
        if data is not None:
            raise
        offline = next(n for n, other in CORPORA.items() if other.generated)
        print(_("{name} is not available ({error}); using the offline `{offline}` task instead").format(
            name=name, error=e, offline=offline))
        return offline, None


def _config(kind: str, dataset: str, path: str | None, minutes: float, threads: int, peak: float,
            seed: int | None = None):
    cfg = config_mod.apply_overrides(config_mod.preset(kind), [
        f"data.dataset={dataset}", *([f"data.data_path={path}"] if path else []),
        f"train.max_minutes={minutes}", f"train.threads={threads}", *DEMO_OVERRIDES,
        *([f"train.seed={seed}"] if seed is not None else [])])
    cfg, why = sizing.resolve(cfg, frozenset(), peak=peak)
    if not traits(cfg.model).recurrent and cfg.model.num_layers < DEMO_TRANSFORMER_LAYERS:
        cfg = config_mod.apply_overrides(cfg, [f"model.num_layers={DEMO_TRANSFORMER_LAYERS}"])
        why += _("; the demo gives it {layers} layers instead, whose attention forms the notes' table of §1 more "
                 "often").format(layers=DEMO_TRANSFORMER_LAYERS)
    if not CORPORA[dataset].sized or peak * minutes >= SHORT_DEMO_COMPUTE:
        return cfg, why
    if traits(cfg.model).recurrent and cfg.model.num_hiddens > SLOW_DEMO_GRU_WIDTH:
        w = SLOW_DEMO_GRU_WIDTH
        cfg = config_mod.apply_overrides(cfg, [f"model.num_hiddens={w}", f"model.embed_size={w}"])
        why += _("; the demo makes it d={width} instead, which learns the notes' sentences within a budget under "
                 "{compute:g} GFLOP/s·min (whether its attention aligns is the verdict printed with its map)").format(
            width=w, compute=SHORT_DEMO_COMPUTE)
    elif not traits(cfg.model).recurrent and cfg.data.max_pairs > SHORTEST_PAIRS:
        cfg = config_mod.apply_overrides(cfg, [f"data.max_pairs={SHORTEST_PAIRS}"])
        why += _("; the demo trains it on the {n:,} shortest pairs instead, the sentences a budget under "
                 "{compute:g} GFLOP/s·min learns best").format(n=SHORTEST_PAIRS, compute=SHORT_DEMO_COMPUTE)
    return cfg, why


def run_demo(out: Path, minutes: float = 1.5, data: str | None = None, threads: int = 0,
             progress: bool = True, verbose: bool = False, dataset: str | None = None,
             seed: int | None = None) -> int:
    """Train :data:`DEMO_MODELS` for ``minutes`` each into ``out/KIND`` and show what they learnt.
    ``progress``: the training progress bars on stderr (off under ``--quiet``); ``verbose``: also
    each model's sized config, as TOML, on stderr. ``seed``: both models' ``train.seed`` (None: the config's).
    ``dataset``: a named corpus (None: the one ``data``'s file name says, ``cmn-eng.zip``, else fra-eng).

    ``minutes`` must be a positive, finite budget: the models are sized for it, and without one nothing
    but a signal would end the first model's training. Ctrl-C or SIGTERM during training saves that
    model's ``last`` checkpoint and stops the demo there (:class:`attnlab.interrupts.Interrupted`), before
    the next model. Raises :class:`AttnlabError` for a bad ``minutes`` or ``out``."""
    if not (math.isfinite(minutes) and minutes > 0):
        raise AttnlabError(_("--max-minutes {minutes:g}: the demo needs a time budget per model (its "
                             "models are sized for it); give a positive number of minutes, e.g. "
                             "--max-minutes 1.5").format(minutes=minutes))
    t0 = time.monotonic()
    dataset = dataset or (corpus_named_by(Path(data).name) if data else None) or config_mod.DATASETS[0]
    dataset, path = (dataset, None) if CORPORA[dataset].generated else _dataset(data, dataset)
    if out.exists() and any(out.iterdir()) and not (out / MARKER).exists():
        raise AttnlabError(_("{out} exists and is not a demo folder; choose another --runs-dir").format(out=out))
    out.mkdir(parents=True, exist_ok=True)
    (out / MARKER).write_text("made by `attnlab demo`; rerunning the demo replaces this folder's runs\n")
    set_threads(threads)
    peak, loaded = machine_speed(threads)
    print(_("attnlab demo: dataset {dataset}, {minutes:g} min per model, out {out}").format(
        dataset=dataset + (f" ({path})" if path else ""), minutes=minutes, out=out))
    if loaded:
        print(loaded)
    if CORPORA[dataset].notes_table and peak * minutes < USABLE_COMPUTE:
        need = USABLE_COMPUTE / peak
        print(_("note: this machine measures {peak:.0f} GFLOP/s; in {minutes:g} min a model will not yet translate "
                "the notes' sentences. About {need:.1f} min per model would: `attnlab demo --max-minutes {need:.1f}`")
              .format(peak=peak, minutes=minutes, need=need))
    prepared: dict[tuple, object] = {}
    translators = {}
    for kind in DEMO_MODELS:
        run = out / kind
        if run.exists():
            shutil.rmtree(run)
        cfg, why = _config(kind, dataset, path, minutes, threads, peak, seed)
        print("\n" + _("== training {kind} for {minutes:g} minutes ==").format(kind=kind, minutes=minutes))
        if why:
            print(why)
        if verbose:
            print(config_mod.dumps_toml(cfg), file=sys.stderr)
        key = (cfg.data.tokenizer, cfg.data.min_freq, cfg.data.bpe_vocab_size, cfg.data.max_pairs)
        if key not in prepared:
            prepared[key] = corpus.prepare(cfg.data)
        # sized above (two layers where the tier has one is a preset's value): train must not size it again
        res = train(cfg, run, prepared=prepared[key], progress=progress, watch=False,  # curves drawn at the end
                    explicit=sizing.every_key(cfg))
        if res.stopped_by == "signal":  # the user asked the demo to stop, not only this model
            print(_("interrupted: {kind} saved its last checkpoint in {run}; the demo stopped there").format(
                kind=kind, run=run))
            raise Interrupted(res.signal or signal.SIGINT)
        v = res.last_valid
        print(_("{kind}: {steps} updates, {speed:,.0f} target tokens/s, valid BLEU {bleu:.1f}").format(
            kind=kind, steps=res.step, speed=res.tokens_per_s, bleu=v.get("valid_bleu", float("nan"))))
        translators[kind] = Translator.from_run(run, which="best")  # what explain, doctor and the web page read

    for kind, tr in translators.items():
        _show(kind, tr, dataset, out, peak, minutes)
    print("\n" + _("runs are in {out} ({seconds:.0f} s in all); try `{command}`").format(
        out=out, seconds=time.monotonic() - t0, command=f"attnlab translate {out / 'transformer'} \"{_sentence(tr)}\""))
    return 0


def _show(kind: str, tr, dataset: str, out: Path, peak: float, minutes: float) -> None:
    print("\n" + _("== {kind}: the notes' examples ==").format(kind=kind))
    pair = pair_of(tr.cfg.data)
    if pair.generated:
        sources = [s for s, _ref in pair.examples]
        for s, t in zip(sources, tr.translate(sources)):
            print(f"  {s:<26} => {t}")
    else:
        rows = notes_examples(tr)
        for row in rows:
            mark = ljust(_("right"), 5) if is_right(row["source"], row["translation"], row["reference"]) else "     "
            print(f"  {ljust(row['source'], 14)} => {ljust(row['translation'], 26)} {mark}  D2L BLEU {row['d2l_bleu']:.3f}   "
                  + _("(reference: {reference})").format(reference=row["reference"]))
        right = sum(is_right(r["source"], r["translation"], r["reference"]) for r in rows)
        print("  " + _("{right} of {n} right").format(right=right, n=len(rows)))
        if right < 2:
            print("  " + _("not usable yet: give it more time (the machine measures {peak:.0f} GFLOP/s; `{command}`)")
                  .format(peak=peak, command=demo_command(dataset, max(2 * minutes, USABLE_COMPUTE / peak))))
    result, depends = attention_report(tr, _sentence(tr))
    print(cross_attention_table(result, getattr(tr.cfg.model, "attention_query", "previous")))
    print(depends.format())  # the alignment verdict beside integrated gradients (§1, §25)
    for p in result.save(out / kind / "attention", tr.name, formats=("png",)):
        print("  " + _("wrote {path}").format(path=p))


def demo_command(dataset: str, minutes: float) -> str:
    """The demo again with ``minutes`` per model, on the same corpus (``--dataset`` unless it is the default)."""
    named = f" --dataset {dataset}" if dataset != config_mod.DATASETS[0] else ""
    return f"attnlab demo{named} --max-minutes {minutes:.1f}"


def _sentence(tr) -> str:
    """The sentence whose map the demo shows: the notes' example where its table applies, else the pair's first."""
    pair = pair_of(tr.cfg.data)
    return pair.notes_example or pair.examples[0][0]


def attention_report(tr, sentence: str):
    """What the demo shows of ``sentence`` on ``tr``: its :class:`~attnlab.maps.AttentionResult` and the
    :class:`~attnlab.analysis.explain.looks_and_depends.DependsReport` beside it — the one alignment verdict
    (``explain``, ``doctor``, ``attention`` and the web page give the same) and the integrated-gradients row,
    with few points so that it costs little."""
    from attnlab.analysis.explain.looks_and_depends import IG_STEPS
    from attnlab.analysis.explain.looks_and_depends import run as depends_on

    result = tr.attention(sentence)
    return result, depends_on(tr, sentence, ig_steps=IG_STEPS, result=result)


def cross_attention_table(result, query: str = "previous") -> str:
    """The map every alignment verdict reads (:func:`~attnlab.evaluation.alignment.verdict_map`: the last
    layer's cross-attention, heads averaged) as a text table: rows are the generated tokens, columns the
    source tokens, and each row names the source token it looks at most. ``query``: a Bahdanau model's
    ``model.attention_query``, named in the title (its query is s(t'−1) or s(t'))."""
    maps = result.attention.get("cross")
    if maps is None:  # the decoder-only model: its one map is causal self-attention (§28)
        return "  " + _("(no cross-attention in this model)")
    w = verdict_map(maps)  # (T, S)
    src = result.src_tokens[: w.shape[1]]
    queries = result.tgt_tokens[: w.shape[0]]
    col = max(6, *(width(s) + 1 for s in src))  # terminal cells: a Chinese character takes two
    bahdanau = _("Bahdanau attention α(s_t', h_t)") if query == "current" else _("Bahdanau attention α(s_t'-1, h_t)")
    title = bahdanau if maps.shape[1] == 1 and maps.shape[0] == 1 else \
        _("cross-attention, layer {layer} of {layers}, {heads} heads averaged").format(
            layer=maps.shape[0], layers=maps.shape[0], heads=maps.shape[1])
    lines = ["  " + _("{title} for {sentence!r} (rows: output tokens, columns: source tokens)").format(
                 title=title, sentence=result.source),
             "  " + " " * 12 + "".join(rjust(s, col) for s in src) + "   " + _("looks at")]
    for q, row in zip(queries, w):
        lines.append("  " + ljust(q, 12) + "".join(f"{x:>{col}.2f}" for x in row.tolist())
                     + f"   {src[int(row.argmax())]}")
    return "\n".join(lines)
