"""The README's Python snippets under "Talking to it" run as written against the bundled repository
(only the address changed), in a folder holding the sample images clients/examples/make_images.py
writes: tritonclient's ``simple`` call, then ferry_client's infer, classify, detect, embed and
recognize calls on the bundled models the snippet names."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from ..conftest import ROOT, RunningServer

EXAMPLES = ROOT / "clients" / "examples"


def talking_to_it_snippets() -> list[str]:
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## Talking to it") : readme.index("### Measuring")]
    return re.findall(r"```python\n(.*?)```", section, re.S)


def test_the_client_snippets_run_as_written(server: RunningServer, tmp_path: Path) -> None:
    snippets = talking_to_it_snippets()
    assert len(snippets) == 2, "README's 'Talking to it' should hold the tritonclient and ferry_client snippets"
    made = subprocess.run(
        [sys.executable, str(EXAMPLES / "make_images.py"), str(tmp_path)], capture_output=True, text=True, timeout=120
    )
    assert made.returncode == 0, made.stderr
    script = "\n".join(snippets).replace("127.0.0.1:8000", server.http_url)
    ran = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    printed = ran.stdout.splitlines()
    assert printed[-1] == "(84,) Ferry reads this line", ran.stdout
