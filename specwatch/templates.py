"""`{name}` templates (rank env, a command launcher's command): plain placeholders only.

str.format would also take `{k:>999999999}` (a gigabyte of padding from one line of YAML) and
`{x.attr}` / `{x[0]}` lookups; a template here names a value and nothing else.
"""

from __future__ import annotations

import string
from collections.abc import Collection, Mapping


class TemplateError(ValueError):
    """A template that cannot be filled; the message names the placeholder and the fix."""


def fields(template: str) -> list[tuple[str, str | None]]:
    """(literal text, placeholder name or None) pairs; TemplateError for anything but `{name}`."""
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as exc:
        raise TemplateError(f"{exc}; write {{{{ and }}}} for a literal brace") from None
    out: list[tuple[str, str | None]] = []
    for literal, name, spec, conversion in parsed:
        if name is not None and (spec or conversion):
            raise TemplateError(f"{{{name}{'!' + conversion if conversion else ''}{':' + spec if spec else ''}}} "
                                f"has a conversion or format spec; write {{{name}}}")
        out.append((literal, name))
    return out


def check(template: str, known: Collection[str]) -> None:
    """TemplateError naming the first placeholder that is not one of `known`."""
    for _, name in fields(template):
        if name is not None and name not in known:
            raise TemplateError(f"uses {{{name}}}, which has no value; known: "
                                + ", ".join("{" + v + "}" for v in sorted(known)))


def fill(template: str, values: Mapping[str, str]) -> str:
    check(template, values.keys())
    return "".join(literal + (values[name] if name is not None else "") for literal, name in fields(template))
