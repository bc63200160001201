"""The layers hold (docs/architecture.md §2.1). C++: every #include of a folder is allowed by the
dependencies its layer declares in CMakeLists.txt (pypto_layer calls), and the layers form no
cycle. Python: the package's import graph (top-level and function-local imports) has no cycle,
no function-local import but of an optional heavy dependency, no private name imported across
modules."""

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
INCLUDE_RE = re.compile(r'^\s*#\s*include\s*[<"]([^">]+)[">]', re.M)
LAYER_CALL_RE = re.compile(r"^\s*pypto_layer\(([^)]*)\)", re.M)
# Folders that belong to no layer of their own (outside src/, or not C++ of the project).
HEADER_LIBRARY = ("pypto_pto_headers", "include")


def parse_layers(cmake_text):
    """{layer name: {"dir": folder, "public": set, "private": set}} from the pypto_layer calls."""
    layers = {}
    for call in LAYER_CALL_RE.findall(re.sub(r"#[^\n]*", "", cmake_text)):
        words = call.split()
        name, rest = words[0], words[1:]
        layer = {"dir": None, "public": set(), "private": set(), "module": "MODULE" in rest}
        mode = None
        for w in rest:
            if w in ("DIR", "PUBLIC", "PRIVATE"):
                mode = w
            elif w == "MODULE":  # an executable or Python module: nothing includes its headers
                continue
            elif mode == "DIR":
                layer["dir"] = w
            elif mode in ("PUBLIC", "PRIVATE") and w.startswith("pypto_"):
                layer[mode.lower()].add(w)  # Threads::Threads and the like are not layers
        assert layer["dir"], f"pypto_layer({name}) names no DIR"
        layers[name] = layer
    layers[HEADER_LIBRARY[0]] = {"dir": HEADER_LIBRARY[1], "public": set(), "private": set(), "module": False}
    return layers


def owner_of(include, source_dir, layers, root):
    """The layer whose folder holds the included file, or None for a system/third-party header."""
    local = root / source_dir / include
    if local.exists():  # "npy.h" beside the including file
        include = str(local.relative_to(root))
    else:
        for base in ("src", "include"):
            if (root / base / include).exists():
                include = f"{base}/{include}"
                break
        else:
            return None
    best = None
    for name, layer in layers.items():
        d = layer["dir"].rstrip("/") + "/"
        if include.startswith(d) and (best is None or len(d) > len(layers[best]["dir"]) + 1):
            best = name
    return best


def layer_violations(root, layers):
    """Lines 'file: includes X of layer L, not a dependency of M' for every disallowed include."""
    problems = []
    for name, layer in layers.items():
        folder = root / layer["dir"]
        for path in sorted(folder.rglob("*")):
            if path.suffix not in (".h", ".hpp", ".cpp") or not path.is_file():
                continue
            rel = path.relative_to(root)
            # A file of a sub-folder that is a layer of its own is checked as that layer's.
            if owner_of(str(rel), ".", layers, root) != name:
                continue
            is_header = path.suffix in (".h", ".hpp") and not layer["module"]
            allowed = layer["public"] | (set() if is_header else layer["private"])
            for inc in INCLUDE_RE.findall(path.read_text()):
                dep = owner_of(inc, str(rel.parent), layers, root)
                if dep is None or dep == name or dep in allowed:
                    continue
                how = "a PRIVATE dependency (a header needs PUBLIC)" if dep in layer["private"] else "not a dependency"
                problems.append(f"{rel}: includes {inc} of {dep}, {how} of {name}")
    return problems


def find_cycle(graph):
    """One cycle of a {node: set(successors)} graph as a list of nodes, or None."""
    state = {}

    def visit(node, stack):
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt) :] + [nxt]
            if nxt not in state:
                found = visit(nxt, stack)
                if found:
                    return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node, [])
            if found:
                return found
    return None


@pytest.fixture(scope="module")
def layers():
    return parse_layers((ROOT / "CMakeLists.txt").read_text())


def test_every_source_folder_is_a_layer(layers):
    dirs = {layer["dir"] for layer in layers.values()}
    folders = {str(p.parent.relative_to(ROOT)) for p in (ROOT / "src").rglob("*") if p.suffix in (".h", ".cpp")}
    assert sorted(folders - dirs) == []


def test_includes_follow_the_declared_layers(layers):
    assert layer_violations(ROOT, layers) == []


def test_layers_have_no_cycle(layers):
    graph = {name: layer["public"] | layer["private"] for name, layer in layers.items()}
    assert find_cycle(graph) is None


def test_check_finds_a_violation_and_a_cycle(tmp_path):
    # A miniature tree: "low" must not include "high"; the check has to say so.
    (tmp_path / "src/low").mkdir(parents=True)
    (tmp_path / "src/high").mkdir(parents=True)
    (tmp_path / "src/high/h.h").write_text("#pragma once\n")
    (tmp_path / "src/low/l.h").write_text('#pragma once\n#include "high/h.h"\n')
    (tmp_path / "src/low/l.cpp").write_text('#include "low/l.h"\n#include <vector>\n')
    cmake = """
    pypto_layer(pypto_high DIR src/high PRIVATE pypto_low)
    pypto_layer(pypto_low DIR src/low)
    """
    found = layer_violations(tmp_path, parse_layers(cmake))
    assert found == ["src/low/l.h: includes high/h.h of pypto_high, not a dependency of pypto_low"]
    # PRIVATE is enough for a .cpp, not for a header.
    cmake_private = cmake.replace("pypto_layer(pypto_low DIR src/low)", "pypto_layer(pypto_low DIR src/low PRIVATE pypto_high)")
    found = layer_violations(tmp_path, parse_layers(cmake_private))
    assert len(found) == 1 and "PRIVATE dependency" in found[0]
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None


