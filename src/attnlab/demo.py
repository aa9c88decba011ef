"""`attnlab demo`: the README's main job — train a Bahdanau model and a Transformer briefly,
translate the notes' example sentences, score them, and draw their attention maps.

Uses fra-eng when it can be found or fetched, otherwise the offline `numbers` task (and says so).
"""

from __future__ import annotations

import shutil
from pathlib import Path

from attnlab import config as config_mod
from attnlab.data import corpus
from attnlab.errors import AttnlabError

MARKER = ".attnlab-demo"

# Settings chosen for a short CPU budget (see bench/RESULTS.md for the measurements behind them).
DEMO_OVERRIDES = {
    "bahdanau": ["train.eval_every=0", "train.save_every=0", "train.log_every=10"],
    "transformer": ["train.eval_every=0", "train.save_every=0", "train.log_every=10"],
}

NUMBERS_EXAMPLES = ("twenty-one", "three hundred and five", "one thousand two hundred")


def _dataset(data: str | None) -> tuple[str, str | None]:
    try:
        path = corpus.locate_fra_eng(data)
        return "fra-eng", str(path)
    except AttnlabError as e:
        print(f"fra-eng is not available ({e}); using the offline `numbers` task instead")
        return "numbers", None


def run_demo(out: Path, minutes: float = 2.0, data: str | None = None, threads: int = 0) -> int:
    from attnlab.evaluation.evaluate import notes_examples
    from attnlab.training.loop import train
    from attnlab.translator import Translator

    dataset, path = _dataset(data)
    if out.exists() and any(out.iterdir()) and not (out / MARKER).exists():
        raise AttnlabError(f"{out} exists and is not a demo folder; choose another --out")
    out.mkdir(parents=True, exist_ok=True)
    (out / MARKER).write_text("made by `attnlab demo`; rerunning the demo replaces this folder's runs\n")
    print(f"attnlab demo: dataset {dataset}{f' ({path})' if path else ''}, {minutes:g} min per model, out {out}")
    prepared = None
    translators = {}
    for kind in ("bahdanau", "transformer"):
        run = out / kind
        if run.exists():
            shutil.rmtree(run)
        cfg = config_mod.apply_overrides(config_mod.preset(kind), [
            f"data.dataset={dataset}", *( [f"data.data_path={path}"] if path else []),
            f"train.max_minutes={minutes}", f"train.threads={threads}", *DEMO_OVERRIDES[kind]])
        if prepared is None:
            prepared = corpus.prepare(cfg.data)
        print(f"\n== training {kind} for {minutes:g} minutes ==")
        res = train(cfg, run, prepared=prepared)
        v = res.last_valid
        print(f"{kind}: {res.step} steps, {res.tokens_per_s:,.0f} target tokens/s, valid BLEU "
              f"{v.get('valid_bleu', float('nan')):.1f}")
        translators[kind] = Translator.from_run(run, which="last")

    sentences = [s for s, _ in ((x, None) for x in NUMBERS_EXAMPLES)] if dataset == "numbers" else None
    for kind, tr in translators.items():
        print(f"\n== {kind}: the notes' examples ==")
        if sentences is None:
            for row in notes_examples(tr):
                print(f"  {row['source']:<14} => {row['translation']:<26} D2L BLEU {row['d2l_bleu']:.3f}"
                      f"   (reference: {row['reference']})")
        else:
            for s, t in zip(sentences, tr.translate_text(list(sentences))):
                print(f"  {s:<26} => {t}")
        try:
            from attnlab.inspection.attention_maps import draw_attention
        except ImportError:  # the inspection package is optional at this stage
            continue
        sentence = "i'm home ." if sentences is None else sentences[0]
        paths = draw_attention(tr, sentence, out / kind / "attention")
        for p in paths:
            print(f"  wrote {p}")
    print(f"\nruns are in {out}; try `attnlab translate {out / 'transformer'} \"i'm home .\"`")
    return 0
