"""The packages of opencoti_build form a DAG: no package imports (at the top or inside a function) one that imports
it back, so each can be read, tested and changed with what is below it alone (docs/architecture.md shows the order).
The modules at the top that the packages share (errors, files, locks, project, streams, tempfiles) import none of
them, and formats, the file formats, know nothing of the build and start nothing. Read from the sources' syntax trees: no import runs."""
from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import opencoti_build

PACKAGE_DIR = Path(opencoti_build.__file__).parent
NAME = "opencoti_build"
# the modules at the top every package may use: they import no package of the build (one another only)
SHARED = ("errors", "files", "locks", "project", "streams", "tempfiles")
# what the format layer may not touch: a process, a thread, the page cache
STARTS_SOMETHING = ("subprocess", "threading", "concurrent", "multiprocessing")
ADVICE = ("posix_fadvise", "fork", "system", "popen", "posix_spawn")

Graph = dict[str, dict[str, list[str]]]  # node -> imported node -> the files (relative) that import it


def _module(root: Path, path: Path) -> list[str]:
    """The dotted name of the module at ``path`` under ``root`` (a package's ``__init__`` is the package)."""
    parts = [root.name, *path.relative_to(root).with_suffix("").parts]
    return parts[:-1] if parts[-1] == "__init__" else parts


def _imported(root: Path, path: Path) -> Iterator[list[str]]:
    """Every name of ``root``'s package the module at ``path`` imports, as parts, relative imports resolved; for
    ``from X import y`` both X and X.y (``y`` may be a module)."""
    module = _module(root, path)
    package = module if path.name == "__init__.py" else module[:-1]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            yield from (alias.name.split(".") for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = (package[:len(package) - node.level + 1] if node.level else []) + (node.module or "").split(".")
            base = [part for part in base if part]
            yield base
            yield from ([*base, alias.name] for alias in node.names)


def _node(root: Path, parts: list[str]) -> str | None:
    """The graph's node a module's parts belong to: its package below the top, or the module at the top."""
    if len(parts) < 2 or parts[0] != root.name:
        return None
    if (root / parts[1]).is_dir() or (root / f"{parts[1]}.py").is_file():
        return parts[1]
    return None


def package_graph(root: Path) -> Graph:
    """The import graph of the package at ``root`` between its packages and its modules at the top."""
    graph: Graph = {}
    for path in sorted(root.rglob("*.py")):
        source = _node(root, _module(root, path)) if path.parent != root else path.stem
        if source is None or source == "__init__":
            continue
        edges = graph.setdefault(source, {})
        for parts in _imported(root, path):
            target = _node(root, parts)
            if target is not None and target != source:
                files = edges.setdefault(target, [])
                if path.relative_to(root).as_posix() not in files:
                    files.append(path.relative_to(root).as_posix())
    return graph


def _components(graph: Graph) -> list[list[str]]:
    """The strongly connected components of ``graph`` with more than one node (Tarjan's), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in sorted(graph.get(node, {})):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def _cycle(graph: Graph, component: list[str]) -> list[str]:
    """One cycle through ``component``'s first node, found breadth first within the component."""
    start, members = component[0], set(component)
    paths = {start: [start]}
    queue = [start]
    while queue:
        node = queue.pop(0)
        for target in sorted(graph.get(node, {})):
            if target == start:
                return [*paths[node], start]
            if target in members and target not in paths:
                paths[target] = [*paths[node], target]
                queue.append(target)
    raise AssertionError(f"no cycle through {start}")  # a component always has one


def cycles(graph: Graph) -> list[str]:
    """Each import cycle of ``graph``, as a line naming its packages and the files that import along it."""
    lines = []
    for component in _components(graph):
        cycle = _cycle(graph, component)
        steps = "; ".join(f"{a} -> {b}: {', '.join(graph[a][b])}" for a, b in zip(cycle, cycle[1:]))
        lines.append(f"{' -> '.join(cycle)} ({steps})")
    return lines


def test_the_packages_import_one_another_without_a_cycle() -> None:
    found = cycles(package_graph(PACKAGE_DIR))
    assert found == [], ("import cycles among opencoti_build's packages (move what one side needs below both, "
                         "docs/architecture.md):\n" + "\n".join(found))


def test_the_check_names_each_cycle_and_the_files_along_it(tmp_path: Path) -> None:
    root = tmp_path / NAME
    sources = {
        "a/__init__.py": "",
        "a/one.py": f"from {NAME}.b import two\n",
        "b/__init__.py": "",
        "b/two.py": f"def f():\n    import {NAME}.c.three\n",
        "c/__init__.py": "",
        "c/three.py": f"from {NAME} import a\nfrom {NAME} import errors\n",
        "d/__init__.py": f"from {NAME}.a import one\nfrom .e import x\n",
        "d/e.py": "from ..c import three\n",
        "errors.py": "",
    }
    for name, text in sources.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    graph = package_graph(root)
    assert graph["d"] == {"a": ["d/__init__.py"], "c": ["d/e.py"]}  # relative imports resolved; d is in no cycle
    assert cycles(graph) == [
        "a -> b -> c -> a (a -> b: a/one.py; b -> c: b/two.py; c -> a: c/three.py)"]
    (root / "b" / "two.py").write_text("")
    assert cycles(package_graph(root)) == []


def test_the_shared_modules_at_the_top_import_no_package() -> None:
    graph = package_graph(PACKAGE_DIR)
    assert all((PACKAGE_DIR / f"{module}.py").is_file() for module in SHARED)
    assert {module: sorted(set(graph.get(module, {})) - set(SHARED)) for module in SHARED} == {
        module: [] for module in SHARED}


def _formats_files() -> list[Path]:
    return sorted((PACKAGE_DIR / "formats").rglob("*.py"))


def test_formats_know_nothing_of_the_build() -> None:
    assert sorted(package_graph(PACKAGE_DIR)["formats"]) == ["errors"]


def test_formats_start_no_process_or_thread_and_give_the_kernel_no_advice() -> None:
    found = []
    for path in _formats_files():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            found += [f"{path.name} imports {n}" for n in names if n.split(".")[0] in STARTS_SOMETHING]
            if isinstance(node, ast.Attribute) and node.attr in ADVICE:
                found.append(f"{path.name} calls {node.attr}")
    assert found == []
