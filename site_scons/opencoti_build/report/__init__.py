"""What a build tells: compile_commands.json entries, step lines, the summary line.

- ``compdb``: compile_commands.json entries for clangd, and how a run's entries replace the old.
- ``steplines``: the one short line each kind of step prints.
- ``summary``: the last line of every build (``N compiled, M from cache, K up to date in T s``).
"""
