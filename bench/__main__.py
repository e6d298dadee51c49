"""`python -m bench [--quick]`: see bench/run.py and bench/README.md.

`python -m bench release ...` (the working tree against the previous release: bench/release.py),
`python -m bench memory ...` (bench/memory.py), `python -m bench cache ...` (bench/cache.py),
`python -m bench reshard ...` (bench/reshard.py: live resharding under load) and
`python -m bench slot_ab ...` (bench/slot_ab.py: the stable path, a base ref against HEAD) run
one part."""

import sys


def release(argv: list[str]) -> int:
    """`python -m bench release`: run.py's main with the redis_saver entries and the latency phases
    only (bench/release.py's ENTRIES and DEFAULT_SKIP, unless given). Here, not in release.py: run.py
    imports release.py, which so never imports run.py back."""
    from bench.release import DEFAULT_SKIP, ENTRIES
    from bench.run import main as run_main

    argv = list(argv)
    if not any(a == "--savers" or a.startswith("--savers=") for a in argv):
        argv += ["--savers", ",".join(ENTRIES)]
    if not any(a == "--skip" or a.startswith("--skip=") for a in argv):
        argv += ["--skip", DEFAULT_SKIP]
    return run_main(argv)


SUBCOMMANDS = {"memory": "bench.memory", "cache": "bench.cache", "reshard": "bench.reshard", "slot_ab": "bench.slot_ab"}

if len(sys.argv) > 1 and sys.argv[1] == "release":
    sys.exit(release(sys.argv[2:]))
if len(sys.argv) > 1 and sys.argv[1] in SUBCOMMANDS:
    import importlib

    sys.exit(importlib.import_module(SUBCOMMANDS[sys.argv[1]]).main(sys.argv[2:]))

from bench.run import main  # noqa: E402

sys.exit(main())