# --- the Python package ------------------------------------------------------------------------
# Bottom to top: errors, storage and dtypes (errors, dtypes), tensors and interop (tensor,
# interop), the front end (frontend/*), specialisation and compiled kernels (specialize, compiled,
# autograd, eager, jit, profile, torch_ops), the public API (ops*, pypto/__init__). Imports go down
# only; the test below finds any cycle, counting imports inside functions too.

PACKAGE = ROOT / "python" / "pypto"
# Imports that may stay inside a function: optional dependencies that are heavy or absent, loaded
# only when used. pypto.torch_ops is PyPTO's torch glue, which imports torch itself.
LAZY_IMPORTS = {
    "torch": "optional (torch interop), slow to import",
    "jax": "optional (bench peer)",
    "matplotlib": "optional (tile_curve's plot)",
    "tqdm": "optional (autotune's progress bar, only on a terminal)",
    "pypto.torch_ops": "imports torch; loaded once the caller has imported torch",
    "pypto._torch_glue": "optional (built against libtorch), loads libtorch: once torch is imported",
}


def module_name(path, package_dir):
    parts = list(path.relative_to(package_dir.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def package_imports(package_dir):
    """{module: [(imported module, line, inside a function?, imported names)]} for every import of
    the package's modules, top-level or not. `from . import x` counts as an import of module x."""
    files = {module_name(p, package_dir): p for p in package_dir.rglob("*.py")}
    known = set(files) | {module_name(p, package_dir).split(".")[0] + "." + p.name.split(".")[0]
                          for p in package_dir.glob("*.so")}
    result = {}
    for mod, path in files.items():
        tree = ast.parse(path.read_text())
        here = mod.split(".") if path.name == "__init__.py" else mod.split(".")[:-1]
        found = []

        def visit(node, in_function):
            for child in ast.iter_child_nodes(node):
                nested = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
                if isinstance(child, ast.Import):
                    for a in child.names:
                        found.append((a.name, child.lineno, in_function, ()))
                elif isinstance(child, ast.ImportFrom):
                    if child.level:
                        base = ".".join(here[: len(here) - child.level + 1] + ([child.module] if child.module else []))
                    else:
                        base = child.module
                    names = [a.name for a in child.names]
                    subs = [f"{base}.{n}" for n in names if f"{base}.{n}" in known]
                    for s in subs:
                        found.append((s, child.lineno, in_function, ()))
                    rest = tuple(n for n in names if f"{base}.{n}" not in known)
                    if rest or not subs:
                        found.append((base, child.lineno, in_function, rest))
                visit(child, nested)

        visit(tree, False)
        result[mod] = found
    return result


def import_graph(imports, package):
    """Module -> modules of the package it imports, with the sub-packages an import runs on the
    way (importing pypto.frontend.x runs pypto/frontend/__init__.py; the root package is left out:
    every module is inside it)."""
    graph = {}
    for mod, found in imports.items():
        edges = set()
        for target, _, _, _ in found:
            if not (target == package or target.startswith(package + ".")) or target not in imports:
                continue
            edges.add(target)
            parts = target.split(".")
            edges.update(".".join(parts[:k]) for k in range(2, len(parts)))
        edges.discard(mod)
        graph[mod] = edges
    return graph


@pytest.fixture(scope="module")
def imports():
    return package_imports(PACKAGE)


def test_package_has_no_import_cycle(imports):
    assert find_cycle(import_graph(imports, "pypto")) is None


def test_no_function_local_import_but_optional_dependencies(imports):
    local = [f"{mod}:{line}: import {target}" for mod, found in imports.items() for target, line, inner, _ in found
             if inner and target not in LAZY_IMPORTS and target.split(".")[0] not in LAZY_IMPORTS]
    assert local == []


def test_no_private_name_imported_from_another_module(imports):
    private = [f"{mod}:{line}: from {target} import {name}" for mod, found in imports.items()
               for target, line, _, names in found for name in names
               if name.startswith("_") and not name.startswith("__") and target.startswith("pypto")]
    assert private == []


def test_import_check_finds_a_cycle_and_a_local_import(tmp_path):
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("from . import a\n")
    (pkg / "a.py").write_text("from .sub import b\n")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "b.py").write_text("def f():\n    from .. import a\n    from ..a import _hidden\n")
    found = package_imports(pkg)
    assert find_cycle(import_graph(found, "pkg")) in (["pkg.a", "pkg.sub.b", "pkg.a"], ["pkg.sub.b", "pkg.a", "pkg.sub.b"])
    assert [(t, inner, names) for t, _, inner, names in found["pkg.sub.b"]] == [("pkg.a", True, ()), ("pkg.a", True, ("_hidden",))]
    # A sub-package's __init__ that imports its modules closes a cycle through any of them.
    (pkg / "sub" / "b.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("from .. import a\n")
    assert find_cycle(import_graph(package_imports(pkg), "pkg")) is not None
