"""The budget's client of the planner (:mod:`.plan`): when to plan, whether the step being
recorded follows a plan, and how its backward runs.

The first step of a training loop, and any step whose graph matches no plan, runs eagerly
(evicting during forward, :mod:`.evictor`). When its backward starts, the recorded step is
kept; the next step plans from it when it starts (a single step never pays for planning;
see :meth:`Planner._recurs` for a loop whose graph changes every step).
A later step whose values match a plan's signatures, one by one, follows it: the plan evicts
some values as soon as they are made and keeps the others held (forward evicts none of them
for the limit), and its backward runs as the plan assumed. Several plans are kept, one per
graph (:data:`MAX_PLANS`, the least recently followed dropped first): a loop that alternates
graphs (training and validation, two batch shapes, the short last batch of an epoch) plans
each once, and a step follows every plan it matches until they part, holding what they
disagree on meanwhile (:meth:`Planner._narrow`). A loop with more graphs than that (one
per batch, say) plans a graph only when it comes again, once it has dropped that many plans.

A followed step whose backward holds more than the budget it was planned to fit is re-planned
from the same trace with the budget lowered by the miss (:data:`MAX_REPLANS` times at most,
then the attempt that held least is kept). One that held more than its plan predicted but
kept the budget is not: a lower target only recomputes more for bytes the budget allows.
A budget under the greedy plan's floor (the lowest peak it finds) gets, when it fits the
budget or holds less than that floor, an anchored schedule (:mod:`.segments`: only anchors
kept from forward, each segment recomputed once from its anchor, what backward does not read
dropped at once: :data:`ANCHORED`); else that floor (:data:`FLOOR`) when it holds no more than
the budget plus a tenth of the unbudgeted step (:data:`FLOOR_SLACK`) and the eager step did not
both keep that and hold less, followed at once; else
a replay of the eager step (:data:`REPLAY`: forward evicts for the budget, backward
recomputes from √n anchors and drops for the budget) when the eager step held less than that
floor, else the floor. Only a plan that fits is re-planned after a miss.

Every step after the first follows the plan made from it, whatever its mode, so each does
the same work. What an eager step holds depends on the prices it measured as it went (which
value is cheapest to evict is a comparison of timings: a pause at one of its first ops can
make it hold a value more), so a replay's prices are fixed: the times the eager step gave
its values as it went when that step kept the budget and a tenth (the replay then holds what
it held), else the fastest time the step measured for each op and shapes, as every other
plan's (see :func:`_prices`). (Until 6 December
a graph under the floor ran up to three more eager steps, trials, and followed the one that
held least, but each trial recomputed another count of ops than the steps after it.)
"""

from __future__ import annotations

from typing import Any, NamedTuple

from .plan import Trace, evict_the_unneeded, plan_evictions
from .recorder import walked
from .segments import anchored_plan, engine_profile

__all__ = ["EvictionPlan", "Planner"]


class EvictionPlan(NamedTuple):
    """What the steps that follow a plan do."""

    #: the signature of every value, in recording order
    signatures: list
    #: per value: evicted as soon as it is made
    evict: list[bool]
    #: the bytes held the engine may count while following it (its count of the plan's peak,
    #: or the budget when that is higher; the budget when the plan does not fit)
    limit: int
    #: how its steps run: :data:`FITS`, :data:`ANCHORED`, :data:`FLOOR` or :data:`REPLAY`
    mode: str
    #: the trace planned from, and the budget it was planned for (for a re-plan)
    trace: Trace
    target: int
    #: the engine's count of the planned peak (a :data:`REPLAY`'s: what the eager step held)
    counted: int
    #: the graph's followed attempts that missed, ``(measured peak, plan)``, shared by its
    #: re-plans; each plan in it is kept without this list (``attempts=None``): a plan in its
    #: own list would be a reference cycle, its trace freed only by the garbage collector
    #: once the plan is dropped
    attempts: list
    #: the recorded values planned from (:class:`~.recorder.RecordedValue`), which a step that
    #: follows the plan notes as its own
    values: list | None = None
    #: the seconds its steps give each value, by position: ``None``, the trace's (the fastest
    #: time measured for each op and shapes); a :data:`REPLAY` that copies its eager step,
    #: the times that step gave them as it went (see :func:`_prices`)
    prices: list | None = None
    #: a :data:`REPLAY`: whether ``counted`` is what its first step held (see
    #: :meth:`Planner.backward_ended`)
    measured: bool = False


