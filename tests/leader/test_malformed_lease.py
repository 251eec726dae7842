"""A Lease whose spec is no object is garbage to overwrite, not a reason to crash."""

import anyio
from zombied.leader import LeaseElector

from tests.leader.memory import LeaseServer, MemoryKube


async def test_a_lease_whose_spec_is_no_object_is_taken_over() -> None:
    server = LeaseServer()
    server.write({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "spec": "garbled"})
    elector = LeaseElector(
        MemoryKube(server),
        name=server.name,
        namespace=server.namespace,
        identity="one",
        lease_duration=1.5,
        renew_deadline=1.0,
        retry_period=0.2,
    )
    async with anyio.create_task_group() as tg:
        await tg.start(elector.run)
        with anyio.fail_after(5):
            await elector.leadership.wait()
        assert server.spec()["holderIdentity"] == "one"
        tg.cancel_scope.cancel()
    assert server.spec()["holderIdentity"] == ""
