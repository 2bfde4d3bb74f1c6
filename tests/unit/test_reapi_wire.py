"""The REAPI tier's protobuf wire codec and messages (opencoti_build.cache.reapi.wire, .messages): bytes laid out by
hand from the protobuf encoding rules, every malformed message refused, and both directions checked against
protobuf's own runtime reading and writing the same messages (described here, field by field, from the spec)."""
from __future__ import annotations

import hashlib

import pytest

from opencoti_build.cache.reapi import messages, wire
from opencoti_build.cache.reapi.messages import ActionResult, Capabilities, Digest, EntrySeal, OutputFile
from opencoti_build.cache.reapi.wire import WireError


@pytest.mark.parametrize(("n", "encoded"), [(0, b"\x00"), (1, b"\x01"), (127, b"\x7f"), (128, b"\x80\x01"),
                                            (150, b"\x96\x01"), (300, b"\xac\x02"), ((1 << 63) - 1, b"\xff" * 8 + b"\x7f"),
                                            (-1, b"\xff" * 9 + b"\x01")])
def test_varints_are_base_128_and_negatives_ten_bytes(n: int, encoded: bytes) -> None:
    assert wire.varint(n) == encoded
    fields = wire.decode(b"\x08" + encoded)
    assert wire.integer(fields, 1, signed=True) == n


def test_fields_are_laid_out_as_protobuf_does() -> None:
    assert wire.field(1, 150) == b"\x08\x96\x01"  # the protobuf documentation's own example
    assert wire.field(2, "testing") == b"\x12\x07testing"
    assert wire.field(4, True) == b"\x20\x01" and wire.field(3, None) == b""
    assert wire.field(16, b"") == b"\x82\x01\x00"  # a two-byte tag
    assert wire.message([(1, "a"), (1, "b"), (2, 0)]) == b"\x0a\x01a\x0a\x01b\x10\x00"
    with pytest.raises(ValueError):
        wire.field(0, 1)


def test_decoding_keeps_every_field_in_order_and_reads_fixed_widths() -> None:
    raw = b"\x0a\x01a" + b"\x10\x05" + b"\x0a\x01b" + b"\x19" + bytes(8) + b"\x25" + bytes(4)
    fields = wire.decode(raw)
    assert fields == {1: [b"a", b"b"], 2: [5], 3: [bytes(8)], 4: [bytes(4)]}
    assert wire.repeated(fields, 1) == [b"a", b"b"] and wire.text(fields, 1) == "b"  # the last one wins
    assert wire.integer(fields, 9) == 0 and wire.data(fields, 9) == b"" and wire.text(fields, 9) == ""


@pytest.mark.parametrize(("raw", "why"), [(b"\x08", "varint runs past"), (b"\x08\x80", "varint runs past"),
                                          (b"\x08" + b"\xff" * 11, "longer than 10"), (b"\x0a\x05abc", "past the end"),
                                          (b"\x1b", "wire type 3"), (b"\x00\x01", "field number 0"),
                                          (b"\x19\x00", "past the end")])
def test_a_malformed_message_is_refused(raw: bytes, why: str) -> None:
    with pytest.raises(WireError, match=why):
        wire.decode(raw)


def test_a_field_of_the_wrong_type_is_refused() -> None:
    fields = wire.decode(b"\x08\x01\x12\x01x")
    with pytest.raises(WireError):
        wire.data(fields, 1)
    with pytest.raises(WireError):
        wire.integer(fields, 2)
    with pytest.raises(WireError):
        wire.repeated(fields, 1)
    with pytest.raises(WireError, match="not UTF-8"):
        wire.text(wire.decode(b"\x0a\x01\xff"), 1)


def test_repeated_enums_are_read_packed_and_unpacked() -> None:
    assert wire.repeated_ints(wire.decode(b"\x0a\x04\x01\x02\x96\x01"), 1) == [1, 2, 150]
    assert wire.repeated_ints(wire.decode(b"\x08\x01\x08\x03"), 1) == [1, 3]


