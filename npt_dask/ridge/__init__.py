"""Kernel ridge at any n and m: the problem, routes, plan, solves, search, checkpoints and
the estimators."""
