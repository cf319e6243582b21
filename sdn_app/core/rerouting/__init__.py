"""Rate-driven rerouting: moving reservations off congestion, measured, within stability rules.

- `policy`: `ReroutePolicy`, every threshold an operator sets, and the fixed constants.
- `congestion`: `LinkWatch`, which link directions are congested, measured, with hysteresis.
- `advisor`: `RateAdvisor`, each transfer's rate against its booking, and the stability
  history of its moves (hold-down, move budget, links left for congestion).
- `attribution`: whether the network or the hosts hold a transfer back, from measurements.
- `relief`: measured headroom for a new path, and rearrangements of others in SWAN order.
- `rerouter`: `Rerouter`, which the reservation book hands rate reports and loads, and which
  hands back moves and verdicts through the book's `Fleet`.
"""
