"""Driver-side algebra: dense symmetric solves, upper tiles, conjugate gradient, preconditioners."""
