"""The scenario file format (YAML): schema, loading, and errors that name file and field.

A scenario names a topology and an emulation scale, the DTNs that run an agent, a timeline
of actions (`at` seconds from the start: transfer, reserve, fail_link, restore_link,
congest_link, clear_link, release) and the expectations the run must meet. `load_scenario`
returns a fully checked `LoadedScenario` (the scenario with its topology) or raises
`ScenarioError` listing every problem as `FILE: field.path: what is wrong`; nothing is
started from a bad file. See docs/scenarios.md for every field.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, PrivateAttr, ValidationError, model_validator
from pydantic_core import PydanticCustomError

from sdn_app.core.errors import InvalidArgument, TopologyError
from sdn_app.core.reports import ENGINES
from sdn_app.core.topology import Topology
from sdn_app.core.topology_schema import NAME_PATTERN, describe_validation_error, read_text_file, read_yaml
from sdn_app.core.units import format_bandwidth, parse_bandwidth, parse_size

SCENARIO_DIR = Path(__file__).resolve().parents[2] / "scenarios"
DEFAULT_SCENARIO = "sc16-terabit"
MIN_TCLINK_MBPS = 0.001  # what topologies.mininet_builder can shape (kept here: no mininet import)
MAX_TCLINK_MBPS = 1000.0
TAIL = 5.0  # seconds the run goes on after the last action when the file gives no duration
MAX_SCENARIO_BYTES = 1024 * 1024  # the shipped ones are under 10 kB


class ScenarioError(InvalidArgument):
    """A scenario file is invalid; `problems` lists every `file: field.path: what` found."""

    def __init__(self, problems: list[str]):
        self.problems = problems
        shown = "\n".join(f"  {p}" for p in problems)
        super().__init__(f"invalid scenario ({len(problems)} problem(s)):\n{shown}")


def _bandwidth(value: Any) -> int:
    try:
        return parse_bandwidth(value, "value")
    except InvalidArgument as exc:
        raise PydanticCustomError("bandwidth", str(exc).removeprefix("value: ")) from None


def _size(value: Any) -> int:
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    try:
        return parse_size(str(value), "value")
    except InvalidArgument as exc:
        raise PydanticCustomError("size", str(exc).removeprefix("value: ")) from None


Name = Annotated[str, Field(pattern=NAME_PATTERN)]
Bandwidth = Annotated[int, BeforeValidator(_bandwidth)]
Size = Annotated[int, BeforeValidator(_size)]
At = Annotated[float, Field(ge=0, le=86_400)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class TransferAction(_Strict):
    """Book a path and start a transfer between two DTN agents."""

    at: At
    action: Literal["transfer"]
    name: Name
    src: Name
    dst: Name
    bandwidth: Bandwidth
    policy: Literal["shortest", "widest"] = "shortest"
    streams: Annotated[int, Field(ge=1, le=256, strict=True)] = 1
    engine: str = "builtin"
    size: Size | None = None  # nominal bytes; the emulation moves size x scale
    until: Literal["release"] | None = None
    pace: Bandwidth | None = None  # nominal; the sender is held to it, below its booking (a slow disk)


class ReserveAction(_Strict):
    """Book a path only (no traffic) until released."""

    at: At
    action: Literal["reserve"]
    name: Name
    src: Name
    dst: Name
    bandwidth: Bandwidth
    policy: Literal["shortest", "widest"] = "shortest"
    protect: bool = False


class FailLinkAction(_Strict):
    """Take a link down (both interfaces), as a cut fibre would."""

    at: At
    action: Literal["fail_link"]
    link: str


class RestoreLinkAction(_Strict):
    """Bring a failed link back up."""

    at: At
    action: Literal["restore_link"]
    link: str


class CongestLinkAction(_Strict):
    """Load a link direction (or both) with traffic the controller does not own: `rate`
    (nominal) or `fraction` of the capacity is what is left for others."""

    at: At
    action: Literal["congest_link"]
    link: str
    from_: Name | None = Field(default=None, alias="from")
    rate: Bandwidth | None = None
    fraction: Annotated[float, Field(gt=0, lt=1)] | None = None


class ClearLinkAction(_Strict):
    """Stop the traffic a congest_link put on a link direction (or both)."""

    at: At
    action: Literal["clear_link"]
    link: str
    from_: Name | None = Field(default=None, alias="from")


class ReleaseAction(_Strict):
    """Cancel a transfer (releasing its path) or release a reservation."""

    at: At
    action: Literal["release"]
    name: Name


Action = Annotated[
    TransferAction | ReserveAction | FailLinkAction | RestoreLinkAction | CongestLinkAction | ClearLinkAction
    | ReleaseAction,
    Field(discriminator="action"),
]
ACTIONS = ("transfer", "reserve", "fail_link", "restore_link", "congest_link", "clear_link", "release")


Seconds = Annotated[float, Field(gt=0, le=3600)]
Count = Annotated[int, Field(ge=0, strict=True)]


class ReactedWithin(_Strict):
    """Seconds from a cause's onset to the move off it, per kind of cause (absent: not checked).
    A plain number is both (`shorthand`)."""

    congestion: Seconds | None = None
    failure: Seconds | None = None
    _shorthand: bool = PrivateAttr(default=False)

    @model_validator(mode="wrap")
    @classmethod
    def _number_is_both(cls, value: Any, handler: Any) -> ReactedWithin:
        if isinstance(value, int | float) and not isinstance(value, bool):
            made = handler({"congestion": value, "failure": value})
            made._shorthand = True
            return made
        if not isinstance(value, dict | ReactedWithin):
            raise PydanticCustomError("reacted_within", "seconds (a number), or {congestion: S, failure: S}")
        return handler(value)

    @model_validator(mode="after")
    def _one_at_least(self) -> ReactedWithin:
        if self.congestion is None and self.failure is None:
            raise ValueError("give congestion, failure or both (seconds)")
        return self

    @property
    def shorthand(self) -> bool:
        """Whether the file gave one number for both kinds of cause."""
        return self._shorthand


class Expectations(_Strict):
    """What the run must show; each one absent (or never_overbooked false) is not checked."""

    aggregate_rate: Annotated[float, Field(gt=0, le=100)] | None = None
    resume_within: Seconds | None = None
    never_overbooked: bool = True
    reroutes_at_least: Count | None = None
    reroutes_at_most: Count | None = None
    unexplained_moves_at_most: Count | None = None
    never_onto_congested: bool = False
    reacted_within: ReactedWithin | None = None
    nsi_segments: bool = False


SCALE_FORMS = "a number in (0, 1] (the largest scale calibration may choose), or {fixed: X} (X, not calibrated)"


def _emulation_scale(value: Any) -> Any:
    """`X` or `{fixed: X}` as an `EmulationScale`, or an error naming the form."""
    if isinstance(value, EmulationScale):
        return value
    calibrated = not isinstance(value, dict)
    if not calibrated:
        if set(value) != {"fixed"}:
            raise PydanticCustomError("emulation_scale", f"{SCALE_FORMS}; got the keys {sorted(value)}")
        value = value["fixed"]
    if isinstance(value, bool) or not isinstance(value, int | float) or not (math.isfinite(value) and 0 < value <= 1):
        raise PydanticCustomError("emulation_scale", f"{SCALE_FORMS}; got {value!r}")
    return {"value": value, "calibrated": calibrated}


class EmulationScale(_Strict):
    """The scale of a scenario: the largest calibration may choose, or a fixed one."""

    value: float
    calibrated: bool


class Scenario(_Strict):
    """The content of one scenario file."""

    name: Name
    description: str = ""
    topology: str
    emulation_scale: Annotated[EmulationScale, BeforeValidator(_emulation_scale)]
    agents: list[Name] = []
    duration: Annotated[float, Field(gt=0, le=86_400)] | None = None
    timeline: Annotated[list[Action], Field(min_length=1)]
    expectations: Expectations = Expectations()

    @property
    def scale_bound(self) -> float:
        """The largest emulation scale the timeline may run at (the fixed one when fixed)."""
        return self.emulation_scale.value

    @property
    def calibrated(self) -> bool:
        """Whether the runner calibrates the scale to the machine (not fixed by the file)."""
        return self.emulation_scale.calibrated

    @property
    def end(self) -> float:
        """When the timeline ends, seconds from its start."""
        if self.duration is not None:
            return self.duration
        return max(action.at for action in self.timeline) + TAIL

    def ordered(self) -> list[tuple[int, Action]]:
        """(index in the file, action) by time, file order among equal times."""
        return sorted(enumerate(self.timeline), key=lambda item: (item[1].at, item[0]))


@dataclass(frozen=True)
class LoadedScenario:
    """A checked scenario, where it came from, and its topology."""

    scenario: Scenario
    source: Path
    topology_path: Path
    topology: Topology

    @property
    def name(self) -> str:
        return self.scenario.name


def resolve_scenario(ref: str) -> Path:
    """The file meant by `ref`: an existing path, or the name of a file in scenarios/."""
    path = Path(ref)
    if path.exists():
        return path
    if "/" not in ref:
        candidate = SCENARIO_DIR / (ref if ref.endswith((".yaml", ".yml")) else f"{ref}.yaml")
        if candidate.exists():
            return candidate
    shipped = ", ".join(builtin_scenarios()) or "none"
    raise InvalidArgument(f"{ref}: no such scenario file, and not a scenario of {SCENARIO_DIR} ({shipped})")


def builtin_scenarios() -> list[str]:
    """The names of the scenarios shipped in scenarios/."""
    return sorted(p.stem for p in SCENARIO_DIR.glob("*.yaml")) if SCENARIO_DIR.is_dir() else []


def _resolve_topology(ref: str, source: Path) -> Path:
    from topologies import BUILTIN_TOPOLOGIES, builtin_topology

    if ref in BUILTIN_TOPOLOGIES and not (source.parent / ref).exists():
        return builtin_topology(ref)
    path = Path(ref)
    return path if path.is_absolute() else source.parent / path


def _field_path(loc: tuple[int | str, ...]) -> tuple[int | str, ...]:
    """Drop the union tag pydantic adds after `timeline[i]` (`timeline[2].transfer.src`)."""
    parts = list(loc)
    if len(parts) >= 3 and parts[0] == "timeline" and isinstance(parts[1], int) and parts[2] in ACTIONS:
        del parts[2]
    return tuple(parts)


def parse_scenario(data: Any, source: str | Path) -> LoadedScenario:
    """Validate parsed YAML; raise `ScenarioError` naming every problem."""
    source = Path(source)
    where = str(source)
    if not isinstance(data, dict):
        raise ScenarioError([f"{where}: (top level): expected a mapping with name, topology, emulation_scale, "
                             "agents, timeline, expectations"])
    try:
        scenario = Scenario.model_validate(data)
    except ValidationError as exc:
        raise ScenarioError(_unique(describe_validation_error(_relocated(exc), where))) from None
    topology_path = _resolve_topology(scenario.topology, source)
    try:
        topology = Topology.load(topology_path)
    except TopologyError as exc:
        raise ScenarioError([f"{where}: topology: {scenario.topology!r} is not a valid topology file"]
                            + [f"  {p}" for p in exc.problems]) from None
    except InvalidArgument as exc:
        raise ScenarioError([f"{where}: topology: {exc}"]) from None
    problems = check_scenario(scenario, topology)
    if problems:
        raise ScenarioError([f"{where}: {p}" for p in problems])
    return LoadedScenario(scenario, source, topology_path, topology)


def _relocated(exc: ValidationError) -> Any:
    """A stand-in exposing `errors()` with the union tags removed from every location."""

    class Errors:
        def errors(self) -> list[dict]:
            out = []
            for error in exc.errors():
                error = dict(error)
                error["loc"] = _field_path(tuple(error["loc"]))
                if error["type"] == "union_tag_invalid":
                    error["msg"] = f"unknown action {error.get('input', {}).get('action')!r}; one of " \
                                   + ", ".join(ACTIONS)
                elif error["type"] == "union_tag_not_found":
                    error["msg"] = "every timeline entry needs an action: " + ", ".join(ACTIONS)
                out.append(error)
            return out

    return Errors()


def _unique(lines: list[str]) -> list[str]:
    return list(dict.fromkeys(lines))


def load_scenario(ref: str | Path) -> LoadedScenario:
    """Read and check the scenario `ref` (a path, or the name of a file in scenarios/)."""
    path = resolve_scenario(str(ref))
    try:
        text = read_text_file(path, MAX_SCENARIO_BYTES, "scenario file")
        data = read_yaml(text, str(path))
    except InvalidArgument as exc:
        raise ScenarioError([str(exc)]) from None
    return parse_scenario(data, path)


def emulated_mbps(bps: int, scale: float) -> float:
    """A nominal rate as Mininet runs it, in Mbit/s."""
    return bps * scale / 1e6


def check_scenario(scenario: Scenario, topology: Topology) -> list[str]:
    """`field.path: problem` for everything the schema alone cannot check."""
    problems: list[str] = []
    scale = scenario.scale_bound
    for direction in sorted(topology.directions.values(), key=lambda d: -d.capacity)[:1] + sorted(
            topology.directions.values(), key=lambda d: d.capacity)[:1]:
        mbps = emulated_mbps(direction.capacity, scale)
        if not MIN_TCLINK_MBPS <= mbps <= MAX_TCLINK_MBPS * (1 + 1e-9):
            largest = max(d.capacity for d in topology.directions.values())
            problems.append(
                f"emulation_scale: {scale:g} runs {direction.link} ({format_bandwidth(direction.capacity)}) at "
                f"{mbps:g} Mbit/s, outside what Mininet's TCLink can shape ({MIN_TCLINK_MBPS:g}..{MAX_TCLINK_MBPS:g} "
                f"Mbit/s); at most {MAX_TCLINK_MBPS * 1e6 / largest:.6g} for {topology.name}")
            break
    agents: set[str] = set()
    for i, dtn in enumerate(scenario.agents):
        if dtn not in topology.dtns:
            problems.append(f"agents[{i}]: {dtn!r} is not a DTN of topology {topology.name}")
        elif dtn in agents:
            problems.append(f"agents[{i}]: {dtn} is listed twice")
        agents.add(dtn)
    end = scenario.end
    flows: dict[str, tuple[int, Any]] = {}  # name -> (index, action) of transfers and reservations
    released: dict[str, int] = {}
    live_pairs: dict[tuple[str, str], str] = {}
    live_remote: dict[str, str] = {}  # remote DTN -> the live flow to or from it
    failed: set[str] = set()
    congested: set[tuple[str, str | None]] = set()
    link_ends = {link.label: (link.a, link.b) for link in topology.spec.links}
    fails = 0
    congests = 0
    transfers = 0
    for i, action in scenario.ordered():
        where = f"timeline[{i}]"
        if action.at > end:
            problems.append(f"{where}.at: {action.at:g} s is after the end of the run (duration {end:g} s)")
        if isinstance(action, TransferAction | ReserveAction):
            if action.name in flows:
                problems.append(f"{where}.name: {action.name!r} is already used by timeline[{flows[action.name][0]}]")
            else:
                flows[action.name] = (i, action)
            for end_name in ("src", "dst"):
                dtn = getattr(action, end_name)
                if dtn not in topology.dtns:
                    problems.append(f"{where}.{end_name}: {dtn!r} is not a DTN of topology {topology.name}")
                elif isinstance(action, TransferAction) and dtn not in agents:
                    problems.append(f"{where}.{end_name}: {dtn} runs no agent; add it to agents")
            if action.src == action.dst:
                problems.append(f"{where}.dst: a transfer or reservation joins two different DTNs")
            pair = (action.src, action.dst)
            if pair in live_pairs:
                problems.append(f"{where}: {action.src}->{action.dst} still has {live_pairs[pair]}; with switches "
                                "the controller holds one reservation per ordered DTN pair (release it first)")
            else:
                live_pairs[pair] = action.name
            for dtn in (action.src, action.dst):
                if dtn in topology.dtns and topology.is_remote(dtn):
                    if dtn in live_remote:
                        problems.append(f"{where}: remote DTN {dtn} still has {live_remote[dtn]}; the demo delivers "
                                        "one NSI circuit (one VLAN) at a time to a remote DTN (release it first)")
                    else:
                        live_remote[dtn] = action.name
        if isinstance(action, TransferAction):
            transfers += 1
            if action.engine not in ENGINES:
                problems.append(f"{where}.engine: {action.engine!r} is unknown; one of {', '.join(ENGINES)}")
            if action.pace is not None and action.pace >= action.bandwidth:
                problems.append(f"{where}.pace: {format_bandwidth(action.pace)} is not below the bandwidth "
                                f"({format_bandwidth(action.bandwidth)}); a paced sender sends less than it booked")
            if (action.size is None) == (action.until is None):
                problems.append(f"{where}: give exactly one of size (nominal bytes) and until: release")
            elif action.until == "release" and not any(
                    isinstance(a, ReleaseAction) and a.name == action.name and (a.at, j) > (action.at, i)
                    for j, a in enumerate(scenario.timeline)):
                problems.append(f"{where}.until: no later release of {action.name!r} in the timeline")
        elif isinstance(action, ReleaseAction):
            if action.name not in flows:
                problems.append(f"{where}.name: no transfer or reservation {action.name!r} starts before it")
            elif action.name in released:
                problems.append(f"{where}.name: {action.name!r} is already released by "
                                f"timeline[{released[action.name]}]")
            else:
                released[action.name] = i
                flow = flows[action.name][1]
                live_pairs.pop((flow.src, flow.dst), None)
                for dtn in (flow.src, flow.dst):
                    if live_remote.get(dtn) == action.name:
                        del live_remote[dtn]
        elif isinstance(action, FailLinkAction | RestoreLinkAction | CongestLinkAction | ClearLinkAction):
            if action.link not in link_ends:
                problems.append(f"{where}.link: {action.link!r} is not a link of topology {topology.name} "
                                f"(links: {', '.join(list(link_ends)[:12])}{', ...' if len(link_ends) > 12 else ''})")
                continue
            side = getattr(action, "from_", None)
            if side is not None and side not in link_ends[action.link]:
                problems.append(f"{where}.from: {side!r} is not an end of link {action.link} "
                                f"({' or '.join(link_ends[action.link])})")
                continue
            if isinstance(action, FailLinkAction):
                fails += 1
                if action.link in failed:
                    problems.append(f"{where}.link: {action.link} is already down")
                failed.add(action.link)
            elif isinstance(action, RestoreLinkAction):
                if action.link not in failed:
                    problems.append(f"{where}.link: {action.link} is not down (no fail_link before it)")
                failed.discard(action.link)
            elif isinstance(action, CongestLinkAction):
                if (action.rate is None) == (action.fraction is None):
                    problems.append(f"{where}: give exactly one of rate (nominal, e.g. 20G) and fraction (0..1) "
                                    "of the capacity left")
                elif action.rate is not None:
                    for direction in _directions(topology, action.link, side):
                        if action.rate >= direction.capacity:
                            problems.append(f"{where}.rate: {format_bandwidth(action.rate)} is not below the "
                                            f"capacity of {direction.id} ({format_bandwidth(direction.capacity)})")
                congests += 1
                congested.add((action.link, side))
            elif isinstance(action, ClearLinkAction):
                if (action.link, side) not in congested:
                    problems.append(f"{where}.link: {action.link}{f' from {side}' if side else ''} is not congested "
                                    "(no congest_link with the same link and from before it)")
                congested.discard((action.link, side))
    expect = scenario.expectations
    if expect.resume_within is not None and not fails:
        problems.append("expectations.resume_within: the timeline fails no link")
    reacted = expect.reacted_within
    if reacted is not None:
        shorthand = reacted.shorthand
        if not fails and not congests:
            problems.append("expectations.reacted_within: the timeline fails and congests no link")
        elif reacted.failure is not None and not fails and not shorthand:
            problems.append("expectations.reacted_within.failure: the timeline fails no link")
        elif reacted.congestion is not None and not congests and not shorthand:
            problems.append("expectations.reacted_within.congestion: the timeline congests no link")
    if expect.nsi_segments:
        if not topology.interdomain:
            problems.append(f"expectations.nsi_segments: topology {topology.name} has no interdomain port")
        elif not any(topology.is_remote(flow.src) or topology.is_remote(flow.dst) for _, flow in flows.values()
                     if flow.src in topology.dtns and flow.dst in topology.dtns):
            problems.append("expectations.nsi_segments: the timeline starts no transfer or reservation to a remote "
                            "DTN (one beyond an interdomain port)")
    if expect.aggregate_rate is not None and not transfers:
        problems.append("expectations.aggregate_rate: the timeline starts no transfer")
    return problems


def _directions(topology: Topology, link: str, side: str | None):
    forward, backward = topology.link_directions[link]
    return [d for d in (forward, backward) if side is None or d.src == side]


def transfer_bytes(action: TransferAction, scale: float, remaining: float) -> int:
    """Bytes the emulated transfer moves: size x scale, or (until release) enough for the
    time left at the booked rate, with room to spare."""
    if action.size is not None:
        return max(1, math.ceil(action.size * scale))
    return max(1, math.ceil(action.bandwidth * scale / 8 * (remaining + 300)))