#: the planned peak fits the budget: forward evicts what the plan says at once and keeps
#: the rest held; backward recomputes each evicted value once, as the plan assumed
FITS = "fits"
#: under the budget's reach, the plan's own floor (the lowest peak of a plan that recomputes
#: each value once) is below what the eager step held: followed as :data:`FITS` is
FLOOR = "floor"
#: under the budget's reach, the eager step held less than the plan's floor: the steps replay
#: it (forward evicts for the budget, backward recomputes from √n anchors and drops what it
#: holds for the budget), at the plan's fixed prices, so every step does the same
REPLAY = "replay"
#: under the greedy's floor: forward keeps only anchors (values that cut the step in two, such
#: as the residual stream), backward recomputes each segment once from its anchor and keeps
#: only what its rules read (:mod:`.segments`); followed as :data:`FLOOR` is (the engine's limit
#: the schedule's own count, should it hold more)
ANCHORED = "anchored"

#: an anchored schedule recomputes each evicted value once, a replay of the eager step several
#: times over (1.6-2.5 times NoCheckpointing's step on the transformers of
#: ``benchmarks/bench_budget_loops.py``): a replay is preferred only when it holds less by more
#: than this factor
REPLAY_SLACK = 1.1

#: a floor (:data:`FLOOR`) within this fraction of what the step holds without a budget
#: (:func:`near_the_budget`) above the budget is followed before a replay of an eager step that
#: held less: a replay recomputes chains several times over (1.6-2.5 times the step's time), a
#: worse trade than the floor's few bytes more
FLOOR_SLACK = 0.1

#: plans kept at once (one per graph of the loop)
MAX_PLANS = 8
#: graphs of eager steps remembered, unplanned, for a plan when they come again: a graph
#: that comes back later than that would have had its plan dropped before it came
SEEN_GRAPHS = MAX_PLANS
#: plans made in a row that no step has followed since: past them, a graph is planned only
#: when it comes again. Two lets a loop of two graphs in alternation plan both at once; an
#: episode loop whose graph starts alike each time and is as long as its episode (a policy
#: gradient's) would otherwise plan every episode and follow none
MAX_UNFOLLOWED = 2
#: re-plans of one graph after its followed steps missed the prediction
MAX_REPLANS = 3


