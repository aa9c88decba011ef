"""`attnlab doctor` (notes §10): each rule on synthetic curves whose shape is known.

The same rules on real fra-eng runs with the bad settings are in test_doctor_real_runs.py.
"""

from __future__ import annotations

import json
import math

from attnlab.analysis.diagnose import doctor as D
from attnlab.cli import main

V = 100  # target vocabulary: ln V = 4.6 is the uniform-guess loss
LN_V = math.log(V)


def curve(losses, every=25, start=25):
    return [{"event": "train", "step": start + every * i, "loss": x} for i, x in enumerate(losses)]


def healthy_losses(n=20, start=LN_V, floor=0.35):
    """A fast drop from ``start``, then flattening at ``floor × start`` (what a working lr draws)."""
    return [start * (floor + (1 - floor) * math.exp(-i / 3)) for i in range(n)]


def validations(losses, bleus=None, every=125):
    bleus = bleus or [20.0] * len(losses)
    return [
        {"event": "valid", "step": every * (i + 1), "valid_loss": x, "valid_bleu": b}
        for i, (x, b) in enumerate(zip(losses, bleus))
    ]


CONVERGED = validations([2.2, 1.9, 1.80, 1.79], [20.0, 24.0, 25.0, 25.3])  # flat at the end


def detected(report):
    return {f.symptom for f in report.detected}


# ------------------------------------------------------------------------------------------- healthy


def test_converged_curve_with_enough_evidence_is_healthy():
    r = D.diagnose_curves(curve(healthy_losses()), CONVERGED, V, lr=1e-3)
    assert r.healthy and not r.missing, r.format()
    assert "verdict: healthy" in r.format()


def test_too_little_evidence_is_never_healthy():
    # the case: a 27-step run at BLEU 0.7, one log event, one validation
    r = D.diagnose_curves(curve([5.1], start=27), validations([4.9], [0.7], every=27), V, lr=1e-3)
    assert not r.detected and not r.healthy
    text = " ".join(r.missing)
    assert "only 27 updates" in text and "only 1 logged training losses" in text
    assert "only 1 validation(s)" in text
    assert "BLEU 0.7 is too low to call" in text
    assert r.verdict().startswith("not enough evidence")
    # a healthy-looking curve whose model does not translate yet: still not "healthy"
    r = D.diagnose_curves(curve(healthy_losses()), validations([2.2, 1.9, 1.8, 1.79], [1, 2, 2.5, 2.6]), V)
    assert not r.detected and not r.healthy and "too low to call" in r.verdict()


# --------------------------------------------------------------------------------------- lr too high


def test_untrained_first_loss_above_uniform_does_not_fire():
    # large initial logits: the untrained model scores 3 × ln V, then falls as a working lr does
    losses = healthy_losses(start=3 * LN_V, floor=0.12)
    r = D.diagnose_curves(curve(losses), CONVERGED, V, lr=1e-3)
    assert losses[0] > D.UNIFORM_FACTOR * LN_V
    assert not r.finding("lr_too_high").detected, r.format()


def test_rise_above_best_is_lr_too_high():
    losses = healthy_losses()
    losses[10:] = [x + 1.5 for x in losses[10:]]  # climbs back 1.5 nats = 33 % of L0 and stays
    f = D.diagnose_curves(curve(losses), [], V, lr=1e-2).finding("lr_too_high")
    assert f.detected and f.numbers["max_rise_share"] > D.RISE_SHARE
    assert f.suggestion.startswith("train.lr=0.00333")  # ÷3: it never got worse than where it started


def test_divergence_above_the_start_is_lr_too_high_and_divides_by_ten():
    losses = [LN_V, 3.0, 2.5, 9.0, 40.0, 120.0, 80.0, 60.0, 30.0, 20.0]
    f = D.diagnose_curves(curve(losses), [], V, lr=1.0).finding("lr_too_high")
    assert f.detected and f.suggestion.startswith("train.lr=0.1 ")
    assert any("confidently wrong" in e for e in f.evidence)


def test_oscillation_is_lr_too_high():
    losses = [3.0 + (0.6 if i % 2 else -0.6) for i in range(20)]  # zig-zag around 3, no trend
    f = D.diagnose_curves(curve(losses), [], V, lr=1e-3).finding("lr_too_high")
    assert f.detected and f.numbers["oscillation_share"] > D.OSCILLATION_SHARE


