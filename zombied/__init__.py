"""zombied: reaps the pods that node shutdowns leave behind.

The public surface is the ``zombied`` command line (see :mod:`zombied.cli`) and, for
tests and demos, the simulated API server in :mod:`zombied.sim`. Everything else is
internal and may change without notice.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("zombied")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0+unknown"

__all__ = ["__version__"]
