"""Build hook for the optional compiled N-PAMP record path (everything else is in pyproject.toml).

The extension links the system libcrypto (OpenSSL headers needed at install). It is optional:
when it cannot be built, the install still succeeds and the pure-Python path is used.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "iobridge.npamp._speedups",
            ["src/iobridge/npamp/_speedups.c"],
            libraries=["crypto"],
            extra_compile_args=["-O2"],
            optional=True,
        )
    ]
)
