"""The engine boundary: the SCons versions the build accepts, how patches are installed, and that nothing outside
the engine assigns to SCons or reads its private names (checked over every build file's syntax tree)."""
from __future__ import annotations

import ast
import importlib
import inspect
import re
import tomllib
from pathlib import Path

import pytest
import SCons
import SCons.Action
import SCons.Builder
import SCons.CacheDir
import SCons.Environment
import SCons.Executor
import SCons.Node
import SCons.Node.Alias
import SCons.Node.FS
import SCons.Scanner
import SCons.SConsign
import SCons.Script.Main
import SCons.Subst
import SCons.Taskmaster
import SCons.Util

from opencoti_build.errors import UserError
from opencoti_scons import engine

ROOT = Path(__file__).resolve().parents[2]
ENGINE = ROOT / "site_scons/opencoti_scons/engine.py"


@pytest.mark.parametrize(("version", "parsed"), [("4.11.1", (4, 11, 1)), ("4.12.0.dev0", (4, 12, 0)),
                                                 ("4.10.0a1", (4, 10, 0)), ("5", (5,))])
def test_a_release_number_is_read_up_to_its_suffix(version: str, parsed: tuple[int, ...]) -> None:
    assert engine.version_tuple(version) == parsed


@pytest.mark.parametrize("version", ["4.11.0", "4.11.1", "4.11.9"])
def test_the_releases_the_patches_were_written_against_are_accepted(version: str) -> None:
    assert engine.why_not_supported(version) is None


@pytest.mark.parametrize("version", ["4.10.1", "4.12.0", "4.12.0.dev0", "5.0.0", "3.1.2"])
def test_any_other_release_is_refused_in_one_line_that_names_the_range_and_the_fix(version: str) -> None:
    assert engine.why_not_supported(version) == (
        f"SCons {version} is not supported: this build was written against >=4.11,<4.12; "
        f"install it with `python3 -m pip install 'scons>=4.11,<4.12'`")


def test_pyproject_pins_scons_to_the_engines_range() -> None:
    dependencies = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    assert engine.REQUIREMENT in dependencies
    assert engine.why_not_supported(SCons.__version__) is None  # the installed one is in it


def test_an_unsupported_scons_stops_the_build_with_exit_2_and_one_line(capsys) -> None:
    with pytest.raises(SystemExit) as stop:
        engine.require_supported("4.12.0")
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("scons: error: SCons 4.12.0 is not supported: ")


class _Owner:
    def greet(self) -> str:
        return "scons"


@pytest.fixture
def patch_table(monkeypatch) -> type[_Owner]:
    owner = type("Owner", (_Owner,), {})
    monkeypatch.setattr(engine, "PATCHES", {"greeting": engine.Patch(owner, "greet", "a test's stand-in"),
                                            "farewell": engine.Patch(owner, "greet", "another on the same one")})
    monkeypatch.setattr(engine.Bound, "run", None)
    return owner


def _for_the_run(original):
    return lambda run, self: f"{original(self)} for the {run}"


def test_a_patch_wraps_the_original_once_per_process(patch_table: type[_Owner]) -> None:
    engine.bind("first run")
    assert engine.install("greeting", _for_the_run)
    assert not engine.install("greeting", lambda original: lambda run, self: "a second wrapper")

    assert patch_table().greet() == "scons for the first run"
    assert getattr(patch_table.greet, engine.MARK) == "greeting"


def test_a_patch_serves_the_run_bound_last_and_none_is_scons_own(patch_table: type[_Owner]) -> None:
    engine.install("greeting", _for_the_run)
    assert patch_table().greet() == "scons"  # no run bound: SCons's original
    engine.bind("first run")
    assert patch_table().greet() == "scons for the first run"
    engine.bind("second run")
    assert patch_table().greet() == "scons for the second run"


def test_two_patches_of_one_attribute_are_each_installed_once(patch_table: type[_Owner]) -> None:
    engine.bind("run")
    assert engine.install("greeting", lambda original: lambda run, self: original(self) + " hello")
    assert engine.install("farewell", lambda original: lambda run, self: original(self) + " goodbye")
    assert not engine.install("greeting", lambda original: lambda run, self: "wrapped again")  # under the other
    assert patch_table().greet() == "scons hello goodbye"


def test_no_patch_is_installed_under_another_scons(patch_table: type[_Owner]) -> None:
    with pytest.raises(UserError, match=r"^SCons 4\.12\.0 is not supported: "):
        engine.install("greeting", lambda original: lambda run, self: "patched", version="4.12.0")
    assert patch_table().greet() == "scons"


