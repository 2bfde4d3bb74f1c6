"""Writing a new file of GiB inputs fast and atomically: the zip-append writer over the format of
``opencoti_build.formats.zipappend``, its bulk copy, and what becomes of the file it replaces.

- ``copier``: each input copied once (copy_file_range), its digests taken beside the copy on threads, the output written back to the disk as it grows.
- ``replaced``: the replaced output's page cache dropped, its blocks freed by a process of its own when it is big.
- ``zipwriter``: ``append``: the base executable, its new entries and one central directory, written beside the output and renamed into place.
"""
