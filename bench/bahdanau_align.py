"""Does Bahdanau attention align on the notes' example? Fixed update counts, design variants, seeds.

    python bench/bahdanau_align.py --setting slow --variant d2l,post --seeds 1,2,3
    python bench/bahdanau_align.py --setting quota38 --variant post --seeds 1 --set data.max_pairs=80000
    python bench/bahdanau_align.py --report            # the table of every result recorded so far

The notes' table (§1–2): in the cross-attention of ``i'm home .`` → ``je suis chez moi .`` the rows
(output tokens) je and suis look at ``i'm``, chez and moi at ``home`` (argmax of each row; rows = queries,
columns = keys). Each run trains the demo's Bahdanau model (``attnlab demo``: the Bahdanau preset sized by
a tier of training/sizing.py, the demo's own overrides) for a FIXED number of updates (the schedule planned
on them), so that a result does not depend on how busy the machine was; the settings are the update counts
the demo's 1.5 minutes bought (docs/experiments/bahdanau-alignment.md). Nothing here supervises attention:
the probe sentence is only read after training.

Per run it records (one JSON line in ``--results``):

- ``free``: the map the demo shows, over the model's own greedy translation, and whether it aligns: the one
  verdict every command gives (evaluation/alignment.py: each judged row on the notes' table's word), and
  here also at least one row on each of ``i'm`` and ``home`` (a translation without the home phrase is no pass);
- ``forced``: the map over the notes' reference ``je suis chez moi .`` (teacher-forced), the same verdict;
- the notes' four sentences right (the demo's ``ACCEPTED``), greedy test BLEU on the first ``--test-sentences``
  distinct test sources (every length: the split is by a hash of the source), validation loss, the updates.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from _fixed_updates import add_common_args, run_all, whole_test_split  # noqa: E402

from attnlab import config as C  # noqa: E402
from attnlab.data import corpus  # noqa: E402
from attnlab.data.batching import collate  # noqa: E402
from attnlab.demo import DEMO_OVERRIDES  # noqa: E402
from attnlab.evaluation.alignment import check_alignment, check_result  # noqa: E402
from attnlab.evaluation.evaluate import evaluate_split, is_right, notes_examples  # noqa: E402
from attnlab.training.loop import train  # noqa: E402
from attnlab.translator import Translator, teacher_forced  # noqa: E402

SENTENCE, REFERENCE = "i'm home .", "je suis chez moi ."

#: The demo's Bahdanau model at 1.5 minutes, as update counts (docs/experiments/bahdanau-alignment.md):
#: ``native``: this 2-core Xeon (probe ~420 GFLOP/s, compute ~630 → the small tier), 1,746 updates;
#: ``slow``: ``slow_machine.sh 0.14`` here, probe ~64-69 GFLOP/s (tiny tier, the demo's d=128), 383 updates;
#: ``epyc``: the issue's check machine (probe ~180, tiny tier, d=192), 2,190 updates;
#: ``quota38``: ``slow_machine.sh 0.38`` on this Xeon (probe ~143-181, tiny tier, d=192), 1,024 updates.
SETTINGS = {
    "native": ("train.size=small", "train.max_steps=1746"),
    "slow": ("train.size=tiny", "model.num_hiddens=128", "model.embed_size=128", "train.max_steps=383"),
    "epyc": ("train.size=tiny", "train.max_steps=2190"),
    "quota38": ("train.size=tiny", "train.max_steps=1024"),
}

#: Design options (models/gru.py, class Bahdanau), combined with "+" into a variant: "post+bi".
#: ``d2l`` is the design as D2L §10.4 writes it (the query s(t'-1)); ``post`` queries with the state after
#: the step (Luong et al. 2015, ``model.attention_query=current``, the preset's since this study). Both are
#: named explicitly, so a variant means the same design whatever the preset says. The other variants of the write-up
#: (source embeddings in the keys or values, the decoder's first state, input feeding, location-aware
#: scores, a backward GRU that starts from the forward state) were measured at commit 7995f71, whose
#: copy of this script names them; they did not earn a place in the model.
OPTIONS = {
    "d2l": ("model.attention_query=previous",),
    "post": ("model.attention_query=current",),
    "bi": ("model.bidirectional=true",),
}


def variant_overrides(variant: str) -> list[str]:
    """The overrides of a variant name such as ``post+bi`` (an unknown option is an error)."""
    out = []
    for name in variant.split("+"):
        if name not in OPTIONS:
            raise SystemExit(f"unknown design option {name!r} in {variant!r}; options: {', '.join(OPTIONS)}")
        out += OPTIONS[name]
    return out


def row_argmax(weights, src_tokens: list[str], out_tokens: list[str]) -> list[tuple[str, str]]:
    """``weights (T, S)`` → ``[(output token, the source token its row weighs most)]``."""
    return [(q, src_tokens[int(row.argmax())]) for q, row in zip(out_tokens, weights)]


def aligned(check) -> bool:
    """The verdict (``check_alignment``) formed, with at least one judged row on each of i'm and home."""
    sides = {e for r in check.rows if r.judged for e in r.expected}
    return check.formed is True and sides == {"i'm", "home"}


def forced_map(tr: Translator):
    """The cross-attention over the notes' reference translation, ``(T, S)``, and its row labels."""
    src = tr.encode_source(SENTENCE)[0]
    tgt = tr.tgt_tok.encode(REFERENCE)
    out = teacher_forced(tr.model, collate([src], [tgt]), tr.device)
    w = out.attention["cross"][0, 0, 0].float().cpu()  # (T + 1, S + 1): every output, <eos> included
    labels = [tr.tgt_tok.id_to_token(i) for i in tgt] + ["<eos>"]
    return w, labels, [tr.src_tok.id_to_token(i) for i in src] + ["<eos>"]


