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

import difflib
import functools
import logging
import os
import sys
from pathlib import Path
from typing import Any, Callable, NoReturn, Sequence

from hydra.errors import CompactHydraException
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import MissingMandatoryValue

from datamodules.records import SettingError

log = logging.getLogger("toolkit")
CONFIG_DIR = Path(__file__).resolve().parents[1] / "configs"
EXPECTED_FAILURE = 2  # exit status of a failure the user can fix
_task_started = False  # composition done: a Hydra exit before this is a config error
# the jobs of this process's sweep (-m): each one's overrides, the refused ones' messages, the failed
_sweep: dict[str, dict[int, Any]] = {"jobs": {}, "refused": {}, "failed": {}}


class RefusedJob(CompactHydraException):
    """A job of a sweep (`-m`) refused as an expected failure. Hydra records it as that job's failure
    and runs the other jobs (a SystemExit would end them all); as a CompactHydraException its
    message, not a traceback, is what Hydra prints when the sweep ends."""


def sweep_job() -> int | None:
    """The job number when this task is a job of a sweep (its overrides noted for `refused_jobs`)."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    if not HydraConfig.initialized() or HydraConfig.get().mode != RunMode.MULTIRUN:
        return None
    number = int(HydraConfig.get().job.num)
    _sweep["jobs"][number] = [o for o in HydraConfig.get().overrides.task if not o.startswith("hydra.")]
    return number


def refused_jobs() -> list[str]:
    """A line for each refused job of the sweep, named by its number and the settings that set it
    apart from the sweep's other jobs (all of them when it ran alone)."""
    jobs = _sweep["jobs"]
    shared = set.intersection(*(set(o) for o in jobs.values())) if len(jobs) > 1 else set()
    return [
        f"job #{n} ({' '.join(o for o in jobs[n] if o not in shared)}) was refused: {message}"
        for n, message in sorted(_sweep["refused"].items())
    ]


def missing_dependency(missing: ModuleNotFoundError, why: str, packages: str) -> NoReturn:
    """An entry point that cannot import what it needs ends with one line naming what to install
    (status 2), not a traceback: a torch-free install (onnxruntime, numpy, Pillow) lacks these.
    Only a missing one of `packages` is an install to make; any other module (one of the toolkit's
    own, mistyped or not shipped) is re-raised, a bug that no `pip install` mends."""
    if (missing.name or "").partition(".")[0] not in packages.split():
        raise missing
    print(
        f"{why}, and {missing.name or missing} is not installed: pip install {packages} "
        "(or the toolkit with all its dependencies: pip install -e .)",
        file=sys.stderr,
    )
    raise SystemExit(EXPECTED_FAILURE)


def check_switches(cfg: Any, names: Sequence[str]) -> None:
    """Options that are true or false: another value is refused (`tiles=no` is a non-empty string,
    which switched tiles on)."""
    for name in names:
        if not isinstance(cfg.get(name, False), bool):
            raise SettingError(f"{name} must be true or false, got {cfg.get(name)!r}")


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
    A required setting left out (`model=`, `input=`: `???` in the config) and a `SettingError` are
    always expected. In a sweep (`-m`), a refused job says its line and the other jobs run; `run`
    names the refused jobs when the sweep ends."""
    expected = (*expected, MissingMandatoryValue, SettingError)

    def decorate(task: Callable[[Any], Any]) -> Callable[[Any], Any]:
        @functools.wraps(task)
        def wrapped(cfg: Any) -> Any:
            global _task_started
            _task_started = True
            job = sweep_job()
            try:
                return task(cfg)
            except Exception as error:
                cause = expected_cause(error, expected)
                if cause is None or debugging(cfg):
                    if job is not None:
                        _sweep["failed"][job] = error
                    raise
                log.error("%s", _message(cause))
                if job is not None:
                    _sweep["refused"][job] = _message(cause)
                    raise RefusedJob(_message(cause)) from None
                raise SystemExit(EXPECTED_FAILURE) from None

        return wrapped

    return decorate


def _message(error: BaseException) -> str:
    if isinstance(error, MissingMandatoryValue):
        key = error.full_key or "a setting"
        return f"{key} is required: give it on the command line ({key}=...)"
    return str(error)


def misspelled_keys(config_name: str, overrides: Sequence[str]) -> list[str]:
    """ "did you mean" lines for the `key=value` overrides whose key the config lacks. Hydra's own
    advice for one, `+key=value`, adds a key that nothing reads."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    def is_group(key: str) -> bool:
        return (CONFIG_DIR / key.lstrip("+~").replace(".", "/")).is_dir()

    settings = [o for o in overrides if "=" in o and not o.startswith(("+", "~", "hydra."))]
    groups = [o for o in overrides if "=" in o and is_group(o.split("=", 1)[0])]
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
            config = compose(config_name=config_name, overrides=groups)
    except Exception:  # an unknown group option: Hydra's message already names it
        return []
    finally:
        GlobalHydra.instance().clear()
    lines = []
    for override in settings:
        key, value = override.split("=", 1)
        parent, _, leaf = key.rpartition(".")
        # a value that is an interpolation (`trainer.default_root_dir`: `${hydra:...}`, unset outside a
        # run) is no group of settings to look a key up in, and Hydra's message has named the key
        node = OmegaConf.select(config, parent, throw_on_resolution_failure=False) if parent else config
        if not isinstance(node, DictConfig) or leaf in node.keys():
            continue
        meant = difflib.get_close_matches(leaf, [str(k) for k in node.keys()], n=1, cutoff=0.6)
        if meant:
            lines.append(f"{key!r} is not a setting; did you mean {key[: len(key) - len(leaf)]}{meant[0]}={value}?")
    return lines


def run(main: Callable[[], Any], config_name: str | None = None) -> None:
    """Call a `hydra.main` function; a config Hydra could not compose (a mistyped `detector=` name,
    an unknown key) exits with status 2 after Hydra's message, like other expected failures, and a
    mistyped key of config `config_name` is answered with the closest one it has. A sweep whose
    failed jobs were all refused (expected failures) ends with a line for each and status 2."""
    try:
        main()
    except SystemExit as stop:
        if stop.code == 1 and not _task_started:
            for line in misspelled_keys(config_name, sys.argv[1:]) if config_name else ():
                print(line, file=sys.stderr)
            sys.exit(EXPECTED_FAILURE)
        for line in refused_jobs():
            print(line, file=sys.stderr)
        if stop.code == 1 and _sweep["refused"] and not _sweep["failed"]:
            sys.exit(EXPECTED_FAILURE)
        raise
