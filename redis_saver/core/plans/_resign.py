"""Records signed again in the client. copy_thread with an integrity key: each record the copy
moves is checked where it was (the source thread) and signed for where it goes (the target
thread), in the client, which holds it on its way; a record that fails its check stops the copy
with ``IntegrityError``. ``sign_thread``: every record of a thread signed where it is, unchecked
(the operator vouches for what is stored), through sign.lua."""

from __future__ import annotations

import hashlib
from typing import Any, cast

from ...errors import MalformedReplyError
from ...keys import dec_first
from .. import codec
from .. import values as values_
from ..integrity import Integrity, join_cp, join_type, join_value, split_cp, split_text, split_type, split_value
from . import budgets as B
from .common import Call, Plan, PlanBase, normalize_thread_id


class Resign:
    """The records of one copy from ``src`` to ``dst``, checked and signed again; the source
    streams' bytes are kept as their parts arrive (a stream value's tag covers its bytes)."""

    __slots__ = ("integ", "src", "dst", "dirs", "frames", "vouch")

    def __init__(self, integ: Integrity, src: str, dst: str, vouch: bool = False) -> None:
        self.integ, self.src, self.dst = integ, src, dst
        self.vouch = vouch  # sign without checking (sign_thread)
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
        raw_t = t
        t, tag, binary = split_value(raw_t)
        if not binary:  # (a tag of the earlier format, as text: decoded)
            t, tag = split_text(raw_t)
        covered = data
        if d is not None:
            if d not in self.dirs:
                raise MalformedReplyError(f"copy: stream {d!r} missing from the export")
            known = values_.decode_stream_value(data, self._raw(d))[1]
            covered = values_.stream_covered(known.ops, known.stream)[0]
        if not self.vouch:
            self.integ.check(tag, ("v", self.src, ns, ch, ver, t), covered)
        return codec.blob_record(join_value(t, self.integ.tag(("v", self.dst, ns, ch, ver, t), covered)), data)

    def checkpoint(self, f: bytes, raw: bytes) -> bytes:
        ns, p = dec_first(f)
        cid = dec_first(f, p)[0]
        parts: list[Any] = _all_parts(raw)
        parts[1], tags, joint = split_cp(parts[1])
        if not self.vouch:
            self.integ.check_cp(tags, ("c", self.src, ns, cid), parts, None, joint)
        t = parts[1]
        parts[1] = join_cp(t, self.integ.cp_tags(("c", self.dst, ns, cid), parts, parts[0]))
        return codec.checkpoint_record(parts)

    def write(self, f: bytes, rec: bytes) -> bytes:
        ns, p = dec_first(f)
        cid = dec_first(f, p)[0]
        tid, ch, ty, data, path, idx = codec.unpack(rec)
        ty, tag = split_type(ty)
        if not self.vouch:
            self.integ.check(tag, ("w", self.src, ns, cid, tid, idx, ch, path, ty), data)
        ty = join_type(ty, self.integ.tag(("w", self.dst, ns, cid, tid, idx, ch, path, ty), data))
        return codec.write_record(tid, ch, ty, data, path, idx)


def _all_parts(raw: bytes) -> list[Any]:
    """A checkpoint record's 10 parts, nested ones as lists (an earlier format's framed record
    too: signed, it is stored as a format-6 record)."""
    if raw[:1] == bytes([codec.CP_MSGPACK]):
        return list(codec.checkpoint_head(raw))
    parts: list[Any] = codec.unpack_head(raw, codec.CP.PARTS)
    for i in (codec.CP.VERSIONS, codec.CP.FILTER, codec.CP.DELTA, codec.CP.PARENTS):
        parts[i] = codec.unpack(parts[i])
    return parts


class SignPlans(PlanBase):
    """sign_thread: every record of a thread signed where it is (``rewrite --sign``)."""

    def _plan_sign_thread(self, thread_id: Any) -> Plan[int]:
        """Sign each stored checkpoint, value and write of a thread with the signing key,
        unchecked: the operator vouches for what is stored. The thread is read with HSCAN pages
        (its values whole, for the streams' bytes), then sign.lua replaces, a page at a time,
        each record still as it was read. Returns the number of records signed."""
        from ..engine import Cmd
        from .lifecycle import _split_blobs, _stream_dir

        if self.integrity is None:
            raise ValueError("signing a thread needs integrity_key")
        tid = normalize_thread_id(thread_id)
        keys = self.keys.thread_keys(tid)
        rs = Resign(self.integrity, tid, tid, vouch=True)
        found: dict[str, list[tuple[bytes, bytes]]] = {}
        for h, key in (("c", keys[1]), ("b", keys[4]), ("w", keys[5])):
            cursor: Any = 0
            items = found[h] = []
            while True:
                # a plain read (the engine runs it as the node cache's): HSCAN of one hash
                cursor, page = yield cast(Any, Cmd("hscan", [key, cursor], {"count": B.EXPORT_COUNT}))
                items += [(f, v) for f, v in page.items() if f]  # not the hash's mark (field "")
                if int(cursor) == 0:
                    break
        flat = [x for fv in found["b"] for x in fv]
        streams, records = _split_blobs(flat)
        rs.learn(streams)
        out: list[tuple[str, bytes, bytes, bytes]] = []
        for f, v in found["c"]:
            out.append(("c", f, v, rs.checkpoint(f, v)))
        for f, v in codec.pairs(records):
            if v != codec.EMPTY_BLOB:  # the scripts read it as no value: never deserialized
                out.append(("b", f, v, rs.blob(f, v, _stream_dir(f, v))))
        for f, v in found["w"]:
            out.append(("w", f, v, rs.write(f, v)))
        done = 0
        head = self._header(tid)
        for i in range(0, len(out), B.SIGN_PAGE):
            args: list[Any] = [*head, 0]
            for h, f, old, new in out[i : i + B.SIGN_PAGE]:
                if new != old:
                    args += [h, f, hashlib.sha1(old).hexdigest(), new]
            args[4] = (len(args) - 5) // 4
            if args[4]:
                done += int((yield Call("sign", keys, args)))
        return done
