"""tsdn, the application: the command line, the demo runner and the process assembly that wires the
core, its store, the adapters and the switches into one running controller. Nothing below imports it."""
