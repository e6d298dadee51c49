"""I/O: the sync and async drivers that perform the engine's operations, AsyncRedisSaver's
automatic pipelining, Redis Cluster routing and the clients ``from_conn_string`` builds."""
