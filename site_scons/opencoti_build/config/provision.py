"""Which cosmocc a build uses, and the pinned one fetched the way upstream's make fetches it.

``COSMOCC=`` (or ``OPENCOTI_COSMOCC``) chooses:

- ``stand-in``: the project's gcc-based stand-in (site_scons/cosmocc_shim), explicitly;
- ``DIR``: a cosmocc the user unpacked;
- empty: ``.cosmocc/<pinned version>`` at the project root, downloaded first when absent, as
  upstream's ``build/download-cosmocc.sh`` does (same URLs, sha256 checked).

A download never leaves a half toolchain: it goes to ``.cosmocc/.<ver>.tmp.XXXX/`` and only a
checked, fully unpacked tree is renamed to ``.cosmocc/<ver>``. An flock on ``.cosmocc/.<ver>.lock``
makes two builds at once download once (the second finds the first one's tree); temporary dirs
of killed downloads are removed by the next one under that lock.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import stat
import tempfile
import zipfile
from collections.abc import Callable, Mapping
from pathlib import Path, PurePosixPath

from opencoti_build import locks
from opencoti_build.config import upstream_pin
from opencoti_build.cosmo.cosmo_toolchain import SHIM_DIR, Toolchain, ToolchainError, find_toolchain
from opencoti_build.errors import UserError

STAND_IN = "stand-in"
# For tests only (a loopback server): where the zip comes from, its sha256, and where .cosmocc is.
# Not in `scons -h`: a user points COSMOCC= at a toolchain instead.
TEST_URL = "OPENCOTI_TEST_COSMOCC_URL"
TEST_SHA256 = "OPENCOTI_TEST_COSMOCC_SHA256"
TEST_HOME = "OPENCOTI_TEST_COSMOCC_HOME"
_TIMEOUT_S = 60
_CHUNK = 1 << 20
WAYS_OUT = "set COSMOCC=DIR to a cosmocc you have unpacked, or COSMOCC=stand-in for the gcc stand-in"


class ProvisionError(UserError):
    """The pinned cosmocc could not be had. One line, naming both ways out."""


def select(cosmocc: str, project: Path | str, environ: Mapping[str, str] = os.environ,
           say: Callable[[str], None] = print, fetch: bool = True, dry_run: bool = False) -> Toolchain:
    """The toolchain ``COSMOCC=cosmocc`` means; downloads the pinned one when it is empty and absent.

    ``fetch=False`` (``scons -c``) names the pinned one's place without downloading it. ``dry_run`` (``scons -n``,
    which writes nothing) refuses in one line where a download would be needed.
    """
    if cosmocc == STAND_IN:
        return Toolchain("stand-in", SHIM_DIR)
    if cosmocc:
        return find_toolchain(cosmocc)
    version = upstream_pin.COSMOCC_VERSION
    home = Path(environ.get(TEST_HOME) or Path(project) / ".cosmocc")
    urls = [environ[TEST_URL]] if environ.get(TEST_URL) else upstream_pin.cosmocc_urls(version)
    sha256 = environ.get(TEST_SHA256) or upstream_pin.COSMOCC_SHA256
    if not fetch and not (home / version).is_dir():
        return Toolchain("cosmocc", (home / version).resolve(), origin=f"pinned {version}, absent")
    if dry_run and not (home / version).is_dir():
        raise ProvisionError(f"cosmocc {version} is not downloaded yet ({home / version}) and a dry run writes "
                             f"nothing: run a build once to download it, or {WAYS_OUT}")
    fetched = ensure(home, version, urls, sha256, say)
    try:
        found = find_toolchain(str(home / version))
    except ToolchainError as exc:  # a tree put there by hand, or a release that changed its layout
        raise ProvisionError(f"{home / version} is no usable cosmocc ({str(exc).split(';')[0]}); remove it to "
                             f"download it again, or {WAYS_OUT}") from exc
    return Toolchain("cosmocc", found.root, origin=f"pinned {version}, {'downloaded' if fetched else 'present'}",
                     archive_sha256=sha256)


def ensure(home: Path, version: str, urls: list[str], sha256: str, say: Callable[[str], None] = print) -> bool:
    """Make ``home/version`` a checked cosmocc tree; True when this call downloaded it."""
    target = home / version
    if target.is_dir():
        return False  # the rename is the last step: a present dir is a complete one
    try:
        home.mkdir(parents=True, exist_ok=True)
        with locks.holding(home / f".{version}.lock", 0o644):  # waits for a concurrent download to finish
            if target.is_dir():
                return False  # another build downloaded it while this one waited
            _sweep(home, version)
            tmp = Path(tempfile.mkdtemp(prefix=f".{version}.tmp.", dir=home))
            try:
                archive = tmp / f"cosmocc-{version}.zip"
                _download_any(urls, archive, sha256, version, say)
                _unpack(archive, tmp / "tree", version)
                os.rename(tmp / "tree", target)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
    except OSError as exc:
        raise ProvisionError(f"cannot install cosmocc {version} in {home}: {exc.strerror or exc}; {WAYS_OUT}") from exc
    return True


def _sweep(home: Path, version: str) -> None:
    """Temporary dirs of killed downloads (this process holds the lock: no live writer owns one)."""
    for stale in home.glob(f".{version}.tmp.*"):
        shutil.rmtree(stale, ignore_errors=True)


def _download_any(urls: list[str], archive: Path, sha256: str, version: str, say: Callable[[str], None]) -> None:
    failures = []
    for url in urls:
        say(f"toolchain: downloading cosmocc {version} from {url}")
        try:
            _download(url, archive, sha256)
            return
        except _Failed as exc:
            failures.append(f"{url}: {exc}")
            if exc.final:  # a wrong checksum is not a network problem: no other mirror is tried
                break
    raise ProvisionError(f"cannot download cosmocc {version} ({'; '.join(failures)}); {WAYS_OUT}")


class _Failed(Exception):
    def __init__(self, message: str, final: bool = False) -> None:
        super().__init__(message)
        self.final = final


def _download(url: str, archive: Path, sha256: str) -> None:
    import urllib.error  # here, not at the top: every build imports this module, few download (http.client is ~20 ms)
    import urllib.request

    digest = hashlib.sha256()
    got = 0
    expected = None
    try:
        with urllib.request.urlopen(url, timeout=_TIMEOUT_S) as response, open(archive, "wb") as out:
            length = response.headers.get("Content-Length")
            expected = int(length) if length and length.isdigit() else None
            while chunk := response.read(_CHUNK):
                digest.update(chunk)
                out.write(chunk)
                got += len(chunk)
    except urllib.error.HTTPError as exc:
        raise _Failed(f"HTTP {exc.code}") from exc
    except urllib.error.URLError as exc:
        reason = exc.reason
        raise _Failed(getattr(reason, "strerror", None) or str(reason)) from exc
    except (OSError, ValueError) as exc:  # reset mid-transfer, IncompleteRead, timeout
        raise _Failed(f"transfer broke after {got} bytes ({type(exc).__name__}: {exc})") from exc
    if expected is not None and got != expected:
        raise _Failed(f"transfer ended after {got} of {expected} bytes")
    if digest.hexdigest() != sha256:
        raise _Failed(f"sha256 {digest.hexdigest()} is not the pinned {sha256}", final=True)


def _unpack(archive: Path, dest: Path, version: str) -> None:
    """Unpack with the modes the zip records (zipfile drops them), refusing names outside ``dest``."""
    try:
        with zipfile.ZipFile(archive) as zf:
            for info in zf.infolist():
                name = PurePosixPath(info.filename)
                if name.is_absolute() or ".." in name.parts:
                    raise ProvisionError(f"cosmocc {version} zip names {info.filename!r} outside its tree; {WAYS_OUT}")
                path = dest.joinpath(*name.parts)
                mode = info.external_attr >> 16
                if info.is_dir():
                    path.mkdir(parents=True, exist_ok=True)
                    continue
                path.parent.mkdir(parents=True, exist_ok=True)
                if stat.S_ISLNK(mode):
                    link = zf.read(info).decode()
                    if PurePosixPath(link).is_absolute() or ".." in PurePosixPath(link).parts[:-1]:
                        raise ProvisionError(f"cosmocc {version} zip links {info.filename!r} outside its tree; {WAYS_OUT}")
                    os.symlink(link, path)
                    continue
                with zf.open(info) as src, open(path, "wb") as out:
                    shutil.copyfileobj(src, out, _CHUNK)
                os.chmod(path, (mode & 0o777) or 0o644)
    except (zipfile.BadZipFile, zipfile.LargeZipFile) as exc:
        raise ProvisionError(f"cosmocc {version} download is no usable zip ({exc}); {WAYS_OUT}") from exc
