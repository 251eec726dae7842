"""A stand-in for systemd-logind on a test node's private system bus.

The kubelet's graceful node shutdown speaks to logind (pkg/kubelet/nodeshutdown/systemd):
it reads ``InhibitDelayMaxUSec``, takes a *delay* inhibitor lock with ``Inhibit`` (a file
descriptor it closes when its pods are down), listens for ``PrepareForShutdown``, and,
when the delay is shorter than its grace period, writes
``/etc/systemd/logind.conf.d/99-kubelet.conf`` and has systemd send logind a SIGHUP
(``org.freedesktop.systemd1.Manager.KillUnit``). This process answers all of that, as
logind and systemd do, and takes the place of ACPI: ``PowerOff`` announces the shutdown
(``PrepareForShutdown(true)``), and ``DelayInhibited`` reads ``shutdown`` until every
delay lock is released or the delay has passed, as logind waits before powering off.

Run inside the node's namespaces (where /etc/systemd is the node's own directory):
``python -m tests.nodes.logind unix:path=/…/bus``.
"""

from __future__ import annotations

import asyncio
import configparser
import os
import sys
from pathlib import Path

from dbus_fast import Message, MessageType, Variant
from dbus_fast.aio import MessageBus

LOGIND = "org.freedesktop.login1"
LOGIND_PATH = "/org/freedesktop/login1"
MANAGER = "org.freedesktop.login1.Manager"
SYSTEMD = "org.freedesktop.systemd1"
PROPERTIES = "org.freedesktop.DBus.Properties"
CONF_DIRS = (Path("/etc/systemd/logind.conf"), Path("/etc/systemd/logind.conf.d"))
#: logind's own default for InhibitDelayMaxSec.
DEFAULT_DELAY_S = 5.0


def configured_delay() -> float:
    """InhibitDelayMaxSec as logind reads it: logind.conf, then the drop-ins in order."""
    delay = DEFAULT_DELAY_S
    conf, drop_ins = CONF_DIRS
    files = [conf] if conf.is_file() else []
    if drop_ins.is_dir():
        files += sorted(drop_ins.glob("*.conf"))
    for path in files:
        parser = configparser.ConfigParser(strict=False)
        parser.read(path)
        value = parser.get("Login", "InhibitDelayMaxSec", fallback=None)
        if value is not None:
            delay = float(value.strip().removesuffix("s"))
    return delay


class Logind:
    """logind's shutdown inhibition, as the kubelet uses it."""

    def __init__(self, bus: MessageBus) -> None:
        self.bus = bus
        self.delay = configured_delay()
        self.locks: set[int] = set()
        self.preparing = False
        self.delay_over = asyncio.Event()

    def properties(self) -> dict[str, Variant]:
        delayed = bool(self.locks) and not self.delay_over.is_set()
        return {
            "InhibitDelayMaxUSec": Variant("t", int(self.delay * 1_000_000)),
            "DelayInhibited": Variant("s", "shutdown" if delayed else ""),
            "PreparingForShutdown": Variant("b", self.preparing),
        }

    def handle(self, msg: Message) -> Message | bool | None:
        if msg.message_type is not MessageType.METHOD_CALL:
            return None
        call = (msg.interface, msg.member)
        if call == (PROPERTIES, "Get") and msg.body[0] == MANAGER:
            value = self.properties().get(msg.body[1])
            if value is None:
                return Message.new_error(msg, "org.freedesktop.DBus.Error.UnknownProperty", "")
            return Message.new_method_return(msg, "v", [value])
        if call == (PROPERTIES, "GetAll") and msg.body[0] == MANAGER:
            return Message.new_method_return(msg, "a{sv}", [self.properties()])
        if call == (MANAGER, "Inhibit"):
            return self.inhibit(msg)
        if call == (MANAGER, "PowerOff"):
            asyncio.get_running_loop().create_task(self.power_off())
            return Message.new_method_return(msg)
        if call == ("org.freedesktop.systemd1.Manager", "KillUnit"):
            unit, _who, signal = msg.body
            if unit == "systemd-logind.service" and signal == 1:  # SIGHUP: reload
                self.delay = configured_delay()
            return Message.new_method_return(msg)
        return None

    def inhibit(self, msg: Message) -> bool:
        what, who, _why, mode = msg.body
        read_end, write_end = os.pipe()
        self.locks.add(read_end)
        loop = asyncio.get_running_loop()
        loop.add_reader(read_end, self.released, read_end)
        print(f"inhibit: {who} takes a {mode} lock on {what}", flush=True)
        reply = Message(
            message_type=MessageType.METHOD_RETURN,
            reply_serial=msg.serial,
            destination=msg.sender,
            signature="h",
            body=[0],
            unix_fds=[write_end],
        )
        # Our copy of the lock goes once it is on its way: the holder's close releases it.
        self.bus.send(reply).add_done_callback(lambda _: os.close(write_end))
        return True

    def released(self, read_end: int) -> None:
        if os.read(read_end, 64):
            return
        asyncio.get_running_loop().remove_reader(read_end)
        os.close(read_end)
        self.locks.discard(read_end)
        print(f"inhibit: a lock is released, {len(self.locks)} held", flush=True)

    async def power_off(self) -> None:
        self.preparing = True
        print(f"power-off: PrepareForShutdown(true), delay up to {self.delay:g}s", flush=True)
        await self.bus.send(
            Message.new_signal(LOGIND_PATH, MANAGER, "PrepareForShutdown", "b", [True])
        )
        await asyncio.sleep(self.delay)  # logind's own wait: the delay is its contract
        self.delay_over.set()
        print("power-off: the inhibit delay is over", flush=True)


async def serve(address: str) -> None:
    bus = await MessageBus(bus_address=address, negotiate_unix_fd=True).connect()
    logind = Logind(bus)
    bus.add_message_handler(logind.handle)
    for name in (LOGIND, SYSTEMD):
        await bus.request_name(name)
    print(f"logind: serving on {address}, InhibitDelayMaxSec={logind.delay:g}", flush=True)
    await bus.wait_for_disconnect()


if __name__ == "__main__":
    asyncio.run(serve(sys.argv[1]))
