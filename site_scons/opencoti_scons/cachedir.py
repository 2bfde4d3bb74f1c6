"""The object cache (CacheDir) with verified entries and keys that do not depend on paths: SCons's CacheDir
subclassed (through opencoti_scons.engine), for site_tools/verified_cache.py. Over SCons's CacheDir it changes
five things:

- every entry carries its SHA-256 (opencoti_build.cache.cache_entry); a retrieved entry is checked before
  it is used, and a corrupt or truncated one is a miss: one WARN naming it, the entry removed, the
  target rebuilt and pushed again;
- a multi-target step (a fat object and its ``.aarch64`` twin) is retrieved only when every target
  has an entry, so a pair comes out whole or not at all (SCons pushes each half; a run killed
  between the two pushes leaves a half that is never used);
- keys hash the children's contents and the step's command read layout-neutral (cache_entry.neutral_command:
  prefix maps as one canonical set, the checkout root, SRC, LLAMACPP and BUILD_DIR replaced by placeholders),
  so every layout shares entries; an entry carries its key, checked on every restore;
- a cache directory the user cannot write is read and never written (one NOTE); one that cannot be
  created is a one-line error. No lock files: the config is written once, by rename;
- who wrote an entry is checked where others can write (opencoti_build.cache.signing): a shared tier (Redis; a
  CACHE_DIR owned by someone else or writable by a group or by others) is read only with CACHE_TRUSTED_KEYS, and
  then only its entries a trusted key signed (any other: one WARN per kind and tier, counted as untrusted, the step
  built); it is pushed to only with CACHE_SIGNING_KEY, which signs every entry the build writes. Without trusted
  keys a shared tier is not read, in one WARN line.

With a CACHE_URL, RemoteVerifiedCacheDir puts a shared tier behind it (remote_cache.SharedTier: Redis, or a REAPI
cache, opencoti_build.cache.reapi): same keys, same checks, a step's targets fetched together and pushed together; a
remote that fails is turned off for the run with one WARN. Each tier's hits, misses, corrupt entries and pushes go
into one line before the summary.

SCons makes the CacheDir itself, from a class and a path: :func:`cache_class` gives it a class bound to this
run's :class:`Tiers` (counts, the remote, what was said), so no state outlives the run or hides in a module.
"""
from __future__ import annotations

import contextlib
import json
import os
import time

import SCons.CacheDir
import SCons.Util

from opencoti_build import errors, project, tempfiles
from opencoti_build.cache import cache_entry, remote_cache, signing
from opencoti_build.report import steplines
from opencoti_scons import engine
from opencoti_scons.cache_tiers import Tiers
from opencoti_scons.progress import dry_run_input_rebuilt, moved_inputs

PROJECT = str(project.ROOT)


def cache_class(tiers: Tiers) -> type[VerifiedCacheDir]:
    """The CacheDir class SCons instantiates for this run: the remote one when ``tiers`` has a remote."""
    base = RemoteVerifiedCacheDir if tiers.remote is not None else VerifiedCacheDir
    return type(base.__name__, (base,), {"tiers": tiers})


