"""The house as drawn (DESIGN.md "Layers"): the import graph of ``skyplane_ops`` and
``gateway_agent`` has no circles and no edge that points up a layer.

The graph is read with ``ast``, never by importing anything: every ``import`` and ``from ...
import`` statement counts wherever it stands (module level, inside a function, under ``if
TYPE_CHECKING:``), and relative imports are resolved against the importing module's package.
Imports by string (``importlib.import_module``, the lazy ``_LAZY`` tables of ``api`` and the
package ``__init__`` files) are not statements and are not seen.

Package ``__init__.py`` files re-export names. For the circle check they are left out, as in
``tools/import_circles.py``: an edge goes to the longest importable *module* a dotted name
starts with, so ``from skyplane_ops.profiler import planner_grid`` is an edge to
``skyplane_ops.profiler.planner_grid`` and ``from skyplane_ops.profiler import GridStore``
(a name re-exported by the package) is no edge at all. Every other rule looks at the imported
dotted names themselves, so an import through a package still counts for them
(``from skyplane_ops import profiler`` is an import of ``skyplane_ops.profiler``).

Layers of ``skyplane_ops``, bottom to top: ``errors``, ``profiles``, ``planner``,
``provision``, ``profiler`` (probes run on a provisioned fleet), ``transfer`` (which records
every transfer's passive measurements with the profiler), ``api``, then ``testing`` (helpers of
the tests and benchmarks, never imported by the product) and the faces (``airflow``,
``dagster``, ``commands`` and ``cli``), which reach the project only through ``api``: not the
core, not ``gateway_agent`` (the stores too go through ``api``).
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("skyplane_ops", "gateway_agent")
# Scanned only for imports of ``tests`` (rule f): code that ships or runs outside the suite.
OUTSIDE_TESTS = ("skyplane_ops", "gateway_agent", "benchmarks", "scripts", "examples", "dags")

FACES = ("airflow", "dagster", "commands", "cli")
LAYERS: dict[str, int] = {
    "errors": 0,
    "profiles": 1,
    "planner": 2,
    "provision": 3,
    "profiler": 4,
    "transfer": 5,
    "sequence": 6,  # the one run sequence: plan, provision and the engine in order
    "metrics": 6,  # Prometheus metrics of a run (fed by the sequence's events)
    "api": 7,
    "testing": 8,
    **dict.fromkeys(FACES, 9),
}
# What ``skyplane_ops/__init__.py`` defines (``from skyplane_ops import __version__``).
PACKAGE_TOP = {"__version__"}
# The planner is pure: none of these in its import lines (``io`` is allowed: its pictures
# come back as bytes through ``io.BytesIO``).
IO_MODULES = {
    "os",
    "pathlib",
    "shutil",
    "tempfile",
    "glob",
    "subprocess",
    "socket",
    "sqlite3",
    "urllib",
    "http",
    "requests",
    "boto3",
    "gateway_agent",
}
IO_CALLS = {"write_text", "write_bytes", "read_text", "read_bytes", "mkdir", "unlink", "touch"}


@dataclass(frozen=True)
class Import:
    """One imported dotted name (absolute) and where it is imported."""

    module: str
    name: str
    line: int

    def where(self) -> str:
        return f"{self.module}:{self.line} imports {self.name}"


@dataclass
class Module:
    name: str
    path: Path
    is_package: bool
    tree: ast.Module


def load_modules(root: Path, packages: Iterable[str]) -> dict[str, Module]:
    """Every ``.py`` file under ``root/<package>`` by dotted name (``pkg/__init__.py`` is
    ``pkg``)."""
    out: dict[str, Module] = {}
    for package in packages:
        base = root / package
        if not base.exists():
            continue
        for path in sorted(base.rglob("*.py")):
            rel = path.relative_to(root).with_suffix("")
            if any(part.startswith(".") for part in rel.parts):
                continue
            parts = list(rel.parts)
            is_package = parts[-1] == "__init__"
            if is_package:
                parts = parts[:-1]
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
            out[".".join(parts)] = Module(".".join(parts), path, is_package, tree)
    return out


def imports_of(module: Module) -> list[Import]:
    """The absolute dotted names a module imports: ``import a.b`` gives ``a.b``;
    ``from a import b, c`` gives ``a.b``, ``a.c`` and ``a``; relative imports resolved."""
    package = module.name if module.is_package else module.name.rpartition(".")[0]
    found: list[Import] = []
    for node in ast.walk(module.tree):
        if isinstance(node, ast.Import):
            found += [Import(module.name, alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")
                up = up[: len(up) - (node.level - 1)]
                base = ".".join(up + ([base] if base else []))
            for alias in node.names:
                if alias.name != "*":
                    found.append(Import(module.name, f"{base}.{alias.name}", node.lineno))
            found.append(Import(module.name, base, node.lineno))
    return found


def module_graph(modules: Mapping[str, Module]) -> dict[str, set[str]]:
    """Edges between non-package modules: each imported name goes to the longest module it
    starts with (names of a package's ``__init__`` lead nowhere, see the module docstring)."""
    nodes = {name for name, m in modules.items() if not m.is_package}

    def target(name: str) -> str | None:
        while name:
            if name in nodes:
                return name
            name = name.rpartition(".")[0]
        return None

    edges: dict[str, set[str]] = {n: set() for n in nodes}
    for name in nodes:
        for imp in imports_of(modules[name]):
            t = target(imp.name)
            if t is not None and t != name:
                edges[name].add(t)
    return edges


def find_circles(edges: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    graph = {v: sorted(set(ws)) for v, ws in edges.items()}
    for ws in list(graph.values()):
        for w in ws:
            graph.setdefault(w, [])
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, 0)]
        while work:
            v, i = work.pop()
            if i == 0:
                index[v] = low[v] = len(index)
                stack.append(v)
                on_stack.add(v)
            recurse = False
            for j in range(i, len(graph[v])):
                w = graph[v][j]
                if w not in index:
                    work.append((v, j + 1))
                    work.append((w, 0))
                    recurse = True
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            if recurse:
                continue
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    circles.append(sorted(comp))
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[v])
    return sorted(circles)


