"""The Figure every attnlab drawing returns: matplotlib's own, on the Agg canvas, shown inline by Jupyter.

Imported only when something is drawn (:func:`attnlab.viz.figure.new_figure`): matplotlib is
never loaded by the core, the CLI's ``--help`` or a server that draws nothing.
"""

from __future__ import annotations

import io

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from attnlab.viz.fonts import use_cjk_fallback

__all__ = ["InlineFigure"]


class InlineFigure(Figure):
    """A ``matplotlib.figure.Figure`` that Jupyter displays as a PNG without pyplot or ``%matplotlib``.

    Drawn with the object API (no pyplot state: safe in servers and threads); ``fig.savefig`` and every
    ``Figure`` method work as usual.
    """

    def __init__(self, *args, **kwargs) -> None:
        use_cjk_fallback()  # Chinese labels (--lang zh) and CJK tokens: a CJK font where one is installed
        super().__init__(*args, **kwargs)
        FigureCanvasAgg(self)

    def png(self, dpi: int = 100) -> bytes:
        """The figure as PNG bytes."""
        buf = io.BytesIO()
        self.savefig(buf, format="png", dpi=dpi)
        return buf.getvalue()

    def _repr_png_(self) -> bytes:  # IPython's rich display hook
        return self.png()
