"""The one build step pyproject.toml cannot state without an experimental table: the
remote-write scanner in C (``shoal/promwrite/_scan.c``). It is optional: an install
without a C compiler still works, and the decoder in Python then does the scanner's work."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension("shoal.promwrite._scan", ["shoal/promwrite/_scan.c"], optional=True),
    ]
)
