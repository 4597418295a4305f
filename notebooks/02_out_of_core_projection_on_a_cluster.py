# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Out-of-core projection on a cluster
#
# The everyday shape of an NPT job: fit a model on a few thousand rows, then
# project many more rows than the model was fitted on — chunk by chunk, on
# whatever dask cluster is at hand, into a zarr store — and analyse the result
# with xarray without ever loading it whole.
#
# Here the cluster is a `LocalCluster` of two single-threaded worker processes
# started by `npt_dask.runtime.cluster.connect`; pointing `connect` at a scheduler
# address runs the very same code on a real cluster. The data are the 56,000
# Fashion-MNIST images of eight classes. The model is fitted on six classes
# only, so the projection can also show novelty detection: images of the two
# classes the model has never seen lie farther from the fitted subspace, and
# the Lemma 5 residual measures exactly that distance.

# %%
# %matplotlib inline
import os
import tempfile
import time
from pathlib import Path

import numpy as np
import xarray as xr
from IPython.display import display
from matplotlib.figure import Figure
from sklearn.metrics import roc_auc_score, roc_curve

import npt_dask as npt
from npt_dask.interface import plot
from npt_dask.methods import explained_variance_ratio, total_variance
from npt_dask.runtime.cluster import connect
from npt_dask.storage.datasets import data_path, load_npz

# the repository root: the first folder upwards from here holding pyproject.toml
HERE = Path.cwd()
ROOT = next((p for p in (HERE, *HERE.parents) if (p / "pyproject.toml").is_file()), HERE)
DATA_DIR = Path(os.environ.get("NPT_DATA_DIR") or ROOT.parent / "shared" / "data")
OUT = Path(os.environ.get("NPT_NOTEBOOK_OUT") or tempfile.mkdtemp(prefix="npt-notebook-"))
OUT.mkdir(parents=True, exist_ok=True)
print(f"data from {DATA_DIR}\noutputs to {OUT}")
started = time.perf_counter()

NAMES = {
    0: "T-shirt/top",
    1: "Trouser",
    3: "Dress",
    4: "Coat",
    5: "Sandal",
    7: "Sneaker",
    8: "Bag",
    9: "Ankle boot",
}
HELD_OUT = (1, 8)  # never shown to the model
KNOWN = tuple(c for c in NAMES if c not in HELD_OUT)

# %% [markdown]
# ## The data, as a zarr store
#
# Large data live on disk, not in the notebook's memory. To start from there we
# write the images once into a zarr store — pixels in [0, 1] as float32, the
# class as a `label` coordinate, 4,000 rows per chunk — and from then on open
# it lazily. Workers read the chunks they need themselves; nothing large
# travels through the client. (The `.npz` file is only the source of this
# demonstration.)

# %%
pixels, labels = load_npz(
    data_path("fashion_mnist_8class.npz", DATA_DIR), scale=255.0, dtype=np.float32
)
xr.Dataset({"pixels": (("sample", "feature"), pixels)}, coords={"label": ("sample", labels)}).chunk(
    {"sample": 4000}
).to_zarr(OUT / "02_fashion.zarr", mode="w", consolidated=False)
del pixels, labels

# %% [markdown]
# ## A LocalCluster
#
# Two worker processes with one thread each (the two cores of a small
# machine). `connect` makes the client the default scheduler: `npt.fit`,
# `npt.project` and every `.compute()` below run on it. Open the dashboard
# link to watch the tasks.

# %%
client = connect(n_workers=2, threads_per_worker=1)
print(f"dashboard: {client.dashboard_link}")
display(client)

# %%
data = xr.open_zarr(OUT / "02_fashion.zarr", consolidated=False)
display(data)

# %% [markdown]
# ## Fit on six classes
#
# The model sees 4,000 images from the training split (rows 0–47,999), drawn
# only from the six known classes. The RBF width comes from the median
# heuristic, `γ = 1 / median ‖x − x'‖²` over 500 of those images. With
# `n_components=64` and `solver="krylov"` the kernel matrix is never
# materialised: with `chunk_size=1000` it is a 4 × 4 grid of 1,000 × 1,000
# blocks, of which the 10 in the upper triangle are computed on the workers
# and, as far as memory allows, kept there between the solver's passes (the
# model's `cache` line below says how many were).

