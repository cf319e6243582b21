"""Properties of rate-driven rerouting over random loads and rates on ring8: a move always has a
measured cause on its old path, never lands on a congested link, and never overbooks."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sdn_app.core.reservation import State
from tests.switched import RUCIO, G, active, confirm, measured_loads, switched_ring8
from tests.test_advisor import AGENT

PAIRS = [("dtn1", "dtn3"), ("dtn2", "dtn5"), ("dtn6", "dtn8"), ("dtn4", "dtn7")]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.data())
def test_moves_have_a_measured_cause_and_land_on_measured_headroom(tmp_path_factory, data):
    env = switched_ring8(tmp_path_factory.mktemp("p"))
    bookings = data.draw(st.lists(st.sampled_from([10, 20, 30, 40]), min_size=len(PAIRS), max_size=len(PAIRS)))
    reservations = [active(env, src, dst, bandwidth=b * G) for (src, dst), b in zip(PAIRS, bookings, strict=True)]
    directions = [d.id for d in env.topology.directions.values() if not d.is_access]
    for _ in range(data.draw(st.integers(4, 25), label="seconds")):
        env.clock.advance(1)
        unowned = data.draw(st.dictionaries(st.sampled_from(directions), st.integers(0, 100), max_size=4),
                            label="unowned G")
        rates = {r.id: data.draw(st.integers(0, 100), label="rate %") / 100 for r in reservations}
        measured: dict[str, float] = {d: u * G for d, u in unowned.items()}
        for r in reservations:
            now = env.book.get(RUCIO, r.name)
            for d in now.route.primary.direction_ids:
                measured[d] = measured.get(d, 0.0) + rates[r.id] * now.request.bandwidth
        env.book.observe_loads(measured_loads(env.topology, measured))
        before = {r.id: env.book.get(RUCIO, r.name).route for r in reservations}
        for r in reservations:
            env.book.report_rate(AGENT, r.name, rates[r.id] * bookings[reservations.index(r)] * G)
        for r in reservations:
            after = env.book.get(RUCIO, r.name)
            if after.route.primary.direction_ids == before[r.id].primary.direction_ids:
                continue
            old = before[r.id].primary
            old_links = set(old.links)
            congested = env.book.rerouter.watch.congested_links()
            if after.reason.startswith("rearrangement for "):
                relieved = after.reason.split()[2].rstrip(":")
                relieved_path = env.book.get(RUCIO, relieved).route.primary  # moved, or about to
                assert relieved_path is not None
            else:
                assert after.reason.startswith("congested: ") and old_links & congested, after.reason
            assert not set(after.route.primary.links) & congested, after.reason
        confirm(env)
        for d in env.topology.directions.values():
            assert env.book.booked_now(d.id) <= d.capacity
        assert all(env.book.get(RUCIO, r.name).state in (State.ACTIVE, State.MOVING) for r in reservations)
