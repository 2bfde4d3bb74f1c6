"""Signed cache entries (opencoti_build.cache.signing over cache_entry's format): a trusted key's signature over an
entry's key and bytes is accepted; a signature moved to another key, an unknown key, a changed body and an unsigned
entry are refused where trust is required; which tiers count as shared; bad key files are one line."""
from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

from opencoti_build.cache import cache_entry, remote_cache, signing
from opencoti_build.config import buildvars
from opencoti_build.errors import UserError

KEY = "a1" * 32  # a cache key as SCons makes them: 64 hex digits
OTHER = "b2" * 32
# the trailer's fields from the end: signature, its length, the signing key's id, then the key
AFTER_KEY = cache_entry.KEYID_BYTES + 1 + cache_entry.SIGNATURE_BYTES


def pem_private(key) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def pem_public(key) -> bytes:
    return key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)


def key_files(tmp_path: Path, name: str, key=None) -> tuple[Path, Path]:
    """(private PEM, public PEM) files of ``key`` (default: a new ed25519 key)."""
    key = key or ed25519.Ed25519PrivateKey.generate()
    private, public = tmp_path / f"{name}.pem", tmp_path / f"{name}.pub"
    private.write_bytes(pem_private(key))
    public.write_bytes(pem_public(key))
    return private, public


@pytest.fixture
def keys(tmp_path: Path) -> tuple[signing.Signer, signing.TrustedKeys, signing.Signer]:
    """(the trusted signer, the keys trusted, a signer nobody trusts)."""
    private, public = key_files(tmp_path, "ci")
    stranger, _ = key_files(tmp_path, "stranger")
    return signing.load_signer(private), signing.load_trusted(public), signing.load_signer(stranger)


def shared(trusted: signing.TrustedKeys | None) -> signing.Policy:
    return signing.Policy(trusted, shared=True)


def rekeyed(blob: bytes, key: str) -> bytes:
    """``blob`` with its trailer's key field made ``key`` (the signature slot left as it was)."""
    at = len(blob) - AFTER_KEY - cache_entry.KEY_BYTES
    return blob[:at] + key.encode().ljust(cache_entry.KEY_BYTES, b"\0") + blob[len(blob) - AFTER_KEY:]


@pytest.mark.parametrize("kind", ["ed25519", "ecdsa-p256"])
def test_a_trusted_signature_is_accepted_in_the_sealed_form_a_file_entry_and_a_redis_value(tmp_path: Path,
                                                                                          kind: str) -> None:
    key = ed25519.Ed25519PrivateKey.generate() if kind == "ed25519" else ec.generate_private_key(ec.SECP256R1())
    private, public = key_files(tmp_path, kind, key)
    signer, trusted = signing.load_signer(private), signing.load_trusted(public)
    assert signer.keyid in trusted.keys and pem_private(key).decode() not in repr(signer)
    data = bytes(range(256)) * 300
    assert cache_entry.unseal(cache_entry.seal(data, KEY, signer), KEY, shared(trusted)) == data
    source, entry = tmp_path / "x.o", tmp_path / KEY
    source.write_bytes(data)
    cache_entry.write_entry(source, entry, signer)
    cache_entry.check_trailer(entry, shared(trusted))
    cache_entry.read_entry(entry, tmp_path / "back.o", shared(trusted))
    assert (tmp_path / "back.o").read_bytes() == data
    value = remote_cache.pack(data, 0o100644, KEY, signer)
    blob, content, mode = remote_cache.unpack(value, KEY, shared(trusted))
    assert content == data and mode == 0o644
    cache_entry.unseal(blob, KEY, shared(trusted))  # the local tier's copy of a remote hit keeps the signature


