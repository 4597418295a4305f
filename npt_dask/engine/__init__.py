"""The kernel applied out of core: blocks, their sums, moments and projections, consumers,
the passes over row chunks, the kernel operator and matrix, centres, budgets."""