def test_batch_noise_of_a_good_run_is_not_oscillation():
    # ±0.15 nats of length-bucket noise on a falling curve, every event (the 15-minute preset run's
    # consecutive losses differ by 0.18 nats (std), 2 % of its start; lr=1.0: 82 %)
    losses = [x + (0.15 if i % 2 else -0.15) for i, x in enumerate(healthy_losses(30, start=8.0, floor=0.2))]
    r = D.diagnose_curves(curve(losses), CONVERGED, 3000, lr=1e-3)
    assert not r.finding("lr_too_high").detected, r.format()


def test_nonfinite_loss_is_lr_too_high():
    losses = healthy_losses()
    losses[5] = float("nan")
    f = D.diagnose_curves(curve(losses), [], V).finding("lr_too_high")
    assert f.detected and f.numbers["nonfinite_events"] == 1


# ---------------------------------------------------------------------------------------- lr too low


def test_slow_steady_fall_is_lr_too_low_and_raises_it():
    # the sweep's lr=1e-5 trial: 8.67 → 8.06, a straight slow fall (V = 8000 BPE)
    losses = [8.67 - 0.61 * i / 15 for i in range(16)]
    valid = validations([8.6, 8.4, 8.3, 8.1], [0.0] * 4)
    r = D.diagnose_curves(curve(losses), valid, 8000, lr=1e-5)
    assert "lr_too_low" in detected(r) and "lr_too_high" not in detected(r)
    assert r.finding("lr_too_low").suggestion.startswith("train.lr=0.0001 ")  # up, never "lower it further"
    assert r.verdict() == "lr too low"  # still improving and no attention: consequences, not counted
    assert r.finding("undertrained").caused_by == "lr_too_low"


def test_a_flat_curve_is_not_a_slow_fall():
    f = D.diagnose_curves(curve([4.6] * 20), [], V, lr=1e-4).finding("lr_too_low")
    assert not f.detected  # raising the lr is not what a flat curve supports


def test_too_few_updates_is_not_judged_slow():
    losses = [8.6 - 0.01 * i for i in range(8)]  # 8 events, 200 updates needed: here 25..200
    f = D.diagnose_curves(curve(losses, every=20, start=20), [], 8000, lr=1e-5).finding("lr_too_low")
    assert not f.detected and not f.checked


# -------------------------------------------------------------------------------------- undertrained


def test_still_improving_is_undertrained_with_the_budget_in_the_advice():
    valid = validations([2.54, 1.79, 1.55, 1.44], [13.6, 30.2, 41.4, 45.6])  # the 15-minute run
    r = D.diagnose_curves(curve(healthy_losses()), valid, V, lr=1e-3, budget={"max_minutes": 15.0})
    f = r.finding("undertrained")
    assert f.detected and "--max-minutes 30" in f.suggestion
    assert r.verdict().startswith("undertrained: no wrong setting seen; train longer")
    open_ended = D.diagnose_curves(curve(healthy_losses()), valid, V, budget={}).finding("undertrained")
    assert "use the budget schedule" in open_ended.suggestion


def test_undertrained_early_run_does_not_clear_the_settings():
    valid = validations([4.0, 3.0], [1.0, 3.0])  # improving, but BLEU 3: too early
    r = D.diagnose_curves(curve(healthy_losses()), valid, V, budget={"max_minutes": 1.0})
    assert detected(r) == {"undertrained"} and "too early to judge the settings" in r.verdict()


def test_converged_validations_are_not_undertrained():
    f = D.diagnose_curves(curve(healthy_losses()), CONVERGED, V).finding("undertrained")
    assert f.checked and not f.detected


# --------------------------------------------------------------------------------------- overfitting


def test_valid_rising_while_train_falls_is_overfitting():
    train = curve([3.0 - 0.1 * i for i in range(20)])
    valid = validations([2.9, 2.6, 2.8, 3.1])
    f = D.diagnose_curves(train, valid, V).finding("overfitting")
    assert f.detected and f.numbers["valid_loss_min_step"] == 250
    assert "best" in f.suggestion


def test_valid_rising_with_train_rising_is_not_overfitting():
    train = curve([3.0 - 0.1 * i for i in range(10)] + [2.1 + 0.1 * i for i in range(10)])
    f = D.diagnose_curves(train, validations([2.9, 2.6, 2.8, 3.1]), V).finding("overfitting")
    assert not f.detected


def test_a_gap_alone_is_not_overfitting():
    train = curve([2.0 - 0.05 * i for i in range(20)])  # ends at 1.05
    f = D.diagnose_curves(train, validations([3.0, 2.8, 2.6, 2.5]), V).finding("overfitting")
    assert not f.detected  # the validation loss still falls: no sign yet that more training hurts


