"""The store plans' work budgets, read at call time as ``B.<NAME>`` (``from . import _budgets as B``):
a test or an operator that sets one here changes it for every plan (no module holds a copy)."""

PAGE = 256  # items of one search page that filters (values go to the client; lua MAX_BUDGET caps it)
CALL_OPS = 256  # ops of one shard per script call (a larger batch: more calls, in the same round trip)
VECTOR_PAGE = 1024  # items of one page of a semantic search without a filter (their vectors)
LIST_PAGE = 1024  # namespaces one list_namespaces page examines (lua MAX_BUDGET caps it)
REBUILD_LIST_PAGE = 256  # namespaces a vector-set rebuild lists a call (_rebuild.py)
