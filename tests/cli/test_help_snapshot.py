"""The command line kept its surface through the redesign: every command and option of the snapshot
(tests/cli/help_snapshot.json, taken before the package moved) is still there, and every change is one
this file names as intended."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from attnlab.cli import make_parser

SNAPSHOT = Path(__file__).with_name("help_snapshot.json")

#: Options added since the snapshot, on purpose: command → options.
ADDED: dict[str, set[str]] = {
    "evaluate": {"--src", "--ref"},  # your own test files, scored with sacreBLEU and chrF
    "data": {"--write-tsv"},  # a corpus (e.g. the numbers task in Japanese) as a TSV that --data reads
    "train": {"--log-format", "--log-interval"},  # progress a program can read: plain lines or JSON
    "serve": {"--max-sentences",  # how long a list /api/translate takes
              "--max-client-connections", "--send-timeout"},  # nginx's limit_conn and send_timeout: no client starves the rest
    "demo": {"--seed"},  # which of the demo's results hold over seeds (the notes' sentences, the map)
    "compare": {"--timing-cap"},  # each speed timed again until its 95 % interval is ±10 %, at most this long
}
#: The decoding options every decoding command shares (cli/common.py DECODE_OPTIONS), fairseq's names.
_DECODE = {"--length-penalty", "--max-len-a", "--max-len-b", "--batch-size", "--max-tokens", "--no-repeat-ngram-size",
           "--sampling", "--sampling-topk", "--temperature", "--seed"}
ADDED["translate"] = _DECODE | {"--format"}  # scored n-best lines (tsv, jsonl) as fairseq's H- lines
ADDED["evaluate"] = ADDED["evaluate"] | _DECODE | {"--output"}  # the hypotheses kept for sacreBLEU or COMET
ADDED["export"] = _DECODE | {"--beam", "--nbest"}  # the export's decode defaults
ADDED["serve"] = ADDED["serve"] | _DECODE | {"--beam", "--nbest"}  # every request's decode defaults
#: Commands added since the snapshot, on purpose.
ADDED_COMMANDS = {"average"}  # checkpoint averaging, as fairseq's, OpenNMT's and JoeyNMT's
#: Positionals added at the end, on purpose: evaluate RUN decode.beam_size=4 (a decode setting).
ADDED_POSITIONALS: dict[str, list[str]] = {"evaluate": ["overrides"], "export": ["overrides"]}
#: Options removed since the snapshot, on purpose (none: a removed option breaks someone's script).
REMOVED: dict[str, set[str]] = {}


def surface() -> dict[str, dict[str, list[str]]]:
    def one(p: argparse.ArgumentParser) -> dict[str, list[str]]:
        return {"options": sorted(s for a in p._actions if a.help is not argparse.SUPPRESS for s in a.option_strings),
                "positionals": [a.dest for a in p._actions
                                if not a.option_strings and not isinstance(a, argparse._SubParsersAction)]}

    p = make_parser()
    sub = next(a for a in p._actions if isinstance(a, argparse._SubParsersAction))
    return {"": one(p), **{name: one(sp) for name, sp in sub.choices.items()}}


def test_every_command_of_the_snapshot_is_still_there():
    before, now = json.loads(SNAPSHOT.read_text(encoding="utf-8")), surface()
    assert sorted(before) == sorted(set(now) - ADDED_COMMANDS)


def test_options_changed_only_where_intended():
    before, now = json.loads(SNAPSHOT.read_text(encoding="utf-8")), surface()
    for command, was in before.items():
        is_ = now[command]
        assert is_["positionals"] == was["positionals"] + ADDED_POSITIONALS.get(command, []), command
        assert set(is_["options"]) - set(was["options"]) == ADDED.get(command, set()), command
        assert set(was["options"]) - set(is_["options"]) == REMOVED.get(command, set()), command
