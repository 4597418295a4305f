"""Where work runs and what comes in: scheduler, cluster, progress, inputs, parameters,
atomic writes and the owners of locks."""