def test_a_signature_over_another_key_is_refused(keys) -> None:
    signer, trusted, _ = keys
    moved = rekeyed(cache_entry.seal(b"object a", KEY, signer), OTHER)  # a whole, signed entry put under OTHER
    cache_entry.unseal(moved, OTHER)  # whole and bound to OTHER: integrity alone does not see it
    with pytest.raises(cache_entry.UntrustedEntry, match="signature by trusted key .* does not verify over its key "
                                                         "and content") as err:
        cache_entry.unseal(moved, OTHER, shared(trusted))
    assert err.value.kind == signing.BAD_SIGNATURE
    with pytest.raises(cache_entry.CorruptEntry, match="holds the entry stored under key"):  # not rekeyed: a swap
        cache_entry.unseal(cache_entry.seal(b"object a", KEY, signer), OTHER, shared(trusted))


def test_a_signature_by_a_key_not_trusted_is_refused(keys) -> None:
    _, trusted, stranger = keys
    blob = cache_entry.seal(b"evil object", KEY, stranger)
    with pytest.raises(cache_entry.UntrustedEntry) as err:
        cache_entry.unseal(blob, KEY, shared(trusted))
    assert err.value.kind == signing.UNKNOWN_KEY
    assert str(err.value) == (f"{KEY} is signed by key {signing.shown_id(stranger.keyid)}, which "
                              f"CACHE_TRUSTED_KEYS={trusted.path} does not hold")


def test_a_tampered_body_is_refused_with_its_digest_or_without(keys) -> None:
    signer, trusted, _ = keys
    good = bytearray(cache_entry.seal(b"honest object", KEY, signer))
    good[0] ^= 0x20  # the content alone: the digest catches it
    with pytest.raises(cache_entry.CorruptEntry, match="content does not match its SHA-256"):
        cache_entry.unseal(bytes(good), KEY, shared(trusted))
    evil = b"evil object!!"  # same length, digest recomputed, signature kept: only the signature catches it
    forged = cache_entry.seal(evil, KEY)[:-AFTER_KEY] + bytes(good[-AFTER_KEY:])
    assert cache_entry.unseal(forged, KEY) == evil
    with pytest.raises(cache_entry.UntrustedEntry) as err:
        cache_entry.unseal(forged, KEY, shared(trusted))
    assert err.value.kind == signing.BAD_SIGNATURE
    flipped = bytearray(cache_entry.seal(b"honest object", KEY, signer))
    flipped[-1 - (cache_entry.SIGNATURE_BYTES - 64)] ^= 1  # the ed25519 signature's last byte
    with pytest.raises(cache_entry.UntrustedEntry):
        cache_entry.unseal(bytes(flipped), KEY, shared(trusted))


def test_an_unsigned_entry_is_refused_where_trust_is_required_and_used_in_a_private_tier(keys, tmp_path: Path) -> None:
    _, trusted, _ = keys
    blob = cache_entry.seal(b"object", KEY)
    with pytest.raises(cache_entry.UntrustedEntry, match=f"^{KEY} is unsigned$") as err:
        cache_entry.unseal(blob, KEY, shared(trusted))
    assert err.value.kind == signing.UNSIGNED
    with pytest.raises(cache_entry.UntrustedEntry, match="in a shared tier and CACHE_TRUSTED_KEYS is not set") as err:
        cache_entry.unseal(cache_entry.seal(b"object", KEY, keys[0]), KEY, shared(None))  # no trusted keys: nothing
    assert err.value.kind == signing.FOREIGN
    assert cache_entry.unseal(blob, KEY, signing.Policy(None, shared=False)) == b"object"
    assert cache_entry.unseal(blob, KEY, signing.Policy(trusted, shared=False)) == b"object"
    source, entry = tmp_path / "x.o", tmp_path / KEY
    source.write_bytes(b"object")
    cache_entry.write_entry(source, entry)
    cache_entry.read_entry(entry, tmp_path / "back.o", signing.Policy(None, shared=False))  # the user's own file
    with pytest.raises(cache_entry.UntrustedEntry, match=f"^{entry} is unsigned$"):
        cache_entry.read_entry(entry, tmp_path / "refused.o", shared(trusted))
    assert not (tmp_path / "refused.o").exists()
    with pytest.raises(cache_entry.UntrustedEntry):
        cache_entry.content_signature(entry, "sha256", shared(trusted))


