"""The package's import graph (issue 27): no import circles among module-level imports, and no
function-local import of a bocast module outside :data:`LAZY`, the documented list of those
that must stay local, each with why. A function-local import hides an arrow of the graph, so
one is kept only for a measured reason: its target pulls torch; it keeps ``import bocast`` or
``bocast --help`` from loading what one function or command alone needs; or it would close a
circle. A listed pair no longer imported fails too, so the lists stay
true, and :func:`test_startup_stays_light` checks in a fresh process what the reasons claim.

Everything else imports at the top: a module whose target is light (none of bocast's modules imports
torch, TVM, pandas, SciPy or matplotlib at import time but the three ``bocast.strategies.bo`` ones
below; the others import them inside the functions that use them) and no circle."""

import ast
import collections
import json
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "bocast"

#: the kinds of reason; test_startup_stays_light checks the first three
TORCH = "pulls torch"
IMPORT_BOCAST = "import bocast"
HELP = "bocast --help"
CIRCLE = "circle"

_NUMPY = "numpy and the operators' space files (about 60-110 ms)"

#: (importing module, imported module): (kind, why). Costs measured 2026-11-26 on the 2-core
#: CPU machine, on top of what the importer's context already loads.
LAZY: dict[tuple[str, str], tuple[str, str]] = {
    # BO's pieces import torch, botorch and gpytorch (about 1 s, 900 modules): they load when a BO
    # strategy is made (bocast.strategies.bo.strategy._import_model) or a source model is fitted, so
    # a configuration's check (issue 25), import bocast and bocast --help never pay it
    ("bocast.strategies.bo.transfer", "bocast.strategies.bo.surrogate"): (
        TORCH, "source_model's GP"),
    ("bocast.strategies.bo.strategy", "bocast.strategies.bo.acquisition"): (TORCH, "_import_model"),
    ("bocast.strategies.bo.strategy", "bocast.strategies.bo.feasibility"): (TORCH, "_import_model"),
    ("bocast.strategies.bo.strategy", "bocast.strategies.bo.surrogate"): (TORCH, "_import_model"),
    # bocast/__init__ imports these modules; import bocast loads 12 bocast modules, no numpy
    ("bocast.options", "bocast.space.operators.operator"): (
        IMPORT_BOCAST, f"Workload's check: {_NUMPY}"),
    ("bocast.kernel", "bocast.space.operators.operator"): (IMPORT_BOCAST, f"export: {_NUMPY}"),
    ("bocast.kernel", "bocast.records.store"): (IMPORT_BOCAST, f"export: {_NUMPY}, sqlite3"),
    ("bocast.kernel", "bocast.measure.builder"): (IMPORT_BOCAST, f"export: {_NUMPY}"),
    ("bocast.kernel", "bocast.measure.nvcc"): (
        IMPORT_BOCAST, "export: subprocess (with provenance and tensorcore: 12 ms of 45)"),
    ("bocast.kernel", "bocast.records.provenance"): (IMPORT_BOCAST, "export: platform, datetime"),
    ("bocast.kernel", "bocast.space.tensorcore"): (IMPORT_BOCAST, "export: 3.5 ms alone"),
    ("bocast.kernel", "bocast.measure.tensor_maps"): (
        IMPORT_BOCAST, f"load()'s im2col encoder: {_NUMPY}"),
    ("bocast.kernel", "bocast.measure.build_cache"): (
        IMPORT_BOCAST, "export: tempfile, base64 (and nvcc's subprocess)"),
    # the API's entry points (api, study, tune_run: import bocast loads them) import what one
    # call needs when it is called
    ("bocast.api", "bocast.space.candidates"): (IMPORT_BOCAST, f"a call's own: {_NUMPY}"),
    ("bocast.api", "bocast.run.comparison"): (IMPORT_BOCAST, f"a call's own: {_NUMPY}"),
    ("bocast.api", "bocast.run.config"): (IMPORT_BOCAST, f"a call's own: {_NUMPY}"),
    ("bocast.api", "bocast.records.datasets"): (IMPORT_BOCAST, f"a call's own: {_NUMPY}"),
    ("bocast.api", "bocast.run.identity"): (IMPORT_BOCAST, f"a call's own: {_NUMPY}"),
    ("bocast.api", "bocast.records.library"): (IMPORT_BOCAST, f"a call's own: {_NUMPY}"),
    ("bocast.api", "bocast.measure.runner"): (IMPORT_BOCAST, f"a call's own: {_NUMPY}"),
    ("bocast.api", "bocast.measure.replay"): (IMPORT_BOCAST, f"a call's own: {_NUMPY}"),
    ("bocast.api", "bocast.space.operators.operator"): (IMPORT_BOCAST, f"a call's own: {_NUMPY}"),
    ("bocast.api", "bocast.records.store"): (IMPORT_BOCAST, f"a call's own: {_NUMPY}"),
    ("bocast.api", "bocast.strategies"): (IMPORT_BOCAST, f"a call's own: {_NUMPY}"),
    ("bocast.api", "bocast.tools.suggestions"): (IMPORT_BOCAST, f"a call's own: {_NUMPY}"),
    ("bocast.api", "bocast.run.warm_sources"): (IMPORT_BOCAST, f"a call's own: {_NUMPY}"),
    ("bocast.api", "bocast.measure.nvcc"): (IMPORT_BOCAST, "need_compiler: subprocess"),
    ("bocast.api", "bocast.measure.rpc.options"): (
        IMPORT_BOCAST, "prepare's batch of runner rpc: socket, hmac, the tracker protocol"),
    ("bocast.run.study", "bocast.space.candidates"): (
        IMPORT_BOCAST, f"create_study/ask/tell: {_NUMPY}"),
    ("bocast.run.study", "bocast.run.config"): (IMPORT_BOCAST, f"create_study/ask/tell: {_NUMPY}"),
    ("bocast.run.study", "bocast.run.identity"): (
        IMPORT_BOCAST, f"create_study/ask/tell: {_NUMPY}"),
    ("bocast.run.study", "bocast.space.space"): (IMPORT_BOCAST, f"create_study/ask/tell: {_NUMPY}"),
    ("bocast.run.study", "bocast.records.store"): (
        IMPORT_BOCAST, f"create_study/ask/tell: {_NUMPY}"),
    ("bocast.run.study", "bocast.strategies"): (IMPORT_BOCAST, f"create_study/ask/tell: {_NUMPY}"),
    ("bocast.run.study", "bocast.run.assembly"): (IMPORT_BOCAST, f"optimize's loop: {_NUMPY}"),
    ("bocast.run.tune_run", "bocast.strategies.bo.transfer"): (
        IMPORT_BOCAST, f"a run's own: {_NUMPY}"),
    ("bocast.run.tune_run", "bocast.run.identity"): (IMPORT_BOCAST, f"a run's own: {_NUMPY}"),
    ("bocast.run.tune_run", "bocast.records.library"): (IMPORT_BOCAST, f"a run's own: {_NUMPY}"),
    ("bocast.run.tune_run", "bocast.measure.retime"): (IMPORT_BOCAST, f"a run's own: {_NUMPY}"),
    ("bocast.run.tune_run", "bocast.records.public"): (IMPORT_BOCAST, f"a run's own: {_NUMPY}"),
    ("bocast.run.tune_run", "bocast.run.assembly"): (IMPORT_BOCAST, f"a run's own: {_NUMPY}"),
    # bocast.tune_many and bocast.shapes_of (import bocast loads bocast.many, many_plan,
    # model_shapes and shapes_file): what a run of many or a model's listing needs, when called
    ("bocast.many", "bocast.records.library"): (IMPORT_BOCAST, f"a run of many's own: {_NUMPY}"),
    ("bocast.many", "bocast.records.public"): (IMPORT_BOCAST, f"a run of many's own: {_NUMPY}"),
    ("bocast.many", "bocast.records.store"): (IMPORT_BOCAST, f"a run of many's own: {_NUMPY}"),
    ("bocast.many_plan", "bocast.run.config"): (IMPORT_BOCAST, f"prepare_many: {_NUMPY}"),
    ("bocast.many_plan", "bocast.measure.parts"): (IMPORT_BOCAST, f"prepare_many: {_NUMPY}"),
    ("bocast.many_plan", "bocast.space.operators.operator"): (
        IMPORT_BOCAST, f"prepare_many: {_NUMPY}"),
    ("bocast.many_plan", "bocast.measure.rpc.options"): (
        IMPORT_BOCAST, "prepare_many's fleet of runner rpc: socket, hmac, the tracker protocol"),
    ("bocast.run.model_shapes", "bocast.space.operators.operator"): (
        IMPORT_BOCAST, f"shapes_of's check: {_NUMPY}"),
    ("bocast.run.shapes_file", "bocast.space.operators.operator"): (
        IMPORT_BOCAST, f"an entry's check: {_NUMPY}"),
    ("bocast.run.shapes_file", "bocast.config_files"): (HELP, "a YAML shapes file: yaml (+15 ms)"),
    # bocast.tools.reporting (bocast.report(), bocast report) reads stores and counts when called
    ("bocast.tools.reporting", "bocast.tools.reporting.inputs"): (
        IMPORT_BOCAST, f"report(): the stores: {_NUMPY}, sqlite3 (about 200 ms)"),
    ("bocast.tools.reporting", "bocast.tools.reporting.stats"): (
        IMPORT_BOCAST, f"report(): the comparison's statistics: {_NUMPY} (about 200 ms)"),
    ("bocast.tools.reporting", "bocast.tools.reporting.text"): (
        IMPORT_BOCAST, f"report(): the comparison's format_p: {_NUMPY} (about 200 ms)"),
    ("bocast.tools.reporting", "bocast.records.provenance"): (
        IMPORT_BOCAST, "write(): platform, datetime"),
    # the CLI loads what every command needs; what one command alone needs loads when it runs
    ("bocast.cli.common", "bocast.space.subspace"): (HELP, "--subspace, --fix: yaml (+15 ms)"),
    ("bocast.cli.run_commands", "bocast.config_files"): (HELP, "tune OP --set: yaml (+15 ms)"),
    ("bocast.cli.run_commands", "bocast.tools.suggestions"): (
        HELP, "suggest: multiprocessing, socket (+10-26 ms)"),
    ("bocast.cli.run_commands", "bocast.measure.rpc.server"): (
        HELP, "serve: socket, hmac, multiprocessing (+16 ms)"),
    ("bocast.cli.run_commands", "bocast.tools.remeasure"): (
        HELP, "remeasure: multiprocessing, socket (+14-17 ms)"),
    ("bocast.cli.run_commands", "bocast.tools.ablation"): (
        HELP, "ablation: yaml, multiprocessing, socket (+33-50 ms)"),
    ("bocast.measure.parts", "bocast.measure.engine"): (
        HELP, "make_measurer (tune, measure, compare): multiprocessing, socket (+13-17 ms)"),
    # (bocast.measure.kinds imports a kind's class by its table entry when the kind is asked
    # for: runner rpc's socket, hmac and protocol, +16 ms, only for rpc)
    ("bocast.measure.rpc.options", "bocast.records.store"): (
        IMPORT_BOCAST, f"batch_for_run, a resumed rpc run's batch: {_NUMPY}, sqlite3"),
    # strategies() imports the strategy modules, which register themselves as they load
    ("bocast.strategies", "bocast.strategies.bo.strategy"): (
        IMPORT_BOCAST, "bo's module and the BO pieces it imports at its top (+0.3 s)"),
    ("bocast.strategies", "bocast.strategies.ga"): (IMPORT_BOCAST, "loaded with bo's"),
    ("bocast.strategies", "bocast.strategies.random"): (IMPORT_BOCAST, "loaded with bo's"),
}



