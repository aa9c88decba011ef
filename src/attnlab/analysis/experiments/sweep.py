"""`attnlab sweep`: a small hyperparameter search (grid or random) under a time budget per trial (notes §10).

Each grid axis is a typed dotted override with several values, ``train.lr=1e-3,3e-3``; the trials are
the Cartesian product of the axes (or ``random`` distinct points drawn from it). Trials run one after
another (a laptop's cores are better spent on one training than split between several) with
:func:`attnlab.training.loop.train`, each into ``OUT/trial-XX`` — an ordinary run folder that every
other command (``doctor``, ``evaluate``, ``attention``) can read. The best trial is the one with the
highest validation BLEU, ties broken by the lower validation loss; the config it trained with (its
run folder's, ``train.size`` resolved) is saved as ``OUT/best.toml``, and :meth:`SweepResult.train_command` is the
``attnlab train`` line that reproduces it (its ``--model`` is the best trial's kind, which a
``model.kind`` axis makes differ from the sweep's ``--model``).

Outputs: ``sweep.json`` (every trial: overrides, scores, steps, speed, status), ``sweep.md`` (the
table), ``sweep.png``/``.svg`` (BLEU and validation loss per trial) and ``best.toml``.
"""

from __future__ import annotations

import itertools
import math
import random
import shlex
import signal
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from attnlab import config as config_mod
from attnlab.analysis.report import TextReport
from attnlab.config import Config, ConfigError
from attnlab.data import corpus
from attnlab.errors import AttnlabError
from attnlab.files import atomic_write_json, atomic_write_text, writable_folder
from attnlab.i18n import _
from attnlab.interrupts import Interrupted
from attnlab.runs import read_metrics, read_run
from attnlab.training.loop import NonFiniteLossError, train
from attnlab.viz.figure import new_figure, save_figure


@dataclass
class Trial:
    index: int
    name: str  # folder name, trial-XX
    overrides: dict[str, str]  # axis -> value, as given on the command line
    status: str = "pending"  # "ok", "diverged" (non-finite loss), "interrupted" (a signal) or "failed: <message>"
    valid_bleu: float = float("nan")  # best validation BLEU of the trial
    valid_loss: float = float("nan")  # lowest validation loss of the trial
    steps: int = 0
    tokens_per_s: float = 0.0
    seconds: float = 0.0
    stopped_by: str = ""
    doctor: str = ""  # the doctor's short verdict on the trial's curves (notes §10), "" if it could not read them


@dataclass
class SweepResult(TextReport):
    """The trials and the best one: ``format()`` is the Markdown table (``sweep.md``), ``figure()``
    BLEU and validation loss per trial (``sweep.png``), ``to_json()`` ``sweep.json``."""

    out_dir: Path
    axes: dict[str, list[str]]
    trials: list[Trial] = field(default_factory=list)
    best: int | None = None  # index into trials
    best_config: Config | None = None  # the config the best trial trained with (best.toml)
    data_path: str | None = None  # the corpus the best trial read (``--data``): best.toml holds no path

    def _format(self) -> str:
        return _table(self)

    def figure(self):
        return _figure(self)

    def train_command(self, out: str = "runs/best") -> str:
        """The ``attnlab train`` line that trains the best trial again into ``out``: ``best.toml`` with the
        best trial's own kind (``--model`` must agree with the file's ``model.kind``) and, for a corpus read
        from a path, ``--data`` (a run's config records no path, so ``best.toml`` cannot name it)."""
        if self.best_config is None:
            raise AttnlabError(_("the sweep has no best trial yet"))
        data = f" --data {shlex.quote(self.data_path)}" if self.data_path else ""
        return (f"attnlab train --model {self.best_config.model.kind} "
                f"--config {shlex.quote(str(self.out_dir / 'best.toml'))}{data} --out {shlex.quote(out)}")

    def to_json(self) -> dict[str, Any]:
        def clean(x: Any) -> Any:
            return None if isinstance(x, float) and not math.isfinite(x) else x

        return {
            "axes": self.axes,
            "best": self.best,
            "best_trial": self.trials[self.best].name if self.best is not None else None,
            "trials": [{k: clean(v) for k, v in asdict(t).items()} for t in self.trials],
        }


def parse_grid(items: list[str]) -> dict[str, list[str]]:
    """``["train.lr=1e-3,3e-3", "model.num_layers=1,2"]`` → ``{"train.lr": ["1e-3", "3e-3"], ...}``.

    Raises :class:`ConfigError` for an item without ``=``, an empty value list or a repeated axis.
    Values are checked later, against the config's types, when each trial's config is built.
    """
    axes: dict[str, list[str]] = {}
    for item in items:
        if "=" not in item or "." not in item.split("=", 1)[0]:
            raise ConfigError(
                _("--grid item {item!r} must look like section.key=v1,v2, e.g. train.lr=1e-3,3e-3").format(item=item)
            )
        key, values = item.split("=", 1)
        key = key.strip()
        vals = [v.strip() for v in values.split(",") if v.strip()]
        if not vals:
            raise ConfigError(_("--grid item {item!r} lists no values; give them comma-separated: "
                                "{key}=v1,v2").format(item=item, key=key))
        if key in axes:
            raise ConfigError(_("--grid names {key} twice; list all its values in one item: {key}=v1,v2").format(key=key))
        axes[key] = vals
    if not axes:
        raise ConfigError(_("--grid needs at least one axis, e.g. --grid train.lr=1e-3,3e-3"))
    return axes


