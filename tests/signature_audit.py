"""Signature audit: torch 2.13's public callables against retrograd's namesakes.

For every name both libraries provide (``torch.*`` functions, ``Tensor`` methods,
``nn.functional``, ``nn`` module constructors and ``forward``, ``nn.init``, ``nn.utils``,
optimizers, lr schedulers, ``linalg``/``fft``/``special`` and ``distributions`` constructors)
it compares parameter names, kinds and defaults, and lists what a line-for-line port would trip
on:

- ``missing``: a keyword torch accepts that retrograd's signature has no name for (and no
  ``**kwargs`` to take it);
- ``default``: both have a default and they differ;
- ``required``: optional in torch, required in retrograd;
- ``keyword-only``: positional in torch, keyword-only in retrograd;
- ``positional-only``: a keyword in torch, positional-only in retrograd;
- ``order``: torch's positional parameters come in another order in retrograd.

torch's Python callables give ``inspect.signature``; its builtins give none, so their
docstrings' signature lines (``add(input, other, *, alpha=1, out=None) -> Tensor`` and the
``.. function::`` overloads) are parsed instead. A retrograd callable taking ``*args`` or
``**kwargs`` where the names would be checked is counted as unverifiable, not as a mismatch.

Run ``python tests/signature_audit.py`` for the report (with ``--all`` for the
unverifiable names as well); ``tests/test_signatures_vs_torch.py`` asserts that every
mismatch is in its documented allowlist.
"""

from __future__ import annotations

import ast
import inspect
import re
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch

import retrograd as rg

EMPTY = inspect.Parameter.empty
POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)

# Default values that are spelled differently but mean the same thing in both libraries.
_SAME_DEFAULT_TEXT = {"torch.strided", "torch.preserve_format", "torch.contiguous_format"}


@dataclass(frozen=True)
class Mismatch:
    name: str  # e.g. "torch.sum", "Tensor.add", "nn.Linear", "nn.Linear.forward"
    kind: str  # missing / default / required / keyword-only / positional-only / order
    parameter: str
    detail: str

    def key(self) -> tuple[str, str, str]:
        return (self.name, self.kind, self.parameter)

    def __str__(self) -> str:
        return f"{self.name}: {self.kind} {self.parameter}: {self.detail}"


@dataclass
class Report:
    mismatches: list[Mismatch]
    checked: list[str]
    unverifiable: list[str]


class _Text:
    """A default value known only by its source text (``torch.strided``)."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return self.text


def _literal(node: ast.expr) -> Any:
    try:
        return ast.literal_eval(node)
    except ValueError:
        pass
    text = ast.unparse(node)
    if text in _SAME_DEFAULT_TEXT:
        return _Text(text)
    try:  # ``1.0 / 8``, ``torch.long``, ``torch.Size([])``: plain expressions of torch's docs
        return eval(text, {"torch": torch, "__builtins__": {}})
    except Exception:
        return _Text(text)


def _parse_doc_line(name: str, params: str) -> inspect.Signature | None:
    """A docstring's ``name(params)`` as a signature (None where it is not Python syntax)."""
    # torch writes ``zeros(*size, *, out=None)``: the second ``*`` is Python's implicit one.
    params = re.sub(r"(\*\w+\s*,\s*)\*\s*,", r"\1", params)
    try:
        tree = ast.parse(f"def {name}({params}): pass")
    except SyntaxError:  # a type annotation that is no Python (``int[2]``): dropped
        params = re.sub(r":\s*[^,=]+(?=[,=]|$)", "", params)
        try:
            tree = ast.parse(f"def {name}({params}): pass")
        except SyntaxError:
            return None
    arguments = tree.body[0].args  # type: ignore[attr-defined]
    parameters: list[inspect.Parameter] = []
    positional = arguments.posonlyargs + arguments.args
    defaults = [EMPTY] * (len(positional) - len(arguments.defaults)) + [
        _literal(d) for d in arguments.defaults
    ]
    for index, (arg, default) in enumerate(zip(positional, defaults)):
        kind = (
            inspect.Parameter.POSITIONAL_ONLY
            if index < len(arguments.posonlyargs)
            else inspect.Parameter.POSITIONAL_OR_KEYWORD
        )
        parameters.append(inspect.Parameter(arg.arg, kind, default=default))
    if arguments.vararg is not None:
        parameters.append(inspect.Parameter(arguments.vararg.arg, inspect.Parameter.VAR_POSITIONAL))
    for arg, default in zip(arguments.kwonlyargs, arguments.kw_defaults):
        value = EMPTY if default is None else _literal(default)
        parameters.append(inspect.Parameter(arg.arg, inspect.Parameter.KEYWORD_ONLY, default=value))
    if arguments.kwarg is not None:
        parameters.append(inspect.Parameter(arguments.kwarg.arg, inspect.Parameter.VAR_KEYWORD))
    try:
        return inspect.Signature(parameters)
    except ValueError:
        return None


