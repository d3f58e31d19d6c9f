"""Kyverno's CEL libraries that need no network, transcribed from github.com/kyverno/sdk extensions/cel/libs/*
(each library's lib_test.go/impl_test.go), in Tollgate's environment."""

from __future__ import annotations

import datetime

import pytest

from tests.unit.policy.library._cel import ENV, check, run
from webhook.policy.cel.library import kyverno_image, kyverno_yaml

DIGEST = "sha256:6aefddb645ee6963afd681b1845c661d0ea4c3b20ab9db86d9e753b203d385f2"
APISERVER = "registry.k8s.io/kube-apiserver-arm64"

USER = [
    # user/impl_test.go
    ("parseServiceAccount('system:serviceaccount:foo:bar')", "value", {"Namespace": "foo", "Name": "bar"}),
    ("parseServiceAccount('system:serviceaccount:foo:bar:baz')", "value", {"Namespace": "foo", "Name": "bar:baz"}),
    ("parseServiceAccount('something-else:123')", "value", {"Namespace": "", "Name": ""}),
    ("user.parseServiceAccount('system:serviceaccount:default:my-sa').Name == 'my-sa'", "value", True),
    ("parseServiceAccount(false)", "compile", "found no matching overload for 'parseServiceAccount'"),
]

HASH = [
    # hash/impl_test.go: hex digests of the UTF-8 bytes
    ("sha1('hello')", "value", "aaf4c61ddcc5e8a2dabede0f3b482cd9aea9434d"),
    ("sha256('hello')", "value", "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"),
    ("md5('hello')", "value", "5d41402abc4b2a76b9719d911017c592"),
    ("hash.sha256('hello') == sha256('hello') && hash.sha1('') == sha1('') && hash.md5('é') == md5('é')",
     "value", True),
]

MATH = [
    # math/impl_test.go
    ("math.round(10.125, 2)", "value", 10.13),
    ("math.round(10.125, 0)", "value", 10.0),
    ("math.round(12345.6789, -2)", "value", 12300.0),
    ("math.round(-2.5, 0)", "value", -3.0),  # Go's math.Round: halves away from zero
    ("math.round(2.5)", "value", 3.0),  # cel-cpp's own one-argument round
]

TIME = [
    # time/lib_test.go
    ("time.truncate(timestamp('2025-01-02T03:45:27Z'), duration('1h'))", "value",
     datetime.datetime(2025, 1, 2, 3, 0, tzinfo=datetime.UTC)),
    ("time.toCron(timestamp('2025-01-02T15:30:00Z'))", "value", "30 15 2 1 4"),
    ("time.toCron(timestamp('2025-01-05T00:07:00Z'))", "value", "7 0 5 1 0"),  # a Sunday is 0
    # Go's Time.Truncate counts from January 1, year 1 (a Monday), not from the Unix epoch (a Thursday).
    ("time.truncate(timestamp('2025-01-02T03:45:27Z'), duration('168h'))", "value",
     datetime.datetime(2024, 12, 30, tzinfo=datetime.UTC)),
    ("time.truncate(timestamp('2025-01-02T03:45:27Z'), duration('0s'))", "value",
     datetime.datetime(2025, 1, 2, 3, 45, 27, tzinfo=datetime.UTC)),
    ("time.now() - duration('3h') < time.now()", "value", True),
]

IMAGE = [
    # image/lib_test.go
    (f"parseImageReference('{APISERVER}:latest').tag()", "value", "latest"),
    (f"parseImageReference('{APISERVER}:@')", "error", f"could not parse reference: {APISERVER}:@"),
    (f"isImage('{APISERVER}:latest')", "value", True),
    (f"isImage('{APISERVER}:@')", "value", False),
    ("isImage(0)", "compile", "found no matching overload for 'isImage'"),
    (f"parseImageReference('{APISERVER}').containsDigest()", "value", False),
    (f"parseImageReference('{APISERVER}:latest').containsDigest()", "value", False),
    (f"parseImageReference('{APISERVER}@{DIGEST}').containsDigest()", "value", True),
    (f"parseImageReference('{APISERVER}:latest@{DIGEST}').containsDigest()", "value", True),
    (f"parseImageReference('{APISERVER}').registry() == 'registry.k8s.io'", "value", True),
    (f"parseImageReference('{APISERVER}').registry().matches('(registry.k8s.io|ghcr.io)')", "value", True),
    (f"parseImageReference('{APISERVER}').repository() == 'kube-apiserver-arm64'", "value", True),
    (f"parseImageReference('{APISERVER}:testtag').identifier()", "value", "testtag"),
    (f"parseImageReference('{APISERVER}').identifier()", "value", "latest"),
    (f"parseImageReference('{APISERVER}@{DIGEST}').identifier()", "value", DIGEST),
    (f"parseImageReference('{APISERVER}:latest@{DIGEST}').identifier()", "value", DIGEST),
    (f"parseImageReference('{APISERVER}:testtag').tag()", "value", "testtag"),
    (f"parseImageReference('{APISERVER}').tag()", "value", "latest"),
    (f"parseImageReference('{APISERVER}@{DIGEST}').tag()", "value", ""),
    (f"parseImageReference('{APISERVER}').digest()", "value", ""),
    (f"parseImageReference('{APISERVER}:testtag').digest()", "value", ""),
    (f"parseImageReference('{APISERVER}@{DIGEST}').digest()", "value", DIGEST),
    (f"parseImageReference('{APISERVER}:latest@{DIGEST}').digest() == '{DIGEST}'", "value", True),
    # go-containerregistry's defaults: Docker Hub, library/, latest; kyverno/policies' image(...) spelling.
    ("image('nginx').registry()", "value", "index.docker.io"),
    ("image('docker.io/nginx:1.25').repository()", "value", "library/nginx"),
    ("image('localhost:5000/team/app').registry()", "value", "localhost:5000"),
    ("image('ghcr.io/kyverno/test-busybox:1.28').registry() == 'ghcr.io'", "value", True),
    ("image('Nginx')", "error", "could not parse reference"),  # repositories are lowercase
    ("image('nginx@sha256:abc')", "error", "could not parse reference"),
    ("image('nginx') == image('nginx') && image('nginx') != image('nginx:latest')", "value", True),
]

