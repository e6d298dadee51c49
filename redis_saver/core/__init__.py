"""The sans-IO core: record codec, encoded values, every operation as a plan of script calls,
the engine that decides how calls reach Redis, and the Lua scripts' loader. Nothing here
opens a socket: the drivers in ``redis_saver.transport`` do."""