def _doc_signature_texts(doc: str, name: str) -> Iterator[str]:
    """The parameter lists of the ``name(...)`` lines opening a docstring's paragraphs (and
    its ``.. function::`` overloads), each possibly wrapped over several lines."""
    opening = re.compile(rf"^[ \t]*(?:\.\. function:: )?{re.escape(name)}\(", re.M)
    for match in opening.finditer(doc):
        depth, at = 1, match.end()
        while at < len(doc) and depth:
            depth += {"(": 1, ")": -1}.get(doc[at], 0)
            at += 1
        if depth == 0:
            yield " ".join(doc[match.end() : at - 1].split())


def _schema_signatures(label: str) -> list[inspect.Signature]:
    """Signatures built from the ATen schemas of ``label``'s operator (``self`` named
    ``input``; the out= overloads' ``out`` kept), for builtins whose docstrings do not parse."""
    prefix, _, attribute = label.rpartition(".")
    operator = f"aten::{_ATEN_PREFIX.get(prefix, '')}{attribute}"
    try:
        schemas = torch._C._jit_get_schemas_for_operator(operator)
    except RuntimeError:
        return []
    found = []
    for schema in schemas:
        if "out" in schema.overload_name:
            continue  # (out= overloads: their outputs' names are ATen's, not the docs')
        parameters = []
        for argument in schema.arguments:
            kind = (
                inspect.Parameter.KEYWORD_ONLY
                if argument.kwarg_only
                else inspect.Parameter.POSITIONAL_OR_KEYWORD
            )
            default = argument.default_value if argument.has_default_value() else EMPTY
            if isinstance(default, int) and argument.name in ("reduction", "dtype", "layout"):
                default = _Text(f"<ATen enum {default}>")  # (compared with nothing)
            name = "input" if argument.name == "self" else argument.name
            parameters.append((name, kind, default))
        try:  # (``from`` is no Python name: such a schema has no Python call form)
            found.append(
                inspect.Signature([inspect.Parameter(n, k, default=d) for n, k, d in parameters])
            )
        except ValueError:
            continue
    return found


def torch_signatures(function: Any, name: str, label: str = "") -> list[inspect.Signature]:
    """torch's signatures of ``function`` (several for documented overloads): its own where
    Python has one, else its docstring's, else its ATen schemas'."""
    try:
        return [inspect.signature(function)]
    except (TypeError, ValueError):
        pass
    doc = getattr(function, "__doc__", None) or ""
    found = []
    # (``linalg.norm(A, ...)`` or ``chebyshev_polynomial_t(input, n, ...)``: with or without
    # the namespace)
    spellings = dict.fromkeys([name, name.rpartition(".")[2]])
    for spelling in spellings:
        for text in _doc_signature_texts(doc, spelling):
            signature = _parse_doc_line(name.rpartition(".")[2], text)
            if signature is not None:
                found.append(signature)
        if found:
            break
    return found or (_schema_signatures(label) if label else [])


def rg_signature(function: Any) -> inspect.Signature | None:
    try:
        return inspect.signature(function)
    except (TypeError, ValueError):
        return None


def _drop_first(signature: inspect.Signature) -> inspect.Signature:
    return signature.replace(parameters=list(signature.parameters.values())[1:])


def _same_default(theirs: Any, ours: Any) -> bool:
    if isinstance(theirs, _Text) and theirs.text.startswith("<ATen enum"):
        return True  # an ATen enum's number (``reduction=1``) stands for a name
    if isinstance(theirs, list) and not isinstance(ours, tuple | list):
        # ATen's int lists: ``[1]`` is ``1`` for every dimension, ``[]`` is None ("as the
        # kernel": a pool's stride)
        return ours is None if not theirs else all(_same_default(t, ours) for t in theirs)
    if isinstance(theirs, torch.Size | list) and isinstance(ours, tuple | list):
        return tuple(theirs) == tuple(ours)
    if inspect.isfunction(theirs) or inspect.ismodule(theirs) or inspect.isbuiltin(theirs):
        return getattr(theirs, "__name__", None) == getattr(ours, "__name__", ())
    if isinstance(theirs, _Text):
        return theirs.text in _SAME_DEFAULT_TEXT or theirs.text == repr(ours)
    if isinstance(theirs, torch.dtype | torch.device) or isinstance(ours, _Text):
        return str(theirs).removeprefix("torch.") == str(ours).removeprefix("retrograd.")
    if isinstance(theirs, float) and theirs != theirs:
        return isinstance(ours, float) and ours != ours
    try:
        return (type(theirs) is type(ours) and bool(theirs == ours)) or (
            isinstance(theirs, int | float)
            and not isinstance(theirs, bool)
            and isinstance(ours, int | float)
            and not isinstance(ours, bool)
            and theirs == ours
        )
    except Exception:
        return repr(theirs) == repr(ours)