def _kind(kind: str) -> set[tuple[str, str]]:
    return {pair for pair, (k, _) in LAZY.items() if k == kind}


def _modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _absolute(mod: str, path: Path, node: ast.ImportFrom) -> str:
    """The module an ``from ... import`` names: a relative one (``from . import x``,
    ``from ._conv import Conv``) resolved against ``mod``, the module it stands in."""
    if not node.level:
        return node.module or ""
    package = mod.split(".") if path.name == "__init__.py" else mod.split(".")[:-1]
    package = package[:len(package) - node.level + 1]
    return ".".join(package + ([node.module] if node.module else []))


def _graph():
    """(modules; module -> bocast modules imported at module level, including under ``if``;
    (module, imported module) -> line numbers of the imports inside functions or classes).
    ``from P import a`` imports the module P.a where there is one, else P; relative imports
    (``from . import a``) are read as the absolute ones they stand for."""
    mods = _modules()

    def owner(name: str) -> str | None:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    edges, local = collections.defaultdict(set), collections.defaultdict(list)
    for mod, path in mods.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        top = {id(n) for stmt in tree.body if not isinstance(stmt, (ast.FunctionDef,
               ast.AsyncFunctionDef, ast.ClassDef)) for n in ast.walk(stmt)}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                base = _absolute(mod, path, node)
                names = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base
                         for a in node.names]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            targets = {owner(n) for n in names if n.split(".")[0] == "bocast"} - {None, mod}
            if id(node) in top:
                edges[mod] |= targets
            else:
                for t in targets:
                    local[mod, t].append(node.lineno)
    return mods, edges, local


