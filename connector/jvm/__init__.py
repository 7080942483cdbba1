"""The JVM the coordinator's Delta commits run in (docs/ARCHITECTURE.md, "The tree is the architecture"): the jars from
Maven Central and Java itself (jars.py), the one SparkSession factory (spark.py), the class archive a driver maps to
start in half the time (class_archive.py) and its training run (training.py). A worker process imports none of it."""