class VerifiedCacheDir(engine.ConfiguredCacheDir):
    tiers: Tiers  # set by cache_class

    def read_config(self, path: str) -> None:
        config = os.path.join(path, "config")
        if not engine.executes_actions() and not os.path.isfile(config):
            self.config, self.writable = {"prefix_len": SCons.CacheDir.CACHE_PREFIX_LEN}, False  # -n writes nothing
            return
        try:
            if not os.path.isfile(config):
                os.makedirs(path, mode=0o755, exist_ok=True)  # a new cache is its user's alone, whatever the umask
                _write_config(config)
            elif os.access(path, os.W_OK):
                tempfiles.remove_stale(path, "config")  # what a run killed (or out of space) while writing it left
                _remove_unlocked_configs(path)
            with open(config, encoding="utf-8") as fh:
                self.config = json.load(fh)
        except OSError as exc:
            raise errors.UserError(errors.os_error_line(exc, f"CACHE_DIR={path}") +
                                   " (or pass CACHE_DIR= to build without a cache)") from None
        except ValueError:
            raise errors.UserError(f"CACHE_DIR={path}: its config file is not JSON; remove {config}") from None
        self.writable = os.access(path, os.W_OK | os.X_OK)
        if not self.writable and not self.tiers.readonly_said:
            self.tiers.readonly_said = True
            self.tiers.run.say(f"NOTE: cache {path} is read-only for this user: entries are read, none are written")
        self._find_shared(path)

    def _find_shared(self, path: str) -> None:
        """Whether others can write CACHE_DIR (once a run: SCons may make a CacheDir per environment)."""
        if self.tiers.local_looked:
            return
        self.tiers.local_looked = True
        try:
            reason = signing.shared_reason(os.stat(path))
        except OSError:
            return  # not there (a dry run's): nobody else's
        if reason is not None:
            self.tiers.found_shared(path, reason)

    def is_readonly(self) -> bool:
        return super().is_readonly() or not self.writable

    def CacheDebug(self, fmt: str, target, cachefile: str) -> None:  # noqa: N802 (SCons's name)
        """SCons's --cache-debug line for ``target``, through the run's one file (Tiers.debug)."""
        self.tiers.debug(fmt % (target, os.path.basename(cachefile)) + "requests: %d, hits: %d, misses: %d, hit "
                         "rate: %.2f%%\n" % (self.requests, self.hits, self.misses, self.hit_ratio))

    def cachepath(self, node) -> tuple:
        if not self.is_enabled():
            return None, None
        try:
            sig = node.cachesig  # SCons' own slot for the key; cleared with the node's other signatures
        except AttributeError:
            sig = node.cachesig = _portable_signature(node)
        cachedir = os.path.join(self.path, sig[: self.config["prefix_len"]].upper())
        return cachedir, os.path.join(cachedir, sig)

    def get_cachedir_csig(self, node) -> str | None:
        _, cachefile = self.cachepath(node)
        if not self.tiers.reads(self.tiers.local_shared is not None):
            return None
        try:
            return cache_entry.content_signature(cachefile, SCons.Util.get_current_hash_algorithm_used(),
                                                 self.tiers.local_policy)
        except (OSError, cache_entry.CorruptEntry, cache_entry.UntrustedEntry):
            return None

    def retrieve(self, node) -> bool:
        if not self.is_enabled() or dry_run_input_rebuilt(node):
            return False
        self.requests += 1
        fetched = self._fetch(node)
        # Only when asked: cachepath() after a fetch may compute a key again, reading its inputs' signatures at
        # another moment; made on every retrieve, the seeded edit-during-build trials (tests/soak/test_faults.py)
        # found 6 of 24 rebuilds differing from a clean build.
        if engine.cache_debug():
            self.CacheDebug("CacheRetrieve(%s):  retrieving from %s\n" if fetched else
                            "CacheRetrieve(%s):  %s not in cache\n", node, self.cachepath(node)[1])
        if not fetched:
            return False
        self.hits += 1
        peers = node.get_executor().get_all_targets()
        if engine.prints_actions() and node is peers[0]:  # one line per step, numbered as every step line
            self.tiers.run.say_step(node, steplines.cached_line([str(t) for t in peers]))
        if engine.cache_show():
            node.build(presub=0, execute=0)
        return True

    def _fetch(self, node) -> bool:
        """Bring ``node`` from the cache, verified; False: a miss (the step is built)."""
        peers = node.get_executor().get_all_targets()
        entries = [self.cachepath(t)[1] for t in peers]
        if not self.tiers.reads(self.tiers.local_shared is not None):
            return self._miss(node, peers, counted=False)  # shared, and no trusted keys: not read
        if not all(os.path.isfile(e) for e in entries):
            return self._miss(node, peers)  # a pair comes out whole or not at all
        _, cachefile = self.cachepath(node)
        if engine.executes_actions() and node is peers[0]:
            refused = self._peers_refused(node, entries)
            if refused == "corrupt":
                return False
            if refused:  # outdated (a miss), or untrusted: the remote tier may hold the step whole and signed
                return self._miss(node, peers, counted=refused == "outdated")
        if not engine.executes_actions() and not all(self._vouched(e) for e in entries):
            return self._miss(node, peers)  # what a build would refuse, a dry run does not count from the cache
        if engine.executes_actions():
            answer = self._restore(node, peers, cachefile)
            if answer is not None:
                return answer
        self.tiers.local.add("hits")
        return True

    def _restore(self, node, peers: list, cachefile: str) -> bool | None:
        """Restore ``node`` from its local entry, checked on the way: None when it was, else what the fetch answers
        (a miss, which a remote tier may still turn into a hit, or False)."""
        try:
            cache_entry.read_entry(cachefile, node.get_abspath(), self.tiers.local_policy)
        except cache_entry.UntrustedEntry as exc:
            self.tiers.untrusted(self.tiers.local, "local", exc, node)
            return self._miss(node, peers, counted=False)
        except cache_entry.OutdatedEntry:
            self._remove(cachefile)  # an earlier format's: replaced by this build's push, without a WARN
            return self._miss(node, peers)
        except cache_entry.CorruptEntry as exc:
            self._drop(cachefile, f"{exc}; rebuilding {node}")
            return False
        except cache_entry.CannotWrite as exc:
            self.tiers.run.say(f"WARN: cache: {exc} from the cache; rebuilding it")
            return False
        except OSError as exc:
            self.tiers.run.say(f"WARN: cache: cannot read {cachefile} for {node}: {exc.strerror}; rebuilding it")
            return False
        with contextlib.suppress(OSError):
            os.utime(cachefile)  # recently used, for whoever prunes the cache by age
        return None

    def _peers_refused(self, node, entries: list[str]) -> str:
        """Whether the step's entries are whole, under their own keys and vouched for, checked before its first
        target is restored: a damaged twin entry is said (one WARN, counted) and removed, not restored half a step
        late; an untrusted one is said and counted; an earlier format's is removed. "" when they are, else the worst
        of "corrupt" (or gone), "untrusted" and "outdated"."""
        found = {""}
        for entry in entries:
            try:
                cache_entry.check_trailer(entry, self.tiers.local_policy)
            except cache_entry.UntrustedEntry as exc:
                self.tiers.untrusted(self.tiers.local, "local", exc, node)
                found.add("untrusted")
            except cache_entry.OutdatedEntry:
                self._remove(entry)  # replaced by this build's push, without a WARN
                found.add("outdated")
            except cache_entry.CorruptEntry as exc:
                self._drop(entry, f"{exc}; rebuilding {node}")
                found.add("corrupt")
            except OSError:
                found.add("corrupt")  # gone meanwhile (another build's prune): a miss
        return next(kind for kind in ("corrupt", "untrusted", "outdated", "") if kind in found)

    def _vouched(self, entry: str) -> bool:
        """Whether an entry is whole and one this run would use (a dry run's quiet look: nothing said or removed)."""
        try:
            cache_entry.check_trailer(entry, self.tiers.local_policy)
        except (OSError, cache_entry.CorruptEntry, cache_entry.UntrustedEntry):
            return False
        return True

    def _miss(self, node, peers: list, counted: bool = True) -> bool:
        """What a step some of whose entries this tier lacks gets: nothing (a remote tier overrides it).
        ``counted``: a miss of this tier's (not one it was not asked for, or refused as untrusted)."""
        if counted:
            self.tiers.local.add("misses", len(peers))
        return False

    def _drop(self, cachefile: str, why: str) -> None:
        self.tiers.local.add("corrupt")
        self.tiers.run.say(f"WARN: cache: corrupt entry {why}")
        self._remove(cachefile)

    @staticmethod
    def _remove(cachefile: str) -> None:
        try:
            os.unlink(cachefile)
        except OSError:
            pass

    def push(self, node):
        if self.is_readonly() or not self.is_enabled() or node.nocache or not engine.executes_actions():
            return None
        if self.tiers.local_shared is not None and self.tiers.signer is None:
            return None  # a shared CACHE_DIR is given signed entries only
        if moved_inputs(node):
            return None  # built from inputs that moved under it: its key names other bytes (progress.moved_inputs)
        cachedir, cachefile = self.cachepath(node)
        if _holds_its_entry(cachefile, self.tiers.local_policy):
            self.CacheDebug("CachePush(%s):  %s already exists in cache\n", node, cachefile)
            return None  # another build pushed the same step first
        try:
            os.makedirs(cachedir, mode=0o755, exist_ok=True)
            tempfiles.remove_stale(cachedir)  # what a push killed here earlier left
            cache_entry.write_entry(node.get_abspath(), cachefile, self.tiers.signer)
            self.tiers.local.add("pushed")
            self.CacheDebug("CachePush(%s):  pushing to %s\n", node, cachefile)
        except OSError as exc:
            self.tiers.push_failed(exc, f"cannot push {node} to {cachefile}")
        return None


