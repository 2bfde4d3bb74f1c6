"""The REAPI tier's logic in-process (opencoti_build.cache.reapi.client's URLs and credentials, .tier over a client
that keeps the ActionCache and CAS in dicts): what is stored for a step, what is checked on the way back, the calls
made, and the one WARN for each way a server fails. The real server: tests/integration/test_reapi_cache.py."""
from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric import ed25519

from opencoti_build.cache import cache_entry, remote_cache, signing
from opencoti_build.cache.reapi import client, messages
from opencoti_build.cache.reapi.client import CallFailed, Credentials
from opencoti_build.cache.reapi.messages import ActionResult, Capabilities, Digest
from opencoti_build.cache.reapi.tier import ReapiTier
from opencoti_build.errors import UserError

URL = "grpc://cache.example:8980/main"


@pytest.mark.parametrize(("url", "target", "instance", "tls"), [
    ("grpc://127.0.0.1:8980", "127.0.0.1:8980", "", False), ("grpcs://cache.example:443/main", "cache.example:443",
                                                              "main", True),
    ("grpc://h:1/a/b/", "h:1", "a/b", False), ("grpcs://[::1]:9092", "[::1]:9092", "", True)])
def test_a_reapi_url_gives_its_endpoint(url: str, target: str, instance: str, tls: bool) -> None:
    assert client.parse_url(url) == client.Endpoint(url, target, instance, tls)
    assert remote_cache.check_url(url) == url


@pytest.mark.parametrize("url", ["grpc://h", "grpc://:1", "grpc://h:x", "grpc://h:1?x=1", "grpc://h:1#f",
                                 "grpc://h:1/a//b", "grpc://h:1/blobs", "grpc://h:1/main/uploads", "grpc://h:99999"])
def test_a_malformed_reapi_url_is_one_line_naming_the_variable_and_the_form(url: str) -> None:
    with pytest.raises(UserError) as err:
        remote_cache.check_url(url)
    assert str(err.value) == (f"CACHE_URL={url} is not a REAPI cache URL; use CACHE_URL={client.URL_FORM}, "
                              "or leave it empty")


def test_another_scheme_is_told_both_forms() -> None:
    assert remote_cache.REAPI_URL_FORM == client.URL_FORM
    with pytest.raises(UserError) as err:
        remote_cache.check_url("http://h:1")
    assert str(err.value) == f"CACHE_URL=http://h:1 is not a cache URL; use CACHE_URL={remote_cache.URL_FORMS}, " \
                             "or leave it empty"


def test_a_credential_in_the_url_is_refused_without_showing_it() -> None:
    with pytest.raises(UserError) as err:
        client.parse_url("grpcs://user:s3cret@h:1/main")
    assert "s3cret" not in str(err.value) and "OPENCOTI_CACHE_TOKEN" in str(err.value)


def test_credentials_come_from_the_environment_only(tmp_path: Path) -> None:
    tls, plain = client.parse_url("grpcs://h:1"), client.parse_url("grpc://h:1")
    assert client.credentials(tls, {}) == Credentials() and client.credentials(plain, {}) == Credentials()
    token_file = tmp_path / "token"
    token_file.write_text("from-a-file\n")
    assert client.credentials(tls, {client.TOKEN_FILE: str(token_file)}).token == "from-a-file"
    assert client.credentials(tls, {client.TOKEN: "t0k", client.TOKEN_FILE: str(token_file)}).token == "t0k"
    creds = client.credentials(tls, {client.TOKEN: "s3cret"})
    assert "s3cret" not in repr(creds) and "s3cret" not in str(creds)
    assert creds.header == "authorization"
    assert client.credentials(tls, {client.TOKEN: "k", client.TOKEN_HEADER: "X-BuildBuddy-API-Key"}).header == \
        "x-buildbuddy-api-key"
    cert, key, ca = (tmp_path / n for n in ("c.pem", "k.pem", "ca.pem"))
    for path in (cert, key, ca):
        path.write_bytes(path.name.encode())
    both = client.credentials(tls, {client.TLS_CERT: str(cert), client.TLS_KEY: str(key), client.TLS_CA: str(ca)})
    assert (both.cert, both.key, both.ca) == (b"c.pem", b"k.pem", b"ca.pem")


