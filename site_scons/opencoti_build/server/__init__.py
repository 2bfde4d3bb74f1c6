"""The build server's plain side (``python3 -m opencoti_build serve | build | stop``, docs/server.md): what the
client needs and what needs no SCons. The server itself, which imports SCons and runs its ``main`` in forked
children, is ``opencoti_scons.build_server``.

A server keeps one checkout's build warm for one configuration (its ``KEY=VALUE`` variables): the interpreter,
SCons and the build's modules imported once, and an inotify watch on everything the last build depended on.

- ``protocol``: where a configuration's socket is, and the messages on it (file descriptors passed along).
- ``boundary``: who may reach a server and what it trusts on disk: the socket's directory and BUILD_DIR's bookkeeping
  the user's alone (checked by ``serve`` and by the clients), every connection's peer the server's own user.
- ``watcher``: inotify over the directories of watched paths: which paths may have changed since last asked.
- ``client``: the ``build`` and ``stop`` commands, and the fall-back to a plain ``scons`` run.
- ``native_client``: the C client (``client.c``, the same ``build`` without an interpreter's start), which ``serve``
  compiles beside its socket.

Only ``client``, ``protocol`` and ``boundary`` are imported for a request through Python; the C client imports nothing: a
client's start is most of what a null request costs.
"""
