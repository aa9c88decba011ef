from attnlab.data.corpus import Split
from attnlab.evaluation.evaluate import evaluate_split
from attnlab.translator import Translator


def test_each_source_is_scored_once_against_all_its_references(tiny_runs):
    tr = Translator.from_run(tiny_runs("transformer"), "last")
    ids = [tr.src_tok.encode(s) for s in ("twenty one", "three", "twenty one")]
    refs = [["vingt et un", "vingt-et-un"], ["trois"], ["vingt et un", "vingt-et-un"]]
    split = Split(src=ids, tgt=[[], [], []], src_text=["twenty one", "three", "twenty one"],
                  tgt_text=["vingt et un", "trois", "vingt-et-un"], references=refs)
    out = evaluate_split(tr, split)
    assert out["sentences"] == 2  # the repeated source (a second translation of it) is not scored twice
    assert out["sources"] == ["twenty one", "three"]
    assert out["max_references"] == 2
    assert sum(b["sentences"] for b in out["by_length"]) == 2
