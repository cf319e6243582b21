"""SC-style demo scenarios replayed in Mininet: `tsdn demo`.

- `scenario`: the scenario file format (YAML), validated as a whole; errors name file and field.
- `record`: what a run records (events, rate samples, booking samples), pure data.
- `expectations`: a scenario's expectations checked against a recording, pure.
- `console`: the live view (a table redrawn every second, or plain lines when not a TTY).
- `report`: the report folder (report.html, events.jsonl, samples.jsonl, PNG plots).
- `runner`: sets up the controller, Mininet and the agents, runs the timeline, tears down.

Everything but `runner` works without Mininet, root or a controller.
"""
