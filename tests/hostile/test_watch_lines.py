"""The watch stream's line reader: events of any size the API server can send are read whole,
a stream cut mid-line or carrying garbage is an ApiError (the watch resumes), and a line past
`MAX_WATCH_LINE` is a 410 (the caller lists again) read without buffering past the limit."""

from __future__ import annotations

import json

import pytest

from remediation_operator.k8s import client
from remediation_operator.k8s.client import ApiError


class Chunks:
    """A stream that hands out the given byte chunks, then the end."""

    def __init__(self, *chunks: bytes) -> None:
        self._chunks = list(chunks)

    async def readany(self) -> bytes:
        return self._chunks.pop(0) if self._chunks else b""


async def lines(stream: Chunks, limit: int = client.MAX_WATCH_LINE) -> list[bytes]:
    reader = client._LineReader(stream, limit)  # type: ignore[arg-type]
    found = []
    while (line := await reader.next_line()) is not None:
        found.append(line)
    return found


def event(message: str) -> bytes:
    body = {"metadata": {"name": "n", "resourceVersion": "7"}, "status": {"message": message}}
    return json.dumps({"type": "MODIFIED", "object": body}).encode()


async def test_a_line_larger_than_aiohttps_limit_is_read_whole() -> None:
    big = event("m" * 3_000_000)  # larger than etcd's default 1.5 MiB request limit
    pieces = [big[i : i + 65_536] for i in range(0, len(big), 65_536)]
    found = await lines(Chunks(b'{"type":"BOOKMARK"}\n', *pieces, b"\n" + event("x") + b"\n"))
    assert [len(line) for line in found] == [19, len(big), len(event("x"))]
    parsed = client._watch_event(found[1])
    assert parsed is not None
    assert parsed["object"]["status"]["message"] == "m" * 3_000_000


async def test_several_lines_in_one_chunk_and_a_last_line_without_newline() -> None:
    found = await lines(Chunks(b"a\nb\n\nc", b"d"))
    assert found == [b"a", b"b", b"", b"cd"]


async def test_a_line_past_the_limit_is_410_so_the_watch_lists_again() -> None:
    with pytest.raises(ApiError) as raised:
        await lines(Chunks(*[b"x" * 1000] * 20), limit=5000)
    assert raised.value.status == 410
    assert raised.value.reason == "WatchLineTooLong"


@pytest.mark.parametrize("line", [b'{"type": "MODIFIED", "obj', b"[1, 2]", b"17"])
def test_a_cut_or_foreign_line_is_an_api_error_not_a_crash(line: bytes) -> None:
    with pytest.raises(ApiError) as raised:
        client._watch_event(line)
    assert raised.value.reason == "MalformedWatchEvent"
