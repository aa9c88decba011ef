"""Scoring translations: D2L's BLEU formula (the notes' §22) and sacreBLEU BLEU/chrF with signatures,
multi-reference, overall and by source length (:mod:`attnlab.evaluation.bleu`); the ``attnlab
evaluate`` report (:mod:`attnlab.evaluation.evaluate`)."""

from attnlab.evaluation.bleu import (
    DEFAULT_BUCKETS,
    bleu_by_length,
    corpus_scores,
    d2l_bleu,
    reference_streams,
)

__all__ = ["DEFAULT_BUCKETS", "bleu_by_length", "corpus_scores", "d2l_bleu", "reference_streams"]
