"""mkdocs hook: the site's home page is README.md, its links right both on GitHub and in the site.

README.md links the guides as `docs/guides/<page>` (right on GitHub); the site's pages live under
`docs/`, so the home page rewrites those links to `guides/<page>`. Pages under `docs/` may link the
README as `../README.md` (right on GitHub); in the site that link becomes the home page. The
rewrite runs before mkdocs validates links, so `mkdocs build --strict` still catches broken ones.
"""

from __future__ import annotations

import posixpath
import re
from pathlib import Path
from typing import Any

HOME = "index.md"
README = "README.md"
DOCS = "docs"
# the target of a Markdown link or image: ](target) or ](target "title")
LINK = re.compile(r"(\]\()([^)\s]+)")


def readme_as_home(readme_text: str) -> str:
    """README.md's text with its `docs/...` links made relative to the docs folder."""

    def rewrite(match: re.Match) -> str:
        target = match.group(2)
        if target.startswith(f"{DOCS}/"):
            target = target[len(DOCS) + 1 :]
        return match.group(1) + target

    return LINK.sub(rewrite, readme_text)


def readme_links_to_home(page_text: str, page_path: str) -> str:
    """A docs page's links to the repository's README.md, pointed at the site's home page."""
    page_dir = posixpath.dirname(page_path)

    def rewrite(match: re.Match) -> str:
        target, _, anchor = match.group(2).partition("#")
        if target and "://" not in target:
            resolved = posixpath.normpath(posixpath.join(DOCS, page_dir, target))
            if resolved == README:
                home = posixpath.relpath(HOME, page_dir or ".")
                return match.group(1) + home + (f"#{anchor}" if anchor else "")
        return match.group(0)

    return LINK.sub(rewrite, page_text)


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    if page.file.src_uri == HOME:
        return readme_as_home((Path(config.config_file_path).parent / README).read_text("utf-8"))
    return readme_links_to_home(markdown, page.file.src_uri)
