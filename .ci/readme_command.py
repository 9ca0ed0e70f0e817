"""Print the README's test command (the first line of the fenced block after "Run the tests") as written
there, so .ci/run runs it verbatim. A README that loses it fails here, loudly, rather than letting CI run
something else.
"""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"
LEAD = "Run the tests"


def test_command(text: str) -> str:
    lead = text.find(LEAD)
    if lead < 0:
        raise SystemExit(f"README.md has no paragraph starting {LEAD!r}")
    block = re.compile(r"```bash\n(.+?)\n", re.S).search(text, lead)
    if block is None:
        raise SystemExit(f"README.md has no ```bash block after {LEAD!r}")
    return block.group(1).strip()


if __name__ == "__main__":
    print(test_command(README.read_text(encoding="utf-8")))