# ------------------------------------------------------------------------------------------ num_steps


def _stats(pairs, cut, test_cut=0, num_steps=32):
    return {
        "num_steps": num_steps,
        "splits": {
            "train": {"pairs": pairs, "truncated": cut},
            "test": {"pairs": 5000, "truncated": test_cut},
        },
        "length_histogram": {"src": [0] + [50] * 15, "tgt": [0] + [40] * 20},
    }


LONG_POOR = {
    "split": "test",
    "by_length": [
        {"bucket": "1-4", "lo": 1, "hi": 4, "sentences": 300, "bleu": 43.0},
        {"bucket": "5-8", "lo": 5, "hi": 8, "sentences": 2280, "bleu": 44.1},
        {"bucket": "17+", "lo": 17, "hi": 10**9, "sentences": 34, "bleu": 14.3},
    ],
}


def test_a_few_cut_pairs_and_harder_long_sentences_are_not_num_steps():
    # the 12-minute run: 71 of 158,924 pairs cut, 2 test pairs, 17+ bucket at a third of the best
    r = D.diagnose_curves(curve(healthy_losses()), CONVERGED, V, _stats(158_924, 71, 2), LONG_POOR)
    assert not r.finding("num_steps_too_small").detected
    assert any("harder, not truncated" in n for n in r.notes)


def test_a_material_share_of_cut_pairs_is_num_steps():
    f = D.diagnose_curves(curve(healthy_losses()), [], V, _stats(1000, 80, num_steps=10)).finding(
        "num_steps_too_small"
    )
    assert f.detected and f.suggestion.startswith("data.num_steps=21")  # 99 % of 20-token targets + <eos>
    assert D.suggest_num_steps([0, 10, 10]) == 3


def test_poor_long_sentences_that_were_cut_are_num_steps():
    f = D.diagnose_curves(curve(healthy_losses()), [], V, _stats(100_000, 500, 30), LONG_POOR).finding(
        "num_steps_too_small"
    )
    assert f.detected and f.numbers["long_cut_share"] >= D.LONG_CUT_SHARE  # 30 of 34 long sentences


def test_the_long_sentence_evidence_names_the_unit_evaluate_counted():
    """A character-counted source's buckets (eval-test.json's length_unit) are read as characters, not words;
    a report without the key (written before evaluate recorded it) stays in words."""
    chars = {**LONG_POOR, "length_unit": "characters"}
    f = D.diagnose_curves(curve(healthy_losses()), [], V, _stats(100_000, 500, 30), chars).finding(
        "num_steps_too_small")
    assert any("BLEU falls with source length: 14.3 on 17+ characters (34 sentences)" in e for e in f.evidence)
    assert not any("words" in e for e in f.evidence if "BLEU falls" in e)
    f = D.diagnose_curves(curve(healthy_losses()), [], V, _stats(100_000, 500, 30), LONG_POOR).finding(
        "num_steps_too_small")
    assert any("on 17+ words (34 sentences)" in e for e in f.evidence)


def test_small_buckets_are_ignored():
    ev = {
        "by_length": [
            LONG_POOR["by_length"][0],
            {"bucket": "17+", "lo": 17, "hi": 10**9, "sentences": 3, "bleu": 0},
        ]
    }
    f = D.diagnose_curves(curve(healthy_losses()), [], V, _stats(1000, 0, 3), ev).finding(
        "num_steps_too_small"
    )
    assert not f.detected and "longest_bucket" not in f.numbers


# ------------------------------------------------------------------------------------------ attention


SRC = ["i'm", "home", ".", "<eos>"]
OUT = ["je", "suis", "chez", "moi", ".", "<eos>"]
ALIGNED = [[0.7, 0.1, 0.1, 0.1], [0.7, 0.1, 0.1, 0.1], [0.1, 0.7, 0.1, 0.1], [0.1, 0.7, 0.1, 0.1],
           [0.1, 0.1, 0.7, 0.1], [0.1, 0.1, 0.1, 0.7]]  # je, suis → i'm; chez, moi → home (the notes' table)
ON_THE_STOP = [[0.1, 0.1, 0.7, 0.1], *ALIGNED[1:]]  # je looks at "."


def _probes(rows_by_step, sentence="i'm home ."):
    # as read_probes gives them: grouped by sentence, the records themselves without it
    rec = lambda step, rows: {"step": step, "src_tokens": SRC, "tgt_tokens": OUT,  # noqa: E731
                              "translation": "je suis chez moi .", "attention": {"cross": [rows]}}
    return {"sentences": [{"sentence": sentence, "steps": [rec(s, r) for s, r in rows_by_step.items()]}]}


