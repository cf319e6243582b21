"""`tsdn demo [SCENARIO]`: replay an SC-style scenario in Mininet and write its report."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from tsdn.demo.scenario import DEFAULT_SCENARIO, SCENARIO_DIR
from tsdn.output import EXIT_BAD_INPUT

EPILOG = f"""\
Before the timeline the scale is calibrated: the scenario's heaviest moment is played for a few
seconds and the largest scale of the ladder (emulation_scale x 1, 3/4, 1/2, ... 1/16) that this
machine's emulation carries is chosen, saying what it measured.

Exit codes: 0 every expectation held; 1 one failed (the output says which, measured against
expected); 2 the scenario file is bad (nothing is started); 3 the demo could not be set up
(not root, Open vSwitch not running or not ready: run scripts/bootstrap.sh; or this machine is
too slow for the scenario even at the smallest scale, with what it carried); 130 interrupted
(Ctrl-C still tears everything down and writes the report of what ran).

Scenarios shipped in {SCENARIO_DIR}: sc16-terabit (default), sc16-nsi, ring-reroute,
host-limited, smoke.
The format: docs/scenarios.md.
"""


def register(commands: argparse._SubParsersAction) -> None:
    """Add `demo`."""
    parser = commands.add_parser(
        "demo", help="replay an SC-style scenario in Mininet (root): controller, switches, agents, report",
        description="Set up the controller, the scenario's topology in Mininet and DTN agents, run the scenario's "
                    "timeline with a live view, check its expectations and write a report folder.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("scenario", nargs="?", default=DEFAULT_SCENARIO,
                        help=f"a scenario name of scenarios/ or a YAML path (default {DEFAULT_SCENARIO})")
    parser.add_argument("--out", metavar="DIR",
                        help="report folder (default reports/<scenario>-<timestamp>/)")
    http = parser.add_mutually_exclusive_group()
    http.add_argument("--http", default="127.0.0.1:8080", metavar="HOST:PORT",
                      help="serve the controller's live map here when the port is free (default 127.0.0.1:8080)")
    http.add_argument("--no-http", action="store_true", help="no live map")
    parser.add_argument("--check", action="store_true", help="only validate the scenario and exit (0 or 2)")
    parser.add_argument("--plain", action="store_true", help="plain lines even on a terminal (no redrawn table)")
    parser.set_defaults(run=run_demo)


def run_demo(args: argparse.Namespace) -> int:
    from sdn_app.core.errors import InvalidArgument
    from tsdn.demo.console import Console
    from tsdn.demo.scenario import ScenarioError, load_scenario

    try:
        loaded = load_scenario(args.scenario)
    except ScenarioError as error:
        print(f"tsdn: error: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except InvalidArgument as error:
        print(f"tsdn: error: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    scenario = loaded.scenario
    if args.check:
        print(f"{loaded.source}: scenario {scenario.name} is valid: topology {loaded.topology.name}, "
              f"{len(scenario.timeline)} action(s) over {scenario.end:g} s, {len(scenario.agents)} agent(s)")
        return 0
    out = Path(args.out) if args.out else Path("reports") / f"{scenario.name}-{time.strftime('%Y%m%d-%H%M%S')}"
    console = Console(tty=False if args.plain else None)
    console.say(f"tsdn demo {scenario.name}: {scenario.description}")
    console.say(f"report folder: {out}")
    from tsdn.demo.runner import DemoRunner

    runner = DemoRunner(loaded, out, console, http=None if args.no_http else args.http)
    return runner.run()