def measure(tr: Translator, test, test_sentences: int) -> dict:
    res = tr.attention(SENTENCE)
    w = res.attention["cross"][0, 0]  # (T, S)
    free = row_argmax(w, res.src_tokens, res.tgt_tokens)
    fw, flabels, fsrc = forced_map(tr)
    forced = row_argmax(fw, fsrc, flabels)
    examples = notes_examples(tr)
    scores = evaluate_split(tr, test, beam_size=1, max_sentences=test_sentences)
    verdict = check_result(res)
    return {"translation": res.translation, "free": free, "free_ok": aligned(verdict),
            "free_weights": [[round(x, 3) for x in r] for r in w.tolist()],
            "forced": forced, "forced_ok": aligned(check_alignment(SENTENCE, fsrc, flabels, fw)),
            "agree": f"{verdict.agree}/{verdict.judged}",
            "notes_right": sum(is_right(e["source"], e["translation"]) for e in examples),
            "notes": {e["source"]: e["translation"] for e in examples},
            "test_bleu": scores["bleu"], "test_chrf": scores["chrf"], "test_sentences": scores["sentences"]}


def run_one(setting: str, variant: str, seed: int, extra: list[str], out: Path, cache: dict,
            test_sentences: int, data: str) -> dict:
    overrides = [f"data.data_path={data}", "train.max_minutes=0", "train.threads=1", f"train.seed={seed}",
                 *DEMO_OVERRIDES, *SETTINGS[setting], *variant_overrides(variant), *extra]
    explicit = frozenset(o.split("=", 1)[0] for o in overrides)  # keys set here win over the size tier
    cfg = C.apply_overrides(C.preset("bahdanau"), overrides)
    tag = "-".join([setting, variant, *[e.replace("=", "_").replace("/", "_") for e in extra], f"s{seed}"])
    run = out / tag
    key = (cfg.data.tokenizer, cfg.data.min_freq, cfg.data.max_pairs, cfg.train.size)
    t0 = time.time()
    res = train(cfg, run, progress=False, prepared=cache.get(key), explicit=explicit)
    train_s = time.time() - t0
    tr = Translator.from_run(run, which="last")  # the demo shows the last checkpoint
    if key not in cache:
        cache[key] = corpus.prepare(tr.cfg.data, tokenizers=(tr.src_tok, tr.tgt_tok))
    test = whole_test_split(cache, key, tr)
    return {"setting": setting, "variant": variant, "extra": extra, "seed": seed, "updates": res.step,
            "train_s": round(train_s, 1), "valid_loss": res.last_valid.get("valid_loss"), "run": str(run),
            "d": tr.cfg.model.num_hiddens, "max_pairs": tr.cfg.data.max_pairs, "size": tr.cfg.train.size,
            "design": {k: getattr(tr.cfg.model, k) for k in ("attention_query", "bidirectional")},
            **measure(tr, test, test_sentences)}


def _arrows(rows: list[list[str]]) -> str:
    return " ".join(f"{q}→{k}" for q, k in rows)


def report(path: Path) -> str:
    """A markdown table of every result in ``path`` (latest line per setting × variant × extra × seed)."""
    latest: dict[tuple, dict] = {}
    for line in path.read_text().splitlines():
        r = json.loads(line)
        latest[(r["setting"], r["variant"], tuple(r["extra"]), r["seed"])] = r
    lines = ["| setting | variant | extra | seed | updates | free map OK | forced map OK | translation of i'm home . "
             "| free argmax rows | forced argmax rows | notes' right | test BLEU | rows on the table |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for (setting, variant, extra, seed), r in sorted(latest.items()):
        lines.append(f"| {setting} | {variant} | {' '.join(extra)} | {seed} | {r['updates']} | "
                     f"{'yes' if r['free_ok'] else 'no'} | {'yes' if r['forced_ok'] else 'no'} | {r['translation']} | "
                     f"{_arrows(r['free'])} | {_arrows(r['forced'])} | {r['notes_right']}/4 | "
                     f"{r['test_bleu']:.2f} | {r.get('agree', '—')} |")  # older lines recorded no verdict
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--setting", default="slow", help=f"comma-separated: {', '.join(SETTINGS)}")
    ap.add_argument("--variant", default="d2l", help=f"comma-separated; each joins options with +: {', '.join(OPTIONS)}")
    add_common_args(ap, "/tmp/bahdanau_align")
    args = ap.parse_args()
    jobs = [(setting, variant, int(seed), args.set, args.out) for setting in args.setting.split(",")
            for variant in args.variant.split(",") for seed in args.seeds.split(",")]

    def run(setting, variant, seed, extra, out, cache):
        return run_one(setting, variant, seed, extra, out, cache, args.test_sentences, args.data)

    def line(r: dict) -> str:
        return (f"{r['setting']} {r['variant']} {' '.join(r['extra'])} seed {r['seed']}: {r['updates']} updates "
                f"({r['train_s']:.0f} s) | {r['translation']} | free {_arrows(r['free'])} "
                f"{'OK' if r['free_ok'] else '--'} | forced {_arrows(r['forced'])} "
                f"{'OK' if r['forced_ok'] else '--'} | notes {r['notes_right']}/4 | "
                f"BLEU {r['test_bleu']:.2f} | rows on the table {r['agree']}")

    return run_all(args, jobs, run, line, report)


if __name__ == "__main__":
    raise SystemExit(main())