@pytest.mark.parametrize(("url", "environ", "says"), [
    ("grpc://h:1", {client.TOKEN: "t"}, "OPENCOTI_CACHE_TOKEN is set but CACHE_URL=grpc://h:1 is plaintext"),
    ("grpcs://h:1", {client.TOKEN: "two words"}, "OPENCOTI_CACHE_TOKEN holds no usable token"),
    ("grpcs://h:1", {client.TOKEN: ""}, "OPENCOTI_CACHE_TOKEN holds no usable token"),
    ("grpcs://h:1", {client.TOKEN_FILE: "/nonexistent/token"}, "OPENCOTI_CACHE_TOKEN_FILE=/nonexistent/token: cannot "
                                                               "read it"),
    ("grpcs://h:1", {client.TLS_CERT: "/dev/null"}, "OPENCOTI_CACHE_TLS_CERT is set without OPENCOTI_CACHE_TLS_KEY"),
    ("grpc://h:1", {client.TLS_CA: "/dev/null"}, "OPENCOTI_CACHE_TLS_CA is set but CACHE_URL=grpc://h:1 is plaintext"),
    ("grpcs://h:1", {client.TOKEN_HEADER: "x key"}, "OPENCOTI_CACHE_TOKEN_HEADER=x key is not a header"),
    ("grpcs://h:1", {client.TOKEN_HEADER: "grpc-timeout"}, "OPENCOTI_CACHE_TOKEN_HEADER=grpc-timeout is not a header"),
])
def test_credentials_that_cannot_be_used_are_one_line(url: str, environ: dict[str, str], says: str) -> None:
    with pytest.raises(UserError) as err:
        client.credentials(client.parse_url(url), environ)
    assert str(err.value).startswith(says) and "\n" not in str(err.value)


# --- the tier over a client kept in memory -----------------------------------------------------------------------

class FakeClient:
    """A REAPI server's cache services in dicts; ``fail`` makes a named call raise CallFailed with that code."""

    def __init__(self, caps: Capabilities = Capabilities((1,), True, 4 << 20)) -> None:
        self.caps = caps
        self.ac: dict[Digest, bytes] = {}
        self.cas: dict[Digest, bytes] = {}
        self.calls: list[tuple[str, int]] = []
        self.fail: dict[str, str] = {}

    def _call(self, name: str, n: int = 0) -> None:
        self.calls.append((name, n))
        if name in self.fail:
            raise CallFailed(self.fail[name], f"{name} failed")

    def capabilities(self) -> Capabilities:
        self._call("capabilities")
        return self.caps

    def get_action_result(self, action: Digest) -> bytes | None:
        self._call("get_action_result")
        return self.ac.get(action)

    def update_action_result(self, action: Digest, result: ActionResult) -> None:
        self._call("update_action_result")
        self.ac[action] = result.encode()

    def find_missing(self, digests: list[Digest]) -> set[Digest]:
        self._call("find_missing", len(digests))
        return {d for d in digests if d not in self.cas}

    def batch_update(self, blobs: list[tuple[Digest, bytes]]) -> None:
        self._call("batch_update", len(blobs))
        self.cas.update(blobs)

    def batch_read(self, digests: list[Digest]) -> dict[Digest, bytes | None]:
        self._call("batch_read", len(digests))
        return {d: self.cas.get(d) for d in digests}

    def read(self, digest: Digest) -> bytes | None:
        self._call("read")
        return self.cas.get(digest)

    def write(self, digest: Digest, data: bytes) -> None:
        self._call("write")
        self.cas[digest] = data


@pytest.fixture
def keys() -> tuple[signing.Signer, signing.Policy]:
    private = ed25519.Ed25519PrivateKey.generate()
    signer = signing.Signer(private)
    trusted = signing.TrustedKeys({signing.key_id(private.public_key()): private.public_key()}, "trusted.pem")
    return signer, signing.Policy(trusted, shared=True)


def _tier(fake: FakeClient, said: list[str], signer: signing.Signer | None = None, **kw) -> ReapiTier:
    return ReapiTier(URL, said.append, signer=signer, client=fake, **kw)  # type: ignore[arg-type]


def _step(directory: Path, *sizes: int) -> list[tuple[str, str]]:
    """A built step in ``directory``: a target of each size (its bytes distinct in the step), each with a key of its
    own as the local tier's (a 64-digit hex signature)."""
    directory.mkdir(parents=True, exist_ok=True)
    items = []
    for n, size in enumerate(sizes):
        path = directory / f"t{n}.o"
        path.write_bytes(bytes([n + 1]) * size)
        path.chmod(0o755 if n else 0o644)
        items.append((hashlib.sha256(str(path).encode()).hexdigest(), str(path)))
    return items


