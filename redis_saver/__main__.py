"""``python -m redis_saver``: the command-line tool (see ``redis_saver.cli``)."""

from redis_saver.cli import main

if __name__ == "__main__":
    main()
