"""`attnlab align` end to end on tiny `numbers` runs with a synthetic gold folder (no real data needed)."""

from __future__ import annotations

import json
import sys

import pytest
import torch
from matplotlib.figure import Figure

from attnlab.analysis.align import against_gold as R
from attnlab.analysis.align import extract as X
from attnlab.analysis.align import gold as G
from attnlab.analysis.align import score as S
from attnlab.cli import main
from attnlab.data import numbers
from attnlab.data.text import tokenize
from attnlab.data.vocab import Vocab
from attnlab.models import build_model
from attnlab.translator import Translator
from tests.analysis.align.test_gold import write_gold
from tests.conftest import tiny_config


@pytest.fixture()
def numbers_gold(tmp_path):
    """Six numbers pairs with monotone sure links (word i ↔ word i) and the last words possible."""
    pairs = numbers.numbers_pairs(40, seed=3)[:6]
    en = [tokenize(e) for e, _ in pairs]
    fr = [tokenize(f) for _, f in pairs]
    links = []
    for s, (e, f) in enumerate(zip(en, fr), 1):
        links += [(s, i, i, "S") for i in range(1, min(len(e), len(f)) + 1)]
        links.append((s, len(e), len(f), "P"))
    return write_gold(tmp_path / "gold", en, fr, links)


def _run_align(capsys, *args) -> tuple[int, str, str]:
    rc = main(["align", *map(str, args)])
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.mark.parametrize("kind", ["transformer", "bahdanau"])
def test_align_cli_prints_every_head_and_writes_json_and_png(tiny_runs, numbers_gold, tmp_path, capsys, kind):
    pytest.importorskip("nltk")
    run, out = tiny_runs(kind), tmp_path / "out"
    fra = tmp_path / "fra.txt"  # a tiny Tatoeba file: the IBM baseline adds --ibm-pairs of its pairs
    fra.write_text("".join(f"Go {i}.\tVa {i} !\tCC-BY 2.0\n" for i in range(10)), encoding="utf-8")
    rc, text, err = _run_align(
        capsys, run, "--gold", numbers_gold, "--ibm-pairs", 3, "--data", fra, "--save-dir", out
    )
    assert rc == 0, err
    tr = Translator.from_run(run)
    report = S.attention_scores(tr, G.read_gold(numbers_gold))
    L, H = report.shape
    assert "parliamentary" in text and "Tatoeba" in text and "<unk>" in text  # the domain note and OOV
    assert "best head:" in text and "IBM Model 2" in text and "fast_align en→fr 16.4 %" in text
    for h in range(H):
        assert f"layer {L} head {h + 1}" in text  # counted from 1
    data = json.loads((out / "align.json").read_text())
    assert (out / "align.png").stat().st_size > 0
    assert len(data["scores"]) == 2 * len(X.head_keys(L, H)) and data["sentences"] == 6
    # the CLI's figures are the library's on the same run, and "best" is the minimum over real heads
    lib = {(s.layer, s.head, s.shift): s.counts.aer for s in report.scores}
    for s in data["scores"]:
        assert s["aer"] == pytest.approx(lib[s["layer"], s["head"], s["shift"]], abs=1e-5)
        assert 0 <= s["aer"] <= 1
    heads = [s for s in data["scores"] if s["head"] is not None]
    assert data["best"]["1"]["aer"] == min(s["aer"] for s in heads if s["shift"] == 1)
    assert 0 <= data["ibm2"]["aer"] <= 1 and data["ibm2"]["tatoeba_pairs"] == 3
    # the gradient saliency row: printed, and the library's figure on the same run
    assert "gradient saliency" in text and "Ding et al. 2019" in text
    assert data["saliency"]["aer"] == pytest.approx(S.saliency_scores(tr, G.read_gold(numbers_gold)).aer, abs=1e-5)
    rc, js, _ = _run_align(capsys, run, "--gold", numbers_gold, "--no-ibm", "--no-saliency", "--json",
                           "--save-dir", out)
    assert rc == 0 and json.loads(js)["scores"] == data["scores"]
    assert "ibm2" not in json.loads(js) and "saliency" not in json.loads(js)