class Planner:
    """Plans the steps under ``max_bytes`` and follows them (see the module docstring).

    ``limit`` is the byte limit forward evicts above now: the budget, or a followed plan's
    count. ``plans`` and ``planned_steps`` count plans made and steps that followed one.
    """

    def __init__(self, max_bytes: int):
        self.max_bytes = max_bytes
        #: the plans, the most recently followed first
        self.kept: list[EvictionPlan] = []
        #: the plan the step being recorded follows
        self.plan: EvictionPlan | None = None
        #: the kept plans the step being recorded has matched so far, ``plan`` first (see
        #: :meth:`_narrow`), and the positions of its values they disagree on, held meanwhile
        self._candidates: list[EvictionPlan] = []
        self._disputed: list[int] = []
        #: whether the value noted last is disputed (held until the candidates agree)
        self.disputed_now = False
        #: positions of disputed values that every plan still matched evicts: the strategy
        #: evicts them now and empties the list
        self.settled: list[int] = []
        #: the step being recorded has matched ``plan`` so far
        self.following = False
        #: what the next step plans from: signatures and trace (see backward_begins)
        self._pending: tuple[list, Trace] | None = None
        self.limit = max_bytes
        #: the plan whose backward runs now, checked when it ends
        self._checking: EvictionPlan | None = None
        #: the peak of the last step that followed no plan (the one the next plan comes from)
        self._eager_peak: int | None = None
        #: the graphs of recent eager steps that were not planned (hashes of their
        #: signatures, oldest first): planned when seen again
        self._seen: dict[int, None] = {}
        self.plans = 0
        self.planned_steps = 0
        #: plans dropped from the kept ones, the least recently followed, for a new one
        self.dropped = 0
        #: plans made since a step last followed one (see :data:`MAX_UNFOLLOWED`)
        self.unfollowed = 0
        #: the prices of the plan the step being recorded followed last, by position: what
        #: its values recorded while following (not timed) cost, should it be planned from
        self._prices: list | None = None
        #: the step whose graph the last backward retained (``retain_graph=True``), while no
        #: new step records: ``(recorded step, its walks so far as walked() keeps them, where
        #: each later walk starts, the plan it followed or None, its prices)``
        self._retained: tuple | None = None
        #: the step being recorded began while one abandoned before its backward still held
        #: its values (:meth:`starts_again`): what it holds is no check of its plan
        self.after_abandoned = False
        #: which walk of the retained graph the backward running now is (0: the first)
        self.walk = 0

    def on_value(
        self, noted: tuple[int, tuple] | None, recompute: bool
    ) -> tuple[bool | None, float]:
        """A value was recorded (``noted``: its position and signature, ``None`` past the
        trace's end): what the step's plan says of it, and the seconds the plan gives its op
        (``-1.0`` when no plan is followed: the measured time stands).

        What the plan says is a :class:`~.pool.Slot`'s ``planned``: evicted at once
        (``True``: a recomputable value the plan evicts), kept held (``False``), or ``None``:
        no plan followed, or a :data:`REPLAY`, whose forward evicts for the budget (at the
        plan's fixed prices, so every step alike)."""
        if noted is None:
            self._stop_following()
            return None, -1.0
        position, signature = noted
        if position == 0:  # a step starts: plan it if a trace waits, and find its plan
            self._retained, self.walk = None, 0
            if self._pending is not None:
                values, trace = self._pending
                self._pending = None
                signatures = [value.signature for value in values]
                if self._recurs(signatures, signature):
                    self._adopt(self._plan_for(signatures, trace, values))
                    self.unfollowed += 1
            self._candidates = [p for p in self.kept if p.signatures[0] == signature]
            self.plan = self._candidates[0] if self._candidates else None
            self._disputed = []
            self.following = self.plan is not None
            self.limit = self.plan.limit if self.plan is not None else self.max_bytes
            self._prices = None if self.plan is None else _prices(self.plan)
        self.disputed_now = False
        if not self.following:
            return None, -1.0
        plan = self.plan
        candidates = self._candidates
        if (
            len(candidates) > 1
            or position >= len(plan.signatures)
            or plan.signatures[position] != signature
        ):
            plan = self._narrow(position, signature)
            if plan is None:  # another graph: eager from here on, and planned afresh
                self._stop_following()
                return None, -1.0
            candidates = self._candidates
        if plan.mode == REPLAY:  # the eager step again, at the plan's fixed prices
            return None, self._prices[position]
        if len(candidates) == 1 or not recompute:
            return plan.evict[position] and recompute, self._prices[position]
        if any(p.mode == REPLAY for p in candidates):  # evicted for the budget, as a replay's
            return None, self._prices[position]
        votes = [p.evict[position] for p in candidates]
        if all(votes):
            return True, self._prices[position]
        if any(votes):  # held until the plans still matched agree (see _narrow)
            self._disputed.append(position)
            self.disputed_now = True
        return False, self._prices[position]

    def _narrow(self, position: int, signature: tuple) -> EvictionPlan | None:
        """The plan the step follows once its value at ``position`` (of ``signature``) is
        recorded: the first of the kept plans matched so far that match it too, ``None`` when
        none does.

        Plans of graphs that start alike (a sequence length drawn per batch, the short last
        batch of an epoch) share their first values but not their evictions, and which graph
        a step records is known only where they part. So a step follows all the plans it
        matches: a value they all evict is evicted at once, one they disagree on is held
        (*disputed*) until they agree, as the plans still matched drop to those of the step's
        own graph; then :attr:`settled` lists the disputed values they evict, which the
        strategy evicts, and the step holds what its own plan holds. (Following the first
        plan alone, a step of another length evicted by that plan's choices, parted from it
        and ran eagerly, and every step planned its graph afresh: one step in four followed
        a plan, each over the budget.)"""
        candidates = [
            p
            for p in self._candidates
            if len(p.signatures) > position and p.signatures[position] == signature
        ]
        if not candidates:
            return None
        if len(candidates) < len(self._candidates):
            self._candidates = candidates
            self._settle(candidates)
            if self.plan is not candidates[0]:
                self.plan = candidates[0]
                self.limit = self.plan.limit
                self._prices = _prices(self.plan)
        return self.plan

    def _settle(self, candidates: list[EvictionPlan]) -> None:
        """Disputed values ``candidates`` now agree on: evicted (:attr:`settled`) when all
        evict them, held on when none does."""
        disputed = []
        for position in self._disputed:
            votes = [p.evict[position] for p in candidates]
            if all(votes):
                self.settled.append(position)
            elif any(votes):
                disputed.append(position)
        self._disputed = disputed

    def _recurs(self, signatures: list, starting: tuple) -> bool:
        """Whether the graph of ``signatures``, recorded by the step before, is worth a plan:
        that graph was seen before (among the last :data:`SEEN_GRAPHS`); or fewer than
        :data:`MAX_UNFOLLOWED` plans wait unfollowed and either the step now starting begins
        as it did (``starting``, its first value's signature) or plans have not been wasted
        yet (fewer than :data:`MAX_PLANS` dropped unfollowed from the kept ones: a loop of a
        few graphs in alternation never drops one). A loop whose graph changes every step (a
        sequence length drawn per batch, an episode's length) would otherwise pay for a plan
        at every step and follow almost none.

        >>> planner = Planner(1 << 20)
        >>> episode = lambda length: [("obs",)] + [("step",)] * length
        >>> [planner._recurs(episode(n), ("obs",)) for n in (30, 31)]  # nothing waits
        [True, True]
        >>> planner.unfollowed = MAX_UNFOLLOWED  # two plans made, none followed
        >>> [planner._recurs(episode(n), ("obs",)) for n in (32, 33, 32)]  # 32 came again
        [False, False, True]
        """
        graph = hash(tuple(signatures))
        seen = self._seen
        if graph in seen:
            return True
        if self.unfollowed < MAX_UNFOLLOWED and (
            signatures[0] == starting or self.dropped < MAX_PLANS
        ):
            return True
        seen[graph] = None
        if len(seen) > SEEN_GRAPHS:
            del seen[next(iter(seen))]
        return False

    def _plan_for(self, signatures: list, trace: Trace, values: list) -> EvictionPlan:
        """The plan of the graph the last eager step recorded, followed from the next step on,
        whatever its mode: every step after the eager one does the same work.

        Until 6 December a graph under the floor whose plan held more than
        :data:`REPLAY_SLACK` times the budget ran up to three more eager steps first
        (*trials*, in search of an eager step that held less), each recomputing another count
        of ops: issue 24's reproduction at 0.25x recomputed ``[93, 90, 78, 78, ...]``."""
        return self._make_plan(signatures, trace, values=values)

    def starts_again(self, position: int, signature: tuple) -> bool:
        """Whether the value recorded at ``position`` (of ``signature``) starts a new step
        rather than continuing this one: the step followed plans up to it, it matches none of
        them there, it reads nothing the step recorded, and it is the first value of a kept
        plan. The step before was then abandoned before its backward (a Ctrl-C while forward
        ran or before ``backward()``, a forward kept without one) and the next began.

        Recorded as one step, the two forwards made a graph of their own: the steps after an
        interrupted forward left their plan for two steps and kept a plan for a graph no
        step would run again.

        >>> planner = Planner(1 << 20)
        >>> step = [("matmul", 64, (-1, -1)), ("tanh", 64, (0,)), ("sum", 4, (1,))]
        >>> trace = Trace([64, 64, 4], [0.0] * 3, [(), (0,), (1,)], [True] * 3, [[]] * 3,
        ...               [0, 1, 2])
        >>> planner.kept = [EvictionPlan(step, [False] * 3, 1 << 20, FITS, trace, 0, 0, [])]
        >>> planner.on_value((0, step[0]), True)[0]  # a step starts, and follows the plan
        False
        >>> planner.starts_again(1, step[0])  # at 1 the plan has tanh: a new step's matmul
        True
        >>> planner.starts_again(1, step[1]), planner.starts_again(1, ("matmul", 64, (0, -1)))
        (False, False)
        """
        parents = signature[2]  # (asked of every value a followed step records: C-level tests)
        if not self.following or position == 0 or parents.count(-1) != len(parents):
            return False
        for plan in self._candidates:
            signatures = plan.signatures
            if position < len(signatures) and signatures[position] == signature:
                return False
        return any(plan.signatures[0] == signature for plan in self.kept)

    def _stop_following(self) -> None:
        self.following = False
        self.limit = self.max_bytes
        self._candidates = []
        self._disputed = []

    def _adopt(self, plan: EvictionPlan) -> None:
        """Keep ``plan`` first, in place of a plan of the same graph."""
        kept = [plan, *[p for p in self.kept if p.signatures != plan.signatures]]
        self.dropped += max(0, len(kept) - MAX_PLANS)
        self.kept = kept[:MAX_PLANS]

    def backward_begins(
        self, recorded: Any, steps: list, fastest: Any = None, retained: bool = False
    ) -> tuple[int, str] | None:
        """The step just recorded (a :class:`~.recorder.RecordedStep`) ends: plan the next
        ones from it (its ops priced by ``fastest``, see :meth:`.RecordedStep.observe`),
        unless it followed a plan. The byte limit its backward keeps to and the
        plan's mode, when it followed one, else ``None`` (backward as after an eager step).

        ``retained``: the backward keeps the graph (``retain_graph=True``). A backward that
        follows one with nothing recorded between them and walks the same graph is a later
        walk of its step (:meth:`_walk_again`), not a step of its own."""
        if not recorded.values and self._retained is not None:
            positions = self._retained[0].positions
            if any(node.id in positions for node in steps):
                return self._walk_again(steps, fastest, retained)
        self._retained, self.walk = None, 0
        length = len(recorded.values)
        plan = None
        if self.following:  # the plan of the step's own graph, among those it matched
            plan = next((p for p in self._candidates if len(p.signatures) == length), None)
            if plan is not None:
                self._settle([plan])
        followed = plan is not None
        checks, self.after_abandoned = not self.after_abandoned, False
        self._stop_following()
        self._checking = None
        if retained and recorded.plannable():
            self._retained = (recorded, walked(steps), (), plan, self._prices)
        if not followed:
            if recorded.plannable():
                self._pending = recorded.observe(steps, fastest, self._prices)
            return None
        self.planned_steps += 1
        self.unfollowed = 0
        # The most recently followed first, unless a re-plan of its graph replaced it while
        # it ran (a backward inside the step, as a Jacobian's rows with create_graph, ended).
        position = next((i for i, kept in enumerate(self.kept) if kept is plan), None)
        if position is not None:
            self.kept.insert(0, self.kept.pop(position))
        self._checking = plan if checks else None
        return plan.limit, plan.mode

    def _walk_again(self, steps: list, fastest: Any, retained: bool) -> tuple[int, str] | None:
        """A later walk of the retained graph of the step recorded last (its second
        ``backward`` through the graph, a second head's loss): it runs as its step's plan
        says, when that plan knew this walk (its trace holds the step's walks, as
        :meth:`.RecordedStep.observe` models them); else the step is planned again with this
        walk (the next step plans from every walk) and this one runs as after an eager step.
        (Without this, a second walk recorded nothing, had no plan and ran eagerly, every
        step, over the budget.)"""
        recorded, earlier, starts, plan, prices = self._retained
        self.walk += 1
        starts = (*starts, len(earlier))
        every = earlier + walked(steps)
        self._retained = (recorded, every, starts, plan, prices) if retained else None
        self._checking = None
        if plan is not None and len(plan.trace.walks) >= self.walk:
            self._checking = plan
            return plan.limit, plan.mode
        self._pending = recorded.observe(every, fastest, prices, starts)
        return None

    def backward_failed(self) -> None:
        """A backward stopped before its end (a rule, hook or Function raised): its step is
        no step to plan from (its trace waits for a peak that will not come) nor a check of
        the plan it followed. The next step runs as if this one had not been; a loop that
        skips a failed batch then plans as it would have."""
        self._pending = None
        self._checking = None
        self.after_abandoned = False
        self._retained, self.walk = None, 0

    def backward_ended(self, peak_bytes: int) -> None:
        """A backward ended, having held ``peak_bytes`` at most (the engine's count). A
        followed plan that fits but held more than the budget (a gradient penalty's steps
        held 1.05 times it) is re-planned from its trace with the budget lowered by the
        miss. One that held more than it predicted within the budget stays as it is: a
        late head that reads a value the first head's plan evicts holds that value's
        recomputation, which its plan (made when the first head ran eagerly) does not
        count; lowering its target only evicted more of its own values and, below its
        floor, changed its mode a step later (round 67's seeds 1522 and 1804 on NumPy, 118
        on torch: the same peak and ops in every step, the mode ``fits`` then ``floor``). After
        :data:`MAX_REPLANS`, the attempt that held least stays. A replay predicts from then
        on what its first step held: every step after it does the same. At the fastest
        prices (of an eager step that missed the budget, :func:`_prices`) it is a schedule
        no step had run; at the eager step's own prices it makes that step's choices, but
        what it holds also counts the values of other graphs its step meets, which their
        own plans now hold where the eager step met their eager steps (a critic step's
        gradient penalty, whose ``autograd.grad`` graph follows a plan of its own from the
        second step: 7-11% more than the eager step, 6 December; until then the plan
        predicted the eager step's peak, and a test bound of a tenth failed under load)."""
        plan, self._checking = self._checking, None
        if plan is None:
            if self.walk and self._eager_peak is not None:  # a later walk of an eager step
                self._eager_peak = max(self._eager_peak, peak_bytes)
            else:
                self._eager_peak = peak_bytes
            return
        if plan.mode == REPLAY and not plan.measured:
            if not plan.trace.walks:
                # its steps do what this one did, which the eager step's peak (its prediction
                # until now) only guessed at
                self._adopt(plan._replace(counted=peak_bytes, measured=True))
            return
        if plan.mode != FITS or peak_bytes <= self.max_bytes:
            return
        attempts = plan.attempts
        if len(attempts) > MAX_REPLANS:  # settled: the attempt that held least stays
            return
        attempts.append((peak_bytes, plan._replace(attempts=None)))
        if len(attempts) <= MAX_REPLANS:
            target = plan.target - (peak_bytes - plan.counted)
            if target > 0:
                self._adopt(
                    self._make_plan(plan.signatures, plan.trace, target, attempts, plan.values)
                )
                return
        held_least = min(attempts, key=lambda attempt: attempt[0])[1]
        self._adopt(held_least._replace(attempts=attempts))

    def _make_plan(
        self,
        signatures: list,
        trace: Trace,
        target: int | None = None,
        attempts: list | None = None,
        values: list | None = None,
    ) -> EvictionPlan:
        """The plan for ``target`` bytes (the budget unless a re-plan lowers it): the
        signatures to match, which values to evict, the byte limit.

        The engine counts a view apart from what it views and no gradients: its limit is its
        own count of the planned peak, never less than the budget, so that forward never
        evicts for the limit what the plan keeps."""
        target = self.max_bytes if target is None else target
        evict, _profile, counted = plan_evictions(trace, target)
        if not trace.walks:  # (the engine's count knows a single walk)
            counted = engine_count(trace, evict)
        self.plans += 1
        if counted <= target:
            mode = FITS
        else:
            mode, evict, counted = self._under_the_floor(trace, target, evict, counted)
        prices = None
        if mode != REPLAY:  # (a replay's forward evicts for the budget, not by the plan)
            evict = evict_the_unneeded(trace, evict)
        elif values is not None and near_the_budget(trace, target, counted):
            # the eager step kept the budget (and a tenth): copied exactly, at the prices
            # it gave its values as it went, its steps hold what it held (see _prices)
            prices = [value.seconds for value in values]
            if None in prices:
                prices = None
        limit = self.max_bytes if mode == REPLAY else max(self.max_bytes, counted)
        attempts = [] if attempts is None else attempts
        return EvictionPlan(
            signatures, evict, limit, mode, trace, target, counted, attempts, values, prices
        )

    def _under_the_floor(
        self, trace: Trace, target: int, evict: list[bool], counted: int
    ) -> tuple[str, list[bool], int]:
        """The mode, evictions and count of a plan whose greedy floor (``evict``, ``counted``)
        is above ``target``: the anchored schedule when it fits, or holds less than the floor
        (both as the engine counts, :func:`~.segments.engine_profile`) and no more than
        :data:`REPLAY_SLACK` times what the eager step held; else the floor or a replay of the
        eager step, whichever held less, but the floor when it is near the budget
        (:func:`near_the_budget`) and the eager step was not (a replay of an eager step that
        missed it runs at the fastest prices, a schedule no step has run; one that kept it is
        copied and holds what it held: issue 24's reproduction at 0.25x asks that a planned
        step hold no more than the eager one). Whichever it is, every step after the eager
        one follows it."""
        eager = self._eager_peak
        near = near_the_budget(trace, target, counted)
        slack = 0 if trace.walks else FLOOR_SLACK * engine_profile(trace, [False] * len(evict))[0]
        if trace.walks:  # (the anchored schedule's engine count knows a single walk)
            if eager is not None and eager < counted:
                return REPLAY, evict, eager
            return FLOOR, evict, counted
        anchored = anchored_plan(trace, target)
        if anchored.peak <= target or (
            anchored.peak < engine_profile(trace, evict)[0]
            and (eager is None or anchored.peak <= REPLAY_SLACK * eager)
        ):
            return ANCHORED, anchored.evicted, anchored.peak
        if eager is not None and eager < counted and (not near or eager <= target + slack):
            return REPLAY, evict, eager  # about what the eager step held (see _prices)
        return FLOOR, evict, counted


