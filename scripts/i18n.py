#!/usr/bin/env python3
"""Keep the Chinese catalogue in step with the code (a developer tool; needs Babel, a dev dependency).

    python scripts/i18n.py missing            # messages the code wraps that the .po lacks, as JSON
    python scripts/i18n.py add FILE.json      # add {msgid: translation} entries, drop obsolete ones, compile

The messages are found as tests/test_i18n.py finds them: every ``_("…")`` / ``N_("…")`` in src/ and every
string the web page marks. ``add`` also removes entries no longer in the code and writes the ``.mo``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from babel.messages.extract import extract_from_dir
from babel.messages.mofile import write_mo
from babel.messages.pofile import read_po, write_po

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "attnlab"
PO = SRC / "locale" / "zh" / "LC_MESSAGES" / "attnlab.po"
MO = PO.with_suffix(".mo")


def in_code() -> dict[str, str]:
    sys.path.insert(0, str(ROOT / "src"))
    from attnlab.web.page_text import page_messages

    found: dict[str, str] = {}
    for fname, _line, msg, _comments, _ctx in extract_from_dir(
        str(SRC), method_map=[("**.py", "python")], keywords={"_": None, "N_": None}
    ):
        found.setdefault(msg, fname)
    for msg, fname in page_messages().items():
        found.setdefault(msg, fname)
    return found


def main() -> int:
    with PO.open("rb") as f:
        cat = read_po(f)
    code = in_code()
    if sys.argv[1:2] == ["missing"]:
        print(json.dumps({m: f for m, f in code.items() if m not in cat}, ensure_ascii=False, indent=1))
        return 0
    if sys.argv[1:2] == ["add"]:
        new = json.loads(Path(sys.argv[2]).read_text(encoding="utf-8")) if len(sys.argv) > 2 else {}
        for msgid, text in new.items():
            if msgid not in code:
                print(f"not in the code, skipped: {msgid!r}", file=sys.stderr)
                continue
            cat.add(msgid, text)
        for m in list(cat):
            if m.id and m.id not in code:
                del cat[m.id]
            elif m.id:  # where the code holds it now (files move)
                m.locations = [(f"src/attnlab/{code[m.id]}", None)]
        with PO.open("wb") as f:
            write_po(f, cat, width=110, omit_header=False)
        with MO.open("wb") as f:
            write_mo(f, cat)
        missing = [m for m in code if m not in cat or not cat[m].string]
        print(f"{len(cat)} messages; {len(missing)} still without a translation", file=sys.stderr)
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
