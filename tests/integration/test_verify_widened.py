"""`lakesink verify` on a table with Delta's type widening, which delta-rs refuses to read: verify reads the data
files its log lists, each cast to the table's types (connector/app/verify_table.py, `_read_widened`)."""
from __future__ import annotations

import deltalake
import pytest

from connector.app.verify_table import VerifyError, read_columns

pytestmark = pytest.mark.integration


def test_a_widened_partitioned_table_reads_every_row_in_its_widened_types(spark, table_path):
    spark.sql(f"CREATE TABLE delta.`{table_path}` (id INT, n INT, d INT) USING delta PARTITIONED BY (d) "
              "TBLPROPERTIES ('delta.enableTypeWidening' = 'true')")
    spark.sql(f"INSERT INTO delta.`{table_path}` VALUES (1, 10, 1), (2, 20, 2)")
    spark.sql(f"ALTER TABLE delta.`{table_path}` CHANGE COLUMN n TYPE BIGINT")
    spark.sql(f"ALTER TABLE delta.`{table_path}` ADD COLUMNS (note STRING)")
    spark.sql(f"INSERT INTO delta.`{table_path}` VALUES (3, 30000000000, 1, 'x')")
    dt = deltalake.DeltaTable(str(table_path))
    assert "typeWidening" in dt.protocol().reader_features
    with pytest.raises(Exception, match="TypeWidening|typeWidening"):
        dt.to_pyarrow_dataset()  # why verify reads the files itself

    rows = read_columns(dt, ["id", "n", "d", "note"])
    assert str(rows.schema.field("n").type) == "int64"
    assert sorted(rows.to_pylist(), key=lambda r: r["id"]) == [
        {"id": 1, "n": 10, "d": 1, "note": None}, {"id": 2, "n": 20, "d": 2, "note": None},
        {"id": 3, "n": 30000000000, "d": 1, "note": "x"}]
    assert read_columns(dt, ["id", "note"], non_null="note").to_pylist() == [{"id": 3, "note": "x"}]
    assert read_columns(dt, ["id"], limit=2).num_rows == 2


def test_a_widened_table_with_deletion_vectors_is_refused_in_one_line(spark, table_path):
    spark.sql(f"CREATE TABLE delta.`{table_path}` (id INT) USING delta TBLPROPERTIES "
              "('delta.enableTypeWidening' = 'true', 'delta.enableDeletionVectors' = 'true')")
    spark.sql(f"INSERT INTO delta.`{table_path}` VALUES (1), (2), (3)")
    with pytest.raises(VerifyError, match="type widening and deletion vectors") as refused:
        read_columns(deltalake.DeltaTable(str(table_path)), ["id"])
    assert "\n" not in str(refused.value)
