"""The SCons side of the build: what tools share (the engine, the build state of one run, the include scanner,
the compile database's entries) and the build server's SCons side (``server_hooks``, ``reader``), over the plain
``opencoti_build`` package. ``engine`` alone touches SCons internals (docs/architecture.md)."""
