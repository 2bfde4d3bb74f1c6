"""The object cache: verified entries and keys, signed entries, the shared tiers (Redis, REAPI), compiler launchers, known
file digests.

- ``cache_entry``: verified cache entries and path-independent cache keys.
- ``file_digests``: SHA-256 digests of files the build has just read or written whole.
- ``launchers``: compiler launchers (``CCWRAPPER``: sccache, ccache, distcc): finding them, their variables.
- ``reapi``: the shared tier on a REAPI v2 cache (``CACHE_URL=grpc://…``): ActionCache entries over CAS blobs.
- ``remote_cache``: the shared tiers' interface and the Redis tier (``CACHE_URL=redis://…``): verified, compressed entries.
- ``signing``: signed entries (``CACHE_SIGNING_KEY``, ``CACHE_TRUSTED_KEYS``) and which tiers others can write.
"""
