"""Regenerate the example outputs in the top-level README from a running server.

    python clients/examples/readme_outputs.py 127.0.0.1:8000            # print the block
    python clients/examples/readme_outputs.py 127.0.0.1:8000 --write    # replace it in README.md

The server must serve the bundled repository (``ferry serve model_repo``). The images come from
``make_images.py``; ``tests/integration/test_readme_outputs.py`` checks that the README shows what the
current server answers, so a pipeline change that moves a number fails there until this is re-run.
"""

from __future__ import annotations

import json
import sys
import urllib.request
from pathlib import Path

from make_images import example_images

README = Path(__file__).resolve().parents[2] / "README.md"
BEGIN = "<!-- readme_outputs.py: begin -->"
END = "<!-- readme_outputs.py: end -->"
WIDTH = 100

#: (shell command shown, path and query asked, image file, note after the output).
EXAMPLES = [
    (
        "curl -s 127.0.0.1:8000/v2/models/face_detector/detect -F image=@photo.jpg",
        "face_detector/detect",
        "photo.jpg",
        "",
    ),
    (
        'curl -s "127.0.0.1:8000/v2/models/document_orientation/classify?top_k=1" -F image=@scan.png',
        "document_orientation/classify?top_k=1",
        "scan.png",
        "<- the page is turned 90 degrees",
    ),
]


def post_image(server: str, path: str, image: bytes) -> str:
    """The server's JSON answer, as text, for one image posted as the raw body."""
    request = urllib.request.Request(
        f"http://{server}/v2/models/{path}", data=image, headers={"Content-Type": "application/octet-stream"}
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        return json.dumps(json.loads(response.read()), separators=(",", ":"))


def comment_lines(text: str, note: str = "") -> list[str]:
    """``text`` as shell comments of at most WIDTH characters, broken after commas."""
    lines, current = [], "# "
    for piece in text.split(","):
        piece = piece + ","
        if len(current) + len(piece) > WIDTH and current.strip("# "):
            lines.append(current)
            current = "#   "
        current += piece
    lines.append(current.removesuffix(","))
    if note:
        lines[-1] = f"{lines[-1]}          {note}"
    return lines


def block(server: str) -> str:
    """The README's example block (fenced shell commands with their outputs as comments)."""
    images = example_images()
    out = ["```bash"]
    for command, path, image, note in EXAMPLES:
        out.append(command)
        out.extend(comment_lines(post_image(server, path, images[image]), note))
    out.append("```")
    return "\n".join(out)


def replace_block(readme: str, new_block: str) -> str:
    head, _, rest = readme.partition(BEGIN)
    _, _, tail = rest.partition(END)
    return f"{head}{BEGIN}\n{new_block}\n{END}{tail}"


def current_block(readme: str) -> str:
    return readme.partition(BEGIN)[2].partition(END)[0].strip("\n")


def main(argv: list[str]) -> None:
    server = argv[0] if argv else "127.0.0.1:8000"
    generated = block(server)
    if "--write" in argv:
        README.write_text(replace_block(README.read_text(), generated))
    print(generated)


if __name__ == "__main__":
    main(sys.argv[1:])
