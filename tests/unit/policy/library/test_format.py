"""Format library: transcribed from kubernetes staging/src/k8s.io/apiserver/pkg/cel/library/format_test.go."""

from __future__ import annotations

import pytest

from tests.unit.policy.library._cel import check, run
from webhook.policy.cel.library.format import FORMATS

LABEL = ("a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and "
         "end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is "
         "'[a-z0-9]([-a-z0-9]*[a-z0-9])?')")
SUBDOMAIN = ("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must "
             "start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is "
             "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')")
DNS1035 = ("a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic "
           "character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for "
           "validation is '[a-z]([-a-z0-9]*[a-z0-9])?')")
QUALIFIED = ("name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
             "alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is "
             "'([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')")
LABEL_VALUE = ("a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and "
               "must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', "
               "regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')")

# TestFormat: `validate` yields optional.none() (valid) or optional.of([messages]).
VALID = [
    'format.dns1123Label().validate("my-label-name")',
    'format.dns1123Subdomain().validate("apiextensions.k8s.io")',
    'format.qualifiedName().validate("apiextensions.k8s.io/v1beta1")',
    'format.dns1123LabelPrefix().validate("my-label-prefix-")',
    'format.dns1123SubdomainPrefix().validate("mysubdomain.prefix.-")',
    'format.dns1035LabelPrefix().validate("my-label-prefix-")',
    'format.uri().validate("http://example.com")',
    'format.uuid().validate("123e4567-e89b-12d3-a456-426614174000")',
    'format.byte().validate("aGVsbG8=")',
    'format.date().validate("2021-01-01")',
    'format.datetime().validate("2021-01-01T00:00:00Z")',
    'format.dns1123Label().validate("my-label-name")',
    'format.dns1123Subdomain().validate("example.com")',
    'format.dns1035Label().validate("my-label-name")',
    'format.qualifiedName().validate("my.name")',
    'format.date().validate("2020-01-01")',
    'format.datetime().validate("2020-01-01T00:00:00Z")',
    'format.labelValue().validate("my-cool-label-Value")',
]
INVALID = [
    ('format.dns1123Label().validate("contains a space")', [LABEL]),
    ('format.dns1123Subdomain().validate("contains a space")', [SUBDOMAIN]),
    ('format.dns1035Label().validate("contains a space")', [DNS1035]),
    ('format.qualifiedName().validate("contains a space")', [QUALIFIED]),
    ('format.dns1123LabelPrefix().validate("contains a space-")', [LABEL]),
    ('format.dns1123SubdomainPrefix().validate("contains a space-")', [SUBDOMAIN]),
    ('format.dns1035LabelPrefix().validate("contains a space-")', [DNS1035]),
    ('format.byte().validate("aGVsbG8")', ["invalid base64"]),
    ('format.date().validate("2020-01-32")', ["invalid date"]),
    ('format.datetime().validate("2020-01-32T00:00:00Z")', ["invalid datetime"]),
    ('format.labelValue().validate("my-cool-label-Value!!\\n\\n!!!")', [LABEL_VALUE]),
]


@pytest.mark.parametrize("expr", VALID)
def test_valid(expr: str) -> None:
    assert run(f"{expr} == optional.none()") == ("value", True)


@pytest.mark.parametrize(("expr", "messages"), INVALID)
def test_invalid(expr: str, messages: list[str]) -> None:
    assert run(f"{expr}.hasValue()") == ("value", True)
    assert run(f"{expr}.value()") == ("value", messages)


def test_unknown_format() -> None:
    check('format.named("unknown").hasValue()', "value", False)


# "lookup and comparison" over every ConstantFormats name, and pairwise inequality.
@pytest.mark.parametrize("name", sorted(FORMATS))
def test_named_lookup(name: str) -> None:
    check(f'format.named("{name}").hasValue()', "value", True)
    check(f'format.named("{name}").value() == format.{name}()', "value", True)
    for other in FORMATS:
        if other != name:
            check(f"format.{name}() == format.{other}()", "value", False)
