"""Expired, not-yet-valid and mismatched pairs are refused on (re)load."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from webhook.tls.generate import CertificateRejected, check_pair
from webhook.tls.reload import CertReloader

NOW = dt.datetime(2026, 11, 23, 12, 0, tzinfo=dt.UTC)
DAY = dt.timedelta(days=1)


def make_pair(not_before: dt.datetime, not_after: dt.datetime) -> tuple[bytes, bytes]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(not_before).not_valid_after(not_after)
            .sign(key, hashes.SHA256()))
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    return cert.public_bytes(serialization.Encoding.PEM), key_pem


def write(directory: Path, pair: tuple[bytes, bytes]) -> tuple[Path, Path]:
    cert, key = directory / "tls.crt", directory / "tls.key"
    cert.write_bytes(pair[0])
    key.write_bytes(pair[1])
    return cert, key


@pytest.mark.parametrize(("window", "reason"), [
    ((NOW - 10 * DAY, NOW - DAY), "expired"),
    ((NOW + DAY, NOW + 10 * DAY), "not_yet_valid"),
])
def test_check_pair_refuses_a_pair_outside_its_validity(window: tuple[dt.datetime, dt.datetime], reason: str) -> None:
    cert, key = make_pair(*window)
    with pytest.raises(CertificateRejected) as e:
        check_pair(cert, key, now=NOW.timestamp())
    assert e.value.reason == reason


def test_check_pair_refuses_a_key_of_another_certificate_and_garbage() -> None:
    cert, _ = make_pair(NOW - DAY, NOW + DAY)
    _, other_key = make_pair(NOW - DAY, NOW + DAY)
    with pytest.raises(CertificateRejected) as e:
        check_pair(cert, other_key, now=NOW.timestamp())
    assert e.value.reason == "key_mismatch"
    with pytest.raises(CertificateRejected) as e:
        check_pair(cert[: len(cert) // 2], other_key, now=NOW.timestamp())
    assert e.value.reason == "malformed"


def test_a_valid_pair_passes() -> None:
    cert, key = make_pair(NOW - DAY, NOW + DAY)
    info = check_pair(cert, key, now=NOW.timestamp())
    assert info.not_after == (NOW + DAY).timestamp()


@pytest.mark.parametrize(("window", "reason"), [
    ((NOW - 10 * DAY, NOW - DAY), "expired"),
    ((NOW + DAY, NOW + 10 * DAY), "not_yet_valid"),
])
def test_reload_keeps_serving_the_old_pair(tmp_path: Path, window: tuple[dt.datetime, dt.datetime],
                                           reason: str) -> None:
    cert, key = write(tmp_path, make_pair(NOW - DAY, NOW + 30 * DAY))
    results: list[str] = []
    reloader = CertReloader(cert, key, on_reload=results.append, clock=NOW.timestamp)
    served = reloader.info
    write(tmp_path, make_pair(*window))
    assert reloader.reload_if_changed() is False
    assert results == ["rejected"]
    assert reloader.info == served
    assert reloader.certificate_status()["lastReload"]["reason"] == reason


def test_a_not_yet_valid_pair_is_taken_once_valid(tmp_path: Path) -> None:
    cert, key = write(tmp_path, make_pair(NOW - DAY, NOW + 30 * DAY))
    now = [NOW.timestamp()]
    results: list[str] = []
    reloader = CertReloader(cert, key, on_reload=results.append, clock=lambda: now[0])
    write(tmp_path, make_pair(NOW + DAY, NOW + 60 * DAY))
    assert reloader.reload_if_changed() is False
    now[0] += 2 * DAY.total_seconds()
    assert reloader.reload_if_changed() is True
    assert results == ["rejected", "success"]
    assert reloader.expiry == (NOW + 60 * DAY).timestamp()


def test_an_expired_pair_at_start_up_stops_the_process(tmp_path: Path) -> None:
    cert, key = write(tmp_path, make_pair(NOW - 10 * DAY, NOW - DAY))
    with pytest.raises(CertificateRejected):
        CertReloader(cert, key, clock=NOW.timestamp)


@pytest.mark.parametrize(("days_left", "soon"), [(30, False), (7.5, False), (6.9, True), (0.5, True)])
def test_certificate_status_flags_expiry_within_seven_days(tmp_path: Path, days_left: float, soon: bool) -> None:
    cert, key = write(tmp_path, make_pair(NOW - DAY, NOW + days_left * DAY))
    status = CertReloader(cert, key, clock=NOW.timestamp).certificate_status()
    assert status["expiringSoon"] is soon
    assert status["expired"] is False
    assert status["expiresInSeconds"] == pytest.approx(days_left * 86400)
    assert status["notAfter"] == (NOW + days_left * DAY).isoformat().replace("+00:00", "Z")


def test_certificate_status_at_a_later_time_reports_expired(tmp_path: Path) -> None:
    cert, key = write(tmp_path, make_pair(NOW - DAY, NOW + DAY))
    status = CertReloader(cert, key, clock=NOW.timestamp).certificate_status(now=(NOW + 2 * DAY).timestamp())
    assert status["expired"] is True and status["expiringSoon"] is True
