"""What the query text says about a query's cost, read before DataFusion plans it.

Planning cannot be interrupted, and DataFusion's optimizer evaluates constant
expressions while it plans, so some costs must be read from the text itself: the
number of operators and relations (planning time grows quickly with both), and the
size of results that functions such as ``repeat`` build whole, outside the memory pool.
The lexer (:mod:`shoal.sql.lexer`) skips string literals, quoted identifiers and comments.
"""

from __future__ import annotations

import ast
import dataclasses

from shoal.sql.lexer import OPERATOR_CHARS, tokens

_KEYWORD_OPS = frozenset({"and", "or"})


@dataclasses.dataclass(frozen=True)
class Shape:
    """What planning cost grows with, counted in the query text before DataFusion sees it."""

    operators: int = 0
    """Arithmetic, comparison, ``||``, AND, OR."""
    relations: int = 0
    """SELECTs, JOINs, comma-separated FROM items and UNION/INTERSECT/EXCEPT."""


_CLAUSE_ENDS = frozenset(
    {
        "where",
        "group",
        "having",
        "order",
        "limit",
        "window",
        "qualify",
        "union",
        "intersect",
        "except",
        "on",
        "using",
        "select",
    }
)
_STAR_BEFORE = frozenset({"select", ",", "(", "distinct", "all"})
_SET_OPS = frozenset({"union", "intersect", "except"})


def sql_shape(sql: str) -> Shape:
    """The :class:`Shape` of ``sql``."""
    operators = relations = 0
    depth = 0
    from_depths: list[int] = []  # paren depths at which a FROM list is open
    previous = ""
    for token in tokens(sql):
        if token == "*" and previous in _STAR_BEFORE:
            pass  # SELECT *, count(*): a wildcard, not a multiplication
        elif token[0] in OPERATOR_CHARS:
            operators += 1
        elif token in _KEYWORD_OPS:
            operators += 1
        elif token in ("select", "join") or token in _SET_OPS:
            relations += 1
        if token == "(":
            depth += 1
        elif token == ")":
            while from_depths and from_depths[-1] >= depth:
                from_depths.pop()
            depth -= 1
        elif token == "from":
            from_depths.append(depth)
        elif token in _CLAUSE_ENDS and from_depths and from_depths[-1] == depth:
            from_depths.pop()
        elif token == "," and from_depths and from_depths[-1] == depth:
            relations += 1
        previous = token
    return Shape(operators=operators, relations=relations)


@dataclasses.dataclass(frozen=True)
class Allocation:
    """A call whose result is built whole: ``units`` of ``unit_bytes`` each, at least."""

    function: str
    bytes: int
    constant: bool
    """False when a count argument is computed from data, so its size is unknown."""


# function: (bytes per unit of its count, positions of its count arguments; None = all)
_COUNTED: dict[str, tuple[int, tuple[int, ...] | None]] = {
    "repeat": (1, (1,)),
    "lpad": (1, (1,)),
    "rpad": (1, (1,)),
    "array_repeat": (8, (1,)),
    "array_resize": (8, (1,)),
    "range": (8, None),
    "generate_series": (8, None),
}
_SERIES = frozenset({"range", "generate_series"})
_TYPE_WORDS = frozenset(
    {
        "cast",
        "try_cast",
        "as",
        "bigint",
        "int",
        "integer",
        "int8",
        "int4",
        "int2",
        "smallint",
        "tinyint",
        "unsigned",
        "double",
        "precision",
        "float",
        "real",
        "decimal",
        "numeric",
    }
)
ROWS_PER_BATCH = 8192
"""DataFusion's batch size: a function of a column builds this many results at once."""


def _arguments(toks: list[str], open_at: int) -> list[list[str]]:
    """The top-level arguments of the call whose ``(`` is at ``open_at``."""
    depth = 0
    args: list[list[str]] = []
    current: list[str] = []
    for token in toks[open_at:]:
        if token == "(":
            depth += 1
            if depth == 1:
                continue
        elif token == ")":
            depth -= 1
            if depth == 0:
                break
        if depth == 1 and token == ",":
            args.append(current)
            current = []
        else:
            current.append(token)
    args.append(current)
    return args


def constant_value(arg: list[str]) -> float | None:
    """The value of an argument made only of numbers, ``+ - * /``, parentheses and casts;
    None for anything that depends on data."""
    kept = [t for t in arg if t not in _TYPE_WORDS]
    if not kept or any(
        not (t in ("(", ")", "+", "-", "*", "/") or t[0].isdigit() or t[0] == ".") for t in kept
    ):
        return None
    try:
        tree = ast.parse(" ".join(kept), mode="eval")
    except (SyntaxError, ValueError):
        return None
    return _evaluate(tree.body)


def _literal(arg: list[str]) -> bool:
    return arg == ["''"] or constant_value(arg) is not None


def _evaluate(node: ast.expr) -> float | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
        return float(node.value)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        value = _evaluate(node.operand)
        if value is None:
            return None
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.BinOp):
        left, right = _evaluate(node.left), _evaluate(node.right)
        if left is None or right is None:
            return None
        if isinstance(node.op, ast.Add):
            return left + right
        if isinstance(node.op, ast.Sub):
            return left - right
        if isinstance(node.op, ast.Mult):
            return min(left * right, 1e30)
        if isinstance(node.op, ast.Div) and right:
            return left / right
    return None


def allocations(sql: str) -> list[Allocation]:
    """Calls of functions whose result size is set by a count argument (``repeat``,
    ``lpad``, ``rpad``, ``array_repeat``, ``array_resize``, scalar ``range`` and
    ``generate_series``), with the bytes their counts ask for at least: per row for a
    constant argument, times a batch of rows when another argument comes from data.
    ``range`` in a FROM clause (a table function, which streams) is not counted."""
    toks = list(tokens(sql))
    found: list[Allocation] = []
    for i, token in enumerate(toks):
        counted = _COUNTED.get(token)
        if counted is None or i + 1 >= len(toks) or toks[i + 1] != "(":
            continue
        if token in _SERIES and i > 0 and toks[i - 1] in ("from", "join", ","):
            continue
        unit_bytes, positions = counted
        args = _arguments(toks, i + 1)
        values = [constant_value(a) for a in args]
        wanted = range(len(args)) if positions is None else positions
        counts = [values[p] for p in wanted if p < len(values)]
        if any(c is None for c in counts):
            found.append(Allocation(token, 0, constant=False))
            continue
        numbers = [c for c in counts if c is not None]
        units = _series_length(numbers) if token in _SERIES else max(numbers, default=0.0)
        per_row = int(min(max(units, 0.0), 1e18)) * unit_bytes
        from_data = any(not _literal(a) for a in args)
        found.append(Allocation(token, per_row * (ROWS_PER_BATCH if from_data else 1), True))
    return found


def _series_length(numbers: list[float]) -> float:
    if not numbers:
        return 0.0
    start, stop = (0.0, numbers[0]) if len(numbers) == 1 else (numbers[0], numbers[1])
    step = numbers[2] if len(numbers) > 2 and numbers[2] else 1.0
    return max((stop - start) / step, 0.0)
