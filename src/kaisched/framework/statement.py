"""Statements: the in-memory transactions of a session (spec 4.6).

Operations apply to the session immediately and can be undone in reverse order back to a checkpoint.
Only :meth:`Statement.commit` turns them into decisions of the cycle (binds, pipelined placements,
evictions).
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from kaisched.model.status import ACTIVE_ALLOCATED, TaskStatus
from kaisched.model.task import TaskInfo

if TYPE_CHECKING:
    from kaisched.framework.session import Session
    from kaisched.model.dra import ClaimInfo


class OpKind(enum.Enum):
    ALLOCATE = "allocate"
    PIPELINE = "pipeline"
    EVICT = "evict"
    UNEVICT = "unevict"  # a virtually evicted task put back on its own node
    MOVE = "move"  # a virtually evicted task pipelined onto another node (its old place keeps releasing)
    UNMOVE = "unmove"  # a moved task evicted again: the move is undone, the task releases its old place


@dataclass(slots=True, init=False)
class Operation:
    kind: OpKind
    task: TaskInfo
    node: int
    prev_status: TaskStatus
    prev_node: int
    # eviction metadata (evict only)
    action: str
    preemptor: str
    message: str
    ghost: TaskInfo | None  # move only: the releasing copy left on the old node
    groups: tuple[str, ...] | None  # shared devices on the new node (None: keep the task's)
    prev_groups: tuple[str, ...]
    claims: tuple[ClaimInfo, ...] | None  # move only: the DRA claims of the pod recreated elsewhere (None: keep)
    prev_claims: tuple[ClaimInfo, ...]

    # (written out: a compiled core keeps a generated __init__ interpreted, see docs/performance.md)
    def __init__(self, kind: OpKind, task: TaskInfo, node: int, prev_status: TaskStatus, prev_node: int,
                 action: str = "", preemptor: str = "", message: str = "", ghost: TaskInfo | None = None,
                 groups: tuple[str, ...] | None = None, prev_groups: tuple[str, ...] = (),
                 claims: tuple[ClaimInfo, ...] | None = None) -> None:
        self.kind = kind
        self.task = task
        self.node = node
        self.prev_status = prev_status
        self.prev_node = prev_node
        self.action = action
        self.preemptor = preemptor
        self.message = message
        self.ghost = ghost
        self.groups = groups
        self.prev_groups = prev_groups
        self.claims = claims
        self.prev_claims = ()


class Statement:
    __slots__ = ("_ops", "ssn")

    def __init__(self, ssn: Session) -> None:
        self.ssn = ssn
        self._ops: list[Operation] = []

    # ---- operations ------------------------------------------------------------------------------
    def allocate(self, task: TaskInfo, node: int, groups: tuple[str, ...] = ()) -> None:
        """Bind ``task`` to ``node`` (``groups``: its shared devices there, for fractional tasks)."""
        self._apply(Operation(OpKind.ALLOCATE, task, node, task.status, task.node, groups=groups),
                    TaskStatus.ALLOCATED)

    def pipeline(self, task: TaskInfo, node: int, groups: tuple[str, ...] = ()) -> None:
        """Place ``task`` on resources of ``node`` that are still being released."""
        if task.status is TaskStatus.RELEASING and self._evicted_here(task) is not None:
            if node == task.node and (not task.gpu_groups or groups == task.gpu_groups):
                self._unevict(task)
            else:  # another node, or other devices of the same node
                self._move(task, node, groups)
            return
        self._apply(Operation(OpKind.PIPELINE, task, node, task.status, task.node, groups=groups),
                    TaskStatus.PIPELINED)

    def _evicted_here(self, task: TaskInfo) -> Operation | None:
        """The live eviction of ``task`` in this statement, if any (a move undone by an ``UNMOVE`` leaves the
        eviction before it live)."""
        undone_moves = 0
        for op in reversed(self._ops):
            if op.task is task:
                if op.kind is OpKind.UNMOVE:
                    undone_moves += 1
                elif op.kind is OpKind.MOVE and undone_moves:
                    undone_moves -= 1
                else:
                    return op if op.kind is OpKind.EVICT else None
        return None

    def _last_op(self, task: TaskInfo) -> Operation | None:
        for op in reversed(self._ops):
            if op.task is task:
                return op
        return None

    def _unevict(self, task: TaskInfo) -> None:
        evict = self._evicted_here(task)
        assert evict is not None
        self._apply(Operation(OpKind.UNEVICT, task, task.node, task.status, task.node), evict.prev_status)

    def _move(self, task: TaskInfo, node: int, groups: tuple[str, ...]) -> None:
        ssn = self.ssn
        old = task.node
        # the pod still holds its old place until it is deleted; each move leaves its own copy (a pod
        # moved twice leaves two)
        ghost = replace(task, uid=f"{task.uid}#releasing-{next(ssn.ghost_ids)}", job=None)
        # the pod recreated elsewhere gets new claims from its templates (the ghost keeps the old ones' devices)
        claims = ssn.nodes.dra.successors(task) if task.claims and ssn.nodes.dra is not None else None
        op = Operation(OpKind.MOVE, task, node, task.status, old, ghost=ghost, groups=groups, claims=claims)
        self._apply(op, TaskStatus.PIPELINED)
        ssn.nodes.add_task(ghost, old)  # the pod still holds its old place until it is deleted

    def evict(self, task: TaskInfo, *, action: str, preemptor: str, message: str) -> None:
        """Virtually evict ``task``. A task this statement moved (evicted, then pipelined elsewhere) is not
        evicted a second time where it was pipelined: the move is undone and the task releases its old place,
        under its first eviction (one eviction per pod)."""
        if task.status is TaskStatus.PIPELINED:
            last = self._last_op(task)
            if last is not None and last.kind is OpKind.MOVE:
                self._unmove(task, last)
                return
        op = Operation(OpKind.EVICT, task, task.node, task.status, task.node, action, preemptor, message)
        self._apply(op, TaskStatus.RELEASING)

    def _unmove(self, task: TaskInfo, move: Operation) -> None:
        ssn = self.ssn
        ghost = move.ghost
        assert ghost is not None
        ssn.nodes.remove_task(ghost, move.prev_node)  # the task itself releases its old place again
        op = Operation(OpKind.UNMOVE, task, move.prev_node, task.status, task.node, ghost=ghost,
                       groups=move.prev_groups, claims=move.prev_claims)
        self._apply(op, TaskStatus.RELEASING)

    def _apply(self, op: Operation, new_status: TaskStatus) -> None:
        ssn = self.ssn
        task = op.task
        if task.node >= 0 and task.is_active_used:
            ssn.nodes.remove_task(task, task.node)
        ssn.fire_deallocate(task)
        op.prev_groups = task.gpu_groups
        if op.groups is not None:
            task.gpu_groups = op.groups
        op.prev_claims = task.claims
        if op.claims is not None:
            task.claims = op.claims
        task.status = new_status
        task.node = op.node
        if op.node >= 0:
            ssn.nodes.add_task(task, op.node)
        ssn.fire_allocate(task)
        if task.job is not None:
            task.job.version += 1
        self._ops.append(op)

    def _undo(self, op: Operation) -> None:
        ssn = self.ssn
        task = op.task
        if op.ghost is not None and op.kind is OpKind.MOVE:
            ssn.nodes.remove_task(op.ghost, op.prev_node)
        if task.node >= 0:
            ssn.nodes.remove_task(task, task.node)
        ssn.fire_deallocate(task)
        task.gpu_groups = op.prev_groups
        task.claims = op.prev_claims
        task.status = op.prev_status
        task.node = op.prev_node
        if task.node >= 0 and task.is_active_used:
            ssn.nodes.add_task(task, task.node)
        ssn.fire_allocate(task)
        if op.ghost is not None and op.kind is OpKind.UNMOVE:
            ssn.nodes.add_task(op.ghost, op.node)  # the move is live again: its releasing copy is back
        if task.job is not None:
            task.job.version += 1

    # ---- transactions -------------------------------------------------------------------------------
    def checkpoint(self) -> int:
        return len(self._ops)

    def rollback(self, checkpoint: int) -> None:
        while len(self._ops) > checkpoint:
            self._undo(self._ops.pop())

    def discard(self) -> None:
        self.rollback(0)

    @property
    def operations(self) -> tuple[Operation, ...]:
        return tuple(self._ops)

    def describe_evictions(self, message: Callable[[TaskInfo], str]) -> None:
        """Fill in the message of every eviction in the log (computed once a solution is chosen)."""
        for op in self._ops:
            if op.kind is OpKind.EVICT and not op.message:
                op.message = message(op.task)

    def convert_allocated_to_pipelined(self, job_key: str) -> None:
        """Turn every Allocate of the job into a Pipeline (a gang is never partially bound)."""
        ssn = self.ssn
        for op in self._ops:
            task = op.task
            if op.kind is OpKind.ALLOCATE and task.job is not None and task.job.key == job_key and (
                task.status is TaskStatus.ALLOCATED
            ):
                ssn.nodes.remove_task(task, task.node)
                ssn.fire_deallocate(task)
                task.status = TaskStatus.PIPELINED
                ssn.nodes.add_task(task, task.node)
                ssn.fire_allocate(task)
                if task.job is not None:
                    task.job.version += 1
                op.kind = OpKind.PIPELINE

    def commit(self) -> None:
        """Make the operations decisions of this cycle, in log order, each pod's once, by where it ends:

        * evicted (the first eviction of a pod that was active when the statement started, recorded where it
          is in the log) when it ends evicted or moved; an eviction that a later put-back cancels is none;
        * bound or pipelined when that is its last operation (a moved pod is evicted and pipelined).

        Every pod placed (bound, pipelined, moved) is marked ``placed_in_cycle``: no later decision of the
        cycle takes it as a victim (``TaskInfo.is_settled_active``)."""
        ssn = self.ssn
        ops = self._ops
        if ops:
            ssn.commits += 1
        first: dict[str, Operation] = {}
        last: dict[str, Operation] = {}
        for op in ops:
            uid = op.task.uid
            if uid not in first:
                first[uid] = op
            last[uid] = op
        for op in ops:
            task = op.task
            kind = op.kind
            final = last[task.uid]
            if kind is OpKind.EVICT:
                # (a pod an earlier decision placed, evicted again: only stale-gang eviction takes such a pod.
                # Its placement is withdrawn, as the result lists binds and pipelines by the final status; a
                # moved pod keeps its one eviction)
                if first[task.uid] is op and op.prev_status in ACTIVE_ALLOCATED and not task.placed_in_cycle \
                        and final.kind in (OpKind.EVICT, OpKind.MOVE, OpKind.UNMOVE):
                    ssn.record_eviction(task, op.action, op.preemptor, op.message)
                continue
            if op is not final:
                continue  # a placement undone later in the statement
            if kind is OpKind.ALLOCATE:
                # Allocated and Binding are accounted alike everywhere (both take idle resources on the node
                # and a member's place on its shared devices, both count for the queue): the status changes
                # in place, without taking the task off its node and putting it back (which changed nothing
                # but the node's version, so every fit remembered for the node was checked again)
                task.status = TaskStatus.BINDING
                task.placed_in_cycle = True
                if task.job is not None:
                    task.job.version += 1
                ssn.record_bind(task)
            elif kind in (OpKind.PIPELINE, OpKind.MOVE):
                task.placed_in_cycle = True
                if task.job is not None:
                    task.job.version += 1
                ssn.record_pipeline(task)
        ops.clear()