def test_every_patch_names_an_attribute_scons_has_and_says_why() -> None:
    for name, patch in engine.PATCHES.items():
        assert callable(getattr(patch.owner, patch.attribute)), name
        assert len(patch.why) > 20, name


# --- the boundary ------------------------------------------------------------------------------------------

_SCONS_MODULES = (SCons.Action, SCons.Builder, SCons.CacheDir, SCons.Environment, SCons.Executor, SCons.Node,
                  SCons.Node.Alias, SCons.Node.FS, SCons.Scanner, SCons.SConsign, SCons.Script.Main, SCons.Subst,
                  SCons.Taskmaster, SCons.Util)


def _scons_private_names() -> set[str]:
    """Every single-underscore name SCons's modules and their classes define."""
    names = set()
    for module in _SCONS_MODULES:
        for name, value in vars(module).items():
            names.add(name)
            if inspect.isclass(value):
                names.update(dir(value))
    return {n for n in names if re.fullmatch(r"_[A-Za-z0-9]\w*", n) and not n.endswith("__")}


def _build_files() -> list[Path]:
    files = [*ROOT.glob("site_scons/**/*.py"), ROOT / "SConstruct", *ROOT.glob("*.SConscript"),
             *ROOT.glob("*/SConscript"), *ROOT.glob("*/*/SConscript")]
    return sorted(f for f in files if f != ENGINE and "fixtures" not in f.parts)


def _dotted(node: ast.AST) -> str:
    return f"{_dotted(node.value)}.{node.attr}" if isinstance(node, ast.Attribute) else getattr(node, "id", "")


