"""RedisStore and AsyncRedisStore: LangGraph's long-term memory (``BaseStore``) on plain Redis.

Layout: ``_keys.py`` (key names), ``_semantics.py`` (InMemoryStore's filters, matching and
scoring), ``_plans.py`` (a batch as a pure plan of script calls), ``_search.py`` (its paged
reads: a search's path and its fallback, listings; the paths in ``_scan.py``, ``_cached.py``
and ``_vset.py``, what they share in ``_pages.py``), ``_records.py`` (settings, records),
``_budgets.py``, ``_base.py`` (options), ``sync.py`` / ``aio.py`` (the I/O shells); the
scripts are ``lua/store_*.lua``.
"""

from ._keys import StoreKeys
from ._transfer import StoredItem
from .aio import AsyncRedisStore
from .sync import RedisStore

__all__ = ["AsyncRedisStore", "RedisStore", "StoreKeys", "StoredItem"]
