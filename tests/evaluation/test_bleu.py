import collections
import json
import math
import random
import subprocess
import sys

import pytest
from sacrebleu.metrics import BLEU, CHRF

from attnlab.evaluation.bleu import bleu_by_length, corpus_scores, d2l_bleu, reference_streams


def d2l_book_bleu(pred_seq, label_seq, k):
    """D2L's code (d2l.ai §10.7.6), verbatim apart from the signature: the reference for d2l_bleu."""
    pred_tokens, label_tokens = pred_seq.split(" "), label_seq.split(" ")
    len_pred, len_label = len(pred_tokens), len(label_tokens)
    score = math.exp(min(0, 1 - len_label / len_pred))
    for n in range(1, k + 1):
        num_matches, label_subs = 0, collections.defaultdict(int)
        for i in range(len_label - n + 1):
            label_subs[" ".join(label_tokens[i : i + n])] += 1
        for i in range(len_pred - n + 1):
            if label_subs[" ".join(pred_tokens[i : i + n])] > 0:
                num_matches += 1
                label_subs[" ".join(pred_tokens[i : i + n])] -= 1
        score *= math.pow(num_matches / (len_pred - n + 1), math.pow(0.5, n))
    return score


def bleu(pred: str, label: str, k: int = 2) -> float:
    return d2l_bleu(pred.split(), label.split(), k)


def test_notes_examples_by_hand():
    # D2L's output for the notes' sentences: three exact, "he's calm ." -> "il est riche ."
    assert bleu("va !", "va !") == 1.0
    assert bleu("j'ai perdu .", "j'ai perdu .") == 1.0
    assert bleu("je suis chez moi .", "je suis chez moi .") == 1.0
    # unigrams il, est, . match (3/4); bigrams only "il est" (1/3); same length, no brevity penalty
    assert bleu("il est riche .", "il est calme .") == pytest.approx((3 / 4) ** 0.5 * (1 / 3) ** 0.25)
    assert round(bleu("il est riche .", "il est calme ."), 3) == 0.658


def test_brevity_penalty_clipping_and_weights_by_hand():
    # 3 predicted tokens for a 5-token label: exp(1 - 5/3); p1 = 3/3, p2 = 1/2 ("je suis")
    assert bleu("je suis .", "je suis chez moi .") == pytest.approx(math.exp(-2 / 3) * 0.5**0.25)
    # a longer prediction is not rewarded: the penalty factor is capped at 1
    assert bleu("je suis chez moi . .", "je suis chez moi .", k=1) == pytest.approx((5 / 6) ** 0.5)
    # "le" occurs once in the label, so only one of the three predicted "le" matches
    assert bleu("le le le", "le chat", k=1) == pytest.approx((1 / 3) ** 0.5)
    assert bleu("le le le", "le chat", k=2) == 0.0
    # k = 3: p1 = 3/4, p2 = 2/3, p3 = 1/2, weights 1/2, 1/4, 1/8
    assert bleu("a b c d", "a b c e", k=3) == pytest.approx(0.75**0.5 * (2 / 3) ** 0.25 * 0.5**0.125)


def test_equals_d2l_code_on_random_sentences():
    rng = random.Random(0)
    words = ["je", "suis", "chez", "moi", ".", "il", "est", "!"]
    for _ in range(500):
        k = rng.randint(1, 4)
        pred = [rng.choice(words) for _ in range(rng.randint(k, 9))]
        label = [rng.choice(words) for _ in range(rng.randint(1, 9))]
        assert d2l_bleu(pred, label, k) == pytest.approx(
            d2l_book_bleu(" ".join(pred), " ".join(label), k), abs=1e-12
        )


def test_degenerate_predictions():
    assert d2l_bleu([], ["va", "!"]) == 0.0  # D2L's code divides by zero here
    assert d2l_bleu(["va"], ["va", "!"], k=2) == 0.0  # no bigram to match
    assert d2l_bleu(["va"], ["va", "!"], k=1) == pytest.approx(math.exp(1 - 2))
    with pytest.raises(ValueError, match="k=0"):
        d2l_bleu(["va"], ["va"], k=0)


