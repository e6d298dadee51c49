"""I/O: the sync and async drivers that perform the engine's operations, AsyncRedisSaver's
automatic pipelining, Redis Cluster routing, the clients ``from_conn_string`` builds, and the
embedded server of the demo."""
