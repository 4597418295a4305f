"""Kernel ridge at any n and m: plan, solvers, search, checkpoints and the estimators."""
