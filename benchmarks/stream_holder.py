"""Hold many real server streams open on a controller, from a process of their own.

`python -m benchmarks.stream_holder ADDRESS` reads one JSON plan from stdin:

    {"channels": 8, "deadline": 120,
     "streams": [{"kind": "watch", "token": "...", "count": 50, "fields": {"include_existing": true}}, ...]}

(kinds: watch, agents, jobs, transfer), opens every stream on asyncio (no thread per stream),
waits until each is admitted (its `tsdn-stream: open` response header) or refused, and prints
one JSON line: {"open": N, "refused": {reason: count}, "seconds": how long opening took}. It
then reads every message the streams carry until stdin gives a line (or closes), cancels them
all and prints {"messages": M, "ended_early": {reason: count}}.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections import Counter
from typing import Any

import grpc

from northbound.proto.tsdn.v1 import (
    agent_pb2,
    agent_pb2_grpc,
    bandwidth_pb2,
    bandwidth_pb2_grpc,
    transfer_pb2,
    transfer_pb2_grpc,
)
from northbound.streams import OPEN_HEADER

BATCH = 100  # streams opened at once


def _start(channel: grpc.aio.Channel, kind: str, token: str, fields: dict[str, Any]) -> Any:
    metadata = (("authorization", f"Bearer {token}"),)
    if kind == "watch":
        return bandwidth_pb2_grpc.BandwidthServiceStub(channel).WatchReservations(
            bandwidth_pb2.WatchReservationsRequest(**fields), metadata=metadata)
    if kind == "agents":
        return agent_pb2_grpc.AgentServiceStub(channel).WatchAgents(agent_pb2.WatchAgentsRequest(**fields),
                                                                    metadata=metadata)
    if kind == "jobs":
        return agent_pb2_grpc.AgentServiceStub(channel).TakeJobs(agent_pb2.TakeJobsRequest(**fields),
                                                                 metadata=metadata)
    if kind == "transfer":
        return transfer_pb2_grpc.TransferServiceStub(channel).WatchTransfer(
            transfer_pb2.WatchTransferRequest(**fields), metadata=metadata)
    raise ValueError(f"unknown stream kind {kind!r}")


async def _admitted(call: Any) -> str | None:
    """None once the stream is open; else why it was refused."""
    metadata = await call.initial_metadata()
    if metadata.get(OPEN_HEADER[0]) == OPEN_HEADER[1]:
        return None
    return f"{(await call.code()).name}: {await call.details()}"


async def hold(address: str, plan: dict[str, Any]) -> None:
    """Open the plan's streams, report, read them until told to stop, report again."""
    loop = asyncio.get_running_loop()
    channels = [grpc.aio.insecure_channel(address, options=[("grpc.use_local_subchannel_pool", 1)])
                for _ in range(max(1, plan.get("channels", 8)))]
    wanted = [(spec["kind"], spec["token"], spec.get("fields", {})) for spec in plan["streams"]
              for _ in range(spec["count"])]
    calls: list[Any] = []
    outcomes: list[str | None] = []
    began = time.perf_counter()
    for first in range(0, len(wanted), BATCH):  # many clients, each opening its streams
        batch = [_start(channels[(first + i) % len(channels)], *stream)
                 for i, stream in enumerate(wanted[first:first + BATCH])]
        calls += batch
        outcomes += await asyncio.wait_for(asyncio.gather(*(_admitted(call) for call in batch)),
                                           plan.get("deadline", 120))
    refused = Counter(reason for reason in outcomes if reason is not None)
    print(json.dumps({"open": outcomes.count(None), "refused": dict(refused),
                      "seconds": round(time.perf_counter() - began, 3)}), flush=True)
    messages = 0
    ended: Counter[str] = Counter()

    async def read(call: Any) -> None:
        nonlocal messages
        try:
            async for _ in call:
                messages += 1
            ended["OK"] += 1
        except asyncio.CancelledError:
            raise
        except grpc.aio.AioRpcError as error:
            if error.code() is not grpc.StatusCode.CANCELLED:
                ended[f"{error.code().name}: {error.details()}"] += 1

    readers = [asyncio.create_task(read(call)) for call, outcome in zip(calls, outcomes, strict=True)
               if outcome is None]
    await loop.run_in_executor(None, sys.stdin.readline)
    for call in calls:
        call.cancel()
    await asyncio.gather(*readers, return_exceptions=True)
    for channel in channels:
        await channel.close()
    print(json.dumps({"messages": messages, "ended_early": dict(ended)}), flush=True)


def main() -> int:
    """Run as `python -m benchmarks.stream_holder ADDRESS`, the plan on stdin."""
    plan = json.loads(sys.stdin.readline())
    asyncio.run(hold(sys.argv[1], plan))
    return 0


if __name__ == "__main__":
    sys.exit(main())
