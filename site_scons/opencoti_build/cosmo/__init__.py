"""The fat (cosmocc) lane's compiles: the toolchain, the stand-in driver, TinyBLAS tuning, prefix maps and two-compiler diagnostics.

- ``cosmo_toolchain``: which cosmocc a build uses: a real one (``COSMOCC=DIR``) or the stand-in.
- ``diagnostics``: one report from a fat compile's two compilers: shared diagnostics once, the rest labelled.
- ``fatcc``: the stand-in for cosmocc's fat driver over gcc and aarch64-linux-gnu-gcc.
- ``prefix_maps``: prefix maps, so where the build lives never reaches its outputs.
- ``tuning``: TinyBLAS's per-variant ``-mtune`` flags, fitted to the toolchain.
"""
