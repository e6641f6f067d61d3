"""DRA device selectors in CEL: the one module through which kaisched evaluates them.

DeviceClass ``spec.selectors[].cel.expression`` and the selectors of a ResourceClaim's requests are CEL
expressions over one variable, ``device`` (Kubernetes ``k8s.io/dynamic-resource-allocation/cel``)::

    device.driver                                  string
    device.attributes["gpu.nvidia.com"].index     int, bool, string or semver version
    device.capacity["gpu.nvidia.com"].memory      quantity

API::

    sel = compile_selector('device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("40Gi")) >= 0')
    sel.matches(view)           # -> bool; CelError for a runtime error (the device does not match)
    sel.matches_all(views)      # -> [True, False, CelError(...), ...], one entry per device

``compile_selector`` raises :class:`CelError` for a syntax error and caches programs by their text (the same
selector is evaluated for thousands of devices). A :class:`DeviceView` is converted into the library's
activation once and the conversion is cached (by identity, and by content, so the same device in the next
cycle's snapshot is not converted again): treat a view, and the mappings it holds, as immutable.

Semantics (Kubernetes' where it can be had):

* ``device.attributes[d]`` / ``device.capacity[d]`` of a domain the device does not have is an empty map
  (written with a string literal, as selectors are; a computed domain of a device without it is an error);
  ``"d" in device.attributes`` tells whether it has it. A missing attribute (``.productName`` of a device
  without one) is a runtime error: ``no such key: productName``.
* Attribute names without a domain (``model``) take the device's driver as their domain.
* The result must be a bool; anything else is an error. Errors short-circuit as CEL's do:
  ``false && <error>`` is false.
* Quantities compare numerically, in base units (``quantity("40Gi")`` is 40 * 2**30; doubles, so exact up to
  2**53): ``compareTo``, ``isGreaterThan``, ``isLessThan``, ``add``, ``sub``, ``sign``, ``isInteger``,
  ``asInteger``, ``asApproximateFloat``, ``isQuantity``.
* Versions are semantic versions (semver 2.0.0 precedence; build metadata ignored, also by ``==``):
  ``semver(s)``, ``semver(s, true)`` (normalises ``v1.2`` to 1.2.0), ``isSemver``, ``major``, ``minor``,
  ``patch``, ``compareTo``, ``isGreaterThan``, ``isLessThan``.
* Optional syntax: ``m.?key`` and ``m[?key]`` (then ``.orValue(x)``, ``.hasValue()``, ``.value()``,
  ``.or(o)``); ``cel.bind(name, value, expression)``. The library has neither, so the expression is rewritten
  before it is compiled (outside string literals and comments).
* Besides CEL's standard functions and macros: the strings extension (``lowerAscii``, ``split``, ``indexOf``,
  ``replace``, ``trim``, ...), ``sets.contains`` / ``sets.equivalent`` / ``sets.intersects`` and
  ``min`` / ``max`` / ``sum`` on lists.

Not supported: optional list and map entries (``[?x]``, ``{?k: v}``), a plain selection on an optional value
(``m.?a.b``: write ``m.?a.?b``), Kubernetes' url/ip/cidr/format/regex-find libraries, runtime cost limits,
and the type checks Kubernetes makes when a selector is written (``device.capacity["d"].memory > 1`` is an
error there and compares numbers here; a version compared with ``==`` to a string is false here, an error
there). Apart from these, a selector the API server accepted evaluates as it does there.

The library is ``common-expression-language`` (cel-rust bindings, Apache-2.0), imported on first use
(importing it costs about 0.3 s).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from kaisched.k8s.quantity import QuantityError, parse_quantity

if TYPE_CHECKING:
    import cel

__all__ = ["CelError", "CompiledSelector", "DeviceView", "compile_selector"]

AttributeValue = bool | int | str


class CelError(Exception):
    """A selector that does not compile, or whose evaluation for a device failed; the message is one sentence."""


@dataclass(frozen=True, slots=True)
class DeviceView:
    """What a selector sees of a device.

    ``attributes``: fully qualified name (``gpu.nvidia.com/productName``) -> ``(kind, value)``, kind one of
    ``int``, ``bool``, ``string``, ``version`` (semver text). ``capacity``: fully qualified name -> amount in
    base units (bytes for memory).
    """

    driver: str
    attributes: Mapping[str, tuple[str, AttributeValue]]
    capacity: Mapping[str, float]


class CompiledSelector:
    """A compiled selector; get one from :func:`compile_selector`."""

    __slots__ = ("_functions", "_names", "_program", "expression")

    def __init__(self, expression: str, program: cel.Program) -> None:
        self.expression = expression
        self._program = program
        # the functions of ours it calls (the library's calls cost more the more an activation has)
        called = set(program.functions())
        self._functions = {name: f for name, f in _functions().items() if name.rpartition(".")[2] in called}
        self._names = frozenset(self._functions)

    def __repr__(self) -> str:
        return f"CompiledSelector({self.expression!r})"

    def matches(self, device: DeviceView) -> bool:
        """Whether the device satisfies the selector; :class:`CelError` for a runtime error."""
        try:
            activation = _activation(device)
            if not self._names <= activation.functions:
                activation.add(self._functions)
            result = self._program.execute(activation.context)
        except CelError:
            raise
        except Exception as exc:
            raise CelError(f"{_quoted(self.expression)}: {_runtime_message(exc)}") from exc
        if result is True:
            return True
        if result is False:
            return False
        raise CelError(f"{_quoted(self.expression)}: must evaluate to bool, got {_cel_type(result)}")

    def matches_all(self, devices: Iterable[DeviceView]) -> list[bool | CelError]:
        """One entry per device: whether it matches, or the :class:`CelError` of its evaluation (which
        Kubernetes reports, the device not matching)."""
        out: list[bool | CelError] = []
        for device in devices:
            try:
                out.append(self.matches(device))
            except CelError as exc:
                out.append(exc)
        return out


def compile_selector(expression: str) -> CompiledSelector:
    """The selector compiled (cached by its text); :class:`CelError` when it does not compile."""
    cached = _SELECTORS.get(expression)
    if cached is None:
        try:
            cached = CompiledSelector(expression, _compile(expression))
        except CelError as exc:
            cached = exc
        if len(_SELECTORS) >= _MAX_CACHED:
            _SELECTORS.clear()
        _SELECTORS[expression] = cached
    if isinstance(cached, CelError):
        raise CelError(str(cached))
    return cached


# ------------------------------------------------------------------------------------------- caches

# entries per cache; a full cache is emptied. An activation takes about 10 KB: 1 << 15 of them, some 300 MB,
# hold the devices of a 4,000-node cluster with 8 GPUs a node.
_MAX_CACHED: Final = 1 << 15
_SELECTORS: Final[dict[str, CompiledSelector | CelError]] = {}
_STATE: Final[dict[str, dict[str, Callable[..., Any]]]] = {}  # "functions": all the functions there are


class _Activation:
    """A device converted into the library's values, with the functions registered on it so far."""

    __slots__ = ("context", "functions")

    def __init__(self, context: cel.Context) -> None:
        self.context = context
        self.functions: set[str] = set()

    def add(self, functions: Mapping[str, Callable[..., Any]]) -> None:
        for name, function in functions.items():
            if name not in self.functions:
                self.context.add_function(name, function)
                self.functions.add(name)


