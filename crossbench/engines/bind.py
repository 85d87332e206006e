"""Where an engine's server listens: loopback unless the user says otherwise, and knowingly.

Each adapter binds its server to its typed ``host`` setting (``127.0.0.1`` by default) and
refuses a ``--host`` in ``extra_args``, which would override that bind without showing in the
typed config (llama-server and vLLM alike). A ``host`` that is not a loopback address is
allowed (a study may drive the server from another machine) but warned about, in the words of
:func:`exposure_warning`: ``crossbench validate`` notes it for a matrix, and
each engine config's ``warnings()`` returns it for a run (:func:`host_warnings`).
"""

from __future__ import annotations

import ipaddress

LOOPBACK_NAMES = ("localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback")
"""Host names that resolve to the loopback interface on common systems."""


def is_loopback(host: str) -> bool:
    """Whether binding to ``host`` keeps a server on this machine (127.0.0.0/8, ::1,
    localhost); any other address, ``0.0.0.0`` and ``::`` included, or a host name, is
    reachable from the network."""
    name = host.strip().strip("[]").lower()
    if name in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def exposure_warning(host: str, field: str = "host") -> str | None:
    """The warning for a server bound to ``host`` (None for a loopback address).

    Example: ``exposure_warning("0.0.0.0")`` -> ``"host 0.0.0.0 is not a loopback address:
    the server will be reachable from the network ..."``.
    """
    if is_loopback(host):
        return None
    return (f"{field} {host} is not a loopback address: the server will be reachable from the "
            "network for the whole run (anyone who can reach this machine can send it "
            f"requests and disturb the measurements); set {field}: 127.0.0.1 unless that is "
            "intended")


def host_warnings(host: str) -> list[str]:
    """An engine config's ``warnings()``: :func:`exposure_warning` of its ``host``, if any."""
    warning = exposure_warning(host, "host")
    return [warning] if warning else []
