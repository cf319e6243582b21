"""SC-style demo scenarios replayed in Mininet: `tsdn demo`.

- `scenario`: the scenario file format (YAML), validated as a whole; errors name file and field.
- `record`: what a run records (events, rate samples, booking samples), pure data.
- `expectations`: a scenario's expectations checked against a recording, pure.
- `calibration`: the heaviest moment of a timeline, the ladder of scales and the verdict on what
  the emulation carried of it, pure.
- `held_back`: who held each transfer back, from the controller's typed decisions, pure.
- `console`: the live view (a table redrawn every second, or plain lines when not a TTY).
- `report`: the report folder (report.html, events.jsonl, samples.jsonl, PNG plots).
- `emulation`: one controller process, the Mininet network and the agents at one scale.
- `player`: plays timeline actions on an emulation and records what the watch streams say.
- `cross_traffic`: traffic the controller does not own, between cross-traffic hosts.
- `runner`: neighbours, calibration down the ladder, the timeline, teardown, the report.

Everything but `emulation`, `player`, `cross_traffic` and `runner` works without Mininet, root or
a controller.
"""