@pytest.mark.parametrize("kind", ["transformer", "bahdanau", pytest.param("decoder-only", marks=pytest.mark.slow)])
def test_saliency_map_is_captums_saliency_per_target_word(tiny_runs, numbers_gold, kind):
    """Row k of the map = ‖∂ log p(y_k) / ∂ e(x_j)‖ over the source pieces, normalised: Captum's Saliency (|∂f/∂x|)
    of the same teacher-forced log-probabilities, one target at a time, gives the same rows."""
    pytest.importorskip("captum")
    from captum.attr import Saliency

    from attnlab.analysis.align.saliency import saliency_map
    from attnlab.analysis.attribution import LogProb
    from attnlab.data.batching import collate
    from attnlab.models import traits

    tr = Translator.from_run(tiny_runs(kind))
    pairs, _ = G.gold_sides(tr, G.read_gold(numbers_gold), True)
    for src, tgt in pairs[:3]:
        ours = saliency_map(tr.model, (src, tgt), tr.device)  # (1, T, S)
        T = len(tgt.ids) + 1
        assert ours.shape == (1, T, len(src.ids) + 1)
        assert torch.allclose(ours.sum(-1), torch.ones(1, T), atol=1e-5)
        f = LogProb(tr.model, traits(tr.cfg.model).embeddings[0], collate([src.ids], [tgt.ids], [0]), T, tr.device)
        for k in range(T):
            g = Saliency(f).attribute(f.embedded.clone().requires_grad_(True), target=k, abs=True)  # (1, S, E)
            row = g[0].norm(dim=-1)
            assert torch.allclose(ours[0, k], row / row.sum(), atol=1e-5)


def test_align_batched_equals_one_by_one(tiny_runs, numbers_gold):
    """Padding in a batch does not change a sentence's maps (cross for the Transformer)."""
    tr = Translator.from_run(tiny_runs("transformer"))
    pairs, _ = G.gold_sides(tr, G.read_gold(numbers_gold), True)
    batched = dict(S.cross_maps(tr, pairs, batch_size=6))
    for i, pair in enumerate(pairs):
        ((_, alone),) = S.cross_maps(tr, [pair], batch_size=1)
        assert torch.allclose(batched[i], alone, atol=1e-5)
        assert batched[i].shape[-2:] == (len(pair[1].ids) + 1, len(pair[0].ids) + 1)


@pytest.mark.slow
def test_align_decoder_only_reads_its_self_attention(tiny_runs, numbers_gold):
    """A one-sequence model: target queries over source keys, cut from one padded sequence."""
    tr = Translator.from_run(tiny_runs("decoder-only"))
    pairs, _ = G.gold_sides(tr, G.read_gold(numbers_gold), True)
    batched = dict(S.cross_maps(tr, pairs, batch_size=6))
    for i, pair in enumerate(pairs):
        ((_, alone),) = S.cross_maps(tr, [pair], batch_size=1)
        assert torch.allclose(batched[i], alone, atol=1e-5)
    report = S.attention_scores(tr, G.read_gold(numbers_gold))
    assert report.kind == "self" and S.best_alignment_heads(report, top=2)[0].head is not None


def test_align_seq2seq_has_no_attention_to_read(numbers_gold):
    cfg = tiny_config("seq2seq")
    gold = G.read_gold(numbers_gold)
    tok = Vocab.build([w for s in gold.en + gold.fr for w in [tokenize(" ".join(s))]], "en")
    tr = Translator(
        build_model(cfg.model, len(tok), len(tok)), tok, tok, cfg
    )  # untrained: only its traits matter
    with pytest.raises(X.AlignError, match="no attention from target to source") as e:
        S.attention_scores(tr, gold)
    assert "\n" not in str(e.value)


