"""Bahdanau takes its attention from the builder: a new score function is one module and one dict entry.

This is docs/DESIGN.md's "add an attention score" row, tried: a scaled dot-product score (Luong et al.
2015's "general" form, with projections) is defined here, entered in ``BAHDANAU_SCORES``, chosen with
``model.attention_score``, trained a few steps and decoded, with nothing else changed.
"""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from attnlab import models
from attnlab.attention.masks import masked_softmax
from attnlab.config import ConfigError, ModelConfig
from attnlab.training.loop import train
from attnlab.translator import Translator
from tests.conftest import tiny_config


class ScaledDotScore(nn.Module):
    """``score(q, k) = (W_q q) · (W_k k) / √A``: the protocol Bahdanau calls (``project_keys``, ``forward``)."""

    def __init__(self, key_size: int, query_size: int, num_hiddens: int, dropout: float = 0.0) -> None:
        super().__init__()
        self.W_k = nn.Linear(key_size, num_hiddens, bias=False)
        self.W_q = nn.Linear(query_size, num_hiddens, bias=False)
        self.dropout = nn.Dropout(dropout)

    def project_keys(self, keys):
        return self.W_k(keys)  # (B, S, A)

    def forward(self, queries, keys, values, mask=None, projected_keys=None):
        k = self.W_k(keys) if projected_keys is None else projected_keys  # (B, S, A)
        scores = self.W_q(queries) @ k.transpose(1, 2) / math.sqrt(k.shape[-1])  # (B, Q, S)
        weights = masked_softmax(scores, mask)
        return self.dropout(weights) @ values, weights


@pytest.fixture
def with_dot(monkeypatch):
    monkeypatch.setitem(models.BAHDANAU_SCORES, "dot", ScaledDotScore)


def test_the_builder_passes_the_configured_score_in(with_dot):
    model = models.build_model(ModelConfig(kind="bahdanau", num_hiddens=16, embed_size=16, attention_score="dot"), 9, 11)
    assert isinstance(model.attention, ScaledDotScore)
    default = models.build_model(ModelConfig(kind="bahdanau", num_hiddens=16, embed_size=16), 9, 11)
    assert type(default.attention).__name__ == "AdditiveAttention"  # the notes' score unless asked
    with pytest.raises(ConfigError, match="choose one of: additive, dot"):
        models.build_model(ModelConfig(kind="bahdanau", attention_score="cosine"), 9, 11)


def test_a_new_score_trains_and_decodes(with_dot, tmp_path):
    res = train(tiny_config("bahdanau", "model.attention_score=dot", "train.max_steps=30"), tmp_path / "run",
                progress=False)
    assert res.step == 30
    tr = Translator.from_run(tmp_path / "run", which="last")
    assert isinstance(tr.model.attention, ScaledDotScore)
    assert isinstance(tr.translate("twenty one"), str)
    att = tr.attention("twenty one").attention["cross"]  # (1, 1, T, S): one map over the decoding steps
    assert att.shape[:2] == (1, 1)
    torch.testing.assert_close(att.sum(-1), torch.ones(att.shape[:-1]))
