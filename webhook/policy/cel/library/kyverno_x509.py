"""Kyverno's x509 library: ``x509.decode(<pem>)``, a certificate or CSR as Kyverno's map (pure; no I/O).

Follows ``github.com/kyverno/sdk`` ``extensions/cel/libs/x509/impl.go``: the first PEM block of the string
(Go's ``pem.Decode``) is parsed (with ``cryptography``, as Go's ``crypto/x509`` parses it); only RSA keys
are accepted ("certificate should use rsa algorithm"); the result is the Go struct Kyverno builds,
JSON-encoded and decoded again, so field names are Go's (``IsCA``, ``NotAfter``, ``Issuer.CommonName``),
byte strings are base64, numbers are doubles and absent lists are ``null``:

* ``CERTIFICATE``: ``Raw``, ``RawTBSCertificate``, ``RawSubjectPublicKeyInfo``, ``RawSubject``,
  ``RawIssuer``, ``Signature``, ``PublicKeyAlgorithm`` (1: RSA), ``PublicKey`` (``{N: decimal string, E}``),
  ``SerialNumber`` (Go's ``Int64()``), ``Issuer`` (``pkix.Name``: ``Country``, ``Organization``,
  ``OrganizationalUnit``, ``Locality``, ``Province``, ``StreetAddress``, ``PostalCode``, ``SerialNumber``,
  ``CommonName``, ``Names``, ``ExtraNames``), ``NotBefore``/``NotAfter`` (RFC 3339), ``KeyUsage`` (Go's bit
  set), ``Extensions`` (``{Id, Critical, Value}``), ``ExtKeyUsage`` (Go's enum), ``BasicConstraintsValid``,
  ``IsCA``, ``MaxPathLen``, ``MaxPathLenZero``, ``AuthorityKeyId``, ``OCSPServer``,
  ``IssuingCertificateURL``, ``DNSNames``, ``EmailAddresses``, ``IPAddresses``, the name constraints
  (``PermittedDNSDomains``, ``ExcludedDNSDomains``, ``PermittedEmailAddresses``, ...;
  ``Permitted/ExcludedIPRanges`` as ``{IP, Mask}``), ``CRLDistributionPoints``, ``PolicyIdentifiers``;
* ``CERTIFICATE REQUEST``: Go's whole ``x509.CertificateRequest``: ``Raw``, ``RawTBSCertificateRequest``,
  ``RawSubjectPublicKeyInfo``, ``RawSubject``, ``Version``, ``Signature``, ``SignatureAlgorithm``,
  ``PublicKeyAlgorithm``, ``PublicKey``, ``Subject``, ``Attributes`` (``null``), ``Extensions``,
  ``ExtraExtensions``, ``DNSNames``, ``EmailAddresses``, ``IPAddresses``, ``URIs`` (``null``: Go's
  ``url.URL`` structs are not reproduced).

Cost: linear in the length of the PEM text (one DER parse); the result is at most a constant times that size.
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
import re
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from cryptography.x509.oid import AuthorityInformationAccessOID, ExtendedKeyUsageOID, NameOID

from webhook.policy.cel.cost import PYTHON_DECODED
from webhook.policy.cel.library._decl import LibraryError, T, function

_PEM = re.compile(r"-----BEGIN ([^\n-]*)-----\r?\n(.*?)-----END \1-----", re.DOTALL)
#: Go's ``x509.ExtKeyUsage`` values by OID.
_EXT_KEY_USAGE = {
    ExtendedKeyUsageOID.ANY_EXTENDED_KEY_USAGE.dotted_string: 0, ExtendedKeyUsageOID.SERVER_AUTH.dotted_string: 1,
    ExtendedKeyUsageOID.CLIENT_AUTH.dotted_string: 2, ExtendedKeyUsageOID.CODE_SIGNING.dotted_string: 3,
    ExtendedKeyUsageOID.EMAIL_PROTECTION.dotted_string: 4, "1.3.6.1.5.5.7.3.5": 5, "1.3.6.1.5.5.7.3.6": 6,
    "1.3.6.1.5.5.7.3.7": 7, ExtendedKeyUsageOID.TIME_STAMPING.dotted_string: 8,
    ExtendedKeyUsageOID.OCSP_SIGNING.dotted_string: 9, "1.3.6.1.4.1.311.10.3.3": 10, "2.16.840.1.113730.4.1": 11,
    "1.3.6.1.4.1.311.2.1.22": 12, "1.3.6.1.4.1.311.61.1.1": 13,
}
#: Go's ``x509.SignatureAlgorithm`` values by OID.
_SIGNATURE_ALGORITHMS = {
    "1.2.840.113549.1.1.2": 1, "1.2.840.113549.1.1.4": 2, "1.2.840.113549.1.1.5": 3, "1.2.840.113549.1.1.11": 4,
    "1.2.840.113549.1.1.12": 5, "1.2.840.113549.1.1.13": 6, "1.2.840.10040.4.3": 7, "2.16.840.1.101.3.4.3.2": 8,
    "1.2.840.10045.4.1": 9, "1.2.840.10045.4.3.2": 10, "1.2.840.10045.4.3.3": 11, "1.2.840.10045.4.3.4": 12,
    "1.2.840.113549.1.1.10": 13, "1.3.101.112": 16,
}
#: ``pkix.Name``'s fields by attribute OID (``FillFromRDNSequence``).
_NAME_LISTS = {NameOID.COUNTRY_NAME: "Country", NameOID.ORGANIZATION_NAME: "Organization",
               NameOID.ORGANIZATIONAL_UNIT_NAME: "OrganizationalUnit", NameOID.LOCALITY_NAME: "Locality",
               NameOID.STATE_OR_PROVINCE_NAME: "Province", NameOID.STREET_ADDRESS: "StreetAddress",
               NameOID.POSTAL_CODE: "PostalCode"}
#: Go's ``x509.KeyUsage`` bits, in order.
_KEY_USAGE_BITS = ("digital_signature", "content_commitment", "key_encipherment", "data_encipherment",
                   "key_agreement", "key_cert_sign", "crl_sign", "encipher_only", "decipher_only")


def _b64(data: bytes | None) -> str | None:
    return base64.b64encode(data).decode() if data is not None else None


def _oid(dotted: str) -> list[float]:
    return [float(p) for p in dotted.split(".")]


def _name(name: x509.Name) -> dict[str, Any]:
    """Go's ``pkix.Name`` as ``encoding/json`` writes it (nil lists are ``null``)."""
    out: dict[str, Any] = dict.fromkeys(_NAME_LISTS.values())
    out.update({"SerialNumber": "", "CommonName": ""})
    names = []
    for attribute in name:
        value = attribute.value if isinstance(attribute.value, str) else attribute.value.decode(errors="replace")
        names.append({"Type": _oid(attribute.oid.dotted_string), "Value": value})
        if attribute.oid in _NAME_LISTS:
            field = _NAME_LISTS[attribute.oid]
            out[field] = [*(out[field] or []), value]
        elif attribute.oid == NameOID.COMMON_NAME:
            out["CommonName"] = value
        elif attribute.oid == NameOID.SERIAL_NUMBER:
            out["SerialNumber"] = value
    out["Names"] = names or None
    out["ExtraNames"] = None
    return out


