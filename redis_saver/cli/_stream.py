"""The export stream: JSON lines, versioned (see docs/export-format.md).

    {"format": "redis-saver-export", "version": 1, ...}          header
    {"type": "checkpoint", "thread_id": ..., ...}                 one per checkpoint, oldest first per thread
    {"type": "end", "threads": N, "checkpoints": M, "writes": W}  footer (a file without it is truncated)

Every value is the serializer's ``(type, bytes)`` pair from ``serde.dumps_typed``, the bytes
in base64, so nothing is re-encoded through JSON.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Container, Iterator
from datetime import datetime, timezone
from typing import IO, Any

from ._ops import Item

FORMAT = "redis-saver-export"
VERSION = 1


class StreamError(ValueError):
    """The file is not a (complete, supported) export stream."""


def _typed(serde: Any, value: Any) -> list[str]:
    ty, data = serde.dumps_typed(value)
    return [ty, base64.b64encode(data).decode("ascii")]


def _untyped(serde: Any, pair: Any) -> Any:
    ty, b64 = pair
    return serde.loads_typed((ty, base64.b64decode(b64)))


def header(prefix: str, serde: Any) -> dict[str, Any]:
    return {
        "format": FORMAT,
        "version": VERSION,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "source_prefix": prefix,
        "serde": type(serde).__name__,
    }


def encode_item(serde: Any, item: Item) -> dict[str, Any]:
    return {
        "type": "checkpoint",
        "thread_id": item.thread_id,
        "checkpoint_ns": item.ns,
        "checkpoint_id": item.checkpoint_id,
        "parent_checkpoint_id": item.parent_id,
        "checkpoint": _typed(serde, item.checkpoint),
        "metadata": _typed(serde, item.metadata),
        "new_versions": item.new_versions,
        "pending_writes": [[task_id, channel, *_typed(serde, value)] for task_id, channel, value in item.writes],
    }


def decode_item(serde: Any, rec: dict[str, Any]) -> Item:
    cp = _untyped(serde, rec["checkpoint"])
    if not isinstance(cp, dict) or cp.get("id") != rec["checkpoint_id"]:
        raise StreamError(f"checkpoint {rec.get('checkpoint_id')!r}: its id does not match its record")
    return Item(
        thread_id=rec["thread_id"],
        ns=rec.get("checkpoint_ns") or "",
        checkpoint_id=rec["checkpoint_id"],
        parent_id=rec.get("parent_checkpoint_id") or None,
        checkpoint=cp,
        metadata=_untyped(serde, rec["metadata"]),
        new_versions=dict(rec.get("new_versions") or {}),
        writes=[(w[0], w[1], _untyped(serde, (w[2], w[3]))) for w in rec.get("pending_writes") or []],
    )


def write_line(out: IO[str], obj: dict[str, Any]) -> None:
    out.write(json.dumps(obj, ensure_ascii=False, separators=(",", ":")))
    out.write("\n")


def check_file(f: IO[str]) -> dict[str, Any]:
    """Read the whole file once, without decoding values: header, footer, thread ids.

    Returns the header plus ``threads`` (ids in file order) and the footer's counts; raises
    StreamError for anything that would make an import stop halfway, a truncated file first
    of all (cut anywhere: in a line, between records or threads, in the end record).
    """
    first = f.readline()
    try:
        head = json.loads(first)
    except json.JSONDecodeError as exc:
        if not first.endswith("\n"):
            raise StreamError(_truncated("its first line is cut off" if first else "it is empty", {}, None)) from None
        raise StreamError(f"line 1 is not JSON ({exc.msg}): not a redis-saver export") from None
    if not isinstance(head, dict) or head.get("format") != FORMAT:
        raise StreamError("line 1 is not a redis-saver-export header")
    if head.get("version") != VERSION:
        raise StreamError(f"export format version {head.get('version')!r} is not supported (this tool reads {VERSION})")
    threads: dict[str, None] = {}
    footer = None
    last = None
    n = 0
    for lineno, line in enumerate(f, start=2):
        if not line.strip():
            continue
        if footer is not None:
            raise StreamError(f"line {lineno}: data after the end record")
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as exc:
            if not line.endswith("\n"):
                raise StreamError(_truncated(f"its last line ({lineno}) is cut off", threads, last)) from None
            raise StreamError(f"line {lineno} is not JSON ({exc.msg})") from None
        kind = rec.get("type") if isinstance(rec, dict) else None
        if kind == "checkpoint":
            for k in ("thread_id", "checkpoint_id", "checkpoint", "metadata"):
                if k not in rec:
                    raise StreamError(f"line {lineno}: checkpoint record without {k!r}")
            tid = rec["thread_id"]
            if tid in threads and tid != last:
                raise StreamError(
                    f"line {lineno}: thread {tid!r} continues after another thread (lines must be grouped)"
                )
            threads[tid] = None
            last = tid
            n += 1
        elif kind == "end":
            footer = rec
        else:
            raise StreamError(f"line {lineno}: unknown record type {kind!r}")
    if footer is None:
        raise StreamError(_truncated("it has no end record (the export did not finish)", threads, last))
    if footer.get("checkpoints") != n:
        raise StreamError(f"the end record counts {footer.get('checkpoints')} checkpoints, the file holds {n}")
    return {**head, "threads": list(threads), "checkpoints": n}


def _truncated(what: str, threads: dict[str, None], last: str | None) -> str:
    where = (f"; it breaks off in or after its thread number {len(threads)}, {last!r}" if last is not None
             else "; it holds no checkpoint")
    return (f"the file is truncated: {what}{where}. Nothing was imported: export the threads again "
            "(a complete export ends with an end record)")


def iter_threads(
    serde: Any, f: IO[str], only: Container[str] | None = None
) -> Iterator[tuple[str, list[Item]]]:
    """(thread id, items oldest first) per thread, in file order (a thread's lines are
    contiguous); with ``only``, just those threads (the others' values are not decoded)."""
    f.readline()  # header
    current: str | None = None
    items: list[Item] = []
    for line in f:
        if not line.strip():
            continue
        rec = json.loads(line)
        if rec.get("type") != "checkpoint":
            continue
        if rec["thread_id"] != current:
            if current is not None and (only is None or current in only):
                yield current, items
            current, items = rec["thread_id"], []
        if only is None or current in only:
            items.append(decode_item(serde, rec))
    if current is not None and (only is None or current in only):
        yield current, items
