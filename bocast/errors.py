"""The one base of the errors that mean "bad input" (an option, a configuration, a file, the
machine): the CLI reports their message in one line and exits with code 2, as it does for
:class:`RpcUnavailable` (defined here so that the CLI catches it without importing the RPC
layer). Every other exception is a bug, reported as such (``--debug`` or ``BOCAST_DEBUG=1``
shows its traceback)."""

from __future__ import annotations


class InputError(ValueError):
    """Input that bocast cannot use; the message names the input and the problem."""


class RpcUnavailable(RuntimeError):
    """No server could be had for a batch (tracker gone, no server under the key, or none of
    the required GPU model); raised by :mod:`bocast.measure.rpc.runner`, which re-exports it."""