def test_align_missing_gold_folder_is_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv(G.GOLD_ENV, raising=False)
    monkeypatch.delenv("ATTNLAB_DATA_DIR", raising=False)
    for extra in (["--gold", tmp_path / "nope"], []):
        rc, _, err = _run_align(capsys, tmp_path / "run", *extra)
        assert rc == 2 and err.startswith("error:") and err.count("\n") == 1 and "gold" in err


def test_align_without_nltk_is_one_line(tiny_runs, numbers_gold, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "nltk.translate", None)
    rc, _, err = _run_align(capsys, tiny_runs("transformer"), "--gold", numbers_gold, "--ibm-pairs", 0)
    assert rc == 2 and err.count("\n") == 1 and "-e '.[align]'" in err and "--no-ibm" in err


def test_best_alignment_heads_names_real_heads_best_first(tiny_runs, numbers_gold):
    report = S.attention_scores(Translator.from_run(tiny_runs("transformer")), G.read_gold(numbers_gold))
    best = S.best_alignment_heads(report, top=10)
    L, H = report.shape
    assert len(best) == L * H and all(b.head is not None for b in best)
    aers = [b.counts.aer for b in best]
    assert aers == sorted(aers) and aers[0] == report.best().counts.aer
    fig = report.figure()
    assert isinstance(fig, Figure) and len(fig.axes) == 3  # two panels and the colour bar


def test_align_cli_extraction_options_and_top_k(tiny_runs, numbers_gold, tmp_path, capsys):
    run = tiny_runs("transformer")
    args = ["--gold", numbers_gold, "--no-ibm", "--json", "--save-dir", tmp_path / "o"]
    rc, js, err = _run_align(capsys, run, *args, "--links", "grow-diag", "--null", "--threshold", 0.05, "--top-k", 2)
    assert rc == 0, err
    data = json.loads(js)
    assert data["links"] == {"method": "grow-diag", "threshold": 0.05, "null": True}
    ex = X.Extraction("grow-diag", 0.05, True)
    report = S.attention_scores(Translator.from_run(run), G.read_gold(numbers_gold), ex=ex, top_k=2)
    lib = {(s.layer, s.head, s.shift): s.counts.aer for s in report.scores}
    assert all(s["aer"] == pytest.approx(lib[s["layer"], s["head"], s["shift"]], abs=1e-5) for s in data["scores"])
    # the top-k members are the two best real heads at the best head's shift, best first
    shift = report.best().shift
    ranked = sorted(
        (s for s in report.scores if s.shift == shift and s.head is not None),
        key=lambda s: (s.counts.aer, s.layer, s.head),
    )
    assert data["top_k"]["members"] == [[s.layer, s.head] for s in ranked[:2]]
    rc, _, err = _run_align(capsys, run, *args, "--threshold", 1.5)
    assert rc == 2 and "[0, 1)" in err and err.count("\n") == 1


def test_heads_names_alignment_heads_with_gold(tiny_runs, numbers_gold, tmp_path, capsys, monkeypatch):
    monkeypatch.delenv(G.GOLD_ENV, raising=False)
    run = tiny_runs("transformer")
    base = ["heads", str(run), "--sentences", "4", "--no-importance", "--save-dir", str(tmp_path / "h")]
    assert main(base) == 0
    assert "AER vs gold" not in capsys.readouterr()[0]  # no gold named: no column
    monkeypatch.setenv(G.GOLD_ENV, str(numbers_gold))
    assert main(base) == 0
    out = capsys.readouterr()[0]
    best = S.best_alignment_heads(S.attention_scores(Translator.from_run(run), G.read_gold(numbers_gold)))[0]
    assert "AER vs gold" in out and "Alignment heads" in out
    assert f"cross (enc-dec) layer {best.layer + 1} head {best.head + 1} ({100 * best.counts.aer:.1f} %)" in out
    data = json.loads((tmp_path / "h" / "heads-sentences4-no-importance-gold.json").read_text())  # its settings
    cross = [h for h in data["heads"] if h["kind"] == "cross"]
    assert cross and all(0 <= h["align_aer"] <= 1 for h in cross)
    assert all("align_aer" not in h for h in data["heads"] if h["kind"] != "cross")


