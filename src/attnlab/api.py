"""The notebook API: ``attnlab.load`` and ``attnlab.train``, the two calls a notebook or a script starts with.

>>> import attnlab                                                        # doctest: +SKIP
>>> run = attnlab.train("transformer", "runs/nb", ["data.dataset=numbers", "train.max_steps=200"])
>>> tr = run.translator()             # or attnlab.load("runs/nb")        # doctest: +SKIP
>>> tr.translate("twenty one")                                            # doctest: +SKIP
'vingt et un'
>>> tr.attention("twenty one").plot("cross", layer=1, head=2)             # doctest: +SKIP
<Figure size … with 2 Axes>

Both are thin: :func:`load` is :meth:`Translator.from_run` (the one loader of the CLI, the web server
and the probes) and :func:`train` is :func:`attnlab.training.loop.train` (the ``attnlab train``
loop) after the config is resolved the way the CLI resolves it.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from attnlab import config as C
from attnlab.errors import AttnlabError
from attnlab.files import read_input
from attnlab.i18n import _
from attnlab.training.loop import TrainResult
from attnlab.training.loop import train as _train_loop
from attnlab.translator import Translator

__all__ = ["Run", "load", "resolve_config", "train"]


def load(run: str | Path | Run, which: str = "best", device: str = "auto") -> Translator:
    """The :class:`~attnlab.translator.Translator` of a run folder (or of a :class:`Run`).

    ``which``: ``best``, ``last`` or ``step-N``; ``device``: ``auto`` (the GPU when one is visible),
    ``cpu``, ``cuda``, ``cuda:N``. Raises :class:`AttnlabError` for a folder that is not a run, a
    missing checkpoint or an unavailable device.
    """
    path = run.run_dir if isinstance(run, Run) else run
    return Translator.from_run(path, which=which, device=device)


@dataclass
class Run(TrainResult):
    """What :func:`train` returns: the :class:`~attnlab.training.loop.TrainResult` (``run_dir``,
    ``step``, ``stopped_by``, ``best_bleu``, ``last_valid``, …) and the ways into the run folder."""

    def translator(self, which: str = "best", device: str = "auto") -> Translator:
        """The trained model, ready to translate and to show its attention (:func:`load`)."""
        return load(self.run_dir, which=which, device=device)

    def metrics(self) -> list[dict[str, Any]]:
        """The records of ``metrics.jsonl`` (``event`` = ``train`` or ``valid``), in order."""
        from attnlab.runs import read_metrics

        return read_metrics(self.run_dir)

    def curves(self):
        """The training curves as a matplotlib ``Figure`` (``None`` before the first record)."""
        from attnlab.viz.curves import curves_figure  # matplotlib: loaded to draw

        return curves_figure(self.run_dir)


def resolve_config(config: C.Config | str | Path | Mapping[str, Any], overrides: Sequence[str] = ()) -> C.Config:
    """The :class:`~attnlab.config.Config` that ``config`` names, with dotted ``overrides`` applied.

    ``config`` is a Config; a model kind (``"transformer"``: its preset); a TOML file; or a dict of
    sections as in the TOML (``{"model": {"kind": "bahdanau"}, "data": {"dataset": "numbers"}}``).
    A file or a dict that names ``model.kind`` starts from that kind's preset, as ``attnlab train
    --model KIND --config FILE`` does. Raises :class:`~attnlab.config.ConfigError` naming the mistake.
    """
    if isinstance(overrides, str):
        raise C.ConfigError(_("overrides must be a list of section.key=value strings, e.g. [{overrides!r}]").format(
            overrides=overrides))
    if isinstance(config, C.Config):
        cfg = config
    elif isinstance(config, Mapping):
        cfg = C.from_dict(dict(config), _preset_for(config))
    elif isinstance(config, str) and config in C.MODEL_KINDS:
        cfg = C.preset(config)
    elif isinstance(config, str | Path):
        cfg = _load_file(Path(config))
    else:
        raise C.ConfigError(
            f"config must be a Config, a model kind ({', '.join(C.MODEL_KINDS)}), a TOML path or a dict, "
            f"not {type(config).__name__}"
        )
    return C.apply_overrides(cfg, list(overrides))


def _preset_for(raw: Mapping[str, Any]) -> C.Config:
    """The preset of the kind ``raw`` names in ``[model] kind`` (the plain defaults when it names none)."""
    model = raw.get("model")
    kind = model.get("kind") if isinstance(model, Mapping) else None
    return C.preset(kind) if isinstance(kind, str) else C.Config()


def _load_file(path: Path) -> C.Config:
    if not path.is_file():
        raise C.ConfigError(
            f"config {str(path)!r} is neither a model kind ({', '.join(C.MODEL_KINDS)}) nor an existing TOML file"
        )
    try:
        raw = tomllib.loads(read_input(path).decode("utf-8"))  # under the cap of every input, as load_toml reads it
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError, AttnlabError):
        raw = {}  # load_toml below says what is wrong with the file
    return C.load_toml(path, _preset_for(raw))


def train(
    config: C.Config | str | Path | Mapping[str, Any],
    out: str | Path,
    overrides: Sequence[str] = (),
    resume: bool = False,
    progress: bool = True,
) -> Run:
    """Train a model into the run folder ``out`` and return the :class:`Run`.

    ``config`` and ``overrides``: see :func:`resolve_config` (e.g. ``train("transformer", "runs/t",
    ["data.dataset=numbers", "train.max_steps=300"])``). ``resume`` continues the run in ``out`` (its
    saved config, then the overrides; ``config`` is not used). ``train.size=auto`` is settled by the training
    session, as for ``attnlab train``; ``train.device=auto`` (the default) trains on the GPU when one is visible. Raises
    :class:`AttnlabError` for a bad config, an unusable ``out`` or missing data.
    """
    if not str(out).strip():
        raise AttnlabError(_("out is empty; give the run folder to train into, e.g. 'runs/notebook'"))
    if resume:
        from attnlab.runs import read_run

        cfg = C.apply_overrides(read_run(Path(out)).config, list(overrides))
    else:
        cfg = resolve_config(config, overrides)
    res = _train_loop(cfg, out, resume=resume, progress=progress)
    return Run(**{f.name: getattr(res, f.name) for f in fields(TrainResult)})