_ATEN_PREFIX = {"linalg": "linalg_", "fft": "fft_", "special": "special_"}


def schema_defaults(label: str) -> dict[str, list[Any]]:
    """The defaults ATen's schemas give each parameter of ``label``'s operator, over its
    functional overloads; ``None`` is among them where an overload leaves the parameter out
    (``median(input)`` beside ``median(input, dim)``: a default of None picks that overload).
    torch's docstrings are approximate about defaults (``kthvalue``'s ``dim=None`` is -1), the
    schemas are what the dispatcher does."""
    prefix, _, attribute = label.rpartition(".")
    operator = f"aten::{_ATEN_PREFIX.get(prefix, '')}{attribute}"
    try:
        schemas = torch._C._jit_get_schemas_for_operator(operator)
    except RuntimeError:
        return {}
    functional = [s for s in schemas if "out" not in s.overload_name]

    def named(argument: Any) -> str:
        return "input" if argument.name == "self" else argument.name

    accepted: dict[str, list[Any]] = {}
    for schema in functional:
        for argument in schema.arguments:
            if argument.has_default_value():
                accepted.setdefault(named(argument), []).append(argument.default_value)
    present = [{named(a) for a in schema.arguments} for schema in functional]
    for schema in functional:
        for argument in schema.arguments:
            if any(named(argument) not in others for others in present):
                accepted.setdefault(named(argument), []).append(None)
    if not any("Tensor" in str(a.type) for s in schemas for a in s.arguments):
        return accepted  # not a tensor operator (``aten::float`` converts a number)
    # every name the dispatcher takes (docstrings name some parameters that the parser does
    # not: ``bmm(batch2)`` is ``mat2``), and those it takes by keyword only
    names = {named(a) for s in schemas for a in s.arguments} | {"out"}
    keyword_only = {named(a) for s in schemas for a in s.arguments if a.kwarg_only}
    keyword_only -= {named(a) for s in schemas for a in s.arguments if not a.kwarg_only}
    accepted["\0names"] = sorted(names)
    accepted["\0keyword-only"] = sorted(keyword_only)
    return accepted


def _lands_positionally(name: str, theirs: inspect.Signature, ours: inspect.Signature) -> bool:
    """Whether torch's positional ``name`` still has a place when passed by position in ours:
    a positional parameter at its index under another name (``flatten(start, end, *,
    start_dim, end_dim)``), or ``*args`` before it."""
    index = [p.name for p in theirs.parameters.values() if p.kind in POSITIONAL].index(name)
    slots = 0
    for param in ours.parameters.values():
        if param.kind is param.VAR_POSITIONAL:
            return True
        if param.kind in POSITIONAL:
            slots += 1
    return index < slots