_BY_ID: Final[dict[int, tuple[DeviceView, _Activation]]] = {}  # holds the view, so its id stays its own
_BY_CONTENT: Final[dict[tuple[object, ...], _Activation]] = {}


def _activation(device: DeviceView) -> _Activation:
    """The device's activation: built once per device (and reused for an equal view)."""
    entry = _BY_ID.get(id(device))
    if entry is not None and entry[0] is device:
        return entry[1]
    key = (device.driver, tuple(device.attributes.items()), tuple(device.capacity.items()))
    try:
        activation = _BY_CONTENT.get(key)
        cacheable = True
    except TypeError:  # an unhashable value: convert without caching by content
        activation, cacheable = None, False
    if activation is None:
        activation = _Activation(_build_context(device))
        if cacheable:
            if len(_BY_CONTENT) >= _MAX_CACHED:
                _BY_CONTENT.clear()
            _BY_CONTENT[key] = activation
    if len(_BY_ID) >= _MAX_CACHED:
        _BY_ID.clear()
    _BY_ID[id(device)] = (device, activation)
    return activation


def _build_context(device: DeviceView) -> cel.Context:
    import cel

    attributes: dict[str, dict[str, object]] = {}
    for name, (kind, value) in device.attributes.items():
        domain, ident = _split_name(name, device.driver)
        if kind == "version":
            version = _parse_semver(value) if isinstance(value, str) else None
            if version is None:
                raise CelError(f"device attribute {name}: {value!r} is not a semantic version")
            converted: object = version
        elif kind in _SCALAR_KINDS:
            if type(value) is not _SCALAR_KINDS[kind]:
                raise CelError(f"device attribute {name}: {value!r} is not of its kind, {kind}")
            converted = value
        else:
            raise CelError(f"device attribute {name}: unknown kind {kind!r} (int, bool, string or version)")
        attributes.setdefault(domain, {})[ident] = converted
    capacity: dict[str, dict[str, float]] = {}
    for name, amount in device.capacity.items():
        domain, ident = _split_name(name, device.driver)
        capacity.setdefault(domain, {})[ident] = float(amount)
    return cel.Context(variables={"device": {"driver": device.driver, "attributes": attributes, "capacity": capacity}})


