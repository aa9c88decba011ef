"""attnlab: train, evaluate, serve and explain attention-based translation models.

In a notebook or a script::

    import attnlab
    tr = attnlab.load("runs/transformer")        # a Translator (the GPU when there is one)
    tr.translate("i'm home .")                   # 'je suis chez moi.'
    tr.attention("i'm home .").plot("cross")     # a matplotlib Figure, shown inline in Jupyter
    run = attnlab.train("transformer", "runs/t", ["data.dataset=numbers", "train.max_steps=300"])

``load``, ``train``, ``Run`` and ``Translator`` are loaded on first use (:mod:`attnlab.api`), so
importing the package (and ``attnlab --help``) stays cheap: no torch until a model is needed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from attnlab._version import __version__

__all__ = ["Run", "Translator", "__version__", "load", "train"]

_LAZY = {"load": "attnlab.api", "train": "attnlab.api", "Run": "attnlab.api", "Translator": "attnlab.translator"}

if TYPE_CHECKING:
    from attnlab.api import Run, load, train
    from attnlab.translator import Translator


def __getattr__(name: str) -> Any:
    # PEP 562: the notebook API imports torch, which the CLI's --help and `import attnlab` must not pay for.
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'attnlab' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
