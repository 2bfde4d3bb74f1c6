"""Part 4: a second checkout at another path, an empty local cache and a warm shared store (Redis; and a REAPI cache,
BuildGrid, beside it in the same run: bench/reapibench.py).

Checkout A (a copy of the project and of the generated fat tree) is built cold by SCons with
``CACHE_URL=redis://127.0.0.1:P`` (filling Redis); checkout B, a copy of both at another, longer path,
is then built with an empty local cache and the same ``CACHE_URL``. The same with make + ccache 4.7
(bench/makebuild.py's Makefile, ``CCACHE_REMOTE_STORAGE=redis://127.0.0.1:P2`` on a second server,
``CCACHE_BASEDIR`` at the common parent of A' and B' with make run from each checkout's root, so the
rewritten relative paths agree, and ``CCACHE_NOHASHDIR``): A' cold, then B' with an empty private
``CCACHE_DIR`` (and once more with ``make -k``, to see every compile past the first failed twin
archive). B and B' are each run ``runs`` times, interleaved, their outputs and local caches wiped
before every run; the servers stay warm. Every redis-server binds 127.0.0.1 on a free port and is
stopped by its PID.
"""
from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
from pathlib import Path

from bench import fatbench, fattree, reapibench, servers
from bench.measure import median, run
from opencoti_build.report import summary
from opencoti_build.tree import sources

# What a checkout holds for a build (tests/conftest.py copy_checkout copies the same).
CHECKOUT_FILES = ("SConstruct", "build.SConscript")
CHECKOUT_DIRS = ("site_scons", "host", "backends", "package", "native", "vendors")
# ccache's counters this part records (``ccache --print-stats``).
KEEP_GOING = "make+ccache, make -k"
CCACHE_COUNTERS = ("remote_storage_hit", "remote_storage_miss", "remote_storage_write", "remote_storage_error",
                   "remote_storage_timeout", "local_storage_hit", "direct_cache_hit", "preprocessed_cache_hit",
                   "cache_miss")


class RedisServer(servers.RedisServer):
    """The shared store of one builder, and what it holds."""

    def __init__(self) -> None:
        try:
            super().__init__()
        except RuntimeError as exc:
            raise SystemExit(f"bench: the shared part: {exc}") from None
        self.version = self.client.info("server")["redis_version"]

    def usage(self) -> dict:
        """Keys and memory held now."""
        return {"keys": int(self.client.dbsize()), "used_memory": int(self.client.info("memory")["used_memory"])}


def copy_checkout(project: Path, dest: Path) -> Path:
    """What a second clone holds for a build: the build description (no caches, no outputs)."""
    dest.mkdir(parents=True, exist_ok=True)
    for name in CHECKOUT_FILES:
        shutil.copy2(project / name, dest / name)
    for name in CHECKOUT_DIRS:
        shutil.copytree(project / name, dest / name, ignore=shutil.ignore_patterns("__pycache__", "dist"))
    return dest


def tiers(output: str) -> dict[str, dict[str, int]]:
    """The per-tier counts of a build's last ``cache: local … ; redis://… …`` line, by tier name."""
    found = [line for line in output.splitlines() if line.startswith("cache: local ")]
    if not found:
        return {}
    result = {}
    for part in found[-1][len("cache: "):].split("; "):
        m = re.fullmatch(r"(\S+) (\d+) hits / (\d+) misses / (\d+) corrupt / (\d+) pushed", part)
        if m:
            result[m[1]] = dict(zip(("hits", "misses", "corrupt", "pushed"), map(int, m.groups()[1:])))
    return result


def ccache_stats(text: str) -> dict[str, int]:
    """``ccache --print-stats`` (one ``name<TAB>value`` a line) as a dict of its integer counters."""
    stats = {}
    for line in text.splitlines():
        name, _, value = line.partition("\t")
        if value.strip().isdigit():
            stats[name.strip()] = int(value)
    return stats


def digests(out: Path) -> dict[str, str]:
    """sha256 of every file under a build's o/ (objects, their .aarch64 twins, archives, the link)."""
    root = out / "o"
    if not root.is_dir():
        return {}
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file() and not p.name.endswith(".d")}


def compare(reference: dict[str, str], got: dict[str, str]) -> dict:
    """How a build's outputs compare with checkout A's: files present in both, identical, differing (first few)."""
    both = sorted(set(reference) & set(got))
    differ = [k for k in both if reference[k] != got[k]]
    return {"compared": len(both), "identical": len(both) - len(differ), "differing": differ[:5],
            "missing": len(set(reference) - set(got))}


