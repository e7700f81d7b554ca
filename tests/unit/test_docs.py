"""The README and the docs say only what is true of the repository: every command composes, every
config they name exists, every link resolves, and the detector table is the one the configs give."""

from __future__ import annotations

import re
import shlex
import shutil
from pathlib import Path

import pytest
import yaml
from hydra import compose, initialize_config_dir

from tools import mkdocs_readme, readme_table

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
# each entry point composes configs/<name>.yaml
ENTRY_POINTS = ("train", "infer", "export", "generate", "calibrate", "index")
FENCE = re.compile(r"^```[ \t]*(\w*)[^\n]*\n(.*?)^```", re.MULTILINE | re.DOTALL)
INLINE = re.compile(r"(?<!`)`(python [^`]+)`(?!`)")
HYDRA_COMMAND = re.compile(r"\bpython (" + "|".join(ENTRY_POINTS) + r")\.py\b(.*)")
MODULE_COMMAND = re.compile(r"\bpython -m ([\w.]+)(.*)")
SCRIPT_COMMAND = re.compile(r"\bpython ((?:benchmarks|tools|examples)/[\w/]+\.py)(.*)")
GROUPS = "detector|data|trainer|logger|callbacks|experiment|preset|generator"
CONFIG_CHOICE = re.compile(rf"(?<![\w.+-])({GROUPS})=([a-z_][\w]*)\b")
LINK = re.compile(r"\]\(([^)\s]+)\)")
MISTYPED_ON_PURPOSE = {("detector", "nrp")}  # the training guide's example of a mistyped name


def relative(path: Path) -> str:
    return str(path.relative_to(ROOT))


def command_lines(text: str) -> list[str]:
    """Lines of the fenced bash blocks (continuations joined) and inline `python ...` spans."""
    lines = []
    for language, body in FENCE.findall(text):
        if language in ("", "bash", "sh", "shell", "console"):
            lines += body.replace("\\\n", " ").splitlines()
    return lines + INLINE.findall(text)


def shell_words(arguments: str) -> list[str]:
    """The arguments as the shell passes them: placeholders filled, quotes and comments removed."""
    arguments = re.sub(r"<[^<>]*>", "placeholder", arguments)  # <run>, <phase-1 run>
    arguments = re.sub(r"\$\{?\w+\}?", "0", arguments)  # $test, ${SLURM_...}
    lexer = shlex.shlex(arguments, posix=True, punctuation_chars=";&|")
    lexer.whitespace_split, lexer.commenters = True, "#"
    words = []
    for word in lexer:
        if set(word) <= set(";&|"):  # the next shell command starts
            break
        words.append(word)
    return words


def commands(pattern: re.Pattern) -> list:
    """One case per distinct command (the same line on two pages is composed once)."""
    found, seen = [], set()
    for page in PAGES:
        for line in command_lines(page.read_text(encoding="utf-8")):
            for match in pattern.finditer(line):
                key = (match.group(1), tuple(shell_words(match.group(2))))
                if key in seen:
                    continue
                seen.add(key)
                found.append(
                    pytest.param(
                        match.group(1), shell_words(match.group(2)), id=f"{relative(page)}: {match.group(0)[:60]}"
                    )
                )
    return found


HYDRA_COMMANDS = commands(HYDRA_COMMAND)


def test_the_docs_show_commands_of_every_entry_point():
    assert {entry for entry, *_ in (case.values for case in HYDRA_COMMANDS)} == set(ENTRY_POINTS)


def jobs(overrides: list[str]) -> list[list[str]]:
    """The overrides each job of the command composes: the command's own, or with `-m` (a multirun)
    one list per combination of its swept values, as Hydra's basic sweeper makes them."""
    if not {"-m", "--multirun"} & set(overrides):
        return [overrides]
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parsed = OverridesParser.create().parse_overrides([o for o in overrides if o not in ("-m", "--multirun")])
    return BasicSweeper.split_arguments(parsed, None)[0]


@pytest.mark.parametrize(("entry_point", "overrides"), HYDRA_COMMANDS)
def test_every_command_line_of_the_docs_composes(entry_point, overrides):
    """A renamed key or group option fails here, as it would for the user (in a multirun, for each
    job). `experiment` is an optional group, which Hydra skips silently when the name is unknown: it
    is checked as a file."""
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        for job in jobs(overrides):
            compose(config_name=entry_point, overrides=job)
    choices = [CONFIG_CHOICE.fullmatch(word.lstrip("+")) for job in jobs(overrides) for word in job]
    assert [
        match.group(0)
        for match in choices
        if match and not (ROOT / "configs" / match.group(1) / f"{match.group(2)}.yaml").is_file()
    ] == []


@pytest.mark.parametrize(("module", "arguments"), commands(MODULE_COMMAND))
def test_every_python_module_the_docs_run_exists(module, arguments):
    path = ROOT.joinpath(*module.split("."))
    assert path.with_suffix(".py").is_file() or (path / "__main__.py").is_file(), module


@pytest.mark.parametrize(("script", "arguments"), commands(SCRIPT_COMMAND))
def test_every_script_the_docs_run_exists_and_takes_its_options(script, arguments):
    source = (ROOT / script).read_text(encoding="utf-8")
    options = [word.split("=")[0] for word in arguments if word.startswith("--")]
    assert [option for option in options if f'"{option}"' not in source] == [], script


