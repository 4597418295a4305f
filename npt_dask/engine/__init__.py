"""The kernel applied out of core: blocks, consumers, the passes over row chunks, budgets."""
