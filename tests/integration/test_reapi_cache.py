"""The shared tier on a real REAPI server: BuildGrid's all-in-one server (its cache services), which this module starts
on 127.0.0.1 on a free port and stops by PID (bench/servers.py; scripts/install-deps installs it in its own venv).

The session's build of the miniature tree fills it (``scons --cache-populate`` over a copy of its local cache: nothing
compiled, every step pushed); then a second checkout at another path, with the tree elsewhere and an empty local
cache, compiles nothing and links the same bytes, a damaged CAS blob and a swapped ActionCache entry are caught
(one WARN, the step built locally, nothing bad used or pushed on), a server away or refusing costs one WARN, and a
second server with TLS, client certificates and bearer tokens (JWTs) is reached with a token from the environment that
no file keeps."""
from __future__ import annotations

import base64
import datetime
import hashlib
import hmac
import ipaddress
import json
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench import servers
from opencoti_build.cache import cache_entry, signing
from opencoti_build.cache.reapi import client, messages, wire
from opencoti_build.cache.reapi.messages import ActionResult, Digest
from opencoti_build.cache.reapi.tier import ReapiTier
from opencoti_build.report import summary

from scons_runs import MINI_TREE, SharedTierCheckouts, cache_keys, scons
from scons_runs import output_digests as digests
from scons_runs import shared_tier_counts as tier_line

MISSING = servers.buildgrid_missing()
ONE_SOURCE = "llamafile/llamafile.c"  # `scons compile FILE=` of it: one fat compile, for the runs that need a step


def warnings(stdout: str) -> list[str]:
    return [line for line in stdout.splitlines() if line.startswith("WARN:")]


class Warm(SharedTierCheckouts):
    """One BuildGrid filled from the session's build of the mini tree (its outputs: the reference), by a build that
    restores every step from a copy of that build's local cache and pushes it (``--cache-populate``). Every build here
    signs what it pushes and trusts the same key (``keys``): a REAPI cache is a shared tier."""

    def __init__(self, root: Path, built: Path) -> None:
        super().__init__(root)
        self.server = servers.BuildGridServer(root / "buildgrid")
        self.url = self.server.url
        self.client = client.Client(client.parse_url(self.server.url), client.Credentials())
        shutil.copytree(built / "cache", root / "first-cache")
        first = self.build(root / "first", f"CACHE_URL={self.server.url}", f"CACHE_DIR={root / 'first-cache'}",
                           "--cache-populate", *self.keys)
        self.first = first.stdout
        self.steps = summary.parse(first.stdout)["cached"]
        assert summary.parse(first.stdout)["compiled"] == 0, first.stdout
        self.reference = digests(root / "first" / "out")

    def cached_steps(self) -> dict[Digest, list[str]]:
        """Every step the server holds, by action digest: its targets' keys, read from the Command blobs in its CAS."""
        steps = {}
        for blob in self.server.blobs():
            try:
                arguments = [a.decode() for a in wire.repeated(wire.decode(blob.read_bytes()), 1)]
            except (wire.WireError, UnicodeDecodeError):
                continue
            if tuple(arguments[:2]) == messages.STEP_COMMAND:
                steps[Digest.of(messages.step_action(arguments[2:])[0])] = arguments[2:]
        return steps

    def result(self, action: Digest) -> ActionResult:
        raw = self.client.get_action_result(action)
        assert raw is not None
        return ActionResult.decode(raw)


@pytest.fixture(scope="module")
def warm(tmp_path_factory: pytest.TempPathFactory, built_mini: Path) -> Iterator[Warm]:
    if MISSING:
        pytest.skip(MISSING)
    ws = Warm(tmp_path_factory.mktemp("warm-reapi"), built_mini)
    yield ws
    ws.client.close()
    ws.server.stop()


def test_each_step_is_an_action_cache_entry_over_blobs_named_by_their_sha256(warm: Warm) -> None:
    hits, misses, corrupt, pushed = tier_line(warm.first, warm.server.url)
    assert (hits, misses, corrupt) == (0, 0, 0) and pushed > 0  # every step from the local cache, then pushed
    steps = warm.cached_steps()
    assert len(steps) == warm.steps  # every step built, one entry each
    outputs = 0
    for action, keys in steps.items():
        result = warm.result(action)
        assert [o.path for o in result.outputs] == keys and [s.key for s in result.seals] == keys
        for output in result.outputs:
            assert hashlib.sha256(warm.server.blob(output.digest.hash).read_bytes()).hexdigest() == output.digest.hash
        outputs += len(keys)
    assert any(len(keys) == 2 for keys in steps.values())  # a fat object and its .aarch64 twin, one entry
    assert outputs == tier_line(warm.first, warm.server.url)[3]  # pushed, counted per target


