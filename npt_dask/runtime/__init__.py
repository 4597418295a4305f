"""Where work runs and what comes in: scheduler, cluster, progress, inputs, labels,
atomic writes and the owners of locks."""
