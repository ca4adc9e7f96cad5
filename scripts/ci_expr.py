"""GitHub Actions expressions (`${{ ... }}`), the subset a workflow of this project may use, evaluated the way
GitHub documents them (docs.github.com/actions/reference/evaluate-expressions-in-workflows-and-actions):
literals, context lookups (`a.b`, `a['b']`), `! == != < <= > >= && ||`, `fromJSON toJSON contains startsWith
endsWith format join` and the status functions. Anything else is an ExprError naming it, so a workflow that grows
a construct the rehearsal cannot evaluate fails loudly instead of being rehearsed wrongly. Used by
scripts/ci_rehearse.py and tests/test_workflow_policy.py."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from typing import Any

EXPR = re.compile(r"\$\{\{\s*(.*?)\s*\}\}", re.S)
_TOKEN = re.compile(
    r"\s*(?:(?P<num>-?\d+(?:\.\d+)?)|(?P<str>'(?:[^']|'')*')|(?P<op>==|!=|<=|>=|&&|\|\||[!<>().,\[\]*])"
    r"|(?P<name>[A-Za-z_][A-Za-z0-9_-]*))"
)
STATUS_FUNCTIONS = ("success", "failure", "always", "cancelled")


class ExprError(ValueError):
    """An expression the rehearsal does not know how to evaluate (or that is malformed)."""


def _tokens(text: str) -> list[tuple[str, str]]:
    out, pos = [], 0
    while pos < len(text):
        if text[pos:].strip() == "":
            break
        match = _TOKEN.match(text, pos)
        if not match or match.end() == pos:
            raise ExprError(f"cannot read expression at {text[pos : pos + 20]!r} in {text!r}")
        kind = match.lastgroup or ""
        out.append((kind, match.group(kind)))
        pos = match.end()
    return out


def truthy(value: Any) -> bool:
    return value not in (None, False, 0, "") and not (isinstance(value, float) and value == 0)


def to_text(value: Any) -> str:
    """How a value reads when interpolated into a string."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (dict, list)):
        return json.dumps(value)
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _number(value: Any) -> float:
    if value is None or value == "":
        return 0.0
    if isinstance(value, bool):
        return 1.0 if value else 0.0
    if isinstance(value, (int, float)):
        return float(value)
    try:
        return float(value)
    except (TypeError, ValueError):
        return float("nan")


def _equal(a: Any, b: Any) -> bool:
    if isinstance(a, str) and isinstance(b, str):
        return a.casefold() == b.casefold()
    if type(a) is type(b) or (isinstance(a, (int, float)) and isinstance(b, (int, float))):
        return bool(a == b)
    if isinstance(a, (dict, list)) or isinstance(b, (dict, list)):
        return a is b
    return _number(a) == _number(b)


def _fmt(template: str, *args: Any) -> str:
    def one(match: re.Match[str]) -> str:
        if match.group(0) in ("{{", "}}"):
            return match.group(0)[0]
        return to_text(args[int(match.group(1))])

    return re.sub(r"\{\{|\}\}|\{(\d+)\}", one, template)


