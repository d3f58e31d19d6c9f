"""``tollgate certs``: usable certificates or one line and exit 2; a CA that can be kept and reused."""

from __future__ import annotations

import datetime as dt
import ipaddress
import stat
from pathlib import Path

import pytest
from cryptography import x509

from webhook.cli.main import main
from webhook.tls import generate as certs


def run_certs(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = main(["certs", *argv])
    out, err = capsys.readouterr()
    return status, out, err


def load(path: Path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


def test_writes_a_ca_with_its_key_and_a_serving_certificate_it_signed(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _err = run_certs(capsys, "--out-dir", str(tmp_path), "--dns-name", "*.example.com", "--ip", "::1",
                                  "--days", "1")
    assert status == 0
    assert out.strip() == certs.ca_bundle((tmp_path / "ca.crt").read_bytes())
    assert {p.name: stat.S_IMODE(p.stat().st_mode) & 0o077 for p in tmp_path.iterdir()} == {
        "ca.crt": 0o044, "ca.key": 0, "tls.crt": 0o044, "tls.key": 0}
    ca, serving = load(tmp_path / "ca.crt"), load(tmp_path / "tls.crt")
    serving.verify_directly_issued_by(ca)
    certs.load_ca((tmp_path / "ca.crt").read_bytes(), (tmp_path / "ca.key").read_bytes(),
                  now=dt.datetime.now().timestamp())
    sans = serving.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sans.get_values_for_type(x509.DNSName) == [
        "tollgate", "tollgate.tollgate-system", "tollgate.tollgate-system.svc",
        "tollgate.tollgate-system.svc.cluster.local", "*.example.com"]
    assert sans.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("::1")]
    assert serving.not_valid_after_utc - serving.not_valid_before_utc < dt.timedelta(days=1, minutes=6)
    assert ca.not_valid_after_utc > serving.not_valid_after_utc + dt.timedelta(days=3000)  # outlives it


def test_reusing_the_ca_keeps_the_ca_bundle_and_reissues_the_serving_certificate(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _status, first, _err = run_certs(capsys, "--out-dir", str(tmp_path))
    key, serving = (tmp_path / "ca.key").read_bytes(), (tmp_path / "tls.crt").read_bytes()
    status, again, err = run_certs(capsys, "--out-dir", str(tmp_path), "--ca-cert", str(tmp_path / "ca.crt"),
                                   "--ca-key", str(tmp_path / "ca.key"))
    assert status == 0 and again == first
    assert err == f"wrote {tmp_path}/ca.crt, {tmp_path}/tls.crt, {tmp_path}/tls.key\n"
    assert (tmp_path / "ca.key").read_bytes() == key and (tmp_path / "tls.crt").read_bytes() != serving
    load(tmp_path / "tls.crt").verify_directly_issued_by(load(tmp_path / "ca.crt"))
    status, kept, err = run_certs(capsys, "--out-dir", str(tmp_path))  # a re-run keeps the CA it finds, said so
    assert status == 0 and kept == first and err.startswith(f"tollgate certs: keeping the CA in {tmp_path} ")
    assert (tmp_path / "ca.key").read_bytes() == key
    status, fresh, err = run_certs(capsys, "--out-dir", str(tmp_path), "--new-ca")  # replaced only when asked
    assert status == 0 and fresh != first and err.startswith(f"tollgate certs: replacing the CA in {tmp_path} ")
    assert (tmp_path / "ca.key").read_bytes() != key


def test_new_ca_contradicts_a_given_ca(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status, _out, err = run_certs(capsys, "--out-dir", str(tmp_path), "--new-ca", "--ca-cert", "a", "--ca-key", "b")
    assert status == 2 and err == "tollgate certs: --new-ca and --ca-cert/--ca-key contradict each other\n"


def test_a_ca_expiring_first_caps_the_serving_certificate_with_a_warning(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run_certs(capsys, "--out-dir", str(tmp_path / "ca"), "--ca-days", "10", "--days", "10")[0] == 0
    status, _out, err = run_certs(capsys, "--out-dir", str(tmp_path / "new"), "--ca-cert", str(tmp_path / "ca/ca.crt"),
                                  "--ca-key", str(tmp_path / "ca/ca.key"), "--days", "30")
    assert status == 0 and err.startswith("tollgate certs: warning: the CA expires at ")
    assert load(tmp_path / "new/tls.crt").not_valid_after_utc <= load(tmp_path / "ca/ca.crt").not_valid_after_utc
    assert not (tmp_path / "new/ca.key").exists()  # the kept CA's key stays where it is kept


@pytest.fixture
def other(tmp_path: Path) -> Path:
    """A CA, a second CA, and an expired CA, each with its key."""
    certs.write_certs(tmp_path / "a", dns_names=["a"], days=1)
    certs.write_certs(tmp_path / "b", dns_names=["b"], days=1)
    now = dt.datetime.now(dt.UTC)
    ca_pem, key_pem = certs.new_ca(days=1, now=now - dt.timedelta(days=3))
    (tmp_path / "old").mkdir()
    (tmp_path / "old/ca.crt").write_bytes(ca_pem)
    (tmp_path / "old/ca.key").write_bytes(key_pem)
    return tmp_path


@pytest.mark.parametrize(("ca_cert", "ca_key", "message"), [
    ("a/ca.crt", "b/ca.key", "--ca-cert {d}/a/ca.crt: cannot sign with this CA: the CA key does not match the CA "
                             "certificate's public key"),
    ("a/tls.crt", "a/tls.key", "--ca-cert {d}/a/tls.crt: cannot sign with this CA: CN=a is not a CA certificate"),
    ("old/ca.crt", "old/ca.key", "--ca-cert {d}/old/ca.crt: cannot sign with this CA: CA expired at "),
    ("a/ca.key", "a/ca.key", "--ca-cert {d}/a/ca.key: cannot sign with this CA: CA certificate or key is not a "
                             "usable PEM"),
    ("a/nope.crt", "a/ca.key", "--ca-cert {d}/a/nope.crt: cannot read: No such file or directory"),
    ("a/ca.crt", None, "--ca-cert and --ca-key go together"),
])
def test_an_unusable_ca_is_one_line_exit_2_and_nothing_written(
        other: Path, capsys: pytest.CaptureFixture[str], ca_cert: str, ca_key: str | None, message: str) -> None:
    argv = ["--out-dir", str(other / "out"), "--ca-cert", str(other / ca_cert)]
    argv += ["--ca-key", str(other / ca_key)] if ca_key else []
    status, out, err = run_certs(capsys, *argv)
    assert status == 2 and out == "" and err.count("\n") == 1
    assert err.startswith(f"tollgate certs: {message.format(d=other)}"), err
    assert not (other / "out").exists()


@pytest.mark.parametrize(("argv", "message"), [
    (["--days", "-5"], "argument --days: invalid value -5: must be at least 1"),
    (["--days", "0"], "argument --days: invalid value 0: must be at least 1"),
    (["--ca-days", "0"], "argument --ca-days: invalid value 0: must be at least 1"),
    (["--ip", "not-an-ip"], "argument --ip: invalid IP address 'not-an-ip'"),
    (["--ip", "10.0.0.256"], "argument --ip: invalid IP address '10.0.0.256'"),
    (["--dns-name", "bad name!"], "argument --dns-name: invalid DNS name 'bad name!'"),
    (["--dns-name", "a..b"], "argument --dns-name: invalid DNS name 'a..b'"),
    (["--dns-name", "x" * 64], "argument --dns-name: invalid DNS name"),
    (["--service", "Tollgate"], "argument --service: invalid name 'Tollgate': must be a DNS label"),
    (["--namespace", "a.b"], "argument --namespace: invalid name 'a.b': must be a DNS label"),
])
def test_values_no_client_could_use_are_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], message: str) -> None:
    status, out, err = run_certs(capsys, "--out-dir", str(tmp_path / "out"), *argv)
    assert status == 2 and out == "" and err.count("\n") == 1
    assert err.startswith(f"tollgate certs: error: {message}"), err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("name", ["localhost", "*.tollgate.example", "A-1.example.COM", "x" * 63])
def test_valid_dns_names_are_accepted(tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str) -> None:
    assert run_certs(capsys, "--out-dir", str(tmp_path), "--dns-name", name)[0] == 0