def test_signing_keys_are_several_during_a_rotation(tmp_path: Path) -> None:
    old_private, old_public = key_files(tmp_path, "old")
    new_private, new_public = key_files(tmp_path, "new")
    both = tmp_path / "trusted.pem"
    both.write_bytes(old_public.read_bytes() + b"\n" + new_public.read_bytes())
    trusted = signing.load_trusted(both)
    assert len(trusted.keys) == 2
    for private in (old_private, new_private):
        blob = cache_entry.seal(b"object", KEY, signing.load_signer(private))
        assert cache_entry.unseal(blob, KEY, shared(trusted)) == b"object"
    with pytest.raises(cache_entry.UntrustedEntry):  # once the old key is dropped, its entries are not used
        cache_entry.unseal(cache_entry.seal(b"object", KEY, signing.load_signer(old_private)), KEY,
                           shared(signing.load_trusted(new_public)))


def test_the_signed_message_binds_the_key_the_length_and_the_digest() -> None:
    digest = bytes(range(32))
    one = cache_entry.signed_message(KEY, 5, digest)
    assert one.startswith(cache_entry.SIGNED_CONTEXT) and one.endswith(struct.pack("<Q", 5) + digest)
    assert len({one, cache_entry.signed_message(OTHER, 5, digest), cache_entry.signed_message(KEY, 6, digest),
                cache_entry.signed_message(KEY, 5, bytes(32))}) == 4


def stat_of(uid: int, gid: int, mode: int) -> os.stat_result:
    return os.stat_result((mode, 1, 1, 1, uid, gid, 0, 0, 0, 0))


def test_which_tiers_others_can_write(monkeypatch) -> None:
    import grp
    import pwd

    me = 1000
    users = {1000: pwd.struct_passwd(("me", "x", 1000, 1000, "", "/home/me", "/bin/sh")),
             1001: pwd.struct_passwd(("you", "x", 1001, 100, "", "/home/you", "/bin/sh"))}
    groups = {1000: grp.struct_group(("me", "x", 1000, [])), 100: grp.struct_group(("users", "x", 100, ["me"])),
              1002: grp.struct_group(("me2", "x", 1002, ["me", "you"]))}
    monkeypatch.setattr(signing.pwd, "getpwuid", lambda uid: users[uid])
    monkeypatch.setattr(signing.pwd, "getpwall", lambda: list(users.values()))
    monkeypatch.setattr(signing.grp, "getgrgid", lambda gid: groups[gid])
    assert signing.shared_reason(stat_of(me, 1000, 0o40755), me) is None
    assert signing.shared_reason(stat_of(0, 0, 0o40755), me) is None  # root's: root can do anything anyway
    assert signing.shared_reason(stat_of(me, 1000, 0o42775), me) is None  # umask 002 in a user private group
    assert signing.shared_reason(stat_of(me, 100, 0o42775), me) == "writable by group users"
    assert signing.shared_reason(stat_of(me, 1002, 0o40775), me) == "writable by group me2"  # named alike, shared
    assert signing.shared_reason(stat_of(me, 1000, 0o40757), me) == "writable by others"
    assert signing.shared_reason(stat_of(1001, 100, 0o40755), me) == "owned by you"
    assert signing.shared_reason(stat_of(4242, 100, 0o40755), me) == "owned by uid 4242"
    users[1003] = pwd.struct_passwd(("guest", "x", 1003, 1000, "", "/", "/bin/sh"))  # another user in my group
    assert signing.shared_reason(stat_of(me, 1000, 0o42775), me) == "writable by group me"


