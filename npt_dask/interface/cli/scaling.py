"""How ``npt ridge`` scales the rows of its files, and how a saved model keeps it.

Fitting (:func:`fit_transform`): ``--scale S`` divides DATA's and ``--test``'s rows by
``S``. Without it, DATA's rows are divided by 255 when they are raw 8-bit pixels -- the
data layer's one rule, :func:`npt_dask.storage.datasets.pixel_scale` (``uint8``, or
images of whole numbers in [0, 255], reaching 128 or more) -- with a one-line note;
``--scale 1`` keeps them as they are. Dividing is chosen over refusing: the kernel's
``gamma`` (README: 0.02 for MNIST) is set for pixels in [0, 1], raw pixels with it give
a kernel that is nearly the identity and a model that scores chance, and the scale is
recorded, so nothing downstream can use the model on rows scaled otherwise. The test
rows get the same scale, so they must be alike: raw pixels beside raw pixels, rows
that are not beside rows that are not (else refused, naming both options).

The transform -- each image's shape (flattened to a row) and the scale -- is recorded
in the ``--out`` store (:func:`npt_dask.storage.ridge_store.check_input_transform`).

Predicting (:func:`model_transform`, ``--model``): the recorded scale is applied to
``--test``'s rows, whose form must be the one the model was fitted from (raw pixels
for a model fitted on pixels divided by 255; no raw pixels for one fitted on rows not
divided), images of the recorded shape. ``--scale`` given beside ``--model`` wins, with
a warning when it differs from the recorded one. A store that records no transform
(saved from Python, or by an earlier npt-dask) is used as before: the rows as given,
divided by ``--scale`` when it is given, with a warning when they are raw pixels.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from npt_dask.errors import InputError, InputScaleWarning, warn
from npt_dask.interface.cli.ridge_files import Rows
from npt_dask.storage.datasets import PIXEL_SCALE, pixel_scale, raw_pixels

__all__ = ["fit_transform", "model_transform", "scaled"]


def scaled(rows: Rows, scale: float | None) -> Any:
    """The rows divided by ``scale`` (as they are for None)."""

    return rows.data if scale is None else rows.data / scale


def fit_transform(args: argparse.Namespace, train: Rows, others: list[Rows]) -> dict[str, Any]:
    """The transform of a fit: ``{"scale": S or None, "image_shape": shape or None}``
    (see the module notes); ``others`` (the test rows) must be alike when the scale was
    found, not given."""

    shape = None if train.image_shape is None else list(train.image_shape)
    if args.scale is not None:
        return {"scale": float(args.scale), "image_shape": shape}
    scale = pixel_scale(train.raw)
    for rows in others:
        if rows.source != train.source:  # rows of the same file are alike
            _check_alike(train, rows, scale)
    if scale is not None and not args.quiet:
        print(
            f"npt ridge: note: DATA {train.source} holds raw 8-bit pixels ({train.raw.dtype}, "
            f"0 to 255): its rows (and the test rows) are divided by {scale:g}, recorded in "
            "the saved model; pass --scale 1 to keep the raw values.",
            file=sys.stderr,
        )
    return {"scale": scale, "image_shape": shape}


def _check_alike(train: Rows, rows: Rows, scale: float | None) -> None:
    """Refuse test rows that the scale found for DATA would not suit."""

    if scale is not None and not raw_pixels(rows.raw):
        raise InputError(
            f"DATA {train.source} holds raw 8-bit pixels, divided by {scale:g}, and "
            f"{rows.option} {rows.source} does not (not whole numbers in [0, 255]: already "
            f"scaled?), so one scale cannot suit both. Give {rows.option} in DATA's form (raw "
            "pixels), or pass --scale S to divide both by S if that is meant."
        )
    if scale is None and pixel_scale(rows.raw) is not None:
        raise InputError(
            f"{rows.option} {rows.source} holds raw 8-bit pixels and DATA {train.source} does "
            "not (already scaled?), so one scale cannot suit both. Give both in the same form "
            "(raw pixels are divided by 255), or pass --scale S to divide both by S if that "
            "is meant."
        )


def model_transform(
    args: argparse.Namespace, recorded: dict[str, Any] | None, rows: Rows, model: str
) -> float | None:
    """The scale to divide ``--test``'s rows by for the saved model ``model``, whose store
    records ``recorded`` (None: records nothing); see the module notes."""

    if recorded is None:
        if args.scale is None and pixel_scale(rows.raw) is not None:
            warn(
                f"{rows.option} {rows.source} holds raw 8-bit pixels, and the model {model} "
                "records no scale (saved from Python, or by an earlier npt-dask): they are "
                "used as they are. If the model was fitted on pixels divided by 255, pass "
                "--scale 255.",
                InputScaleWarning,
            )
        return args.scale
    _check_shape(recorded, rows, model)
    scale = recorded["scale"]
    if args.scale is not None:
        prescaled = args.scale == 1 and scale == PIXEL_SCALE and not raw_pixels(rows.raw)
        if args.scale != (scale or 1.0) and not prescaled:  # (--scale 1: already divided)
            warn(
                f"The model {model} was fitted on rows divided by {scale or 1:g} (its store "
                f"records it), and --scale {args.scale:g} divides {rows.option} by "
                f"{args.scale:g} instead; leave --scale out to use the recorded scale.",
                InputScaleWarning,
            )
        return float(args.scale)
    _check_form(recorded, rows, model)
    if scale is not None and not args.quiet:
        print(
            f"npt ridge: note: {rows.option}'s rows are divided by {scale:g}, as the rows "
            f"the model {model} was fitted on were (its store records it).",
            file=sys.stderr,
        )
    return scale


def _check_shape(recorded: dict[str, Any], rows: Rows, model: str) -> None:
    """Images of another shape than the model's (their pixels would be other features)."""

    want = recorded["image_shape"]
    if want is not None and rows.image_shape is not None and list(rows.image_shape) != want:
        raise InputError(
            f"{rows.option} {rows.source} holds images of shape {tuple(rows.image_shape)}, and "
            f"the model {model} was fitted on images of shape {tuple(want)}: the pixels would "
            "be read as other features. Give images of the model's shape."
        )


def _check_form(recorded: dict[str, Any], rows: Rows, model: str) -> None:
    """The rows to predict are in the form the model's rows were in before the scale."""

    scale = recorded["scale"]
    if scale == PIXEL_SCALE and not raw_pixels(rows.raw):
        raise InputError(
            f"{rows.option} {rows.source} does not hold raw 8-bit pixels (not whole numbers "
            f"in [0, 255]), and the model {model} was fitted on raw pixels divided by 255 (its "
            "store records it): give the raw pixels, or pass --scale 1 if these rows are "
            "divided by 255 already."
        )
    if scale is None and pixel_scale(rows.raw) is not None:
        raise InputError(
            f"{rows.option} {rows.source} holds raw 8-bit pixels, and the model {model} was "
            "fitted on rows not divided by anything (its store records it): pass --scale 255 "
            "if its rows were these pixels divided by 255, or give rows in the model's form."
        )
