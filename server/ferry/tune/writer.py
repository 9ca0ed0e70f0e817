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
    text = config_text(config, [f"Tuned by `ferry tune` at {stamp}.", *header])
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
