"""``npt``: the command line (one module per subcommand)."""

from npt_dask.interface.cli.ridge import for_the_command_line, main

__all__ = ["for_the_command_line", "main"]
