"""`python -m specscope …`: the `specscope` command without an installed console script (a plain
checkout with `PYTHONPATH` set to it)."""

from specscope.cli import main

if __name__ == "__main__":
    main()
