"""The winning config, written as ``config.tuned.pbtxt`` next to the original (``config.pbtxt`` only
with ``--write``), headed by comments that say what was measured, where and when."""

from __future__ import annotations

import datetime
import platform
import shutil
import socket
from dataclasses import dataclass
from pathlib import Path

from ferry_client.protocol import model_config_pb2 as mc

from ..optimize.writer import config_text
from ..repository.config import CONFIG_FILENAME, read_config_file

TUNED_FILENAME = "config.tuned.pbtxt"
BACKUP_SUFFIX = ".before-tune"
TUNED_MARK = "Tuned by `ferry tune`"
#: Heads the original config's comments in the tuned one (a later tune keeps what follows it).
KEPT_MARK = "Comments of the config before tuning:"


def original_comments(path: Path) -> list[str]:
    """The comments of the config being replaced, so tuning does not lose what its author wrote: a
    comment after a field keeps that field's line beside it. The header of an earlier tune is left
    out (its own kept comments are not)."""
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return []
    if lines and lines[0].startswith(f"# {TUNED_MARK}"):
        header = [i for i, line in enumerate(lines) if not line.startswith("#")]
        end = header[0] if header else len(lines)
        marks = [i for i in range(end) if lines[i] == f"# {KEPT_MARK}"]
        lines = lines[marks[0] + 1 :] if marks else lines[end:]
    kept = []
    for line in lines:
        code, comment = _split_comment(line)
        if comment is None:
            continue
        kept.append(f"{comment} (beside: {code.strip()})" if code.strip() else comment)
    return kept


def _split_comment(line: str) -> tuple[str, str | None]:
    """(code, comment text) of a config line; a ``#`` inside a quoted string is not a comment."""
    quote, escaped = "", False
    for index, char in enumerate(line):
        if quote:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == quote:
                quote = ""
        elif char in "\"'":
            quote = char
        elif char == "#":
            return line[:index], line[index + 1 :].strip()
    return line, None


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine_description(cores: int, gpus: list[str]) -> str:
    where = f"{socket.gethostname()}: {cores} usable core(s), {cpu_model()}"
    return where + (f", GPU {', '.join(gpus)}" if gpus else ", no GPU")


@dataclass(frozen=True)
class Written:
    path: Path
    notes: list[str]


def write_config(
    model_dir: Path,
    config: mc.ModelConfig,
    header: list[str],
    write: bool,
    variant_dir: Path | None = None,
) -> Written:
    """Write the tuned config; with ``write`` replace ``config.pbtxt`` (the old one kept as a backup).

    A precision winner lives in another model directory: with ``write`` that directory (built by
    ``ferry optimize`` in the private repository) is copied next to the model, never over one."""
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    kept = original_comments(model_dir / CONFIG_FILENAME)
    text = config_text(config, [f"{TUNED_MARK} at {stamp}.", *header, *([KEPT_MARK, *kept] if kept else [])])
    if variant_dir is not None:
        if not write:
            path = model_dir / TUNED_FILENAME
            path.write_text(text)
            return Written(
                path,
                [
                    f"the winner is the {config.name} variant: build it with ferry optimize, then use "
                    f"{path.name} as its config (or run ferry tune --write to install it)"
                ],
            )
        destination = model_dir.parent / config.name
        if destination.exists():
            raise FileExistsError(f"{destination} exists; remove it or run without --write")
        shutil.copytree(variant_dir, destination)
        (destination / CONFIG_FILENAME).write_text(text)
        return Written(destination / CONFIG_FILENAME, [f"installed model '{config.name}' at {destination}"])
    if not write:
        path = model_dir / TUNED_FILENAME
        path.write_text(text)
        return Written(path, [f"{CONFIG_FILENAME} left as it was; rename {path.name} to use it, or pass --write"])
    original = model_dir / CONFIG_FILENAME
    notes = []
    if original.exists():
        backup = model_dir / (CONFIG_FILENAME + BACKUP_SUFFIX)
        shutil.copy2(original, backup)
        notes.append(f"the previous config is kept as {backup.name}")
    original.write_text(text)
    if read_config_file(model_dir) is None:  # the repository's own parser must read what was written
        raise RuntimeError(f"{original} could not be read back")
    return Written(original, notes)