def test_a_private_tier_holds_an_entry_file_others_can_write_to_the_shared_rule(keys, monkeypatch) -> None:
    signer, trusted, _ = keys
    monkeypatch.setattr(signing, "shared_reason", lambda st: None if st.st_uid == os.geteuid() else "owned by you")
    mine, theirs = stat_of(os.geteuid(), 0, 0o100644), stat_of(os.geteuid() + 1, 0, 0o100644)
    seal = cache_entry.Seal(1, bytes(32), KEY, bytes(32), b"")
    signing.Policy(None, shared=False).check("e", seal, mine)
    with pytest.raises(cache_entry.UntrustedEntry, match="^e is owned by you and CACHE_TRUSTED_KEYS is not set$"):
        signing.Policy(None, shared=False).check("e", seal, theirs)
    with pytest.raises(cache_entry.UntrustedEntry, match="^e is unsigned$"):
        signing.Policy(trusted, shared=False).check("e", seal, theirs)
    blob = cache_entry.seal(b"x", KEY, signer)
    size = len(blob) - len(b"x")
    fields = struct.unpack(f"<24sQ32s{cache_entry.KEY_BYTES}s{cache_entry.KEYID_BYTES}sB{cache_entry.SIGNATURE_BYTES}s",
                           blob[-size:])
    signed = cache_entry.Seal(1, fields[2], KEY, fields[4], fields[6][:fields[5]])
    signing.Policy(trusted, shared=False).check("e", signed, theirs)


def test_entries_are_never_writable_by_group_or_others(tmp_path: Path) -> None:
    source = tmp_path / "x.o"
    source.write_bytes(b"x")
    source.chmod(0o775)  # a umask of 002
    cache_entry.write_entry(source, tmp_path / "entry")
    cache_entry.store_sealed(cache_entry.seal(b"x", "hit"), tmp_path / "d" / "hit", 0o100666)
    assert (tmp_path / "entry").stat().st_mode & 0o777 == 0o755
    assert (tmp_path / "d" / "hit").stat().st_mode & 0o777 == 0o644


@pytest.mark.parametrize("case", ["missing", "not pem", "encrypted", "rsa", "p-384", "public key"])
def test_a_bad_signing_key_is_one_line_naming_the_file_and_the_fix(tmp_path: Path, case: str) -> None:
    path = tmp_path / "key.pem"
    secret = b""
    if case == "not pem":
        path.write_bytes(b"hello\n")
    elif case == "encrypted":
        secret = ed25519.Ed25519PrivateKey.generate().private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(b"passphrase"))
        path.write_bytes(secret)
    elif case in ("rsa", "p-384"):
        key = rsa.generate_private_key(65537, 1024) if case == "rsa" else ec.generate_private_key(ec.SECP384R1())
        secret = pem_private(key)
        path.write_bytes(secret)
    elif case == "public key":
        path.write_bytes(key_files(tmp_path, "k")[1].read_bytes())
    with pytest.raises(UserError) as err:
        signing.load_signer(path)
    message = str(err.value)
    assert message.startswith(f"CACHE_SIGNING_KEY={path}") and "\n" not in message, message
    assert "openssl genpkey -algorithm ed25519" in message
    body = b"".join(line for line in secret.splitlines() if b"-----" not in line)
    assert not body or body[:20].decode() not in message  # nothing of the key is shown


@pytest.mark.parametrize("case", ["missing", "empty", "private key", "rsa"])
def test_bad_trusted_keys_are_one_line_naming_the_file_and_the_fix(tmp_path: Path, case: str) -> None:
    path = tmp_path / "trusted.pem"
    if case == "empty":
        path.write_bytes(b"")
    elif case == "private key":
        path.write_bytes(key_files(tmp_path, "k")[0].read_bytes())
    elif case == "rsa":
        path.write_bytes(key_files(tmp_path, "ok")[1].read_bytes() + pem_public(rsa.generate_private_key(65537, 1024)))
    with pytest.raises(UserError) as err:
        signing.load_trusted(path)
    message = str(err.value)
    assert message.startswith(f"CACHE_TRUSTED_KEYS={path}") and "\n" not in message, message
    assert "openssl pkey -in cache-signing.pem -pubout" in message
    if case == "private key":
        assert "holds a private key, not public keys" in message
    if case == "rsa":
        assert "public key 2 is a RSAPublicKey" in message