def engine_count(trace: Trace, evict: list[bool]) -> int:
    """The most bytes the engine holds following the greedy's evictions ``evict``, which is
    what decides whether they fit and what the plan predicts.

    The greedy's own model holds everything a backward step recomputes at once, for the whole
    step (a bound it searches with, compiled); the engine reruns them in recording order and
    lets each by-product go after its last reader (:func:`~.segments.engine_profile`). The
    masked transformer of ``benchmarks/bench_budget_loops.py --quick`` at 0.35x of its peak
    has a greedy plan the greedy counts at 0.369x and the engine runs in 0.331x: taken for
    one under the floor, it gave way to the anchored schedule, which holds as much and
    recomputes 55 ops a step to its 46."""
    return engine_profile(trace, evict)[0]


def near_the_budget(trace: Trace, target: int, counted: int) -> bool:
    """Whether a floor that holds ``counted`` bytes (the engine's count) under the budget
    ``target`` is within :data:`FLOOR_SLACK` of what the step of ``trace`` holds with nothing
    evicted (NoCheckpointing's ``Gradients.peak_bytes``) above it. A trace of several walks of
    a retained graph is never: the engine's count of it knows a single walk."""
    if trace.walks:
        return False
    unbudgeted = engine_profile(trace, [False] * len(trace.sizes))[0]
    return counted <= target + FLOOR_SLACK * unbudgeted


def _prices(plan: EvictionPlan) -> list:
    """The seconds ``plan`` gives each value by position: the fastest time measured for its op
    and shapes; a :data:`REPLAY` of an eager step that kept the budget (and a tenth of the
    unbudgeted step, :func:`near_the_budget`), the times that step gave its values as it went.

    What an eager step holds follows from the prices it evicts and drops by. At the same
    prices a replay makes the same choices and holds what the step held, which the plan then
    predicts exactly; at any others it is another schedule, whose peak no step has measured:
    at the fastest prices the residual MLP of ``benchmarks/bench_budget_noise.py`` (op times
    jittered, σ 2) held 6 values a step after an eager step that held 4 in 2 seeds of 30.
    A step that missed the budget is replayed at the fastest prices: what misled it (a pause
    at one of its first ops, priced at the fastest so far) is not copied (the MLP's eager
    step that held 6 is replayed with 4)."""
    return plan.prices if plan.prices is not None else plan.trace.costs