HYPS = [
    "Le chat est sur le tapis.",
    "Il fait très beau aujourd'hui !",
    "Je suis chez moi.",
    "Nous avons perdu le match hier soir.",
    "Elle lit un livre dans le jardin.",
    "Tom a oublié ses clés au bureau.",
]
REFS = [
    ["Le chat est sur le tapis.", "Un chat est assis sur le tapis.", "Le chat se trouve sur le tapis."],
    ["Il fait beau aujourd'hui !"],
    ["Je suis à la maison.", "Je suis chez moi."],
    ["Nous avons perdu la partie hier soir.", "On a perdu le match hier au soir."],
    ["Elle lit un livre au jardin."],
    [
        "Tom a oublié ses clefs au bureau.",
        "Tom a laissé ses clés au bureau.",
        "Tom oublia ses clés au bureau.",
    ],
]


def sacrebleu_cli(tmp_path, hyps, ref_streams) -> dict:
    """Run the sacrebleu command-line tool on files; missing references are empty lines."""
    (tmp_path / "hyp.txt").write_text("\n".join(hyps) + "\n", encoding="utf-8")
    ref_files = []
    for j, stream in enumerate(ref_streams):
        path = tmp_path / f"ref{j}.txt"
        path.write_text("\n".join(r if r is not None else "" for r in stream) + "\n", encoding="utf-8")
        ref_files.append(str(path))
    cmd = [
        sys.executable,
        "-m",
        "sacrebleu",
        *ref_files,
        "-i",
        str(tmp_path / "hyp.txt"),
        "-m",
        "bleu",
        "chrf",
        "-w",
        "6",
        "-f",
        "json",
    ]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=120).stdout
    return {m["name"]: m for m in json.loads(out)}


def test_multi_reference_equals_the_sacrebleu_tool_with_fixed_reference_count(tmp_path):
    refs = [r[:2] if len(r) >= 2 else r + [r[0]] for r in REFS]  # exactly two references each
    scores = corpus_scores(HYPS, refs)
    cli = sacrebleu_cli(tmp_path, HYPS, reference_streams(refs))
    assert scores["bleu"] == pytest.approx(cli["BLEU"]["score"], abs=1e-6)
    assert scores["chrf"] == pytest.approx(cli["chrF2"]["score"], abs=1e-6)
    assert scores["bleu_signature"] == cli["BLEU"]["signature"]
    assert scores["chrf_signature"] == cli["chrF2"]["signature"]
    assert scores["bleu_signature"].startswith("nrefs:2|")


def test_variable_reference_count_equals_the_sacrebleu_tool(tmp_path):
    # The tool reads a missing reference as an empty line (an empty reference); the API takes None
    # (no reference). Here no hypothesis is short enough for an empty reference to be its closest
    # length, so the scores agree; only the signature differs (nrefs:3 versus nrefs:var).
    scores = corpus_scores(HYPS, REFS)
    cli = sacrebleu_cli(tmp_path, HYPS, reference_streams(REFS))
    assert scores["bleu"] == pytest.approx(cli["BLEU"]["score"], abs=1e-6)
    assert scores["chrf"] == pytest.approx(cli["chrF2"]["score"], abs=1e-6)
    assert scores["bleu_signature"].startswith("nrefs:var|")
    assert scores["max_references"] == 3
    assert scores["references_per_sentence"] == pytest.approx(12 / 6)
    # single-reference figures: the first reference of each sentence only
    single = sacrebleu_cli(tmp_path, HYPS, [[r[0] for r in REFS]])
    assert scores["bleu_single"] == pytest.approx(single["BLEU"]["score"], abs=1e-6)
    assert scores["chrf_single"] == pytest.approx(single["chrF2"]["score"], abs=1e-6)
    assert scores["bleu_single_signature"] == single["BLEU"]["signature"]
    # more references can only help a hypothesis that matches a later one ("Je suis chez moi.")
    assert scores["bleu"] > scores["bleu_single"]


def test_missing_references_are_none_not_empty_strings():
    # A two-token hypothesis whose only reference has seven tokens must pay the brevity penalty; an
    # empty-string padding reference (length 0 is closer to 2 than 7 is) would cancel it.
    hyps, refs = (
        ["Le chat", "Il fait beau."],
        [["Le chat est sur le tapis."], ["Il fait beau.", "Beau temps."]],
    )
    assert reference_streams(refs) == [["Le chat est sur le tapis.", "Il fait beau."], [None, "Beau temps."]]
    ours = corpus_scores(hyps, refs)
    with_none = BLEU().corpus_score(hyps, [[r[0] for r in refs], [None, "Beau temps."]])
    with_empty = BLEU().corpus_score(hyps, [[r[0] for r in refs], ["", "Beau temps."]])
    assert ours["bleu"] == pytest.approx(with_none.score)
    assert ours["bleu_bp"] < 1.0 and with_empty.bp == 1.0
    assert ours["chrf"] == pytest.approx(
        CHRF().corpus_score(hyps, [[r[0] for r in refs], [None, "Beau temps."]]).score
    )