def cache_keys(directory: Path) -> list[str]:
    """``CACHE_SIGNING_KEY=`` and ``CACHE_TRUSTED_KEYS=`` of an ed25519 key pair made in ``directory``: Redis is a
    shared tier, read only with trusted keys and pushed to only signed (docs/scale.md)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ed25519

    private, public = directory / "cache-signing.pem", directory / "cache-trusted.pem"
    if not public.exists():
        key = ed25519.Ed25519PrivateKey.generate()
        directory.mkdir(parents=True, exist_ok=True)
        private.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                              serialization.NoEncryption()))
        public.write_bytes(key.public_key().public_bytes(serialization.Encoding.PEM,
                                                         serialization.PublicFormat.SubjectPublicKeyInfo))
    return [f"CACHE_SIGNING_KEY={private}", f"CACHE_TRUSTED_KEYS={public}"]


class SharedScons(fatbench.SconsBuild):
    """The fat tree's SCons build of one checkout with ``CACHE_URL`` set and the keys in ``keys`` (both checkouts
    sign and trust the same one); its local cache is private."""

    def __init__(self, project: Path, tree: Path, work: Path, jobs: int, url: str, keys: Path) -> None:
        super().__init__(project, tree, work, jobs)
        self.url, self.cache = url, work / "cache"
        self.argv += [f"CACHE_URL={url}", *cache_keys(keys)]
        self.env = {k: v for k, v in os.environ.items()
                    if k not in ("OPENCOTI_CACHE_URL", "OPENCOTI_CACHE_SIGNING_KEY", "OPENCOTI_CACHE_TRUSTED_KEYS")}

    def measure(self) -> dict:
        result = run(self.argv, env=self.env)
        counts = summary.parse(result.output) or {}
        remote = tiers(result.output).get(self.url, {})
        return {"returncode": result.returncode, "wall": result.wall,
                "compiles": sum(1 for line in summary.unprefixed(result.output) if line.startswith("FATCC ")),
                "from_cache": counts.get("cached"), "compiled_steps": counts.get("compiled"),
                "remote_hits": remote.get("hits"), "remote_misses": remote.get("misses"),
                "remote_pushed": remote.get("pushed"), "tail": result.output.splitlines()[-3:]}

    def wipe(self) -> None:
        shutil.rmtree(self.out, ignore_errors=True)
        shutil.rmtree(self.cache, ignore_errors=True)


class SharedMake(fatbench.MakeBuild):
    """make + ccache of one checkout, run from its root, ccache's remote storage on Redis, base_dir set."""

    def __init__(self, project: Path, tree: Path, work: Path, jobs: int, url: str, base_dir: Path, root: Path,
                 keep_going: bool = False) -> None:
        super().__init__(project, tree, work, jobs)
        self.name, self.cwd, self.ccache = KEEP_GOING if keep_going else "make+ccache", root, work / "ccache"
        if keep_going:  # past the failed twin archives: every compile ccache can or cannot restore
            self.argv.append("-k")
        self.env.update(CCACHE_REMOTE_STORAGE=url, CCACHE_BASEDIR=str(base_dir), CCACHE_NOHASHDIR="1",
                        CCACHE_CONFIGPATH=str(work / "ccache.conf"))  # an empty config: no ~/.ccache settings
        (work / "ccache.conf").touch()

    def measure(self) -> dict:
        o = self.build()
        proc = subprocess.run(["ccache", "--print-stats"], env=self.env, capture_output=True, text=True)
        stats = ccache_stats(proc.stdout)
        return {"returncode": o.returncode, "wall": o.wall, "compiles": o.compiles, "preprocesses": o.preprocesses,
                "ccache": {k: stats.get(k) for k in CCACHE_COUNTERS}}

    def wipe(self) -> None:
        shutil.rmtree(self.out, ignore_errors=True)
        shutil.rmtree(self.ccache, ignore_errors=True)


def _outputs(build: SharedScons | SharedMake, objects: list[str],
             reference: dict[str, str] | None) -> tuple[dict, dict[str, str]]:
    """What a build left: x86 objects, twins, the linked binary, and (B, B') the comparison with A's outputs."""
    x86, twins = fatbench._present(build.out, objects)
    got = digests(build.out)
    row = {"x86_objects": x86, "aarch64_twins": twins,
           "binary": (build.out / "o" / sources.HOST_PROGRAM.output).is_file()}
    if reference is not None:
        row["against_a"] = compare(reference, got)
    return row, got


