"""mkdocs hook: links from the docs to repository files outside ``docs/`` (results, SECURITY.md, examples).

A page links a repository file the way GitHub and editors resolve it, relatively:
``[the H200 results](../results/h200/README.md)``, ``![tg](../results/h200/whole-card/tg.png)``.
mkdocs knows only the files under ``docs/``, so ``mkdocs build --strict`` would refuse every such link.
This hook keeps the build strict for them too: a target that does not exist in the repository fails the
build (one line naming the page and the link), an existing one is copied into the site under ``repo/``
as it is (never rendered as a page) and the link is pointed there.
"""

from __future__ import annotations

import posixpath
import re
from pathlib import Path
from typing import Any

from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File, Files

#: ``](../path`` of a Markdown link or image (an anchor or title after the path is kept as it is)
_LINK = re.compile(r"(?P<open>\]\()(?P<path>\.\./[^)\s#]+)")
PREFIX = "repo"


class _RepoFile(File):
    """A repository file copied into the site as it is: never rendered as a page."""

    def is_documentation_page(self) -> bool:
        return False

    def is_static_page(self) -> bool:
        return False


def _root(config: Any) -> Path:
    return Path(config.config_file_path).resolve().parent


def _target(page_uri: str, link: str, config: Any) -> str | None:
    """The repository path ``link`` names from page ``page_uri``; None for a link into the docs themselves."""
    root = _root(config)
    docs = Path(config.docs_dir).resolve().relative_to(root).as_posix()
    path = posixpath.normpath(posixpath.join(docs, posixpath.dirname(page_uri), link))
    if path == docs or path.startswith(docs + "/"):
        return None
    if path.startswith("../") or not (root / path).is_file():
        raise PluginError(f"{page_uri}: link '{link}' names no file of the repository ({path}); "
                          "fix the path (links are relative to the page)")
    return path


def on_files(files: Files, config: Any) -> Files:
    """Add every repository file a page links to as ``repo/<path>``."""
    wanted: set[str] = set()
    for f in files.documentation_pages():
        for m in _LINK.finditer(f.content_string):
            target = _target(f.src_uri, m["path"], config)
            if target:
                wanted.add(target)
    for target in sorted(wanted):
        files.append(_RepoFile.generated(config, f"{PREFIX}/{target}", abs_src_path=str(_root(config) / target)))
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Files) -> str:
    """Point each link to a repository file at its copy under ``repo/``."""
    here = posixpath.dirname(page.file.src_uri) or "."

    def repl(m: re.Match[str]) -> str:
        target = _target(page.file.src_uri, m["path"], config)
        if target is None:
            return m.group(0)
        return m["open"] + posixpath.relpath(f"{PREFIX}/{target}", here)

    return _LINK.sub(repl, markdown)
