"""The learner's notes as data: their sections, where D2L teaches each, and their worked example.

The notes (in Chinese) follow *Dive into Deep Learning*: chapter 10 of the Chinese second edition,
which is chapter 11 of the English edition (the GRU and seq2seq pages they lean on are chapter 9 in
Chinese, 10 in English). "§N" in attnlab's text is the notes' section N; :data:`SECTIONS` says what
each one is about and where D2L teaches it in both numberings, for a reader who does not have the notes
(``docs/notes-sections.md`` is this table written out, and a test keeps the two equal).

The notes' example sentences, the translations counted as right and the notes' alignment table (§1,
§25: which source word each French word of ``i'm home .`` should look at) are here too, in one place:
the demo, ``evaluate``, the training probes and every attention verdict read them from here.

Standard library only: the base layer (``config`` takes its default probe sentences from here).
"""

from __future__ import annotations

from dataclasses import dataclass

from attnlab.i18n import language

__all__ = ["ACCEPTED", "EXAMPLE", "NOTES_ALIGNMENT", "NUMBERS_EXAMPLES", "REFERENCES", "SECTIONS", "SENTENCES",
           "Section", "cite", "d2l"]


@dataclass(frozen=True)
class Section:
    """One section of the notes: its number, its topic (English, Chinese) and D2L's sections for it."""

    number: str  # "1", "6–7", "28"
    title: str
    title_zh: str
    d2l_zh: str  # the Chinese second edition's section numbers
    d2l_en: str  # the English edition's


#: The notes' 28 sections. D2L numbers: Chinese 2nd edition / English edition (chapter 9 ↔ 10 for RNNs,
#: 10 ↔ 11 for attention; the encoder-only / decoder-only pretraining of §28 is 14.8 ↔ 11.9).
SECTIONS: tuple[Section, ...] = (
    Section("1", "from a fixed-context seq2seq to Bahdanau attention", "从普通 Seq2Seq 到 Bahdanau 注意力",
            "9.7, 10.4", "10.7, 11.4"),
    Section("2", "Query, Key and Value in Bahdanau attention", "Bahdanau 注意力中的查询、键、值", "10.1, 10.4",
            "11.1, 11.4"),
    Section("3", "training on one example: teacher forcing", "用一个具体例子理解训练过程（teacher forcing）", "9.7",
            "10.7.1"),
    Section("4", "how tokens are numbered", "token 是怎么编号的", "9.5", "10.5"),
    Section("5", "ids to vectors: the embedding", "token 编号怎么变成词向量", "9.7.1", "10.7.2"),
    Section("6", "GRU hidden states", "GRU 隐藏状态是怎么得到的", "9.1", "10.2"),
    Section("7", "inside the GRU: update gate, reset gate, candidate state", "GRU 内部：更新门、重置门、候选隐藏状态",
            "9.1.1", "10.2.1–10.2.3"),
    Section("8", "the output layer W_o, b_o", "输出层的 W_o 和 b_o", "9.7.2", "10.7.3"),
    Section("9", "what is a parameter and what is not", "哪些是模型参数，哪些不是", "9.7, 10.4", "10.7, 11.4"),
    Section("10", "training parameters, tuning hyperparameters", "参数训练和超参数调节", "9.7.4", "10.7.6"),
    Section("11", "multi-head attention", "多头注意力", "10.5", "11.5"),
    Section("12", "self-attention", "自注意力", "10.6.1", "11.6.1"),
    Section("13", "why self-attention needs positions", "自注意力为什么需要位置编码", "10.6.3", "11.6.3"),
    Section("14", "adding positions to embeddings", "词向量和位置编码直接相加", "10.6.3", "11.6.3"),
    Section("15", "the sinusoidal positional encoding", "正弦余弦位置编码", "10.6.3.1", "11.6.3.1"),
    Section("16", "relative positions as a rotation", "位置编码表示相对位置", "10.6.3.2", "11.6.3.2"),
    Section("17", "the Transformer encoder", "Transformer 编码器", "10.7.4", "11.7.4"),
    Section("18", "the Transformer decoder", "Transformer 解码器", "10.7.5", "11.7.5"),
    Section("19", "the position-wise feed-forward network", "基于位置的前馈网络", "10.7.2", "11.7.2"),
    Section("20", "residual connections and layer normalisation", "残差连接和层归一化", "10.7.3", "11.7.3"),
    Section("21", "training the Transformer", "Transformer 是怎么训练的", "10.7.6", "11.7.6"),
    Section("22", "generating at test time", "测试时怎么生成句子", "9.7.5, 9.8", "10.7.7, 10.8"),
    Section("23", "the encoder self-attention map", "编码器自注意力图", "10.7.6", "11.7.6"),
    Section("24", "the decoder masked self-attention map", "解码器掩蔽自注意力图", "10.7.6", "11.7.6"),
    Section("25", "the encoder-decoder (cross) attention map", "编码器-解码器注意力图", "10.4.3, 10.7.6",
            "11.4.3, 11.7.6"),
    Section("26", "Bahdanau attention and the Transformer compared", "Bahdanau 注意力和 Transformer 的关系", "10.6.2",
            "11.6.2"),
    Section("27", "what I understand so far: eight questions", "目前的阶段性理解", "10", "11"),
    Section("28", "next: encoder-only, decoder-only, causal masks, parameters, heads", "后续学习计划", "14.8",
            "11.9"),
)

