"""`script: {uri, source: {type: file}}` (DSL 12) for postgres, duckdb and python.

The file, relative to the playbook's file, is read when the playbook is validated, run
or registered, and its text replaces the script in the document itself (`inline_text`),
so a catalog version is self-contained: the server that stores or runs it never needs
the file. A document that still holds a file script when the loader sees it was not
loaded from a file (the API, a catalog entry): `check` reports it, as it reports the
sources milepost does not read (`gcs`, `s3`, `http`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from milepost.errors import PlaybookInvalid
from milepost.playbook import legacy, problems, yamllines

TARGET = {"postgres": "command", "duckdb": "query", "python": "code"}
"""The field a script's text becomes, per kind."""


def _file_script(node: dict[str, Any]) -> dict[str, Any] | None:
    script = node.get("script")
    if node.get("kind") not in TARGET or not isinstance(script, dict):
        return None
    source = script.get("source")
    return script if isinstance(source, dict) and source.get("type") == "file" else None


def inline_text(
    text: str, base: Path, source: str | None = None, *, limits: yamllines.Limits
) -> str:
    """`text` with every file script replaced by the file's contents (read relative to
    `base`, the playbook's directory); `text` itself when it has none, so a playbook
    without scripts is stored exactly as written. Read within `limits`, as the loader
    reads it next: a merge-key bomb expands even through `yaml.safe_load`.

    Raises:
        PlaybookInvalid: a script file that cannot be read, named by its path.
    """
    if "script" not in text:
        return text
    try:
        data = yamllines.load(text, limits)
    except (yamllines.Refused, yaml.YAMLError):
        return text  # the loader reports it, with its line
    found: list[str] = []
    if not _inline(data, base, (), found, set()):
        return text
    if found:
        raise PlaybookInvalid(found, source)
    return yaml.dump(data, Dumper=_Dumper, sort_keys=False, allow_unicode=True)


def _inline(node: Any, base: Path, path: tuple[Any, ...], found: list[str], seen: set[int]) -> bool:
    """Inline every file script under `node`, in place; True when there was one. `seen`:
    the nodes visited, so a YAML alias is walked once."""
    changed = False
    if id(node) in seen:
        return False
    seen.add(id(node))
    if isinstance(node, list):
        for i, item in enumerate(node):
            changed |= _inline(item, base, (*path, i), found, seen)
        return changed
    if not isinstance(node, dict):
        return False
    script = _file_script(node)
    if script is not None:
        changed = True
        _inline_one(node, script, base, path, found)
    for key, value in node.items():
        changed |= _inline(value, base, (*path, key), found, seen)
    return changed


def _inline_one(
    node: dict[str, Any],
    script: dict[str, Any],
    base: Path,
    path: tuple[Any, ...],
    found: list[str],
) -> None:
    where = problems.fmt_path((*path, "script", "uri"))
    uri, target = script.get("uri"), TARGET[node["kind"]]
    if not isinstance(uri, str) or not uri:
        found.append(f"{where}: a file script needs 'uri', the file's path")
        return
    if node.get(target) not in (None, ""):
        found.append(f"{where}: 'script' and {target!r} cannot both be given")
        return
    file = base / uri
    try:
        node[target] = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        found.append(f"{where}: cannot read script file {file}: {reason}")
        return
    del node["script"]


def check(config: dict[str, Any], w: problems.Where, kind: str) -> None:
    """Report a script the loader cannot take: a file one left in a document that was
    not loaded from a file, or a source milepost does not read. Removes it (reported: no
    second "field is required")."""
    script = config.get("script")
    if kind not in TARGET or not isinstance(script, dict) or "uri" not in script:
        return
    source = script.get("source")
    type_ = source.get("type") if isinstance(source, dict) else None
    sw = w / "script"
    if type_ == "file":
        sw.error(
            f"cannot read script file {script['uri']!r}: the playbook was not loaded from a "
            "file (inline the script, or validate/register the playbook's file)"
        )
    else:
        sw.error(f"script source type {type_!r} is not supported: use 'source: {{type: file}}'")
    config["script"] = legacy.UNSUPPORTED  # reported: no second "command is required"


class _Dumper(yaml.SafeDumper):
    """Multi-line strings (the inlined scripts) as `|` blocks, to stay readable."""


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)
