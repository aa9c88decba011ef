"""English–Mandarin (``cmn-eng``) works in every command as fra-eng does, both ways (issue: "every command works
on cmn-eng as on fra-eng"): ``heads`` and ``compare`` read a Chinese side, the web page names a Chinese source's
unknown characters, ``explain`` scores a Chinese reference by characters, the demo's advice and tables fit the
corpus and its characters, the §4 walk-through lines its columns up in terminal cells, and a ``--data`` file
named ``cmn-eng.zip`` or ``cmn.txt`` is read as cmn-eng.

Two tiny Transformers (10 updates on the corpus' 300 shortest pairs, en→zh and zh→en) serve the tests that need
a run (marked slow: the trainings take seconds); they skip where the shared corpus is missing. Quality is not tested: only that each command reads the
run's pair as the pair it is.
"""

from __future__ import annotations

import pytest

from attnlab.cli import main
from attnlab.errors import AttnlabError
from attnlab.i18n import width
from attnlab.translator import Translator
from tests.conftest import SHARED_DATA, tiny_config

CMN = SHARED_DATA / "cmn-eng.zip"


@pytest.fixture(scope="module")
def cmn_runs(tmp_path_factory):
    """``{"en-zh": run, "zh-en": run}``: a tiny Transformer of each direction of cmn-eng."""
    if not CMN.is_file():
        pytest.skip(f"the shared corpus {CMN} is missing")
    from attnlab.training.loop import train

    root = tmp_path_factory.mktemp("cmn")
    runs = {}
    for direction in ("en-zh", "zh-en"):
        cfg = tiny_config("transformer", "data.dataset=cmn-eng", f"data.data_path={CMN}",
                          f"data.direction={direction}", "data.max_pairs=300", "data.min_freq=1",
                          "train.max_steps=10")
        train(cfg, root / direction, progress=False)
        runs[direction] = root / direction
    return runs


@pytest.mark.slow  # the module's two tiny trainings
def test_heads_reads_a_chinese_target(cmn_runs):
    from attnlab.analysis import heads

    report = heads.run(cmn_runs["en-zh"], sentences=4, importance=False, data=str(CMN))
    assert report.heads  # the sample's Chinese references were detokenized by the run's own rules


@pytest.mark.slow  # the module's two tiny trainings
@pytest.mark.parametrize("direction", ["en-zh", "zh-en"])
def test_compare_reads_each_side_by_its_own_rules(cmn_runs, direction):
    from attnlab.analysis.diagnose.compare import common_sample

    sample = common_sample(Translator.from_run(cmn_runs[direction]), 4, data=str(CMN))
    chinese = sample.references[0][0] if direction == "en-zh" else sample.sources[0]
    assert chinese and " " not in chinese  # characters joined as Chinese is written, not "我 在 家 。"


@pytest.mark.slow  # the module's two tiny trainings
def test_the_web_page_names_a_chinese_sources_unknown_character(cmn_runs):
    from attnlab.web.routes.translate import unknown_words

    tr = Translator.from_run(cmn_runs["zh-en"])
    text = "我在家鬱。"  # 鬱 is in none of the 300 shortest pairs
    ids, _cut = tr.encode_source(text)
    tokens = [tr.src_tok.id_to_token(i) for i in ids]
    assert tokens.count("<unk>") == 1
    assert unknown_words(tr, text, tokens) == ["鬱"]


@pytest.mark.slow  # the module's two tiny trainings
def test_explain_scores_a_chinese_reference_by_characters(cmn_runs):
    from attnlab.analysis.explain import sentence
    from attnlab.evaluation.bleu import d2l_bleu

    tr = Translator.from_run(cmn_runs["en-zh"])
    ids, _cut = tr.encode_source("I'm home.")
    loss = sentence._loss(tr.model.eval(), tr, ids, "我在家里。", "我在家。")
    assert loss.bleu == pytest.approx(d2l_bleu(list("我在家。"), list("我在家里。"), k=2))
    assert loss.bleu > 0.5  # one character missing, not one unspaced "word" wrong
    with pytest.raises(AttnlabError) as e:
        sentence.run(tr, "I'm home.", reference="   ")
    assert "French" not in str(e.value)


@pytest.mark.slow  # the module's two tiny trainings
@pytest.mark.parametrize("direction", ["en-zh", "zh-en"])
def test_the_demo_shows_characters_in_columns_and_advises_the_same_corpus(cmn_runs, direction, tmp_path, capsys):
    from attnlab import demo

    tr = Translator.from_run(cmn_runs[direction])
    demo._show("transformer", tr, "cmn-eng", tmp_path, peak=20.0, minutes=0.5)
    out = capsys.readouterr().out
    advice = next(line for line in out.splitlines() if "not usable yet" in line)
    assert "attnlab demo --dataset cmn-eng --max-minutes" in advice  # not fra-eng, the default
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if "rows: output tokens" in line) + 1
    table = lines[start:next(i for i in range(start, len(lines)) if not lines[i].startswith("  ") or
                                    "integrated gradients" in lines[i])]
    if direction == "zh-en":
        assert width(table[0]) != len(table[0])  # the header's Chinese source characters
    # every row's last column (the token it looks at) starts at the same terminal cell as the header's
    assert len({width(line[: line.rindex("   ")]) for line in table}) == 1, "\n".join(table)
    pair = "English → Chinese" if direction == "en-zh" else "Chinese → English"
    assert "no verdict" in out and pair in out  # the §1 table is not this pair's


def test_the_walkthrough_lines_characters_up_in_cells():
    from attnlab.data.vocab import Vocab
    from attnlab.data.walkthrough import format_walkthrough, walk_through

    vocab = Vocab(["<unk>", "<pad>", "<bos>", "<eos>", "。", "我", "在", "家", "里"], lang="zh", text="chars")
    text = format_walkthrough(walk_through(vocab, "我在家里。", num_steps=7))
    rows = [line for line in text.splitlines() if line.split(":")[0].strip() in ("position", "token", "id")]
    assert len(rows) == 3
    starts = [[width(row[:k]) for k in range(1, len(row)) if row[k] != " " and row[k - 1] == " "] for row in rows]
    assert starts[0] == starts[1] == starts[2], "\n".join(rows)  # each column starts at one cell in every row


@pytest.mark.parametrize("name", ["cmn-eng.zip", "cmn.txt"])
def test_a_data_file_named_for_cmn_eng_is_read_as_cmn_eng(tmp_path, capsys, name):
    path = tmp_path / name
    path.write_text("I'm home.\t我在家里。\tCC-BY\n", encoding="utf-8")
    assert main(["config", "--model", "transformer", "--data", str(path)]) == 0
    assert 'dataset = "cmn-eng"' in capsys.readouterr().out
    assert main(["config", "--model", "transformer", "--data", str(tmp_path / "fra.txt")]) == 0
    assert 'dataset = "fra-eng"' in capsys.readouterr().out
