"""Import contracts of the tree, read from the source with ``ast``: imports point one way
(widgets → workbench → kernels), nothing but the command line imports the command line,
and no modules import each other in a cycle (imports inside functions included).

The checker is tested on small synthetic trees, so that a broken checker cannot pass the
real tree.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("kernels", "workbench", "widgets", "benchmarks")

#: (importing package, imported package): imports that must not exist.
LAYERS = (("kernels", "workbench"), ("kernels", "widgets"), ("workbench", "widgets"))
CLI = "workbench.cli"


def module_files(root: Path, packages: tuple[str, ...]) -> dict[str, Path]:
    """Dotted module name → file, for every ``.py`` file under the ``packages`` folders."""
    modules = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            modules[".".join(parts)] = path
    return modules


def _imported_names(module: str, path: Path) -> set[str]:
    """Dotted names each import statement of the module asks for (relative ones resolved)."""
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join([*package[: len(package) - node.level + 1], *filter(None, [base])])
            names |= {f"{base}.{alias.name}" for alias in node.names}
    return names


def import_graph(root: Path, packages: tuple[str, ...]) -> dict[str, set[str]]:
    """Module → the modules of the tree it imports: the module each name resolves to and
    the packages above it (their ``__init__`` runs first), its own packages left out."""
    modules = module_files(root, packages)
    graph = {}
    for module, path in modules.items():
        targets = set()
        for name in _imported_names(module, path):
            while name and name not in modules:
                name = name.rpartition(".")[0]
            parts = name.split(".") if name else []
            for end in range(1, len(parts) + 1):
                target = ".".join(parts[:end])
                if target in modules and target != module and not module.startswith(target + "."):
                    targets.add(target)
        graph[module] = targets
    return graph


def _inside(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def layer_violations(graph: dict[str, set[str]]) -> list[str]:
    """``"a imports b"`` for every import against :data:`LAYERS` or of the command line
    from outside it."""
    found = []
    for module, targets in sorted(graph.items()):
        for target in sorted(targets):
            against_layers = any(_inside(module, low) and _inside(target, high)
                                 for low, high in LAYERS)
            into_cli = _inside(target, CLI) and not _inside(module, CLI)
            if against_layers or into_cli:
                found.append(f"{module} imports {target}")
    return found


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The groups of modules that import each other, directly or not (strongly connected
    components of more than one module, Tarjan's algorithm without recursion)."""
    index, low, stack, on_stack, cycles = {}, {}, [], set(), []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, successors = work[-1]
            for successor in successors:
                if successor not in index:
                    index[successor] = low[successor] = len(index)
                    stack.append(successor)
                    on_stack.add(successor)
                    work.append((successor, iter(sorted(graph.get(successor, ())))))
                    break
                if successor in on_stack:
                    low[node] = min(low[node], index[successor])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    group = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        group.append(member)
                        if member == node:
                            break
                    if len(group) > 1:
                        cycles.append(sorted(group))
    return cycles


# -- the tree ------------------------------------------------------------------------
@pytest.fixture(scope="module")
def graph():
    return import_graph(ROOT, PACKAGES)


def test_the_graph_covers_the_tree(graph):
    assert {"kernels", "workbench.cli.main", "widgets.comparison", "workbench.files"} <= set(graph)
    assert "workbench.cli.run" in graph["workbench.cli.main"]


def test_imports_point_one_way_and_only_the_cli_imports_the_cli(graph):
    assert layer_violations(graph) == []


def test_no_modules_import_each_other_in_a_cycle(graph):
    assert import_cycles(graph) == []


def test_the_model_card_module_loads_no_cli():
    code = ("import sys, workbench.training.model_card; "
            "print(sorted(m for m in sys.modules if m.startswith('workbench.cli')))")
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                            text=True, check=True)
    assert result.stdout.strip() == "[]"


# -- the checker, on synthetic trees -------------------------------------------------------
def write_tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


CLEAN = {
    "kernels/__init__.py": "",
    "kernels/csr.py": "import torch\n",
    "workbench/__init__.py": "",
    "workbench/files.py": "import os\n",
    "workbench/model.py": "from kernels.csr import x\nfrom . import files\n",
    "workbench/cli/__init__.py": "from workbench.cli.main import main\n",
    "workbench/cli/main.py": "from workbench.cli import run\n",
    "workbench/cli/run.py": "from ..model import y\n",
    "widgets/__init__.py": "",
    "widgets/panel.py": "from workbench.model import y\n",
}


def test_checker_passes_a_clean_tree(tmp_path):
    graph = import_graph(write_tree(tmp_path, CLEAN), PACKAGES)
    assert graph["workbench.model"] == {"kernels", "kernels.csr", "workbench.files"}
    assert graph["workbench.cli.run"] == {"workbench.model"}
    assert layer_violations(graph) == [] and import_cycles(graph) == []


@pytest.mark.parametrize(
    ("name", "text", "violation"),
    [
        ("kernels/csr.py", "from workbench.files import z\n", "kernels.csr imports workbench"),
        ("kernels/csr.py", "def f():\n    import widgets.panel\n", "kernels.csr imports widgets"),
        ("workbench/files.py", "from widgets import panel\n", "workbench.files imports widgets"),
        ("workbench/model.py", "from workbench.cli.run import z\n",
         "workbench.model imports workbench.cli"),
        ("widgets/panel.py", "import workbench.cli\n", "widgets.panel imports workbench.cli"),
    ],
)
def test_checker_finds_a_forbidden_import(tmp_path, name, text, violation):
    graph = import_graph(write_tree(tmp_path, {**CLEAN, name: text}), PACKAGES)
    assert any(found.startswith(violation) for found in layer_violations(graph))


def test_checker_finds_a_cycle_through_a_function_level_import(tmp_path):
    tree = {**CLEAN, "workbench/files.py": "def f():\n    from workbench import model\n"}
    graph = import_graph(write_tree(tmp_path, tree), PACKAGES)
    assert import_cycles(graph) == [["workbench.files", "workbench.model"]]