def compare(
    name: str,
    theirs: inspect.Signature,
    ours: inspect.Signature,
    accepted: dict[str, list[Any]] | None = None,
) -> tuple[list[Mismatch], bool]:
    """The mismatches of ``ours`` against ``theirs``, and whether ``ours`` could be checked."""
    ours_params = ours.parameters
    takes_kwargs = any(p.kind is p.VAR_KEYWORD for p in ours_params.values())
    takes_varargs = any(p.kind is p.VAR_POSITIONAL for p in ours_params.values())
    ours_positional = [p.name for p in ours_params.values() if p.kind in POSITIONAL]
    theirs_positional = [p.name for p in theirs.parameters.values() if p.kind in POSITIONAL]
    theirs_named = [
        p for p in theirs.parameters.values() if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    ]
    if takes_kwargs and not ours_positional and theirs_named:
        return [], False
    theirs_keyword_only = any(p.kind is p.KEYWORD_ONLY for p in theirs_named)
    ours_keyword_only = any(p.kind is p.KEYWORD_ONLY for p in ours_params.values())
    if takes_varargs and not theirs_keyword_only and not ours_positional and not ours_keyword_only:
        return [], False  # ``f(*args, **kwargs)``-like against positional names only
    found: list[Mismatch] = []
    for param in theirs_named:
        mine = ours_params.get(param.name)
        if mine is None or mine.kind in (mine.VAR_POSITIONAL, mine.VAR_KEYWORD):
            if param.kind is param.POSITIONAL_ONLY:
                continue  # the name is not part of torch's contract
            if takes_kwargs:
                continue
            if takes_varargs and param.kind is param.POSITIONAL_OR_KEYWORD:
                continue  # taken positionally by ``*args``; by name, unverifiable
            known = (accepted or {}).get("\0names")
            if known is not None and param.name not in known:
                continue  # a docstring's name that torch's parser does not take either
            found.append(Mismatch(name, "missing", param.name, f"torch: {param}"))
            continue
        if param.default is not EMPTY and mine.default is EMPTY:
            found.append(Mismatch(name, "required", param.name, f"torch: {param}, ours: {mine}"))
        elif (
            param.default is not EMPTY
            and not _same_default(param.default, mine.default)
            and not (param.name == "pin_memory" and {param.default, mine.default} <= {None, False})
            and not any(
                _same_default(d, mine.default) for d in (accepted or {}).get(param.name, ())
            )
        ):
            found.append(
                Mismatch(
                    name,
                    "default",
                    param.name,
                    f"torch: {param.default!r}, ours: {mine.default!r}",
                )
            )
        if (
            param.kind in POSITIONAL
            and mine.kind is mine.KEYWORD_ONLY
            and param.name not in (accepted or {}).get("\0keyword-only", ())
            and not _lands_positionally(param.name, theirs, ours)
        ):
            found.append(Mismatch(name, "keyword-only", param.name, "positional in torch"))
        if param.kind is not param.POSITIONAL_ONLY and mine.kind is mine.POSITIONAL_ONLY:
            found.append(Mismatch(name, "positional-only", param.name, "a keyword in torch"))
    # Positional order: torch's positional parameters must sit at the same index in ours.
    for index, param_name in enumerate(theirs_positional):
        moved = index < len(ours_positional) and ours_positional[index] != param_name
        if moved and param_name in ours_positional:
            found.append(
                Mismatch(
                    name,
                    "order",
                    param_name,
                    f"torch: {theirs_positional}, ours: {ours_positional}",
                )
            )
            break
    return found, True


def _overloads_compare(
    name: str,
    theirs: list[inspect.Signature],
    ours: inspect.Signature,
    accepted: dict[str, list[Any]],
) -> tuple[list[Mismatch], bool]:
    """Mismatches against every documented overload, keeping only those that no overload
    clears (a name one overload lacks but another has is not missing)."""
    per_overload = []
    checked = False
    for signature in theirs:
        found, ok = compare(name, signature, ours, accepted)
        checked = checked or ok
        per_overload.append(found)
    if not per_overload:
        return [], False
    merged: dict[tuple[str, str, str], Mismatch] = {}
    for found in per_overload:
        for mismatch in found:
            merged.setdefault(mismatch.key(), mismatch)
    # an order one overload has is an order torch takes (``max(input, dim)`` beside
    # ``max(input, other)``): reported only when no overload has ours
    if any(not any(m.kind == "order" for m in found) for found in per_overload):
        merged = {key: m for key, m in merged.items() if m.kind != "order"}
    return list(merged.values()), checked


# -- the surface ----------------------------------------------------------------------------------
def _public(module: Any) -> list[str]:
    names = getattr(module, "__all__", None) or dir(module)
    return sorted(n for n in names if not n.startswith("_"))


def _function_pairs() -> Iterator[tuple[str, Any, Any, str]]:
    """(label, torch's, ours, the name torch's docstring uses) for plain functions."""
    namespaces = [
        ("torch", torch, rg),
        ("F", torch.nn.functional, rg.nn.functional),
        ("nn.init", torch.nn.init, rg.nn.init),
        ("nn.utils", torch.nn.utils, rg.nn.utils),
        ("linalg", torch.linalg, rg.linalg),
        ("fft", torch.fft, rg.fft),
        ("special", torch.special, rg.special),
    ]
    for prefix, reference, library in namespaces:
        for attribute in _public(reference):
            theirs = getattr(reference, attribute, None)
            ours = getattr(library, attribute, None)
            if (
                theirs is None
                or ours is None
                or isinstance(theirs, type)
                or inspect.ismodule(theirs)
            ):
                continue
            if not callable(theirs) or not callable(ours) or isinstance(ours, type):
                continue
            doc_name = attribute
            if prefix in ("linalg", "fft", "special"):
                doc_name = f"{prefix}.{attribute}"
            yield f"{prefix}.{attribute}", theirs, ours, doc_name


