"""``python -m metering [OPTIONS]``: ``talos metering run``, as a file a SparkApplication can name.

spark-submit runs a Python file, not a console script: the prod overlay's SparkApplication points its
``mainApplicationFile`` at this module inside the image (k8s/overlays/prod/metering-sparkapplication.yaml).
"""

from __future__ import annotations

import sys

from talos.cli import main

if __name__ == "__main__":
    main(["metering", "run", *sys.argv[1:]], prog_name="talos")
