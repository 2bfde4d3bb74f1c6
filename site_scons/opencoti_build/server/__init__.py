"""The build server (``python3 -m opencoti_build serve | build | stop``, docs/server.md): its client, and the server
itself as plain Python; what it needs of SCons (importing it, running its ``main`` in forked children) it asks of
``opencoti_scons.server_hooks`` through ``scons_side``, never importing SCons.

A server keeps one checkout's build warm for one configuration (its ``KEY=VALUE`` variables): the interpreter,
SCons and the build's modules imported once, and an inotify watch on everything the last build depended on.

- ``protocol``: where a configuration's socket is, and the messages on it (file descriptors passed along).
- ``boundary``: who may reach a server and what it trusts on disk: the socket's directory and BUILD_DIR's bookkeeping
  the user's alone (checked by ``serve`` and by the clients), every connection's peer the server's own user.
- ``watcher``: inotify over the directories of watched paths: which paths may have changed since last asked.
- ``client``: the ``build`` and ``stop`` commands, and the fall-back to a plain ``scons`` run.
- ``native_client``: the C client (``client.c``, the same ``build`` without an interpreter's start), which ``serve``
  compiles beside its socket.
- ``serve``: the ``serve`` command: its arguments, its checks, and the order a server starts in.
- ``listener``: the configuration's lock and socket, taken once the directories it trusts are checked.
- ``daemon``: the server's process: detached, ready said to the waiting parent, re-executed in place for new code.
- ``request_loop``: the loop: a request answered from the record, by the reader or by a forked run, logged.
- ``null_answer``: the record a null request is answered from, the paths watched for it, BUILD_DIR's lock meanwhile.
- ``supervisor``: the runs the server forks: one request's, and the reader that reads the graph ahead of the next.
- ``scons_side``: what the server asks of SCons (``opencoti_scons.server_hooks`` gives it).

Only ``client``, ``protocol``, ``boundary`` and the ``locks`` module are imported for a request through Python; the C
client imports nothing: a client's start is most of what a null request costs.
"""