JSON = [
    # json/impl_test.go (Go's encoding/json into any: numbers are float64)
    ('json.unmarshal(\'{"foo": "bar"}\')', "value", {"foo": "bar"}),
    ('json.unmarshal(\'{"a": [1, null, true, 2.5]}\').a', "value", [1.0, None, True, 2.5]),
    ("json.unmarshal('3') == 3.0 && type(json.unmarshal('3')) == double", "value", True),
    ("json.unmarshal('')", "error", "json:"),
    ('json.unmarshal(\'{"a": 1} x\')', "error", "json:"),
    ("json.unmarshal('NaN')", "error", "invalid character"),
    ("json.unmarshal('1e400')", "error", "cannot unmarshal number"),
]

YAML = [
    # yaml/impl_test.go, with sigs.k8s.io/yaml's conversion through JSON
    ("yaml.parse('species:\\n  dog: lab\\n  isGoodBoi: false\\nsnacks:\\n- chimken\\n- fries\\n')", "value",
     {"species": {"dog": "lab", "isGoodBoi": False}, "snacks": ["chimken", "fries"]}),
    ("yaml.parse('')", "value", None),
    ("yaml.parse('42') == 42.0", "value", True),
    ("yaml.parse('- a\\n- b\\n- c\\n')", "value", ["a", "b", "c"]),
    ("yaml.parse('1: one\\ntrue: yes\\nwhen: 2020-01-01')", "value", {"1": "one", "true": True, "when": "2020-01-01"}),
    ("yaml.parse('a: 1\\n---\\nb: 2')", "value", {"a": 1.0}),
    ("yaml.parse('a: [')", "error", "yaml:"),
]


@pytest.mark.parametrize(("expr", "kind", "expected"), USER + HASH + MATH + TIME + IMAGE + JSON + YAML)
def test_kyverno_library(expr: str, kind: str, expected: object) -> None:
    check(expr, kind, expected)


def test_time_now_is_the_clock() -> None:
    before = datetime.datetime.now(datetime.UTC)
    kind, now = run("time.now()")
    assert kind == "value" and before <= now <= datetime.datetime.now(datetime.UTC)


def test_yaml_refuses_a_billion_laughs() -> None:
    laughs = "a: &a ['lol','lol','lol','lol','lol','lol','lol','lol','lol']\n"
    for i, name in enumerate("bcdefghi"):
        prev = "abcdefghi"[i]
        laughs += f"{name}: &{name} [" + ",".join([f"*{prev}"] * 9) + "]\n"
    kind, message = run("yaml.parse(object.text)".replace("object.text", repr(laughs)))
    assert kind == "error" and f"more than {kyverno_yaml.MAX_NODES} nodes" in message


