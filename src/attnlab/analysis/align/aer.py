"""Alignment Error Rate (Och & Ney 2003): how predicted word links compare with gold sure and possible
links (notes §25). With A the predicted, S the sure and P the possible links (S ⊆ P), summed over the
corpus: ``AER = 1 − (|A∩S| + |A∩P|) / (|A| + |S|)``, precision ``|A∩P| / |A|``, recall ``|A∩S| / |S|``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

Link = tuple[int, int]  # (English word, French word), 0-based


@dataclass
class AERCounts:
    """Corpus-level counts behind AER, precision and recall (add sentence by sentence)."""

    predicted: int = 0  # |A|
    sure: int = 0  # |S|
    hit_sure: int = 0  # |A ∩ S|
    hit_possible: int = 0  # |A ∩ P|

    def add(
        self, pred: set[Link] | frozenset[Link], sure: frozenset[Link], possible: frozenset[Link]
    ) -> None:
        self.predicted += len(pred)
        self.sure += len(sure)
        self.hit_sure += len(pred & sure)
        self.hit_possible += len(pred & (possible | sure))  # S ⊆ P even if a file forgot it

    @property
    def aer(self) -> float:
        denom = self.predicted + self.sure
        return 1.0 - (self.hit_sure + self.hit_possible) / denom if denom else float("nan")

    @property
    def precision(self) -> float:
        return self.hit_possible / self.predicted if self.predicted else float("nan")

    @property
    def recall(self) -> float:
        return self.hit_sure / self.sure if self.sure else float("nan")


def _r(x: float) -> float | None:
    return round(x, 5) if math.isfinite(x) else None


def counts_json(c: AERCounts, **extra: Any) -> dict[str, Any]:
    """AER, precision, recall and the number of predicted links, as every map's JSON gives them."""
    return {"aer": _r(c.aer), "precision": _r(c.precision), "recall": _r(c.recall), "links": c.predicted, **extra}