def test_a_step_goes_whole_and_comes_back_checked(tmp_path: Path, keys) -> None:
    signer, policy = keys
    fake, said = FakeClient(), []
    tier = _tier(fake, said, signer)
    items = _step(tmp_path, 100, 200)
    assert tier.pull([k for k, _ in items]) == [None, None]  # a miss
    assert tier.push_step(items) == 2
    action = Digest.of(messages.step_action([k for k, _ in items])[0])
    result = ActionResult.decode(fake.ac[action])
    assert [o.path for o in result.outputs] == [k for k, _ in items]  # one output per target, named by its key
    assert [o.executable for o in result.outputs] == [False, True]
    assert {o.digest for o in result.outputs} <= fake.cas.keys()  # each a CAS blob named by its own SHA-256
    values = tier.pull([k for k, _ in items])
    for (key, path), value in zip(items, values):
        blob, data, mode = tier.unpack(value, key, policy)
        assert data == Path(path).read_bytes() and mode == Path(path).stat().st_mode & 0o777
        assert cache_entry.unseal(blob, key, policy) == data  # a local entry, signature and all
    assert said == [] and [c for c, _ in fake.calls].count("capabilities") == 1  # asked once a run


def test_pushes_send_only_what_is_missing_small_blobs_in_batches_large_ones_streamed(tmp_path: Path, keys) -> None:
    fake, said = FakeClient(), []
    tier = _tier(fake, said, keys[0])
    tier.batch_bytes = 1000
    items = _step(tmp_path, 300, 400, 500, 5000)
    assert tier.push_step(items) == 4
    calls = [c for c in fake.calls if c[0] != "capabilities"]
    assert calls[0] == ("find_missing", 6)  # four targets, the Action and the Command
    sent = calls[1:-1]
    assert sent.count(("write", 0)) == 1 and sum(n for c, n in sent if c == "batch_update") == 5
    assert len(sent) >= 3 and len(fake.cas) == 6  # batches of at most 1000 bytes: more than one
    assert calls[-1] == ("update_action_result", 0)
    fake.calls.clear()
    again = [("f" * 64, items[0][1])]  # another step whose one target's bytes the server has
    assert tier.push_step(again) == 1
    assert ("find_missing", 3) in fake.calls and not any(c[0] == "batch_update" and c[1] == 3 for c in fake.calls)
    values = tier.pull([k for k, _ in items])
    assert ("read", 0) in fake.calls and all(v is not None for v in values)


def test_a_swapped_entry_and_a_damaged_blob_are_corrupt_and_the_blob_is_sent_again(tmp_path: Path, keys) -> None:
    signer, policy = keys
    fake, said = FakeClient(), []
    tier = _tier(fake, said, signer)
    one, two = _step(tmp_path / "1", 10), _step(tmp_path / "2", 20)
    tier.push_step(one)
    tier.push_step(two)
    a1, a2 = (Digest.of(messages.step_action([k for k, _ in s])[0]) for s in (one, two))
    fake.ac[a2] = fake.ac[a1]  # step one's entry under step two's action
    with pytest.raises(cache_entry.CorruptEntry, match="holds another step's outputs"):
        tier.unpack(tier.pull([two[0][0]])[0], two[0][0], policy)
    fake.ac[a2] = fake.ac[a1].replace(one[0][0].encode(), two[0][0].encode())  # its keys rewritten too
    with pytest.raises(cache_entry.UntrustedEntry, match="does not verify"):
        tier.unpack(tier.pull([two[0][0]])[0], two[0][0], policy)
    blob = ActionResult.decode(fake.ac[a1]).outputs[0].digest
    fake.cas[blob] = b"\x00" + fake.cas[blob][1:]  # damaged in the server's storage
    value = tier.pull([one[0][0]])[0]
    with pytest.raises(cache_entry.CorruptEntry, match="does not match its SHA-256"):
        tier.unpack(value, one[0][0], policy)
    tier.drop(one[0][0], value)
    tier._pushed.clear()  # a later run's push of the same step
    assert tier.push_step(one) == 1 and fake.cas[blob] == Path(one[0][1]).read_bytes()  # sent though "present"
    assert said == []


def test_unsigned_and_untrusted_entries_are_refused(tmp_path: Path, keys) -> None:
    _, policy = keys
    fake, said = FakeClient(), []
    other = signing.Signer(ed25519.Ed25519PrivateKey.generate())
    items = _step(tmp_path, 10)
    _tier(fake, said, other).push_step(items)
    with pytest.raises(cache_entry.UntrustedEntry, match="which CACHE_TRUSTED_KEYS=trusted.pem does not hold"):
        _tier(fake, said).unpack(_tier(fake, said).pull([items[0][0]])[0], items[0][0], policy)
    action = Digest.of(messages.step_action([items[0][0]])[0])
    stripped = ActionResult.decode(fake.ac[action])
    fake.ac[action] = ActionResult(stripped.outputs, ()).encode()
    with pytest.raises(cache_entry.UntrustedEntry, match="is unsigned"):
        _tier(fake, said).unpack(_tier(fake, said).pull([items[0][0]])[0], items[0][0], policy)
    assert _tier(fake, said).push_step(items) == 0  # without a signer nothing is pushed


