"""A kernel's Python source: the parsed function and the map from AST lines to the file."""
from __future__ import annotations

import ast
import inspect
import textwrap

from .errors import PyptoError, format_location


class SourceInfo:
    def __init__(self, func):
        self.func = func
        name = getattr(func, "__qualname__", getattr(func, "__name__", repr(func)))
        self.name = name
        code = getattr(func, "__code__", None)
        try:
            self.filename = inspect.getsourcefile(func) or (code.co_filename if code else "<unknown>")
            lines, start = inspect.getsourcelines(func)
        except (OSError, TypeError) as e:
            raise PyptoError(f"cannot read the source code of kernel '{name}' ({e}); @pypto.jit needs "
                             "functions defined in a file (not in an interactive prompt or via exec)") from None
        self.lines = lines
        self.start = start if start > 0 else 1
        src = textwrap.dedent("".join(lines))
        try:
            tree = ast.parse(src)
        except SyntaxError as e:
            raise PyptoError(f"cannot parse the source of kernel '{name}': {e}") from None
        fdef = tree.body[0] if tree.body else None
        if isinstance(fdef, ast.AsyncFunctionDef):
            raise PyptoError(self.where(fdef, "async functions cannot be kernels"))
        if not isinstance(fdef, ast.FunctionDef) or (code is not None and code.co_name == "<lambda>"):
            raise PyptoError(f"{self.filename}:{self.start}: kernel '{name}' must be a function defined with "
                             "`def` (lambda functions are not supported)")
        self.fdef = fdef
        self.key = (self.filename, self.start, name)

    def lineno(self, node):
        return getattr(node, "lineno", 1) + self.start - 1

    def line_text(self, node):
        i = getattr(node, "lineno", 1) - 1
        return self.lines[i].rstrip("\n") if 0 <= i < len(self.lines) else ""

    def where(self, node, message):
        return format_location(self.filename, self.lineno(node), self.line_text(node), message)