_BY_NUMBER = {s.number: s for s in SECTIONS}


def d2l(number: str | int) -> Section:
    """The notes' section ``number`` (``7``, ``"28"``; a sub-item like ``"28.4"`` gives section 28).

    Raises KeyError for a number the notes do not have."""
    return _BY_NUMBER[str(number).split(".")[0]]


def _numbers(spec: str) -> list[str]:
    """The sections a citation names: ``"4–9"`` → 4 … 9, ``"11, 28"`` → 11, 28, ``"28.4"`` → 28."""
    out: list[str] = []
    for part in spec.replace("§", "").split(","):
        first, _, last = part.strip().replace("-", "–").partition("–")
        a, b = int(first.split(".")[0]), int((last or first).split(".")[0])
        out += [str(n) for n in range(a, b + 1) if str(n) not in out]
    return out


def _d2l_numbers(sections: list[Section], edition: str) -> str:
    """The D2L sections of ``sections`` in one edition, each once, a section dropped when a chapter section
    that holds it is listed too (9.7.1 under 9.7), in D2L's order."""
    items: list[str] = []
    for s in sections:
        items += [x.strip() for x in getattr(s, edition).split(",") if x.strip() not in items]
    kept = [x for x in items if not any(x != y and x.startswith(y + ".") for y in items)]

    def key(x: str) -> list[int]:
        return [int(n) for n in x.split("–")[0].split(".")]

    return ", ".join(sorted(kept, key=key))


def cite(number: str | int, lang: str | None = None) -> str:
    """``§7 (D2L 9.1.1 zh / 10.2.1–10.2.3 en)``: the notes' section with both D2L numberings, for help texts
    and captions read by someone who does not have the notes; ``lang``: ``None`` = the current language
    (:func:`attnlab.i18n.language`). ``number`` may name several sections
    (``"4–9"``, ``"11, 28"``, ``"27.5, 28.5"``): their D2L sections are listed once each.

    Raises KeyError for a section the notes do not have."""
    sections = [d2l(n) for n in _numbers(str(number))]
    label = "§" + str(number).replace("-", "–").replace(", ", ", §")
    zh, en = _d2l_numbers(sections, "d2l_zh"), _d2l_numbers(sections, "d2l_en")
    if (lang or language()) == "zh":
        return f"{label}（《动手学深度学习》中文版 {zh}，英文版 {en}）"
    return f"{label} (D2L {zh} zh / {en} en)"


#: The notes' worked example (§1, §3, §25): the source, its French translation, and the table of §1
#: that says which source token each target token should look at.
EXAMPLE = ("i'm home .", "je suis chez moi .")

#: The notes' table of §1 / §25, whole, extended to Tatoeba's other accepted translation of the example
#: ("je suis à la maison ."): target word → the source word it should attend to. The table places every
#: target token, the full stop and ``<eos>`` included (``.`` → ``.``, ``<eos>`` → ``<eos>``): a map aligns
#: when each of them looks at its word.
NOTES_ALIGNMENT: dict[str, dict[str, str]] = {
    "i'm home .": {"je": "i'm", "suis": "i'm", "chez": "home", "moi": "home", "à": "home", "la": "home",
                   "maison": "home", ".": ".", "<eos>": "<eos>"},
}

#: The notes' four example sentences (the demo's, the training probes', ``evaluate``'s).
SENTENCES: tuple[str, ...] = ("go .", "i lost .", "he's calm .", "i'm home .")

#: D2L's reference translation of each of the notes' sentences (what D2L's BLEU is computed against, §22).
REFERENCES: dict[str, str] = {"go .": "va !", "i lost .": "j'ai perdu .", "he's calm .": "il est calme .",
                              "i'm home .": "je suis chez moi ."}

#: Translations of the notes' sentences counted as right: Tatoeba's own translations of them.
ACCEPTED: dict[str, tuple[str, ...]] = {
    "go .": ("va !", "allez !", "bouge !", "va.", "allez."),
    "i lost .": ("j'ai perdu .", "j'ai perdu."),
    "he's calm .": ("il est calme .", "il est calme."),
    "i'm home .": ("je suis chez moi .", "je suis à la maison .", "je suis chez moi.", "je suis à la maison."),
}

#: The offline ``numbers`` task's examples (the demo without the corpus).
NUMBERS_EXAMPLES: tuple[str, ...] = ("twenty-one", "three hundred and five", "one thousand two hundred")
