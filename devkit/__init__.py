"""Development kit shared by the tests and the benchmark (not part of the shipped package):
local Redis servers, clusters, Sentinel groups and TLS servers started on free loopback ports
(``devkit.servers``), a counting TCP proxy (``devkit.wire``), and the Lua scripts cut after each
stage (``devkit.script_cuts``). The tests import ``devkit``, never ``bench``."""
