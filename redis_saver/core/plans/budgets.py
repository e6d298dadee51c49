"""The work budgets of the plans: how much one script call may do (a script blocks every client
of its server while it runs, so each call's work is bounded on any stored data). The plans read
them from this module at call time (``B.NAME``), so setting one here (as the tests that shrink
them to 1-3 do, with ``monkeypatch.setattr(budgets, ...)``) reaches every plan."""

PAGE_SIZE = 100  # list() items per call when no limit (or a larger one) is given
SCAN_BUDGET = 512  # records one list call may examine while filtering (~10 ms of server time)
EXPORT_COUNT = 200  # HSCAN COUNT per rewrite_values scan page
# copy_thread: the most fields (records, stream parts) and bytes one export page or import
# call carries (a page: at most WORK_BUDGET checkpoints, at least one); a thread of at most
# WORK_BUDGET checkpoints, SNAPSHOT x COPY_FIELDS fields and 2 x COPY_BYTES bytes is read
# by one export call, a snapshot (HGETALL: ~1 us a field). A single larger record goes alone.
# ~5 us of import script time a field here: an import call takes ~2.5 ms, an export page less.
COPY_FIELDS = 512
COPY_BYTES = 4 << 20
SNAPSHOT = 8
COPY_ATTEMPTS = 4  # paged copies started again after a destructive change of the source
# The most ancestors one delta_history call walks, and the most checkpoints one prune or
# delete_for_runs call examines: a script blocks every client of its server while it runs, so
# each call's work is bounded on any stored data (a longer walk or a larger thread takes more
# calls; ~20-30 us of server time per unit here).
WALK_BUDGET = 256
WORK_BUDGET = 256
REWRITE_BYTES = 1 << 20  # raw bytes one rewrite "get" call brings back, at most (one value may exceed it)
SIGN_PAGE = 256  # records one sign call replaces (sign_thread: rewrite --sign)
