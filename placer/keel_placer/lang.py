"""Lexer and parser of the chain language (Lemur §2) into an unresolved syntax tree.

Statements (one per line; brackets may span lines; // and /* */ comments):
  flow NAME = [{'dst_ip':'198.18.1.0/24', ...}, ...]
  func NAME = NF(arg=value, ...)
  chain NAME = A(args) -> B -> [{'flowspec':[...], 'nfchain': X -> Y}, ...] -> C
  FLOW : CHAIN [@ {'t_min':'1Gbps', 't_max':'10Gbps', 'd_max':'45us'}]
"""

from __future__ import annotations

import ast
import warnings
from dataclasses import dataclass, field
from typing import Any, Union


@dataclass(frozen=True)
class Diagnostic:
    """One problem in a spec, located by 1-based line and column."""

    line: int
    col: int
    message: str

    def render(self, filename: str = "<spec>") -> str:
        return f"{filename}:{self.line}:{self.col}: error: {self.message}"


class SpecError(Exception):
    """A spec that cannot be used; carries every diagnostic found."""

    def __init__(self, diagnostics: list[Diagnostic]):
        super().__init__("; ".join(d.message for d in diagnostics))
        self.diagnostics = diagnostics


@dataclass(frozen=True)
class Token:
    kind: str  # ident, number, string, op, newline, eof
    text: str
    line: int
    col: int


# Brackets, branches and chain references nest at most this deep, so that no spec can make
# the parser or the resolver run out of Python's recursion limit.
MAX_DEPTH = 100

_OPS = ("->", "=", "[", "]", "{", "}", "(", ")", ",", ":", "@", "-")