_SCALAR_KINDS: Final[dict[str, type]] = {"int": int, "bool": bool, "string": str}


def _split_name(name: str, driver: str) -> tuple[str, str]:
    """``domain/id`` -> (domain, id); a name without a domain is the driver's (as Kubernetes does)."""
    domain, sep, ident = name.partition("/")
    return (domain, ident) if sep else (driver, name)


# ----------------------------------------------------------------------------------------- compiling

_OPT_FIELD: Final = "_kaischedOptField"
_OPT_INDEX: Final = "_kaischedOptIndex"

_TOKEN_RE: Final = re.compile(
    r"""(?P<ws>\s+|//[^\n]*)
    |(?P<str>(?:[bB][rR]|[rR][bB]|[rR])(?:'''.*?'''|\"\"\".*?\"\"\"|'[^'\n]*'|"[^"\n]*")
        |[bB]?(?:'''(?:\\.|[^\\])*?'''|\"\"\"(?:\\.|[^\\])*?\"\"\"|'(?:\\.|[^\\'\n])*'|"(?:\\.|[^\\"\n])*"))
    |(?P<ident>[_a-zA-Z][_a-zA-Z0-9]*)
    |(?P<num>0[xX][0-9a-fA-F]+[uU]?|\d+\.\d+(?:[eE][+-]?\d+)?|\d+[eE][+-]?\d+|\.\d+(?:[eE][+-]?\d+)?|\d+[uU]?)
    |(?P<op>.)""",
    re.VERBOSE | re.DOTALL,
)
_CLOSE: Final = {"(": ")", "[": "]", "{": "}"}
_OPERAND_END: Final = frozenset({")", "]", "}"})
_PARSE_ERROR_RE: Final = re.compile(r"<input>:(\d+):(\d+): (?:Syntax error: )?([^\n]*)")

Token = tuple[str, str]  # (kind, text)


def _compile(expression: str) -> cel.Program:
    import cel

    tokens = [(m.lastgroup or "op", m.group()) for m in _TOKEN_RE.finditer(expression)]
    try:
        source = _rewrite(tokens, 0, len(tokens))
    except CelError as bad_bind:
        raise CelError(f"{_quoted(expression)}: {bad_bind}") from None
    try:
        return cel.compile(source)
    except Exception as failed:
        error: Exception = failed
    if source != expression:
        # the same expression with `.?` / `[?` written `. ` / `[ `: the error's line and column are the user's
        plain = "".join(" " if k == "op" and t == "?" and _prev_text(tokens, i) in {".", "["} else t
                        for i, (k, t) in enumerate(tokens))
        try:
            cel.compile(plain)
        except Exception as failed_plain:
            error = failed_plain
    raise CelError(f"{_quoted(expression)}: {_syntax_message(error)}") from error


