"""Development kit shared by the tests and the benchmark (not part of the shipped package):
local Redis servers, clusters, Sentinel groups and TLS servers started on free loopback ports
(``devkit.servers``), and a counting TCP proxy (``devkit.wire``)."""
