"""Which array library and device a block lives in, and numpy's fast paths (buffers, threads)."""