def _top(name: str) -> str:
    return name.split(".")[0]


def _under(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def _layer(name: str) -> str | None:
    """The ``skyplane_ops`` layer a dotted name belongs to (None: not ``skyplane_ops.X``)."""
    parts = name.split(".")
    if parts[0] != "skyplane_ops" or len(parts) < 2 or parts[1] in PACKAGE_TOP:
        return None
    return parts[1]


def _is_core(module: str) -> bool:
    return _top(module) == "skyplane_ops" and _layer(module) not in ("airflow", "dagster")


# ---- the rules, each over the list of imports ---------------------------------------------


def upward_agent_imports(imports: Iterable[Import]) -> list[str]:
    """(b) ``gateway_agent`` ships alone: no ``skyplane_ops``, ``airflow`` or ``dagster``."""
    return [
        i.where()
        for i in imports
        if _top(i.module) == "gateway_agent"
        and _top(i.name) in ("skyplane_ops", "airflow", "dagster")
    ]


def core_integration_imports(imports: Iterable[Import]) -> list[str]:
    """(c) The core (all of ``skyplane_ops`` but its ``airflow``/``dagster`` faces) imports
    neither ``airflow`` nor ``dagster``, nor those faces."""
    return [
        i.where()
        for i in imports
        if _is_core(i.module)
        and (_top(i.name) in ("airflow", "dagster") or _layer(i.name) in ("airflow", "dagster"))
    ]


def impure_planner_imports(imports: Iterable[Import]) -> list[str]:
    """(d) The planner imports only itself, ``errors`` and ``profiles`` from the project, and
    no module that reads or writes files, sockets or processes."""
    wrong = []
    for i in imports:
        if _layer(i.module) != "planner":
            continue
        layer = _layer(i.name)
        outside = layer is not None and layer not in ("planner", "errors", "profiles")
        if outside or _top(i.name) in IO_MODULES:
            wrong.append(i.where())
    return wrong


def planner_file_io(modules: Mapping[str, Module]) -> list[str]:
    """(d) ... and calls neither ``open`` nor the file methods of ``pathlib``."""
    wrong = []
    for name, module in modules.items():
        if _layer(name) != "planner":
            continue
        for node in ast.walk(module.tree):
            if not isinstance(node, ast.Call):
                continue
            fn = node.func
            if isinstance(fn, ast.Name) and fn.id == "open":
                wrong.append(f"{name}:{node.lineno} calls open()")
            elif isinstance(fn, ast.Attribute) and fn.attr in IO_CALLS:
                wrong.append(f"{name}:{node.lineno} calls .{fn.attr}()")
    return wrong


def face_imports(imports: Iterable[Import]) -> list[str]:
    """(e) A face (``airflow``, ``dagster``, ``commands`` + ``cli``) reaches the project only
    through ``skyplane_ops.api`` (and ``skyplane_ops.__version__``), besides its own package."""
    own = {"airflow": {"airflow"}, "dagster": {"dagster"}}
    own |= {"commands": {"commands", "cli"}, "cli": {"commands", "cli"}}
    wrong = []
    for i in imports:
        face = _layer(i.module)
        if _top(i.module) != "skyplane_ops" or face not in own:
            continue
        layer = _layer(i.name)
        past_api = layer is not None and layer != "api" and layer not in own[face]
        if past_api or _top(i.name) == "gateway_agent":
            wrong.append(i.where())
    return wrong


def imports_of_tests(imports: Iterable[Import]) -> list[str]:
    """(f) Nothing outside ``tests/`` imports ``tests``."""
    return [i.where() for i in imports if _top(i.name) == "tests"]


def layer_back_edges(imports: Iterable[Import]) -> list[str]:
    """(g) Between ``skyplane_ops`` layers imports point down (or stay in the layer), and a
    layer nobody placed is reported too (add it to ``LAYERS``)."""
    wrong = []
    for i in imports:
        src, dst = _layer(i.module), _layer(i.name)
        if src is None or dst is None or src == dst:
            continue
        if src not in LAYERS or dst not in LAYERS:
            unknown = src if src not in LAYERS else dst
            wrong.append(f"{i.where()} (skyplane_ops.{unknown} is in no layer)")
        elif LAYERS[dst] > LAYERS[src]:
            wrong.append(f"{i.where()} (up from {src} to {dst})")
    return wrong


def store_upward_imports(imports: Iterable[Import]) -> list[str]:
    """(h) ``gateway_agent.stores`` is the agent's lowest layer: it imports no agent code."""
    return [
        i.where()
        for i in imports
        if _under(i.module, "gateway_agent.stores")
        and _top(i.name) == "gateway_agent"
        and i.name != "gateway_agent"
        and not _under(i.name, "gateway_agent.stores")
    ]


# ---- the project -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def project() -> dict[str, Module]:
    return load_modules(REPO, PACKAGES)


@pytest.fixture(scope="module")
def project_imports(project: Mapping[str, Module]) -> list[Import]:
    return [i for m in project.values() for i in imports_of(m)]


def _report(title: str, wrong: list[str]) -> str:
    return f"{title}:\n  " + "\n  ".join(wrong)


def test_no_import_circles(project: Mapping[str, Module]) -> None:
    circles = find_circles(module_graph(project))
    assert not circles, _report("import circles", [", ".join(c) for c in circles])


def test_the_gateway_agent_stands_alone(project_imports: list[Import]) -> None:
    wrong = upward_agent_imports(project_imports)
    assert not wrong, _report("gateway_agent imports the control plane or an integration", wrong)


def test_the_core_imports_no_integration(project_imports: list[Import]) -> None:
    wrong = core_integration_imports(project_imports)
    assert not wrong, _report("the core imports airflow/dagster", wrong)


def test_the_planner_is_pure(project: Mapping[str, Module], project_imports: list[Import]) -> None:
    wrong = impure_planner_imports(project_imports) + planner_file_io(project)
    assert not wrong, _report("the planner reaches outside data in, plan out", wrong)


def test_the_faces_go_through_the_api(project_imports: list[Import]) -> None:
    wrong = face_imports(project_imports)
    assert not wrong, _report("a face imports the core past skyplane_ops.api", wrong)


def test_nothing_outside_tests_imports_tests() -> None:
    outside = load_modules(REPO, OUTSIDE_TESTS)
    assert "skyplane_ops.testing" in outside  # the scan sees the shared helpers
    wrong = imports_of_tests(i for m in outside.values() for i in imports_of(m))
    assert not wrong, _report("imports of tests/ outside tests/", wrong)


def test_layers_point_down(project_imports: list[Import]) -> None:
    wrong = layer_back_edges(project_imports)
    assert not wrong, _report("imports up a layer", wrong)


def test_the_stores_import_no_agent_code(project_imports: list[Import]) -> None:
    wrong = store_upward_imports(project_imports)
    assert not wrong, _report("gateway_agent.stores imports agent code", wrong)


# ---- the checks can fail -----------------------------------------------------------------------


def test_a_circle_in_a_tiny_graph_is_reported() -> None:
    edges = {"p.a": {"p.b"}, "p.b": {"p.c"}, "p.c": {"p.a"}, "p.d": {"p.a"}, "p.e": set()}
    assert find_circles(edges) == [["p.a", "p.b", "p.c"]]
    assert find_circles({"p.a": {"p.b"}, "p.b": set()}) == []
    long = {f"m{i}": {f"m{i + 1}"} for i in range(5000)} | {"m5000": {"m0"}}
    assert [len(c) for c in find_circles(long)] == [5001]  # no recursion limit


def _write(root: Path, files: Mapping[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_hidden_imports_count(tmp_path: Path) -> None:
    """Function-level, TYPE_CHECKING and relative imports make edges; a package's re-exports
    do not (they are no module)."""
    _write(
        tmp_path,
        {
            "skyplane_ops/__init__.py": "",
            "skyplane_ops/planner/__init__.py": "from .plan import Plan\n",
            "skyplane_ops/planner/plan.py": (
                "from typing import TYPE_CHECKING\n"
                "if TYPE_CHECKING:\n"
                "    from skyplane_ops.planner.render import show\n"
                "def text():\n"
                "    from . import render\n"
                "    return render\n"
            ),
            "skyplane_ops/planner/render.py": "from .plan import text\nimport os\n",
            "skyplane_ops/provision/__init__.py": "",
            "skyplane_ops/provision/universe.py": (
                "def f():\n    from ..profiler import store\n    import dagster\n"
            ),
            "skyplane_ops/profiler/__init__.py": "",
            "skyplane_ops/profiler/store.py": "from skyplane_ops.provision import universe\n",
            "skyplane_ops/api.py": "from skyplane_ops.planner import Plan\n",
            "gateway_agent/__init__.py": "",
            "gateway_agent/stores/__init__.py": "",
            "gateway_agent/stores/s3.py": "from gateway_agent.checksum import crc\n",
            "gateway_agent/checksum.py": "from skyplane_ops import api\n",
        },
    )
    modules = load_modules(tmp_path, PACKAGES)
    edges = module_graph(modules)
    assert edges["skyplane_ops.api"] == set()  # a re-export of the package: no edge
    assert find_circles(edges) == [
        ["skyplane_ops.planner.plan", "skyplane_ops.planner.render"],
        ["skyplane_ops.profiler.store", "skyplane_ops.provision.universe"],
    ]
    imports = [i for m in modules.values() for i in imports_of(m)]
    assert upward_agent_imports(imports) == [
        "gateway_agent.checksum:1 imports skyplane_ops.api",
        "gateway_agent.checksum:1 imports skyplane_ops",
    ]
    assert core_integration_imports(imports) == [
        "skyplane_ops.provision.universe:3 imports dagster"
    ]
    assert impure_planner_imports(imports) == ["skyplane_ops.planner.render:2 imports os"]
    assert layer_back_edges(imports) == [
        "skyplane_ops.provision.universe:2 imports skyplane_ops.profiler.store (up from "
        "provision to profiler)",
        "skyplane_ops.provision.universe:2 imports skyplane_ops.profiler (up from provision "
        "to profiler)",
    ]
    assert store_upward_imports(imports) == [
        "gateway_agent.stores.s3:1 imports gateway_agent.checksum.crc",
        "gateway_agent.stores.s3:1 imports gateway_agent.checksum",
    ]


def test_faces_tests_and_file_io_are_caught(tmp_path: Path) -> None:
    _write(
        tmp_path,
        {
            "skyplane_ops/__init__.py": "__version__ = '0'\n",
            "skyplane_ops/cli.py": (
                "from skyplane_ops import __version__, api\nfrom skyplane_ops.commands import x\n"
            ),
            "skyplane_ops/commands/__init__.py": "",
            "skyplane_ops/commands/cp.py": "from skyplane_ops.transfer import run\n",
            "skyplane_ops/airflow/__init__.py": "",
            "skyplane_ops/airflow/hooks.py": "from skyplane_ops.errors import E\n",
            "skyplane_ops/planner/__init__.py": "",
            "skyplane_ops/planner/route.py": "def w(p, s):\n    p.write_text(s)\n    open(p)\n",
            "skyplane_ops/testing/__init__.py": "",
            "skyplane_ops/testing/sshd.py": "from tests.fixtures.ports import free_port\n",
        },
    )
    modules = load_modules(tmp_path, PACKAGES)
    imports = [i for m in modules.values() for i in imports_of(m)]
    assert face_imports(imports) == [
        "skyplane_ops.airflow.hooks:1 imports skyplane_ops.errors.E",
        "skyplane_ops.airflow.hooks:1 imports skyplane_ops.errors",
        "skyplane_ops.commands.cp:1 imports skyplane_ops.transfer.run",
        "skyplane_ops.commands.cp:1 imports skyplane_ops.transfer",
    ]
    assert planner_file_io(modules) == [
        "skyplane_ops.planner.route:2 calls .write_text()",
        "skyplane_ops.planner.route:3 calls open()",
    ]
    assert imports_of_tests(imports) == [
        "skyplane_ops.testing.sshd:1 imports tests.fixtures.ports.free_port",
        "skyplane_ops.testing.sshd:1 imports tests.fixtures.ports",
    ]
