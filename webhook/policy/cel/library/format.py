"""Kubernetes format library: ``format.<name>()``, ``format.named(s)``, ``<Format>.validate(s)`` (pure).

Follows ``k8s.io/apiserver/pkg/cel/library/format.go`` (Kubernetes 1.31+) and the validators of
``k8s.io/apimachinery/pkg/util/validation`` for the messages. ``validate`` returns
``optional.none()`` when valid, else ``optional.of(<list of messages>)``; ``format.named`` returns
an optional format. cel-expr-python cannot return optionals from Python, so the environment
rewrites ``format.named(x)`` to ``__tg_format_named(x).first()`` and ``.validate(x)`` to
``.__tg_validate(x).first()`` (ext lists ``first()`` is native): the Python halves below return a
zero- or one-element list.

A format value is ``{"@format": "<name>"}``.
"""

from __future__ import annotations

import base64
import binascii
import datetime
import re
from collections.abc import Callable
from typing import Any

from webhook.policy.cel.cost import PYTHON_CONSTANT, PYTHON_MESSAGES, PYTHON_PART
from webhook.policy.cel.library import urls
from webhook.policy.cel.library._decl import VALUE, LibraryError, T, function, member

KEY = "@format"

_DNS1123_LABEL = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1123_SUBDOMAIN = _DNS1123_LABEL + r"(\." + _DNS1123_LABEL + ")*"
_DNS1035_LABEL = "[a-z]([-a-z0-9]*[a-z0-9])?"
_QUALIFIED_NAME = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_LABEL_VALUE = "(" + _QUALIFIED_NAME + ")?"
_UUID = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")


def regex_error(msg: str, fmt: str, *examples: str) -> str:
    """Apimachinery's ``RegexError`` wording (including its double space before "or")."""
    if not examples:
        return f"{msg} (regex used for validation is '{fmt}')"
    text = msg + " (e.g. "
    for i, ex in enumerate(examples):
        if i > 0:
            text += " or "
        text += f"'{ex}', "
    return text + f"regex used for validation is '{fmt}')"


def _max_len(n: int) -> str:
    return f"must be no more than {n} characters"


def _full(pattern: str, s: str) -> bool:
    return re.fullmatch(pattern, s) is not None


def dns1123_label(s: str) -> list[str]:
    """``IsDNS1123Label``."""
    errs = [_max_len(63)] if len(s) > 63 else []
    if not _full(_DNS1123_LABEL, s):
        errs.append(regex_error("a lowercase RFC 1123 label must consist of lower case alphanumeric characters or "
                                "'-', and must start and end with an alphanumeric character",
                                _DNS1123_LABEL, "my-name", "123-abc"))
    return errs


def dns1123_subdomain(s: str) -> list[str]:
    """``IsDNS1123Subdomain``."""
    errs = [_max_len(253)] if len(s) > 253 else []
    if not _full(_DNS1123_SUBDOMAIN, s):
        errs.append(regex_error("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, "
                                "'-' or '.', and must start and end with an alphanumeric character",
                                _DNS1123_SUBDOMAIN, "example.com"))
    return errs


def dns1035_label(s: str) -> list[str]:
    """``IsDNS1035Label``."""
    errs = [_max_len(63)] if len(s) > 63 else []
    if not _full(_DNS1035_LABEL, s):
        errs.append(regex_error("a DNS-1035 label must consist of lower case alphanumeric characters or '-', start "
                                "with an alphabetic character, and end with an alphanumeric character",
                                _DNS1035_LABEL, "my-name", "abc-123"))
    return errs


_QN_MSG = ("must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
           "alphanumeric character")


def qualified_name(s: str) -> list[str]:
    """``IsQualifiedName``: ``[prefix/]name``."""
    parts = s.split("/")
    errs: list[str] = []
    if len(parts) == 1:
        name = parts[0]
    elif len(parts) == 2:
        prefix, name = parts
        if not prefix:
            errs.append("prefix part must be non-empty")
        else:
            errs += ["prefix part " + m for m in dns1123_subdomain(prefix)]
    else:
        return ["a qualified name " + regex_error(_QN_MSG, _QUALIFIED_NAME, "MyName", "my.name", "123-abc")
                + " with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"]
    if not name:
        errs.append("name part must be non-empty")
    elif len(name) > 63:
        errs.append("name part " + _max_len(63))
    if name and not _full(_QUALIFIED_NAME, name):
        errs.append("name part " + regex_error(_QN_MSG, _QUALIFIED_NAME, "MyName", "my.name", "123-abc"))
    return errs


