"""SCons glue over opencoti_build.artifacts.packaging: env.LlamafileArtifact(...) and env.LlamafileVerify(...)
(``package verify``; `scons verify` alone is opencoti_scons.package_builders.DistVerify, read with no tree).

Every input is either a file node (content-tracked) or part of a Value node, so an artifact is
rewritten only when something it is made of changes; the manifest has its own Value (git commit,
patch series, toolchains) and is rewritten alone when only those change. Each also depends on the
files of the code that writes it (opencoti_build.incremental.import_closure).

The model is read once per packaging, by the packager (docs/packaging.md, "Reading the model
once"): the package environment's decider takes a model whose stamp changed as changed without
hashing it, and the signatures SCons records for the model and the artifact are the SHA-256s the
packager computed (opencoti_build.cache.file_digests), so SCons reads neither file.

Load it with ``run=`` (the run's ``opencoti_scons.progress.BuildRun``: the packager's digests go into its
``digests``). Construction variables read: ``BACKEND_DIST_DIR``, ``DIST_DIR`` and ``ENV`` (``HOME``) by ``verify``. Sets the
package environment's decider and FILE_DIGESTS.
"""
from __future__ import annotations

from typing import Any

from opencoti_scons.package_builders import LlamafileArtifact, LlamafileVerify, decide
from opencoti_scons.progress import BuildRun


def generate(env: Any, run: BuildRun) -> None:
    env["FILE_DIGESTS"] = run.digests  # read by the packaging step when it runs (outside its signature)
    env.Decider(decide)
    env.AddMethod(LlamafileArtifact, "LlamafileArtifact")
    env.AddMethod(LlamafileVerify, "LlamafileVerify")


def exists(env):
    """The device-code readers the manifest needs: lief, and zstandard for compressed CUDA fatbins."""
    try:
        import lief  # noqa: F401
        import zstandard  # noqa: F401
    except ImportError:
        return False
    return True
