"""The documentation site builds with warnings as errors, its benchmarks page comes from the
benchmarks' JSON, and every face reports one version (issue 41)."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

from click.testing import CliRunner

REPO = Path(__file__).resolve().parents[2]


def _gen_benchmarks() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_benchmarks", REPO / "docs/gen_benchmarks.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_benchmarks_page_is_generated_from_the_json(tmp_path: Path) -> None:
    (tmp_path / "scale.json").write_text(
        json.dumps(
            {
                "host_cores": 2,
                "rows": [
                    {"tool": "skyplane-ops", "objects": 10000, "seconds": 1.23456},
                    {"tool": "rclone", "objects": 10000, "seconds": 7.5, "note": "a|b"},
                ],
                "nested": {"peaks": [{"gateway": "g0", "rss_mib": 88.0}]},
            }
        )
    )
    (tmp_path / "broken.json").write_text("{not json")
    page = _gen_benchmarks().render(tmp_path)
    assert "## scale" in page and "`python benchmarks/scale.py`" in page
    assert "| tool | objects | seconds | note |" in page
    assert "| skyplane-ops | 10000 | 1.235 |  |" in page
    assert "| rclone | 10000 | 7.5 | a\\|b |" in page  # a pipe in a cell does not split it
    assert "| g0 | 88 |" in page and "**nested.peaks**" in page
    assert "| 2 |" in page  # the scalar settings
    assert "## broken" in page and "Not readable as JSON" in page
    # the script's own docstring says what the figures are
    assert "1 KiB objects" in page or "objects" in page.split("## scale")[1].split("\n")[2]


def test_benchmarks_page_without_results(tmp_path: Path) -> None:
    assert "No results yet" in _gen_benchmarks().render(tmp_path / "none")


def test_docs_build_strict(tmp_path: Path) -> None:
    """`make docs` in short: a broken link, a missing page or a bad docstring reference fails."""
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "DISABLE_MKDOCS_2_WARNING": "true"}
    mkdocs = Path(sys.executable).parent / "mkdocs"
    site = tmp_path / "site"
    run = subprocess.run(
        [str(mkdocs), "build", "--strict", "--site-dir", str(site)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    for page in ("index.html", "benchmarks/index.html", "tasks/transfer-report/index.html"):
        assert (site / page).is_file(), page
    api = (site / "api/request/index.html").read_text()
    assert "TransferRequest" in api and "doc-object" in api  # rendered from the docstrings


def test_readme_is_short_and_keeps_the_two_commands() -> None:
    readme = (REPO / "README.md").read_text()
    assert len(readme.splitlines()) <= 300
    assert "make demo" in readme and "make test" in readme
    makefile = (REPO / "Makefile").read_text()
    assert re.search(r"^demo:", makefile, re.M) and re.search(r"^test:", makefile, re.M)
    for link in re.findall(r"\]\((docs/[^)#]+)\)", readme):
        assert (REPO / link).is_file(), link


def test_one_version_everywhere() -> None:
    from skyplane_ops import __version__
    from skyplane_ops.airflow.provider_info import get_provider_info
    from skyplane_ops.cli import cli

    assert importlib.metadata.version("skyplane-ops") == __version__
    out = CliRunner().invoke(cli, ["--version"]).output
    assert out.strip() == f"skyplane-ops {__version__}"
    assert get_provider_info()["versions"][0] == __version__
    changelog = (REPO / "CHANGELOG.md").read_text()
    released = re.findall(r"^## \[(\d+\.\d+\.\d+)\]", changelog, re.M)
    assert released and released[0] == __version__


# Measured figures typed into prose (issue 41): a ratio with decimals (1.27x), a decimal rate
# (95.9 MB/s), a time against another (5.1 s against 13.4), a before -> after time, a range of
# seconds (2.45-3.04 s). Settings and defaults are round numbers and stay; code is skipped.
_FIGURES = re.compile(
    r"\b\d+\.\d+x\b|×|\b\d+\.\d+ ?(?:Gbit/s|Gbps|Mbit/s|MB/s|MiB/s|GB/s)"
    r"|\d s (?:against|instead of) \d|\d(?: s)? -> \d|\b\d+(?:\.\d+)?-\d+(?:\.\d+)? ?s\b"
)


def test_no_hand_typed_figures_in_the_docs() -> None:
    """Benchmark figures live in ``benchmarks/results/*.json`` and on the generated benchmarks
    page; a page names the script and links there instead of copying a run's numbers."""
    found = []
    for page in sorted((REPO / "docs").rglob("*.md")):
        # Code (fenced blocks, inline spans, over lines too) is blanked, keeping line numbers.
        text = re.sub(r"```.*?```|`[^`]*`", lambda m: "\n" * m.group(0).count("\n"),
                      page.read_text(), flags=re.S)  # fmt: skip
        for number, line in enumerate(text.splitlines(), 1):
            match = _FIGURES.search(line)
            if match:
                found.append(f"{page.relative_to(REPO)}:{number}: {match.group(0)!r}")
    assert not found, "figures typed by hand (link the benchmarks page):\n" + "\n".join(found)
