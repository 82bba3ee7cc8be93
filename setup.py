"""The one build step pyproject.toml cannot state without an experimental table: the
scanners in C of remote-write and OTLP metrics bodies (``shoal/promwrite/_scan.c``,
``shoal/otlp/_scan.c``). They are optional: an install without a C compiler still works,
and the decoders in Python then do the scanners' work."""

from setuptools import Extension, setup

_WIRE = ["shoal/_wire.h"]

setup(
    ext_modules=[
        Extension(
            "shoal.promwrite._scan", ["shoal/promwrite/_scan.c"], depends=_WIRE, optional=True
        ),
        Extension("shoal.otlp._scan", ["shoal/otlp/_scan.c"], depends=_WIRE, optional=True),
    ]
)
