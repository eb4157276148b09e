"""API keys from the SDK's side.

Offline: where ``ConnectionConfig.resolve`` finds the key (``api_key=``, ``$SANDLOT_API_KEY``,
the local admin key file, which is read only for a server on this machine), that the key is
never shown (repr, error messages), and how the server's stable codes ``unauthenticated``,
``forbidden``, ``policy_denied``, ``tenant_quota_exceeded``, ``name_taken`` and
``sandbox_contained`` map to exception classes.

Live (marked ``live``, against the server conftest.py starts): no key, a wrong key, a
malformed one and E2B's key are refused with :class:`sandlot.Unauthenticated` saying where
the SDK looked; the key file fallback works; a second tenant's member key cannot see the
first tenant's sandboxes, cannot do admin work (:class:`sandlot.Forbidden`), hits its quota
(:class:`sandlot.TenantQuotaExceeded` with ``retry_after``) and stops working once revoked.
"""

from __future__ import annotations

import json
import os
import secrets
from pathlib import Path
from typing import Any, Dict, Iterator

import httpx
import pytest

import sandlot
from sandlot import AsyncSandbox, ConnectionConfig, Sandbox
from sandlot import errors as E
from sandlot.templates import Templates

from ._e2b import server_key
from ._fake import FakeSandlot, api_error

KEY_VARS = ("SANDLOT_URL", "SANDLOT_API_KEY", "SANDLOT_DATA_DIR", "XDG_DATA_HOME")
# A key of the right shape that no server issued.
UNKNOWN_KEY = "sl_aaaaaaaa_" + "a" * 32


