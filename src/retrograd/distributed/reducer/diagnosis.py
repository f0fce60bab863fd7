"""What a timeout says: who a stalled gradient sync or ``all_reduce`` was waiting for, and
what is known of them.

Called by the sync server, under its lock, once a device has given up waiting; they only
read the round's state and ask the transport (``missing``, ``behind``, ``member_name``,
``member_status``).
"""

from __future__ import annotations

from collections.abc import Sequence

from ..pending import Pending
from ..transport.base import Transport
from .fast_path import HEADER
from .rounds import DeviceStep

__all__ = ["describe_op_stall", "describe_raised", "describe_stall"]


def describe_raised(step: DeviceStep) -> str:
    """Why the round of ``step`` failed at once: its backward raised (a user's hook or
    Function) before every gradient it registered was submitted."""
    sync = step.sync
    head = (
        f"the backward of {step.device} raised at backward step {sync.round.number} before "
        "its gradients were synced"
    )
    absent = [
        slot.label for slot in step.slots if slot.index not in sync.submitted and not slot.sent
    ]
    if not absent:
        return head
    return f"{head}: {step.device} has not submitted the gradient of {quote(absent)}"


def describe_stall(step: DeviceStep, transport: Transport, timeout: float) -> str:
    """Why ``step``'s gradient sync has not completed within ``timeout``."""
    sync = step.sync
    current = sync.round
    head = (
        f"gradient sync of backward step {current.number} on {step.device} timed out after "
        f"{timeout:g} s"
    )
    if current.plan is None:
        missing = transport.missing(sync.agreement) or []
        return f"{head}: " + "; ".join(
            with_status(
                transport,
                index,
                f"{transport.member_name(index)} never registered its distributed parameters "
                "for this step",
                "it has not called backward (out of batches? DistributedDataParallel.join() "
                "lets ranks with fewer batches finish), or its thread died",
            )
            for index in missing
        )
    if sync.agreement is None:
        # Reduced by a plan agreed earlier, without an exchange: the peers' heartbeats say
        # which of them never began this step.
        behind = transport.behind(current.number)
        if behind:
            return f"{head}: " + "; ".join(
                with_status(
                    transport,
                    index,
                    f"{transport.member_name(index)} never registered its distributed "
                    "parameters for this step",
                )
                for index in behind
            )
    stalled = [b for b, p in sorted(sync.bucket_pendings.items()) if not p.done()]
    if not stalled:
        return f"{head}: its own gradients were never all submitted"
    # a gradient bucket says more than the header (which names no parameter)
    bucket = next((b for b in stalled if b != HEADER), HEADER)
    pending = sync.bucket_pendings[bucket]
    if bucket == HEADER:
        what = "the all-reduce of the step's header (which checks the ranks' steps) never completed"
    else:
        labels = [current.labels.get(v, str(v)) for v in current.plan[bucket].values]
        what = (
            f"the all-reduce of {quote(labels)} "
            f"(bucket {bucket + 1} of {len(current.plan)}) never completed"
        )
    missing = transport.missing(pending)
    if missing is None:  # the transport cannot tell who: say what it knows of each peer
        known = [transport.member_status(i) for i in range(len(transport.members))]
        return f"{head}: {what}; " + "; ".join(text for text in known if text)
    parts = []
    for index in missing:
        device = transport.members[index]
        other = current.steps.get(device)
        name = transport.member_name(index)
        if other is None:
            parts.append(f"{name} never registered for this step")
            continue
        absent = [
            slot.label
            for slot in (other.slots[i] for i in other.sync.bucket_slots[bucket])
            if slot.index not in other.sync.submitted and not slot.sent
        ]
        if absent:
            parts.append(
                f"{name} has not submitted the gradient of {quote(absent)} (its backward "
                "has not produced it)"
            )
        else:
            parts.append(f"{name} has not joined it")
    return f"{head}: {what}: {'; '.join(parts)}"


def describe_op_stall(inner: Pending, transport: Transport, what: str, timeout: float) -> str:
    """Why the user collective ``inner`` (described by ``what``) has not completed."""
    missing = transport.missing(inner)
    head = f"{what} timed out after {timeout:g} s"
    if missing is None:
        known = [transport.member_status(i) for i in range(len(transport.members))]
        return f"{head}; " + "; ".join(text for text in known if text)
    return f"{head}: " + "; ".join(
        with_status(transport, i, f"{transport.member_name(i)} never joined it") for i in missing
    )


def with_status(transport: Transport, index: int, text: str, otherwise: str = "") -> str:
    """``text``, then what the transport knows of the member (or ``otherwise``)."""
    status = transport.member_status(index)
    if status:
        return f"{text}: {status}"
    return f"{text} ({otherwise})" if otherwise else text


def quote(labels: Sequence[str]) -> str:
    """Parameters as messages name them, at most six.

    >>> quote(["a"]), quote([str(i) for i in range(8)])
    ("parameter 'a'", "parameters '0', '1', '2', '3', '4', '5' and 2 more")
    """
    shown = ", ".join(repr(label) for label in labels[:6])
    more = f" and {len(labels) - 6} more" if len(labels) > 6 else ""
    return f"parameter{'s' if len(labels) > 1 else ''} {shown}{more}"
