"""Leave out of the image's Python environment what enrichd never uses (the Dockerfile runs it).

    python slim.py /opt/enrichd/lib/python3.11/site-packages

What goes (docs/operations.md, "Container and docker-compose", says the same to users):

- the test suites of pandas and pyarrow, and pyarrow's C++ headers;
- pyarrow's Flight and S3 libraries, which load only when imported (nothing does);
- Spark's jars for what enrichd never runs: Spark Connect, MLlib and its linear algebra,
  GraphX, Hive and its metastore, the Kubernetes and YARN schedulers, the Scala REPL and
  compiler. Spark runs local or as a standalone cluster's driver, with no Hive catalog;
- RocksDB's native libraries for other platforms than this one: its jar carries fourteen,
  and loads the one of the platform it runs on.

Each pattern must match something, so that a new pyspark or pyarrow that renames a file
fails the build here instead of silently keeping it.
"""

from __future__ import annotations

import platform
import shutil
import sys
import zipfile
from pathlib import Path

GONE = [
    "pandas/tests",
    "pyarrow/tests",
    "pyarrow/include",
    "pyarrow/libarrow_flight*",
    "pyarrow/_flight*",
    "pyarrow/libarrow_s3*",
    "pyarrow/_s3fs*",
    "pyspark/jars/connect-repl",
    "pyspark/jars/spark-connect_*",
    "pyspark/jars/spark-mllib*",
    "pyspark/jars/breeze*",
    "pyspark/jars/spire*",
    "pyspark/jars/algebra_*",
    "pyspark/jars/cats-kernel*",
    "pyspark/jars/arpack*",
    "pyspark/jars/blas-*",
    "pyspark/jars/lapack-*",
    "pyspark/jars/JTransforms-*",
    "pyspark/jars/spark-graphx_*",
    "pyspark/jars/spark-hive*",
    "pyspark/jars/hive-beeline-*",
    "pyspark/jars/hive-cli-*",
    "pyspark/jars/hive-common-*",
    "pyspark/jars/hive-exec-*",
    "pyspark/jars/hive-jdbc-*",
    "pyspark/jars/hive-metastore-*",
    "pyspark/jars/hive-serde-*",
    "pyspark/jars/hive-service-rpc-*",
    "pyspark/jars/hive-shims-*",
    "pyspark/jars/derby*",
    "pyspark/jars/datanucleus-*",
    "pyspark/jars/javax.jdo-*",
    "pyspark/jars/jdo-api-*",
    "pyspark/jars/HikariCP-*",
    "pyspark/jars/spark-kubernetes_*",
    "pyspark/jars/kubernetes-*",
    "pyspark/jars/spark-yarn_*",
    "pyspark/jars/spark-repl_*",
    "pyspark/jars/scala-compiler-*",
]
"""What goes, as glob patterns under site-packages (hive-storage-api stays: ORC needs it)."""

ROCKSDB_NATIVE = {"x86_64": "librocksdbjni-linux64.so", "aarch64": "librocksdbjni-linux-aarch64.so"}
"""The native library RocksDB's jar loads on each platform the image is built for."""


def remove(site: Path) -> None:
    """Remove everything :data:`GONE` names; fail on a pattern that matches nothing."""
    for pattern in GONE:
        found = sorted(site.glob(pattern))
        if not found:
            raise SystemExit(f"slim.py: nothing matches {pattern} in {site}")
        for path in found:
            if path.is_dir():
                shutil.rmtree(path)
            else:
                path.unlink()


def keep_one_native(jar: Path, native: str) -> None:
    """Rewrite RocksDB's ``jar`` with ``native`` as its only native library."""
    rewritten = jar.with_name(jar.name + ".new")
    with zipfile.ZipFile(jar) as old, zipfile.ZipFile(rewritten, "w", zipfile.ZIP_DEFLATED) as new:
        names = [i.filename for i in old.infolist()]
        if native not in names:
            raise SystemExit(f"slim.py: {jar.name} has no {native}")
        for info in old.infolist():
            if info.filename.startswith("librocksdbjni-") and info.filename != native:
                continue
            new.writestr(info, old.read(info))
    rewritten.replace(jar)


def main(site: Path) -> None:
    """Slim the site-packages folder ``site``."""
    remove(site)
    (jar,) = site.glob("pyspark/jars/rocksdbjni-*.jar")
    keep_one_native(jar, ROCKSDB_NATIVE[platform.machine()])


if __name__ == "__main__":
    main(Path(sys.argv[1]))
