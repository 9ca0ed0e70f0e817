"""Summarises a py-spy ``--format raw`` profile of the server: where its threads spend their time.

A flame graph shows the same thing, but a few lines of shares per thread and per function can be
pasted into a report and compared between runs.

Run ``python benchmarks/profile_summary.py PROFILE.txt [--rate HZ --seconds S] [--top N]``.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import Counter
from pathlib import Path

_FRAME = re.compile(r"^(?P<func>.*?) \((?P<file>[^():]*)(?::(?P<line>\d+))?\)$")


def short_frame(frame: str) -> str:
    """``func (path/to/ferry/api/grpc.py:12)`` -> ``func (ferry/api/grpc.py)``: lines merged."""
    match = _FRAME.match(frame.strip())
    if not match:
        return frame.strip()
    path = match.group("file")
    for marker in ("site-packages/", "/server/", "/lib/python"):
        if marker in path:
            path = path.split(marker, 1)[1]
            break
    return f"{match.group('func')} ({path})"


def load(path: Path) -> list[tuple[list[str], int]]:
    """Collapsed stacks: (frames root first, sample count)."""
    stacks = []
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        stack, _, count = line.rpartition(" ")
        stacks.append(([short_frame(f) for f in stack.split(";")], int(count)))
    return stacks


def summarise(stacks: list[tuple[list[str], int]], top: int, samples_possible: int | None, thread: str = "") -> str:
    """Shares by thread, by leaf frame and by frame anywhere on the stack (``thread`` filters)."""
    if thread:
        stacks = [(frames, count) for frames, count in stacks if frames and thread in frames[0]]
    total = sum(count for _, count in stacks) or 1
    threads: Counter[str] = Counter()
    leaf: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    for frames, count in stacks:
        name = frames[0] if frames and frames[0].startswith(("thread", "process")) else "all threads"
        threads[name] += count
        body = frames[1:] if name != "all threads" else frames
        if body:
            leaf[body[-1]] += count
        for frame in set(body):
            inclusive[frame] += count
    lines = [f"{total} active samples"]
    if samples_possible:
        lines[0] += f" = {total / samples_possible:.2f} busy Python threads on average"
    lines.append("by thread:")
    lines += [f"  {count / total:6.1%}  {name}" for name, count in threads.most_common(top)]
    lines.append("self (leaf frame):")
    lines += [f"  {count / total:6.1%}  {name}" for name, count in leaf.most_common(top)]
    lines.append("inclusive:")
    lines += [f"  {count / total:6.1%}  {name}" for name, count in inclusive.most_common(top)]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("profile", type=Path)
    parser.add_argument("--rate", type=int, help="py-spy sampling rate, to turn samples into busy threads")
    parser.add_argument("--seconds", type=float, help="profile duration, with --rate")
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--thread", default="", help="only threads whose name contains this, e.g. MainThread")
    args = parser.parse_args(argv)
    possible = int(args.rate * args.seconds) if args.rate and args.seconds else None
    print(summarise(load(args.profile), args.top, possible, args.thread))
    return 0


if __name__ == "__main__":
    sys.exit(main())
