"""What keeps a rebuild exact and cheap: the null build's record, the build lock, the code a step depends on.

- ``build_lock``: one build at a time per build directory (an flock on ``BUILD_DIR/.lock``).
- ``code_signature``: what a C or C++ file says to a compiler, comments and trailing blanks aside (an edit of them
  compiles nothing), and the signatures of the contents a build has seen.
- ``fresh_dirs``: the directories a run is the first to create, removed again when it is refused.
- ``import_closure``: a module's source files and those of every module of this package it imports.
- ``null_build``: the null build's fast path: a record of everything a run depended on, and its check.
- ``private``: BUILD_DIR's bookkeeping the user's alone (0600/0700) and free of secrets (keyed digests, no passwords).
- ``timestamps``: how fine a file's timestamps are, and when its stat vouches for its bytes (git's racily-clean rule).
"""
