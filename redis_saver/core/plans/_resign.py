"""copy_thread with an integrity key: each record the copy moves is checked where it was (the
source thread) and signed for where it goes (the target thread), in the client, which holds it
on its way; a record that fails its check stops the copy with ``IntegrityError``."""

from __future__ import annotations

from typing import Any

from ...errors import MalformedReplyError
from ...keys import dec_first
from .. import codec
from .. import values as values_
from ..integrity import CP_TAG, Integrity, join_type, split_type


class Resign:
    """The records of one copy from ``src`` to ``dst``, checked and signed again; the source
    streams' bytes are kept as their parts arrive (a stream value's tag covers its bytes)."""

    __slots__ = ("integ", "src", "dst", "dirs", "frames")

    def __init__(self, integ: Integrity, src: str, dst: str) -> None:
        self.integ, self.src, self.dst = integ, src, dst
        self.dirs: dict[bytes, bytes] = {}  # source directory field -> its directory record
        self.frames: dict[bytes, dict[bytes, bytes]] = {}  # directory field -> frame number -> frame

    def learn(self, streams: dict[bytes, list[bytes]]) -> None:
        """Stream parts of the export (a directory and frames, or new frames of a held one)."""
        for d, flat in streams.items():
            got = self.frames.setdefault(d, {})
            for f, v in codec.pairs(flat):
                if f == d:
                    self.dirs[d] = v
                else:
                    got[f[len(d) + 1 :]] = v

    def _raw(self, d: bytes) -> dict[bytes, values_.Stream]:
        dir_ = codec.unpack(self.dirs[d])
        frames = self.frames.get(d, {})
        numbers = dir_[3::2]
        raw = b"".join([values_.decompress(frames[n]) for n in numbers])
        sid = d[d.rfind(b"\0") + 1 :]
        return {sid: values_.Stream(sid, raw, len(numbers))}

    def blob(self, f: bytes, rec: bytes, d: bytes | None) -> bytes:
        """A value record at blob field ``f`` (``d``: the directory of the stream it names)."""
        ns, p = dec_first(f)
        ch, p = dec_first(f, p)
        ver = f[p:]
        t, data = codec.unpack_blob(rec)
        t, tag = split_type(t)
        covered = data
        if d is not None:
            if d not in self.dirs:
                raise MalformedReplyError(f"copy: stream {d!r} missing from the export")
            covered = values_.decode_stream_value(data, self._raw(d))[0]
        self.integ.check(tag, ("v", self.src, ns, ch, ver, t), covered)
        return codec.blob_record(join_type(t, self.integ.tag(("v", self.dst, ns, ch, ver, t), covered)), data)

    def checkpoint(self, f: bytes, raw: bytes) -> bytes:
        ns, p = dec_first(f)
        cid = dec_first(f, p)[0]
        parts: list[Any] = list(codec.checkpoint_head(raw))
        parts[1], tags = split_type(parts[1], CP_TAG)
        self.integ.check_cp(tags, ("c", self.src, ns, cid), parts)
        t = parts[1]
        parts[1] = join_type(t, self.integ.cp_tags(("c", self.dst, ns, cid), parts, parts[0]))
        return codec.checkpoint_record(parts)

    def write(self, f: bytes, rec: bytes) -> bytes:
        ns, p = dec_first(f)
        cid = dec_first(f, p)[0]
        tid, ch, ty, data, path, idx = codec.unpack(rec)
        ty, tag = split_type(ty)
        self.integ.check(tag, ("w", self.src, ns, cid, tid, idx, ch, path, ty), data)
        ty = join_type(ty, self.integ.tag(("w", self.dst, ns, cid, tid, idx, ch, path, ty), data))
        return codec.write_record(tid, ch, ty, data, path, idx)