# %%
label = data["label"].values  # one byte per row: cheap to hold
train_rows = np.flatnonzero(np.isin(label, KNOWN) & (np.arange(label.size) < 48_000))[:4000]
train = data["pixels"].isel(sample=train_rows)
counts = dict(zip(*np.unique(label[train_rows], return_counts=True), strict=True))
print("training images per class:", {NAMES[c]: int(n) for c, n in counts.items()})

sample = train.isel(sample=slice(0, 500)).values.astype(np.float64)
sq = (sample**2).sum(axis=1)
dist2 = sq[:, None] + sq[None, :] - 2.0 * sample @ sample.T
gamma = 1.0 / float(np.median(dist2[np.triu_indices(len(sample), k=1)]))
print(f"gamma = {gamma:.4g}")

# %%
tic = time.perf_counter()
model = npt.fit(
    train,
    "rbf",
    gamma=gamma,
    n_components=64,
    solver="krylov",
    chunk_size=1000,
    random_state=0,
)
print(f"fitted in {time.perf_counter() - tic:.1f} s")
display(model)

# %% [markdown]
# ## Save, and load back
#
# The model is a zarr v3 store (checksummed, written atomically). A projection
# job on another day, or another machine, starts from `npt.load`; a loaded
# model streams its training blocks from the store inside each task.

# %%
model.save(OUT / "02_model.zarr", overwrite=True)  # this notebook's own output
model = npt.load(OUT / "02_model.zarr")
display(model)
ratio = explained_variance_ratio(model)
print(f"the {model.n_components} components hold {ratio.sum():.1%} of the feature-space variance")
fig = plot.spectrum(
    model.to_dataset(),
    total_variance=total_variance(model),
    title=f"RBF kernel on {model.n_samples} images: top {model.n_components} eigenvalues",
)
fig.savefig(OUT / "02_spectrum.png", dpi=90)
display(fig)

# %% [markdown]
# ## Project 40,000 images chunk by chunk
#
# Rows 16,000–55,999 — all eight classes, none used in the fit — are projected
# into a zarr store, one task per chunk of 1,000 rows. The input is a labelled
# `DataArray`, so its `label` coordinate is stored with the result. The bar
# below advances as chunks finish on the workers. `resume=False` starts
# afresh; with the default `resume=True` a re-run after an interruption only
# projects the chunks still missing.

# %%
images = data["pixels"].isel(sample=slice(16_000, None))
tic = time.perf_counter()
npt.project(model, images, OUT / "02_projection.zarr", progress=True, resume=False)
seconds = time.perf_counter() - tic
print(f"{images.sizes['sample']:,} rows projected in {seconds:.1f} s on {client.dashboard_link}")

# %% [markdown]
# ## Lazy analysis with xarray
#
# Opened with `xarray.open_zarr`, the projection is a Dataset of dask arrays:
# `coordinates (sample, component)`, `residual (sample)` and the `label`
# coordinate. Selections, group-bys and reductions only build a task graph;
# nothing is read until `.compute()`.

# %%
proj = xr.open_zarr(OUT / "02_projection.zarr", consolidated=False)
proj = proj.drop_vars(["npt_done", "npt_digest"])  # bookkeeping of the projection
display(proj)

# %% [markdown]
# Per-class means of the leading components. The labels are one byte per
# row, so we load that coordinate and group by it; the coordinates
# themselves stay on disk until the means are computed. (Grouping by a *lazy*
# coordinate needs the optional `flox` package.)

# %%
proj = proj.assign_coords(label=proj["label"].compute())
classes = np.unique(proj["label"].values)
legend = {c: NAMES[c] + (" (held out)" if c in HELD_OUT else "") for c in NAMES}
names = np.array([legend[c] for c in proj["label"].values])  # class names for the legends
by_class = proj.groupby("label")
means = by_class.mean()["coordinates"].isel(component=slice(0, 16))
print(f"still lazy: {type(means.data).__module__}.{type(means.data).__name__}")
tic = time.perf_counter()
means = means.compute()
print(f"computed in {time.perf_counter() - tic:.2f} s")
table = means.isel(component=slice(0, 4)).to_pandas()
table.index = [legend[c] for c in table.index]
table.round(3)

# %% [markdown]
# The first two coordinates of 5,000 of the projected images, coloured by
# class, with each class mean marked.

# %%
fig = plot.coordinate_scatter(
    proj["coordinates"], names, components=(0, 1), title="Projected images, by class"
)
ax = fig.axes[0]
ax.scatter(means.isel(component=0), means.isel(component=1), marker="x", s=80, c="black")
for c in classes:
    point = (float(means.sel(label=c)[0]), float(means.sel(label=c)[1]))
    ax.annotate(NAMES[int(c)], point, xytext=(5, 5), textcoords="offset points", weight="bold")