def test_no_import_circles():
    mods, edges, _ = _graph()
    seen: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(m: str, path: list[str]) -> list[str] | None:
        seen[m] = 1
        for n in sorted(edges[m]):
            if seen.get(n) == 1:
                return path + [m, n]
            if n not in seen and (circle := visit(n, path + [m])):
                return circle
        seen[m] = 2
        return None

    for m in sorted(mods):
        if m not in seen:
            circle = visit(m, [])
            assert circle is None, "import circle: " + " -> ".join(circle)


def test_function_local_imports_of_our_own_modules_are_the_listed_ones():
    _, edges, local = _graph()
    allowed = set(LAZY)
    new = {f"{m} -> {t} (lines {lines})" for (m, t), lines in local.items()
           if (m, t) not in allowed}
    assert not new, ("function-local imports of bocast modules not in LAZY: import them at "
                     f"the top, or list them with why: {sorted(new)}")
    gone = sorted(allowed - set(local))
    assert not gone, f"listed but no longer imported inside a function: drop them: {gone}"

    def reaches(a: str, b: str, seen: set[str]) -> bool:
        seen.add(a)
        return a == b or any(reaches(n, b, seen) for n in edges[a] - seen)

    no_circle = sorted(p for p in _kind(CIRCLE) if not reaches(p[1], p[0], set()))
    assert not no_circle, f"these would close no circle at the top: {no_circle}"