@pytest.mark.parametrize(("text", "message"), [
    ("a: &a [*a]", "recursive alias"),
    ("[" * (kyverno_yaml.MAX_DEPTH + 1) + "]" * (kyverno_yaml.MAX_DEPTH + 1), "nested deeper"),
    ("- &a x\n" + "- *a\n" * (kyverno_yaml.MAX_ALIASES + 1), "aliases"),
    ("a: " + "x" * kyverno_yaml.MAX_CHARS, "the limit is"),
])
def test_yaml_bounds(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        kyverno_yaml.parse(text)


def test_image_parsing_needs_no_registry() -> None:
    ref = kyverno_image.parse("ghcr.io/kyverno/test-busybox:1.28@" + DIGEST)
    assert ref == kyverno_image.Reference("ghcr.io", "kyverno/test-busybox", "", DIGEST)


CERT = """-----BEGIN CERTIFICATE-----
MIIC7TCCAdWgAwIBAgIBADANBgkqhkiG9w0BAQsFADAYMRYwFAYDVQQDDA0qLmt5
dmVybm8uc3ZjMB4XDTIyMTAxMDExNDYzMloXDTIzMTAxMDEyNDYzMlowGDEWMBQG
A1UEAwwNKi5reXZlcm5vLnN2YzCCASIwDQYJKoZIhvcNAQEBBQADggEPADCCAQoC
ggEBAOKF+2P0Ufp855hpdsGD4lYkd6oU7HZAOWm1XskAMwrdsqWwTNNAinyHRoPQ
IbNbGDQ+r6Cggc2mlxHJ90PnC2weHj5otaD17Z+ARZpJZ4HMWkEfFt8sxwo9vuQJ
RWihqNwFheowjswoSB1DHnPufrZHfztkMoRx278ZfHaIMdlSTg50ektkNDoHA3OJ
sxxw54X3HR1iq6SZwN8xNT0TI6B6BbfAYWMNmKCiZ2iV6kW//XnTEqGd2WcmhuP0
SjwO4tCJbj9oV6+Bj/uhFr7J4foErMaodYDBtQs/ul2tcAwSBHfnC2KcLbiZTZsC
0Rs0WPJ4YwF/cOsD7Z/RmLs4FHsCAwEAAaNCMEAwDgYDVR0PAQH/BAQDAgKkMA8G
A1UdEwEB/wQFMAMBAf8wHQYDVR0OBBYEFJaK+3Wfnf7rVkYBzMCLSaV56NMqMA0G
CSqGSIb3DQEBCwUAA4IBAQDY7F6b+t9BX7098JyGk6zeT39MoLdSv+8IaKXn+m8G
yOKn3CZkruko57ycvPd4taC0gggtmUYynFhwPMQr+boNrrK9rat8Jw3yPPsBq/8D
/s6tvwxSNXBfPUI5OvNIB/hA5XpJpdHQaCkYm+FWkcJsolkkbSOfVjUjImW26JHB
nnPPtR4Y7dx0SVoPS19IC0T5RmdvgqlXj4XbhTnX3QOujVHn8u+wQ8po7EngHDQs
+onfkp8ipe0QpEJL1ZdW2LhyDXGKrZ2y8UPZ9wYNzxHWaj1Thu4B9YFdsPUwWqSx
n9e+FygpoktlD8YgT7jwgiVKX7Koz++zyvMIdhvRrtgS
-----END CERTIFICATE-----"""

MODULUS = ("2859592590596222342452094735220710545174461679708817194323928990733190188852985609845830461162966012"
           "0574607501039902142361333982065793213267074854658525100799280158707840279479550961169213763526857247"
           "2986531417110039316426066620526749431914764886658423095833110973513319942674137767924626371927752400"
           "6277803606235351797953899497404512717520659790675152155853671904309521969853527969480062479567380935"
           "6898452438518041024126624051887044932164506019573725987204208750674129677584956156611454245004918943"
           "7715714927576394324596889318555269418863548807270249123841402380276973486346099528505131227342305210"
           "40730560514233467")


def test_x509_decode_certificate() -> None:
    # x509/impl_test.go Test_decode/decode_certificate
    program = ENV.compile("x509.decode(object.cert)")
    result = program.eval(ENV.Activation({"object": {"cert": CERT}})).plain_value()
    assert result["IsCA"] is True and result["BasicConstraintsValid"] is True
    assert result["KeyUsage"] == 37.0 and result["SerialNumber"] == 0.0 and result["PublicKeyAlgorithm"] == 1.0
    assert result["MaxPathLen"] == -1.0 and result["MaxPathLenZero"] is False
    assert result["NotBefore"] == "2022-10-10T11:46:32Z" and result["NotAfter"] == "2023-10-10T12:46:32Z"
    assert result["Issuer"]["CommonName"] == "*.kyverno.svc" and result["Issuer"]["SerialNumber"] == ""
    assert result["PublicKey"]["E"] == 65537.0 and result["PublicKey"]["N"] == MODULUS
    assert len(result["Extensions"]) == 3 and result["Extensions"][0]["Critical"] is True
    for raw in ("Raw", "RawIssuer", "RawSubject", "RawSubjectPublicKeyInfo", "RawTBSCertificate", "Signature"):
        assert result[raw]


@pytest.mark.parametrize(("text", "message"), [
    ("not pem", "failed to decode PEM block"),
    ("-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n", "neither contains a CERTIFICATE"),
])
def test_x509_decode_errors(text: str, message: str) -> None:
    kind, got = run(f"x509.decode({text!r})")
    assert kind == "error" and message in got