def _extensions(extensions: x509.Extensions) -> list[dict[str, Any]] | None:
    found = [{"Id": _oid(e.oid.dotted_string), "Critical": e.critical, "Value": _b64(_extension_der(e))}
             for e in extensions]
    return found or None


def _extension_der(extension: x509.Extension[Any]) -> bytes:
    value = extension.value
    der: bytes = value.value if isinstance(value, x509.UnrecognizedExtension) else value.public_bytes()
    return der


def _spki(key: Any) -> bytes:
    der: bytes = key.public_bytes(Encoding.DER, PublicFormat.SubjectPublicKeyInfo)
    return der


def _public_key(key: Any) -> dict[str, Any]:
    if not isinstance(key, rsa.RSAPublicKey):
        raise LibraryError("certificate should use rsa algorithm")
    numbers = key.public_numbers()
    return {"N": str(numbers.n), "E": float(numbers.e)}


def _get(extensions: x509.Extensions, ext_type: type[Any]) -> Any:
    try:
        return extensions.get_extension_for_class(ext_type)
    except x509.ExtensionNotFound:
        return None


def _general_names(names: Any, kind: type[Any]) -> list[str] | None:
    if names is None:
        return None
    found = [str(n.value) for n in names if isinstance(n, kind)]
    return found or None


