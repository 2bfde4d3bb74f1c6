"""The llamafile source tree and llama.cpp checkouts: the description as data, the vendored patch series, per-package flags, the binary's own zip store and the web UI.

- ``host_tree``: what the fat host lane compiles: the llamafile tree, or llama.cpp's server from a checkout.
- ``package_flags``: a package's compile flags, assembled once for both lanes.
- ``portcosmo``: -fportcosmo done to the source text: switches over cosmopolitan's run-time constants lowered.
- ``patch_failure``: what a patch ``git apply`` refused says (the hunk, as the patch numbers it).
- ``patch_series``: the vendored llamafile tree: reset, llamafile's patch step, the opencoti series.
- ``sources``: the llamafile source tree as data: every package the host and the DSOs compile.
- ``upstream``: an upstream llama.cpp checkout (LLAMACPP=) as the description reads it, for every lane.
- ``webui``: the server's bundled web UI, compiled in when its assets are in the tree.
- ``zip_sources``: the thin binary's own zip store (the files llamafile's C sources open as ``/zip/...``).
"""