def _rewrite(tokens: list[Token], start: int, stop: int) -> str:
    """The expression in ``tokens[start:stop]`` with the syntax the library lacks written in what it has,
    and its slow paths avoided:

    * ``m.?k`` -> ``m._kaischedOptField("k")``, ``m[?k]`` -> ``m._kaischedOptIndex(k)``;
    * ``cel.bind(x, v, e)`` -> ``[v].map(x, e)[0]``;
    * ``device.attributes["d"]`` -> ``(("d" in device["attributes"]) ? device["attributes"]["d"] : {})``
      (an unknown domain is an empty map; likewise capacity), ``device.attributes["d"].?k`` without a call,
      and ``device.attributes`` -> ``device["attributes"]`` (the library deep-copies a map that a ``.field``
      selects, not one that an index does);
    * ``quantity("40Gi")`` -> ``(42949672960.0)``, ``semver("1.2.3")`` -> ``b"1.2.3"`` (no call per device).
    """
    out: list[str] = []
    i = start
    while i < stop:
        kind, text = tokens[i]
        nxt = _skip_ws(tokens, i + 1, stop)
        if kind == "op" and text == "." and _text(tokens, nxt, stop) == "?":
            name = _skip_ws(tokens, nxt + 1, stop)
            if name < stop and tokens[name][0] == "ident":
                out.append(f'.{_OPT_FIELD}("{tokens[name][1]}")')
                i = name + 1
                continue
        elif kind == "op" and text == "[" and _text(tokens, nxt, stop) == "?" and _ends_operand(tokens, start, i):
            close = _matching(tokens, i, stop)
            if close < stop:
                out.append(f".{_OPT_INDEX}({_rewrite(tokens, nxt + 1, close)})")
                i = close + 1
                continue
        elif kind == "ident" and text in _REWRITTEN_NAMES and _prev_text(tokens, i, start) != ".":
            rewritten = _REWRITTEN_NAMES[text](tokens, nxt, stop)
            if rewritten is not None:
                out.append(rewritten[0])
                i = rewritten[1]
                continue
        out.append(text)
        i += 1
    return "".join(out)


def _rewrite_bind(tokens: list[Token], dot: int, stop: int) -> tuple[str, int] | None:
    """``cel.bind(x, v, e)`` starting at the dot after ``cel``: (its rewriting, the index after it)."""
    name = _skip_ws(tokens, dot + 1, stop)
    paren = _skip_ws(tokens, name + 1, stop)
    if _text(tokens, dot, stop) != "." or _text(tokens, name, stop) != "bind" or _text(tokens, paren, stop) != "(":
        return None
    close = _matching(tokens, paren, stop)
    if close >= stop:
        return None
    args = _split_args(tokens, paren + 1, close)
    var = _skip_ws(tokens, args[0][0], args[0][1]) if args else close
    if len(args) != 3 or tokens[var][0] != "ident" or _skip_ws(tokens, var + 1, args[0][1]) != args[0][1]:
        raise CelError("cel.bind takes a variable name, a value and an expression: cel.bind(x, value, expr)")
    value, body = (_rewrite(tokens, a, b) for a, b in args[1:])
    return f"[{value}].map({tokens[var][1]}, {body})[0]", close + 1


def _rewrite_device(tokens: list[Token], dot: int, stop: int) -> tuple[str, int] | None:
    """``device.attributes["d"]`` / ``device.attributes`` (or capacity) starting at the dot after ``device``."""
    field = _skip_ws(tokens, dot + 1, stop)
    if _text(tokens, dot, stop) != "." or _text(tokens, field, stop) not in {"attributes", "capacity"}:
        return None
    name = tokens[field][1]
    bracket = _skip_ws(tokens, field + 1, stop)
    literal = _skip_ws(tokens, bracket + 1, stop)
    close = _skip_ws(tokens, literal + 1, stop)
    if (_text(tokens, bracket, stop) == "[" and literal < stop and tokens[literal][0] == "str"
            and _text(tokens, close, stop) == "]"):
        lit, domain = tokens[literal][1], f'device["{name}"][{tokens[literal][1]}]'
        dot2 = _skip_ws(tokens, close + 1, stop)
        question = _skip_ws(tokens, dot2 + 1, stop)
        key = _skip_ws(tokens, question + 1, stop)
        if _text(tokens, dot2, stop) == "." and _text(tokens, question, stop) == "?" and key < stop \
                and tokens[key][0] == "ident":  # device.attributes["d"].?k, without a call per device
            k = tokens[key][1]
            return (f'(({lit} in device["{name}"] && "{k}" in {domain}) ? optional.of({domain}.{k})'
                    " : optional.none())", key + 1)
        return f'(({lit} in device["{name}"]) ? {domain} : {{}})', close + 1
    return f'device["{name}"]', field + 1


