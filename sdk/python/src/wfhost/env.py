"""The environment through which the supervisor tells a child how to reach
it: which fd, which channel, which protocol, which deployment, which key."""

from __future__ import annotations

import os
import string
from .errors import ConnectError
from .record import Record
from .signing import TrustedKey

TYPE_CHECKING = False  # typing is not imported at run time: it costs start-up
if TYPE_CHECKING:
    from typing import Mapping

# The newest and the oldest protocol version this SDK speaks.
PROTOCOL_VERSION = 3
OLDEST_PROTOCOL = 2

ENV_CONTROL_FD = "WFHOST_CONTROL_FD"
ENV_CHANNEL_ID = "WFHOST_CHANNEL_ID"
ENV_PROTOCOL = "WFHOST_PROTOCOL"
ENV_PROTOCOL_MAX = "WFHOST_PROTOCOL_MAX"
ENV_DEPLOYMENT = "WFHOST_DEPLOYMENT"
ENV_SUPERVISOR_KEY = "WFHOST_SUPERVISOR_KEY"

# Every variable of the contract: what a child must not pass on to the
# programs it starts (connect() removes them from os.environ).
ENV_ALL = (
    ENV_CONTROL_FD,
    ENV_CHANNEL_ID,
    ENV_PROTOCOL,
    ENV_PROTOCOL_MAX,
    ENV_DEPLOYMENT,
    ENV_SUPERVISOR_KEY,
)


def negotiate(oldest: int, newest: int) -> int | None:
    """The newest version this SDK speaks within the supervisor's
    ``[oldest, newest]``, or None when they share none."""
    for version in range(PROTOCOL_VERSION, OLDEST_PROTOCOL - 1, -1):
        if oldest <= version <= newest:
            return version
    return None


_HEX = frozenset(string.hexdigits)


class ChildEnv(Record):
    """Everything a child learns from its ``WFHOST_*`` environment;
    ``protocol`` is the version it speaks: the newest both sides know."""

    __slots__ = ("control_fd", "channel_id", "protocol", "deployment", "supervisor_key")

    def __init__(
        self,
        control_fd: int,
        channel_id: str,
        protocol: int,
        deployment: str,
        supervisor_key: TrustedKey,
    ) -> None:
        self.control_fd = control_fd
        self.channel_id = channel_id
        self.protocol = protocol
        self.deployment = deployment
        self.supervisor_key = supervisor_key

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] | None = None) -> "ChildEnv":
        """Reads and checks the variables; raises ``ConnectError`` naming
        the first one missing or unusable."""
        env = os.environ if environ is None else environ

        def get(var: str) -> str:
            value = env.get(var)
            if value is None:
                raise ConnectError(
                    f"{var} is not set: this process must be started by the wfhost supervisor "
                    f"(`wfhost supervise`), which passes the control channel"
                )
            return value

        def invalid(var: str, value: str, reason: str) -> ConnectError:
            return ConnectError(
                f"{var}={value!r} is unusable: {reason}; it is set by `wfhost supervise`, "
                f"do not set it by hand"
            )

        fd_text = get(ENV_CONTROL_FD)
        try:
            fd = int(fd_text.strip())
        except ValueError:
            fd = -1
        if fd <= 2:
            raise invalid(ENV_CONTROL_FD, fd_text, "expected an fd number above 2")

        channel_id = get(ENV_CHANNEL_ID)
        if len(channel_id) != 32 or not set(channel_id) <= _HEX:
            raise invalid(ENV_CHANNEL_ID, channel_id, "expected 32 hex characters")

        proto_text = get(ENV_PROTOCOL)
        try:
            oldest = int(proto_text.strip())
        except ValueError:
            raise invalid(ENV_PROTOCOL, proto_text, "not a version number") from None
        max_text = env.get(ENV_PROTOCOL_MAX)
        if max_text is None:
            newest = oldest  # a supervisor of version 2 speaks only that
        else:
            try:
                newest = int(max_text.strip())
            except ValueError:
                raise invalid(ENV_PROTOCOL_MAX, max_text, "not a version number") from None
        protocol = negotiate(oldest, newest)
        if protocol is None:
            said = (
                f"{ENV_PROTOCOL_MAX} is not set"
                if max_text is None
                else f"{ENV_PROTOCOL_MAX}={max_text!r}"
            )
            raise ConnectError(
                f"{ENV_PROTOCOL}={proto_text!r} and {said}: the supervisor speaks protocol "
                f"{oldest} to {newest}, this SDK speaks {OLDEST_PROTOCOL} to {PROTOCOL_VERSION}; "
                f"upgrade the SDK or the supervisor so they share a version"
            )

        deployment = get(ENV_DEPLOYMENT)
        if not deployment.strip():
            raise invalid(ENV_DEPLOYMENT, deployment, "the deployment id is empty")

        key_text = get(ENV_SUPERVISOR_KEY)
        try:
            key = TrustedKey.from_hex(key_text)
        except ValueError as e:
            raise invalid(
                ENV_SUPERVISOR_KEY, key_text, f"not a hex ed25519 public key ({e})"
            ) from None

        return cls(fd, channel_id, protocol, deployment, key)
