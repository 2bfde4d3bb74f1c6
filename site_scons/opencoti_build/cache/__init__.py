"""The object cache: verified entries and keys, the Redis tier, compiler launchers, known file digests.

- ``cache_entry``: verified cache entries and path-independent cache keys.
- ``file_digests``: SHA-256 digests of files the build has just read or written whole.
- ``launchers``: compiler launchers (``CCWRAPPER``: sccache, ccache, distcc): finding them, their variables.
- ``remote_cache``: the object cache's Redis tier (``CACHE_URL``): verified, compressed entries.
"""
