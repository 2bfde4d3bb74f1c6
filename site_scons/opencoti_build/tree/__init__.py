"""The llamafile source tree: its description as data, the vendored patch series, per-package flags, the binary's own zip store and the web UI.

- ``package_flags``: a package's compile flags, assembled once for both lanes.
- ``patch_series``: the vendored llamafile tree: reset, llamafile's patch step, the opencoti series.
- ``sources``: the llamafile source tree as data: every package the host and the DSOs compile.
- ``webui``: the server's bundled web UI, compiled in when its assets are in the tree.
- ``zip_sources``: the thin binary's own zip store (the files llamafile's C sources open as ``/zip/...``).
"""