def _violations(path: Path, private: set[str], root: Path = ROOT) -> list[str]:
    tree = ast.parse(path.read_text(), str(path))
    own = {n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    found = []
    for node in ast.walk(tree):
        targets = node.targets if isinstance(node, ast.Assign) else \
            [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else []
        found += [f"assigns {_dotted(t)}" for t in targets if _dotted(t).startswith("SCons.")]
        if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "setattr" and node.args \
                and _dotted(node.args[0]).startswith("SCons."):
            found.append(f"setattr on {_dotted(node.args[0])}")
        if isinstance(node, ast.Attribute) and node.attr in private and node.attr not in own:
            found.append(f"reads {node.attr}")
        if isinstance(node, ast.ClassDef) and any(_dotted(b).startswith("SCons.") for b in node.bases):
            found += [f"overrides {m.name}" for m in node.body if isinstance(m, ast.FunctionDef) and m.name in private]
    return [f"{path.relative_to(root)}:{v}" for v in found]


def test_only_the_engine_assigns_to_scons_or_reads_its_private_names() -> None:
    private = _scons_private_names()
    assert {"_decider_map", "_children_reset", "_readconfig"} <= private  # the check sees what the engine uses

    assert [v for path in _build_files() for v in _violations(path, private)] == []


def test_the_check_finds_what_it_is_for(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("import SCons.Node\nSCons.Node.Node.explain = None\nSCons.Node._decider_map\n"
                   "class C(SCons.CacheDir.CacheDir):\n    def _readconfig(self, path): pass\n"
                   "setattr(SCons.SConsign, 'write', None)\n")
    found = sorted(v.split(":", 1)[1] for v in _violations(bad, _scons_private_names(), tmp_path))
    assert found == ["assigns SCons.Node.Node.explain", "overrides _readconfig", "reads _decider_map",
                     "setattr on SCons.SConsign"]


# The SCons names the build files other than the engine may read: public classes, functions and constants. A
# module-level switch SCons's Main sets from the command line (``SCons.Action.execute_actions``, ``cache_debug``, a
# class's ``File.hash_chunksize``) or an undocumented helper (``find_file``, ``hash_collect``) is read through an
# engine accessor instead, so that a new SCons release is handled in the engine alone.
PUBLIC_SCONS = frozenset({
    "SCons.__file__", "SCons.__version__",
    "SCons.Action.Action", "SCons.Builder.Builder", "SCons.Builder.ListEmitter",
    "SCons.CacheDir.CACHE_PREFIX_LEN", "SCons.CacheDir.CacheDir",
    "SCons.Defaults.SharedObjectEmitter", "SCons.Defaults.StaticObjectEmitter", "SCons.Environment.Base",
    "SCons.Errors.BuildError", "SCons.Errors.UserError",
    "SCons.Node.Node", "SCons.Node.executed", "SCons.Node.executing", "SCons.Node.up_to_date",
    "SCons.Node.FS.Base", "SCons.Node.FS.File",
    "SCons.Scanner.ClassicCPP", "SCons.Scanner.FindPathDirs",
    "SCons.Script.ARGUMENTS", "SCons.Script.Action", "SCons.Script.Alias", "SCons.Script.BUILD_TARGETS",
    "SCons.Script.BoolVariable", "SCons.Script.COMMAND_LINE_TARGETS", "SCons.Script.Default",
    "SCons.Script.DefaultEnvironment", "SCons.Script.Dir",
    "SCons.Script.EnumVariable", "SCons.Script.Environment", "SCons.Script.Export", "SCons.Script.File",
    "SCons.Script.GetBuildFailures", "SCons.Script.GetOption", "SCons.Script.Help", "SCons.Script.Import",
    "SCons.Script.Literal", "SCons.Script.Return", "SCons.Script.SConscript", "SCons.Script.SConsignFile",
    "SCons.Script.SetOption", "SCons.Script.Value", "SCons.Script.Variables", "SCons.Script.Main.main",
    "SCons.Subst.Literal", "SCons.Subst.SUBST_CMD",
    "SCons.Util.get_current_hash_algorithm_used", "SCons.Util.hash_file_signature", "SCons.Util.hash_signature",
    "SCons.Util.to_str",
})


def _module_and_rest(dotted: str) -> tuple[object, list[str]] | None:
    """The deepest SCons module ``dotted`` names, and the names after it (None: not an SCons name). A module's
    attribute comes before its submodule of the same name (``SCons.Script.SConscript`` is a function)."""
    parts = dotted.split(".")
    if parts[0] != "SCons":
        return None
    module, i = SCons, 1
    while i < len(parts):
        value = getattr(module, parts[i], None)
        if value is None:
            try:
                value = importlib.import_module(f"{module.__name__}.{parts[i]}")
            except ImportError:
                break
        if not inspect.ismodule(value):
            break
        module, i = value, i + 1
    return module, parts[i:]


def scons_name(dotted: str) -> str | None:
    """The SCons name a dotted read in a build file is of: the module attribute, or a class's data attribute
    (``SCons.Node.FS.File.hash_chunksize``; a method read through its class is the class's name); None for a
    module itself or a name outside SCons."""
    found = _module_and_rest(dotted)
    if found is None or not found[1]:
        return None
    module, rest = found
    name = f"{module.__name__}.{rest[0]}"
    value = getattr(module, rest[0], None)
    if inspect.isclass(value) and len(rest) > 1:
        member = inspect.getattr_static(value, rest[1], None)
        if not (callable(member) or isinstance(member, (staticmethod, classmethod, property))):
            return f"{name}.{rest[1]}"
    return name


def scons_names_read(path: Path) -> set[str]:
    """Every SCons name ``path`` reads: through ``from SCons.X import y``, and through dotted reads from an imported
    SCons module (``SCons.X.y``, or ``x.y`` after ``import SCons.X as x``)."""
    tree = ast.parse(path.read_text(), str(path))
    aliases: dict[str, str] = {}
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            aliases.update({a.asname: a.name for a in node.names if a.asname})
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("SCons"):
            for a in node.names:
                aliases[a.asname or a.name] = f"{node.module}.{a.name}"
                names.add(scons_name(f"{node.module}.{a.name}") or "")
    inner = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and id(node) not in inner:
            root, _, rest = _dotted(node).partition(".")
            names.add(scons_name(f"{aliases.get(root, root)}.{rest}") or "")
    return names - {""}


def test_the_build_reads_only_public_scons_names_outside_the_engine() -> None:
    read = {f"{path.relative_to(ROOT)}: {name}" for path in _build_files() for name in scons_names_read(path)}
    assert sorted(r for r in read if r.split(": ")[1] not in PUBLIC_SCONS) == []
    assert sorted(PUBLIC_SCONS - {r.split(": ")[1] for r in read}) == []  # the list holds nothing no file reads


def test_the_public_names_check_finds_a_switch_read_any_way(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("import SCons.Action\nimport SCons.Node.FS as fs\nfrom SCons.CacheDir import cache_show\n"
                   "from SCons.Node import Alias\n"
                   "SCons.Action.execute_actions\nfs.File.hash_chunksize\nfs.File.get_csig\nAlias.default_ans\n"
                   "SCons.Util.hash_collect([])\n")
    assert sorted(scons_names_read(bad) - PUBLIC_SCONS) == [
        "SCons.Action.execute_actions", "SCons.CacheDir.cache_show", "SCons.Node.Alias.default_ans",
        "SCons.Node.FS.File.hash_chunksize", "SCons.Util.hash_collect"]
    assert "SCons.Node.FS.File" in scons_names_read(bad)  # a method read through its class is the class's name


def test_each_switch_the_build_reads_has_an_engine_accessor_that_follows_scons(monkeypatch) -> None:
    monkeypatch.setattr(SCons.Action, "execute_actions", None)  # scons -n
    monkeypatch.setattr(SCons.Action, "print_actions", False)  # -s
    monkeypatch.setattr(SCons.CacheDir, "cache_debug", "-")
    monkeypatch.setattr(SCons.CacheDir, "cache_show", True)
    monkeypatch.setattr(SCons.Node.FS.File, "hash_chunksize", 4096)
    assert (engine.executes_actions(), engine.prints_actions(), engine.cache_debug(), engine.cache_show(),
            engine.hash_chunksize()) == (False, False, "-", True, 4096)
    monkeypatch.setattr(SCons.CacheDir, "cache_debug", False)  # SCons's own default
    assert engine.cache_debug() is None
    assert engine.combined_signature(["a", "b"]) == SCons.Util.hash_collect(["a", "b"])
    assert engine.alias("no such alias") is None


def test_tools_are_glue_of_at_most_150_lines() -> None:
    lengths = {p.name: len(p.read_text().splitlines()) for p in (ROOT / "site_scons/site_tools").glob("*.py")}
    assert {name: n for name, n in lengths.items() if n > 150} == {}
    assert len(lengths) >= 10  # the tools are there to be measured


def test_tools_never_import_one_another() -> None:
    tools = {p.stem for p in (ROOT / "site_scons/site_tools").glob("*.py")}
    imports = {}
    for path in (ROOT / "site_scons/site_tools").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            imports[path.stem] = imports.get(path.stem, set()) | {
                n for n in names if n.split(".")[0] in tools | {"site_tools"}}
    assert {tool: found for tool, found in imports.items() if found} == {}


# what this process holds until it ends: its locks, and the pipes that keep the replaced outputs from being freed
PROCESS_STATE = {"site_scons/opencoti_build/incremental/build_lock.py:_held",
                 "site_scons/opencoti_build/bulkcopy/replaced.py:_HELD_UNTIL_EXIT"}


def test_no_module_keeps_build_state_in_an_empty_container() -> None:
    """Build state lives in the run's objects (BuildRun, Tiers, CompileDb, GgmlCore, Digests, Memo); a module-level
    empty dict, list or set is how state used to hide."""
    found = set()
    for path in sorted([*ROOT.glob("site_scons/**/*.py")]):
        for node in ast.parse(path.read_text()).body:
            target, value = ((node.targets[0], node.value) if isinstance(node, ast.Assign) else
                             (node.target, node.value) if isinstance(node, ast.AnnAssign) else (None, None))
            empty = (isinstance(value, (ast.Dict, ast.List, ast.Set)) and not getattr(value, "keys", None)
                     and not getattr(value, "elts", None)) or (
                isinstance(value, ast.Call) and getattr(value.func, "id", "") in ("dict", "list", "set")
                and not value.args)
            if empty and isinstance(target, ast.Name):
                found.add(f"{path.relative_to(ROOT)}:{target.id}")
    assert found == PROCESS_STATE


def test_an_action_signature_computed_ahead_survives_the_cleanup_a_scan_makes(tmp_path: Path) -> None:
    """A build server's reader computes each step's action signature ahead; SCons's scan cleans the executor up
    (Node._children_reset), which would drop it and make the plan compute it again."""
    import SCons.Action
    import SCons.Environment
    import SCons.Executor
    import SCons.Node.FS

    fs = SCons.Node.FS.FS(str(tmp_path))
    executor = SCons.Executor.Executor(SCons.Action.Action("cp $SOURCE $TARGET"), SCons.Environment.Base(tools=[]), [],
                                       [fs.File("out")], [fs.File("in")])
    other = SCons.Executor.Executor(SCons.Action.Action("touch $TARGET"), SCons.Environment.Base(tools=[]), [],
                                    [fs.File("other")], [])
    warm: engine.WarmSignatures = {id(executor): (executor, executor.get_contents())}
    other.get_contents()
    cleanup = engine._keeping_warm_signature(SCons.Executor.Executor.cleanup, warm)
    run = object()  # the bound run, which the reader's table does not depend on
    cleanup(run, executor)
    cleanup(run, other)
    assert executor._memo == {"get_contents": warm[id(executor)][1]}
    assert other._memo == {}  # an executor nothing computed ahead is cleaned up as SCons does
