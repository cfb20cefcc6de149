"""The shape of the code (docs/architecture.md), checked on its imports and sizes.

Every `import` of a project module counts, including those inside functions:
an import hidden in a function to dodge a circle still makes the circle. Imports
under `if TYPE_CHECKING:` count for the rule that two modules never import each
other (a type is a dependency too), not for the runtime cycle check.

The layers, top to bottom:
    gateway (the project: settings, urls, asgi, celery, start-up)           wiring
    approvals.api / consumers / admin / tasks, channels_ext.<kind>          ways in, channels
    approvals (services, selectors, models), hooks                          the core
    gateway_contract (what the core and the channels share)                 contract
    gateway_utils (logs, metrics, traces, outbound guard, NOTIFY, YAML)     utilities
"""

from __future__ import annotations

import ast
import dataclasses
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# Each package of the project and its directory: the server's at the root, the agent client's in its own
# distribution (clients/python/, `approval-gateway-client`).
PACKAGES = {
    "approvals": ROOT / "approvals",
    "hooks": ROOT / "hooks",
    "channels_ext": ROOT / "channels_ext",
    "gateway": ROOT / "gateway",
    "gateway_contract": ROOT / "gateway_contract",
    "gateway_utils": ROOT / "gateway_utils",
    "gateway_client": ROOT / "clients" / "python" / "src" / "gateway_client",
}
APPS = ("approvals", "hooks", "channels_ext")
# A module a person can hold (docs/architecture.md): every Python module of the project, its benchmarks
# and its tests, in lines.
MAX_LINES = 650


@dataclasses.dataclass(frozen=True)
class Import:
    importer: str
    target: str  # the project module imported (a name imported from a package resolves to its module if it is one)
    name: str | None  # the name taken with `from target import name`
    line: int
    type_only: bool = False


