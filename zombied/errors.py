"""The failures a user must act on, one exception type each.

Every message is written for the operator who reads it: it names the option, the
object or the RBAC rule at fault and says what to change. Internal bugs are not
modelled here; they stay ordinary exceptions.
"""


class ZombiedError(Exception):
    """Base of every error zombied reports to its user."""


class ConfigError(ZombiedError):
    """Invalid configuration: start-up stops with exit code 2 and this one line.

    The message starts with the option at fault, e.g. ``--qps: must be > 0, got -1``.
    """


class KubeconfigError(ConfigError):
    """The cluster credentials could not be loaded (missing or broken kubeconfig)."""


class ListenError(ConfigError):
    """The ``--listen`` address cannot be served (taken, not local, or not allowed).

    A configuration problem as far as the operator is concerned: the fix is another
    ``--listen`` or stopping whatever holds the address, so it exits 2 like one.
    """