def label_value(s: str) -> list[str]:
    """``IsValidLabelValue``."""
    errs = [_max_len(63)] if len(s) > 63 else []
    if not _full(_LABEL_VALUE, s):
        errs.append(regex_error("a valid label must be an empty string or consist of alphanumeric characters, '-', "
                                "'_' or '.', and must start and end with an alphanumeric character",
                                _LABEL_VALUE, "MyValue", "my_value", "12345"))
    return errs


def _mask_trailing_dash(s: str) -> str:
    return s[:-2] + "a" if len(s) > 1 and s.endswith("-") else s


def _uri(s: str) -> list[str]:
    return [] if urls.is_url(s) else ["invalid URI"]


def _uuid(s: str) -> list[str]:
    return [] if _UUID.match(s) else ["invalid UUID"]


def _byte(s: str) -> list[str]:
    try:
        base64.b64decode(s, validate=True)
    except (binascii.Error, ValueError):
        return ["invalid base64"]
    return []


def _date(s: str) -> list[str]:
    try:
        datetime.datetime.strptime(s, "%Y-%m-%d")
    except ValueError:
        return ["invalid date"]
    return [] if re.fullmatch(r"\d{4}-\d{2}-\d{2}", s) else ["invalid date"]


_RFC3339 = re.compile(r"^\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$")


def _datetime(s: str) -> list[str]:
    if not _RFC3339.match(s):
        return ["invalid datetime"]
    try:
        datetime.datetime.fromisoformat(s.upper().replace("Z", "+00:00"))
    except ValueError:
        return ["invalid datetime"]
    return []


#: The named formats of Kubernetes' ``ConstantFormats``.
FORMATS: dict[str, Callable[[str], list[str]]] = {
    "dns1123Label": dns1123_label,
    "dns1123Subdomain": dns1123_subdomain,
    "dns1035Label": dns1035_label,
    "qualifiedName": qualified_name,
    "dns1123LabelPrefix": lambda s: dns1123_label(_mask_trailing_dash(s)),
    "dns1123SubdomainPrefix": lambda s: dns1123_subdomain(_mask_trailing_dash(s)),
    "dns1035LabelPrefix": lambda s: dns1035_label(_mask_trailing_dash(s)),
    "labelValue": label_value,
    "uri": _uri,
    "uuid": _uuid,
    "byte": _byte,
    "date": _date,
    "datetime": _datetime,
}


def named(name: str) -> list[dict[str, str]]:
    """``format.named(<string>)``'s Python half: ``[format]`` or ``[]`` (see the module docstring)."""
    return [{KEY: name}] if name in FORMATS else []


def validate(fmt: Any, s: str) -> list[list[str]]:
    """``<Format>.validate(<string>)``'s Python half: ``[]`` when valid, else ``[messages]``.

    Raises:
        LibraryError: ``fmt`` is not a format value.
    """
    if not (isinstance(fmt, dict) and fmt.get(KEY) in FORMATS):
        raise LibraryError("no such overload: expected a format")
    errs = FORMATS[fmt[KEY]](s)
    return [errs] if errs else []


def declarations() -> list[Any]:
    """The format library's functions."""
    decls = [function(f"format.{name}", f"tg_format_{name}", VALUE, [],
                      lambda name=name: {KEY: name}, rule=PYTHON_CONSTANT) for name in FORMATS]
    decls.append(function("__tg_format_named", "tg_format_named", T.List(VALUE), [T.STRING], named,
                          rule=PYTHON_PART))
    decls.append(member("__tg_validate", "tg_format_validate", T.List(T.List(T.STRING)), [VALUE, T.STRING],
                        validate, rule=PYTHON_MESSAGES))
    return decls
