"""How the command line speaks: an error's message in its words (option flags, not
Python names) and each warning on one line."""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator

from npt_dask.params.parsing import flag_of, subject

__all__ = ["for_the_command_line", "one_line_warnings"]


def for_the_command_line(exc: BaseException) -> str:
    """An error's message in the command line's words: option flags, not Python names.

    The error says which parameter it is about and how its Python spellings read on
    the command line (:class:`~npt_dask.errors.NPTError`'s ``param`` and ``spellings``).

    >>> from npt_dask.errors import InputError
    >>> for_the_command_line(InputError("The 'chunk_size' parameter must be ...; pass "
    ...     "resume=False.", param="chunk_size", spellings={"resume=False": "--overwrite"}))
    'The --chunk-size option must be ...; pass --overwrite.'
    """

    text = str(exc)
    param = getattr(exc, "param", None)
    if param is not None:
        text = text.replace(subject(param), f"The {flag_of(param)} option")
    for python, flag in getattr(exc, "spellings", {}).items():
        text = text.replace(python, flag)
    return text


@contextlib.contextmanager
def one_line_warnings(command: str) -> Iterator[None]:
    """Print each warning as one line, ``npt fit: warning: KernelScaleWarning: ...``
    (Python's default names the console script's line, ``.../bin/npt:8:``, then prints
    its source line, ``sys.exit(main())``).

    Only the format changes (:func:`warnings.formatwarning`, which Python lets a program
    replace): which warnings are raised, which the filters show, and a caller recording
    them (``warnings.catch_warnings(record=True)``) see what they did before.
    """

    def one_line(
        message: Warning | str,
        category: type[Warning],
        filename: str,
        lineno: int,
        line: str | None = None,
    ) -> str:
        text = " ".join(part.strip() for part in str(message).splitlines() if part.strip())
        return f"npt {command}: warning: {category.__name__}: {text}\n"

    before = warnings.formatwarning
    warnings.formatwarning = one_line
    try:
        yield
    finally:
        warnings.formatwarning = before