def _unquote(quoted: str) -> str:
    """The value of a quoted string token as Python reads it; an unknown escape such as '\\d'
    keeps its backslash, without Python's DeprecationWarning."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ast.literal_eval(quoted)


def _bad_string(quoted: str) -> str | None:
    """Why a quoted string token is not a Python string literal (e.g. '\\x' is a truncated
    escape), or None; the tokenizer keeps only tokens that _unquote reads."""
    try:
        _unquote(quoted)
    except (SyntaxError, ValueError) as e:
        msg = e.msg if isinstance(e, SyntaxError) else str(e)
        return msg.removeprefix("(unicode error) ")
    return None


def tokenize(text: str) -> tuple[list[Token], list[Diagnostic]]:
    """Split spec text into tokens; newlines inside brackets are dropped."""
    toks: list[Token] = []
    errs: list[Diagnostic] = []
    i, line, col, depth = 0, 1, 1, 0
    n = len(text)

    def adv(k: int) -> None:
        nonlocal i, line, col
        for ch in text[i:i + k]:
            if ch == "\n":
                line, col = line + 1, 1
            else:
                col += 1
        i += k

    while i < n:
        c = text[i]
        if c == "\n":
            if depth == 0:
                toks.append(Token("newline", "\n", line, col))
            adv(1)
        elif c in " \t\r":
            adv(1)
        elif text.startswith("//", i) or c == "#":
            j = text.find("\n", i)
            adv((n if j < 0 else j) - i)
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            if j < 0:
                errs.append(Diagnostic(line, col, "unterminated /* comment"))
                adv(n - i)
            else:
                adv(j + 2 - i)
        elif c.isalpha() or c == "_":
            j = i
            while j < n and (text[j].isalnum() or text[j] == "_"):
                j += 1
            toks.append(Token("ident", text[i:j], line, col))
            adv(j - i)
        elif c.isdigit() or (c == "." and i + 1 < n and text[i + 1].isdigit()):
            j = i
            hexa = text.startswith(("0x", "0X"), i)
            # a sign belongs to a decimal exponent: 1e-05, 2.5E+3 (Python's repr of floats)
            while j < n and (text[j].isalnum() or text[j] in "._" or
                             (text[j] in "+-" and not hexa and text[j - 1] in "eE")):
                j += 1
            toks.append(Token("number", text[i:j], line, col))
            adv(j - i)
        elif c in "'\"":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            if j >= n or text[j] != c:
                errs.append(Diagnostic(line, col, "unterminated string"))
                adv(j - i)
                continue
            bad = _bad_string(text[i:j + 1])
            if bad:
                errs.append(Diagnostic(line, col, f"bad string literal: {bad}"))
            else:
                toks.append(Token("string", text[i:j + 1], line, col))
            adv(j + 1 - i)
        else:
            op = next((o for o in _OPS if text.startswith(o, i)), None)
            if op is None:
                errs.append(Diagnostic(line, col, f"unexpected character {c!r}"))
                adv(1)
                continue
            if op in "[{(":
                depth += 1
            elif op in "]})":
                depth = max(depth - 1, 0)
            toks.append(Token("op", op, line, col))
            adv(len(op))
    toks.append(Token("newline", "\n", line, col))
    toks.append(Token("eof", "", line, col))
    return toks, errs


# ----- syntax tree -----

@dataclass
class Pos:
    line: int
    col: int


@dataclass
class NFCall:
    """`Name(args)` or a bare `Name` (NF, func instance or chain, resolved later)."""

    name: str
    args: dict[str, Any] | None  # None: no parentheses
    pos: Pos
    arg_pos: dict[str, Pos] = field(default_factory=dict)


@dataclass
class Arm:
    """One arm of a branch: a flowspec (or gate_select), an optional weight and a sub-chain."""

    flowspec: list[dict[str, Any]]
    chain: "ChainExpr | None"  # None: pass-through ('')
    weight: float | None
    pos: Pos


@dataclass
class Branch:
    arms: list[Arm]
    pos: Pos


Element = Union[NFCall, Branch]


@dataclass
class ChainExpr:
    elements: list[Element]
    pos: Pos


@dataclass
class FlowDef:
    name: str
    spec: list[dict[str, Any]]
    pos: Pos


@dataclass
class FuncDef:
    name: str
    call: NFCall
    pos: Pos


@dataclass
class ChainDef:
    name: str
    expr: ChainExpr
    pos: Pos


@dataclass
class Binding:
    flow: str
    chain: str
    slo: dict[str, Any]
    pos: Pos
    chain_pos: Pos
    slo_pos: Pos | None


@dataclass
class SpecTree:
    flows: list[FlowDef] = field(default_factory=list)
    funcs: list[FuncDef] = field(default_factory=list)
    chains: list[ChainDef] = field(default_factory=list)
    bindings: list[Binding] = field(default_factory=list)
    broken: set[str] = field(default_factory=set)  # names whose definition did not parse


class _Syntax(Exception):
    def __init__(self, tok: Token, message: str):
        super().__init__(message)
        self.diag = Diagnostic(tok.line, tok.col, message)


def _describe(t: Token) -> str:
    if t.kind == "eof":
        return "end of input"
    if t.kind == "newline":
        return "end of line"
    return repr(t.text)


class Parser:
    """Recursive-descent parser; one bad statement does not hide the next one's errors."""

    def __init__(self, text: str):
        self.toks, self.errors = tokenize(text)
        self.i = 0
        self.tree = SpecTree()
        self.defining: str | None = None
        self.depth = 0  # nesting of literals and chain expressions in the current statement

    @property
    def tok(self) -> Token:
        return self.toks[self.i]

    def next(self) -> Token:
        t = self.toks[self.i]
        self.i += 1
        return t

    def accept(self, text: str) -> bool:
        if self.tok.kind == "op" and self.tok.text == text:
            self.i += 1
            return True
        return False

    def expect(self, text: str, what: str) -> Token:
        t = self.tok
        if not (t.kind == "op" and t.text == text):
            raise _Syntax(t, f"expected {what} '{text}', found {_describe(t)}")
        return self.next()

    def ident(self, what: str) -> Token:
        t = self.tok
        if t.kind != "ident":
            raise _Syntax(t, f"expected {what}, found {_describe(t)}")
        return self.next()

    def parse(self) -> SpecTree:
        while self.tok.kind != "eof":
            if self.tok.kind == "newline":
                self.next()
                continue
            try:
                self.depth = 0
                self.statement()
                if self.tok.kind not in ("newline", "eof"):
                    raise _Syntax(self.tok, f"unexpected {_describe(self.tok)} after statement")
            except _Syntax as e:
                self.errors.append(e.diag)
                if self.defining:
                    self.tree.broken.add(self.defining)
                while self.tok.kind not in ("newline", "eof"):
                    self.next()
        return self.tree

    def statement(self) -> None:
        t = self.ident("'flow', 'func', 'chain' or a flow binding")
        pos = Pos(t.line, t.col)
        self.defining = None
        if t.text in ("flow", "func", "chain") and self.tok.kind == "ident":
            name = self.next().text
            self.defining = name
            self.expect("=", "")
            if t.text == "flow":
                vt = self.tok
                spec = self.literal()
                if not (isinstance(spec, list) and all(isinstance(d, dict) for d in spec)):
                    raise _Syntax(vt, f"flow '{name}' must be a list of dicts of 5-tuple fields")
                self.tree.flows.append(FlowDef(name, spec, pos))
            elif t.text == "func":
                call = self.element_call()
                if call.args is None:
                    call.args = {}
                self.tree.funcs.append(FuncDef(name, call, pos))
            else:
                self.tree.chains.append(ChainDef(name, self.chain_expr(), pos))
            return
        self.expect(":", "binding")
        ct = self.ident("a chain name")
        slo: dict[str, Any] = {}
        slo_pos = None
        if self.accept("@"):
            st = self.tok
            slo_pos = Pos(st.line, st.col)
            v = self.literal()
            if not isinstance(v, dict):
                raise _Syntax(st, "SLO after '@' must be a dict like {'t_min':'1Gbps'}")
            slo = v
        self.tree.bindings.append(Binding(t.text, ct.text, slo, pos, Pos(ct.line, ct.col), slo_pos))

    def nest(self) -> None:
        """Enter one more level of nesting; a syntax error past MAX_DEPTH."""
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise _Syntax(self.tok, f"nested more than {MAX_DEPTH} levels deep")

    def chain_expr(self) -> ChainExpr:
        self.nest()
        t = self.tok
        elems: list[Element] = [self.element()]
        while self.accept("->"):
            elems.append(self.element())
        self.depth -= 1
        return ChainExpr(elems, Pos(t.line, t.col))

    def element(self) -> Element:
        t = self.tok
        if t.kind == "op" and t.text == "[":
            return self.branch()
        if t.kind != "ident":
            raise _Syntax(t, f"expected an NF, chain name or branch, found {_describe(t)}")
        return self.element_call()

    def element_call(self) -> NFCall:
        t = self.ident("an NF name")
        call = NFCall(t.text, None, Pos(t.line, t.col))
        if self.accept("("):
            call.args = {}
            while not self.accept(")"):
                at = self.tok
                if at.kind != "ident" or self.toks[self.i + 1].text != "=":
                    raise _Syntax(at, f"bad argument to {t.text}: expected name=value, found {_describe(at)}")
                self.next()
                self.next()
                if at.text in call.args:
                    raise _Syntax(at, f"bad argument to {t.text}: '{at.text}' given twice")
                call.args[at.text] = self.literal()
                call.arg_pos[at.text] = Pos(at.line, at.col)
                if not self.accept(","):
                    self.expect(")", "closing")
                    break
        return call

    def branch(self) -> Branch:
        open_t = self.expect("[", "")
        arms: list[Arm] = []
        while not self.accept("]"):
            arms.append(self.arm())
            if not self.accept(","):
                self.expect("]", "closing")
                break
        if not arms:
            raise _Syntax(open_t, "a branch needs at least one arm")
        return Branch(arms, Pos(open_t.line, open_t.col))

    def arm(self) -> Arm:
        t = self.expect("{", "branch arm")
        flowspec: list[dict[str, Any]] | None = None
        chain: ChainExpr | None = None
        have_chain = False
        weight: float | None = None
        while not self.accept("}"):
            kt = self.tok
            if kt.kind != "string":
                raise _Syntax(kt, f"expected a quoted arm key, found {_describe(kt)}")
            key = _unquote(self.next().text)
            self.expect(":", "")
            vt = self.tok
            if key == "nfchain":
                have_chain = True
                if vt.kind == "string":
                    name = _unquote(self.next().text)
                    if name.strip():
                        chain = ChainExpr([NFCall(name.strip(), None, Pos(vt.line, vt.col))],
                                          Pos(vt.line, vt.col))
                else:
                    chain = self.chain_expr()
            elif key == "flowspec":
                v = self.literal()
                if not (isinstance(v, list) and all(isinstance(d, dict) for d in v)):
                    raise _Syntax(vt, "'flowspec' must be a list of dicts")
                flowspec = v
            elif key == "gate_select":
                flowspec = [{"gate_select": self.literal()}]
            elif key == "weight":
                v = self.literal()
                if not (isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0):
                    raise _Syntax(vt, "'weight' must be a positive number")
                weight = float(v)
            else:
                raise _Syntax(kt, f"unknown arm key '{key}' (expected flowspec, gate_select, "
                                  "nfchain, weight)")
            if not self.accept(","):
                self.expect("}", "closing")
                break
        if flowspec is None:
            raise _Syntax(t, "branch arm needs a 'flowspec' or 'gate_select'")
        if not have_chain:
            raise _Syntax(t, "branch arm needs an 'nfchain' ('' for pass-through)")
        return Arm(flowspec, chain, weight, Pos(t.line, t.col))

    def literal(self) -> Any:
        """Parse a Python-style literal: number, string, list, dict, True/False/None."""
        self.nest()
        v = self._literal()
        self.depth -= 1
        return v

    def _literal(self) -> Any:
        t = self.next()
        if t.kind == "string":
            return _unquote(t.text)
        if t.kind == "number":
            try:
                return int(t.text, 0)
            except ValueError:
                try:
                    return float(t.text)
                except ValueError:
                    raise _Syntax(t, f"bad number {t.text!r}") from None
        if t.kind == "op" and t.text == "-":
            v = self.literal()
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                return -v
            raise _Syntax(t, "'-' must precede a number")
        if t.kind == "ident" and t.text in ("True", "False", "None"):
            return {"True": True, "False": False, "None": None}[t.text]
        if t.kind == "op" and t.text == "[":
            out = []
            while not self.accept("]"):
                out.append(self.literal())
                if not self.accept(","):
                    self.expect("]", "closing")
                    break
            return out
        if t.kind == "op" and t.text == "{":
            d: dict[Any, Any] = {}
            while not self.accept("}"):
                kt = self.tok
                k = self.literal()
                if isinstance(k, (list, dict)):
                    raise _Syntax(kt, "dict keys must be strings or numbers")
                self.expect(":", "")
                d[k] = self.literal()
                if not self.accept(","):
                    self.expect("}", "closing")
                    break
            return d
        raise _Syntax(t, f"expected a value, found {_describe(t)}")


def parse_tree(text: str) -> tuple[SpecTree, list[Diagnostic]]:
    """Parse spec text into a syntax tree and the syntax errors found."""
    p = Parser(text)
    tree = p.parse()
    return tree, p.errors