LEGACY_CONFIG_AGE_S = 3600  # older builds wrote the config through an unlocked ``.config.XXXXXXXX``


def _remove_unlocked_configs(path: str) -> None:
    """Remove what older builds' config writes left (no lock tells a live one: only those an hour old)."""
    now = time.time()
    with os.scandir(path) as entries:
        for entry in entries:
            if entry.name.startswith(".config.") and not entry.name.endswith(".tmp"):
                with contextlib.suppress(OSError):
                    if now - entry.stat().st_mtime > LEGACY_CONFIG_AGE_S:
                        os.unlink(entry.path)


def _holds_its_entry(cachefile: str, policy: signing.Policy) -> bool:
    """Whether ``cachefile`` is a whole entry of this format for its key, one ``policy`` vouches for: anything else
    there (an earlier format's, a damaged or swapped one a retrieve did not reach, an untrusted one) is replaced by
    the push, not kept."""
    try:
        cache_entry.check_trailer(cachefile, policy)
    except (OSError, cache_entry.CorruptEntry, cache_entry.UntrustedEntry):
        return False
    return True


def _write_config(config: str) -> None:
    """Write the cache's config by rename (first writer wins; later ones write the same bytes); no temporary stays."""
    fd, tmp = tempfiles.create(config)
    try:
        with os.fdopen(fd, "w") as fh:
            json.dump({"prefix_len": SCons.CacheDir.CACHE_PREFIX_LEN}, fh)
        os.replace(tmp, config)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _roots(node) -> list[tuple[bytes, bytes]]:
    env = node.get_build_env()
    named = [(name, env.get(name) or None) for name in ("BUILD_DIR", "SRC", "LLAMACPP")]
    named = [(name, path if path is None or os.path.isabs(path) else None) for name, path in named]
    return cache_entry.path_roots(named + [("ROOT", PROJECT)], PROJECT)