def _constant_argument(tokens: list[Token], paren: int, stop: int) -> tuple[str, int] | None:
    """The text of a plain string literal that is the only argument of a call, and the index after the call."""
    literal = _skip_ws(tokens, paren + 1, stop)
    close = _skip_ws(tokens, literal + 1, stop)
    if _text(tokens, paren, stop) != "(" or literal >= stop or _text(tokens, close, stop) != ")":
        return None
    kind, text = tokens[literal]
    if kind != "str" or text[0] not in "'\"" or "\\" in text or text[:3] in {"'''", '"""'}:
        return None
    return text[1:-1], close + 1


def _fold_quantity(tokens: list[Token], paren: int, stop: int) -> tuple[str, int] | None:
    found = _constant_argument(tokens, paren, stop)
    if found is None:
        return None
    try:
        return f"({parse_quantity(found[0])!r})", found[1]
    except QuantityError:
        return None  # (the error is the call's, at evaluation)


def _fold_semver(tokens: list[Token], paren: int, stop: int) -> tuple[str, int] | None:
    found = _constant_argument(tokens, paren, stop)
    version = _parse_semver(found[0]) if found is not None else None
    if found is None or version is None:
        return None
    return f'b"{version.decode()}"', found[1]


_REWRITTEN_NAMES: Final[dict[str, Callable[[list[Token], int, int], tuple[str, int] | None]]] = {
    "cel": _rewrite_bind,
    "device": _rewrite_device,
    "quantity": _fold_quantity,
    "semver": _fold_semver,
}


def _skip_ws(tokens: list[Token], i: int, stop: int) -> int:
    while i < stop and tokens[i][0] == "ws":
        i += 1
    return i


def _text(tokens: list[Token], i: int, stop: int) -> str:
    return tokens[i][1] if i < stop else ""


def _prev_text(tokens: list[Token], i: int, start: int = 0) -> str:
    i -= 1
    while i >= start and tokens[i][0] == "ws":
        i -= 1
    return tokens[i][1] if i >= start else ""


def _ends_operand(tokens: list[Token], start: int, i: int) -> bool:
    """Whether the token before ``i`` ends an operand (so a ``[`` there indexes it)."""
    i -= 1
    while i >= start and tokens[i][0] == "ws":
        i -= 1
    if i < start:
        return False
    kind, text = tokens[i]
    return kind in {"str", "num"} or (kind == "ident" and text != "in") or text in _OPERAND_END


def _matching(tokens: list[Token], open_index: int, stop: int) -> int:
    """The index of the bracket closing the one at ``open_index`` (``stop`` if none)."""
    depth = 0
    for j in range(open_index, stop):
        kind, text = tokens[j]
        if kind != "op":
            continue
        if text in _CLOSE:
            depth += 1
        elif text in _OPERAND_END:
            depth -= 1
            if depth == 0:
                return j
    return stop


def _split_args(tokens: list[Token], start: int, stop: int) -> list[tuple[int, int]]:
    """The top-level comma-separated ranges of ``tokens[start:stop]``."""
    args: list[tuple[int, int]] = []
    depth, begin = 0, start
    for j in range(start, stop):
        kind, text = tokens[j]
        if kind != "op":
            continue
        if text in _CLOSE:
            depth += 1
        elif text in _OPERAND_END:
            depth -= 1
        elif text == "," and depth == 0:
            args.append((begin, j))
            begin = j + 1
    if _skip_ws(tokens, begin, stop) < stop or args:
        args.append((begin, stop))
    return args


# ------------------------------------------------------------------------------------------ messages


def _quoted(expression: str) -> str:
    return f'CEL expression "{" ".join(expression.split())}"'


def _syntax_message(exc: Exception) -> str:
    text = str(exc)
    found = _PARSE_ERROR_RE.search(text)
    if found is None:
        return f"does not compile: {_first_sentence(text)}"
    return f"syntax error at line {found[1]}, column {found[2]}: {found[3]}"


_FUNCTION_ERROR_RE: Final = re.compile(
    r"Function '(?P<name>[\w.]+)' error: (?:Python function call failed: \w+: )?(?P<detail>.*?)"
    r"\.? Check function arguments and their types\.\s*$",
    re.DOTALL,
)
_FUNCTION_LABELS: Final = {_OPT_FIELD: ".?", _OPT_INDEX: "[?]"}