def grid_points(axes: dict[str, list[str]], random_n: int = 0, seed: int = 0) -> list[dict[str, str]]:
    """Every combination of the axes in order, or ``random_n`` distinct ones drawn with ``seed``."""
    keys = list(axes)
    points = [dict(zip(keys, combo)) for combo in itertools.product(*(axes[k] for k in keys))]
    if random_n and random_n < len(points):
        points = random.Random(seed).sample(points, random_n)
    return points


def trial_config(base: Config, point: dict[str, str], minutes: float) -> Config:
    """The base config with the trial's overrides and the time budget (``train.max_minutes``)."""
    extra = [f"train.max_minutes={minutes}"] if minutes > 0 else []
    return config_mod.apply_overrides(base, extra + [f"{k}={v}" for k, v in point.items()])


def _scores(run_dir: Path) -> tuple[float, float]:
    valid = [r for r in read_metrics(run_dir) if r.get("event") == "valid"]
    bleus = [r["valid_bleu"] for r in valid if isinstance(r.get("valid_bleu"), int | float)]
    losses = [
        r["valid_loss"]
        for r in valid
        if isinstance(r.get("valid_loss"), int | float) and math.isfinite(r["valid_loss"])
    ]
    return (max(bleus) if bleus else float("nan"), min(losses) if losses else float("nan"))


def _rank_key(t: Trial) -> tuple[float, float]:
    bleu = t.valid_bleu if math.isfinite(t.valid_bleu) else -1.0
    loss = t.valid_loss if math.isfinite(t.valid_loss) else math.inf
    return (bleu, -loss)


def run(
    base: Config,
    axes: dict[str, list[str]],
    out_dir: str | Path,
    minutes_per_trial: float,
    random_n: int = 0,
    seed: int = 0,
    progress: bool = False,
    log=print,
) -> SweepResult:
    """Train every trial into ``out_dir/trial-XX`` and pick the best; writes the outputs listed above.

    Every trial's config is built (and so validated) before the first one trains: a typo in the grid
    fails at once, not after an hour. A trial whose loss diverges is recorded as ``diverged`` and the
    sweep goes on. Raises :class:`AttnlabError` if ``out_dir`` already holds a sweep, or no trial
    produced a score.
    """
    out_dir = Path(out_dir)
    if (out_dir / "sweep.json").exists() or any(out_dir.glob("trial-*")):
        raise AttnlabError(_("{out_dir} already holds a sweep; choose another --runs-dir").format(out_dir=out_dir))
    if minutes_per_trial <= 0 and not base.train.max_steps and not base.train.max_epochs:
        raise AttnlabError(
            _("a trial needs a budget: give --max-minutes, train.max_steps or train.max_epochs")
        )
    points = grid_points(axes, random_n, seed)
    configs = [trial_config(base, p, minutes_per_trial) for p in points]
    writable_folder(out_dir, "--runs-dir")
    result = SweepResult(out_dir, axes)
    prepared_cache: dict[Any, Any] = {}  # data config -> prepared corpus (trials that only vary lr share it)
    width = max(2, len(str(len(points) - 1)))
    for i, (point, cfg) in enumerate(zip(points, configs)):
        trial = Trial(i, f"trial-{i:0{width}d}", point)
        result.trials.append(trial)
        log(f"[{i + 1}/{len(points)}] {trial.name}: " + " ".join(f"{k}={v}" for k, v in point.items()))
        if cfg.data not in prepared_cache:
            prepared_cache = {cfg.data: corpus.prepare(cfg.data)}  # keep one: corpora can be large
        stopped_by = _run_trial(trial, cfg, out_dir, prepared_cache[cfg.data], progress, log)
        atomic_write_json(out_dir / "sweep.json", result.to_json())  # progress survives an interrupted sweep
        if stopped_by is not None:  # Ctrl-C or SIGTERM stops the sweep, not only this trial
            log(_("interrupted: {trial} saved its last checkpoint; the sweep stopped there ({path} holds the trials "
                  "so far)").format(trial=trial.name, path=out_dir / "sweep.json"))
            raise Interrupted(stopped_by)
    _pick_best(result, configs)
    return result


