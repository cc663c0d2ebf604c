"""The local Spark JVM's options for the class archive that spark/classes.py records: where this JDK's and this
Spark's archive lives, and the options that map it. Apart from the recorder, which runs an audit, so that the
session (spark/session.py) reads the options without importing the audit.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

# The JVM's messages about the archive (one that does not match this JDK or classpath is not used, and
# recording it warns about every class it skips) are not the user's concern.
QUIET = ["-Xlog:cds=off", "-Xlog:cds+dynamic=off"]


def _java() -> Path | None:
    """The java that spark-submit starts: $JAVA_HOME/bin/java, else the one on PATH."""
    home = os.environ.get("JAVA_HOME")
    found = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    return Path(found).resolve() if found and Path(found).exists() else None


def archive_path() -> Path | None:
    """Where this JDK's and this Spark's archive lives; None without a java to key it by."""
    import pyspark

    java = _java()
    if java is None:
        return None
    key = "\n".join([str(java), str(java.stat().st_mtime_ns), pyspark.__version__, str(Path(pyspark.__file__).parent)])
    cache = Path(
        os.environ.get("PULSAR_REF_CACHE")
        or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "pulsar-ref"
    )
    return cache / f"spark-classes-{pyspark.__version__}-{hashlib.sha256(key.encode()).hexdigest()[:16]}.jsa"


def java_options() -> list[str]:
    """JVM options that map the recorded archive, or none if there is none (or no cache to look in)."""
    try:
        path = archive_path()
    except (OSError, RuntimeError):  # no home directory, an unreadable java: audit without the archive
        return []
    if path is None or not path.is_file() or any(c.isspace() for c in str(path)):
        return []  # (Spark splits its JVM options at spaces)
    return [f"-XX:SharedArchiveFile={path}", *QUIET]


__all__ = ["QUIET", "archive_path", "java_options"]
