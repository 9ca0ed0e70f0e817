"""Model versions on disk and Triton's version policies (latest N, all, specific)."""

from __future__ import annotations

from pathlib import Path

from ferry_client.protocol import model_config_pb2 as mc


def versions_on_disk(model_dir: Path) -> list[int]:
    """Numeric subdirectories of a model directory, ascending; everything else is ignored."""
    found = []
    for entry in model_dir.iterdir():
        if entry.is_dir() and entry.name.isdigit() and not entry.name.startswith("0"):
            found.append(int(entry.name))
        elif entry.is_dir() and entry.name == "0":
            found.append(0)
    return sorted(found)


def select_versions(policy: mc.ModelVersionPolicy, available: list[int]) -> list[int]:
    """The versions a policy serves out of those on disk (default: the latest one)."""
    choice = policy.WhichOneof("policy_choice")
    if choice == "all":
        return list(available)
    if choice == "specific":
        wanted = set(policy.specific.versions)
        return [v for v in available if v in wanted]
    count = policy.latest.num_versions if choice == "latest" and policy.latest.num_versions > 0 else 1
    return available[-count:]