def test_digests_name_their_bytes_and_refuse_what_is_not_a_sha256() -> None:
    digest = Digest.of(b"abc")
    assert digest == Digest(hashlib.sha256(b"abc").hexdigest(), 3) and digest.matches(b"abc")
    assert not digest.matches(b"abd") and not digest.matches(b"abcd")
    assert Digest.decode(digest.encode()) == digest
    assert Digest.of(b"").encode() == wire.field(1, hashlib.sha256(b"").hexdigest())  # size 0 left out
    for bad in (wire.message([(1, "ab"), (2, 1)]), wire.message([(1, digest.hash.upper()), (2, 3)]),
                wire.message([(1, digest.hash), (2, -1)])):
        with pytest.raises(WireError, match="not a SHA-256 digest"):
            Digest.decode(bad)
    assert digest.resource("") == f"blobs/{digest.hash}/3"
    assert digest.resource("main/x") == f"main/x/blobs/{digest.hash}/3"
    assert digest.upload("", "u") == f"uploads/u/blobs/{digest.hash}/3"


def test_an_action_result_keeps_its_outputs_and_seals_and_ignores_other_metadata() -> None:
    a, b = Digest.of(b"a"), Digest.of(b"b")
    result = ActionResult((OutputFile("k1", a), OutputFile("k2", b, True)),
                          (EntrySeal("k1", b"\x01" * 32, b"s" * 64, 0o644), EntrySeal("k2", b"", b"", 0o755)))
    assert ActionResult.decode(result.encode()) == result
    other = wire.message([(1, "type.googleapis.com/other.Thing"), (2, b"\x08\x01")])
    metadata = wire.message([(1, "worker-7"), (11, other), (11, result.seals[0].encode())])
    raw = wire.message([(2, result.outputs[0].encode()), (4, 0), (9, metadata), (99, b"future field")])
    assert ActionResult.decode(raw) == ActionResult(result.outputs[:1], result.seals[:1])


def test_a_step_action_is_a_function_of_its_keys_in_order() -> None:
    action, command = messages.step_action(["k1", "k2"])
    fields = wire.decode(command)
    assert [v.decode() for v in wire.repeated(fields, 1)] == [*messages.STEP_COMMAND, "k1", "k2"]
    assert [v.decode() for v in wire.repeated(fields, 7)] == ["k1", "k2"]
    assert Digest.decode(wire.data(wire.decode(action), 1)) == Digest.of(command)
    assert Digest.decode(wire.data(wire.decode(action), 2)) == Digest.of(b"")  # the empty input root
    assert messages.step_action(["k1", "k2"]) == (action, command)
    assert messages.step_action(["k2", "k1"])[0] != action and messages.step_action(["k1"])[0] != action


def test_responses_are_read() -> None:
    a, b = Digest.of(b"a"), Digest.of(b"bb")
    status = wire.message([(1, 5), (2, "not found")])
    assert messages.find_missing_response(wire.message([(2, a.encode()), (2, b.encode())])) == [a, b]
    update = wire.message([(1, wire.message([(1, a.encode()), (2, b"")])),
                           (1, wire.message([(1, b.encode()), (2, status)]))])
    assert messages.batch_update_response(update) == [(a, messages.Status(0, "")), (b, messages.Status(5, "not found"))]
    read = wire.message([(1, wire.message([(1, a.encode()), (2, b"a"), (3, b"")]))])
    assert messages.batch_read_response(read) == [(a, b"a", messages.Status(0, ""))]
    assert messages.read_response(wire.field(10, b"chunk")) == b"chunk"
    assert messages.write_response(wire.field(1, 7)) == 7
    assert messages.write_response(wire.field(1, -1)) == -1
    assert messages.write_request("r", 0, b"d", True) == b"\x0a\x01r\x18\x01\x52\x01d"
    assert messages.write_request(None, 5, b"", False) == b"\x10\x05\x52\x00"


def test_capabilities_say_the_digest_functions_updates_and_batch_limit() -> None:
    cache = wire.message([(1, b"\x01\x02"), (2, wire.field(1, True)), (4, 4 << 20)])
    caps = Capabilities.decode(wire.message([(1, cache), (2, b"")]))
    assert caps == Capabilities((1, 2), True, 4 << 20) and caps.digest_names() == "SHA256, SHA1"
    assert Capabilities.decode(b"") == Capabilities((), False, 0) and Capabilities.decode(b"").digest_names() == "none"


