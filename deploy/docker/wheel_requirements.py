"""Print the requirements of a built wheel, for the chosen extras, minus the named distributions.

The GPU images need Ferry's dependencies without the CPU ``onnxruntime`` wheel: it installs the
same ``onnxruntime`` Python package as ``onnxruntime-gpu`` (or NVIDIA's Jetson build), and whichever
is installed last silently replaces the other. The images therefore install Ferry with ``--no-deps``
and its dependencies from this list::

    python wheel_requirements.py dist/ferry-*.whl --extra gpu --exclude onnxruntime > requirements.txt

Markers are evaluated for the running interpreter (run it with the image's Python), so the output is
plain requirement strings. Needs the ``packaging`` distribution.
"""

from __future__ import annotations

import argparse
import sys
import zipfile
from collections.abc import Iterable, Sequence
from email.parser import HeaderParser
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name


def wheel_metadata(wheel: Path) -> str:
    """The METADATA text of a wheel."""
    with zipfile.ZipFile(wheel) as archive:
        names = [n for n in archive.namelist() if n.count("/") == 1 and n.endswith(".dist-info/METADATA")]
        if len(names) != 1:
            raise ValueError(f"{wheel}: expected one .dist-info/METADATA, found {names}")
        return archive.read(names[0]).decode("utf-8")


def requirements(metadata: str, extras: Iterable[str] = (), exclude: Iterable[str] = ()) -> list[str]:
    """Requires-Dist entries that apply to this interpreter with ``extras``, without ``exclude``d names."""
    message = HeaderParser().parsestr(metadata)
    wanted_extras = [canonicalize_name(e) for e in extras]
    provided = {canonicalize_name(e) for e in message.get_all("Provides-Extra") or []}
    unknown = [e for e in wanted_extras if e not in provided]
    if unknown:
        raise ValueError(f"the wheel has no extra {', '.join(unknown)} (it has: {', '.join(sorted(provided))})")
    skipped = {canonicalize_name(n) for n in exclude}
    result: list[str] = []
    for line in message.get_all("Requires-Dist") or []:
        req = Requirement(line)
        if canonicalize_name(req.name) in skipped:
            continue
        if req.marker is not None:
            environments = [{"extra": ""}, *({"extra": e} for e in wanted_extras)]
            if not any(req.marker.evaluate(env) for env in environments):
                continue
            req.marker = None
        text = str(req)
        if text not in result:
            result.append(text)
    return result


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("wheel", type=Path)
    parser.add_argument("--extra", action="append", default=[], help="extra to include (repeatable)")
    parser.add_argument("--exclude", action="append", default=[], help="distribution to leave out (repeatable)")
    args = parser.parse_args(argv)
    try:
        lines = requirements(wheel_metadata(args.wheel), args.extra, args.exclude)
    except (OSError, ValueError, zipfile.BadZipFile) as exc:
        print(f"wheel_requirements: {exc}", file=sys.stderr)
        return 1
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
