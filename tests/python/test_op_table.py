"""The op table of docs/guide.md ("The operations") lists exactly the public operations of the
pypto package: every op the package exports is in the table, every name in the table exists."""
import pathlib
import re

import pypto

GUIDE = pathlib.Path(__file__).resolve().parents[2] / "docs" / "guide.md"
OP_MODULES = ("pypto.ops", "pypto.ops_composite", "pypto.ops_math")
NOT_OPS = {"prange", "static_range"}  # loop helpers (§4), not operations


def table_names():
    text = GUIDE.read_text()
    start = text.index("### The operations")
    lines = text[start:].splitlines()
    first = next(k for k, ln in enumerate(lines) if ln.startswith("| operation"))
    rows = []
    for ln in lines[first + 2:]:  # the table ends at its first non-row line
        if not ln.startswith("|"):
            break
        rows.append(ln)
    names = set()
    for row in rows:
        first = row.split("|")[1]
        names.update(re.findall(r"`([A-Za-z_][A-Za-z0-9_]*)`", first))
    return names


def package_ops():
    return {name for name, obj in vars(pypto).items()
            if callable(obj) and not name.startswith("_") and getattr(obj, "__module__", "") in OP_MODULES
            and name not in NOT_OPS}


def test_every_public_op_is_in_the_table():
    missing = sorted(package_ops() - table_names())
    assert not missing, f"ops missing from the guide's op table: {missing}"


def test_every_listed_op_exists():
    unknown = sorted(n for n in table_names() if not callable(getattr(pypto, n, None)))
    assert not unknown, f"names in the guide's op table that pypto does not have: {unknown}"


def test_the_table_is_not_trivially_small():
    assert len(table_names()) >= 140