# --- against protobuf's own runtime ------------------------------------------------------------------------------

def _runtime():
    """Message classes built by protobuf's runtime from descriptors written here from the spec's field numbers."""
    pytest.importorskip("google.protobuf")
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    f = descriptor_pb2.FieldDescriptorProto
    proto = descriptor_pb2.FileDescriptorProto(name="reapi_check.proto", package="check", syntax="proto3")

    def add(name: str, *fields: tuple[str, int, int, int, str]) -> None:
        message = proto.message_type.add(name=name)
        for field_name, number, kind, label, type_name in fields:
            message.field.add(name=field_name, number=number, type=kind, label=label,
                              **({"type_name": type_name} if type_name else {}))

    one, many = f.LABEL_OPTIONAL, f.LABEL_REPEATED
    add("Digest", ("hash", 1, f.TYPE_STRING, one, ""), ("size_bytes", 2, f.TYPE_INT64, one, ""))
    add("Any", ("type_url", 1, f.TYPE_STRING, one, ""), ("value", 2, f.TYPE_BYTES, one, ""))
    add("OutputFile", ("path", 1, f.TYPE_STRING, one, ""), ("digest", 2, f.TYPE_MESSAGE, one, ".check.Digest"),
        ("is_executable", 4, f.TYPE_BOOL, one, ""), ("contents", 5, f.TYPE_BYTES, one, ""))
    add("Metadata", ("worker", 1, f.TYPE_STRING, one, ""), ("auxiliary_metadata", 11, f.TYPE_MESSAGE, many, ".check.Any"))
    add("ActionResult", ("output_files", 2, f.TYPE_MESSAGE, many, ".check.OutputFile"),
        ("exit_code", 4, f.TYPE_INT32, one, ""), ("execution_metadata", 9, f.TYPE_MESSAGE, one, ".check.Metadata"))
    add("Update", ("update_enabled", 1, f.TYPE_BOOL, one, ""))
    add("CacheCapabilities", ("digest_functions", 1, f.TYPE_INT32, many, ""),
        ("action_cache_update_capabilities", 2, f.TYPE_MESSAGE, one, ".check.Update"),
        ("max_batch_total_size_bytes", 4, f.TYPE_INT64, one, ""))
    add("ServerCapabilities", ("cache_capabilities", 1, f.TYPE_MESSAGE, one, ".check.CacheCapabilities"))
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    return {name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"check.{name}"))
            for name in ("Digest", "ActionResult", "ServerCapabilities")}


def test_protobuf_reads_what_we_write_and_we_read_what_it_writes() -> None:
    classes = _runtime()
    data = b"\x00object bytes"
    result = ActionResult((OutputFile("k" * 64, Digest.of(data), True),), (EntrySeal("k" * 64, b"\x07" * 32, b"s", 0o755),))
    theirs = classes["ActionResult"].FromString(result.encode())
    assert theirs.output_files[0].path == "k" * 64 and theirs.output_files[0].is_executable
    assert theirs.output_files[0].digest.hash == Digest.of(data).hash and theirs.output_files[0].digest.size_bytes == 13
    assert theirs.execution_metadata.auxiliary_metadata[0].type_url == messages.SEAL_TYPE
    assert ActionResult.decode(theirs.SerializeToString()) == result
    digest = classes["Digest"](hash=Digest.of(b"").hash, size_bytes=(1 << 40) + 3)
    assert Digest.decode(digest.SerializeToString()) == Digest(digest.hash, (1 << 40) + 3)
    assert classes["Digest"].FromString(Digest(digest.hash, (1 << 40) + 3).encode()) == digest
    caps = classes["ServerCapabilities"]()
    caps.cache_capabilities.digest_functions.extend([3, 1])  # packed, as proto3 writes a repeated enum
    caps.cache_capabilities.action_cache_update_capabilities.update_enabled = True
    caps.cache_capabilities.max_batch_total_size_bytes = 4193280
    assert Capabilities.decode(caps.SerializeToString()) == Capabilities((3, 1), True, 4193280)
