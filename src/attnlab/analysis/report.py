"""The one protocol every analysis answers through: ``run(...) -> Report``.

Each question the notes ask (``explain``, ``heads``, ``align``, ``doctor``, ``compare``, ``sweep``,
``scaling``, ``attribute``, ``params``, ``positional``, ``selfcheck``) is a module of :mod:`attnlab.analysis`
with a function ``run(...)`` that computes the answer and returns a report. The CLI, the web routes and the
notebook call ``run`` and then only these three methods, so each answer is written once:

- ``format(lang=None) -> str``: the answer as text for a terminal, in ``lang`` (``en``, ``zh``; ``None``:
  the current language, :mod:`attnlab.i18n`);
- ``figure() -> Figure | None``: the answer drawn (an :class:`~attnlab.viz.figure.InlineFigure`, shown inline
  in Jupyter), or None for an answer that has nothing to draw;
- ``to_json() -> dict``: the answer as JSON-ready data (``--json``, the web API).

A report with more than one figure (one per attention kind, say) also has ``figures() -> dict[str,
Figure]``, its figures by name (``figure()`` is then the first); :meth:`TextReport.figures` gives the
others ``{"": figure()}``, or ``{}`` when there is nothing to draw.

:class:`TextReport` is the base most reports derive from: it turns ``format(lang)`` into a call of
``_format()`` under that language.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from attnlab import i18n

__all__ = ["Report", "TextReport", "figures"]


@runtime_checkable
class Report(Protocol):
    """What ``run(...)`` of every analysis returns."""

    def format(self, lang: str | None = None) -> str: ...

    def figure(self) -> Any: ...

    def to_json(self) -> dict[str, Any]: ...


def figures(report: Report) -> dict[str, Any]:
    """``report``'s figures by name: its ``figures()`` where it has one, else ``{"": figure()}`` (``{}`` when
    ``figure()`` is None); a front end saves each as ``<stem>_<name>``, the unnamed one as ``<stem>``."""
    named = getattr(report, "figures", None)
    if callable(named):
        return named()
    fig = report.figure()
    return {} if fig is None else {"": fig}


class TextReport:
    """A report whose text is written by ``_format()`` in the current language; ``format(lang)`` switches
    the language for that call only. Subclasses (dataclasses) override :meth:`figure` and :meth:`to_json`
    where they have something to draw or to export."""

    def _format(self) -> str:  # pragma: no cover - every subclass writes its own
        raise NotImplementedError

    def format(self, lang: str | None = None) -> str:
        with i18n.using(lang):
            return self._format()

    def figure(self) -> Any:
        return None

    def figures(self) -> dict[str, Any]:
        fig = self.figure()
        return {} if fig is None else {"": fig}

    def to_json(self) -> dict[str, Any]:
        import dataclasses

        from attnlab.files import jsonable

        return jsonable(self) if dataclasses.is_dataclass(self) else {}

    def __str__(self) -> str:
        return self.format()
