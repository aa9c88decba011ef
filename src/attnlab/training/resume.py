"""What ``attnlab train --resume`` may change, and the run-folder housekeeping of a new run.

A resumed run continues the one in its folder: the same model (its weights and ``BEST`` were built
with it), the same data split (a changed split would move training pairs into the test set), the
same seed, optimizer and learning-rate schedule (the restored optimizer and scheduler state would
silently keep the old ones while ``config.toml`` recorded the new). So resuming uses an *allowlist*:
only the settings in :data:`RESUME_MAY_CHANGE` (budgets, logging and saving cadence, threads and
device, where the corpus lies) and the whole ``[decode]`` section may differ from the saved
``config.toml``. Any other difference — including a field added to the config later — is refused
before anything in the folder is written, with one line naming the keys and both values.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from attnlab import config as config_mod
from attnlab import runs
from attnlab.errors import AttnlabError
from attnlab.i18n import N_, _

RESUME_MAY_CHANGE = frozenset({
    "train.max_steps", "train.max_minutes", "train.max_epochs", "train.eval_every", "train.save_every",
    "train.log_every", "train.keep_checkpoints", "train.average_last", "train.threads", "train.device", "train.eval_max_sentences",
    "train.probe_sentences", "train.max_nonfinite", "train.eval_frac", "train.eval_max_pairs", "data.data_path",
    "train.kernels",  # attnlab/fast/ or the plain code: speed, not the maths
    "train.tensorboard",  # logging only: a resumed run may start or stop writing RUN/tensorboard/
})
RESUME_MAY_CHANGE_SECTIONS = frozenset({"decode"})  # decoding settings never touch the weights or the split

_ABSENT = object()


class ResumeError(AttnlabError):
    """A ``--resume`` asked for a setting the resumed run cannot honour."""


def resume_differences(saved: dict[str, dict[str, Any]], given: dict[str, dict[str, Any]],
                       ) -> list[tuple[str, Any, Any]]:
    """``(dotted key, saved value, given value)`` for every difference outside the allowlist.

    Works on :func:`attnlab.config.to_dict` dicts, so a key present on one side only (a field added
    to a section later) is a difference too.
    """
    out = []
    for section in [*saved, *(s for s in given if s not in saved)]:
        if section in RESUME_MAY_CHANGE_SECTIONS:
            continue
        a, b = saved.get(section, {}), given.get(section, {})
        for key in [*a, *(k for k in b if k not in a)]:
            dotted = f"{section}.{key}"
            if dotted in RESUME_MAY_CHANGE:
                continue
            va, vb = a.get(key, _ABSENT), b.get(key, _ABSENT)
            if dotted == "train.size" and vb == "auto":
                # config.toml records the size `auto` settled on; the loop checks the model it resolves to
                continue
            if va != vb:
                out.append((dotted, va, vb))
    return out


def _show(v: Any) -> str:
    return _("(absent)") if v is _ABSENT else repr(v)


def _trained_model(run_dir: Path) -> dict[str, Any] | None:
    """The model config recorded in the manifest of ``LAST`` (what its weights were built with), if any."""
    manifest = runs.last_manifest(run_dir)  # None when unreadable: the loader says why with its own message
    model = manifest.get("model") if isinstance(manifest, dict) else None
    return model if isinstance(model, dict) else None


def check_resume_overrides(saved_cfg: config_mod.Config, new_cfg: config_mod.Config,
                           run_dir: str | Path | None = None) -> None:
    """Refuse ``new_cfg`` for a resume of the run saved as ``saved_cfg`` unless it differs only where allowed.

    With ``run_dir`` the model settings are also compared with those recorded in ``LAST``'s manifest
    (the model that was actually built and trained). Raises :class:`ResumeError` with one line.
    """
    given = config_mod.to_dict(new_cfg)
    diffs = [(k, N_("{key}: saved {was}, given {now}"), a, b) for k, a, b in resume_differences(config_mod.to_dict(saved_cfg), given)]
    if run_dir is not None and not any(k.startswith("model.") for k, *_ in diffs):
        # config.toml may have been edited (or rewritten by an older attnlab) since LAST was saved
        for key, was in (_trained_model(Path(run_dir)) or {}).items():
            if key in given["model"] and was != given["model"][key]:
                diffs.append((f"model.{key}", N_("{key}: trained with {was}, given {now}"), was, given["model"][key]))
    if diffs:
        shown = "; ".join(_(how).format(key=k, was=_show(a), now=_show(b)) for k, how, a, b in diffs)
        raise ResumeError(
            _("--resume cannot change {shown} (a resumed run keeps its model, data split, seed, optimizer and "
              "schedule; it may change only the limits, logging, saving, threads, device, data.data_path, "
              "probe sentences and [decode]); nothing was written. To train with these settings start a new run: "
              "drop --resume and choose another --out").format(shown=shown)
        )


def set_aside_dead_records(run_dir: Path, names: tuple[str, ...]) -> list[Path]:
    """Move records a dead run left behind (it died before its first checkpoint) out of a new run's way.

    ``metrics.jsonl`` becomes ``metrics.jsonl.old`` (or ``.old.2``, ``.old.3``… when that is taken), and
    so does a folder (``tensorboard/``): nothing is deleted, and the new run's records start afresh.
    Returns the new paths.
    """
    moved = []
    for name in names:
        path = run_dir / name
        if not path.exists():
            continue
        dest, n = run_dir / f"{name}.old", 1
        while dest.exists():
            n += 1
            dest = run_dir / f"{name}.old.{n}"
        path.rename(dest)
        moved.append(dest)
    return moved