def test_adapting_learns_the_gold_text_on_a_copy_and_leaves_the_run_alone(tiny_runs, numbers_gold):
    from attnlab.analysis.align.adapt_to_gold import adapt

    run = tiny_runs("transformer")
    files = {p: p.read_bytes() for p in run.rglob("*") if p.is_file()}
    tr = Translator.from_run(run)
    before = {k: v.clone() for k, v in tr.model.state_dict().items()}
    pairs, _ = G.gold_sides(tr, G.read_gold(numbers_gold), True)
    adapted, done = adapt(tr, pairs, 4, lr=3e-3)
    assert done.epochs == 4 and done.updates >= 4 and done.nll_last < done.nll_first  # it learned the text
    assert all(torch.equal(v, tr.model.state_dict()[k]) for k, v in before.items())  # the original is untouched
    assert not all(torch.equal(v, adapted.model.state_dict()[k]) for k, v in before.items())
    assert not adapted.model.training and adapted.tgt_tok is tr.tgt_tok
    again, _ = adapt(tr, pairs, 4, lr=3e-3)  # deterministic in its seed
    assert all(torch.equal(v, again.model.state_dict()[k]) for k, v in adapted.model.state_dict().items())
    assert {p: p.read_bytes() for p in run.rglob("*") if p.is_file()} == files  # nothing written to the run
    with pytest.raises(ValueError, match="at least one epoch"):
        adapt(tr, pairs, 0)


def test_align_cli_adapt_reads_the_adapted_copy_and_keeps_the_original_figures(
    tiny_runs, numbers_gold, tmp_path, capsys
):
    from attnlab.analysis.align.adapt_to_gold import ADAPT_LR, adapt
    from attnlab.cli import align as commands_align

    run = tiny_runs("transformer")
    base = ["--gold", numbers_gold, "--no-ibm", "--no-saliency", "--save-dir", tmp_path / "o"]
    rc, text, err = _run_align(capsys, run, *base, "--adapt", 2, "--adapt-lr", 3e-3)
    assert rc == 0, err
    assert "adapted: every map below is a copy's, trained 2 epochs" in text and "as trained (before adapting)" in text
    data = json.loads((tmp_path / "o" / "align.json").read_text())
    tr = Translator.from_run(run)
    gold = G.read_gold(numbers_gold)
    original = S.attention_scores(tr, gold)
    assert data["adapted"]["epochs"] == 2 and data["adapted"]["lr"] == 3e-3
    assert data["adapted"]["as_trained"][0]["aer"] == pytest.approx(original.best(0).counts.aer, abs=1e-5)
    assert data["adapted"]["as_trained"][1]["aer"] == pytest.approx(original.overall(0).counts.aer, abs=1e-5)
    copy, _ = adapt(tr, G.gold_sides(tr, gold, True)[0], 2, lr=3e-3)  # the printed maps are the copy's
    lib = {(s.layer, s.head, s.shift): s.counts.aer for s in S.attention_scores(copy, gold).scores}
    assert all(s["aer"] == pytest.approx(lib[s["layer"], s["head"], s["shift"]], abs=1e-5) for s in data["scores"])
    rc, _, err = _run_align(capsys, run, *base, "--adapt", -1)
    assert rc == 2 and "--adapt -1" in err and err.count("\n") == 1
    parser = __import__("argparse").ArgumentParser()
    commands_align.register(parser.add_subparsers())
    assert parser.parse_args(["align", "r"]).adapt_lr == ADAPT_LR  # --help's default is the library's