def _portable_signature(node) -> str:
    """SCons' cachedir build signature with the checkout's paths neutralised (see the module docstring)."""
    roots = _roots(node)
    sigs = [child.get_cachedir_csig() for child in node.children()]
    # SCons releases a built target's executor; its key was computed before that (it was pushed), and
    # get_cachedir_csig only asks again for a file that exists, whose key is then unused.
    executor = node.get_executor()
    contents = executor.get_contents() if executor is not None else b""
    sigs.append(SCons.Util.hash_signature(cache_entry.neutral_command(contents, roots)))
    sigs.append(cache_entry.neutral(node.get_abspath().encode(), roots).decode())
    return engine.combined_signature(sigs)


class RemoteVerifiedCacheDir(VerifiedCacheDir):
    """The local tier with a shared tier behind it (Redis or REAPI: remote_cache.SharedTier): looked up after a local
    miss, a hit filling the local tier; every built step pushed to both."""

    def _fetch(self, node) -> bool:
        _, cachefile = self.cachepath(node)
        with self.tiers.pending_lock:
            pending = self.tiers.pending.pop(cachefile, None)
        if pending is None:
            return super()._fetch(node)
        data, mode = pending
        try:
            cache_entry.restore_bytes(data, node.get_abspath(), mode)
        except OSError as exc:
            self.tiers.run.say(f"WARN: cache: cannot write {node}: {exc.strerror}; rebuilding it")
            return False
        self.tiers.remote_counts.add("hits")
        return True

    def _miss(self, node, peers: list, counted: bool = True) -> bool:
        super()._miss(node, peers, counted)
        remote = self.tiers.remote
        if remote is None or not engine.executes_actions() or not self.tiers.reads(shared=True):
            return False
        entries = [self.cachepath(t)[1] for t in peers]
        keys = [os.path.basename(e) for e in entries]
        values = remote.pull(keys)  # every target of the step in one round trip: a pair is one unit
        if values is None:
            return False
        present = [v for v in values if v]  # an absent (None) or empty value is a miss
        if len(present) != len(values):
            self.tiers.remote_counts.add("misses", len(peers))
            return False
        found = self._checked(node, remote, keys, present)
        if found is None:
            return False
        self._fill_local(entries, found)
        with self.tiers.pending_lock:
            self.tiers.pending.update((e, (data, mode)) for e, (_, data, mode) in zip(entries, found))
        return self._fetch(node)

    def _fill_local(self, entries: list[str], found: list[tuple[bytes, bytes, int]]) -> None:
        """A remote hit fills the local tier, so the next build on this machine does not ask again."""
        for entry, (blob, _, mode) in zip(entries, found):
            if not self.is_readonly() and not _holds_its_entry(entry, self.tiers.local_policy):
                try:
                    cache_entry.store_sealed(blob, entry, mode)
                except OSError:
                    pass  # the local tier is a copy here; the remote hit stands without it

    def _checked(self, node, remote: remote_cache.SharedTier, keys: list[str],
                 values: list) -> list[tuple[bytes, bytes, int]] | None:
        """Every value of a step checked (a damaged one is dropped, not left for later): (entry bytes, content, mode)
        each, or None when one is refused. One WARN a step: a swapped REAPI entry makes each of its targets corrupt."""
        found = []
        said = False
        for key, value in zip(keys, values):
            try:
                found.append(remote.unpack(value, key, self.tiers.remote_policy))
            except cache_entry.UntrustedEntry as exc:  # whole, but nobody vouches for it: a signed push replaces it
                self.tiers.untrusted(self.tiers.remote_counts, remote.url, exc, node)
            except cache_entry.CorruptEntry as exc:
                self.tiers.remote_counts.add("corrupt")
                if not said:
                    self.tiers.run.say(f"WARN: cache: corrupt entry {exc} in {remote.url}; {remote.corrupt_fate}, "
                                       f"rebuilding {node}")
                said = True
                remote.drop(key, value)
        return found if len(found) == len(values) else None

    def push(self, node):
        super().push(node)
        remote = self.tiers.remote
        if (remote is None or remote.signer is None or SCons.CacheDir.CacheDir.is_readonly(self)
                or not self.is_enabled() or not engine.executes_actions()):
            return None  # unsigned, nothing goes to a shared tier
        executor = node.get_executor()
        peers = executor.get_all_targets() if executor is not None else [node]
        if node is not peers[0]:
            return None  # SCons pushes each target of a step in turn, after the step: the first push sends them all
        if any(t.nocache or moved_inputs(t) or not os.path.isfile(t.get_abspath()) for t in peers):
            return None  # a step goes whole, or not at all
        items = [(os.path.basename(self.cachepath(t)[1]), t.get_abspath()) for t in peers]
        self.tiers.remote_counts.add("pushed", remote.push_step(items))
        return None

