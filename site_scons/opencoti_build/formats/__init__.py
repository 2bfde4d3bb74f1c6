"""Readers and writers of file formats, with no knowledge of the build.

- ``crc32``: the CRC-32 of two runs of bytes joined, from the CRC-32 of each (zlib's crc32_combine).
- ``elfcheck``: DT_NEEDED closure of an ELF shared object and the imports nothing in it defines.
- ``executables``: the magic bytes of an ELF and of an APE.
- ``gguf_model``: the GGUF header and tensor table of a model, checked whole before it is packaged.
- ``hipbundle``: the offload bundles of ``.hip_fatbin`` (plain and compressed CCOB) and their gfx targets.
- ``host_strings``: printable strings a host binary holds (what an embedded ``.args`` may name).
- ``lief_names``: the names lief reads from an ELF file, as ``str`` (lief gives invalid UTF-8 as ``bytes``).
- ``nvfatbin``: the ``.nv_fatbin`` container and the CUDA architectures in it.
- ``spirv``: SPIR-V module headers and the modules embedded in a DSO.
- ``zipappend``: the zip-append format: new stored entries, their names, alignment, records and zip64 fields (written by ``opencoti_build.bulkcopy.zipwriter``).
- ``zipstore``: reading a zip store: its central directory, entry data offsets, methods.
"""
