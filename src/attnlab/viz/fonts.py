"""A CJK font fallback for figures: Chinese labels (``--lang zh``) and source characters draw as glyphs.

matplotlib's default font, DejaVu Sans, has no Chinese glyphs: without a fallback a Chinese title or a
token such as 日本 becomes empty boxes and a "Glyph missing" warning. matplotlib (3.6+) falls back
glyph by glyph along the ``font.family`` list, so :func:`use_cjk_fallback` appends one installed CJK
family after the user's own: Latin text keeps its font, only what it lacks comes from the CJK one.

Where no CJK font is installed nothing changes (naming a missing family would warn on every text).
``scripts/setup.sh`` installs Debian's ``fonts-noto-cjk`` where it can, and says how otherwise. A font
installed after matplotlib built its font cache is still found: the system's font files are searched
for a CJK one, and that file added to this process's font manager.

Imported only when something is drawn (:mod:`attnlab.viz.figure`), like matplotlib itself.
"""

from __future__ import annotations

import functools
from pathlib import Path

__all__ = ["CJK_FAMILIES", "cjk_family", "use_cjk_fallback"]

#: CJK families in order of preference: Simplified Chinese first (the notes'), then fonts that cover
#: the same Han characters (matplotlib reads the first face of a .ttc: Debian's Noto file is "JP").
CJK_FAMILIES = (
    "Noto Sans CJK SC", "Noto Sans SC", "Source Han Sans SC", "Noto Sans CJK TC", "Noto Sans CJK JP",
    "Noto Sans CJK KR", "Noto Serif CJK SC", "Noto Serif CJK JP", "WenQuanYi Zen Hei", "WenQuanYi Micro Hei",
    "Droid Sans Fallback", "AR PL UMing CN", "SimHei", "Microsoft YaHei", "PingFang SC", "Hiragino Sans GB",
)
#: File-name fragments of CJK fonts, to find one matplotlib's cache does not list yet.
_FILE_HINTS = ("cjk", "wqy", "droidsansfallback", "uming", "ukai", "simhei", "msyh", "pingfang", "sourcehansans")


def _installed(font_manager) -> set[str]:
    return {f.name for f in font_manager.fontManager.ttflist}


@functools.cache
def cjk_family() -> str | None:
    """The first installed family of :data:`CJK_FAMILIES`, or ``None`` when there is none.

    A CJK font file on the system that matplotlib's cached font list misses (installed after the cache
    was built) is added to the font manager first."""
    from matplotlib import font_manager

    names = _installed(font_manager)
    if not names.intersection(CJK_FAMILIES):
        for path in font_manager.findSystemFonts():
            if any(h in Path(path).name.lower().replace("-", "").replace("_", "") for h in _FILE_HINTS):
                try:
                    font_manager.fontManager.addfont(path)
                except (OSError, RuntimeError, ValueError):  # an unreadable font file is skipped
                    continue
        names = _installed(font_manager)
    return next((f for f in CJK_FAMILIES if f in names), None)


def use_cjk_fallback() -> str | None:
    """Append the installed CJK family (if any) to ``rcParams["font.family"]``, once; returns it.

    The families already there stay first, so Latin text is drawn as before."""
    import matplotlib

    family = cjk_family()
    if family is not None:
        current = matplotlib.rcParams["font.family"]
        current = [current] if isinstance(current, str) else list(current)
        if family not in current:
            matplotlib.rcParams["font.family"] = [*current, family]
    return family
