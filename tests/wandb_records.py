"""Reads the records of an offline W&B run file (`run-<id>.wandb`) back, for tests.

The file is W&B's transaction log: a 7-byte header (`:W&B`, magic 0xBEE1, version 1) and then the
LevelDB log format (32 KiB blocks; each chunk: crc32 4 bytes, length 2, type 1 = full, 2 = first,
3 = middle, 4 = last) whose payloads are `wandb_internal_pb2.Record` protobufs. wandb >= 0.19 no
longer ships a Python reader (its core is Go), so this is the few lines the test needs.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

BLOCK = 32 * 1024
HEADER = 7
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def _payloads(data: bytes):
    assert data[:4] == b":W&B", "not a W&B run file"
    pos, pending = HEADER, b""
    while pos + HEADER <= len(data):
        room = BLOCK - pos % BLOCK
        if room < HEADER:
            pos += room
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos:pos + HEADER])
        chunk = data[pos + HEADER:pos + HEADER + length]
        pos += HEADER + length
        if kind == 0 and length == 0:
            continue
        if kind == FULL:
            yield chunk
        elif kind == FIRST:
            pending = chunk
        elif kind == MIDDLE:
            pending += chunk
        elif kind == LAST:
            yield pending + chunk
            pending = b""


def read_run(path: Path) -> dict[str, Any]:
    """{"history": [{key: value}], "run": RunRecord, "artifacts": [ArtifactRecord]} of one run file."""
    from wandb.proto import wandb_internal_pb2 as pb

    out: dict[str, Any] = {"history": [], "run": None, "artifacts": []}
    for payload in _payloads(Path(path).read_bytes()):
        record = pb.Record()
        record.ParseFromString(payload)
        kind = record.WhichOneof("record_type")
        if kind == "history":
            out["history"].append({item.key or "/".join(item.nested_key): json.loads(item.value_json)
                                   for item in record.history.item})
        elif kind == "run":
            out["run"] = record.run
        elif kind == "artifact":
            out["artifacts"].append(record.artifact)
    return out