def test_every_config_named_in_the_docs_exists():
    missing = [
        f"{relative(page)}: {group}={name}"
        for page in PAGES
        for group, name in CONFIG_CHOICE.findall(page.read_text(encoding="utf-8"))
        if not (ROOT / "configs" / group / f"{name}.yaml").is_file() and (group, name) not in MISTYPED_ON_PURPOSE
    ]
    assert missing == []


def test_the_training_guide_lists_every_option_of_each_config_group():
    guide = (ROOT / "docs" / "guides" / "training.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| `(\w+)` \| (.*) \|$", guide, re.MULTILINE)
    listed = {group: set(re.findall(r"`([a-z0-9_]+)`", cell)) for group, cell in rows}
    for group in ("data", "trainer", "logger", "callbacks", "experiment"):
        options = {path.stem for path in (ROOT / "configs" / group).glob("*.yaml")}
        assert listed[group] == options, group


@pytest.mark.parametrize("page", PAGES, ids=relative)
def test_every_relative_link_resolves_in_the_repository(page):
    """As GitHub shows the files; the site's links are checked by `mkdocs build --strict`."""
    targets = [
        target.split("#")[0]
        for target in LINK.findall(page.read_text(encoding="utf-8"))
        if "://" not in target and not target.startswith(("#", "mailto:"))
    ]
    assert [target for target in targets if not (page.parent / target).exists()] == []


def test_every_docs_page_is_in_the_site_navigation():
    def pages(node) -> set[str]:
        if isinstance(node, str):
            return {node}
        items = node.values() if isinstance(node, dict) else node
        return set().union(*(pages(item) for item in items))

    navigation = pages(yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))["nav"])
    docs = ROOT / "docs"
    assert {str(path.relative_to(docs)) for path in docs.rglob("*.md")} == navigation


def test_the_readme_is_short():
    assert len((ROOT / "README.md").read_text(encoding="utf-8").splitlines()) <= 250


def test_the_readme_shows_the_test_commands_ci_runs():
    """CI runs the README's default command as written, and of the slow tests those marked `ci`
    (all of them would take CI past its time budget)."""
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    readme = [line.split("#")[0].strip() for line in command_lines((ROOT / "README.md").read_text(encoding="utf-8"))]
    assert "pytest" in ci and "pytest" in readme
    assert "pytest -m slow" in readme
    assert 'pytest -m "slow and ci"' in ci


# --- the detector table ------------------------------------------------------------------------


def test_the_readmes_detector_table_is_the_one_the_configs_give():
    """Stale? Run `python -m tools.readme_table`."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert readme_table.table_in(readme) == readme_table.render_table()


def test_the_table_names_every_detector_config():
    table = readme_table.render_table()
    for path in (ROOT / "configs" / "detector").glob("*.yaml"):
        assert f"`{path.stem}`" in table, path.stem


def test_a_new_detector_config_gets_its_row_and_a_localizer_is_told_apart(tmp_path):
    configs = tmp_path / "detector"
    shutil.copytree(ROOT / "configs" / "detector", configs)
    (configs / "blob.yaml").write_text(
        "name: blob\nsummary: a throw-away localizer\nnet:\n  image_score: max\n  preprocess: {size: 96, mode: pad}\n"
    )
    (configs / "blob_tiny.yaml").write_text("name: blob_tiny\nnet: {image_score: max}\n")
    rows = {row[0]: row for row in readme_table.detector_rows(configs)}
    whole = "each image whole (training: 96 px, pad)"  # a localizer is calibrated and scored on each image whole
    assert rows["`blob`"] == ["`blob`", "localizer", "a throw-away localizer", whole, "`blob_tiny`"]
    assert "`blob_tiny`" not in rows and rows["`npr`"][1] == "classifier"


def test_a_detector_config_without_a_summary_is_refused_by_name(tmp_path):
    (tmp_path / "nameless.yaml").write_text("name: nameless\nnet: {}\n")
    with pytest.raises(ValueError, match="nameless.yaml has no `summary:` line"):
        readme_table.detector_rows(tmp_path)


def test_the_table_script_rewrites_only_between_its_markers(tmp_path):
    readme = tmp_path / "README.md"
    start, end = readme_table.MARKERS
    readme.write_text(f"# Title\n{start}\nold table\n{end}\nrest\n", encoding="utf-8")
    assert readme_table.main(["--readme", str(readme), "--check"]) == 1
    assert readme_table.main(["--readme", str(readme)]) == 0
    text = readme.read_text(encoding="utf-8")
    assert text.startswith(f"# Title\n{start}\n| `detector=` |") and text.endswith(f"{end}\nrest\n")
    assert readme_table.main(["--readme", str(readme), "--check"]) == 0


# --- the site's home page is the README -----------------------------------------------------------


def test_the_home_page_links_the_docs_pages_from_inside_the_docs_folder():
    text = "[training](docs/guides/training.md) ![x](docs/a.jpg) [site](https://x.org/docs/y.md)"
    assert (
        mkdocs_readme.readme_as_home(text)
        == "[training](guides/training.md) ![x](a.jpg) [site](https://x.org/docs/y.md)"
    )


def test_a_pages_link_to_the_readme_becomes_the_home_page():
    text = "[table](../../README.md#detectors) [other](../data.md) [up](../README.md)"
    assert (
        mkdocs_readme.readme_links_to_home(text, "guides/training.md")
        == "[table](../index.md#detectors) [other](../data.md) [up](../README.md)"
    )
    top_level = mkdocs_readme.readme_links_to_home("[r](../README.md)", "architecture.md")
    assert top_level == "[r](index.md)"
