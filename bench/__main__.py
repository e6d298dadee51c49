"""`python -m bench [--quick]`: see bench/run.py and bench/README.md.

`python -m bench release ...` (bench/release.py), `python -m bench memory ...` (bench/memory.py) and
`python -m bench cache ...` (bench/cache.py) run one part."""

import sys

SUBCOMMANDS = {"release": "bench.release", "memory": "bench.memory", "cache": "bench.cache"}

if len(sys.argv) > 1 and sys.argv[1] in SUBCOMMANDS:
    import importlib

    sys.exit(importlib.import_module(SUBCOMMANDS[sys.argv[1]]).main(sys.argv[2:]))

from bench.run import main  # noqa: E402

sys.exit(main())
