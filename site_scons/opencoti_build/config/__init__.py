"""The build's configuration: the variables, what a run asks for, versions, pins, templates, provisioning.

- ``buildvars``: the command-line variables as a plain table: name, default, help, each one's checker.
- ``provision``: the pinned cosmocc, fetched the way upstream's make fetches it.
- ``targets``: which parts of the build the command line asks for.
- ``signing_keys``: the key files SIGNING_KEY and PUBKEY name, loaded (the provenance Statement's signer and verifier).
- ``templates``: the files upstream generates from ``*.in`` templates.
- ``upstream_pin``: the upstream llamafile release and its cosmocc, pinned in one place.
- ``values``: what a variable's value may be: the parsers (ALIGN, ARCH, SOURCE_DATE_EPOCH, PREFIX, FILE) and
  their one-line refusals.
- ``versioning``: version and tag parsing, and an artifact's identity.
"""