def _reapi_column(server: servers.BuildGridServer | None, scons_a: SharedScons, b: Path, work: Path, jobs: int,
                  log) -> tuple[dict, SharedScons | None]:
    """BuildGrid filled from checkout A (``--cache-populate``: nothing compiled), and checkout B's build from it;
    ({}, None) without BuildGrid."""
    if server is None:
        return {}, None
    log("shared: checkout A's outputs pushed to BuildGrid (--cache-populate, nothing compiled)")
    fill = reapibench.populate(scons_a.argv, server.url)
    if fill["returncode"] != 0:
        raise SystemExit("bench: checkout A's --cache-populate to BuildGrid failed:\n" + "\n".join(fill["tail"]))
    fill.pop("tail")
    scons_r = SharedScons(b / "checkout", b / "src", b / "scons-reapi", jobs, server.url, work / "keys")
    scons_r.name = reapibench.NAME
    return {"buildgrid": servers.buildgrid_version(), "populate": fill, "usage": reapibench.usage(server)}, scons_r


def measure(project: Path, work: Path, tus: int, runs: int, jobs: int, log) -> dict:
    """Checkouts A and B (scons), A' and B' (make + ccache) of one generated tree; see the module docstring."""
    shutil.rmtree(work, ignore_errors=True)
    a, b = work / "a", work / "b-a-second-checkout-at-another-longer-path"
    for root in (a, b):
        copy_checkout(project, root / "checkout")
    tree = fattree.generate(a / "src", tus)
    shutil.copytree(a / "src", b / "src", symlinks=True)
    objects = fatbench.object_paths(tree.root)
    scons_server = make_server = reapi_server = None
    try:
        scons_server, make_server = RedisServer(), RedisServer()
        scons_a = SharedScons(a / "checkout", a / "src", a / "scons", jobs, scons_server.url, work / "keys")
        scons_b = SharedScons(b / "checkout", b / "src", b / "scons", jobs, scons_server.url, work / "keys")
        log(f"shared: {tus} TUs, writing the Makefiles of A' and B'")
        make_a = SharedMake(a / "checkout", a / "src", a / "make", jobs, make_server.url, work, a)
        make_b = SharedMake(b / "checkout", b / "src", b / "make", jobs, make_server.url, work, b)
        make_k = SharedMake(b / "checkout", b / "src", b / "make", jobs, make_server.url, work, b, keep_going=True)

        log("shared: cold scons build of checkout A (fills Redis)")
        cold_scons = scons_a.measure()
        tail = cold_scons.pop("tail")
        if cold_scons["returncode"] != 0:
            raise SystemExit("bench: the cold scons build of checkout A failed:\n" + "\n".join(tail))
        row, scons_ref = _outputs(scons_a, objects, None)
        cold_scons.update(row)
        log("shared: cold make+ccache build of checkout A' (fills the second Redis)")
        cold_make = make_a.measure()
        if cold_make["returncode"] != 0:
            raise SystemExit(f"bench: the cold make+ccache build of checkout A' failed (rc {cold_make['returncode']})")
        row, make_ref = _outputs(make_a, objects, None)
        cold_make.update(row)
        usage = {"scons": scons_server.usage(), "make+ccache": make_server.usage()}
        order = [(scons_b, scons_ref), (make_b, make_ref), (make_k, make_ref)]
        reapi_server = reapibench.start(work, log)
        reapi, scons_r = _reapi_column(reapi_server, scons_a, b, work, jobs, log)
        order[1:1] = [(scons_r, scons_ref)] if scons_r is not None else []

        second: dict[str, list[dict]] = {build.name: [] for build, _ in order}
        for i in range(runs):
            for build, ref in order if i % 2 == 0 else order[::-1]:
                store = "BuildGrid" if build.name == reapibench.NAME else "Redis"
                log(f"shared: run {i + 1}/{runs}: {build.name} in checkout B (empty local cache, warm {store})")
                build.wipe()
                outcome = build.measure()
                outcome.pop("tail", None)
                outcome.update(_outputs(build, objects, ref)[0])
                second[build.name].append(outcome)
        ratios = [s["wall"] / m["wall"] for s, m in zip(second["scons"], second["make+ccache"])]
        return {
            "tus": tus, "objects": len(objects), "redis": scons_server.version,
            "checkouts": {"A": str(a), "B": str(b)}, "ccache_base_dir": str(work), "redis_usage_after_cold": usage,
            "cold": {"scons": cold_scons, "make+ccache": cold_make},
            "second": {k: {"runs": v, "median_wall": median([r["wall"] for r in v])} for k, v in second.items()},
            "ratios": ratios, "ratio_median": median(ratios), "reapi": reapi,
        }
    finally:
        for server in (scons_server, make_server, reapi_server):
            if server is not None:
                server.stop()
