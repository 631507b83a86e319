"""How a launch fails: its own module, so that what launchers use (remote hosts) can raise it
without importing the launchers."""


class LaunchError(Exception):
    """The server did not come up (exited, never ready) or is not the arm it should be."""


class BootExit(LaunchError):
    """The server process exited during boot: it refused its configuration (e.g. k)."""
