"""``python -m coharden``: the same command line as the ``coharden`` console script."""

from coharden.cli import app

if __name__ == "__main__":
    app(prog_name="coharden")
