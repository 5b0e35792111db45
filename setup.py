"""The compiled record codec, talos._speedups (everything else is in pyproject.toml).

Optional: without a C compiler or the Python headers the build prints a warning and the install goes on
with the pure-Python codec (talos._codec), which gives the same results, slower."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension("talos._speedups", sources=["talos/_speedups.c"], optional=True),
    ]
)
