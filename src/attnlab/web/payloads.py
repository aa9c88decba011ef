"""The attention maps as JSON, and the facts about a run that the page shows.

- :func:`attention_payload` (from :mod:`attnlab.maps`, the one schema the
  page and ``attnlab attention --json`` share): an :class:`~attnlab.translator.AttentionResult`'s
  maps with their token labels, selected (``kind``/``layer``/``head``), encoded (JSON numbers or
  quantised base64), with optional thumbnails and a response-size budget; what
  ``POST /api/translate`` sends as ``attention``;
- :func:`run_facts`: model kind, attention kinds, sizes and the checkpoint of a loaded run
  (``GET /api/runs``), asked of the model's traits.

The app itself is assembled in :mod:`attnlab.web.app`; the rest of the server lives beside it
(``guards.py``, ``schemas.py``, ``registry.py``, ``state.py``, ``routes/``, ``serving.py``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from attnlab.evaluation.evaluate import checkpoint_identity
from attnlab.maps import OVERVIEW_SIZE, SelectionError, attention_payload
from attnlab.models import traits

# attention_payload, SelectionError and OVERVIEW_SIZE are the web modules' names for the shared schema.
__all__ = ["OVERVIEW_SIZE", "SelectionError", "attention_payload", "run_facts"]


def run_facts(tr: Any, run_dir: Path | None) -> dict[str, Any]:
    """Static facts about a loaded run (model kind, sizes, parameters, the checkpoint and its weights).

    ``kinds``: the attention kinds the model returns (none for seq2seq, notes §1; ``cross`` for
    Bahdanau, §1–2; all three for the Transformer, §23–25; ``self`` for the decoder-only model, §28);
    ``attention_layers``: layers of those maps (Bahdanau's recurrent layers share one attention).
    """
    cfg = tr.cfg
    t = traits(cfg.model)
    facts: dict[str, Any] = {
        "model_kind": cfg.model.kind,
        "kinds": list(t.attention_kinds),
        "parameters": int(sum(p.numel() for p in tr.model.parameters())),
        "num_layers": cfg.model.num_layers,
        "num_heads": t.heads,
        "attention_layers": max(t.attention.values(), default=0),
        "num_hiddens": cfg.model.num_hiddens,
        "dataset": cfg.data.dataset,
        "tokenizer": cfg.data.tokenizer,
        "src_vocab": len(tr.src_tok),
        "tgt_vocab": len(tr.tgt_tok),
        "probe_sentences": list(cfg.train.probe_sentences),
    }
    if getattr(tr, "checkpoint", None) is not None:
        ident = checkpoint_identity(tr.checkpoint) or {}
        facts["checkpoint"] = Path(tr.checkpoint).name
        if "step" in ident:
            facts["checkpoint_step"] = ident["step"]
        if "weights_sha256" in ident:
            facts["weights_sha256"] = ident["weights_sha256"]
    return facts
