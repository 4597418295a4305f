"""``python -m pipelines`` runs the quickstart job."""

from pipelines.quickstart import main

main()
