"""No absolute path of one machine is committed under evidence/ or contracts/ (issue 19
item 2): evidence must be re-verifiable from any clone, so it names files by repository-
relative path or cache digest, and commands as the user typed them."""

from __future__ import annotations

import json
from pathlib import Path

from gates.io.jsonpath import json_path
from gates.io.machine_paths import absolute_paths, find_absolute

ROOT = Path(__file__).resolve().parents[3]


def machine_paths_under(*folders: str) -> list[str]:
    found = []
    for folder in folders:
        for path in sorted((ROOT / folder).rglob("*")):
            if not path.is_file():
                continue
            shown = path.relative_to(ROOT)
            text = path.read_text(encoding="utf-8", errors="replace")
            if path.suffix == ".json":
                try:
                    doc = json.loads(text)
                except json.JSONDecodeError:
                    pass
                else:
                    found += [f"{shown}: {json_path(at)} {t}" for at, t in absolute_paths(doc)]
                    continue
            for n, line in enumerate(text.splitlines(), start=1):
                token = find_absolute(line)
                if token:
                    found.append(f"{shown}:{n}: {token}")
    return found


def test_no_absolute_path_under_evidence_or_contracts():
    found = machine_paths_under("evidence", "contracts")
    assert not found, f"{len(found)} absolute paths, e.g.\n" + "\n".join(found[:20])
