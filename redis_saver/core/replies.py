"""Every script's status replies and error codes, named once.

A script's ``--[[ ... ]]`` header (``lua/<name>.lua``) says what it returns; where a reply is a
code rather than data, the header writes the code with its name here in brackets, e.g.
``Returns: 1 [STORED]; 2 [PRUNE_IN_PAGES] when ...``, and its ``Errors:`` line lists the
``RS_<CODE>`` errors the script can raise (its own and its helpers'). tests/scripts/test_replies.py
checks both against this module, both ways. Python compares replies with these names only.

A code is an ``IntEnum`` member where the script replies an integer, a ``bytes`` one where it
replies a string that the saver reads as bytes, a ``str`` one where the reader decodes first
(the store's rebuild status).
"""

from __future__ import annotations

from enum import Enum, IntEnum


class Err(str, Enum):
    """The errors scripts raise (``error({err = 'RS_<CODE> message'})``); ``redis_saver.errors``
    maps each to its exception class."""

    SCHEMA = "RS_SCHEMA"  # a thread stored in a format this release does not read
    CONFLICT = "RS_CONFLICT"  # fencing: a second child of the same parent
    BADARG = "RS_BADARG"  # bad input (nothing written)
    CYCLE = "RS_CYCLE"  # a parent chain that returns to a checkpoint it already walked
    DAMAGED = "RS_DAMAGED"  # a key of the thread was lost (read: the client forgets it)
    EXISTS = "RS_EXISTS"  # copy_thread into a thread that exists


class Put(IntEnum):
    STORED = 1
    PRUNE_IN_PAGES = 2  # history "latest" left older checkpoints: prune the thread in pages
    STREAMS_MOVED = 3  # nothing written: a stream the put appends to changed; resend with new streams
    THREAD_GONE = 4  # nothing stored: the parent's thread holds no checkpoint (ThreadEvictedError)


class PutWrites(IntEnum):
    FORGOTTEN = -1  # the thread lost a key and was forgotten, nothing stored (else: writes stored)


class Pin(IntEnum):
    DONE = 1
    NO_THREAD = 0  # unpinning a thread that does not exist: nothing written


class DeleteThread(IntEnum):
    DONE = 1


class DeleteRuns(bytes, Enum):
    PAGED = b"paged"  # "all": the thread is too large for one call; go on step by step
    MORE = b"1"  # "drop": more checkpoints to delete


class DeleteRunsFinish(IntEnum):
    EMPTIED = 1  # the thread was left empty and removed
    KEPT = 0


class Prune(bytes, Enum):
    PAGED = b"paged"  # "all": the thread is too large for one call; go on step by step


class PruneDetach(IntEnum):
    DONE = 1


class Export(bytes, Enum):
    ALL = b"all"  # the whole thread in one reply
    PAGED = b"paged"  # the thread holds more than one reply may: copy it page by page
    OK = b"ok"  # a page
    CHANGED = b"changed"  # the source changed destructively since the guard was set


class Import(IntEnum):
    WRITTEN = 1
    NOT_WRITTEN = 0  # the target no longer holds the copy's token (or, "abort", was not removed)
    REDONE = 2  # "stage": an unfinished thread (an import or copy stopped midway) was removed first


class Rewrite(IntEnum):
    STREAMS_MOVED = -1  # "set": nothing written, a stream the new records need is gone or moved


class CacheClear(IntEnum):
    TOOK_INDEX = 1  # this call took the namespace's index (or there was none)
    INDEX_TAKEN = 0  # an earlier call took it


class StoreCache(IntEnum):
    """store_read "c": the vector cache's check."""

    CURRENT = 1  # the cache is current
    UPDATED = 2  # the log brings the cache up to date
    STALE = 0  # neither


class StoreSets(IntEnum):
    """store_read "V" (the namespaces' vector sets), "C" (the candidates' records) and "A" (both,
    after VSIM, in approximate mode)."""

    OK = 1
    SCAN = 0  # a namespace without a complete set, or the sets changed: search by a scan
    EXACT = 2  # "A": a set made with another M than asked: the client searches it exactly


class StoreProbe(IntEnum):
    """store_read "P": whether the server keeps vector sets for the store."""

    VECTOR_SETS = 1  # VCARD answered
    NO_VECTOR_SETS = 0  # an unknown command, or one the caller's ACL refuses


class StoreRebuild(str, Enum):
    DONE = "done"  # the set is complete: searches use it
    MORE = "more"  # call again
    ENDED = "ended"  # the rebuild ended, the namespace is out of sets
    NONE = "none"  # no items


# script (lua/<name>.lua, cache scripts as cache/<name>) -> the codes its header names
REPLIES: dict[str, tuple[type[Enum], ...]] = {
    "put": (Put,),
    "put_writes": (PutWrites,),
    "pin": (Pin,),
    "delete_thread": (DeleteThread,),
    "delete_runs": (DeleteRuns, DeleteRunsFinish),
    "prune": (Prune, PruneDetach),
    "export": (Export,),
    "import": (Import,),
    "rewrite": (Rewrite,),
    "store_read": (StoreCache, StoreSets, StoreProbe),
    "store_rebuild": (StoreRebuild,),
    "cache/clear": (CacheClear,),
}
