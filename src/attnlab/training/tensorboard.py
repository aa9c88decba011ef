"""Optional TensorBoard logging of a training run (``train.tensorboard = true``) into ``RUN/tensorboard/``.

``tensorboard --logdir RUN/tensorboard`` (or ``--logdir runs/`` for every run) then shows, on rank 0's
figures (the other ranks hold a no-op :class:`Board`):

- at each ``train`` record of ``metrics.jsonl``: ``train/loss`` (per target token), ``train/lr``,
  ``train/tokens_per_s``;
- at each validation: ``valid/loss``, ``valid/ppl``, ``valid/acc``, ``valid/bleu``, ``valid/chrf``, and for
  each probe sentence ``probes/N/KIND``: its heads-averaged attention, one image per validation with the
  layers side by side (rows: the output tokens; columns: the keys, each labelled with its token; colour
  0 → 1 on one fixed scale, so the step slider shows the map sharpening), with the tokens also as text
  (``probes/N``). ``KIND`` is
  ``cross`` (the notes' §25 alignment) where the model has it, else what the model records (``self``).

The images are the probe records the validation just wrote, drawn with numpy and Pillow, not a second
capture (docs/explanations/training.md).

A resumed run appends to the same folder: its writer starts with ``purge_step`` = the resumed step + 1,
so whatever a killed process logged after its last checkpoint is hidden (as ``metrics.jsonl`` forgets
it) and no step appears twice.

The ``tensorboard`` package is the ``tensorboard`` extra; without it ``train.tensorboard=true`` stops
before anything is written (:func:`require`). Nothing here imports it unless logging is on.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from attnlab.errors import AttnlabError
from attnlab.i18n import _
from attnlab.runs.probes import read_probes

BOARD_DIR = "tensorboard"  # inside the run folder
TRAIN_SCALARS = {"loss": "train/loss", "lr": "train/lr", "tokens_per_s": "train/tokens_per_s"}
VALID_SCALARS = {"valid_loss": "valid/loss", "valid_ppl": "valid/ppl", "valid_acc": "valid/acc",
                 "valid_bleu": "valid/bleu", "valid_chrf": "valid/chrf"}
PROBE_TAIL_BYTES = 4 * 2**20  # the newest probes.jsonl records hold this validation's


class TensorBoardMissingError(AttnlabError):
    """``train.tensorboard=true`` without the ``tensorboard`` package."""


def require(enabled: bool) -> None:
    """Raise :class:`TensorBoardMissingError` (one line) when logging is on and cannot work."""
    if not enabled:
        return
    try:
        from torch.utils.tensorboard import SummaryWriter  # noqa: F401  (raises without the package)
    except ImportError as e:
        raise TensorBoardMissingError(
            _("train.tensorboard=true needs the tensorboard package ({e}); install it with "
              "`pip install -e '.[tensorboard]'` in the attnlab checkout (or `pip install tensorboard`), or set "
              "train.tensorboard=false").format(e=e)
        ) from None


class Board:
    """Where the training records go besides ``metrics.jsonl``: nowhere (logging off, or not rank 0)."""

    def train(self, rec: dict[str, Any]) -> None:
        """A ``train`` record of metrics.jsonl."""

    def valid(self, rec: dict[str, Any], run_dir: Path) -> None:
        """A ``valid`` record, after ``record_probes`` wrote this step's probes into ``run_dir``."""

    def close(self) -> None:
        """Flush and close (the end of the run)."""


class TensorBoard(Board):
    """A ``SummaryWriter`` on ``run_dir/tensorboard``; ``purge_step`` hides older events from that step on."""

    def __init__(self, run_dir: Path, purge_step: int | None) -> None:
        from torch.utils.tensorboard import SummaryWriter  # the optional extra: only when logging is on

        # flush_secs: the curves appear while the run goes, not two minutes late (the default)
        self.writer = SummaryWriter(str(Path(run_dir) / BOARD_DIR), purge_step=purge_step, flush_secs=10)

    def train(self, rec: dict[str, Any]) -> None:
        self._scalars(rec, TRAIN_SCALARS)

    def valid(self, rec: dict[str, Any], run_dir: Path) -> None:
        self._scalars(rec, VALID_SCALARS)
        step = rec["step"]
        for n, entry in enumerate(read_probes(run_dir, max_bytes=PROBE_TAIL_BYTES)["sentences"], start=1):
            now = [r for r in entry["steps"] if r["step"] == step]
            if now:
                self._probe(n, entry["sentence"], now[-1], step)
        self.writer.flush()  # a validation is a moment worth seeing at once

    def close(self) -> None:
        self.writer.close()

    def _scalars(self, rec: dict[str, Any], names: dict[str, str]) -> None:
        for key, tag in names.items():
            value = rec.get(key)
            if isinstance(value, int | float) and math.isfinite(value):
                self.writer.add_scalar(tag, value, rec["step"])

    def _probe(self, n: int, sentence: str, rec: dict[str, Any], step: int) -> None:
        maps = rec["attention"]
        kinds = ["cross"] if "cross" in maps else sorted(maps)
        src, out = list(rec.get("src_tokens", [])), list(rec.get("tgt_tokens", []))
        for kind in kinds:
            keys = src if kind == "cross" else src + ["<bos>"] + out  # decoder-only: source, <bos>, output
            img = attention_image(maps[kind], out, keys)
            if img is not None:
                self.writer.add_image(f"probes/{n}/{kind}", img, step, dataformats="HWC")
        self.writer.add_text(f"probes/{n}", probe_text(sentence, rec), step)