class Evaluator:
    """Evaluate one expression against contexts (a mapping of context name -> value) and status functions."""

    def __init__(self, contexts: Mapping[str, Any], status: Callable[[str], bool] | None = None) -> None:
        self.contexts = contexts
        self.status = status or (lambda name: name in ("success", "always"))

    def evaluate(self, text: str) -> Any:
        self.toks = _tokens(text)
        self.pos = 0
        self.text = text
        value = self._or()
        if self.pos != len(self.toks):
            raise ExprError(f"unexpected {self.toks[self.pos][1]!r} in {text!r}")
        return value

    # recursive descent, lowest precedence first: || && comparison unary primary
    def _peek(self) -> str | None:
        return self.toks[self.pos][1] if self.pos < len(self.toks) else None

    def _take(self, expected: str | None = None) -> tuple[str, str]:
        if self.pos >= len(self.toks):
            raise ExprError(f"unexpected end of {self.text!r}")
        tok = self.toks[self.pos]
        if expected is not None and tok[1] != expected:
            raise ExprError(f"expected {expected!r}, got {tok[1]!r} in {self.text!r}")
        self.pos += 1
        return tok

    def _or(self) -> Any:
        left = self._and()
        while self._peek() == "||":
            self._take()
            right = self._and()
            left = left if truthy(left) else right
        return left

    def _and(self) -> Any:
        left = self._cmp()
        while self._peek() == "&&":
            self._take()
            right = self._cmp()
            left = right if truthy(left) else left
        return left

    def _cmp(self) -> Any:
        left = self._unary()
        op = self._peek()
        if op in ("==", "!=", "<", "<=", ">", ">="):
            self._take()
            right = self._unary()
            if op == "==":
                return _equal(left, right)
            if op == "!=":
                return not _equal(left, right)
            a, b = _number(left), _number(right)
            return {"<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b}[op]
        return left

    def _unary(self) -> Any:
        if self._peek() == "!":
            self._take()
            return not truthy(self._unary())
        return self._primary()

    def _primary(self) -> Any:
        kind, tok = self._take()
        if tok == "(":
            value = self._or()
            self._take(")")
            return value
        if kind == "num":
            return float(tok) if "." in tok else int(tok)
        if kind == "str":
            return tok[1:-1].replace("''", "'")
        if kind != "name":
            raise ExprError(f"unexpected {tok!r} in {self.text!r}")
        if tok in ("true", "false"):
            return tok == "true"
        if tok == "null":
            return None
        if self._peek() == "(":
            return self._call(tok)
        if tok not in self.contexts:
            raise ExprError(f"unknown context {tok!r} in {self.text!r}")
        value = self.contexts[tok]
        while self._peek() in (".", "["):
            if self._take()[1] == ".":
                key = self._take()[1]
                if key == "*":
                    raise ExprError(f"object filters (.*) are not supported: {self.text!r}")
            else:
                key = to_text(self._or())
                self._take("]")
            value = _index(value, key)
        return value

    def _call(self, name: str) -> Any:
        self._take("(")
        args: list[Any] = []
        while self._peek() != ")":
            args.append(self._or())
            if self._peek() == ",":
                self._take()
        self._take(")")
        lowered = name.lower()
        if lowered in STATUS_FUNCTIONS:
            return self.status(lowered)
        if lowered == "fromjson":
            return json.loads(to_text(args[0]))
        if lowered == "tojson":
            return json.dumps(args[0], indent=2)
        if lowered == "contains":
            hay, needle = args
            if isinstance(hay, list):
                return any(_equal(item, needle) for item in hay)
            return to_text(needle).casefold() in to_text(hay).casefold()
        if lowered == "startswith":
            return to_text(args[0]).casefold().startswith(to_text(args[1]).casefold())
        if lowered == "endswith":
            return to_text(args[0]).casefold().endswith(to_text(args[1]).casefold())
        if lowered == "format":
            return _fmt(to_text(args[0]), *args[1:])
        if lowered == "join":
            sep = to_text(args[1]) if len(args) > 1 else ","
            return sep.join(to_text(v) for v in args[0]) if isinstance(args[0], list) else to_text(args[0])
        raise ExprError(f"unknown function {name}() in {self.text!r}")


def _index(value: Any, key: str) -> Any:
    if isinstance(value, Mapping):
        for k, v in value.items():  # context property names are case-insensitive
            if str(k).casefold() == key.casefold():
                return v
        return None
    if isinstance(value, list):
        try:
            return value[int(key)]
        except (ValueError, IndexError):
            return None
    return None


def uses_status_function(text: str) -> bool:
    return any(re.search(rf"\b{name}\s*\(", text, re.I) for name in STATUS_FUNCTIONS)


def condition(text: str | bool | None, evaluator: Evaluator) -> bool:
    """A job or step `if:` (with or without `${{ }}`); without a status function it is `success() && (...)`."""
    if text is None:
        return evaluator.status("success")
    if isinstance(text, bool):
        return text and evaluator.status("success")
    inner = str(text).strip()
    match = EXPR.fullmatch(inner)
    if match:
        inner = match.group(1)
    result = truthy(evaluator.evaluate(inner))
    return result if uses_status_function(inner) else result and evaluator.status("success")


def expand(value: Any, evaluator: Evaluator) -> Any:
    """A field's value with its expressions: one whole `${{ x }}` keeps x's type; else text interpolation."""
    if isinstance(value, str):
        whole = EXPR.fullmatch(value.strip())
        if whole:
            return evaluator.evaluate(whole.group(1))
        return EXPR.sub(lambda m: to_text(evaluator.evaluate(m.group(1))), value)
    if isinstance(value, list):
        return [expand(v, evaluator) for v in value]
    if isinstance(value, dict):
        return {k: expand(v, evaluator) for k, v in value.items()}
    return value
