"""Build logic for opencoti llamafiles that needs no SCons, in packages by concern (docs/architecture.md maps
them).

SCons tools under ``site_scons/site_tools`` are thin glue over these modules and ``opencoti_scons``; the tests
import them directly. Each package has its own index.

- ``artifacts``: the .llamafile artifacts: packaging, MANIFEST.json, the embedder's .args, verify and inspect.
- ``bulkcopy``: the zip-append writer: GiB inputs copied once, digests taken beside the copy, the output renamed into place.
- ``cache``: the object cache: verified entries and keys, the Redis tier, compiler launchers, known file digests.
- ``cli``: the ``opencoti-build`` command (inspect, verify, pin; serve, build, stop).
- ``config``: the build's configuration: the variables, what a run asks for, versions, pins, templates, provisioning.
- ``cosmo``: the fat (cosmocc) lane's compiles: the toolchain, the stand-in driver, TinyBLAS tuning, prefix maps and two-compiler diagnostics.
- ``errors``: the one error idiom (``UserError``, ``fail``, ``os_error_line``).
- ``files``: what identifies a file: its stat identity and its SHA-256, each computed in one place.
- ``formats``: readers and writers of file formats, with no build knowledge (its own index).
- ``gpu``: the GPU backends: their registry, architecture tables, sources, toolchains and the DSOs' verification.
- ``incremental``: what keeps a rebuild exact and cheap: the null build's record, the build lock, the code a step depends on.
- ``locks``: flock, in one place: an exclusive lock on a file, tried or waited for, the pid it names, who holds it now.
- ``native``: the native-ELF lane (host gcc, one architecture) over the same source description.
- ``project``: where the checkout is, derived from this package's location in one place.
- ``report``: what a build tells: compile_commands.json entries, step lines, the summary line.
- ``server``: the build server and its client: the daemon, its runs, the request loop, the socket protocol, the watcher.
- ``streams``: the process's standard streams redirected in one place: descriptors 0-2 and ``sys.stdout`` & co.
- ``tempfiles``: temporaries written beside their destination, renamed into place, swept when dead (every package's).
- ``tree``: the llamafile source tree: its description as data, the vendored patch series, per-package flags, the binary's own zip store and the web UI.
"""
