"""The mutants of one module: each changes one thing (a comparison, an arithmetic sign, max/min, an
index, a pair's order, a sort key) outside error messages, log calls and annotations."""

from __future__ import annotations

import ast
import copy
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

COMPARE_SWAPS = {
    ast.Gt: (ast.GtE, ast.LtE),
    ast.GtE: (ast.Gt, ast.Lt),
    ast.Lt: (ast.LtE, ast.GtE),
    ast.LtE: (ast.Lt, ast.Gt),
    ast.Eq: (ast.NotEq,),
    ast.NotEq: (ast.Eq,),
    ast.Is: (ast.IsNot,),
    ast.IsNot: (ast.Is,),
    ast.In: (ast.NotIn,),
    ast.NotIn: (ast.In,),
}
BINOP_SWAPS = {ast.Add: ast.Sub, ast.Sub: ast.Add}
NAME_SWAPS = {
    "max": "min",
    "min": "max",
    "amax": "amin",
    "amin": "amax",
    "maximum": "minimum",
    "minimum": "maximum",
    "argmax": "argmin",
    "argmin": "argmax",
    "nanmax": "nanmin",
    "nanmin": "nanmax",
}
INDEX_SWAPS = {0: 1, 1: 0, -1: 0}
QUIET_CALLS = {"debug", "info", "warning", "error", "exception", "print", "warn", "warn_undefined"}


@dataclass
class Mutant:
    module: str
    index: int  # position of the node in ast.walk order
    option: int  # which replacement of that node
    line: int
    before: str
    after: str
    scope: str = "<module>"  # the enclosing function (or class)
    status: str = "pending"  # killed | survived | timeout | accepted
    seconds: float = 0.0

    @property
    def key(self) -> str:
        """Stable across edits elsewhere in the file: module, function and statement (no line)."""
        return f"{self.module}: {self.scope}: {self.before}  ->  {self.after}"


def _parents(tree: ast.AST) -> dict[ast.AST, ast.AST]:
    return {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}


def _silent(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> bool:
    """Inside an error message, a log call, an f-string, an annotation or the type tuple of an
    `isinstance`."""
    while node in parents:
        parent = parents[node]
        if isinstance(parent, (ast.Raise, ast.JoinedStr, ast.ExceptHandler)):
            return True
        if isinstance(parent, ast.Call):
            func = parent.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name in QUIET_CALLS or (name == "isinstance" and node is not parent.args[0]):
                return True
        if isinstance(parent, (ast.arg, ast.FunctionDef, ast.AnnAssign)) and node in (
            getattr(parent, "annotation", None),
            getattr(parent, "returns", None),
        ):
            return True
        node = parent
    return False


def _options(node: ast.AST) -> list:
    """The replacements of one node (empty when it is not mutated)."""
    if isinstance(node, ast.Compare) and len(node.ops) == 1:
        return list(COMPARE_SWAPS.get(type(node.ops[0]), ()))
    if isinstance(node, ast.BinOp) and type(node.op) in BINOP_SWAPS:
        return [BINOP_SWAPS[type(node.op)]]
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and not isinstance(node.operand, ast.Constant):
        return ["drop minus"]
    if isinstance(node, ast.Name) and node.id in NAME_SWAPS and isinstance(node.ctx, ast.Load):
        return [NAME_SWAPS[node.id]]
    if isinstance(node, ast.Attribute) and node.attr in NAME_SWAPS:
        return [NAME_SWAPS[node.attr]]
    if isinstance(node, ast.Subscript) and isinstance(node.slice, (ast.Constant, ast.UnaryOp)):
        value = ast.literal_eval(node.slice) if _is_int_literal(node.slice) else None
        return [INDEX_SWAPS[value]] if value in INDEX_SWAPS else []
    if isinstance(node, ast.Tuple) and len(node.elts) == 2 and not all(isinstance(e, ast.Constant) for e in node.elts):
        return ["swap"] if ast.unparse(node.elts[0]) != ast.unparse(node.elts[1]) else []
    if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "sorted":
        return ["drop key"] if any(k.arg == "key" for k in node.keywords) else []
    return []


def _is_int_literal(node: ast.AST) -> bool:
    try:
        return isinstance(ast.literal_eval(node), int)
    except ValueError:
        return False


def _apply(node: ast.AST, choice) -> ast.AST:
    """Mutate `node` in place (or return its replacement)."""
    if isinstance(node, ast.Compare):
        node.ops = [choice()]
    elif isinstance(node, ast.BinOp):
        node.op = choice()
    elif isinstance(node, ast.UnaryOp):
        return node.operand
    elif isinstance(node, ast.Name):
        node.id = choice
    elif isinstance(node, ast.Attribute):
        node.attr = choice
    elif isinstance(node, ast.Subscript):
        node.slice = ast.Constant(choice)
    elif isinstance(node, ast.Tuple):
        node.elts = node.elts[::-1]
    elif isinstance(node, ast.Call):
        node.keywords = [k for k in node.keywords if k.arg != "key"]
    return node


def _describe(statement: ast.AST, node: ast.AST, choice) -> tuple[str, str]:
    """(statement before, statement after), one line each, for the report."""
    before = ast.unparse(statement).split("\n")[0]
    mutated = copy.deepcopy(statement)
    target = next(n for n in ast.walk(mutated) if _same_place(n, node) and ast.dump(n) == ast.dump(node))
    replacement = _apply(target, choice)
    if replacement is not target:
        _replace(mutated, target, replacement)
    return before, ast.unparse(mutated).split("\n")[0]


def _same_place(a: ast.AST, b: ast.AST) -> bool:
    return (getattr(a, "lineno", None), getattr(a, "col_offset", None)) == (
        getattr(b, "lineno", None),
        getattr(b, "col_offset", None),
    )


def _replace(tree: ast.AST, old: ast.AST, new: ast.AST) -> None:
    for parent in ast.walk(tree):
        for field, value in ast.iter_fields(parent):
            if value is old:
                setattr(parent, field, new)
            elif isinstance(value, list) and any(v is old for v in value):
                setattr(parent, field, [new if v is old else v for v in value])


def _scope(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> str:
    while node in parents:
        node = parents[node]
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            return node.name
    return "<module>"


def mutants_of(module: str) -> list[Mutant]:
    source = (ROOT / module).read_text(encoding="utf-8")
    tree = ast.parse(source)
    parents = _parents(tree)
    found = []
    for index, node in enumerate(ast.walk(tree)):
        options = _options(node)
        if not options or _silent(node, parents):
            continue
        statement = node
        while not isinstance(statement, ast.stmt) and statement in parents:
            statement = parents[statement]
        if isinstance(statement, (ast.FunctionDef, ast.ClassDef)):
            statement = node
        scope = _scope(node, parents)
        for option, choice in enumerate(options):
            before, after = _describe(statement, node, choice)
            found.append(Mutant(module, index, option, node.lineno, before.strip(), after.strip(), scope))
    return found


def mutated_source(mutant: Mutant) -> str:
    tree = ast.parse((ROOT / mutant.module).read_text(encoding="utf-8"))
    node = list(ast.walk(tree))[mutant.index]
    replacement = _apply(node, _options(node)[mutant.option])
    if replacement is not node:
        _replace(tree, node, replacement)
    return ast.unparse(ast.fix_missing_locations(tree))
