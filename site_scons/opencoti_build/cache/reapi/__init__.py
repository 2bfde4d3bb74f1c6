"""The object cache's shared tier on the Remote Execution API v2 (``CACHE_URL=grpc://`` or ``grpcs://``): any REAPI
cache (BuildGrid, bazel-remote, BuildBuddy, Buildbarn) holds each cached step as an ActionCache entry whose outputs are
CAS blobs, with the same guarantees as the Redis tier (docs/scale.md).

- ``wire``: the protobuf wire format, the little of it the tier speaks (no generated code, no protobuf runtime).
- ``messages``: the REAPI, ByteStream and google.rpc messages the tier sends and reads, from the spec's field numbers.
- ``client``: the URL, the credentials from the environment (TLS, a bearer token, a client certificate), the calls.
- ``tier``: the shared tier itself (remote_cache.SharedTier): steps pushed and pulled whole, every output checked.
"""
