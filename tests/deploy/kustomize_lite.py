"""A small stand-in for `kustomize build`, enough for deploy/kubernetes, so overlays can be checked
where no kustomize binary exists.

Supports: resources (files and kustomization folders), components, patches given by ``path``
(strategic-merge patches, including ``$patch: delete`` of a whole resource), images, namespace.
Strategic merge follows Kubernetes' rules for the fields these manifests patch: maps merge, ``null``
deletes a key, lists of containers / volumes / env / ports / volume mounts merge by their key, other
lists are replaced. Any other kustomization field is an error, so the renderer never silently
ignores something real kustomize would do.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

SUPPORTED = {"apiVersion", "kind", "resources", "components", "patches", "images", "namespace"}
MERGE_KEYS = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "volumes": "name",
    "env": "name",
    "envFrom": None,  # atomic list in practice: replaced
    "volumeMounts": "mountPath",
    "volumeDevices": "devicePath",
    "ports": "containerPort",
    "imagePullSecrets": "name",
}


class KustomizeError(ValueError):
    pass


def _identity(doc: dict[str, Any]) -> tuple[str, str, str]:
    group = doc.get("apiVersion", "").rpartition("/")[0]
    return group, doc.get("kind", ""), doc.get("metadata", {}).get("name", "")


def strategic_merge(target: Any, patch: Any, field: str = "") -> Any:
    if isinstance(target, dict) and isinstance(patch, dict):
        merged = dict(target)
        for key, value in patch.items():
            if value is None:
                merged.pop(key, None)
            elif key in merged:
                merged[key] = strategic_merge(merged[key], value, key)
            else:
                merged[key] = copy.deepcopy(value)
        return merged
    key = MERGE_KEYS.get(field)
    if (
        key
        and isinstance(target, list)
        and isinstance(patch, list)
        and all(isinstance(i, dict) and key in i for i in target + patch)
    ):
        merged_list = [copy.deepcopy(i) for i in target]
        added = []
        for item in patch:
            for index, existing in enumerate(merged_list):
                if existing[key] == item[key]:
                    merged_list[index] = strategic_merge(existing, item)
                    break
            else:
                added.append(copy.deepcopy(item))
        return added + merged_list  # kustomize puts items only the patch has first
    return copy.deepcopy(patch)


def _load(path: Path) -> list[dict[str, Any]]:
    with path.open(encoding="utf-8") as stream:
        return [doc for doc in yaml.safe_load_all(stream) if doc is not None]


def _apply_images(doc: dict[str, Any], images: list[dict[str, str]]) -> None:
    spec = doc.get("spec", {})
    pod = spec.get("template", {}).get("spec") if "template" in spec else spec if doc.get("kind") == "Pod" else None
    if not pod:
        return
    for container in pod.get("containers", []) + pod.get("initContainers", []):
        name = container["image"].split("@")[0]
        if ":" in name.rsplit("/", 1)[-1]:
            name = name.rsplit(":", 1)[0]
        for image in images:
            if image["name"] == name:
                new = image.get("newName", name)
                if "digest" in image:
                    container["image"] = f"{new}@{image['digest']}"
                elif "newTag" in image:
                    container["image"] = f"{new}:{image['newTag']}"
                else:
                    container["image"] = container["image"].replace(name, new, 1)


def _patch(resources: list[dict[str, Any]], patch_path: Path) -> list[dict[str, Any]]:
    for patch in _load(patch_path):
        delete = patch.pop("$patch", None) == "delete"
        matches = [i for i, doc in enumerate(resources) if _identity(doc) == _identity(patch)]
        if len(matches) != 1:
            raise KustomizeError(f"{patch_path}: patch target {_identity(patch)} matches {len(matches)} resources")
        if delete:
            del resources[matches[0]]
        else:
            resources[matches[0]] = strategic_merge(resources[matches[0]], patch)
    return resources


def _apply(folder: Path, resources: list[dict[str, Any]], expected_kind: str) -> list[dict[str, Any]]:
    kustomization_file = folder / "kustomization.yaml"
    if not kustomization_file.is_file():
        raise KustomizeError(f"{folder}: no kustomization.yaml")
    kustomization = yaml.safe_load(kustomization_file.read_text()) or {}
    unsupported = set(kustomization) - SUPPORTED
    if unsupported:
        raise KustomizeError(f"{kustomization_file}: kustomize_lite does not support {sorted(unsupported)}")
    if kustomization.get("kind", "Kustomization") != expected_kind:
        raise KustomizeError(f"{kustomization_file}: kind {kustomization.get('kind')}, expected {expected_kind}")
    for entry in kustomization.get("resources", []):
        path = (folder / entry).resolve()
        if path.is_dir():
            resources.extend(build(path))
        elif path.is_file():
            resources.extend(_load(path))
        else:
            raise KustomizeError(f"{kustomization_file}: resource {entry} does not exist")
    for entry in kustomization.get("components", []):
        path = (folder / entry).resolve()
        if not path.is_dir():
            raise KustomizeError(f"{kustomization_file}: component {entry} does not exist")
        resources = _apply(path, resources, "Component")
    for entry in kustomization.get("patches", []):
        if set(entry) != {"path"}:
            raise KustomizeError(f"{kustomization_file}: only `patches: [{{path: ...}}]` is supported")
        path = folder / entry["path"]
        if not path.is_file():
            raise KustomizeError(f"{kustomization_file}: patch {entry['path']} does not exist")
        resources = _patch(resources, path)
    images = kustomization.get("images", [])
    for doc in resources:
        _apply_images(doc, images)
        if "namespace" in kustomization:
            doc.setdefault("metadata", {})["namespace"] = kustomization["namespace"]
    return resources


def build(folder: Path) -> list[dict[str, Any]]:
    """The resources `kustomize build folder` would print, as dictionaries."""
    resources = _apply(folder, [], "Kustomization")
    seen = set()
    for doc in resources:
        identity = (*_identity(doc), doc.get("metadata", {}).get("namespace", ""))
        if identity in seen:
            raise KustomizeError(f"{folder}: duplicate resource {identity}")
        seen.add(identity)
    return resources
