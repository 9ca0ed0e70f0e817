"""The server's packages form layers: no import cycle between them, and the settings import nothing heavy.

A cycle (``repository`` importing ``pipelines`` while ``pipelines`` imports ``repository``) means
neither package can be read, tested or changed alone; shared types live in ``ferry.types`` instead.
Every import counts, including those inside functions and under ``TYPE_CHECKING``: a lazy import is
still a dependency.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "server" / "ferry"

#: Package edges that close a cycle today, each with the reason and what removes it. The test fails
#: when one of them disappears too, so the list cannot outlive the cycle.
KNOWN_CYCLE_EDGES: dict[tuple[str, str], str] = {}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imported_modules(path: Path) -> Iterator[str]:
    """Absolute names of the ``ferry`` modules a file imports, wherever in the file the import is."""
    module = _module_name(path)
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0:
                yield node.module or ""
            else:
                base = package[: len(package) - (node.level - 1)]
                yield ".".join([*base, *([node.module] if node.module else [])])


def _layer(module: str) -> str | None:
    """The top-level package or module of ``ferry`` that a module belongs to (None: not ferry)."""
    parts = module.split(".")
    return parts[1] if parts[0] == "ferry" and len(parts) > 1 else None


def package_graph() -> dict[str, dict[str, list[str]]]:
    """layer -> imported layer -> the 'module:line' imports behind that edge."""
    graph: dict[str, dict[str, list[str]]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        source = _layer(_module_name(path))
        if source is None:
            continue
        for target_module in _imported_modules(path):
            target = _layer(target_module)
            if target is not None and target != source:
                graph.setdefault(source, {}).setdefault(target, []).append(f"{_module_name(path)} -> {target_module}")
    return graph


def strongly_connected(graph: dict[str, set[str]]) -> list[set[str]]:
    """Tarjan's algorithm: the groups of layers that import each other, directly or around a loop."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[set[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for succ in graph.get(node, ()):
            if succ not in index:
                visit(succ)
                low[node] = min(low[node], low[succ])
            elif succ in on_stack:
                low[node] = min(low[node], index[succ])
        if low[node] == index[node]:
            group = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.add(member)
                if member == node:
                    break
            groups.append(group)

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return groups


def test_the_cycle_finder_finds_a_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert sorted(map(sorted, strongly_connected(graph))) == [["a", "b", "c"], ["d"]]


def test_no_import_cycles_between_packages() -> None:
    graph = package_graph()
    assert {"repository", "pipelines", "ensembles", "backends", "settings", "types"} <= set(graph) | {
        target for targets in graph.values() for target in targets
    }
    for edge in KNOWN_CYCLE_EDGES:
        assert edge[1] in graph.get(edge[0], {}), f"{edge} no longer exists: remove it from KNOWN_CYCLE_EDGES"
    edges = {
        source: {target for target in targets if (source, target) not in KNOWN_CYCLE_EDGES}
        for source, targets in graph.items()
    }
    cycles = [group for group in strongly_connected(edges) if len(group) > 1]
    detail = [
        f"{a} -> {b}: {graph[a][b][0]}" for group in cycles for a in sorted(group) for b in sorted(edges[a] & group)
    ]
    assert not cycles, "import cycles between packages:\n" + "\n".join(detail)


def test_lower_layers_never_import_the_repository() -> None:
    graph = package_graph()
    for layer in ("pipelines", "ensembles", "backends", "scheduling", "types", "settings", "paths", "errors"):
        imports = graph.get(layer, {}).get("repository", [])
        assert not imports, f"{layer} imports repository: {imports}"


def test_importing_the_settings_loads_nothing_heavy() -> None:
    """``ferry --help`` and anything that reads the options must not pay for OpenCV, Pillow, grpc,
    ONNX Runtime, numpy or the model manager."""
    probe = "import sys, ferry.settings; print('\\n'.join(sorted(sys.modules)))"
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    loaded = set(result.stdout.split())
    assert "ferry.settings" in loaded
    heavy = ("cv2", "PIL", "grpc", "onnxruntime", "numpy", "google.protobuf", "fastapi", "ferry.repository")
    found = sorted(m for m in loaded if any(m == h or m.startswith(h + ".") for h in heavy))
    assert not found, f"importing ferry.settings loaded {found}"


def test_an_intake_process_imports_no_engine_nor_the_model_process_stack() -> None:
    """An intake process (``python -m ferry.intake.worker``) runs the front doors and hands tensors
    to the model process: importing it must not pay for an engine, FastAPI, the data plane or the
    repository manager, which each intake would import again at every server start (issue 40)."""
    probe = "import sys, ferry.intake.worker; print('\\n'.join(sorted(sys.modules)))"
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    loaded = set(result.stdout.split())
    assert "ferry.intake.worker" in loaded
    unneeded = (
        "onnxruntime",
        "torch",
        "tensorrt",
        "ferry.backends.onnxruntime",
        "ferry.backends.pytorch",
        "ferry.backends.tensorrt",
        "ferry.backends.python_backend",
        "ferry.backends.vision_steps",
        "fastapi",
        "opentelemetry.sdk",
        "ferry.api.dataplane",
        "ferry.api.http",
        "ferry.repository.manager",
        "ferry.ensembles.scheduler",
        "ferry.ocr.scheduler",
        "ferry.caching",
        "shapely",  # a text detector's unclip imports it when it runs
    )
    found = sorted(m for m in loaded if any(m == u or m.startswith(u + ".") for u in unneeded))
    assert not found, f"importing ferry.intake.worker loaded {found}"
