"""Build logic for opencoti llamafiles that needs no SCons.

SCons tools under ``site_scons/site_tools`` are thin glue over these modules; the
tests import them directly.
"""
