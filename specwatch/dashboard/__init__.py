"""`specwatch dashboard`: the history, its alerts and their triage in a browser."""
