"""Driver-side algebra: Cholesky and symmetric products, upper tiles, tall panels,
conjugate gradient, preconditioners."""
