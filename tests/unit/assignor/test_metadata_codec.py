"""The member metadata and assignment codec: round trips, size bound, and every way to be bad."""

from __future__ import annotations

import json
import zlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from assignor.metadata_codec import (
    MAGIC,
    MAX_INFLATED_BYTES,
    METADATA_VERSION,
    MemberAssignment,
    MemberMetadata,
    MetadataError,
    StockFaustMetadataError,
    UnknownVersionError,
    decode_assignment,
    decode_metadata,
    encode_assignment,
    encode_metadata,
)

topics = st.text(alphabet="abcdefghij-", min_size=1, max_size=12)
partitions = st.lists(st.integers(0, 200), max_size=8, unique=True).map(sorted)
claims = st.dictionaries(topics, partitions.filter(bool), max_size=4)
offsets = st.dictionaries(
    topics,
    st.dictionaries(st.integers(0, 200), st.integers(0, 2**40), min_size=1, max_size=8),
    max_size=4,
)
metadata = st.builds(
    MemberMetadata,
    client_id=st.text(min_size=1, max_size=20),
    url=st.just("http://127.0.0.1:6066"),
    host=st.none() | st.text(max_size=10),
    rack=st.none() | st.text(max_size=10),
    capacity=st.integers(1, 64),
    generation=st.integers(-1, 10_000),
    owned_active=claims,
    owned_standby=claims,
    offsets=offsets,
    changelog_ends=offsets,
    protocol=st.sampled_from(["eager", "cooperative"]),
    kept_owned=st.booleans(),
    incoming=claims,
    warmup=claims,
)


@given(metadata)
def test_metadata_round_trips(m: MemberMetadata) -> None:
    assert decode_metadata(encode_metadata(m)) == m


@given(
    st.builds(
        MemberAssignment,
        generation=st.integers(-1, 10_000),
        active=claims,
        standby=claims,
        warmup=claims,
        followup_rebalance=st.booleans(),
        warmups_in_group=st.integers(0, 10),
        actives_by_url=st.dictionaries(st.text(min_size=1, max_size=10), claims, max_size=4),
        topic_groups=st.dictionaries(topics, st.integers(0, 9), max_size=4),
        group_protocol=st.sampled_from(["eager", "cooperative"]),
        incoming=claims,
    )
)
def test_assignment_round_trips(a: MemberAssignment) -> None:
    assert decode_assignment(encode_assignment(a)) == a


def test_compact_for_a_realistic_member() -> None:
    m = MemberMetadata(
        client_id="worker-1",
        url="http://host-a:6066",
        host="host-a",
        generation=7,
        owned_active={"t": list(range(0, 64, 3)), "app-t-changelog": list(range(0, 64, 3))},
        owned_standby={"app-t-changelog": list(range(1, 64, 3))},
        offsets={"app-t-changelog": {p: 1_000_000 + p for p in range(64)}},
    )
    assert len(encode_metadata(m)) < 1024


def test_offsets_of_unowned_state_are_dropped_past_the_size_limit() -> None:
    m = MemberMetadata(
        client_id="w",
        url="u",
        owned_active={"c": [0]},
        offsets={"c": {p: 10**12 + p * 7919 for p in range(2000)}},
    )
    data = encode_metadata(m, limit=2048)
    assert len(data) <= 2048
    assert decode_metadata(data).offsets == {"c": {0: 10**12}}


def test_too_large_even_when_owned_only_is_an_error() -> None:
    m = MemberMetadata(client_id="w", url="u", owned_active={"c": list(range(5000))})
    with pytest.raises(MetadataError, match="above the limit"):
        encode_metadata(m, limit=64)