def test_a_missing_blob_is_a_miss_and_an_unreadable_entry_is_corrupt(tmp_path: Path, keys) -> None:
    fake, said = FakeClient(), []
    tier = _tier(fake, said, keys[0])
    items = _step(tmp_path, 10, 20)
    tier.push_step(items)
    action = Digest.of(messages.step_action([k for k, _ in items])[0])
    fake.cas.pop(ActionResult.decode(fake.ac[action]).outputs[1].digest)  # evicted
    assert tier.pull([k for k, _ in items]) == [None, None]
    fake.ac[action] = b"\x0a\x05ab"
    value = tier.pull([k for k, _ in items])[0]
    with pytest.raises(cache_entry.CorruptEntry, match="its ActionResult is unreadable"):
        tier.unpack(value, items[0][0], keys[1])


@pytest.mark.parametrize(("call", "code", "says"), [
    ("capabilities", "UNAVAILABLE", f"WARN: cache: CACHE_URL {URL} unreachable (UNAVAILABLE: capabilities failed); "
                                    "building with the local cache only"),
    ("capabilities", "INVALID_ARGUMENT", f"WARN: cache: CACHE_URL {URL} refused GetCapabilities (INVALID_ARGUMENT: "
                                         "capabilities failed; is the instance name right?); building with the local "
                                         "cache only"),
    ("get_action_result", "DEADLINE_EXCEEDED", f"WARN: cache: CACHE_URL {URL} unreachable (DEADLINE_EXCEEDED: "
                                               "get_action_result failed); building with the local cache only"),
    ("batch_read", "PERMISSION_DENIED", f"WARN: cache: CACHE_URL {URL} refused a read (PERMISSION_DENIED: batch_read "
                                        "failed); building with the local cache only"),
])
def test_a_server_away_or_refusing_is_one_warn_and_the_tier_off(tmp_path: Path, keys, call: str, code: str,
                                                                says: str) -> None:
    fake, said = FakeClient(), []
    items = _step(tmp_path, 10)
    _tier(fake, [], keys[0]).push_step(items)
    fake.fail[call] = code
    tier = _tier(fake, said, keys[0])
    assert tier.pull([items[0][0]]) is None and tier.pull([items[0][0]]) is None
    assert tier.push_step(items) == 0 and not tier.enabled
    assert said == [says]


def test_a_server_without_sha256_is_one_warn(tmp_path: Path) -> None:
    said: list[str] = []
    tier = _tier(FakeClient(Capabilities((3, 2), True, 0)), said)
    assert tier.pull(["k"]) is None and tier.pull(["k"]) is None
    assert said == [f"WARN: cache: CACHE_URL {URL} offers MD5, SHA1 digests, not SHA256; building with the local "
                    "cache only"]


@pytest.mark.parametrize("call", ["find_missing", "batch_update", "update_action_result"])
def test_a_refused_push_stops_the_pushes_quietly_and_reads_go_on(tmp_path: Path, keys, call: str) -> None:
    fake, said = FakeClient(), []
    tier = _tier(fake, said, keys[0])
    fake.fail[call] = "RESOURCE_EXHAUSTED"
    assert tier.push_step(_step(tmp_path, 10)) == 0
    assert tier.push_step(_step(tmp_path / "next", 20)) == 0
    assert said == [f"WARN: cache: CACHE_URL {URL} refused a push (RESOURCE_EXHAUSTED: {call} failed); nothing more "
                    "is pushed there this run, entries are still read from it"]
    assert tier.enabled and tier.pull(["k"]) == [None]


def test_a_server_that_takes_no_updates_is_read_and_not_pushed_to(tmp_path: Path, keys) -> None:
    said: list[str] = []
    tier = _tier(FakeClient(Capabilities((1,), False, 0)), said, keys[0])
    assert tier.push_step(_step(tmp_path, 10)) == 0 and tier.enabled
    assert said == [f"NOTE: cache: CACHE_URL {URL} takes no ActionCache updates from clients; entries are read from "
                    "it, none are pushed"]


def test_a_step_with_a_target_over_the_limit_stays_local(tmp_path: Path, keys) -> None:
    fake, said = FakeClient(), []
    tier = _tier(fake, said, keys[0], max_entry=100)
    assert tier.push_step(_step(tmp_path, 100, 101)) == 0 and fake.ac == {}
    assert tier.skipped_note() == (f"NOTE: cache: 2 entries larger than 0 MiB were not pushed to {URL} (kept in the "
                                   "local cache only)")
    assert _tier(fake, said, keys[0]).skipped_note() is None


def test_the_batch_limit_follows_the_servers(keys) -> None:
    tier = _tier(FakeClient(Capabilities((1,), True, 1 << 20)), [], keys[0])
    tier.pull(["k"])
    assert tier.batch_bytes == (1 << 20) - (64 << 10)