def test_a_second_clone_with_an_empty_local_cache_compiles_nothing(warm: Warm) -> None:
    proc, (hits, misses, corrupt, pushed) = warm.clone_from_the_tier()
    assert hits == tier_line(warm.first, warm.server.url)[3] and (misses, corrupt, pushed) == (0, 0, 0)
    assert warnings(proc.stdout) == []


def _two_output_steps(warm: Warm) -> list[tuple[Digest, list[str]]]:
    return sorted(((a, k) for a, k in warm.cached_steps().items() if len(k) == 2), key=lambda step: step[0].hash)


def test_a_damaged_cas_blob_is_caught_and_never_used(warm: Warm) -> None:
    action, keys = _two_output_steps(warm)[0]
    blob = warm.server.blob(warm.result(action).outputs[1].digest.hash)  # a twin's bytes
    good = blob.read_bytes()
    blob.chmod(0o644)
    blob.write_bytes(good[:100] + bytes([good[100] ^ 0x01]) + good[101:])
    try:
        proc = warm.clone_build()
    finally:
        blob.write_bytes(good)
    said = warnings(proc.stdout)
    assert len(said) == 1 and said[0].startswith(f"WARN: cache: corrupt entry {keys[1]} (step {action.hash[:16]}…): "
                                                 "CAS blob"), proc.stdout
    assert "does not match its SHA-256" in said[0] and warm.server.url in said[0]
    assert digests(warm.root / "clone-build" / "out") == warm.reference  # built locally, the same bytes
    hits, misses, corrupt, _ = tier_line(proc.stdout, warm.server.url)
    assert corrupt == 1 and summary.parse(proc.stdout)["compiled"] == 1
    for entry in (warm.root / "clone-build" / "cache").rglob("*"):
        if entry.is_file() and len(entry.name) == 64:
            cache_entry.content_signature(entry, "sha256")  # every local entry whole: nothing bad kept


def test_a_swapped_action_cache_entry_is_caught_and_replaced(warm: Warm) -> None:
    (one, _), (two, two_keys) = _two_output_steps(warm)[:2]
    warm.client.update_action_result(two, warm.result(one))  # step one's outputs under step two's action
    proc = warm.clone_build()
    said = warnings(proc.stdout)
    assert len(said) == 1 and said[0].startswith(f"WARN: cache: corrupt entry {two_keys[0]} (step {two.hash[:16]}…): "
                                                 "its ActionCache entry holds another step's outputs"), proc.stdout
    assert digests(warm.root / "clone-build" / "out") == warm.reference
    assert tier_line(proc.stdout, warm.server.url)[2] == 2 and summary.parse(proc.stdout)["compiled"] == 1
    assert [o.path for o in warm.result(two).outputs] == two_keys  # the signed push put step two's own entry back


@pytest.mark.parametrize("how", ["away", "no such instance"])
def test_a_server_away_or_refusing_costs_one_warn_and_a_local_build(warm: Warm, tmp_path: Path, how: str) -> None:
    url = f"grpc://127.0.0.1:{servers.free_port()}" if how == "away" else f"{warm.server.url}/nosuch"
    proc = warm.build(tmp_path, "compile", f"FILE={ONE_SOURCE}", f"CACHE_URL={url}", *warm.keys)
    said = warnings(proc.stdout)
    reason = "unreachable (UNAVAILABLE: " if how == "away" else "refused GetCapabilities (INVALID_ARGUMENT: "
    assert len(said) == 1 and said[0].startswith(f"WARN: cache: CACHE_URL {url} {reason}"), proc.stdout
    assert said[0].endswith("; building with the local cache only")
    assert summary.parse(proc.stdout)["compiled"] == 1


@pytest.mark.parametrize(("args", "extra", "says"), [
    (["CACHE_URL=grpc://cache.example"], {}, "CACHE_URL=grpc://cache.example is not a REAPI cache URL; use "
                                             f"CACHE_URL={client.URL_FORM}, or leave it empty"),
    (["CACHE_URL=grpc://cache.example:8980"], {client.TOKEN: "t0k3n"},
     "OPENCOTI_CACHE_TOKEN is set but CACHE_URL=grpc://cache.example:8980 is plaintext: the token would cross the "
     "network in the clear; use grpcs://, or unset it"),
])
def test_a_bad_reapi_url_or_credential_is_one_line_and_builds_nothing(tmp_path: Path, args: list[str],
                                                                      extra: dict[str, str], says: str) -> None:
    proc = scons(f"SRC={MINI_TREE}", *args, build=tmp_path, check=False, env_extra=extra)
    assert proc.returncode == 2 and proc.stderr.splitlines() == [f"scons: error: {says}"]
    assert not (tmp_path / "out").exists() and not (tmp_path / "cache").exists()


# --- TLS and a bearer token ----------------------------------------------------------------------------------------

