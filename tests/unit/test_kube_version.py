"""webhook.kube.version: the API server's version and what an older one lacks."""

from __future__ import annotations

import pytest

from webhook.kube.version import ServerVersion, unsupported


@pytest.mark.parametrize(("info", "expected"), [
    ({"major": "1", "minor": "20", "gitVersion": "v1.20.2"}, (1, 20)),
    ({"major": "1", "minor": "30+", "gitVersion": "v1.30.4-eks-1234"}, (1, 30)),
    ({"gitVersion": "v1.36.0"}, (1, 36)),
])
def test_versions_parse(info: dict[str, object], expected: tuple[int, int]) -> None:
    v = ServerVersion.parse(info)
    assert (v.major, v.minor) == expected


def test_no_version_is_refused() -> None:
    with pytest.raises(ValueError, match="no version number"):
        ServerVersion.parse({"gitVersion": "unknown"})


def test_an_old_server_is_named_with_what_it_lacks() -> None:
    line = unsupported(ServerVersion.parse({"major": "1", "minor": "20", "gitVersion": "v1.20.2"}))
    assert line is not None and "\n" not in line
    assert "v1.20.2" in line and "1.30" in line
    assert "matchConditions" in line and "kubernetes.io/metadata.name" in line and "EphemeralContainers" in line
    line = unsupported(ServerVersion.parse({"major": "1", "minor": "27", "gitVersion": "v1.27.1"}))
    assert line is not None and "matchConditions" in line and "metadata.name" not in line


@pytest.mark.parametrize("minor", ["30", "36"])
def test_a_supported_server_says_nothing(minor: str) -> None:
    assert unsupported(ServerVersion.parse({"major": "1", "minor": minor, "gitVersion": f"v1.{minor}.0"})) is None