def _class_pairs() -> Iterator[tuple[str, type, type]]:
    namespaces = [
        ("nn", torch.nn, rg.nn),
        ("optim", torch.optim, rg.optim),
        ("lr_scheduler", torch.optim.lr_scheduler, rg.optim.lr_scheduler),
        ("distributions", torch.distributions, rg.distributions),
    ]
    for prefix, reference, library in namespaces:
        for attribute in _public(reference):
            theirs = getattr(reference, attribute, None)
            ours = getattr(library, attribute, None)
            if isinstance(theirs, type) and isinstance(ours, type):
                yield f"{prefix}.{attribute}", theirs, ours


def _tensor_method_pairs() -> Iterator[tuple[str, Any, Any]]:
    for attribute in sorted(dir(torch.Tensor)):
        if attribute.startswith("_"):
            continue
        theirs = getattr(torch.Tensor, attribute, None)
        ours = inspect.getattr_static(rg.Tensor, attribute, None)
        if ours is None or isinstance(ours, property) or not callable(theirs):
            continue
        if isinstance(ours, staticmethod | classmethod):
            continue
        ours = getattr(rg.Tensor, attribute)
        if callable(ours):
            yield attribute, theirs, ours


def _effective(function: Any) -> inspect.Signature | None:
    """Our signature; a ``rg.name(input, ...)`` forwarding to ``input.name(...)`` counts as
    ``(input, <the method's parameters>, *, out)``."""
    method = getattr(function, "_tensor_method", None)
    if method is not None:
        signature = rg_signature(getattr(rg.Tensor, method))
        if signature is None:
            return None
        parameters = list(signature.parameters.values())
        first = parameters[0].replace(name="input", kind=inspect.Parameter.POSITIONAL_OR_KEYWORD)
        rest = parameters[1:]
        if not any(p.kind is p.VAR_KEYWORD for p in rest) and "out" not in signature.parameters:
            out = inspect.Parameter("out", inspect.Parameter.KEYWORD_ONLY, default=None)
            tail = [p for p in rest if p.kind is p.VAR_KEYWORD]
            rest = [p for p in rest if p.kind is not p.VAR_KEYWORD] + [out] + tail
        try:
            return signature.replace(parameters=[first, *rest])
        except ValueError:
            return None
    return rg_signature(function)


def audit() -> Report:
    mismatches: list[Mismatch] = []
    checked: list[str] = []
    unverifiable: list[str] = []

    def record(label: str, theirs: list[inspect.Signature], ours: inspect.Signature | None) -> None:
        if not theirs or ours is None:
            unverifiable.append(label)
            return
        accepted = schema_defaults(label) if not label.endswith(".forward") else {}
        found, ok = _overloads_compare(label, theirs, ours, accepted)
        (checked if ok else unverifiable).append(label)
        mismatches.extend(found)

    for label, theirs, ours, doc_name in _function_pairs():
        record(label, torch_signatures(theirs, doc_name, label), _effective(ours))
    for attribute, theirs, ours in _tensor_method_pairs():
        signatures = torch_signatures(theirs, attribute, f"Tensor.{attribute}")
        # torch's own Python methods take ``self``; a few method docstrings name the tensor
        # ``input`` (``put(input, index, source, accumulate=False)``)
        signatures = [
            _drop_first(s) if list(s.parameters)[:1] in (["self"], ["input"]) else s
            for s in signatures
        ]
        record(f"Tensor.{attribute}", signatures, _drop_first_or_none(rg_signature(ours)))
    for label, theirs, ours in _class_pairs():
        record(label, torch_signatures(theirs, label), rg_signature(ours))
        if label.startswith("nn.") and issubclass(theirs, torch.nn.Module):
            forward_theirs = theirs.__dict__.get("forward")
            if forward_theirs is not None and callable(getattr(ours, "forward", None)):
                signature = torch_signatures(forward_theirs, "forward")
                record(
                    f"{label}.forward",
                    [_drop_first(s) for s in signature],
                    _drop_first_or_none(rg_signature(ours.forward)),
                )
    return Report(mismatches, checked, unverifiable)


def _drop_first_or_none(signature: inspect.Signature | None) -> inspect.Signature | None:
    return None if signature is None else _drop_first(signature)


def main(argv: list[str]) -> int:
    report = audit()
    show: Callable[[str], None] = print
    for mismatch in sorted(report.mismatches, key=lambda m: m.key()):
        show(str(mismatch))
    print(
        f"{len(report.mismatches)} mismatches; {len(report.checked)} names checked, "
        f"{len(report.unverifiable)} unverifiable"
    )
    if "--all" in argv:
        print("unverifiable:", " ".join(report.unverifiable))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