def test_align_picks_a_head_on_the_trial_split_and_scores_it_on_test(tiny_runs, numbers_gold, tmp_path, capsys):
    from tests.analysis.align.test_gold import write_gold

    run = tiny_runs("transformer")
    base = ["--gold", numbers_gold, "--no-ibm", "--no-saliency", "--json", "--save-dir", tmp_path / "o"]
    rc, js, err = _run_align(capsys, run, *base)
    assert rc == 0 and "picked_on_trial" not in json.loads(js)  # no trial split: nothing claimed
    # a trial split whose links favour another reading than the test's: the head is chosen there
    pairs = numbers.numbers_pairs(40, seed=5)[:4]
    en, fr = [tokenize(e) for e, _ in pairs], [tokenize(f) for _, f in pairs]
    links = [(s, 1, len(f), "S") for s, f in enumerate(fr, 1)]  # every sentence: first English → last French
    write_gold(numbers_gold, en, fr, links, split="trial")
    rc, js, err = _run_align(capsys, run, *base)
    assert rc == 0, err
    data = json.loads(js)
    tr = Translator.from_run(run)
    trial_best = S.attention_scores(tr, G.read_gold(numbers_gold, "trial")).best()
    picked = data["picked_on_trial"]
    assert (picked["layer"], picked["head"], picked["shift"]) == (trial_best.layer, trial_best.head, trial_best.shift)
    on_test = next(s for s in data["scores"] if (s["layer"], s["head"], s["shift"]) == (picked["layer"], picked["head"], picked["shift"]))
    assert picked["aer"] == on_test["aer"]  # the trial's choice, scored on the test sentences
    rc, js, _ = _run_align(capsys, run, *base, "--split", "trial")
    assert rc == 0 and "picked_on_trial" not in json.loads(js)  # never picked on the sentences it is scored on
    (numbers_gold / "trial.en-fr.naacl").write_text("1 99 1 S\n", encoding="utf-8")  # a broken trial split says so
    rc, _, err = _run_align(capsys, run, *base)
    assert rc == 2 and "trial.en-fr.naacl:1" in err and err.count("\n") == 1


@pytest.fixture(scope="module")
def both_directions(tmp_path_factory):
    """Two tiny Transformer runs on the same 400 numbers pairs read as a fra-eng file: one English → French,
    one French → English (``data.direction``)."""
    from attnlab.training.loop import train

    root = tmp_path_factory.mktemp("both")
    fra = root / "fra.txt"
    fra.write_text("".join(f"{e}\t{f}\tCC-BY 2.0\n" for e, f in numbers.numbers_pairs(400, seed=1)), encoding="utf-8")
    runs = {}
    for direction in ("en-fr", "fr-en"):
        cfg = tiny_config("transformer", "train.max_steps=40", "data.dataset=fra-eng", f"data.data_path={fra}",
                          f"data.direction={direction}", "data.min_freq=1")
        train(cfg, root / direction, progress=False)
        runs[direction] = root / direction
    return runs


