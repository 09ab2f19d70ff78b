"""Generate the site's benchmarks page from ``benchmarks/results/*.json``.

Run by the ``gen-files`` plugin on every ``mkdocs build`` (so figures are never typed by
hand), or alone: ``python docs/gen_benchmarks.py OUT.md``. Each result file becomes a
section: what its script measures (the script's docstring), the command that writes it, its
scalar settings, and every list of rows in it as a table.
"""

from __future__ import annotations

import ast
import json
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"
SCRIPTS = REPO / "benchmarks"
MAX_ROWS = 200  # a table longer than this is cut, with a note (the JSON has it all)


def _cell(value: Any) -> str:
    """One table cell: short floats, JSON for nested values, pipes escaped."""
    if isinstance(value, bool) or value is None:
        text = "" if value is None else str(value).lower()
    elif isinstance(value, float):
        text = f"{value:.4g}"
    elif isinstance(value, dict | list):
        text = json.dumps(value, separators=(",", ":"))
        text = text if len(text) <= 80 else text[:77] + "..."
    else:
        text = str(value)
    return text.replace("|", "\\|").replace("\n", " ")


def _is_rows(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(r, dict) for r in value)


def _tables(value: Any, path: str = "") -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """Every list of dicts in ``value`` (two levels deep), with where it was found."""
    if _is_rows(value):
        yield path, value
    elif isinstance(value, dict):
        for key, inner in value.items():
            if _is_rows(inner) or (isinstance(inner, dict) and path.count(".") < 1):
                yield from _tables(inner, f"{path}.{key}" if path else str(key))


def _scalars(data: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in data.items() if not isinstance(v, dict | list)}


def _table(rows: list[dict[str, Any]]) -> str:
    columns: list[str] = []
    for row in rows:
        columns += [k for k in row if k not in columns]
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for row in rows[:MAX_ROWS]:
        lines.append("| " + " | ".join(_cell(row.get(c)) for c in columns) + " |")
    if len(rows) > MAX_ROWS:
        lines.append(f"\n*{len(rows) - MAX_ROWS} more rows in the JSON file.*")
    return "\n".join(lines)


def _script_summary(name: str) -> str:
    """The first paragraph of ``benchmarks/<name>.py``'s docstring, if there is one."""
    script = SCRIPTS / f"{name}.py"
    if not script.is_file():
        return ""
    doc = ast.get_docstring(ast.parse(script.read_text())) or ""
    return doc.split("\n\n")[0].replace("\n", " ").strip()


def section(path: Path) -> str:
    """The Markdown section of one result file."""
    name = path.stem
    when = datetime.fromtimestamp(path.stat().st_mtime, UTC).strftime("%Y-%m-%d %H:%M UTC")
    parts = [f"## {name}", ""]
    summary = _script_summary(name)
    if summary:
        parts += [summary, ""]
    parts += [f"Written {when} by `python benchmarks/{name}.py` (`{path.name}`).", ""]
    try:
        data = json.loads(path.read_text())
    except ValueError as exc:
        return "\n".join([*parts, f"*Not readable as JSON: {exc}.*", ""])
    if isinstance(data, dict):
        scalars = _scalars(data)
        if scalars:
            parts += [_table([scalars]), ""]
    tables = list(_tables(data))
    if isinstance(data, dict):  # the figures of a nested dict (a summary) are a one-row table
        for key, inner in data.items():
            figures = _scalars(inner) if isinstance(inner, dict) else {}
            if figures:
                tables.append((str(key), [figures]))
    for where, rows in tables:
        if where:
            parts += [f"**{where}**", ""]
        parts += [_table(rows), ""]
    if not tables and not (isinstance(data, dict) and scalars):
        parts += ["```json", json.dumps(data, indent=2)[:4000], "```", ""]
    return "\n".join(parts)


def render(results: Path = RESULTS) -> str:
    """The whole benchmarks page from the result files in ``results``."""
    files = sorted(results.glob("*.json")) if results.is_dir() else []
    head = [
        "# Benchmarks",
        "",
        "Generated from `benchmarks/results/*.json` when the site is built; nothing on this page",
        "is typed by hand. Each script prints a table and writes its JSON; run one with",
        "`.venv/bin/python benchmarks/NAME.py` (most take `--quick`) or all with `make bench`.",
        "Figures depend on the machine: each section says when its file was written.",
        "",
    ]
    if not files:
        head += ["*No results yet: run a benchmark, then `make docs`.*", ""]
    return "\n".join(head + [section(f) for f in files])


def main() -> None:
    """``python docs/gen_benchmarks.py OUT.md``: write the page without building the site."""
    Path(sys.argv[1]).write_text(render())


def gen_files() -> None:
    """Write the page into the site under build (the ``gen-files`` plugin runs this file)."""
    import mkdocs_gen_files

    with mkdocs_gen_files.open("benchmarks.md", "w") as out:
        out.write(render())


if __name__ == "__main__":
    main()
elif __name__ == "<run_path>":  # runpy.run_path, as mkdocs-gen-files runs its scripts
    gen_files()
