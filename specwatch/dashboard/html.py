"""The dashboard's HTML: one layout, tables from frames, and a chart slot filled by the vendored vega-embed.
Every value is escaped; the only markup is what these helpers write."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from html import escape
from typing import Any

import pandas as pd

STYLE = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 0; color: #222; }
nav { background: #1f2d3d; padding: 8px 16px; } nav a { color: #fff; margin-right: 18px; text-decoration: none; }
main { padding: 12px 16px; } h1 { font-size: 20px; } h2 { font-size: 16px; margin-top: 22px; }
table { border-collapse: collapse; margin: 6px 0; } td, th { border: 1px solid #ddd; padding: 3px 8px; }
th { background: #f3f5f7; text-align: left; } tr.regression td.state, .untriaged { color: #b03a2e; }
.hint { color: #a35f00; } .muted { color: #777; } .error { color: #b03a2e; font-weight: bold; }
form.triage { margin: 10px 0; padding: 8px; background: #f7f7f7; display: inline-block; }
form.triage * { margin-right: 6px; } pre { background: #f7f7f7; padding: 8px; overflow-x: auto; }
"""
VENDOR = ("vega.min.js", "vega-lite.min.js", "vega-embed.min.js")


def page(title: str, body: str, refresh_s: int | None = None) -> str:
    scripts = "".join(f'<script src="/static/{name}"></script>' for name in VENDOR)
    meta = f'<meta http-equiv="refresh" content="{refresh_s}">' if refresh_s else ""
    return (f"<!doctype html><html><head><meta charset='utf-8'>{meta}<title>{escape(title)} · specwatch</title>"
            f"<style>{STYLE}</style>{scripts}</head><body><nav><a href='/'>alerts</a><a href='/series'>series</a>"
            f"<a href='/runs'>runs</a></nav><main><h1>{escape(title)}</h1>{body}</main></body></html>")


def link(href: str, text: str) -> str:
    return f"<a href='{escape(href, quote=True)}'>{escape(text)}</a>"


def text(value: object) -> str:
    if value is None or (isinstance(value, float) and value != value) or value is pd.NaT:
        return "<span class='muted'>-</span>"
    return escape(str(value))


Cell = Callable[[Any], str]


def table(frame: pd.DataFrame, columns: Sequence[str], cells: dict[str, Cell] | None = None,
          row_class: Callable[[Any], str] | None = None, empty: str = "none") -> str:
    """A table of `columns`; `cells` renders a column's value itself (a link, a number format)."""
    if frame.empty:
        return f"<p class='muted'>{escape(empty)}</p>"
    cells = cells or {}
    head = "".join(f"<th>{escape(c)}</th>" for c in columns)
    rows = []
    for r in frame.itertuples(index=False):
        klass = f" class='{escape(row_class(r))}'" if row_class else ""
        tds = "".join(f"<td class='{escape(c)}'>{cells[c](r) if c in cells else text(getattr(r, c))}</td>"
                      for c in columns)
        rows.append(f"<tr{klass}>{tds}</tr>")
    return f"<table><tr>{head}</tr>{''.join(rows)}</table>"


def chart(slot: str, spec: dict[str, Any]) -> str:
    """A chart rendered in the browser by vega-embed from the vendored scripts."""
    data = json.dumps(spec).replace("</", "<\\/")  # no "</script>" inside the script
    return (f"<div id='{escape(slot)}' class='chart'></div><script>vegaEmbed('#{escape(slot)}', {data}, "
            "{actions: false, renderer: 'svg'}).catch(e => { document.getElementById("
            f"'{escape(slot)}').textContent = 'chart failed: ' + e; }});</script>")


def pct(value: object) -> str:
    return text(None) if value is None or value != value else f"{float(value):+.1%}"  # type: ignore[arg-type]


def num(value: object, fmt: str = ".2f") -> str:
    return text(None) if value is None or value != value else format(float(value), fmt)  # type: ignore[arg-type]
