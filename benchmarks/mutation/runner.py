"""Running a module's tests against a mutant: a copy of the repository (the working tree is never
touched), each run in a forked child that imports the project fresh from the copy."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def copy_repository(target: Path) -> None:
    """Tracked and untracked-but-not-ignored files, as `git` lists them."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    for name in listed:
        source = ROOT / name
        if source.is_file():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / name)


def run_tests(copy_root: Path, tests: list[str], timeout: float) -> tuple[str, float]:
    """Run `tests` in a forked child inside the copy; 'passed', 'failed' or 'timeout'."""
    start = time.monotonic()
    pid = os.fork()
    if pid == 0:  # the child: imports the (mutated) project code fresh, from the copy
        try:
            os.chdir(copy_root)
            os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"  # third-party plugins: seconds per run
            sys.path.insert(0, str(copy_root))
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, 1)
            os.dup2(devnull, 2)
            import pytest

            one_process = ["-p", "xdist.plugin", "-n", "0"]  # xdist reads the default options' `-n`; none here
            code = pytest.main([*tests, "-x", "-q", *one_process, "-p", "no:cacheprovider", "-W", "ignore"])
        except BaseException:  # noqa: BLE001 - any crash of the child is a failed run
            code = 3
        os._exit(int(code))
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            code = os.waitstatus_to_exitcode(status)
            return ("passed" if code == 0 else "failed"), time.monotonic() - start
        if time.monotonic() - start > timeout:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            return "timeout", time.monotonic() - start
        time.sleep(0.05)


_VERSION = 0  # how many module versions `write_module` has written


def write_module(path: Path, text: str) -> None:
    """Write a module with a modification time of its own, so its cached bytecode (keyed by
    time and size) is never taken for that of another version; the rest keeps its cache."""
    global _VERSION
    _VERSION += 1
    path.write_text(text, encoding="utf-8")
    os.utime(path, (1_000_000_000 + _VERSION, 1_000_000_000 + _VERSION))