def _runtime_message(exc: Exception) -> str:
    if isinstance(exc, KeyError) and exc.args:
        return f"no such key: {exc.args[0]}"
    text = str(exc)
    found = _FUNCTION_ERROR_RE.match(text)
    if found is not None:
        name = found["name"]
        return f"{_FUNCTION_LABELS.get(name, name)}: {' '.join(found['detail'].split())}"
    return _first_sentence(text)


def _first_sentence(text: str) -> str:
    sentence = text.strip().split("\n", 1)[0].split(". ", 1)[0].rstrip(".")
    return sentence[:1].lower() + sentence[1:] if sentence[1:2].islower() else sentence


def _cel_type(value: object) -> str:
    if isinstance(value, bool):
        return "bool"
    names = {int: "int", float: "double", str: "string", bytes: "version", dict: "map",
             list: "list", type(None): "null"}
    return names.get(type(value), type(value).__name__)


# ------------------------------------------------------------------------------------------ functions
# In the library's values a quantity is a double (base units) and a version is bytes: its canonical text
# without build metadata, so that == compares versions as semver does.

_SEMVER_RE: Final = re.compile(
    r"(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
    r"(?:-((?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(?:\.(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?"
    r"(?:\+[0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*)?",
    re.ASCII,
)
_LOOSE_SEMVER_RE: Final = re.compile(r"[vV]?(\d+)(?:\.(\d+))?(?:\.(\d+))?([-+].*)?", re.ASCII | re.DOTALL)
SemverKey = tuple[int, int, int, int, tuple[tuple[int, int, str], ...]]
_SEMVER_KEYS: Final[dict[bytes, SemverKey]] = {}
_INT64: Final = 1 << 63


def _parse_semver(text: str, normalize: bool = False) -> bytes | None:
    """The canonical bytes of a semantic version (``None``: not one); ``normalize`` accepts ``v1.2``."""
    if normalize:
        loose = _LOOSE_SEMVER_RE.fullmatch(text)
        if loose is None:
            return None
        core = ".".join(str(int(part or "0")) for part in loose.groups()[:3])
        text = core + (loose[4] or "")
    found = _SEMVER_RE.fullmatch(text)
    if found is None:
        return None
    canonical = f"{found[1]}.{found[2]}.{found[3]}" + (f"-{found[4]}" if found[4] else "")
    return canonical.encode()


def _semver_key(version: bytes) -> SemverKey:
    """A sort key with semver 2.0.0 precedence (a release after its pre-releases; numeric identifiers
    numerically and before alphanumeric ones; more identifiers after fewer)."""
    key = _SEMVER_KEYS.get(version)
    if key is None:
        core, _, pre = version.decode().partition("-")
        major, minor, patch = (int(part) for part in core.split("."))
        ids = tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in pre.split(".")) if pre else ()
        key = (major, minor, patch, 0 if pre else 1, ids)
        if len(_SEMVER_KEYS) >= _MAX_CACHED:
            _SEMVER_KEYS.clear()
        _SEMVER_KEYS[version] = key
    return key


def _compare(function: str, a: object, b: object) -> int:
    if type(a) is float and type(b) is float:
        return (a > b) - (a < b)
    if type(a) is bytes and type(b) is bytes:
        ka, kb = _semver_key(a), _semver_key(b)
        return (ka > kb) - (ka < kb)
    raise TypeError(f"no such overload: {_cel_type(a)}.{function}({_cel_type(b)}): "
                    "compares two quantities or two versions")


def _compare_to(a: object, b: object) -> int:
    return _compare("compareTo", a, b)


def _is_greater_than(a: object, b: object) -> bool:
    return _compare("isGreaterThan", a, b) > 0


def _is_less_than(a: object, b: object) -> bool:
    return _compare("isLessThan", a, b) < 0


def _string(function: str, value: object) -> str:
    if not isinstance(value, str):
        raise TypeError(f"no such overload: {function}({_cel_type(value)}) takes a string")
    return value


def _quantity(text: object) -> float:
    try:
        return parse_quantity(_string("quantity", text))
    except QuantityError as exc:
        raise ValueError(str(exc)) from None


def _is_quantity(text: object) -> bool:
    try:
        parse_quantity(_string("isQuantity", text))
    except QuantityError:
        return False
    return True


def _semver(text: object, normalize: object = False) -> bytes:
    version = _parse_semver(_string("semver", text), normalize is True)
    if version is None:
        raise ValueError(f"{text!r} is not a semantic version (MAJOR.MINOR.PATCH)")
    return version