def test_align_reverse_symmetrises_the_two_runs_maps_as_ibm_models(both_directions, numbers_gold, tmp_path, capsys):
    from attnlab.analysis.align.symmetrise import score_pairs

    fwd_run, rev_run = both_directions["en-fr"], both_directions["fr-en"]
    base = ["--gold", numbers_gold, "--no-ibm", "--no-saliency", "--json", "--save-dir", tmp_path / "o"]
    rc, js, err = _run_align(capsys, fwd_run, *base, "--reverse", rev_run, "--ibm-links", "grow-diag")
    assert rc == 0, err
    both = json.loads(js)["both_ways"]
    fwd, rev = Translator.from_run(fwd_run), Translator.from_run(rev_run)
    assert (rev.src_tok.lang, rev.tgt_tok.lang) == ("fr", "en")
    probes = {json.loads(line)["sentence"] for line in (rev_run / "probes.jsonl").read_text().splitlines()}
    assert probes == {"va !", "j'ai perdu .", "il est calme .", "je suis chez moi ."}  # the notes' French, read by a French source
    gold = G.read_gold(numbers_gold)
    one = {d: R.read_one_way(t, gold) for d, t in (("f", fwd), ("r", rev))}
    L, H = S.attention_scores(fwd, gold).shape
    assert both["method"] == "grow-diag" and len(both["pairs"]) == len(X.head_keys(L, H)) ** 2
    # each run's one-way links are the single-direction report's argmax links, flipped into (en, fr) for fr→en
    for d, t in (("f", fwd), ("r", rev)):
        pairs, en_first = G.gold_sides(t, gold, True)
        for i, maps in S.cross_maps(t, pairs):
            words = X.word_matrix(X.stack_heads(maps), *pairs[i], 0)
            want = [x if en_first else {(e, f) for f, e in x} for x in X.extract_links(words, *pairs[i])]
            assert one[d].links[i] == want
    lib = score_pairs(one["f"], one["r"], gold, "grow-diag")
    assert [p["aer"] for p in both["pairs"]] == [pytest.approx(p.counts.aer, abs=1e-5) for p in lib]
    heads = [p for p in both["pairs"] if p["forward"]["head"] is not None and p["reverse"]["head"] is not None]
    assert both["best_head_pair"]["aer"] == min(p["aer"] for p in heads)
    # the order of the two runs does not matter, and the text report says what was joined and how
    rc, js2, _ = _run_align(capsys, rev_run, *base, "--reverse", fwd_run, "--ibm-links", "grow-diag")
    assert rc == 0 and json.loads(js2)["both_ways"]["pairs"] == both["pairs"]
    rc, text, _ = _run_align(capsys, fwd_run, *base[:-3], "--save-dir", tmp_path / "o", "--reverse", rev_run)
    assert rc == 0 and "both directions (en→fr" in text and "symmetrised by grow-diag-final-and" in text
    # with --teach, each run gets its own taught head, and their pair is reported (whichever run comes first)
    for first, second in ((fwd_run, rev_run), (rev_run, fwd_run)):
        rc, js, err = _run_align(capsys, first, *base, "--reverse", second, "--teach", 1)
        assert rc == 0, err
        data = json.loads(js)
        taught = data["both_ways"]["taught"]
        own = {"layer": data["taught"]["layer"], "head": data["taught"]["head"]}  # RUN's taught head
        assert taught["forward" if first == fwd_run else "reverse"] == own
        assert taught in data["both_ways"]["pairs"]
    # a run of the same direction, or a method that joins nothing, is a one-line error
    rc, _, err = _run_align(capsys, fwd_run, *base, "--reverse", fwd_run)
    assert rc == 2 and "`attnlab train ... data.direction=fr-en`" in err and err.count("\n") == 1
    rc, _, err = _run_align(capsys, fwd_run, *base, "--reverse", rev_run, "--ibm-links", "argmax")
    assert rc == 2 and "--ibm-links grow-diag-final-and" in err and err.count("\n") == 1


def _hansards_like_gold(folder):
    """Two English–French sentences of the Hansards' kind: no number words in them."""
    en = [["the", "house", "rose", "at", "noon", "."], ["mr.", "speaker", ",", "i", "agree", "."]]
    fr = [["la", "chambre", "a", "levé", "la", "séance", "."], ["monsieur", "le", "orateur", ",", "je", "suis", "d'accord", "."]]
    return write_gold(folder, en, fr, [(1, 1, 1, "S"), (1, 2, 2, "S"), (2, 1, 1, "S"), (2, 2, 3, "S")])


def test_a_numbers_run_is_refused_against_english_french_sentences(tiny_runs, tmp_path, capsys):
    """A numbers-task run was scored against the Hansards gold without a word (its AER measured nothing)."""
    gold = _hansards_like_gold(tmp_path / "gold")
    rc, _, err = _run_align(capsys, tiny_runs("transformer"), "--gold", gold, "--no-ibm", "--no-saliency",
                            "--save-dir", tmp_path / "o")
    assert rc == 2 and err.count("\n") == 1, err
    assert "trained on the numbers task" in err and "data.dataset=fra-eng" in err
    assert not (tmp_path / "o").exists()


