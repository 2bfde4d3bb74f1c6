"""The object cache: verified entries and keys, signed entries, the Redis tier, compiler launchers, known file digests.

- ``cache_entry``: verified cache entries and path-independent cache keys.
- ``file_digests``: SHA-256 digests of files the build has just read or written whole.
- ``launchers``: compiler launchers (``CCWRAPPER``: sccache, ccache, distcc): finding them, their variables.
- ``remote_cache``: the object cache's Redis tier (``CACHE_URL``): verified, compressed entries.
- ``signing``: signed entries (``CACHE_SIGNING_KEY``, ``CACHE_TRUSTED_KEYS``) and which tiers others can write.
"""
