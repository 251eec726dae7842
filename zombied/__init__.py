"""zombied: reaps the pods that node shutdowns leave behind.

The public surface is the ``zombied`` command line (see :mod:`zombied.cli`).
Everything else is internal and may change without notice. The simulated API server
the tests and the demo run against is a separate distribution, ``kubesim``, and is
never shipped with the controller.
"""

__all__ = ["__version__"]


def __getattr__(name: str) -> str:
    # Looked up when asked: importing the package stays instant, so that the command line
    # is running (and handles Ctrl-C) before anything heavy loads.
    if name != "__version__":
        raise AttributeError(f"module 'zombied' has no attribute {name!r}")
    from importlib.metadata import PackageNotFoundError, version  # noqa: PLC0415

    try:
        return version("zombied")
    except PackageNotFoundError:  # running from a source tree that was never installed
        return "0.0.0+unknown"