def _write_key(dir: Path, key: str) -> Path:
    dir.mkdir(parents=True, exist_ok=True)
    path = dir / "api-key"
    path.write_text(key + "\n")
    path.chmod(0o600)
    return path


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No key in the environment and a HOME with no key file; returns that HOME."""
    for var in KEY_VARS:
        monkeypatch.delenv(var, raising=False)
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    return home


# -- where the key comes from (offline) -------------------------------------------------------


def test_explicit_key_then_environment_then_key_file(clean_env: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    data = tmp_path / "data"
    _write_key(data, "sl_fromfile")
    monkeypatch.setenv("SANDLOT_DATA_DIR", str(data))
    cfg = ConnectionConfig.resolve("http://127.0.0.1:7878")
    assert cfg.api_key == "sl_fromfile" and cfg.key_source == str(data / "api-key")
    assert cfg.headers()["Authorization"] == "Bearer sl_fromfile"
    monkeypatch.setenv("SANDLOT_API_KEY", "sl_fromenv")
    cfg = ConnectionConfig.resolve("http://127.0.0.1:7878")
    assert (cfg.api_key, cfg.key_source) == ("sl_fromenv", "$SANDLOT_API_KEY")
    cfg = ConnectionConfig.resolve("http://127.0.0.1:7878", "sl_given")
    assert (cfg.api_key, cfg.key_source) == ("sl_given", "api_key=")


@pytest.mark.parametrize(
    "url", ["http://127.0.0.1:7878", "127.0.0.1:7878", "http://localhost:7878/v1", "http://[::1]:7878", "http://127.8.9.10:1"]
)
def test_the_key_file_is_read_for_a_server_on_this_machine(url: str, clean_env: Path) -> None:
    # The default data dir: ~/.local/share/sandlot (what `sandlot serve` uses without --data-dir).
    path = _write_key(clean_env / ".local" / "share" / "sandlot", "sl_local")
    cfg = ConnectionConfig.resolve(url)
    assert cfg.api_key == "sl_local" and cfg.key_source == str(path)


def test_xdg_data_home_is_honoured(clean_env: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _write_key(clean_env / ".local" / "share" / "sandlot", "sl_home")
    _write_key(tmp_path / "xdg" / "sandlot", "sl_xdg")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert ConnectionConfig.resolve("http://127.0.0.1:7878").api_key == "sl_xdg"
    # a relative XDG_DATA_HOME is ignored, as the XDG spec says
    monkeypatch.setenv("XDG_DATA_HOME", "relative/dir")
    assert ConnectionConfig.resolve("http://127.0.0.1:7878").api_key == "sl_home"


@pytest.mark.parametrize(
    "url",
    [
        "http://10.1.2.3:7878",
        "https://sandlot.example.test",
        "http://127.0.0.1.example.test:7878",  # a host name that only starts like loopback
        "http://127.0.0.1@example.test:7878",  # userinfo, the host is example.test
        "http://localhost.example.test",
        "http://[::ffff:10.0.0.1]:7878",
    ],
)
def test_the_key_file_is_not_sent_to_another_machine(url: str, clean_env: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _write_key(clean_env / ".local" / "share" / "sandlot", "sl_local")
    _write_key(tmp_path / "data", "sl_local")
    monkeypatch.setenv("SANDLOT_DATA_DIR", str(tmp_path / "data"))
    cfg = ConnectionConfig.resolve(url)
    assert cfg.api_key is None and cfg.key_source is None and "Authorization" not in cfg.headers()
    # An explicit key still goes wherever it is told to.
    monkeypatch.setenv("SANDLOT_API_KEY", "sl_env")
    assert ConnectionConfig.resolve(url).api_key == "sl_env"


def test_missing_empty_or_unreadable_key_file_means_no_key(clean_env: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("SANDLOT_DATA_DIR", str(tmp_path / "nowhere"))
    assert ConnectionConfig.resolve("http://127.0.0.1:7878").api_key is None
    _write_key(tmp_path / "empty", "  ")
    monkeypatch.setenv("SANDLOT_DATA_DIR", str(tmp_path / "empty"))
    assert ConnectionConfig.resolve("http://127.0.0.1:7878").api_key is None
    (tmp_path / "dir" / "api-key").mkdir(parents=True)  # not a file
    monkeypatch.setenv("SANDLOT_DATA_DIR", str(tmp_path / "dir"))
    assert ConnectionConfig.resolve("http://127.0.0.1:7878").api_key is None
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "api-key").write_bytes(b"\xff\xfe\x00")  # not text
    monkeypatch.setenv("SANDLOT_DATA_DIR", str(tmp_path / "bin"))
    assert ConnectionConfig.resolve("http://127.0.0.1:7878").api_key is None


def test_the_key_is_never_shown(clean_env: Path) -> None:
    cfg = ConnectionConfig.resolve("http://127.0.0.1:7878", UNKNOWN_KEY)
    assert UNKNOWN_KEY not in repr(cfg) and UNKNOWN_KEY not in str(cfg)


# -- what a refusal looks like (offline, through the fake) ------------------------------------


def _refusing(status: int, code: str, message: str, **headers: str) -> FakeSandlot:
    fake = FakeSandlot()

    def hook(req: httpx.Request) -> httpx.Response:
        resp = api_error(status, code, message)
        resp.headers.update(headers)
        return resp

    fake.hook = hook
    return fake


def test_unauthenticated_says_where_the_sdk_looked(clean_env: Path) -> None:
    fake = _refusing(401, "unauthenticated", "missing API key: send `Authorization: Bearer <key>`")
    with pytest.raises(sandlot.Unauthenticated) as err:
        Sandbox(url="http://127.0.0.1:7878", transport=httpx.MockTransport(fake))
    e = err.value
    assert isinstance(e, sandlot.AuthenticationError) and (e.code, e.status) == ("unauthenticated", 401)
    assert "missing API key" in str(e) and "$SANDLOT_API_KEY" in str(e)
    assert str(clean_env / ".local" / "share" / "sandlot" / "api-key") in str(e)
    assert "authorization" not in fake.requests[0]["headers"]

    with pytest.raises(sandlot.Unauthenticated) as err:
        Sandbox(url="http://sandlot.test", transport=httpx.MockTransport(fake))
    assert "only for a server on this machine" in str(err.value)

    fake = _refusing(401, "unauthenticated", "unknown API key")
    with pytest.raises(sandlot.Unauthenticated) as err:
        Sandbox(url="http://sandlot.test", api_key=UNKNOWN_KEY, transport=httpx.MockTransport(fake))
    assert "from api_key=" in str(err.value) and UNKNOWN_KEY not in str(err.value)
    assert fake.requests[0]["headers"]["authorization"] == f"Bearer {UNKNOWN_KEY}"


async def test_unauthenticated_async(clean_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SANDLOT_API_KEY", UNKNOWN_KEY)
    fake = _refusing(401, "unauthenticated", "unknown API key")
    with pytest.raises(sandlot.Unauthenticated) as err:
        await AsyncSandbox.create(url="http://sandlot.test", transport=httpx.MockTransport(fake))
    assert "from $SANDLOT_API_KEY" in str(err.value) and UNKNOWN_KEY not in str(err.value)


def test_quota_refusal_carries_retry_after(clean_env: Path) -> None:
    fake = _refusing(429, "tenant_quota_exceeded", "tenant t is at max_sandboxes (1); retry in 7 s", **{"Retry-After": "7"})
    with pytest.raises(sandlot.TenantQuotaExceeded) as err:
        Sandbox(url="http://sandlot.test", api_key="k", transport=httpx.MockTransport(fake))
    assert err.value.retry_after == 7.0 and err.value.status == 429


@pytest.mark.parametrize(
    "status,code,cls",
    [
        (401, "unauthenticated", E.Unauthenticated),
        (403, "forbidden", E.Forbidden),
        (403, "policy_denied", E.PolicyDenied),
        (429, "tenant_quota_exceeded", E.TenantQuotaExceeded),
        (409, "name_taken", E.NameTaken),
        (404, "tenant_not_found", E.TenantNotFound),
        (404, "key_not_found", E.KeyNotFound),
        (422, "invalid_policy", E.InvalidPolicy),
        (409, "sandbox_contained", E.SandboxContained),
    ],
)
def test_governance_codes_map_to_classes(status: int, code: str, cls: type) -> None:
    err = E.error_from_response(status, json.dumps({"error": {"code": code, "message": "m"}}).encode())
    assert type(err) is cls and (err.code, err.status, err.message) == (code, status, "m")


def test_governance_class_tree_and_fallbacks() -> None:
    assert issubclass(E.Unauthenticated, E.AuthenticationError) and issubclass(E.Forbidden, E.AuthenticationError)
    assert issubclass(E.PolicyDenied, E.Forbidden) and not issubclass(E.PortNotExposed, E.Forbidden)
    assert issubclass(E.TenantNotFound, E.NotFoundError) and issubclass(E.InvalidPolicy, E.InvalidRequest)
    # a name taken is not a busy sandbox (both are 409)
    assert not issubclass(E.NameTaken, E.SandboxBusy)
    assert type(E.error_from_response(401, b"")) is E.Unauthenticated
    assert type(E.error_from_response(403, b"")) is E.Forbidden
    err = E.error_from_response(429, b"slow down", {"retry-after": "2.5"})
    assert type(err) is E.TenantQuotaExceeded and err.retry_after == 2.5 and err.code == "too_many_requests"
    assert E.error_from_response(429, b"", {"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}).retry_after is None
    assert E.error_from_response(429, b"", {"retry-after": "-1"}).retry_after is None
    for name in ("Unauthenticated", "Forbidden", "PolicyDenied", "TenantQuotaExceeded", "NameTaken", "SandboxContained"):
        assert getattr(sandlot, name) is getattr(E, name) and name in sandlot.__all__ and name in E.__all__


# -- against the real server --------------------------------------------------------------------


def _admin(url: str, method: str, path: str, **kw: Any) -> httpx.Response:
    headers = {"Authorization": f"Bearer {os.environ['SANDLOT_API_KEY']}"}
    return httpx.request(method, f"{url}{path}", headers=headers, timeout=30, **kw)


@pytest.mark.live
@pytest.mark.parametrize("key", [None, UNKNOWN_KEY, "not-a-key", "sl_" + "x" * 300, "e2b"])
def test_live_refusals(key: Any, sandlot_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("SANDLOT_API_KEY")
    monkeypatch.setenv("SANDLOT_DATA_DIR", str(tmp_path / "no-key-here"))
    if key == "e2b":
        key = server_key()  # E2B's key is not a sandlot key
    with pytest.raises(sandlot.Unauthenticated) as err:
        Sandbox(url=sandlot_url, api_key=key)
    e = err.value
    assert (e.code, e.status) == ("unauthenticated", 401), e
    assert "API key" in e.message
    if key is None:
        assert "the SDK sent no key" in e.message and str(tmp_path / "no-key-here" / "api-key") in e.message
    else:
        assert "from api_key=" in e.message and key not in e.message
    # Nothing that needs a key answers without one; health and the API description do.
    for call in (lambda: Templates(url=sandlot_url, api_key=key).list(), lambda: Sandbox.list(url=sandlot_url, api_key=key)):
        with pytest.raises(sandlot.Unauthenticated):
            call()
    assert Sandbox.health(url=sandlot_url, api_key=key)


@pytest.mark.live
def test_live_key_file_fallback(sandlot_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    key = os.environ["SANDLOT_API_KEY"]
    monkeypatch.delenv("SANDLOT_API_KEY")
    path = _write_key(tmp_path / "data", key)
    monkeypatch.setenv("SANDLOT_DATA_DIR", str(tmp_path / "data"))
    with Sandbox(url=sandlot_url) as sb:
        assert sb._http.cfg.key_source == str(path)
        assert sb.run_code("6 * 7").text == "42"


@pytest.fixture
def tenant(sandlot_url: str) -> Iterator[Dict[str, str]]:
    """A fresh tenant with room for one sandbox (waiting at most 0.5 s for more) and two member
    keys; both are revoked after the test."""
    name = "sdk-" + secrets.token_hex(4)
    r = _admin(sandlot_url, "POST", "/v1/tenants", json={"name": name, "quotas": {"max_sandboxes": 1, "wait_seconds": 0.5}})
    assert r.status_code == 201, r.text
    made = []
    for n in ("sdk test", "sdk spare"):
        r = _admin(sandlot_url, "POST", "/v1/keys", json={"tenant": name, "role": "member", "name": n})
        assert r.status_code == 201, r.text
        made.append(r.json())
    yield {"name": name, "key": made[0]["key"], "id": made[0]["id"], "spare": made[1]["key"]}
    for k in made:
        _admin(sandlot_url, "DELETE", f"/v1/keys/{k['id']}")


@pytest.mark.live
def test_live_tenants_are_apart(sandlot_url: str, tenant: Dict[str, str]) -> None:
    with Sandbox(url=sandlot_url, metadata={"test": "auth"}) as mine:
        theirs = Sandbox(url=sandlot_url, api_key=tenant["key"])
        try:
            assert theirs.info().tenant == tenant["name"] and mine.info().tenant == "default"
            # Another tenant's sandbox does not exist for this key, whatever the call.
            with pytest.raises(sandlot.SandboxNotFound):
                Sandbox.connect(mine.id, url=sandlot_url, api_key=tenant["key"])
            listed = [s.id for s in Sandbox.list(url=sandlot_url, api_key=tenant["key"])]
            assert listed == [theirs.id]
            # Nor is theirs to the admin of tenant default: tenants are apart, admins included.
            assert theirs.id not in [s.id for s in Sandbox.list(url=sandlot_url)]
            with pytest.raises(sandlot.SandboxNotFound):
                Sandbox.connect(theirs.id, url=sandlot_url)
            # Another key of the same tenant sees it.
            assert [s.id for s in Sandbox.list(url=sandlot_url, api_key=tenant["spare"])] == [theirs.id]

            # One sandbox is the tenant's quota: the next waits 0.5 s, then is refused.
            with pytest.raises(sandlot.TenantQuotaExceeded) as err:
                Sandbox(url=sandlot_url, api_key=tenant["key"])
            assert err.value.status == 429 and err.value.retry_after is not None and err.value.retry_after >= 1
            assert "max_sandboxes" in err.value.message or "sandboxes" in err.value.message, err.value.message

            # A member key cannot do an admin's work: the server's answer maps to Forbidden.
            r = httpx.post(
                f"{sandlot_url}/v1/tenants", json={"name": "nope"}, headers={"Authorization": f"Bearer {tenant['key']}"}, timeout=30
            )
            err2 = E.error_from_response(r.status_code, r.content, r.headers)
            assert type(err2) is sandlot.Forbidden and err2.status == 403, (r.status_code, r.text)

            # Revoked, the key stops working on the next request of a handle already open.
            assert _admin(sandlot_url, "DELETE", f"/v1/keys/{tenant['id']}").status_code in (200, 204)
            with pytest.raises(sandlot.Unauthenticated) as err3:
                theirs.run_code("1")
            assert tenant["key"] not in str(err3.value)
        finally:
            # The revoked key cannot delete its sandbox any more; the tenant's other key can.
            theirs.close(kill=False)
            with Sandbox.connect(theirs.id, url=sandlot_url, api_key=tenant["spare"]) as again:
                assert again.run_code("2 + 2").text == "4"
