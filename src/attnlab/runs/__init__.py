"""Run folders and exported folders: the only checkpoint saver and loader, and the readers of everything a
run wrote (one loader for every front end). Training writes them and inference reads them; neither imports the other.

- :mod:`~attnlab.runs.folder`: the files of a run folder and how they are read (``read_run``, metrics);
- :mod:`~attnlab.runs.checkpoint`: the one home of checkpoints: their names (``checkpoints/``, ``step-N``,
  ``LAST``/``BEST``), listing, saving atomically, resolving ``best``/``last``/a name, verifying, loading;
- :mod:`~attnlab.runs.average`: the mean of the last N checkpoints (or of the lr's decay phase), saved as the
  checkpoint ``averaged``;
- :mod:`~attnlab.runs.exported`: a folder ``attnlab export`` wrote (one model, no run folder);
- :mod:`~attnlab.runs.loader`: :func:`load_model`, the one loader, which verifies everything before it builds;
- :mod:`~attnlab.runs.probes`: ``probes.jsonl``, the probe sentences' maps during training.

The names below are the package's public API (``from attnlab import runs; runs.read_run(...)``).
"""

from attnlab.errors import CheckpointError
from attnlab.runs.average import average_checkpoints, decay_note
from attnlab.runs.checkpoint import (
    CHECKPOINTS,
    check_run_matches,
    check_safetensors_header,
    checkpoint_root,
    decay_checkpoints,
    has_checkpoint,
    last_manifest,
    load_state,
    load_weights,
    model_state_for_saving,
    resolve_checkpoint,
    run_decay_start,
    save_checkpoint,
    step_checkpoints,
    step_name,
    step_of,
    swap_in,
    verify_checkpoint,
)
from attnlab.runs.exported import export_engine_folder, fingerprint, read_export
from attnlab.runs.folder import (
    CONFIG,
    EXPORT_CONFIG,
    EXPORT_FORMAT,
    MANIFEST,
    MAX_JSON_BYTES,
    MAX_MANIFEST_BYTES,
    META,
    METRICS,
    STATE,
    TOKENIZERS,
    WEIGHTS,
    RunFiles,
    append_jsonl,
    append_metrics,
    is_export,
    member_path,
    read_json,
    read_metrics,
    read_run,
    recorded_corpus,
    run_config,
    sha256_file,
)
from attnlab.runs.loader import LoadedModel, check_weights_fit, load_model, model_shapes, weights_shapes

__all__ = [
    "CHECKPOINTS", "average_checkpoints", "checkpoint_root", "decay_checkpoints", "decay_note", "has_checkpoint",
    "last_manifest", "run_decay_start", "step_checkpoints", "step_name", "step_of",
    "CONFIG", "EXPORT_CONFIG", "EXPORT_FORMAT", "MANIFEST", "MAX_JSON_BYTES", "MAX_MANIFEST_BYTES", "META",
    "METRICS", "STATE", "TOKENIZERS", "WEIGHTS", "CheckpointError", "LoadedModel", "RunFiles", "append_jsonl",
    "append_metrics", "check_run_matches", "check_safetensors_header", "check_weights_fit", "export_engine_folder",
    "fingerprint", "is_export", "load_model", "load_state", "load_weights", "member_path", "model_shapes",
    "model_state_for_saving", "read_export", "read_json", "read_metrics", "read_run", "recorded_corpus",
    "resolve_checkpoint", "run_config", "save_checkpoint", "sha256_file", "swap_in", "verify_checkpoint",
    "weights_shapes",
]
