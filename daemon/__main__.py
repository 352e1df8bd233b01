"""``python -m daemon``: the ``daemon`` command."""

from daemon.cli import main

if __name__ == "__main__":  # importing the module (a doctest collection) runs nothing
    main()