def _is_semver(text: object, normalize: object = False) -> bool:
    return _parse_semver(_string("isSemver", text), normalize is True) is not None


def _version(function: str, value: object) -> SemverKey:
    if not isinstance(value, bytes):
        raise TypeError(f"no such overload: {_cel_type(value)}.{function}() takes a version")
    return _semver_key(value)


def _major(v: object) -> int:
    return _version("major", v)[0]


def _minor(v: object) -> int:
    return _version("minor", v)[1]


def _patch(v: object) -> int:
    return _version("patch", v)[2]


def _amount(function: str, value: object, integers: bool = False) -> float:
    if isinstance(value, float):
        return value
    if integers and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    raise TypeError(f"no such overload: {function} takes a quantity{' or an int' if integers else ''}, "
                    f"not {_cel_type(value)}")


def _sign(q: object) -> int:
    amount = _amount("sign", q)
    return (amount > 0) - (amount < 0)


def _is_integer(q: object) -> bool:
    amount = _amount("isInteger", q)
    return amount.is_integer() and -_INT64 <= amount < _INT64


def _as_integer(q: object) -> int:
    if not _is_integer(q):
        raise ValueError(f"quantity {q!r} is not an integer in the int64 range")
    return int(_amount("asInteger", q))


def _as_approximate_float(q: object) -> float:
    return _amount("asApproximateFloat", q)


def _add(q: object, other: object) -> float:
    return _amount("add", q) + _amount("add", other, integers=True)


def _sub(q: object, other: object) -> float:
    return _amount("sub", q) - _amount("sub", other, integers=True)


def _optional_receiver(value: object) -> tuple[object, bool]:
    """(the value inside an optional, whether it has one); a plain value has itself."""
    import cel

    if isinstance(value, cel.OptionalValue):
        return (value.value(), True) if value.has_value() else (None, False)
    return value, True


def _opt_field(receiver: object, name: object) -> cel.OptionalValue:
    import cel

    value, present = _optional_receiver(receiver)
    if not present:
        return cel.OptionalValue.none()
    if not isinstance(value, dict):
        raise TypeError(f"no such overload: .?{name} selects a field of a map, not of {_cel_type(value)}")
    return cel.OptionalValue.of(value[name]) if name in value else cel.OptionalValue.none()


def _opt_index(receiver: object, index: object) -> cel.OptionalValue:
    import cel

    value, present = _optional_receiver(receiver)
    if not present:
        return cel.OptionalValue.none()
    if isinstance(value, dict):
        return cel.OptionalValue.of(value[index]) if index in value else cel.OptionalValue.none()
    if isinstance(value, list) and type(index) is int:
        return cel.OptionalValue.of(value[index]) if 0 <= index < len(value) else cel.OptionalValue.none()
    raise TypeError(f"no such overload: [?{_cel_type(index)}] on {_cel_type(value)}")


_OWN_FUNCTIONS: Final[dict[str, Callable[..., Any]]] = {
    "quantity": _quantity,
    "isQuantity": _is_quantity,
    "sign": _sign,
    "isInteger": _is_integer,
    "asInteger": _as_integer,
    "asApproximateFloat": _as_approximate_float,
    "add": _add,
    "sub": _sub,
    "semver": _semver,
    "isSemver": _is_semver,
    "major": _major,
    "minor": _minor,
    "patch": _patch,
    "compareTo": _compare_to,
    "isGreaterThan": _is_greater_than,
    "isLessThan": _is_less_than,
    _OPT_FIELD: _opt_field,
    _OPT_INDEX: _opt_index,
}


class _DropCallbackFailures(logging.Filter):
    """The library logs a warning for every exception a function raised; it is reported as a CelError."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("Python function '")


def _functions() -> dict[str, Callable[..., Any]]:
    """Every activation's functions: ours, and the library's pure-Python strings, sets and list extensions."""
    functions = _STATE.get("functions")
    if functions is None:
        from cel.stdlib import EXTENSIONS

        logging.getLogger("cel").addFilter(_DropCallbackFailures())
        core = EXTENSIONS["core"]
        functions = {**EXTENSIONS["strings"], **EXTENSIONS["sets"], "min": core["min"], "max": core["max"],
                     "sum": core["sum"], **_OWN_FUNCTIONS}
        _STATE["functions"] = functions
    return functions
