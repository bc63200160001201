"""A kernel's Python source: the parsed function and the map from AST lines to the file."""
from __future__ import annotations

import ast
import inspect
import linecache
import textwrap

from ..errors import PyptoError, format_location


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
        if code is not None and code.co_name == "<lambda>":
            self._from_lambda(code, name)
            return
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
        if not isinstance(fdef, ast.FunctionDef):
            raise PyptoError(f"{self.filename}:{self.start}: kernel '{name}' must be a function defined with "
                             "`def` or `lambda`")
        self.fdef = fdef
        self.key = (self.filename, self.start, name)

    def _from_lambda(self, code, name):
        """A lambda: inspect gives only the lines of the statement around it, which need not parse
        alone, so the whole file is parsed and the lambda found by its line and the columns its
        code covers; its body becomes a one-statement `return`."""
        self.lines = linecache.getlines(self.filename)
        self.start = 1
        try:
            tree = ast.parse("".join(self.lines))
        except SyntaxError as e:
            raise PyptoError(f"cannot parse the source of kernel '{name}': {e}") from None
        lam = _find_lambda(tree, code)
        if lam is None:
            raise PyptoError(f"{self.filename}:{code.co_firstlineno}: cannot tell which lambda on this line is "
                             f"the kernel '{name}'; define it with `def`")
        ret = ast.copy_location(ast.Return(value=lam.body), lam.body)
        fdef = ast.FunctionDef(name="<lambda>", args=lam.args, body=[ret], decorator_list=[], returns=None,
                               type_comment=None)
        self.fdef = ast.fix_missing_locations(ast.copy_location(fdef, lam))
        self.key = (self.filename, lam.lineno, lam.col_offset, name)

    def lineno(self, node):
        return getattr(node, "lineno", 1) + self.start - 1

    def line_text(self, node):
        i = getattr(node, "lineno", 1) - 1
        return self.lines[i].rstrip("\n") if 0 <= i < len(self.lines) else ""

    def where(self, node, message):
        return format_location(self.filename, self.lineno(node), self.line_text(node), message)


def _find_lambda(tree, code):
    """The Lambda node of `code`: on its first line, with its argument names, and (when several
    remain) the smallest one spanning every source position its bytecode reports."""
    names = code.co_varnames[:code.co_argcount + code.co_kwonlyargcount]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Lambda) and node.lineno == code.co_firstlineno:
            a = node.args
            if tuple(x.arg for x in (*a.posonlyargs, *a.args, *a.kwonlyargs)) == tuple(names):
                found.append(node)
    if len(found) > 1:
        # (bytecode such as RESUME reports column 0..0: no source position)
        pos = [(p[0], p[2]) for p in code.co_positions() if p[0] is not None and p[2] is not None and p[3]]

        def spans(n):
            return all((n.lineno, n.col_offset) <= q <= (n.end_lineno, n.end_col_offset) for q in pos)
        found = [n for n in found if spans(n)]
        found.sort(key=lambda n: (n.end_lineno - n.lineno, n.end_col_offset - n.col_offset))
        if len(found) > 1 and spans(found[1]) and (found[0].lineno, found[0].col_offset) == \
                (found[1].lineno, found[1].col_offset):
            return None
    return found[0] if found else None