def _int64(n: int) -> float:
    n &= (1 << 64) - 1
    return float(n - (1 << 64) if n >= 1 << 63 else n)


def _rfc3339(when: Any) -> str:
    return str(when.strftime("%Y-%m-%dT%H:%M:%SZ"))


def _ip_ranges(subtrees: Any) -> list[dict[str, str]] | None:
    if not subtrees:
        return None
    found = []
    for n in subtrees:
        if isinstance(n, x509.IPAddress) and isinstance(n.value, ipaddress.IPv4Network | ipaddress.IPv6Network):
            found.append({"IP": str(n.value.network_address), "Mask": _b64(n.value.netmask.packed) or ""})
    return found or None


def _certificate(cert: x509.Certificate) -> dict[str, Any]:
    public_key = _public_key(cert.public_key())
    exts = cert.extensions
    basic = _get(exts, x509.BasicConstraints)
    key_usage = _get(exts, x509.KeyUsage)
    ext_key_usage = _get(exts, x509.ExtendedKeyUsage)
    san = _get(exts, x509.SubjectAlternativeName)
    aki = _get(exts, x509.AuthorityKeyIdentifier)
    aia = _get(exts, x509.AuthorityInformationAccess)
    constraints = _get(exts, x509.NameConstraints)
    crl = _get(exts, x509.CRLDistributionPoints)
    policies = _get(exts, x509.CertificatePolicies)
    usage = 0
    if key_usage is not None:
        for bit, name in enumerate(_KEY_USAGE_BITS):
            try:
                if getattr(key_usage.value, name):
                    usage |= 1 << bit
            except ValueError:  # encipher_only/decipher_only without key_agreement
                pass
    path_len = basic.value.path_length if basic is not None else None
    permitted = constraints.value.permitted_subtrees if constraints is not None else None
    excluded = constraints.value.excluded_subtrees if constraints is not None else None
    access = list(aia.value) if aia is not None else []
    return {
        "Raw": _b64(cert.public_bytes(Encoding.DER)),
        "RawTBSCertificate": _b64(cert.tbs_certificate_bytes),
        "RawSubjectPublicKeyInfo": _b64(_spki(cert.public_key())),
        "RawSubject": _b64(cert.subject.public_bytes()),
        "RawIssuer": _b64(cert.issuer.public_bytes()),
        "Signature": _b64(cert.signature),
        "PublicKeyAlgorithm": 1.0,
        "PublicKey": public_key,
        "SerialNumber": _int64(cert.serial_number),
        "Issuer": _name(cert.issuer),
        "NotBefore": _rfc3339(cert.not_valid_before_utc),
        "NotAfter": _rfc3339(cert.not_valid_after_utc),
        "KeyUsage": float(usage),
        "Extensions": _extensions(exts),
        "ExtraExtensions": None,
        "ExtKeyUsage": [float(_EXT_KEY_USAGE[o.dotted_string]) for o in ext_key_usage.value
                        if o.dotted_string in _EXT_KEY_USAGE] or None if ext_key_usage is not None else None,
        "BasicConstraintsValid": basic is not None,
        "IsCA": bool(basic is not None and basic.value.ca),
        "MaxPathLen": float(path_len if path_len is not None else (-1 if basic is not None else 0)),
        "MaxPathLenZero": path_len == 0,
        "AuthorityKeyId": _b64(aki.value.key_identifier) if aki is not None else None,
        "OCSPServer": [str(a.access_location.value) for a in access
                       if a.access_method == AuthorityInformationAccessOID.OCSP] or None,
        "IssuingCertificateURL": [str(a.access_location.value) for a in access
                                  if a.access_method == AuthorityInformationAccessOID.CA_ISSUERS] or None,
        "DNSNames": _general_names(san.value if san else None, x509.DNSName),
        "EmailAddresses": _general_names(san.value if san else None, x509.RFC822Name),
        "IPAddresses": _general_names(san.value if san else None, x509.IPAddress),
        "PermittedDNSDomainsCritical": bool(constraints is not None and constraints.critical),
        "PermittedDNSDomains": _general_names(permitted, x509.DNSName),
        "ExcludedDNSDomains": _general_names(excluded, x509.DNSName),
        "PermittedIPRanges": _ip_ranges(permitted),
        "ExcludedIPRanges": _ip_ranges(excluded),
        "PermittedEmailAddresses": _general_names(permitted, x509.RFC822Name),
        "ExcludedEmailAddresses": _general_names(excluded, x509.RFC822Name),
        "PermittedURIDomains": _general_names(permitted, x509.UniformResourceIdentifier),
        "ExcludedURIDomains": _general_names(excluded, x509.UniformResourceIdentifier),
        "CRLDistributionPoints": [str(n.value) for point in crl.value for n in (point.full_name or [])
                                  if isinstance(n, x509.UniformResourceIdentifier)] or None if crl else None,
        "PolicyIdentifiers": [_oid(p.policy_identifier.dotted_string) for p in policies.value] or None
        if policies is not None else None,
    }