def _module_name(path: Path, directory: Path) -> str:
    parts = list(path.relative_to(directory.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _project_modules() -> dict[str, Path]:
    modules = {}
    for directory in PACKAGES.values():
        for path in sorted(directory.rglob("*.py")):
            if "migrations" not in path.parts:
                modules[_module_name(path, directory)] = path
    return modules


MODULES = _project_modules()


def _resolve(name: str) -> str | None:
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _imports() -> list[Import]:
    found = []
    for module, path in MODULES.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        type_checking_only = {
            id(node)
            for block in ast.walk(tree)
            if isinstance(block, ast.If) and "TYPE_CHECKING" in ast.unparse(block.test)
            for inner in block.body
            for node in ast.walk(inner)
        }
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                targets = [(alias.name, None) for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets = []
                for alias in node.names:
                    submodule = f"{node.module}.{alias.name}"
                    targets.append((submodule, None) if submodule in MODULES else (node.module, alias.name))
            else:
                continue
            for target, name in targets:
                resolved = _resolve(target)
                if resolved and resolved != module:
                    found.append(Import(module, resolved, name, node.lineno, id(node) in type_checking_only))
    return found


ALL_IMPORTS = _imports()
IMPORTS = [imp for imp in ALL_IMPORTS if not imp.type_only]  # what runs


def _top(module: str) -> str:
    return module.split(".")[0]


def _cycles() -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    graph: dict[str, set[str]] = defaultdict(set)
    for imp in IMPORTS:
        graph[imp.importer].add(imp.target)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
    counter = [0]

    def visit(node: str) -> None:
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for nxt in graph.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for node in sorted(MODULES):
        if node not in index:
            visit(node)
    return components


def test_it_finds_the_project_and_its_imports():
    # The checks below must be able to fail: the walk sees the modules and the edges they hinge on.
    assert {"approvals.services.confirmations", "hooks.chain", "gateway_contract", "gateway_utils.realtime"} <= set(MODULES)
    assert {"gateway_client", "gateway_client.client", "gateway_client.mcp_proxy.gating"} <= set(MODULES)
    assert Import("approvals.services.tool_calls", "hooks.chain", "run_chain", 0).target in {
        imp.target for imp in IMPORTS if imp.importer == "approvals.services.tool_calls"
    }


def test_no_module_takes_part_in_an_import_cycle():
    assert _cycles() == []


def test_no_two_modules_import_each_other_not_even_for_a_type():
    edges = {(imp.importer, imp.target) for imp in ALL_IMPORTS}
    assert sorted((a, b) for a, b in edges if (b, a) in edges and a < b) == []


def test_hooks_import_nothing_from_approvals():
    offenders = [imp for imp in IMPORTS if imp.importer.startswith("hooks") and imp.target.startswith("approvals")]
    assert offenders == []


def test_the_core_never_imports_a_channel():
    offenders = [imp for imp in ALL_IMPORTS if _top(imp.importer) in ("approvals", "hooks") and _top(imp.target) == "channels_ext"]
    assert offenders == []


def test_a_channel_reaches_the_core_only_through_its_services_and_selectors():
    public = ("approvals.services", "approvals.selectors", "approvals.errors", "approvals.types")
    offenders = [
        imp
        for imp in ALL_IMPORTS
        if _top(imp.importer) == "channels_ext"
        and _top(imp.target) == "approvals"
        and not any(imp.target == p or imp.target.startswith(p + ".") for p in public)
        and not (imp.target == "approvals" and imp.name in ("services", "selectors", "errors", "types"))
    ]
    assert offenders == []


@pytest.mark.parametrize(
    "layer, below",
    [
        ("gateway_contract", ("gateway_contract", "gateway_utils")),
        ("gateway_utils", ("gateway_utils",)),
    ],
)
def test_the_contract_and_the_utilities_import_nothing_above_them(layer, below):
    offenders = [imp for imp in ALL_IMPORTS if _top(imp.importer) == layer and _top(imp.target) not in below]
    assert offenders == []


def test_the_project_package_is_imported_only_by_its_own_wiring():
    offenders = [imp for imp in ALL_IMPORTS if _top(imp.target) == "gateway" and _top(imp.importer) != "gateway"]
    assert offenders == []


def _sized_files() -> list[Path]:
    files = [path for module, path in MODULES.items()]
    files += sorted((ROOT / "bench").rglob("*.py")) + sorted((ROOT / "tests").rglob("*.py"))
    return [path for path in files if "node_modules" not in path.parts and "migrations" not in path.parts]


def test_no_module_is_longer_than_a_person_can_hold():
    long = {str(p.relative_to(ROOT)): n for p in _sized_files() if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert long == {}


def test_no_module_imports_another_modules_private_names():
    offenders = [
        imp
        for imp in IMPORTS
        if imp.name and imp.name.startswith("_") and not imp.name.startswith("__") and imp.target != imp.importer
    ]
    assert offenders == []


@pytest.mark.parametrize("kind", ["web", "slack", "feishu", "telegram", "email"])
def test_a_channels_adapter_cards_and_config_never_touch_the_gateways_records(kind):
    offenders = [
        imp
        for imp in IMPORTS
        if imp.importer.split(".")[:2] == ["channels_ext", kind]
        and imp.importer.rsplit(".", 1)[-1] in ("adapter", "cards", "config")
        and imp.target.startswith("approvals")
    ]
    assert offenders == []


def test_the_agent_side_client_needs_no_server_code():
    server = ("approvals", "hooks", "channels_ext", "gateway", "gateway_contract", "gateway_utils")
    offenders = [imp for imp in ALL_IMPORTS if _top(imp.importer) == "gateway_client" and _top(imp.target) in server]
    assert offenders == []
    for path in PACKAGES["gateway_client"].rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            assert not any(name.split(".")[0] == "django" for name in names), f"{path}:{node.lineno}"


def test_every_hook_kind_and_channel_kind_is_one_registry_line():
    from gateway_contract import CHANNEL_KINDS
    from hooks.registry import HOOK_KINDS

    kind_modules = {p.stem for p in (ROOT / "hooks" / "builtin").glob("*.py")} - {"__init__", "external"}
    assert {path.split(".")[2] for path in HOOK_KINDS.values()} == kind_modules
    channel_packages = {p.parent.name for p in (ROOT / "channels_ext").glob("*/adapter.py")}
    assert set(CHANNEL_KINDS) == channel_packages
