"""What a build tells: compile_commands.json entries, step lines, the summary line.

- ``compdb``: compile_commands.json entries for clangd, and how a run's entries replace the old.
- ``notes``: lines said once per configuration (the toolchain, the web UI), not every run.
- ``steplines``: the one short line each kind of step prints.
- ``trace``: ``TRACE=FILE``, a run's steps as a Chrome trace-event JSON.
- ``summary``: the last line of every build (``N compiled, M from cache, K up to date in T s``).
"""
