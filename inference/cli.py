"""How the entry points end when something expected goes wrong: the message, exit status 2, no traceback.

An expected failure is one the user can fix (missing weights, an unknown layout, a refused
checkpoint, a bad manifest row, a mistyped config name or override): a traceback would only bury
the message. Exit status 2 tells scripts "your input" apart from 1, a bug, which keeps Hydra's
traceback. `HYDRA_FULL_ERROR=1` or `debug=true` shows the traceback of expected failures too.

    @hydra.main(...)
    @expected_failures(ModelLoadError, LayoutError)
    def main(cfg): ...

    if __name__ == "__main__":
        run(main)
"""

from __future__ import annotations

import functools
import logging
import os
import sys
from typing import Any, Callable

from omegaconf.errors import MissingMandatoryValue

log = logging.getLogger("toolkit")
EXPECTED_FAILURE = 2  # exit status of a failure the user can fix
_task_started = False  # composition done: a Hydra exit before this is a config error


def expected_cause(error: BaseException, expected: tuple[type[BaseException], ...]) -> BaseException | None:
    """`error` or the exception it wraps (Hydra's instantiate wraps what a constructor raised) when
    one of them is expected, else None."""
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, expected):
            return error
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return None


def debugging(cfg: Any) -> bool:
    return os.environ.get("HYDRA_FULL_ERROR") == "1" or bool(getattr(cfg, "get", lambda *_: False)("debug", False))


def expected_failures(*expected: type[BaseException]) -> Callable[[Callable[[Any], Any]], Callable[[Any], Any]]:
    """Decorate a Hydra task function: an `expected` exception (or one wrapping it) is logged as one
    line and ends the process with status 2; anything else propagates to Hydra (traceback, status 1).
    A required setting left out (`model=`, `input=`: `???` in the config) is always expected."""
    expected = (*expected, MissingMandatoryValue)

    def decorate(task: Callable[[Any], Any]) -> Callable[[Any], Any]:
        @functools.wraps(task)
        def wrapped(cfg: Any) -> Any:
            global _task_started
            _task_started = True
            try:
                return task(cfg)
            except Exception as error:
                cause = expected_cause(error, expected)
                if cause is None or debugging(cfg):
                    raise
                log.error("%s", _message(cause))
                raise SystemExit(EXPECTED_FAILURE) from None

        return wrapped

    return decorate


def _message(error: BaseException) -> str:
    if isinstance(error, MissingMandatoryValue):
        key = error.full_key or "a setting"
        return f"{key} is required: give it on the command line ({key}=...)"
    return str(error)


def run(main: Callable[[], Any]) -> None:
    """Call a `hydra.main` function; a config Hydra could not compose (a mistyped `detector=` name,
    an unknown key) exits with status 2 after Hydra's message, like other expected failures."""
    try:
        main()
    except SystemExit as stop:
        if stop.code == 1 and not _task_started:
            sys.exit(EXPECTED_FAILURE)
        raise
