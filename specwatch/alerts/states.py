"""Triage states and the checks on what a person types: a bad state, note or id is one line that names
the field, the value and the fix."""

from __future__ import annotations

import getpass
import os
from typing import Literal

State = Literal["untriaged", "acknowledged", "invalid", "fixed", "verified", "wontfix"]
STATES: tuple[State, ...] = ("untriaged", "acknowledged", "invalid", "fixed", "verified", "wontfix")
# what a person may set: `verified` is the next decided comparison's word, after `fixed`
SETTABLE: tuple[State, ...] = tuple(s for s in STATES if s != "verified")
NOTE_CAP = 2000  # characters: a note says why, a log goes in the linked bug
SYSTEM = "specwatch"  # who changed a state when a comparison did


class AlertError(Exception):
    """A request about alerts that cannot be done, in one line."""


def check_state(state: str) -> State:
    if state == "verified":
        raise AlertError("state 'verified' is set by the next decided comparison on the alert's series; "
                         "set 'fixed' and let the next run verify it")
    if state not in SETTABLE:
        raise AlertError(f"state {state!r} is not a triage state; use one of {', '.join(SETTABLE)}")
    return state


def check_note(note: str) -> str:
    if len(note) > NOTE_CAP:
        raise AlertError(f"note is {len(note):,} characters, over the cap of {NOTE_CAP:,}; shorten it "
                         "(put the details in the linked bug)")
    return note


def default_user() -> str:
    """Who triages when --by is not given: the OS user."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no passwd entry (a container's uid)
        return os.environ.get("USER") or str(os.getuid())
