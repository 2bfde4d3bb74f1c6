"""The .llamafile artifacts: packaging, MANIFEST.json, the embedder's .args, verify and inspect.

- ``binary_report``: ``opencoti-build inspect FILE``: what a built DSO or host binary holds.
- ``embed_args``: the embedder's ``.args``: the default, a parser, the check against the host binary.
- ``intoto``: the in-toto Statement beside an artifact: its check, its line (a DSSE envelope when signed), reading
  it back and its signature.
- ``manifest``: MANIFEST.json beside each artifact.
- ``specs``: what `scons package` makes, as typed, frozen specs (artifact, manifest, attestation) per package.
- ``provenance``: each artifact's CycloneDX SBOM and its in-toto / SLSA provenance Statement (DSSE when signed).
- ``packaging``: the two artifacts of ``scons package``: names, contents, checks.
- ``verify``: ``opencoti-build verify`` and ``pin``.
"""
