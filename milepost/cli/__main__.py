"""``python -m milepost.cli``: the `milepost` command without the console script."""

from milepost.cli import main

main()
