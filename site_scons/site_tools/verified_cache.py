"""SCons tool: the object cache (CacheDir) with verified entries and keys that do not depend on paths.

``env.VerifiedCacheDir(path)`` turns it on; ``env.VerifiedCacheDir(path, url)`` puts a shared tier behind it (Redis
for redis:// and rediss://, a REAPI cache for grpc:// and grpcs://: opencoti_build.cache.remote_cache.open_tier);
``signing_key`` (a PEM private key file) signs every entry written, ``trusted_keys`` (a PEM file of public keys)
says whose entries a shared tier may give (opencoti_build.cache.signing; a bad key file is a UserError, raised
before anything is written). What the cache checks, how keys are made and what each tier does:
opencoti_scons/cachedir.py. Each tier's hits, misses, corrupt entries and pushes go into one line printed before
the build's summary.

Load it with ``run=`` (the run's ``opencoti_scons.progress.BuildRun``). Construction variables read: BUILD_DIR,
SRC, LLAMACPP (the roots neutralised in keys). Sets (through ``env.CacheDir``) CACHEDIR_CLASS. Method:
VerifiedCacheDir.
"""
from __future__ import annotations

from typing import Any

from opencoti_build.cache import remote_cache, signing
from opencoti_scons import cachedir, engine
from opencoti_scons.progress import BuildRun


def generate(env: Any, run: BuildRun) -> None:
    def verified_cache_dir(env: Any, path: str, url: str = "", signing_key: str = "", trusted_keys: str = "") -> None:
        """Use ``path`` (and the shared tier at ``url``, when given) as the object cache of every environment cloned
        from ``env`` from now on, signing with ``signing_key`` and trusting ``trusted_keys`` (files, when given)."""
        signer = signing.load_signer(signing_key) if signing_key else None
        trusted = signing.load_trusted(trusted_keys) if trusted_keys else None
        remote = remote_cache.open_tier(url, run.say, signer) if url else None
        tiers = cachedir.Tiers(run, remote, signer, trusted)
        env.CacheDir(path, cachedir.cache_class(tiers))
        run.reports.append(tiers.report)

    env.AddMethod(verified_cache_dir, "VerifiedCacheDir")


def exists(env: Any) -> bool:
    return engine.supported()
