"""Run a command that is killed when ``daemon verify`` dies: ``python -m daemon.verify.tether``.

verify starts its child ``daemon run`` in a session of its own, so that a Ctrl-C in the
terminal reaches verify alone and verify decides what becomes of the child. The price: a
verify killed with SIGKILL (a CI job's timeout) would leave the child running, a service that
never ends. So the child is started through this module, which asks Linux to SIGKILL it when
its parent dies (``prctl(PR_SET_PDEATHSIG)``, which survives ``exec``), checks that the parent
is still the one it was started by, and then becomes the command. The driver's JVM and
Python workers end with the driver (Spark's gateway exits when the driver's pipe closes).
Elsewhere than Linux the command runs untethered.

Usage::

    python -m daemon.verify.tether PARENT_PID PROGRAM [ARGUMENT ...]
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

PR_SET_PDEATHSIG = 1
"""prctl's option that names the signal a process gets when its parent dies (linux/prctl.h)."""


def die_with_parent() -> bool:
    """Ask for SIGKILL when the parent dies; whether the system could arrange it."""
    if not sys.platform.startswith("linux"):
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    return int(libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)) == 0


def main(argv: list[str]) -> None:
    """Tether to ``argv[0]`` (a pid), then become the command ``argv[1:]``."""
    parent, command = int(argv[0]), argv[1:]
    if die_with_parent() and os.getppid() != parent:
        sys.exit(1)  # the parent died before the tether held: nothing to run for
    os.execv(command[0], command)  # noqa: S606 - verify's own command, no shell


if __name__ == "__main__":
    main(sys.argv[1:])
