"""The compiled record codec, talos._speedups, and the Kafka listener's record conversion, server.kafka._convert
(everything else is in pyproject.toml).

Optional: without a C compiler or the Python headers the build prints a warning and the install goes on
with the pure-Python codec (talos._codec) and conversion (server/kafka/records.py), which give the same results,
slower."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension("talos._speedups", sources=["talos/_speedups.c"], optional=True),
        Extension("server.kafka._convert", sources=["server/kafka/_convert.c"], optional=True),
    ]
)
