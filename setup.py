"""Build hook for the optional compiled N-PAMP per-event path (everything else is in
pyproject.toml).

``iobridge.npamp._speedups`` holds no key material and links nothing but Python. It is
optional: when it cannot be built, the install still succeeds and the pure-Python path (the
reference) is used. ``-Werror`` keeps it warning-free; ``make fuzz`` builds it again with
AddressSanitizer and UBSan.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "iobridge.npamp._speedups",
            ["src/iobridge/npamp/_speedups.c"],
            extra_compile_args=["-O2", "-Wall", "-Wextra", "-Werror"],
            optional=True,
        )
    ]
)
