"""One run's cache tiers (:class:`Tiers`): the counts of the local tier and the shared one (Redis, REAPI), the remote
itself, the signing key and the trusted keys, and what was said about them. SCons may make a CacheDir object per
environment; the run has one Tiers, which opencoti_scons/cachedir.py binds to the class SCons instantiates."""
from __future__ import annotations

import atexit
import threading
from typing import Any

from opencoti_build import errors
from opencoti_build.cache import cache_entry, remote_cache, signing
from opencoti_scons import engine
from opencoti_scons.progress import BuildRun


class Tiers:
    """The cache tiers' state for one run (not per CacheDir object: SCons may make one per environment)."""

    def __init__(self, run: BuildRun, remote: remote_cache.SharedTier | None = None,
                 signer: signing.Signer | None = None, trusted: signing.TrustedKeys | None = None) -> None:
        self.run = run
        self.remote = remote
        self.signer = signer  # CACHE_SIGNING_KEY: signs every entry this run writes
        self.trusted = trusted  # CACHE_TRUSTED_KEYS: whose entries a shared tier may give
        self.local = remote_cache.TierCounts()
        self.remote_counts = remote_cache.TierCounts()
        self.readonly_said = False
        self.push_failure_said = False
        self.local_policy = signing.Policy(trusted, shared=False)  # until read_config finds CACHE_DIR shared
        self.local_shared: str | None = None  # why others can write CACHE_DIR (signing.shared_reason), or None
        self.local_looked = False  # whether CACHE_DIR's owner and mode were looked at (once a run)
        self.remote_policy = signing.Policy(trusted, shared=True)
        self._untrusted_said: set[tuple[str, str]] = set()
        # a step's other targets, fetched from the remote with the first one and verified with it
        self.pending: dict[str, tuple[bytes, int]] = {}
        self.pending_lock = threading.Lock()
        self._debug_file: Any = None  # --cache-debug=FILE, opened by the first line of the run
        if remote is not None:  # a remote is always shared: anyone with access to the server can write it
            self._say_shared(f"CACHE_URL {remote.url}", "shared")

    def debug(self, text: str) -> None:
        """One ``--cache-debug`` line (SCons's own format): to stdout for ``-``, else to the file, which this run
        truncates once (SCons reopens it for every CacheDir object, so two environments' lines would clobber)."""
        where = engine.cache_debug()
        if not where:
            return
        if where == "-":
            self.run.say(text.rstrip("\n"))
            return
        with self.pending_lock:
            if self._debug_file is None:
                self._debug_file = open(where, "w", encoding="utf-8")  # noqa: SIM115 (open for the whole run)
                atexit.register(self._debug_file.close)
            self._debug_file.write(text)
            self._debug_file.flush()

    def _say_shared(self, tier: str, why: str, hint: str = "") -> None:
        """The line for a shared tier when this run cannot both read it and push to it: without trusted keys it is
        not read (one WARN); without a signing key nothing is pushed to it (a note, said when it changes)."""
        if self.trusted is None:
            fix = f"set CACHE_TRUSTED_KEYS=FILE{hint}, docs/scale.md"
            self.run.say(f"WARN: cache: {tier} is {why} and CACHE_TRUSTED_KEYS is not set: " + (
                f"not reading it ({fix}); the entries this build signs are still pushed" if self.signer is not None
                else f"not reading it, and nothing is pushed to it unsigned ({fix}; CACHE_SIGNING_KEY=PEM to push)"))
            return
        if self.signer is None:
            self.run.note(f"cache-unsigned {tier}", f"NOTE: cache: {tier} is {why}: its entries signed by "
                          "CACHE_TRUSTED_KEYS are read, and nothing is pushed to it without CACHE_SIGNING_KEY")
        elif self.signer.keyid not in self.trusted.keys:
            self.run.note("cache-own-key", f"NOTE: cache: CACHE_SIGNING_KEY (key {signing.shown_id(self.signer.keyid)}) "
                          "is not in CACHE_TRUSTED_KEYS: what this build pushes to a shared tier, it will not read back")

    def found_shared(self, path: str, reason: str) -> None:
        """CACHE_DIR is shared (others can write it: ``reason``): its entries are held to the shared rule."""
        self.local_shared = reason
        self.local_policy = signing.Policy(self.trusted, shared=True)
        mine = not reason.startswith("owned by ")
        self._say_shared(f"CACHE_DIR {path}", f"shared ({reason})", f", or `chmod go-w {path}` if it is yours alone"
                         if mine else "")

    def reads(self, shared: bool) -> bool:
        """Whether a tier is read this run: a shared one only with trusted keys."""
        return not shared or self.trusted is not None

    def untrusted(self, counts: remote_cache.TierCounts, tier: str, exc: cache_entry.UntrustedEntry,
                  node: object) -> None:
        """An entry no trusted key vouches for: counted, and said once per kind and tier."""
        counts.add("untrusted")
        with self.pending_lock:
            said = (tier, exc.kind) in self._untrusted_said
            self._untrusted_said.add((tier, exc.kind))
        if not said:
            self.run.say(f"WARN: cache: untrusted entry in {tier}: {exc}; not used, building {node} (more like it are "
                         "counted in the cache line)")

    def push_failed(self, exc: OSError, what: str) -> None:
        """A push to the local tier failed: said once a run (a full disk fails every push that follows)."""
        self.local.add("failed")
        with self.pending_lock:
            said, self.push_failure_said = self.push_failure_said, True
        if not said:
            self.run.say(f"WARN: cache: {errors.os_error_line(exc, what)}; the build goes on (later failed pushes "
                         "are counted in the cache line)")

    def report(self) -> list[str]:
        """The lines printed before the summary: the remote's skipped entries, then every tier's counts."""
        tiers = [("local", self.local)] + ([(self.remote.url, self.remote_counts)] if self.remote is not None else [])
        if not any(counts.any() for _, counts in tiers):
            return []
        note = self.remote.skipped_note() if self.remote is not None else None
        return ([note] if note else []) + [remote_cache.tiers_line(tiers)]
