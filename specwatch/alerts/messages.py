"""What an alert says: its one-line summary, its links, and a notification's body in the two formats a
webhook takes (Slack's incoming-webhook JSON, or plain JSON)."""

from __future__ import annotations

from typing import Any, Literal

from specwatch import paths
from specwatch.alerts.decided import Decided, DecidedCell
from specwatch.analysis.metrics import METRICS

Format = Literal["slack", "json"]
FORMATS: tuple[Format, ...] = ("slack", "json")


def _pct(x: float | None) -> str:
    return "?" if x is None else f"{x:+.1%}"


def _cell(c: DecidedCell) -> str:
    return f"{c.label} {METRICS[c.metric].label} {_pct(c.estimate)}"


def cells_text(cells: list[DecidedCell]) -> str:
    return "; ".join(_cell(c) for c in cells)


def summary(d: Decided, first_run_id: str) -> str:
    """One line: what changed, by how much with its interval, where, and since when."""
    label = METRICS[d.metric].label
    cells = d.changed_cells
    where = f"{len(cells)} cell(s): {cells_text(cells[:3])}" + (f" (+{len(cells) - 3} more)" if len(cells) > 3 else "")
    return (f"{d.outcome} {d.series}: {label} {_pct(d.estimate)} [{_pct(d.low)}, {_pct(d.high)}] over {d.rounds} "
            f"round(s), {where}; first in run {first_run_id}")


def links(alert_id: int | None, run_id: str) -> dict[str, str]:
    base = paths.dashboard_url()
    out = {"run": f"{base}/runs/{run_id}", "report": str(paths.runs_dir() / run_id / "report.md")}
    if alert_id is not None:
        out = {"alert": f"{base}/alerts/{alert_id}", **out}
    return out


def body(fmt: Format, event: str, alert_id: int | None, text: str, urls: dict[str, str]) -> dict[str, Any]:
    """A notification's JSON body. Slack shows `text` (and the links as mrkdwn); plain JSON keeps fields."""
    head = f"alert #{alert_id} {event}: {text}" if alert_id is not None else text
    if fmt == "json":
        return {"alert_id": alert_id, "event": event, "summary": text, "text": head, "links": urls}
    shown = " | ".join(f"<{u}|{name}>" if u.startswith("http") else f"{name}: {u}" for name, u in urls.items())
    return {"text": head, "blocks": [{"type": "section", "text": {"type": "mrkdwn", "text": f"{head}\n{shown}"}}]}