fig.savefig(OUT / "02_scatter.png", dpi=90)
display(fig)

# %% [markdown]
# The means of the first 16 components as an image, one row per class. Where
# does the model put a class it has never seen? For each held-out class, the
# known class whose mean is nearest (over these 16 components):

# %%
fig = Figure(figsize=(8, 3.8), layout="constrained")
ax = fig.subplots()
limit = float(np.abs(means).max())
image = ax.imshow(means.values, cmap="RdBu_r", vmin=-limit, vmax=limit, aspect="auto")
ax.set_yticks(range(len(classes)), [NAMES[int(c)] for c in classes])
ax.set_xlabel("component")
ax.set_title("Mean NPT coordinate per class")
fig.colorbar(image, ax=ax)
fig.savefig(OUT / "02_class_means.png", dpi=90)
display(fig)
for c in HELD_OUT:
    gaps = {k: float(np.linalg.norm(means.sel(label=c) - means.sel(label=k))) for k in KNOWN}
    nearest = min(gaps, key=gaps.get)
    print(
        f"{NAMES[c]}: nearest known class mean is {NAMES[nearest]} (distance {gaps[nearest]:.3f})"
    )

# %% [markdown]
# ## Residuals: how far each image lies from the fitted subspace
#
# The Lemma 5 residual `sqrt(k(z, z) − ‖y(z)‖²)` is the length of the part of
# an image's (centred) feature vector that the 64 components cannot
# represent. Its
# per-class mean and spread, again a lazy group-by computed in one go:

# %%
residual = proj["residual"]
groups = residual.groupby("label")
summary = xr.Dataset({"mean": groups.mean(), "std": groups.std(), "max": groups.max()})
lazy = summary["mean"].data
print(f"still lazy: {type(lazy).__module__}.{type(lazy).__name__}")
summary = summary.compute()
res_table = summary.to_pandas()
res_table.index = [legend[c] for c in res_table.index]
res_table.round(3)

# %%
fig = plot.residual_histogram(residual, names, title="Distance from the fitted subspace, per class")
fig.savefig(OUT / "02_residual_histogram.png", dpi=90)
display(fig)

# %% [markdown]
# ## Novelty detection from the residual
#
# Score every projected image by its residual and ask how well that score
# separates the two held-out classes from the six known ones. The ROC AUC is
# the probability that a random held-out image has a larger residual than a
# random known-class image (0.5 = no better than chance).

# %%
score = residual.values  # one number per image: small enough to load
proj_label = proj["label"].values
novel = np.isin(proj_label, HELD_OUT)
auc = roc_auc_score(novel, score)
per_class = {}
for c in HELD_OUT:
    keep = np.isin(proj_label, (*KNOWN, c))  # the known classes and this held-out class
    per_class[NAMES[c]] = roc_auc_score(novel[keep], score[keep])
fpr, tpr, _ = roc_curve(novel, score)
fig = Figure(figsize=(5, 5), layout="constrained")
ax = fig.subplots()
ax.plot(fpr, tpr, label=f"residual, AUC = {auc:.3f}")
ax.plot([0, 1], [0, 1], "--", color="grey", label="chance")
ax.set_xlabel("false positive rate (known classes)")
ax.set_ylabel("true positive rate (held-out classes)")
ax.set_title("Novelty detection from the Lemma 5 residual")
ax.legend(loc="lower right")
fig.savefig(OUT / "02_novelty_roc.png", dpi=90)
display(fig)

known_mean = float(score[~novel].mean())
print(
    f"Held-out images lie on average {score[novel].mean() / known_mean:.2f} times as far from "
    f"the fitted subspace as images of the known classes ({score[novel].mean():.3f} vs "
    f"{known_mean:.3f}); the residual alone detects them with ROC AUC {auc:.3f}."
)
threshold = np.quantile(score[~novel], 0.95)  # flags 5% of the known-class images
for c in HELD_OUT:
    name, rows = NAMES[c], proj_label == c
    print(
        f"  {name}: AUC {per_class[name]:.3f} against the known classes; "
        f"{np.mean(score[rows] > threshold):.0%} flagged at a 5% false-alarm rate"
    )
order = res_table["mean"].sort_values(ascending=False).index
print(f"Classes by mean residual, farthest first: {', '.join(order)}.")

# %%
client.close()
print(f"notebook ran in {time.perf_counter() - started:.0f} s")
