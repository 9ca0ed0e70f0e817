"""What the server prints once it is up: a table of models, versions and states (as Triton prints),
and one ready line naming every port, so a user sees at a glance what loaded and where to connect."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

COLUMNS = (("name", "Model"), ("version", "Version"), ("state", "State"), ("reason", "Reason"))


def model_table(rows: Sequence[Mapping[str, str]]) -> str:
    """Repository index rows (``ModelManager.index()``) as a boxed text table, one row per version."""
    cells = [[title for _, title in COLUMNS]]
    cells += [[str(row.get(key, "")) or ("-" if key != "reason" else "") for key, _ in COLUMNS] for row in rows]
    if len(cells) == 1:
        cells.append(["(no models)", "", "", ""])
    widths = [max(len(line[i]) for line in cells) for i in range(len(COLUMNS))]
    rule = "+" + "+".join("-" * (w + 2) for w in widths) + "+"
    lines = [rule]
    for n, line in enumerate(cells):
        lines.append("| " + " | ".join(text.ljust(w) for text, w in zip(line, widths, strict=True)) + " |")
        if n == 0:
            lines.append(rule)
    lines.append(rule)
    return "\n".join(lines)


def _endpoint(host: str, port: int) -> str:
    return f"{host}:{port}" if port else "off"


def ready_line(host: str, http_port: int, grpc_port: int, metrics_port: int, unready: Sequence[str] = ()) -> str:
    """The ports a client needs, with ``off`` for a front door disabled by port 0. ``unready``: the
    models that keep the server from being ready (it then says "started", never "ready")."""
    state = "ferry ready"
    if unready:
        count = f"{len(unready)} model{'s' if len(unready) > 1 else ''}"
        state = f"ferry started, not ready: {count} not READY ({', '.join(unready)})"
    return (
        f"{state}: REST {_endpoint(host, http_port)}, gRPC {_endpoint(host, grpc_port)}, "
        f"metrics {_endpoint(host, metrics_port)}"
    )
