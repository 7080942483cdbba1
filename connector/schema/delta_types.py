"""Arrow types as Delta names them in a table's schema: the one mapping the documentation's type tables show and the
tests compare a table's logged types with."""
from __future__ import annotations

import pyarrow as pa


def delta_type(kind: pa.DataType) -> str:
    """The Delta type a column of Arrow type `kind` gets in the table's schema (the mapping of
    connector/table/delta_log.py `spark_schema_json`: Spark's own), in Delta's names: `integer`, `timestamp_ntz`,
    `decimal(10,2)`, `array<long>`, `struct<a: string>`."""
    from pyspark.sql.pandas.types import from_arrow_type

    if pa.types.is_map(kind):
        return f"map<{delta_type(kind.key_type)}, {delta_type(kind.item_type)}>"
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        return f"array<{delta_type(kind.value_type)}>"
    if pa.types.is_struct(kind):
        return "struct<" + ", ".join(f"{f.name}: {delta_type(f.type)}" for f in kind) + ">"
    return from_arrow_type(kind).jsonValue()