def test_truncated_metadata_is_refused() -> None:
    data = encode_metadata(MemberMetadata(client_id="w", url="u", offsets={"c": {0: 5}}))
    for cut in (0, 1, 2, 3, len(data) // 2, len(data) - 1):
        with pytest.raises(MetadataError):
            decode_metadata(data[:cut])


def test_unknown_version_is_named() -> None:
    data = encode_metadata(MemberMetadata(client_id="w", url="u"))
    newer = MAGIC + bytes([METADATA_VERSION + 1]) + data[len(MAGIC) + 1 :]
    with pytest.raises(UnknownVersionError, match=f"version {METADATA_VERSION + 1}"):
        decode_metadata(newer)


def test_stock_faust_metadata_is_recognised() -> None:
    stock = json.dumps(
        {
            "assignment": {"actives": {}, "standbys": {}},
            "url": "http://x:6066",
            "changelog_distribution": {},
        }
    ).encode()
    with pytest.raises(StockFaustMetadataError, match="Faust's PartitionAssignor"):
        decode_metadata(stock)


@pytest.mark.parametrize(
    "payload",
    [
        [],
        {"u": "x", "k": 1, "g": 0},
        {"c": "", "u": "x", "k": 1, "g": 0},
        {"c": "w", "u": "x", "k": 0, "g": 0},
        {"c": "w", "u": "x", "k": 1, "g": 0, "a": {"t": [-1]}},
        {"c": "w", "u": "x", "k": 1, "g": 0, "o": {"t": {"x": 1}}},
        {"c": "w", "u": "x", "k": True, "g": 0},
    ],
)
def test_malformed_fields_are_refused(payload: object) -> None:
    data = MAGIC + bytes([METADATA_VERSION]) + zlib.compress(json.dumps(payload).encode())
    with pytest.raises(MetadataError):
        decode_metadata(data)


def test_garbage_and_zip_bombs_are_refused() -> None:
    with pytest.raises(MetadataError, match="not streamapp's"):
        decode_metadata(b"\x00\x01garbage")
    with pytest.raises(MetadataError, match="corrupt"):
        decode_metadata(MAGIC + bytes([METADATA_VERSION]) + b"not zlib")
    bomb = MAGIC + bytes([METADATA_VERSION]) + zlib.compress(b" " * (MAX_INFLATED_BYTES + 10))
    with pytest.raises(MetadataError, match="inflates"):
        decode_metadata(bomb)


def _payload(data: bytes) -> dict[str, object]:
    payload: dict[str, object] = json.loads(zlib.decompress(data[len(MAGIC) + 1 :]))
    return payload


def _packed(payload: dict[str, object]) -> bytes:
    return MAGIC + bytes([METADATA_VERSION]) + zlib.compress(json.dumps(payload).encode())


def test_an_eager_member_sends_the_bytes_of_earlier_versions() -> None:
    # Earlier versions neither write nor read the protocol fields: an eager member of this
    # version is, on the wire, one of theirs.
    eager = MemberMetadata(client_id="w1", url="http://h:1", owned_active={"t": [0]})
    assert set(_payload(encode_metadata(eager))) == {"c", "u", "k", "g", "a"}
    assert "P" not in _payload(encode_assignment(MemberAssignment(generation=3)))


def test_a_member_without_the_protocol_field_speaks_eager() -> None:
    old = decode_metadata(_packed({"c": "w1", "u": "http://h:1", "k": 1, "g": 4}))
    assert (old.protocol, old.kept_owned) == ("eager", False)
    old_share = decode_assignment(_packed({"g": 4}))
    assert old_share.group_protocol == "eager"


def test_a_protocol_this_version_does_not_know_counts_as_eager() -> None:
    later = {"c": "w1", "u": "http://h:1", "k": 1, "g": 4, "P": "some-later-protocol"}
    assert decode_metadata(_packed(later)).protocol == "eager"


@pytest.mark.parametrize("bad", [{"P": 1}, {"K": "yes"}])
def test_malformed_protocol_fields_are_refused(bad: dict[str, object]) -> None:
    with pytest.raises(MetadataError, match="malformed"):
        decode_metadata(_packed({"c": "w1", "u": "http://h:1", "k": 1, "g": 4, **bad}))


def test_incoming_partitions_are_optional_on_the_wire() -> None:
    # Left out when empty, so payloads without them are those of earlier versions; an earlier
    # leader's assignment, or an earlier member's metadata, decodes as planning none.
    assert "i" not in _payload(encode_assignment(MemberAssignment(generation=3)))
    assert decode_assignment(_packed({"g": 4})).incoming == {}
    assert decode_metadata(_packed({"c": "w1", "u": "http://h:1", "k": 1, "g": 4})).incoming == {}
    share = MemberAssignment(generation=5, incoming={"t": [3, 1]})
    assert _payload(encode_assignment(share))["i"] == {"t": [1, 3]}
    assert decode_assignment(encode_assignment(share)).incoming == {"t": [1, 3]}
    member = MemberMetadata(client_id="w1", url="http://h:1", generation=5, incoming={"t": [2]})
    decoded = decode_metadata(encode_metadata(member))
    assert (decoded.incoming, decoded.owned_active) == ({"t": [2]}, {})


@pytest.mark.parametrize("bad", [{"I": [1]}, {"I": {"t": [-1]}}])
def test_malformed_incoming_fields_are_refused(bad: dict[str, object]) -> None:
    with pytest.raises(MetadataError, match="malformed"):
        decode_metadata(_packed({"c": "w1", "u": "http://h:1", "k": 1, "g": 4, **bad}))
    with pytest.raises(MetadataError, match="malformed"):
        decode_assignment(_packed({"g": 4, "i": bad["I"]}))


def test_warmups_are_optional_on_the_wire() -> None:
    # Left out when empty, so a member without warmups sends the bytes of earlier versions; an
    # earlier member's metadata decodes as reporting none.
    assert "w" not in _payload(encode_metadata(MemberMetadata(client_id="w1", url="http://h:1")))
    assert decode_metadata(_packed({"c": "w1", "u": "http://h:1", "k": 1, "g": 4})).warmup == {}
    member = MemberMetadata(client_id="w1", url="http://h:1", generation=5, warmup={"t": [4, 2]})
    assert _payload(encode_metadata(member))["w"] == {"t": [2, 4]}
    decoded = decode_metadata(encode_metadata(member))
    assert (decoded.warmup, decoded.owned_standby) == ({"t": [2, 4]}, {})


@pytest.mark.parametrize("bad", [{"w": [1]}, {"w": {"t": [-1]}}, {"w": {"t": "1"}}])
def test_malformed_warmup_fields_are_refused(bad: dict[str, object]) -> None:
    with pytest.raises(MetadataError, match="malformed"):
        decode_metadata(_packed({"c": "w1", "u": "http://h:1", "k": 1, "g": 4, **bad}))


def test_a_warmups_offsets_are_kept_past_the_size_limit() -> None:
    member = MemberMetadata(
        client_id="w1",
        url="http://h:1",
        warmup={"cl": [3]},
        offsets={"cl": {p: 10**12 + p * 7919 for p in range(5_000)}},
    )
    decoded = decode_metadata(encode_metadata(member, limit=2_000))
    assert decoded.offsets == {"cl": {3: 10**12 + 3 * 7919}}
