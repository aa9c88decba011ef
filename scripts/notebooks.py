"""Write and execute the notes tour, in English and in Chinese, from this one file.

``examples/notes_tour.ipynb`` and ``examples/notes_tour.zh.ipynb`` walk through the 28 sections of the
learner's notes (§1–28; ``docs/notes-sections.md`` maps each to D2L: chapter 10 of the Chinese second
edition, chapter 11 of the English edition) on two models they train themselves. Both notebooks are built
from :data:`CELLS`: the code is the same, each markdown cell is written here in English and in Chinese side
by side, and the section headings come from :data:`attnlab.notes.SECTIONS` through :func:`attnlab.notes.cite`
— so the two cannot drift apart. The only code that differs is ``LANG``, which sets
``attnlab.i18n.set_language`` so that every report and figure speaks the notebook's language; the code's
comments are said in Chinese in the Chinese tour (:data:`ZH_COMMENTS`).

Regenerate both notebooks with their outputs (a reader sees them on the forge without running anything),
one command, about two minutes on 2 cores::

    ATTNLAB_DATA_DIR=../shared/data .venv/bin/python scripts/notebooks.py

It builds both notebooks, executes them with nbclient in a fresh temporary folder (English first; it trains
a Bahdanau run and a Transformer run there, half a minute each; the Chinese one reuses them), and writes
them with their outputs into ``examples/``. Without the corpus (``ATTNLAB_DATA_DIR`` unset, nothing cached,
``ATTNLAB_OFFLINE=1``) the notebooks use the offline ``numbers`` task, and say so. Other forms:

    scripts/notebooks.py --clean     write both without outputs (nothing is executed)
    scripts/notebooks.py --check     exit 1 when the committed notebooks' cells differ from this file's

``tests/test_notebook.py`` uses :func:`build`, :func:`execute` and :func:`structure` from here.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))  # attnlab.notes from this checkout (no torch needed to build)

from attnlab.notes import cite, d2l  # noqa: E402

EXAMPLES = ROOT / "examples"
LANGS = ("en", "zh")
PATHS = {"en": EXAMPLES / "notes_tour.ipynb", "zh": EXAMPLES / "notes_tour.zh.ipynb"}
#: Cell tag for a figure whose pixel size is fixed by its code (not by the tokens a trained model emits):
#: tests/test_notebook.py compares those sizes with the committed outputs.
FIXED_SIZE = "figure-fixed-size"


def _is_cjk(ch: str) -> bool:
    return "\u2e80" <= ch <= "\u9fff" or "\uff00" <= ch <= "\uffef"


def unwrap_cjk(text: str) -> str:
    """Join the lines of each paragraph: Markdown renders a line break as a space, which Chinese does not put
    between two characters (a break beside a Latin word stays a space, as the notes write "GRU 编码器"). Headings
    keep their own lines."""
    paragraphs = []
    for para in text.split("\n\n"):
        lines = para.split("\n")
        if lines[0].startswith("#"):
            paragraphs.append(para)
            continue
        joined = lines[0]
        for line in lines[1:]:
            joined += ("" if _is_cjk(joined.rstrip("*_")[-1:]) and _is_cjk(line.lstrip("*_")[:1]) else " ") + line
        paragraphs.append(joined)
    return "\n\n".join(paragraphs)


def md(en: str, zh: str) -> tuple:
    return ("markdown", en.strip(), unwrap_cjk(zh.strip()), ())


#: The code is the same in both tours; its comments and docstrings are said in each tour's language.
ZH_COMMENTS = {
    "`attnlab explain`: §4–9 on the GRU model": "`attnlab explain`：在 GRU 模型上演示 §4–9",
    "… and on the Transformer": "……以及在 Transformer 上",
    "its attention maps, as data (attnlab.maps)": "它的注意力图，作为数据（attnlab.maps）",
    "3 <pad> after <eos>, as in a batch": "在 <eos> 后补 3 个 <pad>，和批量里一样",
    "§22: test-time decoding": "§22：测试时的解码",
    "(T, S): one row per generated word": "(T, S)：每个生成的词一行",
    "attention, context vector c_t' and the chosen word at every step": "每一步的注意力、上下文向量 c_t' 和选出的词",
    "`attnlab attribute`: integrated gradients against the attention": "`attnlab attribute`：积分梯度与注意力对照",
    "(S, S): layer 1, heads averaged": "(S, S)：第 1 层，各头取平均",
    "padding rows are computed, then ignored": "填充行照样计算，随后被忽略",
    "`attnlab positional RUN`": "`attnlab positional RUN`",
    "the rotation checked over every position and shift": "在每个位置和每个偏移上检查旋转性质",
    "change position 2 only": "只改变第 2 个位置",
    "True = may attend: row t sees columns ≤ t (§24, GPT's causal mask)":
        "True = 可以关注：第 t 行看得到 ≤ t 的列（§24，GPT 的 causal mask）",
    "every report, table and figure below speaks this language": "下面的每个报告、表格和图都使用这种语言",
    "the few lines this notebook prints itself": "本笔记本自己打印的几行文字",
    "tqdm.auto asks for ipywidgets; no bar is drawn": "tqdm.auto 需要 ipywidgets；这里不画进度条",
    "next to the notebook; the English and Chinese tours share it": "在笔记本旁边；英文版和中文版共用它",
    "the notes' corpus when it can be found, else the offline numbers task": "能找到笔记用的语料就用它，否则用离线的 numbers 任务",
    "Block `== n.` of an explain report's text (the report numbers its parts 1–9).":
        "explain 报告文本中的 `== n.` 一块（报告把各部分编号为 1–9）。",
    "The lines of a report, grouped by the notes' section each group starts with (a line '§N …').":
        "报告的各行，按每组开头的笔记小节（以 '§N …' 开头的一行）分组。",
    "the tour's corpus": "导览用的语料",
    "`attnlab scaling --quick`; the rungs' run folders are not kept": "`attnlab scaling --quick`；各级的 run 文件夹不保留",
    "The run RUNS/kind: trained here for half a minute, sized for this machine, unless it is already there.":
        "run 文件夹 RUNS/kind：若还不存在，就在这里按本机速度确定规模，训练半分钟。",
}


def zh_code(src: str) -> str:
    """``src`` with its comments (``# …`` to the end of a line) and one-line docstrings in Chinese
    (:data:`ZH_COMMENTS`; shapes such as ``(S,)`` and names stay as they are)."""
    lines = []
    for line in src.split("\n"):
        head, sep, comment = line.partition("# ")
        if sep and comment in ZH_COMMENTS and (not head or head[-1] == " "):
            line = head + sep + ZH_COMMENTS[comment]
        stripped = line.strip()
        if stripped.startswith('"""') and stripped.strip('"') in ZH_COMMENTS:
            line = line.replace(stripped.strip('"'), ZH_COMMENTS[stripped.strip('"')])
        lines.append(line)
    return "\n".join(lines)


def code(src: str, *tags: str) -> tuple:
    return ("code", src.strip(), zh_code(src.strip()), tags)


def section(number: str | int, en: str, zh: str) -> tuple:
    """A section's markdown cell: its heading (both D2L numberings, :func:`attnlab.notes.cite`), then the text."""
    s = d2l(number)
    title = s.title[0].upper() + s.title[1:]
    return md(f"## {cite(number)} {title}\n\n{en.strip()}", f"## {cite(number, 'zh')}{s.title_zh}\n\n{zh.strip()}")


SETUP = '''
import re
import warnings

import torch

import attnlab
from attnlab import i18n, notes
from attnlab.data import download
from attnlab.errors import AttnlabError

LANG = "{lang}"
i18n.set_language(LANG)            # every report, table and figure below speaks this language
T = lambda en, zh: zh if LANG == "zh" else en   # the few lines this notebook prints itself
warnings.filterwarnings("ignore", message="IProgress not found")  # tqdm.auto asks for ipywidgets; no bar is drawn
torch.manual_seed(0)
RUNS = "runs/notes_tour"           # next to the notebook; the English and Chinese tours share it

try:                               # the notes' corpus when it can be found, else the offline numbers task
    DATA = ["data.dataset=fra-eng", f"data.data_path={{download.locate_fra_eng()}}"]
    SENTENCE, REFERENCE = notes.EXAMPLE                      # i'm home . → je suis chez moi .
except AttnlabError as e:
    print(T("fra-eng is not available ({{}}); the offline numbers task instead",
            "找不到 fra-eng（{{}}），改用离线的 numbers 任务").format(e))
    DATA = ["data.dataset=numbers"]
    SENTENCE, REFERENCE = notes.NUMBERS_EXAMPLES[1], "trois cent cinq"


def part(report, n):
    """Block `== n.` of an explain report's text (the report numbers its parts 1–9)."""
    for block in re.split(r"(?m)^(?=== )", report.format()):
        if block.startswith(f"== {{n}}."):
            return block.rstrip()
    raise KeyError(f"the report has no part {{n}}")


def by_section(text):
    """The lines of a report, grouped by the notes' section each group starts with (a line '§N …')."""
    groups, key = {{}}, None
    for line in text.splitlines():
        if m := re.match(r"\\s*§(\\d+)", line):
            key = int(m.group(1))
        groups.setdefault(key, []).append(line)
    return {{k: "\\n".join(v) for k, v in groups.items()}}
'''

TRAIN = '''
from attnlab.runs import read_run
from attnlab.viz.curves import curves_figure

BUDGET = ["train.max_minutes=0.5", "train.size=auto", "train.threads=0", "train.save_every=0",
          "train.eval_max_sentences=100", "train.eval_max_pairs=500"]


def trained(kind):
    """The run RUNS/kind: trained here for half a minute, sized for this machine, unless it is already there."""
    folder = f"{RUNS}/{kind}"
    try:
        return attnlab.load(folder)
    except AttnlabError:
        attnlab.train(kind, folder, DATA + BUDGET, progress=False)
        return attnlab.load(folder)


gru, tr = trained("bahdanau"), trained("transformer")
for t in (gru, tr):
    m = read_run(t.run_dir).config.model
    print(f"{t.run_dir.name:12} d={m.num_hiddens} layers={m.num_layers}")
'''

CELLS: list[tuple] = [
    md("""
# A tour of my attention notes, all 28 sections, on models trained right here

I wrote my notes (§1–28) while working through the attention chapter of *Dive into Deep Learning*: from the
GRU encoder–decoder with Bahdanau attention to the Transformer. "§N" below is section N of the notes; each
heading also gives D2L's section in both numberings, **chapter 10 of the Chinese second edition** and
**chapter 11 of the English edition** (the table is `docs/notes-sections.md`, and `attnlab.notes.SECTIONS`).

This notebook trains two small models itself, half a minute each and sized for the machine it runs on: a GRU
with Bahdanau attention (§1–10) and a Transformer (§11–25). It uses the notes' own corpus, Tatoeba
English–French, when it can find it (`ATTNLAB_DATA_DIR`), and the offline `numbers` task (English number
words → French) otherwise. Then it checks each section on them through attnlab's public API: the analyses'
`run(...)` and their reports' `.format()` and `.figure()` — the same answers `attnlab explain`, `positional`,
`heads`, `compare`, `doctor` and `selfcheck` print. The outputs you see were produced by
`scripts/notebooks.py`, which also writes the Chinese version of this tour (`notes_tour.zh.ipynb`). Numbers
differ from machine to machine: training on another processor takes other steps.

Run it top to bottom (*Run All*); it writes into `runs/notes_tour/` next to the notebook, and reuses the
runs it finds there.
""", """
# 注意力机制学习笔记导览：全部 28 节，在这里训练的模型上逐节验证

这份笔记（§1–28）是我学习《动手学深度学习》注意力机制一章时写的：从带 Bahdanau 注意力的 GRU
编码器-解码器，到 Transformer。下文的 "§N" 指笔记的第 N 节；每个标题同时给出 D2L 的两种章节编号：
**中文第二版第 10 章**和**英文版第 11 章**（完整对照表见 `docs/notes-sections.md` 和 `attnlab.notes.SECTIONS`）。

这个 notebook 自己训练两个小模型，每个半分钟，大小按运行它的机器来定：一个带 Bahdanau 注意力的 GRU
（§1–10）和一个 Transformer（§11–25）。能找到笔记用的语料（Tatoeba 英语–法语，`ATTNLAB_DATA_DIR`）时就用它，
否则用离线的 `numbers` 任务（英文数字单词 → 法文）。然后通过 attnlab 的公开接口逐节验证：各个分析的
`run(...)`，以及报告的 `.format()` 和 `.figure()`——和 `attnlab explain`、`positional`、`heads`、`compare`、
`doctor`、`selfcheck` 打印的是同一份结果。`attnlab.i18n.set_language("zh")` 让下面所有报告和图都用中文。
你看到的输出由 `scripts/notebooks.py` 生成，它同时生成英文版（`notes_tour.ipynb`）。数字会因机器而异：
在别的处理器上训练，走的是别的路径。

从上到下运行（*Run All*）；它写入 notebook 旁边的 `runs/notes_tour/`，已有的训练结果会直接复用。
"""),
    ("code", SETUP.format(lang="en").strip(), zh_code(SETUP.format(lang="zh").strip()), ()),
    md("""
## Training, once

`attnlab.train` runs the loop of `attnlab train` and writes a run folder; `attnlab.load` gives its
`Translator`, the one inference object of the CLI, the web server and this notebook. Each model gets half a
minute (`train.max_minutes=0.5`); `train.size=auto` measures the machine and picks the model size, vocabulary
and batches that learn most in that time. A run already in `runs/notes_tour/` is loaded instead.
""", """
## 训练（只训练一次）

`attnlab.train` 运行和 `attnlab train` 相同的训练循环并写出一个 run 文件夹；`attnlab.load` 返回它的
`Translator`——命令行、网页服务和这个 notebook 共用的推理对象。每个模型训练半分钟（`train.max_minutes=0.5`）；
`train.size=auto` 先测量机器的速度，再选出在这段时间里学得最好的模型大小、词表和批量。`runs/notes_tour/`
里已有的 run 会直接加载，不再训练。
"""),
    code(TRAIN),
    code('''
from attnlab.analysis.explain import sentence

explain_gru = sentence.run(gru, SENTENCE, reference=REFERENCE)   # `attnlab explain`: §4–9 on the GRU model
explain_tr = sentence.run(tr, SENTENCE, reference=REFERENCE)     # … and on the Transformer
res_gru = gru.attention(SENTENCE)                                # its attention maps, as data (attnlab.maps)
res = tr.attention(SENTENCE, extra_pad=3)                        # 3 <pad> after <eos>, as in a batch
for s in (notes.SENTENCES if "fra-eng" in DATA[0] else notes.NUMBERS_EXAMPLES):   # §22: test-time decoding
    print(f"{s:>24} → {gru.translate(s):<26} | {tr.translate(s)}")
'''),
    # ---------------------------------------------------------------- §1–10: GRU + Bahdanau
    section(1, """
A plain encoder–decoder squeezes the whole source into **one fixed context vector** and the decoder reads
it for every target word. But *je* and *suis* need *i'm*, *chez* and *moi* need *home*. Bahdanau attention
recomputes the context at every decoding step from **all** encoder states:
$\\mathbf{c}_{t'} = \\sum_{t=1}^{T} \\alpha(\\mathbf{s}_{t'-1}, \\mathbf{h}_t)\\,\\mathbf{h}_t$.

Below: the trained model's attention at each step (one row per generated word), where each row's largest
weight sits compared with the notes' table, and the context vectors step by step — if $\\mathbf{c}_{t'}$
barely changes, the model has fallen back to a fixed context. Integrated gradients (`attnlab attribute`)
then show what each output word really depends on, whatever the attention says.
""", """
普通编码器-解码器把整个源句子压缩成**一个固定的上下文向量**，生成每个目标词时都用它。但 *je*、*suis*
更应该关注 *i'm*，*chez*、*moi* 更应该关注 *home*。Bahdanau 注意力在每个解码步都从**所有**编码器隐藏状态
重新计算上下文向量：$\\mathbf{c}_{t'} = \\sum_{t=1}^{T} \\alpha(\\mathbf{s}_{t'-1}, \\mathbf{h}_t)\\,\\mathbf{h}_t$。

下面：训练好的模型在每一步的注意力权重（每生成一个词一行），每行最大权重落在哪个源词、和笔记的表对照，
以及逐步的上下文向量——如果 $\\mathbf{c}_{t'}$ 几乎不变，模型就退回到了固定上下文。随后用积分梯度
（`attnlab attribute`）看每个输出词真正依赖哪些源词，不管注意力怎么说。
"""),
    code('''
w = res_gru.attention["cross"][0, 0]                            # (T, S): one row per generated word
keys = res_gru.labels("cross")[1]
table = notes.NOTES_ALIGNMENT.get(SENTENCE, {})
for word, row in zip(res_gru.tgt_tokens, w):
    looked = keys[int(row.argmax())]
    want = table.get(word)
    mark = "" if want is None else ("✓" if looked == want else T(f"✗ the notes: {want}", f"✗ 笔记：{want}"))
    print(f"{word:>8} → {looked:<8} {float(row.max()):.2f}  {mark}")
res_gru.plot()
'''),
    code('''
print(part(explain_gru, 5))         # attention, context vector c_t' and the chosen word at every step
'''),
    code('''
from attnlab.analysis import attribution

ig = attribution.run(gru, SENTENCE)  # `attnlab attribute`: integrated gradients against the attention
print(ig.format())
'''),
    section(2, """
Bahdanau attention is the Query–Key–Value framework: the **Query** is a decoder state, the **Keys** and the
**Values** are the encoder states $\\mathbf{h}_t$, and the output is the context vector. D2L's query is the
previous state $\\mathbf{s}_{t'-1}$; attnlab's Bahdanau model asks with the state just computed,
$\\mathbf{s}_{t'}$, and its output layer reads $\\tanh(W_c[\\mathbf{s}_{t'}; \\mathbf{c}_{t'}])$ (Luong et al.
2015's order; `model.attention_query=previous` trains D2L's): the context then bears on the word it is
computed for, and the map moves from word to word (docs/experiments/bahdanau-alignment.md). `explain` names
each tensor with its shape and recomputes step 1's scores by hand from $W_q$, $W_k$ and $w_v$ (the additive
score $w_v^\\top \\tanh(W_q q + W_k k)$).
""", """
Bahdanau 注意力本质上还是 QKV 框架：**查询**是解码器的隐藏状态，**键**和**值**都是编码器的隐藏状态
$\\mathbf{h}_t$，输出是上下文向量。D2L 用上一时间步的状态 $\\mathbf{s}_{t'-1}$ 作查询；attnlab 的 Bahdanau
模型用这一步刚算出的状态 $\\mathbf{s}_{t'}$ 作查询，输出层读入 $\\tanh(W_c[\\mathbf{s}_{t'}; \\mathbf{c}_{t'}])$
（Luong 等 2015 的顺序；`model.attention_query=previous` 则训练 D2L 的顺序）：这样上下文向量直接作用于它所
计算的那个词，注意力图会随输出的词移动（docs/experiments/bahdanau-alignment.md）。`explain` 给出每个张量和
它的形状，并用 $W_q$、$W_k$、$w_v$ 手算第 1 步的评分（加性注意力 $w_v^\\top \\tanh(W_q q + W_k k)$）。
"""),
    code('''
print(part(explain_gru, 6))
'''),
    section(3, """
In training the target is split in two: the decoder reads `<bos> je suis chez moi .` and must predict
`je suis chez moi . <eos>` — **teacher forcing**: at step 2 it reads the true *je*, even if it predicted
something else at step 1. The batch below is exactly what the training loop feeds, and the loss is the mean
of $-\\log p(\\text{label})$ over the target tokens.
""", """
训练时目标句子被拆成两部分：解码器输入 `<bos> je suis chez moi .`，训练标签 `je suis chez moi . <eos>`——
这就是 **teacher forcing**：第 2 步输入的是真实的 *je*，即使第 1 步预测错了。下面的批量正是训练循环
喂给模型的内容；loss 是各目标 token 的 $-\\log p(\\text{标签})$ 的平均。
"""),
    code('''
from attnlab.data.batching import collate

batch = collate([gru.src_tok.encode(SENTENCE)], [gru.tgt_tok.encode(REFERENCE)])
for t, (i, o) in enumerate(zip(batch.tgt_in[0].tolist(), batch.tgt_out[0].tolist()), 1):
    print(f"{t}  {gru.tgt_tok.id_to_token(i):>8} → {gru.tgt_tok.id_to_token(o)}")
print()
print(part(explain_gru, 8))
'''),
    section(4, """
The sentence gets an `<eos>`, is padded with `<pad>` to `num_steps`, and each token becomes its index in the
vocabulary: `i'm home . <eos> <pad> …` → `[37, 86, 4, 3, 1, …]` in the notes. The special ids are D2L's
(`<unk>`=0, `<pad>`=1, `<bos>`=2, `<eos>`=3); the other ids are this run's own. An id is only an index: a
larger number is not a more important word.
""", """
句子先加上 `<eos>`，再用 `<pad>` 补到 `num_steps`，然后每个 token 换成它在词表中的编号：笔记里
`i'm home . <eos> <pad> …` → `[37, 86, 4, 3, 1, …]`。特殊 token 的编号和 D2L 一样（`<unk>`=0、`<pad>`=1、
`<bos>`=2、`<eos>`=3）；其他编号是这个 run 自己的词表给的。编号只是索引，没有语义大小关系。
"""),
    code('''
from attnlab.data.walkthrough import format_walkthrough, walk_through

steps = read_run(gru.run_dir).config.data.num_steps
print(format_walkthrough(walk_through(gru.src_tok, SENTENCE, num_steps=steps), run=gru.run_dir.name))
'''),
    section(5, """
The embedding is a trainable lookup table of shape $(V_{src}, d)$: an id selects one row, and only that row
takes part in the computation (the notes use $d = 32$; this run's $d$ was sized for the machine).
""", """
Embedding 层本质上是一张形状为 $(V_{src}, d)$ 的可训练查找表：编号只用来查表，选出的那一行向量才真正参与计算
（笔记里 $d = 32$；这个 run 的 $d$ 按机器大小选定）。
"""),
    code('''
print(part(explain_gru, 2))
'''),
    section(6, """
The encoder GRU reads the embedded tokens in order, $h_t = \\mathrm{GRU}(x_t, h_{t-1})$, and every $h_t$ is a
vector of `num_hiddens` numbers: $h_1$ holds *i'm*, $h_2$ *i'm home*, … The path through the network lists
each module with the shape it returns, recorded by forward hooks on a teacher-forced pass.
""", """
编码器 GRU 按顺序处理词向量，$h_t = \\mathrm{GRU}(x_t, h_{t-1})$，每个 $h_t$ 都是 `num_hiddens` 维的向量：
$h_1$ 主要包含 *i'm* 的信息，$h_2$ 包含 *i'm home*，…… 下面按调用顺序列出网络中的每个模块及其输出形状
（在一次 teacher forcing 前向传播中用 forward hook 记录）。
"""),
    code('''
print(part(explain_gru, 3))
'''),
    section(7, """
Inside the GRU: the **update gate** $z_t$ decides how much of the old state to keep, the **reset gate**
$r_t$ how much of it the **candidate state** $\\tilde h_t$ reads, and
$h_t = z_t \\odot h_{t-1} + (1 - z_t) \\odot \\tilde h_t$. `explain` loads the trained weights into a
from-scratch GRU that records its gates, checks that it computes the same logits, and checks the formula.
""", """
GRU 内部：**更新门** $z_t$ 决定保留多少旧信息，**重置门** $r_t$ 决定计算**候选隐藏状态** $\\tilde h_t$ 时
遗忘多少过去信息，最终 $h_t = z_t \\odot h_{t-1} + (1 - z_t) \\odot \\tilde h_t$。`explain` 把训练好的权重
装进一个从零实现、记录门值的 GRU，检查它算出相同的 logits，并验证这个公式。
"""),
    code('''
print(part(explain_gru, 4))
explain_gru.figure()
'''),
    section(8, """
The decoder's output $\\text{out}_t$ becomes one score per target word, $\\text{logits}_t = W_o\\,\\text{out}_t + b_o$,
with $W_o$ of shape $(V_{tgt}, d)$ and $b_o$ of shape $(V_{tgt},)$. They are the Dense layer's trainable
parameters, initialised at random and updated by training. One logit, worked by hand:
""", """
解码器输出 $\\text{out}_t$ 经过输出层得到目标词表中每个词的分数：$\\text{logits}_t = W_o\\,\\text{out}_t + b_o$，
$W_o$ 形状为 $(V_{tgt}, d)$，$b_o$ 形状为 $(V_{tgt},)$。它们是 Dense 层自带的可训练参数，随机初始化，
通过训练更新。手算一个 logit：
"""),
    code('''
print(part(explain_gru, 7))
'''),
    section(9, """
What is trained is the weights and biases — embeddings, GRU gates, the attention's $W_q$, $W_k$, $w_v$,
$W_o$, $b_o$ — not the ids, hidden states, attention weights, context vectors, logits, loss or BLEU, which
are computed from them for every sentence.
""", """
需要训练的是模型中的权重和偏置——Embedding、GRU 的门、注意力层的 $W_q$、$W_k$、$w_v$、$W_o$ 和 $b_o$——
而不是 token 编号、隐藏状态、注意力权重、上下文向量、logits、loss 或 BLEU，它们都是根据当前输入和当前参数
计算出来的。
"""),
    code('''
from attnlab.analysis.explain import params

print(part(explain_gru, 9))
params.run(gru.model, title="GRU + Bahdanau").figure()
'''),
    section(10, """
Parameters are learnt by backpropagation; **hyperparameters** (`embed_size`, `num_hiddens`, `num_layers`,
`dropout`, batch size, `num_steps`, `lr`, epochs) are set before training and tuned by experiment. The notes'
rules of thumb — an oscillating loss means a learning rate too high, a slow one too low, a low training loss
with a poor validation score overfitting — are what `attnlab doctor` checks on a run's curves.
""", """
模型参数通过反向传播自动学习；**超参数**（`embed_size`、`num_hiddens`、`num_layers`、`dropout`、批量大小、
`num_steps`、`lr`、训练轮数）在训练前设置，需要通过实验比较来调整。笔记里的经验——loss 震荡明显可能是学习率
太大，下降很慢可能是太小，训练 loss 很低但验证效果差可能是过拟合——正是 `attnlab doctor` 在训练曲线上检查的内容。
"""),
    code('''
from attnlab.analysis.diagnose import doctor

print(doctor.run(gru.run_dir).format())
curves_figure(gru.run_dir)
''', FIXED_SIZE),
    # ---------------------------------------------------------------- §11–22: the Transformer
    section(11, """
One attention head learns relations in one representation space; **multi-head attention** projects Query,
Key and Value into $h$ subspaces, attends in each, and concatenates the heads before an output projection
$W_o[h_1, …, h_h]$. Below: how one `in_proj` splits into $W_q$, $W_k$, $W_v$ and into heads, one query's
scores worked by hand per head, and the cross-attention of the last layer head by head.
""", """
单个注意力头只能在一个表示空间中学习关系；**多头注意力**把查询、键、值投影到 $h$ 个子空间，在每个子空间
单独做注意力，再把各头拼接后经过输出投影 $W_o[h_1, …, h_h]$。下面：一个 `in_proj` 怎样拆成 $W_q$、$W_k$、$W_v$
和各个头，每个头手算一个查询的评分，以及最后一层编码器-解码器注意力的每个头。
"""),
    code('''
print(part(explain_tr, 6))
res.plot("cross", layer=read_run(tr.run_dir).config.model.num_layers, head="all")
'''),
    section(12, """
In **self-attention** the queries, keys and values all come from the same sequence: `queries = keys = values
= X`, $\\alpha_{ij} = \\mathrm{softmax}_j(q_i \\cdot k_j / \\sqrt d)$ and $y_i = \\sum_j \\alpha_{ij} v_j$. Every
position reaches every other in one step, where an RNN passes information step by step. The encoder's first
layer, heads averaged: each row is one source token's weights over all of them, and sums to 1.
""", """
**自注意力**中查询、键、值都来自同一个序列：`queries = keys = values = X`，
$\\alpha_{ij} = \\mathrm{softmax}_j(q_i \\cdot k_j / \\sqrt d)$，$y_i = \\sum_j \\alpha_{ij} v_j$。每个位置一步就能和
所有位置建立联系，不需要像 RNN 那样一步一步传递。下面是编码器第一层（各头平均）：每一行是一个源 token
对所有 token 的注意力权重，行和为 1。
"""),
    code('''
w = res.attention["enc_self"][0].mean(dim=0)                    # (S, S): layer 1, heads averaged
queries, keys = res.labels("enc_self")
print(" " * 8 + "".join(f"{k:>8}" for k in keys))
for q, row in zip(queries, w):
    if q == "<pad>":                                            # padding rows are computed, then ignored
        continue
    print(f"{q:>8}" + "".join(f"{float(v):8.2f}" for v in row) + f"   Σ = {float(row.sum()):.2f}")
'''),
    section(13, """
Self-attention alone does not know the order: *我 爱 你* and *你 爱 我* have the same tokens. `positional`
checks it on the trained encoder: without the positional encoding, reversing the words only reverses the
outputs; with it, the outputs change.
""", """
自注意力本身不知道顺序：*我 爱 你* 和 *你 爱 我* 的词一样。`positional` 在训练好的编码器上验证：不加位置编码时，
把词序颠倒只会把输出同样颠倒；加上位置编码后，输出就不同了。
"""),
    code('''
from attnlab.analysis.explain import positional

pos = positional.run(translator=tr, sentence=SENTENCE)         # `attnlab positional RUN`
pos_parts = by_section(pos.format())
print(pos_parts[13])
'''),
    section(14, """
The input is embedding + position, $x + p$, added element by element: the width stays $d$, and the linear
maps after it, $W_q(x + p) = W_q x + W_q p$, learn to use both. The sizes of the two parts on this run, and
what concatenating $[x, p]$ would cost instead:
""", """
最终输入 = 词向量 + 位置编码，$x + p$ 逐元素相加：维度保持 $d$，后面的线性层 $W_q(x + p) = W_q x + W_q p$
可以学习利用两者。下面是这个 run 中两部分的大小，以及改成拼接 $[x, p]$ 的代价：
"""),
    code('''
print(pos_parts[14])
'''),
    section(15, """
$p_{i,2j} = \\sin(i / 10000^{2j/d})$ and $p_{i,2j+1} = \\cos(i / 10000^{2j/d})$: low dimensions change fast
(fine position differences), high ones slowly (long distances). The model adds exactly this table.
""", """
$p_{i,2j} = \\sin(i / 10000^{2j/d})$，$p_{i,2j+1} = \\cos(i / 10000^{2j/d})$：低维度变化较快，表示细粒度的位置差异；
高维度变化较慢，表示较长距离的位置变化。模型加上的正是这张表。
"""),
    code('''
from attnlab.attention.positional import sinusoidal_table

d = read_run(tr.run_dir).config.model.num_hiddens
print(T("the model's table equals the formula:", "模型的位置编码表等于公式："),
      torch.allclose(tr.model.positional.P[:60].double(), sinusoidal_table(60, d), atol=1e-6))
pos.figure()
''', FIXED_SIZE),
    section(16, """
For each (sin, cos) pair, position $i + \\delta$ is position $i$ rotated by a matrix that depends on
$\\delta$ only (the trigonometric addition formulas): 3 → 5 and 10 → 12 use the same matrix.
""", """
对每一组 sin/cos 维度，位置 $i + \\delta$ 可以由位置 $i$ 通过一个只和 $\\delta$ 有关的旋转矩阵得到
（三角函数加法公式）：位置 3 → 5 和 10 → 12 用的是同一个矩阵。
"""),
    code('''
print(pos_parts[None])     # the rotation checked over every position and shift
print(pos_parts[16])
'''),
    section(17, """
Each encoder layer: multi-head self-attention, residual connection + layer normalisation, the position-wise
feed-forward network, residual connection + layer normalisation. Query = Key = Value = the source: every
source position's representation takes in the whole sentence. The encoder's modules, in call order:
""", """
编码器每一层：多头自注意力 → 残差连接 + 层归一化 → 基于位置的前馈网络 → 残差连接 + 层归一化。
查询 = 键 = 值 = 源序列：源句子中每个位置的表示都融合整个源句子的上下文信息。编码器的模块，按调用顺序：
"""),
    code('''
print("\\n".join(line for line in part(explain_tr, 3).splitlines() if "encoder" in line or "enc_self" in line))
'''),
    section(18, """
Each decoder layer adds a second attention: **masked self-attention** over the target so far (generating
*chez* it sees `<bos> je suis`, not `moi .`), then **encoder–decoder attention** whose Query is the decoder
and whose Key and Value are the encoder's output — the Transformer's counterpart of Bahdanau attention,
with multi-head dot products.
""", """
解码器每层比编码器多一个注意力模块：先是目标序列上的**掩蔽自注意力**（生成 *chez* 时只能看到
`<bos> je suis`，看不到 `moi .`），再是**编码器-解码器注意力**：查询来自解码器，键和值来自编码器输出——
作用和 Bahdanau 注意力很像，只是用多头点积注意力。
"""),
    code('''
print("\\n".join(line for line in part(explain_tr, 3).splitlines()
                if "decoder" in line or "dec_self" in line or "cross" in line))
'''),
    section(19, """
$\\mathrm{FFN}(X) = \\mathrm{Dense}_2(\\mathrm{ReLU}(\\mathrm{Dense}_1(X)))$ acts on each position separately,
with the same parameters at every position: it mixes no tokens (attention does that). On the trained
encoder's first FFN: the whole sequence at once equals each position alone, and changing one position's
input changes that position's output only.
""", """
$\\mathrm{FFN}(X) = \\mathrm{Dense}_2(\\mathrm{ReLU}(\\mathrm{Dense}_1(X)))$ 对每个位置单独作用，所有位置共享同一套参数：
它不混合不同 token 的信息（那是注意力层的事）。在训练好的编码器第一层 FFN 上验证：整个序列一起算等于每个
位置单独算；只改变一个位置的输入，只有这个位置的输出改变。
"""),
    code('''
ffn = tr.model.get_submodule("encoder_blocks.0.ffn")
ids = torch.tensor([tr.encode_source(SENTENCE)[0]])
with torch.no_grad():
    X = tr.model.src_embedding(ids)                                     # (1, S, D)
    whole = ffn(X)
    alone = torch.cat([ffn(X[:, i:i + 1]) for i in range(X.shape[1])], dim=1)
    X2 = X.clone()
    X2[0, 1] = torch.randn_like(X2[0, 1])                               # change position 2 only
    moved = (ffn(X2) - whole).abs().amax(dim=-1)[0]                     # (S,)
print(T("all positions at once vs one at a time: max |Δ| =", "整个序列 vs 逐个位置：max |Δ| ="),
      f"{float((whole - alone).abs().max()):.1e}")
print(T("change of each output after changing input 2:", "只改变第 2 个输入后，各位置输出的变化："),
      [f"{float(v):.2f}" for v in moved])
'''),
    section(20, """
Add & Norm: the notes write $\\mathrm{LayerNorm}(X + \\mathrm{Dropout}(\\mathrm{Sublayer}(X)))$ — the
**residual connection** keeps the input and lets gradients through, **layer normalisation** keeps each layer's
values in range. `explain` says where this model puts the norm and measures $X$, $\\mathrm{Sublayer}(X)$ and
their sum in every layer.
""", """
Add & Norm：笔记写作 $\\mathrm{LayerNorm}(X + \\mathrm{Dropout}(\\mathrm{Sublayer}(X)))$——**残差连接**保留原始输入、
缓解梯度消失，**层归一化**稳定每层输出的数值分布。`explain` 说明这个模型把归一化放在哪里，并在每一层测量
$X$、$\\mathrm{Sublayer}(X)$ 和两者之和。
"""),
    code('''
print(part(explain_tr, 4))
'''),
    section(21, """
Training is the same seq2seq recipe: source ids → embedding + positions → encoder; the teacher-forced target
→ embedding + positions → decoder → $W_o$ → softmax → cross-entropy → backpropagation. The fixed sinusoidal
table is not trained. The Transformer's curves, and its loss on the notes' sentence token by token:
""", """
Transformer 训练时仍然是 Seq2Seq 任务：源 token 编号 → Embedding + 位置编码 → 编码器；teacher forcing 的目标输入
→ Embedding + 位置编码 → 解码器 → $W_o$ → softmax → 交叉熵 loss → 反向传播更新参数。固定的正弦余弦位置编码
不训练。下面是 Transformer 的训练曲线，以及它在笔记例句上逐 token 的 loss：
"""),
    code('''
print(part(explain_tr, 8))
curves_figure(tr.run_dir)
''', FIXED_SIZE),
    section(22, """
At test time there is no true target: the decoder starts from `<bos>`, feeds back its own prediction, and
stops at `<eos>` or the length limit; no parameter changes. Greedy decoding step by step, then a beam search's
n-best list (`translate_full`):
""", """
测试时没有真实目标句子：解码器从 `<bos>` 开始，把上一步预测出的词作为下一步输入，直到生成 `<eos>` 或达到最大
长度；不更新参数。下面是一步一步的贪心解码，以及束搜索的 n-best 列表（`translate_full`）：
"""),
    code('''
print(part(explain_tr, 5))
print()
for hyp in tr.translate_full(SENTENCE, beam_size=4, nbest=3):
    print(f"{hyp.score:8.3f}  {hyp.text}")
'''),
    # ---------------------------------------------------------------- §23–25: the three maps
    section(23, """
Rows are **queries** (the position being updated), columns are **keys** (the positions looked at), and
darker means a larger weight. The three `<pad>` columns added after `<eos>` (as in a batch beside a longer
sentence) are masked: they get exactly zero weight, the palest colour.
""", """
纵轴（行）是**查询**，也就是当前正在更新的位置；横轴（列）是**键**，也就是被关注的位置；颜色越深，注意力
权重越大。`<eos>` 后面补的三个 `<pad>`（和更长的句子放在一个批量里时就会这样）被 mask 掉了：权重正好为 0，
颜色最浅。
"""),
    code('''
w = res.attention["enc_self"]                                   # (layers, heads, S, S)
pads = [i for i, k in enumerate(res.labels("enc_self")[1]) if k == "<pad>"]
print(T("largest weight on a <pad> key:", "<pad> 列上的最大权重："), float(w[..., pads].max()))
res.plot("enc_self")
'''),
    section(24, """
The decoder may not look at the future: position $t$ sees positions $\\le t$ only, so the map is
lower-triangular — the model cannot peek at the answer during training.
""", """
解码器不能看到未来词：第 $t$ 个位置只能看第 $1 \\ldots t$ 个位置，所以这个图呈下三角结构——防止模型在训练时
偷看未来答案。
"""),
    code('''
w = res.attention["dec_self"]                                   # (layers, heads, T, T)
print(T("largest weight above the diagonal:", "对角线以上的最大权重："), float(torch.triu(w, diagonal=1).max()))
res.plot("dec_self")
'''),
    section(25, """
One row per generated word, one column per source token: the soft alignment between the two languages. The
notes expect *je*, *suis* → *i'm* and *chez*, *moi* → *home*. Where each row's largest weight sits (layers
and heads averaged), then the map, then how it formed during training from the probe sentences recorded at
each validation (`attnlab attention RUN SENTENCE --timeline`):
""", """
每生成一个目标词一行，每个源 token 一列：源语言和目标语言之间的软对齐。笔记期望 *je*、*suis* → *i'm*，
*chez*、*moi* → *home*。下面先看每行最大权重落在哪里（各层各头平均），再看热力图，最后看训练过程中每次验证
记录的探针句子上它是怎样形成的（`attnlab attention RUN SENTENCE --timeline`）：
"""),
    code('''
from attnlab.maps import timeline_figure

w = res.attention["cross"].mean(dim=(0, 1))                     # (T, S)
keys = res.labels("cross")[1]
table = notes.NOTES_ALIGNMENT.get(SENTENCE, {})
for word, row in zip(res.tgt_tokens, w):
    looked, want = keys[int(row.argmax())], table.get(word)
    mark = "" if want is None else ("✓" if looked == want else T(f"✗ the notes: {want}", f"✗ 笔记：{want}"))
    print(f"{word:>8} → {looked:<8} {float(row.max()):.2f}  {mark}")
display(res.plot("cross"))
timeline_figure(tr.run_dir, SENTENCE)
'''),
    # ---------------------------------------------------------------- §26–28
    section(26, """
The notes compare the two models: GRU against self-attention encoders, additive against multi-head
dot-product attention, order from recurrence against positional encoding, weaker against stronger
parallelism, long-range dependencies through the recurrence against direct attention. `compare` measures
both runs side by side on the same validation sentences: parameters, training and translation speed, BLEU,
BLEU by sentence length. On a few CPU cores and models this small the training speeds may come out even or
reversed: the parallelism the notes credit the Transformer with pays off over long sentences and on wide
hardware, where a GRU must still take its steps one after another (`attnlab scaling` measures tokens/s
against sentence length).
""", """
笔记对比了两个模型：编码器用 GRU 还是多头自注意力，加性注意力还是多头点积注意力，位置信息来自循环结构还是
位置编码，并行能力较弱还是较强，长距离依赖靠循环传递还是任意位置直接关注。`compare` 在同一批验证句子上
并排测量两个 run：参数量、训练和翻译速度、BLEU、按句长分组的 BLEU。在几个 CPU 核心上训练这么小的模型，
训练速度可能相差不大，甚至反过来：笔记所说 Transformer 并行能力较强的好处，要在长句子和并行度高的硬件上才显现，
那时 GRU 仍然只能一步接一步地计算（`attnlab scaling` 测量不同句长下每秒处理的 token 数）。
"""),
    code('''
from attnlab.analysis.diagnose import compare

cmp = compare.run([gru.run_dir, tr.run_dir], bleu_sentences=100)   # `attnlab compare RUN RUN`
print(cmp.format())
cmp.figure()
''', FIXED_SIZE),
    section(27, """
The notes' eight answers, and where this tour checked each: (1) Bahdanau attention re-chooses the source at
every step — §1, §25; (2) ids are indices, the embedding rows are what is computed with — §4–5; (3) the GRU
builds its states with update gate, reset gate and candidate state — §6–7; (4) $W_o$, $b_o$ are trainable
parameters mapping states to vocabulary scores — §8–9; (5) multi-head attention learns in several subspaces
at once — §11, §28; (6) self-attention links any two positions directly — §12, §23; (7) the positional
encoding gives self-attention its order — §13–16; (8) the encoder models the source, the decoder the target
history and the alignment — §17–18, §24–25. `selfcheck` tests the invariants these answers rest on, on both
trained models: padding changes nothing, no future token leaks, step-by-step decoding equals the full pass.
""", """
笔记的八条阶段性理解，以及本导览在哪里验证了它们：(1) Bahdanau 注意力让解码器在每一步动态关注源序列——§1、§25；
(2) token 编号只是索引，Embedding 才是真正参与计算的词向量——§4–5；(3) GRU 通过更新门、重置门和候选隐藏状态
逐步生成隐藏状态——§6–7；(4) $W_o$ 和 $b_o$ 是可训练参数，把隐藏状态映射到词表得分——§8–9；(5) 多头注意力让模型
从多个子空间并行学习不同关系——§11、§28；(6) 自注意力让任意两个位置直接建立联系——§12、§23；(7) 位置编码为
自注意力补充顺序信息——§13–16；(8) 编码器负责源序列内部建模，解码器负责目标端历史建模和源目标对齐——§17–18、
§24–25。`selfcheck` 在两个训练好的模型上检验这些理解所依赖的不变量：padding 不改变输出、不泄露未来 token、
逐步解码等于完整计算。
"""),
    code('''
from attnlab.analysis.diagnose import selfcheck

for t in (gru, tr):
    print(selfcheck.run(t).format())
'''),
    section(28, """
The notes' next questions. **Encoder-only, decoder-only, encoder–decoder** (28.2): attnlab trains all three
(`attnlab train --model encoder-only --out runs/mlm`; `decoder-only`, `transformer` likewise). **The causal mask** (28.3) of GPT-like
models is this decoder's masked self-attention: the same lower-triangular mask, over one sequence.
**Where the parameters are** (28.4): the table and the chart below. **Do the heads learn different things?**
(28.5): `heads` measures each head (distance, previous/same token, `<eos>`) and silences each in turn;
a BLEU drop inside the bootstrap interval is noise.
""", """
笔记的后续问题。**编码器-only、解码器-only、编码器-解码器**（28.2）：attnlab 三种都能训练
（`attnlab train --model encoder-only --out runs/mlm`；`decoder-only`、`transformer` 同理）。GPT 类模型的 **causal mask**（28.3）就是这里
解码器的掩蔽自注意力：同一个下三角 mask，只是作用在一个序列上。**参数量主要集中在哪些模块**（28.4）：见下面的
表和图。**不同的头是否真的学到了不同的现象？**（28.5）：`heads` 测量每个头（关注距离、前一个/同一个 token、
`<eos>`），并依次屏蔽每个头；BLEU 的下降落在 bootstrap 区间之内就只是噪声。
"""),
    code('''
from attnlab.attention.masks import causal_mask

print(causal_mask(5).int())     # True = may attend: row t sees columns ≤ t (§24, GPT's causal mask)
p = params.run(tr.model, title="Transformer")
print(p.format())
p.figure()
''', FIXED_SIZE),
    code('''
from attnlab.analysis import heads

hr = heads.run(tr.run_dir, sentences=40)                       # `attnlab heads RUN`
print(hr.format())
hr.figure()
'''),
    md("""
### §28.1 Why Transformers scale: a small ladder, timed against its own estimate

Why do large models use Transformers rather than GRUs? `attnlab scaling --quick` trains two widths of each
family, every rung for the same number of counted training FLOPs, then measures training tokens/s against
sentence length and greedy decoding with and without the KV cache. Before training it times a few steps of
each rung in this very process and says how long the rest will take; at the end it says how long it took and
the ratio of the two, an estimate made under the load the machine has now. It is sized for a couple of minutes
on a 2-core laptop; the full ladder, `attnlab scaling`, for about a quarter of an hour.
""", """
### §28.1 Transformer 为什么能扩展：一个小的规模阶梯，并和它自己的时间估计对照

大模型为什么用 Transformer 而不是 GRU？`attnlab scaling --quick` 为两种模型各训练两个宽度，每一级都花同样多的
训练 FLOPs（计数得到），然后测量不同句长下训练每秒处理的 token 数，以及有无 KV cache 时贪心解码的代价。训练之前，
它在这个进程里先给每一级计时几步，说出剩下的部分要多久；结束时说出实际用了多久，以及两者之比——估计是在机器
当前的负载下做出的。它的规模在 2 核笔记本上约需两分钟；完整的阶梯 `attnlab scaling` 大约要一刻钟。
"""),
    code('''
import tempfile

from attnlab.analysis.experiments import scaling

where = scaling.Where(**dict(d.removeprefix("data.").split("=", 1) for d in DATA))   # the tour's corpus
with tempfile.TemporaryDirectory() as out:     # `attnlab scaling --quick`; the rungs' run folders are not kept
    ladder = scaling.run(scaling.QUICK, out, where, log=print)
ladder.figure()
''', FIXED_SIZE),
]


def build(lang: str) -> nbformat.NotebookNode:
    """The notebook in ``lang`` (``en``/``zh``), without outputs."""
    if lang not in LANGS:
        raise ValueError(f"lang must be one of {LANGS}")
    nb = nbformat.v4.new_notebook()
    for kind, en, zh, tags in CELLS:
        text = zh if lang == "zh" else en
        cell = nbformat.v4.new_markdown_cell(text) if kind == "markdown" else nbformat.v4.new_code_cell(text)
        if tags:
            cell.metadata["tags"] = list(tags)
        nb.cells.append(cell)
    for i, cell in enumerate(nb.cells):
        cell.id = f"{lang}-{i:02d}"  # stable ids: a regenerated notebook differs only where its outputs do
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.metadata["language_info"] = {"name": "python"}
    return nb


def execute(nb: nbformat.NotebookNode, workdir: Path, timeout: int = 600) -> nbformat.NotebookNode:
    """Run ``nb`` top to bottom in ``workdir`` with nbclient (it trains into ``workdir/runs`` or reuses what
    is there) and return it with its outputs. Raises nbclient's ``CellExecutionError`` naming the cell."""
    from nbclient import NotebookClient

    client = NotebookClient(nb, timeout=timeout, kernel_name="python3", record_timing=False,
                            resources={"metadata": {"path": str(workdir)}})
    client.execute()
    return nb


def _png_size(data: str) -> tuple[int, int]:
    import base64
    import struct

    raw = base64.b64decode(data)
    assert raw[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    return struct.unpack(">II", raw[16:24])


def compress_figures(nb: nbformat.NotebookNode, colours: int = 256) -> None:
    """Re-encode every PNG output of ``nb`` as a palette PNG of at most ``colours`` colours, same pixel size
    (Pillow, which matplotlib already needs): the committed notebooks carry their figures at a third of the
    bytes, so a reader on the forge still sees them and the repository stays small."""
    import base64
    import io

    from PIL import Image

    for cell in nb.cells:
        for o in cell.get("outputs", []):
            data = o.get("data", {})
            if "image/png" not in data:
                continue
            img = Image.open(io.BytesIO(base64.b64decode(data["image/png"]))).convert("RGB")
            buf = io.BytesIO()
            img.quantize(colours, method=Image.Quantize.MEDIANCUT).save(buf, format="PNG", optimize=True)
            data["image/png"] = base64.b64encode(buf.getvalue()).decode("ascii")


def structure(nb: nbformat.NotebookNode) -> list[dict]:
    """What a fresh run must reproduce of each cell: its type and source, and for a code cell the kind of each
    output (stream name, or output type and MIME types), its number of figures, and the pixel size of the
    figures of cells tagged :data:`FIXED_SIZE`. Numbers and words are left out: they follow the training."""
    out = []
    for cell in nb.cells:
        item = {"type": cell.cell_type, "source": cell.source}
        if cell.cell_type == "code":
            kinds, sizes = [], []
            for o in cell.outputs:
                if o.output_type == "stream":
                    kinds.append(f"stream:{o.name}")
                else:
                    kinds.append(f"{o.output_type}:{','.join(sorted(o.get('data', {})))}")
                    if "image/png" in o.get("data", {}):
                        sizes.append(_png_size(o["data"]["image/png"]))
            # consecutive stream chunks of one name are one stream (the kernel flushes them as it likes)
            item["outputs"] = [k for i, k in enumerate(kinds) if i == 0 or not (k.startswith("stream") and k == kinds[i - 1])]
            item["figures"] = len(sizes) + sum(
                "data:image/png;base64," in o.get("data", {}).get("text/html", "") for o in cell.outputs)
            if FIXED_SIZE in cell.metadata.get("tags", []):
                item["figure_sizes"] = sizes
        out.append(item)
    return out


def run_both(workdir: Path, timeout: int = 600) -> dict[str, nbformat.NotebookNode]:
    """Build and execute both notebooks in ``workdir``, English first (it trains; the Chinese one reuses), and
    record in each notebook's metadata the dataset its runs were trained on (``attnlab.dataset``)."""
    import tomllib

    data_dir = os.environ.get("ATTNLAB_DATA_DIR")
    try:
        if data_dir:  # the kernels run in workdir: a relative corpus folder (CI's ../shared/data) must not move
            os.environ["ATTNLAB_DATA_DIR"] = str(Path(data_dir).expanduser().resolve())
        notebooks = {lang: execute(build(lang), workdir, timeout) for lang in LANGS}
    finally:
        if data_dir:
            os.environ["ATTNLAB_DATA_DIR"] = data_dir
    config = tomllib.loads((workdir / "runs" / "notes_tour" / "transformer" / "config.toml").read_text("utf-8"))
    for nb in notebooks.values():
        nb.metadata["attnlab"] = {"dataset": config["data"]["dataset"]}
    return notebooks


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--clean", action="store_true", help="write both notebooks without outputs, run nothing")
    ap.add_argument("--check", action="store_true",
                    help="exit 1 when a committed notebook's cells differ from this script's")
    args = ap.parse_args(argv)
    if args.check:
        bad = [str(PATHS[lang]) for lang in LANGS if not PATHS[lang].is_file() or
               [(c.cell_type, c.source) for c in nbformat.read(PATHS[lang], as_version=4).cells]
               != [(c.cell_type, c.source) for c in build(lang).cells]]
        for path in bad:
            print(f"{path} differs from scripts/notebooks.py: run `python scripts/notebooks.py`")
        return 1 if bad else 0
    if args.clean:
        notebooks = {lang: build(lang) for lang in LANGS}
    else:
        with tempfile.TemporaryDirectory(prefix="notes-tour-") as tmp:
            notebooks = run_both(Path(tmp))
    for lang, nb in notebooks.items():
        compress_figures(nb)
        nbformat.validate(nb)
        nbformat.write(nb, PATHS[lang])
        print(f"wrote {PATHS[lang].relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