#: libraries import bocast and bocast --help must not load
HEAVY = ("torch", "tvm", "pandas", "botorch", "gpytorch", "scipy", "sklearn", "matplotlib",
         "xgboost")


def test_startup_stays_light():
    """In one fresh process: ``import bocast`` loads none of HEAVY, nor numpy, nor a module an
    ``import bocast`` entry of LAZY keeps out; ``import bocast.cli`` (what ``bocast --help``
    runs) none of HEAVY nor a ``bocast --help`` entry's target; the importers of the torch
    entries load without torch."""
    torch_importers = sorted({m for m, _ in _kind(TORCH)})
    code = ("import json, sys\nimport bocast\na = sorted(sys.modules)\nimport bocast.cli\n"
            f"b = sorted(sys.modules)\nimport {', '.join(torch_importers)}\n"
            "print(json.dumps([a, b, sorted(sys.modules)]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=PACKAGE.parent, check=True).stdout
    after_bocast, after_cli, after_torch_importers = map(set, json.loads(out.splitlines()[-1]))
    loaded = sorted((set(HEAVY) | {"numpy"} | {t for _, t in _kind(IMPORT_BOCAST)})
                    & after_bocast)
    assert not loaded, f"import bocast loads {loaded}"
    loaded = sorted((set(HEAVY) | {t for _, t in _kind(HELP)}) & after_cli)
    assert not loaded, f"import bocast.cli (bocast --help) loads {loaded}"
    assert "torch" not in after_torch_importers, f"one of {torch_importers} imports torch"


#: issue 27: a module is at most this many lines (``wc -l``)
MAX_LINES = 400
#: modules allowed over MAX_LINES, each with why
LONG: dict[str, str] = {}


def test_modules_are_at_most_400_lines():
    sizes = {m: p.read_text(encoding="utf-8").count("\n") for m, p in _modules().items()}
    over = {m: n for m, n in sizes.items() if n > MAX_LINES and m not in LONG}
    assert not over, f"modules over {MAX_LINES} lines: {over}"
    fixed = [m for m in LONG if sizes.get(m, 0) <= MAX_LINES]
    assert not fixed, f"no longer over {MAX_LINES} lines: drop them from LONG: {fixed}"


#: issue 42: at most this many modules at the top of bocast/; the rest live in the packages of
#: the loop's stages (space, strategies, measure, records, run, tools) and the CLI
MAX_TOP_MODULES = 15


def test_at_most_15_modules_at_the_top():
    top = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(top) <= MAX_TOP_MODULES, f"{len(top)} modules at the top of bocast/: {top}"


def _find_circle(arrows: dict[str, set[str]]) -> list[str] | None:
    seen: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(r: str, path: list[str]) -> list[str] | None:
        seen[r] = 1
        for n in sorted(arrows.get(r, ())):
            if seen.get(n) == 1:
                return path + [r, n]
            if n not in seen and (circle := visit(n, path + [r])):
                return circle
        seen[r] = 2
        return None

    for r in sorted(arrows):
        if r not in seen and (circle := visit(r, [])):
            return circle
    return None


def test_no_package_imports_back_up():
    """In every package, its rooms (each module, and each subpackage taken whole) import each
    other without a circle, function-local imports included: no arrow runs back up between the
    stages, nor inside one. A package's own face (its __init__) is not a room of it."""
    mods, edges, local = _graph()
    every = {m: set(edges[m]) for m in mods}
    for m, t in local:
        every[m].add(t)
    for package in sorted(m for m, p in mods.items() if p.name == "__init__.py"):
        inside = {m: package + "." + m[len(package) + 1:].split(".")[0] for m in mods
                  if m.startswith(package + ".")}
        arrows: dict[str, set[str]] = collections.defaultdict(set)
        for m, targets in every.items():
            for t in targets:
                if m in inside and t in inside and inside[m] != inside[t]:
                    arrows[inside[m]].add(inside[t])
        circle = _find_circle(arrows)
        assert circle is None, f"in {package}: " + " -> ".join(circle)
