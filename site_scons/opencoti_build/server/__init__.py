"""The resident build server and its client (``python3 -m opencoti_build serve | build | stop``, docs/server.md).

A server keeps one checkout's build warm for one configuration (its ``KEY=VALUE`` variables): the interpreter,
SCons and the build's modules imported once, and an inotify watch on everything the last build depended on.
A request whose build would find nothing to do is answered from the null build's record, re-checking only the
paths the watcher saw change; any other request runs in a child forked from the server, which runs SCons's own
``main`` exactly as a ``scons`` process would, so every guarantee of a one-shot build holds unchanged.

- ``protocol``: where a configuration's socket is, and the messages on it (file descriptors passed along).
- ``watcher``: inotify over the directories of watched paths: which paths may have changed since last asked.
- ``daemon``: the server: its loop, the null answer, the forked runs, restarting itself when its code changes.
- ``client``: the ``build`` and ``stop`` commands, and the fall-back to a plain ``scons`` run.

Only ``client`` and ``protocol`` are imported for a request: the client's start is what a null request costs.
"""