def test_je_on_the_full_stop_is_attention_not_formed_with_the_verdict_every_command_prints():
    import torch

    from attnlab.evaluation.alignment import check_alignment

    probes = _probes({0: [[0.25] * 4] * 6, 500: ON_THE_STOP})
    f = D.diagnose_curves(curve(healthy_losses()), CONVERGED, V, probes=probes).finding("attention_not_formed")
    said = check_alignment("i'm home .", SRC, OUT, torch.tensor(ON_THE_STOP)).summary()
    assert f.detected and said in f.evidence[0] and "je → ." in f.evidence[0] and "step 0" in f.evidence[1]
    assert f.numbers["alignment"]["formed"] is False


def test_a_map_that_aligns_as_the_notes_table_is_formed():
    r = D.diagnose_curves(curve(healthy_losses()), CONVERGED, V, probes=_probes({0: ON_THE_STOP, 500: ALIGNED}))
    f = r.finding("attention_not_formed")
    assert f.checked and not f.detected and r.healthy and "has formed: 6 of 6" in f.evidence[0]


def test_movement_is_no_longer_the_bar():
    """Rows that move from step to step by a total variation of 0.6 (the old bar was 0.2) but put every judged
    word on <eos> or "." have not formed; rows that sit still on the table's words would not move, and have."""
    moving = [[0.05, 0.05, 0.1, 0.8], [0.05, 0.05, 0.8, 0.1], [0.05, 0.05, 0.1, 0.8], [0.05, 0.05, 0.8, 0.1],
              [0.05, 0.05, 0.1, 0.8], [0.05, 0.05, 0.8, 0.1]]
    f = D.diagnose_curves(curve(healthy_losses()), CONVERGED, V, probes=_probes({500: moving})).finding(
        "attention_not_formed")
    assert f.detected
    assert not hasattr(D, "STATIC_TV") and not hasattr(D, "attention_shape")  # the movement average is gone


def test_the_probe_at_the_best_checkpoint_is_judged_not_the_last():
    probes = _probes({0: ON_THE_STOP, 250: ALIGNED, 500: ON_THE_STOP})
    best = D.diagnose_curves(curve(healthy_losses()), CONVERGED, V, probes=probes, best_step=250)
    assert not best.finding("attention_not_formed").detected
    last = D.diagnose_curves(curve(healthy_losses()), CONVERGED, V, probes=probes)
    assert last.finding("attention_not_formed").detected  # no best step known: the last record


def test_other_probes_are_not_judged():
    r = D.diagnose_curves(curve(healthy_losses()), CONVERGED, V, probes=_probes({500: ON_THE_STOP}, "i lost ."))
    assert not r.finding("attention_not_formed").checked


def test_a_french_to_english_run_is_judged_on_the_french_example():
    src, out = ["je", "suis", "chez", "moi", ".", "<eos>"], ["i'm", "home", ".", "<eos>"]
    rows = [[0.1, 0.6, 0.1, 0.1, 0.05, 0.05], [0.05, 0.05, 0.1, 0.6, 0.1, 0.1],
            [0.05, 0.05, 0.05, 0.05, 0.75, 0.05], [0.05, 0.05, 0.05, 0.05, 0.05, 0.75]]
    rec = {"step": 500, "src_tokens": src, "tgt_tokens": out,
           "translation": "i'm home .", "attention": {"cross": [rows]}}
    probes = {"sentences": [{"sentence": "je suis chez moi .", "steps": [rec]}]}
    from attnlab.config import DataConfig
    from attnlab.data.pairs import pair_of

    pair = pair_of(DataConfig(direction="fr-en"))
    f = D.diagnose_curves(curve(healthy_losses()), CONVERGED, V, probes=probes, pair=pair).finding(
        "attention_not_formed")
    assert f.checked and not f.detected


def test_the_notes_check_does_not_apply_to_another_pair_and_says_so():
    """An English→Chinese run: the §1 check is neither missing nor "not enough evidence", it does not apply."""
    from attnlab.config import DataConfig
    from attnlab.data.pairs import pair_of
    from attnlab.i18n import using

    pair = pair_of(DataConfig(dataset="cmn-eng"))
    r = D.diagnose_curves(curve(healthy_losses()), CONVERGED, V, pair=pair)
    f = r.finding("attention_not_formed")
    assert not f.applies and not f.detected
    text = r.format()
    line = next(x for x in text.splitlines() if "§1" in x)
    assert line.lstrip().startswith("–") and "not enough evidence" not in line
    assert f"this run is {pair.title()}, so that check does not apply" in line and "English→French" in line
    assert not any("probe" in n for n in r.notes)  # no "no probe … not checked" note
    assert r.to_json()["findings"][-1]["applies"] is False
    with using("zh"):  # the evidence is worded in the language the doctor ran in
        zh = D.diagnose_curves(curve(healthy_losses()), CONVERGED, V, pair=pair).format()
    assert "does not apply" not in zh and "不适用" in zh


