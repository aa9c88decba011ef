"""How every analysis command shows its answer: :func:`present` runs the analysis, prints the report
(:mod:`attnlab.analysis.report`'s protocol), writes it and says where; :func:`stem` names its files.

A handler parses, checks what it can before the long analysis (the run, the numbers) and calls
``present(lambda: module.run(...), stem(...), save_dir=..., default_dir=...)``; nothing else in ``cli/``
writes a report's files.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from attnlab.i18n import N_, _

#: The line printed for each file written, in the learner's language.
WROTE = N_("wrote {path}")


def stem(command: str, *, sentence: str | None = None, text: Iterable[str] = (), checkpoint: str = "best",
         **settings: Any) -> str:
    """The file stem of ``command``'s answer: the command, then the sentence's or the other texts' slug
    (:func:`attnlab.maps.slug`: readable, with a digest when it loses anything), then each setting that is not
    its default (None = the default; :func:`attnlab.maps.settings_suffix`), then a checkpoint other than
    ``best``. A default invocation keeps the plain name (``heads``); ``heads --sentences 8`` is
    ``heads-sentences8``, so a different sentence or setting never replaces another's file."""
    from attnlab.maps import settings_suffix, slug

    parts = [command] if command else []
    if sentence is not None:
        parts.append(slug(sentence))
    text = [str(t) for t in text]
    if text:
        parts.append(slug(" ".join(text)))
    name = "-".join(parts) + settings_suffix(**settings, checkpoint=None if checkpoint == "best" else checkpoint)
    return name.lstrip("-")


def present(
    analyse: Callable[[], Any],
    name: str | Callable[[Any], str],
    *,
    save_dir: str | Path | None,
    default_dir: Path | None,
    files: tuple[str, ...] = ("md", "json"),
    formats: tuple[str, ...] = ("png", "svg"),
    as_json: bool = False,
    said: str = WROTE,
) -> Any:
    """Run ``analyse()`` (it returns a report) and show its answer: print ``format()`` (``as_json``:
    ``to_json()``, and then nothing else, so stdout parses), write ``<name>.md`` / ``<name>.json`` (those in
    ``files``; ``name`` may be a function of the report) and every figure of :func:`attnlab.analysis.report.figures` as ``<name>[_<figure>].<format>``
    into ``save_dir`` (else ``default_dir``; None: write nothing), atomically, and print ``said`` (translated)
    for each path. A ``save_dir`` that cannot be written fails before the analysis; the default folder (inside
    a run ``analyse`` reads) is made only when there is something to write. Returns the report."""
    from attnlab.files import atomic_write_json, atomic_write_text, writable_folder

    if save_dir:
        writable_folder(Path(save_dir), "--save-dir")  # one line now, not after a long analysis
    report = analyse()
    text = report.format() if not as_json or "md" in files else ""
    print(json.dumps(report.to_json(), indent=2, ensure_ascii=False) if as_json else text)
    folder = Path(save_dir) if save_dir else default_dir
    if folder is None:
        return report
    from attnlab.analysis.report import figures

    drawn = figures(report) if formats else {}
    if not (files or drawn):
        return report
    out = writable_folder(folder, "--save-dir")
    name = name(report) if callable(name) else name
    written = []
    if "md" in files:
        atomic_write_text(out / f"{name}.md", text + "\n")
        written.append(out / f"{name}.md")
    if "json" in files:
        atomic_write_json(out / f"{name}.json", report.to_json())
        written.append(out / f"{name}.json")
    if drawn:
        from attnlab.viz.figure import save_figure

        for key, fig in drawn.items():
            written += save_figure(fig, out / (f"{name}_{key}" if key else name), formats)
    if not as_json:
        for path in written:
            print(_(said).format(path=path))
    return report