def _run_trial(trial: Trial, cfg: Config, out_dir: Path, prepared, progress: bool, log) -> int | None:
    """Train one trial into ``out_dir/trial.name`` and record its status, speed and scores in ``trial``;
    returns the signal that stopped its training (then its status is ``interrupted``), else None."""
    t0 = time.monotonic()
    stopped_by = None
    try:
        res = train(
            cfg,
            out_dir / trial.name,
            progress=progress,
            prepared=prepared,
            argv=["attnlab", "sweep", *(f"{k}={v}" for k, v in trial.overrides.items())],
        )
        trial.status, trial.steps, trial.stopped_by = "ok", res.step, res.stopped_by
        trial.tokens_per_s = res.tokens_per_s
        if res.stopped_by == "signal":
            trial.status, stopped_by = "interrupted", res.signal or signal.SIGINT
    except NonFiniteLossError as e:
        trial.status = "diverged"
        log(_("  diverged: {error}").format(error=e))
    except AttnlabError as e:
        trial.status = f"failed: {e}"
        log(_("  failed: {error}").format(error=e))
    trial.seconds = time.monotonic() - t0
    trial.valid_bleu, trial.valid_loss = _scores(out_dir / trial.name)
    trial.doctor = _doctor(out_dir / trial.name)
    log(
        _("  BLEU {bleu:.2f}  valid loss {loss:.3f}  ({steps} steps, {seconds:.0f} s, {status}); doctor: {doctor}").format(
            bleu=trial.valid_bleu, loss=trial.valid_loss, steps=trial.steps, seconds=trial.seconds,
            status=trial.status, doctor=trial.doctor or "-")
    )
    return stopped_by


def _doctor(run_dir: Path) -> str:
    """The doctor's short verdict on one trial: the same rules as `attnlab doctor` on that folder."""
    from attnlab.analysis.diagnose import doctor

    try:
        return doctor.run(run_dir).short_verdict()
    except AttnlabError:  # a trial that failed before logging anything has no curves to read
        return ""


def _pick_best(result: SweepResult, configs: list[Config]) -> None:
    """Mark the best scored trial and write ``best.toml``, ``sweep.json``, ``sweep.md`` and the figure.

    Raises :class:`AttnlabError` when no trial finished with a validation score."""
    out_dir = result.out_dir
    scored = [
        t
        for t in result.trials
        if t.status == "ok" and (math.isfinite(t.valid_bleu) or math.isfinite(t.valid_loss))
    ]
    if not scored:
        atomic_write_json(out_dir / "sweep.json", result.to_json())
        raise AttnlabError(
            _("no trial finished with a validation score (see {value}); lower train.lr or give each "
              "trial more time").format(value=out_dir / 'sweep.json')
        )
    best = max(scored, key=_rank_key)
    result.best = best.index
    result.data_path = configs[best.index].data.data_path
    try:  # what it trained with: train.size=auto resolved, which `train --config best.toml` keeps as it is
        result.best_config = read_run(out_dir / best.name).config
    except AttnlabError:
        result.best_config = configs[best.index]
    atomic_write_text(out_dir / "best.toml", config_mod.dumps_toml(result.best_config))
    atomic_write_json(out_dir / "sweep.json", result.to_json())
    atomic_write_text(out_dir / "sweep.md", result.format() + "\n")
    save_figure(result.figure(), out_dir / "sweep")


def _table(result: SweepResult) -> str:
    """The trials as a markdown table, best first (ranked by BLEU, then validation loss)."""
    axes = list(result.axes)
    head = [_("trial"), *axes, _("valid BLEU"), _("valid loss"), _("steps"), _("tokens/s"), _("seconds"), _("status"),
            "doctor"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for t in sorted(result.trials, key=_rank_key, reverse=True):
        mark = " ★" if t.index == result.best else ""
        lines.append(
            "| "
            + " | ".join(
                [
                    t.name + mark,
                    *(t.overrides[a] for a in axes),
                    f"{t.valid_bleu:.2f}",
                    f"{t.valid_loss:.3f}",
                    str(t.steps),
                    f"{t.tokens_per_s:,.0f}",
                    f"{t.seconds:.0f}",
                    t.status,
                    t.doctor or "-",
                ]
            )
            + " |"
        )
    return "\n".join(lines)


def _figure(result: SweepResult):
    """Validation BLEU and loss per trial, the best one highlighted."""
    trials = result.trials
    labels = [
        f"{t.name}\n" + "\n".join(f"{k.split('.')[-1]}={v}" for k, v in t.overrides.items()) for t in trials
    ]
    fig = new_figure((max(6.0, 1.4 * len(trials) + 2), 4.5))
    ax_b, ax_l = fig.subplots(1, 2)
    colors = ["tab:red" if t.index == result.best else "tab:blue" for t in trials]
    xs = range(len(trials))
    ax_b.bar(xs, [t.valid_bleu if math.isfinite(t.valid_bleu) else 0.0 for t in trials], color=colors)
    ax_l.bar(xs, [t.valid_loss if math.isfinite(t.valid_loss) else 0.0 for t in trials], color=colors)
    for ax, title, ylabel in (
        (ax_b, _("validation BLEU (higher is better)"), "BLEU"),
        (ax_l, _("validation loss (lower is better)"), _("cross-entropy per token")),
    ):
        ax.set_xticks(list(xs), labels, fontsize=7)
        ax.set(title=title, ylabel=ylabel)
        ax.grid(axis="y", alpha=0.3)
    best = trials[result.best].name if result.best is not None else _("none")
    fig.suptitle(_("sweep {name}: {n} trials, best {best} (red)").format(name=result.out_dir.name, n=len(trials),
                                                                          best=best))
    return fig