def test_no_probes_is_a_note_not_a_verdict():
    r = D.diagnose_curves(curve(healthy_losses()), CONVERGED, V)
    assert not r.finding("attention_not_formed").checked and any("probes" in n for n in r.notes)


# ---------------------------------------------------------------------------------------------- CLI


def test_unreadable_run_exits_2(tmp_path, capsys):
    assert main(["doctor", str(tmp_path / "missing")]) == 2
    assert "error:" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert main(["doctor", str(tmp_path / "empty")]) == 2
    assert "no config.toml" in capsys.readouterr().err


def test_json_carries_the_verdict_and_missing_evidence(tmp_path, capsys):
    from attnlab import config as C

    run = tmp_path / "run"
    run.mkdir()
    (run / "config.toml").write_text(C.dumps_toml(C.preset("transformer")))
    lines = curve([5.1]) + validations([4.9], [0.7])
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    assert main(["doctor", str(run), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["healthy"] is False and out["verdict"].startswith("not enough evidence")
    assert any("too low to call" in m for m in out["missing_evidence"])


# ------------------------------------------------------------------------------ three answers, with evidence


def test_six_logged_losses_is_not_enough_evidence_never_a_tick():
    # the bad-lr run (lr 0.05, num_steps 5): six logged losses, no climb among them
    r = D.diagnose_curves(curve([6.0, 5.0, 4.6, 4.4, 4.3, 4.25]), [], V, lr=0.05)
    f = r.finding("lr_too_high")
    assert not f.detected and not f.checked and (f.need, f.have) == ("8 logged training losses", "6")
    text = r.format()
    assert "✓ no sign of oscillating" not in text
    assert "learning rate too high): not enough evidence: need 8 logged training losses, have 6" in text
    assert "symptom above 15%" in text  # the numbers it compared are still shown
    # a climb seen on six losses is still seen
    climbing = D.diagnose_curves(curve([6.0, 4.0, 3.5, 6.5, 7.0, 7.5]), [], V, lr=0.05).finding("lr_too_high")
    assert climbing.detected


def test_every_tick_shows_its_numbers_and_every_question_mark_its_need():
    r = D.diagnose_curves(curve(healthy_losses(n=40, floor=0.35), every=25), CONVERGED, V, lr=1e-3,
                          data_stats={"num_steps": 10, "splits": {"train": {"pairs": 1000, "truncated": 3}}})
    answers = {f.symptom: ("✗" if f.detected else "✓" if f.checked else "?") for f in r.findings}
    assert answers == {"lr_too_high": "✓", "lr_too_low": "✓", "undertrained": "✓", "overfitting": "✓",
                       "num_steps_too_small": "✓", "attention_not_formed": "?"}, r.format()
    for f in r.findings:
        if f.checked:
            assert f.evidence and any(ch.isdigit() for ch in f.evidence[-1]), f
        else:
            assert f.need and f.have, f
    assert "3 of 1,000 training pairs (0.3%) were cut to num_steps - 1 = 9 tokens (symptom above 2%)" in r.format()
    assert "need a probe of “i'm home .”" in r.format()


def test_a_translation_without_the_tables_words_is_not_enough_evidence():
    src, out = ["i'm", "home", ".", "<eos>"], ["je", "suis", ".", "<eos>"]
    rows = [[0.7, 0.1, 0.1, 0.1], [0.7, 0.1, 0.1, 0.1], [0.1, 0.1, 0.7, 0.1], [0.1, 0.1, 0.1, 0.7]]
    rec = {"step": 500, "src_tokens": src, "tgt_tokens": out, "translation": "je suis .",
           "attention": {"cross": [rows]}}
    probes = {"sentences": [{"sentence": "i'm home .", "steps": [rec]}]}
    f = D.diagnose_curves(curve(healthy_losses()), CONVERGED, V, probes=probes).finding("attention_not_formed")
    assert not f.detected and not f.checked and f.need == "the rows chez/moi in the translation"
    assert "can't judge: the translation has no chez/moi" in f.evidence[0]
