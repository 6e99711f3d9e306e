"""docs/frontends.md shows the test apps' code verbatim: every block marked
``<!-- file: PATH -->`` must equal that file, and every app file must be shown."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "frontends.md"
SHOWN = ["tests/frontends/assistant-ui/app.tsx", "tests/frontends/copilotkit/app.tsx",
         "tests/frontends/copilotkit/runtime.mjs", "tests/frontends/package.json"]
BLOCK = re.compile(r"<!-- file: (?P<path>\S+) -->\n```\w*\n(?P<code>.*?)```\n", re.DOTALL)


def test_every_snippet_is_the_file_it_names() -> None:
    blocks = {m["path"]: m["code"] for m in BLOCK.finditer(DOC.read_text(encoding="utf-8"))}
    assert sorted(blocks) == sorted(SHOWN)
    for path, code in blocks.items():
        assert code == (ROOT / path).read_text(encoding="utf-8"), f"{path} differs from the doc"
