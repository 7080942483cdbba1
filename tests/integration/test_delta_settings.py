"""A session of `connector.jvm.spark.get_spark` has Delta's SQL settings registered before the caller gets it. Delta
registers them when its code first runs, and while it does, Spark refuses to set or unset one it knows of but has
not registered yet (CANNOT_MODIFY_CONFIG): a coordinator's first commit unsets the MERGE's txn settings on its own
session (connector/jvm/spark.py own_session) while its warm-up thread's first Delta commit may be registering them.
A new process, so that no Delta code has run in its JVM."""
from __future__ import annotations

import os
import subprocess
import sys

from connector.table.merge import TXN_SETTINGS

PROBE = """
import sys
from connector.jvm.spark import get_spark
spark = get_spark("delta-settings-probe", "local[1]")
sql = spark._jvm.java.lang.Class.forName("org.apache.spark.sql.internal.SQLConf$").getField("MODULE$").get(None)
print("unregistered:", ",".join(k for k in sys.argv[1:] if not sql.containsConfigKey(k)))
"""


def test_a_new_session_has_deltas_txn_settings_registered_before_anyone_sets_them():
    out = subprocess.run([sys.executable, "-c", PROBE, *TXN_SETTINGS], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "LAKESINK_SPARK_LOG_LEVEL": "ERROR"})
    assert out.returncode == 0, out.stderr[-2000:]
    assert "unregistered: \n" in out.stdout, out.stdout
