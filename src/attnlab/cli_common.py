"""What the ``attnlab`` command modules share: the config arguments and how they become a Config.

:mod:`attnlab.cli` and the modules that add subcommands (``inspection.commands_views``,
``inspection.commands_analysis``, ``web.commands``) import this module; it imports none of them,
so the dependency points one way: ``cli`` → command modules → ``cli_common`` → ``config``.
"""

from __future__ import annotations

import argparse

from attnlab import config as config_mod
from attnlab.config import Config

__all__ = ["add_config_args", "build_config"]


def add_config_args(p: argparse.ArgumentParser) -> None:
    """``--config``, ``--data`` and the trailing ``section.key=value`` overrides."""
    p.add_argument("--config", help="TOML config file (sections data/model/train/decode)")
    p.add_argument("--data", metavar="PATH", help="fra-eng zip, fra.txt or folder (else $ATTNLAB_DATA_DIR, then the cache)")
    p.add_argument("overrides", nargs="*", metavar="section.key=value",
                   help="typed overrides, e.g. train.lr=3e-4 model.num_layers=3")


def build_config(args, kind: str | None = None, dataset: str | None = None, base: Config | None = None) -> Config:
    """Preset for the model kind, then --config, then shortcut flags, then dotted overrides."""
    cfg = base or Config()
    if kind is not None and base is None:
        cfg = config_mod.preset(kind)
    if getattr(args, "config", None):
        cfg = config_mod.load_toml(args.config, cfg)
    extra = []
    if kind is not None:
        extra.append(f"model.kind={kind}")
    if dataset is not None:
        extra.append(f"data.dataset={dataset}")
    if getattr(args, "data", None):
        extra.append(f"data.data_path={args.data}")
    for flag, key in (("max_minutes", "train.max_minutes"), ("max_steps", "train.max_steps"),
                      ("seed", "train.seed"), ("threads", "train.threads"), ("device", "train.device"),
                      ("size", "train.size")):
        if getattr(args, flag, None) is not None:
            extra.append(f"{key}={getattr(args, flag)}")
    return config_mod.apply_overrides(cfg, extra + list(getattr(args, "overrides", []) or []))
