"""The audit's command line as a Spark application file:
`spark-submit spark/submit.py HISTORY... [--json OUT] [--html OUT]` runs what `pulsar-ref audit` runs (spark/cli.py).
Its own entry file, so that the job (spark/audit.py) never imports the command line that calls it."""

from __future__ import annotations

import sys
from pathlib import Path

if __name__ == "__main__" and not __package__:  # spark-submit runs this file by path: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from spark.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:], prog="spark-submit spark/submit.py"))
