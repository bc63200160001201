"""The layers of the C++ tree hold: every #include of a folder is allowed by the dependencies its
layer declares in CMakeLists.txt (pypto_layer calls), and the layers form no cycle."""

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
