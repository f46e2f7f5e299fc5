"""Small Sphinx fixes for the attnlab website (loaded through _config.yml's local_extensions).

Duplicate inline scripts: with Sphinx 7.4, the inline configuration scripts that sphinx-thebe
and sphinx-togglebutton add after the builder starts appear twice on every page. The second
copy of ``const THEBE_JS_URL = ...`` throws "Identifier 'THEBE_JS_URL' has already been
declared" in the browser. This drops exact duplicates (same file, same attributes, same
body) from each page's script list. The browser check in tests/site catches a regression.
"""

from __future__ import annotations

from typing import Any

from sphinx.application import Sphinx


def _script_key(script: Any) -> tuple:
    attributes = getattr(script, "attributes", {}) or {}
    # An inline script is registered once with filename None and once with "": the same script.
    filename = getattr(script, "filename", script) or ""
    return (filename, tuple(sorted((k, str(v)) for k, v in attributes.items())))


def drop_duplicate_scripts(app: Sphinx, pagename: str, templatename: str, context: dict, doctree: Any) -> None:
    scripts = context.get("script_files")
    if not scripts:
        return
    seen: set[tuple] = set()
    unique = []
    for script in scripts:
        key = _script_key(script)
        if key not in seen:
            seen.add(key)
            unique.append(script)
    scripts[:] = unique  # in place: the builder restores its own list after each page


def setup(app: Sphinx) -> dict[str, Any]:
    app.connect("html-page-context", drop_duplicate_scripts, priority=900)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