def attention_image(maps: Any, rows: list[str] | None = None, cols: list[str] | None = None,
                    max_side: int = 480) -> np.ndarray | None:
    """Heads-averaged weights ``(layers, T_out, keys)`` as an RGB image ``(H, W, 3)`` uint8: the layers
    side by side, each weight a square of 16 to 32 pixels, darker = larger on the fixed range [0, 1]
    (:data:`attnlab.viz.attention.CMAP`, as in every attention figure); ``rows``
    (the output tokens) label the rows on the left and ``cols`` (the keys) the columns on top of each
    layer, as the notes' heatmaps do (§23). None when empty."""
    from matplotlib import colormaps  # a colour table only: no figure is drawn

    from attnlab.viz.attention import CMAP

    try:
        a = np.clip(np.asarray(maps, dtype=np.float32), 0.0, 1.0)  # (L, T, K)
    except ValueError:  # ragged: not a map record_probes writes
        return None
    if a.ndim != 3 or 0 in a.shape:
        return None
    layers, t_out, keys = a.shape
    cell = max(16, min(32, max_side // max(t_out, keys * layers)))  # readable, and long maps bounded
    gap = np.ones((t_out * cell, max(4, cell // 2), 3), dtype=np.float32)  # white between layers
    tiles = []
    for layer in a:
        tiles.append(colormaps[CMAP](np.repeat(np.repeat(layer, cell, 0), cell, 1))[..., :3])  # (T*cell, K*cell, 3)
        tiles.append(gap)
    heat = (np.concatenate(tiles[:-1], axis=1) * 255).round().astype(np.uint8)
    if rows is None and cols is None:
        return heat
    return _labelled(heat, list(rows or [])[:t_out], list(cols or [])[:keys], cell, keys * cell + gap.shape[1], layers)


def _labelled(heat: np.ndarray, rows: list[str], cols: list[str], cell: int, stride: int, layers: int) -> np.ndarray:
    """``heat`` with ``rows`` written left of its rows and ``cols`` written upwards above each layer's
    columns (Pillow's own font: a few milliseconds, where a matplotlib figure took a fifth of a second)."""
    from PIL import Image, ImageDraw, ImageFont  # Pillow comes with matplotlib

    font = ImageFont.load_default(size=max(11, min(14, cell - 4)))
    short = [t if len(t) <= 14 else t[:13] + "…" for t in rows], [t if len(t) <= 14 else t[:13] + "…" for t in cols]
    width = [max((int(font.getlength(t)) for t in side), default=0) + 6 for side in short]
    left, top = width[0], width[1]
    canvas = Image.new("RGB", (left + heat.shape[1], top + heat.shape[0]), "white")
    canvas.paste(Image.fromarray(heat), (left, top))
    draw = ImageDraw.Draw(canvas)
    for i, tok in enumerate(short[0]):
        draw.text((left - 3, top + i * cell + cell // 2), tok, fill="black", font=font, anchor="rm")
    for j, tok in enumerate(short[1]):
        label = Image.new("L", (max(1, int(font.getlength(tok)) + 2), cell), 0)
        ImageDraw.Draw(label).text((0, cell // 2), tok, fill=255, font=font, anchor="lm")
        label = label.rotate(90, expand=True)  # read bottom to top, ending just above its column
        for layer in range(layers):
            canvas.paste((0, 0, 0), (left + layer * stride + j * cell, top - 3 - label.height), mask=label)
    return np.asarray(canvas)


def probe_text(sentence: str, rec: dict[str, Any]) -> str:
    """The tokens that label an image's rows and columns (TensorBoard's text tab is markdown)."""
    return (f"**{sentence}** → {rec.get('translation', '')}  \n"
            f"rows (output tokens): `{' '.join(rec.get('tgt_tokens', []))}`  \n"
            f"columns (keys): `{' '.join(rec.get('src_tokens', []))}` (decoder-only `self`: then `<bos>` and "
            "the output)  \nlayers left to right; heads averaged; colour 0 → 1")


def open_board(enabled: bool, run_dir: Path, resumed_step: int | None, main: bool) -> Board:
    """The run's board: a :class:`TensorBoard` on rank 0 (``main``) when ``enabled``, else a no-op.
    ``resumed_step``: the step a resumed run continues from (None for a new run)."""
    if not (enabled and main):
        return Board()
    return TensorBoard(run_dir, None if resumed_step is None else resumed_step + 1)