def _self_signed(directory: Path, name: str) -> tuple[Path, Path]:
    """A key and a self-signed certificate for 127.0.0.1 (which is its own CA: the server's is the CA the client is
    given, the client's the one the server checks clients against)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), True)
            .sign(key, hashes.SHA256()))
    directory.mkdir(parents=True, exist_ok=True)
    key_file, cert_file = directory / f"{name}.key", directory / f"{name}.pem"
    key_file.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return key_file, cert_file


def _jwt(secret: bytes) -> str:
    """An HS256 JWT that expires in an hour."""
    def part(data: bytes) -> str:
        return base64.urlsafe_b64encode(data).rstrip(b"=").decode()

    body = part(json.dumps({"alg": "HS256", "typ": "JWT"}).encode()) + "." + part(
        json.dumps({"exp": int(time.time()) + 3600, "sub": "ci"}).encode())
    return body + "." + part(hmac.new(secret, body.encode(), hashlib.sha256).digest())


class Tls:
    """BuildGrid over TLS on instance ``main``, requiring a client certificate and a bearer token; ``environ``: what
    a client needs to reach it."""

    def __init__(self, root: Path) -> None:
        key, self.cert = _self_signed(root / "tls", "server")
        self.client_key, self.client_cert = _self_signed(root / "tls", "client")
        secret = root / "jwt.secret"
        secret.write_bytes(hashlib.sha256(root.name.encode()).hexdigest().encode())
        self.token = _jwt(secret.read_bytes())
        self.server = servers.BuildGridServer(root / "buildgrid", instance="main", tls=(key, self.cert),
                                              client_ca=self.client_cert, jwt_secret=secret)
        self.environ = {client.TOKEN: self.token, client.TLS_CA: str(self.cert), client.TLS_CERT: str(self.client_cert),
                        client.TLS_KEY: str(self.client_key)}


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tls]:
    if MISSING:
        pytest.skip(MISSING)
    found = Tls(tmp_path_factory.mktemp("tls-reapi"))
    yield found
    found.server.stop()


def test_tls_and_a_bearer_token_from_the_environment_reach_the_server(tls: Tls, tmp_path: Path) -> None:
    signer = signing.load_signer(cache_keys(tmp_path / "keys")[0].split("=", 1)[1])
    small, large = tmp_path / "t.o", tmp_path / "t.aarch64.o"
    small.write_bytes(b"fat object")
    large.write_bytes(bytes(range(256)) * 1024)  # 256 KiB: over the batch limit set below, so through ByteStream
    items = [("a" * 64, str(small)), ("b" * 64, str(large))]
    said: list[str] = []
    environ = tls.environ
    tier = ReapiTier(tls.server.url, said.append, signer=signer, environ=environ)
    tier.batch_bytes = 64 << 10
    assert tier.push_step(items) == 2
    reader = ReapiTier(tls.server.url, said.append, environ=environ)
    reader.batch_bytes = 64 << 10
    values = reader.pull(["a" * 64, "b" * 64])
    assert [tier.unpack(v, k)[1] for v, (k, _) in zip(values, items)] == [small.read_bytes(), large.read_bytes()]
    assert said == []
    no_token = {k: v for k, v in environ.items() if k != client.TOKEN}
    for environ in (no_token, {**no_token, client.TOKEN: tls.token[:-2] + "xx"}):
        assert ReapiTier(tls.server.url, said.append, environ=environ).pull(["a" * 64]) is None
    assert len(said) == 2 and all(f"CACHE_URL {tls.server.url} unreachable (UNAUTHENTICATED" in s for s in said), said
    no_certificate = {k: v for k, v in tls.environ.items() if k not in (client.TLS_CERT, client.TLS_KEY)}
    assert ReapiTier(tls.server.url, said.append, environ=no_certificate).pull(["a" * 64]) is None
    assert len(said) == 3 and f"CACHE_URL {tls.server.url} unreachable (UNAVAILABLE" in said[2], said


def test_a_build_over_tls_with_a_token_file_keeps_the_token_in_no_file(tls: Tls, tmp_path: Path) -> None:
    token_file = tmp_path / "secrets" / "cache-token"
    token_file.parent.mkdir()
    token_file.write_text(tls.token + "\n")
    env = {**{k: v for k, v in tls.environ.items() if k != client.TOKEN}, "OPENCOTI_CACHE_URL": tls.server.url,
           client.TOKEN_FILE: str(token_file)}
    build = tmp_path / "b"
    proc = scons(f"SRC={MINI_TREE}", "compile", f"FILE={ONE_SOURCE}", *cache_keys(tmp_path / "keys"), build=build,
                 env_extra=env)
    assert warnings(proc.stdout) == [] and tier_line(proc.stdout, tls.server.url)[3] == 2, proc.stdout
    for path in build.rglob("*"):
        if path.is_file():
            assert tls.token.encode() not in path.read_bytes(), path
