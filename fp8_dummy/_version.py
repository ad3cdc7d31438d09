# The one place the version is written: pyproject.toml (setuptools reads this file without
# importing the package), CMakeLists.txt and fp8_dummy.__version__ take it from here.
__version__ = "0.1.0"
