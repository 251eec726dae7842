"""zombied: reaps the pods that node shutdowns leave behind.

The public surface is the ``zombied`` command line (see :mod:`zombied.cli`).
Everything else is internal and may change without notice. The simulated API server
the tests and the demo run against is a separate distribution, ``kubesim``, and is
never shipped with the controller.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("zombied")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0+unknown"

__all__ = ["__version__"]