def test_the_variables_are_checked_and_made_absolute(tmp_path: Path) -> None:
    private, public = key_files(tmp_path, "ci")
    env = {"CACHE_SIGNING_KEY": private.name, "CACHE_TRUSTED_KEYS": str(public)}
    assert buildvars.cache_keys(env, tmp_path) == (str(private), str(public))
    assert buildvars.cache_keys({"CACHE_SIGNING_KEY": "", "CACHE_TRUSTED_KEYS": ""}, tmp_path) == ("", "")
    with pytest.raises(UserError, match="^CACHE_TRUSTED_KEYS=.* holds a private key"):
        buildvars.cache_keys({"CACHE_SIGNING_KEY": "", "CACHE_TRUSTED_KEYS": str(private)}, tmp_path)
    assert {"CACHE_SIGNING_KEY", "CACHE_TRUSTED_KEYS"} <= buildvars.NOT_SHAPING  # not in the provenance Statement


def test_what_a_run_says_about_shared_tiers_and_untrusted_entries(tmp_path: Path, keys) -> None:
    import io

    from opencoti_scons import cachedir
    from opencoti_scons.progress import BuildRun

    signer, trusted, stranger = keys
    url = "redis://:s3cret@cache.example:6379/0"

    def said(signer, trusted, shared_dir: str | None = None) -> list[str]:
        out = io.StringIO()
        tiers = cachedir.Tiers(BuildRun(out=out), remote_cache.Remote(url, print), signer, trusted)
        if shared_dir:
            tiers.found_shared(shared_dir, "writable by group team")
        return out.getvalue().splitlines()

    shown = "redis://:***@cache.example:6379/0"
    assert said(None, None) == [
        f"WARN: cache: CACHE_URL {shown} is shared and CACHE_TRUSTED_KEYS is not set: not reading it, and nothing is "
        "pushed to it unsigned (set CACHE_TRUSTED_KEYS=FILE, docs/scale.md; CACHE_SIGNING_KEY=PEM to push)"]
    assert said(signer, None, "/srv/cache") == [
        f"WARN: cache: CACHE_URL {shown} is shared and CACHE_TRUSTED_KEYS is not set: not reading it (set "
        "CACHE_TRUSTED_KEYS=FILE, docs/scale.md); the entries this build signs are still pushed",
        "WARN: cache: CACHE_DIR /srv/cache is shared (writable by group team) and CACHE_TRUSTED_KEYS is not set: not "
        "reading it (set CACHE_TRUSTED_KEYS=FILE, or `chmod go-w /srv/cache` if it is yours alone, docs/scale.md); "
        "the entries this build signs are still pushed"]
    assert said(None, trusted) == [f"NOTE: cache: CACHE_URL {shown} is shared: its entries signed by "
                                   "CACHE_TRUSTED_KEYS are read, and nothing is pushed to it without CACHE_SIGNING_KEY"]
    assert said(signer, trusted) == []
    assert said(stranger, trusted) == [f"NOTE: cache: CACHE_SIGNING_KEY (key {signing.shown_id(stranger.keyid)}) is not "
                                       "in CACHE_TRUSTED_KEYS: what this build pushes to a shared tier, it will not "
                                       "read back"]
    out = io.StringIO()
    tiers = cachedir.Tiers(BuildRun(out=out), None, None, trusted)
    for kind in (signing.UNSIGNED, signing.UNSIGNED, signing.UNKNOWN_KEY):
        tiers.untrusted(tiers.local, "local", cache_entry.UntrustedEntry(kind, f"e is {kind}"), "o/x.o")
    assert out.getvalue().splitlines() == [
        f"WARN: cache: untrusted entry in local: e is {kind}; not used, building o/x.o (more like it are counted in "
        "the cache line)" for kind in (signing.UNSIGNED, signing.UNKNOWN_KEY)]
    assert tiers.report() == ["cache: local 0 hits / 0 misses / 0 corrupt / 0 pushed / 3 untrusted"]
    assert "s3cret" not in repr(said(None, None))
