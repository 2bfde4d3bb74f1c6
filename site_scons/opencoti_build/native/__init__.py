"""The native-ELF lane (host gcc, one architecture) over the same source description.

- ``native_lane``: the native-ELF lane's reading of the source description (host gcc, one architecture).
"""