def test_perfect_and_detail_fields():
    scores = corpus_scores(HYPS, [[h] for h in HYPS])
    assert scores["bleu"] == pytest.approx(100.0) and scores["chrf"] == pytest.approx(100.0)
    assert scores["bleu_precisions"] == pytest.approx([100.0] * 4) and scores["bleu_bp"] == 1.0
    assert scores["hyp_len"] == scores["ref_len"] > 0
    assert scores["bleu_verbose"].startswith("BLEU = 100.00")
    json.dumps(scores)  # JSON-ready


def test_bad_inputs_are_refused():
    with pytest.raises(ValueError, match="no hypotheses"):
        corpus_scores([], [])
    with pytest.raises(ValueError, match="2 hypotheses but 1"):
        corpus_scores(["a", "b"], [["a"]])
    with pytest.raises(ValueError, match="sentence 1 has no reference"):
        corpus_scores(["a", "b"], [["a"], []])
    with pytest.raises(ValueError, match="is a string"):
        corpus_scores(["a"], ["a"])


def test_bleu_by_length():
    src_lens = [3, 5, 4, 7, 17, 40]
    rows = bleu_by_length(HYPS, REFS, src_lens)
    assert [(r["bucket"], r["sentences"]) for r in rows] == [
        ("1-4", 2),
        ("5-8", 2),
        ("17+", 2),
    ]  # empty 9-12, 13-16
    for row, idx in zip(rows, [[0, 2], [1, 3], [4, 5]]):
        sub = corpus_scores([HYPS[i] for i in idx], [REFS[i] for i in idx])
        assert row["bleu"] == pytest.approx(sub["bleu"]) and row["chrf"] == pytest.approx(sub["chrf"])
    custom = bleu_by_length(HYPS, REFS, src_lens, buckets=((1, 5), (6, 20)))
    assert [(r["bucket"], r["lo"], r["hi"], r["sentences"]) for r in custom] == [
        ("1-5", 1, 5, 3),
        ("6-20", 6, 20, 2),
    ]
    with pytest.raises(ValueError, match="source lengths"):
        bleu_by_length(HYPS, REFS, src_lens[:-1])
    with pytest.raises(ValueError, match="lo > hi"):
        bleu_by_length(HYPS, REFS, src_lens, buckets=((5, 1),))


# ------------------------------------------------------------------ per-sentence statistics (heads' bootstrap)

STAT_HYPS = ["le chat est sur le tapis .", "il fait beau", "je suis chez moi .", "", "elle lit un livre ."]
STAT_REFS = [["le chat est sur le tapis .", "un chat est là ."], ["il fait beau ."],
             ["je suis à la maison .", "je suis chez moi ."], ["rien ."], ["elle lit un roman ."]]


def test_sentence_stats_are_sacrebleus_own_statistics():
    """The public API gives the rows sacreBLEU's paired bootstrap sums (its private extractor, the old way)."""
    from sacrebleu.metrics import BLEU

    from attnlab.evaluation.bleu import reference_streams, sentence_stats

    for tokenize in ("13a", "zh"):
        old = BLEU(tokenize=tokenize)._extract_corpus_statistics(STAT_HYPS, reference_streams(STAT_REFS))
        assert sentence_stats(STAT_HYPS, STAT_REFS, tokenize) == [list(map(int, row)) for row in old]


def test_bleu_from_summed_stats_is_corpus_bleu_of_any_resample():
    from attnlab.evaluation.bleu import bleu_from_stats, sentence_stats

    rows = sentence_stats(STAT_HYPS, STAT_REFS)
    for picked in ([0, 1, 2, 3, 4], [1, 2, 2, 4], [3]):
        summed = [sum(rows[i][k] for i in picked) for k in range(len(rows[0]))]
        expect = corpus_scores([STAT_HYPS[i] for i in picked], [STAT_REFS[i] for i in picked])["bleu"]
        assert bleu_from_stats(summed) == pytest.approx(expect, abs=1e-9)
