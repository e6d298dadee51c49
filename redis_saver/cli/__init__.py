"""``redis-saver``: the command-line tool (``pip install 'redis-saver[cli]'``).

The core package never imports this module; click and rich are imported only when the
tool runs. Entry points: the ``redis-saver`` console script and ``python -m redis_saver``.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> None:
    try:
        import click  # noqa: F401
        import rich  # noqa: F401
    except ImportError as exc:
        sys.stderr.write(
            f"redis-saver: the command-line tool needs click and rich ({exc.name} is missing): "
            "pip install 'redis-saver[cli]'\n"
        )
        sys.exit(1)
    from ._app import cli

    cli.main(args=list(argv) if argv is not None else None, prog_name="redis-saver")