def test_a_run_that_knows_few_of_the_golds_words_is_aligned_with_a_warning(both_directions, tmp_path, capsys):
    """A fra-eng run (here trained on number words) against sentences it mostly does not know: measured, but
    the AER is said to be about its vocabulary."""
    gold = _hansards_like_gold(tmp_path / "gold")
    rc, _, err = _run_align(capsys, both_directions["fr-en"], "--gold", gold, "--no-ibm", "--no-saliency",
                            "--json", "--save-dir", tmp_path / "o")
    assert rc == 0, err
    warnings = err.strip().splitlines()
    assert len(warnings) == 2 and all(w.startswith("warning: ") and "<unk>" in w for w in warnings), err
    assert "English words" in warnings[0] and "French words" in warnings[1]


def test_align_help_names_the_real_way_to_train_the_other_direction(capsys):
    """`align --reverse` said `--set data.direction=fr-en`, an option `train` does not have."""
    with pytest.raises(SystemExit):
        main(["align", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--set" not in text and "`attnlab train --model KIND --out RUN2 data.direction=fr-en`" in text


def test_piece_labels_mark_each_target_piece_with_its_linked_source_pieces():
    from attnlab.analysis.align.extract import Side, piece_labels

    src = Side([5, 6, 7], [0, 0, 1], [[0], [1]])  # word 0 in two pieces, word 1 in one
    tgt = Side([8, 9], [0, 1], [[0], [1]])
    m = piece_labels({(0, 1), (1, 0)}, src, tgt)  # (source group, target group)
    assert m.tolist() == [[0, 0, 1, 0], [1, 1, 0, 0], [0, 0, 0, 0]]  # rows: queries predicting pieces 0, 1; then <eos>


def test_align_teach_trains_the_picked_head_toward_the_averages_links(tiny_runs, numbers_gold, tmp_path, capsys):
    from attnlab.analysis.align.adapt_to_gold import teach

    run = tiny_runs("transformer")
    tr, gold = Translator.from_run(run), G.read_gold(numbers_gold)
    pairs, _ = G.gold_sides(tr, gold, True)
    labels = R.teaching_labels(tr, pairs, X.Extraction("grow-diag"))
    assert all(m.shape == (len(t.ids) + 1, len(s.ids) + 1) for m, (s, t) in zip(labels, pairs))
    taught, done = teach(tr, pairs, labels, 0, 1, 6, weight=5.0, lr=3e-3)
    assert done.align_last < done.align_first and done.name == "layer 1 head 2"  # the head moved toward its labels
    assert not any(torch.equal(v, taught.model.state_dict()[k]) for k, v in tr.model.state_dict().items()
                   if "cross" in k and k.endswith("weight"))
    base = ["--gold", numbers_gold, "--no-ibm", "--no-saliency", "--links", "grow-diag", "--save-dir", tmp_path / "o"]
    rc, text, err = _run_align(capsys, run, *base, "--teach", 2)
    assert rc == 0, err
    assert "taught: layer 1 head" in text and "Garg et al. 2019" in text and "Before: layer 1 head" in text
    data = json.loads((tmp_path / "o" / "align.json").read_text())
    assert data["taught"]["epochs"] == 2 and len(data["taught"]["before"]) == 2
    copy, _, before = R.teach_head(tr, gold, 2, ex=X.Extraction("grow-diag"))  # the printed maps are the copy's
    assert data["taught"]["before"][0]["aer"] == pytest.approx(before[0].counts.aer, abs=1e-5)
    lib = {(s.layer, s.head, s.shift): s.counts.aer for s in S.attention_scores(copy, gold, ex=X.Extraction("grow-diag")).scores}
    assert all(s["aer"] == pytest.approx(lib[s["layer"], s["head"], s["shift"]], abs=1e-5) for s in data["scores"])
    rc, text, err = _run_align(capsys, run, *base, "--teach", 2, "--seed", 1)  # a repeat: another batch order
    assert rc == 0, err
    assert "seed 1," in text and json.loads((tmp_path / "o" / "align.json").read_text())["taught"]["seed"] == 1
    rc, _, err = _run_align(capsys, run, *base, "--teach", -2)
    assert rc == 2 and "--teach -2" in err and err.count("\n") == 1