def _request(csr: x509.CertificateSigningRequest) -> dict[str, Any]:
    public_key = _public_key(csr.public_key())
    san = _get(csr.extensions, x509.SubjectAlternativeName)
    return {
        "Raw": _b64(csr.public_bytes(Encoding.DER)),
        "RawTBSCertificateRequest": _b64(csr.tbs_certrequest_bytes),
        "RawSubjectPublicKeyInfo": _b64(_spki(csr.public_key())),
        "RawSubject": _b64(csr.subject.public_bytes()),
        "Version": 0.0,
        "Signature": _b64(csr.signature),
        "SignatureAlgorithm": float(_SIGNATURE_ALGORITHMS.get(csr.signature_algorithm_oid.dotted_string, 0)),
        "PublicKeyAlgorithm": 1.0,
        "PublicKey": public_key,
        "Subject": _name(csr.subject),
        "Attributes": None,
        "Extensions": _extensions(csr.extensions),
        "ExtraExtensions": None,
        "DNSNames": _general_names(san.value if san else None, x509.DNSName),
        "EmailAddresses": _general_names(san.value if san else None, x509.RFC822Name),
        "IPAddresses": _general_names(san.value if san else None, x509.IPAddress),
        "URIs": None,
    }


def decode(text: str) -> dict[str, Any]:
    """``x509.decode(<string>) -> dyn``: the first PEM block, a certificate or certificate request.

    Raises:
        LibraryError: Kyverno's errors ("failed to decode PEM block", "PEM block neither contains a
            CERTIFICATE or CERTIFICATE REQUEST", "certificate should use rsa algorithm") or a parse error.
    """
    m = _PEM.search(text)
    if m is None:
        raise LibraryError("failed to decode PEM block")
    try:
        der = base64.b64decode("".join(m.group(2).split()), validate=True)
    except (binascii.Error, ValueError):
        raise LibraryError("failed to decode PEM block") from None
    kind = m.group(1)
    try:
        if kind == "CERTIFICATE":
            return _certificate(x509.load_der_x509_certificate(der))
        if kind == "CERTIFICATE REQUEST":
            return _request(x509.load_der_x509_csr(der))
    except ValueError as e:
        raise LibraryError(f"x509: {e}") from None
    raise LibraryError("PEM block neither contains a CERTIFICATE or CERTIFICATE REQUEST")


def declarations() -> list[Any]:
    """The x509 library's function."""
    return [function("x509.decode", "tg_kyverno_x509_decode", T.DYN, [T.STRING], decode,
                     rule=PYTHON_DECODED)]
