"""Keeping every file a model reads inside the repository.

Model names come from API callers and file names from configs (which the load API can replace), so
both are checked here before anything is opened. Symlinks are allowed only where they resolve
inside the boundary: a model directory inside the repository, a model's files inside its directory.
"""

from __future__ import annotations

from pathlib import Path

from .errors import InvalidArgument, ModelLoadError

#: The longest file name most file systems allow (NAME_MAX): a longer name cannot be a model directory.
MAX_NAME_BYTES = 255


def check_model_name(name: str) -> str:
    """Reject names that could point outside the repository (path separators, dot names, NUL)."""
    if not name or name.startswith(".") or any(ch in name for ch in "/\\\x00") or Path(name).is_absolute():
        raise InvalidArgument(
            f"invalid model name {name!r}: a model name is one directory name of the "
            "repository (no '/', '\\', NUL or leading '.')"
        )
    if len(name.encode("utf-8", "surrogatepass")) > MAX_NAME_BYTES:
        raise InvalidArgument(
            f"invalid model name of {len(name)} characters: a model name is one directory name "
            f"of at most {MAX_NAME_BYTES} bytes"
        )
    return name


def inside(root: Path, relative: str | Path, what: str) -> Path:
    """``root / relative`` with symlinks resolved, or ModelLoadError when it leaves ``root``."""
    base = root.resolve()
    if Path(relative).is_absolute():
        raise ModelLoadError(f"{what} '{relative}' must be a path relative to {root.name}, not an absolute path")
    path = (base / relative).resolve()
    if path != base and base not in path.parents:
        raise ModelLoadError(f"{what} '{relative}' resolves outside '{root.name}' (symlinks must stay inside it)")
    return path


def model_directory(repository: Path, name: str) -> Path:
    """The directory of model ``name``, which must resolve inside the repository (symlinks included)."""
    check_model_name(name)
    return inside(repository, name, "model directory")
