"""The SCons side of the build: what tools share (the engine, the build state of one run, the include scanner,
the compile database's entries) and the resident build server (``build_server``), over the plain
``opencoti_build`` package. ``engine`` alone touches SCons internals (docs/architecture.md)."""
