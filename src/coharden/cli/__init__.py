"""The ``coharden`` command line: every command module lives in this package (typer + rich).

Domain packages hold no CLI code; each module here imports its layer only inside its commands, so
``coharden --help`` stays fast and a core install does not need the optional extras.
"""

from coharden.cli.main import app

__all__ = ["app"]
